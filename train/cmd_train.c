/* gdp train: trains a Gated DeltaProduct language model. train_run reads top-down as the recipe:
 *   model config -> data -> context -> model and optimizer -> resume -> for each step:
 *   [micro-steps: forward, loss, backward] -> all-reduce -> clip + AdamW -> log, eval, checkpoint
 *   -> final checkpoint and loss plot. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"
#include "core/params.h"
#include "core/profile.h"
#include "core/tape.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "layers/model.h"
#include "train/checkpoint.h"
#include "train/cli.h"
#include "train/commands.h"
#include "train/logger.h"
#include "train/memory_plan.h"
#include "train/optim.h"
#include "train/train.h"

/* ---- options ------------------------------------------------------------------------------------ */

TrainOptions train_default_options(void) {
    TrainOptions o;
    memset(&o, 0, sizeof o);
    o.val_fraction = LOADER_DEFAULT_VAL_FRACTION;
    o.device = "cpu";
    o.steps = 1000;
    o.batch = 8, o.seq = 256, o.grad_accum = 1;
    o.lr = 1e-3, o.final_lr_frac = 0.1, o.warmup = -1, o.schedule = LR_COSINE;
    o.clip = 1.0, o.weight_decay = 0.1, o.beta1 = 0.9, o.beta2 = 0.95, o.eps = 1e-8;
    o.eval_every = 100, o.eval_batches = 8;
    o.checkpoint_every = 0, o.keep = 3;
    o.seed = 1;
    o.bucket_mb = 25;
    o.print_every = 1;
    o.peak_tflops = 989.0;
    o.bf16_gemm_copies = true;
    o.max_skips = 10;
    o.skip_window = 128;
    return o;
}

static bool text_mentions_key(const char *text, const char *key) {
    for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) {
        bool start = p == text || p[-1] == '\n' || p[-1] == ' ' || p[-1] == '\t';
        const char *q = p + strlen(key);
        while (*q == ' ' || *q == '\t') q++;
        if (start && *q == '=') return true;
    }
    return false;
}

bool train_resolve_config(const TrainOptions *o, ModelConfig *cfg, bool *vocab_given, char *err, size_t len) {
    *cfg = model_config_default();
    *vocab_given = false;
    const char *preset = o->preset ? o->preset : (o->config_file ? NULL : "tiny");
    if (preset && !model_config_preset(cfg, preset)) {
        snprintf(err, len, "unknown preset '%s': use one of %s", preset, model_config_preset_names());
        return false;
    }
    if (o->config_file) {
        if (!model_config_load_file(cfg, o->config_file, err, len)) return false;
        FILE *f = fopen(o->config_file, "rb");
        if (f) {
            char buf[1 << 16];
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            buf[n] = 0;
            fclose(f);
            *vocab_given |= text_mentions_key(buf, "vocab_size");
        }
    }
    for (int i = 0; i < o->n_sets; i++) {
        if (!model_config_set_kv(cfg, o->sets[i], err, len)) return false;
        *vocab_given |= text_mentions_key(o->sets[i], "vocab_size");
    }
    return model_config_validate(cfg, err, len);
}

/* ---- memory ------------------------------------------------------------------------------------- */

bool train_autocast_bf16(const TrainOptions *o, Device dev) {
    if (!o->autocast || !strcmp(o->autocast, "auto")) return dev == DEV_CUDA;
    if (!strcmp(o->autocast, "off")) return false;
    GDP_CHECK(!strcmp(o->autocast, "bf16"), "--autocast '%s': use bf16, off or auto", o->autocast);
    GDP_CHECK(dev == DEV_CUDA, "--autocast bf16 needs --device cuda (the cpu runs f32); drop it or use --autocast off");
    return true;
}

bool train_bf16_activations(const TrainOptions *o, Device dev) {
    return train_autocast_bf16(o, dev) && !o->f32_activations;
}

MemorySpec train_memory_spec(const TrainOptions *o, Device dev, const Dist *dist) {
    MemorySpec s = memory_spec_default(dev, o->batch, o->seq);
    s.recompute = o->recompute;
    s.selective_recompute = o->selective_recompute;
    s.autocast_bf16 = train_autocast_bf16(o, dev);
    s.bf16_activations = train_bf16_activations(o, dev);
    s.autocast_gemm_copies = s.autocast_bf16 && !s.bf16_activations && o->bf16_gemm_copies;
    s.optimizer = true;
    s.zero_stage = o->zero_stage;
    s.rank = dist ? dist->rank : 0, s.world = dist ? dist->world : 1;
    const double MiB = 1024.0 * 1024.0;
    s.limit_bytes = (size_t)(o->mem_limit_mb * MiB);
    s.persist_bytes = (size_t)(o->persist_mem_mb * MiB);
    s.act_bytes = (size_t)(o->act_mem_mb * MiB);
    s.grad_bytes = (size_t)(o->grad_mem_mb * MiB);
    s.scratch_bytes = (size_t)(o->scratch_mem_mb * MiB);
    return s;
}

/* ---- data through the loader -------------------------------------------------------------------- */

static void ld_next(void *u, int32_t *in, int32_t *tg) { loader_next_batch((Loader *)u, in, tg); }
static void ld_reset(void *u) { loader_reset((Loader *)u); }
static int ld_get(void *u, int64_t *out, int max) {
    LoaderState s = loader_get_state((Loader *)u);
    GDP_CHECK(max >= LOADER_STATE_N, "loader state needs %d values", LOADER_STATE_N);
    memcpy(out, &s, sizeof s);
    return LOADER_STATE_N;
}
static void ld_set(void *u, const int64_t *st, int n) {
    GDP_CHECK(n == LOADER_STATE_N, "the checkpoint's data position has %d values, the loader wants %d: it was "
              "written for other data", n, LOADER_STATE_N);
    LoaderState s;
    memcpy(&s, st, sizeof s);
    loader_set_state((Loader *)u, &s);
}
static TrainData loader_data(Loader *l) { return (TrainData){l, ld_next, ld_reset, ld_get, ld_set}; }

