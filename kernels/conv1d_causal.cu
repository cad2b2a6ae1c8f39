/* CUDA depthwise causal convolution (+ SiLU): a thread per (V adjacent channels, time segment, batch
 * row), so a warp reads 32 * V consecutive channels of one time step (coalesced) and walks its segment
 * with the taps and sliding windows of x (and, backward, of dpre) in registers: one pass over the
 * tensors, no index division per element. Backward produces dx and the dw partials of its segment in
 * the same pass; a deterministic column sum folds the partials into dw. Float math whatever the storage
 * type, and the same operations in the same order per channel whatever V: every V gives the same bits.
 *
 * V > 1 is for bf16: with V = 1 a warp moves only 64 bytes per time step and tensor (half a cache line
 * per load) and each 2-byte element pays its own load, store and index arithmetic. bf16 takes the widest
 * V that C and the tensors' alignment allow, up to the measured best (conv_fwd_max_vec /
 * conv_bwd_max_vec); f32, odd C and misaligned tensors keep V = 1.
 *
 * The kernels are compiled for a window of KW taps: KW = 4 (the default conv_size) exactly, and
 * KW = CONV1D_MAX_W for any other W, with w right-aligned in the window (tap i at KW - W + i) and zero
 * taps before it. The zero taps leave pre unchanged, so one body serves both; they only cost the
 * padded kernel KW - W extra steps per segment.
 *
 * Documents (doc_start non-NULL) take instantiations of their own (DOCS), so the plain kernels stay
 * as they are: a start at step t clears the x window before x[t] enters it, and the backward's dx[t]
 * stops taking dpre at the first start after t (a bit mask of the window's starts). The start flags
 * are one int per time step, the same address for a whole warp. */
#include <type_traits>

#include "kernels/column_sum.cuh"
#include "kernels/common.cuh"
#include "kernels/conv1d_causal.h"

#define CONV_BLOCK 128
/* Time steps whose loads a thread issues together before using them, for more bytes in flight. On an
 * H200 at B 8, T 2048, C 1536, f32: 4 steps gave fwd 3.1 / bwd 2.4 TB/s, against 2.6 / 2.0 for 1 step;
 * 8 and 16 cost the backward occupancy (registers) and were slower. */
#define CONV_STEPS 4

/* Most channels a thread takes. Measured on the H200 (tests/gpu/test_gpu_conv with GDP_CONV_BENCH set; B 8,
 * T 2048, bf16, W 4, silu; ms at C 768 / 1536 / 2304). With the IEEE sigmoid these kernels were
 * compute-bound at any width (forward V 2: 0.044 / 0.074 / 0.103, V 8: 0.066 / 0.130 / 0.190;
 * backward V 1: 0.073 / 0.129 / 0.188, V 4: 0.142 / 0.199 / 0.321). With the hardware-exp sigmoid
 * (common.cuh): forward V 1 0.026 / 0.044 / 0.061, V 2 0.026 / 0.041 / 0.056; backward (with the dw
 * column sum) V 1 0.052 / 0.092 / 0.131, V 2 0.051 / 0.088 / 0.126. A copy of C 2304 takes 0.041.
 * Wider V leaves fewer threads and more registers per thread (backward V 4: 162), and was slower in
 * both builds, so bf16 takes V 2 in both directions. */
template <typename T> constexpr int conv_fwd_max_vec() { return sizeof(T) != 2 ? 1 : 2; }
template <typename T> constexpr int conv_bwd_max_vec() { return sizeof(T) != 2 ? 1 : 2; }

/* V adjacent channels of one time step: one load or store of V * sizeof(T) bytes. */
template <typename T, int V> struct alignas(sizeof(T) * V) ConvVec {
    T v[V];
};

/* Zero where `in` is false, as the one-channel kernels' 0.f: the windows shift in +0 past the data. */
template <typename T, int V>
__device__ __forceinline__ ConvVec<T, V> conv_ld(bool in, const T *__restrict__ p) {
    ConvVec<T, V> r{}; /* zero bits, +0 in f32 and bf16, with no conversion at run time */
    if (in) r = *reinterpret_cast<const ConvVec<T, V> *>(p);
    return r;
}

