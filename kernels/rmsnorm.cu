/* CUDA RMSNorm: one warp per row (float accumulation), a deterministic two-stage dw reduction.
 * x, w and dx have type TX, y and dy type TY (TX f32 and TY bf16: the f32 residual stream into a
 * bf16 branch). */
#include "kernels/common.cuh"
#include "kernels/rmsnorm.h"

#define RMS_ROWS_PER_BLOCK 8

static __device__ __forceinline__ float rms_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* by8: C is a multiple of 8 and the rows are 16-byte aligned, so each lane takes 8 columns at a
 * time (vector loads) instead of one. */
template <typename TX, typename TY>
__global__ void rms_fwd_kernel(TY *y, float *rstd, const TX *x, const TX *w, long long rows, int C, float eps,
                               int by8) {
    long long row = blockIdx.x * (long long)RMS_ROWS_PER_BLOCK + threadIdx.y;
    if (row >= rows) return;
    int lane = threadIdx.x;
    const TX *xr = x + row * C;
    TY *yr = y + row * C;
    float ss = 0.f;
    if (by8) {
        for (int c = lane * 8; c < C; c += 256) {
            float v[8];
            load8(xr + c, v);
#pragma unroll
            for (int j = 0; j < 8; j++) ss += v[j] * v[j];
        }
    } else {
        for (int c = lane; c < C; c += 32) {
            float v = to_f32(xr[c]);
            ss += v * v;
        }
    }
    ss = rms_warp_sum(ss);
    float r = 1.f / sqrtf(ss / (float)C + eps);
    if (lane == 0) rstd[row] = r;
    if (by8) {
        for (int c = lane * 8; c < C; c += 256) {
            float v[8], wv[8] = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
            load8(xr + c, v);
            if (w) load8(w + c, wv);
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = v[j] * r * wv[j];
            store8(yr + c, v);
        }
    } else {
        for (int c = lane; c < C; c += 32) yr[c] = from_f32<TY>(to_f32(xr[c]) * r * (w ? to_f32(w[c]) : 1.f));
    }
}

template <typename TX, typename TY>
__global__ void rms_bwd_dx_kernel(TX *dx, const TY *dy, const TX *x, const TX *w, const float *rstd, long long rows,
                                  int C, int accumulate, int by8) {
    long long row = blockIdx.x * (long long)RMS_ROWS_PER_BLOCK + threadIdx.y;
    if (row >= rows) return;
    int lane = threadIdx.x;
    const TX *xr = x + row * C;
    const TY *gr = dy + row * C;
    TX *dr = dx + row * C;
    float r = rstd[row], dot = 0.f;
    if (by8) {
        for (int c = lane * 8; c < C; c += 256) {
            float g[8], xv[8], wv[8] = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
            load8(gr + c, g), load8(xr + c, xv);
            if (w) load8(w + c, wv);
#pragma unroll
            for (int j = 0; j < 8; j++) dot += g[j] * wv[j] * xv[j];
        }
    } else {
        for (int c = lane; c < C; c += 32) dot += to_f32(gr[c]) * (w ? to_f32(w[c]) : 1.f) * to_f32(xr[c]);
    }
    dot = rms_warp_sum(dot) * r / (float)C;
    if (by8) {
        for (int c = lane * 8; c < C; c += 256) {
            float g[8], xv[8], wv[8] = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f}, d[8];
            load8(gr + c, g), load8(xr + c, xv);
            if (w) load8(w + c, wv);
            if (accumulate) load8(dr + c, d);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float v = r * (g[j] * wv[j] - xv[j] * r * dot);
                d[j] = accumulate ? d[j] + v : v;
            }
            store8(dr + c, d);
        }
    } else {
        for (int c = lane; c < C; c += 32) {
            float g = to_f32(gr[c]) * (w ? to_f32(w[c]) : 1.f);
            float v = r * (g - to_f32(xr[c]) * r * dot);
            dr[c] = from_f32<TX>(accumulate ? to_f32(dr[c]) + v : v);
        }
    }
}

