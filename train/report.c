/* What a training run reports: its header lines, each step's validation, log.tsv row and
 * progress line, and the summary at the end. Rank 0 prints; every rank evaluates. */
#include <math.h>
#include <stdio.h>

#include "base/common.h"
#include "train/run.h"

static void fmt_duration(double s, char *buf, size_t len) {
    if (!isfinite(s) || s < 0) {
        snprintf(buf, len, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60)
        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, len, "%lds", t);
}

void run_print_header(const TrainRun *r) {
    const TrainOptions *o = r->o;
    const Dist *dist = r->dist;
    if (r->root && !o->quiet) {
        printf("model: %s mode, %d layers, hidden %d, %d heads x %d (v %d), %s %d, vocab %d, %s head: %.3fM "
               "parameters\n",
               r->cfg.mode == GDP_MODE_SPLIT ? "split" : "householder", r->cfg.num_hidden_layers, r->cfg.hidden_size,
               r->cfg.num_heads, r->cfg.head_dim, cfg_head_v_dim(&r->cfg), r->cfg.mode == GDP_MODE_SPLIT ? "r" : "n_h",
               r->cfg.num_householder, r->cfg.vocab_size,
               r->cfg.num_labels > 0 ? "classifier" : (r->cfg.tie_word_embeddings ? "tied" : "untied"),
               r->result.n_params / 1e6);
        if (r->train_loader) {
            char d[512];
            loader_describe(r->train_loader, d, sizeof d);
            printf("data: %s\n", d);
        }
        if (r->docs.eot >= 0)
            printf("documents: token %d ends each, the next starts from a fresh state; the prediction across a "
                   "boundary %s (--loss-across-docs); at most %d a batch\n",
                   (int)r->docs.eot, r->docs.loss_across ? "counts" : "is ignored", r->docs.max_seqs);
        printf("train: %s%s%s, %d rank%s, batch %lld x %lld x accum %d = %lld tokens/step, steps %lld..%lld of %lld, "
               "lr %g (%s, warmup %lld), seed %llu%s%s\n",
               device_name(r->dev),
               !r->ctx->autocast_bf16           ? ""
               : r->ctx->bf16_activations       ? " (bf16 autocast, bf16 activations)"
               : r->ctx->autocast_gemm_copies   ? " (bf16 autocast, f32 activations, GEMM copies)"
                                             : " (bf16 autocast, f32 activations)",
               r->model.recompute             ? " with recomputed blocks"
               : r->model.selective_recompute ? " with selective recomputation"
                                           : "",
               dist->world, dist->world > 1 ? "s" : "", (long long)r->B, (long long)r->T, o->grad_accum,
               (long long)r->tokens_per_step, (long long)r->step, (long long)r->last, (long long)o->steps, o->lr,
               lr_kind_name(o->schedule), (long long)r->sched.warmup, (unsigned long long)o->seed,
               r->resume_path ? ", resumed from " : "", r->resume_path ? r->resume_path : "");
    }

    if (r->root && !o->quiet) {
        char mem[256];
        memory_plan_describe(&r->mplan, mem, sizeof mem);
        printf("%s\n", mem);
    }
    if (r->root && !o->quiet && dist->world > 1) {
        const char *how = o->zero_stage == 1 ? "reduce-scatter" : "all-reduce";
        if (r->buckets.n > 0)
            printf("gradients: %d buckets (--bucket-mb %g), each %s started during backward\n", r->buckets.n,
                   o->bucket_mb, how);
        else
            printf("gradients: one %s after backward (%s)\n", how, r->recompute_flag ? r->recompute_flag : "--bucket-mb 0");
    }
}

