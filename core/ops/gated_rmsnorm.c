/* op_gated_rmsnorm: y = rmsnorm(o) * w * silu(z) per row of D (the gated output norm of docs/spec.md §3),
 * one fused kernel each way. Saves the per-row rstd (dtype on the CPU, f32 on CUDA). */
#include <math.h>

#include "core/op_util.h"
#include "core/ops_fused.h"
#include "kernels/gated_rmsnorm.h"

/* ---- CPU kernels (f32, f64): the reference every CUDA kernel is tested against --------------- */

#define DEFINE_GRMS(T, SUF, SQRT, EXP)                                                                    \
    static inline T gsig_##SUF(T x) {                                                                     \
        if (x >= 0) return (T)1 / ((T)1 + EXP(-x));                                                       \
        T e = EXP(x);                                                                                     \
        return e / ((T)1 + e);                                                                            \
    }                                                                                                     \
    static void grms_fwd_##SUF(T *y, T *rstd, const T *o, const T *z, const T *w, int64_t rows, int64_t D, \
                               T eps) {                                                                   \
        for (int64_t r = 0; r < rows; r++) {                                                              \
            const T *orow = o + r * D, *zr = z + r * D;                                                   \
            T ss = 0;                                                                                     \
            for (int64_t c = 0; c < D; c++) ss += orow[c] * orow[c];                                      \
            T rs = (T)1 / SQRT(ss / (T)D + eps);                                                          \
            rstd[r] = rs;                                                                                 \
            for (int64_t c = 0; c < D; c++) y[r * D + c] = orow[c] * rs * w[c] * zr[c] * gsig_##SUF(zr[c]); \
        }                                                                                                 \
    }                                                                                                     \
    static void grms_bwd_oz_##SUF(T *d_o, T *dz, const T *dy, const T *o, const T *z, const T *w,         \
                                  const T *rstd, int64_t rows, int64_t D, int acc_o, int acc_z) {         \
        for (int64_t r = 0; r < rows; r++) {                                                              \
            const T *orow = o + r * D, *zr = z + r * D, *gr = dy + r * D;                                 \
            T rs = rstd[r], dot = 0;                                                                      \
            for (int64_t c = 0; c < D; c++) {                                                             \
                T s = gsig_##SUF(zr[c]);                                                                  \
                T g = gr[c] * w[c] * zr[c] * s, oh = orow[c] * rs;                                        \
                dot += g * oh;                                                                            \
                if (dz) {                                                                                 \
                    T v = gr[c] * oh * w[c] * s * ((T)1 + zr[c] * ((T)1 - s));                            \
                    dz[r * D + c] = acc_z ? dz[r * D + c] + v : v;                                        \
                }                                                                                         \
            }                                                                                             \
            dot /= (T)D;                                                                                  \
            if (d_o)                                                                                      \
                for (int64_t c = 0; c < D; c++) {                                                         \
                    T g = gr[c] * w[c] * zr[c] * gsig_##SUF(zr[c]);                                       \
                    T v = rs * (g - orow[c] * rs * dot);                                                  \
                    d_o[r * D + c] = acc_o ? d_o[r * D + c] + v : v;                                      \
                }                                                                                         \
        }                                                                                                 \
    }                                                                                                     \
    static void grms_bwd_dw_##SUF(T *dw, const T *dy, const T *o, const T *z, const T *rstd, int64_t rows, \
                                  int64_t D, int acc) {                                                   \
        if (!acc)                                                                                         \
            for (int64_t c = 0; c < D; c++) dw[c] = 0;                                                    \
        for (int64_t r = 0; r < rows; r++) /* rows in order: deterministic */                            \
            for (int64_t c = 0; c < D; c++) {                                                             \
                T zc = z[r * D + c];                                                                      \
                dw[c] += dy[r * D + c] * o[r * D + c] * rstd[r] * zc * gsig_##SUF(zc);                    \
            }                                                                                             \
    }
DEFINE_GRMS(float, f32, sqrtf, expf)
DEFINE_GRMS(double, f64, sqrt, exp)

