/* Decoding on the model's one definition: prefill and step are model_forward_state
 * (layers/state.h) on either device, a step through decode_graph_step (layers/decode_graph.h);
 * a batch of sequences steps its live rows together. Sampling is layers/sampler.c's. */
#include "layers/decode.h"

#include <stdlib.h>

#include "base/common.h"

void decode_init(DecodeState *st, Model *m) {
    memset(st, 0, sizeof *st);
    st->m = m;
    GDP_CHECK(m->ctx->device == DEV_CPU || m->ctx->device == DEV_CUDA, "decode: the model must be on the cpu or on cuda");
    model_state_init(&st->state, m, 1);
    decode_graph_init(&st->graph, m);
}

void decode_reset(DecodeState *st) {
    model_state_reset(&st->state);
    st->pos = 0;
}

void decode_free(DecodeState *st) {
    if (!st->m) return;
    decode_graph_free(&st->graph);
    model_state_free(&st->state);
    memset(st, 0, sizeof *st);
}

static void check_token(const Model *m, int64_t token) {
    GDP_CHECK(token >= 0 && token < m->cfg.vocab_size, "decode: token %lld is outside the vocabulary [0, %d)",
              (long long)token, m->cfg.vocab_size);
}

void decode_prefill(DecodeState *st, const int32_t *tokens, int64_t n, float *logits) {
    GDP_CHECK(n >= 1, "decode_prefill: no tokens");
    for (int64_t i = 0; i < n; i++) check_token(st->m, tokens[i]);
    model_prefill_host(st->m, &st->state, tokens, n, DECODE_PREFILL_CHUNK, logits);
    st->pos += n;
}

void decode_step(DecodeState *st, int token, float *logits) {
    const int32_t t = token; /* decode_graph_step checks it against the vocabulary */
    decode_graph_step(&st->graph, st->m, &st->state, &t, logits);
    st->pos++;
}

/* ---- batches ------------------------------------------------------------------------------------ */

int64_t decode_group_rows(const ModelConfig *c) {
    const int64_t P = c->use_short_conv && c->conv_size > 1 ? c->conv_size - 1 : 0;
    return GDP_MAX(1, 2 * DECODE_PREFILL_CHUNK / (P + 2));
}

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
    b->work = (float *)xmalloc((size_t)(b->group * cfg_out_dim(&m->cfg)) * sizeof(float));
    decode_graph_init(&b->graph, m);
}

void decode_batch_free(DecodeBatch *b) {
    if (!b->m) return;
    decode_graph_free(&b->graph);
    model_state_free(&b->state);
    free(b->ended), free(b->seq_of_row), free(b->row_tok), free(b->work);
    memset(b, 0, sizeof *b);
}

void decode_batch_prefill(DecodeBatch *b, const int32_t *ids, const int64_t *lens, float *logits) {
    const int64_t out = cfg_out_dim(&b->m->cfg);
    int64_t off = 0;
    for (int i = 0; i < b->n; i++) {
        GDP_CHECK(lens[i] >= 0, "decode batch: prompt %d has %lld tokens", i, (long long)lens[i]);
        for (int64_t t = 0; t < lens[i]; t++) check_token(b->m, ids[off + t]);
        off += lens[i];
    }
    model_state_reset(&b->state);
    off = 0;
    b->live = 0;
    for (int i = 0; i < b->n; i++) {
        b->ended[i] = lens[i] == 0;
        if (b->ended[i]) continue;
        /* Each prompt alone in its row: the chunked forward needs one length for its rows. */
        ModelState row;
        model_state_rows(&row, &b->state, b->live, 1);
        model_prefill_host(b->m, &row, ids + off, lens[i], DECODE_PREFILL_CHUNK, logits + i * out);
        model_state_free(&row);
        b->seq_of_row[b->live++] = i;
        off += lens[i];
    }
}

int decode_batch_step(DecodeBatch *b, const int32_t *tokens, float *logits) {
    const int64_t out = cfg_out_dim(&b->m->cfg);
    /* Ended sequences leave (decode_graph_step checks the others' tokens against the vocabulary): the live rows move up, keeping their order, so that a step is one
     * forward over rows 0..live-1. */
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
    /* Groups of rows, so that a step never needs more activation memory than the load planned. */
    for (int r0 = 0; r0 < b->live; r0 += (int)b->group) {
        const int nr = (int)GDP_MIN((int64_t)b->live - r0, b->group);
        ModelState rows;
        model_state_rows(&rows, &b->state, r0, nr);
        decode_graph_step(&b->graph, b->m, &rows, b->row_tok + r0, b->work);
        model_state_free(&rows);
        for (int r = 0; r < nr; r++)
            memcpy(logits + b->seq_of_row[r0 + r] * out, b->work + r * out, (size_t)out * sizeof(float));
    }
    return b->live;
}
