/* CUDA depthwise causal convolution (+ SiLU): a thread per (channel, time segment, batch row), so a
 * warp reads 32 consecutive channels of one time step (coalesced) and walks its segment with the
 * taps and sliding windows of x (and, backward, of dpre) in registers: one pass over the tensors, no
 * index division per element. Backward produces dx and the dw partials of its segment in the same
 * pass; a deterministic column sum folds the partials into dw. Float math whatever the storage type.
 *
 * The kernels are compiled for a window of KW taps: KW = 4 (the default conv_size) exactly, and
 * KW = CONV1D_MAX_W for any other W, with w right-aligned in the window (tap i at KW - W + i) and zero
 * taps before it. The zero taps leave pre unchanged, so one body serves both; they only cost the
 * padded kernel KW - W extra steps per segment. */
#include "kernels/column_sum.cuh"
#include "kernels/common.cuh"
#include "kernels/conv1d_causal.h"

#define CONV_BLOCK 128
/* Time steps whose loads a thread issues together before using them, for more bytes in flight. On an
 * H200 at B 8, T 2048, C 1536, f32: 4 steps gave fwd 3.1 / bwd 2.4 TB/s, against 2.6 / 2.0 for 1 step;
 * 8 and 16 cost the backward occupancy (registers) and were slower. */
#define CONV_STEPS 4

/* The thread's taps, right-aligned (zeros first), and its x window of the step before t0:
 * xw[j] = x[t0 - KW + j] (zero before t = 0, and where the first step shifts it under a zero tap or
 * out of the window). */
template <typename T, int KW, typename I>
__device__ __forceinline__ void conv_load_window(float (&wr)[KW], float (&xw)[KW], const T *__restrict__ wc,
                                                 const T *__restrict__ xc, int t0, int C, int W) {
    const int pad = KW - W;
#pragma unroll
    for (int j = 0; j < KW; j++) {
        wr[j] = j >= pad ? to_f32(wc[j - pad]) : 0.f;
        const int t = t0 - KW + j;
        xw[j] = j > pad && t >= 0 ? to_f32(xc[(I)t * C]) : 0.f;
    }
}

template <int KW>
__device__ __forceinline__ void conv_shift_in(float (&win)[KW], float v) {
#pragma unroll
    for (int j = 0; j < KW - 1; j++) win[j] = win[j + 1];
    win[KW - 1] = v;
}

template <int KW>
__device__ __forceinline__ float conv_dot(const float (&wr)[KW], const float (&xw)[KW]) {
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < KW; j++) s += wr[j] * xw[j];
    return s;
}

/* Grid (ceil(C / CONV_BLOCK), segments, B). Offsets are from the thread's per-(b, c) base pointer, in I:
 * int when they all fit (conv_grid), else long long. */
template <typename T, int KW, typename I>
__global__ void __launch_bounds__(CONV_BLOCK)
    conv_fwd_kernel(T *__restrict__ y, const T *__restrict__ x, const T *__restrict__ w, int Tn, int C, int W,
                    int seg_len, int silu) {
    const int c = blockIdx.x * CONV_BLOCK + threadIdx.x;
    if (c >= C) return;
    const int t0 = blockIdx.y * seg_len, t1 = min(t0 + seg_len, Tn);
    const long long base = (long long)blockIdx.z * Tn * C + c;
    const T *xc = x + base;
    T *yc = y + base;
    float wr[KW], xw[KW];
    conv_load_window<T, KW, I>(wr, xw, w + (long long)c * W, xc, t0, C, W);
    I o = (I)t0 * C;
    for (int t = t0; t < t1; t += CONV_STEPS, o += (I)CONV_STEPS * C) {
        float xv[CONV_STEPS];
#pragma unroll
        for (int k = 0; k < CONV_STEPS; k++) xv[k] = t + k < t1 ? to_f32(xc[o + (I)k * C]) : 0.f;
#pragma unroll
        for (int k = 0; k < CONV_STEPS; k++)
            if (t + k < t1) {
                conv_shift_in(xw, xv[k]);
                const float pre = conv_dot(wr, xw);
                yc[o + (I)k * C] = from_f32<T>(silu ? pre * sigmoid_f32(pre) : pre);
            }
    }
}

