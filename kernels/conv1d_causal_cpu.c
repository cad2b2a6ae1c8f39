/* CPU reference for the depthwise causal convolution (+ SiLU), in float32 and float64.
 * The backward walks the same time segments as the CUDA kernel, with the same sliding windows, so
 * that the CPU gradchecks also cover the segment boundaries of that algorithm. */
#include <math.h>

#include "kernels/conv1d_causal.h"

/* The first position that t may read: its document's start (the last nonzero ds[b, u] at u in
 * (t - W + 1, t]), else 0 (the row's start, or a document that began W or more steps back). */
static inline int64_t doc_lo(const int32_t *ds, int64_t b, int64_t Tn, int64_t t, int64_t W) {
    if (ds)
        for (int64_t u = t; u > 0 && u > t - W + 1; u--)
            if (ds[b * Tn + u]) return u;
    return 0;
}

#define DEFINE_CONV(T, SUF, EXP)                                                                                     \
    static inline T sigmoid_##SUF(T v) {                                                                             \
        if (v >= 0) return (T)1 / ((T)1 + EXP(-v));                                                                  \
        T e = EXP(v);                                                                                                \
        return e / ((T)1 + e);                                                                                       \
    }                                                                                                                \
    static void conv_fwd_##SUF(T *y, const T *x, const T *w, const int32_t *ds, int64_t B, int64_t Tn, int64_t C,    \
                               int64_t W, int silu) {                                                                \
        _Pragma("omp parallel for collapse(2) schedule(static) if (B * Tn * C > 16384)")                             \
        for (int64_t b = 0; b < B; b++)                                                                              \
            for (int64_t t = 0; t < Tn; t++) {                                                                       \
                const int64_t lo = doc_lo(ds, b, Tn, t, W);                                                          \
                for (int64_t c = 0; c < C; c++) {                                                                    \
                    T s = 0;                                                                                         \
                    for (int64_t i = 0; i < W; i++) {                                                                \
                        int64_t ts = t - W + 1 + i;                                                                  \
                        if (ts >= lo) s += w[c * W + i] * x[(b * Tn + ts) * C + c];                                  \
                    }                                                                                                \
                    y[(b * Tn + t) * C + c] = silu ? s * sigmoid_##SUF(s) : s;                                       \
                }                                                                                                    \
            }                                                                                                        \
    }                                                                                                                \
    /* Per (b, segment [t0, t1), c): step u over [t0, t1 + W - 1) with xw = x[u-W+1 .. u] and                        \
     * gw = dpre[u-W+1 .. u] (zero before t0, and past the end of the sequence); dpre[u] adds its dw                 \
     * terms when u is in the segment, and dx[u-W+1] is complete once dpre[u] is known. Threads take                \
     * channels, so each dw[c] still sums in (b, t) order: the same bits for any number of threads.                 \
     * Documents: a start at u clears the x window before x[u] enters (pre[u] and dw see only u's                    \
     * document), and dx[t] takes dpre[t + m] only while no start lies in (t, t + m]: sw holds the                  \
     * window's start flags. */                                                                                     \
    static void conv_bwd_##SUF(T *dx, T *dw, const T *dy, const T *x, const T *w, const int32_t *ds, int64_t B,      \
                               int64_t Tn, int64_t C, int64_t W, int silu, int acc_dx, int acc_dw) {                 \
        if (dw && !acc_dw)                                                                                           \
            for (int64_t k = 0; k < C * W; k++) dw[k] = 0;                                                           \
        const int64_t len = conv1d_causal_seg_len(B, Tn);                                                            \
        _Pragma("omp parallel for schedule(static) if (B * Tn * C > 16384)")                                         \
        for (int64_t c = 0; c < C; c++)                                                                              \
            for (int64_t b = 0; b < B; b++)                                                                          \
                for (int64_t t0 = 0; t0 < Tn; t0 += len) {                                                           \
                    const int64_t t1 = t0 + len < Tn ? t0 + len : Tn;                                                \
                    const T *xc = x + b * Tn * C + c, *dyc = dy + b * Tn * C + c, *wc = w + c * W;                   \
                    const int32_t *dsr = ds ? ds + b * Tn : NULL;                                                    \
                    T xw[CONV1D_MAX_W], gw[CONV1D_MAX_W];                                                            \
                    int sw[CONV1D_MAX_W];                                                                            \
                    for (int64_t i = 0; i < W; i++) {                                                                \
                        int64_t ts = t0 - W + i; /* the window of step t0 - 1 */                                     \
                        xw[i] = ts >= 0 ? xc[ts * C] : 0;                                                            \
                        gw[i] = 0, sw[i] = 0;                                                                        \
                        if (dsr && ts >= 0 && dsr[ts])                                                               \
                            for (int64_t j = 0; j < i; j++) xw[j] = 0;                                               \
                    }                                                                                                \
                    for (int64_t u = t0; u < t1 + W - 1; u++) {                                                      \
                        for (int64_t i = 0; i + 1 < W; i++) xw[i] = xw[i + 1], gw[i] = gw[i + 1], sw[i] = sw[i + 1]; \
                        T g = 0;                                                                                     \
                        sw[W - 1] = dsr && u < Tn && dsr[u];                                                         \
                        if (sw[W - 1])                                                                               \
                            for (int64_t i = 0; i + 1 < W; i++) xw[i] = 0;                                           \
                        xw[W - 1] = u < Tn ? xc[u * C] : 0;                                                          \
                        if (u < Tn) {                                                                                \
                            g = dyc[u * C];                                                                          \
                            if (silu) {                                                                              \
                                T pre = 0;                                                                           \
                                for (int64_t i = 0; i < W; i++) pre += wc[i] * xw[i];                                \
                                T s = sigmoid_##SUF(pre);                                                            \
                                g *= s * ((T)1 + pre * ((T)1 - s));                                                  \
                            }                                                                                        \
                        }                                                                                            \
                        gw[W - 1] = g;                                                                               \
                        if (dw && u < t1)                                                                            \
                            for (int64_t i = 0; i < W; i++) dw[c * W + i] += g * xw[i];                              \
                        int64_t t = u - W + 1;                                                                       \
                        if (dx && t >= t0) {                                                                         \
                            int64_t mlim = W; /* dpre[t + m] reaches dx[t] for m < mlim */                           \
                            for (int64_t m = W - 1; m >= 1; m--)                                                     \
                                if (sw[m]) mlim = m;                                                                 \
                            T s = 0;                                                                                 \
                            for (int64_t i = 0; i < W; i++)                                                          \
                                if (W - 1 - i < mlim) s += wc[i] * gw[W - 1 - i];                                    \
                            T *d = dx + (b * Tn + t) * C + c;                                                        \
                            *d = acc_dx ? *d + s : s;                                                                \
                        }                                                                                            \
                    }                                                                                                \
                }                                                                                                    \
    }
