/* Packed documents against the same documents run alone, at the model level: a tiny model (tiny
 * preset, vocabulary 64, end-of-text 63) on a batch of 2 rows of 45 tokens whose end-of-text tokens
 * cut it into documents of 1 token (an end-of-text alone, also at a row's start), 2 and 3 tokens
 * (shorter than the conv window), and long ones; the last position of row 1 is an end-of-text.
 *
 * docs_case_packed runs the batch through the training library's batch loss (train_batch_loss: the
 * boundaries found in the inputs, cu_seqlens for the model); docs_case_alone runs every document as
 * its own sequence on a fresh model with the same parameters and combines the results as the batch's
 * mean loss would: loss = sum_d n_d loss_d / N, gradient = sum_d n_d g_d / N (n_d counted targets).
 * Equal results mean no state and no conv window crossed a boundary. Shared by tests/test_documents.c
 * (CPU, float64) and tests/gpu/test_gpu_documents.c (CUDA against the CPU). */
#pragma once
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "core/tape.h"
#include "layers/model.h"
#include "train/train.h"

#define DOCS_CASE_B 2
#define DOCS_CASE_T 45
#define DOCS_CASE_N (DOCS_CASE_B * DOCS_CASE_T)
#define DOCS_CASE_VOCAB 64
#define DOCS_CASE_EOT (DOCS_CASE_VOCAB - 1)
#define DOCS_CASE_SEED 7

typedef struct DocsCase {
    ModelConfig cfg;
    int32_t eot;
    int32_t ids[DOCS_CASE_N], tg[DOCS_CASE_N];
} DocsCase;

static inline void docs_case_make(DocsCase *c, GdpMode mode) {
    model_config_preset(&c->cfg, "tiny");
    c->cfg.vocab_size = DOCS_CASE_VOCAB;
    c->cfg.mode = mode;
    c->cfg.initializer_range = 0.2; /* far from the identity-like init: every part matters */
    c->eot = DOCS_CASE_EOT;
    Rng rng;
    rng_seed(&rng, 11);
    for (int i = 0; i < DOCS_CASE_N; i++) {
        c->ids[i] = (int32_t)rng_below(&rng, DOCS_CASE_EOT);
        c->tg[i] = (int32_t)rng_below(&rng, DOCS_CASE_VOCAB);
    }
    /* row 0: documents [0, 9) [9, 10) [10, 13) [13, 15) [15, 41) [41, 45); row 1: [0, 1) [1, 31) [31, 45) */
    static const int ends[] = {8, 9, 12, 14, 40, DOCS_CASE_T + 0, DOCS_CASE_T + 30, DOCS_CASE_T + 44};
    for (size_t i = 0; i < GDP_ARRAY_LEN(ends); i++) c->ids[ends[i]] = DOCS_CASE_EOT;
}

/* The model's parameters as direct leaves of dtype dt on ctx (the same values on any device). */
static inline int docs_case_model(const DocsCase *c, Ctx *ctx, DType dt, Model *m, Tensor **params, int max) {
    ParamMaker pm;
    pm_init_direct(&pm, ctx, dt, DOCS_CASE_SEED);
    model_build(m, &c->cfg, &pm);
    GDP_CHECK(pm.n_made <= max, "docs_case_model: %d parameters, room for %d", pm.n_made, max);
    const int n = pm.n_made;
    memcpy(params, pm.made, (size_t)n * sizeof(Tensor *));
    pm_free(&pm);
    return n;
}

/* Every parameter's gradient (zeros where none was written), scaled and added into grads. */
static inline int64_t docs_case_add_grads(Tensor **params, int n, double scale, double *grads) {
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        const Tensor *p = params[i];
        if (p->grad && p->grad_written) {
            double *g = (double *)xmalloc((size_t)p->numel * sizeof(double));
            tensor_to_doubles(p->grad, g);
            for (int64_t j = 0; j < p->numel; j++) grads[off + j] += scale * g[j];
            free(g);
        }
        off += p->numel;
    }
    return off;
}