/* ---- evaluation --------------------------------------------------------------------------------- */

double train_evaluate(Model *m, TrainData *src, int batches, int B, int T, Dist *dist) {
    Ctx *ctx = m->ctx;
    int32_t *in = (int32_t *)xmalloc((size_t)B * T * sizeof(int32_t));
    int32_t *tg = (int32_t *)xmalloc((size_t)B * T * sizeof(int32_t));
    bool was = ctx->grad_enabled;
    ctx->grad_enabled = false;
    if (src->reset) src->reset(src->user);
    double sum = 0;
    for (int i = 0; i < batches; i++) {
        src->next_batch(src->user, in, tg);
        Tensor *loss = model_loss_host(m, in, tg, B, T);
        double v;
        tensor_to_doubles(loss, &v);
        sum += v;
        ctx_step_reset(ctx);
    }
    ctx->grad_enabled = was;
    free(in), free(tg);
    double mean = batches > 0 ? sum / batches : NAN;
    return dist ? dist_mean_double(dist, mean) : mean;
}

/* ---- helpers ------------------------------------------------------------------------------------ */

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

static void mkdir_p(const char *dir) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", dir);
    size_t n = strlen(buf);
    for (size_t i = 1; i <= n; i++)
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) gdp_fatal("cannot create folder '%s': %s", buf, strerror(errno));
            buf[i] = c;
        }
}

char *train_resolve_checkpoint(const char *path, const char *flag) {
    struct stat st;
    if (stat(path, &st) != 0) gdp_fatal("%s '%s': no such file or folder", flag, path);
    if (S_ISDIR(st.st_mode)) {
        char note[2048];
        char *p = checkpoint_find_resume(path, note, sizeof note);
        if (!p)
            gdp_fatal("%s '%s': the folder holds no valid checkpoint (ckpt_NNNNNNNN.h5)%s%s: give a checkpoint file or "
                      "the --out folder of a gdp train run that saved one",
                      flag, path, note[0] ? ": " : "", note);
        if (note[0]) fprintf(stderr, "note: %s '%s': %s\n", flag, path, note);
        return p;
    }
    char *p = (char *)xmalloc(strlen(path) + 1);
    strcpy(p, path);
    return p;
}

Ctx *train_load_model(const char *ckpt, Device dev, int64_t B, int64_t T, Model *m, ParamStore *ps) {
    char err[1024];
    char *text = checkpoint_read_config(ckpt);
    ModelConfig cfg = model_config_default();
    if (!model_config_load_text(&cfg, text, ckpt, err, sizeof err) || !model_config_validate(&cfg, err, sizeof err))
        gdp_fatal("checkpoint '%s' has an unusable model config: %s", ckpt, err);
    free(text);
    MemorySpec spec = memory_spec_default(dev, B, T);
    spec.train = false; /* forward passes only */
    MemoryPlan plan;
    Ctx *ctx = memory_plan_create(&cfg, &spec, 0, m, ps, &plan);
    checkpoint_load(ckpt, ps, NULL, NULL);
    return ctx;
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

/* ---- bad steps and stop signals ------------------------------------------------------------------ */

/* Which steps are skipped (see TrainOptions.max_skips). The history is saved in checkpoints
 * (train_state) so that a resumed run skips exactly the steps the uninterrupted one would. */
typedef struct StepGuard {
    int window, n, pos;  /* ring buffers of the last `window` finite losses and norms */
    double *loss, *norm;
    int64_t consecutive, total;
} StepGuard;

#define GUARD_STATE_VERSION 1
#define GUARD_STATE_HEAD 6 /* version, consecutive, total, window, n, pos */

static void guard_init(StepGuard *g, int window) {
    memset(g, 0, sizeof *g);
    g->window = window;
    g->loss = (double *)xcalloc((size_t)window, sizeof(double));
    g->norm = (double *)xcalloc((size_t)window, sizeof(double));
}

static void guard_free(StepGuard *g) { free(g->loss), free(g->norm); }

static int guard_state(const StepGuard *g, double *out) {
    double head[GUARD_STATE_HEAD] = {GUARD_STATE_VERSION, (double)g->consecutive, (double)g->total, g->window, g->n,
                                     g->pos};
    memcpy(out, head, sizeof head);
    memcpy(out + GUARD_STATE_HEAD, g->loss, (size_t)g->window * sizeof(double));
    memcpy(out + GUARD_STATE_HEAD + g->window, g->norm, (size_t)g->window * sizeof(double));
    return GUARD_STATE_HEAD + 2 * g->window;
}

/* Restores a saved history; one from another --skip-window starts afresh (with a note). */
static void guard_restore(StepGuard *g, const double *st, int n, bool root) {
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

/* Whether this step's update is skipped (the reason in why); then records the step. Every rank
 * sees the same loss (averaged) and norm (global), so every rank decides the same. */
static bool guard_judge(StepGuard *g, const TrainOptions *o, double loss, double norm, char *why, size_t len) {
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

/* Ends the run after max_skips skips in a row, naming the first parameter whose gradient is not
 * finite (the ranks agree on the lowest such parameter under ZeRO-1's shards). */
__attribute__((noreturn)) static void guard_fail(const StepGuard *g, Optimizer *opt, Dist *dist, int64_t step,
                                                 const char *why, const TrainOptions *o) {
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

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) {
    if (stop_signal && sig == SIGINT) {
        static const char msg[] = "\ngdp: second interrupt: stopping now, without a checkpoint\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
        return;
    }
    static const char term[] = "\ngdp: SIGTERM: finishing this step, then a checkpoint and exit\n";
    static const char intr[] = "\ngdp: SIGINT: finishing this step, then a checkpoint and exit (interrupt again to "
                               "stop at once)\n";
    static const char usr1[] = "\ngdp: SIGUSR1: finishing this step, then a checkpoint and exit\n";
    const char *m = sig == SIGTERM ? term : sig == SIGINT ? intr : usr1;
    size_t n = sig == SIGTERM ? sizeof term - 1 : sig == SIGINT ? sizeof intr - 1 : sizeof usr1 - 1;
    if (!stop_signal) {
        ssize_t w = write(STDERR_FILENO, m, n);
        (void)w;
    }
    stop_signal = sig;
}

static const int STOP_SIGNALS[3] = {SIGTERM, SIGINT, SIGUSR1};

/* Installs the stop handlers (old ones kept in saved[0..2]) and ignores SIGXFSZ (saved[3]), so a
 * file-size limit fails a write with a message instead of killing the process. */
static void stop_signals_install(struct sigaction saved[4]) {
    stop_signal = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART; /* data reads and MPI calls go on through the signal */
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; i++) sigaction(STOP_SIGNALS[i], &sa, &saved[i]);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGXFSZ, &sa, &saved[3]);
}

static void stop_signals_restore(const struct sigaction saved[4]) {
    for (int i = 0; i < 3; i++) sigaction(STOP_SIGNALS[i], &saved[i], NULL);
    sigaction(SIGXFSZ, &saved[3], NULL);
}

static const char *signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}

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

