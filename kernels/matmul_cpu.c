/* CPU GEMM: C (+)= op(A) op(B), per batch entry. Work is split into (batch, column block, row
 * chunk) tasks over the threads, with only as many row chunks as the threads need. A task packs each
 * MM_KB-deep slice of op(B) once into panels of NR columns, and for each row block of its chunk the
 * slice of op(A) into panels of MR rows (the packing absorbs the transposes and zero-pads the
 * edges); a register-blocked micro-kernel accumulates each MR x NR tile of C in vector registers
 * over the slice before adding it to C. Each element of C sums its k slices in order and each slice in
 * k order, so the result does not depend on the number of threads.
 * The micro-kernel uses GCC's vector extensions (32-byte vectors: SSE2 pairs, or AVX registers
 * where the build targets them). An axpy-style inner loop (C row += a * B row, C through memory)
 * ran at ~2.7 GFLOP/s on 2 cores. */
#include <omp.h>
#include <string.h>

#include "base/common.h"
#include "kernels/matmul.h"

/* rows of a micro tile: six accumulators, one B vector and A's broadcast fit the 16 AVX registers
 * (with SSE2's pairs of registers GCC spills some, and six rows still ran faster than four) */
#define MM_MR 6
#define MM_EACH_ROW(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define MM_ACC_DECL(r) __typeof__(zero) c##r = zero;
#define MM_ACC_STEP(r) c##r += pa[r] * bv;
#define MM_ACC_LIST(r) c##r,
#define MM_MB 48  /* rows of a row block: 8 micro panels */
#define MM_NB 256 /* columns of a task */
#define MM_KB 256 /* depth of a packed slice */

typedef float vec_f32 __attribute__((vector_size(32)));
typedef double vec_f64 __attribute__((vector_size(32)));

