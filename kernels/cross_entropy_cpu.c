/* CPU reference for cross-entropy, in float32 and float64 (arithmetic in double). */
#include <math.h>

#include "base/common.h"
#include "kernels/cross_entropy.h"

/* The rows' log-sum-exps in parallel (each in double, in column order), then the loss summed over
 * the rows in order: the result does not depend on the number of threads. */
#define DEFINE_CE(T, SUF)                                                                                      \
    static int64_t ce_fwd_##SUF(T *loss, T *lse, int32_t *count, const T *x, const int32_t *tg, int64_t n,     \
                                int64_t v, int32_t *bad_target) {                                              \
        double *row_lse = (double *)xmalloc((size_t)GDP_MAX(n, 1) * sizeof(double));                           \
        _Pragma("omp parallel for schedule(static) if (n * v > 65536)")                                       \
        for (int64_t r = 0; r < n; r++) {                                                                     \
            const T *row = x + r * v;                                                                         \
            double mx = -INFINITY, s = 0;                                                                     \
            for (int64_t j = 0; j < v; j++) mx = row[j] > mx ? row[j] : mx;                                   \
            for (int64_t j = 0; j < v; j++) s += exp(row[j] - mx);                                            \
            row_lse[r] = mx + log(s);                                                                         \
            lse[r] = (T)row_lse[r];                                                                           \
        }                                                                                                     \
        int64_t bad = -1, cnt = 0;                                                                            \
        double total = 0;                                                                                     \
        for (int64_t r = 0; r < n; r++) {                                                                     \
            int32_t t = tg[r];                                                                                \
            if (t >= v) {                                                                                     \
                if (bad < 0) bad = r, *bad_target = t;                                                        \
            } else if (t >= 0) {                                                                              \
                total += row_lse[r] - x[r * v + t];                                                           \
                cnt++;                                                                                        \
            }                                                                                                 \
        }                                                                                                     \
        free(row_lse);                                                                                        \
        *count = (int32_t)cnt;                                                                                \
        *loss = (T)(cnt ? total / (double)cnt : 0.0);                                                         \
        return bad;                                                                                           \
    }                                                                                                         \
    static void ce_bwd_##SUF(T *dx, double g, const T *lse, int32_t count, const T *x, const int32_t *tg,      \
                             int64_t n, int64_t v, int acc) {                                                 \
        double scale = count > 0 ? g / (double)count : 0.0;                                                   \
        _Pragma("omp parallel for schedule(static) if (n * v > 65536)")                                       \
        for (int64_t r = 0; r < n; r++) {                                                                     \
            T *drow = dx + r * v;                                                                             \
            const T *row = x + r * v;                                                                         \
            int32_t t = tg[r];                                                                                \
            for (int64_t j = 0; j < v; j++) {                                                                 \
                double d = t >= 0 ? (exp(row[j] - (double)lse[r]) - (j == t ? 1.0 : 0.0)) * scale : 0.0;      \
                drow[j] = acc ? (T)(drow[j] + d) : (T)d;                                                      \
            }                                                                                                 \
        }                                                                                                     \
    }
DEFINE_CE(float, f32)
DEFINE_CE(double, f64)

int64_t cross_entropy_forward_cpu(DType dt, void *loss, void *lse, int32_t *count, const void *logits,
                                  const int32_t *targets, int64_t n, int64_t v, int32_t *bad_target) {
    if (dt == GDP_F64)
        return ce_fwd_f64((double *)loss, (double *)lse, count, (const double *)logits, targets, n, v, bad_target);
    if (dt == GDP_F32)
        return ce_fwd_f32((float *)loss, (float *)lse, count, (const float *)logits, targets, n, v, bad_target);
    gdp_fatal("kernel 'cross_entropy' on cpu supports f32 and f64, not %s", dtype_name(dt));
}

void cross_entropy_backward_cpu(DType dt, void *dlogits, const void *dloss, const void *lse, const int32_t *count,
                                const void *logits, const int32_t *targets, int64_t n, int64_t v, int accumulate) {
    if (dt == GDP_F64)
        ce_bwd_f64((double *)dlogits, *(const double *)dloss, (const double *)lse, *count, (const double *)logits,
                   targets, n, v, accumulate);
    else if (dt == GDP_F32)
        ce_bwd_f32((float *)dlogits, *(const float *)dloss, (const float *)lse, *count, (const float *)logits,
                   targets, n, v, accumulate);
    else
        gdp_fatal("kernel 'cross_entropy' on cpu supports f32 and f64, not %s", dtype_name(dt));
}
