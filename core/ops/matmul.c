/* op_matmul: C = op(A) op(B) over the last two dims, batched over the leading ones; B may be 2-D
 * and shared by the whole batch (a weight). Backward, with op(A) [M,K], op(B) [K,N], dC [M,N]:
 *     dop(A) = dC op(B)^T,   dop(B) = op(A)^T dC,
 * each one GEMM written straight into the gradient (beta = 1 when it accumulates, no copies).
 * A shared B gets its gradient summed over the batch in one GEMM by treating A's [..., M] rows
 * as one tall matrix (for trans_a, whose rows are not contiguous, one GEMM per batch entry, each
 * accumulating into the same gradient in batch order). */
#include <omp.h>
#include <string.h>

#include "core/op_util.h"
#include "kernels/cast.h"
#include "kernels/matmul.h"
#ifdef GDP_CUDA
#include "core/cuda_ctx.h"
#endif

/* ---- CPU kernels (f32, f64): the reference every CUDA kernel is tested against --------------- */

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

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

enum { MM_TA, MM_TB, MM_BATCH, MM_M, MM_N, MM_K, MM_SHARED };

static void gemm(Ctx *ctx, DType dt, void *c, const void *a, const void *b, int64_t batch, int64_t m, int64_t n,
                 int64_t k, int ta, int tb, int64_t sa, int64_t sb, int64_t sc, int acc) {
    if (ctx->device == DEV_CPU)
        matmul_cpu(dt, c, a, b, batch, m, n, k, ta, tb, sa, sb, sc, acc);
    else
        CUDA_ONLY(matmul_cuda_ex(dt, ctx->autocast_bf16 ? MATMUL_BF16_INPUTS : MATMUL_EXACT, ctx->cuda->cublas, c, a,
                                 b, batch, m, n, k, ta, tb, sa, sb, sc, acc));
}

#ifdef GDP_CUDA
/* bf16 autocast of a row-major product C [rows, N] = A [rows, K] op(B) (a linear layer: one GEMM
 * over all rows). cuBLAS reads f32 operands at a third to a half of its bf16 rate (`gdp bench
 * matmul`), so the operands are cast to bf16 in scratch (B whole, A and dC in row chunks of at most
 * 256 MiB) and the GEMMs write f32 C, dA and dB directly, accumulating where the gradient does.
 * Nothing extra is kept: backward casts A and B again. */
static bool autocast_rows(Ctx *ctx, const Tensor *a, int ta, int shared, int64_t batch) {
    return ctx->device == DEV_CUDA && ctx->autocast_bf16 && ctx->autocast_gemm_copies && a->dtype == GDP_F32 && !ta &&
           (shared || batch == 1);
}

static void *bf16_copy(Ctx *ctx, const void *src, int64_t n) {
    void *d = arena_alloc(&ctx->scratch, (size_t)n * 2);
    cast_cuda(GDP_BF16, d, GDP_F32, src, n, 0, ctx_stream(ctx));
    return d;
}

/* A fixed budget, not the arena's free space: the chunking (and so the order of dB's sums) must be
 * the same in every step, fitted arenas or not. */
static int64_t chunk_rows(int64_t rows, int64_t bytes_per_row) {
    int64_t r = (int64_t)(MATMUL_AUTOCAST_CHUNK_BYTES / (size_t)bytes_per_row);
    if (r < 1) r = 1;
    return r < rows ? r : rows;
}

static void gemm_bf16(Ctx *ctx, float *c, const void *a, const void *b, int64_t m, int64_t n, int64_t k, int ta,
                      int tb, int acc) {
    matmul_cuda_ex(GDP_BF16, MATMUL_BF16_F32_OUT, ctx->cuda->cublas, c, a, b, 1, m, n, k, ta, tb, 0, 0, 0, acc);
}

/* dB (+)= op(A)^T dC into the f32 weight gradient from bf16 rows of A and dC ([rows, K], [rows, N]);
 * B is [K, N], or [N, K] with tb. */
