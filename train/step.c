/* One optimizer step: the micro-batches' forward and backward, the gradients reduced over ranks,
 * then the update (clip + AdamW), unless the step guard skips it. */
#include <math.h>
#include <signal.h>

#include "base/common.h"
#include "core/tape.h"
#include "train/run.h"

/* The test hook: a NaN in one gradient element that this rank's update reads. */
static void inject_nan_grad(ParamStore *ps, const Optimizer *opt, const char *name) {
    const ParamInfo *p = name ? params_find(ps, name) : &ps->items[0];
    GDP_CHECK(p, "test_nan_grad_param '%s' is not a parameter of the model", name);
    if (p->offset < opt->shard_start || p->offset >= opt->shard_end) return;
    float nan = NAN;
    ctx_synchronize(ps->ctx);
    device_memcpy(ps->flat_grads + p->offset, ps->ctx->device, &nan, DEV_CPU, sizeof nan);
    device_synchronize(ps->ctx->device);
}

void step_begin(TrainRun *r, StepOutcome *s) {
    const TrainOptions *o = r->o;
    memset(s, 0, sizeof *s);
    s->val_loss = NAN;
    if (o->test_signal && r->step == o->test_signal_step) raise(o->test_signal);
    if (o->profile && !r->first) r->ctx->profile = &r->profile, r->profile.steps++;
    s->t0 = gdp_now_seconds();
    s->lr = lr_at(&r->sched, r->step);
    params_zero_grad(&r->ps);
}

void step_forward_backward(TrainRun *r, StepOutcome *s) {
    const TrainOptions *o = r->o;
    double loss_sum = 0;
    for (int micro = 0; micro < o->grad_accum; micro++) {
        r->train->next_batch(r->train->user, r->inputs, r->targets);
        Tensor *loss = train_batch_loss(&r->model, &r->docs, r->inputs, r->targets, r->cu_seqlens, r->B, r->T);
        double lv;
        tensor_to_doubles(loss, &lv);
        if (micro == o->grad_accum - 1) dist_buckets_arm(&r->buckets);
        tape_backward(r->ctx, loss);
        ctx_step_reset(r->ctx);
        loss_sum += lv;
    }
    s->loss = dist_mean_double(r->dist, loss_sum / o->grad_accum);
}

void step_reduce(TrainRun *r) {
    double t0 = gdp_now_seconds();
    dist_buckets_sync(&r->buckets);
    if (r->ctx->profile)
        ctx_synchronize(r->ctx), profile_add(&r->profile, "(gradient sync)", 0, gdp_now_seconds() - t0);
}

void step_update(TrainRun *r, StepOutcome *s) {
    const TrainOptions *o = r->o;
    if (o->test_nan_grad_count > 0 && r->step >= o->test_nan_grad_step &&
        r->step < o->test_nan_grad_step + o->test_nan_grad_count)
        inject_nan_grad(&r->ps, &r->opt, o->test_nan_grad_param);
    double t0 = gdp_now_seconds();
    /* A bad step is skipped before it touches the weights, so no NaN reaches them or a checkpoint. */
    s->norm = optim_grad_norm(&r->opt, 1.0 / o->grad_accum, r->dist);
    s->skipped = guard_judge(&r->guard, o, s->loss, s->norm, s->skip_why, sizeof s->skip_why);
    if (!s->skipped) {
        optim_update(&r->opt, s->lr, 1.0 / o->grad_accum, s->norm);
        dist_sync_params(r->dist, &r->ps, o->zero_stage);
    }
    ctx_synchronize(r->ctx);
    if (r->ctx->profile) profile_add(&r->profile, "(clip + adamw)", 0, gdp_now_seconds() - t0);
}

void step_end(TrainRun *r, StepOutcome *s) {
    s->dt = gdp_now_seconds() - s->t0;
    if (r->ctx->profile) r->profiled_s += s->dt, r->ctx->profile = NULL; /* eval and checkpoints are not profiled */
    /* tokens/s: an average that leaves out the first step (warm-up of caches and handles) */
    if (!r->first) {
        r->timed++;
        r->ema_dt = r->timed == 1 ? s->dt : 0.9 * r->ema_dt + 0.1 * s->dt;
    }
    s->tokens_per_s = r->first ? (double)r->tokens_per_step / s->dt : (double)r->tokens_per_step / r->ema_dt;
    r->first = false;
    if (r->timed == 0) r->result.first_loss = s->loss;
    if (!s->skipped) r->result.last_loss = s->loss;
    s->is_last = r->step + 1 == r->last;
}
