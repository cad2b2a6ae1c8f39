/* gdp generate: a prompt through the chunked forward (a prefill), then recurrent decoding one token
 * at a time with O(1) state (layers/decode.h), on the CPU or CUDA; text through the tokenizer the
 * data was prepared with (its path is in the checkpoint's config), or bytes. */
#include <stdio.h>
#include <string.h>

#include "base/common.h"
#include "data/text.h"
#include "data/tokenizer.h"
#include "layers/decode.h"
#include "layers/model.h"
#include "layers/sampler.h"
#include "train/cli/cli.h"
#include "train/cli/commands.h"
#include "train/train.h"

static const CliOpt gen_opts[] = {
    {"checkpoint", 'c', "PATH", "checkpoint file, or a training folder (its latest checkpoint)"},
    {"prompt", 'p', "TEXT", "the text to continue (not empty)"},
    {"tokens", 'n', "N", "tokens to generate (default 128)"},
    {"temperature", 'T', "X", "sampling temperature (default 0.8; 0 = greedy)"},
    {"top-k", 'k', "K", "sample among the K most likely tokens only (default 0 = all)"},
    {"top-p", 0, "P", "nucleus sampling: the most likely tokens up to probability P (default 1 = all)"},
    {"repetition-penalty", 0, "X", "divide the logits of tokens already seen by X (default 1 = off)"},
    {"stop", 0, "TEXT", "stop a continuation where TEXT appears (TEXT not printed)"},
    {"stop-token", 0, "ID", "stop a continuation at token ID (-1 = the tokenizer's end-of-text)"},
    {"prompts", 0, "FILE", "continue every line of FILE instead of --prompt: one output line each, in order"},
    {"batch", 'b', "N", "prompts decoded together, a step for all of them per token (default 1)"},
    {"stream", 0, NULL, "print each token as it comes (default: a continuation when it is done)"},
    {"seed", 's', "N", "sampling seed (default 1)"},
    {"device", 'd', "DEV", "cpu (default), cuda or auto: where the model runs and decodes"},
    {"tokenizer", 0, "FILE", "tokenizer file (default: the one recorded in the checkpoint, else bytes)"},
};
static const CliCommand gen_cmd = {
    "generate",
    "gdp generate --checkpoint PATH (--prompt TEXT | --prompts FILE) [--tokens N --temperature X --top-k K\n"
    "             --top-p P --repetition-penalty X --stop TEXT --stop-token ID --batch N --stream --seed N\n"
    "             --device DEV]",
    "Continues a prompt with a trained model: the prompt goes through the chunked forward (a prefill) and\n"
    "hands its recurrent state and conv windows to the decoder, which carries them token by token. Prints\n"
    "the prompt and the continuation; with --prompts, one line per prompt (its continuation, newlines as\n"
    "\\n). With --batch N, N prompts at a time are decoded together: each keeps its own state and\n"
    "generator, so its continuation is the one it gets alone. With --device cuda every layer of a step\n"
    "and the sampling run on the GPU (a step replays a captured CUDA graph) and only the tokens come back.",
    gen_opts, (int)GDP_ARRAY_LEN(gen_opts)};

typedef struct GenArgs {
    const char *checkpoint, *prompt, *tokenizer, *device;
    int64_t tokens;
    double temperature;
    int top_k;
    uint64_t seed;
    double top_p, rep_penalty;
    const char *stop, *prompts;
    int stop_token, batch;
    bool stop_token_set, stream;
} GenArgs;

static void on_opt(const CliOpt *o, const char *v, void *user) {
    GenArgs *a = (GenArgs *)user;
    const char *n = o->name;
    if (!strcmp(n, "checkpoint")) a->checkpoint = v;
    else if (!strcmp(n, "prompt")) a->prompt = v;
    else if (!strcmp(n, "tokenizer")) a->tokenizer = v;
    else if (!strcmp(n, "tokens")) a->tokens = cli_int(n, v, 0, 1 << 30);
    else if (!strcmp(n, "temperature")) a->temperature = cli_double(n, v, 0, 100);
    else if (!strcmp(n, "top-k")) a->top_k = (int)cli_int(n, v, 0, 1 << 30);
    else if (!strcmp(n, "seed")) a->seed = (uint64_t)cli_int(n, v, 0, (long long)1 << 62);
    else if (!strcmp(n, "device")) a->device = cli_device(&gen_cmd, v);
    else if (!strcmp(n, "top-p")) a->top_p = cli_double(n, v, 0, 1);
    else if (!strcmp(n, "repetition-penalty")) a->rep_penalty = cli_double(n, v, 0.01, 100);
    else if (!strcmp(n, "stop")) a->stop = v;
    else if (!strcmp(n, "stop-token")) a->stop_token = (int)cli_int(n, v, -1, 1 << 30), a->stop_token_set = true;
    else if (!strcmp(n, "prompts")) a->prompts = v;
    else if (!strcmp(n, "batch")) a->batch = (int)cli_int(n, v, 1, 4096);
    else if (!strcmp(n, "stream")) a->stream = true;
}