/* Same grid. Step u over [t0, t1 + KW - 1): shift x[u] into xw (0 past the end), turn dy[u] into
 * dpre[u] (0 past the end) and shift it into gw, so gw[KW - 1 - j] = dpre[u - j]; gw starts at zero,
 * as dx of this segment never needs dpre before t0. dpre[u] adds its dw terms only for u in the
 * segment (each dpre is counted by the one thread owning its time step), and dx[u - KW + 1] =
 * sum_j w[j] dpre[u - j] is complete once dpre[u] is known. The KW dw sums of the thread go to
 * partial[((b * segments + seg) * C + c) * W + i] (the real taps only). */
template <typename T, int KW, typename I>
__global__ void __launch_bounds__(CONV_BLOCK)
    conv_bwd_kernel(T *__restrict__ dx, float *__restrict__ partial, const T *__restrict__ dy,
                    const T *__restrict__ x, const T *__restrict__ w, int Tn, int C, int W, int seg_len, int silu,
                    int acc_dx) {
    const int c = blockIdx.x * CONV_BLOCK + threadIdx.x;
    if (c >= C) return;
    const int t0 = blockIdx.y * seg_len, t1 = min(t0 + seg_len, Tn);
    const long long base = (long long)blockIdx.z * Tn * C + c;
    const T *xc = x + base, *dyc = dy + base;
    T *dxc = dx ? dx + base : nullptr;
    float wr[KW], xw[KW], gw[KW], dwa[KW];
    conv_load_window<T, KW, I>(wr, xw, w + (long long)c * W, xc, t0, C, W);
#pragma unroll
    for (int j = 0; j < KW; j++) gw[j] = dwa[j] = 0.f;
    const int u1 = t1 + KW - 1, u_in = min(u1, Tn); /* steps; those with data */
    I o = (I)t0 * C;
    for (int u = t0; u < u1; u += CONV_STEPS, o += (I)CONV_STEPS * C) {
        float xv[CONV_STEPS], gv[CONV_STEPS], dv[CONV_STEPS];
#pragma unroll
        for (int k = 0; k < CONV_STEPS; k++) {
            const bool in = u + k < u_in, out = dxc && acc_dx && u + k < u1 && u + k - (KW - 1) >= t0;
            xv[k] = in ? to_f32(xc[o + (I)k * C]) : 0.f;
            gv[k] = in ? to_f32(dyc[o + (I)k * C]) : 0.f;
            dv[k] = out ? to_f32(dxc[o + (I)(k - (KW - 1)) * C]) : 0.f;
        }
#pragma unroll
        for (int k = 0; k < CONV_STEPS; k++) {
            const int uk = u + k;
            if (uk >= u1) break;
            conv_shift_in(xw, xv[k]);
            float g = gv[k];
            if (silu && uk < u_in) {
                const float pre = conv_dot(wr, xw), s = sigmoid_f32(pre);
                g *= s * (1.f + pre * (1.f - s));
            }
            if (partial && uk < t1)
#pragma unroll
                for (int j = 0; j < KW; j++) dwa[j] += g * xw[j];
            conv_shift_in(gw, g);
            if (dxc && uk - (KW - 1) >= t0) {
                float s = 0.f;
#pragma unroll
                for (int j = 0; j < KW; j++) s += wr[j] * gw[KW - 1 - j];
                dxc[o + (I)(k - (KW - 1)) * C] = from_f32<T>(dv[k] + s);
            }
        }
    }
    if (partial) {
        float *p = partial + (((long long)blockIdx.z * gridDim.y + blockIdx.y) * C + c) * W;
        const int pad = KW - W;
#pragma unroll
        for (int j = 0; j < KW; j++)
            if (j >= pad) p[j - pad] = dwa[j];
    }
}

struct ConvPartial {
    const float *partial;
    __device__ float operator()(long long i) const { return partial[i]; }
};