#define DEFINE_MATMUL(T, SUF, VT)                                                                              \
    enum { NR_##SUF = (int)(sizeof(VT) / sizeof(T)) };                                                         \
    /* rows i0 .. i0+mb of op(A), depth k0 .. k0+kb, as panels pa[p][kk][r] of MM_MR rows */                   \
    static void pack_a_##SUF(T *pa, const T *a, int64_t m, int64_t k, int ta, int64_t i0, int64_t mb,         \
                             int64_t k0, int64_t kb) {                                                         \
        for (int64_t p = 0; p < mb; p += MM_MR)                                                                \
            for (int64_t kk = 0; kk < kb; kk++)                                                                \
                for (int64_t r = 0; r < MM_MR; r++) {                                                          \
                    const int64_t i = i0 + p + r;                                                              \
                    *pa++ = p + r >= mb ? (T)0 : ta ? a[(k0 + kk) * m + i] : a[i * k + k0 + kk];               \
                }                                                                                              \
    }                                                                                                          \
    /* columns j0 .. j0+nb of op(B), depth k0 .. k0+kb, as panels pb[q][kk][c] of NR columns */                \
    static void pack_b_##SUF(T *pb, const T *b, int64_t n, int64_t k, int tb, int64_t k0, int64_t kb,         \
                             int64_t j0, int64_t nb) {                                                         \
        for (int64_t q = 0; q < nb; q += NR_##SUF)                                                             \
            for (int64_t kk = 0; kk < kb; kk++)                                                                \
                for (int64_t cc = 0; cc < NR_##SUF; cc++) {                                                    \
                    const int64_t j = j0 + q + cc;                                                             \
                    *pb++ = q + cc >= nb ? (T)0 : tb ? b[j * k + k0 + kk] : b[(k0 + kk) * n + j];              \
                }                                                                                              \
    }                                                                                                          \
    /* C[0 .. mr, 0 .. nr] += the MM_MR x NR tile of one A panel times one B panel, kb deep */                 \
    /* (named accumulators: as an array, GCC kept them on the stack) */                                       \
    static void micro_##SUF(T *c, int64_t ldc, int64_t mr, int64_t nr, const T *pa, const T *pb, int64_t kb) { \
        VT zero = {0}; /* (__typeof__ of a const would make the accumulators const) */                       \
        MM_EACH_ROW(MM_ACC_DECL)                                                                               \
        for (int64_t kk = 0; kk < kb; kk++, pa += MM_MR, pb += NR_##SUF) {                                     \
            VT bv;                                                                                             \
            memcpy(&bv, pb, sizeof bv);                                                                        \
            MM_EACH_ROW(MM_ACC_STEP)                                                                           \
        }                                                                                                      \
        const VT acc[MM_MR] = {MM_EACH_ROW(MM_ACC_LIST)};                                                      \
        for (int64_t r = 0; r < mr; r++)                                                                       \
            if (nr == NR_##SUF) { /* a whole vector of C */                                                    \
                VT cv;                                                                                         \
                memcpy(&cv, c + r * ldc, sizeof cv);                                                           \
                cv += acc[r];                                                                                  \
                memcpy(c + r * ldc, &cv, sizeof cv);                                                           \
            } else {                                                                                           \
                for (int64_t cc = 0; cc < nr; cc++) c[r * ldc + cc] += acc[r][cc];                             \
            }                                                                                                  \
    }                                                                                                          \
    static void matmul_##SUF(T *C, const T *A, const T *B, int64_t batch, int64_t m, int64_t n, int64_t k,    \
                             int ta, int tb, int64_t sa, int64_t sb, int64_t sc, int acc) {                    \
        const int64_t mblocks = CEIL_DIV(m, MM_MB), nblocks = CEIL_DIV(n, MM_NB);                              \
        const double work = (double)batch * (double)m * (double)n * (double)k;                                 \
        const int64_t threads = work > 131072.0 ? omp_get_max_threads() : 1;                                   \
        /* row chunks only as many as the threads need: each task packs its B slice once for all its rows */   \
        const int64_t rchunks = GDP_MAX(1, GDP_MIN(mblocks, CEIL_DIV(threads, batch * nblocks)));              \
        const int64_t tasks = batch * nblocks * rchunks;                                                       \
        _Pragma("omp parallel if (threads > 1 && tasks > 1)") {                                                \
            T *pa = (T *)xmalloc((size_t)MM_MB * MM_KB * sizeof(T));                                           \
            T *pb = (T *)xmalloc((size_t)MM_KB * CEIL_DIV(MM_NB, NR_##SUF) * NR_##SUF * sizeof(T));            \
            _Pragma("omp for schedule(static)") for (int64_t t = 0; t < tasks; t++) {                          \
                const int64_t bi = t / (nblocks * rchunks), jb = t / rchunks % nblocks, rc = t % rchunks;      \
                const int64_t ib0 = mblocks * rc / rchunks, ib1 = mblocks * (rc + 1) / rchunks;                \
                const int64_t j0 = jb * MM_NB, nb = GDP_MIN(MM_NB, n - j0);                                    \
                const T *a = A + bi * sa, *b = B + bi * sb;                                                    \
                T *c = C + bi * sc + j0;                                                                       \
                if (!acc)                                                                                      \
                    for (int64_t i = ib0 * MM_MB; i < GDP_MIN(m, ib1 * MM_MB); i++)                            \
                        memset(c + i * n, 0, (size_t)nb * sizeof(T));                                          \
                for (int64_t k0 = 0; k0 < k; k0 += MM_KB) {                                                    \
                    const int64_t kb = GDP_MIN(MM_KB, k - k0);                                                 \
                    pack_b_##SUF(pb, b, n, k, tb, k0, kb, j0, nb);                                             \
                    for (int64_t ib = ib0; ib < ib1; ib++) {                                                   \
                        const int64_t i0 = ib * MM_MB, mb = GDP_MIN(MM_MB, m - i0);                            \
                        pack_a_##SUF(pa, a, m, k, ta, i0, mb, k0, kb);                                         \
                        for (int64_t q = 0; q < nb; q += NR_##SUF)                                             \
                            for (int64_t p = 0; p < mb; p += MM_MR)                                            \
                                micro_##SUF(c + (i0 + p) * n + q, n, GDP_MIN(MM_MR, mb - p),                   \
                                            GDP_MIN(NR_##SUF, nb - q), pa + p * kb, pb + q * kb, kb);          \
                    }                                                                                          \
                }                                                                                              \
            }                                                                                                  \
            free(pa);                                                                                          \
            free(pb);                                                                                          \
        }                                                                                                      \
    }
DEFINE_MATMUL(float, f32, vec_f32)
DEFINE_MATMUL(double, f64, vec_f64)

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
