#include "kernels/column_sum.cuh"
#include "kernels/common.cuh"
#include "kernels/mul.h"

template <typename T>
__global__ void mul_fwd_kernel(T *out, const T *a, const T *b, long long outer, long long inner, int accumulate) {
    long long n = outer * inner;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = to_f32(a[i]) * to_f32(b[outer == 1 ? i : i % inner]);
        out[i] = from_f32<T>(accumulate ? to_f32(out[i]) + v : v);
    }
}

template <typename T>
struct MulGrad {
    const T *dout, *a;
    __device__ float operator()(long long i) const { return to_f32(dout[i]) * to_f32(a[i]); }
};

extern "C" void mul_forward_cuda(DType dt, void *out, const void *a, const void *b, int64_t outer, int64_t inner,
                                 int accumulate, void *stream) {
    long long n = outer * inner;
    if (n == 0) return;
    DISPATCH_F32_BF16(dt, "mul", mul_fwd_kernel<T><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
                                     (T *)out, (const T *)a, (const T *)b, outer, inner, accumulate));
    KERNEL_CHECK();
}

extern "C" void mul_backward_b_cuda(DType dt, void *db, const void *dout, const void *a, int64_t outer, int64_t inner,
                                    int accumulate, void *stream) {
    if (inner == 0) return;
    if (outer == 1) { /* b has a's whole shape: an elementwise product */
        mul_forward_cuda(dt, db, dout, a, 1, inner, accumulate, stream);
        return;
    }
    DISPATCH_F32_BF16(dt, "mul", column_sum<T>((T *)db, MulGrad<T>{(const T *)dout, (const T *)a}, outer, inner,
                                               accumulate, (cudaStream_t)stream));
    KERNEL_CHECK();
}
