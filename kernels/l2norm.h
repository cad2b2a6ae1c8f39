/* L2 normalisation of rows of `group` contiguous elements: y = x * rstd, rstd = 1 / sqrt(sum(x^2) + eps).
 * Forward stores rstd per row (storage dtype on the CPU, float32 on CUDA).
 * Backward: dx = rstd * (dy - y * sum(dy * y)); `accumulate` adds into dx.
 * Defined in core/ops/l2norm.c (the CPU kernels, beside the op's tape node: the reference the CUDA
 * kernels are tested against) and kernels/l2norm.cu (the CUDA kernels). */
#pragma once
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void l2norm_forward_cpu(DType dt, void *y, void *rstd, const void *x, int64_t rows, int64_t group, double eps);
void l2norm_backward_cpu(DType dt, void *dx, const void *dy, const void *x, const void *rstd, int64_t rows,
                         int64_t group, int accumulate);

void l2norm_forward_cuda(DType dt, void *y, float *rstd, const void *x, int64_t rows, int64_t group, double eps,
                         void *stream);
void l2norm_backward_cuda(DType dt, void *dx, const void *dy, const void *x, const float *rstd, int64_t rows,
                          int64_t group, int accumulate, void *stream);

#ifdef __cplusplus
}
#endif
