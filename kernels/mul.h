/* out = a * b with b broadcast: a is [outer, inner], b is [inner]; with `accumulate`, out += a * b
 * (the backward writes da = dout * b this way). Backward for b: db[j] = sum over outer of
 * dout[o, j] * a[o, j] (set, or added with `accumulate`), in a fixed order: deterministic.
 * Defined in core/ops/mul.c (the CPU kernels, beside the op's tape node: the reference the CUDA
 * kernels are tested against) and kernels/mul.cu (the CUDA kernels). */
#pragma once
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void mul_forward_cpu(DType dt, void *out, const void *a, const void *b, int64_t outer, int64_t inner, int accumulate);
void mul_backward_b_cpu(DType dt, void *db, const void *dout, const void *a, int64_t outer, int64_t inner,
                        int accumulate);

void mul_forward_cuda(DType dt, void *out, const void *a, const void *b, int64_t outer, int64_t inner, int accumulate,
                      void *stream);
void mul_backward_b_cuda(DType dt, void *db, const void *dout, const void *a, int64_t outer, int64_t inner,
                         int accumulate, void *stream);

#ifdef __cplusplus
}
#endif