/* Launches KERNEL<T, 4 or CONV1D_MAX_W, int or long long> over grid with the given arguments. */
#define CONV_LAUNCH(KERNEL, dt, W, small, grid, stream, ...)                                                   \
    DISPATCH_F32_BF16(dt, "conv1d_causal", {                                                                           \
        if ((W) == 4 && (small))                                                                               \
            KERNEL<T, 4, int><<<grid, CONV_BLOCK, 0, stream>>>(__VA_ARGS__);                                   \
        else if ((W) == 4)                                                                                     \
            KERNEL<T, 4, long long><<<grid, CONV_BLOCK, 0, stream>>>(__VA_ARGS__);                             \
        else if (small)                                                                                        \
            KERNEL<T, CONV1D_MAX_W, int><<<grid, CONV_BLOCK, 0, stream>>>(__VA_ARGS__);                        \
        else                                                                                                   \
            KERNEL<T, CONV1D_MAX_W, long long><<<grid, CONV_BLOCK, 0, stream>>>(__VA_ARGS__);                  \
    })

/* The launch grid, and whether the offsets the kernels form, up to (T + KW - 1 + CONV_STEPS) * C in the
 * backward's last batch of steps, fit in an int. */
static dim3 conv_grid(int64_t B, int64_t T, int64_t C, bool *small) {
    if (B > 65535 || T > INT32_MAX || C > INT32_MAX)
        gdp_fatal("kernel 'conv1d_causal' on cuda: B = %lld, T = %lld, C = %lld past its launch limits (B <= 65535)",
                  (long long)B, (long long)T, (long long)C);
    *small = (T + CONV1D_MAX_W + CONV_STEPS) * C < INT32_MAX;
    return dim3((unsigned)((C + CONV_BLOCK - 1) / CONV_BLOCK), (unsigned)conv1d_causal_segments(B, T), (unsigned)B);
}

extern "C" void conv1d_causal_forward_cuda(DType dt, void *y, const void *x, const void *w, int64_t B, int64_t Tlen,
                                           int64_t C, int64_t W, int silu, void *stream) {
    if (B * Tlen * C == 0) return;
    bool small;
    dim3 grid = conv_grid(B, Tlen, C, &small);
    int seg_len = (int)conv1d_causal_seg_len(B, Tlen);
    CONV_LAUNCH(conv_fwd_kernel, dt, W, small, grid, (cudaStream_t)stream, (T *)y, (const T *)x, (const T *)w,
                (int)Tlen, (int)C, (int)W, seg_len, silu);
    KERNEL_CHECK();
}

extern "C" void conv1d_causal_backward_cuda(DType dt, void *dx, void *dw, float *partial, const void *dy,
                                            const void *x, const void *w, int64_t B, int64_t Tlen, int64_t C,
                                            int64_t W, int silu, int acc_dx, int acc_dw, void *stream) {
    if (C * W == 0 || (!dx && !dw)) return;
    cudaStream_t s = (cudaStream_t)stream;
    if (B * Tlen == 0) { /* no time steps: dx is empty, dw a sum of nothing */
        if (dw && !acc_dw) CUDA_CHECK(cudaMemsetAsync(dw, 0, (size_t)(C * W) * dtype_size(dt), s));
        return;
    }
    bool small;
    dim3 grid = conv_grid(B, Tlen, C, &small);
    int seg_len = (int)conv1d_causal_seg_len(B, Tlen);
    float *part = dw ? partial : nullptr;
    CONV_LAUNCH(conv_bwd_kernel, dt, W, small, grid, s, (T *)dx, part, (const T *)dy, (const T *)x, (const T *)w,
                (int)Tlen, (int)C, (int)W, seg_len, silu, acc_dx);
    KERNEL_CHECK();
    if (dw) {
        DISPATCH_F32_BF16(dt, "conv1d_causal",
                          column_sum<T>((T *)dw, ConvPartial{partial}, conv1d_causal_dw_chunks(B, Tlen), C * W,
                                        acc_dw, s));
        KERNEL_CHECK();
    }
}
