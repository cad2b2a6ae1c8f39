#include "train/step_guard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "core/params.h"

#define GUARD_STATE_VERSION 1

void guard_init(StepGuard *g, int window) {
    memset(g, 0, sizeof *g);
    g->window = window;
    g->loss = (double *)xcalloc((size_t)window, sizeof(double));
    g->norm = (double *)xcalloc((size_t)window, sizeof(double));
}

void guard_free(StepGuard *g) { free(g->loss), free(g->norm); }

int guard_state(const StepGuard *g, double *out) {
    double head[GUARD_STATE_HEAD] = {GUARD_STATE_VERSION, (double)g->consecutive, (double)g->total, g->window, g->n,
                                     g->pos};
    memcpy(out, head, sizeof head);
    memcpy(out + GUARD_STATE_HEAD, g->loss, (size_t)g->window * sizeof(double));
    memcpy(out + GUARD_STATE_HEAD + g->window, g->norm, (size_t)g->window * sizeof(double));
    return GUARD_STATE_HEAD + 2 * g->window;
}

void guard_restore(StepGuard *g, const double *st, int n, bool root) {
    if (n < GUARD_STATE_HEAD || st[0] != GUARD_STATE_VERSION) return; /* older checkpoints: none saved */
    g->consecutive = (int64_t)st[1], g->total = (int64_t)st[2];
    int w = (int)st[3], held = (int)st[4], pos = (int)st[5];
    if (w != g->window || n != GUARD_STATE_HEAD + 2 * w || held < 0 || held > w || pos < 0 || pos >= w) {
        if (root)
            printf("note: the checkpoint's outlier history is for --skip-window %d, this run uses %d: it starts "
                   "afresh\n", w, g->window);
        return;
    }
    g->n = held, g->pos = pos;
    memcpy(g->loss, st + GUARD_STATE_HEAD, (size_t)w * sizeof(double));
    memcpy(g->norm, st + GUARD_STATE_HEAD + w, (size_t)w * sizeof(double));
}

/* How many standard deviations x lies above the window's mean; NAN until the window is full (as
 * llm.c: a short history would flag ordinary noise). */
static double guard_z(const StepGuard *g, const double *buf, double x) {
    if (g->n < g->window) return NAN;
    double mean = 0, var = 0;
    for (int i = 0; i < g->n; i++) mean += buf[i];
    mean /= g->n;
    for (int i = 0; i < g->n; i++) var += (buf[i] - mean) * (buf[i] - mean);
    double sd = sqrt(var / g->n);
    return sd > 0 ? (x - mean) / sd : 0.0;
}

bool guard_judge(StepGuard *g, const TrainOptions *o, double loss, double norm, char *why, size_t len) {
    bool skip = true;
    if (!isfinite(loss))
        snprintf(why, len, "the loss is %g", loss);
    else if (!isfinite(norm))
        snprintf(why, len, "the gradient norm is %g", norm);
    else {
        double zl = guard_z(g, g->loss, loss), zn = guard_z(g, g->norm, norm);
        if (o->skip_loss_z > 0 && zl > o->skip_loss_z)
            snprintf(why, len, "loss %.4f is %.1f standard deviations above the last %d steps' (--skip-loss-z %g)",
                     loss, zl, g->window, o->skip_loss_z);
        else if (o->skip_norm_z > 0 && zn > o->skip_norm_z)
            snprintf(why, len, "gradient norm %.4f is %.1f standard deviations above the last %d steps' "
                               "(--skip-norm-z %g)", norm, zn, g->window, o->skip_norm_z);
        else
            skip = false;
        /* outliers join the history too, so a lasting shift of the loss is soon the new normal */
        g->loss[g->pos] = loss, g->norm[g->pos] = norm;
        g->pos = (g->pos + 1) % g->window;
        if (g->n < g->window) g->n++;
    }
    if (skip)
        g->consecutive++, g->total++;
    else
        g->consecutive = 0;
    return skip;
}

void guard_fail(const StepGuard *g, Optimizer *opt, Dist *dist, int64_t step, const char *why, const TrainOptions *o) {
    int64_t elem = 0;
    const char *name = optim_first_nonfinite_grad(opt, &elem);
    int idx = name ? (int)(params_find(opt->ps, name) - opt->ps->items) : opt->ps->n;
    int first = (int)-dist_max_double(dist, -(double)idx);
    if (!dist_is_root(dist)) { /* rank 0 reports; its dist_abort ends this rank too */
        dist_barrier(dist);
        exit(1);
    }
    char detail[512];
    if (first < opt->ps->n && first == idx)
        snprintf(detail, sizeof detail, "the first non-finite gradient is in parameter %s (element %lld)", name,
                 (long long)elem);
    else if (first < opt->ps->n)
        snprintf(detail, sizeof detail, "the first non-finite gradient is in parameter %s",
                 opt->ps->items[first].t->name);
    else
        snprintf(detail, sizeof detail, "every gradient is finite");
    dist_abort(dist, "%lld steps in a row were skipped (--max-skips %lld), the last at step %lld because %s; %s. "
                     "Lower --lr (now %g), check the data, or raise --max-skips",
               (long long)g->consecutive, (long long)o->max_skips, (long long)step + 1, why, detail, o->lr);
}
