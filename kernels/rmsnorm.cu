/* CUDA RMSNorm (float accumulation), a deterministic two-stage dw reduction. x, w and dx have type
 * TX, y and dy type TY (TX f32 and TY bf16: the f32 residual stream into a bf16 branch). Rows of a
 * multiple of 8 elements, up to 1024, with 16-byte aligned tensors take the row-group kernels of
 * kernels/norm_rows.cuh: each input read once, the row kept in registers, and one backward kernel for
 * dx and the dw partials. Other rows: one warp a row (8 columns a lane where the rows allow, else
 * one), two passes over the row, and dw from a separate partial kernel. */
#include "kernels/norm_rows.cuh"
#include "kernels/rmsnorm.h"

#define RMS_MAX_NC 4
#define RMS_ROWS_PER_BLOCK 8 /* one-warp-a-row kernels */

/* ---- row groups (norm_rows.cuh) ---------------------------------------------------------------- */
/* The forward is norm_rows_fwd_kernel<TX, TY, LG, NC, true> (norm_rows.cuh, shared with the L2 norm). */

/* Rows [blockIdx.x * per, + per): dx where asked for, and with partial the block's dw column sums
 * into partial[blockIdx.x][C] (dynamic shared memory of C floats). w (read from L1 each row rather
 * than held: registers are short at 4 chunks a lane) may be NULL. */
template <typename TX, typename TY, int LG, int NC>
__global__ void __launch_bounds__(NORM_THREADS)
    rms_bwd_vec_kernel(TX *dx, float *partial, const TY *dy, const TX *x, const TX *w, const float *rstd,
                       long long rows, int C, long long per, int accumulate) {
    extern __shared__ float rms_part[];
    const int li = threadIdx.x & (LG - 1), nch = C >> 3;
    float dwa[NC][8];
#pragma unroll
    for (int k = 0; k < NC; k++)
#pragma unroll
        for (int j = 0; j < 8; j++) dwa[k][j] = 0.f;
    const long long r0 = blockIdx.x * per, r1 = r0 + per < rows ? r0 + per : rows;
    for (long long base = r0; base < r1; base += NORM_THREADS / LG) {
        const long long row = base + threadIdx.x / LG;
        const bool ok = row < r1;
        const long long off = ok ? row * C : 0;
        Raw8<TY> rg[NC];
        Raw8<TX> rx[NC];
#pragma unroll
        for (int k = 0; k < NC; k++) {
            const int ch = li + k * LG;
            raw8_load_if(rg[k], dy, off + 8 * ch, ok && ch < nch);
            raw8_load_if(rx[k], x, off + 8 * ch, ok && ch < nch);
        }
        const float r = ok ? rstd[row] : 0.f;
        float dot = 0.f;
#pragma unroll
        for (int k = 0; k < NC; k++) {
            const int ch = li + k * LG;
            float g[8], xv[8], wv[8] = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f};
            raw8_floats(rg[k], g), raw8_floats(rx[k], xv);
            if (w && ch < nch) load8(w + 8 * ch, wv);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                dot += g[j] * wv[j] * xv[j];
                dwa[k][j] += g[j] * xv[j] * r;
            }
        }
        dot = norm_group_sum<LG>(dot) * r / (float)C;
        if (dx && ok)
#pragma unroll
            for (int k = 0; k < NC; k++) {
                const int ch = li + k * LG;
                if (ch >= nch) continue;
                float g[8], xv[8], wv[8] = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f}, d[8];
                raw8_floats(rg[k], g), raw8_floats(rx[k], xv);
                if (w) load8(w + 8 * ch, wv);
                if (accumulate) load8(dx + off + 8 * ch, d);
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const float v = r * (g[j] * wv[j] - xv[j] * r * dot);
                    d[j] = accumulate ? d[j] + v : v;
                }
                store8(dx + off + 8 * ch, d);
            }
    }
    if (partial) norm_block_column_sums<LG, NC>(partial, rms_part, dwa, C);
}

/* ---- one warp a row: any C and alignment --------------------------------------------------------- */

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
    ss = norm_group_sum<32>(ss);
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
    dot = norm_group_sum<32>(dot) * r / (float)C;
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

