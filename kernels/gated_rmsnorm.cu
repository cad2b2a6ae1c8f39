/* CUDA gated RMSNorm: one warp per row (float accumulation), a deterministic two-stage dw reduction. */
#include "kernels/common.cuh"
#include "kernels/gated_rmsnorm.h"

#define GRMS_ROWS_PER_BLOCK 8

static __device__ __forceinline__ float grms_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

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
    float r = 1.f / sqrtf(grms_warp_sum(ss) / (float)D + eps);
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
    dot = grms_warp_sum(dot) / (float)D;
    if (!d_o) return;
    for (int c = threadIdx.x; c < D; c += 32) {
        float zc = to_f32(zr[c]);
        float g = to_f32(gr[c]) * to_f32(w[c]) * zc * sigmoid_f32(zc);
        float v = r * (g - to_f32(orow[c]) * r * dot);
        T *d = d_o + row * D + c;
        *d = from_f32<T>(acc_o ? to_f32(*d) + v : v);
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
                          (T *)y, rstd, (const T *)o, (const T *)z, (const T *)w, rows, (int)D, (float)eps));
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
                          (int)D, acc_o, acc_z));
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
