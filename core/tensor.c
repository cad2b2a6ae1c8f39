#include "core/tensor.h"

#include "base/common.h"

void tensor_set_shape(Tensor *t, int ndim, const int64_t *shape) {
    GDP_CHECK(ndim >= 0 && ndim <= GDP_MAX_DIMS, "tensor of %d dims: at most %d are supported", ndim,
              GDP_MAX_DIMS);
    t->ndim = ndim;
    int64_t n = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        GDP_CHECK(shape[i] >= 0, "tensor dim %d is negative (%lld)", i, (long long)shape[i]);
        t->shape[i] = shape[i];
        t->stride[i] = n;
        n *= shape[i];
    }
    for (int i = ndim; i < GDP_MAX_DIMS; i++) t->shape[i] = 1, t->stride[i] = 0;
    t->numel = n;
}

bool tensor_is_contiguous(const Tensor *t) {
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != expect) return false;
        expect *= t->shape[i];
    }
    return true;
}

bool tensor_same_shape(const Tensor *a, const Tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

size_t tensor_bytes(const Tensor *t) { return (size_t)t->numel * dtype_size(t->dtype); }

const char *tensor_describe(const Tensor *t, char *buf, size_t len) {
    if (!t) {
        snprintf(buf, len, "NULL");
        return buf;
    }
    int off = snprintf(buf, len, "%s[", dtype_name(t->dtype));
    for (int i = 0; i < t->ndim && off < (int)len; i++)
        off += snprintf(buf + off, len - off, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    if (off < (int)len) snprintf(buf + off, len - off, "]@%s", device_name(t->device));
    return buf;
}

static int64_t offset_of(const Tensor *t, int64_t i) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->stride[d];
        i /= t->shape[d];
    }
    return off;
}

double tensor_get_host(const Tensor *t, int64_t i) {
    GDP_CHECK(t->device == DEV_CPU, "tensor_get_host on a %s tensor", device_name(t->device));
    GDP_CHECK(i >= 0 && i < t->numel, "tensor_get_host index %lld out of %lld", (long long)i,
              (long long)t->numel);
    int64_t off = offset_of(t, i);
    switch (t->dtype) {
    case GDP_F32: return ((const float *)t->data)[off];
    case GDP_F64: return ((const double *)t->data)[off];
    case GDP_BF16: return bf16_to_f32(((const uint16_t *)t->data)[off]);
    case GDP_I32: return ((const int32_t *)t->data)[off];
    }
    return 0;
}

void tensor_set_host(Tensor *t, int64_t i, double value) {
    GDP_CHECK(t->device == DEV_CPU, "tensor_set_host on a %s tensor", device_name(t->device));
    GDP_CHECK(i >= 0 && i < t->numel, "tensor_set_host index %lld out of %lld", (long long)i,
              (long long)t->numel);
    int64_t off = offset_of(t, i);
    switch (t->dtype) {
    case GDP_F32: ((float *)t->data)[off] = (float)value; break;
    case GDP_F64: ((double *)t->data)[off] = value; break;
    case GDP_BF16: ((uint16_t *)t->data)[off] = f32_to_bf16((float)value); break;
    case GDP_I32: ((int32_t *)t->data)[off] = (int32_t)value; break;
    }
}
