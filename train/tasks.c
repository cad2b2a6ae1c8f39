/* The state-tracking study on group word problems (train/tasks.h). The recipe, top-down:
 *   the group -> the model config (classification head, num_labels = |G|) -> train_run on seeded
 *   words of train_len (optionally in segments, each followed by an accuracy check at train_len,
 *   with early stopping) -> load the final checkpoint on a context sized for test_len -> the
 *   prefix-accuracy curve on the fixed test set -> accuracy.tsv, the plot, result.txt. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "core/params.h"
#include "data/tasks.h"
#include "layers/model.h"
#include "train/checkpoint.h"
#include "train/tasks.h"
#include "train/train.h"

/* The default test set: fixed, so every configuration is scored on the same words. */
#define TASKS_TEST_SEED 0x7e57ull

TasksOptions tasks_default_options(void) {
    TasksOptions o;
    memset(&o, 0, sizeof o);
    o.group = "S3";
    o.mode = GDP_MODE_HOUSEHOLDER;
    o.n_h = 2;
    o.neg_eigval = true;
    o.mask_learned = true;
    o.layers = 1, o.hidden = 128, o.heads = 8, o.head_dim = 32;
    o.train_len = 128, o.test_len = 512;
    o.test_seqs = 2048;
    o.test_seed = TASKS_TEST_SEED;
    o.device = "cpu";
    o.autocast = "off";
    o.steps = 2000;
    o.batch = 256;
    /* the paper's AdamW: lr 1e-3, betas (0.9, 0.999), weight decay 1e-6, cosine to 0, no clipping */
    o.lr = 1e-3, o.final_lr_frac = 0, o.weight_decay = 1e-6, o.clip = 0, o.beta1 = 0.9, o.beta2 = 0.999;
    o.warmup = -1;
    o.seed = 1;
    o.eval_every = 0;
    o.eval_seqs = 256;
    o.early_stop = 0;
    o.eval_batch = 0;
    o.print_every = 50;
    return o;
}

static void describe(const TasksOptions *o, const char *group, char *buf, size_t len) {
    int n;
    if (o->mode == GDP_MODE_SPLIT)
        n = snprintf(buf, len, "%s split r=%d %s mask beta(0,%d)", group, o->n_h,
                     o->mask_learned ? "learned" : "identity", o->neg_eigval ? 2 : 1);
    else
        n = snprintf(buf, len, "%s householder n_h=%d beta(0,%d)", group, o->n_h, o->neg_eigval ? 2 : 1);
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "%s%s", o->bos ? " BOS" : "", strcmp(o->autocast, "off") ? " bf16" : "");
}

/* ---- the batch source ---------------------------------------------------------------------------- */

static void gen_next(void *u, int32_t *in, int32_t *tg) { task_gen_next((TaskGen *)u, in, tg); }
static void gen_reset(void *u) { task_gen_reset((TaskGen *)u); }
static int gen_get(void *u, int64_t *out, int max) {
    TaskGen *g = (TaskGen *)u;
    GDP_CHECK(max >= 4, "task data state needs 4 values");
    memcpy(out, g->rng.s, sizeof g->rng.s);
    return 4;
}
static void gen_set(void *u, const int64_t *st, int n) {
    TaskGen *g = (TaskGen *)u;
    GDP_CHECK(n == 4, "the checkpoint's data position has %d values, the task generator wants 4: it was written by "
              "another kind of run (use a fresh --out folder)", n);
    memcpy(g->rng.s, st, sizeof g->rng.s);
}
static TrainData gen_data(TaskGen *g) { return (TrainData){g, gen_next, gen_reset, gen_get, gen_set}; }

/* ---- evaluation ---------------------------------------------------------------------------------- */

/* Loads ckpt on a fresh context sized for B rows of T positions (after a BOS token when bos) and
 * adds n_seqs test words of length T (TaskGen seeded with `seed`) to met. */
