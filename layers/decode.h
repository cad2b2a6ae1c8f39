/* Recurrent decoding: prompts through the chunked forward (a prefill), then one token at a time
 * with O(1) state per layer (the last conv_size-1 inputs of each short conv and the H x K x V
 * recurrent state), no tape. Both modes, either device (float32 parameters), one model definition:
 * prefill and step are model_forward_state (layers/state.h), the training forward with the state as
 * input and output, a prompt chunk at a time or T = 1, where the GDP op runs its per-token kernel
 * (kernels/gdp/decode.h) instead of the chunked one. The state stays on the model's device. A
 * prefill or step either brings the logits back to the host or samples them where they are (the
 * _pick calls: on CUDA the sampler runs on the GPU and only the sampled ids come back). On CUDA a
 * step is replayed from a CUDA graph (layers/decode_graph.h). Logits after a prefill of L tokens
 * equal those after L steps (tests/test_model.c on the CPU, tests/gpu/test_gpu_decode.c on CUDA). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "layers/decode_graph.h"
#include "layers/model.h"
#include "layers/sampler.h"
#include "layers/state.h"

/* Prompt tokens per chunked forward in a prefill; its activations must fit the context's arenas
 * (plan them for 2 x this many tokens: the state path keeps the conv windows too). */
#define DECODE_PREFILL_CHUNK 256

/* Rows one step of a batch runs at once: what arenas planned for 2 x DECODE_PREFILL_CHUNK tokens
 * (as the loaders plan them) hold. A step of r rows takes r tokens of activations and r conv windows
 * of P + 1 rows (P = conv_size - 1, 0 without short convs), so r (P + 2) <= 2 x DECODE_PREFILL_CHUNK. */
int64_t decode_group_rows(const ModelConfig *c);

/* n sequences decoded together (gdp generate, the C API's batches; one sequence is a batch of one).
 * A prefill runs each prompt alone through the chunked forward into its row of the state
 * (model_state_rows); a step runs the live rows together, a row per sequence, in groups of at most
 * `group` rows (one decode_graph_step each). A sequence that ends leaves: the rows after it move up
 * (model_state_copy_rows), so an ended sequence costs nothing and every sequence gets the logits it
 * would get alone. */
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
    float *logits;     /* [n, out] host: the pick calls' logits on the CPU; on CUDA (keep_logits) rows that
                        * decode_batch_logits copied back */
    bool keep_logits;  /* on CUDA the pick calls copy the logits aside for decode_batch_logits (set it
                        * before them; the C API does) */
    float *kept;       /* CUDA, keep_logits: [n, out] on the device, row r the logits of the sequence in row r */
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

/* decode_batch_prefill and decode_batch_step with the logits sampled by s (a Sampler of the batch's
 * n sequences over rows of the model's outputs): next[i] = the token sampled for every live sequence
 * i, -1 for the ended ones, as sampler_pick gives. On the CPU they are the logits calls and
 * sampler_pick, the logits in b->logits. On CUDA each group's logits are sampled on the GPU right
 * after its forward (sampler_cuda_*), and a call copies back only the ids and synchronises once:
 * the same uniforms as sampler_pick and its ids up to kernels/sample.h's rounding at an interval's
 * boundary. */
void decode_batch_prefill_pick(DecodeBatch *b, const int32_t *ids, const int64_t *lens, Sampler *s, int32_t *next);
int decode_batch_step_pick(DecodeBatch *b, const int32_t *tokens, Sampler *s, int32_t *next);
/* Sequence i's logits after the last pick call (host, out floats, valid until the next prefill or
 * step), or NULL when it has ended. On CUDA they are copied back from b->kept: keep_logits must have
 * been set before that call. */
const float *decode_batch_logits(const DecodeBatch *b, int i);
