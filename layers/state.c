#include "layers/state.h"

#include "base/common.h"

/* Floats of each part of one layer's state, padded to 64 floats (256 bytes) like the arenas. */
static size_t pad64(int64_t n) { return ((size_t)n + 63) & ~(size_t)63; }

static void layer_shapes(const ModelConfig *c, int64_t B, int64_t shapes[4][4]) {
    const int64_t kd = cfg_key_dim(c), vd = cfg_value_dim(c), s = cfg_slots(c);
    const int64_t P = c->use_short_conv && c->conv_size > 1 ? c->conv_size - 1 : 0;
    const int64_t conv[3] = {kd, s * kd, s * vd};
    for (int i = 0; i < 3; i++) shapes[i][0] = B, shapes[i][1] = P, shapes[i][2] = conv[i], shapes[i][3] = 0;
    shapes[3][0] = B, shapes[3][1] = c->num_heads, shapes[3][2] = c->head_dim, shapes[3][3] = cfg_head_v_dim(c);
}

void model_state_init(ModelState *s, const Model *m, int64_t B) {
    GDP_CHECK(B >= 1, "model state: batch %lld must be at least 1", (long long)B);
    memset(s, 0, sizeof *s);
    s->m = m, s->B = B;
    const ModelConfig *c = &m->cfg;
    const int L = c->num_hidden_layers;
    const Device dev = m->ctx->device;
    int64_t shapes[4][4];
    layer_shapes(c, B, shapes);
    size_t per_layer = 0;
    for (int j = 0; j < 4; j++) per_layer += pad64(shapes[j][0] * shapes[j][1] * shapes[j][2] * (j == 3 ? shapes[j][3] : 1));
    s->bytes = per_layer * (size_t)L * sizeof(float);
    s->mem = device_malloc(dev, s->bytes);
    s->layers = (GdpLayerState *)xcalloc((size_t)L, sizeof(GdpLayerState));
    static const char *names[4] = {"conv_q", "conv_k", "conv_v", "S"};
    float *p = (float *)s->mem;
    for (int i = 0; i < L; i++) {
        Tensor *t[4] = {&s->layers[i].conv_q, &s->layers[i].conv_k, &s->layers[i].conv_v, &s->layers[i].S};
        for (int j = 0; j < 4; j++) {
            t[j]->dtype = GDP_F32, t[j]->device = dev;
            tensor_set_shape(t[j], j == 3 ? 4 : 3, shapes[j]);
            t[j]->data = p;
            snprintf(t[j]->name, sizeof t[j]->name, "state.layers.%d.%s", i, names[j]);
            p += pad64(t[j]->numel);
        }
    }
    model_state_reset(s);
}

void model_state_reset(ModelState *s) {
    device_memset(s->m->ctx->device, s->mem, 0, s->bytes);
    s->pos = 0;
}

void model_state_free(ModelState *s) {
    if (!s->m) return;
    if (s->mem) device_free(s->m->ctx->device, s->mem);
    free(s->layers);
    memset(s, 0, sizeof *s);
}

void model_state_copy(ModelState *dst, const ModelState *src) {
    GDP_CHECK(dst->bytes == src->bytes && dst->B == src->B,
              "model state: copying a state of %zu bytes (batch %lld) into one of %zu bytes (batch %lld)", src->bytes,
              (long long)src->B, dst->bytes, (long long)dst->B);
    device_memcpy(dst->mem, dst->m->ctx->device, src->mem, src->m->ctx->device, src->bytes);
    dst->pos = src->pos;
}

/* The four tensors of layer i, in a fixed order. */
static Tensor *layer_tensor(const ModelState *s, int i, int j) {
    GdpLayerState *l = &s->layers[i];
    return j == 0 ? &l->conv_q : j == 1 ? &l->conv_k : j == 2 ? &l->conv_v : &l->S;
}

void model_state_rows(ModelState *view, const ModelState *s, int64_t row, int64_t n) {
    GDP_CHECK(row >= 0 && n >= 1 && row + n <= s->B, "model state: rows [%lld, %lld) are outside the batch of %lld",
              (long long)row, (long long)(row + n), (long long)s->B);
    const int L = s->m->cfg.num_hidden_layers;
    memset(view, 0, sizeof *view);
    view->m = s->m, view->B = n, view->pos = s->pos;
    view->layers = (GdpLayerState *)xcalloc((size_t)L, sizeof(GdpLayerState));
    for (int i = 0; i < L; i++)
        for (int j = 0; j < 4; j++) {
            const Tensor *t = layer_tensor(s, i, j);
            Tensor *v = layer_tensor(view, i, j);
            *v = *t;
            int64_t shape[4];
            memcpy(shape, t->shape, sizeof shape);
            shape[0] = n;
            tensor_set_shape(v, t->ndim, shape);
            v->data = (float *)t->data + row * (t->numel / s->B);
        }
}

