/* op_cast: converts a float tensor to another float dtype: f32 <-> f64 on the CPU, f32 <-> bf16
 * on CUDA (a cast to the same dtype is a plain copy). Backward: da = dout converted back. */
#include "core/op_util.h"
#include "kernels/cast.h"

/* ---- CPU kernel (f32, f64, bf16 in any pair): the reference the CUDA kernel is tested against --- */

/* Any pair converts through double. */
static inline double load(DType dt, const void *p, int64_t i) {
    switch (dt) {
    case GDP_F32: return ((const float *)p)[i];
    case GDP_F64: return ((const double *)p)[i];
    case GDP_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case GDP_I32: break;
    }
    return 0;
}

static inline void store(DType dt, void *p, int64_t i, double v) {
    switch (dt) {
    case GDP_F32: ((float *)p)[i] = (float)v; break;
    case GDP_F64: ((double *)p)[i] = v; break;
    case GDP_BF16: ((uint16_t *)p)[i] = f32_to_bf16((float)v); break;
    case GDP_I32: break;
    }
}

void cast_cpu(DType dst_dt, void *dst, DType src_dt, const void *src, int64_t n, int accumulate) {
    if (dst_dt == GDP_I32 || src_dt == GDP_I32)
        gdp_fatal("kernel 'cast' converts between f32, f64 and bf16, not %s to %s", dtype_name(src_dt),
                  dtype_name(dst_dt));
    if (dst_dt == GDP_F64 && src_dt == GDP_F32 && !accumulate) { /* the common cases, without the switch */
        for (int64_t i = 0; i < n; i++) ((double *)dst)[i] = ((const float *)src)[i];
        return;
    }
    if (dst_dt == GDP_F32 && src_dt == GDP_F64 && !accumulate) {
        for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)((const double *)src)[i];
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double v = load(src_dt, src, i);
        if (accumulate) v += load(dst_dt, dst, i);
        store(dst_dt, dst, i, v);
    }
}

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

static void cast_run(Ctx *ctx, DType dst_dt, void *dst, DType src_dt, const void *src, int64_t n, int acc) {
    if (ctx->device == DEV_CPU)
        cast_cpu(dst_dt, dst, src_dt, src, n, acc);
    else
        CUDA_ONLY(cast_cuda(dst_dt, dst, src_dt, src, n, acc, ctx_stream(ctx)));
}

static void cast_forward(Ctx *ctx, Node *n) {
    Tensor *a = n->in[0], *out = n->out[0];
    cast_run(ctx, out->dtype, out->data, a->dtype, a->data, a->numel, 0);
}

static void cast_backward(Ctx *ctx, Node *n) {
    Tensor *a = n->in[0], *dout = n->out[0]->grad;
    if (!a->requires_grad) return;
    bool acc;
    Tensor *da = grad_dest(ctx, a, &acc);
    cast_run(ctx, a->dtype, da->data, dout->dtype, dout->data, a->numel, acc);
}

/* bf16 is cast up to f32 (the lossless direction, so CUDA bf16 can be compared with CPU f64);
 * f64 and f32 are "cast" to themselves, since a rounding through a narrower type would defeat
 * the finite differences (the f32 <-> f64 conversions are checked in tests/test_ops_a.c). */
static Tensor *cast_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *a = gc_random(ctx, dt, &seed, -1, 1, SHAPE(4, 6));
    return op_cast(ctx, a, dt == GDP_BF16 ? GDP_F32 : dt);
}

const OpDef op_cast_def = {"cast", cast_forward, cast_backward, cast_case, 0, 0};

Tensor *op_cast(Ctx *ctx, Tensor *a, DType dt) {
    char d[TENSOR_DESC_LEN];
    op_check_float("cast", "a", a, ctx->device);
    op_check_contiguous("cast", "a", a);
    bool ok = ctx->device == DEV_CPU ? (dt == GDP_F32 || dt == GDP_F64) : (dt == GDP_F32 || dt == GDP_BF16);
    if (!ok)
        gdp_fatal("op 'cast': cannot cast %s to %s on %s; the float dtypes there are %s",
                  tensor_describe(a, d, sizeof d), dtype_name(dt), device_name(ctx->device),
                  ctx->device == DEV_CPU ? "f32 and f64" : "f32 and bf16");
    Node n = node_make(&op_cast_def);
    n.n_in = 1, n.in[0] = a;
    n.attr[0].i = dt;
    n.n_out = 1, n.out[0] = tensor_new(ctx, LIFE_ACT, dt, a->ndim, a->shape);
    op_run(ctx, &n);
    return n.out[0];
}