void gated_rmsnorm_forward_cpu(DType dt, void *y, void *rstd, const void *o, const void *z, const void *w,
                               int64_t rows, int64_t D, double eps) {
    if (dt == GDP_F64)
        grms_fwd_f64((double *)y, (double *)rstd, (const double *)o, (const double *)z, (const double *)w, rows, D, eps);
    else
        grms_fwd_f32((float *)y, (float *)rstd, (const float *)o, (const float *)z, (const float *)w, rows, D,
                     (float)eps);
}

void gated_rmsnorm_backward_oz_cpu(DType dt, void *d_o, void *dz, const void *dy, const void *o, const void *z,
                                   const void *w, const void *rstd, int64_t rows, int64_t D, int acc_o, int acc_z) {
    if (dt == GDP_F64)
        grms_bwd_oz_f64((double *)d_o, (double *)dz, (const double *)dy, (const double *)o, (const double *)z,
                        (const double *)w, (const double *)rstd, rows, D, acc_o, acc_z);
    else
        grms_bwd_oz_f32((float *)d_o, (float *)dz, (const float *)dy, (const float *)o, (const float *)z,
                        (const float *)w, (const float *)rstd, rows, D, acc_o, acc_z);
}

void gated_rmsnorm_backward_dw_cpu(DType dt, void *dw, const void *dy, const void *o, const void *z, const void *rstd,
                                   int64_t rows, int64_t D, int accumulate) {
    if (dt == GDP_F64)
        grms_bwd_dw_f64((double *)dw, (const double *)dy, (const double *)o, (const double *)z, (const double *)rstd,
                        rows, D, accumulate);
    else
        grms_bwd_dw_f32((float *)dw, (const float *)dy, (const float *)o, (const float *)z, (const float *)rstd, rows,
                        D, accumulate);
}

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

static void gated_rmsnorm_forward(Ctx *ctx, Node *n) {
    Tensor *o = n->in[0], *z = n->in[1], *w = n->in[2], *y = n->out[0], *rstd = n->saved[0];
    int64_t D = w->numel, rows = o->numel / D;
    if (ctx->device == DEV_CPU)
        gated_rmsnorm_forward_cpu(o->dtype, y->data, rstd->data, o->data, z->data, w->data, rows, D, n->attr[0].f);
    else
        CUDA_ONLY(gated_rmsnorm_forward_cuda(o->dtype, y->data, (float *)rstd->data, o->data, z->data, w->data, rows, D,
                                             n->attr[0].f, ctx_stream(ctx)));
}

static void gated_rmsnorm_backward(Ctx *ctx, Node *n) {
    Tensor *o = n->in[0], *z = n->in[1], *w = n->in[2], *dy = n->out[0]->grad, *rstd = n->saved[0];
    int64_t D = w->numel, rows = o->numel / D;
    bool acc_o = false, acc_z = false, acc_w = false;
    /* dz's destination first: the kernels write dz before do, so when o and z are one tensor the
     * first write sets and the second accumulates. */
    Tensor *dz = z->requires_grad ? grad_dest(ctx, z, &acc_z) : NULL;
    Tensor *d_o = o->requires_grad ? grad_dest(ctx, o, &acc_o) : NULL;
    Tensor *dw = w->requires_grad ? grad_dest(ctx, w, &acc_w) : NULL;
    void *dzd = dz ? dz->data : NULL, *dod = d_o ? d_o->data : NULL;
    if (ctx->device == DEV_CPU) {
        if (dzd || dod)
            gated_rmsnorm_backward_oz_cpu(o->dtype, dod, dzd, dy->data, o->data, z->data, w->data, rstd->data, rows, D,
                                          acc_o, acc_z);
        if (dw) gated_rmsnorm_backward_dw_cpu(o->dtype, dw->data, dy->data, o->data, z->data, rstd->data, rows, D, acc_w);
    } else if (dzd || dod || dw) {
        /* One kernel for dz, do and the dw partials; the partials live in scratch until the
         * stream-ordered final reduction has read them. */
        size_t mark = arena_mark(&ctx->scratch);
        CUDA_ONLY(gated_rmsnorm_backward_cuda(
            o->dtype, dod, dzd, dw ? dw->data : NULL,
            dw ? (float *)arena_alloc(&ctx->scratch, (size_t)(gated_rmsnorm_dw_chunks(rows) * D) * sizeof(float)) : NULL,
            dy->data, o->data, z->data, w->data, (const float *)rstd->data, rows, D, acc_o, acc_z, acc_w,
            ctx_stream(ctx)));
        arena_rewind(&ctx->scratch, mark);
    }
}