void model_state_copy_rows(ModelState *dst, int64_t dst_row, const ModelState *src, int64_t src_row, int64_t n) {
    GDP_CHECK(dst->m->cfg.num_hidden_layers == src->m->cfg.num_hidden_layers && n >= 0 && dst_row >= 0 &&
                  src_row >= 0 && dst_row + n <= dst->B && src_row + n <= src->B,
              "model state: cannot copy rows [%lld, %lld) of a batch of %lld to rows from %lld of a batch of %lld",
              (long long)src_row, (long long)(src_row + n), (long long)src->B, (long long)dst_row, (long long)dst->B);
    const Device dd = dst->m->ctx->device, sd = src->m->ctx->device;
    for (int i = 0; i < src->m->cfg.num_hidden_layers; i++)
        for (int j = 0; j < 4; j++) {
            const Tensor *s = layer_tensor(src, i, j);
            Tensor *d = layer_tensor(dst, i, j);
            const int64_t row = s->numel / src->B;
            GDP_CHECK(d->numel / dst->B == row, "model state: %s rows of %lld floats into rows of %lld", s->name,
                      (long long)row, (long long)(d->numel / dst->B));
            if (row * n == 0) continue;
            device_memcpy((float *)d->data + dst_row * row, dd, (const float *)s->data + src_row * row, sd,
                          (size_t)(row * n) * sizeof(float));
        }
}

Tensor *model_forward_state(Model *m, Tensor *ids, ModelState *s) {
    char d[TENSOR_DESC_LEN];
    GDP_CHECK(s->m == m, "model_forward_state: the state was made for another model");
    GDP_CHECK(!m->ctx->grad_enabled, "model_forward_state: inference only: turn recording off (ctx->grad_enabled)");
    GDP_CHECK(ids->ndim == 2 && ids->shape[0] == s->B,
              "model_forward_state: ids %s must be [B, T] with B = %lld, the state's batch",
              tensor_describe(ids, d, sizeof d), (long long)s->B);
    const bool rc = m->recompute, sel = m->selective_recompute;
    m->recompute = m->selective_recompute = false; /* nothing to save for a backward */
    for (int i = 0; i < m->cfg.num_hidden_layers; i++) m->blocks[i].state = &s->layers[i];
    Tensor *logits = model_forward(m, ids);
    for (int i = 0; i < m->cfg.num_hidden_layers; i++) m->blocks[i].state = NULL;
    m->recompute = rc, m->selective_recompute = sel;
    s->pos += ids->shape[1];
    return logits;
}

/* model_prefill_host, with the last position's logits copied to host `last` (may be NULL) or, with
 * last_dev, left where the forward wrote them (float32 only). */
static void prefill(Model *m, ModelState *s, const int32_t *ids, int64_t T, int64_t chunk, float *last,
                    float **last_dev) {
    Ctx *ctx = m->ctx;
    const int64_t B = s->B, out = cfg_out_dim(&m->cfg);
    GDP_CHECK(T >= 1, "prefill: no tokens");
    if (chunk <= 0 || chunk > T) chunk = T;
    const bool grad = ctx->grad_enabled;
    ctx->grad_enabled = false;
    int32_t *part = (int32_t *)xmalloc((size_t)(B * chunk) * sizeof(int32_t));
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        const int64_t n = T - t0 < chunk ? T - t0 : chunk;
        for (int64_t b = 0; b < B; b++) memcpy(part + b * n, ids + b * T + t0, (size_t)n * sizeof(int32_t));
        const size_t acts = arena_mark(&ctx->acts), scratch = arena_mark(&ctx->scratch);
        const size_t meta = arena_mark(&ctx->step_meta);
        Tensor *ti = tensor_from_host(ctx, LIFE_ACT, GDP_I32, SHAPE(B, n), part);
        Tensor *logits = model_forward_state(m, ti, s); /* [B, n, out] */
        if ((last || last_dev) && t0 + n == T) {
            const int64_t rows[3] = {n * out, out, 1};
            Tensor *lv = tensor_view(ctx, logits, SHAPE(B, 1, out), rows, (n - 1) * out);
            Tensor *lc = op_contiguous(ctx, lv);
            if (last_dev) {
                GDP_CHECK(lc->dtype == GDP_F32, "prefill: the logits are %s; leaving them on the device needs "
                          "float32 (a model of float32 parameters)", dtype_name(lc->dtype));
                *last_dev = (float *)lc->data;
            } else if (lc->dtype == GDP_F32) {
                tensor_to_host(lc, last);
            } else {
                double *tmp = (double *)xmalloc((size_t)(B * out) * sizeof(double));
                tensor_to_doubles(lc, tmp);
                for (int64_t i = 0; i < B * out; i++) last[i] = (float)tmp[i];
                free(tmp);
            }
        }
        arena_rewind(&ctx->acts, acts), arena_rewind(&ctx->scratch, scratch);
        arena_rewind(&ctx->step_meta, meta);
    }
    free(part);
    ctx->grad_enabled = grad;
}

void model_prefill_host(Model *m, ModelState *s, const int32_t *ids, int64_t T, int64_t chunk, float *last) {
    prefill(m, s, ids, T, chunk, last, NULL);
}

float *model_prefill_device(Model *m, ModelState *s, const int32_t *ids, int64_t T, int64_t chunk) {
    float *last = NULL;
    prefill(m, s, ids, T, chunk, NULL, &last);
    return last;
}