static void evaluate_checkpoint(const char *ckpt, Device dev, const Group *g, bool bos, int n_seqs, int T, int B,
                                uint64_t seed, TaskMetric *met) {
    char err[1024];
    char *text = checkpoint_read_config(ckpt);
    ModelConfig cfg = model_config_default();
    if (!model_config_load_text(&cfg, text, ckpt, err, sizeof err) || !model_config_validate(&cfg, err, sizeof err))
        gdp_fatal("checkpoint '%s' has an unusable model config: %s", ckpt, err);
    free(text);
    GDP_CHECK(cfg.num_labels == g->order,
              "checkpoint '%s' has %d labels, group %s has %d elements: it was trained on another task", ckpt,
              cfg.num_labels, g->name, g->order);
    GDP_CHECK(cfg.vocab_size == g->order + (bos ? 1 : 0),
              "checkpoint '%s' has a vocabulary of %d, the task with%s a BOS token needs %d: it was trained %s --bos",
              ckpt, cfg.vocab_size, bos ? "" : "out", g->order + (bos ? 1 : 0), bos ? "without" : "with");
    TaskGen gen;
    task_gen_init(&gen, g, B, T, bos, seed);
    const int row = task_gen_row_len(&gen), skip = row - T; /* the BOS position has no label */
    MemorySpec spec = memory_spec_default(dev, B, row);
    spec.train = false; /* forward passes only */
    ParamStore ps;
    Model m;
    MemoryPlan plan;
    Ctx *ctx = memory_plan_create(&cfg, &spec, 0, &m, &ps, &plan);
    ctx->grad_enabled = false;
    checkpoint_load(ckpt, &ps, NULL, NULL);

    const size_t BT = (size_t)B * row, C = (size_t)g->order;
    int32_t *in = (int32_t *)xmalloc(BT * sizeof(int32_t));
    int32_t *lab = (int32_t *)xmalloc(BT * sizeof(int32_t));
    int32_t *pred = (int32_t *)xmalloc(BT * sizeof(int32_t));
    float *logits = (float *)xmalloc(BT * C * sizeof(float));
    for (int done = 0; done < n_seqs; done += B) {
        task_gen_next(&gen, in, lab);
        Tensor *ids = tensor_from_host(ctx, LIFE_ACT, GDP_I32, SHAPE(B, row), in);
        Tensor *out = model_forward(&m, ids);
        GDP_CHECK((size_t)out->numel == BT * C, "internal: the logits have %lld elements, expected [%d, %d, %zu]",
                  (long long)out->numel, B, row, C);
        if (out->dtype == GDP_F32 && tensor_is_contiguous(out)) {
            tensor_to_host(out, logits);
        } else { /* any other dtype or layout: through doubles */
            double *d = (double *)xmalloc(BT * C * sizeof(double));
            tensor_to_doubles(out, d);
            for (size_t i = 0; i < BT * C; i++) logits[i] = (float)d[i];
            free(d);
        }
        for (size_t r = 0; r < BT; r++) {
            const float *l = logits + r * C;
            size_t best = 0;
            for (size_t c = 1; c < C; c++)
                if (l[c] > l[best]) best = c;
            pred[r] = (int32_t)best;
        }
        if (skip) /* the words' positions only, [B, T] */
            for (int b = 0; b < B; b++) {
                memmove(pred + (size_t)b * T, pred + (size_t)b * row + skip, (size_t)T * sizeof(int32_t));
                memmove(lab + (size_t)b * T, lab + (size_t)b * row + skip, (size_t)T * sizeof(int32_t));
            }
        task_metric_add(met, pred, lab, GDP_MIN(B, n_seqs - done));
        ctx_step_reset(ctx);
    }
    free(in), free(lab), free(pred), free(logits);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
}

/* ---- plots ---------------------------------------------------------------------------------------- */

bool tasks_plot(const char *const *tsv, const char *const *titles, int n, const char *out_base, const char *title,
                int marker_x, bool use_gnuplot, char *out, size_t len) {
    GDP_CHECK(n >= 1 && n <= TASKS_MAX_PLOT, "tasks_plot: %d curves (use 1 to %d)", n, TASKS_MAX_PLOT);
    const PlotSpec spec = {.title = title,
                           .xlabel = "sequence length L",
                           .ylabel = "accuracy (first L predictions all correct)",
                           .xcol = 0,
                           .ycol = 1,
                           .marker_x = marker_x,
                           .ymin = -0.02,
                           .ymax = 1.05};
    return plot_tsv(tsv, titles, n, out_base, &spec, use_gnuplot, out, len);
}

