/* Gated DeltaProduct, CUDA path: the chunk grid and the workspace layout (internal; shared by
 * the kernels in kernels/gdp/ and the GPU test, which reads intermediates back to check each
 * kernel on its own). Plain C, host side only.
 *
 * The chunk grid. Rows are the interleaved (token, slot) pairs, row p = t*n + j. A chunk holds
 * Ct = floor(64/n) whole tokens, i.e. n*Ct <= 64 rows, so a chunk never cuts a token's slots
 * (required in split mode, harmless in householder mode) and the output, the state pass and the
 * whole backward use this one grid. Chunks never straddle sequences; each sequence's last chunk
 * is partial and masked (nothing is padded in memory: padded rows are zeros in shared memory).
 *
 * Per chunk and head ("chunk-head" ch = ci*H + h) the workspace keeps, row-major with padded
 * widths KP = roundup(K,32), VP = roundup(V,32) and 64 rows (padding stored as zeros):
 *   G    float [64]          chunk-local inclusive cumsum of g per token (first Ct used)
 *   W    op    [64][KP]      T diag(beta*gamma) R
 *   Kwd  op    [64][KP]      diag(e^{G_last - G}) K_w
 *   U    op    [64][VP]      T diag(beta) V
 *   P    op    [Ctp][64]     scale * incl(tok(s) <= t) * e^{G_t - G_s} <q_t, K_w,s>
 *   h    op    [KP][VP]      state at the chunk start
 *   D    op    [64][VP]      Delta = U - W h
 *   T    op    [64][64]      (I + A)^-1, for the WY backward (a saving forward and the backward)
 * The backward's scratch, after those (or in a buffer of its own when the forward saved them):
 *   dh   op    [KP][VP]      gradient w.r.t. the state at the chunk end
 *   dD   op    [64][VP]      dL/dDelta
 *   dW   op    [64][KP]      dL/dW
 *   dKw  op    [64][KP]      dL/dK_w through the output and the state write
 *   dGa  float [nkt][64]     per-row gate-gradient parts from the dq/dk kernel, per K tile
 *   dM   float [n*n]         split mode: this chunk-head's mask gradient
 * "op" is the operand type of the tensor-core products: bf16 for bf16 inputs, float for f32. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "kernels/gdp/gdp.h"

#define GDP_CHUNK 64 /* rows per chunk (padded) */
#define GDP_TILE 64  /* K and V tile width of the per-chunk kernels */

typedef struct GdpSeqInfo {
    int base; /* flattened token index (b*T + t) of the sequence's first token */
    int len;  /* tokens */
    int c0;   /* index of its first chunk; entry N holds the total chunk count */
    int pad;
} GdpSeqInfo;

typedef struct GdpChunkInfo {
    int seq;  /* sequence */
    int tok0; /* flattened token index of the chunk's first token */
    int ct;   /* tokens in this chunk (1..Ct) */
    int c;    /* chunk index inside its sequence */
} GdpChunkInfo;

typedef struct GdpLayout {
    int mode, n, H, K, V, KP, VP, Ct, Ctp, N, NCmax, op_bytes, nkt, nvt;
    int64_t CH; /* chunk-heads: NCmax * H */
    /* elements per chunk-head */
    int64_t sG, sW, sU, sP, sH, sD, sdGa, sdM;
    /* byte offsets into the workspace */
    size_t o_seq, o_chunk, o_G, o_W, o_Kwd, o_U, o_P, o_h, o_D, o_dh, o_dD, o_dW, o_dKw, o_dGa, o_dM, o_T;
    size_t bytes_fwd;     /* the forward: tables through D */
    size_t bytes_saved;   /* what a saving forward leaves for the backward: tables through T */
    size_t bytes_scratch; /* the backward's own part, dh through dM; it starts at offset bytes_saved */
    size_t bytes_bwd;     /* the backward that recomputes: bytes_saved + bytes_scratch */
} GdpLayout;

