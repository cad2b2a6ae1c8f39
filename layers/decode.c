/* Decoding on the model's one definition: prefill and step are model_forward_state
 * (layers/state.h) on either device, a step through decode_graph_step (layers/decode_graph.h);
 * a batch of sequences steps its live rows together. Sampling is layers/sampler.c's, on the GPU
 * where a CUDA forward left the logits. */
#include "layers/decode.h"

#include <stdlib.h>

#include "base/common.h"

static void check_token(const Model *m, int64_t token) {
    GDP_CHECK(token >= 0 && token < m->cfg.vocab_size, "decode: token %lld is outside the vocabulary [0, %d)",
              (long long)token, m->cfg.vocab_size);
}

int64_t decode_group_rows(const ModelConfig *c) {
    const int64_t P = c->use_short_conv && c->conv_size > 1 ? c->conv_size - 1 : 0;
    return GDP_MAX(1, 2 * DECODE_PREFILL_CHUNK / (P + 2));
}

static bool on_cuda(const DecodeBatch *b) { return b->m->ctx->device == DEV_CUDA; }

void decode_batch_init(DecodeBatch *b, Model *m, int n) {
    GDP_CHECK(n >= 1, "decode batch: %d sequences: give at least 1", n);
    GDP_CHECK(m->ctx->device == DEV_CPU || m->ctx->device == DEV_CUDA,
              "decode: the model must be on the cpu or on cuda");
    memset(b, 0, sizeof *b);
    b->m = m, b->n = n;
    b->group = decode_group_rows(&m->cfg);
    model_state_init(&b->state, m, n);
    b->ended = (bool *)xmalloc((size_t)n * sizeof(bool));
    for (int i = 0; i < n; i++) b->ended[i] = true;
    b->seq_of_row = (int *)xcalloc((size_t)n, sizeof(int));
    b->row_tok = (int32_t *)xcalloc((size_t)n, sizeof(int32_t));
    const int64_t out = cfg_out_dim(&m->cfg);
    b->work = (float *)xmalloc((size_t)(b->group * out) * sizeof(float));
    if (!on_cuda(b)) b->logits = (float *)xmalloc((size_t)(n * out) * sizeof(float));
    decode_graph_init(&b->graph, m);
}

void decode_batch_free(DecodeBatch *b) {
    if (!b->m) return;
    decode_graph_free(&b->graph);
    model_state_free(&b->state);
    if (b->kept) device_free(DEV_CUDA, b->kept);
    free(b->ended), free(b->seq_of_row), free(b->row_tok), free(b->work), free(b->logits);
    memset(b, 0, sizeof *b);
}

/* Checks the prompts and starts every sequence over: the ones with a prompt live, in rows of their
 * order. */
static void prefill_start(DecodeBatch *b, const int32_t *ids, const int64_t *lens) {
    int64_t off = 0;
    for (int i = 0; i < b->n; i++) {
        GDP_CHECK(lens[i] >= 0, "decode batch: prompt %d has %lld tokens", i, (long long)lens[i]);
        for (int64_t t = 0; t < lens[i]; t++) check_token(b->m, ids[off + t]);
        off += lens[i];
    }
    model_state_reset(&b->state);
    b->live = 0;
    for (int i = 0; i < b->n; i++) {
        b->ended[i] = lens[i] == 0;
        if (!b->ended[i]) b->seq_of_row[b->live++] = i;
    }
}

/* One prompt alone through the chunked forward into row r (the chunked forward needs one length for
 * its rows): its last logits to host `logits`, or with logits NULL returned on the device
 * (model_prefill_device). */
static float *prefill_row(DecodeBatch *b, int r, const int32_t *prompt, int64_t len, float *logits) {
    ModelState row;
    model_state_rows(&row, &b->state, r, 1);
    float *on_device = NULL;
    if (logits) model_prefill_host(b->m, &row, prompt, len, DECODE_PREFILL_CHUNK, logits);
    else on_device = model_prefill_device(b->m, &row, prompt, len, DECODE_PREFILL_CHUNK);
    model_state_free(&row);
    return on_device;
}

void decode_batch_prefill(DecodeBatch *b, const int32_t *ids, const int64_t *lens, float *logits) {
    const int64_t out = cfg_out_dim(&b->m->cfg);
    prefill_start(b, ids, lens);
    int64_t off = 0;
    for (int i = 0, r = 0; i < b->n; off += lens[i++])
        if (lens[i]) prefill_row(b, r++, ids + off, lens[i], logits + i * out);
}

/* Ended sequences leave (decode_graph_step checks the others' tokens against the vocabulary): the
 * live rows move up, keeping their order, so that a step is one forward over rows 0..live-1. */
static void step_start(DecodeBatch *b, const int32_t *tokens) {
    int w = 0;
    for (int r = 0; r < b->live; r++) {
        const int i = b->seq_of_row[r];
        if (tokens[i] < 0) {
            b->ended[i] = true;
            continue;
        }
        if (r != w) model_state_copy_rows(&b->state, w, &b->state, r, 1);
        b->seq_of_row[w] = i;
        b->row_tok[w++] = tokens[i];
    }
    b->live = w;
}