/* Rows of D = 16, and of D = 12 (a length that is no multiple of 8, for row kernels that might
 * take columns in groups). */
static Tensor *gated_rmsnorm_case_d(Ctx *ctx, DType dt, uint64_t seed, int64_t D) {
    Tensor *o = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 3, D));
    Tensor *z = gc_random(ctx, dt, &seed, -3, 3, SHAPE(2, 3, D));
    Tensor *w = gc_random(ctx, dt, &seed, 0.5, 1.5, SHAPE(D));
    return op_gated_rmsnorm(ctx, o, z, w, 1e-5);
}
static Tensor *gated_rmsnorm_case(Ctx *ctx, DType dt, uint64_t seed) {
    return gated_rmsnorm_case_d(ctx, dt, seed, 16);
}
static Tensor *gated_rmsnorm_odd_case(Ctx *ctx, DType dt, uint64_t seed) {
    return gated_rmsnorm_case_d(ctx, dt, seed, 12);
}

const OpDef op_gated_rmsnorm_def = {"gated_rmsnorm", gated_rmsnorm_forward, gated_rmsnorm_backward,
                                    gated_rmsnorm_case, 0, 0};
const OpDef op_gated_rmsnorm_odd_def = {"gated_rmsnorm_odd", gated_rmsnorm_forward, gated_rmsnorm_backward,
                                        gated_rmsnorm_odd_case, 0, 0};

Tensor *op_gated_rmsnorm(Ctx *ctx, Tensor *o, Tensor *z, Tensor *w, double eps) {
    char d0[TENSOR_DESC_LEN], d1[TENSOR_DESC_LEN];
    op_check_float("gated_rmsnorm", "o", o, ctx->device);
    op_check_float("gated_rmsnorm", "z", z, ctx->device);
    op_check_float("gated_rmsnorm", "w", w, ctx->device);
    op_check_same_dtype("gated_rmsnorm", o, z);
    op_check_same_dtype("gated_rmsnorm", o, w);
    op_check_contiguous("gated_rmsnorm", "o", o);
    op_check_contiguous("gated_rmsnorm", "z", z);
    op_check_contiguous("gated_rmsnorm", "w", w);
    if (o->ndim < 1 || o->shape[o->ndim - 1] < 1)
        gdp_fatal("op 'gated_rmsnorm': o %s needs a non-empty last dim to normalise over",
                  tensor_describe(o, d0, sizeof d0));
    if (!tensor_same_shape(o, z))
        gdp_fatal("op 'gated_rmsnorm': o %s and z %s must have the same shape", tensor_describe(o, d0, sizeof d0),
                  tensor_describe(z, d1, sizeof d1));
    int64_t D = o->shape[o->ndim - 1];
    if (w->ndim != 1 || w->shape[0] != D)
        gdp_fatal("op 'gated_rmsnorm': w %s must be 1-D with o's last dim %lld (o is %s)",
                  tensor_describe(w, d1, sizeof d1), (long long)D, tensor_describe(o, d0, sizeof d0));
    if (!(eps >= 0) || !isfinite(eps)) gdp_fatal("op 'gated_rmsnorm': eps %g must be finite and >= 0", eps);
    int64_t rows = o->numel / D;
    Node n = node_make(&op_gated_rmsnorm_def);
    n.n_in = 3, n.in[0] = o, n.in[1] = z, n.in[2] = w;
    n.attr[0].f = eps;
    n.n_saved = 1;
    n.saved[0] = tensor_new(ctx, LIFE_ACT, ctx->device == DEV_CPU ? o->dtype : GDP_F32, 1, &rows);
    n.n_out = 1, n.out[0] = op_new_out(ctx, o, o->ndim, o->shape);
    op_run(ctx, &n);
    return n.out[0];
}
