/* gdp.c's model-level C API: a trained Gated DeltaProduct language model loaded from a checkpoint
 * with its tokenizer, and generation for a batch of sequences (prefill, decode step, sampling).
 * Exported from build/libgdpmodel.so; this header is all a program needs (it includes no other
 * gdp.c header). docs/inference.md describes it; examples/generate.c uses it.
 *
 *     GdpModel *m;  GdpBatch *b;
 *     gdp_model_load("runs/a", "cpu", NULL, &m);          // a checkpoint file or a training folder
 *     gdp_batch_new(m, n, NULL, &b);                       // n sequences, gdp generate's sampling
 *     gdp_batch_prefill(b, ids, lens);                     // n prompts of any lengths, back to back
 *     for (int live = n; live > 0;) {
 *         gdp_batch_sample(b, next);                       // a token for each live sequence
 *         ...                                              // next[i] = -1 ends sequence i
 *         live = gdp_batch_step(b, next);                  // every live sequence consumes its token
 *     }
 *     gdp_batch_free(b);  gdp_model_free(m);
 *
 * A batch steps its live sequences together (one forward of a row per sequence, on the CPU or on
 * CUDA, where the step is replayed from a CUDA graph and sampled on the GPU, so that only the tokens
 * come back unless gdp_batch_logits asks for logits); an ended sequence leaves the batch, so the
 * others run as if it had never been there, and each sequence's tokens equal those of the same
 * prompt alone.
 *
 * Errors: a call that fails returns a negative value (or NULL), changes nothing, and leaves the
 * reason in gdp_model_last_error() (per thread). What no check up front can catch (out of memory, a
 * checkpoint whose datasets fail their own checksums after the file passed the whole-file check)
 * ends the process with a message, as the gdp program does. A model and its batches are for one
 * thread at a time. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct GdpModel GdpModel;
typedef struct GdpBatch GdpBatch;

/* How gdp_batch_sample picks a token (gdp generate's --temperature, --top-k, --top-p,
 * --repetition-penalty and --seed, with the same meaning and the same results). */
typedef struct GdpSampling {
    double temperature;        /* <= 0: greedy (the most likely token) */
    int top_k;                 /* > 0: only the k most likely tokens */
    double top_p;              /* in (0, 1): the most likely tokens up to this probability (after top-k) */
    double repetition_penalty; /* != 1: logits of tokens already in the sequence (prompt included)
                                * divided by it when positive, multiplied when negative */
    uint64_t seed;             /* each sequence's generator starts from it at the prefill */
} GdpSampling;

/* gdp generate's defaults: temperature 0.8, top_k 0, top_p 1, repetition_penalty 1, seed 1. */
GdpSampling gdp_sampling_default(void);

/* The reason the last failing call of this thread failed ("" when none has). */
const char *gdp_model_last_error(void);

/* Loads a checkpoint (a file, or a training folder: its newest valid checkpoint) on device "cpu",
 * "cuda" or "auto" (NULL: cpu), with the tokenizer file `tokenizer` (NULL: the one the checkpoint
 * records, else bytes for a vocabulary of at most 256). 0, or -1 with *out NULL. */
int gdp_model_load(const char *checkpoint, const char *device, const char *tokenizer, GdpModel **out);
void gdp_model_free(GdpModel *m); /* NULL is fine; free its batches first */

int gdp_model_vocab_size(const GdpModel *m); /* logits per sequence (the model's vocabulary) */
int gdp_model_eot(const GdpModel *m);        /* the tokenizer's end-of-text token, or -1 */
const char *gdp_model_device(const GdpModel *m); /* "cpu" or "cuda" */

/* Tokens of text[0, len): returns their count and writes the first min(count, cap) to ids (cap 0,
 * ids NULL: count only); -1 on error. */
int64_t gdp_model_encode(const GdpModel *m, const char *text, size_t len, int32_t *ids, int64_t cap);
/* The bytes of token id (*len of them, not NUL-terminated), or NULL when id is not a token. */
const char *gdp_model_token_bytes(const GdpModel *m, int32_t id, size_t *len);

/* A batch of n >= 1 sequences with sampling settings s (NULL: gdp_sampling_default()). Every sequence
 * is ended until a prefill. 0, or -1 with *out NULL. */
int gdp_batch_new(GdpModel *m, int n, const GdpSampling *s, GdpBatch **out);
void gdp_batch_free(GdpBatch *b); /* NULL is fine */

/* Starts every sequence over: sequence i reads prompt i, the lens[i] >= 1 tokens after those of
 * prompts 0..i-1 in ids, through the chunked forward; its generator restarts from the seed and its
 * logits are those after its prompt's last token. 0 or -1. */
int gdp_batch_prefill(GdpBatch *b, const int32_t *ids, const int64_t *lens);
/* next[i] = a token sampled from sequence i's logits (within the tokenizer's vocabulary), or -1 for
 * an ended sequence. The logits are left as they are. 0 or -1. */
int gdp_batch_sample(GdpBatch *b, int32_t *next);
/* Every live sequence i consumes tokens[i] (which then counts as seen for the repetition penalty) and
 * gets the logits after it; tokens[i] < 0 ends sequence i instead. Ended sequences' entries are not
 * read. Returns the number of live sequences, or -1. */
int gdp_batch_step(GdpBatch *b, const int32_t *tokens);
/* Sequence i's logits (gdp_model_vocab_size floats, valid until the next prefill or step), or NULL
 * when it has ended. */
const float *gdp_batch_logits(const GdpBatch *b, int i);
/* Tokens sequence i has consumed (its prompt's and the steps'); -1 when i is not in the batch. */
int64_t gdp_batch_position(const GdpBatch *b, int i);

#ifdef __cplusplus
}
#endif
