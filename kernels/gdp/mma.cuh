/* Block-level tile products on shared memory for the Gated DeltaProduct kernels.
 *
 * A matrix in shared memory is a row-major array with a leading dimension `ld` (elements, a
 * multiple of 8 so that every 8-element row segment is 16-byte aligned); `t` says whether the
 * product uses it as stored or transposed. gemm() computes, for an M x N output (M a multiple of
 * 16, N a multiple of 32), acc = init(r,c) + op(A1) op(B1) [+ op(A2) op(B2)] and calls
 * epi(r, c, acc) once for every element. Warps take 16 x 32 output tiles round-robin; each
 * element is initialised and finished by one thread, so init may read and epi may write the same
 * shared element in place.
 *
 * bf16 operands go through the tensor cores (ldmatrix + mma.sync m16n8k16, fp32 accumulation);
 * float operands through plain fp32 FMA with the same element ownership (the f32 path is for
 * accuracy, not speed). Inner dimensions must be multiples of 16 and padded with zeros. */
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

/* GDP_SM90: this pass of the compiler emits sm_90 code, so the Hopper instructions (stmatrix, bulk
 * and tensor copies, mbarrier waits) may be used. Elsewhere stmatrix is emulated exactly and the
 * copy-engine helpers trap: the planner never picks the kernels that use them there. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GDP_SM90 1
#else
#define GDP_SM90 0
#endif
#if defined(__CUDA_ARCH__) && !GDP_SM90
#define GDP_SM90_ONLY(asm_stmt) __trap()
#else
#define GDP_SM90_ONLY(asm_stmt) asm_stmt
#endif

namespace gdp {

/* e / d for 0 <= e, 0 < d: a shift when d is a power of two (the tile widths
 * and chunk counts here almost always are), the division otherwise. */
struct FastDiv {
    int d, sh;
    __device__ __forceinline__ explicit FastDiv(int d_) : d(d_), sh(-1) {
#ifdef __CUDA_ARCH__
        if ((d_ & (d_ - 1)) == 0) sh = __ffs(d_) - 1;
#endif
    }
    __device__ __forceinline__ int div(int e) const { return sh >= 0 ? e >> sh : e / d; }
};

template <typename T> struct SMat {
    T *p;
    int ld;
    bool t; /* false: element (r,c) of the operand is p[r*ld + c]; true: p[c*ld + r] */
};
template <typename T> __device__ __forceinline__ SMat<T> smat(T *p, int ld, bool t = false) {
    SMat<T> m;
    m.p = p;
    m.ld = ld;
    m.t = t;
    return m;
}

__device__ __forceinline__ void ldsm_x4(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3, const void *ptr) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(ptr);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3, const void *ptr) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(ptr);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
}
/* four 8 x 8 b16 matrices from registers to shared memory: lane l gives the address of row l & 7 of
 * matrix l >> 3, and its register i holds two adjacent elements of row (l >> 2) of matrix i */
__device__ __forceinline__ void stsm_x4(void *ptr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
#if GDP_SM90 || !defined(__CUDA_ARCH__)
    uint32_t a = (uint32_t)__cvta_generic_to_shared(ptr);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(a), "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
#else
    /* before sm_90: each lane fetches the address of its row (l >> 2) of matrix i from lane 8 i + (l >> 2) */
    const int lane = threadIdx.x & 31;
    const uint32_t r[4] = {r0, r1, r2, r3};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        char *row = (char *)__shfl_sync(0xffffffffu, (unsigned long long)ptr, 8 * i + (lane >> 2));
        *(uint32_t *)(row + 4 * (lane & 3)) = r[i];
    }
    __syncwarp(); /* the lanes' stores are seen by the warp's next reads, as stmatrix's are */
