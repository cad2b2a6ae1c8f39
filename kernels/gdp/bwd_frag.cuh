/* Helpers of the fast bwd_a kernels (also used by the fast bwd_b): row dots of fragments, dS,
 * the per-V-tile products and the gate parts. */
#pragma once
#include "kernels/gdp/frag.cuh"

namespace gdp {

/* ---------------------------------------------------------------- 6b. bwd_a, fast path */
/* k_bwd_a with compile-time sizes, for bf16 with K and V multiples of 64 (K == KP, V == VP) and
 * 16-byte aligned rows; CTP = Ctp. ncu's SASS samples of k_bwd_a (H 16, n 2) put most of its
 * 600 M warp instructions in integer work: a division per 16-byte piece in the runtime copy loops
 * and per-element epilogue passes through shared memory, against 2.4% HMMA. Here copy offsets are
 * shifts, the four V-loop products stay in registers through the epilogue, the gate factors are
 * per-row tables, and the row dots (dK_w . K_w, dQ . q) come from the fragments. The products are
 * the ones of k_bwd_a, in the same order. */
template <int CTP> struct BwdAFastSmem {
    static constexpr int QW = CTP == 16 ? 16 : 32; /* warp-tile width of the CTP x 64 products */
    static constexpr int QCT = 64 / QW;             /* their column tiles */
    /* Gs, rowf, qf [64]; red [8]; row-dot partials pst, pga [64][2], pq [CTP][QCT] (<= 128) */
    static constexpr int NSCAL = 3 * 64 + 8 + 2 * 128 + 128;
    static constexpr int QT = CTP * LDT, TILE = 64 * LDT; /* bf16 elements */
    static constexpr int STAGE = QT + 4 * TILE;          /* dO, D, dD, h, dh of one V tile */
    static constexpr size_t BYTES = NSCAL * 4 + (size_t)(QT + TILE + 2 * STAGE) * 2;
};

/* This thread's share of the row dots of a warp's 16 x 8*NT fragment at (m0, n0) with the bf16 tile
 * X: s0 (row m0 + g) and s1 (row m0 + g + 8) gain acc * X over the thread's columns. */
template <int NT>
__device__ __forceinline__ void frag_rowdot_acc(const float (&acc)[NT][4], const bf16_t *X, int ldx, int m0, int n0,
                                                float &s0, float &s1) {
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int c = n0 + nt * 8 + 2 * tq;
        const float2 x0 = __bfloat1622float2(*(const __nv_bfloat162 *)(X + (m0 + g) * ldx + c));
        const float2 x1 = __bfloat1622float2(*(const __nv_bfloat162 *)(X + (m0 + g + 8) * ldx + c));
        s0 += acc[nt][0] * x0.x + acc[nt][1] * x0.y;
        s1 += acc[nt][2] * x1.x + acc[nt][3] * x1.y;
    }
}
/* The quad's shares of rows m0 + g and m0 + g + 8 summed (fixed order) into part[r * nparts + j]. */
__device__ __forceinline__ void quad_rows_out(float s0, float s1, int m0, int j, float *part, int nparts) {
    const int lane = threadIdx.x & 31, g = lane >> 2;
    s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
    s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
    if ((lane & 3) == 0) {
        part[(m0 + g) * nparts + j] = s0;
        part[(m0 + g + 8) * nparts + j] = s1;
    }
}
/* Row dots of the fragment with X: part[r * nparts + n0 / (8*NT)] for its 16 rows r; +0 for this
 * thread's two rows unless keep (RawKeyOwn::rows) */
template <int NT>
__device__ __forceinline__ void frag_rowdot(const float (&acc)[NT][4], const bf16_t *X, int ldx, int m0, int n0,
                                            float *part, int nparts, bool keep = true) {
    float s0 = 0.f, s1 = 0.f;
    frag_rowdot_acc(acc, X, ldx, m0, n0, s0, s1);
    quad_rows_out(keep ? s0 : 0.f, keep ? s1 : 0.f, m0, n0 / (8 * NT), part, nparts);
}

/* Split mode's keys as loaded in bwd_a (raw: n 2 or 4, slices of 32 columns or more): row (t, a) of
 * the key tile holds k_t whole, and K_w(t, a) = [a == b] k_t on slice b is applied where the tile is
 * read. A warp's 32 row-dot columns (from key column x_rows) and its 16 or 32 dq columns (from x_q)
 * lie in one slice each: the row dots keep the rows of their slice (rows: this thread's two rows,
 * g and g + 8, share a slice since n divides 8; a select, so the others give +0 as the masked tile's
 * zeros do), and dq = dS K_w keeps dS's columns j of dq's slice (q: an AND on dS's A fragments, by
 * bf16 half, as bwd_b's raw keys do). The nonzero products are the masked tile's, in the same places;
 * no masking pass over the tile and no barrier after it. */
