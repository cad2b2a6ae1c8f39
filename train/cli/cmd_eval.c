/* gdp eval: the mean loss of a checkpoint on a data split, its perplexity and bits per byte; with
 * --per-position the loss by position bucket (positions.tsv and a plot); --plot draws the
 * per-position curves of several runs in one figure. */
#include <errno.h>
#include <hdf5.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/common.h"
#include "core/ctx.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "layers/model.h"
#include "train/cli/cli.h"
#include "train/cli/commands.h"
#include "train/plot.h"
#include "train/train.h"

static const CliOpt eval_opts[] = {
    {"checkpoint", 'c', "PATH", "checkpoint file, or a training folder (its latest checkpoint)"},
    {"data", 'i', "PATH", "shard folder, shard file or pattern, or a text file (bytes)"},
    {"split", 0, "SPLIT", "val (default) or train"},
    {"val-fraction", 0, "F", "text files: the share held out as val, as in training (default 0.05)"},
    {"batches", 'm', "N", "batches to evaluate (default 0: one pass over the split)"},
    {"batch", 'b', "B", "sequences per batch (default 8)"},
    {"seq", 't', "T", "tokens per sequence (default 256); any length, e.g. 16x the training length with "
                      "--per-position"},
    {"device", 'd', "DEV", "cpu (default), cuda or auto"},
    {"documents", 0, "on|off", "on: an end-of-text token ends a document and the next token starts from a fresh "
                               "state, as in training; off: every window is one sequence. Default: on when the "
                               "data's tokenizer has an end-of-text token (as gdp train)"},
    {"eot", 0, "ID", "the end-of-text token id that ends documents (default: the data tokenizer's)"},
    {"loss-across-docs", 0, "on|off", "with documents: whether the prediction made at an end-of-text counts "
                                      "(default on, as gdp train)"},
    {"per-position", 0, NULL, "also the loss by position (counted from the start of the window or, with documents, "
                              "of the document): DIR/positions.tsv and DIR/positions.png|svg"},
    {"bucket", 0, "N", "--per-position: positions a row of the table covers (default 64)"},
    {"out", 'o', "DIR", "--per-position: the output folder (default: the checkpoint's folder); --plot: the "
                        "figure's path without its extension"},
    {"mark", 0, "N", "plots: a dashed line at position N (the training length)"},
    {"plot", 0, NULL, "instead of evaluating: one figure of the positions.tsv of each run folder (or TSV file) "
                      "given as an argument, into --out"},
    {"dump-logits", 0, "FILE.h5", "also write the first batch (input_ids, targets, logits) to an HDF5 file"},
};
static const CliCommand eval_cmd = {
    "eval", "gdp eval --checkpoint PATH --data PATH [--split val|train] [--per-position] [options]\n"
            "       gdp eval --plot --out BASE RUN_DIR...",
    "Prints the mean cross-entropy of a checkpoint on a data split (windows read in order), its perplexity\n"
    "and bits per byte (from the bytes of the target tokens; for byte data simply loss / ln 2). The mean is\n"
    "over the targets that count (with documents and --loss-across-docs off, not those at an end-of-text).\n"
    "--per-position writes the loss by position bucket, columns start, end (1-based, inclusive), loss\n"
    "(empty where no target falls) and tokens; the token-weighted mean of its losses is the loss printed.",
    eval_opts, (int)GDP_ARRAY_LEN(eval_opts)};

typedef struct EvalArgs {
    const char *checkpoint, *data, *device, *dump_logits, *out;
    DataSplit split;
    double val_fraction;
    int64_t batches;
    int batch, seq;
    int documents;   /* 1 on, 0 off, -1 as the data's tokenizer has it */
    int64_t eot;     /* -1: the tokenizer's */
    bool loss_across;
    bool per_position, plot;
    int64_t bucket, mark;
} EvalArgs;

