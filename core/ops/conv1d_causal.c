/* op_conv1d_causal: depthwise causal convolution over time, x [B, T, C], w [C, W], no bias; and
 * op_conv1d_causal_silu: silu of it in the same kernel (the short convs of the GDP layer), which
 * keeps no pre-activation: backward recomputes it from x. One pair of functions serves both OpDefs,
 * with silu in attr[0]; one backward kernel writes dx and dw. The _docs variants take an int32
 * [B, T] document-start mask as a third input (no gradient) and keep every window inside its document. */
#include "core/op_util.h"
#include "core/ops_fused.h"
#include "kernels/conv1d_causal.h"

static const int32_t *doc_starts(const Node *n) { return n->n_in > 2 ? (const int32_t *)n->in[2]->data : NULL; }

static void conv1d_causal_forward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *w = n->in[1], *y = n->out[0];
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], W = w->shape[1];
    int silu = (int)n->attr[0].i;
    const int32_t *ds = doc_starts(n);
    if (ctx->device == DEV_CPU)
        conv1d_causal_forward_cpu(x->dtype, y->data, x->data, w->data, ds, B, T, C, W, silu);
    else
        CUDA_ONLY(conv1d_causal_forward_cuda(x->dtype, y->data, x->data, w->data, ds, B, T, C, W, silu,
                                             ctx_stream(ctx)));
}

static void conv1d_causal_backward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *w = n->in[1], *dy = n->out[0]->grad;
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], W = w->shape[1];
    int silu = (int)n->attr[0].i;
    bool acc_dx = false, acc_dw = false;
    Tensor *dx = x->requires_grad ? grad_dest(ctx, x, &acc_dx) : NULL;
    Tensor *dw = w->requires_grad ? grad_dest(ctx, w, &acc_dw) : NULL;
    void *dxd = dx ? dx->data : NULL, *dwd = dw ? dw->data : NULL;
    const int32_t *ds = doc_starts(n);
    if (ctx->device == DEV_CPU) {
        conv1d_causal_backward_cpu(x->dtype, dxd, dwd, dy->data, x->data, w->data, ds, B, T, C, W, silu, acc_dx,
                                   acc_dw);
    } else {
        /* dw partials live in scratch until the stream-ordered final reduction has read them. */
        size_t mark = arena_mark(&ctx->scratch);
        float *partial = dw ? (float *)arena_alloc(&ctx->scratch,
                                                   (size_t)(conv1d_causal_dw_chunks(B, T) * C * W) * sizeof(float))
                            : NULL;
        CUDA_ONLY(conv1d_causal_backward_cuda(x->dtype, dxd, dwd, partial, dy->data, x->data, w->data, ds, B, T, C,
                                              W, silu, acc_dx, acc_dw, ctx_stream(ctx)));
        (void)partial, (void)ds; /* a CPU-only build has no use for them */
        arena_rewind(&ctx->scratch, mark);
    }
}

static Tensor *conv1d_causal_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 7, 5));
    Tensor *w = gc_random(ctx, dt, &seed, -1, 1, SHAPE(5, 4));
    return op_conv1d_causal(ctx, x, w);
}

/* T = 37 spans two time segments (conv1d_causal_seg_len is 32 here), so the window hand-over at a
 * segment boundary is checked, on the CPU as on CUDA. */
static Tensor *conv1d_causal_silu_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 37, 5));
    Tensor *w = gc_random(ctx, dt, &seed, -1, 1, SHAPE(5, 4));
    return op_conv1d_causal_silu(ctx, x, w);
}

/* Document starts drawn with probability 1/4 (documents of one step, adjacent starts, long ones) in
 * rows of T = 37 over two time segments, with W = 4 taps: every kind of window cut, and starts at and
 * just past a segment boundary, where a thread's window is loaded rather than slid. */
static Tensor *conv_docs_starts(Ctx *ctx, uint64_t seed, int64_t B, int64_t T) {
    Rng rng;
    rng_seed(&rng, seed);
    double *st = (double *)xcalloc((size_t)(B * T), sizeof(double));
    for (int64_t i = 0; i < B * T; i++) st[i] = rng_below(&rng, 4) == 0;
    st[32] = 1, st[T + 33] = 1, st[T + 34] = 1; /* at and just past the segment boundary */
    Tensor *t = tensor_from_doubles(ctx, LIFE_ACT, GDP_I32, SHAPE(B, T), st);
    free(st);
    return t;
}

static Tensor *conv1d_causal_docs_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 37, 5));
    Tensor *w = gc_random(ctx, dt, &seed, -1, 1, SHAPE(5, 4));
    return op_conv1d_causal_docs(ctx, x, w, conv_docs_starts(ctx, seed, 2, 37));
}

