/* Fragment-level helpers of the bf16 fast kernels: mma.sync fragments in registers, their stores,
 * gated decays, tile copies by cp.async. */
#pragma once
#include "kernels/gdp/device.cuh"

namespace gdp {

/* ---------------------------------------------------------------- 3b/5b. sequential passes, bf16 fast path */
/* k_state (unfused: h and Delta stored) and k_dh again with every size fixed at compile time:
 * KP in {64, 128, 256}, a V tile of BV in {32, 64, 128} columns (not 128 at KP 256), CTP (padded
 * tokens per chunk) in {16, 32, 64}. ncu (H 6, n 2) showed the generic k_state issue-bound (an
 * instruction every 2.4 cycles per scheduler, 7 cycles a warp) with 18% occupancy: runtime tile
 * loops, per-element lambdas and divisions in the copy loops cost more than the products. Here the products unroll
 * (ldmatrix + mma.sync, as in mma.cuh), the copy offsets are shifts, and each step has two
 * barriers. The same products in the same order as the generic kernels, so the same roundings. */
typedef __nv_bfloat16 bf16_t;

/* Warp tiles of a 64 x BV product (MT1 row tiles of 16 and NT1 n8 tiles a warp) and of a KP x BV
 * one (MT2, NT2). Where a warp can take two row tiles (32 rows), it does: an operand fragment then
 * serves two products, and the shared-memory reads of these passes (their bound with one CTA an
 * SM) fall: at KP = BV = 128 from 448 to 368 KB a state step. */
template <int KP, int BV> struct SeqTiles {
    static constexpr int MT1 = BV == 128 ? 2 : 1, NT1 = MT1 == 2 ? 4 : BV / 16; /* 64 x BV */
    static constexpr int RG2 = KP / 32, NT2W = BV / 8 / (8 / RG2);            /* KP x BV, 32-row tiles */
    static constexpr int MT2 = NT2W >= 2 ? 2 : 1, WN2 = 8 / (KP / (16 * MT2)), NT2 = BV / 8 / WN2;
    int m1, n1, m2, n2;
    __device__ __forceinline__ SeqTiles() {
        const int warp = threadIdx.x >> 5;
        if (MT1 == 2) {
            m1 = (warp & 1) * 32;
            n1 = (warp >> 1) * 32;
        } else {
            m1 = (warp & 3) * 16;
            n1 = (warp >> 2) * (BV / 2);
        }
        constexpr int R2 = KP / (16 * MT2); /* row groups */
        m2 = (warp % R2) * 16 * MT2;
        n2 = (warp / R2) * (BV / WN2);
    }
};

/* f(r, c, v&) for every element of a warp's 16 x 8*NT fragment at (m0, n0) (the mma C layout) */
template <int NT, class F> __device__ __forceinline__ void frag_each(float (&acc)[NT][4], int m0, int n0, F f) {
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) f(m0 + g + (e >> 1) * 8, n0 + nt * 8 + 2 * tq + (e & 1), acc[nt][e]);
}
/* The gated masks of the chunk products, on a warp's fragment at (m0, n0), branch-free: the gate
 * factor of a masked entry may be inf, but it is selected away, never multiplied in (a branch per
 * element, each with its gate loads and exp, is what the compiler made of the select-free form).
 * frag_gate_decay: v = f_r e^{g_r - g_c} v where live(r, c), else 0, with (g_r, f_r) read once a row.
 *   frag_causal_decay: rows t tokens, columns s chunk rows: v = scale e^{G_t - G_tok(s)} v where
 *     t < ct, s < lc and tok(s) <= t, else 0 (P and dS).
 *   frag_earlier_decay: rows and columns chunk rows: v = f(i) e^{G_tok(i) - G_tok(j)} v where i < lc
 *     and row j is earlier than row i (then j < lc too), else 0 (prep's A; bwd_b's dA takes
 *     frag_gate_decay with its own token and order keys, compile-time in split mode's lanes kinds). */
