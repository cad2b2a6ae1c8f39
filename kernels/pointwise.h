/* Elementwise activations y = f(x) over n contiguous elements (GDP_POINTWISE_OPS below).
 * An enum picks f; each op has its own OpDef in core/ops/pointwise.c.
 * Backward: dx = dy * f'(x), recomputed from x; `accumulate` adds into dx instead of overwriting.
 * softplus is the stable max(x, 0) + log1p(exp(-|x|)); sigmoid never overflows for large |x|.
 * Defined in core/ops/pointwise.c (the CPU kernels, beside the ops' tape node: the reference the
 * CUDA kernels are tested against) and kernels/pointwise.cu (the CUDA kernels). */
#pragma once
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every pointwise op, one line each: X(ENUM, name, lo, hi) gives PW_ENUM here, and op_<name>, its
 * OpDef op_<name>_def, its registry entry and a gradcheck case on inputs uniform in [lo, hi] in
 * core/ (where bf16 keeps about 3 significant digits of f and f'). A new line then needs only f
 * and f' in the switches of core/ops/pointwise.c and kernels/pointwise.cu (they warn until it has
 * them). */
#define GDP_POINTWISE_OPS(X)          \
    X(SILU, silu, -4, 4)              \
    X(SIGMOID, sigmoid, -4, 4)        \
    X(SOFTPLUS, softplus, -3, 3)      \
    X(EXP, exp, -2, 2)

#define GDP_PW_ENUM(E, name, lo, hi) PW_##E,
typedef enum PointwiseFn { GDP_POINTWISE_OPS(GDP_PW_ENUM) } PointwiseFn;
#undef GDP_PW_ENUM

void pointwise_forward_cpu(PointwiseFn fn, DType dt, void *y, const void *x, int64_t n);
void pointwise_backward_cpu(PointwiseFn fn, DType dt, void *dx, const void *dy, const void *x, int64_t n,
                            int accumulate);

void pointwise_forward_cuda(PointwiseFn fn, DType dt, void *y, const void *x, int64_t n, void *stream);
void pointwise_backward_cuda(PointwiseFn fn, DType dt, void *dx, const void *dy, const void *x, int64_t n,
                             int accumulate, void *stream);

#ifdef __cplusplus
}
#endif
