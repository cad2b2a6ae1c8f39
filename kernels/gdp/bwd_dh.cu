/* Pass 5: the dh pass, sequential over chunks in reverse. */
#include <cuda.h> /* CUtensorMap */

#include "kernels/gdp/launch.cuh"
#include "kernels/gdp/seq_tiles.cuh"

namespace gdp {

/* ---------------------------------------------------------------- 5. dh pass (reverse) */
/* dS (KP x bv, fp32) in registers; W, Kwd, P, dO, q and the gates of the next (earlier) chunk are
 * prefetched when nst == 2. With nst == 1 q is loaded into the Kwd buffer once Kwd is used. */
template <typename IT> struct DhSmem {
    float *qf, *Gst[2];
    IT *Ws[2], *Kd[2], *Ps[2], *dOs[2], *Qs[2], *nD, *dSop;
    __host__ __device__ static size_t carve(char *base, int KP, int Ctp, int bv, int nst, DhSmem *s) {
        Carve cv(base);
        DhSmem t;
        t.qf = cv.take<float>(64);
        for (int i = 0; i < 2; i++) {
            if (i < nst) {
                t.Gst[i] = cv.take<float>(64);
                t.Ws[i] = cv.take<IT>((size_t)64 * (KP + 8));
                t.Kd[i] = cv.take<IT>((size_t)64 * (KP + 8));
                t.Ps[i] = cv.take<IT>((size_t)Ctp * LDT);
                t.dOs[i] = cv.take<IT>((size_t)Ctp * (bv + 8));
                t.Qs[i] = nst == 2 ? cv.take<IT>((size_t)Ctp * (KP + 8)) : t.Kd[i];
            } else {
                t.Gst[i] = t.Gst[0], t.Ws[i] = t.Ws[0], t.Kd[i] = t.Kd[0], t.Ps[i] = t.Ps[0], t.dOs[i] = t.dOs[0];
                t.Qs[i] = t.Qs[0];
            }
        }
        t.nD = cv.take<IT>((size_t)64 * (bv + 8));
        t.dSop = cv.take<IT>((size_t)KP * (bv + 8));
        if (s) *s = t;
        return cv.off;
    }
};

template <typename IT> __global__ void __launch_bounds__(NTHREADS) k_dh(Params P) {
    extern __shared__ __align__(16) char smem[];
    const int bv = P.bv;
    int s, h, v0;
    seq_cta(P, bv, s, h, v0);
    const int w = min(bv, P.VP - v0);
    const int KP = P.KP, ldk = KP + 8, lds = bv + 8, Ctp = P.Ctp, nst = P.nst;
    DhSmem<IT> S;
    DhSmem<IT>::carve(smem, KP, Ctp, bv, nst, &S);
    const int64_t st = ((int64_t)s * P.H + h) * P.K * P.V;
    Acc acc;
    acc_each(acc, KP, w, [&](int r, int c, float &v) {
        v = P.dht && r < P.K && v0 + c < P.V ? P.dht[st + (int64_t)r * P.V + v0 + c] : 0.f;
        S.dSop[r * lds + c] = fromf<IT>(v);
    });
    const GdpSeqInfo si = P.seq[s];
    const int cbeg = si.c0, cend = P.seq[s + 1].c0;
    auto chunk_at = [&](int ci) { return seq_chunk(si, s, ci, P.Ct); };
    auto load_q_rows = [&](IT *dst, int ct, int tok0) {
        cp_rows(dst, ldk, Ctp, KP, 0, P.K, P.veck,
                [&](int t) { return t < ct ? (const IT *)P.q + ((int64_t)(tok0 + t) * P.H + h) * P.K : (const IT *)nullptr; });
    };
    auto prefetch = [&](int ci, int b, int ct, int tok0) {
        const int64_t ch = (int64_t)ci * P.H + h;
        cp_tile(b ? S.Gst[1] : S.Gst[0], 64, P.G + ch * GDP_CHUNK, 64, 1, 64);
        cp_tile(b ? S.Ws[1] : S.Ws[0], ldk, (const IT *)P.W + ch * P.sW, KP, 64, KP);
        cp_tile(b ? S.Kd[1] : S.Kd[0], ldk, (const IT *)P.Kwd + ch * P.sW, KP, 64, KP);
        cp_tile(b ? S.Ps[1] : S.Ps[0], LDT, (const IT *)P.P + ch * P.sP, 64, Ctp, 64);
        cp_rows(b ? S.dOs[1] : S.dOs[0], lds, Ctp, w, v0, P.V, P.vecv,
                [&](int t) { return t < ct ? (const IT *)P.d_o + ((int64_t)(tok0 + t) * P.H + h) * P.V : (const IT *)nullptr; });
        if (nst == 2) load_q_rows(b ? S.Qs[1] : S.Qs[0], ct, tok0);
        cp_commit();
    };
    GdpChunkInfo nx = cbeg < cend ? chunk_at(cend - 1) : GdpChunkInfo{0, 0, 0, 0};
    if (cbeg < cend && nst == 2) prefetch(cend - 1, 0, nx.ct, nx.tok0);
    for (int ci = cend - 1; ci >= cbeg; ci--) {
        const int b = nst == 2 ? (cend - 1 - ci) & 1 : 0;
        const int ct = nx.ct, tok0 = nx.tok0;
        if (ci - 1 >= cbeg) nx = chunk_at(ci - 1);
        if (nst == 2) {
            issue_next_wait_this(ci - 1 >= cbeg, [&] { prefetch(ci - 1, b ^ 1, nx.ct, nx.tok0); });
        } else {
            prefetch(ci, 0, ct, tok0);
            cp_wait<0>();
        }
        const int64_t ch = (int64_t)ci * P.H + h;
        const float *Gs = b ? S.Gst[1] : S.Gst[0];
        __syncthreads();
        const float gL = gate_exp(Gs[ct - 1]);
        for (int t = threadIdx.x; t < 64; t += blockDim.x) S.qf[t] = o_row_scale(P, Gs, ct, t);
        st_tile((IT *)P.dh + ch * P.sH + v0, P.VP, S.dSop, lds, KP, w);
        IT *Qs = b ? S.Qs[1] : S.Qs[0], *Wb = b ? S.Ws[1] : S.Ws[0], *Kb = b ? S.Kd[1] : S.Kd[0];
        IT *Pb = b ? S.Ps[1] : S.Ps[0], *dOb = b ? S.dOs[1] : S.dOs[0];
        gemm(64, w, smat(Pb, LDT, true), smat(dOb, lds), Ctp, smat(Kb, ldk), smat(S.dSop, lds), KP, Zero(),
             [&](int r, int c, float v) { S.nD[r * lds + c] = fromf<IT>(-v); });
        __syncthreads();
        if (nst == 1) { /* q into the Kwd buffer, now free */
            load_q_rows(Qs, ct, tok0);
            cp_commit();
            cp_wait<0>();
            __syncthreads();
        }
        for_chunks8(Ctp, KP, [&](int t, int x) {
            float q[8];
            ld8(q, Qs + t * ldk + x);
            const float f = S.qf[t];
#pragma unroll
            for (int j = 0; j < 8; j++) q[j] *= f;
            st8(Qs + t * ldk + x, q);
        });
        st_tile_f((IT *)P.dD + ch * P.sD + v0, P.VP, S.nD, lds, 64, w, [](int, int, IT v) { return fromf<IT>(-tof(v)); });
        acc_each(acc, KP, w, [&](int, int, float &v) { v *= gL; });
        __syncthreads();
        acc_gemm(acc, KP, w, smat(Qs, ldk, true), smat(dOb, lds), Ctp);
        acc_gemm(acc, KP, w, smat(Wb, ldk, true), smat(S.nD, lds), 64);
        acc_each(acc, KP, w, [&](int r, int c, float &v) { S.dSop[r * lds + c] = fromf<IT>(v); });
        __syncthreads();
    }
    if (P.dh0)
        acc_each(acc, KP, w, [&](int r, int c, float &v) {
            if (r < P.K && v0 + c < P.V) P.dh0[st + (int64_t)r * P.V + v0 + c] = v;
        });
}

/* At K 256 q has one buffer (QONE, as k_state_fast's): chunk ci's q is loaded once every warp is
 * past chunk ci + 1's dS update (the step's first barrier), ahead of the next stage's tiles, and
 * scaled after the second barrier, with a third before the dS update reads it. Two stages of q
 * left V tile 64 just over the shared memory at 32 chunk tokens, and V tile 32 loads W and Kwd
 * twice as often (H200, K = V = 256, n_h 2: dh 2.22 ms at V tile 32; measured with the grid's V tiles
 * outermost, before seq_cta put a head's V tiles side by side, so the repeats now come from L2). */
template <int KP, int BV, int CTP> struct DhFastSmem {
    static constexpr int LDK = KP + 8, LDS = BV + 8;
    static constexpr bool QONE = KP > 128;
    static constexpr size_t QT = (size_t)CTP * LDK * 2;
    static constexpr size_t STAGE = 256 + 2 * (size_t)64 * LDK * 2 + (size_t)CTP * LDT * 2 + (size_t)CTP * LDS * 2 + (QONE ? 0 : QT);
    static constexpr size_t BYTES = 2 * STAGE + (size_t)64 * LDS * 2 + (size_t)KP * LDS * 2 + (QONE ? QT : 0);
};

/* Requires K == KP and V % BV == 0 with 16-byte aligned q and dO rows (P.veck, P.vecv). */
template <int KP, int BV, int CTP> __global__ void __launch_bounds__(NTHREADS, 1) k_dh_fast(Params P) {
    using SM = DhFastSmem<KP, BV, CTP>;
    using TL = SeqTiles<KP, BV>;
    constexpr int LDK = SM::LDK, LDS = SM::LDS;
    extern __shared__ __align__(16) char smem[];
    int s, h, v0;
    seq_cta(P, BV, s, h, v0);
    const TL tl;
    const SeqStageHead<KP, SM::STAGE> hd{smem};
    auto Pb = [&](int b) { return hd.after(b); };
    auto dOb = [&](int b) { return Pb(b) + CTP * LDT; };
    bf16_t *nD = (bf16_t *)(smem + 2 * SM::STAGE), *dSop = nD + 64 * LDS, *Qone = dSop + KP * LDS;
    auto Qb = [&](int b) { return SM::QONE ? Qone : dOb(b) + CTP * LDS; };
    const int64_t st0 = ((int64_t)s * P.H + h) * P.K * P.V;
    float dS[TL::MT2][TL::NT2][4];
    state_frags_in(dS, P.dht, P, st0, v0, tl.m2, tl.n2, [&](int r, int c) { return dSop + r * LDS + c; });
    const GdpSeqInfo si = P.seq[s];
    const int cbeg = si.c0, cend = P.seq[s + 1].c0;
    auto chunk_at = [&](int ci) { return seq_chunk(si, s, ci, P.Ct); };
    const int64_t qstride = (int64_t)P.H * KP, ostride = (int64_t)P.H * P.V;
    auto load_q = [&](const GdpChunkInfo &ck, int b) {
        cp_token_rows<CTP, KP>(Qb(b), LDK, (const bf16_t *)P.q + ((int64_t)ck.tok0 * P.H + h) * KP, qstride, ck.ct);
    };
    auto prefetch = [&](int ci, int b, GdpChunkInfo ck) {
        const int64_t ch = (int64_t)ci * P.H + h;
        hd.prefetch(P, ch, b);
        cp_tile16<CTP, 64>(Pb(b), LDT, (const bf16_t *)P.P + ch * P.sP, 64);
        cp_token_rows<CTP, BV>(dOb(b), LDS, (const bf16_t *)P.d_o + ((int64_t)ck.tok0 * P.H + h) * P.V + v0, ostride, ck.ct);
        if (!SM::QONE) load_q(ck, b);
    };
    GdpChunkInfo cur = cbeg < cend ? chunk_at(cend - 1) : GdpChunkInfo{0, 0, 0, 0};
    if (cbeg < cend) {
        prefetch(cend - 1, 0, cur);
        if (SM::QONE) load_q(cur, 0);
    }
    cp_commit();
    GdpChunkInfo nxt = cend - 2 >= cbeg ? chunk_at(cend - 2) : cur;
    /* q <- scale e^G q; rows past ct are zeros already */
    auto scale_q = [&](bf16_t *Q, const float *Gs, int ct) {
        for_pieces16<CTP, KP>([&](int t, int x) {
            if (t < ct) scale8(Q + t * LDK + x, Q + t * LDK + x, P.scale * gate_exp(Gs[t]));
        });
    };
    for (int ci = cend - 1; ci >= cbeg; ci--) {
        const int b = (cend - 1 - ci) & 1, ct = cur.ct;
        cp_wait<0>();
        __syncthreads();
        if (SM::QONE && ci < cend - 1) { /* the last step's dS update has read q: this chunk's */
            load_q(cur, 0);
            cp_commit();
        }
        if (ci - 1 >= cbeg) prefetch(ci - 1, b ^ 1, nxt);
        cp_commit();
        cur = nxt;
        if (ci - 2 >= cbeg) nxt = chunk_at(ci - 2);
        const int64_t ch = (int64_t)ci * P.H + h;
        const float *Gs = hd.G(b);
        const float gL = gate_exp(Gs[ct - 1]);
        bf16_t *Q = Qb(b), *dO = dOb(b);
        if (!SM::QONE) scale_q(Q, Gs, ct);
        store_tile16<KP, BV>((bf16_t *)P.dh + ch * P.sH + v0, P.VP, dSop, LDS);
        float acc[TL::MT1][TL::NT1][4];
#pragma unroll
        for (int mt = 0; mt < TL::MT1; mt++) frag_zero(acc[mt]);
        warp_mma_mt<TL::MT1, TL::NT1, true>(acc, Pb(b), LDT, dO, LDS, CTP, tl.m1, tl.n1);
        warp_mma_mt<TL::MT1, TL::NT1, false>(acc, hd.Kwd(b), LDK, dSop, LDS, KP, tl.m1, tl.n1);
#pragma unroll
        for (int mt = 0; mt < TL::MT1; mt++) {
            frag_each(acc[mt], tl.m1 + 16 * mt, tl.n1, [](int, int, float &v) { v = -v; });
            frag_stsm_bf16(acc[mt], nD, LDS, tl.m1 + 16 * mt, tl.n1);
        }
        if (SM::QONE) cp_wait<1>(); /* q's group, older than the next stage's */
        __syncthreads();
        if (SM::QONE) {
            scale_q(Q, Gs, ct);
            __syncthreads();
        }
        store_tile16<64, BV>((bf16_t *)P.dD + ch * P.sD + v0, P.VP, nD, LDS, 0x80008000u);
        frag_scale(dS, gL);
        warp_mma_mt<TL::MT2, TL::NT2, true>(dS, Q, LDK, dO, LDS, CTP, tl.m2, tl.n2);
        warp_mma_mt<TL::MT2, TL::NT2, true>(dS, hd.W(b), LDK, nD, LDS, 64, tl.m2, tl.n2);
#pragma unroll
        for (int mt = 0; mt < TL::MT2; mt++) /* dSop's readers (dh store, Kwd dS) are past the barrier above */
            frag_stsm_bf16(dS[mt], dSop, LDS, tl.m2 + 16 * mt, tl.n2);
    }
    state_frags_out(dS, P.dh0, P, st0, v0, tl.m2, tl.n2);
}

/* The dh pass with tensor copies (taken where seq_tma says, as k_state_tma): K == KP == 128, V == VP, BV 64
 * or 128. q's and dO's boxes are Ct token rows (rows Ct..CTP-1 stay the zeros written at the start);
 * in a sequence's last chunk the rows past its tokens are zeroed before use. nD holds dDelta itself
 * (stored as it is by a tensor store); the dS product negates it as it loads it. */
struct DhTmaMaps {
    CUtensorMap W, Kwd, P, dO, q, dh, dD;
};
template <int KP, int BV, int CTP> struct DhTmaSmem {
    static constexpr size_t W = (size_t)64 * KP * 2, PT = (size_t)CTP * 64 * 2, DO = (size_t)CTP * BV * 2, Q = (size_t)CTP * KP * 2;
    static constexpr size_t STAGE = 2 * W + PT + DO + Q; /* each part a multiple of 1024 bytes */
    static constexpr size_t ND = 2 * STAGE, DSOP = ND + (size_t)64 * BV * 2, GS = DSOP + (size_t)KP * BV * 2;
    static constexpr size_t BAR = GS + 2 * 64 * 4, BYTES = BAR + 16 + 1024;
};

template <int KP, int BV, int CTP>
__global__ void __launch_bounds__(NTHREADS, 1) k_dh_tma(Params P, const __grid_constant__ DhTmaMaps M) {
    using SM = DhTmaSmem<KP, BV, CTP>;
    using TL = SeqTiles<KP, BV>;
    extern __shared__ __align__(1024) char smem_raw[];
    char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    int s, h, v0;
    seq_cta(P, BV, s, h, v0);
    const int tid = threadIdx.x, Ct = P.Ct;
    const TL tl;
    auto part = [&](int b, size_t off) { return (bf16_t *)(smem + b * SM::STAGE + off); };
    auto Wb = [&](int b) { return Swz128<64>{part(b, 0)}; };
    auto Kb = [&](int b) { return Swz128<64>{part(b, SM::W)}; };
    auto Pb = [&](int b) { return Swz128<CTP>{part(b, 2 * SM::W)}; };
    auto dOb = [&](int b) { return Swz128<CTP>{part(b, 2 * SM::W + SM::PT)}; };
    auto Qb = [&](int b) { return Swz128<CTP>{part(b, 2 * SM::W + SM::PT + SM::DO)}; };
    const Swz128<64> nD{(bf16_t *)(smem + SM::ND)};
    const Swz128<KP> dSop{(bf16_t *)(smem + SM::DSOP)};
    auto Gb = [&](int b) { return (float *)(smem + SM::GS) + b * 64; };
    uint64_t *bar = (uint64_t *)(smem + SM::BAR);
    if (tid == 0) mbar_init(bar), mbar_init(bar + 1);
    fence_mbar_init();
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int b = 0; b < 2; b++) { /* rows Ct..CTP-1 of q and dO, which no box writes */
        for_pieces16<CTP, KP>([&](int t, int x) { if (t >= Ct) *(uint4 *)Qb(b).at(t, x) = zero; });
        for_pieces16<CTP, BV>([&](int t, int x) { if (t >= Ct) *(uint4 *)dOb(b).at(t, x) = zero; });
    }
    const int64_t st0 = ((int64_t)s * P.H + h) * P.K * P.V;
    float dS[TL::MT2][TL::NT2][4];
    state_frags_in(dS, P.dht, P, st0, v0, tl.m2, tl.n2, [&](int r, int c) { return dSop.at(r, c); });
    const GdpSeqInfo si = P.seq[s];
    const int cbeg = si.c0, cend = P.seq[s + 1].c0;
    auto chunk_at = [&](int ci) { return seq_chunk(si, s, ci, P.Ct); };
    auto prefetch = [&](int ci, int b, GdpChunkInfo ck) { /* thread 0 */
        const int64_t ch = (int64_t)ci * P.H + h;
        const int row = (int)(ch * 64);
        mbar_expect_tx(bar + b, (uint32_t)(256 + 2 * SM::W + SM::PT + (size_t)Ct * (BV + KP) * 2));
        bulk_load(Gb(b), P.G + ch * GDP_CHUNK, 256, bar + b);
#pragma unroll
        for (int x = 0; x < KP; x += 64) {
            tma_load_2d(Wb(b).p + x * 64, &M.W, x, row, bar + b);
            tma_load_2d(Kb(b).p + x * 64, &M.Kwd, x, row, bar + b);
            tma_load_3d(Qb(b).p + x * CTP, &M.q, x, h, ck.tok0, bar + b);
        }
        tma_load_2d(Pb(b).p, &M.P, 0, (int)(ch * P.Ctp), bar + b);
#pragma unroll
        for (int x = 0; x < BV; x += 64) tma_load_3d(dOb(b).p + x * CTP, &M.dO, v0 + x, h, ck.tok0, bar + b);
    };
    fence_proxy_async(); /* dSop's and the zero rows' writes before the copies */
    __syncthreads();
    GdpChunkInfo cur = cbeg < cend ? chunk_at(cend - 1) : GdpChunkInfo{0, 0, 0, 0};
    if (tid == 0 && cbeg < cend) prefetch(cend - 1, 0, cur);
    GdpChunkInfo nxt = cend - 2 >= cbeg ? chunk_at(cend - 2) : cur;
    for (int ci = cend - 1; ci >= cbeg; ci--) {
        const int j = cend - 1 - ci, b = j & 1, ct = cur.ct;
        if (tid == 0) bulk_wait_read(); /* the last step's dDelta store has read nD */
        fence_proxy_async();            /* this thread's last writes (q, dO rows, nD, dSop) before the copies */
        mbar_wait(bar + b, (j >> 1) & 1);
        __syncthreads();
        const int64_t ch = (int64_t)ci * P.H + h;
        if (tid == 0) {
            if (ci - 1 >= cbeg) prefetch(ci - 1, b ^ 1, nxt);
#pragma unroll
            for (int x = 0; x < BV; x += 64) tma_store_2d(&M.dh, v0 + x, (int)(ch * KP), dSop.p + x * KP);
            bulk_commit();
        }
        cur = nxt;
        if (ci - 2 >= cbeg) nxt = chunk_at(ci - 2);
        const float *Gs = Gb(b);
        const float gL = gate_exp(Gs[ct - 1]);
        const Swz128<CTP> Q = Qb(b), dO = dOb(b);
        for_pieces16<CTP, KP>([&](int t, int x) { /* q <- scale e^G q, rows past ct zeros (read after the second barrier) */
            if (t < ct)
                scale8(Q.at(t, x), Q.at(t, x), P.scale * gate_exp(Gs[t]));
            else if (t < Ct)
                *(uint4 *)Q.at(t, x) = zero;
        });
        if (ct < Ct) { /* a sequence's last chunk: its boxes ran into the next tokens */
            for_pieces16<CTP, BV>([&](int t, int x) { if (t >= ct && t < Ct) *(uint4 *)dO.at(t, x) = zero; });
            __syncthreads();
        }
        float acc[TL::MT1][TL::NT1][4];
#pragma unroll
        for (int mt = 0; mt < TL::MT1; mt++) frag_zero(acc[mt]);
        warp_mma_v<TL::MT1, TL::NT1, true>(acc, Pb(b), dO, CTP, tl.m1, tl.n1);
        warp_mma_v<TL::MT1, TL::NT1, false>(acc, Kb(b), dSop, KP, tl.m1, tl.n1);
#pragma unroll
        for (int mt = 0; mt < TL::MT1; mt++)
            frag_stsm_pairs(acc[mt], tl.m1 + 16 * mt, tl.n1, [&](int r, int c) { return nD.at(r, c); });
        fence_proxy_async();            /* nD's writes before its store */
        if (tid == 0) bulk_wait_read(); /* dh's store has read dSop, which changes after the barrier */
        __syncthreads();
        if (tid == 0) {
#pragma unroll
            for (int x = 0; x < BV; x += 64) tma_store_2d(&M.dD, v0 + x, (int)(ch * 64), nD.p + x * 64);
            bulk_commit();
        }
        frag_scale(dS, gL);
        warp_mma_v<TL::MT2, TL::NT2, true>(dS, Q, dO, CTP, tl.m2, tl.n2);
        warp_mma_v<TL::MT2, TL::NT2, true, false, true>(dS, Wb(b), nD, 64, tl.m2, tl.n2);
#pragma unroll
        for (int mt = 0; mt < TL::MT2; mt++) /* dSop's readers (dh store, Kwd dS) are past the barrier above */
            frag_stsm_pairs(dS[mt], tl.m2 + 16 * mt, tl.n2, [&](int r, int c) { return dSop.at(r, c); });
    }
    if (tid == 0) bulk_wait_all();
    state_frags_out(dS, P.dh0, P, st0, v0, tl.m2, tl.n2);
}

