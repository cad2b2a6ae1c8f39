/* CPU reference for cast: any pair of f32, f64 and bf16, through double. */
#include "base/common.h"
#include "kernels/cast.h"

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
