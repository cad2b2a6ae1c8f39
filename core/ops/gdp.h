/* The Gated DeltaProduct op on tensors, with its autograd node: the glue between the tape and the
 * public kernel API of kernels/gdp/gdp.h (CPU reference or CUDA kernels by ctx->device).
 * Math and layouts: docs/spec.md §1. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/ops.h"
#include "kernels/gdp/gdp.h"

typedef struct GdpOpArgs {
    GdpMode mode;
    int n;           /* n_h (householder) or r (split); 0: taken from k's (householder) or mask's (split) shape */
    double scale;    /* 0: K^-1/2 */
    /* householder: q [B,T,H,K], k [B,T,n,H,K], v [B,T,n,H,V], beta [B,T,n,H]
     * split:       q [B,T,H,K], k [B,T,H,K],   v [B,T,H,V],   beta [B,T,H], mask [H,r,r] */
    Tensor *q, *k, *v, *beta;
    Tensor *g;       /* [B,T,H] log decay, or NULL (ungated) */
    Tensor *mask;    /* split mode only */
    Tensor *h0;      /* [N,H,K,V] initial states, or NULL (zeros) */
    /* Variable length: host array of N+1 int32 offsets (cu[0] = 0, cu[N] = T, strictly
     * increasing), B must be 1; NULL for B sequences of length T. Copied, so it may be freed. */
    const int32_t *cu_seqlens;
    int n_seqs;      /* N with cu_seqlens */
    Tensor **ht_out; /* non-NULL: receives the final states ht [N,H,K,V] (an output of the node) */
    /* CUDA, when the node is recorded: keep the forward's chunk intermediates (gdp_saved_bytes of
     * activation memory) so that the backward skips recomputing them (kernels/gdp/gdp.h,
     * "Saving the forward"). The gradients are the same bit for bit either way. */
    bool save_for_backward;
} GdpOpArgs;

/* o [B,T,H,V] (q's dtype). Dtypes: on the CPU every tensor f32 or every tensor f64; on CUDA q, k,
 * v, beta share bf16 or f32 and g, mask, h0 are f32 (ht is then f32). All inputs contiguous.
 * A wrong shape, dtype, device or layout is a fatal error naming the argument. */
Tensor *op_gated_deltaproduct(Ctx *ctx, const GdpOpArgs *a);

extern const OpDef op_gated_deltaproduct_def;