/* ---------------------------------------------------------------- host */
static void (*dh_fast_kernel(int KP, int bv, int ctp))(Params) {
#define GDP_DF(kp, b)                                                                                        \
    if (KP == kp && bv == b)                                                                                 \
        return ctp == 16 ? k_dh_fast<kp, b, 16> : ctp == 32 ? k_dh_fast<kp, b, 32> : ctp == 64 ? k_dh_fast<kp, b, 64> : nullptr;
    GDP_DF(128, 128) GDP_DF(128, 64) GDP_DF(128, 32) GDP_DF(64, 128) GDP_DF(64, 64) GDP_DF(64, 32)
    GDP_DF(256, 64) GDP_DF(256, 32) /* K 256 (q single-buffered): bv 64 up to 32 chunk tokens, bv 32 up to 64 */
#undef GDP_DF
    return nullptr;
}
#define GDP_DS(kp, b) \
    static_assert(DhFastSmem<kp, b, 16>::BYTES == gdp_smem_dh_fast(kp, b, 16) && DhFastSmem<kp, b, 32>::BYTES == gdp_smem_dh_fast(kp, b, 32) && \
                      DhFastSmem<kp, b, 64>::BYTES == gdp_smem_dh_fast(kp, b, 64), "smem.h: dh_fast");
