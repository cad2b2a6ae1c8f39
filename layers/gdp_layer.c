/* The Gated DeltaProduct layer, step by step as docs/spec.md §3 lists it:
 *   projections -> short causal convs + SiLU -> L2 norm of q, k (per head; split: per slice)
 *   -> beta = sigmoid(b_proj x) (x2 with negative eigenvalues)
 *   -> g = -exp(A_log) * softplus(a_proj x + dt_bias)
 *   -> the GDP op -> gated RMSNorm per head -> o_proj. */
#include "layers/gdp_layer.h"

#include "base/common.h"
#include "core/ops.h"
#include "core/ops_fused.h"
#include "core/ops/gdp.h"
#include "layers/linear.h"

#define L2NORM_EPS 1e-6

static Tensor *conv_weight(ParamMaker *pm, const char *prefix, const char *what, int64_t channels, int width,
                           double std) {
    char name[GDP_NAME_LEN];
    snprintf(name, sizeof name, "%s.%s.weight", prefix, what);
    return pm_param(pm, name, SHAPE(channels, 1, width), true, INIT_NORMAL, std, 0);
}

static Tensor *proj(ParamMaker *pm, const char *prefix, const char *what, int64_t in, int64_t out, double std) {
    char name[GDP_NAME_LEN];
    snprintf(name, sizeof name, "%s.%s.weight", prefix, what);
    return linear_new(pm, name, in, out, std);
}

void gdp_layer_new(GdpLayer *l, ParamMaker *pm, const ModelConfig *c, const char *prefix) {
    memset(l, 0, sizeof *l);
    const int64_t D = c->hidden_size, H = c->num_heads, kd = cfg_key_dim(c), vd = cfg_value_dim(c);
    const int64_t s = cfg_slots(c);
    const double std = c->initializer_range;
    char name[GDP_NAME_LEN];
    /* Registration order = fla's module order, so the flat layout reads like its state dict. */
    l->q_proj = proj(pm, prefix, "q_proj", D, kd, std);
    l->k_proj = proj(pm, prefix, "k_proj", D, s * kd, std);
    l->v_proj = proj(pm, prefix, "v_proj", D, s * vd, std);
    l->b_proj = proj(pm, prefix, "b_proj", D, s * H, std);
    if (c->use_forget_gate) {
        l->a_proj = proj(pm, prefix, "a_proj", D, H, std);
        snprintf(name, sizeof name, "%s.A_log", prefix);
        l->A_log = pm_param_custom(pm, name, SHAPE(H), false, init_a_log, NULL);
        snprintf(name, sizeof name, "%s.dt_bias", prefix);
        l->dt_bias = pm_param_custom(pm, name, SHAPE(H), false, init_dt_bias, NULL);
    }
    if (c->use_short_conv) {
        l->q_conv = conv_weight(pm, prefix, "q_conv1d", kd, c->conv_size, std);
        l->k_conv = conv_weight(pm, prefix, "k_conv1d", s * kd, c->conv_size, std);
        l->v_conv = conv_weight(pm, prefix, "v_conv1d", s * vd, c->conv_size, std);
    }
    if (c->mode == GDP_MODE_SPLIT) {
        static const int r_values[17] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
        snprintf(name, sizeof name, "%s.mask", prefix);
        int r = c->num_householder;
        if (c->split_mask_trainable) {
            l->mask = pm_param_custom(pm, name, SHAPE(H, r, r), false, init_identity_mask, &r_values[r]);
        } else {
            /* A frozen identity: a constant on the context, no parameter, no gradient. */
            double *eye = (double *)xcalloc((size_t)(H * r * r), sizeof(double));
            for (int64_t i = 0; i < H * r * r; i++) eye[i] = (i % (r * r)) / r == (i % (r * r)) % r ? 1.0 : 0.0;
            l->mask = tensor_from_doubles(pm->ctx, LIFE_PERSIST, pm->dtype, SHAPE(H, r, r), eye);
            free(eye);
            snprintf(l->mask->name, sizeof l->mask->name, "%.60s (frozen)", name);
        }
    }
    if (c->use_output_gate) l->g_proj = proj(pm, prefix, "g_proj", D, vd, std);
    snprintf(name, sizeof name, "%s.o_norm.weight", prefix);
    l->o_norm = pm_param(pm, name, SHAPE(cfg_head_v_dim(c)), false, INIT_ONES, 0, 0);
    l->o_proj = proj(pm, prefix, "o_proj", vd, D, std);
    const int64_t norm_group = c->mode == GDP_MODE_SPLIT ? c->head_dim / c->num_householder : c->head_dim;
    l->q_seg = (struct ConvNorm){l->q_conv, norm_group};
    l->k_seg = (struct ConvNorm){l->k_conv, norm_group};
}

