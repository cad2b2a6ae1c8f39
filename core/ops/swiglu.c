/* op_swiglu: y = silu(a) * b elementwise (the MLP gate), one fused kernel each way. */
#include <math.h>

#include "core/op_util.h"
#include "core/ops_fused.h"
#include "kernels/swiglu.h"

/* ---- CPU kernels (f32, f64): the reference every CUDA kernel is tested against --------------- */

#define DEFINE_SWIGLU(T, SUF, EXP)                                                                        \
    static inline T sig_##SUF(T x) {                                                                      \
        if (x >= 0) return (T)1 / ((T)1 + EXP(-x));                                                       \
        T e = EXP(x);                                                                                     \
        return e / ((T)1 + e);                                                                            \
    }                                                                                                     \
    static void swiglu_fwd_##SUF(T *y, const T *a, const T *b, int64_t n) {                               \
        for (int64_t i = 0; i < n; i++) y[i] = a[i] * sig_##SUF(a[i]) * b[i];                             \
    }                                                                                                     \
    static void swiglu_bwd_##SUF(T *da, T *db, const T *dy, const T *a, const T *b, int64_t n, int acc_a, \
                                 int acc_b) {                                                             \
        for (int64_t i = 0; i < n; i++) {                                                                 \
            T s = sig_##SUF(a[i]);                                                                        \
            if (da) {                                                                                     \
                T g = dy[i] * b[i] * s * ((T)1 + a[i] * ((T)1 - s));                                      \
                da[i] = acc_a ? da[i] + g : g;                                                            \
            }                                                                                             \
            if (db) {                                                                                     \
                T g = dy[i] * a[i] * s;                                                                   \
                db[i] = acc_b ? db[i] + g : g;                                                            \
            }                                                                                             \
        }                                                                                                 \
    }
DEFINE_SWIGLU(float, f32, expf)
DEFINE_SWIGLU(double, f64, exp)

void swiglu_forward_cpu(DType dt, void *y, const void *a, const void *b, int64_t n) {
    if (dt == GDP_F64)
        swiglu_fwd_f64((double *)y, (const double *)a, (const double *)b, n);
    else
        swiglu_fwd_f32((float *)y, (const float *)a, (const float *)b, n);
}

void swiglu_backward_cpu(DType dt, void *da, void *db, const void *dy, const void *a, const void *b, int64_t n,
                         int acc_a, int acc_b) {
    if (dt == GDP_F64)
        swiglu_bwd_f64((double *)da, (double *)db, (const double *)dy, (const double *)a, (const double *)b, n, acc_a,
                       acc_b);
    else
        swiglu_bwd_f32((float *)da, (float *)db, (const float *)dy, (const float *)a, (const float *)b, n, acc_a,
                       acc_b);
}

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

static void swiglu_forward(Ctx *ctx, Node *n) {
    Tensor *a = n->in[0], *b = n->in[1], *y = n->out[0];
    if (ctx->device == DEV_CPU)
        swiglu_forward_cpu(a->dtype, y->data, a->data, b->data, a->numel);
    else
        CUDA_ONLY(swiglu_forward_cuda(a->dtype, y->data, a->data, b->data, a->numel, ctx_stream(ctx)));
}

static void swiglu_backward(Ctx *ctx, Node *n) {
    Tensor *a = n->in[0], *b = n->in[1], *dy = n->out[0]->grad;
    bool acc_a = false, acc_b = false;
    /* a and b may be one tensor: then db == da, the second grad_dest reports "accumulate", and
     * each element's da term is written before its db term is added (same thread, in order). */
    Tensor *da = a->requires_grad ? grad_dest(ctx, a, &acc_a) : NULL;
    Tensor *db = b->requires_grad ? grad_dest(ctx, b, &acc_b) : NULL;
    void *dad = da ? da->data : NULL, *dbd = db ? db->data : NULL;
    if (ctx->device == DEV_CPU)
        swiglu_backward_cpu(a->dtype, dad, dbd, dy->data, a->data, b->data, a->numel, acc_a, acc_b);
    else
        CUDA_ONLY(swiglu_backward_cuda(a->dtype, dad, dbd, dy->data, a->data, b->data, a->numel, acc_a, acc_b,
                                       ctx_stream(ctx)));
}

static Tensor *swiglu_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *a = gc_random(ctx, dt, &seed, -3, 3, SHAPE(3, 2, 7));
    Tensor *b = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 2, 7));
    return op_swiglu(ctx, a, b);
}

/* 16-byte-aligned rows of a multiple of 8 (CUDA's packed kernels), used twice so that the second
 * backward accumulates into a's and b's gradients. */
static Tensor *swiglu_packed_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *a = gc_random(ctx, dt, &seed, -3, 3, SHAPE(3, 2, 16));
    Tensor *b = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 2, 16));
    return op_add(ctx, op_swiglu(ctx, a, b), op_scale(ctx, op_swiglu(ctx, a, b), 0.5));
}

const OpDef op_swiglu_def = {"swiglu", swiglu_forward, swiglu_backward, swiglu_case, 0, 0};
const OpDef op_swiglu_packed_def = {"swiglu_packed", swiglu_forward, swiglu_backward, swiglu_packed_case, 0, 0};

Tensor *op_swiglu(Ctx *ctx, Tensor *a, Tensor *b) {
    char da[TENSOR_DESC_LEN], db[TENSOR_DESC_LEN];
    op_check_float("swiglu", "a", a, ctx->device);
    op_check_float("swiglu", "b", b, ctx->device);
    op_check_same_dtype("swiglu", a, b);
    op_check_contiguous("swiglu", "a", a);
    op_check_contiguous("swiglu", "b", b);
    if (!tensor_same_shape(a, b))
        gdp_fatal("op 'swiglu': a %s and b %s must have the same shape", tensor_describe(a, da, sizeof da),
                  tensor_describe(b, db, sizeof db));
    Node n = node_make(&op_swiglu_def);
    n.n_in = 2, n.in[0] = a, n.in[1] = b;
    n.n_out = 1, n.out[0] = op_new_out(ctx, a, a->ndim, a->shape);
    op_run(ctx, &n);
    return n.out[0];
}
