/* Gradient plumbing (copy or accumulate) and the contiguous-copy op. */
#include "core/op_util.h"
#include "kernels/copy.h"

/* ---- CPU kernel (f32, f64, i32, bf16): the reference the CUDA kernel is tested against ------- */

static inline int64_t src_offset(const StridedLayout *l, int64_t i) {
    int64_t off = 0;
    for (int d = l->ndim - 1; d >= 0; d--) {
        off += (i % l->shape[d]) * l->stride[d];
        i /= l->shape[d];
    }
    return off;
}

#define DEFINE_COPY(T, NAME)                                                                      \
    static void NAME(T *dst, const T *src, const StridedLayout *l, int64_t n, int accumulate) {   \
        for (int64_t i = 0; i < n; i++) {                                                         \
            T v = src[src_offset(l, i)];                                                          \
            dst[i] = accumulate ? dst[i] + v : v;                                                 \
        }                                                                                         \
    }
DEFINE_COPY(float, copy_f32)
DEFINE_COPY(double, copy_f64)
DEFINE_COPY(int32_t, copy_i32)

void copy_strided_cpu(DType dt, void *dst, const void *src, StridedLayout l, int64_t n, int accumulate) {
    switch (dt) {
    case GDP_F32: copy_f32((float *)dst, (const float *)src, &l, n, accumulate); break;
    case GDP_F64: copy_f64((double *)dst, (const double *)src, &l, n, accumulate); break;
    case GDP_I32: copy_i32((int32_t *)dst, (const int32_t *)src, &l, n, accumulate); break;
    case GDP_BF16: {
        uint16_t *d = (uint16_t *)dst;
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) {
            float v = bf16_to_f32(s[src_offset(&l, i)]);
            d[i] = f32_to_bf16(accumulate ? bf16_to_f32(d[i]) + v : v);
        }
        break;
    }
    }
}

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

static StridedLayout layout_of(const Tensor *t) {
    StridedLayout l;
    memset(&l, 0, sizeof l);
    l.ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) l.shape[i] = t->shape[i], l.stride[i] = t->stride[i];
    return l;
}

static void copy_into(Ctx *ctx, Tensor *dst, const Tensor *src, bool accumulate) {
    if (dst->device == DEV_CPU)
        copy_strided_cpu(dst->dtype, dst->data, src->data, layout_of(src), src->numel, accumulate);
    else
        CUDA_ONLY(copy_strided_cuda(dst->dtype, dst->data, src->data, layout_of(src), src->numel, accumulate,
                                    ctx_stream(ctx)));
}

void op_copy_or_accumulate(Ctx *ctx, Tensor *dst, const Tensor *src, bool accumulate) {
    char a[TENSOR_DESC_LEN], b[TENSOR_DESC_LEN];
    GDP_CHECK(dst && src, "op_copy_or_accumulate: NULL tensor");
    GDP_CHECK(dst->numel == src->numel && dst->dtype == src->dtype && dst->device == src->device,
              "op_copy_or_accumulate: %s into %s: shapes, dtypes or devices differ", tensor_describe(src, a, sizeof a),
              tensor_describe(dst, b, sizeof b));
    GDP_CHECK(tensor_is_contiguous(dst), "op_copy_or_accumulate: destination %s is strided",
              tensor_describe(dst, b, sizeof b));
    copy_into(ctx, dst, src, accumulate);
}

void grad_write(Ctx *ctx, Tensor *t, const Tensor *g) {
    bool acc;
    Tensor *dst = grad_dest(ctx, t, &acc);
    op_copy_or_accumulate(ctx, dst, g, acc);
}

void grad_pass(Ctx *ctx, Tensor *t, const Tensor *g) {
    if (!t->grad && !t->is_param && g->dtype == t->dtype && g->numel == t->numel && tensor_is_contiguous(g)) {
        t->grad = tensor_view(ctx, g, t->ndim, t->shape, t->stride, 0);
        t->grad_written = true;
        return;
    }
    grad_write(ctx, t, g);
}

static void contiguous_forward(Ctx *ctx, Node *n) { copy_into(ctx, n->out[0], n->in[0], false); }

static void contiguous_backward(Ctx *ctx, Node *n) {
    /* Gradients are always contiguous in their tensor's logical shape, so the gradient of a
     * strided input is a plain copy; the view op that made the stride maps it to its base. */
    if (n->in[0]->requires_grad) grad_write(ctx, n->in[0], n->out[0]->grad);
}

static Tensor *contiguous_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 4, 5));
    return op_contiguous(ctx, op_transpose(ctx, x, 0, 2));
}

const OpDef op_contiguous_def = {"contiguous", contiguous_forward, contiguous_backward, contiguous_case, 0, 0};

Tensor *op_contiguous(Ctx *ctx, Tensor *x) {
    op_check_not_null("contiguous", "x", x);
    Node n = node_make(&op_contiguous_def);
    n.n_in = 1, n.in[0] = x;
    n.n_out = 1, n.out[0] = op_new_out(ctx, x, x->ndim, x->shape);
    op_run(ctx, &n);
    return n.out[0];
}
