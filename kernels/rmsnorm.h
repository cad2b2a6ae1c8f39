/* RMSNorm over rows of C contiguous elements: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps);
 * w [C] may be NULL (no scale). Forward stores rstd per row: in the storage dtype on the CPU,
 * float32 on CUDA. Backward:
 *   dx = rstd * (g - xhat * mean(g * xhat)),  g = dy * w,  xhat = x * rstd;
 *   dw[c] = sum over rows of dy * xhat, reduced deterministically: on CUDA each of
 *   rmsnorm_dw_chunks(rows) chunks of rows writes a float partial per column into `partial`
 *   (chunks * C floats of device scratch), then the partials are summed in chunk order.
 * On the CPU dx and dw are separate calls; on CUDA one call makes both (one pass over dy and x when
 * the rows allow); dx or dw may be NULL (partial is read only with dw, which needs w).
 * `accumulate` (acc_x, acc_w) adds into dx / dw instead of overwriting.
 * Defined in core/ops/rmsnorm.c (the CPU kernels, beside the op's tape node: the reference the CUDA
 * kernels are tested against) and kernels/rmsnorm.cu (the CUDA kernels). */
#pragma once
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 64 rows a chunk (a block of the fused backward: 8 steps of 8 rows at C 768), at most 1024. On the
 * H200 at 16384 rows of 768 the backward took 0.0495 ms with 64, 0.0520 with 32 and 0.0499 with 128. */
static inline int64_t rmsnorm_dw_chunks(int64_t rows) {
    int64_t k = (rows + 63) / 64;
    return k < 1 ? 1 : (k > 1024 ? 1024 : k);
}

void rmsnorm_forward_cpu(DType dt, void *y, void *rstd, const void *x, const void *w, int64_t rows, int64_t C,
                         double eps);
void rmsnorm_backward_dx_cpu(DType dt, void *dx, const void *dy, const void *x, const void *w, const void *rstd,
                             int64_t rows, int64_t C, int accumulate);
void rmsnorm_backward_dw_cpu(DType dt, void *dw, const void *dy, const void *x, const void *rstd, int64_t rows,
                             int64_t C, int accumulate);

/* CUDA: x, w and dx of x_dt; y and dy of y_dt, which is x_dt, or bf16 for f32 x. */
void rmsnorm_forward_cuda(DType x_dt, DType y_dt, void *y, float *rstd, const void *x, const void *w, int64_t rows,
                          int64_t C, double eps, void *stream);
void rmsnorm_backward_cuda(DType x_dt, DType y_dt, void *dx, void *dw, float *partial, const void *dy, const void *x,
                           const void *w, const float *rstd, int64_t rows, int64_t C, int acc_x, int acc_w,
                           void *stream);

#ifdef __cplusplus
}
#endif
