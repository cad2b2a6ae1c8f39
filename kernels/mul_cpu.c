/* CPU reference for mul, in float32 and float64. */
#include "kernels/mul.h"

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