template <int NT, class RowGate, class ColGate, class Live>
__device__ __forceinline__ void frag_gate_decay(float (&acc)[NT][4], int m0, int n0, RowGate row_gate, ColGate col_gate,
                                                Live live) {
    const int lane = threadIdx.x & 31, r0 = m0 + (lane >> 2), c0 = n0 + 2 * (lane & 3);
#pragma unroll
    for (int rh = 0; rh < 2; rh++) {
        const int r = r0 + 8 * rh;
        const float2 gf = row_gate(r); /* (gate, factor) of row r */
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e1 = 0; e1 < 2; e1++) {
                const int col = c0 + 8 * nt + e1;
                float &v = acc[nt][2 * rh + e1];
                const float x = gf.y * gate_exp(gf.x - col_gate(col)) * v;
                v = live(r, col) ? x : 0.f;
            }
    }
}
template <int NT>
__device__ __forceinline__ void frag_causal_decay(const Params &P, float (&acc)[NT][4], const float *Gs, int m0, int n0,
                                                  int ct, int lc) {
    frag_gate_decay(
        acc, m0, n0, [&](int t) { return make_float2(Gs[t], P.scale); }, [&](int s) { return Gs[tokof(P, s)]; },
        [&](int t, int s) { return t < ct && s < lc && tokof(P, s) <= t; });
}
/* (the mask is earlier() spelled out with the mode test hoisted: see chunk_ctx on calling it) */
template <int NT, class RowF>
__device__ __forceinline__ void frag_earlier_decay(const Params &P, float (&acc)[NT][4], const float *Gs, int m0, int n0,
                                                   int lc, RowF row_factor) {
    const bool hh = P.mode == GDP_MODE_HOUSEHOLDER;
    frag_gate_decay(
        acc, m0, n0, [&](int i) { return make_float2(Gs[tokof(P, i)], row_factor(i)); },
        [&](int j) { return Gs[tokof(P, j)]; },
        [&](int i, int j) { return i < lc && (hh ? j < i : tokof(P, j) < tokof(P, i)); });
}
/* a warp's fragment set to zero */
template <int NT> __device__ __forceinline__ void frag_zero(float (&acc)[NT][4]) {
#pragma unroll
    for (int i = 0; i < NT * 4; i++) acc[i >> 2][i & 3] = 0.f;
}
/* each pair of adjacent columns of a warp's 16 x 8*NT fragment at (m0, n0), as bf16, to at(r, c) */
template <int NT, class At>
__device__ __forceinline__ void frag_store_pairs(const float (&acc)[NT][4], int m0, int n0, At at) {
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
            *(__nv_bfloat162 *)at(m0 + g + hh * 8, n0 + nt * 8 + 2 * tq) =
                __floats2bfloat162_rn(acc[nt][hh * 2], acc[nt][hh * 2 + 1]);
}
/* the fragment, rounded to bf16 pairs, into a row-major bf16 tile (shared or global memory) */
template <int NT>
__device__ __forceinline__ void frag_store_bf16(const float (&acc)[NT][4], bf16_t *s, int lds, int m0, int n0) {
    frag_store_pairs(acc, m0, n0, [&](int r, int c) { return s + (r * lds + c); });
}
__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(const uint32_t *)&v;
}
/* frag_store_pairs into shared memory by stmatrix, a 16 x 16 piece an instruction where the pairs
 * took eight stores (at(r, c) for c a multiple of 8 must start 16 aligned bytes holding columns
 * c .. c + 7 of row r, which every tile view here gives). H200, H 16: prep
 * -2% (its W and U staging), the others within noise, and k_state_fast's merged step 3-5% slower,
 * so its state copy keeps the fragment stores. */
