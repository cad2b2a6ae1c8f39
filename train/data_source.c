/* The run's data: --data opened as this rank's slice of each global batch (the vocabulary and
 * the tokenizer come with it), or the TrainData the options bring. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "data/tokenizer.h"
#include "train/run.h"

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

/* Documents: --documents on, or by default when the data's tokenizer has an end-of-text token. */
static void open_documents(TrainRun *r) {
    const TrainOptions *o = r->o;
    train_docs_open(&r->docs, o->documents, o->eot, o->loss_across_docs, o->train_data ? NULL : o->data, r->dev,
                    o->batch, o->seq);
    train_docs_check_vocab(&r->docs, r->cfg.vocab_size);
}

void run_open_data(TrainRun *r) {
    const TrainOptions *o = r->o;
    Dist *dist = r->dist;
    ModelConfig *cfg = &r->cfg;
    char err[1024];
    r->train = o->train_data, r->val = o->val_data;
    if (!r->train) {
        GDP_CHECK(o->data, "train: give --data (a prepared shard folder, shard files, or a text file)");
        GDP_CHECK(cfg->num_labels == 0,
                  "train: a classification model (num_labels %d) needs per-position labels; --data gives next-token "
                  "targets only (use the library's TrainData for labelled tasks)", cfg->num_labels);
        LoaderConfig lc = loader_config(o->data, SPLIT_TRAIN, o->batch, o->seq);
        lc.seed = o->seed, lc.rank = dist->rank, lc.world = dist->world, lc.val_fraction = o->val_fraction;
        if (!loader_open_err(&lc, &r->train_loader, err, sizeof err)) gdp_fatal("--data: %s", err);
        int64_t data_vocab = loader_vocab(r->train_loader);
        if (data_vocab > 0) {
            if (r->vocab_given && cfg->vocab_size < data_vocab && r->resume_path)
                gdp_fatal("--resume: the checkpoint's model has vocab_size %d but --data has a vocabulary of %lld: "
                          "resume with the data (and tokenizer) the run was started with",
                          cfg->vocab_size, (long long)data_vocab);
            if (r->vocab_given && cfg->vocab_size < data_vocab)
                gdp_fatal("vocab_size %d is smaller than the data's vocabulary %lld: drop vocab_size or raise it",
                          cfg->vocab_size, (long long)data_vocab);
            if (!r->vocab_given) cfg->vocab_size = (int)data_vocab;
        } else {
            /* Shards without a tokenizer: check their tokens against the model's vocabulary. */
            loader_close(r->train_loader);
            lc.vocab = cfg->vocab_size;
            if (!loader_open_err(&lc, &r->train_loader, err, sizeof err)) gdp_fatal("--data: %s", err);
        }
        if (!r->resume_path) {
            char tok_path[MODEL_PATH_LEN] = "";
            Tokenizer *tok = tokenizer_for_data(o->data, tok_path, sizeof tok_path);
            if (tok) tokenizer_free(tok);
            char absbuf[PATH_MAX];
            if (tok_path[0] && realpath(tok_path, absbuf) && strlen(absbuf) < MODEL_PATH_LEN)
                snprintf(cfg->tokenizer, sizeof cfg->tokenizer, "%s", absbuf);
            else
                snprintf(cfg->tokenizer, sizeof cfg->tokenizer, "%s", tok_path);
        }
        r->train_src = loader_data(r->train_loader);
        r->train = &r->train_src;
        if (loader_split_exists(o->data, SPLIT_VAL, o->val_fraction)) {
            LoaderConfig vc = lc;
            vc.split = SPLIT_VAL;
            vc.vocab = cfg->vocab_size;
            if (loader_open_err(&vc, &r->val_loader, err, sizeof err)) {
                r->val_src = loader_data(r->val_loader);
                r->val = &r->val_src;
            } else if (r->root) {
                printf("note: no validation (%s)\n", err);
            }
        }
    }
    open_documents(r);
}