static void on_opt(const CliOpt *o, const char *v, void *user) {
    EvalArgs *a = (EvalArgs *)user;
    const char *n = o->name;
    if (!strcmp(n, "checkpoint")) a->checkpoint = v;
    else if (!strcmp(n, "data")) a->data = v;
    else if (!strcmp(n, "dump-logits")) a->dump_logits = v;
    else if (!strcmp(n, "split")) {
        if (!strcmp(v, "val")) a->split = SPLIT_VAL;
        else if (!strcmp(v, "train")) a->split = SPLIT_TRAIN;
        else cli_usage_error(&eval_cmd, "--split '%s': use val or train", v);
    } else if (!strcmp(n, "val-fraction")) a->val_fraction = cli_double(n, v, 0, 0.9);
    else if (!strcmp(n, "batches")) a->batches = cli_int(n, v, 0, (long long)1 << 40);
    else if (!strcmp(n, "batch")) a->batch = (int)cli_int(n, v, 1, 1 << 20);
    else if (!strcmp(n, "seq")) a->seq = (int)cli_int(n, v, 1, 1 << 24);
    else if (!strcmp(n, "device")) a->device = cli_device(&eval_cmd, v);
    else if (!strcmp(n, "documents") || !strcmp(n, "loss-across-docs")) {
        if (strcmp(v, "on") && strcmp(v, "off")) cli_usage_error(&eval_cmd, "--%s '%s': use on or off", n, v);
        if (!strcmp(n, "documents")) a->documents = !strcmp(v, "on");
        else a->loss_across = !strcmp(v, "on");
    } else if (!strcmp(n, "eot")) a->eot = cli_int(n, v, 0, INT32_MAX);
    else if (!strcmp(n, "per-position")) a->per_position = true;
    else if (!strcmp(n, "bucket")) a->bucket = cli_int(n, v, 1, 1 << 24);
    else if (!strcmp(n, "out")) a->out = v;
    else if (!strcmp(n, "mark")) a->mark = cli_int(n, v, 1, 1 << 24);
    else if (!strcmp(n, "plot")) a->plot = true;
}

#define H5D(path, call) h5_dump_check((call) >= 0, path, #call)
static void h5_dump_check(bool ok, const char *path, const char *call) {
    if (!ok) gdp_fatal("--dump-logits: writing '%s' failed in %s (is the folder writable, the disk full?)", path, call);
}