template <int NT, class At>
__device__ __forceinline__ void frag_stsm_pairs(const float (&acc)[NT][4], int m0, int n0, At at) {
    if constexpr (NT % 2) {
        frag_store_pairs(acc, m0, n0, at);
    } else {
        const int lane = threadIdx.x & 31, j = lane >> 3;
        const int r = m0 + (j & 1) * 8 + (lane & 7);
#pragma unroll
        for (int np = 0; np < NT / 2; np++)
            stsm_x4(at(r, n0 + (2 * np + (j >> 1)) * 8), bf16x2_bits(acc[2 * np][0], acc[2 * np][1]),
                    bf16x2_bits(acc[2 * np][2], acc[2 * np][3]), bf16x2_bits(acc[2 * np + 1][0], acc[2 * np + 1][1]),
                    bf16x2_bits(acc[2 * np + 1][2], acc[2 * np + 1][3]));
    }
}
/* frag_store_bf16 into a shared tile */
template <int NT>
__device__ __forceinline__ void frag_stsm_bf16(const float (&acc)[NT][4], bf16_t *s, int lds, int m0, int n0) {
    frag_stsm_pairs(acc, m0, n0, [&](int r, int c) { return s + (r * lds + c); });
}
/* a K x V fp32 state (h0, dht; NULL: zeros) into the fragment; and the fragment back out (ht, dh0) */
template <int NT>
__device__ __forceinline__ void frag_load_state(float (&acc)[NT][4], const float *src, const Params &P, int64_t st0,
                                                int v0, int m0, int n0) {
    frag_each(acc, m0, n0, [&](int r, int c, float &v) {
        v = src && r < P.K && v0 + c < P.V ? src[st0 + (int64_t)r * P.V + v0 + c] : 0.f;
    });
}
template <int NT>
__device__ __forceinline__ void frag_store_state(float (&acc)[NT][4], float *dst, const Params &P, int64_t st0, int v0,
                                                 int m0, int n0) {
    if (dst)
        frag_each(acc, m0, n0, [&](int r, int c, float &v) {
            if (r < P.K && v0 + c < P.V) dst[st0 + (int64_t)r * P.V + v0 + c] = v;
        });
}

/* Views of a bf16 tile in shared memory: at(r, c) is element (r, c); c a multiple of 8 gives a
 * 16-byte-aligned chunk of 8 consecutive columns, which is all ldmatrix needs. RowMajor: row r at
 * p + r ld. Swz128<ROWS>: the layout of TMA's 128-byte-swizzled boxes, COLS / 64 boxes of ROWS x 64
 * (128-byte rows) side by side, chunk j of row r stored at chunk j ^ (r & 7), base 1024-aligned;
 * ldmatrix's 8 rows of one chunk column then fall in 8 different bank groups. */
struct RowMajor {
    bf16_t *p;
    int ld;
    __device__ __forceinline__ bf16_t *at(int r, int c) const { return p + r * ld + c; }
};
/* Split mode's keys placed by slice (row (t, b) holds token t's key at least on slice b; n a power of
 * two): row j of this view is row (t_j, b) for the fixed slice b, i.e. token j / n's key there, so
 * that products over slice b's columns take the keys as they were loaded, with M applied to the
 * other operand or the result (no read-key tile R is built). tmask = ~(n - 1). */
struct TokenSliceRows {
    bf16_t *p;
    int ld, tmask, b;
    __device__ __forceinline__ bf16_t *at(int r, int c) const { return p + ((r & tmask) + b) * ld + c; }
};
template <int ROWS> struct Swz128 {
    bf16_t *p;
    __device__ __forceinline__ bf16_t *at(int r, int c) const {
        return p + (c >> 6) * (ROWS * 64) + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7);
    }
};

/* A bf16 tile (any view) minus a warp's MT x NT fragments at (m0, n0), in place, rounded once */
template <int MT, int NT, class View>
__device__ __forceinline__ void frags_sub_from(View X, const float (&F)[MT][NT][4], int m0, int n0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                __nv_bfloat162 *px = (__nv_bfloat162 *)X.at(m0 + 16 * mt + g + hh * 8, n0 + nt * 8 + 2 * tq);
                const float2 x = __bfloat1622float2(*px);
                *px = __floats2bfloat162_rn(x.x - F[mt][nt][hh * 2], x.y - F[mt][nt][hh * 2 + 1]);
            }
}

/* The sequential passes' state, a warp's MT row tiles of 16 at (m0, n0): in from a K x V fp32 state
 * (src; NULL: zeros) with its bf16 copy to at(r, c) (as frag_store_pairs), scaled, and out to dst */
template <int MT, int NT, class At>
__device__ __forceinline__ void state_frags_in(float (&S)[MT][NT][4], const float *src, const Params &P, int64_t st0, int v0,
                                               int m0, int n0, At at) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        frag_load_state(S[mt], src, P, st0, v0, m0 + 16 * mt, n0);
        frag_store_pairs(S[mt], m0 + 16 * mt, n0, at);
    }
}
/* v *= f(r) over a warp's 16 x 8*NT fragment at row m0 (the mma C layout): a thread's two rows, f
 * called once for each (where frag_each called it, an exp and a shared load, for every element) */