/* Prints bytes as text: printable ASCII, newlines, tabs and UTF-8 as they are, other control
 * bytes as \xNN. */
static void print_bytes(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 || c == '\n' || c == '\t')
            putchar(c);
        else
            printf("\\x%02x", c);
    }
}

typedef struct Prompts {
    char **text;
    size_t *len;
    int n, cap;
} Prompts;

static void prompts_add(Prompts *p, const char *s, size_t n) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 16;
        p->text = (char **)xrealloc(p->text, (size_t)p->cap * sizeof(char *));
        p->len = (size_t *)xrealloc(p->len, (size_t)p->cap * sizeof(size_t));
    }
    p->text[p->n] = (char *)xmalloc(n + 1);
    memcpy(p->text[p->n], s, n);
    p->text[p->n][n] = 0;
    p->len[p->n++] = n;
}

/* One prompt a line; empty lines are skipped (a continuation needs a prompt). */
static void read_prompts(const char *path, Prompts *p) {
    ByteBuf b = {0};
    char err[1024];
    if (!text_read_file_err(path, &b, err, sizeof err)) gdp_fatal("generate: --prompts: %s", err);
    size_t s = 0;
    for (size_t i = 0; i <= b.len; i++)
        if (i == b.len || b.data[i] == '\n') {
            size_t e = i > s && b.data[i - 1] == '\r' ? i - 1 : i;
            if (e > s) prompts_add(p, (const char *)b.data + s, e - s);
            s = i + 1;
        }
    bytebuf_free(&b);
    GDP_CHECK(p->n > 0, "generate: --prompts %s holds no prompt (one per line)", path);
}

/* One DecodeBatch and Sampler of `rows` sequences serve every group of prompts: a group of fewer
 * prompts (the last) leaves rows ended, so no group allocates buffers or captures graphs again. */
typedef struct GenRun {
    Model *m;
    Tokenizer *tok;
    const GenArgs *a;
    int stop_token; /* -2: none */
    int rows;
    DecodeBatch dec;
    Sampler smp;
} GenRun;

typedef struct GenTotals {
    int64_t made, prompt_tokens;
    double prefill_s, decode_s;
} GenTotals;

/* Writes out[from, to): escaped as one line with --prompts, else as print_bytes does. */
static void emit(const GenRun *g, const ByteBuf *out, size_t from, size_t to) {
    for (size_t i = from; i < to; i++) {
        uint8_t c = out->data[i];
        if (g->a->prompts && (c == '\n' || c == '\\')) printf("\\%c", c == '\n' ? 'n' : '\\');
        else print_bytes(&c, 1);
    }
    fflush(stdout);
}

/* One continuation of a group: the tokens it has made and their text, the first `shown` bytes printed. */
typedef struct Seq {
    int64_t made;
    ByteBuf out;
    size_t shown;
} Seq;

/* Appends token t to s's continuation; true when the stop string has now appeared (the text is cut
 * before it). keep = strlen(stop) - 1: the bytes held back from streaming, since a stop string may
 * straddle tokens. */
static bool seq_append(const GenRun *g, Seq *s, int t, size_t keep) {
    s->made++;
    size_t len = 0;
    const uint8_t *b = tokenizer_token_bytes(g->tok, (uint32_t)t, &len);
    bytebuf_append(&s->out, b, len);
    if (!g->a->stop) return false;
    const size_t from = s->out.len > len + keep ? s->out.len - len - keep : 0;
    const uint8_t *hit = memmem(s->out.data + from, s->out.len - from, g->a->stop, keep + 1);
    if (hit) s->out.len = (size_t)(hit - s->out.data);
    return hit != NULL;
}

