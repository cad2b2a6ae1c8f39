/* CPU reference for the pointwise activations, in float32 and float64. */
#include <math.h>

#include "kernels/pointwise.h"

#define DEFINE_PW(T, SUF, EXP, LOG1P, FABS)                                                           \
    static inline T sigmoid_##SUF(T x) {                                                              \
        if (x >= 0) return (T)1 / ((T)1 + EXP(-x));                                                   \
        T e = EXP(x);                                                                                 \
        return e / ((T)1 + e);                                                                        \
    }                                                                                                 \
    static inline T pw_f_##SUF(PointwiseFn fn, T x) {                                                 \
        switch (fn) {                                                                                 \
        case PW_SILU: return x * sigmoid_##SUF(x);                                                    \
        case PW_SIGMOID: return sigmoid_##SUF(x);                                                     \
        case PW_SOFTPLUS: return (x > 0 ? x : (T)0) + LOG1P(EXP(-FABS(x)));                           \
        case PW_EXP: return EXP(x);                                                                   \
        }                                                                                             \
        return 0;                                                                                     \
    }                                                                                                 \
    static inline T pw_df_##SUF(PointwiseFn fn, T x) {                                                \
        T s;                                                                                          \
        switch (fn) {                                                                                 \
        case PW_SILU: s = sigmoid_##SUF(x); return s * ((T)1 + x * ((T)1 - s));                       \
        case PW_SIGMOID: s = sigmoid_##SUF(x); return s * ((T)1 - s);                                 \
        case PW_SOFTPLUS: return sigmoid_##SUF(x);                                                    \
        case PW_EXP: return EXP(x);                                                                   \
        }                                                                                             \
        return 0;                                                                                     \
    }                                                                                                 \
    static void pw_fwd_##SUF(PointwiseFn fn, T *y, const T *x, int64_t n) {                           \
        for (int64_t i = 0; i < n; i++) y[i] = pw_f_##SUF(fn, x[i]);                                  \
    }                                                                                                 \
    static void pw_bwd_##SUF(PointwiseFn fn, T *dx, const T *dy, const T *x, int64_t n, int acc) {    \
        for (int64_t i = 0; i < n; i++) {                                                             \
            T g = dy[i] * pw_df_##SUF(fn, x[i]);                                                      \
            dx[i] = acc ? dx[i] + g : g;                                                              \
        }                                                                                             \
    }
DEFINE_PW(float, f32, expf, log1pf, fabsf)
DEFINE_PW(double, f64, exp, log1p, fabs)

void pointwise_forward_cpu(PointwiseFn fn, DType dt, void *y, const void *x, int64_t n) {
    if (dt == GDP_F64)
        pw_fwd_f64(fn, (double *)y, (const double *)x, n);
    else
        pw_fwd_f32(fn, (float *)y, (const float *)x, n);
}

void pointwise_backward_cpu(PointwiseFn fn, DType dt, void *dx, const void *dy, const void *x, int64_t n,
                            int accumulate) {
    if (dt == GDP_F64)
        pw_bwd_f64(fn, (double *)dx, (const double *)dy, (const double *)x, n, accumulate);
    else
        pw_bwd_f32(fn, (float *)dx, (const float *)dy, (const float *)x, n, accumulate);
}