/* Pairs of bf16 round in one instruction; __floats2bfloat162_rn rounds as __float2bfloat16_rn does. */
template <typename T, int V>
__device__ __forceinline__ void conv_st(T *__restrict__ p, const float (&f)[V]) {
    ConvVec<T, V> r;
    if constexpr (std::is_same<T, __nv_bfloat16>::value && V % 2 == 0) {
        __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(r.v);
#pragma unroll
        for (int i = 0; i < V / 2; i++) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    } else {
#pragma unroll
        for (int i = 0; i < V; i++) r.v[i] = from_f32<T>(f[i]);
    }
    *reinterpret_cast<ConvVec<T, V> *>(p) = r;
}

/* The thread's taps, right-aligned (zeros first), and its x window of the step before t0, per channel:
 * xw[v][j] = x[t0 - KW + j] (zero before t = 0, and where the first step shifts it under a zero tap or
 * out of the window). */
template <typename T, int V, int KW, typename I>
__device__ __forceinline__ void conv_load_window(float (&wr)[V][KW], float (&xw)[V][KW], const T *__restrict__ wc,
                                                 const T *__restrict__ xc, int t0, int C, int W) {
    const int pad = KW - W;
#pragma unroll
    for (int j = 0; j < KW; j++) {
        const int t = t0 - KW + j;
        const ConvVec<T, V> xv = conv_ld<T, V>(j > pad && t >= 0, xc + (I)t * C);
#pragma unroll
        for (int v = 0; v < V; v++) {
            wr[v][j] = j >= pad ? to_f32(wc[v * W + j - pad]) : 0.f;
            xw[v][j] = to_f32(xv.v[v]);
        }
    }
}

/* Documents: the loaded window of step t0 - 1 keeps no x from before the last start in it. */
template <int V, int KW>
__device__ __forceinline__ void conv_window_docs(float (&xw)[V][KW], const int *__restrict__ dsr, int t0) {
#pragma unroll
    for (int j = 1; j < KW; j++) {
        const int t = t0 - KW + j;
        if (t >= 0 && dsr[t])
#pragma unroll
            for (int v = 0; v < V; v++)
#pragma unroll
                for (int i = 0; i < j; i++) xw[v][i] = 0.f;
    }
}

/* A document starts at this step: nothing before it stays in the window (called before the step's x
 * is shifted in, so every slot goes). */
