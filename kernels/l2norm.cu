/* CUDA L2 normalisation: one warp per row of `group` elements, float accumulation. */
#include "kernels/common.cuh"
#include "kernels/l2norm.h"

#define L2_ROWS_PER_BLOCK 8

static __device__ __forceinline__ float l2_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T>
__global__ void l2_fwd_kernel(T *y, float *rstd, const T *x, long long rows, int G, float eps) {
    long long row = blockIdx.x * (long long)L2_ROWS_PER_BLOCK + threadIdx.y;
    if (row >= rows) return;
    const T *xr = x + row * G;
    float ss = 0.f;
    for (int c = threadIdx.x; c < G; c += 32) {
        float v = to_f32(xr[c]);
        ss += v * v;
    }
    float r = 1.f / sqrtf(l2_warp_sum(ss) + eps);
    if (threadIdx.x == 0) rstd[row] = r;
    for (int c = threadIdx.x; c < G; c += 32) y[row * G + c] = from_f32<T>(to_f32(xr[c]) * r);
}

template <typename T>
__global__ void l2_bwd_kernel(T *dx, const T *dy, const T *x, const float *rstd, long long rows, int G, int accumulate) {
    long long row = blockIdx.x * (long long)L2_ROWS_PER_BLOCK + threadIdx.y;
    if (row >= rows) return;
    const T *xr = x + row * G, *gr = dy + row * G;
    float r = rstd[row], dot = 0.f;
    for (int c = threadIdx.x; c < G; c += 32) dot += to_f32(gr[c]) * to_f32(xr[c]);
    dot = l2_warp_sum(dot) * r;
    for (int c = threadIdx.x; c < G; c += 32) {
        float v = r * (to_f32(gr[c]) - to_f32(xr[c]) * r * dot);
        T *d = dx + row * G + c;
        *d = from_f32<T>(accumulate ? to_f32(*d) + v : v);
    }
}

extern "C" void l2norm_forward_cuda(DType dt, void *y, float *rstd, const void *x, int64_t rows, int64_t group,
                                    double eps, void *stream) {
    if (rows == 0 || group == 0) return;
    dim3 block(32, L2_ROWS_PER_BLOCK);
    unsigned grid = (unsigned)((rows + L2_ROWS_PER_BLOCK - 1) / L2_ROWS_PER_BLOCK);
    DISPATCH_F32_BF16(dt, "l2norm", l2_fwd_kernel<T><<<grid, block, 0, (cudaStream_t)stream>>>(
                                        (T *)y, rstd, (const T *)x, rows, (int)group, (float)eps));
    KERNEL_CHECK();
}

extern "C" void l2norm_backward_cuda(DType dt, void *dx, const void *dy, const void *x, const float *rstd, int64_t rows,
                                     int64_t group, int accumulate, void *stream) {
    if (rows == 0 || group == 0) return;
    dim3 block(32, L2_ROWS_PER_BLOCK);
    unsigned grid = (unsigned)((rows + L2_ROWS_PER_BLOCK - 1) / L2_ROWS_PER_BLOCK);
    DISPATCH_F32_BF16(dt, "l2norm", l2_bwd_kernel<T><<<grid, block, 0, (cudaStream_t)stream>>>(
                                        (T *)dx, (const T *)dy, (const T *)x, rstd, rows, (int)group, accumulate));
    KERNEL_CHECK();
}
