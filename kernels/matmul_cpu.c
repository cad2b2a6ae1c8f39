/* CPU GEMM reference: blocks of MM_MB x MM_KB of op(A) and MM_KB x MM_NB of op(B) are packed into
 * contiguous per-thread buffers (which also absorbs the transposes), then multiplied with a
 * unit-stride inner loop the compiler vectorises. Threads split (batch, row block) pairs. */
#include "core/common.h"
#include "kernels/matmul.h"

#define MM_MB 64
#define MM_KB 128
#define MM_NB 256

#define DEFINE_MATMUL(T, SUF)                                                                                  \
    static void pack_a_##SUF(T *pa, const T *a, int64_t m, int64_t k, int ta, int64_t i0, int64_t mb,         \
                             int64_t k0, int64_t kb) {                                                         \
        if (ta) /* A stored [K, M] */                                                                          \
            for (int64_t kk = 0; kk < kb; kk++)                                                                \
                for (int64_t i = 0; i < mb; i++) pa[i * kb + kk] = a[(k0 + kk) * m + i0 + i];                  \
        else                                                                                                   \
            for (int64_t i = 0; i < mb; i++)                                                                   \
                for (int64_t kk = 0; kk < kb; kk++) pa[i * kb + kk] = a[(i0 + i) * k + k0 + kk];               \
    }                                                                                                          \
    static void pack_b_##SUF(T *pb, const T *b, int64_t n, int64_t k, int tb, int64_t k0, int64_t kb,         \
                             int64_t j0, int64_t nb) {                                                         \
        if (tb) /* B stored [N, K] */                                                                          \
            for (int64_t j = 0; j < nb; j++)                                                                   \
                for (int64_t kk = 0; kk < kb; kk++) pb[kk * nb + j] = b[(j0 + j) * k + k0 + kk];               \
        else                                                                                                   \
            for (int64_t kk = 0; kk < kb; kk++)                                                                \
                for (int64_t j = 0; j < nb; j++) pb[kk * nb + j] = b[(k0 + kk) * n + j0 + j];                  \
    }                                                                                                          \
    static void matmul_##SUF(T *C, const T *A, const T *B, int64_t batch, int64_t m, int64_t n, int64_t k,    \
                             int ta, int tb, int64_t sa, int64_t sb, int64_t sc, int acc) {                    \
        int64_t mblocks = CEIL_DIV(m, MM_MB), tasks = batch * mblocks;                                         \
        double work = (double)batch * (double)m * (double)n * (double)k;                                       \
        _Pragma("omp parallel if (work > 131072.0 && tasks > 1)") {                                            \
            T *pa = (T *)xmalloc(MM_MB * MM_KB * sizeof(T));                                                   \
            T *pb = (T *)xmalloc(MM_KB * MM_NB * sizeof(T));                                                   \
            _Pragma("omp for schedule(static)") for (int64_t t = 0; t < tasks; t++) {                          \
                int64_t bi = t / mblocks, i0 = (t % mblocks) * MM_MB, mb = GDP_MIN(MM_MB, m - i0);             \
                const T *a = A + bi * sa, *b = B + bi * sb;                                                    \
                T *c = C + bi * sc;                                                                            \
                if (!acc)                                                                                      \
                    for (int64_t i = 0; i < mb; i++)                                                           \
                        for (int64_t j = 0; j < n; j++) c[(i0 + i) * n + j] = 0;                               \
                for (int64_t j0 = 0; j0 < n; j0 += MM_NB) {                                                    \
                    int64_t nb = GDP_MIN(MM_NB, n - j0);                                                       \
                    for (int64_t k0 = 0; k0 < k; k0 += MM_KB) {                                                \
                        int64_t kb = GDP_MIN(MM_KB, k - k0);                                                   \
                        pack_a_##SUF(pa, a, m, k, ta, i0, mb, k0, kb);                                         \
                        pack_b_##SUF(pb, b, n, k, tb, k0, kb, j0, nb);                                         \
                        for (int64_t i = 0; i < mb; i++) {                                                     \
                            T *restrict crow = c + (i0 + i) * n + j0;                                                \
                            const T *ar = pa + i * kb;                                                         \
                            for (int64_t kk = 0; kk < kb; kk++) {                                              \
                                T av = ar[kk];                                                                 \
                                const T *restrict br = pb + kk * nb;                                              \
                                for (int64_t j = 0; j < nb; j++) crow[j] += av * br[j];                        \
                            }                                                                                  \
                        }                                                                                      \
                    }                                                                                          \
                }                                                                                              \
            }                                                                                                  \
            free(pa);                                                                                          \
            free(pb);                                                                                          \
        }                                                                                                      \
    }
DEFINE_MATMUL(float, f32)
DEFINE_MATMUL(double, f64)

void matmul_cpu(DType dt, void *c, const void *a, const void *b, int64_t batch, int64_t m, int64_t n, int64_t k,
                int trans_a, int trans_b, int64_t stride_a, int64_t stride_b, int64_t stride_c, int accumulate) {
    if (batch <= 0 || m <= 0 || n <= 0) return;
    if (dt == GDP_F64)
        matmul_f64((double *)c, (const double *)a, (const double *)b, batch, m, n, k, trans_a, trans_b, stride_a,
                   stride_b, stride_c, accumulate);
    else if (dt == GDP_F32)
        matmul_f32((float *)c, (const float *)a, (const float *)b, batch, m, n, k, trans_a, trans_b, stride_a,
                   stride_b, stride_c, accumulate);
    else
        gdp_fatal("kernel 'matmul' on cpu supports f32 and f64, not %s", dtype_name(dt));
}