#endif
}
/* the same with each 8 x 8 matrix stored transposed: register i's pair (row l >> 2, columns 2 (l & 3)
 * and + 1 of matrix i) goes to rows 2 (l & 3) and + 1 of column l >> 2, lane l giving the address of
 * stored row l & 7 of matrix l >> 3 (the inverse of ldsm_x4_t) */
__device__ __forceinline__ void stsm_x4_t(void *ptr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
#if GDP_SM90 || !defined(__CUDA_ARCH__)
    uint32_t a = (uint32_t)__cvta_generic_to_shared(ptr);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(a), "r"(r0), "r"(r1), "r"(r2),
                 "r"(r3)
                 : "memory");
#else
    const int lane = threadIdx.x & 31;
    const uint32_t r[4] = {r0, r1, r2, r3};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        char *lo = (char *)__shfl_sync(0xffffffffu, (unsigned long long)ptr, 8 * i + 2 * (lane & 3));
        char *hi = (char *)__shfl_sync(0xffffffffu, (unsigned long long)ptr, 8 * i + 2 * (lane & 3) + 1);
        *(uint16_t *)(lo + 2 * (lane >> 2)) = (uint16_t)(r[i] & 0xffffu);
        *(uint16_t *)(hi + 2 * (lane >> 2)) = (uint16_t)(r[i] >> 16);
    }
    __syncwarp();