static void weight_grad_bf16(Ctx *ctx, float *db, const void *a, const void *dc, int64_t rows, int64_t n, int64_t k,
                             int tb, int acc) {
    if (!tb)
        gemm_bf16(ctx, db, a, dc, k, n, rows, 1, 0, acc);
    else
        gemm_bf16(ctx, db, dc, a, n, k, rows, 1, 0, acc);
}

static void autocast_rows_forward(Ctx *ctx, Tensor *a, Tensor *b, Tensor *c, int64_t rows, int64_t n, int64_t k,
                                  int tb) {
    size_t mark = arena_mark(&ctx->scratch);
    const void *wb = bf16_copy(ctx, b->data, n * k);
    const int64_t step = chunk_rows(rows, 2 * k);
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
        const int64_t r = GDP_MIN(step, rows - r0);
        size_t chunk = arena_mark(&ctx->scratch); /* reused by the next chunk after this GEMM (one stream) */
        const void *ab = bf16_copy(ctx, (const float *)a->data + r0 * k, r * k);
        gemm_bf16(ctx, (float *)c->data + r0 * n, ab, wb, r, n, k, 0, tb, 0);
        arena_rewind(&ctx->scratch, chunk);
    }
    arena_rewind(&ctx->scratch, mark);
}

static void autocast_rows_backward(Ctx *ctx, Tensor *a, Tensor *b, const Tensor *dc, int64_t rows, int64_t n,
                                   int64_t k, int tb) {
    bool acc_a = false, acc_b = false;
    Tensor *da = a->requires_grad ? grad_dest(ctx, a, &acc_a) : NULL;
    Tensor *db = b->requires_grad ? grad_dest(ctx, b, &acc_b) : NULL;
    if (!da && !db) return;
    size_t mark = arena_mark(&ctx->scratch);
    const void *wb = da ? bf16_copy(ctx, b->data, n * k) : NULL;
    const int64_t step = chunk_rows(rows, 2 * n + (db ? 2 * k : 0));
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
        const int64_t r = GDP_MIN(step, rows - r0);
        size_t chunk = arena_mark(&ctx->scratch);
        const void *dcb = bf16_copy(ctx, (const float *)dc->data + r0 * n, r * n);
        if (da) /* dA [r, K] = dC [r, N] op(B)^T */
            gemm_bf16(ctx, (float *)da->data + r0 * k, dcb, wb, r, k, n, 0, !tb, acc_a);
        if (db) { /* dB summed over the chunks in row order, into the f32 gradient */
            const void *ab = bf16_copy(ctx, (const float *)a->data + r0 * k, r * k);
            weight_grad_bf16(ctx, (float *)db->data, ab, dcb, r, n, k, tb, acc_b || r0 > 0);
        }
        arena_rewind(&ctx->scratch, chunk);
    }
    arena_rewind(&ctx->scratch, mark);
}

/* bf16 activations times an f32 weight (layers/module.h): the weight is cast to bf16 in scratch
 * (again in backward: nothing extra is kept), C and dA come out bf16 like A, and dB goes straight
 * into the f32 master gradient (bf16 x bf16 -> f32). The activations themselves are never copied. */
static bool bf16_rows_f32_weight(const Tensor *a, const Tensor *b) {
    return a->dtype == GDP_BF16 && b->dtype == GDP_F32;
}

static void bf16_rows_forward(Ctx *ctx, Tensor *a, Tensor *b, Tensor *c, int64_t rows, int64_t n, int64_t k, int tb) {
    size_t mark = arena_mark(&ctx->scratch);
    const void *wb = bf16_copy(ctx, b->data, n * k);
    matmul_cuda_ex(GDP_BF16, MATMUL_EXACT, ctx->cuda->cublas, c->data, a->data, wb, 1, rows, n, k, 0, tb, 0, 0, 0, 0);
    arena_rewind(&ctx->scratch, mark);
}

