/* y = silu(a) * b over n contiguous elements.
 * Backward: da = dy * b * silu'(a), db = dy * silu(a); either destination may be NULL (not needed);
 * acc_a / acc_b add into da / db instead of overwriting.
 * Defined in core/ops/swiglu.c (the CPU kernels, beside the op's tape node: the reference the CUDA
 * kernels are tested against) and kernels/swiglu.cu (the CUDA kernels). */
#pragma once
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void swiglu_forward_cpu(DType dt, void *y, const void *a, const void *b, int64_t n);
void swiglu_backward_cpu(DType dt, void *da, void *db, const void *dy, const void *a, const void *b, int64_t n,
                         int acc_a, int acc_b);

void swiglu_forward_cuda(DType dt, void *y, const void *a, const void *b, int64_t n, void *stream);
void swiglu_backward_cuda(DType dt, void *da, void *db, const void *dy, const void *a, const void *b, int64_t n,
                          int acc_a, int acc_b, void *stream);

#ifdef __cplusplus
}
#endif
