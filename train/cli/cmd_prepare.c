/* gdp prepare: text files (plain or gzip) or JSON Lines -> a tokenizer and llm.c-format token shards.
 *
 * Documents: each input file is one, or is cut into several by --doc-sep (a literal separator, or
 * "blank" for lines that hold only white space), or each line of a JSON Lines file is one
 * (--jsonl-field NAME: that string member of the line's object). Whole documents go to val, evenly
 * spread (data/text.h's rule over documents), when there are enough for the val fraction; else each
 * document is split into train and val by blocks as one text. The tokenizer is made (byte), trained
 * on a sample of the train text (bpe, data/tokenizer.h) or loaded (a tokenizer.json or .bin path);
 * every document part is encoded and followed by the end-of-text token, into DIR/train_NNNNNN.bin
 * and DIR/val_NNNNNN.bin (data/shard.h) beside the tokenizer (tokenizer.bin and tokenizer.json for
 * ours, the given file's copy otherwise). */
#include <errno.h>
#include <math.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "data/json.h"
#include "data/shard.h"
#include "data/text.h"
#include "data/tokenizer.h"
#include "train/cli/cli.h"
#include "train/cli/commands.h"

static const CliOpt prepare_opts[] = {
    {"input", 'i', "FILE", "a text file, plain or gzip (repeatable; more files may follow as arguments)"},
    {"out", 'o', "DIR", "output folder (created; its old train_*/val_* shards are replaced)"},
    {"tokenizer", 't', "KIND", "bpe (default), byte, or a tokenizer file (a Hugging Face tokenizer.json, or tokenizer.bin)"},
    {"doc-sep", 0, "SEP", "documents inside a file end at SEP (\\n, \\t, \\\\ escapes), or at blank lines with 'blank' (default: a file is a document)"},
    {"jsonl-field", 0, "NAME", "inputs are JSON Lines: each line's string member NAME is a document"},
    {"vocab", 'v', "N", "BPE vocabulary size, 256 to 1048576 (default 4096)"},
    {"val-fraction", 0, "X", "share of the text held out for validation, in [0, 1) (default 0.05)"},
    {"bpe-sample", 0, "MB", "learn the BPE merges from this many MB of the train text, evenly spread (default 64; 0: all)"},
    {"shard-tokens", 0, "N", "tokens per shard file (default 100000000)"},
};
static const CliCommand prepare_cmd = {
    "prepare",
    "gdp prepare --input FILE... --out DIR [--tokenizer bpe|byte|FILE] [--vocab N] [--doc-sep SEP | --jsonl-field NAME]",
    "Reads text (plain or gzip), makes or trains the tokenizer and writes DIR/tokenizer.bin plus token\n"
    "shards DIR/train_000000.bin ... and DIR/val_000000.bin ... in llm.c's format (uint16 tokens, or\n"
    "uint32 for vocabularies over 65536). Validation text is every k-th block of the input, so it\n"
    "comes from all over the corpus. Each document ends with the end-of-text token. `gdp train --data DIR`\n"
    "then trains on it.",
    prepare_opts, (int)GDP_ARRAY_LEN(prepare_opts)};

#define MAX_INPUTS 256

typedef struct PrepareArgs {
    const char *inputs[MAX_INPUTS];
    int n_inputs;
    const char *out, *tokenizer, *doc_sep, *jsonl_field;
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
    if (!strcmp(o->name, "doc-sep")) a->doc_sep = v;
    if (!strcmp(o->name, "jsonl-field")) a->jsonl_field = v;
    if (!strcmp(o->name, "vocab")) {
        a->vocab = cli_int("vocab", v, 256, BPE_MAX_VOCAB);
        a->vocab_given = true;
    }
    if (!strcmp(o->name, "val-fraction")) a->val_fraction = cli_double("val-fraction", v, 0, 0.999999);
    if (!strcmp(o->name, "bpe-sample")) a->sample_mb = cli_double("bpe-sample", v, 0, 1e6);
    if (!strcmp(o->name, "shard-tokens")) a->shard_tokens = cli_int("shard-tokens", v, 1, INT32_MAX);
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
    int64_t docs;
} SplitOut;

/* Document parts of one split: offsets into its text; each is encoded and followed by eot. */
typedef struct DocList {
    size_t *start, *end;
    size_t n, cap;
} DocList;

