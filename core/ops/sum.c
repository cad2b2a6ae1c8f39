/* op_sum and op_mean, one kernel family (kernels/sum.h, deterministic). op_sum: the sum of every
 * element, a [1] scalar of x's dtype.
 * Backward: dx = dout broadcast. */
#include "core/op_util.h"
#include "kernels/sum.h"

/* ---- CPU kernels (f32, f64): the reference every CUDA kernel is tested against --------------- */

/* Sum and mean: fixed blocks of SUM_BLOCK elements summed in double (in parallel
 * when large), then the block partials in order: the same bits whatever the thread count. */
#define SUM_BLOCK 4096

#define DEFINE_SUM(T, SUF)                                                                           \
    static double sum_##SUF(const T *x, int64_t n) {                                                \
        int64_t nb = CEIL_DIV(n, SUM_BLOCK);                                                        \
        if (nb <= 1) {                                                                              \
            double s = 0;                                                                           \
            for (int64_t i = 0; i < n; i++) s += x[i];                                              \
            return s;                                                                               \
        }                                                                                           \
        double *part = (double *)xmalloc((size_t)nb * sizeof(double));                              \
        _Pragma("omp parallel for schedule(static) if (nb >= 16)")                                  \
        for (int64_t b = 0; b < nb; b++) {                                                          \
            double s = 0;                                                                           \
            int64_t end = GDP_MIN(n, (b + 1) * SUM_BLOCK);                                          \
            for (int64_t i = b * SUM_BLOCK; i < end; i++) s += x[i];                                \
            part[b] = s;                                                                            \
        }                                                                                           \
        double s = 0;                                                                               \
        for (int64_t b = 0; b < nb; b++) s += part[b];                                              \
        free(part);                                                                                 \
        return s;                                                                                   \
    }                                                                                               \
    static void sum_bwd_##SUF(T *dx, T g, int64_t n, int accumulate) {                              \
        if (accumulate)                                                                             \
            for (int64_t i = 0; i < n; i++) dx[i] += g;                                             \
        else                                                                                        \
            for (int64_t i = 0; i < n; i++) dx[i] = g;                                              \
    }
DEFINE_SUM(float, f32)
DEFINE_SUM(double, f64)

void sum_forward_cpu(DType dt, void *out, const void *x, int64_t n, double scale) {
    if (dt == GDP_F64)
        *(double *)out = scale * sum_f64((const double *)x, n);
    else
        *(float *)out = (float)(scale * sum_f32((const float *)x, n));
}

void sum_backward_cpu(DType dt, void *dx, const void *dout, int64_t n, double scale, int accumulate) {
    if (dt == GDP_F64)
        sum_bwd_f64((double *)dx, scale * *(const double *)dout, n, accumulate);
    else
        sum_bwd_f32((float *)dx, (float)(scale * *(const float *)dout), n, accumulate);
}

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

#ifdef GDP_CUDA
/* The block partials live in scratch; rewinding at once is safe because every later user of that
 * memory runs after this launch on the same stream. */
static void sum_launch_cuda(Ctx *ctx, const Tensor *x, Tensor *out, double scale) {
    size_t mark = arena_mark(&ctx->scratch);
    void *part = arena_alloc(&ctx->scratch, sum_cuda_scratch_bytes(x->numel));
    sum_forward_cuda(x->dtype, out->data, x->data, x->numel, scale, part, ctx_stream(ctx));
    arena_rewind(&ctx->scratch, mark);
}
#endif

static void sum_forward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *out = n->out[0];
    if (ctx->device == DEV_CPU) {
        sum_forward_cpu(x->dtype, out->data, x->data, x->numel, 1.0);
    } else {
        CUDA_ONLY(sum_launch_cuda(ctx, x, out, 1.0));
    }
}

static void sum_backward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *dout = n->out[0]->grad;
    if (!x->requires_grad) return;
    bool acc;
    Tensor *dx = grad_dest(ctx, x, &acc);
    if (ctx->device == DEV_CPU)
        sum_backward_cpu(x->dtype, dx->data, dout->data, x->numel, 1.0, acc);
    else
        CUDA_ONLY(sum_backward_cuda(x->dtype, dx->data, dout->data, x->numel, 1.0, acc, ctx_stream(ctx)));
}

/* Positive entries keep the sum away from zero, so bf16 meets its relative bound. */
static Tensor *sum_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, 0.1, 1, SHAPE(3, 4, 5));
    return op_sum(ctx, x);
}

const OpDef op_sum_def = {"sum", sum_forward, sum_backward, sum_case, 0, 0};

Tensor *op_sum(Ctx *ctx, Tensor *x) {
    op_check_float("sum", "x", x, ctx->device);
    op_check_contiguous("sum", "x", x);
    Node n = node_make(&op_sum_def);
    n.n_in = 1, n.in[0] = x;
    n.n_out = 1, n.out[0] = op_new_out(ctx, x, SHAPE(1));
    op_run(ctx, &n);
    return n.out[0];
}

/* op_mean: the mean of every element, a [1] scalar of x's dtype (the sum kernels with scale
 * 1/n, deterministic). Backward: dx = dout / n broadcast. */

static void mean_forward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *out = n->out[0];
    double scale = 1.0 / (double)x->numel;
    if (ctx->device == DEV_CPU) {
        sum_forward_cpu(x->dtype, out->data, x->data, x->numel, scale);
    } else {
        CUDA_ONLY(sum_launch_cuda(ctx, x, out, scale));
    }
}

static void mean_backward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *dout = n->out[0]->grad;
    if (!x->requires_grad) return;
    bool acc;
    Tensor *dx = grad_dest(ctx, x, &acc);
    double scale = 1.0 / (double)x->numel;
    if (ctx->device == DEV_CPU)
        sum_backward_cpu(x->dtype, dx->data, dout->data, x->numel, scale, acc);
    else
        CUDA_ONLY(sum_backward_cuda(x->dtype, dx->data, dout->data, x->numel, scale, acc, ctx_stream(ctx)));
}

static Tensor *mean_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, 0.1, 1, SHAPE(4, 7));
    return op_mean(ctx, x);
}

const OpDef op_mean_def = {"mean", mean_forward, mean_backward, mean_case, 0, 0};

Tensor *op_mean(Ctx *ctx, Tensor *x) {
    char d[TENSOR_DESC_LEN];
    op_check_float("mean", "x", x, ctx->device);
    op_check_contiguous("mean", "x", x);
    if (x->numel == 0) gdp_fatal("op 'mean': %s has no elements; the mean is undefined", tensor_describe(x, d, sizeof d));
    Node n = node_make(&op_mean_def);
    n.n_in = 1, n.in[0] = x;
    n.n_out = 1, n.out[0] = op_new_out(ctx, x, SHAPE(1));
    op_run(ctx, &n);
    return n.out[0];
}
