/* op_cross_entropy: mean cross-entropy of logits [N, V] against int32 targets [N]; targets < 0
 * are ignored, a target >= V is a fatal error naming it. Returns a [1] scalar of the logits'
 * dtype, f32 for bf16 logits (so its gradient, dloss, is f32 too). Per-row log-sum-exp and the
 * count of counted rows are saved for the backward: dlogits = (softmax - onehot) * dloss / count.
 * op_cross_entropy_inplace writes dlogits over the logits themselves (no [N, V] gradient buffer,
 * the largest one of an LM step) when nothing else has written a gradient to them. */
#include <math.h>

#include "core/op_util.h"
#include "kernels/cross_entropy.h"

/* ---- CPU kernels (f32, f64): the reference every CUDA kernel is tested against --------------- */

/* Arithmetic in double. The rows' log-sum-exps in parallel (each in double, in column order), then
 * the loss summed over the rows in order: the result does not depend on the number of threads. */
#define DEFINE_CE(T, SUF)                                                                                      \
    static int64_t ce_fwd_##SUF(T *loss, T *lse, int32_t *count, const T *x, const int32_t *tg, int64_t n,     \
                                int64_t v, int32_t *bad_target) {                                              \
        double *row_lse = (double *)xmalloc((size_t)GDP_MAX(n, 1) * sizeof(double));                           \
        _Pragma("omp parallel for schedule(static) if (n * v > 65536)")                                       \
        for (int64_t r = 0; r < n; r++) {                                                                     \
            const T *row = x + r * v;                                                                         \
            double mx = -INFINITY, s = 0;                                                                     \
            for (int64_t j = 0; j < v; j++) mx = row[j] > mx ? row[j] : mx;                                   \
            for (int64_t j = 0; j < v; j++) s += exp(row[j] - mx);                                            \
            row_lse[r] = mx + log(s);                                                                         \
            lse[r] = (T)row_lse[r];                                                                           \
        }                                                                                                     \
        int64_t bad = -1, cnt = 0;                                                                            \
        double total = 0;                                                                                     \
        for (int64_t r = 0; r < n; r++) {                                                                     \
            int32_t t = tg[r];                                                                                \
            if (t >= v) {                                                                                     \
                if (bad < 0) bad = r, *bad_target = t;                                                        \
            } else if (t >= 0) {                                                                              \
                total += row_lse[r] - x[r * v + t];                                                           \
                cnt++;                                                                                        \
            }                                                                                                 \
        }                                                                                                     \
        free(row_lse);                                                                                        \
        *count = (int32_t)cnt;                                                                                \
        *loss = (T)(cnt ? total / (double)cnt : 0.0);                                                         \
        return bad;                                                                                           \
    }                                                                                                         \
    static void ce_bwd_##SUF(T *dx, double g, const T *lse, int32_t count, const T *x, const int32_t *tg,      \
                             int64_t n, int64_t v, int acc) {                                                 \
        double scale = count > 0 ? g / (double)count : 0.0;                                                   \
        _Pragma("omp parallel for schedule(static) if (n * v > 65536)")                                       \
        for (int64_t r = 0; r < n; r++) {                                                                     \
            T *drow = dx + r * v;                                                                             \
            const T *row = x + r * v;                                                                         \
            int32_t t = tg[r];                                                                                \
            for (int64_t j = 0; j < v; j++) {                                                                 \
                double d = t >= 0 ? (exp(row[j] - (double)lse[r]) - (j == t ? 1.0 : 0.0)) * scale : 0.0;      \
                drow[j] = acc ? (T)(drow[j] + d) : (T)d;                                                      \
            }                                                                                                 \
        }                                                                                                     \
    }
DEFINE_CE(float, f32)
DEFINE_CE(double, f64)

int64_t cross_entropy_forward_cpu(DType dt, void *loss, void *lse, int32_t *count, const void *logits,
                                  const int32_t *targets, int64_t n, int64_t v, int32_t *bad_target) {
    if (dt == GDP_F64)
        return ce_fwd_f64((double *)loss, (double *)lse, count, (const double *)logits, targets, n, v, bad_target);
    if (dt == GDP_F32)
        return ce_fwd_f32((float *)loss, (float *)lse, count, (const float *)logits, targets, n, v, bad_target);
    gdp_fatal("kernel 'cross_entropy' on cpu supports f32 and f64, not %s", dtype_name(dt));
}