#endif
}
__device__ __forceinline__ void mma_bf16(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* x = hi + lo with hi and lo tf32, for 3xTF32 products that keep about fp32's precision. hi is x rounded
 * on its bits (half a tf32 ulp added, the 13 low mantissa bits cleared; x finite), so lo = x - hi is
 * exact in fp32 with |lo| <= 2^-11 |x|, and lo truncated to tf32 is off by less than 2^-21 |x|. Four
 * integer and fp32 instructions an operand: cvt.rna.tf32.f32 twice took seven (a compare with inf, a
 * select and an add each; the solve's merges, issue-bound in prep, are most of them). */
__device__ __forceinline__ void tf32_split(float x, uint32_t &hi, uint32_t &lo) {
    constexpr uint32_t TF32_BITS = 0xffffe000u, HALF_ULP = 0x1000u;
    hi = (__float_as_uint(x) + HALF_ULP) & TF32_BITS;
    lo = __float_as_uint(x - __uint_as_float(hi)) & TF32_BITS;
}
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* d += A (16 x kd at a, row-major, lda) x B (kd x 8 at b, row-major, ldb), fp32 operands in shared
 * memory, by 3xTF32 mma: hi x hi + hi x lo + lo x hi, the small products first. kd % 8 == 0. */
__device__ __forceinline__ void warp_mma_f32x3(float (&d)[4], const float *a, int lda, const float *b, int ldb, int kd) {
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    for (int k0 = 0; k0 < kd; k0 += 8) {
        uint32_t ah[4], al[4], bh[2], bl[2];
        tf32_split(a[g * lda + k0 + tq], ah[0], al[0]);
        tf32_split(a[(g + 8) * lda + k0 + tq], ah[1], al[1]);
        tf32_split(a[g * lda + k0 + tq + 4], ah[2], al[2]);
        tf32_split(a[(g + 8) * lda + k0 + tq + 4], ah[3], al[3]);
        tf32_split(b[(k0 + tq) * ldb + g], bh[0], bl[0]);
        tf32_split(b[(k0 + tq + 4) * ldb + g], bh[1], bl[1]);
        mma_tf32(d, al, bh[0], bh[1]);
        mma_tf32(d, ah, bl[0], bl[1]);
        mma_tf32(d, ah, bh[0], bh[1]);
    }
}

/* acc[nt][e] for the warp tile at (m0, n0): element e of n-tile nt is row m0 + g (+8 for e>=2),
 * column n0 + nt*8 + 2*tq (+1 for odd e), g = lane/4, tq = lane%4 (the mma C layout). */
__device__ __forceinline__ void mma_loop(float (&acc)[4][4], SMat<__nv_bfloat16> A, SMat<__nv_bfloat16> B, int K,
                                         int m0, int n0) {
    const int lane = threadIdx.x & 31, mi = lane >> 3, r = lane & 7;
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t a[4];
        if (!A.t)
            ldsm_x4(a[0], a[1], a[2], a[3], A.p + (m0 + r + (mi & 1) * 8) * A.ld + k0 + (mi >> 1) * 8);
        else
            ldsm_x4_t(a[0], a[1], a[2], a[3], A.p + (k0 + (mi >> 1) * 8 + r) * A.ld + m0 + (mi & 1) * 8);
#pragma unroll
        for (int np = 0; np < 2; np++) {
            uint32_t b[4]; /* b[nb*2 + kb] */
            const int nb = mi >> 1, kb = mi & 1, nn = n0 + np * 16 + nb * 8;
            if (!B.t)
                ldsm_x4_t(b[0], b[1], b[2], b[3], B.p + (k0 + kb * 8 + r) * B.ld + nn);
            else
                ldsm_x4(b[0], b[1], b[2], b[3], B.p + (nn + r) * B.ld + k0 + kb * 8);
            mma_bf16(acc[np * 2 + 0], a[0], a[1], a[2], a[3], b[0], b[1]);
            mma_bf16(acc[np * 2 + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
        }
    }
}

__device__ __forceinline__ void mma_loop(float (&acc)[4][4], SMat<float> A, SMat<float> B, int K, int m0, int n0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    const int r0 = m0 + g, r1 = m0 + g + 8;
    for (int k = 0; k < K; k++) {
        float a0 = A.t ? A.p[k * A.ld + r0] : A.p[r0 * A.ld + k];
        float a1 = A.t ? A.p[k * A.ld + r1] : A.p[r1 * A.ld + k];
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
            const int c = n0 + nt * 8 + 2 * tq;
            float b0 = B.t ? B.p[c * B.ld + k] : B.p[k * B.ld + c];
            float b1 = B.t ? B.p[(c + 1) * B.ld + k] : B.p[k * B.ld + c + 1];
            acc[nt][0] = fmaf(a0, b0, acc[nt][0]);
            acc[nt][1] = fmaf(a0, b1, acc[nt][1]);
            acc[nt][2] = fmaf(a1, b0, acc[nt][2]);
            acc[nt][3] = fmaf(a1, b1, acc[nt][3]);
        }
    }
}

template <typename T, class Init, class Epi>
__device__ __forceinline__ void gemm(int M, int N, SMat<T> A1, SMat<T> B1, int K1, SMat<T> A2, SMat<T> B2, int K2,
                                     Init init, Epi epi) {
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, tq = lane & 3;
    const int tn = N / 32, ntiles = (M / 16) * tn;
    for (int tile = warp; tile < ntiles; tile += nw) {
        const int m0 = (tile / tn) * 16, n0 = (tile % tn) * 32;
        float acc[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[nt][e] = init(m0 + g + (e >> 1) * 8, n0 + nt * 8 + 2 * tq + (e & 1));
        mma_loop(acc, A1, B1, K1, m0, n0);
        if (K2 > 0) mma_loop(acc, A2, B2, K2, m0, n0);
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) epi(m0 + g + (e >> 1) * 8, n0 + nt * 8 + 2 * tq + (e & 1), acc[nt][e]);
    }
}

/* gemm() from zero with the result handed out in column pairs: epi2(r, c, v[c], v[c+1]), c even. */
template <typename T, class Epi2>
__device__ __forceinline__ void gemm_pairs(int M, int N, SMat<T> A, SMat<T> B, int K, Epi2 epi2) {
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, tq = lane & 3;
    const int tn = N / 32, ntiles = (M / 16) * tn;
    for (int tile = warp; tile < ntiles; tile += nw) {
        const int m0 = (tile / tn) * 16, n0 = (tile % tn) * 32;
        float acc[4][4];
#pragma unroll
        for (int i = 0; i < 16; i++) acc[i >> 2][i & 3] = 0.f;
        mma_loop(acc, A, B, K, m0, n0);
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
            epi2(m0 + g, n0 + nt * 8 + 2 * tq, acc[nt][0], acc[nt][1]);
            epi2(m0 + g + 8, n0 + nt * 8 + 2 * tq, acc[nt][2], acc[nt][3]);
        }
    }
}

/* gemm() that also forms, in fp32, the row dots of the product (acc - init) with a weight wt(r,c):
 * part[r * (N/32) + j] = sum over the 32 columns of column tile j (fixed order; sum the N/32
 * parts of a row afterwards for a deterministic total). */
template <typename T, class Init, class Epi, class Wt>
__device__ __forceinline__ void gemm_rowdot(int M, int N, SMat<T> A, SMat<T> B, int K, Init init, Epi epi, Wt wt,
                                            float *part) {
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, tq = lane & 3;
    const int tn = N / 32, ntiles = (M / 16) * tn;
    for (int tile = warp; tile < ntiles; tile += nw) {
        const int m0 = (tile / tn) * 16, n0 = (tile % tn) * 32;
        float acc[4][4], a0[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) a0[nt][e] = acc[nt][e] = init(m0 + g + (e >> 1) * 8, n0 + nt * 8 + 2 * tq + (e & 1));
        mma_loop(acc, A, B, K, m0, n0);
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = m0 + g + (e >> 1) * 8, c = n0 + nt * 8 + 2 * tq + (e & 1);
                const float d = (acc[nt][e] - a0[nt][e]) * wt(r, c);
                if (e < 2) s0 += d; else s1 += d;
                epi(r, c, acc[nt][e]);
            }
        s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
        s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
        if (tq == 0) {
            part[(m0 + g) * tn + tile % tn] = s0;
            part[(m0 + g + 8) * tn + tile % tn] = s1;
        }
    }
}

