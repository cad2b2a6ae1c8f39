/* The host side of sampling (layers/sampler.h): the per-sequence state and the gathering of live
 * rows around kernels/sample.h's CPU form, which runs the rows in parallel. */
#include "layers/sampler.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/sample.h"

static bool penalty_on(const SampleParams *p) { return p->repetition_penalty > 0 && p->repetition_penalty != 1; }

/* The one place a SampleArgs is built, for a row and for a batch alike. */
static void sample_rows(const SampleParams *p, float *logits, const unsigned char *seen, const double *u,
                        int32_t *out, int64_t rows, int64_t v, int n_tok) {
    SampleArgs a = {logits, seen, p->temperature > 0 ? u : NULL, out, rows, v, n_tok, p->temperature, p->top_k,
                    p->top_p, p->repetition_penalty};
    sample_rows_cpu(&a);
}

void sampler_init(Sampler *s, int n, int n_tok, int64_t v, const SampleParams *p, uint64_t seed) {
    GDP_CHECK(n >= 1 && n_tok >= 1 && n_tok <= v,
              "sampler_init: %d sequences of %d candidates in rows of %lld: needs n >= 1 and 1 <= n_tok <= v", n,
              n_tok, (long long)v);
    memset(s, 0, sizeof *s);
    s->p = *p, s->seed = seed, s->n = n, s->n_tok = n_tok, s->v = v;
    const size_t cells = (size_t)n * (size_t)n_tok;
    s->rng = (Rng *)xcalloc((size_t)n, sizeof(Rng));
    for (int i = 0; i < n; i++) rng_seed(&s->rng[i], seed);
    if (penalty_on(p)) {
        s->seen = (unsigned char *)xcalloc(cells, 1);
        s->seen_rows = (unsigned char *)xmalloc(cells);
    }
    s->rows = (float *)xmalloc(cells * sizeof(float));
    s->u = (double *)xmalloc((size_t)n * sizeof(double));
    s->out = (int32_t *)xmalloc((size_t)n * sizeof(int32_t));
    s->seq_of_row = (int *)xmalloc((size_t)n * sizeof(int));
}

void sampler_free(Sampler *s) {
    free(s->rng), free(s->seen), free(s->seen_rows), free(s->rows), free(s->u), free(s->out), free(s->seq_of_row);
    memset(s, 0, sizeof *s);
}

void sampler_start(Sampler *s, int i, const int32_t *prompt, int64_t len) {
    GDP_CHECK(i >= 0 && i < s->n, "sampler_start: sequence %d of %d", i, s->n);
    rng_seed(&s->rng[i], s->seed);
    if (!s->seen) return;
    memset(s->seen + (size_t)i * s->n_tok, 0, (size_t)s->n_tok);
    for (int64_t t = 0; t < len; t++) sampler_observe(s, i, prompt[t]);
}

void sampler_observe(Sampler *s, int i, int32_t t) {
    GDP_CHECK(i >= 0 && i < s->n, "sampler_observe: sequence %d of %d", i, s->n);
    if (s->seen && t >= 0 && t < s->n_tok) s->seen[(size_t)i * s->n_tok + t] = 1;
}

void sampler_pick(Sampler *s, const float *logits, const bool *ended, int32_t *next) {
    const size_t nt = (size_t)s->n_tok;
    int rows = 0;
    for (int i = 0; i < s->n; i++) {
        next[i] = -1;
        if (ended[i]) continue;
        memcpy(s->rows + rows * nt, logits + i * s->v, nt * sizeof(float));
        if (s->seen) memcpy(s->seen_rows + rows * nt, s->seen + i * nt, nt);
        if (s->p.temperature > 0) s->u[rows] = rng_uniform(&s->rng[i]);
        s->seq_of_row[rows++] = i;
    }
    if (rows == 0) return;
    sample_rows(&s->p, s->rows, s->seen ? s->seen_rows : NULL, s->u, s->out, rows, s->n_tok, s->n_tok);
    for (int r = 0; r < rows; r++) next[s->seq_of_row[r]] = s->out[r];
}

int sample_next(float *logits, int n, const SampleParams *p, const int32_t *history, int64_t n_hist, Rng *rng) {
    unsigned char *seen = NULL;
    if (penalty_on(p) && history && n_hist > 0) {
        seen = (unsigned char *)xcalloc((size_t)n, 1);
        for (int64_t i = 0; i < n_hist; i++)
            if (history[i] >= 0 && history[i] < n) seen[history[i]] = 1;
    }
    const double u = p->temperature > 0 ? rng_uniform(rng) : 0;
    int32_t pick = 0;
    sample_rows(p, logits, seen, &u, &pick, 1, n, n);
    free(seen);
    return pick;
}

int sample_logits(float *logits, int n, double temperature, int top_k, Rng *rng) {
    SampleParams p = {temperature, top_k, 1.0, 1.0};
    return sample_next(logits, n, &p, NULL, 0, rng);
}
