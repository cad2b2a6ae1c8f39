/* Gated DeltaProduct, one decode step: the op of kernels/gdp/gdp.h for T = 1 with the
 * state updated in place, for every (batch row, head) at once. Both modes of
 * docs/spec.md §1:
 *   S <- e^g S;  householder: for j < n, S <- S + beta_j k_j (v_j - S^T k_j)^T;
 *                split: P[b] = k^(b)T S^(b), S^(a) <- S^(a) + beta k^(a) (v - sum_b M[a,b] P[b])^T;
 *   o = scale S^T q.
 * Layouts are the op's with T = 1 (row-major, contiguous; n = n_h or r):
 *              householder        split
 *   S          [B,H,K,V]          [B,H,K,V]      read and written in place
 *   q          [B,H,K]            [B,H,K]
 *   k          [B,n,H,K]          [B,H,K]        (split: slices of K/r along K)
 *   v          [B,n,H,V]          [B,H,V]
 *   beta       [B,n,H]            [B,H]
 *   g          [B,H]              [B,H]          log decay, optional (NULL: ungated)
 *   mask       -                  [H,r,r]
 *   o          [B,H,V]            [B,H,V]
 * The descriptor is the op's GdpDesc with T = 1 and no cu_seqlens. Knows no tensors. The op's tape
 * node (core/ops/gdp.c) runs it for a step from h0 to ht that is not recorded (decoding).
 * CPU: desc->dtype GDP_F32 or GDP_F64 for every array (a plain loop, the reference).
 * CUDA: float32 throughout (desc->dtype GDP_F32), device pointers, asynchronous on `stream`;
 * K at most GDP_DECODE_MAX_K, any V. One CTA per (b, h, 32-column tile of V) holds its K x 32
 * tile of S in registers, so S must not alias q, k, v, beta, g, mask or o. */
#pragma once
#include "kernels/gdp/gdp.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GDP_DECODE_MAX_K 256

typedef struct GdpDecodeArgs {
    void *S;                    /* state, updated in place */
    const void *q, *k, *v, *beta;
    const void *g;              /* NULL: ungated */
    const void *mask;           /* split mode only */
    void *o;
} GdpDecodeArgs;

GdpStatus gdp_decode_step_cpu(const GdpDesc *desc, const GdpDecodeArgs *args);
GdpStatus gdp_decode_step_cuda(const GdpDesc *desc, const GdpDecodeArgs *args, void *stream);

/* The argument checks both entry points make (gdp_validate, T = 1, no cu_seqlens, the required
 * pointers); GDP_OK or GDP_ERR_INVALID with gdp_last_error() set. `who` names the caller. */
GdpStatus gdp_decode_check(const char *who, const GdpDesc *desc, const GdpDecodeArgs *args);

#ifdef __cplusplus
}
#endif