static void bf16_rows_backward(Ctx *ctx, Tensor *a, Tensor *b, const Tensor *dc, int64_t rows, int64_t n, int64_t k,
                               int tb) {
    bool acc_a = false, acc_b = false;
    if (a->requires_grad) { /* dA [rows, K] = dC op(B)^T, bf16 */
        Tensor *da = grad_dest(ctx, a, &acc_a);
        size_t mark = arena_mark(&ctx->scratch);
        const void *wb = bf16_copy(ctx, b->data, n * k);
        matmul_cuda_ex(GDP_BF16, MATMUL_EXACT, ctx->cuda->cublas, da->data, dc->data, wb, 1, rows, k, n, 0, !tb, 0,
                       0, 0, acc_a);
        arena_rewind(&ctx->scratch, mark);
    }
    if (b->requires_grad) {
        Tensor *db = grad_dest(ctx, b, &acc_b);
        weight_grad_bf16(ctx, (float *)db->data, a->data, dc->data, rows, n, k, tb, acc_b);
    }
}
#endif

static void matmul_forward(Ctx *ctx, Node *nd) {
    Tensor *a = nd->in[0], *b = nd->in[1], *c = nd->out[0];
    int ta = (int)nd->attr[MM_TA].i, tb = (int)nd->attr[MM_TB].i, shared = (int)nd->attr[MM_SHARED].i;
    int64_t batch = nd->attr[MM_BATCH].i, m = nd->attr[MM_M].i, n = nd->attr[MM_N].i, k = nd->attr[MM_K].i;
#ifdef GDP_CUDA
    if (bf16_rows_f32_weight(a, b)) { /* op_matmul admits it for rows times a 2-D weight only */
        bf16_rows_forward(ctx, a, b, c, batch * m, n, k, tb);
        return;
    }
    if (autocast_rows(ctx, a, ta, shared, batch)) {
        autocast_rows_forward(ctx, a, b, c, batch * m, n, k, tb);
        return;
    }
#endif
    if (shared && !ta) /* [batch*M, K] rows times one weight: a single GEMM */
        gemm(ctx, a->dtype, c->data, a->data, b->data, 1, batch * m, n, k, 0, tb, 0, 0, 0, 0);
    else
        gemm(ctx, a->dtype, c->data, a->data, b->data, batch, m, n, k, ta, tb, m * k, shared ? 0 : k * n, m * n, 0);
}

static void matmul_backward(Ctx *ctx, Node *nd) {
    Tensor *a = nd->in[0], *b = nd->in[1], *dc = nd->out[0]->grad;
    int ta = (int)nd->attr[MM_TA].i, tb = (int)nd->attr[MM_TB].i, shared = (int)nd->attr[MM_SHARED].i;
    int64_t batch = nd->attr[MM_BATCH].i, m = nd->attr[MM_M].i, n = nd->attr[MM_N].i, k = nd->attr[MM_K].i;
#ifdef GDP_CUDA
    if (bf16_rows_f32_weight(a, b)) {
        bf16_rows_backward(ctx, a, b, dc, batch * m, n, k, tb);
        return;
    }
    if (autocast_rows(ctx, a, ta, shared, batch)) {
        autocast_rows_backward(ctx, a, b, dc, batch * m, n, k, tb);
        return;
    }
#endif
    int64_t sb = shared ? 0 : k * n;
    DType dt = a->dtype;
    bool acc;
    if (a->requires_grad) {
        Tensor *da = grad_dest(ctx, a, &acc);
        if (!ta) { /* dA [M,K] = dC [M,N] op(B)^T */
            if (shared)
                gemm(ctx, dt, da->data, dc->data, b->data, 1, batch * m, k, n, 0, !tb, 0, 0, 0, acc);
            else
                gemm(ctx, dt, da->data, dc->data, b->data, batch, m, k, n, 0, !tb, m * n, sb, m * k, acc);
        } else { /* A stored [K,M]: dA = op(B) [K,N] dC^T [N,M] */
            gemm(ctx, dt, da->data, b->data, dc->data, batch, k, m, n, tb, 1, sb, m * n, k * m, acc);
        }
    }
    if (b->requires_grad) {
        Tensor *db = grad_dest(ctx, b, &acc);
        if (shared && !ta) {
            if (!tb) /* dB [K,N] = A'^T dC', A' = [batch*M, K], dC' = [batch*M, N] */
                gemm(ctx, dt, db->data, a->data, dc->data, 1, k, n, batch * m, 1, 0, 0, 0, 0, acc);
            else /* B stored [N,K]: dB = dC'^T A' */
                gemm(ctx, dt, db->data, dc->data, a->data, 1, n, k, batch * m, 1, 0, 0, 0, 0, acc);
        } else if (shared) { /* trans_a: A_b stored [K,M] is op(A_b)^T itself */
            for (int64_t i = 0; i < batch; i++) {
                const char *ai = (const char *)a->data + (size_t)(i * m * k) * dtype_size(dt);
                const char *dci = (const char *)dc->data + (size_t)(i * m * n) * dtype_size(dt);
                int acc_i = acc || i > 0;
                if (!tb)
                    gemm(ctx, dt, db->data, ai, dci, 1, k, n, m, 0, 0, 0, 0, 0, acc_i);
                else
                    gemm(ctx, dt, db->data, dci, ai, 1, n, k, m, 1, 1, 0, 0, 0, acc_i);
            }
        } else if (!tb) { /* dB [K,N] = op(A)^T dC */
            gemm(ctx, dt, db->data, a->data, dc->data, batch, k, n, m, !ta, 0, m * k, m * n, k * n, acc);
        } else { /* B stored [N,K]: dB = dC^T op(A) */
            gemm(ctx, dt, db->data, dc->data, a->data, batch, n, k, m, 1, ta, m * n, m * k, n * k, acc);
        }
    }
}

