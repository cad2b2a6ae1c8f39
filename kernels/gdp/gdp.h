/* Gated DeltaProduct: the public C API of the op (CPU reference and CUDA kernels).
 * Knows no tensors: plain pointers, a descriptor and a stream, so any program (PyTorch through
 * ctypes, say) can call it on its own buffers. Normative math and layouts:
 * docs/spec.md. Exported from build/libgdp.so.
 *
 * Layouts (row-major, contiguous; B batch, T tokens, H heads, n = n_h or r):
 *              householder        split
 *   q          [B,T,H,K]          [B,T,H,K]
 *   k          [B,T,n,H,K]        [B,T,H,K]      (split: slices of K/r along K)
 *   v          [B,T,n,H,V]        [B,T,H,V]
 *   beta       [B,T,n,H]          [B,T,H]
 *   g          [B,T,H]            [B,T,H]        log decay (natural log), optional
 *   mask       -                  [H,r,r]
 *   h0, ht     [N,H,K,V]          [N,H,K,V]      N = B, or the number of sequences with cu_seqlens
 *   o          [B,T,H,V]          [B,T,H,V]
 * Gradients have the shape of their tensor. dg, dmask, dh0 are written whenever their pointer is
 * non-NULL; the others (dq, dk, dv, dbeta) must be non-NULL.
 *
 * Dtypes. CPU: every floating tensor has desc->dtype (GDP_F32 or GDP_F64).
 * CUDA: q, k, v, beta, o and dq, dk, dv, dbeta, do have desc->dtype (GDP_BF16 or GDP_F32);
 * g, mask, h0, ht, dht, dg, dmask, dh0 are always float32. Accumulation is float32.
 *
 * Variable length: with cu_seqlens (int32, N+1 offsets, cu_seqlens[0] = 0, cu_seqlens[N] = T;
 * host memory for the CPU, device memory for CUDA) B must be 1 and the T tokens hold N packed
 * sequences, each starting from its own h0[i] and ending in ht[i]. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum GdpMode { GDP_MODE_HOUSEHOLDER = 0, GDP_MODE_SPLIT = 1 } GdpMode;

typedef struct GdpDesc {
    GdpMode mode;
    int B, T, H, K, V;
    int n;               /* n_h (householder) or r (split; K % r == 0) */
    double scale;        /* 0 means K^-1/2 */
    DType dtype;         /* see "Dtypes" above */
    const int32_t *cu_seqlens; /* NULL for B independent sequences of length T */
    int n_seqs;          /* N when cu_seqlens is given */
} GdpDesc;

typedef struct GdpForwardArgs {
    const void *q, *k, *v, *beta;
    const void *g;      /* NULL: ungated */
    const void *mask;   /* split mode only */
    const void *h0;     /* NULL: zero initial state */
    void *o;
    void *ht;           /* NULL: final state not wanted */
    /* CUDA only. NULL, or saved_bytes >= gdp_saved_bytes(desc) of device memory: the forward then
     * runs in it (the workspace argument may be NULL) and leaves there the chunk intermediates that
     * the backward would otherwise recompute (see "Saving the forward" below). */
    void *saved;
    size_t saved_bytes;
} GdpForwardArgs;

typedef struct GdpBackwardArgs {
    const void *q, *k, *v, *beta, *g, *mask, *h0; /* as in the forward */
    const void *d_o;    /* upstream gradient of o */
    const void *dht;    /* NULL: no gradient flows into the final state */
    void *dq, *dk, *dv, *dbeta;
    void *dg, *dmask, *dh0; /* NULL: not wanted */
    /* CUDA only. NULL: the backward recomputes the forward's intermediates. Otherwise the buffer a
     * saving forward filled, with this descriptor and these same inputs (unchanged since); the
     * workspace then needs only gdp_backward_scratch_bytes. */
    const void *saved;
} GdpBackwardArgs;

typedef enum GdpStatus {
    GDP_OK = 0,
    GDP_ERR_INVALID = 1,     /* a shape, mode, dtype or pointer that the op does not accept */
    GDP_ERR_UNSUPPORTED = 2, /* valid, but not implemented on this path (e.g. K > 256 on CUDA) */
    GDP_ERR_WORKSPACE = 3,   /* the workspace is smaller than gdp_*_workspace_bytes asked for */
    GDP_ERR_CUDA = 4,        /* a CUDA call failed */
    GDP_ERR_INTERNAL = 5,    /* a bug in gdp (the message says where) */
} GdpStatus;

/* Tokens in one chunk of the CUDA path with n slots a token: floor(64 / n), so that a chunk never
 * cuts a token's slots. Its workspace and saved buffer grow by whole chunks of this many tokens. */
int gdp_chunk_tokens(int n);

/* What is wrong with the last failing call, in words (thread-local). */
const char *gdp_last_error(void);
/* Checks a descriptor for either path; GDP_OK or GDP_ERR_INVALID with gdp_last_error() set. */
GdpStatus gdp_validate(const GdpDesc *desc);

/* CPU reference: a per-token recurrence (float32 or float64); backward is hand-derived. */
GdpStatus gdp_forward_cpu(const GdpDesc *desc, const GdpForwardArgs *args);
GdpStatus gdp_backward_cpu(const GdpDesc *desc, const GdpBackwardArgs *args);

/* CUDA: the chunked (chunk 64) WY/UT algorithm. Pointers are device pointers; the calls are
 * asynchronous on `stream` (a cudaStream_t). Workspace is device memory of at least the size
 * asked for, owned by the caller.
 *
 * Saving the forward. By default the backward recomputes what it needs from the inputs (the
 * per-chunk WY factors and the chunk-start states: two of the forward's three passes). A forward
 * given args->saved keeps them instead, and a backward given the same buffer skips that work:
 * the same results bit for bit, for gdp_saved_bytes of memory held from the forward to the
 * backward (at B 8, T 2048, H 16, K = V = 128, n 2, bf16: 0.91 GB, against 0.40 GB for q, k, v and o). */
size_t gdp_forward_workspace_bytes(const GdpDesc *desc);
size_t gdp_backward_workspace_bytes(const GdpDesc *desc);  /* a backward that recomputes */
size_t gdp_saved_bytes(const GdpDesc *desc);               /* args->saved of a saving forward */
size_t gdp_backward_scratch_bytes(const GdpDesc *desc);    /* a backward given args->saved */
GdpStatus gdp_forward_cuda(const GdpDesc *desc, const GdpForwardArgs *args, void *workspace, size_t workspace_bytes,
                           void *stream);
GdpStatus gdp_backward_cuda(const GdpDesc *desc, const GdpBackwardArgs *args, void *workspace,
                            size_t workspace_bytes, void *stream);

#ifdef __cplusplus
}
#endif
