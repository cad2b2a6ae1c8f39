/* The training run behind `gdp train`, callable from tests and other tools: options, the data
 * interface (a batch source with a resumable position) and the run itself. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/ctx.h"
#include "layers/config.h"
#include "train/dist.h"
#include "train/memory_plan.h"
#include "train/schedule.h"

#define TRAIN_MAX_SETS 64
#define TRAIN_DATA_STATE_MAX 16

/* A source of batches: B*T int32 inputs and targets (next tokens, or per-position labels for a
 * classification model; targets < 0 are ignored). The position is saved in checkpoints. */
typedef struct TrainData {
    void *user;
    void (*next_batch)(void *user, int32_t *inputs, int32_t *targets);
    void (*reset)(void *user); /* back to the first batch (validation) */
    int (*get_state)(void *user, int64_t *out, int max); /* returns the count written */
    void (*set_state)(void *user, const int64_t *state, int n);
} TrainData;

/* Documents in the batches (docs/data.md): an input equal to `eot` ends its document, and the next
 * position starts a new one from a fresh state (GDP state and short-conv windows). */
typedef struct TrainDocs {
    int32_t eot;             /* the end-of-text id; < 0: no documents (every row one sequence) */
    bool loss_across;        /* the target at an end-of-text (the next document's first token) counts */
    int max_seqs;            /* > 0: the most sequences a batch may hold (the memory plan's); the last
                              * documents of a batch with more are joined to the ones before them */
    int64_t joined;          /* batches that had more (counted; a warning at the first) */
} TrainDocs;

typedef struct TrainOptions {
    /* model */
    const char *preset;      /* applied first (default "tiny" when neither preset nor config is given) */
    const char *config_file; /* `key = value` lines, applied next */
    const char *sets[TRAIN_MAX_SETS]; /* "key=value" overrides, applied last */
    int n_sets;
    /* data */
    const char *data;        /* shard folder, shard file/pattern, or a text file (bytes) */
    double val_fraction;     /* text files: the held-out share */
    TrainData *train_data, *val_data; /* instead of `data` (tests, other tasks); val may be NULL */
    int documents;           /* 1: no state crosses an end-of-text; 0: rows run as one sequence each;
                              * -1 (default): 1 when the data's tokenizer has an end-of-text token */
    int64_t eot;             /* the end-of-text id; -1 (default): the data tokenizer's */
    bool loss_across_docs;   /* documents: the prediction from an end-of-text counts (default true) */
    /* run */
    const char *device;      /* cpu | cuda | auto */
    int64_t steps;           /* optimizer steps (the schedule's horizon) */
    int64_t stop_at;         /* > 0: stop after this many steps (the schedule still spans `steps`) */
    int batch, seq, grad_accum;
    double lr, final_lr_frac;
    int64_t warmup;          /* < 0: min(100, steps / 10) */
    LrKind schedule;
    double clip, weight_decay, beta1, beta2, eps;
    int64_t eval_every;      /* 0: only at the end (when there is validation data) */
    int eval_batches;
    int64_t checkpoint_every;/* 0: only at the end */
    int keep;                /* checkpoints kept (<= 0: all) */
    const char *out;         /* output folder (log.tsv, loss plot, checkpoints); NULL: none */
    const char *resume;      /* checkpoint file, or a folder (its latest) */
    uint64_t seed;
    int zero_stage;          /* 0 or 1 */
    double bucket_mb;        /* gradient buckets (MiB) reduced during backward; 0: one reduction after it */
    int print_every;
    bool quiet;
    double peak_tflops;      /* for MFU on GPU */
    bool profile;            /* time every op after the first step; table at the end */
    bool recompute;          /* --recompute: blocks run again in backward (op_checkpoint) */
    bool selective_recompute; /* --selective-recompute: the MLP halves and q/k conv + norm only */
    const char *autocast;    /* "bf16", "off", or NULL/"auto": bf16 on cuda, off on cpu */
    bool f32_activations;    /* --activations f32: autocast keeps f32 activations (bf16 GEMMs and GDP op only) */
    bool activations_given;  /* --activations was on the command line (it needs bf16 autocast) */
    bool bf16_gemm_copies;   /* f32 activations under autocast: linear GEMMs on bf16 operand copies (default;
                              * --bf16-gemm inside lets cuBLAS round the f32 operands) */
    int64_t act_mem_mb, grad_mem_mb, scratch_mem_mb, persist_mem_mb; /* 0: planned (train/memory_plan.h) */
    int64_t mem_limit_mb;    /* > 0: memory the run may use (the plan's check); 0: the GPU's free memory */
    /* bad steps: a non-finite loss or gradient norm, or (when the z limit is > 0) a loss or norm more
     * than that many standard deviations above the mean of the last skip_window steps, skips the
     * update (parameters, AdamW moments and update count stay; the data moves on) */
    int64_t max_skips;       /* this many skips in a row end the run with an error; 0: never */
    double skip_loss_z, skip_norm_z; /* 0: off (llm.c's -sl, -sg) */
    int skip_window;         /* steps of history for the z-scores */
    /* test hooks, no flags: a NaN in the gradient of parameter test_nan_grad_param (NULL: the first)
     * at steps [test_nan_grad_step, + test_nan_grad_count); raise(test_signal) as step test_signal_step
     * begins */
    int64_t test_nan_grad_step, test_nan_grad_count;
    const char *test_nan_grad_param;
    int test_signal;
    int64_t test_signal_step;
} TrainOptions;

