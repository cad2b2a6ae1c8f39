#include "kernels/common.cuh"
#include "kernels/copy.h"

template <typename T>
__global__ void copy_strided_kernel(T *dst, const T *src, StridedLayout l, long long n, int accumulate) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long rem = i, off = 0;
        for (int d = l.ndim - 1; d >= 0; d--) {
            off += (rem % l.shape[d]) * l.stride[d];
            rem /= l.shape[d];
        }
        float v = to_f32(src[off]);
        dst[i] = from_f32<T>(accumulate ? to_f32(dst[i]) + v : v);
    }
}

__global__ void copy_strided_i32_kernel(int *dst, const int *src, StridedLayout l, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long rem = i, off = 0;
        for (int d = l.ndim - 1; d >= 0; d--) {
            off += (rem % l.shape[d]) * l.stride[d];
            rem /= l.shape[d];
        }
        dst[i] = src[off];
    }
}

extern "C" void copy_strided_cuda(DType dt, void *dst, const void *src, StridedLayout l, int64_t n, int accumulate,
                                  void *stream) {
    if (n == 0) return;
    cudaStream_t s = (cudaStream_t)stream;
    if (dt == GDP_I32) {
        copy_strided_i32_kernel<<<grid_for(n, 256), 256, 0, s>>>((int *)dst, (const int *)src, l, n);
        KERNEL_CHECK();
        return;
    }
    DISPATCH_F32_BF16(dt, "copy", copy_strided_kernel<T><<<grid_for(n, 256), 256, 0, s>>>((T *)dst, (const T *)src, l, n, accumulate));
    KERNEL_CHECK();
}