#define DOCS_CASE_MAX_PARAMS 64

/* The batch as one packed run: its loss, and every gradient into grads (zeroed first, *n_grads set).
 * autocast_bf16: the context's bf16 autocast and activations on, as the trainer sets them on CUDA. */
static inline double docs_case_packed(const DocsCase *c, Device dev, DType dt, bool autocast_bf16, bool loss_across,
                                      double *grads, int64_t *n_grads) {
    Ctx *ctx = ctx_create(dev, ctx_default_sizes());
    ctx->autocast_bf16 = autocast_bf16, ctx->bf16_activations = autocast_bf16;
    Model m;
    Tensor *params[DOCS_CASE_MAX_PARAMS];
    const int n = docs_case_model(c, ctx, dt, &m, params, DOCS_CASE_MAX_PARAMS);
    int32_t tg[DOCS_CASE_N], cu[DOCS_CASE_N + 1];
    memcpy(tg, c->tg, sizeof tg);
    TrainDocs docs = {.eot = c->eot, .loss_across = loss_across};
    Tensor *loss = train_batch_loss(&m, &docs, c->ids, tg, cu, DOCS_CASE_B, DOCS_CASE_T);
    tape_backward(ctx, loss);
    double l;
    tensor_to_doubles(loss, &l);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += params[i]->numel;
    memset(grads, 0, (size_t)total * sizeof(double));
    *n_grads = docs_case_add_grads(params, n, 1.0, grads);
    model_free(&m);
    ctx_destroy(ctx);
    return l;
}

/* Every document alone (a fresh model with the same parameters each), combined as the batch's mean.
 * autocast_bf16 as for docs_case_packed. */
static inline double docs_case_alone(const DocsCase *c, Device dev, DType dt, bool autocast_bf16, bool loss_across,
                                     double *grads, int64_t *n_grads) {
    int64_t counted = 0;
    for (int i = 0; i < DOCS_CASE_N; i++) counted += loss_across || c->ids[i] != c->eot;
    double loss = 0;
    bool zeroed = false;
    for (int b = 0; b < DOCS_CASE_B; b++)
        for (int s = 0, e; s < DOCS_CASE_T; s = e) {
            for (e = s; e < DOCS_CASE_T && c->ids[b * DOCS_CASE_T + e] != c->eot; e++) {}
            if (e < DOCS_CASE_T) e++; /* the end-of-text ends its document */
            const int len = e - s;
            int32_t ids[DOCS_CASE_T], tg[DOCS_CASE_T];
            int n_d = 0;
            for (int t = 0; t < len; t++) {
                const int i = b * DOCS_CASE_T + s + t;
                ids[t] = c->ids[i];
                tg[t] = loss_across || c->ids[i] != c->eot ? c->tg[i] : -1;
                n_d += tg[t] >= 0;
            }
            Ctx *ctx = ctx_create(dev, ctx_default_sizes());
            ctx->autocast_bf16 = autocast_bf16, ctx->bf16_activations = autocast_bf16;
            Model m;
            Tensor *params[DOCS_CASE_MAX_PARAMS];
            const int n = docs_case_model(c, ctx, dt, &m, params, DOCS_CASE_MAX_PARAMS);
            if (!zeroed) {
                int64_t total = 0;
                for (int i = 0; i < n; i++) total += params[i]->numel;
                memset(grads, 0, (size_t)total * sizeof(double));
                zeroed = true;
            }
            if (n_d > 0) {
                Tensor *l = model_loss_host(&m, ids, tg, 1, len);
                tape_backward(ctx, l);
                double v;
                tensor_to_doubles(l, &v);
                loss += v * n_d / (double)counted;
                *n_grads = docs_case_add_grads(params, n, n_d / (double)counted, grads);
            }
            model_free(&m);
            ctx_destroy(ctx);
        }
    return loss;
}

/* max |a - b| / max |b| */
static inline double docs_case_rel_err(const double *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) num = fmax(num, fabs(a[i] - b[i])), den = fmax(den, fabs(b[i]));
    return den > 0 ? num / den : num;
}
