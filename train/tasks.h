/* gdp tasks: the state-tracking study (group word problems, data/tasks.h) on the library's model,
 * loss, optimizer and training loop. The model is the classification-head mode of the language
 * model (num_labels = |G|, one label per position, layers/model.h); train_run (train/train.h) does
 * the training with this file's batch source; the trained checkpoint is then evaluated on a fixed
 * test set of longer words with the paper's metric (accuracy at length L = fraction of test
 * sequences whose first L predictions are all correct). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "kernels/gdp/gdp.h"
#include "train/plot.h" /* PLOT_MAX_CURVES */

#define TASKS_MAX_SETS 32
#define TASKS_MAX_PLOT PLOT_MAX_CURVES

typedef struct TasksOptions {
    const char *group;        /* S3, S4, A5, S5, parity, ... (data/tasks.h) */
    /* model (the paper's: 1 layer, hidden 128, 8 heads x 32, no short conv, no gates, expand_v 1) */
    GdpMode mode;
    int n_h;                  /* Householder steps (householder) or r slices (split) */
    bool neg_eigval;          /* beta in (0, 2) instead of (0, 1) */
    bool mask_learned;        /* split mode: learned mask (init identity) or frozen identity */
    int layers, hidden, heads, head_dim;
    const char *sets[TASKS_MAX_SETS]; /* extra model config "key=value", applied last */
    int n_sets;
    /* data */
    int train_len, test_len;
    int test_seqs;            /* test sequences of test_len */
    bool bos;                 /* each word after a BOS token (id |G|, no label), as the paper's tokenizer */
    uint64_t test_seed;       /* the test set (the same for every run by default) */
    /* training */
    const char *device;
    const char *autocast;     /* "off" (default: f32) or "bf16" (the paper's precision), as gdp train's */
    int64_t steps;
    int batch;
    double lr, final_lr_frac, weight_decay, clip, beta1, beta2;
    int64_t warmup;           /* < 0: min(100, steps / 10) */
    uint64_t seed;            /* model init and training words */
    int64_t eval_every;       /* > 0: accuracy at train_len every N steps (progress.tsv) */
    int eval_seqs;            /* sequences for those checks */
    double early_stop;        /* > 0: stop once that check reaches this sequence accuracy */
    int eval_batch;           /* sequences per forward at evaluation (0: batch) */
    const char *out;          /* run folder (required): checkpoint, log.tsv, accuracy.tsv, plot, result.txt */
    int print_every;
    bool quiet;
} TasksOptions;

typedef struct TasksResult {
    char group[16];
    int64_t steps_done;
    double last_loss;
    double acc_train_len;     /* prefix accuracy at train_len */
    double acc_test_len;      /* ... at test_len */
    double token_acc;         /* mean per-position accuracy over the test_len positions */
    int len_90, len_50;       /* longest L with prefix accuracy >= 0.9 (0.5) */
    double seconds;
    char label[128];          /* "S3 householder n_h=2 beta(0,2)" */
} TasksResult;

TasksOptions tasks_default_options(void);
/* Trains and evaluates; writes o->out/{accuracy.tsv, accuracy.png|svg, result.txt, log.tsv,
 * progress.tsv (with eval_every), checkpoints}. Errors are fatal with a message. */
int tasks_run(const TasksOptions *o, TasksResult *res);
/* Whether o gives a model the run can build (the group and the model config); false with the
 * reason in err. */
bool tasks_check_config(const TasksOptions *o, char *err, size_t len);

/* One figure of prefix accuracy against length for several accuracy.tsv files: out_base.png via
 * gnuplot when use_gnuplot and it is installed, else out_base.svg. titles[i] labels tsv[i];
 * marker_x > 0 draws a dashed vertical line there (the training length). Returns the path written
 * in out ("" on failure). */
bool tasks_plot(const char *const *tsv, const char *const *titles, int n, const char *out_base, const char *title,
                int marker_x, bool use_gnuplot, char *out, size_t len);
