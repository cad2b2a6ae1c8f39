/* op_rmsnorm: y = x / sqrt(mean(x^2) + eps) * weight over the last dim; weight [C] or NULL.
 * Saves the per-row rstd (dtype on the CPU, f32 on CUDA) for backward. op_rmsnorm_to may write y
 * in bf16 from f32 x and weight on CUDA (the f32 residual stream into a bf16 branch, no cast). */
#include <math.h>

#include "core/op_util.h"
#include "kernels/rmsnorm.h"

/* ---- CPU kernels (f32, f64): the reference every CUDA kernel is tested against --------------- */

#define DEFINE_RMSNORM(T, SUF, SQRT)                                                                    \
    static void rms_fwd_##SUF(T *y, T *rstd, const T *x, const T *w, int64_t rows, int64_t C, T eps) {  \
        for (int64_t r = 0; r < rows; r++) {                                                            \
            const T *xr = x + r * C;                                                                    \
            T ss = 0;                                                                                   \
            for (int64_t c = 0; c < C; c++) ss += xr[c] * xr[c];                                        \
            T rs = (T)1 / SQRT(ss / (T)C + eps);                                                        \
            rstd[r] = rs;                                                                               \
            for (int64_t c = 0; c < C; c++) y[r * C + c] = xr[c] * rs * (w ? w[c] : (T)1);              \
        }                                                                                               \
    }                                                                                                   \
    static void rms_bwd_dx_##SUF(T *dx, const T *dy, const T *x, const T *w, const T *rstd, int64_t rows, \
                                 int64_t C, int acc) {                                                  \
        for (int64_t r = 0; r < rows; r++) {                                                            \
            const T *xr = x + r * C, *gr = dy + r * C;                                                  \
            T rs = rstd[r], dot = 0;                                                                    \
            for (int64_t c = 0; c < C; c++) dot += gr[c] * (w ? w[c] : (T)1) * xr[c] * rs;              \
            dot /= (T)C;                                                                                \
            for (int64_t c = 0; c < C; c++) {                                                           \
                T g = gr[c] * (w ? w[c] : (T)1);                                                        \
                T v = rs * (g - xr[c] * rs * dot);                                                      \
                dx[r * C + c] = acc ? dx[r * C + c] + v : v;                                            \
            }                                                                                           \
        }                                                                                               \
    }                                                                                                   \
    static void rms_bwd_dw_##SUF(T *dw, const T *dy, const T *x, const T *rstd, int64_t rows, int64_t C, \
                                 int acc) {                                                             \
        if (!acc)                                                                                       \
            for (int64_t c = 0; c < C; c++) dw[c] = 0;                                                  \
        for (int64_t r = 0; r < rows; r++) /* rows in order: deterministic, cache-friendly */           \
            for (int64_t c = 0; c < C; c++) dw[c] += dy[r * C + c] * x[r * C + c] * rstd[r];            \
    }
DEFINE_RMSNORM(float, f32, sqrtf)
DEFINE_RMSNORM(double, f64, sqrt)

void rmsnorm_forward_cpu(DType dt, void *y, void *rstd, const void *x, const void *w, int64_t rows, int64_t C,
                         double eps) {
    if (dt == GDP_F64)
        rms_fwd_f64((double *)y, (double *)rstd, (const double *)x, (const double *)w, rows, C, eps);
    else
        rms_fwd_f32((float *)y, (float *)rstd, (const float *)x, (const float *)w, rows, C, (float)eps);
}

void rmsnorm_backward_dx_cpu(DType dt, void *dx, const void *dy, const void *x, const void *w, const void *rstd,
                             int64_t rows, int64_t C, int accumulate) {
    if (dt == GDP_F64)
        rms_bwd_dx_f64((double *)dx, (const double *)dy, (const double *)x, (const double *)w, (const double *)rstd,
                       rows, C, accumulate);
    else
        rms_bwd_dx_f32((float *)dx, (const float *)dy, (const float *)x, (const float *)w, (const float *)rstd, rows,
                       C, accumulate);
}

void rmsnorm_backward_dw_cpu(DType dt, void *dw, const void *dy, const void *x, const void *rstd, int64_t rows,
                             int64_t C, int accumulate) {
    if (dt == GDP_F64)
        rms_bwd_dw_f64((double *)dw, (const double *)dy, (const double *)x, (const double *)rstd, rows, C, accumulate);
    else
        rms_bwd_dw_f32((float *)dw, (const float *)dy, (const float *)x, (const float *)rstd, rows, C, accumulate);
}

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

static void rmsnorm_forward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *w = n->n_in > 1 ? n->in[1] : NULL, *y = n->out[0], *rstd = n->saved[0];
    int64_t C = x->shape[x->ndim - 1], rows = C ? x->numel / C : 0;
    const void *wd = w ? w->data : NULL;
    if (ctx->device == DEV_CPU)
        rmsnorm_forward_cpu(x->dtype, y->data, rstd->data, x->data, wd, rows, C, n->attr[0].f);
    else
        CUDA_ONLY(rmsnorm_forward_cuda(x->dtype, y->dtype, y->data, (float *)rstd->data, x->data, wd, rows, C,
                                       n->attr[0].f, ctx_stream(ctx)));
}

