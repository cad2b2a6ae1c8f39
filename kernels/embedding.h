/* Embedding lookup: out[p, :] = weight[ids[p], :] for p < n, weight [V, C], ids int32.
 * Forward returns -1, or the first position whose id lies outside [0, V) (its output row is set
 * to zero and *bad_id receives the id): the caller turns that into a fatal error.
 * Backward: dweight[v, :] (+)= sum over positions p with ids[p] == v of dout[p, :], summed in
 * increasing p, so it is deterministic (no float atomics). Rows no id touches are zeroed when
 * not accumulating.
 * Defined in core/ops/embedding.c (the CPU kernels, beside the op's tape node: the reference the CUDA
 * kernels are tested against) and kernels/embedding.cu (the CUDA kernels). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

int64_t embedding_forward_cpu(DType dt, void *out, const void *weight, const int32_t *ids, int64_t n, int64_t v,
                              int64_t c, int32_t *bad_id);
/* CPU: the positions are bucketed by id on the host (a counting sort), then rows are summed in
 * parallel, each by one thread. */
void embedding_backward_cpu(DType dt, void *dweight, const void *dout, const int32_t *ids, int64_t n, int64_t v,
                            int64_t c, int accumulate);

/* CUDA: ids live on the device. `flag` is 8 bytes of device scratch; the call synchronises the
 * stream once to read the out-of-range flag back. flag NULL: no check and no synchronisation (a
 * stream being captured into a CUDA graph); the call returns -1 and an id out of range gives a
 * zero row. */
int64_t embedding_forward_cuda(DType dt, void *out, const void *weight, const int32_t *ids, int64_t n, int64_t v,
                               int64_t c, void *flag, int32_t *bad_id, void *stream);
/* CUDA backward: a stable radix sort of (id, position) pairs (CUB), then one block per vocab row
 * that finds its run of positions by binary search and sums them in order. Needs
 * embedding_backward_cuda_scratch_bytes(n, v) bytes of device scratch. */
size_t embedding_backward_cuda_scratch_bytes(int64_t n, int64_t v);
void embedding_backward_cuda(DType dt, void *dweight, const void *dout, const int32_t *ids, int64_t n, int64_t v,
                             int64_t c, int accumulate, void *scratch, size_t scratch_bytes, void *stream);

#ifdef __cplusplus
}
#endif
