/* CPU reference for sum/mean: fixed blocks of SUM_BLOCK elements summed in double (in parallel
 * when large), then the block partials in order: the same bits whatever the thread count. */
#include "base/common.h"
#include "kernels/sum.h"

#define SUM_BLOCK 4096

#define DEFINE_SUM(T, SUF)                                                                           \
    static double sum_##SUF(const T *x, int64_t n) {                                                \
        int64_t nb = CEIL_DIV(n, SUM_BLOCK);                                                        \
        if (nb <= 1) {                                                                              \
            double s = 0;                                                                           \
            for (int64_t i = 0; i < n; i++) s += x[i];                                              \
            return s;                                                                               \
        }                                                                                           \
        double *part = (double *)xmalloc((size_t)nb * sizeof(double));                              \
        _Pragma("omp parallel for schedule(static) if (nb >= 16)")                                  \
        for (int64_t b = 0; b < nb; b++) {                                                          \
            double s = 0;                                                                           \
            int64_t end = GDP_MIN(n, (b + 1) * SUM_BLOCK);                                          \
            for (int64_t i = b * SUM_BLOCK; i < end; i++) s += x[i];                                \
            part[b] = s;                                                                            \
        }                                                                                           \
        double s = 0;                                                                               \
        for (int64_t b = 0; b < nb; b++) s += part[b];                                              \
        free(part);                                                                                 \
        return s;                                                                                   \
    }                                                                                               \
    static void sum_bwd_##SUF(T *dx, T g, int64_t n, int accumulate) {                              \
        if (accumulate)                                                                             \
            for (int64_t i = 0; i < n; i++) dx[i] += g;                                             \
        else                                                                                        \
            for (int64_t i = 0; i < n; i++) dx[i] = g;                                              \
    }
DEFINE_SUM(float, f32)
DEFINE_SUM(double, f64)

void sum_forward_cpu(DType dt, void *out, const void *x, int64_t n, double scale) {
    if (dt == GDP_F64)
        *(double *)out = scale * sum_f64((const double *)x, n);
    else
        *(float *)out = (float)(scale * sum_f32((const float *)x, n));
}

void sum_backward_cpu(DType dt, void *dx, const void *dout, int64_t n, double scale, int accumulate) {
    if (dt == GDP_F64)
        sum_bwd_f64((double *)dx, scale * *(const double *)dout, n, accumulate);
    else
        sum_bwd_f32((float *)dx, (float)(scale * *(const float *)dout), n, accumulate);
}
