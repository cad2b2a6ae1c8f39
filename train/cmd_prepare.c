/* gdp prepare: text files (plain or gzip) -> a tokenizer and llm.c-format token shards.
 *
 * The inputs are concatenated (a newline added after one that does not end with one), split
 * into train and val by blocks (data/text.h), the tokenizer is made (byte) or trained on a sample
 * of the train text (bpe, data/tokenizer.h), and both parts are encoded into
 * DIR/train_NNNNNN.bin and DIR/val_NNNNNN.bin (data/shard.h) beside DIR/tokenizer.bin. */
#include <errno.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/common.h"
#include "data/shard.h"
#include "data/text.h"
#include "data/tokenizer.h"
#include "train/cli.h"
#include "train/commands.h"

static const CliOpt prepare_opts[] = {
    {"input", 'i', "FILE", "a text file, plain or gzip (repeatable; more files may follow as arguments)"},
    {"out", 'o', "DIR", "output folder (created; its old train_*/val_* shards are replaced)"},
    {"tokenizer", 't', "KIND", "bpe (default) or byte"},
    {"vocab", 'v', "N", "BPE vocabulary size, 256 to 1048576 (default 4096)"},
    {"val-fraction", 0, "X", "share of the text held out for validation, in [0, 1) (default 0.05)"},
    {"bpe-sample", 0, "MB", "learn the BPE merges from this many MB of the train text, evenly spread (default 64; 0: all)"},
    {"shard-tokens", 0, "N", "tokens per shard file (default 100000000)"},
};
static const CliCommand prepare_cmd = {
    "prepare", "gdp prepare --input FILE... --out DIR [--tokenizer bpe|byte] [--vocab N] [--val-fraction X]",
    "Reads text (plain or gzip), makes or trains the tokenizer and writes DIR/tokenizer.bin plus token\n"
    "shards DIR/train_000000.bin ... and DIR/val_000000.bin ... in llm.c's format (uint16 tokens, or\n"
    "uint32 for vocabularies over 65536). Validation text is every k-th block of the input, so it\n"
    "comes from all over the corpus. `gdp train --data DIR` then trains on it.",
    prepare_opts, (int)GDP_ARRAY_LEN(prepare_opts)};

#define MAX_INPUTS 256

typedef struct PrepareArgs {
    const char *inputs[MAX_INPUTS];
    int n_inputs;
    const char *out, *tokenizer;
    long long vocab;
    bool vocab_given;
    double val_fraction, sample_mb;
    long long shard_tokens;
} PrepareArgs;

static void on_opt(const CliOpt *o, const char *v, void *user) {
    PrepareArgs *a = (PrepareArgs *)user;
    if (!strcmp(o->name, "input")) {
        if (a->n_inputs >= MAX_INPUTS) cli_usage_error(&prepare_cmd, "at most %d input files", MAX_INPUTS);
        a->inputs[a->n_inputs++] = v;
    }
    if (!strcmp(o->name, "out")) a->out = v;
    if (!strcmp(o->name, "tokenizer")) a->tokenizer = v;
    if (!strcmp(o->name, "vocab")) {
        a->vocab = cli_int("vocab", v, 256, BPE_MAX_VOCAB);
        a->vocab_given = true;
    }
    if (!strcmp(o->name, "val-fraction")) a->val_fraction = cli_double("val-fraction", v, 0, 0.999999);
    if (!strcmp(o->name, "bpe-sample")) a->sample_mb = cli_double("bpe-sample", v, 0, 1e6);
    if (!strcmp(o->name, "shard-tokens")) a->shard_tokens = cli_int("shard-tokens", v, 1, INT32_MAX);
}

static void mkdir_p(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        char c = *p;
        if (c == '/' || c == 0) {
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) gdp_fatal("cannot create folder '%s': %s", buf, strerror(errno));
            *p = c;
        }
        if (!c) break;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) gdp_fatal("output '%s' exists and is not a folder", path);
}

/* train_NNNNNN.bin / val_NNNNNN.bin (and .tmp leftovers): the files a previous prepare wrote. */
static bool is_our_shard(const char *name) {
    const char *p = !strncmp(name, "train_", 6) ? name + 6 : !strncmp(name, "val_", 4) ? name + 4 : NULL;
    if (!p) return false;
    for (int i = 0; i < 6; i++)
        if (p[i] < '0' || p[i] > '9') return false;
    return !strcmp(p + 6, ".bin") || !strcmp(p + 6, ".bin.tmp");
}

static void remove_old_shards(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) gdp_fatal("cannot read folder '%s': %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_our_shard(e->d_name)) continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0) gdp_fatal("cannot remove old shard '%s': %s", p, strerror(errno));
    }
    closedir(d);
}

/* A cut inside text that changes no pre-tokenizer chunk: after a newline, before a non-space. */
static size_t piece_end(const uint8_t *s, size_t n, size_t start, size_t piece) {
    if (n - start <= piece) return n;
    size_t limit = GDP_MIN(n, start + 2 * piece);
    for (size_t p = start + piece; p < limit; p++)
        if (s[p - 1] == '\n' && s[p] != ' ' && s[p] != '\n' && s[p] != '\t' && s[p] != '\r' && s[p] != '\v' &&
            s[p] != '\f')
            return p;
    return limit;
}

typedef struct SplitOut {
    int64_t tokens;
    int shards;
    size_t bytes;
} SplitOut;