/* Stage 1: block (32, 8) owns 32 columns of one chunk of rows; fixed-order shared reduction. */
template <typename TX, typename TY>
__global__ void rms_dw_partial_kernel(float *partial, const TY *dy, const TX *x, const float *rstd, long long rows,
                                      int C, long long rows_per_chunk) {
    __shared__ float part[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    long long r0 = blockIdx.y * rows_per_chunk, r1 = r0 + rows_per_chunk;
    if (r1 > rows) r1 = rows;
    float s = 0.f;
    if (c < C)
        for (long long r = r0 + threadIdx.y; r < r1; r += 8) s += to_f32(dy[r * C + c]) * to_f32(x[r * C + c]) * rstd[r];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.f;
        for (int k = 0; k < 8; k++) t += part[k][threadIdx.x];
        partial[(long long)blockIdx.y * C + c] = t;
    }
}

/* Stage 2: dw[c] = sum of the chunk partials in chunk order. */
template <typename T>
__global__ void rms_dw_final_kernel(T *dw, const float *partial, int chunks, int C, int accumulate) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float t = 0.f;
    for (int k = 0; k < chunks; k++) t += partial[(long long)k * C + c];
    dw[c] = from_f32<T>(accumulate ? to_f32(dw[c]) + t : t);
}

static unsigned rms_row_blocks(long long rows) { return (unsigned)((rows + RMS_ROWS_PER_BLOCK - 1) / RMS_ROWS_PER_BLOCK); }

extern "C" void rmsnorm_forward_cuda(DType x_dt, DType y_dt, void *y, float *rstd, const void *x, const void *w,
                                     int64_t rows, int64_t C, double eps, void *stream) {
    if (rows == 0 || C == 0) return;
    dim3 block(32, RMS_ROWS_PER_BLOCK);
    DISPATCH_IN_OUT(x_dt, y_dt, "rmsnorm",
                    rms_fwd_kernel<TX, TY><<<rms_row_blocks(rows), block, 0, (cudaStream_t)stream>>>(
                        (TY *)y, rstd, (const TX *)x, (const TX *)w, rows, (int)C, (float)eps, rows_by8(C, y, x, w)));
    KERNEL_CHECK();
}

extern "C" void rmsnorm_backward_dx_cuda(DType x_dt, DType y_dt, void *dx, const void *dy, const void *x, const void *w,
                                         const float *rstd, int64_t rows, int64_t C, int accumulate, void *stream) {
    if (rows == 0 || C == 0) return;
    dim3 block(32, RMS_ROWS_PER_BLOCK);
    DISPATCH_IN_OUT(x_dt, y_dt, "rmsnorm",
                    rms_bwd_dx_kernel<TX, TY><<<rms_row_blocks(rows), block, 0, (cudaStream_t)stream>>>(
                        (TX *)dx, (const TY *)dy, (const TX *)x, (const TX *)w, rstd, rows, (int)C, accumulate,
                        rows_by8(C, dx, dy, x, w)));
    KERNEL_CHECK();
}

extern "C" void rmsnorm_backward_dw_cuda(DType x_dt, DType y_dt, void *dw, float *partial, const void *dy,
                                         const void *x, const float *rstd, int64_t rows, int64_t C, int accumulate,
                                         void *stream) {
    if (C == 0) return;
    cudaStream_t s = (cudaStream_t)stream;
    int64_t chunks = rmsnorm_dw_chunks(rows);
    long long per = (rows + chunks - 1) / chunks;
    dim3 block(32, 8), grid((unsigned)((C + 31) / 32), (unsigned)chunks);
    DISPATCH_IN_OUT(x_dt, y_dt, "rmsnorm",
                    rms_dw_partial_kernel<TX, TY><<<grid, block, 0, s>>>(partial, (const TY *)dy, (const TX *)x, rstd,
                                                                         rows, (int)C, per > 0 ? per : 1));
    KERNEL_CHECK();
    DISPATCH_F32_BF16(x_dt, "rmsnorm", rms_dw_final_kernel<T><<<(unsigned)((C + 255) / 256), 256, 0, s>>>(
                                           (T *)dw, partial, (int)chunks, (int)C, accumulate));
    KERNEL_CHECK();
}