void cross_entropy_backward_cpu(DType dt, void *dlogits, const void *dloss, const void *lse, const int32_t *count,
                                const void *logits, const int32_t *targets, int64_t n, int64_t v, int accumulate) {
    if (dt == GDP_F64)
        ce_bwd_f64((double *)dlogits, *(const double *)dloss, (const double *)lse, *count, (const double *)logits,
                   targets, n, v, accumulate);
    else if (dt == GDP_F32)
        ce_bwd_f32((float *)dlogits, *(const float *)dloss, (const float *)lse, *count, (const float *)logits,
                   targets, n, v, accumulate);
    else
        gdp_fatal("kernel 'cross_entropy' on cpu supports f32 and f64, not %s", dtype_name(dt));
}

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

static void bad_target_fatal(const Tensor *logits, const Tensor *targets, int64_t row, int32_t t) {
    char dl[TENSOR_DESC_LEN], dt[TENSOR_DESC_LEN];
    gdp_fatal("op 'cross_entropy': target %d in row %lld of targets %s is outside [0, %lld), the classes of logits "
              "%s (negative targets are ignored); check the labels against the vocabulary size",
              t, (long long)row, tensor_describe(targets, dt, sizeof dt), (long long)logits->shape[1],
              tensor_describe(logits, dl, sizeof dl));
}

#ifdef GDP_CUDA
static int64_t ce_forward_cuda(Ctx *ctx, Tensor *loss, Tensor *lse, Tensor *count, const Tensor *x,
                               const Tensor *tg, int32_t *bad_target) {
    size_t mark = arena_mark(&ctx->scratch);
    void *scratch = arena_alloc(&ctx->scratch, cross_entropy_cuda_scratch_bytes(x->shape[0]));
    int64_t bad = cross_entropy_forward_cuda(x->dtype, (float *)loss->data, (float *)lse->data, (int32_t *)count->data,
                                             x->data, (const int32_t *)tg->data, x->shape[0], x->shape[1], scratch,
                                             bad_target, ctx_stream(ctx));
    arena_rewind(&ctx->scratch, mark); /* the call synchronised the stream */
    return bad;
}
#endif

static void ce_forward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *tg = n->in[1], *loss = n->out[0], *lse = n->saved[0], *count = n->saved[1];
    int32_t bad_target = 0;
    int64_t bad = -1;
    if (ctx->device == DEV_CPU)
        bad = cross_entropy_forward_cpu(x->dtype, loss->data, lse->data, (int32_t *)count->data, x->data,
                                        (const int32_t *)tg->data, x->shape[0], x->shape[1], &bad_target);
    else
        CUDA_ONLY(bad = ce_forward_cuda(ctx, loss, lse, count, x, tg, &bad_target));
    if (bad >= 0) bad_target_fatal(x, tg, bad, bad_target);
}

static void ce_backward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *tg = n->in[1], *dloss = n->out[0]->grad, *lse = n->saved[0], *count = n->saved[1];
    if (!x->requires_grad) return;
    bool acc;
    if (n->attr[0].i && !x->grad) /* in place: the gradient takes over the logits' memory */
        x->grad = tensor_view(ctx, x, x->ndim, x->shape, x->stride, 0), x->grad_written = false;
    Tensor *dx = grad_dest(ctx, x, &acc);
    if (ctx->device == DEV_CPU)
        cross_entropy_backward_cpu(x->dtype, dx->data, dloss->data, lse->data, (const int32_t *)count->data, x->data,
                                   (const int32_t *)tg->data, x->shape[0], x->shape[1], acc);
    else
        CUDA_ONLY(cross_entropy_backward_cuda(x->dtype, dx->data, (const float *)dloss->data, (const float *)lse->data,
                                              (const int32_t *)count->data, x->data, (const int32_t *)tg->data,
                                              x->shape[0], x->shape[1], acc, ctx_stream(ctx)));
}