/* Rows in the step's group from row r0: groups, so that a step never needs more activation memory
 * than the load planned. */
static int group_at(const DecodeBatch *b, int r0) { return (int)GDP_MIN((int64_t)b->live - r0, b->group); }

int decode_batch_step(DecodeBatch *b, const int32_t *tokens, float *logits) {
    const int64_t out = cfg_out_dim(&b->m->cfg);
    step_start(b, tokens);
    for (int r0 = 0; r0 < b->live; r0 += group_at(b, r0)) {
        const int nr = group_at(b, r0);
        ModelState rows;
        model_state_rows(&rows, &b->state, r0, nr);
        decode_graph_step(&b->graph, b->m, &rows, b->row_tok + r0, b->work);
        model_state_free(&rows);
        for (int r = 0; r < nr; r++)
            memcpy(logits + b->seq_of_row[r0 + r] * out, b->work + r * out, (size_t)out * sizeof(float));
    }
    return b->live;
}

/* ---- sampling where the logits are ----------------------------------------------------------------- */

static void check_sampler(const DecodeBatch *b, const Sampler *s, const char *who) {
    GDP_CHECK(s->n == b->n && s->v == cfg_out_dim(&b->m->cfg),
              "%s: the sampler has %d sequences of %lld logits, the batch %d of %lld", who, s->n, (long long)s->v,
              b->n, (long long)cfg_out_dim(&b->m->cfg));
}

/* Rows [r0, r0 + nr) of the device logits: copied aside (keep_logits), then sampled, which
 * overwrites them. */
static void sample_rows_on_device(DecodeBatch *b, Sampler *s, float *logits, int r0, int nr) {
    const int64_t out = cfg_out_dim(&b->m->cfg);
    if (b->keep_logits) {
        if (!b->kept) {
            b->kept = (float *)device_malloc(DEV_CUDA, (size_t)(b->n * out) * sizeof(float));
            b->logits = (float *)xmalloc((size_t)(b->n * out) * sizeof(float));
        }
        const size_t row = (size_t)out * sizeof(float);
        device_copy_rows(DEV_CUDA, b->kept + r0 * out, row, logits, row, row, (size_t)nr, ctx_stream(b->m->ctx));
    }
    sampler_cuda_rows(s, logits, out, r0, nr);
}

void decode_batch_prefill_pick(DecodeBatch *b, const int32_t *ids, const int64_t *lens, Sampler *s, int32_t *next) {
    check_sampler(b, s, "decode_batch_prefill_pick");
    if (!on_cuda(b)) {
        decode_batch_prefill(b, ids, lens, b->logits);
        sampler_pick(s, b->logits, b->ended, next);
        return;
    }
    prefill_start(b, ids, lens);
    sampler_cuda_begin(s, b->seq_of_row, b->live, ctx_stream(b->m->ctx));
    int64_t off = 0;
    for (int i = 0, r = 0; i < b->n; off += lens[i++]) {
        if (!lens[i]) continue;
        sample_rows_on_device(b, s, prefill_row(b, r, ids + off, lens[i], NULL), r, 1);
        r++;
    }
    sampler_cuda_end(s, next);
}

int decode_batch_step_pick(DecodeBatch *b, const int32_t *tokens, Sampler *s, int32_t *next) {
    check_sampler(b, s, "decode_batch_step_pick");
    if (!on_cuda(b)) {
        const int live = decode_batch_step(b, tokens, b->logits);
        sampler_pick(s, b->logits, b->ended, next);
        return live;
    }
    step_start(b, tokens);
    sampler_cuda_begin(s, b->seq_of_row, b->live, ctx_stream(b->m->ctx));
    for (int r0 = 0; r0 < b->live; r0 += group_at(b, r0)) {
        const int nr = group_at(b, r0);
        ModelState rows;
        model_state_rows(&rows, &b->state, r0, nr);
        float *logits = decode_graph_step_device(&b->graph, b->m, &rows, b->row_tok + r0);
        model_state_free(&rows);
        sample_rows_on_device(b, s, logits, r0, nr);
    }
    sampler_cuda_end(s, next);
    return b->live;
}

const float *decode_batch_logits(const DecodeBatch *b, int i) {
    GDP_CHECK(i >= 0 && i < b->n, "decode_batch_logits: sequence %d of %d", i, b->n);
    if (b->ended[i]) return NULL;
    const int64_t out = cfg_out_dim(&b->m->cfg);
    if (!on_cuda(b)) return b->logits + i * out;
    GDP_CHECK(b->kept, "decode_batch_logits: the batch keeps no logits on the GPU: set keep_logits before the "
              "prefill");
    int r = 0;
    while (b->seq_of_row[r] != i) r++; /* a live sequence has a row */
    device_memcpy(b->logits + i * out, DEV_CPU, b->kept + r * out, DEV_CUDA, (size_t)out * sizeof(float));
    return b->logits + i * out;
}
