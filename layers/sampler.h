/* Next-token sampling on the host: the settings, the state a batch of sequences keeps between steps,
 * and one row on its own. The rule is kernels/sample.h's; what is kept here is what makes a
 * sequence's tokens its own: its generator, seeded alike for every sequence, so that a prompt's
 * continuation does not depend on the batch it is in, and the tokens it has seen, as the mask the
 * repetition penalty reads. gdp generate and the C API's batches (api/gdp_model.c) sample through a
 * Sampler: on the host (sampler_pick), or on the GPU where a CUDA step left the logits
 * (sampler_cuda_*, which layers/decode.c runs). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "base/common.h"

/* Sampling settings: temperature <= 0 is greedy (argmax); top_k > 0 keeps the k most likely tokens;
 * 0 < top_p < 1 keeps the smallest set whose probability reaches top_p (after top-k); a
 * repetition_penalty > 0 other than 1 divides positive logits (multiplies negative ones) of tokens
 * already seen, as Hugging Face's RepetitionPenaltyLogitsProcessor does. */
typedef struct SampleParams {
    double temperature;
    int top_k;
    double top_p;
    double repetition_penalty;
} SampleParams;

/* n sequences. A sequence's seen tokens live only as a mask: it is all the rule reads, and it does
 * not grow with the sequence. The mask and the scratch rows hold n_tok columns, not v: ids past the
 * tokenizer's are never candidates. */
typedef struct Sampler {
    SampleParams p;
    uint64_t seed;
    int n;               /* sequences */
    int n_tok;           /* candidates: ids [0, n_tok) (the tokenizer's vocabulary) */
    int64_t v;           /* row stride of the logits sampler_pick reads (the model's outputs), >= n_tok */
    Rng *rng;            /* [n] */
    unsigned char *seen; /* [n, n_tok] while the penalty is on (> 0 and != 1), else NULL */
    /* sampler_pick's scratch: the live rows gathered, since the rule overwrites its logits */
    float *rows;              /* [n, n_tok] */
    unsigned char *seen_rows; /* [n, n_tok], with seen */
    double *u;                /* [n] */
    int32_t *out;             /* [n] */
    int *seq_of_row;          /* [n] */
    struct SamplerCuda *cuda; /* the GPU side, made by the first sampler_cuda_begin, else NULL */
} Sampler;

void sampler_init(Sampler *s, int n, int n_tok, int64_t v, const SampleParams *p, uint64_t seed);
void sampler_free(Sampler *s);
/* Sequence i starts over: its generator from the seed, its seen tokens the len of prompt. */
void sampler_start(Sampler *s, int i, const int32_t *prompt, int64_t len);
/* Sequence i has seen token t. Ids outside [0, n_tok) are never candidates, so they are not kept. */
void sampler_observe(Sampler *s, int i, int32_t t);
/* next[i] = a token for every sequence i not ended[i], sampled from row i of logits [n, v] (left as
 * they are), and -1 for the others. A live sequence draws one uniform from its generator when
 * temperature > 0, none otherwise, so that its tokens are those sample_next gives it alone; an
 * ended one draws nothing. A sequence's token is not observed here: the caller may not keep it. */
void sampler_pick(Sampler *s, const float *logits, const bool *ended, int32_t *next);

/* sampler_pick for logits on the GPU (CUDA builds), in three parts so that a step can sample each
 * group of rows where its forward left them, and copy back only the ids:
 *   begin: the coming rows r = 0..rows-1 are sequences seq_of_row[r] (live ones, each once); each
 *     draws its uniform as sampler_pick would, and the GPU's masks catch up with sampler_start and
 *     sampler_observe; all on `stream` (a cudaStream_t), the later parts too;
 *   rows: samples rows [row0, row0 + n) of those from logits (device float32, `stride` floats a row,
 *     >= n_tok; overwritten); nothing is waited for;
 *   end: next[i] = the id of every sequence given to begin, -1 for every other, after one copy back
 *     and one synchronisation of the stream.
 * The draws are sampler_pick's and the ids its own up to kernels/sample.h's rounding at an interval's
 * boundary. */
void sampler_cuda_begin(Sampler *s, const int *seq_of_row, int rows, void *stream);
void sampler_cuda_rows(Sampler *s, float *logits, int64_t stride, int row0, int n);
void sampler_cuda_end(Sampler *s, int32_t *next);

/* One row, the reference a Sampler agrees with: the next token from logits [n] (overwritten), with
 * history [n_hist] (may be NULL) as the seen tokens and one uniform from rng when temperature > 0. */
int sample_next(float *logits, int n, const SampleParams *p, const int32_t *history, int64_t n_hist, Rng *rng);
/* sample_next with temperature and top-k only. */
int sample_logits(float *logits, int n, double temperature, int top_k, Rng *rng);
