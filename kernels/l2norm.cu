/* CUDA L2 normalisation (float accumulation). Groups of a multiple of 8 elements, up to 512, with
 * 16-byte aligned tensors take the row-group kernels of kernels/norm_rows.cuh (each input read once, the
 * row kept in registers); others one warp a row, one element a lane. */
#include "kernels/l2norm.h"
#include "kernels/norm_rows.cuh"

#define L2_MAX_NC 2
#define L2_ROWS_PER_BLOCK 8 /* one-warp-a-row kernels */

/* ---- row groups (norm_rows.cuh) ---------------------------------------------------------------- */
/* The forward is norm_rows_fwd_kernel<T, T, LG, NC, false> (norm_rows.cuh, shared with RMSNorm). */

template <typename T, int LG, int NC>
__global__ void __launch_bounds__(NORM_THREADS) l2_bwd_vec_kernel(T *dx, const T *dy, const T *x, const float *rstd,
                                                                  long long rows, int G, int accumulate) {
    const int li = threadIdx.x & (LG - 1), nch = G >> 3;
    const long long row = blockIdx.x * (long long)(NORM_THREADS / LG) + threadIdx.x / LG;
    const bool ok = row < rows;
    const long long off = ok ? row * G : 0;
    Raw8<T> rg[NC], rx[NC], rd[NC];
#pragma unroll
    for (int k = 0; k < NC; k++) {
        const int ch = li + k * LG;
        const bool in = ok && ch < nch;
        raw8_load_if(rg[k], dy, off + 8 * ch, in);
        raw8_load_if(rx[k], x, off + 8 * ch, in);
        raw8_load_if(rd[k], dx, off + 8 * ch, in && accumulate);
    }
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < NC; k++) {
        float g[8], xv[8];
        raw8_floats(rg[k], g), raw8_floats(rx[k], xv);
#pragma unroll
        for (int j = 0; j < 8; j++) dot += g[j] * xv[j];
    }
    dot = norm_group_sum<LG>(dot);
    if (!ok) return;
    const float r = rstd[row], rrd = r * r * dot; /* dx = r dy - x r^2 sum(dy x) r */
#pragma unroll
    for (int k = 0; k < NC; k++) {
        const int ch = li + k * LG;
        if (ch >= nch) continue;
        float g[8], xv[8], d[8];
        raw8_floats(rg[k], g), raw8_floats(rx[k], xv), raw8_floats(rd[k], d);
#pragma unroll
        for (int j = 0; j < 8; j++) d[j] += r * (g[j] - xv[j] * rrd);
        store8(dx + off + 8 * ch, d);
    }
}

/* ---- one warp a row, one element a lane: any group and alignment ------------------------------ */
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
    float r = 1.f / sqrtf(norm_group_sum<32>(ss) + eps);
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
    dot = norm_group_sum<32>(dot) * r;
    for (int c = threadIdx.x; c < G; c += 32) {
        float v = r * (to_f32(gr[c]) - to_f32(xr[c]) * r * dot);
        T *d = dx + row * G + c;
        *d = from_f32<T>(accumulate ? to_f32(*d) + v : v);
    }
}

static unsigned l2_grid(long long rows, int shape) {
    const long long per = shape >= 0 ? norm_rows_per_step(shape) : L2_ROWS_PER_BLOCK;
    return (unsigned)((rows + per - 1) / per);
}

extern "C" void l2norm_forward_cuda(DType dt, void *y, float *rstd, const void *x, int64_t rows, int64_t group,
                                    double eps, void *stream) {
    if (rows == 0 || group == 0) return;
    cudaStream_t s = (cudaStream_t)stream;
    const int shape = norm_shape(group, L2_MAX_NC, y, x);
    const unsigned grid = l2_grid(rows, shape);
    if (shape >= 0)
        DISPATCH_F32_BF16(dt, "l2norm",
                          NORM_SHAPES_512(shape, norm_rows_fwd_kernel<T, T, LG, NC, false>
                                                 <<<grid, NORM_THREADS, 0, s>>>((T *)y, rstd, (const T *)x, nullptr,
                                                                                rows, (int)group, (float)eps)));
    else
        DISPATCH_F32_BF16(dt, "l2norm", l2_fwd_kernel<T><<<grid, dim3(32, L2_ROWS_PER_BLOCK), 0, s>>>(
                                            (T *)y, rstd, (const T *)x, rows, (int)group, (float)eps));
    KERNEL_CHECK();
}

extern "C" void l2norm_backward_cuda(DType dt, void *dx, const void *dy, const void *x, const float *rstd, int64_t rows,
                                     int64_t group, int accumulate, void *stream) {
    if (rows == 0 || group == 0) return;
    cudaStream_t s = (cudaStream_t)stream;
    const int shape = norm_shape(group, L2_MAX_NC, dx, dy, x);
    const unsigned grid = l2_grid(rows, shape);
    if (shape >= 0)
        DISPATCH_F32_BF16(dt, "l2norm",
                          NORM_SHAPES_512(shape, l2_bwd_vec_kernel<T, LG, NC><<<grid, NORM_THREADS, 0, s>>>(
                                                     (T *)dx, (const T *)dy, (const T *)x, rstd, rows, (int)group,
                                                     accumulate)));
    else
        DISPATCH_F32_BF16(dt, "l2norm", l2_bwd_kernel<T><<<grid, dim3(32, L2_ROWS_PER_BLOCK), 0, s>>>(
                                            (T *)dx, (const T *)dy, (const T *)x, rstd, rows, (int)group, accumulate));
    KERNEL_CHECK();
}
