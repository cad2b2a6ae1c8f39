/* Views: reshape and transpose share their input's memory; only the header is new. */
#include "core/op_util.h"

static void view_forward(Ctx *ctx, Node *n) { (void)ctx, (void)n; /* the view was made when the node was */ }

static void reshape_backward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *g = n->out[0]->grad;
    if (!x->requires_grad) return;
    grad_pass(ctx, x, tensor_view(ctx, g, x->ndim, x->shape, x->stride, 0));
}

static Tensor *reshape_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 6));
    return op_reshape(ctx, x, SHAPE(3, 4));
}

const OpDef op_reshape_def = {"reshape", view_forward, reshape_backward, reshape_case, 0, 0};

Tensor *op_reshape(Ctx *ctx, Tensor *x, int ndim, const int64_t *shape) {
    char d[TENSOR_DESC_LEN];
    op_check_not_null("reshape", "x", x);
    op_check_contiguous("reshape", "x", x);
    Tensor tmp = {0};
    tensor_set_shape(&tmp, ndim, shape);
    if (tmp.numel != x->numel)
        gdp_fatal("op 'reshape': %s has %lld elements, the new shape has %lld", tensor_describe(x, d, sizeof d),
                  (long long)x->numel, (long long)tmp.numel);
    Node n = node_make(&op_reshape_def);
    n.n_in = 1, n.in[0] = x;
    n.n_out = 1, n.out[0] = tensor_view(ctx, x, ndim, shape, tmp.stride, 0);
    op_run(ctx, &n);
    return n.out[0];
}

static Tensor *swapped_view(Ctx *ctx, const Tensor *x, int d0, int d1) {
    int64_t shape[GDP_MAX_DIMS], stride[GDP_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[i], stride[i] = x->stride[i];
    shape[d0] = x->shape[d1], stride[d0] = x->stride[d1];
    shape[d1] = x->shape[d0], stride[d1] = x->stride[d0];
    return tensor_view(ctx, x, x->ndim, shape, stride, 0);
}

static void transpose_backward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0];
    if (!x->requires_grad) return;
    grad_write(ctx, x, swapped_view(ctx, n->out[0]->grad, (int)n->attr[0].i, (int)n->attr[1].i));
}

static Tensor *transpose_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 3, 4));
    return op_contiguous(ctx, op_transpose(ctx, x, 1, 2));
}

const OpDef op_transpose_def = {"transpose", view_forward, transpose_backward, transpose_case, 0, 0};

Tensor *op_transpose(Ctx *ctx, Tensor *x, int d0, int d1) {
    char d[TENSOR_DESC_LEN];
    op_check_not_null("transpose", "x", x);
    if (d0 < 0) d0 += x->ndim;
    if (d1 < 0) d1 += x->ndim;
    if (d0 < 0 || d1 < 0 || d0 >= x->ndim || d1 >= x->ndim)
        gdp_fatal("op 'transpose': dims %d and %d do not exist in %s", d0, d1, tensor_describe(x, d, sizeof d));
    Node n = node_make(&op_transpose_def);
    n.n_in = 1, n.in[0] = x;
    n.attr[0].i = d0, n.attr[1].i = d1;
    n.n_out = 1, n.out[0] = swapped_view(ctx, x, d0, d1);
    op_run(ctx, &n);
    return n.out[0];
}
