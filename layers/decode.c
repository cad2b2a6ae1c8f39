/* Per-token decoding: the same math as model_forward, written out for one position with cached
 * conv inputs and the recurrent state carried through the op's CPU recurrence (T = 1). A model on
 * CUDA goes to the GPU backend (layers/decode_cuda.c) instead. */
#include "layers/decode.h"

#include <math.h>

#include "base/common.h"
#include "kernels/gdp/gdp.h"
#include "layers/decode_cuda.h"

static const float *host_f32(const Tensor *t) {
    GDP_CHECK(t->device == DEV_CPU && t->dtype == GDP_F32 && t->data,
              "decode: parameter '%s' must be float32 on the cpu (load the checkpoint with --device cpu)", t->name);
    return (const float *)t->data;
}

/* y[out] = W[out, in] x[in] */
static void matvec(const Tensor *w, const float *x, float *y) {
    const float *W = host_f32(w);
    const int64_t out = w->shape[0], in = w->shape[1];
#pragma omp parallel for schedule(static) if (out * in > (1 << 16))
    for (int64_t o = 0; o < out; o++) {
        const float *row = W + o * in;
        double acc = 0;
        for (int64_t i = 0; i < in; i++) acc += (double)row[i] * x[i];
        y[o] = (float)acc;
    }
}

static void rmsnorm(const float *x, const float *w, int64_t n, double eps, float *y) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = (float)(x[i] * r * (w ? w[i] : 1.0f));
}

static float silu(float x) { return x / (1.0f + expf(-x)); }
static double softplus(double x) { return x > 20 ? x : log1p(exp(x)); }

/* Depthwise causal conv over the cached inputs and x, then SiLU (plain SiLU without a conv). */
static void conv_silu_step(const Tensor *w, float *cache, int64_t C, int W, float *x) {
    if (!w) {
        for (int64_t c = 0; c < C; c++) x[c] = silu(x[c]);
        return;
    }
    const float *wt = host_f32(w); /* [C, 1, W] */
    for (int64_t c = 0; c < C; c++) {
        double acc = (double)wt[c * W + W - 1] * x[c];
        for (int i = 0; i < W - 1; i++) acc += (double)wt[c * W + i] * cache[(int64_t)i * C + c];
        /* shift the window: drop the oldest, append x */
        for (int i = 0; i + 1 < W - 1; i++) cache[(int64_t)i * C + c] = cache[(int64_t)(i + 1) * C + c];
        if (W > 1) cache[(int64_t)(W - 2) * C + c] = x[c];
        x[c] = silu((float)acc);
    }
}

static void l2norm_groups(float *x, int64_t n, int64_t group) {
    for (int64_t g0 = 0; g0 < n; g0 += group) {
        double ss = 0;
        for (int64_t i = 0; i < group; i++) ss += (double)x[g0 + i] * x[g0 + i];
        double r = 1.0 / sqrt(ss + 1e-6);
        for (int64_t i = 0; i < group; i++) x[g0 + i] = (float)(x[g0 + i] * r);
    }
}

typedef struct Bufs {
    float *x, *h, *q, *k, *v, *beta, *a, *g, *o, *z, *y, *gate, *up;
} Bufs;

static size_t bufs_layout(const ModelConfig *c, float *base, Bufs *b) {
    const int64_t D = c->hidden_size, kd = cfg_key_dim(c), vd = cfg_value_dim(c), s = cfg_slots(c);
    const int64_t H = c->num_heads, I = cfg_intermediate(c);
    const int64_t sizes[] = {D, D, kd, s * kd, s * vd, s * H, H, H, vd, vd, D > vd ? D : vd, I, I};
    float **slots[] = {&b->x, &b->h, &b->q, &b->k, &b->v, &b->beta, &b->a, &b->g, &b->o, &b->z, &b->y, &b->gate, &b->up};
    size_t off = 0;
    for (size_t i = 0; i < GDP_ARRAY_LEN(sizes); i++) {
        if (base) *slots[i] = base + off;
        off += (size_t)sizes[i];
    }
    return off;
}

