/* gdp tokenize: text on stdin -> one line of space-separated token ids, or (--decode) ids -> text,
 * with any tokenizer gdp.c reads (a tokenizer.json, tokenizer.bin, llm.c's file for --decode, or a
 * data folder's), so that its ids can be checked against other tools. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/common.h"
#include "data/text.h"
#include "data/tokenizer.h"
#include "train/cli/cli.h"
#include "train/cli/commands.h"

static const CliOpt tok_opts[] = {
    {"tokenizer", 't', "PATH", "a tokenizer.json, a tokenizer.bin or llm.c's file, or a gdp prepare folder"},
    {"decode", 'd', NULL, "read ids (separated by white space) and write the text they decode to"},
    {"bench", 0, NULL, "encode stdin 5 times and print MB/s on one core to stderr instead of the ids"},
};
static const CliCommand tok_cmd = {
    "tokenize", "gdp tokenize --tokenizer PATH [--decode] < INPUT",
    "Encodes the bytes of stdin and prints their token ids on one line, separated by spaces; with --decode\n"
    "reads ids and writes the bytes they stand for, so that `gdp tokenize -t T | gdp tokenize -t T --decode`\n"
    "gives the input back. Special tokens written in the text (e.g. <|endoftext|>) become their ids.",
    tok_opts, (int)GDP_ARRAY_LEN(tok_opts)};

typedef struct TokArgs {
    const char *tokenizer;
    bool decode, bench;
} TokArgs;

static void on_opt(const CliOpt *o, const char *v, void *user) {
    TokArgs *a = (TokArgs *)user;
    if (!strcmp(o->name, "tokenizer")) a->tokenizer = v;
    if (!strcmp(o->name, "decode")) a->decode = true;
    if (!strcmp(o->name, "bench")) a->bench = true;
}

static void read_stdin(ByteBuf *in) {
    uint8_t buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, stdin)) > 0) bytebuf_append(in, buf, got);
    if (ferror(stdin)) gdp_fatal("tokenize: cannot read stdin: %s", strerror(errno));
}

int cmd_tokenize(int argc, char **argv) {
    TokArgs a = {0};
    char *pos[1];
    cli_parse(&tok_cmd, argc, argv, on_opt, &a, pos, 0);
    if (!a.tokenizer) cli_usage_error(&tok_cmd, "give the tokenizer with --tokenizer PATH");
    char err[1024];
    Tokenizer *t = NULL;
    char found[4200];
    if (path_is_shard_name(a.tokenizer) || !tokenizer_load_err(a.tokenizer, &t, err, sizeof err)) {
        t = tokenizer_for_data(a.tokenizer, found, sizeof found); /* a folder */
        if (!t || !found[0]) gdp_fatal("tokenize: %s", err);
    }
    ByteBuf in = {0};
    read_stdin(&in);
    if (a.decode) {
        size_t n_ids = 0, cap = 1024;
        uint32_t *ids = (uint32_t *)xmalloc(cap * sizeof(uint32_t));
        for (size_t i = 0; i < in.len;) {
            while (i < in.len && (in.data[i] == ' ' || in.data[i] == '\n' || in.data[i] == '\t' || in.data[i] == '\r'))
                i++;
            if (i == in.len) break;
            unsigned long long v = 0;
            size_t start = i;
            while (i < in.len && in.data[i] >= '0' && in.data[i] <= '9' && v < (1ull << 32)) v = v * 10 + (in.data[i++] - '0');
            if (i == start || v >= (unsigned long long)t->vocab || (i < in.len && in.data[i] > ' '))
                gdp_fatal("tokenize --decode: input byte %zu: expected a token id below the vocabulary of %d", start,
                          t->vocab);
            if (n_ids == cap) ids = (uint32_t *)xrealloc(ids, (cap *= 2) * sizeof(uint32_t));
            ids[n_ids++] = (uint32_t)v;
        }
        size_t need = tokenizer_decode(t, ids, (int64_t)n_ids, NULL, 0);
        uint8_t *out = (uint8_t *)xmalloc(need + 1);
        tokenizer_decode(t, ids, (int64_t)n_ids, out, need);
        if (fwrite(out, 1, need, stdout) != need) gdp_fatal("tokenize: cannot write stdout: %s", strerror(errno));
        free(out);
        free(ids);
    } else {
        if (!tokenizer_can_encode(t))
            gdp_fatal("tokenize: '%s' can only decode (llm.c's file has no merges): give the model's tokenizer.json",
                      a.tokenizer);
        uint32_t *ids = (uint32_t *)xmalloc((2 * in.len + 2) * sizeof(uint32_t));
        int64_t n = 0;
        if (a.bench) {
            double best = 1e30;
            for (int r = 0; r < 5; r++) { /* the first pass also fills the chunk cache, as a long prepare does */
                double t0 = gdp_now_seconds();
                n = tokenizer_encode(t, in.data, in.len, ids);
                best = GDP_MIN(best, gdp_now_seconds() - t0);
            }
            double t0 = gdp_now_seconds();
            Tokenizer *fresh = NULL;
            if (!tokenizer_load_err(a.tokenizer, &fresh, err, sizeof err)) fresh = tokenizer_for_data(a.tokenizer, NULL, 0);
            double t_load = gdp_now_seconds() - t0;
            t0 = gdp_now_seconds();
            tokenizer_encode(fresh, in.data, in.len, ids);
            double cold = gdp_now_seconds() - t0;
            tokenizer_free(fresh);
            fprintf(stderr, "tokenize: %zu bytes -> %lld tokens; %.1f MB/s with a warm cache, %.1f MB/s cold (load %.2f s)\n",
                    in.len, (long long)n, (double)in.len / 1e6 / best, (double)in.len / 1e6 / cold, t_load);
        } else {
            n = tokenizer_encode(t, in.data, in.len, ids);
            for (int64_t i = 0; i < n; i++) printf(i ? " %u" : "%u", ids[i]);
            printf("\n");
        }
        free(ids);
    }
    bytebuf_free(&in);
    tokenizer_free(t);
    if (fflush(stdout) != 0) gdp_fatal("tokenize: cannot write stdout: %s", strerror(errno));
    return 0;
}
