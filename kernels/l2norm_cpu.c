/* CPU reference for L2 normalisation, in float32 and float64. */
#include <math.h>

#include "kernels/l2norm.h"

#define DEFINE_L2NORM(T, SUF, SQRT)                                                                      \
    static void l2_fwd_##SUF(T *y, T *rstd, const T *x, int64_t rows, int64_t G, T eps) {                \
        for (int64_t r = 0; r < rows; r++) {                                                             \
            const T *xr = x + r * G;                                                                     \
            T ss = 0;                                                                                    \
            for (int64_t c = 0; c < G; c++) ss += xr[c] * xr[c];                                         \
            T rs = (T)1 / SQRT(ss + eps);                                                                \
            rstd[r] = rs;                                                                                \
            for (int64_t c = 0; c < G; c++) y[r * G + c] = xr[c] * rs;                                   \
        }                                                                                                \
    }                                                                                                    \
    static void l2_bwd_##SUF(T *dx, const T *dy, const T *x, const T *rstd, int64_t rows, int64_t G, int acc) { \
        for (int64_t r = 0; r < rows; r++) {                                                             \
            const T *xr = x + r * G, *gr = dy + r * G;                                                   \
            T rs = rstd[r], dot = 0;                                                                     \
            for (int64_t c = 0; c < G; c++) dot += gr[c] * xr[c] * rs;                                   \
            for (int64_t c = 0; c < G; c++) {                                                            \
                T v = rs * (gr[c] - xr[c] * rs * dot);                                                   \
                dx[r * G + c] = acc ? dx[r * G + c] + v : v;                                             \
            }                                                                                            \
        }                                                                                                \
    }
DEFINE_L2NORM(float, f32, sqrtf)
DEFINE_L2NORM(double, f64, sqrt)

void l2norm_forward_cpu(DType dt, void *y, void *rstd, const void *x, int64_t rows, int64_t group, double eps) {
    if (dt == GDP_F64)
        l2_fwd_f64((double *)y, (double *)rstd, (const double *)x, rows, group, eps);
    else
        l2_fwd_f32((float *)y, (float *)rstd, (const float *)x, rows, group, (float)eps);
}

void l2norm_backward_cpu(DType dt, void *dx, const void *dy, const void *x, const void *rstd, int64_t rows,
                         int64_t group, int accumulate) {
    if (dt == GDP_F64)
        l2_bwd_f64((double *)dx, (const double *)dy, (const double *)x, (const double *)rstd, rows, group, accumulate);
    else
        l2_bwd_f32((float *)dx, (const float *)dy, (const float *)x, (const float *)rstd, rows, group, accumulate);
}
