/* Tiles shared by the fast state and output kernels: the output tile over the warps, the merged
 * state step and a pipeline stage of the sequential passes. */
#pragma once
#include "kernels/gdp/frag.cuh"

namespace gdp {

/* A chunk's CTP x BV output tile over the warps (CTP 0: no output): MO row tiles of 16, NO n8 tiles a
 * warp at (mo, no), at least two (warp_mma_v loads B two n8 tiles at a time), so at 16 chunk tokens
 * and BV 64 only four warps take it (active) */
template <int CTP, int BV> struct OutTiles {
    static constexpr int MO = CTP / 16 > 0 ? CTP / 16 : 1, NO = BV / 8 / (8 / MO) < 2 ? 2 : BV / 8 / (8 / MO);
    static constexpr int USED = MO * (BV / 8 / NO);
    int mo, no;
    bool active;
    __device__ __forceinline__ OutTiles() {
        const int warp = threadIdx.x >> 5;
        mo = (warp % MO) * 16;
        no = (warp / MO) * (NO * 8);
        active = warp < USED;
    }
};

/* k_state_fast's step with the output at V tile 128 and 32 or 64 chunk tokens: the products that
 * share an operand run as one, so a warp loads that operand's fragments once: [W; q] h (h from Sop)
 * before the step's barrier, [Kwd^T; P] Delta after it. Warp w takes the 32 columns at n = 32 (w >> 1)
 * of every product, and row group w & 1 of each: W rows m1 = 32 (w & 1) (two row tiles), q rows
 * mq = 16 MQ (w & 1), state rows m2 = KP / 2 (w & 1) (KP / 32 row tiles). SO holds the state's MS row
 * tiles, then o's MQ. The same products in the same order as the separate ones, so the same bits.
 * Separately, h's fragments were loaded for W h and again for q h, and Delta's for Kwd^T Delta and
 * again for P Delta, and the step was bound by shared memory. Merged, the pass has 21% fewer shared
 * wavefronts; at H 16 it is 10-16% faster (n_h 2: 0.251 -> 0.222 ms). The saving
 * pass (k_state_tma) keeps the separate products: merged, it was 0-4% slower. */
template <int KP, int BV, int CTPO> struct MergedStep {
    static constexpr bool ON = BV == 128 && (CTPO == 32 || CTPO == 64) && KP <= 128;
    static constexpr int MQ = CTPO / 32 > 0 ? CTPO / 32 : 1, MS = KP / 32;
    int m1, mq, m2, n;
    __device__ __forceinline__ MergedStep() {
        const int warp = threadIdx.x >> 5, rg = warp & 1;
        m1 = 32 * rg, mq = 16 * MQ * rg, m2 = KP / 2 * rg, n = 32 * (warp >> 1);
    }
    /* Delta = U - W h in place of U, and o's part (q h) scaled by row (qscale(t)) into SO's tail */
    template <class VW, class VQ, class VS, class VU, class QScale>
    __device__ __forceinline__ void front(float (&SO)[MS + MQ][4][4], VW W, VQ Q, VS Sop, VU U, QScale qscale) const {
        float X[2 + MQ][4][4];
#pragma unroll
        for (int mt = 0; mt < 2 + MQ; mt++) frag_zero(X[mt]);
        warp_mma_rows<2 + MQ, 4>(
            X,
            [&](int mt, int k0, uint32_t(&a)[4]) {
                if (mt < 2)
                    ldsm_a<false>(a, W, m1 + 16 * mt, k0);
                else
                    ldsm_a<false>(a, Q, mq + 16 * (mt - 2), k0);
            },
            Sop, KP, n);
        frags_sub_from(U, reinterpret_cast<float(&)[2][4][4]>(X), m1, n);
#pragma unroll
        for (int j = 0; j < MQ; j++) {
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) SO[MS + j][nt][e] = X[2 + j][nt][e];
            frag_scale_rows(SO[MS + j], mq + 16 * j, qscale);
        }
    }
    /* h = gL h + Kwd^T Delta and o += P Delta (Delta in U) */
    template <class VK, class VP, class VU>
    __device__ __forceinline__ void back(float (&SO)[MS + MQ][4][4], VK Kwd, VP Pt, VU U, float gL) const {
        frag_scale(reinterpret_cast<float(&)[MS][4][4]>(SO), gL);
        warp_mma_rows<MS + MQ, 4>(
            SO,
            [&](int mt, int k0, uint32_t(&a)[4]) {
                if (mt < MS)
                    ldsm_a<true>(a, Kwd, m2 + 16 * mt, k0);
                else
                    ldsm_a<false>(a, Pt, mq + 16 * (mt - MS), k0);
            },
            U, 64, n);
    }
    __device__ __forceinline__ float (&state(float (&SO)[MS + MQ][4][4]) const)[MS][4][4] {
        return reinterpret_cast<float(&)[MS][4][4]>(SO);
    }
};

/* o's rows t < ct of a warp's NO n8 tiles at (mo, no) of a chunk's output tile (V columns from v0) */
template <int NO>
__device__ __forceinline__ void store_o_frag(const Params &P, const float (&O)[NO][4], const GdpChunkInfo &ck, int h, int v0,
                                             int mo, int no) {
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    bf16_t *og = (bf16_t *)P.o + ((int64_t)ck.tok0 * P.H + h) * P.V + v0;
#pragma unroll
    for (int nt = 0; nt < NO; nt++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int t = mo + g + hh * 8;
            if (t < ck.ct)
                *(__nv_bfloat162 *)(og + (int64_t)t * P.H * P.V + no + nt * 8 + 2 * tq) =
                    __floats2bfloat162_rn(O[nt][hh * 2], O[nt][hh * 2 + 1]);
        }
}

/* The head of a pipeline stage of the fast sequential kernels: the chunk's 64 gate floats (G), then
 * its W and Kwd tiles (64 x KP, leading dimension KP + 8); stage b starts at smem + b * STAGE. */
template <int KP, size_t STAGE> struct SeqStageHead {
    static constexpr int LDK = KP + 8;
    char *smem;
    __device__ float *G(int b) const { return (float *)(smem + b * STAGE); }
    __device__ bf16_t *W(int b) const { return (bf16_t *)(smem + b * STAGE + 256); }
    __device__ bf16_t *Kwd(int b) const { return W(b) + 64 * LDK; }
    __device__ bf16_t *after(int b) const { return W(b) + 2 * 64 * LDK; } /* the kernel's own tiles */
    /* chunk-head ch's G, W and Kwd into stage b by cp.async (the caller commits) */
    __device__ void prefetch(const Params &P, int64_t ch, int b) const {
        if (threadIdx.x < 16) cp_async16(G(b) + threadIdx.x * 4, P.G + ch * GDP_CHUNK + threadIdx.x * 4);
        cp_tile16<64, KP>(W(b), LDK, (const bf16_t *)P.W + ch * P.sW, KP);
        cp_tile16<64, KP>(Kwd(b), LDK, (const bf16_t *)P.Kwd + ch * P.sW, KP);
    }
};

} // namespace gdp
