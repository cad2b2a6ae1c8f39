/* Recurrent decoding: one token at a time with O(1) state per layer (the last conv_size-1 inputs
 * of each short conv and the H x K x V recurrent state), no tape. Works for both modes and on
 * either device: the model's device picks the backend (float32 parameters). On the CPU the step
 * is written out in layers/decode.c; on CUDA (layers/decode_cuda.c) everything stays on the GPU
 * (cuBLAS matvecs, the small kernels of the ops, kernels/gdp/decode.cu for the state update) and
 * only the logits come back. Its logits equal model_forward's at the same position (checked in
 * tests/test_model.c on the CPU, tests/gpu/test_gpu_decode.c on CUDA). */
#pragma once
#include <stdint.h>

#include "layers/model.h"

typedef struct DecodeLayerState {
    float *conv_q, *conv_k, *conv_v; /* [conv_size-1, C], oldest first */
    float *S, *S_next;               /* [H, K, V] */
} DecodeLayerState;

typedef struct DecodeState {
    const Model *m;
    struct DecodeCuda *cuda; /* the CUDA backend's buffers (NULL on the CPU) */
    DecodeLayerState *layers; /* CPU backend */
    int64_t pos;    /* tokens consumed */
    float *scratch; /* per-token work buffers */
    size_t scratch_floats;
} DecodeState;

void decode_init(DecodeState *st, const Model *m);
void decode_reset(DecodeState *st); /* back to the empty prefix */
void decode_free(DecodeState *st);
/* Consumes `token` and writes the next-position logits (cfg_out_dim floats, host memory). */
void decode_step(DecodeState *st, int token, float *logits);

/* Samples from logits (modified in place): temperature <= 0 is greedy (argmax); top_k > 0 keeps
 * only the k largest. */
int sample_logits(float *logits, int n, double temperature, int top_k, Rng *rng);
