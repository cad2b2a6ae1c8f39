/* op_scale: alpha * a. Backward: da = alpha * dout. */
#include <math.h>

#include "core/op_util.h"
#include "kernels/scale.h"

/* ---- CPU kernels (f32, f64): the reference every CUDA kernel is tested against --------------- */

#define DEFINE_SCALE(T, SUF)                                                                      \
    static void scale_##SUF(T *out, const T *a, T alpha, int64_t n, int accumulate) {             \
        if (accumulate)                                                                           \
            for (int64_t i = 0; i < n; i++) out[i] += alpha * a[i];                               \
        else                                                                                      \
            for (int64_t i = 0; i < n; i++) out[i] = alpha * a[i];                                \
    }
DEFINE_SCALE(float, f32)
DEFINE_SCALE(double, f64)

void scale_cpu(DType dt, void *out, const void *a, double alpha, int64_t n, int accumulate) {
    if (dt == GDP_F64)
        scale_f64((double *)out, (const double *)a, alpha, n, accumulate);
    else
        scale_f32((float *)out, (const float *)a, (float)alpha, n, accumulate);
}

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

static void scale_run(Ctx *ctx, DType dt, void *out, const void *a, double alpha, int64_t n, int accumulate) {
    if (ctx->device == DEV_CPU)
        scale_cpu(dt, out, a, alpha, n, accumulate);
    else
        CUDA_ONLY(scale_cuda(dt, out, a, alpha, n, accumulate, ctx_stream(ctx)));
}

static void scale_forward(Ctx *ctx, Node *n) {
    Tensor *a = n->in[0], *out = n->out[0];
    scale_run(ctx, a->dtype, out->data, a->data, n->attr[0].f, a->numel, 0);
}

static void scale_backward(Ctx *ctx, Node *n) {
    Tensor *a = n->in[0], *dout = n->out[0]->grad;
    if (!a->requires_grad) return;
    bool acc;
    Tensor *da = grad_dest(ctx, a, &acc);
    scale_run(ctx, a->dtype, da->data, dout->data, n->attr[0].f, a->numel, acc);
}

static Tensor *scale_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *a = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 7));
    return op_scale(ctx, a, -0.75);
}

const OpDef op_scale_def = {"scale", scale_forward, scale_backward, scale_case, 0, 0};

Tensor *op_scale(Ctx *ctx, Tensor *a, double alpha) {
    op_check_float("scale", "a", a, ctx->device);
    op_check_contiguous("scale", "a", a);
    if (!isfinite(alpha)) gdp_fatal("op 'scale': alpha is %g; it must be a finite number", alpha);
    Node n = node_make(&op_scale_def);
    n.n_in = 1, n.in[0] = a;
    n.attr[0].f = alpha;
    n.n_out = 1, n.out[0] = op_new_out(ctx, a, a->ndim, a->shape);
    op_run(ctx, &n);
    return n.out[0];
}
