/* The data loader for `train` and `eval`: batches of B random windows of T+1 tokens (inputs and
 * targets shifted by one) from token shards or a plain text file.
 *
 * Sources (LoaderConfig.source):
 *   - a folder: its shards for the split, i.e. the *.bin files whose name has the word "train"
 *     (or "val") between '_', '-', '.' or the ends (gdp prepare's train_000000.bin, llm.c's
 *     fineweb_train_000001.bin, tiny_shakespeare_val.bin), sorted by name;
 *   - one .bin shard or a glob pattern of shards; for the val split a name or pattern holding
 *     "train" has it replaced by "val" (llm.c's naming), one holding "val" is taken as it is;
 *   - any other file: text (plain or gzip), byte-tokenised in memory (vocab 256) and split into
 *     train/val by text_split (data/text.h) with val_fraction.
 * Every shard is checked at open (header, size; and every token < vocab when the split holds at
 * most LOADER_SCAN_TOKENS tokens); every window read is checked against vocab as well.
 *
 * Order. Shard s of n_s tokens holds the windows starting at shift + j*T, j < (n_s-1-shift)/T.
 * An epoch orders the W windows of all shards by a seeded pseudo-random permutation (a 4-round
 * Feistel network on the next even power of two with cycle-walking: no table, O(1) to seek), with
 * a fresh key and a fresh shift in [0, T) per epoch; the val split (or shuffle = 0) reads windows
 * in order with shift 0. Batch k of rank r is made of the windows at permutation positions
 * (k*world + r)*B + b, b < B: ranks read disjoint windows, and together the same windows whatever
 * the world size for one global batch world*B. An epoch has floor(W / (world*B)) batches.
 *
 * State. LoaderState (int64 only: a checkpoint stores it as int64_t[LOADER_STATE_N]) holds the seed,
 * the epoch and the windows consumed in it; restoring it continues the same order. A different
 * world size or batch resumes at the last global batch boundary at or before that point. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOADER_SCAN_TOKENS ((int64_t)1 << 27)
#define LOADER_DEFAULT_VAL_FRACTION 0.05
#define LOADER_STATE_VERSION 1
#define LOADER_STATE_N 7

typedef enum DataSplit { SPLIT_TRAIN = 0, SPLIT_VAL = 1 } DataSplit;

typedef struct LoaderConfig {
    const char *source;
    DataSplit split;
    int batch, seq_len;   /* B and T */
    uint64_t seed;
    int rank, world;
    int64_t vocab;        /* tokens must be < vocab; 0: the tokenizer's beside the data (text: 256), else none */
    double val_fraction;  /* plain text only */
    int shuffle;          /* -1: train shuffles, val reads in order; 0 or 1 force it */
} LoaderConfig;

/* Defaults: seed 1, rank 0 of 1, vocab 0, val_fraction LOADER_DEFAULT_VAL_FRACTION, shuffle -1. */
LoaderConfig loader_config(const char *source, DataSplit split, int batch, int seq_len);

typedef struct LoaderState {
    int64_t version, seed, epoch, consumed, seq_len, global_batch;
    int64_t n_tokens; /* of the split when saved: a restore onto other data warns that the order differs */
} LoaderState;

typedef struct Loader Loader;

/* False with a message naming the file or folder in err on any problem (no shards, a bad shard, a
 * token >= vocab, too little data for one batch on every rank). */
bool loader_open_err(const LoaderConfig *cfg, Loader **out, char *err, size_t errlen);
Loader *loader_open(const LoaderConfig *cfg); /* fatal on error */
void loader_close(Loader *l);

/* inputs and targets: int32 [B*T], row b = window b; targets[i] = the token after inputs[i]. */
void loader_next_batch(Loader *l, int32_t *inputs, int32_t *targets);
/* Back to the first batch of epoch 0 (e.g. before each evaluation over val). */
void loader_reset(Loader *l);

LoaderState loader_get_state(const Loader *l);
/* Fatal when it does not fit (another seq_len, an unknown version); a warning on stderr when the
 * data have another token count than when saved (the order then differs). */
void loader_set_state(Loader *l, const LoaderState *s);

int64_t loader_batches_per_epoch(const Loader *l); /* of the current epoch */
int64_t loader_n_tokens(const Loader *l);          /* tokens in the split's shards */
int64_t loader_vocab(const Loader *l);             /* the checked bound (0 when unknown) */
int loader_n_shards(const Loader *l);
/* One line such as "data/gcide (train): 1 shard, 9.8M tokens, 9562 windows of 1024+1, 298 batches/epoch". */
void loader_describe(const Loader *l, char *buf, size_t len);

/* Documents in a batch of B rows of T inputs: an input equal to eot (>= 0) ends its document and the
 * next position starts one. Writes the offsets of the packed sequences over the B*T positions taken
 * row after row into cu (room for B*T + 1): 0, each row's start, each position after an end-of-text
 * inside a row, and B*T; returns their count n (cu[0 .. n]). With mask_across, the target at each
 * end-of-text input (the first token of the next document) becomes -1, which the loss ignores. */
int loader_documents(const int32_t *inputs, int32_t *targets, int64_t B, int64_t T, int32_t eot, bool mask_across,
                     int32_t *cu);

/* Whether a source has data for split (a folder with val shards, a text file with val_fraction > 0
 * ...), without opening it; for `train` to decide whether to evaluate. */
bool loader_split_exists(const char *source, DataSplit split, double val_fraction);

#ifdef __cplusplus
}
#endif