/* Prompts [first, first + n) decoded together (n <= g->rows): each prompt's prefill, then a step
 * of every live sequence per token, each sampled from its own logits by the Sampler where they are
 * (a generator per sequence, seeded alike, so a prompt's continuation does not depend on the batch
 * it is in), until --tokens, the stop token or the stop string. Prints each continuation when the
 * group is done (or streams, one prompt alone). Adds the tokens made and the prefill and decode
 * seconds to the totals. */
static void generate_group(GenRun *g, const Prompts *p, int first, int n, GenTotals *tot) {
    const GenArgs *a = g->a;
    const size_t keep = a->stop ? strlen(a->stop) - 1 : 0;
    const int rows = g->rows;
    Seq *sq = (Seq *)xcalloc((size_t)rows, sizeof(Seq));
    bool *done = (bool *)xmalloc((size_t)rows * sizeof(bool));
    int64_t *lens = (int64_t *)xcalloc((size_t)rows, sizeof(int64_t)), total = 0;
    int32_t *ids = NULL;
    for (int i = n; i < rows; i++) done[i] = true; /* rows this group leaves empty (lens 0) */
    for (int i = 0; i < n; i++) {
        const char *text = p->text[first + i];
        const size_t plen = p->len[first + i];
        uint32_t *ptoks = (uint32_t *)xmalloc((plen + 1) * sizeof(uint32_t));
        const int64_t np = tokenizer_encode(g->tok, (const uint8_t *)text, plen, ptoks);
        GDP_CHECK(np > 0, "generate: the prompt '%.40s' encodes to no tokens", text);
        ids = (int32_t *)xrealloc(ids, (size_t)(total + np) * sizeof(int32_t));
        for (int64_t t = 0; t < np; t++) ids[total + t] = (int32_t)ptoks[t];
        free(ptoks);
        sampler_start(&g->smp, i, ids + total, np);
        lens[i] = np, total += np;
        done[i] = a->tokens == 0;
    }
    int32_t *next = (int32_t *)xmalloc((size_t)rows * sizeof(int32_t));
    int32_t *feed = (int32_t *)xmalloc((size_t)rows * sizeof(int32_t));
    if (!a->prompts) print_bytes((const uint8_t *)p->text[first], p->len[first]), fflush(stdout);

    double t = gdp_now_seconds();
    decode_batch_prefill_pick(&g->dec, ids, lens, &g->smp, next);
    tot->prefill_s += gdp_now_seconds() - t, tot->prompt_tokens += total;
    t = gdp_now_seconds();
    for (int live = n; live > 0;) {
        for (int i = 0; i < rows; i++) {
            feed[i] = -1;
            if (done[i]) continue;
            Seq *s = &sq[i];
            const int tok = next[i];
            if (tok == g->stop_token) {
                done[i] = true;
                continue;
            }
            sampler_observe(&g->smp, i, tok);
            const bool stopped = seq_append(g, s, tok, keep);
            done[i] = stopped || s->made == a->tokens;
            if (a->stream && s->out.len > s->shown + (stopped ? 0 : keep)) {
                const size_t to = stopped ? s->out.len : s->out.len - keep;
                emit(g, &s->out, s->shown, to);
                s->shown = to;
            }
            if (!done[i]) feed[i] = tok; /* the last token needs no step */
        }
        live = 0;
        for (int i = 0; i < rows; i++) live += feed[i] >= 0;
        if (live > 0) decode_batch_step_pick(&g->dec, feed, &g->smp, next);
    }
    tot->decode_s += gdp_now_seconds() - t;
    for (int i = 0; i < n; i++) {
        emit(g, &sq[i].out, sq[i].shown, sq[i].out.len);
        printf("\n");
        tot->made += sq[i].made;
        bytebuf_free(&sq[i].out);
    }
    fflush(stdout);
    free(sq), free(done), free(lens), free(ids), free(next), free(feed);
}

