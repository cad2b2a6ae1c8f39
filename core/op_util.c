#include "core/op_util.h"

void op_check_not_null(const char *op, const char *arg, const Tensor *t) {
    if (!t) gdp_fatal("op '%s': input '%s' is NULL", op, arg);
}

void op_check_float(const char *op, const char *arg, const Tensor *t, Device dev) {
    char d[TENSOR_DESC_LEN];
    op_check_not_null(op, arg, t);
    if (t->device != dev)
        gdp_fatal("op '%s': input '%s' %s is on %s but the context runs on %s", op, arg,
                  tensor_describe(t, d, sizeof d), device_name(t->device), device_name(dev));
    bool ok = dev == DEV_CPU ? (t->dtype == GDP_F32 || t->dtype == GDP_F64)
                             : (t->dtype == GDP_F32 || t->dtype == GDP_BF16);
    if (!ok)
        gdp_fatal("op '%s': input '%s' %s has dtype %s; on %s use %s", op, arg, tensor_describe(t, d, sizeof d),
                  dtype_name(t->dtype), device_name(dev), dev == DEV_CPU ? "f32 or f64" : "f32 or bf16");
}

void op_check_contiguous(const char *op, const char *arg, const Tensor *t) {
    char d[TENSOR_DESC_LEN];
    if (!tensor_is_contiguous(t))
        gdp_fatal("op '%s': input '%s' %s is a strided view; call op_contiguous first", op, arg,
                  tensor_describe(t, d, sizeof d));
}

void op_check_same_dtype(const char *op, const Tensor *a, const Tensor *b) {
    char da[TENSOR_DESC_LEN], db[TENSOR_DESC_LEN];
    if (a->dtype != b->dtype)
        gdp_fatal("op '%s': inputs have different dtypes, %s and %s; cast one with op_cast", op,
                  tensor_describe(a, da, sizeof da), tensor_describe(b, db, sizeof db));
}

Tensor *op_new_out(Ctx *ctx, const Tensor *like, int ndim, const int64_t *shape) {
    return tensor_new(ctx, LIFE_ACT, like->dtype, ndim, shape);
}

int64_t op_broadcast_outer(const char *op, const Tensor *a, const Tensor *b) {
    char da[TENSOR_DESC_LEN], db[TENSOR_DESC_LEN];
    bool ok = b->ndim <= a->ndim;
    for (int i = 0; ok && i < b->ndim; i++) ok = b->shape[b->ndim - 1 - i] == a->shape[a->ndim - 1 - i];
    if (!ok)
        gdp_fatal("op '%s': cannot broadcast %s over %s: the second shape must equal the first's trailing dims", op,
                  tensor_describe(b, db, sizeof db), tensor_describe(a, da, sizeof da));
    return b->numel ? a->numel / b->numel : 0;
}
