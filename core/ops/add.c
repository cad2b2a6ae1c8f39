/* op_add: a + b with b broadcast over a's leading dims. The model of an op's node file: its CPU
 * kernels, then the argument checks, the outputs, the dispatch to those kernels or to the CUDA ones
 * (kernels/add.cu), the backward and the gradcheck case.
 * On CUDA, b may be bf16 of a's shape when a is f32 (a bf16 branch into the f32 residual stream):
 * the output is f32 and b's gradient is dout rounded to bf16. */
#include "core/op_util.h"
#include "kernels/add.h"
#include "kernels/cast.h"

/* ---- CPU kernels (f32, f64): the reference every CUDA kernel is tested against --------------- */

#define DEFINE_ADD(T, SUF)                                                                              \
    static void add_fwd_##SUF(T *out, const T *a, const T *b, int64_t outer, int64_t inner) {          \
        for (int64_t o = 0; o < outer; o++)                                                             \
            for (int64_t j = 0; j < inner; j++) out[o * inner + j] = a[o * inner + j] + b[j];           \
    }                                                                                                   \
    static void add_bwd_b_##SUF(T *db, const T *dout, int64_t outer, int64_t inner, int accumulate) {  \
        for (int64_t j = 0; j < inner; j++) {                                                           \
            T s = 0;                                                                                    \
            for (int64_t o = 0; o < outer; o++) s += dout[o * inner + j];                               \
            db[j] = accumulate ? db[j] + s : s;                                                         \
        }                                                                                               \
    }
DEFINE_ADD(float, f32)
DEFINE_ADD(double, f64)

void add_forward_cpu(DType dt, void *out, const void *a, const void *b, int64_t outer, int64_t inner) {
    if (dt == GDP_F64)
        add_fwd_f64((double *)out, (const double *)a, (const double *)b, outer, inner);
    else
        add_fwd_f32((float *)out, (const float *)a, (const float *)b, outer, inner);
}

void add_backward_b_cpu(DType dt, void *db, const void *dout, int64_t outer, int64_t inner, int accumulate) {
    if (dt == GDP_F64)
        add_bwd_b_f64((double *)db, (const double *)dout, outer, inner, accumulate);
    else
        add_bwd_b_f32((float *)db, (const float *)dout, outer, inner, accumulate);
}

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

static void add_forward(Ctx *ctx, Node *n) {
    Tensor *a = n->in[0], *b = n->in[1], *out = n->out[0];
    int64_t outer = n->attr[0].i, inner = b->numel;
    if (ctx->device == DEV_CPU)
        add_forward_cpu(a->dtype, out->data, a->data, b->data, outer, inner);
    else
        CUDA_ONLY(add_forward_cuda(a->dtype, b->dtype, out->data, a->data, b->data, outer, inner, ctx_stream(ctx)));
}

static void add_backward(Ctx *ctx, Node *n) {
    Tensor *a = n->in[0], *b = n->in[1], *dout = n->out[0]->grad;
    /* b first: a may then take dout's memory as its gradient (no copy), since nothing else reads it */
    if (b->requires_grad) {
        bool acc;
        Tensor *db = grad_dest(ctx, b, &acc);
        int64_t outer = n->attr[0].i, inner = b->numel;
        if (ctx->device == DEV_CPU)
            add_backward_b_cpu(b->dtype, db->data, dout->data, outer, inner, acc);
        else if (b->dtype != dout->dtype)
            CUDA_ONLY(cast_cuda(b->dtype, db->data, dout->dtype, dout->data, b->numel, acc, ctx_stream(ctx)));
        else
            CUDA_ONLY(add_backward_b_cuda(b->dtype, db->data, dout->data, outer, inner, acc, ctx_stream(ctx)));
    }
    if (a->requires_grad) grad_pass(ctx, a, dout);
}

static Tensor *add_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *a = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 3, 5));
    Tensor *b = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 5));
    return op_add(ctx, a, b);
}

/* On CUDA in bf16: f32 a plus bf16 b of its shape (the mixed kernel); elsewhere plain. Rows of 8:
 * CUDA's 8-at-a-time loop (add_case's rows of 5 take the other). */
static Tensor *add_bf16_to_f32_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *a = gc_random(ctx, dt == GDP_BF16 ? GDP_F32 : dt, &seed, -1, 1, SHAPE(2, 3, 8));
    Tensor *b = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 3, 8));
    return op_add(ctx, a, b);
}

/* b broadcast with rows of 8 (the 8-at-a-time loop's modulo). */
static Tensor *add_by8_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *a = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 3, 8));
    Tensor *b = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 8));
    return op_add(ctx, a, b);
}

const OpDef op_add_def = {"add", add_forward, add_backward, add_case, 0, 0};
const OpDef op_add_bf16_to_f32_def = {"add_bf16_to_f32", add_forward, add_backward, add_bf16_to_f32_case, 0, 0};
const OpDef op_add_by8_def = {"add_by8", add_forward, add_backward, add_by8_case, 0, 0};

Tensor *op_add(Ctx *ctx, Tensor *a, Tensor *b) {
    op_check_float("add", "a", a, ctx->device);
    op_check_float("add", "b", b, ctx->device);
    const bool bf16_into_f32 = ctx->device == DEV_CUDA && a->dtype == GDP_F32 && b->dtype == GDP_BF16 &&
                               tensor_same_shape(a, b);
    if (!bf16_into_f32) op_check_same_dtype("add", a, b);
    op_check_contiguous("add", "a", a);
    op_check_contiguous("add", "b", b);
    Node n = node_make(&op_add_def);
    n.n_in = 2, n.in[0] = a, n.in[1] = b;
    n.attr[0].i = op_broadcast_outer("add", a, b);
    n.n_out = 1, n.out[0] = op_new_out(ctx, a, a->ndim, a->shape);
    op_run(ctx, &n);
    return n.out[0];
}
