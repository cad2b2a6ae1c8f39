/* CUDA gated RMSNorm: one warp per row (float accumulation), a deterministic two-stage dw reduction. */
#include "kernels/common.cuh"
#include "kernels/gated_rmsnorm.h"

#define GRMS_ROWS_PER_BLOCK 8

static __device__ __forceinline__ float grms_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float grms_sigmoid(float x) {
    if (x >= 0.f) return 1.f / (1.f + expf(-x));
    float e = expf(x);
    return e / (1.f + e);
}

/* by8: D is a multiple of 8 and the rows are 16-byte aligned, so each lane takes 8 columns at a
 * time (vector loads) instead of one. */
template <typename T>
__global__ void grms_fwd_kernel(T *y, float *rstd, const T *o, const T *z, const T *w, long long rows, int D,
                                float eps, int by8) {
    long long row = blockIdx.x * (long long)GRMS_ROWS_PER_BLOCK + threadIdx.y;
    if (row >= rows) return;
    const T *orow = o + row * D, *zr = z + row * D;
    T *yr = y + row * D;
    float ss = 0.f;
    if (by8) {
        for (int c = threadIdx.x * 8; c < D; c += 256) {
            float v[8];
            load8(orow + c, v);
#pragma unroll
            for (int j = 0; j < 8; j++) ss += v[j] * v[j];
        }
    } else {
        for (int c = threadIdx.x; c < D; c += 32) {
            float v = to_f32(orow[c]);
            ss += v * v;
        }
    }
    float r = 1.f / sqrtf(grms_warp_sum(ss) / (float)D + eps);
    if (threadIdx.x == 0) rstd[row] = r;
    if (by8) {
        for (int c = threadIdx.x * 8; c < D; c += 256) {
            float ov[8], zv[8], wv[8];
            load8(orow + c, ov), load8(zr + c, zv), load8(w + c, wv);
#pragma unroll
            for (int j = 0; j < 8; j++) ov[j] = ov[j] * r * wv[j] * zv[j] * grms_sigmoid(zv[j]);
            store8(yr + c, ov);
        }
    } else {
        for (int c = threadIdx.x; c < D; c += 32) {
            float zc = to_f32(zr[c]);
            yr[c] = from_f32<T>(to_f32(orow[c]) * r * to_f32(w[c]) * zc * grms_sigmoid(zc));
        }
    }
}

/* dz of an element is written before do of the same element is (by the same lane), so do and dz
 * may share memory when o and z are one tensor (the glue then passes acc_o = 1). */
template <typename T>
__global__ void grms_bwd_oz_kernel(T *d_o, T *dz, const T *dy, const T *o, const T *z, const T *w, const float *rstd,
                                   long long rows, int D, int acc_o, int acc_z, int by8) {
    long long row = blockIdx.x * (long long)GRMS_ROWS_PER_BLOCK + threadIdx.y;
    if (row >= rows) return;
    const T *orow = o + row * D, *zr = z + row * D, *gr = dy + row * D;
    float r = rstd[row], dot = 0.f;
    if (by8) {
        for (int c = threadIdx.x * 8; c < D; c += 256) {
            float zv[8], wv[8], gv[8], ov[8], d[8];
            load8(zr + c, zv), load8(w + c, wv), load8(gr + c, gv), load8(orow + c, ov);
            if (dz && acc_z) load8(dz + row * D + c, d);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float s = grms_sigmoid(zv[j]), oh = ov[j] * r;
                dot += gv[j] * wv[j] * zv[j] * s * oh;
                const float v = gv[j] * oh * wv[j] * s * (1.f + zv[j] * (1.f - s));
                d[j] = acc_z ? d[j] + v : v;
            }
            if (dz) store8(dz + row * D + c, d);
        }
    } else {
        for (int c = threadIdx.x; c < D; c += 32) {
            float zc = to_f32(zr[c]), s = grms_sigmoid(zc), wc = to_f32(w[c]), gy = to_f32(gr[c]);
            float oh = to_f32(orow[c]) * r;
            dot += gy * wc * zc * s * oh;
            if (dz) {
                float v = gy * oh * wc * s * (1.f + zc * (1.f - s));
                T *dd = dz + row * D + c;
                *dd = from_f32<T>(acc_z ? to_f32(*dd) + v : v);
            }
        }
    }
    dot = grms_warp_sum(dot) / (float)D;
    if (!d_o) return;
    if (by8) {
        for (int c = threadIdx.x * 8; c < D; c += 256) {
            float zv[8], wv[8], gv[8], ov[8], d[8];
            load8(zr + c, zv), load8(w + c, wv), load8(gr + c, gv), load8(orow + c, ov);
            if (acc_o) load8(d_o + row * D + c, d);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float g = gv[j] * wv[j] * zv[j] * grms_sigmoid(zv[j]);
                const float v = r * (g - ov[j] * r * dot);
                d[j] = acc_o ? d[j] + v : v;
            }
            store8(d_o + row * D + c, d);
        }
    } else {
        for (int c = threadIdx.x; c < D; c += 32) {
            float zc = to_f32(zr[c]);
            float g = to_f32(gr[c]) * to_f32(w[c]) * zc * grms_sigmoid(zc);
            float v = r * (g - to_f32(orow[c]) * r * dot);
            T *dd = d_o + row * D + c;
            *dd = from_f32<T>(acc_o ? to_f32(*dd) + v : v);
        }
    }
}

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
            s += to_f32(dy[r * D + c]) * to_f32(o[r * D + c]) * rstd[r] * zc * grms_sigmoid(zc);
        }
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < D) {
        float t = 0.f;
        for (int k = 0; k < 8; k++) t += part[k][threadIdx.x];
        partial[(long long)blockIdx.y * D + c] = t;
    }
}

