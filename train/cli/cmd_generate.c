/* gdp generate: recurrent decoding from a checkpoint on the CPU or on CUDA, one token at a time
 * with O(1) state (layers/decode.h); text through the tokenizer the data was prepared with (its
 * path is in the checkpoint's config), or bytes. */
#include <stdio.h>
#include <string.h>

#include "base/common.h"
#include "data/tokenizer.h"
#include "layers/decode.h"
#include "layers/model.h"
#include "train/cli/cli.h"
#include "train/cli/commands.h"
#include "train/train.h"

static const CliOpt gen_opts[] = {
    {"checkpoint", 'c', "PATH", "checkpoint file, or a training folder (its latest checkpoint)"},
    {"prompt", 'p', "TEXT", "the text to continue (not empty)"},
    {"tokens", 'n', "N", "tokens to generate (default 128)"},
    {"temperature", 'T', "X", "sampling temperature (default 0.8; 0 = greedy)"},
    {"top-k", 'k', "K", "sample among the K most likely tokens only (default 0 = all)"},
    {"seed", 's', "N", "sampling seed (default 1)"},
    {"device", 'd', "DEV", "cpu (default), cuda or auto: where the model runs and decodes"},
    {"tokenizer", 0, "FILE", "tokenizer file (default: the one recorded in the checkpoint, else bytes)"},
};
static const CliCommand gen_cmd = {
    "generate",
    "gdp generate --checkpoint PATH --prompt TEXT [--tokens N --temperature X --top-k K --seed N --device DEV]",
    "Continues a prompt with a trained model: recurrent decoding (conv caches and the recurrent state carried\n"
    "per token), printing the prompt and the continuation. With --device cuda every layer of a step runs on\n"
    "the GPU (cuBLAS matvecs, the per-token GDP state-update kernel) and only the logits come back for\n"
    "sampling on the host.",
    gen_opts, (int)GDP_ARRAY_LEN(gen_opts)};

typedef struct GenArgs {
    const char *checkpoint, *prompt, *tokenizer, *device;
    int64_t tokens;
    double temperature;
    int top_k;
    uint64_t seed;
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

int cmd_generate(int argc, char **argv) {
    GenArgs a = {NULL, NULL, NULL, "cpu", 128, 0.8, 0, 1};
    char *pos[1];
    cli_parse(&gen_cmd, argc, argv, on_opt, &a, pos, 0);
    if (!a.checkpoint) cli_usage_error(&gen_cmd, "--checkpoint is required");
    if (!a.prompt || !a.prompt[0]) cli_usage_error(&gen_cmd, "--prompt is required and must not be empty");
    Device dev = device_parse(a.device, "--device");
    char *ckpt = train_resolve_checkpoint(a.checkpoint, "--checkpoint");

    Model m;
    ParamStore ps;
    Ctx *ctx = train_load_model(ckpt, dev, 1, 1, &m, &ps);
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

    size_t plen = strlen(a.prompt);
    uint32_t *ptoks = (uint32_t *)xmalloc((plen + 1) * sizeof(uint32_t));
    int64_t np = tokenizer_encode(tok, (const uint8_t *)a.prompt, plen, ptoks);

    DecodeState st;
    decode_init(&st, &m);
    int V = m.cfg.vocab_size;
    float *logits = (float *)xmalloc((size_t)V * sizeof(float));
    Rng rng;
    rng_seed(&rng, a.seed);
    print_bytes((const uint8_t *)a.prompt, plen);
    fflush(stdout);
    for (int64_t i = 0; i < np; i++) decode_step(&st, (int)ptoks[i], logits);
    double t0 = gdp_now_seconds();
    for (int64_t i = 0; i < a.tokens; i++) {
        int next = sample_logits(logits, tok->vocab, a.temperature, a.top_k, &rng);
        size_t len = 0;
        const uint8_t *b = tokenizer_token_bytes(tok, (uint32_t)next, &len);
        print_bytes(b, len);
        fflush(stdout);
        if (i + 1 < a.tokens) decode_step(&st, next, logits);
    }
    double dt = gdp_now_seconds() - t0;
    printf("\n");
    fflush(stdout); /* the sample ends before the stats line when both streams go to one file */
    fprintf(stderr, "generated %lld tokens after a %lld-token prompt in %.2f s (%.1f tokens/s, %s)\n",
            (long long)a.tokens, (long long)np, dt, dt > 0 ? a.tokens / dt : 0.0, device_name(dev));
    decode_free(&st);
    free(logits), free(ptoks), free(ckpt);
    tokenizer_free(tok);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
    return 0;
}