template <int V, int KW>
__device__ __forceinline__ void conv_clear_window(float (&xw)[V][KW]) {
#pragma unroll
    for (int v = 0; v < V; v++)
#pragma unroll
        for (int j = 0; j < KW; j++) xw[v][j] = 0.f;
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

/* Grid (ceil(C / (CONV_BLOCK * V)), segments, B); V divides C. Offsets are from the thread's per-(b, c)
 * base pointer, in I: int when they all fit (conv_grid), else long long. */
template <typename T, int V, int KW, typename I, bool DOCS>
__global__ void __launch_bounds__(CONV_BLOCK)
    conv_fwd_kernel(T *__restrict__ y, const T *__restrict__ x, const T *__restrict__ w, const int *__restrict__ ds,
                    int Tn, int C, int W, int seg_len, int silu) {
    const unsigned cv = (blockIdx.x * CONV_BLOCK + threadIdx.x) * V; /* unsigned: no overflow for C near 2^31 */
    if (cv >= (unsigned)C) return;
    const int c = (int)cv;
    const int t0 = blockIdx.y * seg_len, t1 = min(t0 + seg_len, Tn);
    const long long base = (long long)blockIdx.z * Tn * C + c;
    const T *xc = x + base;
    T *yc = y + base;
    const int *dsr = DOCS ? ds + (long long)blockIdx.z * Tn : nullptr;
    float wr[V][KW], xw[V][KW];
    conv_load_window<T, V, KW, I>(wr, xw, w + (long long)c * W, xc, t0, C, W);
    if constexpr (DOCS) conv_window_docs<V, KW>(xw, dsr, t0);
    I o = (I)t0 * C;
    for (int t = t0; t < t1; t += CONV_STEPS, o += (I)CONV_STEPS * C) {
        ConvVec<T, V> xv[CONV_STEPS];
        int st[CONV_STEPS];
#pragma unroll
        for (int k = 0; k < CONV_STEPS; k++) {
            xv[k] = conv_ld<T, V>(t + k < t1, xc + o + (I)k * C);
            if constexpr (DOCS) st[k] = t + k < t1 ? dsr[t + k] : 0;
        }
#pragma unroll
        for (int k = 0; k < CONV_STEPS; k++)
            if (t + k < t1) {
                if constexpr (DOCS)
                    if (st[k]) conv_clear_window<V, KW>(xw);
                float yv[V];
#pragma unroll
                for (int v = 0; v < V; v++) {
                    conv_shift_in(xw[v], to_f32(xv[k].v[v]));
                    const float pre = conv_dot(wr[v], xw[v]);
                    yv[v] = silu ? pre * sigmoid_f32(pre) : pre;
                }
                conv_st<T, V>(yc + o + (I)k * C, yv);
            }
    }
}

/* Same grid. Step u over [t0, t1 + KW - 1): shift x[u] into xw (0 past the end), turn dy[u] into
 * dpre[u] (0 past the end) and shift it into gw, so gw[KW - 1 - j] = dpre[u - j]; gw starts at zero,
 * as dx of this segment never needs dpre before t0. dpre[u] adds its dw terms only for u in the
 * segment (each dpre is counted by the one thread owning its time step), and dx[u - KW + 1] =
 * sum_j w[j] dpre[u - j] is complete once dpre[u] is known. The KW dw sums of each channel go to
 * partial[((b * segments + seg) * C + c) * W + i] (the real taps only). */
template <typename T, int V, int KW, typename I, bool DOCS>
__global__ void __launch_bounds__(CONV_BLOCK)
    conv_bwd_kernel(T *__restrict__ dx, float *__restrict__ partial, const T *__restrict__ dy,
                    const T *__restrict__ x, const T *__restrict__ w, const int *__restrict__ ds, int Tn, int C, int W,
                    int seg_len, int silu, int acc_dx) {
    const unsigned cv = (blockIdx.x * CONV_BLOCK + threadIdx.x) * V;
    if (cv >= (unsigned)C) return;
    const int c = (int)cv;
    const int t0 = blockIdx.y * seg_len, t1 = min(t0 + seg_len, Tn);
    const long long base = (long long)blockIdx.z * Tn * C + c;
    const T *xc = x + base, *dyc = dy + base;
    T *dxc = dx ? dx + base : nullptr;
    const int *dsr = DOCS ? ds + (long long)blockIdx.z * Tn : nullptr;
    float wr[V][KW], xw[V][KW], gw[V][KW], dwa[V][KW];
    conv_load_window<T, V, KW, I>(wr, xw, w + (long long)c * W, xc, t0, C, W);
    if constexpr (DOCS) conv_window_docs<V, KW>(xw, dsr, t0);
    unsigned sb = 0; /* DOCS: bit m = a document starts at step u - KW + 1 + m */
#pragma unroll
    for (int v = 0; v < V; v++)
#pragma unroll
        for (int j = 0; j < KW; j++) gw[v][j] = dwa[v][j] = 0.f;
    const int u1 = t1 + KW - 1, u_in = min(u1, Tn); /* steps; those with data */
    I o = (I)t0 * C;
    for (int u = t0; u < u1; u += CONV_STEPS, o += (I)CONV_STEPS * C) {
        ConvVec<T, V> xv[CONV_STEPS], gv[CONV_STEPS], dv[CONV_STEPS];
        int st[CONV_STEPS];
#pragma unroll
        for (int k = 0; k < CONV_STEPS; k++) {
            const bool in = u + k < u_in, out = dxc && acc_dx && u + k < u1 && u + k - (KW - 1) >= t0;
            xv[k] = conv_ld<T, V>(in, xc + o + (I)k * C);
            gv[k] = conv_ld<T, V>(in, dyc + o + (I)k * C);
            dv[k] = conv_ld<T, V>(out, dxc + o + (I)(k - (KW - 1)) * C);
            if constexpr (DOCS) st[k] = in ? dsr[u + k] : 0;
        }
#pragma unroll
        for (int k = 0; k < CONV_STEPS; k++) {
            const int uk = u + k;
            if (uk >= u1) break;
            if constexpr (DOCS) {
                sb = (sb >> 1) | ((st[k] ? 1u : 0u) << (KW - 1));
                if (st[k]) conv_clear_window<V, KW>(xw);
            }
#pragma unroll
            for (int v = 0; v < V; v++) {
                conv_shift_in(xw[v], to_f32(xv[k].v[v]));
                float g = to_f32(gv[k].v[v]);
                if (silu && uk < u_in) {
                    const float pre = conv_dot(wr[v], xw[v]), s = sigmoid_f32(pre);
                    g *= s * (1.f + pre * (1.f - s));
                }
                if (partial && uk < t1)
#pragma unroll
                    for (int j = 0; j < KW; j++) dwa[v][j] += g * xw[v][j];
                conv_shift_in(gw[v], g);
            }
            if (dxc && uk - (KW - 1) >= t0) {
                /* DOCS: dpre[t + m] reaches dx[t = uk - KW + 1] for m below the first start after t */
                const unsigned later = sb & ~1u;
                const int mlim = DOCS && later ? __ffs((int)later) - 1 : KW;
                float dxv[V];
#pragma unroll
                for (int v = 0; v < V; v++) {
                    float s = 0.f;
#pragma unroll
                    for (int j = 0; j < KW; j++)
                        if (!DOCS || KW - 1 - j < mlim) s += wr[v][j] * gw[v][KW - 1 - j];
                    dxv[v] = to_f32(dv[k].v[v]) + s;
                }
                conv_st<T, V>(dxc + o + (I)(k - (KW - 1)) * C, dxv);
            }
        }
    }
    if (partial) {
        float *p = partial + (((long long)blockIdx.z * gridDim.y + blockIdx.y) * C + c) * W;
        const int pad = KW - W;
#pragma unroll
        for (int v = 0; v < V; v++)
#pragma unroll
            for (int j = 0; j < KW; j++)
                if (j >= pad) p[v * W + j - pad] = dwa[v][j];
    }
}

/* Channels per thread for bf16 rows of C at these pointers (NULL counts as aligned): the widest of
 * 8, 4, 2 that divides C and whose V * 2 bytes every pointer is aligned to; the launchers clamp it to
 * their kernel's cap. */
template <typename T>
static int conv_vec(int64_t C, const void *p0, const void *p1, const void *p2 = nullptr) {
    const uintptr_t bits = (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2;
    for (int v = 8; v > 1 && sizeof(T) == 2; v /= 2)
        if (C % v == 0 && bits % (v * sizeof(T)) == 0) return v;
    return 1;
}

/* Launches the widest instantiation V <= vec (V halves from the kernel's cap; every V below a fitting
 * one fits too). grid.x is set here: it depends on V. */
template <typename T, int KW, typename I, int V>
static void conv_fwd_launch(int vec, dim3 grid, cudaStream_t s, T *y, const T *x, const T *w, const int *ds, int Tn,
                            int C, int W, int seg_len, int silu) {
    if constexpr (V > 1)
        if (vec < V) return conv_fwd_launch<T, KW, I, V / 2>(vec, grid, s, y, x, w, ds, Tn, C, W, seg_len, silu);
    grid.x = (unsigned)(((int64_t)C + CONV_BLOCK * V - 1) / (CONV_BLOCK * V));
    if (ds)
        conv_fwd_kernel<T, V, KW, I, true><<<grid, CONV_BLOCK, 0, s>>>(y, x, w, ds, Tn, C, W, seg_len, silu);
    else
        conv_fwd_kernel<T, V, KW, I, false><<<grid, CONV_BLOCK, 0, s>>>(y, x, w, nullptr, Tn, C, W, seg_len, silu);
}

template <typename T, int KW, typename I, int V>
static void conv_bwd_launch(int vec, dim3 grid, cudaStream_t s, T *dx, float *partial, const T *dy, const T *x,
                            const T *w, const int *ds, int Tn, int C, int W, int seg_len, int silu, int acc_dx) {
    if constexpr (V > 1)
        if (vec < V)
            return conv_bwd_launch<T, KW, I, V / 2>(vec, grid, s, dx, partial, dy, x, w, ds, Tn, C, W, seg_len, silu,
                                                    acc_dx);
    grid.x = (unsigned)(((int64_t)C + CONV_BLOCK * V - 1) / (CONV_BLOCK * V));
    if (ds)
        conv_bwd_kernel<T, V, KW, I, true>
            <<<grid, CONV_BLOCK, 0, s>>>(dx, partial, dy, x, w, ds, Tn, C, W, seg_len, silu, acc_dx);
    else
        conv_bwd_kernel<T, V, KW, I, false>
            <<<grid, CONV_BLOCK, 0, s>>>(dx, partial, dy, x, w, nullptr, Tn, C, W, seg_len, silu, acc_dx);
}

/* Runs LAUNCH<T, KW, I, MAXVEC<T>()>(...) with KW = 4 or CONV1D_MAX_W, I = int or long long. */
#define CONV_LAUNCH(LAUNCH, MAXVEC, dt, W, small, ...)                                                         \
    DISPATCH_F32_BF16(dt, "conv1d_causal", {                                                                   \
        if ((W) == 4 && (small))                                                                               \
            LAUNCH<T, 4, int, MAXVEC<T>()>(__VA_ARGS__);                                                       \
        else if ((W) == 4)                                                                                     \
            LAUNCH<T, 4, long long, MAXVEC<T>()>(__VA_ARGS__);                                                 \
        else if (small)                                                                                        \
            LAUNCH<T, CONV1D_MAX_W, int, MAXVEC<T>()>(__VA_ARGS__);                                            \
        else                                                                                                   \
            LAUNCH<T, CONV1D_MAX_W, long long, MAXVEC<T>()>(__VA_ARGS__);                                      \
    })

/* The launch grid but its x (the launchers set it), and whether the offsets the kernels form, up to
 * (T + KW - 1 + CONV_STEPS) * C in the backward's last batch of steps, fit in an int. */
static dim3 conv_grid(int64_t B, int64_t T, int64_t C, bool *small) {
    if (B > 65535 || T > INT32_MAX || C > INT32_MAX)
        gdp_fatal("kernel 'conv1d_causal' on cuda: B = %lld, T = %lld, C = %lld past its launch limits (B <= 65535)",
                  (long long)B, (long long)T, (long long)C);
    *small = (T + CONV1D_MAX_W + CONV_STEPS) * C < INT32_MAX;
    return dim3(1, (unsigned)conv1d_causal_segments(B, T), (unsigned)B);
}

extern "C" void conv1d_causal_forward_cuda(DType dt, void *y, const void *x, const void *w, const int32_t *doc_start,
                                           int64_t B, int64_t Tlen, int64_t C, int64_t W, int silu, void *stream) {
    if (B * Tlen * C == 0) return;
    bool small;
    dim3 grid = conv_grid(B, Tlen, C, &small);
    int seg_len = (int)conv1d_causal_seg_len(B, Tlen);
    CONV_LAUNCH(conv_fwd_launch, conv_fwd_max_vec, dt, W, small, conv_vec<T>(C, y, x), grid, (cudaStream_t)stream,
                (T *)y, (const T *)x, (const T *)w, (const int *)doc_start, (int)Tlen, (int)C, (int)W, seg_len, silu);
    KERNEL_CHECK();
}

extern "C" void conv1d_causal_backward_cuda(DType dt, void *dx, void *dw, float *partial, const void *dy,
                                            const void *x, const void *w, const int32_t *doc_start, int64_t B,
                                            int64_t Tlen, int64_t C, int64_t W, int silu, int acc_dx, int acc_dw,
                                            void *stream) {
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
    CONV_LAUNCH(conv_bwd_launch, conv_bwd_max_vec, dt, W, small, conv_vec<T>(C, dx, dy, x), grid, s, (T *)dx, part,
                (const T *)dy, (const T *)x, (const T *)w, (const int *)doc_start, (int)Tlen, (int)C, (int)W, seg_len,
                silu, acc_dx);
    KERNEL_CHECK();
    if (dw) {
        DISPATCH_F32_BF16(dt, "conv1d_causal",
                          column_sum_partials((T *)dw, partial, conv1d_causal_dw_chunks(B, Tlen), C * W, acc_dw, s));
        KERNEL_CHECK();
    }
}
