/* Decoding on the model's one definition: the CPU runs model_forward_state (layers/state.h) for a
 * prompt chunk or a single token; a model on CUDA prefills the same way and steps through
 * layers/decode_cuda.c. Sampling is here too. */
#include "layers/decode.h"

#include <math.h>
#include <stdlib.h>

#include "base/common.h"
#include "layers/decode_cuda.h"

void decode_init(DecodeState *st, Model *m) {
    memset(st, 0, sizeof *st);
    st->m = m;
    GDP_CHECK(m->ctx->device == DEV_CPU || m->ctx->device == DEV_CUDA, "decode: the model must be on the cpu or on cuda");
    model_state_init(&st->state, m, 1);
    if (m->ctx->device == DEV_CUDA) decode_cuda_init(st);
}

void decode_reset(DecodeState *st) {
    if (st->cuda) decode_cuda_reset(st);
    model_state_reset(&st->state);
    st->pos = 0;
}

void decode_free(DecodeState *st) {
    if (!st->m) return;
    if (st->cuda) decode_cuda_free(st);
    model_state_free(&st->state);
    memset(st, 0, sizeof *st);
}

static void check_token(const DecodeState *st, int64_t token) {
    GDP_CHECK(token >= 0 && token < st->m->cfg.vocab_size, "decode: token %lld is outside the vocabulary [0, %d)",
              (long long)token, st->m->cfg.vocab_size);
}

void decode_prefill(DecodeState *st, const int32_t *tokens, int64_t n, float *logits) {
    GDP_CHECK(n >= 1, "decode_prefill: no tokens");
    for (int64_t i = 0; i < n; i++) check_token(st, tokens[i]);
    if (st->cuda) decode_cuda_sync_state(st, true);
    model_prefill_host(st->m, &st->state, tokens, n, DECODE_PREFILL_CHUNK, logits);
    if (st->cuda) decode_cuda_sync_state(st, false);
    st->pos += n;
}

void decode_step(DecodeState *st, int token, float *logits) {
    check_token(st, token);
    if (!st->cuda) {
        const int32_t t = token;
        model_prefill_host(st->m, &st->state, &t, 1, 1, logits);
    } else {
        decode_cuda_step(st, token, logits);
    }
    st->pos++;
}

/* ---- sampling --------------------------------------------------------------------------------------- */

typedef struct Cand {
    float logit;
    int id;
} Cand;

/* Largest logit first; ties by id, so the order (and a seeded sample) never depends on qsort. */
static int cand_cmp(const void *a, const void *b) {
    const Cand *x = (const Cand *)a, *y = (const Cand *)b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}

int sample_next(float *logits, int n, const SampleParams *p, const int32_t *history, int64_t n_hist, Rng *rng) {
    if (p->repetition_penalty > 0 && p->repetition_penalty != 1 && history && n_hist > 0) {
        unsigned char *seen = (unsigned char *)xcalloc((size_t)n, 1);
        for (int64_t i = 0; i < n_hist; i++) {
            int t = history[i];
            if (t < 0 || t >= n || seen[t]) continue;
            seen[t] = 1;
            logits[t] = logits[t] > 0 ? (float)(logits[t] / p->repetition_penalty)
                                      : (float)(logits[t] * p->repetition_penalty);
        }
        free(seen);
    }
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    if (p->temperature <= 0) return best;
    const bool nucleus = p->top_p > 0 && p->top_p < 1;
    if (!nucleus) {
        float cut = -INFINITY;
        if (p->top_k > 0 && p->top_k < n) {
            /* the k-th largest value: partial selection on a copy */
            float *tmp = (float *)xmalloc((size_t)n * sizeof(float));
            memcpy(tmp, logits, (size_t)n * sizeof(float));
            for (int i = 0; i < p->top_k; i++) {
                int j = i;
                for (int t = i + 1; t < n; t++)
                    if (tmp[t] > tmp[j]) j = t;
                float sw = tmp[i];
                tmp[i] = tmp[j], tmp[j] = sw;
            }
            cut = tmp[p->top_k - 1];
            free(tmp);
        }
        double mx = logits[best], sum = 0;
        for (int i = 0; i < n; i++) {
            double q = logits[i] >= cut ? exp((logits[i] - mx) / p->temperature) : 0;
            logits[i] = (float)q;
            sum += q;
        }
        double u = rng_uniform(rng) * sum, acc = 0;
        for (int i = 0; i < n; i++) {
            acc += logits[i];
            if (u < acc && logits[i] > 0) return i;
        }
        return best;
    }
    /* Nucleus: candidates by probability, cut at k, then at the smallest prefix reaching top_p. */
    Cand *c = (Cand *)xmalloc((size_t)n * sizeof(Cand));
    for (int i = 0; i < n; i++) c[i].logit = logits[i], c[i].id = i;
    qsort(c, (size_t)n, sizeof(Cand), cand_cmp);
    int keep = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    double *pr = (double *)xmalloc((size_t)keep * sizeof(double)), sum = 0;
    for (int i = 0; i < keep; i++) sum += pr[i] = exp((c[i].logit - c[0].logit) / p->temperature);
    double acc = 0;
    int nk = 0;
    while (nk < keep) {
        acc += pr[nk++] / sum;
        if (acc >= p->top_p) break;
    }
    double tot = 0;
    for (int i = 0; i < nk; i++) tot += pr[i];
    double u = rng_uniform(rng) * tot, run = 0;
    int pick = c[0].id;
    for (int i = 0; i < nk; i++) {
        run += pr[i];
        if (u < run) {
            pick = c[i].id;
            break;
        }
    }
    free(pr), free(c);
    return pick;
}

int sample_logits(float *logits, int n, double temperature, int top_k, Rng *rng) {
    SampleParams p = {temperature, top_k, 1.0, 1.0};
    return sample_next(logits, n, &p, NULL, 0, rng);
}