template <typename T, class Init, class Epi>
__device__ __forceinline__ void gemm(int M, int N, SMat<T> A, SMat<T> B, int K, Init init, Epi epi) {
    gemm(M, N, A, B, K, A, B, 0, init, epi);
}

struct Zero {
    __device__ __forceinline__ float operator()(int, int) const { return 0.f; }
};

/* Deterministic per-row reductions: warp w takes rows w, w+nw, ...; lanes stride the columns and
 * combine by a fixed butterfly; fn(i, x) gives the term, done(i, sum) runs on lane 0. */
template <class Fn, class Done>
__device__ __forceinline__ void row_reduce(int rows, int cols, Fn fn, Done done) {
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5, lane = threadIdx.x & 31;
    for (int i = warp; i < rows; i += nw) {
        float s = 0.f;
        for (int x = lane; x < cols; x += 32) s += fn(i, x);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) done(i, s);
    }
}


/* ---------------------------------------------------------------- persistent accumulators */
/* A warp's share of an M x N fp32 result kept in registers across products: tile i of this warp
 * is warp tile warp + i*nwarps (16 x 32, same numbering as gemm()), at most 4 per warp. */
typedef float Acc[4][4][4];

template <typename T>
__device__ __forceinline__ void acc_gemm(Acc &acc, int M, int N, SMat<T> A, SMat<T> B, int K) {
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int tn = N / 32, ntiles = (M / 16) * tn;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int tile = warp + i * nw;
        if (tile < ntiles) mma_loop(acc[i], A, B, K, (tile / tn) * 16, (tile % tn) * 32);
    }
}
/* f(r, c, v&) for every element this thread owns */
template <class F> __device__ __forceinline__ void acc_each(Acc &acc, int M, int N, F f) {
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, tq = lane & 3, tn = N / 32, ntiles = (M / 16) * tn;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int tile = warp + i * nw;
        if (tile >= ntiles) continue;
        const int m0 = (tile / tn) * 16, n0 = (tile % tn) * 32;
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) f(m0 + g + (e >> 1) * 8, n0 + nt * 8 + 2 * tq + (e & 1), acc[i][nt][e]);
    }
}

