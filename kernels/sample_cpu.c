/* CPU reference for batched sampling: sample_next (layers/sampler.c) with the uniform given and the
 * history as a mask. Every expression that reaches a pick is sample_next's, in the same order and
 * types, so that the two agree bit for bit (tests/test_model.c checks it on random rows); only the
 * top-k threshold is found by a sort instead of sample_next's partial selection, which yields the
 * same value: the top_k-th largest of the multiset. */
#include "kernels/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

void sample_args_check(const SampleArgs *a, const char *who) {
    GDP_CHECK(a != NULL, "%s: no arguments given", who);
    GDP_CHECK(a->rows >= 0, "%s: rows is %lld; it must be >= 0", who, (long long)a->rows);
    GDP_CHECK(a->n_tok >= 1 && a->n_tok <= a->v,
              "%s: n_tok %d must be in [1, v] with v %lld, the row stride of the logits", who, a->n_tok,
              (long long)a->v);
    GDP_CHECK(a->seen_stride == 0 || a->seen_stride >= a->n_tok,
              "%s: seen_stride %lld must be 0 (masks v apart) or hold the n_tok %d candidates", who,
              (long long)a->seen_stride, a->n_tok);
    GDP_CHECK(!isnan(a->temperature) && !isnan(a->top_p) && !isnan(a->penalty),
              "%s: temperature %g, top_p %g and penalty %g must not be NaN", who, a->temperature, a->top_p, a->penalty);
    if (a->rows == 0) return;
    GDP_CHECK(a->logits && a->out, "%s: logits and out must be given (NULL found)", who);
    GDP_CHECK(a->temperature <= 0 || a->u,
              "%s: temperature %g samples, so u (one uniform per row) must be given; pass temperature 0 for "
              "greedy decoding",
              who, a->temperature);
}

typedef struct Cand {
    float logit;
    int id;
} Cand;

/* sample_next's order: largest logit first, ties by id; a total order, so any sort gives it. */
static int cand_cmp(const void *a, const void *b) {
    const Cand *x = (const Cand *)a, *y = (const Cand *)b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}

static int desc_cmp(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x > y ? -1 : (x < y ? 1 : 0);
}

static int sample_row(float *logits, int n, const unsigned char *seen, double u_draw, const SampleArgs *p) {
    if (p->penalty > 0 && p->penalty != 1 && seen) {
        for (int t = 0; t < n; t++)
            if (seen[t])
                logits[t] = logits[t] > 0 ? (float)(logits[t] / p->penalty) : (float)(logits[t] * p->penalty);
    }
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    if (p->temperature <= 0) return best;
    const bool nucleus = p->top_p > 0 && p->top_p < 1;
    if (!nucleus) {
        float cut = -INFINITY;
        if (p->top_k > 0 && p->top_k < n) {
            float *tmp = (float *)xmalloc((size_t)n * sizeof(float));
            memcpy(tmp, logits, (size_t)n * sizeof(float));
            qsort(tmp, (size_t)n, sizeof(float), desc_cmp);
            cut = tmp[p->top_k - 1];
            free(tmp);
        }
        double mx = logits[best], sum = 0;
        for (int i = 0; i < n; i++) {
            double q = logits[i] >= cut ? exp((logits[i] - mx) / p->temperature) : 0;
            logits[i] = (float)q;
            sum += q;
        }
        double u = u_draw * sum, acc = 0;
        for (int i = 0; i < n; i++) {
            acc += logits[i];
            if (u < acc && logits[i] > 0) return i;
        }
        return best;
    }
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
    double u = u_draw * tot, run = 0;
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

void sample_rows_cpu(const SampleArgs *a) {
    sample_args_check(a, "sample_rows_cpu");
    const int64_t stride = a->seen_stride ? a->seen_stride : a->v;
    /* rows are independent, so threads do not change any id */
#pragma omp parallel for schedule(dynamic) if (a->rows > 1 && (int64_t)a->rows * a->n_tok > 65536)
    for (int64_t r = 0; r < a->rows; r++) {
        const unsigned char *seen = a->seen ? a->seen + (a->seen_row ? a->seen_row[r] : r) * stride : NULL;
        const double u = a->temperature > 0 ? a->u[r] : 0;
        a->out[r] = sample_row(a->logits + r * a->v, a->n_tok, seen, u, a);
    }
}
