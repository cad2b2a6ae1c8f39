/* Bad steps: a step whose loss or gradient norm is not finite, or an outlier against the recent
 * history (TrainOptions.max_skips, skip_loss_z, skip_norm_z), is skipped before it touches the
 * weights. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "train/dist.h"
#include "train/optim.h"
#include "train/train.h"

/* Which steps are skipped (see TrainOptions.max_skips). The history is saved in checkpoints
 * (train_state) so that a resumed run skips exactly the steps the uninterrupted one would. */
typedef struct StepGuard {
    int window, n, pos;  /* ring buffers of the last `window` finite losses and norms */
    double *loss, *norm;
    int64_t consecutive, total;
} StepGuard;

#define GUARD_STATE_HEAD 6 /* version, consecutive, total, window, n, pos */

void guard_init(StepGuard *g, int window);
void guard_free(StepGuard *g);
/* The history as doubles for a checkpoint (out holds GUARD_STATE_HEAD + 2 * window); returns the count. */
int guard_state(const StepGuard *g, double *out);
/* Restores a saved history; one from another --skip-window starts afresh (with a note). */
void guard_restore(StepGuard *g, const double *st, int n, bool root);
/* Whether this step's update is skipped (the reason in why); then records the step. Every rank
 * sees the same loss (averaged) and norm (global), so every rank decides the same. */
bool guard_judge(StepGuard *g, const TrainOptions *o, double loss, double norm, char *why, size_t len);
/* Ends the run after max_skips skips in a row, naming the first parameter whose gradient is not
 * finite (the ranks agree on the lowest such parameter under ZeRO-1's shards). */
__attribute__((noreturn)) void guard_fail(const StepGuard *g, Optimizer *opt, Dist *dist, int64_t step,
                                          const char *why, const TrainOptions *o);
