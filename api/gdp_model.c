/* The model-level C API (api/gdp_model.h) over the library: the checkpoint loader of train/load.c,
 * the tokenizers of data/, the batched decoder of layers/decode.h (the same code on the CPU and on
 * CUDA) and the sampler of layers/sampler.h. Every argument and file is checked here first, so that a
 * mistake of the caller comes back as an error instead of ending the process in the layers below. */
#include "api/gdp_model.h"

#include <math.h>
#include <stdarg.h>
#include <sys/stat.h>

#include "base/common.h"
#include "base/device.h"
#include "core/params.h"
#include "data/tokenizer.h"
#include "layers/decode.h"
#include "layers/model.h"
#include "layers/sampler.h"
#include "layers/state.h"
#include "train/checkpoint.h"
#include "train/train.h"

struct GdpModel {
    Model m;
    ParamStore ps;
    Ctx *ctx;
    Tokenizer *tok;
};

/* A prefill or step samples each live sequence where its logits are (decode_batch_*_pick: on CUDA only
 * the ids come back) for the gdp_batch_sample that follows, which returns those tokens; a later
 * sample from the same logits draws again, on the host. A step that finds its predecessor's tokens
 * not taken gives their draws back first, so that a generator draws for the samples returned alone,
 * as when sampling waited for gdp_batch_sample. */
struct GdpBatch {
    GdpModel *model;
    int n;
    int64_t V;         /* logits per sequence */
    int64_t *pos;      /* [n]: the tokens each sequence consumed */
    Sampler smp;       /* each sequence's generator and seen tokens */
    DecodeBatch dec;   /* the states, on the model's device; dec.ended[i]: sequence i has ended */
    int32_t *picked;   /* [n]: the tokens the last prefill or step sampled */
    Rng *rng_before;   /* [n]: the generators before they drew picked */
    bool picked_taken; /* gdp_batch_sample has returned picked */
};

static _Thread_local char last_error[2048];

__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return -1;
}

const char *gdp_model_last_error(void) { return last_error; }

GdpSampling gdp_sampling_default(void) { return (GdpSampling){0.8, 0, 1.0, 1.0, 1}; }

/* ---- the model ----------------------------------------------------------------------------------- */

/* The checkpoint file path names (malloc'd), or NULL after fail(). */
static char *resolve_checkpoint(const char *path) {
    struct stat st;
    char why[2048];
    if (!path || stat(path, &st) != 0)
        return fail("gdp_model_load: checkpoint '%s': no such file or folder", path ? path : "(null)"), NULL;
    char *file = NULL;
    if (S_ISDIR(st.st_mode)) {
        file = checkpoint_find_resume(path, why, sizeof why);
        if (!file)
            return fail("gdp_model_load: folder '%s' holds no valid checkpoint (ckpt_NNNNNNNN.h5)%s%s: give a "
                        "checkpoint file or the --out folder of a gdp train run that saved one",
                        path, why[0] ? ": " : "", why), NULL;
    } else {
        file = (char *)xmalloc(strlen(path) + 1);
        strcpy(file, path);
    }
    if (!checkpoint_readable(file, why, sizeof why)) {
        fail("gdp_model_load: '%s' is not a usable gdp.c checkpoint: %s", file, why);
        free(file);
        return NULL;
    }
    return file;
}

