/* CPU reference for scale, in float32 and float64. */
#include "kernels/scale.h"

#define DEFINE_SCALE(T, SUF)                                                                      \
    static void scale_##SUF(T *out, const T *a, T alpha, int64_t n, int accumulate) {             \
        if (accumulate)                                                                           \
            for (int64_t i = 0; i < n; i++) out[i] += alpha * a[i];                               \
        else                                                                                      \
            for (int64_t i = 0; i < n; i++) out[i] = alpha * a[i];                                \
    }
DEFINE_SCALE(float, f32)
DEFINE_SCALE(double, f64)

void scale_cpu(DType dt, void *out, const void *a, double alpha, int64_t n, int accumulate) {
    if (dt == GDP_F64)
        scale_f64((double *)out, (const double *)a, alpha, n, accumulate);
    else
        scale_f32((float *)out, (const float *)a, (float)alpha, n, accumulate);
}
