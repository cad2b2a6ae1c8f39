/* out = alpha * a over n elements; with `accumulate`, out += alpha * a (the backward uses it to
 * write da = alpha * dout under the gradient set-or-accumulate rule). out may equal a.
 * Defined in core/ops/scale.c (the CPU kernels, beside the op's tape node: the reference the CUDA
 * kernels are tested against) and kernels/scale.cu (the CUDA kernels). */
#pragma once
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void scale_cpu(DType dt, void *out, const void *a, double alpha, int64_t n, int accumulate);
void scale_cuda(DType dt, void *out, const void *a, double alpha, int64_t n, int accumulate, void *stream);

#ifdef __cplusplus
}
#endif
