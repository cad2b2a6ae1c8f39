/* CUDA gated RMSNorm (float accumulation). Rows of a multiple of 8 elements, up to 512, with 16-byte
 * aligned tensors take the row-group kernels of kernels/norm_rows.cuh: each of o, z and dy is read
 * once, and one backward kernel gives dz, do and the dw column partials (a lane owns fixed columns, so
 * it sums dw over the rows its group takes). Other rows: one warp a row, one column a lane, with dw
 * from a separate partial kernel. Both end in the same fixed-order sum of the partials. */
#include "kernels/gated_rmsnorm.h"
#include "kernels/norm_rows.cuh"

#define GRMS_MAX_NC 2
#define GRMS_ROWS_PER_BLOCK 8 /* one-warp-a-row kernels */

/* ---- row groups (norm_rows.cuh) ---------------------------------------------------------------- */
template <typename T, int LG, int NC>
__global__ void __launch_bounds__(NORM_THREADS)
    grms_fwd_vec_kernel(T *y, float *rstd, const T *o, const T *z, const T *w, long long rows, int D, float eps) {
    const int li = threadIdx.x & (LG - 1), nch = D >> 3;
    const long long row = blockIdx.x * (long long)(NORM_THREADS / LG) + threadIdx.x / LG;
    const bool ok = row < rows;
    const long long off = ok ? row * D : 0;
    Raw8<T> ro[NC], rz[NC];
#pragma unroll
    for (int k = 0; k < NC; k++) {
        const int ch = li + k * LG;
        raw8_load_if(ro[k], o, off + 8 * ch, ok && ch < nch);
        raw8_load_if(rz[k], z, off + 8 * ch, ok && ch < nch);
    }
    const float ss = norm_group_sumsq<LG>(ro);
    if (!ok) return;
    const float r = 1.f / sqrtf(ss / (float)D + eps);
    if (li == 0) rstd[row] = r;
#pragma unroll
    for (int k = 0; k < NC; k++) {
        const int ch = li + k * LG;
        if (ch >= nch) continue;
        float ov[8], zv[8], wv[8];
        raw8_floats(ro[k], ov), raw8_floats(rz[k], zv), load8(w + 8 * ch, wv);
#pragma unroll
        for (int j = 0; j < 8; j++) ov[j] = ov[j] * r * wv[j] * zv[j] * sigmoid_f32(zv[j]);
        store8(y + off + 8 * ch, ov);
    }
}

/* Rows [blockIdx.x * per, + per): dz and do where asked for, and with partial the block's dw column
 * sums into partial[blockIdx.x][D] (dynamic shared memory of D floats). d_o may be dz (o and z one
 * tensor; the glue then passes acc_o = 1): do is then added to the dz just stored, as rounded, which is
 * what the CPU path and the one-warp-a-row kernel give (dz written first, do added into it). */
template <typename T, int LG, int NC>
__global__ void __launch_bounds__(NORM_THREADS)
    grms_bwd_vec_kernel(T *d_o, T *dz, float *partial, const T *dy, const T *o, const T *z, const T *w,
                        const float *rstd, long long rows, int D, long long per, int acc_o, int acc_z) {
    extern __shared__ float grms_part[];
    const int li = threadIdx.x & (LG - 1), nch = D >> 3;
    const bool alias = d_o && d_o == dz;
    float wv[NC][8], dwa[NC][8];
#pragma unroll
    for (int k = 0; k < NC; k++) {
        const int ch = li + k * LG;
#pragma unroll
        for (int j = 0; j < 8; j++) wv[k][j] = 0.f, dwa[k][j] = 0.f;
        if (ch < nch) load8(w + 8 * ch, wv[k]);
    }
    const long long r0 = blockIdx.x * per, r1 = r0 + per < rows ? r0 + per : rows;
    for (long long base = r0; base < r1; base += NORM_THREADS / LG) {
        const long long row = base + threadIdx.x / LG;
        const bool ok = row < r1;
        const long long off = ok ? row * D : 0;
        Raw8<T> rg[NC], ro[NC], rz[NC], rdz[NC], rdo[NC];
#pragma unroll
        for (int k = 0; k < NC; k++) {
            const int ch = li + k * LG;
            const bool in = ok && ch < nch;
            raw8_load_if(rg[k], dy, off + 8 * ch, in);
            raw8_load_if(ro[k], o, off + 8 * ch, in);
            raw8_load_if(rz[k], z, off + 8 * ch, in);
            raw8_load_if(rdz[k], dz, off + 8 * ch, in && dz && acc_z);
            raw8_load_if(rdo[k], d_o, off + 8 * ch, in && d_o && acc_o && !alias);
        }
        const float r = ok ? rstd[row] : 0.f;
        /* Per element: oh = o r, t = dy silu(z), g = t w; the reduction is over g oh, dw sums t oh. */
        float oh[NC][8], g[NC][8], base_o[NC][8], dot = 0.f;
#pragma unroll
        for (int k = 0; k < NC; k++) {
            const int ch = li + k * LG;
            float gy[8], ov[8], zv[8], dzv[8];
            raw8_floats(rg[k], gy), raw8_floats(ro[k], ov), raw8_floats(rz[k], zv);
            raw8_floats(rdz[k], dzv), raw8_floats(rdo[k], base_o[k]);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float s = sigmoid_f32(zv[j]), t = gy[j] * zv[j] * s;
                oh[k][j] = ov[j] * r;
                g[k][j] = t * wv[k][j];
                dot += g[k][j] * oh[k][j];
                dwa[k][j] += t * oh[k][j];
                const float v = gy[j] * oh[k][j] * wv[k][j] * s * (1.f + zv[j] * (1.f - s));
                dzv[j] = acc_z ? dzv[j] + v : v;
            }
            if (dz && ok && ch < nch) {
                store8(dz + off + 8 * ch, dzv);
                if (alias && acc_o)
#pragma unroll
                    for (int j = 0; j < 8; j++) base_o[k][j] = to_f32(from_f32<T>(dzv[j]));
            }
        }
        dot = norm_group_sum<LG>(dot) / (float)D;
        if (d_o && ok)
#pragma unroll
            for (int k = 0; k < NC; k++) {
                const int ch = li + k * LG;
                if (ch >= nch) continue;
                float v[8];
#pragma unroll
                for (int j = 0; j < 8; j++) v[j] = base_o[k][j] + r * (g[k][j] - oh[k][j] * dot);
                store8(d_o + off + 8 * ch, v);
            }
    }
    if (partial) norm_block_column_sums<LG, NC>(partial, grms_part, dwa, D);
}