DEFINE_CONV(float, f32, expf)
DEFINE_CONV(double, f64, exp)

void conv1d_causal_forward_cpu(DType dt, void *y, const void *x, const void *w, const int32_t *doc_start, int64_t B,
                               int64_t T, int64_t C, int64_t W, int silu) {
    if (dt == GDP_F64)
        conv_fwd_f64((double *)y, (const double *)x, (const double *)w, doc_start, B, T, C, W, silu);
    else
        conv_fwd_f32((float *)y, (const float *)x, (const float *)w, doc_start, B, T, C, W, silu);
}

void conv1d_causal_backward_cpu(DType dt, void *dx, void *dw, const void *dy, const void *x, const void *w,
                                const int32_t *doc_start, int64_t B, int64_t T, int64_t C, int64_t W, int silu,
                                int acc_dx, int acc_dw) {
    if (dt == GDP_F64)
        conv_bwd_f64((double *)dx, (double *)dw, (const double *)dy, (const double *)x, (const double *)w, doc_start, B,
                     T, C, W, silu, acc_dx, acc_dw);
    else
        conv_bwd_f32((float *)dx, (float *)dw, (const float *)dy, (const float *)x, (const float *)w, doc_start, B, T,
                     C, W, silu, acc_dx, acc_dw);
}