/* ---- the run ------------------------------------------------------------------------------------ */

int train_run(const TrainOptions *o, Dist *dist, TrainResult *res) {
    char err[1024];
    TrainResult result;
    memset(&result, 0, sizeof result);
    result.last_val_loss = NAN;
    const bool root = dist_is_root(dist);
    Device dev = device_parse(o->device, "--device");
    GDP_CHECK(o->batch > 0 && o->seq > 0 && o->grad_accum > 0 && o->steps > 0,
              "train: --batch, --seq, --grad-accum and --steps must be positive");

    /* 1. The model config: the checkpoint's when resuming, else preset, config file and --set. */
    char *resume_path = o->resume ? train_resolve_checkpoint(o->resume, "--resume") : NULL;
    ModelConfig cfg;
    bool vocab_given = false;
    if (resume_path) {
        char *text = checkpoint_read_config(resume_path);
        cfg = model_config_default();
        if (!model_config_load_text(&cfg, text, resume_path, err, sizeof err) ||
            !model_config_validate(&cfg, err, sizeof err))
            gdp_fatal("checkpoint '%s' has an unusable model config: %s", resume_path, err);
        free(text);
        vocab_given = true;
        if (root && (o->preset || o->config_file || o->n_sets))
            printf("note: resuming: the model config comes from %s; --preset/--config/--set are ignored\n",
                   resume_path);
    } else if (!train_resolve_config(o, &cfg, &vocab_given, err, sizeof err)) {
        gdp_fatal("model config: %s", err);
    }

    /* 2. Data: this rank's slice of each global batch; the vocabulary and tokenizer come with it. */
    Loader *train_loader = NULL, *val_loader = NULL;
    TrainData train_src, val_src, *train = o->train_data, *val = o->val_data;
    if (!train) {
        GDP_CHECK(o->data, "train: give --data (a prepared shard folder, shard files, or a text file)");
        GDP_CHECK(cfg.num_labels == 0,
                  "train: a classification model (num_labels %d) needs per-position labels; --data gives next-token "
                  "targets only (use the library's TrainData for labelled tasks)", cfg.num_labels);
        LoaderConfig lc = loader_config(o->data, SPLIT_TRAIN, o->batch, o->seq);
        lc.seed = o->seed, lc.rank = dist->rank, lc.world = dist->world, lc.val_fraction = o->val_fraction;
        if (!loader_open_err(&lc, &train_loader, err, sizeof err)) gdp_fatal("--data: %s", err);
        int64_t data_vocab = loader_vocab(train_loader);
        if (data_vocab > 0) {
            if (vocab_given && cfg.vocab_size < data_vocab && resume_path)
                gdp_fatal("--resume: the checkpoint's model has vocab_size %d but --data has a vocabulary of %lld: "
                          "resume with the data (and tokenizer) the run was started with",
                          cfg.vocab_size, (long long)data_vocab);
            if (vocab_given && cfg.vocab_size < data_vocab)
                gdp_fatal("vocab_size %d is smaller than the data's vocabulary %lld: drop vocab_size or raise it",
                          cfg.vocab_size, (long long)data_vocab);
            if (!vocab_given) cfg.vocab_size = (int)data_vocab;
        } else {
            /* Shards without a tokenizer: check their tokens against the model's vocabulary. */
            loader_close(train_loader);
            lc.vocab = cfg.vocab_size;
            if (!loader_open_err(&lc, &train_loader, err, sizeof err)) gdp_fatal("--data: %s", err);
        }
        if (!resume_path) {
            char tok_path[MODEL_PATH_LEN] = "";
            Tokenizer *tok = tokenizer_for_data(o->data, tok_path, sizeof tok_path);
            if (tok) tokenizer_free(tok);
            char absbuf[PATH_MAX];
            if (tok_path[0] && realpath(tok_path, absbuf) && strlen(absbuf) < MODEL_PATH_LEN)
                snprintf(cfg.tokenizer, sizeof cfg.tokenizer, "%s", absbuf);
            else
                snprintf(cfg.tokenizer, sizeof cfg.tokenizer, "%s", tok_path);
        }
        train_src = loader_data(train_loader);
        train = &train_src;
        if (loader_split_exists(o->data, SPLIT_VAL, o->val_fraction)) {
            LoaderConfig vc = lc;
            vc.split = SPLIT_VAL;
            vc.vocab = cfg.vocab_size;
            if (loader_open_err(&vc, &val_loader, err, sizeof err)) {
                val_src = loader_data(val_loader);
                val = &val_src;
            } else if (root) {
                printf("note: no validation (%s)\n", err);
            }
        }
    }

    /* 3. Context, model and optimizer. */
    const int64_t B = o->batch, T = o->seq;
    /* The arenas: sized from the model (train/memory_plan.h); a run that cannot fit stops here. */
    const MemorySpec mspec = train_memory_spec(o, dev, dist);
    ParamStore ps;
    Model model;
    MemoryPlan mplan;
    Ctx *ctx = memory_plan_create(&cfg, &mspec, o->seed, &model, &ps, &mplan);
    dist_attach(dist, ctx);
    result.n_params = params_count(&ps);
    GDP_CHECK(result.n_params == model_config_param_count(&cfg),
              "internal: the model registered %lld parameters, the config predicts %lld", (long long)result.n_params,
              (long long)model_config_param_count(&cfg));
    AdamWConfig acfg = adamw_default_config();
    acfg.beta1 = o->beta1, acfg.beta2 = o->beta2, acfg.eps = o->eps;
    acfg.weight_decay = o->weight_decay, acfg.grad_clip = o->clip;
    int64_t shard_start = 0, shard_end = ps.total;
    if (o->zero_stage == 1) dist_shard_range(ps.total, dist->rank, dist->world, &shard_start, &shard_end);
    Optimizer opt;
    optim_init(&opt, &ps, acfg, shard_start, shard_end);
    DistBuckets buckets; /* gradient all-reduce in per-layer buckets during the last micro-step's backward */
    /* recomputed blocks write their parameters' gradients where a tape hook cannot see them */
    const char *recompute_flag = o->recompute ? "--recompute" : o->selective_recompute ? "--selective-recompute" : NULL;
    dist_buckets_init(&buckets, dist, &ps, o->zero_stage, recompute_flag ? 0 : o->bucket_mb);
    LrSchedule sched = {o->schedule, o->lr, o->final_lr_frac, o->warmup, o->steps, 0};
    if (sched.warmup < 0) sched.warmup = GDP_MIN((int64_t)100, o->steps / 10);
    lr_schedule_check(&sched);

    /* 4. Resume: parameters, AdamW state, step, the data position and the skip history. */
    int64_t step = 0;
    Rng rng;
    rng_seed(&rng, o->seed);
    GDP_CHECK(o->skip_window >= 2 && 2 * o->skip_window + GUARD_STATE_HEAD <= CHECKPOINT_MAX_STATE,
              "train: skip_window %d must be from 2 to %d", o->skip_window,
              (CHECKPOINT_MAX_STATE - GUARD_STATE_HEAD) / 2);
    StepGuard guard;
    guard_init(&guard, o->skip_window);
    if (resume_path) {
        CheckpointInfo info;
        checkpoint_load(resume_path, &ps, &opt, &info);
        step = info.step;
        rng = info.rng;
        GDP_CHECK(step <= o->steps, "--resume: the checkpoint is at step %lld, past --steps %lld", (long long)step,
                  (long long)o->steps);
        if (info.n_loader > 0 && train->set_state) train->set_state(train->user, info.loader_state, info.n_loader);
        guard_restore(&guard, info.train_state, info.n_train_state, root);
        checkpoint_info_free(&info);
    }
    const int64_t first_step = step;
    const int64_t last = o->stop_at > 0 ? GDP_MIN(o->stop_at, o->steps) : o->steps;

    char cfg_text[8192];
    model_config_to_text(&cfg, cfg_text, sizeof cfg_text);
    Logger lg;
    logger_init(&lg, o->out, dist->rank, resume_path ? step : -1);
    lg.quiet = true; /* our own progress line below; the logger writes log.tsv */
    if (root && o->out) write_run_config(o->out, cfg_text, o);
    const int64_t tokens_per_step = B * T * o->grad_accum * dist->world;
    const double flops_per_token = 3.0 * model_config_flops_per_token(&cfg, (int)T);
    if (root && !o->quiet) {
        printf("model: %s mode, %d layers, hidden %d, %d heads x %d (v %d), %s %d, vocab %d, %s head: %.3fM "
               "parameters\n",
               cfg.mode == GDP_MODE_SPLIT ? "split" : "householder", cfg.num_hidden_layers, cfg.hidden_size,
               cfg.num_heads, cfg.head_dim, cfg_head_v_dim(&cfg), cfg.mode == GDP_MODE_SPLIT ? "r" : "n_h",
               cfg.num_householder, cfg.vocab_size,
               cfg.num_labels > 0 ? "classifier" : (cfg.tie_word_embeddings ? "tied" : "untied"),
               result.n_params / 1e6);
        if (train_loader) {
            char d[512];
            loader_describe(train_loader, d, sizeof d);
            printf("data: %s\n", d);
        }
        printf("train: %s%s%s, %d rank%s, batch %lld x %lld x accum %d = %lld tokens/step, steps %lld..%lld of %lld, "
               "lr %g (%s, warmup %lld), seed %llu%s%s\n",
               device_name(dev),
               !ctx->autocast_bf16           ? ""
               : ctx->bf16_activations       ? " (bf16 autocast, bf16 activations)"
               : ctx->autocast_gemm_copies   ? " (bf16 autocast, f32 activations, GEMM copies)"
                                             : " (bf16 autocast, f32 activations)",
               model.recompute             ? " with recomputed blocks"
               : model.selective_recompute ? " with selective recomputation"
                                           : "",
               dist->world, dist->world > 1 ? "s" : "", (long long)B, (long long)T, o->grad_accum,
               (long long)tokens_per_step, (long long)step, (long long)last, (long long)o->steps, o->lr,
               lr_kind_name(o->schedule), (long long)sched.warmup, (unsigned long long)o->seed,
               resume_path ? ", resumed from " : "", resume_path ? resume_path : "");
    }

    if (root && !o->quiet) {
        char mem[256];
        memory_plan_describe(&mplan, mem, sizeof mem);
        printf("%s\n", mem);
    }
    if (root && !o->quiet && dist->world > 1) {
        const char *how = o->zero_stage == 1 ? "reduce-scatter" : "all-reduce";
        if (buckets.n > 0)
            printf("gradients: %d buckets (--bucket-mb %g), each %s started during backward\n", buckets.n,
                   o->bucket_mb, how);
        else
            printf("gradients: one %s after backward (%s)\n", how, recompute_flag ? recompute_flag : "--bucket-mb 0");
    }
    int32_t *inputs = (int32_t *)xmalloc((size_t)(B * T) * sizeof(int32_t));
    int32_t *targets = (int32_t *)xmalloc((size_t)(B * T) * sizeof(int32_t));
    int64_t ckpt_state[TRAIN_DATA_STATE_MAX];
    double *guard_saved = (double *)xmalloc((size_t)(GUARD_STATE_HEAD + 2 * guard.window) * sizeof(double));
    struct sigaction saved_handlers[4];
    stop_signals_install(saved_handlers);
    double ema_dt = 0, t_start = gdp_now_seconds();
    int64_t timed = 0;
    bool first = true;

    /* 5. The loop. */
    OpProfile profile = {0};
    double profiled_s = 0;
    for (; step < last; step++) {
        if (o->test_signal && step == o->test_signal_step) raise(o->test_signal);
        if (o->profile && !first) ctx->profile = &profile, profile.steps++;
        double t0 = gdp_now_seconds();
        double lr = lr_at(&sched, step);
        params_zero_grad(&ps);
        double loss_sum = 0;
        for (int micro = 0; micro < o->grad_accum; micro++) {
            train->next_batch(train->user, inputs, targets);
            Tensor *loss = model_loss_host(&model, inputs, targets, B, T);
            double lv;
            tensor_to_doubles(loss, &lv);
            if (micro == o->grad_accum - 1) dist_buckets_arm(&buckets);
            tape_backward(ctx, loss);
            ctx_step_reset(ctx);
            loss_sum += lv;
        }
        double loss = dist_mean_double(dist, loss_sum / o->grad_accum);
        double t_opt = gdp_now_seconds();
        dist_buckets_sync(&buckets);
        if (ctx->profile) ctx_synchronize(ctx), profile_add(&profile, "(gradient sync)", 0, gdp_now_seconds() - t_opt);
        if (o->test_nan_grad_count > 0 && step >= o->test_nan_grad_step &&
            step < o->test_nan_grad_step + o->test_nan_grad_count)
            inject_nan_grad(&ps, &opt, o->test_nan_grad_param);
        t_opt = gdp_now_seconds();
        /* A bad step is skipped before it touches the weights, so no NaN reaches them or a checkpoint. */
        double norm = optim_grad_norm(&opt, 1.0 / o->grad_accum, dist);
        char skip_why[256] = "";
        bool skipped = guard_judge(&guard, o, loss, norm, skip_why, sizeof skip_why);
        if (!skipped) {
            optim_update(&opt, lr, 1.0 / o->grad_accum, norm);
            dist_sync_params(dist, &ps, o->zero_stage);
        }
        ctx_synchronize(ctx);
        if (ctx->profile) profile_add(&profile, "(clip + adamw)", 0, gdp_now_seconds() - t_opt);
        double dt = gdp_now_seconds() - t0;
        if (ctx->profile) profiled_s += dt, ctx->profile = NULL; /* eval and checkpoints are not profiled */
        /* tokens/s: an average that leaves out the first step (warm-up of caches and handles) */
        if (!first) {
            timed++;
            ema_dt = timed == 1 ? dt : 0.9 * ema_dt + 0.1 * dt;
        }
        double tps = first ? (double)tokens_per_step / dt : (double)tokens_per_step / ema_dt;
        first = false;
        if (timed == 0) result.first_loss = loss;
        if (!skipped) result.last_loss = loss;

        bool is_last = step + 1 == last;
        double val_loss = NAN;
        if (val && ((o->eval_every > 0 && (step + 1) % o->eval_every == 0) || is_last)) {
            val_loss = train_evaluate(&model, val, o->eval_batches, (int)B, (int)T, dist);
            result.last_val_loss = val_loss;
        }
        logger_step(&lg, step, loss, lr, norm, tps, val_loss, skipped);
        if (skipped) {
            if (root && !o->quiet)
                printf("step %6lld/%lld | skipped: %s (%lld in a row, %lld in all)\n", (long long)step + 1,
                       (long long)o->steps, skip_why, (long long)guard.consecutive, (long long)guard.total);
            if (o->max_skips > 0 && guard.consecutive >= o->max_skips) guard_fail(&guard, &opt, dist, step, skip_why, o);
        }
        if (root && !o->quiet && !skipped && (step % GDP_MAX(o->print_every, 1) == 0 || is_last || !isnan(val_loss))) {
            char eta[32];
            fmt_duration((double)(last - step - 1) * (timed ? ema_dt : dt), eta, sizeof eta);
            printf("step %6lld/%lld | loss %.4f | lr %.3e | norm %.4f | %.0f tok/s | ETA %s", (long long)step + 1,
                   (long long)o->steps, loss, lr, norm, tps, eta);
            if (dev == DEV_CUDA) printf(" | MFU %.1f%%", 100.0 * flops_per_token * tps / dist->world / (o->peak_tflops * 1e12));
            if (!isnan(val_loss)) printf(" | val %.4f", val_loss);
            printf("\n");
            fflush(stdout);
        }

        /* 6. Checkpoints: every N steps, at the end, and when a stop signal came to any rank (when
         * an output folder is given). */
        int stop = (int)dist_max_double(dist, (double)stop_signal);
        bool want = o->out && (is_last || stop || (o->checkpoint_every > 0 && (step + 1) % o->checkpoint_every == 0));
        if (want) {
            int n_state = train->get_state ? train->get_state(train->user, ckpt_state, TRAIN_DATA_STATE_MAX) : 0;
            CheckpointMeta meta = {step + 1, rng, ckpt_state, n_state, cfg_text, 0, o->zero_stage,
                                   guard_saved, guard_state(&guard, guard_saved)};
            char *path = checkpoint_save(o->out, &ps, &opt, &meta, o->keep, dist);
            if (path) {
                snprintf(result.checkpoint, sizeof result.checkpoint, "%s", path);
                if (!o->quiet) printf("checkpoint: %s\n", path);
                free(path);
            }
        }
        if (stop && !is_last) {
            result.stopped_by = stop;
            if (root && o->out)
                printf("stopped by %s after step %lld of %lld: checkpoint %s written; resume with --resume %s "
                       "(and this run's other flags)\n",
                       signal_name(stop), (long long)step + 1, (long long)o->steps, result.checkpoint, o->out);
            else if (root)
                printf("stopped by %s after step %lld of %lld; nothing was saved (no --out)\n", signal_name(stop),
                       (long long)step + 1, (long long)o->steps);
            fflush(stdout);
            step++;
            break;
        }
        if (timed == 0) { /* the arenas were planned (train/memory_plan.h); the card's use after a step */
            size_t used, total;
            if (root && !o->quiet && dev == DEV_CUDA && device_memory_info(&used, &total))
                printf("memory: GPU memory in use after step 1: %.2f of %.2f GiB\n", used / 1073741824.0,
                       total / 1073741824.0);
        }
    }
    result.steps_done = step;
    result.steps_run = step - first_step;
    result.skipped = guard.total;
    stop_signals_restore(saved_handlers);

    /* 7. The end: loss plot, memory high-water marks. */
    const char *plot = logger_finish(&lg);
    if (root && !o->quiet) {
        if (plot && plot[0]) printf("loss plot: %s\n", plot);
        char span[96] = "", skips[64] = "";
        if (first_step > 0) snprintf(span, sizeof span, " (steps %lld to %lld)", (long long)first_step + 1, (long long)step);
        if (guard.total > 0) snprintf(skips, sizeof skips, ", %lld skipped", (long long)guard.total);
        printf("done: %lld steps%s%s in %.1f s; memory high water: acts %.1f MiB of %.1f, grads %.1f of %.1f, "
               "scratch %.1f of %.1f\n",
               (long long)(step - first_step), span, skips, gdp_now_seconds() - t_start, ctx->acts.high_water / 1048576.0,
               ctx->acts.capacity / 1048576.0, ctx->grads.high_water / 1048576.0, ctx->grads.capacity / 1048576.0,
               ctx->scratch.high_water / 1048576.0, ctx->scratch.capacity / 1048576.0);
    }
    if (root && o->profile && profile.steps > 0) {
        profile_print(&profile, stdout);
        printf("  %-22s %32.3f  (whole step, host time)\n", "step", 1e3 * profiled_s / profile.steps);
    }
    free(inputs), free(targets), free(resume_path), free(guard_saved);
    guard_free(&guard);
    dist_buckets_free(&buckets);
    optim_free(&opt);
    model_free(&model);
    params_free_store(&ps);
    if (train_loader) loader_close(train_loader);
    if (val_loader) loader_close(val_loader);
    dist->ctx = NULL;
    ctx_destroy(ctx);
    if (res) *res = result;
    return 0;
}

