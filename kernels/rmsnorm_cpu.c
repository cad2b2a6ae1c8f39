/* CPU reference for RMSNorm, in float32 and float64. */
#include <math.h>

#include "kernels/rmsnorm.h"

#define DEFINE_RMSNORM(T, SUF, SQRT)                                                                    \
    static void rms_fwd_##SUF(T *y, T *rstd, const T *x, const T *w, int64_t rows, int64_t C, T eps) {  \
        for (int64_t r = 0; r < rows; r++) {                                                            \
            const T *xr = x + r * C;                                                                    \
            T ss = 0;                                                                                   \
            for (int64_t c = 0; c < C; c++) ss += xr[c] * xr[c];                                        \
            T rs = (T)1 / SQRT(ss / (T)C + eps);                                                        \
            rstd[r] = rs;                                                                               \
            for (int64_t c = 0; c < C; c++) y[r * C + c] = xr[c] * rs * (w ? w[c] : (T)1);              \
        }                                                                                               \
    }                                                                                                   \
    static void rms_bwd_dx_##SUF(T *dx, const T *dy, const T *x, const T *w, const T *rstd, int64_t rows, \
                                 int64_t C, int acc) {                                                  \
        for (int64_t r = 0; r < rows; r++) {                                                            \
            const T *xr = x + r * C, *gr = dy + r * C;                                                  \
            T rs = rstd[r], dot = 0;                                                                    \
            for (int64_t c = 0; c < C; c++) dot += gr[c] * (w ? w[c] : (T)1) * xr[c] * rs;              \
            dot /= (T)C;                                                                                \
            for (int64_t c = 0; c < C; c++) {                                                           \
                T g = gr[c] * (w ? w[c] : (T)1);                                                        \
                T v = rs * (g - xr[c] * rs * dot);                                                      \
                dx[r * C + c] = acc ? dx[r * C + c] + v : v;                                            \
            }                                                                                           \
        }                                                                                               \
    }                                                                                                   \
    static void rms_bwd_dw_##SUF(T *dw, const T *dy, const T *x, const T *rstd, int64_t rows, int64_t C, \
                                 int acc) {                                                             \
        if (!acc)                                                                                       \
            for (int64_t c = 0; c < C; c++) dw[c] = 0;                                                  \
        for (int64_t r = 0; r < rows; r++) /* rows in order: deterministic, cache-friendly */           \
            for (int64_t c = 0; c < C; c++) dw[c] += dy[r * C + c] * x[r * C + c] * rstd[r];            \
    }
DEFINE_RMSNORM(float, f32, sqrtf)
DEFINE_RMSNORM(double, f64, sqrt)

void rmsnorm_forward_cpu(DType dt, void *y, void *rstd, const void *x, const void *w, int64_t rows, int64_t C,
                         double eps) {
    if (dt == GDP_F64)
        rms_fwd_f64((double *)y, (double *)rstd, (const double *)x, (const double *)w, rows, C, eps);
    else
        rms_fwd_f32((float *)y, (float *)rstd, (const float *)x, (const float *)w, rows, C, (float)eps);
}

void rmsnorm_backward_dx_cpu(DType dt, void *dx, const void *dy, const void *x, const void *w, const void *rstd,
                             int64_t rows, int64_t C, int accumulate) {
    if (dt == GDP_F64)
        rms_bwd_dx_f64((double *)dx, (const double *)dy, (const double *)x, (const double *)w, (const double *)rstd,
                       rows, C, accumulate);
    else
        rms_bwd_dx_f32((float *)dx, (const float *)dy, (const float *)x, (const float *)w, (const float *)rstd, rows,
                       C, accumulate);
}

void rmsnorm_backward_dw_cpu(DType dt, void *dw, const void *dy, const void *x, const void *rstd, int64_t rows,
                             int64_t C, int accumulate) {
    if (dt == GDP_F64)
        rms_bwd_dw_f64((double *)dw, (const double *)dy, (const double *)x, (const double *)rstd, rows, C, accumulate);
    else
        rms_bwd_dw_f32((float *)dw, (const float *)dy, (const float *)x, (const float *)rstd, rows, C, accumulate);
}
