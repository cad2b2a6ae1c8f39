/* AdamW update and the deterministic gradient sum of squares, on raw float32 buffers.
 * adamw_update: for i < n (p, g, m, v all indexed by i):
 *     gi = g[i] * grad_scale
 *     p[i] *= 1 - lr * weight_decay
 *     m[i] = beta1 m[i] + (1 - beta1) gi;  v[i] = beta2 v[i] + (1 - beta2) gi^2
 *     p[i] -= (lr / bc1) * m[i] / (sqrt(v[i]) / bc2_sqrt + eps)
 * with bc1 = 1 - beta1^t, bc2_sqrt = sqrt(1 - beta2^t) computed by the caller.
 * grad_sumsq: sum of g[i]^2 in double, summed in a fixed order (chunks of GRAD_SUMSQ_CHUNK on the
 * CPU, a fixed grid and a fixed-order final pass on the GPU): the same bits every run. */
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GRAD_SUMSQ_CHUNK 16384
#define GRAD_SUMSQ_BLOCKS 512 /* CUDA partials: `partials` must hold this many doubles */

void adamw_update_cpu(float *p, const float *g, float *m, float *v, int64_t n, float lr, float beta1, float beta2,
                      float eps, float weight_decay, float grad_scale, float bc1, float bc2_sqrt);
double grad_sumsq_cpu(const float *g, int64_t n);

void adamw_update_cuda(float *p, const float *g, float *m, float *v, int64_t n, float lr, float beta1, float beta2,
                       float eps, float weight_decay, float grad_scale, float bc1, float bc2_sqrt, void *stream);
/* Writes the result to *result_dev (device memory, one double); partials: GRAD_SUMSQ_BLOCKS
 * doubles of device scratch. Asynchronous on stream. */
void grad_sumsq_cuda(const float *g, int64_t n, double *partials, double *result_dev, void *stream);

#ifdef __cplusplus
}
#endif
