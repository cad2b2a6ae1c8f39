/* out = a + b with b broadcast: a is [outer, inner], b is [inner].
 * Backward: da = dout, db[j] = sum over outer of dout[., j]; `accumulate` adds into the
 * destination instead of overwriting it (the gradient set-or-accumulate rule).
 * Defined in core/ops/add.c (the CPU kernels, beside the op's tape node: the reference the CUDA
 * kernels are tested against) and kernels/add.cu (the CUDA kernels). */
#pragma once
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

void add_forward_cpu(DType dt, void *out, const void *a, const void *b, int64_t outer, int64_t inner);
void add_backward_b_cpu(DType dt, void *db, const void *dout, int64_t outer, int64_t inner, int accumulate);

/* CUDA: out and a of a_dt, b of b_dt: a_dt, or bf16 for f32 a (a bf16 branch into the f32
 * residual stream). */
void add_forward_cuda(DType a_dt, DType b_dt, void *out, const void *a, const void *b, int64_t outer, int64_t inner,
                      void *stream);
void add_backward_b_cuda(DType dt, void *db, const void *dout, int64_t outer, int64_t inner, int accumulate,
                         void *stream);

#ifdef __cplusplus
}
#endif