static Tensor *conv1d_causal_silu_docs_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 37, 5));
    Tensor *w = gc_random(ctx, dt, &seed, -1, 1, SHAPE(5, 4));
    return op_conv1d_causal_silu_docs(ctx, x, w, conv_docs_starts(ctx, seed, 2, 37));
}

const OpDef op_conv1d_causal_def = {"conv1d_causal", conv1d_causal_forward, conv1d_causal_backward,
                                    conv1d_causal_case, 0, 0};
const OpDef op_conv1d_causal_silu_def = {"conv1d_causal_silu", conv1d_causal_forward, conv1d_causal_backward,
                                         conv1d_causal_silu_case, 0, 0};
const OpDef op_conv1d_causal_docs_def = {"conv1d_causal_docs", conv1d_causal_forward, conv1d_causal_backward,
                                         conv1d_causal_docs_case, 0, 0};
const OpDef op_conv1d_causal_silu_docs_def = {"conv1d_causal_silu_docs", conv1d_causal_forward,
                                              conv1d_causal_backward, conv1d_causal_silu_docs_case, 0, 0};

static Tensor *conv1d_causal_run(Ctx *ctx, const OpDef *def, Tensor *x, Tensor *w, const Tensor *doc_start,
                                 int silu) {
    char dx[TENSOR_DESC_LEN], dw[TENSOR_DESC_LEN];
    const char *op = def->name;
    op_check_float(op, "x", x, ctx->device);
    op_check_float(op, "w", w, ctx->device);
    op_check_same_dtype(op, x, w);
    op_check_contiguous(op, "x", x);
    op_check_contiguous(op, "w", w);
    if (x->ndim != 3) gdp_fatal("op '%s': x %s must be 3-D [B, T, C]", op, tensor_describe(x, dx, sizeof dx));
    if (w->ndim != 2 || w->shape[0] != x->shape[2])
        gdp_fatal("op '%s': w %s must be [C, W] with C = x's last dim %lld (x is %s)", op,
                  tensor_describe(w, dw, sizeof dw), (long long)x->shape[2], tensor_describe(x, dx, sizeof dx));
    if (w->shape[1] < 1 || w->shape[1] > CONV1D_MAX_W)
        gdp_fatal("op '%s': kernel width W = %lld of w %s must be in [1, %d]", op, (long long)w->shape[1],
                  tensor_describe(w, dw, sizeof dw), CONV1D_MAX_W);
    if (doc_start) {
        char ds[TENSOR_DESC_LEN];
        if (doc_start->dtype != GDP_I32 || doc_start->device != ctx->device || doc_start->ndim != 2 ||
            doc_start->shape[0] != x->shape[0] || doc_start->shape[1] != x->shape[1] ||
            !tensor_is_contiguous(doc_start))
            gdp_fatal("op '%s': doc_start %s must be contiguous int32 [B, T] = [%lld, %lld] on the op's device", op,
                      tensor_describe(doc_start, ds, sizeof ds), (long long)x->shape[0], (long long)x->shape[1]);
    }
    Node n = node_make(def);
    n.n_in = doc_start ? 3 : 2, n.in[0] = x, n.in[1] = w;
    if (doc_start) n.in[2] = (Tensor *)doc_start;
    n.attr[0].i = silu;
    n.n_out = 1, n.out[0] = op_new_out(ctx, x, x->ndim, x->shape);
    op_run(ctx, &n);
    return n.out[0];
}

Tensor *op_conv1d_causal(Ctx *ctx, Tensor *x, Tensor *w) {
    return conv1d_causal_run(ctx, &op_conv1d_causal_def, x, w, NULL, 0);
}

Tensor *op_conv1d_causal_silu(Ctx *ctx, Tensor *x, Tensor *w) {
    return conv1d_causal_run(ctx, &op_conv1d_causal_silu_def, x, w, NULL, 1);
}

Tensor *op_conv1d_causal_docs(Ctx *ctx, Tensor *x, Tensor *w, const Tensor *doc_start) {
    if (!doc_start) return op_conv1d_causal(ctx, x, w);
    return conv1d_causal_run(ctx, &op_conv1d_causal_docs_def, x, w, doc_start, 0);
}

Tensor *op_conv1d_causal_silu_docs(Ctx *ctx, Tensor *x, Tensor *w, const Tensor *doc_start) {
    if (!doc_start) return op_conv1d_causal_silu(ctx, x, w);
    return conv1d_causal_run(ctx, &op_conv1d_causal_silu_docs_def, x, w, doc_start, 1);
}