/* Short causal conv (depthwise, no bias) + SiLU; plain SiLU without short convs (as fla). */
static Tensor *conv_silu(Ctx *ctx, Tensor *x, Tensor *w) {
    if (!w) return op_silu(ctx, x);
    Tensor *w2 = op_reshape(ctx, param_like(ctx, w, x), SHAPE(w->shape[0], w->shape[2]));
    return op_conv1d_causal_silu(ctx, x, w2);
}

/* conv_silu continuing from the last W-1 inputs in `tail` [B, W-1, C] (NULL: zeros before x), which
 * becomes the last W-1 rows of [tail, x]. The conv runs over [tail, x] and its first W-1 outputs are
 * dropped, so the op needs no initial-state argument; not taped (inference only). */
static Tensor *conv_silu_state(Ctx *ctx, Tensor *x, Tensor *w, Tensor *tail) {
    if (!w || !tail || tail->numel == 0) return conv_silu(ctx, x, w);
    const int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], P = tail->shape[1];
    char dx[TENSOR_DESC_LEN], dt[TENSOR_DESC_LEN];
    GDP_CHECK(tail->ndim == 3 && tail->shape[0] == B && tail->shape[2] == C && tail->dtype == x->dtype &&
                  tensor_is_contiguous(tail) &&
                  tensor_is_contiguous(x),
              "gdp layer: conv state %s does not fit the input %s (the state was made for another batch or dtype)",
              tensor_describe(tail, dt, sizeof dt), tensor_describe(x, dx, sizeof dx));
    Tensor *ext = tensor_new(ctx, LIFE_ACT, x->dtype, SHAPE(B, P + T, C));
    const size_t es = dtype_size(x->dtype), ext_pitch = (size_t)((P + T) * C) * es;
    device_copy_rows(ctx->device, ext->data, ext_pitch, tail->data, (size_t)(P * C) * es, (size_t)(P * C) * es,
                     (size_t)B, ctx_stream(ctx));
    device_copy_rows(ctx->device, (char *)ext->data + (size_t)(P * C) * es, ext_pitch, x->data, (size_t)(T * C) * es,
                     (size_t)(T * C) * es, (size_t)B, ctx_stream(ctx));
    const int64_t rows[3] = {(P + T) * C, C, 1};
    op_copy_or_accumulate(ctx, tail, tensor_view(ctx, ext, SHAPE(B, P, C), rows, T * C), false);
    Tensor *y = conv_silu(ctx, ext, w);
    return op_contiguous(ctx, tensor_view(ctx, y, SHAPE(B, T, C), rows, P * C));
}

static Tensor *conv_norm(Ctx *ctx, const void *user, Tensor *x) {
    const struct ConvNorm *seg = (const struct ConvNorm *)user;
    return op_l2norm(ctx, conv_silu(ctx, x, seg->conv), seg->group, L2NORM_EPS);
}

/* conv_silu over packed documents: no window reaches back past a document start. */
static Tensor *conv_silu_docs(Ctx *ctx, Tensor *x, Tensor *w, const Tensor *doc_start) {
    if (!w) return op_silu(ctx, x);
    Tensor *w2 = op_reshape(ctx, param_like(ctx, w, x), SHAPE(w->shape[0], w->shape[2]));
    return op_conv1d_causal_silu_docs(ctx, x, w2, doc_start);
}

/* conv_norm's argument over documents; in step memory, so a recomputing backward still finds it. */
struct ConvNormDocs {
    struct ConvNorm seg;
    const Tensor *doc_start;
};