struct RawKeyOwn {
    bool rows;
    uint32_t q;
    __device__ __forceinline__ RawKeyOwn(const Params &P, bool raw, int x_rows, int x_q) {
        const int g = (threadIdx.x & 31) >> 2, q_slice = slice_of(P, x_q);
        const int2 ab = pair_slices(P.n);
        rows = !raw || (g & (P.n - 1)) == slice_of(P, x_rows);
        q = !raw ? ~0u : (ab.x == q_slice ? 0x0000ffffu : 0u) | (ab.y == q_slice ? 0xffff0000u : 0u);
    }
};
/* acc += dS K_w: NT n8 tiles at (m0, n0), GDP_TILE deep, dS's A fragments ANDed with own_q */
template <int NT>
__device__ __forceinline__ void mma_ds_keys(float (&acc)[NT][4], bf16_t *dS, int lds, bf16_t *Kw, int ldk, int m0, int n0,
                                            uint32_t own_q) {
    warp_mma_rows<1, NT>(
        reinterpret_cast<float(&)[1][NT][4]>(acc),
        [&](int, int k0, uint32_t(&a)[4]) {
            ldsm_a<false>(a, RowMajor{dS, lds}, m0, k0);
#pragma unroll
            for (int r = 0; r < 4; r++) a[r] &= own_q;
        },
        RowMajor{Kw, ldk}, GDP_TILE, n0);
}

/* One 64-column V tile's share of bwd_a's sums over V for a 64-row K tile: <h, dh> (this thread's
 * pieces), dO h^T into the dq tile (with_q), D dh^T, dD h^T, and dO D^T into the dS tile (with_p).
 * dO, D, dD: leading dimension ldv; h and dh: LDT. */
template <int NTQ>
__device__ __forceinline__ void bwd_a_vtile(float &hdh, float (&aQ)[NTQ][4], float (&aK)[4][4], float (&aW)[4][4],
                                            float (&aP)[NTQ][4], const bf16_t *dO, const bf16_t *D, const bf16_t *dD, int ldv,
                                            const bf16_t *Hs, const bf16_t *dHs, bool with_q, bool with_p, int mq, int nq,
                                            int m1, int n1) {
    for_pieces16<64, 64>([&](int x, int y) {
        float hv[8], dv[8];
        ld8(hv, Hs + x * LDT + y);
        ld8(dv, dHs + x * LDT + y);
#pragma unroll
        for (int j = 0; j < 8; j++) hdh += hv[j] * dv[j];
    });
    if (with_q) warp_mma<NTQ, false, true>(aQ, dO, ldv, Hs, LDT, GDP_TILE, mq, nq);
    warp_mma<4, false, true>(aK, D, ldv, dHs, LDT, GDP_TILE, m1, n1);
    warp_mma<4, false, true>(aW, dD, ldv, Hs, LDT, GDP_TILE, m1, n1);
    if (with_p) warp_mma<NTQ, false, true>(aP, dO, ldv, D, ldv, GDP_TILE, mq, nq);
}

/* bwd_a_vtile for k_bwd_a_kres at 32 chunk tokens in one pass over the V tile's four 16-deep steps,
 * each fragment loaded once: the warp's q tile columns (nq) lie inside its dW / dK_w columns (n1, see
 * k_bwd_a_kres's ONCE), so dO h^T takes h's fragments from dD h^T's; dO D^T shares dO's fragments with
 * dO h^T; and <h, dh> is summed from the h and dh fragments of dD h^T and D dh^T (warp w at the
 * 16-deep step w >> 1 of its 32 columns, so each element once) instead of reading both tiles again.
 * The products' sums are bwd_a_vtile's, in its order (the same bits); <h, dh> is summed in another
 * order. (bwd_a_kres was bound by shared memory as the state pass was: ~76% of its cycles were
 * shared wavefronts at H 16, n_h 2, in a profile; this loads 24 fewer fragments a warp and
 * drops the two 64 x 64 tile reads of <h, dh>, ~16% of its wavefronts. H200, H 16: 0.468-0.470 ->
 * 0.436-0.437 ms at n_h 2, 0.689-0.690 -> 0.653-0.655 at n_h 3.) */