/* 6 rows of v classes, one target ignored: v = 7 takes CUDA's one-logit-a-thread loops, v = 40
 * the 8-at-a-time ones. */
static Tensor *ce_case_v(Ctx *ctx, DType dt, uint64_t seed, int64_t v) {
    Tensor *x = gc_random(ctx, dt, &seed, -2, 2, SHAPE(6, v));
    Rng rng;
    rng_seed(&rng, seed);
    double t[6];
    for (int i = 0; i < 6; i++) t[i] = (double)rng_below(&rng, (uint64_t)v);
    t[2] = -1;
    Tensor *targets = tensor_from_doubles(ctx, LIFE_ACT, GDP_I32, SHAPE(6), t);
    return op_cross_entropy(ctx, x, targets);
}
static Tensor *ce_case(Ctx *ctx, DType dt, uint64_t seed) { return ce_case_v(ctx, dt, seed, 7); }
static Tensor *ce_by8_case(Ctx *ctx, DType dt, uint64_t seed) { return ce_case_v(ctx, dt, seed, 40); }

const OpDef op_cross_entropy_def = {"cross_entropy", ce_forward, ce_backward, ce_case, 0, 0};
const OpDef op_cross_entropy_by8_def = {"cross_entropy_by8", ce_forward, ce_backward, ce_by8_case, 0, 0};

static Tensor *cross_entropy(Ctx *ctx, Tensor *logits, const Tensor *targets, bool in_place) {
    char dl[TENSOR_DESC_LEN], dt[TENSOR_DESC_LEN];
    op_check_float("cross_entropy", "logits", logits, ctx->device);
    op_check_contiguous("cross_entropy", "logits", logits);
    if (logits->ndim != 2)
        gdp_fatal("op 'cross_entropy': logits %s must be 2-D [rows, classes]; reshape [B, T, V] to [B*T, V]",
                  tensor_describe(logits, dl, sizeof dl));
    op_check_not_null("cross_entropy", "targets", targets);
    if (targets->dtype != GDP_I32 || targets->device != ctx->device)
        gdp_fatal("op 'cross_entropy': targets %s must be i32 on %s", tensor_describe(targets, dt, sizeof dt),
                  device_name(ctx->device));
    op_check_contiguous("cross_entropy", "targets", targets);
    if (targets->ndim != 1 || targets->shape[0] != logits->shape[0])
        gdp_fatal("op 'cross_entropy': targets %s must be 1-D with one entry per row of logits %s",
                  tensor_describe(targets, dt, sizeof dt), tensor_describe(logits, dl, sizeof dl));
    if (logits->shape[1] < 1 || logits->shape[1] > 2147483647LL)
        gdp_fatal("op 'cross_entropy': logits %s must have between 1 and 2^31-1 classes",
                  tensor_describe(logits, dl, sizeof dl));
    DType stat_dt = logits->dtype == GDP_BF16 ? GDP_F32 : logits->dtype; /* loss and lse */
    Node n = node_make(&op_cross_entropy_def);
    n.attr[0].i = in_place;
    n.n_in = 2, n.in[0] = logits, n.in[1] = (Tensor *)targets; /* never written; targets take no gradient */
    n.n_saved = 2;
    n.saved[0] = tensor_new(ctx, LIFE_ACT, stat_dt, SHAPE(logits->shape[0]));
    n.saved[1] = tensor_new(ctx, LIFE_ACT, GDP_I32, SHAPE(1));
    n.n_out = 1, n.out[0] = tensor_new(ctx, LIFE_ACT, stat_dt, SHAPE(1));
    op_run(ctx, &n);
    return n.out[0];
}

Tensor *op_cross_entropy(Ctx *ctx, Tensor *logits, const Tensor *targets) {
    return cross_entropy(ctx, logits, targets, false);
}

Tensor *op_cross_entropy_inplace(Ctx *ctx, Tensor *logits, const Tensor *targets) {
    return cross_entropy(ctx, logits, targets, true);
}
