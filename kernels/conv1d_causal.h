/* Depthwise causal convolution over time: x [B, T, C], w [C, W], y [B, T, C],
 *   y[b,t,c] = sum_{i<W} w[c,i] * x[b, t-W+1+i, c]   (x before t = 0 is zero).
 * Backward:
 *   dx[b,t,c] = sum_{i<W, t+W-1-i < T} w[c,i] * dy[b, t+W-1-i, c];
 *   dw[c,i]   = sum_{b,t} dy[b,t,c] * x[b, t-W+1+i, c], reduced deterministically: on CUDA each of
 *   conv1d_causal_dw_chunks(B*T) chunks of (b,t) rows writes float partials [C*W] into `partial`
 *   (chunks * C * W floats of device scratch), summed afterwards in chunk order.
 * W is at most CONV1D_MAX_W. `accumulate` adds into dx / dw instead of overwriting. */
#pragma once
#include <stdint.h>

#include "core/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CONV1D_MAX_W 8

static inline int64_t conv1d_causal_dw_chunks(int64_t rows) {
    int64_t k = (rows + 63) / 64;
    return k < 1 ? 1 : (k > 1024 ? 1024 : k);
}

void conv1d_causal_forward_cpu(DType dt, void *y, const void *x, const void *w, int64_t B, int64_t T, int64_t C,
                               int64_t W);
void conv1d_causal_backward_dx_cpu(DType dt, void *dx, const void *dy, const void *w, int64_t B, int64_t T, int64_t C,
                                   int64_t W, int accumulate);
void conv1d_causal_backward_dw_cpu(DType dt, void *dw, const void *dy, const void *x, int64_t B, int64_t T, int64_t C,
                                   int64_t W, int accumulate);

void conv1d_causal_forward_cuda(DType dt, void *y, const void *x, const void *w, int64_t B, int64_t T, int64_t C,
                                int64_t W, void *stream);
void conv1d_causal_backward_dx_cuda(DType dt, void *dx, const void *dy, const void *w, int64_t B, int64_t T,
                                    int64_t C, int64_t W, int accumulate, void *stream);
void conv1d_causal_backward_dw_cuda(DType dt, void *dw, float *partial, const void *dy, const void *x, int64_t B,
                                    int64_t T, int64_t C, int64_t W, int accumulate, void *stream);

#ifdef __cplusplus
}
#endif
