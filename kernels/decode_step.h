/* Small per-token kernels of the recurrent decoder on CUDA (layers/decode_cuda.c), float32, one
 * token, asynchronous on `stream`. Their CPU forms are the static helpers of layers/decode.c (the
 * decoder's own loops); tests/gpu/test_gpu_decode.c checks the whole CUDA step against the chunked
 * forward. Knows no tensors. */
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Depthwise causal conv step + SiLU for C channels with width W (1 <= W <= 8):
 *   y[c] = silu(w[c, W-1] x[c] + sum_{i < W-1} w[c, i] cache[i, c]),  w [C, W] (the [C, 1, W] weight),
 * then the window moves on: cache [W-1, C] (oldest first) drops row 0 and appends x.
 * w == NULL: y = silu(x) and no cache. y must not alias x or cache. */
void decode_conv_silu_step_cuda(float *y, float *cache, const float *x, const float *w, int64_t C, int W,
                                void *stream);

/* The forget gate: g[h] = -exp(A_log[h]) * softplus(a[h] + dt_bias[h]) for h < H. */
void decode_gate_cuda(float *g, const float *a, const float *A_log, const float *dt_bias, int64_t H, void *stream);

#ifdef __cplusplus
}
#endif