template <int NT, class RowF> __device__ __forceinline__ void frag_scale_rows(float (&acc)[NT][4], int m0, RowF f) {
    const int r0 = m0 + ((threadIdx.x & 31) >> 2);
    const float f0 = f(r0), f1 = f(r0 + 8);
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        acc[nt][0] *= f0;
        acc[nt][1] *= f0;
        acc[nt][2] *= f1;
        acc[nt][3] *= f1;
    }
}
template <int MT, int NT> __device__ __forceinline__ void frag_scale(float (&S)[MT][NT][4], float f) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) S[mt][nt][e] *= f;
}
template <int MT, int NT>
__device__ __forceinline__ void state_frags_out(float (&S)[MT][NT][4], float *dst, const Params &P, int64_t st0, int v0, int m0,
                                                int n0) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++) frag_store_state(S[mt], dst, P, st0, v0, m0 + 16 * mt, n0);
}

/* columns n .. n + 15 of B at depth k0 as the mma B fragments of two n8 tiles (b[0], b[1]: columns
 * n .. n + 7; b[2], b[3]: n + 8 .. n + 15): B stored [k][n] (BT false) or [n][k] (BT true) */
template <bool BT, class VB> __device__ __forceinline__ void ldsm_b(uint32_t (&b)[4], VB B, int n, int k0) {
    const int lane = threadIdx.x & 31, mi = lane >> 3, lr = lane & 7;
    if (BT)
        ldsm_x4(b[0], b[1], b[2], b[3], B.at(n + (mi >> 1) * 8 + lr, k0 + (mi & 1) * 8));
    else
        ldsm_x4_t(b[0], b[1], b[2], b[3], B.at(k0 + (mi & 1) * 8 + lr, n + (mi >> 1) * 8));
}
/* acc[MT][NT][4] += A (MT row tiles of 16, KD deep) x B (KD x 8*NT at n0), where load_a(mt, k0, a)
 * puts row tile mt's 16 x 16 A fragment at depth k0 into a (so the row tiles may come from different
 * tiles, or some transposed). B: stored [k][n] (BT false) or [n][k] (BT true). Each B fragment serves
 * the MT row tiles. NB: B negated (its sign bits flipped as loaded). */
template <int MT, int NT, bool BT = false, bool NB = false, class LoadA, class VB>
__device__ __forceinline__ void warp_mma_rows(float (&acc)[MT][NT][4], LoadA load_a, VB B, int kd, int n0) {
    static_assert(NT % 2 == 0, "B fragments are loaded two n8 tiles at a time");
#pragma unroll 4
    for (int k0 = 0; k0 < kd; k0 += 16) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) load_a(mt, k0, a[mt]);
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldsm_b<BT>(b, B, n0 + np * 16, k0);
            if (NB)
#pragma unroll
                for (int i = 0; i < 4; i++) b[i] ^= 0x80008000u;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_bf16(acc[mt][np * 2], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[0], b[1]);
                mma_bf16(acc[mt][np * 2 + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[2], b[3]);
            }
        }
    }
}
/* An mma A fragment's register pairs (depths k0 + 2 tq + e, and + 8) times s0 (e = 0) and s1 (e = 1),
 * rounded once: split mode's M (or a 0/1 slice mask) on the rows of the keys a product contracts */
__device__ __forceinline__ void frag_a_scale_pairs(uint32_t (&a)[4], float s0, float s1) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&a[i]));
        const __nv_bfloat162 r = __floats2bfloat162_rn(f.x * s0, f.y * s1);
        a[i] = *reinterpret_cast<const uint32_t *>(&r);
    }
}
/* Split mode (n a power of two): the slices of this thread's register pair in a fragment, depths or
 * columns 2 tq and 2 tq + 1 mod n */
__device__ __forceinline__ int2 pair_slices(int n) {
    const int tq = threadIdx.x & 3;
    return make_int2((2 * tq) & (n - 1), (2 * tq + 1) & (n - 1));
}
/* M[a, b] of head h for the slices a of this thread's register pairs, the factors
 * frag_a_scale_pairs and the products' column scalings take */
