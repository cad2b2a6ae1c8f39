/* Pass 6: bwd_a, per chunk: dq, dK_w, dW and the gate parts. */
#include "kernels/gdp/launch.cuh"
#include "kernels/gdp/bwd_a_kres.cuh"

namespace gdp {

/* ---------------------------------------------------------------- 6. bwd_a: dq, dK_w, dW, gate parts */
template <typename IT> struct BwdASmem {
    float *Gs, *red, *stdr, *dga, *qdot, *dKst, *dQf;
    IT *Qs, *Kws, *dOs[2], *Ds[2], *dDs[2], *Hs[2], *dHs[2];
    /* two stages of the per-V-tile operands; after the loop the fp32 dKst and dQf take the
     * stage that the last V tile did not use */
    __host__ __device__ static size_t carve(char *base, int Ctp, int nvt, BwdASmem *s) {
        Carve cv(base);
        BwdASmem t;
        t.Gs = cv.take<float>(64);
        t.red = cv.take<float>(NTHREADS / 32);
        t.stdr = cv.take<float>(64);
        t.dga = cv.take<float>(64);
        t.qdot = cv.take<float>(64);
        t.Qs = cv.take<IT>((size_t)Ctp * LDT);
        t.Kws = cv.take<IT>((size_t)64 * LDT);
        const size_t stage = ((size_t)Ctp * LDT + 4 * 64 * LDT) * sizeof(IT);
        const size_t fneed = (size_t)(64 + Ctp) * LDF * 4;
        const size_t sb = stage > fneed ? stage : fneed;
        char *st[2];
        st[0] = cv.take<char>(sb);
        st[1] = cv.take<char>(sb);
        for (int i = 0; i < 2; i++) {
            IT *q = (IT *)st[i];
            t.dOs[i] = q;
            t.Ds[i] = q + (size_t)Ctp * LDT;
            t.dDs[i] = t.Ds[i] + 64 * LDT;
            t.Hs[i] = t.dDs[i] + 64 * LDT;
            t.dHs[i] = t.Hs[i] + 64 * LDT;
        }
        const int other = nvt > 0 ? ((nvt - 1) & 1) ^ 1 : 0;
        t.dKst = (float *)(other ? st[1] : st[0]);
        t.dQf = t.dKst + 64 * LDF;
        if (s) *s = t;
        return cv.off;
    }
};


template <typename IT> __global__ void __launch_bounds__(NTHREADS, 2) k_bwd_a(Params P) {
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (!chunk_ctx(P, c)) return;
    BwdASmem<IT> S;
    BwdASmem<IT>::carve(smem, P.Ctp, P.nvt, &S);
    const int kt = blockIdx.z, c0 = kt * GDP_TILE, wk = min(GDP_TILE, P.KP - c0), Ctp = P.Ctp, n = P.n;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const IT *Dg = (const IT *)P.D + c.ch * P.sD, *dDg = (const IT *)P.dD + c.ch * P.sD;
    const IT *hg = (const IT *)P.h + c.ch * P.sH + (int64_t)c0 * P.VP, *dhg = (const IT *)P.dh + c.ch * P.sH + (int64_t)c0 * P.VP;
    for (int t = tid; t < 64; t += blockDim.x) S.Gs[t] = P.G[c.ch * GDP_CHUNK + t];
    auto issue = [&](int vt, int b) {
        const int v0 = vt * GDP_TILE, wv = min(GDP_TILE, P.VP - v0);
        cp_rows(b ? S.dOs[1] : S.dOs[0], LDT, Ctp, wv, v0, P.V, P.vecv, [&](int t) {
            return t < c.ct ? (const IT *)P.d_o + ((int64_t)(c.tok0 + t) * P.H + c.h) * P.V : (const IT *)nullptr;
        });
        cp_tile(b ? S.Ds[1] : S.Ds[0], LDT, Dg + v0, P.VP, 64, wv);
        cp_tile(b ? S.dDs[1] : S.dDs[0], LDT, dDg + v0, P.VP, 64, wv);
        cp_tile(b ? S.Hs[1] : S.Hs[0], LDT, hg + v0, P.VP, wk, wv);
        cp_tile(b ? S.dHs[1] : S.dHs[0], LDT, dhg + v0, P.VP, wk, wv);
        cp_commit();
    };
    cp_rows(S.Qs, LDT, Ctp, wk, c0, P.K, P.veck,
            [&](int t) { return t < c.ct ? (const IT *)P.q + ((int64_t)(c.tok0 + t) * P.H + c.h) * P.K : (const IT *)nullptr; });
    /* raw keys (split mode: masked to K_w after the V loop) */
    cp_rows(S.Kws, LDT, 64, wk, c0, P.K, P.veck,
            [&](int r) { return r < c.lc ? krow<IT>(P, c.tok0, c.h, r) : (const IT *)nullptr; });
    issue(0, 0);
    float aQ[4][4], aK[4][4], aW[4][4], aP[4][4];
#pragma unroll
    for (int i = 0; i < 16; i++) aQ[i >> 2][i & 3] = aK[i >> 2][i & 3] = aW[i >> 2][i & 3] = aP[i >> 2][i & 3] = 0.f;
    float hdh = 0.f;
    int lastb = 0;
    for (int vt = 0; vt < P.nvt; vt++) {
        const int b = vt & 1, wv = min(GDP_TILE, P.VP - vt * GDP_TILE);
        issue_next_wait_this(vt + 1 < P.nvt, [&] { issue(vt + 1, b ^ 1); });
        __syncthreads();
        IT *dOs = b ? S.dOs[1] : S.dOs[0], *Ds = b ? S.Ds[1] : S.Ds[0], *dDs = b ? S.dDs[1] : S.dDs[0];
        IT *Hs = b ? S.Hs[1] : S.Hs[0], *dHs = b ? S.dHs[1] : S.dHs[0];
        for_chunks8(wk, wv, [&](int x, int y) {
            float hv[8], dv[8];
            ld8(hv, Hs + x * LDT + y);
            ld8(dv, dHs + x * LDT + y);
#pragma unroll
            for (int j = 0; j < 8; j++) hdh += hv[j] * dv[j];
        });
        tile_gemm(aQ, Ctp, wk, smat(dOs, LDT), smat(Hs, LDT, true), wv);
        tile_gemm(aK, 64, wk, smat(Ds, LDT), smat(dHs, LDT, true), wv);
        tile_gemm(aW, 64, wk, smat(dDs, LDT), smat(Hs, LDT, true), wv);
        tile_gemm(aP, Ctp, 64, smat(dOs, LDT), smat(Ds, LDT, true), wv);
        __syncthreads();
        lastb = b;
    }
    if (P.mode == GDP_MODE_SPLIT) split_keys<IT>(P, c, S.Kws, LDT, (IT *)nullptr, 0, c0, wk, true); /* synced below */
    /* the stage the last V tile used holds dS and the dW staging from here on */
    IT *const dOsL = lastb ? S.dOs[1] : S.dOs[0], *const dDsL = lastb ? S.dDs[1] : S.dDs[0];
    const float GL = S.Gs[c.ct - 1], gL = expf(GL);
    /* dS (into dOs), the state-write part of dK_w (dKst), dW (staged in dDs) */
    IT *dSs = dOsL;
    tile_each(aP, Ctp, 64, [&](int t, int s, float v) {
        float val = 0.f;
        if (t < c.ct && s < c.lc && tokof(P, s) <= t) val = P.scale * gate_exp(S.Gs[t] - S.Gs[tokof(P, s)]) * v;
        dSs[t * LDT + s] = from_f32<IT>(val);
    });
    tile_each(aK, 64, wk, [&](int r, int x, float v) { S.dKst[r * LDF + x] = r < c.lc ? gate_exp(GL - S.Gs[tokof(P, r)]) * v : 0.f; });
    tile_each(aW, 64, wk, [&](int r, int x, float v) { dDsL[r * LDT + x] = fromf<IT>(-v); });
    hdh = warp_sum(hdh);
    if (lane == 0) S.red[warp] = hdh;
    __syncthreads();
    st_tile((IT *)P.dW + c.ch * P.sW + c0, P.KP, dDsL, LDT, 64, wk);
    row_reduce(64, wk, [&](int i, int x) { return S.dKst[i * LDF + x] * tof(S.Kws[i * LDT + x]); },
               [&](int i, float v) { S.stdr[i] = v; });
    /* dQ = scale gamma dO h^T + dS Kw: the same warp tiles as aQ */
    tile_each(aQ, Ctp, wk, [&](int r, int, float &v) { v = r < c.ct ? P.scale * expf(S.Gs[r]) * v : 0.f; });
    tile_gemm(aQ, Ctp, wk, smat(dSs, LDT), smat(S.Kws, LDT), 64);
    tile_each(aQ, Ctp, wk, [&](int r, int x, float v) { S.dQf[r * LDF + x] = v; });
    __syncthreads();
    gemm(64, wk, smat(dSs, LDT, true), smat(S.Qs, LDT), Ctp, [&](int r, int cc) { return S.dKst[r * LDF + cc]; },
         [&](int r, int cc, float v) { S.dKst[r * LDF + cc] = v; });
    store_rows<IT>(S.dQf, LDF, c.ct, wk, c0, P.K, P.veck,
                   [&](int t) { return (IT *)P.dq + ((int64_t)(c.tok0 + t) * P.H + c.h) * P.K; });
    row_reduce(Ctp, wk, [&](int t, int x) { return S.dQf[t * LDF + x] * tof(S.Qs[t * LDT + x]); },
               [&](int t, float v) { S.qdot[t] = v; });
    __syncthreads();
    row_reduce(64, wk, [&](int i, int x) { return S.dKst[i * LDF + x] * tof(S.Kws[i * LDT + x]); },
               [&](int i, float v) { S.dga[i] = -v; });
    {
        IT *dKwg = (IT *)P.dKw + c.ch * P.sW + c0;
        for_chunks8(64, wk, [&](int r, int x) {
            float v[8];
            ld8(v, S.dKst + r * LDF + x);
            st8(dKwg + (int64_t)r * P.KP + x, v);
        });
    }
    __syncthreads();
    if (warp == 0) {
        float ht = 0.f;
        for (int i = 0; i < NTHREADS / 32; i++) ht += S.red[i];
        const float sd = warp_sum((lane < c.lc ? S.stdr[lane] : 0.f) + (lane + 32 < c.lc ? S.stdr[lane + 32] : 0.f));
        float *out = P.dGa + c.ch * (int64_t)P.nkt * GDP_CHUNK + kt * GDP_CHUNK;
        for (int i = lane; i < 64; i += 32) {
            float val = S.dga[i];
            if (i % n == 0 && i / n < c.ct) val += S.qdot[i / n];
            if (i == (c.ct - 1) * n) val += gL * ht + sd;
            out[i] = val;
        }
    }
}

/* The grid is (K tiles, H, chunks): a chunk's K tiles run side by side and share its dO, D and dD
 * through L2 (block_chunk_head) */
template <int CTP> __global__ void __launch_bounds__(NTHREADS, 2) k_bwd_a_fast(Params P) {
    using SM = BwdAFastSmem<CTP>;
    constexpr int QW = SM::QW, NTQ = QW / 8, QCT = SM::QCT;
    /* with 4 warp tiles a CTP x 64 product, warps 0-3 take dQ and 4-7 dS; with 8, every warp both */
    constexpr bool QSPLIT = (CTP / 16) * QCT == 4;
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (!chunk_ctx<true, true>(P, c)) return;
    const int kt = blockIdx.x, c0 = kt * GDP_TILE, ct = c.ct, lc = c.lc;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    float *Gs = (float *)smem, *rowf = Gs + 64, *qf = rowf + 64, *red = qf + 64, *pst = red + 8, *pga = pst + 128,
          *pq = pga + 128;
    bf16_t *Qs = (bf16_t *)(smem + SM::NSCAL * 4), *Kws = Qs + SM::QT, *stg = Kws + SM::TILE;
    auto dOb = [&](int b) { return stg + b * SM::STAGE; };
    auto Db = [&](int b) { return dOb(b) + SM::QT; };
    auto dDb = [&](int b) { return Db(b) + SM::TILE; };
    auto Hb = [&](int b) { return dDb(b) + SM::TILE; };
    auto dHb = [&](int b) { return Hb(b) + SM::TILE; };
    const bf16_t *Dg = (const bf16_t *)P.D + c.ch * P.sD, *dDg = (const bf16_t *)P.dD + c.ch * P.sD;
    const bf16_t *hg = (const bf16_t *)P.h + c.ch * P.sH + (int64_t)c0 * P.VP;
    const bf16_t *dhg = (const bf16_t *)P.dh + c.ch * P.sH + (int64_t)c0 * P.VP;
    const bf16_t *dOg = (const bf16_t *)P.d_o + ((int64_t)c.tok0 * P.H + c.h) * P.V;
    const int64_t ostride = (int64_t)P.H * P.V, qstride = (int64_t)P.H * P.K;
    auto issue = [&](int vt, int b) {
        const int v0 = vt * GDP_TILE;
        cp_token_rows<CTP, 64>(dOb(b), LDT, dOg + v0, ostride, ct);
        cp_tile16<64, 64>(Db(b), LDT, Dg + v0, P.VP);
        cp_tile16<64, 64>(dDb(b), LDT, dDg + v0, P.VP);
        cp_tile16<64, 64>(Hb(b), LDT, hg + v0, P.VP);
        cp_tile16<64, 64>(dHb(b), LDT, dhg + v0, P.VP);
        cp_commit();
    };
    if (tid < 16) cp_async16(Gs + tid * 4, P.G + c.ch * GDP_CHUNK + tid * 4);
    cp_token_rows<CTP, 64>(Qs, LDT, (const bf16_t *)P.q + ((int64_t)c.tok0 * P.H + c.h) * P.K + c0, qstride, ct);
    /* raw keys (split mode: masked to K_w after the V loop) */
    const bf16_t *k0row = krow<bf16_t>(P, c.tok0, c.h, 0) + c0;
    cp_rows_of<64, 64>(Kws, LDT, [&](int r) { return k0row + chunk_row_step(P, r) * P.K; }, lc);
    issue(0, 0);
    /* warp tiles: 64 x 64 products as in tile_gemm; CTP x 64 ones at (mq, nq) */
    const int m1 = (warp >> 1) * 16, n1 = (warp & 1) * 32;
    const bool qtile = !QSPLIT || warp < 4, ptile = !QSPLIT || warp >= 4;
    const int qi = QSPLIT ? (warp & 3) : warp, mq = (qi / QCT) * 16, nq = (qi % QCT) * QW;
    float aQ[NTQ][4], aP[NTQ][4], aK[4][4], aW[4][4];
    frag_zero(aQ);
    frag_zero(aP);
    frag_zero(aK);
    frag_zero(aW);
    float hdh = 0.f;
    for (int vt = 0; vt < P.nvt; vt++) {
        const int b = vt & 1;
        issue_next_wait_this(vt + 1 < P.nvt, [&] { issue(vt + 1, b ^ 1); });
        __syncthreads();
        if (vt == 0 && tid < 64) { /* gate tables, read after the loop's barriers */
            rowf[tid] = tid < lc ? gate_exp(Gs[ct - 1] - Gs[tokof(P, tid)]) : 0.f;
            qf[tid] = tid < ct ? P.scale * expf(Gs[tid]) : 0.f;
        }
        bwd_a_vtile(hdh, aQ, aK, aW, aP, dOb(b), Db(b), dDb(b), LDT, Hb(b), dHb(b), qtile, ptile, mq, nq, m1, n1);
        __syncthreads();
    }
    /* split mode's keys as loaded (RawKeyOwn) at n 2 and 4 with slices of 32 columns or more, else
     * made into K_w here */
    const bool split = P.mode == GDP_MODE_SPLIT, raw_keys = CTP <= 32 && split && (P.n == 2 || P.n == 4) && (P.K / P.n) % 32 == 0;
    if (split && !raw_keys) {
        split_keys<bf16_t>(P, c, Kws, LDT, (bf16_t *)nullptr, 0, c0, GDP_TILE, true);
        __syncthreads();
    }
    const RawKeyOwn own(P, raw_keys, c0 + n1, c0 + nq);
    /* stage 0 holds dS, the dW staging, then dQ and dK_w on their way out */
    bf16_t *dSs = stg, *dWs = dSs + SM::QT, *dQs = dWs + SM::TILE, *dKs = dQs + SM::QT;
    if (ptile) store_ds_tile(P, aP, Gs, ct, lc, dSs, mq, nq);
    frag_each(aK, m1, n1, [&](int r, int, float &v) { v = r < lc ? rowf[r] * v : 0.f; });
    frag_rowdot(aK, Kws, LDT, m1, n1, pst, 2, own.rows);
    frag_each(aW, m1, n1, [&](int, int, float &v) { v = -v; });
    frag_stsm_bf16(aW, dWs, LDT, m1, n1);
    if (qtile) frag_each(aQ, mq, nq, [&](int r, int, float &v) { v = r < ct ? qf[r] * v : 0.f; });
    hdh = warp_sum(hdh);
    if (lane == 0) red[warp] = hdh;
    __syncthreads();
    store_tile16<64, 64>((bf16_t *)P.dW + c.ch * P.sW + c0, P.KP, dWs, LDT);
    if (qtile) { /* dQ = scale gamma dO h^T + dS Kw */
        mma_ds_keys(aQ, dSs, LDT, Kws, LDT, mq, nq, own.q);
        frag_rowdot(aQ, Qs, LDT, mq, nq, pq, QCT);
        frag_stsm_bf16(aQ, dQs, LDT, mq, nq);
    }
    warp_mma<4, true, false>(aK, dSs, LDT, Qs, LDT, CTP, m1, n1); /* dK_w += dS^T q */
    frag_rowdot(aK, Kws, LDT, m1, n1, pga, 2, own.rows);
    frag_stsm_bf16(aK, dKs, LDT, m1, n1);
    __syncthreads();
    for_pieces16<CTP, 64>([&](int t, int x) {
        if (t < ct)
            *(uint4 *)((bf16_t *)P.dq + ((int64_t)(c.tok0 + t) * P.H + c.h) * P.K + c0 + x) = *(const uint4 *)(dQs + t * LDT + x);
    });
    store_tile16<64, 64>((bf16_t *)P.dKw + c.ch * P.sW + c0, P.KP, dKs, LDT);
    if (warp == 0) bwd_a_gate_out<QCT>(P, c, kt, Gs, red, pst, pga, pq);
}

template <int CTP> __global__ void __launch_bounds__(NTHREADS, 2) k_bwd_a_kres(Params P) {
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (chunk_ctx(P, c)) bwd_a_kres_chunk<CTP>(P, c, smem);
}

/* ---------------------------------------------------------------- host */
static_assert(BwdAFastSmem<16>::BYTES == gdp_smem_bwd_a_fast(16) && BwdAFastSmem<32>::BYTES == gdp_smem_bwd_a_fast(32) &&
                  BwdAFastSmem<64>::BYTES == gdp_smem_bwd_a_fast(64), "smem.h: bwd_a_fast");
static_assert(BwdAKresSmem<16>::BYTES == gdp_smem_bwd_a_kres(16) && BwdAKresSmem<32>::BYTES == gdp_smem_bwd_a_kres(32) &&
                  BwdAKresSmem<64>::BYTES == gdp_smem_bwd_a_kres(64), "smem.h: bwd_a_kres");

GdpStatus run_bwd_a(const Launch &L, const GdpStep &s, const Params &P, bool bf16) {
    const int c = s.ctp;
    switch (s.kernel) {
    case GDP_KERNEL_BWD_A_KRES:
        return launch_step(L, s, c == 16 ? k_bwd_a_kres<16> : c == 32 ? k_bwd_a_kres<32> : c == 64 ? k_bwd_a_kres<64> : nullptr, P, true, false);
    case GDP_KERNEL_BWD_A_FAST: /* grid (K tiles, H, chunks) */
        return launch_step(L, s, c == 16 ? k_bwd_a_fast<16> : c == 32 ? k_bwd_a_fast<32> : c == 64 ? k_bwd_a_fast<64> : nullptr, P, true, true);
    case GDP_KERNEL_BWD_A: {
        GdpStatus r = check_smem(L, s, bf16 ? BwdASmem<__nv_bfloat16>::carve(nullptr, c, P.nvt, nullptr)
                                            : BwdASmem<float>::carve(nullptr, c, P.nvt, nullptr));
        if (r != GDP_OK) return r;
        return bf16 ? launch_step(L, s, k_bwd_a<__nv_bfloat16>, P, true, false) : launch_step(L, s, k_bwd_a<float>, P, true, false);
    }
    default:
        return gdp_fail(GDP_ERR_INTERNAL, "%s: %s is not a bwd_a kernel", L.who, gdp_kernel_name(s.kernel));
    }
}

} // namespace gdp
