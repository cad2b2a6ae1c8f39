/* op_conv1d_causal: depthwise causal convolution over time, x [B, T, C], w [C, W], no bias; and
 * op_conv1d_causal_silu: silu of it in the same kernel (the short convs of the GDP layer), which
 * keeps no pre-activation: backward recomputes it from x. One pair of functions serves both OpDefs,
 * with silu in attr[0]; one backward kernel writes dx and dw. The _docs variants take an int32
 * [B, T] document-start mask as a third input (no gradient) and keep every window inside its document. */
#include <math.h>

#include "core/op_util.h"
#include "core/ops_fused.h"
#include "kernels/conv1d_causal.h"

/* ---- CPU kernels (f32, f64): the reference every CUDA kernel is tested against --------------- */

/* The backward walks the same time segments as the CUDA kernel, with the same sliding windows, so
 * that the CPU gradchecks also cover the segment boundaries of that algorithm. */

/* The first position that t may read: its document's start (the last nonzero ds[b, u] at u in
 * (t - W + 1, t]), else 0 (the row's start, or a document that began W or more steps back). */
static inline int64_t doc_lo(const int32_t *ds, int64_t b, int64_t Tn, int64_t t, int64_t W) {
    if (ds)
        for (int64_t u = t; u > 0 && u > t - W + 1; u--)
            if (ds[b * Tn + u]) return u;
    return 0;
}