/* ---- one warp a row, one column a lane: any D and alignment ----------------------------------- */
template <typename T>
__global__ void grms_fwd_kernel(T *y, float *rstd, const T *o, const T *z, const T *w, long long rows, int D,
                                float eps) {
    long long row = blockIdx.x * (long long)GRMS_ROWS_PER_BLOCK + threadIdx.y;
    if (row >= rows) return;
    const T *orow = o + row * D, *zr = z + row * D;
    float ss = 0.f;
    for (int c = threadIdx.x; c < D; c += 32) {
        float v = to_f32(orow[c]);
        ss += v * v;
    }
    float r = 1.f / sqrtf(norm_group_sum<32>(ss) / (float)D + eps);
    if (threadIdx.x == 0) rstd[row] = r;
    for (int c = threadIdx.x; c < D; c += 32) {
        float zc = to_f32(zr[c]);
        y[row * D + c] = from_f32<T>(to_f32(orow[c]) * r * to_f32(w[c]) * zc * sigmoid_f32(zc));
    }
}

/* dz of an element is written before do of the same element is (by the same lane), so do and dz
 * may share memory when o and z are one tensor (the glue then passes acc_o = 1). */
template <typename T>
__global__ void grms_bwd_oz_kernel(T *d_o, T *dz, const T *dy, const T *o, const T *z, const T *w, const float *rstd,
                                   long long rows, int D, int acc_o, int acc_z) {
    long long row = blockIdx.x * (long long)GRMS_ROWS_PER_BLOCK + threadIdx.y;
    if (row >= rows) return;
    const T *orow = o + row * D, *zr = z + row * D, *gr = dy + row * D;
    float r = rstd[row], dot = 0.f;
    for (int c = threadIdx.x; c < D; c += 32) {
        float zc = to_f32(zr[c]), s = sigmoid_f32(zc), wc = to_f32(w[c]), gy = to_f32(gr[c]);
        float oh = to_f32(orow[c]) * r;
        dot += gy * wc * zc * s * oh;
        if (dz) {
            float v = gy * oh * wc * s * (1.f + zc * (1.f - s));
            T *d = dz + row * D + c;
            *d = from_f32<T>(acc_z ? to_f32(*d) + v : v);
        }
    }
    dot = norm_group_sum<32>(dot) / (float)D;
    if (!d_o) return;
    for (int c = threadIdx.x; c < D; c += 32) {
        float zc = to_f32(zr[c]);
        float g = to_f32(gr[c]) * to_f32(w[c]) * zc * sigmoid_f32(zc);
        float v = r * (g - to_f32(orow[c]) * r * dot);
        T *d = d_o + row * D + c;
        *d = from_f32<T>(acc_o ? to_f32(*d) + v : v);
    }
}

