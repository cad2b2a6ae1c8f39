/* Mean cross-entropy of logits [N, V] against int32 targets [N] (targets < 0 are ignored):
 *     lse[r] = log sum_v exp(logits[r, v])       (stable: the row max is subtracted first)
 *     loss   = sum over counted rows of (lse[r] - logits[r, t_r]) / count,  0 when count = 0.
 * Forward returns -1, or the first row whose target is >= V (*bad_target receives it).
 * Backward: dlogits[r, v] = (softmax[r, v] - [v == t_r]) * dloss / count for counted rows and 0
 * for ignored rows (set, or added with `accumulate`). Row sums and the final sum run in a fixed
 * order: deterministic.
 * Defined in core/ops/cross_entropy.c (the CPU kernels, beside the op's tape node: the reference the CUDA
 * kernels are tested against) and kernels/cross_entropy.cu (the CUDA kernels). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CPU: logits, loss and lse in dt (f32 or f64), computed in double; count is one int32. */
int64_t cross_entropy_forward_cpu(DType dt, void *loss, void *lse, int32_t *count, const void *logits,
                                  const int32_t *targets, int64_t n, int64_t v, int32_t *bad_target);
void cross_entropy_backward_cpu(DType dt, void *dlogits, const void *dloss, const void *lse, const int32_t *count,
                                const void *logits, const int32_t *targets, int64_t n, int64_t v, int accumulate);

/* CUDA: logits f32 or bf16 (dt); loss, lse and dloss float32; count one int32, all on the device.
 * One block per row. Scratch: cross_entropy_cuda_scratch_bytes(n) bytes of device memory. The
 * forward synchronises the stream once to read the bad-target flag back. */
size_t cross_entropy_cuda_scratch_bytes(int64_t n);
int64_t cross_entropy_forward_cuda(DType dt, float *loss, float *lse, int32_t *count, const void *logits,
                                   const int32_t *targets, int64_t n, int64_t v, void *scratch, int32_t *bad_target,
                                   void *stream);
void cross_entropy_backward_cuda(DType dt, void *dlogits, const float *dloss, const float *lse, const int32_t *count,
                                 const void *logits, const int32_t *targets, int64_t n, int64_t v, int accumulate,
                                 void *stream);

#ifdef __cplusplus
}
#endif