static Tensor *conv_norm_docs(Ctx *ctx, const void *user, Tensor *x) {
    const struct ConvNormDocs *d = (const struct ConvNormDocs *)user;
    return op_l2norm(ctx, conv_silu_docs(ctx, x, d->seg.conv, d->doc_start), d->seg.group, L2NORM_EPS);
}

static const struct ConvNormDocs *conv_norm_docs_arg(Ctx *ctx, const struct ConvNorm *seg, const GdpDocs *docs) {
    struct ConvNormDocs *d = (struct ConvNormDocs *)arena_alloc(&ctx->step_meta, sizeof *d);
    d->seg = *seg, d->doc_start = docs->doc_start;
    return d;
}

/* [B, T, ...] -> [1, B*T, ...]: the rows end to end, as the op takes packed sequences. */
static Tensor *pack_rows(Ctx *ctx, Tensor *t) {
    int64_t shape[GDP_MAX_DIMS];
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    shape[1] *= shape[0], shape[0] = 1;
    return op_reshape(ctx, t, t->ndim, shape);
}

static Tensor *layer_forward(Ctx *ctx, const GdpLayer *l, const ModelConfig *c, Tensor *x, bool recompute,
                             GdpLayerState *st, const GdpDocs *docs);

Tensor *gdp_layer_forward(Ctx *ctx, const GdpLayer *l, const ModelConfig *c, Tensor *x, bool recompute) {
    return gdp_layer_forward_state(ctx, l, c, x, recompute, NULL);
}

Tensor *gdp_layer_forward_state(Ctx *ctx, const GdpLayer *l, const ModelConfig *c, Tensor *x, bool recompute,
                                GdpLayerState *st) {
    return layer_forward(ctx, l, c, x, recompute, st, NULL);
}

Tensor *gdp_layer_forward_docs(Ctx *ctx, const GdpLayer *l, const ModelConfig *c, Tensor *x, bool recompute,
                               const GdpDocs *docs) {
    return layer_forward(ctx, l, c, x, recompute, NULL, docs);
}

