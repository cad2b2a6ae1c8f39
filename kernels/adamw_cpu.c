/* CPU AdamW and the deterministic gradient sum of squares (see kernels/adamw.h). */
#include <math.h>
#include <stdlib.h>

#include "kernels/adamw.h"

void adamw_update_cpu(float *p, const float *g, float *m, float *v, int64_t n, float lr, float beta1, float beta2,
                      float eps, float weight_decay, float grad_scale, float bc1, float bc2_sqrt) {
    const float decay_mul = 1.0f - lr * weight_decay;
    const float step_size = lr / bc1;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = p[i] * decay_mul - step_size * (mi / denom);
    }
}

/* Fixed chunks summed in double, then the chunk sums in order: the result does not depend on the
 * number of threads. */
double grad_sumsq_cpu(const float *g, int64_t n) {
    if (n <= 0) return 0.0;
    int64_t nchunks = (n + GRAD_SUMSQ_CHUNK - 1) / GRAD_SUMSQ_CHUNK;
    double stack_part[64];
    double *part = nchunks <= 64 ? stack_part : (double *)malloc((size_t)nchunks * sizeof(double));
    if (!part) return NAN;
#pragma omp parallel for schedule(static) if (nchunks > 4)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t lo = c * GRAD_SUMSQ_CHUNK, hi = lo + GRAD_SUMSQ_CHUNK < n ? lo + GRAD_SUMSQ_CHUNK : n;
        double s = 0.0;
        for (int64_t i = lo; i < hi; i++) s += (double)g[i] * (double)g[i];
        part[c] = s;
    }
    double total = 0.0;
    for (int64_t c = 0; c < nchunks; c++) total += part[c];
    if (part != stack_part) free(part);
    return total;
}