/* ---- the command line --------------------------------------------------------------------------- */

static const CliOpt train_opts[] = {
    {"preset", 'p', "NAME", "model preset: tiny (default without --config), small, base"},
    {"config", 'c', "FILE", "model config file of `key = value` lines (fla GatedDeltaProductConfig names); keys it "
                            "leaves out come from --preset, or without one from fla's defaults"},
    {"set", 0, "KEY=VALUE", "override one model config key (repeatable), e.g. --set num_householder=3"},
    {"data", 'i', "PATH", "prepared shard folder (gdp prepare), shard file or pattern, or a text file (bytes)"},
    {"val-fraction", 0, "F", "text files: share held out for validation (default 0.05)"},
    {"device", 'd', "DEV", "cpu (default), cuda or auto"},
    {"steps", 'x', "N", "optimizer steps, the schedule's horizon (default 1000)"},
    {"stop-at", 0, "N", "stop after step N (the schedule still spans --steps); resume later"},
    {"batch", 'b', "B", "sequences per micro-step and rank (default 8)"},
    {"seq", 't', "T", "tokens per sequence (default 256)"},
    {"grad-accum", 'g', "N", "micro-steps per optimizer step (default 1)"},
    {"lr", 'l', "LR", "peak learning rate (default 1e-3)"},
    {"final-lr-frac", 'q', "F", "final learning rate as a fraction of --lr (default 0.1)"},
    {"warmup", 'u', "N", "linear warmup steps (default min(100, steps/10))"},
    {"schedule", 'k', "KIND", "cosine (default), wsd, linear or constant"},
    {"clip", 0, "NORM", "clip the global gradient norm to this (default 1.0; 0 = off)"},
    {"weight-decay", 0, "W", "AdamW decoupled weight decay on matrices and embeddings (default 0.1)"},
    {"beta1", 0, "B1", "AdamW beta1 (default 0.9)"},
    {"beta2", 0, "B2", "AdamW beta2 (default 0.95)"},
    {"eps", 0, "EPS", "AdamW epsilon (default 1e-8)"},
    {"eval-every", 'v', "N", "validation loss every N steps (default 100; 0 = only at the end)"},
    {"eval-batches", 'm', "N", "batches per validation (default 8)"},
    {"checkpoint-every", 'n', "N", "checkpoint into --out every N steps (default 0: only at the end)"},
    {"keep", 0, "N", "checkpoints to keep (default 3; 0 = all)"},
    {"out", 'o', "DIR", "output folder: log.tsv, loss plot, config.txt, checkpoints and `latest` (default none: "
                        "nothing is written)"},
    {"resume", 'y', "PATH", "resume from a checkpoint file, or from a folder's latest checkpoint"},
    {"seed", 's', "N", "seed of the initialisation and the data order (default 1)"},
    {"zero", 'z', "STAGE", "0 (default): replicated AdamW; 1: AdamW state sharded over ranks"},
    {"bucket-mb", 0, "MiB", "gradient buckets reduced during backward (default 25; 0 = one reduction after it)"},
    {"print-every", 0, "N", "progress line every N steps (default 1)"},
    {"quiet", 0, NULL, "no progress lines (log.tsv is still written)"},
    {"profile", 0, NULL, "time every op (forward and backward) after the first step; a table at the end (slows training)"},
    {"autocast", 0, "MODE", "bf16: matmuls on bf16 tensor cores (f32 accumulation) and the GDP op in bf16, with f32 "
                            "master weights and optimizer; off: f32 throughout; auto (default): bf16 on cuda, off on cpu"},
    {"recompute", 0, NULL, "keep only each block's input and run the block again in backward (activation "
                           "checkpointing): much less memory for one more forward of the blocks; gradients are "
                           "then reduced after backward, not in buckets"},
    {"selective-recompute", 0, NULL, "recompute only the cheap parts in backward: each block's MLP half (its "
                                     "norm, three GEMMs and SwiGLU), the q/k short convs + L2 norms and the GDP op's chunk "
                                     "intermediates; at base on the H200 40% less GPU memory for about 22% more time "
                                     "(no gradient buckets)"},
    {"activations", 0, "MODE", "with bf16 autocast: bf16 (default): the residual stream stays f32, each block's "
                               "attention and MLP run on bf16 tensors (half the activation memory); f32: f32 "
                               "activations, only the GEMMs and the GDP op in bf16"},
    {"bf16-gemm", 0, "MODE", "with --activations f32: copies (default): the linear GEMMs run on bf16 copies of their "
                             "operands with f32 outputs; inside: cuBLAS rounds the f32 operands (slower)"},
    {"peak-tflops", 0, "TF", "peak TFLOP/s per GPU for MFU (default 989, H100/H200 dense bf16)"},
    {"act-mem", 0, "MiB", "activation arena size (default: measured on a short step of the model and extended "
                          "to --seq)"},
    {"grad-mem", 0, "MiB", "activation-gradient arena size (default: measured)"},
    {"scratch-mem", 0, "MiB", "per-op scratch arena size (default: measured)"},
    {"persist-mem", 0, "MiB", "parameter/optimizer arena size (default: from the model's parameters)"},
    {"mem-limit", 0, "MiB", "memory the run may use (default: the GPU's free memory; none on cpu): a run that needs "
                            "more stops at the start and says what to change"},
    {"max-skips", 0, "N", "end the run with an error after N skipped steps in a row (default 10; 0 = never). A step "
                          "is skipped (no update; logged in log.tsv's skipped column) when its loss or gradient "
                          "norm is NaN or Inf, or an outlier by --skip-loss-z / --skip-norm-z"},
    {"skip-loss-z", 0, "Z", "skip a step whose loss is more than Z standard deviations above the mean of the last "
                            "--skip-window steps (default 0 = off)"},
    {"skip-norm-z", 0, "Z", "the same for the gradient norm (default 0 = off)"},
    {"skip-window", 0, "N", "steps of history for --skip-loss-z and --skip-norm-z (default 128)"},
};
static const CliCommand train_cmd = {
    "train", "gdp train [--preset NAME] [--config FILE] [--set KEY=VALUE ...] --data PATH [options]",
    "Trains a Gated DeltaProduct language model with AdamW: one progress line per step, DIR/log.tsv, a loss\n"
    "plot and checkpoints (exact resume with --resume). Under mpirun every rank trains on its own slice of\n"
    "each global batch and gradients are averaged (MPI on cpu, NCCL on cuda); rank 0 logs and saves.",
    train_opts, (int)GDP_ARRAY_LEN(train_opts)};

