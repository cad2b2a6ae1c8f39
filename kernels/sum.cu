#include "kernels/block_reduce.cuh"
#include "kernels/common.cuh"
#include "kernels/sum.h"

#define SUM_THREADS 256
#define SUM_MAX_BLOCKS 1024

/* The grid depends only on n: each block owns a fixed grid-stride set of elements. */
static int sum_blocks(long long n) {
    long long b = (n + SUM_THREADS * 8 - 1) / (SUM_THREADS * 8);
    return (int)(b < 1 ? 1 : (b > SUM_MAX_BLOCKS ? SUM_MAX_BLOCKS : b));
}

template <typename T>
__global__ void sum_partial_kernel(float *part, const T *x, long long n) {
    __shared__ float red[32];
    float s = 0.f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        s += to_f32(x[i]);
    s = br_block_sum(s, red);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

template <typename T>
__global__ void sum_final_kernel(T *out, const float *part, int nparts, float scale) {
    __shared__ float red[32];
    float s = 0.f;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) s += part[i];
    s = br_block_sum(s, red);
    if (threadIdx.x == 0) out[0] = from_f32<T>(scale * s);
}

template <typename T>
__global__ void sum_bwd_kernel(T *dx, const T *dout, long long n, float scale, int accumulate) {
    float g = scale * to_f32(dout[0]);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dx[i] = from_f32<T>(accumulate ? to_f32(dx[i]) + g : g);
}

extern "C" size_t sum_cuda_scratch_bytes(int64_t n) { return (size_t)sum_blocks(n) * sizeof(float); }

extern "C" void sum_forward_cuda(DType dt, void *out, const void *x, int64_t n, double scale, void *scratch,
                                 void *stream) {
    cudaStream_t s = (cudaStream_t)stream;
    int nb = sum_blocks(n);
    float *part = (float *)scratch;
    DISPATCH_F32_BF16(dt, "sum", {
        sum_partial_kernel<T><<<nb, SUM_THREADS, 0, s>>>(part, (const T *)x, n);
        KERNEL_CHECK();
        sum_final_kernel<T><<<1, SUM_THREADS, 0, s>>>((T *)out, part, nb, (float)scale);
        KERNEL_CHECK();
    });
}

extern "C" void sum_backward_cuda(DType dt, void *dx, const void *dout, int64_t n, double scale, int accumulate,
                                  void *stream) {
    if (n == 0) return;
    DISPATCH_F32_BF16(dt, "sum", sum_bwd_kernel<T><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
                                     (T *)dx, (const T *)dout, n, (float)scale, accumulate));
    KERNEL_CHECK();
}