/* ---------------------------------------------------------------- tile movement */
__device__ __forceinline__ void cp_async16(void *s, const void *g) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(g));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
/* Bulk copies (sm_90: the copy engine moves whole rows; no thread issues 16-byte pieces) with an
 * mbarrier per buffer. A phase of the barrier completes when its one arrival (mbar_expect_tx, by
 * one thread, with the phase's total bytes) is made and every copy counted to it has landed. */
__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *bar) {
    GDP_SM90_ONLY(asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(bar)) : "memory"));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
    GDP_SM90_ONLY(asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory"));
}
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    GDP_SM90_ONLY(asm volatile("{\n\t.reg .pred p;\nGDP_MBAR_WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
                 "@!p bra GDP_MBAR_WAIT_%=;\n}\n" ::"r"(smem_addr(bar)),
                 "r"(parity)
                 : "memory"));
}
/* global -> shared, bytes a multiple of 16, both addresses 16-byte aligned; completes on bar */
__device__ __forceinline__ void bulk_load(void *s, const void *g, uint32_t bytes, uint64_t *bar) {
    GDP_SM90_ONLY(asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_addr(s)),
                 "l"(g), "r"(bytes), "r"(smem_addr(bar))
                 : "memory"));
}
/* the issuing thread's bulk (tensor) stores: commit them as a group; wait until their sources may
 * change (read) or until they are done (all) */
