/* CPU reference for the gated RMSNorm, in float32 and float64. */
#include <math.h>

#include "kernels/gated_rmsnorm.h"

#define DEFINE_GRMS(T, SUF, SQRT, EXP)                                                                    \
    static inline T gsig_##SUF(T x) {                                                                     \
        if (x >= 0) return (T)1 / ((T)1 + EXP(-x));                                                       \
        T e = EXP(x);                                                                                     \
        return e / ((T)1 + e);                                                                            \
    }                                                                                                     \
    static void grms_fwd_##SUF(T *y, T *rstd, const T *o, const T *z, const T *w, int64_t rows, int64_t D, \
                               T eps) {                                                                   \
        for (int64_t r = 0; r < rows; r++) {                                                              \
            const T *orow = o + r * D, *zr = z + r * D;                                                   \
            T ss = 0;                                                                                     \
            for (int64_t c = 0; c < D; c++) ss += orow[c] * orow[c];                                      \
            T rs = (T)1 / SQRT(ss / (T)D + eps);                                                          \
            rstd[r] = rs;                                                                                 \
            for (int64_t c = 0; c < D; c++) y[r * D + c] = orow[c] * rs * w[c] * zr[c] * gsig_##SUF(zr[c]); \
        }                                                                                                 \
    }                                                                                                     \
    static void grms_bwd_oz_##SUF(T *d_o, T *dz, const T *dy, const T *o, const T *z, const T *w,         \
                                  const T *rstd, int64_t rows, int64_t D, int acc_o, int acc_z) {         \
        for (int64_t r = 0; r < rows; r++) {                                                              \
            const T *orow = o + r * D, *zr = z + r * D, *gr = dy + r * D;                                 \
            T rs = rstd[r], dot = 0;                                                                      \
            for (int64_t c = 0; c < D; c++) {                                                             \
                T s = gsig_##SUF(zr[c]);                                                                  \
                T g = gr[c] * w[c] * zr[c] * s, oh = orow[c] * rs;                                        \
                dot += g * oh;                                                                            \
                if (dz) {                                                                                 \
                    T v = gr[c] * oh * w[c] * s * ((T)1 + zr[c] * ((T)1 - s));                            \
                    dz[r * D + c] = acc_z ? dz[r * D + c] + v : v;                                        \
                }                                                                                         \
            }                                                                                             \
            dot /= (T)D;                                                                                  \
            if (d_o)                                                                                      \
                for (int64_t c = 0; c < D; c++) {                                                         \
                    T g = gr[c] * w[c] * zr[c] * gsig_##SUF(zr[c]);                                       \
                    T v = rs * (g - orow[c] * rs * dot);                                                  \
                    d_o[r * D + c] = acc_o ? d_o[r * D + c] + v : v;                                      \
                }                                                                                         \
        }                                                                                                 \
    }                                                                                                     \
    static void grms_bwd_dw_##SUF(T *dw, const T *dy, const T *o, const T *z, const T *rstd, int64_t rows, \
                                  int64_t D, int acc) {                                                   \
        if (!acc)                                                                                         \
            for (int64_t c = 0; c < D; c++) dw[c] = 0;                                                    \
        for (int64_t r = 0; r < rows; r++) /* rows in order: deterministic */                            \
            for (int64_t c = 0; c < D; c++) {                                                             \
                T zc = z[r * D + c];                                                                      \
                dw[c] += dy[r * D + c] * o[r * D + c] * rstd[r] * zc * gsig_##SUF(zc);                    \
            }                                                                                             \
    }
DEFINE_GRMS(float, f32, sqrtf, expf)
DEFINE_GRMS(double, f64, sqrt, exp)

void gated_rmsnorm_forward_cpu(DType dt, void *y, void *rstd, const void *o, const void *z, const void *w,
                               int64_t rows, int64_t D, double eps) {
    if (dt == GDP_F64)
        grms_fwd_f64((double *)y, (double *)rstd, (const double *)o, (const double *)z, (const double *)w, rows, D, eps);
    else
        grms_fwd_f32((float *)y, (float *)rstd, (const float *)o, (const float *)z, (const float *)w, rows, D,
                     (float)eps);
}

void gated_rmsnorm_backward_oz_cpu(DType dt, void *d_o, void *dz, const void *dy, const void *o, const void *z,
                                   const void *w, const void *rstd, int64_t rows, int64_t D, int acc_o, int acc_z) {
    if (dt == GDP_F64)
        grms_bwd_oz_f64((double *)d_o, (double *)dz, (const double *)dy, (const double *)o, (const double *)z,
                        (const double *)w, (const double *)rstd, rows, D, acc_o, acc_z);
    else
        grms_bwd_oz_f32((float *)d_o, (float *)dz, (const float *)dy, (const float *)o, (const float *)z,
                        (const float *)w, (const float *)rstd, rows, D, acc_o, acc_z);
}

void gated_rmsnorm_backward_dw_cpu(DType dt, void *dw, const void *dy, const void *o, const void *z, const void *rstd,
                                   int64_t rows, int64_t D, int accumulate) {
    if (dt == GDP_F64)
        grms_bwd_dw_f64((double *)dw, (const double *)dy, (const double *)o, (const double *)z, (const double *)rstd,
                        rows, D, accumulate);
    else
        grms_bwd_dw_f32((float *)dw, (const float *)dy, (const float *)o, (const float *)z, (const float *)rstd, rows,
                        D, accumulate);
}
