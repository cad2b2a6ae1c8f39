#include "layers/linear.h"

#include "base/common.h"

Tensor *linear_new(ParamMaker *pm, const char *name, int64_t in, int64_t out, double std) {
    return pm_param(pm, name, SHAPE(out, in), true, INIT_NORMAL, std, 0);
}

/* Flattening the leading dims into rows makes one 2-D product against the shared weight. */
Tensor *linear_flatten(Ctx *ctx, Tensor *x) {
    return x->ndim == 2 ? x : op_reshape(ctx, x, SHAPE(x->numel / x->shape[x->ndim - 1], x->shape[x->ndim - 1]));
}

Tensor *linear_forward_rows(Ctx *ctx, Tensor *rows, Tensor *w, const Tensor *x) {
    char dx[TENSOR_DESC_LEN], dw[TENSOR_DESC_LEN];
    GDP_CHECK(x->ndim >= 1 && w->ndim == 2 && x->shape[x->ndim - 1] == w->shape[1],
              "linear '%s': input %s does not match weight %s (the input's last dim must be the weight's second)",
              w->name, tensor_describe(x, dx, sizeof dx), tensor_describe(w, dw, sizeof dw));
    GDP_CHECK(rows->ndim == 2 && rows->numel == x->numel, "linear '%s': rows and x do not match", w->name);
    Tensor *y2 = op_matmul(ctx, rows, w, false, true);
    if (x->ndim == 2) return y2;
    int64_t shape[GDP_MAX_DIMS];
    for (int i = 0; i < x->ndim - 1; i++) shape[i] = x->shape[i];
    shape[x->ndim - 1] = w->shape[0];
    return op_reshape(ctx, y2, x->ndim, shape);
}

Tensor *linear_forward(Ctx *ctx, Tensor *x, Tensor *w) {
    GDP_CHECK(x->ndim >= 1, "linear '%s': the input has no dimensions", w->name);
    return linear_forward_rows(ctx, linear_flatten(ctx, x), w, x);
}