void run_evaluate_and_log(TrainRun *r, StepOutcome *s) {
    const TrainOptions *o = r->o;
    Dist *dist = r->dist;
    if (r->val && ((o->eval_every > 0 && (r->step + 1) % o->eval_every == 0) || s->is_last)) {
        s->val_loss = train_evaluate_docs(&r->model, r->val, o->eval_batches, (int)r->B, (int)r->T, dist, &r->docs);
        r->result.last_val_loss = s->val_loss;
    }
    logger_step(&r->lg, r->step, s->loss, s->lr, s->norm, s->tokens_per_s, s->val_loss, s->skipped);
    if (s->skipped) {
        if (r->root && !o->quiet)
            printf("step %6lld/%lld | skipped: %s (%lld in a row, %lld in all)\n", (long long)r->step + 1,
                   (long long)o->steps, s->skip_why, (long long)r->guard.consecutive, (long long)r->guard.total);
        if (o->max_skips > 0 && r->guard.consecutive >= o->max_skips)
            guard_fail(&r->guard, &r->opt, dist, r->step, s->skip_why, o);
    }
    if (r->root && !o->quiet && !s->skipped &&
        (r->step % GDP_MAX(o->print_every, 1) == 0 || s->is_last || !isnan(s->val_loss))) {
        char eta[32];
        fmt_duration((double)(r->last - r->step - 1) * (r->timed ? r->ema_dt : s->dt), eta, sizeof eta);
        printf("step %6lld/%lld | loss %.4f | lr %.3e | norm %.4f | %.0f tok/s | ETA %s", (long long)r->step + 1,
               (long long)o->steps, s->loss, s->lr, s->norm, s->tokens_per_s, eta);
        if (r->dev == DEV_CUDA)
            printf(" | MFU %.1f%%", 100.0 * r->flops_per_token * s->tokens_per_s / dist->world / (o->peak_tflops * 1e12));
        if (!isnan(s->val_loss)) printf(" | val %.4f", s->val_loss);
        printf("\n");
        fflush(stdout);
    }
}

void run_print_memory_after_first_step(const TrainRun *r) {
    const TrainOptions *o = r->o;
    if (r->timed > 0) return;
    /* the arenas were planned (train/memory_plan.h); the card's use after a step */
    size_t used, total;
    if (r->root && !o->quiet && r->dev == DEV_CUDA && device_memory_info(&used, &total))
        printf("memory: GPU memory in use after step 1: %.2f of %.2f GiB\n", used / 1073741824.0,
               total / 1073741824.0);
}

void run_print_summary(TrainRun *r) {
    const TrainOptions *o = r->o;
    /* the loss plot and the arenas' high-water marks */
    const char *plot = logger_finish(&r->lg);
    if (r->root && !o->quiet) {
        if (plot && plot[0]) printf("loss plot: %s\n", plot);
        char span[96] = "", skips[64] = "";
        if (r->first_step > 0)
            snprintf(span, sizeof span, " (steps %lld to %lld)", (long long)r->first_step + 1, (long long)r->step);
        if (r->guard.total > 0) snprintf(skips, sizeof skips, ", %lld skipped", (long long)r->guard.total);
        printf("done: %lld steps%s%s in %.1f s; memory high water: acts %.1f MiB of %.1f, grads %.1f of %.1f, "
               "scratch %.1f of %.1f\n",
               (long long)(r->step - r->first_step), span, skips, gdp_now_seconds() - r->t_start,
               r->ctx->acts.high_water / 1048576.0, r->ctx->acts.capacity / 1048576.0,
               r->ctx->grads.high_water / 1048576.0, r->ctx->grads.capacity / 1048576.0,
               r->ctx->scratch.high_water / 1048576.0, r->ctx->scratch.capacity / 1048576.0);
        if (r->docs.joined > 0)
            printf("documents: %lld batches held more than %d documents; their last ones were joined\n",
                   (long long)r->docs.joined, r->docs.max_seqs);
    }
    if (r->root && o->profile && r->profile.steps > 0) {
        profile_print(&r->profile, stdout);
        printf("  %-22s %32.3f  (whole step, host time)\n", "step", 1e3 * r->profiled_s / r->profile.steps);
    }
}
