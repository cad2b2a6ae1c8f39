/* CPU reference for the depthwise causal convolution, in float32 and float64. */
#include "kernels/conv1d_causal.h"

#define DEFINE_CONV(T, SUF)                                                                              \
    static void conv_fwd_##SUF(T *y, const T *x, const T *w, int64_t B, int64_t Tn, int64_t C, int64_t W) { \
        for (int64_t b = 0; b < B; b++)                                                                  \
            for (int64_t t = 0; t < Tn; t++)                                                             \
                for (int64_t c = 0; c < C; c++) {                                                        \
                    T s = 0;                                                                             \
                    for (int64_t i = 0; i < W; i++) {                                                    \
                        int64_t ts = t - W + 1 + i;                                                      \
                        if (ts >= 0) s += w[c * W + i] * x[(b * Tn + ts) * C + c];                       \
                    }                                                                                    \
                    y[(b * Tn + t) * C + c] = s;                                                         \
                }                                                                                        \
    }                                                                                                    \
    static void conv_bwd_dx_##SUF(T *dx, const T *dy, const T *w, int64_t B, int64_t Tn, int64_t C, int64_t W, \
                                  int acc) {                                                             \
        for (int64_t b = 0; b < B; b++)                                                                  \
            for (int64_t t = 0; t < Tn; t++)                                                             \
                for (int64_t c = 0; c < C; c++) {                                                        \
                    T s = 0;                                                                             \
                    for (int64_t i = 0; i < W; i++) {                                                    \
                        int64_t to = t + W - 1 - i;                                                      \
                        if (to < Tn) s += w[c * W + i] * dy[(b * Tn + to) * C + c];                      \
                    }                                                                                    \
                    T *d = dx + (b * Tn + t) * C + c;                                                    \
                    *d = acc ? *d + s : s;                                                               \
                }                                                                                        \
    }                                                                                                    \
    static void conv_bwd_dw_##SUF(T *dw, const T *dy, const T *x, int64_t B, int64_t Tn, int64_t C, int64_t W, \
                                  int acc) {                                                             \
        if (!acc)                                                                                        \
            for (int64_t k = 0; k < C * W; k++) dw[k] = 0;                                               \
        for (int64_t b = 0; b < B; b++) /* (b, t) in order: deterministic */                            \
            for (int64_t t = 0; t < Tn; t++)                                                             \
                for (int64_t c = 0; c < C; c++) {                                                        \
                    T g = dy[(b * Tn + t) * C + c];                                                      \
                    for (int64_t i = 0; i < W; i++) {                                                    \
                        int64_t ts = t - W + 1 + i;                                                      \
                        if (ts >= 0) dw[c * W + i] += g * x[(b * Tn + ts) * C + c];                      \
                    }                                                                                    \
                }                                                                                        \
    }
DEFINE_CONV(float, f32)
DEFINE_CONV(double, f64)

void conv1d_causal_forward_cpu(DType dt, void *y, const void *x, const void *w, int64_t B, int64_t T, int64_t C,
                               int64_t W) {
    if (dt == GDP_F64)
        conv_fwd_f64((double *)y, (const double *)x, (const double *)w, B, T, C, W);
    else
        conv_fwd_f32((float *)y, (const float *)x, (const float *)w, B, T, C, W);
}

void conv1d_causal_backward_dx_cpu(DType dt, void *dx, const void *dy, const void *w, int64_t B, int64_t T, int64_t C,
                                   int64_t W, int accumulate) {
    if (dt == GDP_F64)
        conv_bwd_dx_f64((double *)dx, (const double *)dy, (const double *)w, B, T, C, W, accumulate);
    else
        conv_bwd_dx_f32((float *)dx, (const float *)dy, (const float *)w, B, T, C, W, accumulate);
}

void conv1d_causal_backward_dw_cpu(DType dt, void *dw, const void *dy, const void *x, int64_t B, int64_t T, int64_t C,
                                   int64_t W, int accumulate) {
    if (dt == GDP_F64)
        conv_bwd_dw_f64((double *)dw, (const double *)dy, (const double *)x, B, T, C, W, accumulate);
    else
        conv_bwd_dw_f32((float *)dw, (const float *)dy, (const float *)x, B, T, C, W, accumulate);
}