static void on_train_opt(const CliOpt *opt, const char *v, void *user) {
    TrainOptions *o = (TrainOptions *)user;
    const char *n = opt->name;
    const long long BIG = (long long)1 << 40;
    if (!strcmp(n, "preset")) {
        ModelConfig probe;
        if (!model_config_preset(&probe, v))
            cli_usage_error(&train_cmd, "--preset '%s' is unknown: use one of %s", v, model_config_preset_names());
        o->preset = v;
    } else if (!strcmp(n, "config")) o->config_file = v;
    else if (!strcmp(n, "set")) {
        if (o->n_sets >= TRAIN_MAX_SETS) cli_usage_error(&train_cmd, "too many --set (at most %d)", TRAIN_MAX_SETS);
        ModelConfig probe = model_config_default();
        char err[512];
        if (!model_config_set_kv(&probe, v, err, sizeof err)) cli_usage_error(&train_cmd, "--set %s: %s", v, err);
        o->sets[o->n_sets++] = v;
    } else if (!strcmp(n, "data")) o->data = v;
    else if (!strcmp(n, "val-fraction")) o->val_fraction = cli_double(n, v, 0, 0.9);
    else if (!strcmp(n, "device")) o->device = cli_device(&train_cmd, v);
    else if (!strcmp(n, "steps")) o->steps = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "stop-at")) o->stop_at = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "batch")) o->batch = (int)cli_int(n, v, 1, 1 << 20);
    else if (!strcmp(n, "seq")) o->seq = (int)cli_int(n, v, 1, 1 << 24);
    else if (!strcmp(n, "grad-accum")) o->grad_accum = (int)cli_int(n, v, 1, 1 << 20);
    else if (!strcmp(n, "lr")) o->lr = cli_double(n, v, 0, 10);
    else if (!strcmp(n, "final-lr-frac")) o->final_lr_frac = cli_double(n, v, 0, 1);
    else if (!strcmp(n, "warmup")) o->warmup = cli_int(n, v, 0, BIG);
    else if (!strcmp(n, "schedule")) {
        if (!lr_kind_parse(v, &o->schedule))
            cli_usage_error(&train_cmd, "--schedule '%s': use cosine, wsd, linear or constant", v);
    } else if (!strcmp(n, "clip")) o->clip = cli_double(n, v, 0, 1e9);
    else if (!strcmp(n, "weight-decay")) o->weight_decay = cli_double(n, v, 0, 10);
    else if (!strcmp(n, "beta1")) o->beta1 = cli_double(n, v, 0, 0.999999);
    else if (!strcmp(n, "beta2")) o->beta2 = cli_double(n, v, 0, 0.999999999);
    else if (!strcmp(n, "eps")) o->eps = cli_double(n, v, 0, 1);
    else if (!strcmp(n, "eval-every")) o->eval_every = cli_int(n, v, 0, BIG);
    else if (!strcmp(n, "eval-batches")) o->eval_batches = (int)cli_int(n, v, 1, 1 << 20);
    else if (!strcmp(n, "checkpoint-every")) o->checkpoint_every = cli_int(n, v, 0, BIG);
    else if (!strcmp(n, "keep")) o->keep = (int)cli_int(n, v, 0, 1 << 20);
    else if (!strcmp(n, "out")) o->out = v;
    else if (!strcmp(n, "resume")) o->resume = v;
    else if (!strcmp(n, "seed")) o->seed = (uint64_t)cli_int(n, v, 0, (long long)1 << 62);
    else if (!strcmp(n, "zero")) o->zero_stage = (int)cli_int(n, v, 0, 1);
    else if (!strcmp(n, "bucket-mb")) o->bucket_mb = cli_double(n, v, 0, 1e6);
    else if (!strcmp(n, "print-every")) o->print_every = (int)cli_int(n, v, 1, 1 << 30);
    else if (!strcmp(n, "quiet")) o->quiet = true;
    else if (!strcmp(n, "profile")) o->profile = true;
    else if (!strcmp(n, "recompute")) o->recompute = true;
    else if (!strcmp(n, "selective-recompute")) o->selective_recompute = true;
    else if (!strcmp(n, "autocast")) {
        if (strcmp(v, "bf16") && strcmp(v, "off") && strcmp(v, "auto"))
            cli_usage_error(&train_cmd, "--autocast '%s': use bf16, off or auto", v);
        o->autocast = v;
    } else if (!strcmp(n, "activations")) {
        if (strcmp(v, "bf16") && strcmp(v, "f32"))
            cli_usage_error(&train_cmd, "--activations '%s': use bf16 or f32", v);
        o->f32_activations = !strcmp(v, "f32");
        o->activations_given = true;
    } else if (!strcmp(n, "bf16-gemm")) {
        if (strcmp(v, "inside") && strcmp(v, "copies"))
            cli_usage_error(&train_cmd, "--bf16-gemm '%s': use inside or copies", v);
        o->bf16_gemm_copies = !strcmp(v, "copies");
    } else if (!strcmp(n, "peak-tflops")) o->peak_tflops = cli_double(n, v, 1e-3, 1e6);
    else if (!strcmp(n, "act-mem")) o->act_mem_mb = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "grad-mem")) o->grad_mem_mb = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "scratch-mem")) o->scratch_mem_mb = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "persist-mem")) o->persist_mem_mb = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "mem-limit")) o->mem_limit_mb = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "max-skips")) o->max_skips = cli_int(n, v, 0, BIG);
    else if (!strcmp(n, "skip-loss-z")) o->skip_loss_z = cli_double(n, v, 0, 1e6);
    else if (!strcmp(n, "skip-norm-z")) o->skip_norm_z = cli_double(n, v, 0, 1e6);
    else if (!strcmp(n, "skip-window")) o->skip_window = (int)cli_int(n, v, 2, (CHECKPOINT_MAX_STATE - GUARD_STATE_HEAD) / 2);
}