int cmd_generate(int argc, char **argv) {
    GenArgs a = {NULL, NULL, NULL, "cpu", 128, 0.8, 0, 1, 1.0, 1.0, NULL, NULL, -1, 1, false, false};
    char *pos[1];
    cli_parse(&gen_cmd, argc, argv, on_opt, &a, pos, 0);
    if (!a.checkpoint) cli_usage_error(&gen_cmd, "--checkpoint is required");
    if (!a.prompts && (!a.prompt || !a.prompt[0]))
        cli_usage_error(&gen_cmd, "--prompt TEXT or --prompts FILE is required (a prompt must not be empty)");
    if (a.prompts && a.prompt) cli_usage_error(&gen_cmd, "give --prompt or --prompts, not both");
    if (a.stop && !a.stop[0]) cli_usage_error(&gen_cmd, "--stop must not be empty");
    if (a.stream && a.batch > 1)
        cli_usage_error(&gen_cmd, "--stream prints one continuation as it comes: use it with --batch 1");
    Device dev = device_parse(a.device, "--device");
    char *ckpt = train_resolve_checkpoint(a.checkpoint, "--checkpoint");

    Model m;
    ParamStore ps;
    /* Arenas for a prefill chunk; the state path keeps the conv windows too, hence twice the tokens. */
    Ctx *ctx = train_load_model(ckpt, dev, 1, 2 * DECODE_PREFILL_CHUNK, &m, &ps);
    GDP_CHECK(m.cfg.num_labels == 0, "generate: %s is a classification model; it has no next-token head", ckpt);

    /* The tokenizer: --tokenizer, else the checkpoint's, else bytes (a byte vocabulary only). */
    const char *tok_path = a.tokenizer ? a.tokenizer : (m.cfg.tokenizer[0] ? m.cfg.tokenizer : NULL);
    Tokenizer *tok = NULL;
    if (tok_path) {
        char err[1024];
        if (!tokenizer_load_err(tok_path, &tok, err, sizeof err))
            gdp_fatal("generate: %s (give the right file with --tokenizer)", err);
    } else {
        GDP_CHECK(m.cfg.vocab_size <= 256,
                  "generate: the checkpoint records no tokenizer and its vocabulary (%d) is not bytes: give --tokenizer",
                  m.cfg.vocab_size);
        tok = tokenizer_byte();
    }
    GDP_CHECK(tokenizer_can_encode(tok), "generate: tokenizer '%s' can only decode (llm.c's files hold no merges)",
              tok_path ? tok_path : "bytes");
    GDP_CHECK(tok->vocab <= m.cfg.vocab_size, "generate: the tokenizer has %d tokens, the model only %d", tok->vocab,
              m.cfg.vocab_size);

    Prompts ps_in = {0};
    if (a.prompts) read_prompts(a.prompts, &ps_in);
    else prompts_add(&ps_in, a.prompt, strlen(a.prompt));
    int stop_token = !a.stop_token_set ? -2 : a.stop_token >= 0 ? a.stop_token : tok->eot;
    GDP_CHECK(!a.stop_token_set || (stop_token >= 0 && stop_token < m.cfg.vocab_size),
              "generate: --stop-token %d is not a token of the model%s", a.stop_token,
              a.stop_token < 0 ? " (the tokenizer has no end-of-text token: give its id)" : "");
    GenRun g = {.m = &m, .tok = tok, .a = &a, .stop_token = stop_token, .rows = GDP_MIN(a.batch, ps_in.n)};
    const SampleParams sp = {a.temperature, a.top_k, a.top_p, a.rep_penalty};
    decode_batch_init(&g.dec, &m, g.rows);
    sampler_init(&g.smp, g.rows, tok->vocab, cfg_out_dim(&m.cfg), &sp, a.seed);
    GenTotals tot = {0};
    for (int i = 0; i < ps_in.n; i += g.rows) generate_group(&g, &ps_in, i, GDP_MIN(g.rows, ps_in.n - i), &tot);
    decode_batch_free(&g.dec);
    sampler_free(&g.smp);
    const double dt = tot.prefill_s + tot.decode_s;
    fflush(stdout); /* the sample ends before the stats line when both streams go to one file */
    fprintf(stderr,
            "generated %lld tokens after a %lld-token prompt in %.2f s (%.1f tokens/s, %s); prefill %.3f s (%.0f "
            "tokens/s), decode %.3f s (%.1f tokens/s)\n",
            (long long)tot.made, (long long)tot.prompt_tokens, dt, dt > 0 ? tot.made / dt : 0.0, device_name(dev),
            tot.prefill_s, tot.prefill_s > 0 ? tot.prompt_tokens / tot.prefill_s : 0.0, tot.decode_s,
            tot.decode_s > 0 ? tot.made / tot.decode_s : 0.0);
    for (int i = 0; i < ps_in.n; i++) free(ps_in.text[i]);
    free(ps_in.text), free(ps_in.len), free(ckpt);
    tokenizer_free(tok);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
    return 0;
}