/* Gradcheck cases: every combination of the flags, batched and shared B, two products chained
 * so that both gradients of each are exercised (sizes small, so bf16 stays within 1e-2). */
static Tensor *matmul_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *a = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 3, 4));
    Tensor *b = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 4, 5));
    Tensor *c = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 2, 5));
    return op_matmul(ctx, op_matmul(ctx, a, b, false, false), c, false, true); /* [2,3,2] */
}

static Tensor *matmul_tt_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *a = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 2, 4, 3));
    Tensor *b = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 2, 5, 4));
    Tensor *d = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 2, 3, 4));
    return op_matmul(ctx, d, op_matmul(ctx, a, b, true, true), true, false); /* [2,2,4,5] */
}

static Tensor *matmul_shared_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 3, 4));
    Tensor *w1 = gc_random(ctx, dt, &seed, -1, 1, SHAPE(5, 4));
    Tensor *w2 = gc_random(ctx, dt, &seed, -1, 1, SHAPE(5, 3));
    return op_matmul(ctx, op_matmul(ctx, x, w1, false, true), w2, false, false); /* [2,3,3] */
}

static Tensor *matmul_shared_ta_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 4, 3));
    Tensor *w1 = gc_random(ctx, dt, &seed, -1, 1, SHAPE(4, 5));
    Tensor *w2 = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 3));
    return op_matmul(ctx, op_matmul(ctx, x, w1, true, false), w2, true, true); /* [2,5,2] */
}

/* On CUDA in bf16: bf16 rows times f32 weights (the linear layers under bf16 activations), plain
 * and transposed; elsewhere the same shapes in one dtype. */
static Tensor *matmul_bf16_by_f32_case(Ctx *ctx, DType dt, uint64_t seed) {
    const DType wdt = dt == GDP_BF16 ? GDP_F32 : dt;
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 30, 24));
    Tensor *w1 = gc_random(ctx, wdt, &seed, -1, 1, SHAPE(20, 24));
    Tensor *w2 = gc_random(ctx, wdt, &seed, -1, 1, SHAPE(20, 12));
    return op_matmul(ctx, op_matmul(ctx, x, w1, false, true), w2, false, false); /* [2, 30, 12] */
}

const OpDef op_matmul_def = {"matmul", matmul_forward, matmul_backward, matmul_case, 0, 0};
const OpDef op_matmul_bf16_by_f32_def = {"matmul_bf16_by_f32", matmul_forward, matmul_backward,
                                         matmul_bf16_by_f32_case, 0, 0};
