/* CUDA pointwise activations (f32 and bf16 storage, float math). */
#include "kernels/common.cuh"
#include "kernels/pointwise.h"

__device__ __forceinline__ float pw_f(PointwiseFn fn, float x) {
    switch (fn) {
    case PW_SILU: return x * sigmoid_f32(x);
    case PW_SIGMOID: return sigmoid_f32(x);
    case PW_SOFTPLUS: return fmaxf(x, 0.f) + log1pf(expf(-fabsf(x)));
    case PW_EXP: return expf(x);
    }
    return 0.f;
}

__device__ __forceinline__ float pw_df(PointwiseFn fn, float x) {
    float s;
    switch (fn) {
    case PW_SILU: s = sigmoid_f32(x); return s * (1.f + x * (1.f - s));
    case PW_SIGMOID: s = sigmoid_f32(x); return s * (1.f - s);
    case PW_SOFTPLUS: return sigmoid_f32(x);
    case PW_EXP: return expf(x);
    }
    return 0.f;
}

template <typename T>
__global__ void pw_fwd_kernel(PointwiseFn fn, T *y, const T *x, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = from_f32<T>(pw_f(fn, to_f32(x[i])));
}

template <typename T>
__global__ void pw_bwd_kernel(PointwiseFn fn, T *dx, const T *dy, const T *x, long long n, int accumulate) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float g = to_f32(dy[i]) * pw_df(fn, to_f32(x[i]));
        dx[i] = from_f32<T>(accumulate ? to_f32(dx[i]) + g : g);
    }
}

extern "C" void pointwise_forward_cuda(PointwiseFn fn, DType dt, void *y, const void *x, int64_t n, void *stream) {
    if (n == 0) return;
    DISPATCH_F32_BF16(dt, "pointwise", pw_fwd_kernel<T><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
                                           fn, (T *)y, (const T *)x, n));
    KERNEL_CHECK();
}

extern "C" void pointwise_backward_cuda(PointwiseFn fn, DType dt, void *dx, const void *dy, const void *x, int64_t n,
                                        int accumulate, void *stream) {
    if (n == 0) return;
    DISPATCH_F32_BF16(dt, "pointwise", pw_bwd_kernel<T><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
                                           fn, (T *)dx, (const T *)dy, (const T *)x, n, accumulate));
    KERNEL_CHECK();
}