static unsigned rms_row_blocks(long long rows) { return (unsigned)((rows + RMS_ROWS_PER_BLOCK - 1) / RMS_ROWS_PER_BLOCK); }

extern "C" void rmsnorm_forward_cuda(DType x_dt, DType y_dt, void *y, float *rstd, const void *x, const void *w,
                                     int64_t rows, int64_t C, double eps, void *stream) {
    if (rows == 0 || C == 0) return;
    cudaStream_t s = (cudaStream_t)stream;
    const int shape = norm_shape(C, RMS_MAX_NC, y, x, w);
    if (shape >= 0) {
        const long long step = norm_rows_per_step(shape);
        const unsigned grid = (unsigned)((rows + step - 1) / step);
        DISPATCH_IN_OUT(x_dt, y_dt, "rmsnorm",
                        NORM_SHAPES_1024(shape, norm_rows_fwd_kernel<TX, TY, LG, NC, true>
                                                <<<grid, NORM_THREADS, 0, s>>>((TY *)y, rstd, (const TX *)x,
                                                                               (const TX *)w, rows, (int)C, (float)eps)));
    } else {
        DISPATCH_IN_OUT(x_dt, y_dt, "rmsnorm",
                        rms_fwd_kernel<TX, TY><<<rms_row_blocks(rows), dim3(32, RMS_ROWS_PER_BLOCK), 0, s>>>(
                            (TY *)y, rstd, (const TX *)x, (const TX *)w, rows, (int)C, (float)eps,
                            rows_by8(C, y, x, w)));
    }
    KERNEL_CHECK();
}

extern "C" void rmsnorm_backward_cuda(DType x_dt, DType y_dt, void *dx, void *dw, float *partial, const void *dy,
                                      const void *x, const void *w, const float *rstd, int64_t rows, int64_t C,
                                      int acc_x, int acc_w, void *stream) {
    if (C == 0 || (!dx && !dw)) return;
    cudaStream_t s = (cudaStream_t)stream;
    const long long chunks = rmsnorm_dw_chunks(rows), per_chunk = (rows + chunks - 1) / chunks;
    const int shape = norm_shape(C, RMS_MAX_NC, dx, dy, x, w);
    if (shape >= 0) {
        /* With dw, one block per chunk of rows (its column sums are one partial); without it, one
         * step of rows per block. */
        const long long step = norm_rows_per_step(shape), per = dw ? per_chunk : step;
        const unsigned grid = (unsigned)(dw ? chunks : (rows + step - 1) / step);
        const size_t smem = dw ? (size_t)C * sizeof(float) : 0;
        if (grid)
            DISPATCH_IN_OUT(x_dt, y_dt, "rmsnorm",
                            NORM_SHAPES_1024(shape, rms_bwd_vec_kernel<TX, TY, LG, NC><<<grid, NORM_THREADS, smem, s>>>(
                                                        (TX *)dx, dw ? partial : NULL, (const TY *)dy, (const TX *)x,
                                                        (const TX *)w, rstd, rows, (int)C, per, acc_x)));
        KERNEL_CHECK();
    } else {
        if (rows && dx) {
            DISPATCH_IN_OUT(x_dt, y_dt, "rmsnorm",
                            rms_bwd_dx_kernel<TX, TY><<<rms_row_blocks(rows), dim3(32, RMS_ROWS_PER_BLOCK), 0, s>>>(
                                (TX *)dx, (const TY *)dy, (const TX *)x, (const TX *)w, rstd, rows, (int)C, acc_x,
                                rows_by8(C, dx, dy, x, w)));
            KERNEL_CHECK();
        }
        if (dw) {
            dim3 grid((unsigned)((C + 31) / 32), (unsigned)chunks);
            DISPATCH_IN_OUT(x_dt, y_dt, "rmsnorm",
                            rms_dw_partial_kernel<TX, TY><<<grid, dim3(32, 8), 0, s>>>(
                                partial, (const TY *)dy, (const TX *)x, rstd, rows, (int)C,
                                per_chunk > 0 ? per_chunk : 1));
            KERNEL_CHECK();
        }
    }
    if (dw) {
        DISPATCH_F32_BF16(x_dt, "rmsnorm", column_sum_partials((T *)dw, partial, chunks, C, acc_w, s));
        KERNEL_CHECK();
    }
}
