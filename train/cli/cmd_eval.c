/* gdp eval: the mean loss of a checkpoint on a data split, its perplexity and bits per byte. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/common.h"
#include "core/ctx.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "layers/model.h"
#include "train/cli/cli.h"
#include "train/cli/commands.h"
#include "train/train.h"

static const CliOpt eval_opts[] = {
    {"checkpoint", 'c', "PATH", "checkpoint file, or a training folder (its latest checkpoint)"},
    {"data", 'i', "PATH", "shard folder, shard file or pattern, or a text file (bytes)"},
    {"split", 0, "SPLIT", "val (default) or train"},
    {"val-fraction", 0, "F", "text files: the share held out as val, as in training (default 0.05)"},
    {"batches", 'm', "N", "batches to evaluate (default 0: one pass over the split)"},
    {"batch", 'b', "B", "sequences per batch (default 8)"},
    {"seq", 't', "T", "tokens per sequence (default 256)"},
    {"device", 'd', "DEV", "cpu (default), cuda or auto"},
    {"dump-logits", 0, "FILE.h5", "also write the first batch (input_ids, targets, logits) to an HDF5 file"},
};
static const CliCommand eval_cmd = {
    "eval", "gdp eval --checkpoint PATH --data PATH [--split val|train] [options]",
    "Prints the mean cross-entropy of a checkpoint on a data split (windows read in order), its perplexity\n"
    "and bits per byte (from the bytes of the target tokens; for byte data simply loss / ln 2).",
    eval_opts, (int)GDP_ARRAY_LEN(eval_opts)};

typedef struct EvalArgs {
    const char *checkpoint, *data, *device, *dump_logits;
    DataSplit split;
    double val_fraction;
    int64_t batches;
    int batch, seq;
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

int cmd_eval(int argc, char **argv) {
    EvalArgs a = {NULL, NULL, "cpu", NULL, SPLIT_VAL, LOADER_DEFAULT_VAL_FRACTION, 0, 8, 256};
    char *pos[1];
    cli_parse(&eval_cmd, argc, argv, on_opt, &a, pos, 0);
    if (!a.checkpoint) cli_usage_error(&eval_cmd, "--checkpoint is required");
    if (!a.data) cli_usage_error(&eval_cmd, "--data is required");
    Device dev = device_parse(a.device, "--device");
    char *ckpt = train_resolve_checkpoint(a.checkpoint, "--checkpoint");

    Model m;
    ParamStore ps;
    Ctx *ctx = train_load_model(ckpt, dev, a.batch, a.seq, &m, &ps);
    GDP_CHECK(m.cfg.num_labels == 0, "eval: %s is a classification model; eval measures language models", ckpt);

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

    int64_t BT = (int64_t)a.batch * a.seq;
    int32_t *in = (int32_t *)xmalloc((size_t)BT * sizeof(int32_t));
    int32_t *tg = (int32_t *)xmalloc((size_t)BT * sizeof(int32_t));
    ctx->grad_enabled = false;
    double nats = 0, bytes = 0;
    double t0 = gdp_now_seconds();
    for (int64_t i = 0; i < n; i++) {
        loader_next_batch(l, in, tg);
        if (i == 0 && a.dump_logits) dump_logits(a.dump_logits, &m, in, tg, a.batch, a.seq);
        Tensor *loss = model_loss_host(&m, in, tg, a.batch, a.seq);
        double v;
        tensor_to_doubles(loss, &v);
        ctx_step_reset(ctx);
        nats += v * (double)BT;
        if (tok)
            for (int64_t j = 0; j < BT; j++) {
                size_t len = 0;
                tokenizer_token_bytes(tok, (uint32_t)tg[j], &len);
                bytes += (double)len;
            }
    }
    double loss = nats / ((double)n * BT);
    printf("checkpoint: %s\n", ckpt);
    printf("data: %s (%s), %lld batches of %d x %d = %lld tokens, %.1f s\n", a.data,
           a.split == SPLIT_VAL ? "val" : "train", (long long)n, a.batch, a.seq, (long long)(n * BT),
           gdp_now_seconds() - t0);
    printf("loss %.6f | perplexity %.4f", loss, exp(loss));
    if (tok && bytes > 0) printf(" | bits per byte %.6f", nats / log(2.0) / bytes);
    printf("\n");
    if (a.dump_logits) printf("logits of the first batch written to %s\n", a.dump_logits);
    if (tok) tokenizer_free(tok);
    free(in), free(tg), free(ckpt);
    loader_close(l);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
    return 0;
}