static void docs_add(DocList *d, size_t start, size_t end) {
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 1024;
        d->start = (size_t *)xrealloc(d->start, d->cap * sizeof(size_t));
        d->end = (size_t *)xrealloc(d->end, d->cap * sizeof(size_t));
    }
    d->start[d->n] = start, d->end[d->n] = end;
    d->n++;
}

static void docs_free(DocList *d) {
    free(d->start), free(d->end);
    memset(d, 0, sizeof *d);
}

/* Encodes each document part (in pieces cut where no pre-tokenizer chunk can span: after a newline,
 * before a non-space) and writes the tokens, eot after each part when eot >= 0, into shards. */
static SplitOut write_split(const Tokenizer *tok, const char *dir, const char *name, const ByteBuf *text,
                            const DocList *docs, int64_t shard_tokens, int width) {
    SplitOut r = {0, 0, text->len, (int64_t)docs->n};
    if (text->len == 0) return r;
    const size_t piece = (size_t)32 << 20;
    uint32_t *toks = (uint32_t *)xmalloc((GDP_MIN(text->len, 2 * piece) + 2) * sizeof(uint32_t));
    ShardWriter w = {0};
    for (size_t d = 0; d < docs->n; d++) {
        for (size_t start = docs->start[d]; start <= docs->end[d];) {
            size_t end = start + piece_end(text->data + start, docs->end[d] - start, 0, piece);
            int64_t n = tokenizer_encode(tok, text->data + start, end - start, toks);
            if (end == docs->end[d] && tok->eot >= 0) toks[n++] = (uint32_t)tok->eot;
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
            if (end == docs->end[d]) break;
            start = end;
        }
    }
    if (w.f) shard_writer_close(&w);
    free(toks);
    return r;
}

/* --doc-sep's text with \n, \t, \r and \\ turned into their bytes. */
static size_t unescape(const char *in, char *out) {
    size_t k = 0;
    for (const char *p = in; *p; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            out[k++] = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p == 'r' ? '\r' : *p;
        } else {
            out[k++] = *p;
        }
    }
    out[k] = 0;
    return k;
}

/* The documents of one input file (its bytes at all[from, all->len)): [start, end) ranges into all,
 * empty ones dropped. JSON Lines replace the file's bytes by the documents' decoded text. */
static void input_documents(const PrepareArgs *a, const char *path, ByteBuf *all, size_t from, DocList *docs) {
    if (a->jsonl_field) {
        ByteBuf src = {0};
        bytebuf_append(&src, all->data + from, all->len - from);
        all->len = from;
        size_t line = 0;
        for (size_t i = 0; i < src.len;) {
            const uint8_t *nl = memchr(src.data + i, '\n', src.len - i);
            size_t e = nl ? (size_t)(nl - src.data) : src.len;
            line++;
            size_t k = i;
            while (k < e && (src.data[k] == ' ' || src.data[k] == '\t' || src.data[k] == '\r')) k++;
            if (k < e) {
                JsonValue *v;
                char err[512];
                if (!json_parse((const char *)src.data + i, e - i, &v, err, sizeof err))
                    gdp_fatal("input '%s' line %zu is not JSON (%s): --jsonl-field wants one object a line", path, line,
                              err);
                const JsonValue *f = json_get(v, a->jsonl_field);
                if (!f || f->type != JSON_STRING) {
                    json_free(v);
                    gdp_fatal("input '%s' line %zu has no string member \"%s\": name the text's member with "
                              "--jsonl-field",
                              path, line, a->jsonl_field);
                }
                size_t at = all->len;
                bytebuf_append(all, f->str, f->len);
                if (f->len) docs_add(docs, at, all->len);
                json_free(v);
            }
            i = e + 1;
        }
        bytebuf_free(&src);
        return;
    }
    if (!a->doc_sep) {
        docs_add(docs, from, all->len);
        return;
    }
    const uint8_t *s = all->data;
    size_t n = all->len, start = from;
    if (!strcmp(a->doc_sep, "blank")) {
        /* a document ends at a line with only white space (one or more such lines separate) */
        size_t i = from;
        while (i < n) {
            const uint8_t *nl = memchr(s + i, '\n', n - i);
            if (!nl) break;
            size_t j = (size_t)(nl - s) + 1, k = j; /* j: the next line's start */
            while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
            if (k < n && s[k] == '\n') { /* a blank line: the document ends with the newline before it */
                if (j > start) docs_add(docs, start, j);
                while (k < n) { /* skip every blank line */
                    size_t m = k + 1;
                    while (m < n && (s[m] == ' ' || s[m] == '\t' || s[m] == '\r')) m++;
                    if (m < n && s[m] == '\n') k = m;
                    else break;
                }
                start = i = k + 1;
            } else {
                i = j;
            }
        }
        if (n > start) docs_add(docs, start, n);
        return;
    }
    char sep[4096];
    size_t sl = unescape(a->doc_sep, sep);
    for (size_t i = from; i + sl <= n;) {
        const uint8_t *p = memmem(s + i, n - i, sep, sl);
        if (!p) break;
        size_t at = (size_t)(p - s);
        if (at > start) docs_add(docs, start, at);
        start = i = at + sl;
    }
    if (n > start) docs_add(docs, start, n);
}