/* ---- the model config ----------------------------------------------------------------------------- */

enum { TASKS_N_FIXED = 18 };
typedef struct TaskSets {
    char kv[TASKS_N_FIXED][96];
} TaskSets;

/* The run's model: the tiny preset overridden key by key into the paper's layer with a
 * classification head over the group's elements, then the user's --set. Fills to's preset and
 * sets (pointing into sets) and resolves cfg; false with the reason in err. */
static bool tasks_config(const TasksOptions *o, const Group *g, TaskSets *sets, TrainOptions *to, ModelConfig *cfg,
                         char *err, size_t len) {
    int nk = 0;
#define KV(...) snprintf(sets->kv[nk++], sizeof sets->kv[0], __VA_ARGS__)
    KV("hidden_size=%d", o->hidden);
    KV("num_hidden_layers=%d", o->layers);
    KV("num_heads=%d", o->heads);
    KV("head_dim=%d", o->head_dim);
    KV("expand_v=1");
    KV("num_householder=%d", o->n_h);
    KV("allow_neg_eigval=%s", o->neg_eigval ? "true" : "false");
    KV("mode=%s", o->mode == GDP_MODE_SPLIT ? "split" : "householder");
    KV("split_mask_trainable=%s", o->mask_learned ? "true" : "false");
    KV("use_short_conv=false");
    KV("use_output_gate=false");
    KV("use_forget_gate=false");
    KV("intermediate_size=0");
    KV("hidden_ratio=4");
    KV("vocab_size=%d", g->order + (o->bos ? 1 : 0));
    KV("num_labels=%d", g->order);
    KV("tie_word_embeddings=false");
#undef KV
    GDP_CHECK(nk <= TASKS_N_FIXED, "internal: %d fixed config keys", nk);
    if (nk + o->n_sets > TRAIN_MAX_SETS) {
        snprintf(err, len, "too many --set (at most %d)", TRAIN_MAX_SETS - nk);
        return false;
    }
    to->preset = "tiny";
    to->config_file = NULL;
    to->n_sets = 0;
    for (int i = 0; i < nk; i++) to->sets[to->n_sets++] = sets->kv[i];
    for (int i = 0; i < o->n_sets; i++) to->sets[to->n_sets++] = o->sets[i];
    bool vocab_given;
    return train_resolve_config(to, cfg, &vocab_given, err, len);
}

/* ---- the run -------------------------------------------------------------------------------------- */

