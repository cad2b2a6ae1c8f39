/* bwd_a over the whole K of 128 for one chunk: run by k_bwd_a_kres and by k_bwd_ab. */
#pragma once
#include "kernels/gdp/bwd_frag.cuh"

namespace gdp {

/* ---------------------------------------------------------------- 6c. bwd_a over the whole K of 128 */
/* k_bwd_a_fast runs one CTA a (chunk, K tile), so at K 128 each chunk's dO, Delta and dDelta
 * (40 KB at V 128, n_h 2) are read twice. Here one CTA takes both K tiles: dO, D and dD of the
 * first stay in shared memory for the second, and only h and dh stream per (K tile, V tile);
 * q and K_w are loaded once for the whole K. dW, dK_w and dq leave straight from the fragments.
 * Bytes a chunk at H 16, n_h 2: ~168 KB against ~208. The products and their order per K tile are
 * k_bwd_a_fast's; dS (the dO D^T part) is made once, in the first K tile's epilogue. Shared memory
 * fits two CTAs an SM at 16 and 32 chunk tokens. Requires K == KP == 128, V == VP <= 128. */
template <int CTP> struct BwdAKresSmem {
    static constexpr int KP = 128, LDK = KP + 8, VMAX = 128, LDV = VMAX + 8;
    /* warp-tile width of the CTP x 64 products: 16 gives every warp a dq and a dS tile at 32 tokens
     * (k_bwd_a_fast's 32 leaves four warps idle in the dq epilogue); 64 tokens need 32 (8 tiles) */
    static constexpr int QW = CTP == 64 ? 32 : 16, QCT = 64 / QW;
    static constexpr int NSCAL = 3 * 64 + 8 + 2 * 128 + 128;    /* Gs, rowf, qf; red; pst, pga; pq */
    static constexpr int STAGE = 2 * 64 * LDT;                    /* h and dh of one (K, V) tile */
    static constexpr size_t BYTES = NSCAL * 4 + 2 * ((size_t)(2 * 64 + CTP) * LDV + (size_t)(CTP + 64) * LDK + 2 * STAGE + CTP * LDT);
};

/* SPLIT false: householder mode only (k_bwd_ab's householder kind), so that no split-mode code takes
 * its registers; RAW false: split mode's keys always masked in place (k_bwd_ab's tiles kind, taken at
 * n other than 2 and 4, where the raw keys' code cost k_bwd_ab<32, tiles> 100 bytes of spills) */
template <int CTP, bool SPLIT = true, bool RAW = true>
__device__ __forceinline__ void bwd_a_kres_chunk(const Params &P, const ChunkCtx &c, char *smem) {
    using SM = BwdAKresSmem<CTP>;
    constexpr int QW = SM::QW, NTQ = QW / 8, QCT = SM::QCT, LDK = SM::LDK, LDV = SM::LDV;
    constexpr bool QSPLIT = (CTP / 16) * QCT == 4;
    const int ct = c.ct, lc = c.lc, nvt = P.nvt, NS = 2 * nvt;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    float *Gs = (float *)smem, *rowf = Gs + 64, *qf = rowf + 64, *red = qf + 64, *pst = red + 8, *pga = pst + 128,
          *pq = pga + 128;
    bf16_t *Dr = (bf16_t *)(smem + SM::NSCAL * 4), *dDr = Dr + 64 * LDV, *dOr = dDr + 64 * LDV;
    bf16_t *Qs = dOr + CTP * LDV, *Kws = Qs + CTP * LDK, *stg = Kws + 64 * LDK, *dSs = stg + 2 * SM::STAGE;
    const bf16_t *Dg = (const bf16_t *)P.D + c.ch * P.sD, *dDg = (const bf16_t *)P.dD + c.ch * P.sD;
    const bf16_t *hg = (const bf16_t *)P.h + c.ch * P.sH, *dhg = (const bf16_t *)P.dh + c.ch * P.sH;
    const bf16_t *dOg = (const bf16_t *)P.d_o + ((int64_t)c.tok0 * P.H + c.h) * P.V;
    const int64_t ostride = (int64_t)P.H * P.V, qstride = (int64_t)P.H * P.K;
    auto issue = [&](int step, int b) { /* step = K tile * nvt + V tile */
        const int kt = step / nvt, v0 = (step - kt * nvt) * GDP_TILE;
        bf16_t *Hs = stg + b * SM::STAGE;
        const int64_t k0 = (int64_t)kt * GDP_TILE * P.VP;
        if (kt == 0) {
            cp_token_rows<CTP, 64>(dOr + v0, LDV, dOg + v0, ostride, ct);
            cp_tile16<64, 64>(Dr + v0, LDV, Dg + v0, P.VP);
            cp_tile16<64, 64>(dDr + v0, LDV, dDg + v0, P.VP);
        }
        cp_tile16<64, 64>(Hs, LDT, hg + k0 + v0, P.VP);
        cp_tile16<64, 64>(Hs + 64 * LDT, LDT, dhg + k0 + v0, P.VP);
        cp_commit();
    };
    if (tid < 16) cp_async16(Gs + tid * 4, P.G + c.ch * GDP_CHUNK + tid * 4);
    cp_token_rows<CTP, 128>(Qs, LDK, (const bf16_t *)P.q + ((int64_t)c.tok0 * P.H + c.h) * P.K, qstride, ct);
    const bf16_t *k0row = krow<bf16_t>(P, c.tok0, c.h, 0);
    cp_rows_of<64, 128>(Kws, LDK, [&](int r) { return k0row + chunk_row_step(P, r) * P.K; }, lc);
    issue(0, 0);
    const int m1 = (warp >> 1) * 16, n1 = (warp & 1) * 32;
    const bool qtile = !QSPLIT || warp < 4, ptile = !QSPLIT || warp >= 4;
    /* ONCE (32 chunk tokens, bwd_a_vtile_once): warp w's q tile columns inside its n1's, the upper
     * or lower 16 by bit 1 of w; each of the eight (mq, nq) tiles is still one warp's */
    constexpr bool ONCE = CTP == 32 && QW == 16 && !QSPLIT;
    const int qi = QSPLIT ? (warp & 3) : warp;
    const int mq = ONCE ? 16 * (warp >> 2) : (qi / QCT) * 16, nq = ONCE ? n1 + 16 * ((warp >> 1) & 1) : (qi % QCT) * QW;
    /* split mode at n 2 and 4 (32 and 16 chunk tokens; K 128, so slices of 32 columns or more): the
     * keys as loaded (RawKeyOwn) */
    const bool split = SPLIT && P.mode == GDP_MODE_SPLIT, raw_keys = RAW && CTP <= 32 && split && (P.n == 2 || P.n == 4);
    float aP[NTQ][4];
    frag_zero(aP);
    /* K tile kt (unrolled: the first K tile's extra work is resolved at compile time); its V tiles
     * are the steps kt * nvt + vt */
#pragma unroll
    for (int kt = 0; kt < 2; kt++) {
        const int c0 = kt * GDP_TILE;
        float aQ[NTQ][4], aK[4][4], aW[4][4];
        frag_zero(aQ);
        frag_zero(aK);
        frag_zero(aW);
        float hdh = 0.f;
        for (int vt = 0; vt < nvt; vt++) {
            const int step = kt * nvt + vt, b = step & 1, v0 = vt * GDP_TILE;
            issue_next_wait_this(step + 1 < NS, [&] { issue(step + 1, b ^ 1); });
            __syncthreads();
            if (kt == 0 && vt == 0 && tid < 64) { /* gate tables, read after the loop's barriers */
                rowf[tid] = tid < lc ? gate_exp(Gs[ct - 1] - Gs[tokof(P, tid)]) : 0.f;
                qf[tid] = tid < ct ? P.scale * expf(Gs[tid]) : 0.f;
            }
            const bf16_t *Hs = stg + b * SM::STAGE;
            if constexpr (ONCE)
                bwd_a_vtile_once(hdh, aQ, aK, aW, aP, dOr + v0, Dr + v0, dDr + v0, LDV, Hs, Hs + 64 * LDT, kt == 0, mq, nq, m1,
                                 n1);
            else
                bwd_a_vtile(hdh, aQ, aK, aW, aP, dOr + v0, Dr + v0, dDr + v0, LDV, Hs, Hs + 64 * LDT, qtile, kt == 0 && ptile, mq,
                            nq, m1, n1);
            __syncthreads();
        }
        /* the epilogue of K tile kt */
        /* split mode's write keys in place of the raw keys, the barrier after the work that does not read
         * them (a pass and a barrier before it, where every warp waited, were 3% of k_bwd_ab's samples;
         * in the V loop's first step it made k_bwd_ab<16, 1> spill 140 bytes) */
        const bool mask_keys = kt == 0 && split && !raw_keys;
        if (mask_keys) split_keys<bf16_t>(P, c, Kws, LDK, (bf16_t *)nullptr, 0, 0, 128, true);
        const RawKeyOwn own(P, raw_keys, c0 + n1, c0 + nq);
        if (kt == 0 && ptile) store_ds_tile(P, aP, Gs, ct, lc, dSs, mq, nq);
        frag_each(aK, m1, n1, [&](int r, int, float &v) { v = r < lc ? rowf[r] * v : 0.f; });
        frag_each(aW, m1, n1, [&](int, int, float &v) { v = -v; });
        if (mask_keys) __syncthreads();
        frag_rowdot(aK, Kws + c0, LDK, m1, n1, pst, 2, own.rows);
        /* dW (columns 0-63) and dK_w (64-127) leave through a staging tile in the stage buffer this
         * K tile's last V step read (the other one holds step nvt's copies at kt 0), as 16-byte row
         * pieces after the row-dot barrier (4-byte fragment stores touch 8 rows an instruction) */
        frag_stage_bf16(aW, stg + ((nvt - 1) & 1) * SM::STAGE, m1, n1);
        if (qtile) frag_each(aQ, mq, nq, [&](int r, int, float &v) { v = r < ct ? qf[r] * v : 0.f; });
        hdh = warp_sum(hdh);
        if (lane == 0) red[warp] = hdh;
        __syncthreads(); /* dS, red */
        if (qtile) { /* dQ = scale gamma dO h^T + dS Kw */
            mma_ds_keys(aQ, dSs, LDT, Kws + c0, LDK, mq, nq, own.q);
            frag_rowdot(aQ, Qs + c0, LDK, mq, nq, pq, QCT);
            const int g = lane >> 2, tq = lane & 3;
#pragma unroll
            for (int nt = 0; nt < NTQ; nt++)
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const int t = mq + g + hh * 8;
                    if (t < ct)
                        *(__nv_bfloat162 *)((bf16_t *)P.dq + ((int64_t)(c.tok0 + t) * P.H + c.h) * P.K + c0 + nq + nt * 8 +
                                            2 * tq) = __floats2bfloat162_rn(aQ[nt][hh * 2], aQ[nt][hh * 2 + 1]);
                }
        }
        warp_mma<4, true, false>(aK, dSs, LDT, Qs + c0, LDK, CTP, m1, n1); /* dK_w += dS^T q */
        frag_rowdot(aK, Kws + c0, LDK, m1, n1, pga, 2, own.rows);
        bf16_t *stage_out = stg + ((nvt - 1) & 1) * SM::STAGE;
        frag_stage_bf16(aK, stage_out, m1, 64 + n1);
        __syncthreads(); /* the row dots, the staged dW and dK_w */
        if (warp == 0) bwd_a_gate_out<QCT>(P, c, kt, Gs, red, pst, pga, pq);
        unstage_tile<64>((bf16_t *)P.dW + c.ch * P.sW + c0, P.KP, stage_out);
        unstage_tile<64>((bf16_t *)P.dKw + c.ch * P.sW + c0, P.KP, stage_out, 64);
        if (kt == 0) __syncthreads(); /* K tile 1's second step refills this buffer */
    }
}

} // namespace gdp