int gdp_model_load(const char *checkpoint, const char *device, const char *tokenizer, GdpModel **out) {
    if (!out) return fail("gdp_model_load: out is NULL (pass the address of a GdpModel pointer)");
    *out = NULL;
    if (!device) device = "cpu";
    Device dev;
    if (!strcmp(device, "cpu")) {
        dev = DEV_CPU;
    } else if (!strcmp(device, "cuda") || !strcmp(device, "auto")) {
        const bool have = gdp_built_with_cuda() && gdp_cuda_available();
        if (!have && !strcmp(device, "cuda"))
            return fail("gdp_model_load: device cuda: %s; use cpu",
                        gdp_built_with_cuda() ? "no CUDA GPU is visible" : "this library was built without CUDA");
        dev = have ? DEV_CUDA : DEV_CPU;
    } else {
        return fail("gdp_model_load: device '%s' is not cpu, cuda or auto", device);
    }
    char *file = resolve_checkpoint(checkpoint);
    if (!file) return -1;

    /* The config and the tokenizer before the model, so that their errors have nothing to undo. */
    char err[1024];
    char *text = checkpoint_read_config(file);
    ModelConfig cfg = model_config_default();
    const bool cfg_ok = model_config_load_text(&cfg, text, file, err, sizeof err) &&
                        model_config_validate(&cfg, err, sizeof err);
    free(text);
    if (!cfg_ok) {
        fail("gdp_model_load: checkpoint '%s' has an unusable model config: %s", file, err);
        free(file);
        return -1;
    }
    if (cfg.num_labels > 0) {
        fail("gdp_model_load: '%s' is a classification model (num_labels %d): it has no next-token head", file,
             cfg.num_labels);
        free(file);
        return -1;
    }
    const char *tok_path = tokenizer ? tokenizer : cfg.tokenizer[0] ? cfg.tokenizer : NULL;
    Tokenizer *tok = NULL;
    if (tok_path) {
        if (!tokenizer_load_err(tok_path, &tok, err, sizeof err)) {
            fail("gdp_model_load: %s (give the right file as the tokenizer argument)", err);
            free(file);
            return -1;
        }
    } else if (cfg.vocab_size <= 256) {
        tok = tokenizer_byte();
    } else {
        fail("gdp_model_load: '%s' records no tokenizer and its vocabulary (%d) is not bytes: give a tokenizer file",
             file, cfg.vocab_size);
        free(file);
        return -1;
    }
    const char *problem = !tokenizer_can_encode(tok) ? "can only decode (llm.c's files hold no merges)"
                          : tok->vocab > cfg.vocab_size ? "has more tokens than the model"
                                                        : NULL;
    if (problem) {
        fail("gdp_model_load: tokenizer '%s' (%d tokens) %s (model: %d tokens)", tok_path ? tok_path : "bytes",
             tok->vocab, problem, cfg.vocab_size);
        tokenizer_free(tok);
        free(file);
        return -1;
    }

    GdpModel *gm = (GdpModel *)xcalloc(1, sizeof *gm);
    gm->tok = tok;
    /* Arenas for gdp generate's prefill chunk; the state path keeps the conv windows too, hence twice
     * the tokens. A step runs its rows in groups that fit the same plan (decode_group_rows). */
    gm->ctx = train_load_model(file, dev, 1, 2 * DECODE_PREFILL_CHUNK, &gm->m, &gm->ps);
    free(file);
    *out = gm;
    return 0;
}

void gdp_model_free(GdpModel *m) {
    if (!m) return;
    tokenizer_free(m->tok);
    model_free(&m->m);
    params_free_store(&m->ps);
    ctx_destroy(m->ctx);
    free(m);
}

int gdp_model_vocab_size(const GdpModel *m) { return m ? cfg_out_dim(&m->m.cfg) : -1; }
int gdp_model_eot(const GdpModel *m) { return m ? m->tok->eot : -1; }
const char *gdp_model_device(const GdpModel *m) { return m ? device_name(m->ctx->device) : NULL; }

int64_t gdp_model_encode(const GdpModel *m, const char *text, size_t len, int32_t *ids, int64_t cap) {
    if (!m || (!text && len) || cap < 0 || (cap > 0 && !ids))
        return fail("gdp_model_encode: needs a model, text of len bytes and room for cap ids (cap 0: count only)");
    /* tokenizer_encode needs room for len + 1 tokens plus one per special token in the text (each at
     * least one byte): 2 len + 1 covers every case. */
    uint32_t *buf = (uint32_t *)xmalloc((2 * len + 1) * sizeof(uint32_t));
    const int64_t n = len ? tokenizer_encode(m->tok, (const uint8_t *)text, len, buf) : 0;
    for (int64_t i = 0; i < n && i < cap; i++) ids[i] = (int32_t)buf[i];
    free(buf);
    return n;
}

const char *gdp_model_token_bytes(const GdpModel *m, int32_t id, size_t *len) {
    if (!m || !len || id < 0 || id >= m->tok->vocab) {
        fail("gdp_model_token_bytes: %d is not a token of the tokenizer (0 to %d)", id, m ? m->tok->vocab - 1 : -1);
        return NULL;
    }
    return (const char *)tokenizer_token_bytes(m->tok, (uint32_t)id, len);
}

/* ---- batches ------------------------------------------------------------------------------------- */

