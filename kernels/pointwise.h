/* Elementwise activations y = f(x) over n contiguous elements: silu, sigmoid, softplus, exp.
 * An enum picks f; each op has its own OpDef in core/ops/pointwise.c.
 * Backward: dx = dy * f'(x), recomputed from x; `accumulate` adds into dx instead of overwriting.
 * softplus is the stable max(x, 0) + log1p(exp(-|x|)); sigmoid never overflows for large |x|. */
#pragma once
#include <stdint.h>

#include "core/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum PointwiseFn { PW_SILU = 0, PW_SIGMOID = 1, PW_SOFTPLUS = 2, PW_EXP = 3 } PointwiseFn;

void pointwise_forward_cpu(PointwiseFn fn, DType dt, void *y, const void *x, int64_t n);
void pointwise_backward_cpu(PointwiseFn fn, DType dt, void *dx, const void *dy, const void *x, int64_t n,
                            int accumulate);

void pointwise_forward_cuda(PointwiseFn fn, DType dt, void *y, const void *x, int64_t n, void *stream);
void pointwise_backward_cuda(PointwiseFn fn, DType dt, void *dx, const void *dy, const void *x, int64_t n,
                             int accumulate, void *stream);

#ifdef __cplusplus
}
#endif
