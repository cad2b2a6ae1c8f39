/* The CUDA per-token step of layers/decode.h (internal to layers/decode.c, which dispatches on the
 * model's device). Without CUDA in the build each call is a fatal error naming the problem. */
#pragma once
#include <stdbool.h>

#include "layers/decode.h"

void decode_cuda_init(DecodeState *st);   /* sets st->cuda; the model lives on CUDA */
void decode_cuda_reset(DecodeState *st);  /* zero conv caches and states, pos = 0 */
void decode_cuda_free(DecodeState *st);
/* One token: every layer on the GPU, then the logits (cfg_out_dim floats) copied to host `logits`
 * (the call returns once they are there). */
void decode_cuda_step(DecodeState *st, int token, float *logits);
/* Copies the step's conv caches and states into st->state (to_model) or back (the same layouts,
 * batch 1, device to device), around a prefill through the chunked forward. */
void decode_cuda_sync_state(DecodeState *st, bool to_model);