void decode_init(DecodeState *st, const Model *m) {
    memset(st, 0, sizeof *st);
    st->m = m;
    if (m->ctx->device == DEV_CUDA) {
        decode_cuda_init(st);
        return;
    }
    const ModelConfig *c = &m->cfg;
    GDP_CHECK(m->ctx->device == DEV_CPU, "decode: the model must be on the cpu or on cuda");
    const int64_t kd = cfg_key_dim(c), vd = cfg_value_dim(c), s = cfg_slots(c), W = c->conv_size;
    const int64_t state = (int64_t)c->num_heads * c->head_dim * cfg_head_v_dim(c);
    st->layers = (DecodeLayerState *)xcalloc((size_t)c->num_hidden_layers, sizeof(DecodeLayerState));
    for (int i = 0; i < c->num_hidden_layers; i++) {
        DecodeLayerState *l = &st->layers[i];
        size_t hist = (size_t)(W > 1 ? W - 1 : 0);
        l->conv_q = (float *)xcalloc(hist * (size_t)kd + 1, sizeof(float));
        l->conv_k = (float *)xcalloc(hist * (size_t)(s * kd) + 1, sizeof(float));
        l->conv_v = (float *)xcalloc(hist * (size_t)(s * vd) + 1, sizeof(float));
        l->S = (float *)xcalloc((size_t)state, sizeof(float));
        l->S_next = (float *)xcalloc((size_t)state, sizeof(float));
    }
    Bufs b;
    st->scratch_floats = bufs_layout(c, NULL, &b);
    st->scratch = (float *)xcalloc(st->scratch_floats, sizeof(float));
}

void decode_reset(DecodeState *st) {
    if (st->cuda) {
        decode_cuda_reset(st);
        return;
    }
    const ModelConfig *c = &st->m->cfg;
    const int64_t kd = cfg_key_dim(c), vd = cfg_value_dim(c), s = cfg_slots(c), W = c->conv_size;
    const int64_t state = (int64_t)c->num_heads * c->head_dim * cfg_head_v_dim(c);
    size_t hist = (size_t)(W > 1 ? W - 1 : 0);
    for (int i = 0; i < c->num_hidden_layers; i++) {
        DecodeLayerState *l = &st->layers[i];
        memset(l->conv_q, 0, hist * (size_t)kd * sizeof(float));
        memset(l->conv_k, 0, hist * (size_t)(s * kd) * sizeof(float));
        memset(l->conv_v, 0, hist * (size_t)(s * vd) * sizeof(float));
        memset(l->S, 0, (size_t)state * sizeof(float));
    }
    st->pos = 0;
}

void decode_free(DecodeState *st) {
    if (!st->m) return;
    if (st->cuda) {
        decode_cuda_free(st);
        memset(st, 0, sizeof *st);
        return;
    }
    for (int i = 0; i < st->m->cfg.num_hidden_layers; i++) {
        DecodeLayerState *l = &st->layers[i];
        free(l->conv_q), free(l->conv_k), free(l->conv_v), free(l->S), free(l->S_next);
    }
    free(st->layers);
    free(st->scratch);
    memset(st, 0, sizeof *st);
}

