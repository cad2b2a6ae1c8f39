/* CPU reference for add, in float32 and float64 (float64 is what gradient checks use). */
#include "kernels/add.h"

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