/* Extra registry entries: the same op, other gradcheck cases. */
const OpDef op_matmul_tt_def = {"matmul_tt", matmul_forward, matmul_backward, matmul_tt_case, 0, 0};
const OpDef op_matmul_shared_def = {"matmul_shared", matmul_forward, matmul_backward, matmul_shared_case, 0, 0};
const OpDef op_matmul_shared_ta_def = {"matmul_shared_ta", matmul_forward, matmul_backward, matmul_shared_ta_case, 0, 0};

Tensor *op_matmul(Ctx *ctx, Tensor *a, Tensor *b, bool trans_a, bool trans_b) {
    char da[TENSOR_DESC_LEN], db[TENSOR_DESC_LEN];
    op_check_float("matmul", "a", a, ctx->device);
    op_check_float("matmul", "b", b, ctx->device);
    /* bf16 rows times an f32 weight: the linear layers under bf16 activations (layers/module.h) */
    const bool bf16_by_f32 = ctx->device == DEV_CUDA && a->dtype == GDP_BF16 && b->dtype == GDP_F32 && b->ndim == 2 &&
                             !trans_a && tensor_is_contiguous(a);
    if (!bf16_by_f32) op_check_same_dtype("matmul", a, b);
    if (a->ndim < 2 || b->ndim < 2)
        gdp_fatal("op 'matmul': both inputs need at least 2 dims, got a %s and b %s", tensor_describe(a, da, sizeof da),
                  tensor_describe(b, db, sizeof db));
    if (!tensor_is_contiguous(a) || !tensor_is_contiguous(b))
        gdp_fatal("op 'matmul': a %s and b %s must be contiguous; express a transposed last pair of dims with "
                  "trans_a/trans_b, or call op_contiguous first",
                  tensor_describe(a, da, sizeof da), tensor_describe(b, db, sizeof db));
    int64_t m = a->shape[a->ndim - (trans_a ? 1 : 2)], ka = a->shape[a->ndim - (trans_a ? 2 : 1)];
    int64_t kb = b->shape[b->ndim - (trans_b ? 1 : 2)], n = b->shape[b->ndim - (trans_b ? 2 : 1)];
    if (ka != kb)
        gdp_fatal("op 'matmul': inner dims differ: a %s%s has K = %lld, b %s%s has K = %lld", tensor_describe(a, da, sizeof da),
                  trans_a ? " (transposed)" : "", (long long)ka, tensor_describe(b, db, sizeof db),
                  trans_b ? " (transposed)" : "", (long long)kb);
    bool shared = b->ndim == 2 && a->ndim > 2;
    if (!shared) {
        bool ok = b->ndim == a->ndim;
        for (int i = 0; ok && i < a->ndim - 2; i++) ok = a->shape[i] == b->shape[i];
        if (!ok)
            gdp_fatal("op 'matmul': batch dims differ: a %s, b %s; b must have a's leading dims or be 2-D (shared)",
                      tensor_describe(a, da, sizeof da), tensor_describe(b, db, sizeof db));
    }
    int64_t batch = 1, shape[GDP_MAX_DIMS];
    for (int i = 0; i < a->ndim - 2; i++) batch *= a->shape[i], shape[i] = a->shape[i];
    shape[a->ndim - 2] = m, shape[a->ndim - 1] = n;
    Node nd = node_make(&op_matmul_def);
    nd.n_in = 2, nd.in[0] = a, nd.in[1] = b;
    nd.attr[MM_TA].i = trans_a, nd.attr[MM_TB].i = trans_b, nd.attr[MM_SHARED].i = shared;
    nd.attr[MM_BATCH].i = batch, nd.attr[MM_M].i = m, nd.attr[MM_N].i = n, nd.attr[MM_K].i = ka;
    nd.n_out = 1, nd.out[0] = op_new_out(ctx, a, a->ndim, shape);
    op_run(ctx, &nd);
    return nd.out[0];
}
