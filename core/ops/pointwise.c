/* The pointwise ops of GDP_POINTWISE_OPS (kernels/pointwise.h): y = f(x) elementwise, any shape
 * (contiguous). One kernel family with the function in attr[0]; one OpDef per op. */
#include <math.h>

#include "core/op_util.h"
#include "kernels/pointwise.h"

/* ---- CPU kernels (f32, f64): the reference every CUDA kernel is tested against --------------- */

#define DEFINE_PW(T, SUF, EXP, LOG1P, FABS)                                                           \
    static inline T sigmoid_##SUF(T x) {                                                              \
        if (x >= 0) return (T)1 / ((T)1 + EXP(-x));                                                   \
        T e = EXP(x);                                                                                 \
        return e / ((T)1 + e);                                                                        \
    }                                                                                                 \
    static inline T pw_f_##SUF(PointwiseFn fn, T x) {                                                 \
        switch (fn) {                                                                                 \
        case PW_SILU: return x * sigmoid_##SUF(x);                                                    \
        case PW_SIGMOID: return sigmoid_##SUF(x);                                                     \
        case PW_SOFTPLUS: return (x > 0 ? x : (T)0) + LOG1P(EXP(-FABS(x)));                           \
        case PW_EXP: return EXP(x);                                                                   \
        }                                                                                             \
        return 0;                                                                                     \
    }                                                                                                 \
    static inline T pw_df_##SUF(PointwiseFn fn, T x) {                                                \
        T s;                                                                                          \
        switch (fn) {                                                                                 \
        case PW_SILU: s = sigmoid_##SUF(x); return s * ((T)1 + x * ((T)1 - s));                       \
        case PW_SIGMOID: s = sigmoid_##SUF(x); return s * ((T)1 - s);                                 \
        case PW_SOFTPLUS: return sigmoid_##SUF(x);                                                    \
        case PW_EXP: return EXP(x);                                                                   \
        }                                                                                             \
        return 0;                                                                                     \
    }                                                                                                 \
    static void pw_fwd_##SUF(PointwiseFn fn, T *y, const T *x, int64_t n) {                           \
        for (int64_t i = 0; i < n; i++) y[i] = pw_f_##SUF(fn, x[i]);                                  \
    }                                                                                                 \
    static void pw_bwd_##SUF(PointwiseFn fn, T *dx, const T *dy, const T *x, int64_t n, int acc) {    \
        for (int64_t i = 0; i < n; i++) {                                                             \
            T g = dy[i] * pw_df_##SUF(fn, x[i]);                                                      \
            dx[i] = acc ? dx[i] + g : g;                                                              \
        }                                                                                             \
    }
DEFINE_PW(float, f32, expf, log1pf, fabsf)
DEFINE_PW(double, f64, exp, log1p, fabs)

void pointwise_forward_cpu(PointwiseFn fn, DType dt, void *y, const void *x, int64_t n) {
    if (dt == GDP_F64)
        pw_fwd_f64(fn, (double *)y, (const double *)x, n);
    else
        pw_fwd_f32(fn, (float *)y, (const float *)x, n);
}

void pointwise_backward_cpu(PointwiseFn fn, DType dt, void *dx, const void *dy, const void *x, int64_t n,
                            int accumulate) {
    if (dt == GDP_F64)
        pw_bwd_f64(fn, (double *)dx, (const double *)dy, (const double *)x, n, accumulate);
    else
        pw_bwd_f32(fn, (float *)dx, (const float *)dy, (const float *)x, n, accumulate);
}

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

static void pointwise_forward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *y = n->out[0];
    PointwiseFn fn = (PointwiseFn)n->attr[0].i;
    if (ctx->device == DEV_CPU)
        pointwise_forward_cpu(fn, x->dtype, y->data, x->data, x->numel);
    else
        CUDA_ONLY(pointwise_forward_cuda(fn, x->dtype, y->data, x->data, x->numel, ctx_stream(ctx)));
}

static void pointwise_backward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *dy = n->out[0]->grad;
    if (!x->requires_grad) return;
    PointwiseFn fn = (PointwiseFn)n->attr[0].i;
    bool acc;
    Tensor *dx = grad_dest(ctx, x, &acc);
    if (ctx->device == DEV_CPU)
        pointwise_backward_cpu(fn, x->dtype, dx->data, dy->data, x->data, x->numel, acc);
    else
        CUDA_ONLY(pointwise_backward_cuda(fn, x->dtype, dx->data, dy->data, x->data, x->numel, acc, ctx_stream(ctx)));
}

static Tensor *pointwise_run(Ctx *ctx, const OpDef *def, PointwiseFn fn, Tensor *x) {
    op_check_float(def->name, "x", x, ctx->device);
    op_check_contiguous(def->name, "x", x);
    Node n = node_make(def);
    n.n_in = 1, n.in[0] = x;
    n.attr[0].i = fn;
    n.n_out = 1, n.out[0] = op_new_out(ctx, x, x->ndim, x->shape);
    op_run(ctx, &n);
    return n.out[0];
}

#define PW_OP(E, name, lo, hi)                                                                   \
    static Tensor *name##_case(Ctx *ctx, DType dt, uint64_t seed) {                                  \
        return op_##name(ctx, gc_random(ctx, dt, &seed, lo, hi, SHAPE(3, 2, 7)));                    \
    }                                                                                                \
    const OpDef op_##name##_def = {#name, pointwise_forward, pointwise_backward, name##_case, 0, 0}; \
    Tensor *op_##name(Ctx *ctx, Tensor *x) { return pointwise_run(ctx, &op_##name##_def, PW_##E, x); }
GDP_POINTWISE_OPS(PW_OP)
