/* CPU reference for the SwiGLU gate, in float32 and float64. */
#include <math.h>

#include "kernels/swiglu.h"

#define DEFINE_SWIGLU(T, SUF, EXP)                                                                        \
    static inline T sig_##SUF(T x) {                                                                      \
        if (x >= 0) return (T)1 / ((T)1 + EXP(-x));                                                       \
        T e = EXP(x);                                                                                     \
        return e / ((T)1 + e);                                                                            \
    }                                                                                                     \
    static void swiglu_fwd_##SUF(T *y, const T *a, const T *b, int64_t n) {                               \
        for (int64_t i = 0; i < n; i++) y[i] = a[i] * sig_##SUF(a[i]) * b[i];                             \
    }                                                                                                     \
    static void swiglu_bwd_##SUF(T *da, T *db, const T *dy, const T *a, const T *b, int64_t n, int acc_a, \
                                 int acc_b) {                                                             \
        for (int64_t i = 0; i < n; i++) {                                                                 \
            T s = sig_##SUF(a[i]);                                                                        \
            if (da) {                                                                                     \
                T g = dy[i] * b[i] * s * ((T)1 + a[i] * ((T)1 - s));                                      \
                da[i] = acc_a ? da[i] + g : g;                                                            \
            }                                                                                             \
            if (db) {                                                                                     \
                T g = dy[i] * a[i] * s;                                                                   \
                db[i] = acc_b ? db[i] + g : g;                                                            \
            }                                                                                             \
        }                                                                                                 \
    }
DEFINE_SWIGLU(float, f32, expf)
DEFINE_SWIGLU(double, f64, exp)

void swiglu_forward_cpu(DType dt, void *y, const void *a, const void *b, int64_t n) {
    if (dt == GDP_F64)
        swiglu_fwd_f64((double *)y, (const double *)a, (const double *)b, n);
    else
        swiglu_fwd_f32((float *)y, (const float *)a, (const float *)b, n);
}

void swiglu_backward_cpu(DType dt, void *da, void *db, const void *dy, const void *a, const void *b, int64_t n,
                         int acc_a, int acc_b) {
    if (dt == GDP_F64)
        swiglu_bwd_f64((double *)da, (double *)db, (const double *)dy, (const double *)a, (const double *)b, n, acc_a,
                       acc_b);
    else
        swiglu_bwd_f32((float *)da, (float *)db, (const float *)dy, (const float *)a, (const float *)b, n, acc_a,
                       acc_b);
}
