/* Setting up a training run: the model config, the data, the model and optimizer on arenas sized
 * by the memory plan, and the state of a resumed run; and releasing it all at the end. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "train/checkpoint.h"
#include "train/run.h"

/* The checkpoint's config when resuming, else preset, config file and --set. */
static void resolve_model_config(TrainRun *r) {
    const TrainOptions *o = r->o;
    char err[1024];
    r->resume_path = o->resume ? train_resolve_checkpoint(o->resume, "--resume") : NULL;
    r->vocab_given = false;
    if (r->resume_path) {
        char *text = checkpoint_read_config(r->resume_path);
        r->cfg = model_config_default();
        if (!model_config_load_text(&r->cfg, text, r->resume_path, err, sizeof err) ||
            !model_config_validate(&r->cfg, err, sizeof err))
            gdp_fatal("checkpoint '%s' has an unusable model config: %s", r->resume_path, err);
        free(text);
        r->vocab_given = true;
        if (r->root && (o->preset || o->config_file || o->n_sets))
            printf("note: resuming: the model config comes from %s; --preset/--config/--set are ignored\n",
                   r->resume_path);
    } else if (!train_resolve_config(o, &r->cfg, &r->vocab_given, err, sizeof err)) {
        gdp_fatal("model config: %s", err);
    }
}

/* Context, model and optimizer; the arenas are sized from the model (train/memory_plan.h), and a
 * run that cannot fit stops here. */
static void build_model_and_optimizer(TrainRun *r) {
    const TrainOptions *o = r->o;
    Dist *dist = r->dist;
    MemorySpec mspec = train_memory_spec(o, r->dev, dist);
    mspec.max_seqs = r->docs.eot >= 0 ? r->docs.max_seqs : 0;
    r->ctx = memory_plan_create(&r->cfg, &mspec, o->seed, &r->model, &r->ps, &r->mplan);
    dist_attach(dist, r->ctx);
    r->result.n_params = params_count(&r->ps);
    GDP_CHECK(r->result.n_params == model_config_param_count(&r->cfg),
              "internal: the model registered %lld parameters, the config predicts %lld",
              (long long)r->result.n_params, (long long)model_config_param_count(&r->cfg));
    AdamWConfig acfg = adamw_default_config();
    acfg.beta1 = o->beta1, acfg.beta2 = o->beta2, acfg.eps = o->eps;
    acfg.weight_decay = o->weight_decay, acfg.grad_clip = o->clip;
    int64_t shard_start = 0, shard_end = r->ps.total;
    if (o->zero_stage == 1) dist_shard_range(r->ps.total, dist->rank, dist->world, &shard_start, &shard_end);
    optim_init(&r->opt, &r->ps, acfg, shard_start, shard_end);
    /* recomputed blocks write their parameters' gradients where a tape hook cannot see them */
    r->recompute_flag = o->recompute ? "--recompute" : o->selective_recompute ? "--selective-recompute" : NULL;
    dist_buckets_init(&r->buckets, dist, &r->ps, o->zero_stage, r->recompute_flag ? 0 : o->bucket_mb);
    r->sched = (LrSchedule){o->schedule, o->lr, o->final_lr_frac, o->warmup, o->steps, 0};
    if (r->sched.warmup < 0) r->sched.warmup = GDP_MIN((int64_t)100, o->steps / 10);
    lr_schedule_check(&r->sched);
}