/* Block (32, 8): 32 columns of one chunk of rows; fixed-order shared reduction. */
template <typename T>
__global__ void grms_dw_partial_kernel(float *partial, const T *dy, const T *o, const T *z, const float *rstd,
                                       long long rows, int D, long long rows_per_chunk) {
    __shared__ float part[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    long long r0 = blockIdx.y * rows_per_chunk, r1 = r0 + rows_per_chunk;
    if (r1 > rows) r1 = rows;
    float s = 0.f;
    if (c < D)
        for (long long r = r0 + threadIdx.y; r < r1; r += 8) {
            float zc = to_f32(z[r * D + c]);
            s += to_f32(dy[r * D + c]) * to_f32(o[r * D + c]) * rstd[r] * zc * sigmoid_f32(zc);
        }
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < D) {
        float t = 0.f;
        for (int k = 0; k < 8; k++) t += part[k][threadIdx.x];
        partial[(long long)blockIdx.y * D + c] = t;
    }
}

static unsigned grms_row_blocks(long long rows) {
    return (unsigned)((rows + GRMS_ROWS_PER_BLOCK - 1) / GRMS_ROWS_PER_BLOCK);
}

extern "C" void gated_rmsnorm_forward_cuda(DType dt, void *y, float *rstd, const void *o, const void *z, const void *w,
                                           int64_t rows, int64_t D, double eps, void *stream) {
    if (rows == 0 || D == 0) return;
    cudaStream_t s = (cudaStream_t)stream;
    const int shape = norm_shape(D, GRMS_MAX_NC, y, o, z, w);
    if (shape >= 0) {
        const unsigned grid = (unsigned)((rows + norm_rows_per_step(shape) - 1) / norm_rows_per_step(shape));
        DISPATCH_F32_BF16(dt, "gated_rmsnorm",
                          NORM_SHAPES_512(shape, grms_fwd_vec_kernel<T, LG, NC><<<grid, NORM_THREADS, 0, s>>>(
                                                     (T *)y, rstd, (const T *)o, (const T *)z, (const T *)w, rows,
                                                     (int)D, (float)eps)));
    } else {
        DISPATCH_F32_BF16(dt, "gated_rmsnorm",
                          grms_fwd_kernel<T><<<grms_row_blocks(rows), dim3(32, GRMS_ROWS_PER_BLOCK), 0, s>>>(
                              (T *)y, rstd, (const T *)o, (const T *)z, (const T *)w, rows, (int)D, (float)eps));
    }
    KERNEL_CHECK();
}

extern "C" void gated_rmsnorm_backward_cuda(DType dt, void *d_o, void *dz, void *dw, float *partial, const void *dy,
                                            const void *o, const void *z, const void *w, const float *rstd,
                                            int64_t rows, int64_t D, int acc_o, int acc_z, int acc_w, void *stream) {
    if (D == 0 || (!d_o && !dz && !dw)) return;
    cudaStream_t s = (cudaStream_t)stream;
    const long long chunks = gated_rmsnorm_dw_chunks(rows), per_chunk = (rows + chunks - 1) / chunks;
    const int shape = norm_shape(D, GRMS_MAX_NC, d_o, dz, dy, o, z, w);
    if (shape >= 0) {
        /* With dw, one block per chunk of rows (its column sums are one partial); without it, one
         * step of rows per block. */
        const long long step = norm_rows_per_step(shape), per = dw ? per_chunk : step;
        const unsigned grid = (unsigned)(dw ? chunks : (rows + step - 1) / step);
        const size_t smem = dw ? (size_t)D * sizeof(float) : 0;
        if (grid)
            DISPATCH_F32_BF16(dt, "gated_rmsnorm",
                              NORM_SHAPES_512(shape, grms_bwd_vec_kernel<T, LG, NC><<<grid, NORM_THREADS, smem, s>>>(
                                                         (T *)d_o, (T *)dz, dw ? partial : NULL, (const T *)dy,
                                                         (const T *)o, (const T *)z, (const T *)w, rstd, rows, (int)D,
                                                         per, acc_o, acc_z)));
        KERNEL_CHECK();
    } else {
        if (rows && (d_o || dz)) {
            DISPATCH_F32_BF16(dt, "gated_rmsnorm",
                              grms_bwd_oz_kernel<T><<<grms_row_blocks(rows), dim3(32, GRMS_ROWS_PER_BLOCK), 0, s>>>(
                                  (T *)d_o, (T *)dz, (const T *)dy, (const T *)o, (const T *)z, (const T *)w, rstd,
                                  rows, (int)D, acc_o, acc_z));
            KERNEL_CHECK();
        }
        if (dw) {
            dim3 grid((unsigned)((D + 31) / 32), (unsigned)chunks);
            DISPATCH_F32_BF16(dt, "gated_rmsnorm",
                              grms_dw_partial_kernel<T><<<grid, dim3(32, 8), 0, s>>>(
                                  partial, (const T *)dy, (const T *)o, (const T *)z, rstd, rows, (int)D,
                                  per_chunk > 0 ? per_chunk : 1));
            KERNEL_CHECK();
        }
    }
    if (dw) {
        DISPATCH_F32_BF16(dt, "gated_rmsnorm", column_sum_partials((T *)dw, partial, chunks, D, acc_w, s));
        KERNEL_CHECK();
    }
}
