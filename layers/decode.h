/* Recurrent decoding: a prompt through the chunked forward (a prefill), then one token at a time
 * with O(1) state per layer (the last conv_size-1 inputs of each short conv and the H x K x V
 * recurrent state), no tape. Both modes, either device (float32 parameters), one model definition:
 * prefill and step are model_forward_state (layers/state.h), the training forward with the state as
 * input and output, a prompt chunk at a time or T = 1, where the GDP op runs its per-token kernel
 * (kernels/gdp/decode.h) instead of the chunked one. The state stays on the model's device; only
 * the logits come back. On CUDA a step is replayed from a CUDA graph (layers/decode_graph.h).
 * Logits after a prefill of L tokens equal those after L steps (tests/test_model.c on the CPU,
 * tests/gpu/test_gpu_decode.c on CUDA). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "layers/decode_graph.h"
#include "layers/model.h"
#include "layers/state.h"

/* Prompt tokens per chunked forward in decode_prefill; its activations must fit the context's
 * arenas (plan them for 2 x this many tokens: the state path keeps the conv windows too). */
#define DECODE_PREFILL_CHUNK 256

/* One sequence (gdp generate). */
typedef struct DecodeState {
    Model *m;
    ModelState state;  /* batch 1, on the model's device */
    DecodeGraph graph; /* graph.enabled (decode_init: true): a CUDA step replays a captured graph */
    int64_t pos;       /* tokens consumed */
} DecodeState;

void decode_init(DecodeState *st, Model *m);
void decode_reset(DecodeState *st); /* back to the empty prefix */
void decode_free(DecodeState *st);
/* Consumes `token` and writes the next-position logits (cfg_out_dim floats, host memory). */
void decode_step(DecodeState *st, int token, float *logits);
/* Consumes n >= 1 tokens with the chunked forward (DECODE_PREFILL_CHUNK at a time) and writes the
 * logits after the last one, as n decode_step calls would. */
void decode_prefill(DecodeState *st, const int32_t *tokens, int64_t n, float *logits);

/* Rows one step of a batch runs at once: what arenas planned for 2 x DECODE_PREFILL_CHUNK tokens
 * (as the loaders plan them) hold. A step of r rows takes r tokens of activations and r conv windows
 * of P + 1 rows (P = conv_size - 1, 0 without short convs), so r (P + 2) <= 2 x DECODE_PREFILL_CHUNK. */
int64_t decode_group_rows(const ModelConfig *c);

/* n sequences decoded together (the C API's batches, api/gdp_model.h). A prefill runs each prompt
 * alone through the chunked forward into its row of the state (model_state_rows); a step runs the
 * live rows together, a row per sequence, in groups of at most `group` rows (one decode_graph_step
 * each). A sequence that ends leaves: the rows after it move up (model_state_copy_rows), so an ended
 * sequence costs nothing and every sequence gets the logits it would get alone. */
typedef struct DecodeBatch {
    Model *m;
    int n;             /* sequences */
    int live;          /* sequences not ended: rows 0..live-1 of state, in sequence order */
    int64_t group;     /* decode_group_rows */
    ModelState state;  /* n rows on the model's device */
    bool *ended;       /* [n]; every sequence is ended until a prefill */
    int *seq_of_row;   /* [n]: the sequence in each live row */
    int32_t *row_tok;  /* [n]: a step's token of each live row */
    float *work;       /* [group, out]: a step's logits of one group */
    DecodeGraph graph; /* graph.enabled (decode_batch_init: true): CUDA steps replay captured graphs */
} DecodeBatch;

void decode_batch_init(DecodeBatch *b, Model *m, int n);
void decode_batch_free(DecodeBatch *b);
/* Every sequence starts over: sequence i reads the lens[i] tokens after those of sequences 0..i-1
 * in ids (each in the vocabulary), and row i of logits [n, out] gets its logits after its last
 * token. Every sequence with lens[i] >= 1 is live after it; one with lens[i] = 0 is ended (a batch
 * kept for later prompts runs fewer sequences without new buffers or graphs). */
void decode_batch_prefill(DecodeBatch *b, const int32_t *ids, const int64_t *lens, float *logits);
/* Every live sequence i consumes tokens[i] (in the vocabulary) and gets the logits after it in row i
 * of logits [n, out]; tokens[i] < 0 ends sequence i instead (its row of logits is left as it was).
 * Ended sequences' tokens are not read. Returns the number of live sequences. */
int decode_batch_step(DecodeBatch *b, const int32_t *tokens, float *logits);
