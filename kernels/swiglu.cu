/* CUDA SwiGLU gate (f32 and bf16 storage, float math). */
#include "kernels/common.cuh"
#include "kernels/swiglu.h"

__device__ __forceinline__ float swiglu_sigmoid(float x) {
    if (x >= 0.f) return 1.f / (1.f + expf(-x));
    float e = expf(x);
    return e / (1.f + e);
}

template <typename T>
__global__ void swiglu_fwd_kernel(T *y, const T *a, const T *b, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float av = to_f32(a[i]);
        y[i] = from_f32<T>(av * swiglu_sigmoid(av) * to_f32(b[i]));
    }
}

template <typename T>
__global__ void swiglu_bwd_kernel(T *da, T *db, const T *dy, const T *a, const T *b, long long n, int acc_a,
                                  int acc_b) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float av = to_f32(a[i]), g = to_f32(dy[i]), s = swiglu_sigmoid(av);
        if (da) {
            float v = g * to_f32(b[i]) * s * (1.f + av * (1.f - s));
            da[i] = from_f32<T>(acc_a ? to_f32(da[i]) + v : v);
        }
        if (db) {
            float v = g * av * s;
            db[i] = from_f32<T>(acc_b ? to_f32(db[i]) + v : v);
        }
    }
}

extern "C" void swiglu_forward_cuda(DType dt, void *y, const void *a, const void *b, int64_t n, void *stream) {
    if (n == 0) return;
    DISPATCH_F32_BF16(dt, "swiglu", swiglu_fwd_kernel<T><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
                                        (T *)y, (const T *)a, (const T *)b, n));
    KERNEL_CHECK();
}

extern "C" void swiglu_backward_cuda(DType dt, void *da, void *db, const void *dy, const void *a, const void *b,
                                     int64_t n, int acc_a, int acc_b, void *stream) {
    if (n == 0 || (!da && !db)) return;
    DISPATCH_F32_BF16(dt, "swiglu", swiglu_bwd_kernel<T><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
                                        (T *)da, (T *)db, (const T *)dy, (const T *)a, (const T *)b, n, acc_a, acc_b));
    KERNEL_CHECK();
}