typedef struct TrainResult {
    int64_t steps_done;      /* the step count reached */
    double first_loss, last_loss, last_val_loss; /* last_val_loss NAN when never evaluated */
    int64_t n_params;
    char checkpoint[1024];   /* the last checkpoint written ("" when none) */
    int64_t steps_run;       /* steps this call ran (steps_done minus the resumed step) */
    int64_t skipped;         /* steps skipped (bad loss or gradient), over the whole run */
    int stopped_by;          /* the signal (SIGTERM, SIGINT, SIGUSR1) that stopped the run early, or 0 */
} TrainResult;

TrainOptions train_default_options(void);
/* Resolves the model config from preset, config file and sets; false with the reason in err. */
bool train_resolve_config(const TrainOptions *o, ModelConfig *cfg, bool *vocab_given, char *err, size_t len);
/* Runs training. dist may come from dist_init (gdp train) or dist_init_single (tests). Errors are
 * fatal with a message. SIGTERM, SIGINT and SIGUSR1 (on any rank) end the run after the current
 * step with a checkpoint (when there is an output folder); a second SIGINT ends it at once. The
 * previous handlers are restored on return. Returns 0. */
int train_run(const TrainOptions *o, Dist *dist, TrainResult *res);

/* Whether the run uses bf16 autocast (fatal when asked for on the cpu). */
bool train_autocast_bf16(const TrainOptions *o, Device dev);
/* Whether autocast runs the blocks' branches on bf16 activations (layers/module.h). */
bool train_bf16_activations(const TrainOptions *o, Device dev);
/* The memory plan's description of the run's step (train/memory_plan.h); dist NULL: one rank. */
MemorySpec train_memory_spec(const TrainOptions *o, Device dev, const Dist *dist);
/* Mean loss over `batches` batches of src (reset first), no gradients; summed over ranks. */
struct Model;
double train_evaluate(struct Model *m, TrainData *src, int batches, int B, int T, Dist *dist);
/* The same over documents (docs NULL or docs->eot < 0: train_evaluate). */
double train_evaluate_docs(struct Model *m, TrainData *src, int batches, int B, int T, Dist *dist,
                           TrainDocs *docs);
/* One batch's loss (recorded when ctx->grad_enabled): with documents, their boundaries go to the
 * model as packed sequences (cu has room for B*T + 1) and, unless docs->loss_across, the targets at
 * end-of-text inputs are set to -1; without (docs NULL or eot < 0), model_loss_host. */
Tensor *train_batch_loss(struct Model *m, TrainDocs *docs, const int32_t *inputs, int32_t *targets, int32_t *cu,
                         int64_t B, int64_t T);
/* Sequences a batch of B x T may hold with documents on dev, and so the memory plan's
 * (TrainDocs.max_seqs): on the cpu B*T (any batch), on cuda B * min(1 + T/64, 64). */
int train_docs_max_seqs(Device dev, int64_t B, int64_t T);
/* Documents as --documents, --eot and --loss-across-docs ask (documents 1 on, 0 off, -1 on when the
 * data's tokenizer has an end-of-text token; eot < 0: the tokenizer's; data may be NULL), for batches
 * of B x T on dev. Fatal when on is asked for and no end-of-text id is known. */
void train_docs_open(TrainDocs *d, int documents, int64_t eot, bool loss_across, const char *data, Device dev,
                     int64_t B, int64_t T);
/* Fatal when the end-of-text id is not a token of a vocabulary of vocab_size. */
void train_docs_check_vocab(const TrainDocs *d, int vocab_size);
/* Loss by position: one forward of the batch (with documents as train_batch_loss takes them), and for
 * each position p (0-based, counted from the start of the sequence it runs in: its row's start or,
 * with documents, its document's start) the cross-entropy of its counted target (>= 0) added to
 * nats[p / bucket] and the target to tokens[p / bucket] (arrays of ceil(T / bucket), added to, not
 * cleared). The losses come from the training loss's op, a bucket of one sequence at a time.
 * Returns the batch's summed loss (nats) over its counted targets. */
double train_position_loss(struct Model *m, TrainDocs *docs, const int32_t *inputs, int32_t *targets, int32_t *cu,
                           int64_t B, int64_t T, int64_t bucket, double *nats, int64_t *tokens);

/* A checkpoint file, or a folder's latest checkpoint (malloc'd; fatal when neither exists). */
char *train_resolve_checkpoint(const char *path_or_dir, const char *flag);
/* Builds the model a checkpoint describes on a new context of dev (sized for B x T; B = T = 1 for
 * decoding) and loads its parameters. Returns the context; free with model_free,
 * params_free_store, ctx_destroy. */
Ctx *train_load_model(const char *ckpt, Device dev, int64_t B, int64_t T, struct Model *m, struct ParamStore *ps);
/* The same, its memory planned for batches of documents (at most max_seqs sequences; 0: none). */
Ctx *train_load_model_docs(const char *ckpt, Device dev, int64_t B, int64_t T, int64_t max_seqs, struct Model *m,
                           struct ParamStore *ps);
