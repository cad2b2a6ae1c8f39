/* op_conv1d_causal: depthwise causal convolution over time, x [B, T, C], w [C, W], no bias. */
#include "core/op_util.h"
#include "kernels/conv1d_causal.h"

static void conv1d_causal_forward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *w = n->in[1], *y = n->out[0];
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], W = w->shape[1];
    if (ctx->device == DEV_CPU)
        conv1d_causal_forward_cpu(x->dtype, y->data, x->data, w->data, B, T, C, W);
    else
        CUDA_ONLY(conv1d_causal_forward_cuda(x->dtype, y->data, x->data, w->data, B, T, C, W, ctx_stream(ctx)));
}

static void conv1d_causal_backward(Ctx *ctx, Node *n) {
    Tensor *x = n->in[0], *w = n->in[1], *dy = n->out[0]->grad;
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], W = w->shape[1];
    bool acc;
    if (x->requires_grad) {
        Tensor *dx = grad_dest(ctx, x, &acc);
        if (ctx->device == DEV_CPU)
            conv1d_causal_backward_dx_cpu(x->dtype, dx->data, dy->data, w->data, B, T, C, W, acc);
        else
            CUDA_ONLY(conv1d_causal_backward_dx_cuda(x->dtype, dx->data, dy->data, w->data, B, T, C, W, acc,
                                                     ctx_stream(ctx)));
    }
    if (w->requires_grad) {
        Tensor *dw = grad_dest(ctx, w, &acc);
        if (ctx->device == DEV_CPU) {
            conv1d_causal_backward_dw_cpu(x->dtype, dw->data, dy->data, x->data, B, T, C, W, acc);
        } else {
            /* Partials live in scratch until the stream-ordered final reduction has read them. */
            size_t mark = arena_mark(&ctx->scratch);
            CUDA_ONLY(conv1d_causal_backward_dw_cuda(
                x->dtype, dw->data,
                (float *)arena_alloc(&ctx->scratch, (size_t)(conv1d_causal_dw_chunks(B * T) * C * W) * sizeof(float)),
                dy->data, x->data, B, T, C, W, acc, ctx_stream(ctx)));
            arena_rewind(&ctx->scratch, mark);
        }
    }
}

static Tensor *conv1d_causal_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 7, 5));
    Tensor *w = gc_random(ctx, dt, &seed, -1, 1, SHAPE(5, 4));
    return op_conv1d_causal(ctx, x, w);
}

const OpDef op_conv1d_causal_def = {"conv1d_causal", conv1d_causal_forward, conv1d_causal_backward,
                                    conv1d_causal_case, 0, 0};

Tensor *op_conv1d_causal(Ctx *ctx, Tensor *x, Tensor *w) {
    char dx[TENSOR_DESC_LEN], dw[TENSOR_DESC_LEN];
    op_check_float("conv1d_causal", "x", x, ctx->device);
    op_check_float("conv1d_causal", "w", w, ctx->device);
    op_check_same_dtype("conv1d_causal", x, w);
    op_check_contiguous("conv1d_causal", "x", x);
    op_check_contiguous("conv1d_causal", "w", w);
    if (x->ndim != 3)
        gdp_fatal("op 'conv1d_causal': x %s must be 3-D [B, T, C]", tensor_describe(x, dx, sizeof dx));
    if (w->ndim != 2 || w->shape[0] != x->shape[2])
        gdp_fatal("op 'conv1d_causal': w %s must be [C, W] with C = x's last dim %lld (x is %s)",
                  tensor_describe(w, dw, sizeof dw), (long long)x->shape[2], tensor_describe(x, dx, sizeof dx));
    if (w->shape[1] < 1 || w->shape[1] > CONV1D_MAX_W)
        gdp_fatal("op 'conv1d_causal': kernel width W = %lld of w %s must be in [1, %d]", (long long)w->shape[1],
                  tensor_describe(w, dw, sizeof dw), CONV1D_MAX_W);
    Node n = node_make(&op_conv1d_causal_def);
    n.n_in = 2, n.in[0] = x, n.in[1] = w;
    n.n_out = 1, n.out[0] = op_new_out(ctx, x, x->ndim, x->shape);
    op_run(ctx, &n);
    return n.out[0];
}