GDP_DS(128, 128) GDP_DS(128, 64) GDP_DS(128, 32) GDP_DS(64, 128) GDP_DS(64, 64) GDP_DS(64, 32) GDP_DS(256, 64) GDP_DS(256, 32)
#undef GDP_DS
static void (*dh_tma_kernel(int bv, int ctp))(Params, DhTmaMaps) {
    if (bv == 128) return ctp == 16 ? k_dh_tma<128, 128, 16> : ctp == 32 ? k_dh_tma<128, 128, 32> : ctp == 64 ? k_dh_tma<128, 128, 64> : nullptr;
    if (bv == 64) return ctp == 16 ? k_dh_tma<128, 64, 16> : ctp == 32 ? k_dh_tma<128, 64, 32> : ctp == 64 ? k_dh_tma<128, 64, 64> : nullptr;
    return nullptr;
}
#define GDP_DT(b, c) static_assert(DhTmaSmem<128, b, c>::BYTES == gdp_smem_dh_tma(b, c), "smem.h: dh_tma");
GDP_DT(128, 16) GDP_DT(128, 32) GDP_DT(128, 64) GDP_DT(64, 16) GDP_DT(64, 32) GDP_DT(64, 64)
#undef GDP_DT
static bool dh_tma_maps(const GdpLayout &pl, const Params &P, DhTmaMaps &M) {
    const PFN_cuTensorMapEncodeTiled_v12000 enc = tensor_map_encoder();
    if (!enc) return false;
    memset(&M, 0, sizeof M);
    return encode_chunk_tiles(enc, &M.W, P.W, pl, pl.KP, 64, 64) && encode_chunk_tiles(enc, &M.Kwd, P.Kwd, pl, pl.KP, 64, 64) &&
           encode_chunk_tiles(enc, &M.P, P.P, pl, 64, pl.Ctp, pl.Ctp) && encode_token_rows(enc, &M.dO, P.d_o, P, P.V, pl.Ct) &&
           encode_token_rows(enc, &M.q, P.q, P, P.K, pl.Ct) && encode_chunk_tiles(enc, &M.dh, P.dh, pl, pl.VP, pl.KP, pl.KP) &&
           encode_chunk_tiles(enc, &M.dD, P.dD, pl, pl.VP, 64, 64);
}