static Tensor *layer_forward(Ctx *ctx, const GdpLayer *l, const ModelConfig *c, Tensor *x, bool recompute,
                             GdpLayerState *st, const GdpDocs *docs) {
    const int64_t B = x->shape[0], T = x->shape[1];
    const int64_t H = c->num_heads, K = c->head_dim, V = cfg_head_v_dim(c), s = cfg_slots(c);
    const bool split = c->mode == GDP_MODE_SPLIT;

    Tensor *xr = linear_flatten(ctx, x); /* read by every projection */
    Tensor *q = linear_forward_rows(ctx, xr, l->q_proj, x), *k = linear_forward_rows(ctx, xr, l->k_proj, x);
    if (st) {
        GDP_CHECK(!ctx->grad_enabled, "gdp layer: a forward from a recurrent state is for inference: turn "
                                      "recording off (ctx->grad_enabled = false)");
        q = op_l2norm(ctx, conv_silu_state(ctx, q, l->q_conv, &st->conv_q), l->q_seg.group, L2NORM_EPS);
        k = op_l2norm(ctx, conv_silu_state(ctx, k, l->k_conv, &st->conv_k), l->k_seg.group, L2NORM_EPS);
    } else if (docs) {
        const struct ConvNormDocs *qd = conv_norm_docs_arg(ctx, &l->q_seg, docs);
        const struct ConvNormDocs *kd = conv_norm_docs_arg(ctx, &l->k_seg, docs);
        q = recompute ? op_checkpoint(ctx, conv_norm_docs, qd, q) : conv_norm_docs(ctx, qd, q);
        k = recompute ? op_checkpoint(ctx, conv_norm_docs, kd, k) : conv_norm_docs(ctx, kd, k);
    } else {
        q = recompute ? op_checkpoint(ctx, conv_norm, &l->q_seg, q) : conv_norm(ctx, &l->q_seg, q);
        k = recompute ? op_checkpoint(ctx, conv_norm, &l->k_seg, k) : conv_norm(ctx, &l->k_seg, k);
    }
    Tensor *v = linear_forward_rows(ctx, xr, l->v_proj, x);
    v = docs ? conv_silu_docs(ctx, v, l->v_conv, docs->doc_start)
             : conv_silu_state(ctx, v, l->v_conv, st ? &st->conv_v : NULL);

    Tensor *beta = op_sigmoid(ctx, linear_forward_rows(ctx, xr, l->b_proj, x));
    if (c->allow_neg_eigval) beta = op_scale(ctx, beta, 2.0);

    Tensor *g = NULL;
    if (c->use_forget_gate) {
        /* g = -exp(A_log) * softplus(a_proj x + dt_bias) in the parameters' dtype: f32 also under
         * bf16 activations, whose a_proj output is cast up for it. */
        Tensor *a = linear_forward_rows(ctx, xr, l->a_proj, x);
        if (a->dtype != l->dt_bias->dtype) a = op_cast(ctx, a, l->dt_bias->dtype);
        a = op_add(ctx, a, l->dt_bias);
        Tensor *neg_A = op_scale(ctx, op_exp(ctx, l->A_log), -1.0);
        g = op_mul(ctx, op_softplus(ctx, a), neg_A);
    }

    /* Slot-major channels (slot, head, dim) become the op's [B, T, n, H, K] layouts. */
    Tensor *q4 = op_reshape(ctx, q, SHAPE(B, T, H, K));
    Tensor *k4, *v4, *b4;
    if (split) {
        k4 = op_reshape(ctx, k, SHAPE(B, T, H, K));
        v4 = op_reshape(ctx, v, SHAPE(B, T, H, V));
        b4 = beta;
    } else {
        k4 = op_reshape(ctx, k, SHAPE(B, T, s, H, K));
        v4 = op_reshape(ctx, v, SHAPE(B, T, s, H, V));
        b4 = op_reshape(ctx, beta, SHAPE(B, T, s, H));
    }
    /* bf16 autocast: the op's tensor-core kernels take bf16 q, k, v, beta (g, mask and the state
     * stay f32); with f32 activations they are cast for it and its output comes back to f32. */
    const bool bf16_op = ctx->autocast_bf16 && ctx->device == DEV_CUDA && q4->dtype == GDP_F32;
    if (bf16_op) {
        q4 = op_cast(ctx, q4, GDP_BF16), k4 = op_cast(ctx, k4, GDP_BF16);
        v4 = op_cast(ctx, v4, GDP_BF16), b4 = op_cast(ctx, b4, GDP_BF16);
    }
    /* Selective recomputation trades time for memory here too: the op's chunk intermediates
     * (W, U, the chunk-start states, ...) are recomputed in backward rather than kept. */
    if (docs) { /* the documents are the op's packed sequences over the rows laid end to end */
        q4 = pack_rows(ctx, q4), k4 = pack_rows(ctx, k4), v4 = pack_rows(ctx, v4), b4 = pack_rows(ctx, b4);
        if (g) g = pack_rows(ctx, g);
    }
    GdpOpArgs args = {.mode = c->mode, .n = c->num_householder, .q = q4, .k = k4, .v = v4, .beta = b4, .g = g,
                      .mask = l->mask, .save_for_backward = !recompute};
    if (docs) args.cu_seqlens = docs->cu_seqlens, args.n_seqs = docs->n_seqs;
    Tensor *ht = NULL;
    if (st) args.h0 = &st->S, args.ht_out = &ht, args.save_for_backward = false;
    Tensor *o = op_gated_deltaproduct(ctx, &args); /* [B, T, H, V] */
    if (docs) o = op_reshape(ctx, o, SHAPE(B, T, H, V));
    if (st) op_copy_or_accumulate(ctx, &st->S, ht, false);
    if (bf16_op) o = op_cast(ctx, o, GDP_F32);

    if (l->g_proj) {
        Tensor *z = op_reshape(ctx, linear_forward_rows(ctx, xr, l->g_proj, x), SHAPE(B, T, H, V));
        o = op_gated_rmsnorm(ctx, o, z, param_like(ctx, l->o_norm, o), c->norm_eps);
    } else {
        o = op_rmsnorm(ctx, o, param_like(ctx, l->o_norm, o), c->norm_eps);
    }
    o = op_reshape(ctx, o, SHAPE(B, T, H * V));
    return linear_forward(ctx, o, l->o_proj);
}