__device__ __forceinline__ float2 mask_pair(const Params &P, int h, int b, int n) {
    const int2 a = pair_slices(n);
    const float *Mb = P.mask + (int64_t)h * n * n + b; /* M[a, b] at Mb[a n] */
    return make_float2(__ldg(Mb + a.x * n), __ldg(Mb + a.y * n));
}
/* row tile m (16 rows) of A at depth k0 as an mma A fragment: A row-major [m][k] (AT false) or stored
 * transposed as [k][m] (AT true) */
template <bool AT, class VA> __device__ __forceinline__ void ldsm_a(uint32_t (&a)[4], VA A, int m, int k0) {
    const int lane = threadIdx.x & 31, mi = lane >> 3, lr = lane & 7;
    if (AT)
        ldsm_x4_t(a[0], a[1], a[2], a[3], A.at(k0 + (mi >> 1) * 8 + lr, m + (mi & 1) * 8));
    else
        ldsm_x4(a[0], a[1], a[2], a[3], A.at(m + lr + (mi & 1) * 8, k0 + (mi >> 1) * 8));
}
/* the same with the MT row tiles of one tile A, 16 MT rows at m0 */
template <int MT, int NT, bool AT, bool BT = false, bool NB = false, class VA, class VB>
__device__ __forceinline__ void warp_mma_v(float (&acc)[MT][NT][4], VA A, VB B, int kd, int m0, int n0) {
    warp_mma_rows<MT, NT, BT, NB>(
        acc, [&](int mt, int k0, uint32_t (&a)[4]) { ldsm_a<AT>(a, A, m0 + 16 * mt, k0); }, B, kd, n0);
}
/* the same on row-major tiles */
template <int MT, int NT, bool AT, bool BT = false>
__device__ __forceinline__ void warp_mma_mt(float (&acc)[MT][NT][4], const bf16_t *A, int lda, const bf16_t *B, int ldb,
                                            int kd, int m0, int n0) {
    warp_mma_v<MT, NT, AT, BT>(acc, RowMajor{(bf16_t *)A, lda}, RowMajor{(bf16_t *)B, ldb}, kd, m0, n0);
}
/* the same for one row tile: acc[NT][4] at m0 */
template <int NT, bool AT, bool BT = false>
__device__ __forceinline__ void warp_mma(float (&acc)[NT][4], const bf16_t *A, int lda, const bf16_t *B, int ldb,
                                         int kd, int m0, int n0) {
    warp_mma_mt<1, NT, AT, BT>(reinterpret_cast<float(&)[1][NT][4]>(acc), A, lda, B, ldb, kd, m0, n0);
}

/* f(r, c) for each 8-element (16-byte) piece of a ROWS x COLS bf16 tile, spread over the block */
template <int ROWS, int COLS, class F> __device__ __forceinline__ void for_pieces16(F f) {
    constexpr int CPR = COLS / 8, N = ROWS * CPR;
#pragma unroll
    for (int i = 0; i < (N + NTHREADS - 1) / NTHREADS; i++) {
        const int e = threadIdx.x + i * NTHREADS;
        if (N % NTHREADS == 0 || e < N) f(e / CPR, (e % CPR) * 8);
    }
}
/* shared -> global with 16-byte moves; xor_mask 0x80008000 negates (flips the sign bits) */
template <int ROWS, int COLS>
__device__ __forceinline__ void store_tile16(bf16_t *g, int64_t ldg, const bf16_t *s, int lds, uint32_t xor_mask = 0) {
    for_pieces16<ROWS, COLS>([&](int r, int c) {
        uint4 u = *(const uint4 *)(s + r * lds + c);
        u.x ^= xor_mask, u.y ^= xor_mask, u.z ^= xor_mask, u.w ^= xor_mask;
        *(uint4 *)(g + r * ldg + c) = u;
    });
}
/* A 64 x 128 bf16 staging tile of 256-byte rows whose 16-byte chunks are XOR-swizzled by row
 * (chunk c of row r at c ^ (r & 7)), so fragment stores and 16-byte reads meet no bank conflicts. */
