/* Full reductions for op_sum and op_mean: out[0] = scale * sum(x[0..n)) (scale 1 for a sum,
 * 1/n for a mean). Deterministic: the partition into blocks depends only on n and the partials
 * are added in a fixed order (no float atomics), so a run repeats bit for bit.
 * Backward: dx[i] = scale * dout[0] for every i (set, or added with `accumulate`).
 * Defined in core/ops/sum.c (the CPU kernels, beside the op's tape node: the reference the CUDA
 * kernels are tested against) and kernels/sum.cu (the CUDA kernels). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sums in double for both f32 and f64. */
void sum_forward_cpu(DType dt, void *out, const void *x, int64_t n, double scale);
void sum_backward_cpu(DType dt, void *dx, const void *dout, int64_t n, double scale, int accumulate);

/* Device scratch the CUDA forward needs for its block partials (float32 accumulation). */
size_t sum_cuda_scratch_bytes(int64_t n);
void sum_forward_cuda(DType dt, void *out, const void *x, int64_t n, double scale, void *scratch, void *stream);
void sum_backward_cuda(DType dt, void *dx, const void *dout, int64_t n, double scale, int accumulate, void *stream);

#ifdef __cplusplus
}
#endif
