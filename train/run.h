/* One training run's state and the phases of train_run (train/run.c), each in its own module:
 * setting up (train/setup.c, the data in train/data_source.c), one optimizer step (train/step.c),
 * logging and the console (train/report.c) and saving (train/save.c). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "base/common.h"
#include "core/params.h"
#include "core/profile.h"
#include "data/loader.h"
#include "layers/model.h"
#include "train/dist.h"
#include "train/logger.h"
#include "train/memory_plan.h"
#include "train/optim.h"
#include "train/schedule.h"
#include "train/step_guard.h"
#include "train/stop_signal.h"
#include "train/train.h"

typedef struct TrainRun {
    const TrainOptions *o;
    Dist *dist;
    bool root;               /* this rank logs, prints and saves */
    Device dev;
    TrainResult result;
    /* the model config: the checkpoint's when resuming, else preset, config file and --set */
    char *resume_path;       /* NULL: a fresh run */
    ModelConfig cfg;
    bool vocab_given;        /* vocab_size was set (else the data's vocabulary decides it) */
    char cfg_text[8192];
    /* data: this rank's slice of each global batch */
    Loader *train_loader, *val_loader; /* NULL when the options bring their own TrainData */
    TrainData train_src, val_src;
    TrainData *train, *val;  /* val NULL: no validation */
    int64_t B, T;
    int32_t *inputs, *targets;
    TrainDocs docs;          /* documents (docs.eot >= 0) or none */
    int32_t *cu_seqlens;     /* [B*T + 1]: one batch's packed sequences (train_batch_loss) */
    /* model and optimizer, on arenas sized by the memory plan */
    MemoryPlan mplan;
    ParamStore ps;
    Model model;
    Ctx *ctx;
    Optimizer opt;
    DistBuckets buckets;     /* gradient all-reduce in per-layer buckets during the last micro-step's backward */
    const char *recompute_flag; /* the flag that rules out buckets, or NULL */
    LrSchedule sched;
    /* progress */
    int64_t step, first_step, last; /* the next step, the resumed one and the one to stop after */
    Rng rng;
    StepGuard guard;
    double *guard_saved;     /* the guard's history as saved in a checkpoint */
    Logger lg;
    StopSignals signals;
    int64_t tokens_per_step;
    double flops_per_token;
    double ema_dt, t_start;  /* step time average (the first step left out), run start */
    int64_t timed;           /* steps in ema_dt */
    bool first;              /* the coming step is this call's first */
    OpProfile profile;
    double profiled_s;
} TrainRun;

/* What one step did, for the log and the console. */
typedef struct StepOutcome {
    double t0;               /* when the step began */
    double lr, loss, norm;
    double dt, tokens_per_s;
    double val_loss;         /* NAN when not evaluated at this step */
    bool skipped, is_last;
    char skip_why[256];
} StepOutcome;

/* train/setup.c: the model config, data, model, optimizer and resume; run_free releases them. */
void run_setup(TrainRun *r, const TrainOptions *o, Dist *dist);
void run_free(TrainRun *r);
/* train/data_source.c: opens --data (or takes the options' TrainData), fixing the vocabulary. */
void run_open_data(TrainRun *r);

/* train/step.c: one optimizer step. */
void step_begin(TrainRun *r, StepOutcome *s);         /* test hooks, profiler, learning rate, zeroed gradients */
void step_forward_backward(TrainRun *r, StepOutcome *s); /* every micro-batch: forward, loss, backward */
void step_reduce(TrainRun *r);                        /* gradients averaged over ranks */
void step_update(TrainRun *r, StepOutcome *s);        /* the guard's verdict, then clip + AdamW */
void step_end(TrainRun *r, StepOutcome *s);           /* timing and the run's result */

/* train/report.c: validation, log.tsv and the console. */
void run_print_header(const TrainRun *r);
void run_evaluate_and_log(TrainRun *r, StepOutcome *s);
void run_print_memory_after_first_step(const TrainRun *r);
void run_print_summary(TrainRun *r);

/* train/save.c: a checkpoint when one is due (every N steps, at the end, or on a stop signal);
 * true when a stop signal ends the run now. */
bool run_save(TrainRun *r, const StepOutcome *s);