static bool launched_by_mpi(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_SIZE",
                                 "SLURM_PROCID"};
    for (size_t i = 0; i < GDP_ARRAY_LEN(vars); i++)
        if (getenv(vars[i])) return true;
    return false;
}

int cmd_train(int argc, char **argv) {
    TrainOptions o = train_default_options();
    char *pos[1];
    cli_parse(&train_cmd, argc, argv, on_train_opt, &o, pos, 0);
    if (!o.data) cli_usage_error(&train_cmd, "--data is required (a prepared shard folder or a text file)");
    if (o.stop_at > o.steps) cli_usage_error(&train_cmd, "--stop-at %lld is past --steps %lld", (long long)o.stop_at,
                                             (long long)o.steps);
    if (!o.resume) {
        ModelConfig cfg;
        bool vg;
        char err[1024];
        if (!train_resolve_config(&o, &cfg, &vg, err, sizeof err)) cli_usage_error(&train_cmd, "%s", err);
    }
    if (o.autocast && !strcmp(o.autocast, "bf16") && !strcmp(o.device, "cpu"))
        cli_usage_error(&train_cmd, "--autocast bf16 needs --device cuda (the cpu trains in f32)");
    if (o.activations_given && (!strcmp(o.device, "cpu") || (o.autocast && !strcmp(o.autocast, "off"))))
        cli_usage_error(&train_cmd, "--activations chooses the activation dtype under bf16 autocast on cuda; with "
                                    "--device cpu or --autocast off everything is f32: drop it");
    if (o.warmup >= o.steps && o.schedule != LR_CONSTANT)
        cli_usage_error(&train_cmd, "--warmup %lld must be below --steps %lld", (long long)o.warmup, (long long)o.steps);
    if (o.out) mkdir_p(o.out);
    /* MPI only when a launcher started us (mpirun, srun, ...): a lone process is world 1 either way,
     * and skipping the singleton MPI_Init saves its helper daemon and start-up time. */
    Dist dist;
    if (launched_by_mpi())
        dist_init(&dist, &argc, &argv);
    else
        dist_init_single(&dist);
    train_run(&o, &dist, NULL);
    dist_finalize(&dist);
    return 0;
}
