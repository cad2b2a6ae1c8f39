/* Next-token sampling for a batch of rows of logits, the rule of sample_next (layers/sampler.c) with
 * the uniform draw made by the caller:
 *   1. repetition penalty (penalty > 0 and != 1, seen given): a seen token's logit x becomes
 *      x / penalty when x > 0, else x * penalty (in double, rounded to float);
 *   2. temperature <= 0: the argmax (the lowest id among equal maxima), and u is not read;
 *   3. top_p outside (0, 1): keep the logits >= the top_k-th largest (all when top_k <= 0 or
 *      top_k >= n_tok), weights q = exp((x - max) / temperature), and pick the first id, in id
 *      order, where the running sum of the kept weights exceeds u * their total;
 *   4. 0 < top_p < 1: order the candidates by logit, largest first, ties by id; keep the first
 *      top_k of them (all when top_k <= 0 or top_k >= n_tok), then the shortest prefix whose
 *      probability reaches top_p, and pick the first one in that order where the running weight
 *      exceeds u * the prefix's weight.
 * Only ids below n_tok are candidates; a row is `v` floats apart (v >= n_tok). Logits must be finite
 * or -inf (a masked token), with one finite logit in every row.
 *
 * The caller (a Sampler of layers/sampler.h) prepares, per row r (one sequence):
 *   the row's mask m = seen + seen_row[r] * seen_stride (seen_row NULL: r; seen_stride 0: v), with
 *     m[t] = 1 for every token t of the sequence's history (prompt and generated), else 0; ids >= n_tok
 *     are ignored. NULL penalises no row; with penalty 1 the mask is not read. seen_row lets the rows
 *     of a step read masks kept by sequence;
 *   u[r] = rng_uniform(&that sequence's Rng) when temperature > 0, drawn on the host: exactly the
 *     one draw sample_next makes; with temperature <= 0 sample_next draws nothing, so
 *     neither may the caller (u may then be NULL). A row whose result is not wanted may take any
 *     u in [0, 1) without a draw.
 * Then out[r] equals sample_next(row, n_tok, &params, history, n_hist, &rng) for the same Rng state.
 *
 * sample_rows_cpu is the reference (host pointers; rows in parallel under OpenMP). sample_rows_cuda
 * (device pointers; one block per row, stream-ordered, no host synchronisation) gives the same ids
 * except where rounding decides: a u far closer than 1e-6 to the boundary between two tokens'
 * intervals, or a running probability as close to top_p (the GPU sums in another order, in fixed point
 * for top-p, and its exp may differ from the host's in the last bit). Rows of exactly tied logits
 * meet that case often: n equal logits put the top-p cut on a multiple of 1/n. Both overwrite the
 * logits below n_tok (the penalty, then weights), so the rows are scratch afterwards. The CUDA
 * version is deterministic: the same inputs give the same ids on every run. */
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct SampleArgs {
    float *logits;             /* [rows, v]; overwritten */
    const unsigned char *seen; /* history masks, one a row (below), or NULL */
    const int32_t *seen_row;   /* [rows]: the mask each row reads, or NULL: row r reads mask r */
    int64_t seen_stride;       /* elements between masks; 0: v */
    const double *u;           /* [rows] uniforms in [0, 1); NULL allowed when temperature <= 0 */
    int32_t *out;              /* [rows] the sampled ids */
    int64_t rows;
    int64_t v;                 /* row stride of logits, in elements */
    int n_tok;                 /* candidates: ids [0, n_tok), 1 <= n_tok <= v (and <= seen_stride when given) */
    double temperature;
    int top_k;
    double top_p;
    double penalty;
} SampleArgs;

void sample_rows_cpu(const SampleArgs *a);
void sample_rows_cuda(const SampleArgs *a, void *stream);

/* seen[seq[j] * stride + tok[j]] = 1 for each j < count whose tok[j] is in [0, n_tok) (device
 * pointers, stream-ordered): the tokens a Sampler observed since its last pick, marked in its masks
 * on the GPU, so that a step uploads one token per sequence instead of the masks. */
void sample_mark_seen_cuda(unsigned char *seen, int64_t stride, const int32_t *seq, const int32_t *tok, int64_t count,
                           int n_tok, void *stream);

/* The argument checks both run (fatal errors naming the bad field); exposed for callers that
 * validate before they build the rows. */
void sample_args_check(const SampleArgs *a, const char *who);

#ifdef __cplusplus
}
#endif