int generic_dh_regs(bool bf16) {
    cudaFuncAttributes fa;
    const cudaError_t e = bf16 ? cudaFuncGetAttributes(&fa, k_dh<__nv_bfloat16>) : cudaFuncGetAttributes(&fa, k_dh<float>);
    return e == cudaSuccess ? fa.numRegs : 0;
}

GdpStatus run_dh(const Launch &L, const GdpStep &s, const Params &P, bool bf16) {
    switch (s.kernel) {
    case GDP_KERNEL_DH_TMA: {
        DhTmaMaps maps;
        if (!dh_tma_maps(*L.lay, P, maps)) return tensor_map_failed(L, s);
        return launch_step(L, s, dh_tma_kernel(s.bv, s.ctp), P, false, false, maps);
    }
    case GDP_KERNEL_DH_FAST:
        return launch_step(L, s, dh_fast_kernel(s.kp, s.bv, s.ctp), P, false, false);
    case GDP_KERNEL_DH: {
        GdpStatus r = check_smem(L, s, bf16 ? DhSmem<__nv_bfloat16>::carve(nullptr, L.lay->KP, s.ctp, s.bv, s.nst, nullptr)
                                            : DhSmem<float>::carve(nullptr, L.lay->KP, s.ctp, s.bv, s.nst, nullptr));
        if (r != GDP_OK) return r;
        return bf16 ? launch_step(L, s, k_dh<__nv_bfloat16>, P, false, false) : launch_step(L, s, k_dh<float>, P, false, false);
    }
    default:
        return gdp_fail(GDP_ERR_INTERNAL, "%s: %s is not a dh kernel", L.who, gdp_kernel_name(s.kernel));
    }
}

} // namespace gdp