static void rmsnorm_backward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *w = n->n_in > 1 ? n->in[1] : NULL, *dy = n->out[0]->grad, *rstd = n->saved[0];
    int64_t C = x->shape[x->ndim - 1], rows = C ? x->numel / C : 0;
    const void *wd = w ? w->data : NULL;
    bool acc_x = false, acc_w = false;
    Tensor *dx = x->requires_grad ? grad_dest(ctx, x, &acc_x) : NULL;
    Tensor *dw = w && w->requires_grad ? grad_dest(ctx, w, &acc_w) : NULL;
    if (ctx->device == DEV_CPU) {
        if (dx) rmsnorm_backward_dx_cpu(x->dtype, dx->data, dy->data, x->data, wd, rstd->data, rows, C, acc_x);
        if (dw) rmsnorm_backward_dw_cpu(x->dtype, dw->data, dy->data, x->data, rstd->data, rows, C, acc_w);
    } else if (dx || dw) {
        /* One kernel for dx and the dw partials. The partials live in scratch only until the
         * (stream-ordered) final reduction has read them; later users of scratch run after it on the
         * same stream. */
        size_t mark = arena_mark(&ctx->scratch);
        CUDA_ONLY(rmsnorm_backward_cuda(
            x->dtype, dy->dtype, dx ? dx->data : NULL, dw ? dw->data : NULL,
            dw ? (float *)arena_alloc(&ctx->scratch, (size_t)(rmsnorm_dw_chunks(rows) * C) * sizeof(float)) : NULL,
            dy->data, x->data, wd, (const float *)rstd->data, rows, C, acc_x, acc_w, ctx_stream(ctx)));
        arena_rewind(&ctx->scratch, mark);
    }
}

static Tensor *rmsnorm_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 3, 16));
    Tensor *w = gc_random(ctx, dt, &seed, 0.5, 1.5, SHAPE(16));
    return op_rmsnorm(ctx, x, w, 1e-5);
}

/* On CUDA in bf16: f32 x and weight, bf16 y (the mixed kernels); elsewhere as rmsnorm_case. Rows of
 * 36 (not a multiple of 8) take the kernels' one-column-a-lane loops; rmsnorm_case's 16 the others. */
static Tensor *rmsnorm_to_bf16_case(Ctx *ctx, DType dt, uint64_t seed) {
    const DType in = dt == GDP_BF16 ? GDP_F32 : dt;
    Tensor *x = gc_random(ctx, in, &seed, -1, 1, SHAPE(2, 3, 36));
    Tensor *w = gc_random(ctx, in, &seed, 0.5, 1.5, SHAPE(36));
    return op_rmsnorm_to(ctx, x, w, 1e-5, dt);
}

const OpDef op_rmsnorm_def = {"rmsnorm", rmsnorm_forward, rmsnorm_backward, rmsnorm_case, 0, 0};
const OpDef op_rmsnorm_to_bf16_def = {"rmsnorm_to_bf16", rmsnorm_forward, rmsnorm_backward, rmsnorm_to_bf16_case, 0, 0};

Tensor *op_rmsnorm(Ctx *ctx, Tensor *x, Tensor *weight, double eps) {
    op_check_not_null("rmsnorm", "x", x);
    return op_rmsnorm_to(ctx, x, weight, eps, x->dtype);
}

Tensor *op_rmsnorm_to(Ctx *ctx, Tensor *x, Tensor *weight, double eps, DType out_dtype) {
    char dx[TENSOR_DESC_LEN], dw[TENSOR_DESC_LEN];
    op_check_float("rmsnorm", "x", x, ctx->device);
    op_check_contiguous("rmsnorm", "x", x);
    if (x->ndim < 1 || x->shape[x->ndim - 1] < 1)
        gdp_fatal("op 'rmsnorm': x %s needs a non-empty last dim to normalise over", tensor_describe(x, dx, sizeof dx));
    int64_t C = x->shape[x->ndim - 1];
    if (weight) {
        op_check_float("rmsnorm", "weight", weight, ctx->device);
        op_check_same_dtype("rmsnorm", x, weight);
        op_check_contiguous("rmsnorm", "weight", weight);
        if (weight->ndim != 1 || weight->shape[0] != C)
            gdp_fatal("op 'rmsnorm': weight %s must be 1-D with x's last dim %lld (x is %s)",
                      tensor_describe(weight, dw, sizeof dw), (long long)C, tensor_describe(x, dx, sizeof dx));
    }
    if (!(eps >= 0) || !isfinite(eps)) gdp_fatal("op 'rmsnorm': eps %g must be finite and >= 0", eps);
    if (out_dtype != x->dtype && !(ctx->device == DEV_CUDA && x->dtype == GDP_F32 && out_dtype == GDP_BF16))
        gdp_fatal("op 'rmsnorm': cannot write %s output from x %s on %s; the output dtype is x's, or bf16 from f32 "
                  "on cuda", dtype_name(out_dtype), tensor_describe(x, dx, sizeof dx), device_name(ctx->device));
    int64_t rows = x->numel / C;
    Node n = node_make(&op_rmsnorm_def);
    n.n_in = weight ? 2 : 1, n.in[0] = x, n.in[1] = weight;
    n.attr[0].f = eps;
    n.n_saved = 1;
    n.saved[0] = tensor_new(ctx, LIFE_ACT, ctx->device == DEV_CPU ? x->dtype : GDP_F32, 1, &rows);
    n.n_out = 1, n.out[0] = tensor_new(ctx, LIFE_ACT, out_dtype, x->ndim, x->shape);
    op_run(ctx, &n);
    return n.out[0];
}