/* Parameters, AdamW state, step, the data position and the skip history of a resumed run. */
static void resume(TrainRun *r) {
    const TrainOptions *o = r->o;
    r->step = 0;
    rng_seed(&r->rng, o->seed);
    GDP_CHECK(o->skip_window >= 2 && 2 * o->skip_window + GUARD_STATE_HEAD <= CHECKPOINT_MAX_STATE,
              "train: skip_window %d must be from 2 to %d", o->skip_window,
              (CHECKPOINT_MAX_STATE - GUARD_STATE_HEAD) / 2);
    guard_init(&r->guard, o->skip_window);
    if (r->resume_path) {
        CheckpointInfo info;
        checkpoint_load(r->resume_path, &r->ps, &r->opt, &info);
        r->step = info.step;
        r->rng = info.rng;
        GDP_CHECK(r->step <= o->steps, "--resume: the checkpoint is at step %lld, past --steps %lld",
                  (long long)r->step, (long long)o->steps);
        if (info.n_loader > 0 && r->train->set_state)
            r->train->set_state(r->train->user, info.loader_state, info.n_loader);
        guard_restore(&r->guard, info.train_state, info.n_train_state, r->root);
        checkpoint_info_free(&info);
    }
    r->first_step = r->step;
    r->last = o->stop_at > 0 ? GDP_MIN(o->stop_at, o->steps) : o->steps;
}

static void write_run_config(const char *dir, const char *cfg_text, const TrainOptions *o) {
    char path[1100];
    snprintf(path, sizeof path, "%s/config.txt", dir);
    FILE *f = xfopen(path, "w");
    fprintf(f, "# model (gdp train --config accepts this file)\n%s", cfg_text);
    fprintf(f, "# train: data=%s steps=%lld batch=%d seq=%d grad_accum=%d lr=%g schedule=%s warmup=%lld clip=%g "
               "weight_decay=%g beta1=%g beta2=%g eps=%g seed=%llu\n",
            o->data ? o->data : "(given)", (long long)o->steps, o->batch, o->seq, o->grad_accum, o->lr,
            lr_kind_name(o->schedule), (long long)o->warmup, o->clip, o->weight_decay, o->beta1, o->beta2, o->eps,
            (unsigned long long)o->seed);
    fclose(f);
}

void run_setup(TrainRun *r, const TrainOptions *o, Dist *dist) {
    memset(r, 0, sizeof *r);
    r->o = o, r->dist = dist;
    r->result.last_val_loss = NAN;
    r->root = dist_is_root(dist);
    r->dev = device_parse(o->device, "--device");
    GDP_CHECK(o->batch > 0 && o->seq > 0 && o->grad_accum > 0 && o->steps > 0,
              "train: --batch, --seq, --grad-accum and --steps must be positive");
    resolve_model_config(r);
    run_open_data(r);
    r->B = o->batch, r->T = o->seq;
    build_model_and_optimizer(r);
    resume(r);

    model_config_to_text(&r->cfg, r->cfg_text, sizeof r->cfg_text);
    logger_init(&r->lg, o->out, dist->rank, r->resume_path ? r->step : -1);
    r->lg.quiet = true; /* train/report.c prints the progress line; the logger writes log.tsv */
    if (r->root && o->out) write_run_config(o->out, r->cfg_text, o);
    r->tokens_per_step = r->B * r->T * o->grad_accum * dist->world;
    r->flops_per_token = 3.0 * model_config_flops_per_token(&r->cfg, (int)r->T);
    r->inputs = (int32_t *)xmalloc((size_t)(r->B * r->T) * sizeof(int32_t));
    r->targets = (int32_t *)xmalloc((size_t)(r->B * r->T) * sizeof(int32_t));
    r->cu_seqlens = (int32_t *)xmalloc((size_t)(r->B * r->T + 1) * sizeof(int32_t));
    r->guard_saved = (double *)xmalloc((size_t)(GUARD_STATE_HEAD + 2 * r->guard.window) * sizeof(double));
    r->first = true;
}

void run_free(TrainRun *r) {
    free(r->inputs), free(r->targets), free(r->cu_seqlens), free(r->resume_path), free(r->guard_saved);
    guard_free(&r->guard);
    dist_buckets_free(&r->buckets);
    optim_free(&r->opt);
    model_free(&r->model);
    params_free_store(&r->ps);
    if (r->train_loader) loader_close(r->train_loader);
    if (r->val_loader) loader_close(r->val_loader);
    r->dist->ctx = NULL;
    ctx_destroy(r->ctx);
}
