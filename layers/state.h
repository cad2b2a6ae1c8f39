/* The model's recurrent state for inference: per layer the short convs' last W-1 inputs and the
 * GDP op's H x K x V state, for B sequences. model_forward_state runs the training forward
 * (layers/model.c, layers/gdp_layer.c) from this state and leaves it at the state after the
 * chunk's last token, so a prompt of L tokens in one call (the chunked op: a prefill) and L calls
 * of one token (decoding, where the op runs its per-token kernel) give the same logits, on the CPU
 * and on CUDA alike. The memory is the state's own, on the model's device, outside the context's
 * arenas, and never moves: a CUDA graph of a decode step holds its addresses
 * (layers/decode_graph.h). The forward's activations come from the arenas as usual.
 * While the stream is being captured nothing in model_forward_state synchronises it or allocates
 * device memory (the embedding's id check, which reads a flag back, is left to the caller then),
 * so a step of it can be captured; model_prefill_host copies ids in and logits out, synchronously. */
#pragma once
#include <stdint.h>

#include "layers/model.h"

typedef struct ModelState {
    const Model *m;
    int64_t B;              /* sequences */
    GdpLayerState *layers;  /* one per block */
    void *mem;              /* every layer's tensors, one allocation on the model's device */
    size_t bytes;
    int64_t pos;            /* tokens consumed per sequence */
} ModelState;

void model_state_init(ModelState *s, const Model *m, int64_t B); /* zero state, pos 0 */
void model_state_reset(ModelState *s);
void model_state_free(ModelState *s);
/* dst = src (same model config and B; either device). */
void model_state_copy(ModelState *dst, const ModelState *src);
/* Rows [row, row + n) of s as a state of batch n over the same memory, so that one sequence of a
 * batch can be prefilled alone or a batch stepped in groups of rows. The view owns no state memory;
 * model_state_free frees only its headers. Valid while s is. */
void model_state_rows(ModelState *view, const ModelState *s, int64_t row, int64_t n);
/* Copies n rows of src from src_row into dst from dst_row (the same model; either device; rows of one
 * state may be copied within it when the ranges do not overlap). */
void model_state_copy_rows(ModelState *dst, int64_t dst_row, const ModelState *src, int64_t src_row, int64_t n);

/* ids int32 [B, T] -> logits [B, T, out], continuing from s and updating it. Recording must be off
 * (ctx->grad_enabled false); recomputation flags are ignored. The logits live in the acts arena. */
Tensor *model_forward_state(Model *m, Tensor *ids, ModelState *s);

/* Host convenience: B sequences of T tokens each (row-major host int32 [B*T]) through
 * model_forward_state in chunks of at most `chunk` tokens (0: all at once), writing the logits of
 * each sequence's last position to host `last` [B, out] (may be NULL). Activations are released
 * after each chunk (the acts and scratch arenas and step headers are rewound to where they were). */
void model_prefill_host(Model *m, ModelState *s, const int32_t *ids, int64_t T, int64_t chunk, float *last);
/* model_prefill_host with the last position's logits left on the model's device: returns them,
 * float32 [B, out], in the acts arena above the mark it had on entry, which the arenas are rewound
 * to: work that reads or overwrites them must be enqueued on the context's stream before the next
 * forward. */
float *model_prefill_device(Model *m, ModelState *s, const int32_t *ids, int64_t T, int64_t chunk);
