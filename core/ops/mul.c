/* op_mul: a * b with b broadcast over a's leading dims (b's shape = a's trailing dims).
 * Backward: da = dout * b (b broadcast), db = sum over the leading dims of dout * a. */
#include "core/op_util.h"
#include "kernels/mul.h"

/* ---- CPU kernels (f32, f64): the reference every CUDA kernel is tested against --------------- */

#define DEFINE_MUL(T, SUF)                                                                                     \
    static void mul_fwd_##SUF(T *out, const T *a, const T *b, int64_t outer, int64_t inner, int accumulate) { \
        for (int64_t o = 0; o < outer; o++)                                                                    \
            for (int64_t j = 0; j < inner; j++) {                                                              \
                T v = a[o * inner + j] * b[j];                                                                 \
                out[o * inner + j] = accumulate ? out[o * inner + j] + v : v;                                  \
            }                                                                                                  \
    }                                                                                                          \
    static void mul_bwd_b_##SUF(T *db, const T *dout, const T *a, int64_t outer, int64_t inner, int accumulate) { \
        for (int64_t j = 0; j < inner; j++) {                                                                  \
            T s = 0;                                                                                           \
            for (int64_t o = 0; o < outer; o++) s += dout[o * inner + j] * a[o * inner + j];                   \
            db[j] = accumulate ? db[j] + s : s;                                                                \
        }                                                                                                      \
    }
DEFINE_MUL(float, f32)
DEFINE_MUL(double, f64)

void mul_forward_cpu(DType dt, void *out, const void *a, const void *b, int64_t outer, int64_t inner, int accumulate) {
    if (dt == GDP_F64)
        mul_fwd_f64((double *)out, (const double *)a, (const double *)b, outer, inner, accumulate);
    else
        mul_fwd_f32((float *)out, (const float *)a, (const float *)b, outer, inner, accumulate);
}

void mul_backward_b_cpu(DType dt, void *db, const void *dout, const void *a, int64_t outer, int64_t inner,
                        int accumulate) {
    if (dt == GDP_F64)
        mul_bwd_b_f64((double *)db, (const double *)dout, (const double *)a, outer, inner, accumulate);
    else
        mul_bwd_b_f32((float *)db, (const float *)dout, (const float *)a, outer, inner, accumulate);
}

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

static void mul_forward(Ctx *ctx, Node *n) {
    Tensor *a = n->in[0], *b = n->in[1], *out = n->out[0];
    int64_t outer = n->attr[0].i, inner = b->numel;
    if (ctx->device == DEV_CPU)
        mul_forward_cpu(a->dtype, out->data, a->data, b->data, outer, inner, 0);
    else
        CUDA_ONLY(mul_forward_cuda(a->dtype, out->data, a->data, b->data, outer, inner, 0, ctx_stream(ctx)));
}

static void mul_backward(Ctx *ctx, Node *n) {
    Tensor *a = n->in[0], *b = n->in[1], *dout = n->out[0]->grad;
    int64_t outer = n->attr[0].i, inner = b->numel;
    bool acc;
    if (a->requires_grad) {
        Tensor *da = grad_dest(ctx, a, &acc);
        if (ctx->device == DEV_CPU)
            mul_forward_cpu(a->dtype, da->data, dout->data, b->data, outer, inner, acc);
        else
            CUDA_ONLY(mul_forward_cuda(a->dtype, da->data, dout->data, b->data, outer, inner, acc, ctx_stream(ctx)));
    }
    if (b->requires_grad) {
        Tensor *db = grad_dest(ctx, b, &acc);
        if (ctx->device == DEV_CPU)
            mul_backward_b_cpu(b->dtype, db->data, dout->data, a->data, outer, inner, acc);
        else
            CUDA_ONLY(mul_backward_b_cuda(b->dtype, db->data, dout->data, a->data, outer, inner, acc, ctx_stream(ctx)));
    }
}

/* Both forms: b of a's whole shape, then c broadcast over the leading dim. */
static Tensor *mul_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *a = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 3, 5));
    Tensor *b = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 3, 5));
    Tensor *c = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 5));
    return op_mul(ctx, op_mul(ctx, a, b), c);
}

const OpDef op_mul_def = {"mul", mul_forward, mul_backward, mul_case, 0, 0};

Tensor *op_mul(Ctx *ctx, Tensor *a, Tensor *b) {
    op_check_float("mul", "a", a, ctx->device);
    op_check_float("mul", "b", b, ctx->device);
    op_check_same_dtype("mul", a, b);
    op_check_contiguous("mul", "a", a);
    op_check_contiguous("mul", "b", b);
    Node n = node_make(&op_mul_def);
    n.n_in = 2, n.in[0] = a, n.in[1] = b;
    n.attr[0].i = op_broadcast_outer("mul", a, b);
    n.n_out = 1, n.out[0] = op_new_out(ctx, a, a->ndim, a->shape);
    op_run(ctx, &n);
    return n.out[0];
}
