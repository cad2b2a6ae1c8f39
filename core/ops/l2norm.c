/* op_l2norm: y = x / sqrt(sum(x^2) + eps) over each run of `group` elements of the last dim.
 * Saves the per-run rstd (dtype on the CPU, f32 on CUDA) for backward. */
#include <math.h>

#include "core/op_util.h"
#include "kernels/l2norm.h"

/* ---- CPU kernels (f32, f64): the reference every CUDA kernel is tested against --------------- */

#define DEFINE_L2NORM(T, SUF, SQRT)                                                                      \
    static void l2_fwd_##SUF(T *y, T *rstd, const T *x, int64_t rows, int64_t G, T eps) {                \
        for (int64_t r = 0; r < rows; r++) {                                                             \
            const T *xr = x + r * G;                                                                     \
            T ss = 0;                                                                                    \
            for (int64_t c = 0; c < G; c++) ss += xr[c] * xr[c];                                         \
            T rs = (T)1 / SQRT(ss + eps);                                                                \
            rstd[r] = rs;                                                                                \
            for (int64_t c = 0; c < G; c++) y[r * G + c] = xr[c] * rs;                                   \
        }                                                                                                \
    }                                                                                                    \
    static void l2_bwd_##SUF(T *dx, const T *dy, const T *x, const T *rstd, int64_t rows, int64_t G, int acc) { \
        for (int64_t r = 0; r < rows; r++) {                                                             \
            const T *xr = x + r * G, *gr = dy + r * G;                                                   \
            T rs = rstd[r], dot = 0;                                                                     \
            for (int64_t c = 0; c < G; c++) dot += gr[c] * xr[c] * rs;                                   \
            for (int64_t c = 0; c < G; c++) {                                                            \
                T v = rs * (gr[c] - xr[c] * rs * dot);                                                   \
                dx[r * G + c] = acc ? dx[r * G + c] + v : v;                                             \
            }                                                                                            \
        }                                                                                                \
    }
DEFINE_L2NORM(float, f32, sqrtf)
DEFINE_L2NORM(double, f64, sqrt)

void l2norm_forward_cpu(DType dt, void *y, void *rstd, const void *x, int64_t rows, int64_t group, double eps) {
    if (dt == GDP_F64)
        l2_fwd_f64((double *)y, (double *)rstd, (const double *)x, rows, group, eps);
    else
        l2_fwd_f32((float *)y, (float *)rstd, (const float *)x, rows, group, (float)eps);
}

void l2norm_backward_cpu(DType dt, void *dx, const void *dy, const void *x, const void *rstd, int64_t rows,
                         int64_t group, int accumulate) {
    if (dt == GDP_F64)
        l2_bwd_f64((double *)dx, (const double *)dy, (const double *)x, (const double *)rstd, rows, group, accumulate);
    else
        l2_bwd_f32((float *)dx, (const float *)dy, (const float *)x, (const float *)rstd, rows, group, accumulate);
}

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

static void l2norm_forward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0], *rstd = n->saved[0];
    int64_t G = n->attr[0].i, rows = x->numel / G;
    if (ctx->device == DEV_CPU)
        l2norm_forward_cpu(x->dtype, y->data, rstd->data, x->data, rows, G, n->attr[1].f);
    else
        CUDA_ONLY(l2norm_forward_cuda(x->dtype, y->data, (float *)rstd->data, x->data, rows, G, n->attr[1].f,
                                      ctx_stream(ctx)));
}

static void l2norm_backward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *dy = n->out[0]->grad, *rstd = n->saved[0];
    if (!x->requires_grad) return;
    int64_t G = n->attr[0].i, rows = x->numel / G;
    bool acc;
    Tensor *dx = grad_dest(ctx, x, &acc);
    if (ctx->device == DEV_CPU)
        l2norm_backward_cpu(x->dtype, dx->data, dy->data, x->data, rstd->data, rows, G, acc);
    else
        CUDA_ONLY(l2norm_backward_cuda(x->dtype, dx->data, dy->data, x->data, (const float *)rstd->data, rows, G, acc,
                                       ctx_stream(ctx)));
}

/* Per-slice normalisation (group = last dim / 2), as the split mode uses it. */
static Tensor *l2norm_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 3, 16));
    return op_l2norm(ctx, x, 8, 1e-6);
}

const OpDef op_l2norm_def = {"l2norm", l2norm_forward, l2norm_backward, l2norm_case, 0, 0};

Tensor *op_l2norm(Ctx *ctx, Tensor *x, int64_t group, double eps) {
    char d[TENSOR_DESC_LEN];
    op_check_float("l2norm", "x", x, ctx->device);
    op_check_contiguous("l2norm", "x", x);
    if (x->ndim < 1 || x->shape[x->ndim - 1] < 1)
        gdp_fatal("op 'l2norm': x %s needs a non-empty last dim to normalise over", tensor_describe(x, d, sizeof d));
    int64_t C = x->shape[x->ndim - 1];
    if (group < 1 || C % group != 0)
        gdp_fatal("op 'l2norm': group %lld must be >= 1 and divide the last dim %lld of x %s", (long long)group,
                  (long long)C, tensor_describe(x, d, sizeof d));
    if (!(eps >= 0) || !isfinite(eps)) gdp_fatal("op 'l2norm': eps %g must be finite and >= 0", eps);
    int64_t rows = x->numel / group;
    Node n = node_make(&op_l2norm_def);
    n.n_in = 1, n.in[0] = x;
    n.attr[0].i = group, n.attr[1].f = eps;
    n.n_saved = 1;
    n.saved[0] = tensor_new(ctx, LIFE_ACT, ctx->device == DEV_CPU ? x->dtype : GDP_F32, 1, &rows);
    n.n_out = 1, n.out[0] = op_new_out(ctx, x, x->ndim, x->shape);
    op_run(ctx, &n);
    return n.out[0];
}
