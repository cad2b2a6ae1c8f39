/* The pointwise ops of GDP_POINTWISE_OPS (kernels/pointwise.h): y = f(x) elementwise, any shape
 * (contiguous). One kernel family with the function in attr[0]; one OpDef per op. */
#include "core/op_util.h"
#include "kernels/pointwise.h"

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