int tasks_run(const TasksOptions *o, TasksResult *res) {
    char err[1024];
    TasksResult r;
    memset(&r, 0, sizeof r);
    GDP_CHECK(o->out && o->out[0], "tasks: give an output folder (--out DIR)");
    GDP_CHECK(o->train_len > 0 && o->test_len >= o->train_len,
              "tasks: --train-len %d must be positive and --test-len %d at least as long", o->train_len, o->test_len);
    GDP_CHECK(o->steps > 0 && o->batch > 0 && o->test_seqs > 0, "tasks: --steps, --batch and --test-seqs must be positive");
    Group g;
    if (!group_make(&g, o->group, err, sizeof err)) gdp_fatal("--group: %s", err);
    snprintf(r.group, sizeof r.group, "%s", g.name);
    describe(o, g.name, r.label, sizeof r.label);
    Device dev = device_parse(o->device, "--device");
    gdp_mkdir_p(o->out, "output");

    /* 1. The model config: the paper's layer, a classification head over the group's elements. */
    TaskSets sets;
    TrainOptions to = train_default_options();
    ModelConfig cfg;
    if (!tasks_config(o, &g, &sets, &to, &cfg, err, sizeof err)) gdp_fatal("tasks: model config: %s", err);

    /* 2. Data: fresh seeded words for training, a fixed set for the validation loss. */
    TaskGen train_gen, val_gen;
    task_gen_init(&train_gen, &g, o->batch, o->train_len, o->bos, o->seed * 0x9E3779B97F4A7C15ull + 1);
    task_gen_init(&val_gen, &g, o->batch, o->train_len, o->bos, o->test_seed + 1);
    TrainData td = gen_data(&train_gen), vd = gen_data(&val_gen);

    /* 3. Training: train_run, in segments of eval_every steps when accuracy checks are wanted. */
    to.train_data = &td, to.val_data = &vd;
    to.device = o->device;
    to.autocast = o->autocast;
    to.steps = o->steps;
    to.batch = o->batch, to.seq = task_gen_row_len(&train_gen), to.grad_accum = 1;
    to.lr = o->lr, to.final_lr_frac = o->final_lr_frac, to.warmup = o->warmup;
    to.schedule = LR_COSINE;
    to.clip = o->clip, to.weight_decay = o->weight_decay, to.beta1 = o->beta1, to.beta2 = o->beta2;
    to.eval_every = 0, to.eval_batches = 2;
    to.checkpoint_every = 0, to.keep = 1;
    to.out = o->out;
    to.seed = o->seed;
    to.print_every = o->print_every;
    to.quiet = o->quiet;
    const int eval_B = o->eval_batch > 0 ? o->eval_batch : o->batch;
    if (!o->quiet)
        printf("tasks: %s, |G| = %d, train on length %d, test %d sequences of length %d; %lld steps of batch %d, "
               "lr %g cosine\n",
               r.label, g.order, o->train_len, o->test_seqs, o->test_len, (long long)o->steps, o->batch, o->lr);
    char path[1200];
    FILE *prog = NULL;
    if (o->eval_every > 0) {
        snprintf(path, sizeof path, "%s/progress.tsv", o->out);
        prog = xfopen(path, "w");
        fprintf(prog, "step\tloss\tval_loss\tacc_at_train_len\ttoken_acc\telapsed_s\n");
    }
    Dist dist;
    dist_init_single(&dist);
    double t0 = gdp_now_seconds();
    int64_t done = 0;
    TrainResult tr;
    memset(&tr, 0, sizeof tr);
    while (done < o->steps) {
        to.stop_at = o->eval_every > 0 ? GDP_MIN(done + o->eval_every, o->steps) : 0;
        if (done > 0) {
            /* the checkpoint holds the config; no preset/sets on resume */
            to.resume = o->out;
            to.preset = NULL, to.n_sets = 0;
        }
        train_run(&to, &dist, &tr);
        GDP_CHECK(tr.steps_done > done, "internal: train_run made no progress at step %lld", (long long)done);
        done = tr.steps_done;
        if (!prog) break;
        TaskMetric m;
        task_metric_init(&m, o->train_len);
        evaluate_checkpoint(tr.checkpoint, dev, &g, o->bos, o->eval_seqs, o->train_len, GDP_MIN(eval_B, o->eval_seqs),
                            o->test_seed + 2, &m);
        double acc = task_metric_prefix_acc(&m, o->train_len), tok = 0;
        for (int t = 0; t < o->train_len; t++) tok += task_metric_position_acc(&m, t) / o->train_len;
        task_metric_free(&m);
        fprintf(prog, "%lld\t%.6f\t%.6f\t%.6f\t%.6f\t%.1f\n", (long long)done, tr.last_loss, tr.last_val_loss, acc, tok,
                gdp_now_seconds() - t0);
        fflush(prog);
        if (!o->quiet)
            printf("tasks: step %lld: loss %.4f, accuracy at length %d: %.4f (per position %.4f)\n", (long long)done,
                   tr.last_loss, o->train_len, acc, tok);
        if (o->early_stop > 0 && acc >= o->early_stop) {
            if (!o->quiet) printf("tasks: early stop at step %lld (accuracy %.4f >= %g)\n", (long long)done, acc,
                                  o->early_stop);
            break;
        }
    }
    if (prog) fclose(prog);
    dist_finalize(&dist);
    r.steps_done = done;
    r.last_loss = tr.last_loss;
    GDP_CHECK(tr.checkpoint[0], "internal: training wrote no checkpoint into '%s'", o->out);

    /* 4. The test curve on the fixed test set of long words. */
    TaskMetric m;
    task_metric_init(&m, o->test_len);
    evaluate_checkpoint(tr.checkpoint, dev, &g, o->bos, o->test_seqs, o->test_len, GDP_MIN(eval_B, o->test_seqs),
                        o->test_seed, &m);
    r.acc_train_len = task_metric_prefix_acc(&m, o->train_len);
    r.acc_test_len = task_metric_prefix_acc(&m, o->test_len);
    for (int t = 0; t < o->test_len; t++) r.token_acc += task_metric_position_acc(&m, t) / o->test_len;
    r.len_90 = task_metric_length_at(&m, 0.9);
    r.len_50 = task_metric_length_at(&m, 0.5);
    r.seconds = gdp_now_seconds() - t0;

    snprintf(path, sizeof path, "%s/accuracy.tsv", o->out);
    FILE *f = xfopen(path, "w");
    fprintf(f, "length\taccuracy\tposition_accuracy\n");
    for (int L = 1; L <= o->test_len; L++)
        fprintf(f, "%d\t%.6f\t%.6f\n", L, task_metric_prefix_acc(&m, L), task_metric_position_acc(&m, L - 1));
    fclose(f);
    task_metric_free(&m);
    char plot[1200], base[1100], title[256];
    snprintf(base, sizeof base, "%s/accuracy", o->out);
    snprintf(title, sizeof title, "%s: trained on length %d, %lld steps", r.label, o->train_len, (long long)done);
    const char *tsvs[1] = {path}, *titles[1] = {r.label};
    tasks_plot(tsvs, titles, 1, base, title, o->train_len, true, plot, sizeof plot);

    snprintf(path, sizeof path, "%s/result.txt", o->out);
    f = xfopen(path, "w");
    fprintf(f, "label\t%s\ngroup\t%s\nmode\t%s\nn_h\t%d\nneg_eigval\t%d\nmask\t%s\nsteps\t%lld\nbatch\t%d\n"
               "train_len\t%d\ntest_len\t%d\ntest_seqs\t%d\nseed\t%llu\nlast_loss\t%.6f\nacc_train_len\t%.6f\n"
               "acc_test_len\t%.6f\ntoken_acc\t%.6f\nlen_90\t%d\nlen_50\t%d\nseconds\t%.1f\ndevice\t%s\n"
               "steps_max\t%lld\nlr\t%g\neval_every\t%lld\nearly_stop\t%g\nmodel\t%d layer(s), hidden %d, %d heads x %d\n"
               "bos\t%d\nautocast\t%s\n",
            r.label, g.name, o->mode == GDP_MODE_SPLIT ? "split" : "householder", o->n_h, o->neg_eigval ? 1 : 0,
            o->mode == GDP_MODE_SPLIT ? (o->mask_learned ? "learned" : "identity") : "-", (long long)done, o->batch,
            o->train_len, o->test_len, o->test_seqs, (unsigned long long)o->seed, r.last_loss, r.acc_train_len,
            r.acc_test_len, r.token_acc, r.len_90, r.len_50, r.seconds, device_name(dev), (long long)o->steps, o->lr,
            (long long)o->eval_every, o->early_stop, o->layers, o->hidden, o->heads, o->head_dim, o->bos ? 1 : 0,
            o->autocast);
    fclose(f);
    printf("result: %s | steps %lld | loss %.4f | acc@%d %.4f | acc@%d %.4f | per-position %.4f | "
           "L(acc>=0.9) %d | L(acc>=0.5) %d | %.0f s%s%s\n",
           r.label, (long long)done, r.last_loss, o->train_len, r.acc_train_len, o->test_len, r.acc_test_len,
           r.token_acc, r.len_90, r.len_50, r.seconds, plot[0] ? " | plot " : "", plot);
    group_free(&g);
    if (res) *res = r;
    return 0;
}

bool tasks_check_config(const TasksOptions *o, char *err, size_t len) {
    char why[1024];
    if (strcmp(o->autocast, "off") && !strcmp(o->device, "cpu")) {
        snprintf(err, len, "--autocast %s needs --device cuda (the cpu runs f32); drop it or use --autocast off",
                 o->autocast);
        return false;
    }
    Group g;
    if (!group_make(&g, o->group, why, sizeof why)) {
        snprintf(err, len, "--group: %s", why);
        return false;
    }
    TaskSets sets;
    TrainOptions to = train_default_options();
    ModelConfig cfg;
    bool ok = tasks_config(o, &g, &sets, &to, &cfg, why, sizeof why);
    group_free(&g);
    if (!ok) snprintf(err, len, "model config: %s", why);
    return ok;
}