static SplitOut write_split(const Tokenizer *tok, const char *dir, const char *name, const ByteBuf *text,
                            int64_t shard_tokens, int width) {
    SplitOut r = {0, 0, text->len};
    if (text->len == 0) return r;
    const size_t piece = (size_t)32 << 20;
    uint32_t *toks = (uint32_t *)xmalloc(GDP_MIN(text->len, 2 * piece) * sizeof(uint32_t));
    ShardWriter w = {0};
    for (size_t start = 0; start < text->len;) {
        size_t end = piece_end(text->data, text->len, start, piece);
        int64_t n = tokenizer_encode(tok, text->data + start, end - start, toks);
        for (int64_t k = 0; k < n;) {
            if (!w.f) {
                char path[4200];
                snprintf(path, sizeof path, "%s/%s_%06d.bin", dir, name, r.shards++);
                shard_writer_open(&w, path, width);
            }
            int64_t take = GDP_MIN(n - k, shard_tokens - w.n_tokens);
            shard_writer_append(&w, toks + k, take);
            k += take;
            if (w.n_tokens == shard_tokens) shard_writer_close(&w);
        }
        r.tokens += n;
        start = end;
    }
    if (w.f) shard_writer_close(&w);
    free(toks);
    return r;
}

int cmd_prepare(int argc, char **argv) {
    PrepareArgs a;
    memset(&a, 0, sizeof a);
    a.tokenizer = "bpe";
    a.vocab = 4096;
    a.val_fraction = 0.05;
    a.sample_mb = 64;
    a.shard_tokens = 100000000;
    char *pos[MAX_INPUTS];
    int np = cli_parse(&prepare_cmd, argc, argv, on_opt, &a, pos, MAX_INPUTS);
    for (int i = 0; i < np; i++) {
        if (a.n_inputs >= MAX_INPUTS) cli_usage_error(&prepare_cmd, "at most %d input files", MAX_INPUTS);
        a.inputs[a.n_inputs++] = pos[i];
    }
    if (!a.n_inputs) cli_usage_error(&prepare_cmd, "give at least one --input FILE");
    if (!a.out) cli_usage_error(&prepare_cmd, "give the output folder with --out DIR");
    bool bpe = !strcmp(a.tokenizer, "bpe");
    if (!bpe && strcmp(a.tokenizer, "byte"))
        cli_usage_error(&prepare_cmd, "unknown --tokenizer '%s': use bpe or byte", a.tokenizer);
    if (!bpe && a.vocab_given && a.vocab != 256)
        cli_usage_error(&prepare_cmd, "--tokenizer byte has vocabulary 256: drop --vocab %lld", a.vocab);

    double t0 = gdp_now_seconds();
    ByteBuf all = {0};
    for (int i = 0; i < a.n_inputs; i++) {
        size_t before = all.len;
        text_read_file(a.inputs[i], &all);
        if (all.len == before) gdp_fatal("input '%s' is empty: there is no text to tokenise", a.inputs[i]);
        printf("prepare: read '%s': %zu bytes\n", a.inputs[i], all.len - before);
        if (i + 1 < a.n_inputs && all.data[all.len - 1] != '\n') bytebuf_append(&all, "\n", 1);
    }
    ByteBuf train = {0}, val = {0};
    text_split(all.data, all.len, a.val_fraction, &train, &val);
    size_t total_bytes = all.len;
    bytebuf_free(&all);
    if (train.len < 2) gdp_fatal("the train part of the text has %zu bytes: give more text", train.len);
    double t_read = gdp_now_seconds() - t0;

    Tokenizer *tok;
    if (bpe) {
        BpeTrainStats st;
        tok = tokenizer_train_bpe(train.data, train.len, (int)a.vocab, (size_t)(a.sample_mb * 1048576.0), &st);
        printf("prepare: BPE learned %d merges from %.1f MB (%lld distinct chunks) in %.2f s\n", st.merges,
               (double)st.sample_bytes / 1048576.0, (long long)st.distinct_chunks, st.seconds);
        if (tok->vocab < a.vocab)
            printf("prepare: note: vocabulary %d, not %lld: no pair of tokens occurs twice any more\n", tok->vocab,
                   a.vocab);
    } else {
        tok = tokenizer_byte();
    }
    double t_tok = gdp_now_seconds();
    mkdir_p(a.out);
    remove_old_shards(a.out);
    char tpath[4200];
    snprintf(tpath, sizeof tpath, "%s/%s", a.out, TOKENIZER_FILE);
    tokenizer_save(tok, tpath);
    int width = shard_token_bytes_for_vocab(tok->vocab);
    SplitOut tr = write_split(tok, a.out, "train", &train, a.shard_tokens, width);
    SplitOut va = write_split(tok, a.out, "val", &val, a.shard_tokens, width);
    double t_enc = gdp_now_seconds() - t_tok;
    printf("prepare: %zu bytes of text: train %zu, val %zu (val fraction %g)\n", total_bytes, train.len, val.len,
           a.val_fraction);
    printf("prepare: tokenizer %s, vocabulary %d -> %s\n", bpe ? "bpe" : "byte", tok->vocab, tpath);
    printf("prepare: train %lld tokens in %d shard(s), val %lld tokens in %d shard(s), %d-byte tokens\n",
           (long long)tr.tokens, tr.shards, (long long)va.tokens, va.shards, width);
    printf("prepare: %.3f bytes/token; encoded in %.2f s; total %.2f s (reading %.2f s)\n",
           (double)(tr.bytes + va.bytes) / (double)GDP_MAX(1, tr.tokens + va.tokens), t_enc,
           gdp_now_seconds() - t0, t_read);
    if (!va.tokens) printf("prepare: note: no validation shard (val fraction 0, or the text is too short)\n");
    printf("prepare: wrote %s/train_*.bin%s\n", a.out, va.tokens ? " and val_*.bin" : "");
    tokenizer_free(tok);
    bytebuf_free(&train);
    bytebuf_free(&val);
    return 0;
}
