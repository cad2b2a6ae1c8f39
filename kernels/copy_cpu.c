#include "kernels/copy.h"

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