#define DEFINE_CONV(T, SUF, EXP)                                                                                     \
    static inline T sigmoid_##SUF(T v) {                                                                             \
        if (v >= 0) return (T)1 / ((T)1 + EXP(-v));                                                                  \
        T e = EXP(v);                                                                                                \
        return e / ((T)1 + e);                                                                                       \
    }                                                                                                                \
    static void conv_fwd_##SUF(T *y, const T *x, const T *w, const int32_t *ds, int64_t B, int64_t Tn, int64_t C,    \
                               int64_t W, int silu) {                                                                \
        _Pragma("omp parallel for collapse(2) schedule(static) if (B * Tn * C > 16384)")                             \
        for (int64_t b = 0; b < B; b++)                                                                              \
            for (int64_t t = 0; t < Tn; t++) {                                                                       \
                const int64_t lo = doc_lo(ds, b, Tn, t, W);                                                          \
                for (int64_t c = 0; c < C; c++) {                                                                    \
                    T s = 0;                                                                                         \
                    for (int64_t i = 0; i < W; i++) {                                                                \
                        int64_t ts = t - W + 1 + i;                                                                  \
                        if (ts >= lo) s += w[c * W + i] * x[(b * Tn + ts) * C + c];                                  \
                    }                                                                                                \
                    y[(b * Tn + t) * C + c] = silu ? s * sigmoid_##SUF(s) : s;                                       \
                }                                                                                                    \
            }                                                                                                        \
    }                                                                                                                \
    /* Per (b, segment [t0, t1), c): step u over [t0, t1 + W - 1) with xw = x[u-W+1 .. u] and                        \
     * gw = dpre[u-W+1 .. u] (zero before t0, and past the end of the sequence); dpre[u] adds its dw                 \
     * terms when u is in the segment, and dx[u-W+1] is complete once dpre[u] is known. Threads take                \
     * channels, so each dw[c] still sums in (b, t) order: the same bits for any number of threads.                 \
     * Documents: a start at u clears the x window before x[u] enters (pre[u] and dw see only u's                    \
     * document), and dx[t] takes dpre[t + m] only while no start lies in (t, t + m]: sw holds the                  \
     * window's start flags. */                                                                                     \
    static void conv_bwd_##SUF(T *dx, T *dw, const T *dy, const T *x, const T *w, const int32_t *ds, int64_t B,      \
                               int64_t Tn, int64_t C, int64_t W, int silu, int acc_dx, int acc_dw) {                 \
        if (dw && !acc_dw)                                                                                           \
            for (int64_t k = 0; k < C * W; k++) dw[k] = 0;                                                           \
        const int64_t len = conv1d_causal_seg_len(B, Tn);                                                            \
        _Pragma("omp parallel for schedule(static) if (B * Tn * C > 16384)")                                         \
        for (int64_t c = 0; c < C; c++)                                                                              \
            for (int64_t b = 0; b < B; b++)                                                                          \
                for (int64_t t0 = 0; t0 < Tn; t0 += len) {                                                           \
                    const int64_t t1 = t0 + len < Tn ? t0 + len : Tn;                                                \
                    const T *xc = x + b * Tn * C + c, *dyc = dy + b * Tn * C + c, *wc = w + c * W;                   \
                    const int32_t *dsr = ds ? ds + b * Tn : NULL;                                                    \
                    T xw[CONV1D_MAX_W], gw[CONV1D_MAX_W];                                                            \
                    int sw[CONV1D_MAX_W];                                                                            \
                    for (int64_t i = 0; i < W; i++) {                                                                \
                        int64_t ts = t0 - W + i; /* the window of step t0 - 1 */                                     \
                        xw[i] = ts >= 0 ? xc[ts * C] : 0;                                                            \
                        gw[i] = 0, sw[i] = 0;                                                                        \
                        if (dsr && ts >= 0 && dsr[ts])                                                               \
                            for (int64_t j = 0; j < i; j++) xw[j] = 0;                                               \
                    }                                                                                                \
                    for (int64_t u = t0; u < t1 + W - 1; u++) {                                                      \
                        for (int64_t i = 0; i + 1 < W; i++) xw[i] = xw[i + 1], gw[i] = gw[i + 1], sw[i] = sw[i + 1]; \
                        T g = 0;                                                                                     \
                        sw[W - 1] = dsr && u < Tn && dsr[u];                                                         \
                        if (sw[W - 1])                                                                               \
                            for (int64_t i = 0; i + 1 < W; i++) xw[i] = 0;                                           \
                        xw[W - 1] = u < Tn ? xc[u * C] : 0;                                                          \
                        if (u < Tn) {                                                                                \
                            g = dyc[u * C];                                                                          \
                            if (silu) {                                                                              \
                                T pre = 0;                                                                           \
                                for (int64_t i = 0; i < W; i++) pre += wc[i] * xw[i];                                \
                                T s = sigmoid_##SUF(pre);                                                            \
                                g *= s * ((T)1 + pre * ((T)1 - s));                                                  \
                            }                                                                                        \
                        }                                                                                            \
                        gw[W - 1] = g;                                                                               \
                        if (dw && u < t1)                                                                            \
                            for (int64_t i = 0; i < W; i++) dw[c * W + i] += g * xw[i];                              \
                        int64_t t = u - W + 1;                                                                       \
                        if (dx && t >= t0) {                                                                         \
                            int64_t mlim = W; /* dpre[t + m] reaches dx[t] for m < mlim */                           \
                            for (int64_t m = W - 1; m >= 1; m--)                                                     \
                                if (sw[m]) mlim = m;                                                                 \
                            T s = 0;                                                                                 \
                            for (int64_t i = 0; i < W; i++)                                                          \
                                if (W - 1 - i < mlim) s += wc[i] * gw[W - 1 - i];                                    \
                            T *d = dx + (b * Tn + t) * C + c;                                                        \
                            *d = acc_dx ? *d + s : s;                                                                \
                        }                                                                                            \
                    }                                                                                                \
                }                                                                                                    \
    }
DEFINE_CONV(float, f32, expf)
DEFINE_CONV(double, f64, exp)

void conv1d_causal_forward_cpu(DType dt, void *y, const void *x, const void *w, const int32_t *doc_start, int64_t B,
                               int64_t T, int64_t C, int64_t W, int silu) {
    if (dt == GDP_F64)
        conv_fwd_f64((double *)y, (const double *)x, (const double *)w, doc_start, B, T, C, W, silu);
    else
        conv_fwd_f32((float *)y, (const float *)x, (const float *)w, doc_start, B, T, C, W, silu);
}

void conv1d_causal_backward_cpu(DType dt, void *dx, void *dw, const void *dy, const void *x, const void *w,
                                const int32_t *doc_start, int64_t B, int64_t T, int64_t C, int64_t W, int silu,
                                int acc_dx, int acc_dw) {
    if (dt == GDP_F64)
        conv_bwd_f64((double *)dx, (double *)dw, (const double *)dy, (const double *)x, (const double *)w, doc_start, B,
                     T, C, W, silu, acc_dx, acc_dw);
    else
        conv_bwd_f32((float *)dx, (float *)dw, (const float *)dy, (const float *)x, (const float *)w, doc_start, B, T,
                     C, W, silu, acc_dx, acc_dw);
}

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

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