static void attn_step(const ModelConfig *c, const GdpLayer *L, DecodeLayerState *ls, Bufs *b) {
    const int64_t H = c->num_heads, K = c->head_dim, V = cfg_head_v_dim(c), s = cfg_slots(c);
    const int64_t kd = cfg_key_dim(c), vd = cfg_value_dim(c);
    const bool split = c->mode == GDP_MODE_SPLIT;
    matvec(L->q_proj, b->h, b->q);
    matvec(L->k_proj, b->h, b->k);
    matvec(L->v_proj, b->h, b->v);
    conv_silu_step(L->q_conv, ls->conv_q, kd, c->conv_size, b->q);
    conv_silu_step(L->k_conv, ls->conv_k, s * kd, c->conv_size, b->k);
    conv_silu_step(L->v_conv, ls->conv_v, s * vd, c->conv_size, b->v);
    int64_t group = split ? K / c->num_householder : K;
    l2norm_groups(b->q, kd, group);
    l2norm_groups(b->k, s * kd, group);
    matvec(L->b_proj, b->h, b->beta);
    for (int64_t i = 0; i < s * H; i++) {
        float sg = 1.0f / (1.0f + expf(-b->beta[i]));
        b->beta[i] = c->allow_neg_eigval ? 2.0f * sg : sg;
    }
    if (L->a_proj) {
        matvec(L->a_proj, b->h, b->a);
        const float *A_log = host_f32(L->A_log), *dt = host_f32(L->dt_bias);
        for (int64_t i = 0; i < H; i++) b->g[i] = (float)(-exp((double)A_log[i]) * softplus((double)b->a[i] + dt[i]));
    }
    GdpDesc desc = {.mode = c->mode, .B = 1, .T = 1, .H = (int)H, .K = (int)K, .V = (int)V,
                    .n = c->num_householder, .scale = 0, .dtype = GDP_F32};
    GdpForwardArgs args = {.q = b->q, .k = b->k, .v = b->v, .beta = b->beta, .g = L->a_proj ? b->g : NULL,
                           .mask = split ? host_f32(L->mask) : NULL, .h0 = ls->S, .o = b->o, .ht = ls->S_next};
    GdpStatus st = gdp_forward_cpu(&desc, &args);
    GDP_CHECK(st == GDP_OK, "decode: the GDP op failed: %s", gdp_last_error());
    float *tmp = ls->S;
    ls->S = ls->S_next, ls->S_next = tmp;
    /* o_norm per head (weight [V] shared by the heads), gated by SiLU(g_proj h) */
    const float *w = host_f32(L->o_norm);
    if (L->g_proj) matvec(L->g_proj, b->h, b->z);
    for (int64_t hh = 0; hh < H; hh++) {
        float *oh = b->o + hh * V;
        rmsnorm(oh, w, V, c->norm_eps, oh);
        if (L->g_proj)
            for (int64_t j = 0; j < V; j++) oh[j] *= silu(b->z[hh * V + j]);
    }
    matvec(L->o_proj, b->o, b->y);
}

void decode_step(DecodeState *st, int token, float *logits) {
    const Model *m = st->m;
    const ModelConfig *c = &m->cfg;
    const int64_t D = c->hidden_size, I = cfg_intermediate(c);
    GDP_CHECK(token >= 0 && token < c->vocab_size, "decode: token %d is outside the vocabulary [0, %d)", token,
              c->vocab_size);
    if (st->cuda) {
        decode_cuda_step(st, token, logits);
        st->pos++;
        return;
    }
    Bufs b;
    bufs_layout(c, st->scratch, &b);
    memcpy(b.x, host_f32(m->embeddings) + (int64_t)token * D, (size_t)D * sizeof(float));
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const Block *blk = &m->blocks[i];
        rmsnorm(b.x, host_f32(blk->attn_norm), D, c->norm_eps, b.h);
        attn_step(c, &blk->attn, &st->layers[i], &b);
        for (int64_t j = 0; j < D; j++) b.x[j] += b.y[j];
        rmsnorm(b.x, host_f32(blk->mlp_norm), D, c->norm_eps, b.h);
        matvec(blk->mlp.gate_proj, b.h, b.gate);
        matvec(blk->mlp.up_proj, b.h, b.up);
        for (int64_t j = 0; j < I; j++) b.gate[j] = silu(b.gate[j]) * b.up[j];
        matvec(blk->mlp.down_proj, b.gate, b.y);
        for (int64_t j = 0; j < D; j++) b.x[j] += b.y[j];
    }
    rmsnorm(b.x, host_f32(m->norm), D, c->norm_eps, b.h);
    matvec(m->head, b.h, logits);
    st->pos++;
}

int sample_logits(float *logits, int n, double temperature, int top_k, Rng *rng) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return best;
    float cut = -INFINITY;
    if (top_k > 0 && top_k < n) {
        /* the k-th largest value: partial selection on a copy */
        float *tmp = (float *)xmalloc((size_t)n * sizeof(float));
        memcpy(tmp, logits, (size_t)n * sizeof(float));
        for (int i = 0; i < top_k; i++) {
            int j = i;
            for (int t = i + 1; t < n; t++)
                if (tmp[t] > tmp[j]) j = t;
            float sw = tmp[i];
            tmp[i] = tmp[j], tmp[j] = sw;
        }
        cut = tmp[top_k - 1];
        free(tmp);
    }
    double mx = logits[best], sum = 0;
    for (int i = 0; i < n; i++) {
        double p = logits[i] >= cut ? exp((logits[i] - mx) / temperature) : 0;
        logits[i] = (float)p;
        sum += p;
    }
    double u = rng_uniform(rng) * sum, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += logits[i];
        if (u < acc && logits[i] > 0) return i;
    }
    return best;
}