static void dump_dataset(const char *path, hid_t f, const char *name, hid_t file_type, hid_t mem_type, int ndim,
                         const int64_t *shape, const void *data) {
    hsize_t dims[3];
    for (int i = 0; i < ndim; i++) dims[i] = (hsize_t)shape[i];
    hid_t sp = H5Screate_simple(ndim, dims, NULL);
    H5D(path, sp);
    hid_t ds = H5Dcreate2(f, name, file_type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5D(path, ds);
    H5D(path, H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
    H5D(path, H5Dclose(ds));
    H5D(path, H5Sclose(sp));
}

/* --dump-logits: one forward of the batch `in`; /input_ids and /targets int32 [B,T] and /logits
 * float32 [B,T,V] (whatever the model's dtype) into a new HDF5 file, for comparisons with other
 * implementations. */
static void dump_logits(const char *path, Model *m, const int32_t *in, const int32_t *tg, int64_t B, int64_t T) {
    Tensor *ids = tensor_from_host(m->ctx, LIFE_ACT, GDP_I32, SHAPE(B, T), in);
    Tensor *logits = model_forward(m, ids);
    double *d = (double *)xmalloc((size_t)logits->numel * sizeof(double));
    tensor_to_doubles(logits, d);
    float *fl = (float *)xmalloc((size_t)logits->numel * sizeof(float));
    for (int64_t i = 0; i < logits->numel; i++) fl[i] = (float)d[i];
    free(d);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) gdp_fatal("--dump-logits: cannot create '%s' (does the folder exist and is it writable?)", path);
    dump_dataset(path, f, "input_ids", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, (const int64_t[]){B, T}, in);
    dump_dataset(path, f, "targets", H5T_STD_I32LE, H5T_NATIVE_INT32, 2, (const int64_t[]){B, T}, tg);
    dump_dataset(path, f, "logits", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3,
                 (const int64_t[]){B, T, logits->shape[2]}, fl);
    H5D(path, H5Fclose(f));
    free(fl);
    ctx_step_reset(m->ctx);
}

static const PlotSpec positions_plot = {.title = "loss by position",
                                        .xlabel = "position (tokens from the start of the sequence)",
                                        .ylabel = "loss (nats)",
                                        .xcol = 1,
                                        .ycol = 2};

/* DIR/positions.tsv: one row a bucket of positions 1..T (the last one may be shorter). */
static void write_positions(const char *path, const double *nats, const int64_t *tokens, int64_t T, int64_t bucket) {
    FILE *f = fopen(path, "w");
    if (!f) gdp_fatal("--per-position: cannot create '%s': %s (is --out a writable folder?)", path, strerror(errno));
    fprintf(f, "start\tend\tloss\ttokens\n");
    for (int64_t k = 0; k * bucket < T; k++) {
        fprintf(f, "%lld\t%lld\t", (long long)(k * bucket + 1), (long long)GDP_MIN((k + 1) * bucket, T));
        if (tokens[k] > 0) fprintf(f, "%.6f", nats[k] / (double)tokens[k]);
        fprintf(f, "\t%lld\n", (long long)tokens[k]);
    }
    if (fclose(f) != 0) gdp_fatal("--per-position: writing '%s' failed: %s (is the disk full?)", path, strerror(errno));
}

/* gdp eval --plot: the curves of run folders (their positions.tsv) or TSV files, labelled by name. */
static int plot_runs(const EvalArgs *a, char **pos, int npos) {
    if (npos < 1) cli_usage_error(&eval_cmd, "--plot needs run folders (holding positions.tsv) as arguments");
    if (npos > PLOT_MAX_CURVES) cli_usage_error(&eval_cmd, "--plot takes at most %d curves", PLOT_MAX_CURVES);
    if (!a->out) cli_usage_error(&eval_cmd, "--plot needs --out BASE (the figure's path without .png or .svg)");
    char tsv[PLOT_MAX_CURVES][PATH_MAX], name[PLOT_MAX_CURVES][PATH_MAX];
    const char *tp[PLOT_MAX_CURVES], *np[PLOT_MAX_CURVES];
    for (int i = 0; i < npos; i++) {
        struct stat st;
        if (stat(pos[i], &st) != 0) gdp_fatal("eval --plot: '%s': no such file or folder", pos[i]);
        if (S_ISDIR(st.st_mode)) snprintf(tsv[i], PATH_MAX, "%s/positions.tsv", pos[i]);
        else snprintf(tsv[i], PATH_MAX, "%s", pos[i]);
        snprintf(name[i], PATH_MAX, "%s", pos[i]);
        size_t l = strlen(name[i]);
        while (l > 1 && name[i][l - 1] == '/') name[i][--l] = 0;
        tp[i] = tsv[i], np[i] = basename(name[i]);
    }
    PlotSpec spec = positions_plot;
    spec.marker_x = (double)a->mark;
    char out[1200];
    if (!plot_tsv(tp, np, npos, a->out, &spec, true, out, sizeof out))
        gdp_fatal("eval --plot: no plot written (the reason is above): give folders that eval --per-position wrote "
                  "and a writable --out");
    printf("plot: %s\n", out);
    return 0;
}

int cmd_eval(int argc, char **argv) {
    EvalArgs a = {NULL, NULL, "cpu", NULL, NULL, SPLIT_VAL, LOADER_DEFAULT_VAL_FRACTION, 0, 8, 256,
                  -1, -1, true, false, false, 64, 0};
    char *pos[PLOT_MAX_CURVES + 1];
    int npos = cli_parse(&eval_cmd, argc, argv, on_opt, &a, pos, PLOT_MAX_CURVES + 1);
    if (a.plot) return plot_runs(&a, pos, npos);
    if (npos > 0) cli_usage_error(&eval_cmd, "unexpected argument '%s' (run folders go with --plot)", pos[0]);
    if (!a.checkpoint) cli_usage_error(&eval_cmd, "--checkpoint is required");
    if (!a.data) cli_usage_error(&eval_cmd, "--data is required");
    if (!a.per_position && a.out) cli_usage_error(&eval_cmd, "--out goes with --per-position or --plot");
    Device dev = device_parse(a.device, "--device");
    char *ckpt = train_resolve_checkpoint(a.checkpoint, "--checkpoint");

    /* documents first: the memory plan makes room for their sequences */
    TrainDocs docs;
    train_docs_open(&docs, a.documents, a.eot, a.loss_across, a.data, dev, a.batch, a.seq);
    Model m;
    ParamStore ps;
    Ctx *ctx = train_load_model_docs(ckpt, dev, a.batch, a.seq, docs.eot >= 0 ? docs.max_seqs : 0, &m, &ps);
    GDP_CHECK(m.cfg.num_labels == 0, "eval: %s is a classification model; eval measures language models", ckpt);
    train_docs_check_vocab(&docs, m.cfg.vocab_size);

    char err[1024];
    LoaderConfig lc = loader_config(a.data, a.split, a.batch, a.seq);
    lc.vocab = m.cfg.vocab_size;
    lc.val_fraction = a.val_fraction;
    lc.shuffle = 0;
    Loader *l = NULL;
    if (!loader_open_err(&lc, &l, err, sizeof err)) gdp_fatal("--data: %s", err);
    int64_t per_epoch = loader_batches_per_epoch(l);
    int64_t n = a.batches > 0 ? GDP_MIN(a.batches, per_epoch) : per_epoch;
    GDP_CHECK(n > 0, "eval: the %s split has no full batch of %d x %d tokens: lower --batch or --seq",
              a.split == SPLIT_VAL ? "val" : "train", a.batch, a.seq);
    Tokenizer *tok = tokenizer_for_data(a.data, NULL, 0);

    int64_t BT = (int64_t)a.batch * a.seq, n_buckets = (a.seq + a.bucket - 1) / a.bucket;
    int32_t *in = (int32_t *)xmalloc((size_t)BT * sizeof(int32_t));
    int32_t *tg = (int32_t *)xmalloc((size_t)BT * sizeof(int32_t));
    int32_t *cu = (int32_t *)xmalloc(((size_t)BT + 1) * sizeof(int32_t));
    double *b_nats = a.per_position ? (double *)xcalloc((size_t)n_buckets, sizeof(double)) : NULL;
    int64_t *b_tokens = a.per_position ? (int64_t *)xcalloc((size_t)n_buckets, sizeof(int64_t)) : NULL;
    ctx->grad_enabled = false;
    double nats = 0, bytes = 0;
    int64_t counted = 0;
    double t0 = gdp_now_seconds();
    for (int64_t i = 0; i < n; i++) {
        loader_next_batch(l, in, tg);
        if (i == 0 && a.dump_logits) dump_logits(a.dump_logits, &m, in, tg, a.batch, a.seq);
        int64_t c = 0;
        if (a.per_position) {
            nats += train_position_loss(&m, &docs, in, tg, cu, a.batch, a.seq, a.bucket, b_nats, b_tokens);
            for (int64_t j = 0; j < BT; j++) c += tg[j] >= 0;
        } else {
            Tensor *loss = train_batch_loss(&m, &docs, in, tg, cu, a.batch, a.seq);
            double v;
            tensor_to_doubles(loss, &v);
            ctx_step_reset(ctx);
            for (int64_t j = 0; j < BT; j++) c += tg[j] >= 0;
            nats += v * (double)c; /* the batch's mean over its counted targets */
        }
        counted += c;
        if (tok)
            for (int64_t j = 0; j < BT; j++) {
                if (tg[j] < 0) continue;
                size_t len = 0;
                tokenizer_token_bytes(tok, (uint32_t)tg[j], &len);
                bytes += (double)len;
            }
    }
    double loss = counted > 0 ? nats / (double)counted : NAN;
    printf("checkpoint: %s\n", ckpt);
    printf("data: %s (%s), %lld batches of %d x %d = %lld tokens, %.1f s\n", a.data,
           a.split == SPLIT_VAL ? "val" : "train", (long long)n, a.batch, a.seq, (long long)(n * BT),
           gdp_now_seconds() - t0);
    if (docs.eot >= 0)
        printf("documents: token %d ends each, the next starts from a fresh state; the prediction across a boundary "
               "%s (--loss-across-docs)\n", (int)docs.eot, docs.loss_across ? "counts" : "is ignored");
    printf("loss %.6f | perplexity %.4f", loss, exp(loss));
    if (tok && bytes > 0) printf(" | bits per byte %.6f", nats / log(2.0) / bytes);
    printf("\n");
    if (a.per_position) {
        char dir[PATH_MAX], path[PATH_MAX + 32], base[PATH_MAX + 32], plot[PATH_MAX + 64];
        if (a.out) {
            snprintf(dir, sizeof dir, "%s", a.out);
            gdp_mkdir_p(dir, "--out");
        } else { /* beside the checkpoint, as its run's log.tsv */
            char tmp[PATH_MAX];
            snprintf(tmp, sizeof tmp, "%s", ckpt);
            snprintf(dir, sizeof dir, "%s", dirname(tmp));
        }
        snprintf(path, sizeof path, "%s/positions.tsv", dir);
        write_positions(path, b_nats, b_tokens, a.seq, a.bucket);
        snprintf(base, sizeof base, "%s/positions", dir);
        PlotSpec spec = positions_plot;
        spec.marker_x = (double)a.mark;
        const char *tp[1] = {path}, *np[1] = {"loss"};
        if (!plot_tsv(tp, np, 1, base, &spec, true, plot, sizeof plot)) plot[0] = 0;
        printf("per position: %lld buckets of %lld -> %s%s%s\n", (long long)n_buckets, (long long)a.bucket, path,
               plot[0] ? ", plot " : "", plot);
    }
    if (a.dump_logits) printf("logits of the first batch written to %s\n", a.dump_logits);
    if (tok) tokenizer_free(tok);
    free(in), free(tg), free(cu), free(b_nats), free(b_tokens), free(ckpt);
    loader_close(l);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
    return 0;
}
