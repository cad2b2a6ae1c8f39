/* Gated RMSNorm over rows of D contiguous elements:
 *   y = o * rstd * w * silu(z),  rstd = 1 / sqrt(mean(o^2) + eps),  w [D].
 * Forward stores rstd per row (storage dtype on the CPU, float32 on CUDA). Backward, with
 * ohat = o * rstd and g = dy * w * silu(z):
 *   do = rstd * (g - ohat * mean(g * ohat)),  dz = dy * ohat * w * silu'(z),
 *   dw[c] = sum over rows of dy * ohat * silu(z), reduced deterministically: on CUDA each of
 *   gated_rmsnorm_dw_chunks(rows) chunks of rows writes float partials [D] into `partial` (chunks * D
 *   floats of device scratch), summed afterwards in chunk order.
 * On the CPU dz / do and dw are separate calls; on CUDA one call makes all three (one pass over dy, o
 * and z when the rows allow). do / dz / dw may be NULL (not needed; partial is read only with dw); the
 * acc_* flags add instead of overwriting.
 * Defined in core/ops/gated_rmsnorm.c (the CPU kernels, beside the op's tape node: the reference the CUDA
 * kernels are tested against) and kernels/gated_rmsnorm.cu (the CUDA kernels). */
#pragma once
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 256 rows a chunk (a block of the fused backward: 16 steps of 16 rows at D 128), at most 1024. On the
 * H200 at 98304 rows of 128 the backward with dw took 0.0468 ms with 256, 0.0503 with 128 and 0.0513
 * with 64: fewer blocks than the chip holds at once, so no partly filled last wave. */
static inline int64_t gated_rmsnorm_dw_chunks(int64_t rows) {
    int64_t k = (rows + 255) / 256;
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
void gated_rmsnorm_backward_cuda(DType dt, void *d_o, void *dz, void *dw, float *partial, const void *dy,
                                 const void *o, const void *z, const void *w, const float *rstd, int64_t rows,
                                 int64_t D, int acc_o, int acc_z, int acc_w, void *stream);

#ifdef __cplusplus
}
#endif
