/* Gated RMSNorm over rows of D contiguous elements:
 *   y = o * rstd * w * silu(z),  rstd = 1 / sqrt(mean(o^2) + eps),  w [D].
 * Forward stores rstd per row (storage dtype on the CPU, float32 on CUDA). Backward, with
 * ohat = o * rstd and g = dy * w * silu(z):
 *   do = rstd * (g - ohat * mean(g * ohat)),  dz = dy * ohat * w * silu'(z),
 *   dw[c] = sum over rows of dy * ohat * silu(z), reduced deterministically: on CUDA each of
 *   gated_rmsnorm_dw_chunks(rows) chunks writes float partials [D] into `partial` (chunks * D
 *   floats of device scratch), summed afterwards in chunk order.
 * do / dz may be NULL (not needed); the acc_* flags add instead of overwriting. */
#pragma once
#include <stdint.h>

#include "core/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

static inline int64_t gated_rmsnorm_dw_chunks(int64_t rows) {
    int64_t k = (rows + 63) / 64;
    return k < 1 ? 1 : (k > 1024 ? 1024 : k);
}

void gated_rmsnorm_forward_cpu(DType dt, void *y, void *rstd, const void *o, const void *z, const void *w,
                               int64_t rows, int64_t D, double eps);
void gated_rmsnorm_backward_oz_cpu(DType dt, void *d_o, void *dz, const void *dy, const void *o, const void *z,
                                   const void *w, const void *rstd, int64_t rows, int64_t D, int acc_o, int acc_z);
void gated_rmsnorm_backward_dw_cpu(DType dt, void *dw, const void *dy, const void *o, const void *z, const void *rstd,
                                   int64_t rows, int64_t D, int accumulate);

void gated_rmsnorm_forward_cuda(DType dt, void *y, float *rstd, const void *o, const void *z, const void *w,
                                int64_t rows, int64_t D, double eps, void *stream);
void gated_rmsnorm_backward_oz_cuda(DType dt, void *d_o, void *dz, const void *dy, const void *o, const void *z,
                                    const void *w, const float *rstd, int64_t rows, int64_t D, int acc_o, int acc_z,
                                    void *stream);
void gated_rmsnorm_backward_dw_cuda(DType dt, void *dw, float *partial, const void *dy, const void *o, const void *z,
                                    const float *rstd, int64_t rows, int64_t D, int accumulate, void *stream);

#ifdef __cplusplus
}
#endif
