/* Depthwise causal convolution over time, optionally fused with SiLU: x [B, T, C], w [C, W], y [B, T, C],
 *   pre[b,t,c] = sum_{i<W} w[c,i] * x[b, t-W+1+i, c]   (x before t = 0 is zero),
 *   y = silu ? pre * sigmoid(pre) : pre.
 * Backward, one pass for both gradients; pre is recomputed from x (nothing is saved), and
 * dpre = dy * (silu ? sigmoid(pre) * (1 + pre * (1 - sigmoid(pre))) : 1):
 *   dx[b,t,c] = sum_{i<W, t+W-1-i < T} w[c,i] * dpre[b, t+W-1-i, c];
 *   dw[c,i]   = sum_{b,t} dpre[b,t,c] * x[b, t-W+1+i, c].
 * Both walk time in segments of conv1d_causal_seg_len(B, T) steps per batch row (on CUDA a thread per
 * (channel, segment, batch row), or per 2 to 8 adjacent channels for bf16 when C and the alignment allow,
 * with sliding windows of x and dpre in registers). dw is reduced
 * deterministically: on CUDA every (batch row, segment) writes float partials [C * W] into `partial`
 * (conv1d_causal_dw_chunks(B, T) * C * W floats of device scratch), summed afterwards in a fixed order.
 * W is at most CONV1D_MAX_W. dx or dw NULL skips that gradient (partial may then be NULL too);
 * acc_dx / acc_dw add into dx / dw instead of overwriting.
 * Documents: doc_start, int32 [B, T] (device memory on CUDA) or NULL, is nonzero where a document
 * begins inside a row; a position then reads no x before its document's start, as if its row began
 * there (x before it is zero), so no window crosses a boundary, and the backward is that function's.
 * NULL runs the plain kernels, the same code and bits as without the argument.
 * Defined in core/ops/conv1d_causal.c (the CPU kernels, beside the op's tape node: the reference the CUDA
 * kernels are tested against) and kernels/conv1d_causal.cu (the CUDA kernels). */
#pragma once
#include <stdint.h>

#include "base/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CONV1D_MAX_W 8

/* Time steps per segment: at least 32, so the W-1 steps of window warm-up are a small part of each
 * thread's work, and long enough (a multiple of 32) that B * segments stays below about 1024 + B:
 * the number of dw partials the backward writes and sums again. */
static inline int64_t conv1d_causal_seg_len(int64_t B, int64_t T) {
    int64_t len = (B * T + 1023) / 1024;
    len = (len + 31) / 32 * 32;
    return len < 32 ? 32 : len;
}

static inline int64_t conv1d_causal_segments(int64_t B, int64_t T) {
    int64_t len = conv1d_causal_seg_len(B, T);
    return (T + len - 1) / len;
}

/* Float partials [chunks][C * W] the CUDA backward needs in `partial` (0 when B * T = 0). */
static inline int64_t conv1d_causal_dw_chunks(int64_t B, int64_t T) { return B * conv1d_causal_segments(B, T); }

void conv1d_causal_forward_cpu(DType dt, void *y, const void *x, const void *w, const int32_t *doc_start, int64_t B,
                               int64_t T, int64_t C, int64_t W, int silu);
void conv1d_causal_backward_cpu(DType dt, void *dx, void *dw, const void *dy, const void *x, const void *w,
                                const int32_t *doc_start, int64_t B, int64_t T, int64_t C, int64_t W, int silu,
                                int acc_dx, int acc_dw);

void conv1d_causal_forward_cuda(DType dt, void *y, const void *x, const void *w, const int32_t *doc_start, int64_t B,
                                int64_t T, int64_t C, int64_t W, int silu, void *stream);
void conv1d_causal_backward_cuda(DType dt, void *dx, void *dw, float *partial, const void *dy, const void *x,
                                 const void *w, const int32_t *doc_start, int64_t B, int64_t T, int64_t C, int64_t W,
                                 int silu, int acc_dx, int acc_dw, void *stream);

#ifdef __cplusplus
}
#endif
