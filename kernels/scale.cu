#include "kernels/common.cuh"
#include "kernels/scale.h"

template <typename T>
__global__ void scale_kernel(T *out, const T *a, float alpha, long long n, int accumulate) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = alpha * to_f32(a[i]);
        out[i] = from_f32<T>(accumulate ? to_f32(out[i]) + v : v);
    }
}

extern "C" void scale_cuda(DType dt, void *out, const void *a, double alpha, int64_t n, int accumulate, void *stream) {
    if (n == 0) return;
    DISPATCH_F32_BF16(dt, "scale", scale_kernel<T><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
                                       (T *)out, (const T *)a, (float)alpha, n, accumulate));
    KERNEL_CHECK();
}
