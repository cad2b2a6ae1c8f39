/* op_silu, op_sigmoid, op_softplus, op_exp: y = f(x) elementwise, any shape (contiguous).
 * One kernel family (kernels/pointwise.h) with the function in attr[0]; one OpDef per op. */
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

/* Gradcheck inputs stay where bf16 keeps ~3 significant digits of f and f' (exp and softplus
 * in a range where nothing overflows or underflows). */
static Tensor *silu_case(Ctx *ctx, DType dt, uint64_t seed) {
    return op_silu(ctx, gc_random(ctx, dt, &seed, -4, 4, SHAPE(3, 2, 7)));
}
static Tensor *sigmoid_case(Ctx *ctx, DType dt, uint64_t seed) {
    return op_sigmoid(ctx, gc_random(ctx, dt, &seed, -4, 4, SHAPE(3, 2, 7)));
}
static Tensor *softplus_case(Ctx *ctx, DType dt, uint64_t seed) {
    return op_softplus(ctx, gc_random(ctx, dt, &seed, -3, 3, SHAPE(3, 2, 7)));
}
static Tensor *exp_case(Ctx *ctx, DType dt, uint64_t seed) {
    return op_exp(ctx, gc_random(ctx, dt, &seed, -2, 2, SHAPE(3, 2, 7)));
}

const OpDef op_silu_def = {"silu", pointwise_forward, pointwise_backward, silu_case, 0, 0};
const OpDef op_sigmoid_def = {"sigmoid", pointwise_forward, pointwise_backward, sigmoid_case, 0, 0};
const OpDef op_softplus_def = {"softplus", pointwise_forward, pointwise_backward, softplus_case, 0, 0};
const OpDef op_exp_def = {"exp", pointwise_forward, pointwise_backward, exp_case, 0, 0};

Tensor *op_silu(Ctx *ctx, Tensor *x) { return pointwise_run(ctx, &op_silu_def, PW_SILU, x); }
Tensor *op_sigmoid(Ctx *ctx, Tensor *x) { return pointwise_run(ctx, &op_sigmoid_def, PW_SIGMOID, x); }
Tensor *op_softplus(Ctx *ctx, Tensor *x) { return pointwise_run(ctx, &op_softplus_def, PW_SOFTPLUS, x); }
Tensor *op_exp(Ctx *ctx, Tensor *x) { return pointwise_run(ctx, &op_exp_def, PW_EXP, x); }