__device__ __forceinline__ void bulk_commit() { GDP_SM90_ONLY(asm volatile("cp.async.bulk.commit_group;\n" ::: "memory")); }
__device__ __forceinline__ void bulk_wait_read() { GDP_SM90_ONLY(asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory")); }
__device__ __forceinline__ void bulk_wait_all() { GDP_SM90_ONLY(asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory")); }
/* after mbar_init, before any copy completes on the barriers */
__device__ __forceinline__ void fence_mbar_init() { GDP_SM90_ONLY(asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory")); }
/* Tensor copies (TMA): a box of a tensor map (a CUtensorMap in parameter, constant or global memory)
 * to or from shared memory; with CU_TENSOR_MAP_SWIZZLE_128B the box's 128-byte rows have their
 * 16-byte chunks XOR-permuted by row % 8 (see Swz128 in frag.cuh), base 1024-aligned. */
__device__ __forceinline__ void tma_load_2d(void *s, const void *map, int x, int y, uint64_t *bar) {
    GDP_SM90_ONLY(asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
                     smem_addr(s)),
                 "l"(map), "r"(x), "r"(y), "r"(smem_addr(bar))
                 : "memory"));
}
__device__ __forceinline__ void tma_load_3d(void *s, const void *map, int x, int y, int z, uint64_t *bar) {
    GDP_SM90_ONLY(asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
                     smem_addr(s)),
                 "l"(map), "r"(x), "r"(y), "r"(z), "r"(smem_addr(bar))
                 : "memory"));
}
__device__ __forceinline__ void tma_store_2d(const void *map, int x, int y, const void *s) {
    GDP_SM90_ONLY(asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(map), "r"(x), "r"(y),
                 "r"(smem_addr(s))
                 : "memory"));
}
/* orders this thread's ordinary shared-memory accesses before later bulk copies (the copy engine is
 * another proxy): after writing what a bulk store reads, or before a bulk load overwrites it */
__device__ __forceinline__ void fence_proxy_async() { GDP_SM90_ONLY(asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory")); }

/* Two-buffer cp.async pipeline: start the next stage's copies (when there is a next stage) into the
 * other buffer, then wait until only those are in flight, i.e. this stage's copies have landed (a
 * barrier then makes them visible to the block). */
template <class Issue> __device__ __forceinline__ void issue_next_wait_this(bool has_next, Issue issue_next) {
    if (has_next) {
        issue_next();
        cp_wait<1>();
    } else {
        cp_wait<0>();
    }
}

/* Asynchronous copy of a rows x cols tile (cols * sizeof(T) a multiple of 16, both sides 16-byte
 * aligned rows) from global (row stride ldg) to shared (ld lds). Needs cp_commit/cp_wait. */
template <typename T> __device__ __forceinline__ void cp_tile(T *s, int lds, const T *g, int64_t ldg, int rows, int cols) {
    constexpr int E = 16 / sizeof(T);
    const int cpr = cols / E;
    for (int e = threadIdx.x; e < rows * cpr; e += blockDim.x) {
        const int r = e / cpr, c = (e - r * cpr) * E;
        cp_async16(s + r * lds + c, g + r * ldg + c);
    }
}
/* Shared -> global, 16 bytes at a time, f(r, c, v) applied to every element. */
template <typename T, class F>
__device__ __forceinline__ void st_tile_f(T *g, int64_t ldg, const T *s, int lds, int rows, int cols, F f) {
    constexpr int E = 16 / sizeof(T);
    const int cpr = cols / E;
    const FastDiv fd(cpr);
    for (int e = threadIdx.x; e < rows * cpr; e += blockDim.x) {
        const int r = fd.div(e), c = (e - r * cpr) * E;
        uint4 u = *(const uint4 *)(s + r * lds + c);
        T *el = (T *)&u;
#pragma unroll
        for (int j = 0; j < E; j++) el[j] = f(r, c + j, el[j]);
        *(uint4 *)(g + r * ldg + c) = u;
    }
}
template <typename T> __device__ __forceinline__ void st_tile(T *g, int64_t ldg, const T *s, int lds, int rows, int cols) {
    st_tile_f(g, ldg, s, lds, rows, cols, [](int, int, T v) { return v; });
}

__device__ __forceinline__ float tof(float x) { return x; }
__device__ __forceinline__ float tof(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T fromf(float x);
template <> __device__ __forceinline__ float fromf<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 fromf<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/* Rows of an input tensor into a shared tile: s[r][x] = f(r, c0+x, in) for x < cols, where
 * in = rowp(r)[c0+x]; zero where rowp(r) is NULL or c0+x >= lim. 8 elements per thread step;
 * vec: rows are 16-byte aligned and lim is a multiple of 8 (vector loads). cols % 8 == 0. */
template <typename T, class RowP, class F>
__device__ __forceinline__ void load_rows(T *s, int lds, int rows, int cols, int c0, int lim, bool vec, RowP rowp, F f) {
    const int cpr = cols >> 3;
    const FastDiv fd(cpr);
    for (int e = threadIdx.x; e < rows * cpr; e += blockDim.x) {
        const int r = fd.div(e), x = (e - r * cpr) * 8;
        const T *p = rowp(r);
        float v[8];
        if (p && vec && c0 + x + 8 <= lim) {
            if (sizeof(T) == 2) {
                uint4 u = *(const uint4 *)(p + c0 + x);
                const T *el = (const T *)&u;
#pragma unroll
                for (int j = 0; j < 8; j++) v[j] = f(r, c0 + x + j, tof(el[j]));
            } else {
                float4 a = *(const float4 *)(p + c0 + x), b = *(const float4 *)(p + c0 + x + 4);
                v[0] = f(r, c0 + x, a.x), v[1] = f(r, c0 + x + 1, a.y), v[2] = f(r, c0 + x + 2, a.z), v[3] = f(r, c0 + x + 3, a.w);
                v[4] = f(r, c0 + x + 4, b.x), v[5] = f(r, c0 + x + 5, b.y), v[6] = f(r, c0 + x + 6, b.z), v[7] = f(r, c0 + x + 7, b.w);
            }
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = p && c0 + x + j < lim ? f(r, c0 + x + j, tof(p[c0 + x + j])) : 0.f;
        }
        T out[8];
#pragma unroll
        for (int j = 0; j < 8; j++) out[j] = fromf<T>(v[j]);
        if (sizeof(T) == 2) {
            *(uint4 *)(s + r * lds + x) = *(const uint4 *)out;
        } else {
            *(uint4 *)(s + r * lds + x) = *(const uint4 *)out;
            *(uint4 *)(s + r * lds + x + 4) = *(const uint4 *)(out + 4);
        }
    }
}
/* Same, asynchronous where possible (identity transform): cp.async for full aligned 8-element
 * pieces, plain loads and stores otherwise. Needs cp_commit/cp_wait. */
template <typename T, class RowP>
__device__ __forceinline__ void cp_rows(T *s, int lds, int rows, int cols, int c0, int lim, bool vec, RowP rowp) {
    const int cpr = cols >> 3;
    for (int e = threadIdx.x; e < rows * cpr; e += blockDim.x) {
        const int r = e / cpr, x = (e - r * cpr) * 8;
        const T *p = rowp(r);
        if (p && vec && c0 + x + 8 <= lim) {
            cp_async16(s + r * lds + x, p + c0 + x);
            if (sizeof(T) == 4) cp_async16(s + r * lds + x + 4, p + c0 + x + 4);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) s[r * lds + x + j] = p && c0 + x + j < lim ? p[c0 + x + j] : fromf<T>(0.f);
        }
    }
}

/* One warp tile (tile index = warp) of an M x N product accumulated in registers; for results
 * of at most 8 tiles (M*N <= 64*64 with 8 warps). Returns whether this warp owns a tile. */
template <typename T>
__device__ __forceinline__ bool tile_gemm(float (&acc)[4][4], int M, int N, SMat<T> A, SMat<T> B, int K) {
    const int warp = threadIdx.x >> 5, tn = N / 32;
    if (warp >= (M / 16) * tn) return false;
    mma_loop(acc, A, B, K, (warp / tn) * 16, (warp % tn) * 32);
    return true;
}
template <class F> __device__ __forceinline__ void tile_each(float (&acc)[4][4], int M, int N, F f) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tn = N / 32;
    if (warp >= (M / 16) * tn) return;
    const int m0 = (warp / tn) * 16, n0 = (warp % tn) * 32, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) f(m0 + g + (e >> 1) * 8, n0 + nt * 8 + 2 * tq + (e & 1), acc[nt][e]);
}

/* shared rows (fp32 or the operand type) -> rows of an output tensor (type T): rowp(r)[c0+x] = s[r][x] for x < cols,
 * c0+x < lim, rows with rowp(r) == NULL skipped; 8 elements per step, vector stores when vec. */
template <typename T, class ST, class RowP>
__device__ __forceinline__ void store_rows(const ST *s, int lds, int rows, int cols, int c0, int lim, bool vec, RowP rowp) {
    const int cpr = cols >> 3;
    const FastDiv fd(cpr);
    for (int e = threadIdx.x; e < rows * cpr; e += blockDim.x) {
        const int r = fd.div(e), x = (e - r * cpr) * 8;
        T *p = rowp(r);
        if (!p) continue;
        if (vec && c0 + x + 8 <= lim) {
            T out[8];
#pragma unroll
            for (int j = 0; j < 8; j++) out[j] = fromf<T>(tof(s[r * lds + x + j]));
            *(uint4 *)(p + c0 + x) = *(const uint4 *)out;
            if (sizeof(T) == 4) *(uint4 *)(p + c0 + x + 4) = *(const uint4 *)(out + 4);
        } else {
            for (int j = 0; j < 8; j++)
                if (c0 + x + j < lim) p[c0 + x + j] = fromf<T>(tof(s[r * lds + x + j]));
        }
    }
}

} // namespace gdp