static inline size_t gdp_align256_(size_t x) { return (x + 255) & ~(size_t)255; }

/* Fills *p from a descriptor that gdp_validate accepted (sizes only; nothing is checked here). */
static inline void gdp_layout_make(const GdpDesc *d, GdpLayout *p) {
    p->mode = (int)d->mode;
    p->n = d->n;
    p->H = d->H;
    p->K = d->K;
    p->V = d->V;
    p->KP = (d->K + 31) / 32 * 32;
    p->VP = (d->V + 31) / 32 * 32;
    p->Ct = gdp_chunk_tokens(d->n);
    p->Ctp = (p->Ct + 15) / 16 * 16;
    p->N = d->cu_seqlens ? d->n_seqs : d->B;
    p->NCmax = d->cu_seqlens ? (d->T + p->Ct - 1) / p->Ct + p->N : d->B * ((d->T + p->Ct - 1) / p->Ct);
    p->op_bytes = d->dtype == GDP_BF16 ? 2 : 4;
    p->nkt = (p->KP + GDP_TILE - 1) / GDP_TILE;
    p->nvt = (p->VP + GDP_TILE - 1) / GDP_TILE;
    p->CH = (int64_t)p->NCmax * p->H;
    p->sG = GDP_CHUNK;
    p->sW = (int64_t)GDP_CHUNK * p->KP;
    p->sU = (int64_t)GDP_CHUNK * p->VP;
    p->sP = (int64_t)p->Ctp * GDP_CHUNK;
    p->sH = (int64_t)p->KP * p->VP;
    p->sD = (int64_t)GDP_CHUNK * p->VP;
    p->sdGa = (int64_t)p->nkt * GDP_CHUNK;
    p->sdM = d->mode == GDP_MODE_SPLIT ? (int64_t)d->n * d->n : 0;
    size_t o = 0, ob = (size_t)p->op_bytes, CH = (size_t)p->CH;
    p->o_seq = o;   o = gdp_align256_(o + sizeof(GdpSeqInfo) * (size_t)(p->N + 1));
    p->o_chunk = o; o = gdp_align256_(o + sizeof(GdpChunkInfo) * (size_t)p->NCmax);
    p->o_G = o;     o = gdp_align256_(o + 4 * CH * (size_t)p->sG);
    p->o_W = o;     o = gdp_align256_(o + ob * CH * (size_t)p->sW);
    p->o_Kwd = o;   o = gdp_align256_(o + ob * CH * (size_t)p->sW);
    p->o_U = o;     o = gdp_align256_(o + ob * CH * (size_t)p->sU);
    p->o_P = o;     o = gdp_align256_(o + ob * CH * (size_t)p->sP);
    p->o_h = o;     o = gdp_align256_(o + ob * CH * (size_t)p->sH);
    p->o_D = o;     o = gdp_align256_(o + ob * CH * (size_t)p->sD);
    p->bytes_fwd = o;
    p->o_T = o;     o = gdp_align256_(o + ob * CH * (size_t)(GDP_CHUNK * GDP_CHUNK));
    p->bytes_saved = o;
    p->o_dh = o;    o = gdp_align256_(o + ob * CH * (size_t)p->sH);
    p->o_dD = o;    o = gdp_align256_(o + ob * CH * (size_t)p->sD);
    p->o_dW = o;    o = gdp_align256_(o + ob * CH * (size_t)p->sW);
    p->o_dKw = o;   o = gdp_align256_(o + ob * CH * (size_t)p->sW);
    p->o_dGa = o;   o = gdp_align256_(o + 4 * CH * (size_t)p->sdGa);
    p->o_dM = o;    o = gdp_align256_(o + 4 * CH * (size_t)(p->sdM > 0 ? p->sdM : 1));
    p->bytes_bwd = o;
    p->bytes_scratch = o - p->bytes_saved;
}