int gdp_batch_new(GdpModel *m, int n, const GdpSampling *s, GdpBatch **out) {
    if (!out) return fail("gdp_batch_new: out is NULL (pass the address of a GdpBatch pointer)");
    *out = NULL;
    if (!m) return fail("gdp_batch_new: no model");
    if (n < 1) return fail("gdp_batch_new: a batch of %d sequences: give at least 1", n);
    const GdpSampling sp = s ? *s : gdp_sampling_default();
    if (!(sp.top_p >= 0 && sp.top_p <= 1) || !(sp.repetition_penalty > 0) || sp.top_k < 0 ||
        isnan(sp.temperature))
        return fail("gdp_batch_new: sampling needs top_p in [0, 1], repetition_penalty > 0 (1: off), top_k >= 0 and "
                    "a temperature that is a number (got %g, %g, %d, %g)",
                    sp.top_p, sp.repetition_penalty, sp.top_k, sp.temperature);
    GdpBatch *b = (GdpBatch *)xcalloc(1, sizeof *b);
    b->model = m, b->n = n;
    b->V = cfg_out_dim(&m->m.cfg);
    b->pos = (int64_t *)xcalloc((size_t)n, sizeof(int64_t));
    const SampleParams p = {sp.temperature, sp.top_k, sp.top_p, sp.repetition_penalty};
    sampler_init(&b->smp, n, m->tok->vocab, b->V, &p, sp.seed);
    decode_batch_init(&b->dec, &m->m, n);
    b->dec.keep_logits = true; /* for gdp_batch_logits */
    b->picked = (int32_t *)xmalloc((size_t)n * sizeof(int32_t));
    b->rng_before = (Rng *)xmalloc((size_t)n * sizeof(Rng));
    b->picked_taken = true; /* before a prefill a sample finds every sequence ended */
    *out = b;
    return 0;
}

void gdp_batch_free(GdpBatch *b) {
    if (!b) return;
    decode_batch_free(&b->dec);
    sampler_free(&b->smp);
    free(b->pos), free(b->picked), free(b->rng_before);
    free(b);
}

int gdp_batch_prefill(GdpBatch *b, const int32_t *ids, const int64_t *lens) {
    if (!b || !ids || !lens) return fail("gdp_batch_prefill: needs a batch, the prompts' tokens and their lengths");
    const int64_t V = b->V;
    int64_t off = 0;
    for (int i = 0; i < b->n; i++) {
        if (lens[i] < 1) return fail("gdp_batch_prefill: prompt %d has %lld tokens: each needs at least 1", i,
                                     (long long)lens[i]);
        for (int64_t t = 0; t < lens[i]; t++)
            if (ids[off + t] < 0 || ids[off + t] >= V)
                return fail("gdp_batch_prefill: token %d of prompt %d (position %lld) is outside the vocabulary "
                            "[0, %lld)", ids[off + t], i, (long long)t, (long long)V);
        off += lens[i];
    }
    off = 0;
    for (int i = 0; i < b->n; i++) {
        sampler_start(&b->smp, i, ids + off, lens[i]);
        b->pos[i] = lens[i];
        off += lens[i];
    }
    memcpy(b->rng_before, b->smp.rng, (size_t)b->n * sizeof(Rng));
    decode_batch_prefill_pick(&b->dec, ids, lens, &b->smp, b->picked);
    b->picked_taken = false;
    return 0;
}

int gdp_batch_sample(GdpBatch *b, int32_t *next) {
    if (!b || !next) return fail("gdp_batch_sample: needs a batch and room for one token per sequence");
    if (!b->picked_taken) {
        memcpy(next, b->picked, (size_t)b->n * sizeof(int32_t));
        b->picked_taken = true;
        return 0;
    }
    for (int i = 0; i < b->n; i++)
        if (!b->dec.ended[i]) decode_batch_logits(&b->dec, i); /* on CUDA: to the host */
    sampler_pick(&b->smp, b->dec.logits, b->dec.ended, next);
    return 0;
}

int gdp_batch_step(GdpBatch *b, const int32_t *tokens) {
    if (!b || !tokens) return fail("gdp_batch_step: needs a batch and one token per sequence");
    for (int i = 0; i < b->n; i++)
        if (!b->dec.ended[i] && tokens[i] >= b->V)
            return fail("gdp_batch_step: token %d of sequence %d is outside the vocabulary [0, %lld) (< 0 ends it)",
                        tokens[i], i, (long long)b->V);
    if (!b->picked_taken) memcpy(b->smp.rng, b->rng_before, (size_t)b->n * sizeof(Rng));
    for (int i = 0; i < b->n; i++)
        if (!b->dec.ended[i] && tokens[i] >= 0) sampler_observe(&b->smp, i, tokens[i]), b->pos[i]++;
    memcpy(b->rng_before, b->smp.rng, (size_t)b->n * sizeof(Rng));
    const int live = decode_batch_step_pick(&b->dec, tokens, &b->smp, b->picked);
    b->picked_taken = false;
    return live;
}

const float *gdp_batch_logits(const GdpBatch *b, int i) {
    if (!b || i < 0 || i >= b->n) return NULL;
    return decode_batch_logits(&b->dec, i);
}

int64_t gdp_batch_position(const GdpBatch *b, int i) {
    if (!b || i < 0 || i >= b->n) return -1;
    return b->pos[i];
}