/* Train and val texts with their document parts: whole documents to val when there are enough
 * for the fraction, else each document split by blocks. */
static void split_documents(const ByteBuf *all, const DocList *docs, double f, ByteBuf *train, DocList *dtr,
                            ByteBuf *val, DocList *dva) {
    bool whole = (double)docs->n * f >= 1;
    for (size_t d = 0; d < docs->n; d++) {
        const uint8_t *s = all->data + docs->start[d];
        size_t n = docs->end[d] - docs->start[d];
        if (whole) {
            bool to_val = floor((double)(d + 1) * f + 0.5) > floor((double)d * f + 0.5);
            ByteBuf *b = to_val ? val : train;
            size_t at = b->len;
            bytebuf_append(b, s, n);
            docs_add(to_val ? dva : dtr, at, b->len);
        } else {
            size_t t0 = train->len, v0 = val->len;
            text_split(s, n, f, train, val);
            if (train->len > t0) docs_add(dtr, t0, train->len);
            if (val->len > v0) docs_add(dva, v0, val->len);
        }
    }
}

static void copy_file(const char *from, const char *to) {
    ByteBuf b = {0};
    text_read_file(from, &b);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", to);
    FILE *f = xfopen(tmp, "wb");
    xfwrite(b.data, 1, b.len, f, tmp);
    if (fclose(f) != 0) gdp_fatal("cannot close '%s': %s (disk full?)", tmp, strerror(errno));
    if (rename(tmp, to) != 0) gdp_fatal("cannot rename '%s' to '%s': %s", tmp, to, strerror(errno));
    bytebuf_free(&b);
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
    bool bpe = !strcmp(a.tokenizer, "bpe"), byte = !strcmp(a.tokenizer, "byte");
    if (!bpe && a.vocab_given && (!byte || a.vocab != 256))
        cli_usage_error(&prepare_cmd, "--vocab is for --tokenizer bpe (byte has 257 with its end-of-text token; a "
                                      "given file has its own): drop --vocab %lld", a.vocab);
    if (a.doc_sep && a.jsonl_field) cli_usage_error(&prepare_cmd, "give --doc-sep or --jsonl-field, not both");
    if (a.doc_sep && !a.doc_sep[0]) cli_usage_error(&prepare_cmd, "--doc-sep must not be empty");
    if (bpe && a.vocab < 257) cli_usage_error(&prepare_cmd, "--vocab %lld leaves no room for the end-of-text token: use 257 or more", a.vocab);

    /* A given tokenizer first: a bad path should fail before minutes of reading. */
    Tokenizer *tok = NULL;
    if (!bpe && !byte) {
        if (access(a.tokenizer, R_OK) != 0)
            cli_usage_error(&prepare_cmd, "unknown --tokenizer '%s': use bpe, byte or the path of a tokenizer file (%s)",
                            a.tokenizer, strerror(errno));
        char err[1024];
        if (!tokenizer_load_err(a.tokenizer, &tok, err, sizeof err)) gdp_fatal("prepare: %s", err);
        if (!tokenizer_can_encode(tok))
            gdp_fatal("prepare: tokenizer '%s' can only decode (llm.c's file holds no merges): give the model's "
                      "tokenizer.json",
                      a.tokenizer);
    }

    double t0 = gdp_now_seconds();
    ByteBuf all = {0};
    DocList docs = {0};
    for (int i = 0; i < a.n_inputs; i++) {
        size_t before = all.len;
        text_read_file(a.inputs[i], &all);
        if (all.len == before) gdp_fatal("input '%s' is empty: there is no text to tokenise", a.inputs[i]);
        printf("prepare: read '%s': %zu bytes\n", a.inputs[i], all.len - before);
        size_t nd = docs.n;
        input_documents(&a, a.inputs[i], &all, before, &docs);
        if (docs.n == nd) gdp_fatal("input '%s' holds no document (only separators or empty records)", a.inputs[i]);
    }
    ByteBuf train = {0}, val = {0};
    DocList dtr = {0}, dva = {0};
    split_documents(&all, &docs, a.val_fraction, &train, &dtr, &val, &dva);
    size_t total_bytes = all.len;
    int64_t n_docs = (int64_t)docs.n;
    bytebuf_free(&all);
    docs_free(&docs);
    if (train.len < 2) gdp_fatal("the train part of the text has %zu bytes: give more text", train.len);
    double t_read = gdp_now_seconds() - t0;

    if (bpe) {
        BpeTrainStats st;
        tok = tokenizer_train_bpe(train.data, train.len, (int)a.vocab - 1, (size_t)(a.sample_mb * 1048576.0), &st);
        tokenizer_add_eot(tok);
        printf("prepare: BPE learned %d merges from %.1f MB (%lld distinct chunks) in %.2f s\n", st.merges,
               (double)st.sample_bytes / 1048576.0, (long long)st.distinct_chunks, st.seconds);
        if (tok->vocab < a.vocab)
            printf("prepare: note: vocabulary %d, not %lld: no pair of tokens occurs twice any more\n", tok->vocab,
                   a.vocab);
    } else if (byte) {
        tok = tokenizer_byte();
        tokenizer_add_eot(tok);
    }
    double t_tok = gdp_now_seconds();
    gdp_mkdir_p(a.out, "output");
    remove_old_shards(a.out);
    char tpath[4200], jpath[4200];
    snprintf(tpath, sizeof tpath, "%s/%s", a.out, TOKENIZER_FILE);
    snprintf(jpath, sizeof jpath, "%s/%s", a.out, TOKENIZER_JSON_FILE);
    /* A stale tokenizer of an earlier prepare must not be found beside these shards. */
    if (unlink(tpath) != 0 && errno != ENOENT) gdp_fatal("cannot remove old '%s': %s", tpath, strerror(errno));
    if (unlink(jpath) != 0 && errno != ENOENT) gdp_fatal("cannot remove old '%s': %s", jpath, strerror(errno));
    const char *written;
    if (tok->kind == TOKENIZER_HF) {
        copy_file(a.tokenizer, jpath);
        written = jpath;
    } else {
        tokenizer_save(tok, tpath);
        written = tpath;
        char err[1024];
        if (!tokenizer_save_json_err(tok, jpath, err, sizeof err)) printf("prepare: note: %s\n", err);
    }
    int width = shard_token_bytes_for_vocab(tok->vocab);
    SplitOut tr = write_split(tok, a.out, "train", &train, &dtr, a.shard_tokens, width);
    SplitOut va = write_split(tok, a.out, "val", &val, &dva, a.shard_tokens, width);
    double t_enc = gdp_now_seconds() - t_tok;
    printf("prepare: %zu bytes of text in %lld document(s): train %zu, val %zu (val fraction %g%s)\n", total_bytes,
           (long long)n_docs, train.len, val.len, a.val_fraction,
           (double)n_docs * a.val_fraction >= 1 ? ", whole documents" : ", blocks of each document");
    printf("prepare: tokenizer %s, vocabulary %d, end of text %d -> %s\n", bpe ? "bpe" : byte ? "byte" : a.tokenizer,
           tok->vocab, tok->eot, written);
    if (tok->eot < 0) printf("prepare: note: the tokenizer has no end-of-text token: documents are not marked\n");
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
    docs_free(&dtr);
    docs_free(&dva);
    return 0;
}
