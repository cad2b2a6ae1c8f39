/* The memory plan against the step it plans, shared by the CPU test (tests/test_memory_plan.c) and
 * the CUDA one (tests/gpu/test_gpu_memory_plan.c): a model is planned as gdp train plans it, then
 * one training micro-step and one evaluation forward run as train_run runs them, on real tokens, and
 * each arena's measured high water is compared with the planned capacity. */
#pragma once
#include <stdio.h>
#include <string.h>

#include "core/params.h"
#include "core/tape.h"
#include "layers/model.h"
#include "train/memory_plan.h"
#include "train/optim.h"
#include "train/train.h"

typedef struct PlanCase {
    const char *preset;
    const char *sets[4];         /* --set overrides (NULL-terminated) */
    int batch, seq;
    bool recompute, selective;
    const char *autocast;        /* NULL (auto), "off" or "bf16" */
    bool f32_activations, gemm_inside;
    int64_t probe_period;        /* 0: the default */
    bool eval_only;              /* as gdp eval / the tasks' evaluation plan (no backward, no optimizer) */
} PlanCase;

typedef struct PlanResult {
    MemoryPlan plan;
    size_t hw[3], cap[3];        /* acts, grads, scratch: measured high water, planned capacity */
    size_t persist_hw;
} PlanResult;

static const char *const plan_arena_names[3] = {"acts", "grads", "scratch"};

static void plan_case_run(Device dev, const PlanCase *c, PlanResult *r) {
    TrainOptions o = train_default_options();
    o.preset = c->preset;
    for (int i = 0; i < 4 && c->sets[i]; i++) o.sets[o.n_sets++] = c->sets[i];
    o.batch = c->batch, o.seq = c->seq;
    o.recompute = c->recompute, o.selective_recompute = c->selective;
    o.autocast = c->autocast;
    o.f32_activations = c->f32_activations;
    o.bf16_gemm_copies = !c->gemm_inside;
    ModelConfig cfg;
    bool vg;
    char err[512];
    if (!train_resolve_config(&o, &cfg, &vg, err, sizeof err)) gdp_fatal("plan case: %s", err);
    MemorySpec spec = train_memory_spec(&o, dev, NULL);
    if (c->probe_period) spec.probe_period = c->probe_period;
    if (c->eval_only) spec.train = false, spec.optimizer = false;
    Model m;
    ParamStore ps;
    memset(r, 0, sizeof *r);
    Ctx *ctx = memory_plan_create(&cfg, &spec, 1, &m, &ps, &r->plan);
    Optimizer opt;
    if (spec.optimizer) optim_init(&opt, &ps, adamw_default_config(), 0, ps.total);
    r->persist_hw = ctx->persist.high_water;

    const int64_t B = c->batch, T = c->seq, n = B * T, out = cfg.num_labels > 0 ? cfg.num_labels : cfg.vocab_size;
    int32_t *in = (int32_t *)xmalloc((size_t)n * sizeof(int32_t)), *tg = (int32_t *)xmalloc((size_t)n * sizeof(int32_t));
    Rng rng;
    rng_seed(&rng, 9);
    for (int64_t i = 0; i < n; i++) {
        in[i] = (int32_t)rng_below(&rng, (uint64_t)cfg.vocab_size);
        tg[i] = (int32_t)rng_below(&rng, (uint64_t)out);
    }
    double v;
    if (!c->eval_only) {
        params_zero_grad(&ps);
        Tensor *loss = model_loss_host(&m, in, tg, B, T);
        tensor_to_doubles(loss, &v);
        tape_backward(ctx, loss);
        ctx_step_reset(ctx);
    }
    ctx->grad_enabled = false;
    tensor_to_doubles(model_loss_host(&m, in, tg, B, T), &v);
    ctx_step_reset(ctx);
    ctx_synchronize(ctx);
    const Arena *ar[3] = {&ctx->acts, &ctx->grads, &ctx->scratch};
    for (int i = 0; i < 3; i++) r->hw[i] = ar[i]->high_water, r->cap[i] = ar[i]->capacity;
    free(in), free(tg);
    if (spec.optimizer) optim_free(&opt);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
}

static void plan_case_name(const PlanCase *c, char *buf, size_t len) {
    int k = snprintf(buf, len, "%s B%d T%d%s%s%s%s%s%s", c->preset, c->batch, c->seq,
                     c->recompute ? " recompute" : c->selective ? " selective" : "",
                     c->autocast ? " autocast " : "", c->autocast ? c->autocast : "",
                     c->f32_activations ? " f32-act" : "", c->gemm_inside ? " gemm-inside" : "",
                     c->eval_only ? " eval" : "");
    for (int i = 0; i < 4 && c->sets[i] && k > 0 && (size_t)k < len; i++)
        k += snprintf(buf + k, len - (size_t)k, " %s", c->sets[i]);
}

/* Every planned arena holds its measured high water and exceeds it by at most 10%; the parameter
 * arena is exact. False with the reason in why. */
static bool plan_case_ok(const PlanResult *r, char *why, size_t len) {
    for (int i = 0; i < 3; i++)
        if (r->cap[i] < r->hw[i] || (double)r->cap[i] > 1.10 * (double)r->hw[i]) {
            snprintf(why, len, "%s: planned %zu bytes, the step used %zu (%+.2f%%)", plan_arena_names[i], r->cap[i],
                     r->hw[i], r->hw[i] ? 100.0 * ((double)r->cap[i] / (double)r->hw[i] - 1) : 0.0);
            return false;
        }
    if (r->persist_hw != r->plan.persist) {
        snprintf(why, len, "persist: planned %zu bytes, the model and optimizer took %zu", r->plan.persist,
                 r->persist_hw);
        return false;
    }
    return true;
}