__device__ __forceinline__ void bwd_a_vtile_once(float &hdh, float (&aQ)[2][4], float (&aK)[4][4], float (&aW)[4][4],
                                                 float (&aP)[2][4], const bf16_t *dO, const bf16_t *D, const bf16_t *dD,
                                                 int ldv, const bf16_t *Hs, const bf16_t *dHs, bool with_p, int mq, int nq,
                                                 int m1, int n1) {
    const RowMajor vO{(bf16_t *)dO, ldv}, vD{(bf16_t *)D, ldv}, vdD{(bf16_t *)dD, ldv}, vH{(bf16_t *)Hs, LDT},
        vdH{(bf16_t *)dHs, LDT};
    const bool q_hi = nq != n1; /* q's columns are the upper 16 of n1's 32 */
    const int k_dot = 16 * ((threadIdx.x >> 5) >> 1);
#pragma unroll
    for (int k0 = 0; k0 < GDP_TILE; k0 += 16) {
        uint32_t aO[4], aD[4], adD[4], bh[2][4], bdh[2][4];
        ldsm_a<false>(aO, vO, mq, k0);
        ldsm_a<false>(aD, vD, m1, k0);
        ldsm_a<false>(adD, vdD, m1, k0);
#pragma unroll
        for (int np = 0; np < 2; np++) {
            ldsm_b<true>(bh[np], vH, n1 + 16 * np, k0);
            ldsm_b<true>(bdh[np], vdH, n1 + 16 * np, k0);
            mma_bf16(aK[2 * np], aD[0], aD[1], aD[2], aD[3], bdh[np][0], bdh[np][1]);
            mma_bf16(aK[2 * np + 1], aD[0], aD[1], aD[2], aD[3], bdh[np][2], bdh[np][3]);
            mma_bf16(aW[2 * np], adD[0], adD[1], adD[2], adD[3], bh[np][0], bh[np][1]);
            mma_bf16(aW[2 * np + 1], adD[0], adD[1], adD[2], adD[3], bh[np][2], bh[np][3]);
        }
        uint32_t bq[4];
#pragma unroll
        for (int i = 0; i < 4; i++) bq[i] = q_hi ? bh[1][i] : bh[0][i];
        mma_bf16(aQ[0], aO[0], aO[1], aO[2], aO[3], bq[0], bq[1]);
        mma_bf16(aQ[1], aO[0], aO[1], aO[2], aO[3], bq[2], bq[3]);
        if (with_p) {
            uint32_t bd[4];
            ldsm_b<true>(bd, vD, nq, k0);
            mma_bf16(aP[0], aO[0], aO[1], aO[2], aO[3], bd[0], bd[1]);
            mma_bf16(aP[1], aO[0], aO[1], aO[2], aO[3], bd[2], bd[3]);
        }
        if (k0 == k_dot)
#pragma unroll
            for (int np = 0; np < 2; np++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float2 h2 = __bfloat1622float2(*(const __nv_bfloat162 *)&bh[np][i]);
                    const float2 d2 = __bfloat1622float2(*(const __nv_bfloat162 *)&bdh[np][i]);
                    hdh += h2.x * d2.x + h2.y * d2.y;
                }
    }
}

/* The warp's tile of dS = causal mask o scale e^{G_t - G_s} o (dO D^T) (rows t tokens, columns s
 * chunk rows), from its dO D^T fragment, into dSs (bf16, LDT) */
template <int NTQ>
__device__ __forceinline__ void store_ds_tile(const Params &P, float (&aP)[NTQ][4], const float *Gs, int ct, int lc,
                                              bf16_t *dSs, int mq, int nq) {
    frag_causal_decay(P, aP, Gs, mq, nq, ct, lc);
    frag_stsm_bf16(aP, dSs, LDT, mq, nq);
}

/* Warp 0: the gate parts of K tile kt's rows into dGa, from the per-warp <h, dh> sums (red), the
 * row dots of the decay part of dK_w (pst) and of all of dK_w (pga) with K_w, two halves a row,
 * and those of dQ with q (pq, QCT parts a token). */
template <int QCT>
__device__ __forceinline__ void bwd_a_gate_out(const Params &P, const ChunkCtx &c, int kt, const float *Gs,
                                               const float *red, const float *pst, const float *pga, const float *pq) {
    const int lane = threadIdx.x & 31, ct = c.ct, lc = c.lc;
    float ht = 0.f;
    for (int i = 0; i < NTHREADS / 32; i++) ht += red[i];
    auto stdr = [&](int i) { return i < lc ? pst[2 * i] + pst[2 * i + 1] : 0.f; };
    const float sd = warp_sum(stdr(lane) + stdr(lane + 32)), gL = expf(Gs[ct - 1]);
    float *out = P.dGa + (c.ch * P.nkt + kt) * GDP_CHUNK;
    for (int i = lane; i < 64; i += 32) {
        float val = -(pga[2 * i] + pga[2 * i + 1]);
        const int t = tokof(P, i);
        if (i == t * P.n && t < ct) {
            float qd = 0.f;
#pragma unroll
            for (int j = 0; j < QCT; j++) qd += pq[t * QCT + j];
            val += qd;
        }
        if (i == (ct - 1) * P.n) val += gL * ht + sd;
        out[i] = val;
    }
}

} // namespace gdp