template <typename T>
__global__ void grms_dw_final_kernel(T *dw, const float *partial, int chunks, int D, int accumulate) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= D) return;
    float t = 0.f;
    for (int k = 0; k < chunks; k++) t += partial[(long long)k * D + c];
    dw[c] = from_f32<T>(accumulate ? to_f32(dw[c]) + t : t);
}

static unsigned grms_row_blocks(long long rows) {
    return (unsigned)((rows + GRMS_ROWS_PER_BLOCK - 1) / GRMS_ROWS_PER_BLOCK);
}

extern "C" void gated_rmsnorm_forward_cuda(DType dt, void *y, float *rstd, const void *o, const void *z, const void *w,
                                           int64_t rows, int64_t D, double eps, void *stream) {
    if (rows == 0 || D == 0) return;
    dim3 block(32, GRMS_ROWS_PER_BLOCK);
    DISPATCH_F32_BF16(dt, "gated_rmsnorm",
                      grms_fwd_kernel<T><<<grms_row_blocks(rows), block, 0, (cudaStream_t)stream>>>(
                          (T *)y, rstd, (const T *)o, (const T *)z, (const T *)w, rows, (int)D, (float)eps,
                          rows_by8(D, y, o, z, w)));
    KERNEL_CHECK();
}

extern "C" void gated_rmsnorm_backward_oz_cuda(DType dt, void *d_o, void *dz, const void *dy, const void *o,
                                               const void *z, const void *w, const float *rstd, int64_t rows,
                                               int64_t D, int acc_o, int acc_z, void *stream) {
    if (rows == 0 || D == 0 || (!d_o && !dz)) return;
    dim3 block(32, GRMS_ROWS_PER_BLOCK);
    DISPATCH_F32_BF16(dt, "gated_rmsnorm",
                      grms_bwd_oz_kernel<T><<<grms_row_blocks(rows), block, 0, (cudaStream_t)stream>>>(
                          (T *)d_o, (T *)dz, (const T *)dy, (const T *)o, (const T *)z, (const T *)w, rstd, rows,
                          (int)D, acc_o, acc_z, rows_by8(D, d_o, dz, dy, o, z, w)));
    KERNEL_CHECK();
}

extern "C" void gated_rmsnorm_backward_dw_cuda(DType dt, void *dw, float *partial, const void *dy, const void *o,
                                               const void *z, const float *rstd, int64_t rows, int64_t D,
                                               int accumulate, void *stream) {
    if (D == 0) return;
    cudaStream_t s = (cudaStream_t)stream;
    int64_t chunks = gated_rmsnorm_dw_chunks(rows);
    long long per = (rows + chunks - 1) / chunks;
    dim3 block(32, 8), grid((unsigned)((D + 31) / 32), (unsigned)chunks);
    DISPATCH_F32_BF16(dt, "gated_rmsnorm", grms_dw_partial_kernel<T><<<grid, block, 0, s>>>(
                                               partial, (const T *)dy, (const T *)o, (const T *)z, rstd, rows, (int)D,
                                               per > 0 ? per : 1));
    KERNEL_CHECK();
    DISPATCH_F32_BF16(dt, "gated_rmsnorm", grms_dw_final_kernel<T><<<(unsigned)((D + 255) / 256), 256, 0, s>>>(
                                               (T *)dw, partial, (int)chunks, (int)D, accumulate));
    KERNEL_CHECK();
}
