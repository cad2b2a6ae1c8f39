/* Recurrent decoding: a prompt through the chunked forward (a prefill), then one token at a time
 * with O(1) state per layer (the last conv_size-1 inputs of each short conv and the H x K x V
 * recurrent state), no tape. Both modes, either device (float32 parameters).
 * On the CPU prefill and step are model_forward_state (layers/state.h): the training forward with
 * the state as input and output, so the model is written once. On CUDA the prefill is the same
 * (the chunked CUDA op) and the per-token step is layers/decode_cuda.c, which keeps every layer of
 * a token on the GPU (cuBLAS matvecs, the per-token state-update kernel) and returns only the
 * logits; the state moves between the two on the device. Logits after a prefill of L tokens equal
 * those after L steps (tests/test_model.c on the CPU, tests/gpu/test_gpu_decode.c on CUDA). */
#pragma once
#include <stdint.h>

#include "layers/model.h"
#include "layers/state.h"

/* Prompt tokens per chunked forward in decode_prefill; its activations must fit the context's
 * arenas (plan them for 2 x this many tokens: the state path keeps the conv windows too). */
#define DECODE_PREFILL_CHUNK 256

typedef struct DecodeState {
    Model *m;
    struct DecodeCuda *cuda; /* the CUDA step's buffers (NULL on the CPU) */
    ModelState state;        /* CPU: the state; CUDA: the prefill's (the step keeps its own) */
    int64_t pos;             /* tokens consumed */
} DecodeState;

void decode_init(DecodeState *st, Model *m);
void decode_reset(DecodeState *st); /* back to the empty prefix */
void decode_free(DecodeState *st);
/* Consumes `token` and writes the next-position logits (cfg_out_dim floats, host memory). */
void decode_step(DecodeState *st, int token, float *logits);
/* Consumes n >= 1 tokens with the chunked forward (DECODE_PREFILL_CHUNK at a time) and writes the
 * logits after the last one, as n decode_step calls would. */
void decode_prefill(DecodeState *st, const int32_t *tokens, int64_t n, float *logits);

/* Sampling settings: temperature <= 0 is greedy (argmax); top_k > 0 keeps the k most likely tokens;
 * 0 < top_p < 1 keeps the smallest set whose probability reaches top_p (after top-k); a
 * repetition_penalty != 1 divides positive logits (multiplies negative ones) of tokens already
 * in `history`, as Hugging Face's RepetitionPenaltyLogitsProcessor does. */
typedef struct SampleParams {
    double temperature;
    int top_k;
    double top_p;
    double repetition_penalty;
} SampleParams;

/* The next token from logits [n] (modified in place); history [n_hist] may be NULL. */
int sample_next(float *logits, int n, const SampleParams *p, const int32_t *history, int64_t n_hist, Rng *rng);
/* sample_next with temperature and top-k only. */
int sample_logits(float *logits, int n, double temperature, int top_k, Rng *rng);