__device__ __forceinline__ int swz128(int r, int c) { return r * 128 + (((c >> 3) ^ (r & 7)) << 3) + (c & 7); }
template <int NT>
__device__ __forceinline__ void frag_stage_bf16(const float (&acc)[NT][4], bf16_t *s, int m0, int n0) {
    frag_stsm_pairs(acc, m0, n0, [&](int r, int c) { return s + swz128(r, c); });
}
/* columns c0 .. c0 + COLS - 1 (COLS + c0 <= 128) of the staged 64-row tile to global rows (stride
 * ldg), 16 bytes a move */
template <int COLS> __device__ __forceinline__ void unstage_tile(bf16_t *g, int64_t ldg, const bf16_t *s, int c0 = 0) {
    for_pieces16<64, COLS>([&](int r, int c) { *(uint4 *)(g + r * ldg + c) = *(const uint4 *)(s + swz128(r, c0 + c)); });
}
/* global -> shared by cp.async */
template <int ROWS, int COLS> __device__ __forceinline__ void cp_tile16(bf16_t *s, int lds, const bf16_t *g, int64_t ldg) {
    for_pieces16<ROWS, COLS>([&](int r, int c) { cp_async16(s + r * lds + c, g + r * ldg + c); });
}
/* ROWS rows of COLS bf16 by cp.async, row r from rowp(r) (16-byte aligned); rows r >= nrows become
 * zeros */
template <int ROWS, int COLS, class RowP>
__device__ __forceinline__ void cp_rows_of(bf16_t *s, int lds, RowP rowp, int nrows) {
    for_pieces16<ROWS, COLS>([&](int r, int c) {
        if (r < nrows)
            cp_async16(s + r * lds + c, rowp(r) + c);
        else
            *(uint4 *)(s + r * lds + c) = make_uint4(0, 0, 0, 0);
    });
}
/* CTP token rows (stride row_stride) by cp.async; rows t >= ct become zeros */
template <int CTP, int COLS>
__device__ __forceinline__ void cp_token_rows(bf16_t *s, int lds, const bf16_t *g, int64_t row_stride, int ct) {
    cp_rows_of<CTP, COLS>(s, lds, [&](int t) { return g + t * row_stride; }, ct);
}

/* an A fragment (16 rows, depth 16 ks .. 16 ks + 15) from a warp's fp32 accumulators whose columns
 * are that depth (n8 tiles 2 ks and 2 ks + 1), rounded to bf16 */
template <int NT> __device__ __forceinline__ void frag_a_of(const float (&F)[NT][4], int ks, uint32_t (&a)[4]) {
    a[0] = bf16x2_bits(F[2 * ks][0], F[2 * ks][1]);
    a[1] = bf16x2_bits(F[2 * ks][2], F[2 * ks][3]);
    a[2] = bf16x2_bits(F[2 * ks + 1][0], F[2 * ks + 1][1]);
    a[3] = bf16x2_bits(F[2 * ks + 1][2], F[2 * ks + 1][3]);
}
/* A fragments a[KS][4] (16 rows at column c0 of a tile, depth = the tile's rows 16 ks ..) stored
 * transposed into rows 16 ks .. of the tile's columns c0 .. c0 + 15: the inverse of ldsm_a<true> */
template <int KS, class View> __device__ __forceinline__ void frags_a_store_t(View X, int c0, const uint32_t (&a)[KS][4]) {
    const int lane = threadIdx.x & 31, mi = lane >> 3, lr = lane & 7;
#pragma unroll
    for (int ks = 0; ks < KS; ks++) stsm_x4_t(X.at(16 * ks + (mi >> 1) * 8 + lr, c0 + (mi & 1) * 8), a[ks][0], a[ks][1], a[ks][2], a[ks][3]);
}
/* rows r < nrows of ROWS rows x 16 columns of a shared tile (from s) to global rows (from g, stride
 * ldg), by one warp, 16 bytes a move */
template <int ROWS>
__device__ __forceinline__ void warp_rows16_out(bf16_t *g, int64_t ldg, const bf16_t *s, int lds, int nrows = ROWS) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < ROWS / 16; i++) {
        const int p = lane + 32 * i, r = p >> 1, c = (p & 1) * 8;
        if (r < nrows) *(uint4 *)(g + r * ldg + c) = *(const uint4 *)(s + r * lds + c);
    }
}

} // namespace gdp
