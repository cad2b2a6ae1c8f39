/* CUDA depthwise causal convolution: a thread per (b, t, c) for y and dx, and a deterministic
 * two-stage reduction over (b, t) for dw. Float accumulation throughout. */
#include "kernels/common.cuh"
#include "kernels/conv1d_causal.h"

template <typename T, typename I> /* I: int when every index fits, else long long */
__global__ void conv_fwd_kernel(T *y, const T *x, const T *w, I B, I Tn, int C, int W) {
    I n = B * Tn * C;
    for (I idx = blockIdx.x * (I)blockDim.x + threadIdx.x; idx < n;
         idx += (I)gridDim.x * blockDim.x) {
        int c = (int)(idx % C);
        I row = idx / C, t = row % Tn;
        float s = 0.f;
        for (int i = 0; i < W; i++) {
            I ts = t - W + 1 + i;
            if (ts >= 0) s += to_f32(w[c * W + i]) * to_f32(x[(row - t + ts) * C + c]);
        }
        y[idx] = from_f32<T>(s);
    }
}

template <typename T, typename I> /* I: int when every index fits, else long long */
__global__ void conv_bwd_dx_kernel(T *dx, const T *dy, const T *w, I B, I Tn, int C, int W,
                                   int accumulate) {
    I n = B * Tn * C;
    for (I idx = blockIdx.x * (I)blockDim.x + threadIdx.x; idx < n;
         idx += (I)gridDim.x * blockDim.x) {
        int c = (int)(idx % C);
        I row = idx / C, t = row % Tn;
        float s = 0.f;
        for (int i = 0; i < W; i++) {
            I to = t + W - 1 - i;
            if (to < Tn) s += to_f32(w[c * W + i]) * to_f32(dy[(row - t + to) * C + c]);
        }
        dx[idx] = from_f32<T>(accumulate ? to_f32(dx[idx]) + s : s);
    }
}

/* Stage 1: block (32, 8) owns 32 channels of one chunk of (b, t) rows; each thread keeps W sums,
 * then a fixed-order shared reduction writes partial[chunk][c * W + i]. */
template <typename T>
__global__ void conv_dw_partial_kernel(float *partial, const T *dy, const T *x, long long rows, long long Tn, int C,
                                       int W, long long rows_per_chunk) {
    __shared__ float part[8][CONV1D_MAX_W][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    long long r0 = blockIdx.y * rows_per_chunk, r1 = r0 + rows_per_chunk;
    if (r1 > rows) r1 = rows;
    float acc[CONV1D_MAX_W];
#pragma unroll
    for (int i = 0; i < CONV1D_MAX_W; i++) acc[i] = 0.f;
    if (c < C)
        for (long long r = r0 + threadIdx.y; r < r1; r += 8) {
            long long t = r % Tn;
            float g = to_f32(dy[r * C + c]);
#pragma unroll
            for (int i = 0; i < CONV1D_MAX_W; i++) {
                long long ts = t - W + 1 + i;
                if (i < W && ts >= 0) acc[i] += g * to_f32(x[(r - t + ts) * C + c]);
            }
        }
#pragma unroll
    for (int i = 0; i < CONV1D_MAX_W; i++) part[threadIdx.y][i][threadIdx.x] = acc[i];
    __syncthreads();
    if (threadIdx.y == 0 && c < C)
        for (int i = 0; i < W; i++) {
            float t = 0.f;
            for (int k = 0; k < 8; k++) t += part[k][i][threadIdx.x];
            partial[(long long)blockIdx.y * C * W + (long long)c * W + i] = t;
        }
}

template <typename T>
__global__ void conv_dw_final_kernel(T *dw, const float *partial, int chunks, int CW, int accumulate) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= CW) return;
    float t = 0.f;
    for (int j = 0; j < chunks; j++) t += partial[(long long)j * CW + k];
    dw[k] = from_f32<T>(accumulate ? to_f32(dw[k]) + t : t);
}

extern "C" void conv1d_causal_forward_cuda(DType dt, void *y, const void *x, const void *w, int64_t B, int64_t Tlen,
                                           int64_t C, int64_t W, void *stream) {
    long long n = B * Tlen * C;
    if (n == 0) return;
    /* 32-bit index arithmetic when it fits: the 64-bit divisions were most of this kernel's time */
    if (n < (1LL << 30)) /* idx + the grid stride stays below 2^31 */
        DISPATCH_F32_BF16(dt, "conv1d_causal", conv_fwd_kernel<T, int><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
                                                   (T *)y, (const T *)x, (const T *)w, (int)B, (int)Tlen, (int)C, (int)W));
    else
        DISPATCH_F32_BF16(dt, "conv1d_causal", conv_fwd_kernel<T, long long><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
                                                   (T *)y, (const T *)x, (const T *)w, B, Tlen, (int)C, (int)W));
    KERNEL_CHECK();
}

extern "C" void conv1d_causal_backward_dx_cuda(DType dt, void *dx, const void *dy, const void *w, int64_t B, int64_t Tlen,
                                               int64_t C, int64_t W, int accumulate, void *stream) {
    long long n = B * Tlen * C;
    if (n == 0) return;
    if (n < (1LL << 30)) /* idx + the grid stride stays below 2^31 */
        DISPATCH_F32_BF16(dt, "conv1d_causal", conv_bwd_dx_kernel<T, int><<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
                                                   (T *)dx, (const T *)dy, (const T *)w, (int)B, (int)Tlen, (int)C,
                                                   (int)W, accumulate));
    else
        DISPATCH_F32_BF16(dt, "conv1d_causal", conv_bwd_dx_kernel<T, long long><<<grid_for(n, 256), 256, 0,
                                                   (cudaStream_t)stream>>>((T *)dx, (const T *)dy, (const T *)w, B,
                                                                           Tlen, (int)C, (int)W, accumulate));
    KERNEL_CHECK();
}

extern "C" void conv1d_causal_backward_dw_cuda(DType dt, void *dw, float *partial, const void *dy, const void *x,
                                               int64_t B, int64_t Tlen, int64_t C, int64_t W, int accumulate,
                                               void *stream) {
    if (C == 0 || W == 0) return;
    cudaStream_t s = (cudaStream_t)stream;
    long long rows = B * Tlen;
    int64_t chunks = conv1d_causal_dw_chunks(rows);
    long long per = (rows + chunks - 1) / chunks;
    dim3 block(32, 8), grid((unsigned)((C + 31) / 32), (unsigned)chunks);
    DISPATCH_F32_BF16(dt, "conv1d_causal", conv_dw_partial_kernel<T><<<grid, block, 0, s>>>(
                                               partial, (const T *)dy, (const T *)x, rows, Tlen > 0 ? Tlen : 1, (int)C,
                                               (int)W, per > 0 ? per : 1));
    KERNEL_CHECK();
    int CW = (int)(C * W);
    DISPATCH_F32_BF16(dt, "conv1d_causal", conv_dw_final_kernel<T><<<(unsigned)((CW + 255) / 256), 256, 0, s>>>(
                                               (T *)dw, partial, (int)chunks, CW, accumulate));
    KERNEL_CHECK();
}
