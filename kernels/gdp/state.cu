/* Pass 3: the state pass, sequential over chunks per (sequence, head, V tile). */
#include <cuda.h> /* CUtensorMap */

#include "kernels/gdp/launch.cuh"
#include "kernels/gdp/seq_tiles.cuh"
#include "kernels/gdp/wgmma.cuh"

namespace gdp {

/* ---------------------------------------------------------------- 3. state pass */
/* S (KP x bv, fp32) lives in registers; W, Kwd, U and the gates of the next chunk are prefetched
 * (cp.async) while the current one is processed when nst == 2. h and Delta are stored for the
 * output and the backward. */
template <typename IT> struct StateSmem {
    float *Gst[2];
    IT *Ws[2], *Kd[2], *Us[2], *Sop;
    __host__ __device__ static size_t carve(char *base, int KP, int bv, int nst, StateSmem *s) {
        Carve cv(base);
        StateSmem t;
        for (int i = 0; i < 2; i++) {
            if (i < nst) {
                t.Gst[i] = cv.take<float>(64);
                t.Ws[i] = cv.take<IT>((size_t)64 * (KP + 8));
                t.Kd[i] = cv.take<IT>((size_t)64 * (KP + 8));
                t.Us[i] = cv.take<IT>((size_t)64 * (bv + 8));
            } else {
                t.Gst[i] = t.Gst[0], t.Ws[i] = t.Ws[0], t.Kd[i] = t.Kd[0], t.Us[i] = t.Us[0];
            }
        }
        t.Sop = cv.take<IT>((size_t)KP * (bv + 8));
        if (s) *s = t;
        return cv.off;
    }
};

template <typename IT> __global__ void __launch_bounds__(NTHREADS, 2) k_state(Params P) {
    extern __shared__ __align__(16) char smem[];
    const int bv = P.bv;
    int s, h, v0;
    seq_cta(P, bv, s, h, v0);
    const int w = min(bv, P.VP - v0);
    const int KP = P.KP, ldk = KP + 8, lds = bv + 8, nst = P.nst;
    StateSmem<IT> S;
    StateSmem<IT>::carve(smem, KP, bv, nst, &S);
    const int64_t st = ((int64_t)s * P.H + h) * P.K * P.V;
    Acc acc;
    acc_each(acc, KP, w, [&](int r, int c, float &v) {
        v = P.h0 && r < P.K && v0 + c < P.V ? P.h0[st + (int64_t)r * P.V + v0 + c] : 0.f;
        S.Sop[r * lds + c] = fromf<IT>(v);
    });
    /* the chunk table here: computing the chunks (seq_chunk) made k_state<bf16> spill 28 bytes */
    const int cbeg = P.seq[s].c0, cend = P.seq[s + 1].c0;
    auto prefetch = [&](int ci, int b) {
        const int64_t ch = (int64_t)ci * P.H + h;
        cp_tile(b ? S.Gst[1] : S.Gst[0], 64, P.G + ch * GDP_CHUNK, 64, 1, 64);
        cp_tile(b ? S.Ws[1] : S.Ws[0], ldk, (const IT *)P.W + ch * P.sW, KP, 64, KP);
        cp_tile(b ? S.Kd[1] : S.Kd[0], ldk, (const IT *)P.Kwd + ch * P.sW, KP, 64, KP);
        cp_tile(b ? S.Us[1] : S.Us[0], lds, (const IT *)P.U + ch * P.sU + v0, P.VP, 64, w);
        cp_commit();
    };
    GdpChunkInfo nx = cbeg < cend ? P.chunk[cbeg] : GdpChunkInfo{0, 0, 0, 0};
    if (cbeg < cend && nst == 2) prefetch(cbeg, 0);
    for (int ci = cbeg; ci < cend; ci++) {
        const int b = nst == 2 ? (ci - cbeg) & 1 : 0;
        const int ct = nx.ct;
        if (ci + 1 < cend) nx = P.chunk[ci + 1];
        if (nst == 2) {
            issue_next_wait_this(ci + 1 < cend, [&] { prefetch(ci + 1, b ^ 1); });
        } else {
            prefetch(ci, 0);
            cp_wait<0>();
        }
        const int64_t ch = (int64_t)ci * P.H + h;
        const float *Gs = b ? S.Gst[1] : S.Gst[0];
        IT *Us = b ? S.Us[1] : S.Us[0], *Wb = b ? S.Ws[1] : S.Ws[0], *Kb = b ? S.Kd[1] : S.Kd[0];
        __syncthreads();
        const float gL = gate_exp(Gs[ct - 1]);
        st_tile((IT *)P.h + ch * P.sH + v0, P.VP, S.Sop, lds, KP, w);
        gemm(64, w, smat(Wb, ldk), smat(S.Sop, lds), KP, Zero(),
             [&](int r, int c, float v) { Us[r * lds + c] = fromf<IT>(tof(Us[r * lds + c]) - v); });
        __syncthreads();
        st_tile((IT *)P.D + ch * P.sD + v0, P.VP, Us, lds, 64, w);
        acc_each(acc, KP, w, [&](int, int, float &v) { v *= gL; });
        acc_gemm(acc, KP, w, smat(Kb, ldk, true), smat(Us, lds), 64);
        __syncthreads();
        acc_each(acc, KP, w, [&](int r, int c, float &v) { S.Sop[r * lds + c] = fromf<IT>(v); });
    }
    if (P.ht)
        acc_each(acc, KP, w, [&](int r, int c, float &v) {
            if (r < P.K && v0 + c < P.V) P.ht[st + (int64_t)r * P.V + v0 + c] = v;
        });
}

/* CTPO > 0: the state pass also makes the output (CTPO = Ctp token rows a chunk), o = (scale e^G q) h
 * + P Delta for its V tile, which saves k_output's reads of h and Delta (and, with !P.keep_hd, the
 * writes of both); each stage then holds the chunk's q and P too. At K 256 two stages of q do not
 * fit beside W and Kwd (QONE): q has one buffer after the state's, loaded for the next chunk once
 * every warp is past this chunk's q h (the second barrier), so it arrives by the next step's wait. */
template <int KP, int BV, int CTPO> struct StateFastSmem {
    static constexpr int LDK = KP + 8, LDS = BV + 8;
    static constexpr bool QONE = KP > 128 && CTPO > 0;
    static constexpr size_t QT = (size_t)CTPO * LDK * 2;
    static constexpr size_t STAGE =
        256 + 2 * (size_t)64 * LDK * 2 + (size_t)64 * LDS * 2 + (QONE ? 0 : QT) + (size_t)CTPO * LDT * 2;
    static constexpr size_t bytes(int ns) { return ns * STAGE + (size_t)KP * LDS * 2 + (QONE ? QT : 0); }
};

template <int KP, int BV, int NS, int CTPO>
__global__ void __launch_bounds__(NTHREADS, BV == 128 || CTPO || KP > 128 ? 1 : 2) k_state_fast(Params P) {
    using SM = StateFastSmem<KP, BV, CTPO>;
    using TL = SeqTiles<KP, BV>;
    constexpr int LDK = SM::LDK, LDS = SM::LDS;
    using OT = OutTiles<CTPO, BV>;
    constexpr int NO = OT::NO;
    static_assert(CTPO == 0 || OT::USED == 8, "every warp takes a piece of the output");
    using MS = MergedStep<KP, BV, CTPO>;
    extern __shared__ __align__(16) char smem[];
    int s, h, v0;
    seq_cta(P, BV, s, h, v0);
    const OT ot;
    const int mo = ot.mo, no = ot.no;
    const TL tl;
    const MS ms;
    bf16_t *Sop = (bf16_t *)(smem + NS * SM::STAGE), *Qone = Sop + KP * LDS;
    const SeqStageHead<KP, SM::STAGE> hd{smem};
    auto Ub = [&](int b) { return hd.after(b); };
    auto Qb = [&](int b) { return SM::QONE ? Qone : Ub(b) + 64 * LDS; };
    auto Pb = [&](int b) { return SM::QONE ? Ub(b) + 64 * LDS : Qb(b) + CTPO * LDK; };
    auto load_q = [&](const GdpChunkInfo &ck, int b) {
        cp_token_rows<CTPO, KP>(Qb(b), LDK, (const bf16_t *)P.q + ((int64_t)ck.tok0 * P.H + h) * KP, (int64_t)P.H * KP, ck.ct);
    };
    const int64_t st0 = ((int64_t)s * P.H + h) * P.K * P.V;
    float S[TL::MT2][TL::NT2][4];
    float SO[MS::MS + MS::MQ][4][4]; /* MergedStep's state and o */
    if constexpr (MS::ON)
        state_frags_in(ms.state(SO), P.h0, P, st0, v0, ms.m2, ms.n, [&](int r, int c) { return Sop + r * LDS + c; });
    else
        state_frags_in(S, P.h0, P, st0, v0, tl.m2, tl.n2, [&](int r, int c) { return Sop + r * LDS + c; });
    const GdpSeqInfo si = P.seq[s];
    const int cbeg = si.c0, cend = P.seq[s + 1].c0;
    auto chunk_at = [&](int ci) { return seq_chunk(si, s, ci, P.Ct); };
    auto prefetch = [&](int ci, int b) {
        const int64_t ch = (int64_t)ci * P.H + h;
        hd.prefetch(P, ch, b);
        cp_tile16<64, BV>(Ub(b), LDS, (const bf16_t *)P.U + ch * P.sU + v0, P.VP);
        if (CTPO) {
            const GdpChunkInfo ck = chunk_at(ci);
            if (!SM::QONE) load_q(ck, b);
            cp_tile16<CTPO, 64>(Pb(b), LDT, (const bf16_t *)P.P + ch * P.sP, 64);
        }
    };
    static_assert(!SM::QONE || NS == 2, "q's one buffer is waited for with stage 1's tiles");
    if (SM::QONE && cbeg < cend) load_q(chunk_at(cbeg), 0);
#pragma unroll
    for (int i = 0; i < NS - 1; i++) {
        if (cbeg + i < cend) prefetch(cbeg + i, i);
        cp_commit();
    }
    GdpChunkInfo ck_next = cbeg < cend ? chunk_at(cbeg) : GdpChunkInfo{0, 0, 0, 0};
    for (int ci = cbeg; ci < cend; ci++) {
        const int it = ci - cbeg, b = it % NS;
        const GdpChunkInfo ck = ck_next;
        if (ci + 1 < cend) ck_next = chunk_at(ci + 1);
        cp_wait<NS - 2>();
        __syncthreads(); /* chunk ci's tiles and Sop are visible; buffer (it-1)%NS is free */
        if (ci + NS - 1 < cend) prefetch(ci + NS - 1, (it + NS - 1) % NS);
        cp_commit();
        const int64_t ch = (int64_t)ci * P.H + h;
        bf16_t *U = Ub(b);
        const float gL = gate_exp(hd.G(b)[ck.ct - 1]);
        if (!CTPO || P.keep_hd) store_tile16<KP, BV>((bf16_t *)P.h + ch * P.sH + v0, P.VP, Sop, LDS);
        const float *G = hd.G(b);
        auto qscale = [&](int t) { return o_row_scale(P, G, ck.ct, t); };
        if constexpr (MS::ON) ms.front(SO, RowMajor{hd.W(b), LDK}, RowMajor{Qb(b), LDK}, RowMajor{Sop, LDS}, RowMajor{U, LDS}, qscale);
        else {
            float D[TL::MT1][TL::NT1][4];
#pragma unroll
            for (int mt = 0; mt < TL::MT1; mt++) frag_zero(D[mt]);
            warp_mma_mt<TL::MT1, TL::NT1, false>(D, hd.W(b), LDK, Sop, LDS, KP, tl.m1, tl.n1);
            frags_sub_from(RowMajor{U, LDS}, D, tl.m1, tl.n1); /* Delta = U - W h, in place of U */
        }
        float O[NO][4];
        if (CTPO && !MS::ON) { /* q h, scaled by row: h (Sop) is overwritten only after the barrier below */
            frag_zero(O);
            warp_mma<NO, false>(O, Qb(b), LDK, Sop, LDS, KP, mo, no);
            frag_scale_rows(O, mo, qscale);
        }
        __syncthreads();
        if (SM::QONE && ci + 1 < cend) { /* every warp is past q h: the next chunk's q */
            load_q(ck_next, 0);
            cp_commit();
        }
        if (!CTPO || P.keep_hd) store_tile16<64, BV>((bf16_t *)P.D + ch * P.sD + v0, P.VP, U, LDS);
        if constexpr (MS::ON) {
            ms.back(SO, RowMajor{hd.Kwd(b), LDK}, RowMajor{Pb(b), LDT}, RowMajor{U, LDS}, gL);
#pragma unroll
            for (int j = 0; j < MS::MQ; j++) store_o_frag(P, SO[MS::MS + j], ck, h, v0, ms.mq + 16 * j, ms.n);
            /* Sop's readers are past the barrier above. Fragment stores: by stmatrix (frag_stsm_bf16)
             * this pass was 3-5% slower (H200, H 16). */
#pragma unroll
            for (int mt = 0; mt < MS::MS; mt++) frag_store_bf16(SO[mt], Sop, LDS, ms.m2 + 16 * mt, ms.n);
        } else {
            if (CTPO) { /* + P Delta, then o's rows t < ct */
                warp_mma<NO, false>(O, Pb(b), LDT, U, LDS, 64, mo, no);
                store_o_frag(P, O, ck, h, v0, mo, no);
            }
            frag_scale(S, gL);
            warp_mma_mt<TL::MT2, TL::NT2, true>(S, hd.Kwd(b), LDK, U, LDS, 64, tl.m2, tl.n2);
#pragma unroll
            for (int mt = 0; mt < TL::MT2; mt++)
                frag_store_bf16(S[mt], Sop, LDS, tl.m2 + 16 * mt, tl.n2); /* Sop's readers are past the barrier above */
        }
    }
    cp_wait<0>();
    if constexpr (MS::ON)
        state_frags_out(ms.state(SO), P.ht, P, st0, v0, ms.m2, ms.n);
    else
        state_frags_out(S, P.ht, P, st0, v0, tl.m2, tl.n2);
}

/* ---------------------------------------------------------------- 3c. state pass by V rows */
/* Helpers of k_state_wg (below, after k_state_tma), which keeps the transposed state h^T in the
 * accumulators and uses them as the next product's A operand. */

/* The state pass with tensor copies (TMA, sm_90): a stage is ~9 box copies issued by one thread on
 * one mbarrier, instead of 15 cp.async a thread (1.3k of a step's 8k clocks at K = V = 128, in
 * a trace); h and Delta leave by tensor stores. Every tile is in the 128-byte-swizzled box
 * layout (Swz128), which the fragment loads and stores address through. K == KP == 128, V == VP,
 * BV 64 or 128; q's rows past the chunk's tokens hold the next tokens (the output scales them by 0).
 * Taken where GdpTuning.seq_tma says (by default the saving forward's pass). */
struct StateTmaMaps {
    CUtensorMap W, Kwd, U, q, P, h, D;
};
template <int KP, int BV, int CTPO> struct StateTmaSmem {
    static constexpr size_t W = (size_t)64 * KP * 2, U = (size_t)64 * BV * 2, Q = (size_t)CTPO * KP * 2, PT = (size_t)CTPO * 64 * 2;
    static constexpr size_t STAGE = 2 * W + U + Q + PT; /* each part a multiple of 1024 bytes */
    static constexpr size_t SOP = 2 * STAGE;            /* h in bf16, KP x BV */
    static constexpr size_t GS = SOP + (size_t)KP * BV * 2; /* G of the two stages */
    static constexpr size_t BAR = GS + 2 * 64 * 4;      /* two mbarriers */
    static constexpr size_t BYTES = BAR + 16 + 1024;    /* + the alignment of the base to 1024 */
};

/* Thread 0: chunk ci's G (into G) and W, Kwd, U (and with the output q, P) into a stage of
 * StateTmaSmem's layout by tensor copies, completing on bar; chunk() gives the chunk's tokens */
template <int KP, int BV, int CTPO, class Chunk>
__device__ __forceinline__ void state_tma_prefetch(const Params &P, const StateTmaMaps &M, char *stage, float *G, uint64_t *bar,
                                                   int ci, int h, int v0, Chunk chunk) {
    using SM = StateTmaSmem<KP, BV, CTPO>;
    constexpr int QR = CTPO > 0 ? CTPO : 16;
    bf16_t *W = (bf16_t *)stage, *Kwd = (bf16_t *)(stage + SM::W), *U = (bf16_t *)(stage + 2 * SM::W),
           *Q = (bf16_t *)(stage + 2 * SM::W + SM::U), *Pt = (bf16_t *)(stage + 2 * SM::W + SM::U + SM::Q);
    const int64_t ch = (int64_t)ci * P.H + h;
    const int row = (int)(ch * 64);
    mbar_expect_tx(bar, (uint32_t)(256 + 2 * SM::W + SM::U + SM::Q + SM::PT));
    bulk_load(G, P.G + ch * GDP_CHUNK, 256, bar);
#pragma unroll
    for (int x = 0; x < KP; x += 64) {
        tma_load_2d(W + x * 64, &M.W, x, row, bar);
        tma_load_2d(Kwd + x * 64, &M.Kwd, x, row, bar);
    }
#pragma unroll
    for (int x = 0; x < BV; x += 64) tma_load_2d(U + x * 64, &M.U, v0 + x, row, bar);
    if (CTPO) {
        const GdpChunkInfo ck = chunk();
#pragma unroll
        for (int x = 0; x < KP; x += 64) tma_load_3d(Q + x * QR, &M.q, x, h, ck.tok0, bar);
        tma_load_2d(Pt, &M.P, 0, (int)(ch * P.Ctp), bar);
    }
}

template <int KP, int BV, int CTPO>
__global__ void __launch_bounds__(NTHREADS, BV == 128 || CTPO ? 1 : 2) k_state_tma(Params P, const __grid_constant__ StateTmaMaps M) {
    using SM = StateTmaSmem<KP, BV, CTPO>;
    using TL = SeqTiles<KP, BV>;
    using OT = OutTiles<CTPO, BV>;
    constexpr int NO = OT::NO;
    static_assert(CTPO == 0 || OT::USED == 8, "every warp takes a piece of the output");
    constexpr int QR = CTPO > 0 ? CTPO : 16;
    extern __shared__ __align__(1024) char smem_raw[];
    char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    int s, h, v0;
    seq_cta(P, BV, s, h, v0);
    const int tid = threadIdx.x;
    const OT ot;
    const int mo = ot.mo, no = ot.no;
    const TL tl;
    auto part = [&](int b, size_t off) { return (bf16_t *)(smem + b * SM::STAGE + off); };
    auto Wb = [&](int b) { return Swz128<64>{part(b, 0)}; };
    auto Kb = [&](int b) { return Swz128<64>{part(b, SM::W)}; };
    auto Ub = [&](int b) { return Swz128<64>{part(b, 2 * SM::W)}; };
    auto Qb = [&](int b) { return Swz128<QR>{part(b, 2 * SM::W + SM::U)}; };
    auto Pb = [&](int b) { return Swz128<QR>{part(b, 2 * SM::W + SM::U + SM::Q)}; };
    const Swz128<KP> Sop{(bf16_t *)(smem + SM::SOP)};
    auto Gb = [&](int b) { return (float *)(smem + SM::GS) + b * 64; };
    uint64_t *bar = (uint64_t *)(smem + SM::BAR);
    if (tid == 0) mbar_init(bar), mbar_init(bar + 1);
    fence_mbar_init();
    const int64_t st0 = ((int64_t)s * P.H + h) * P.K * P.V;
    float S[TL::MT2][TL::NT2][4];
    state_frags_in(S, P.h0, P, st0, v0, tl.m2, tl.n2, [&](int r, int c) { return Sop.at(r, c); });
    const GdpSeqInfo si = P.seq[s];
    const int cbeg = si.c0, cend = P.seq[s + 1].c0;
    auto chunk_at = [&](int ci) { return seq_chunk(si, s, ci, P.Ct); };
    auto prefetch = [&](int ci, int b) { /* thread 0 */
        state_tma_prefetch<KP, BV, CTPO>(P, M, smem + b * SM::STAGE, Gb(b), bar + b, ci, h, v0, [&] { return chunk_at(ci); });
    };
    fence_proxy_async(); /* Sop's first writes before the first h store */
    __syncthreads();     /* the barriers' init */
    if (tid == 0 && cbeg < cend) prefetch(cbeg, 0);
    GdpChunkInfo ck_next = cbeg < cend ? chunk_at(cbeg) : GdpChunkInfo{0, 0, 0, 0};
    const bool store_hd = !CTPO || P.keep_hd;
    for (int ci = cbeg; ci < cend; ci++) {
        const int it = ci - cbeg, b = it & 1;
        const GdpChunkInfo ck = ck_next;
        if (ci + 1 < cend) ck_next = chunk_at(ci + 1);
        if (tid == 0) bulk_wait_read(); /* the last step's Delta store has read buffer b ^ 1 */
        fence_proxy_async();            /* this thread's last writes (Delta, Sop) before the copies that follow */
        mbar_wait(bar + b, (it >> 1) & 1);
        __syncthreads(); /* chunk ci's tiles and Sop are visible; buffer b ^ 1 is free */
        const int64_t ch = (int64_t)ci * P.H + h;
        if (tid == 0) {
            if (ci + 1 < cend) prefetch(ci + 1, b ^ 1);
            if (store_hd) {
#pragma unroll
                for (int x = 0; x < BV; x += 64) tma_store_2d(&M.h, v0 + x, (int)(ch * KP), Sop.p + x * KP);
                bulk_commit();
            }
        }
        const Swz128<64> U = Ub(b);
        const float gL = gate_exp(Gb(b)[ck.ct - 1]);
        {
            float D[TL::MT1][TL::NT1][4];
#pragma unroll
            for (int mt = 0; mt < TL::MT1; mt++) frag_zero(D[mt]);
            warp_mma_v<TL::MT1, TL::NT1, false>(D, Wb(b), Sop, KP, tl.m1, tl.n1);
            frags_sub_from(U, D, tl.m1, tl.n1); /* Delta = U - W h, in place of U */
        }
        float O[1][NO][4];
        if (CTPO) { /* q h, scaled by row: h (Sop) is overwritten only after the barrier below */
            frag_zero(O[0]);
            warp_mma_v<1, NO, false>(O, Qb(b), Sop, KP, mo, no);
            const float *G = Gb(b);
            frag_scale_rows(O[0], mo, [&](int t) { return o_row_scale(P, G, ck.ct, t); });
        }
        if (store_hd) {
            fence_proxy_async();            /* Delta's writes before its store */
            if (tid == 0) bulk_wait_read(); /* h's store has read Sop, which changes after the barrier */
        }
        __syncthreads();
        if (store_hd && tid == 0) {
#pragma unroll
            for (int x = 0; x < BV; x += 64) tma_store_2d(&M.D, v0 + x, (int)(ch * 64), U.p + x * 64);
            bulk_commit();
        }
        if (CTPO) { /* + P Delta, then o's rows t < ct */
            warp_mma_v<1, NO, false>(O, Pb(b), U, 64, mo, no);
            store_o_frag(P, O[0], ck, h, v0, mo, no);
        }
        frag_scale(S, gL);
        warp_mma_v<TL::MT2, TL::NT2, true>(S, Kb(b), U, 64, tl.m2, tl.n2);
#pragma unroll
        for (int mt = 0; mt < TL::MT2; mt++) /* Sop's readers are past the barrier above */
            frag_stsm_pairs(S[mt], tl.m2 + 16 * mt, tl.n2, [&](int r, int c) { return Sop.at(r, c); });
    }
    if (tid == 0) bulk_wait_all();
    state_frags_out(S, P.ht, P, st0, v0, tl.m2, tl.n2);
}

/* The state pass by V rows on wgmma (k_state_wg; K = KP = 128, V tile 128, sm_90a; GdpTuning.state_wgmma
 * false turns it off). Every product of a step multiplies h or Delta from the left, so the V columns are
 * independent: warpgroup g keeps rows 64 g .. + 63 of the V tile's transposed state h^T (V x K, fp32)
 * as its m64n128 accumulator, and the step runs in transposed form with h^T or Delta^T as the A
 * operand straight from the accumulators (an accumulator's adjacent pairs are an A fragment's
 * register pairs): (W h)^T = h^T W^T and (q h)^T = h^T q^T (W, q K-major), Delta^T = U^T - (W h)^T
 * (U^T by ldmatrix.trans), h'^T = gL h^T + Delta^T Kwd (Kwd MN-major) and o^T = qscale (q h)^T +
 * Delta^T P^T (P K-major); B comes from the TMA's 128-byte-swizzled tiles, read once a warpgroup.
 * No warp reads another's state or Delta: one barrier a step (k_state_fast has two with a chain
 * through shared memory between them) and no bf16 copy of the state as an operand. h and Delta leave
 * by tensor stores of block tiles (Sop, Dst) that each warp fills through its own 16 columns
 * (stmatrix.trans); a store issued at a step's top has read its tile before the warps write it again
 * (an mbarrier thread 0 arrives on after bulk_wait_read). o leaves through the warp's columns of a
 * padded tile in 32-byte row pieces. It takes every state pass of its shapes (plain, saving, the
 * backward's recompute), so saved and recomputed h and Delta are the same bits. H200, H 16, B 8:
 * the plain forward's pass n_h 3 0.317 -> 0.202 ms, n_h 2 0.221 -> 0.152; the passes
 * that store h and Delta unchanged (0.34-0.40, bound by those bytes). The same dataflow on mma.sync
 * (each warp loading all of W, q, Kwd and P by ldmatrix) was no faster than
 * k_state_fast: the step is bound by shared-memory reads, which wgmma's B cut fourfold. */
template <int CTPO> struct StateWgSmem {
    static constexpr int KP = 128, BV = 128, QR = CTPO > 0 ? CTPO : 16, LDO = BV + 8;
    using T = StateTmaSmem<KP, BV, CTPO>;
    static constexpr size_t STAGE = T::STAGE, SOP = 2 * STAGE, DST = SOP + (size_t)KP * BV * 2, OST = DST + (size_t)64 * BV * 2;
    static constexpr size_t GS = OST + (size_t)CTPO * LDO * 2, BAR = GS + 2 * 64 * 4, BYTES = BAR + 32 + 1024;
};
template <int CTPO>
__global__ void __launch_bounds__(NTHREADS, 1) k_state_wg(Params P, const __grid_constant__ StateTmaMaps M) {
    constexpr int KP = 128, BV = 128, NQ = CTPO / 8;
    using SM = StateWgSmem<CTPO>;
    using TS = typename SM::T;
    constexpr int QR = SM::QR, LDO = SM::LDO;
    extern __shared__ __align__(1024) char smem_raw[];
    char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    int s, h, v0;
    seq_cta(P, BV, s, h, v0);
    const int tid = threadIdx.x;
    const int vw = (tid >> 5) * 16, tq2 = 2 * (tid & 3);
    auto part = [&](int b, size_t off) { return (bf16_t *)(smem + b * TS::STAGE + off); };
    auto Wb = [&](int b) { return part(b, 0); };
    auto Kb = [&](int b) { return part(b, TS::W); };
    auto Ub = [&](int b) { return Swz128<64>{part(b, 2 * TS::W)}; };
    auto Qb = [&](int b) { return part(b, 2 * TS::W + TS::U); };
    auto Pb = [&](int b) { return part(b, 2 * TS::W + TS::U + TS::Q); };
    const Swz128<KP> Sop{(bf16_t *)(smem + SM::SOP)};
    const Swz128<64> Dst{(bf16_t *)(smem + SM::DST)};
    bf16_t *Ost = (bf16_t *)(smem + SM::OST);
    auto Gb = [&](int b) { return (float *)(smem + SM::GS) + b * 64; };
    uint64_t *bar = (uint64_t *)(smem + SM::BAR); /* [0], [1]: the stages' loads; [2]: the stores have read Sop and Dst */
    if (tid == 0) mbar_init(bar), mbar_init(bar + 1), mbar_init(bar + 2);
    fence_mbar_init();
    const int64_t st0 = ((int64_t)s * P.H + h) * P.K * P.V;
    float S[KP / 8][4]; /* h^T */
    frag_each(S, vw, 0, [&](int v, int k, float &x) {
        x = P.h0 && k < P.K && v0 + v < P.V ? P.h0[st0 + (int64_t)k * P.V + v0 + v] : 0.f;
    });
    const bool store_hd = !CTPO || P.keep_hd;
    auto h_out = [&]() { /* h^T's warp rows, rounded as the products take them, into Sop's columns */
        uint32_t A[KP / 16][4];
#pragma unroll
        for (int ks = 0; ks < KP / 16; ks++) frag_a_of(S, ks, A[ks]);
        frags_a_store_t(Sop, vw, A);
    };
    if (store_hd) h_out();
    const GdpSeqInfo si = P.seq[s];
    const int cbeg = si.c0, cend = P.seq[s + 1].c0;
    auto chunk_at = [&](int ci) { return seq_chunk(si, s, ci, P.Ct); };
    auto prefetch = [&](int ci, int b) { /* thread 0 */
        state_tma_prefetch<KP, BV, CTPO>(P, M, smem + b * TS::STAGE, Gb(b), bar + b, ci, h, v0, [&] { return chunk_at(ci); });
    };
    fence_proxy_async(); /* Sop's first writes before the first h store */
    __syncthreads();     /* the barriers' init */
    if (tid == 0 && cbeg < cend) prefetch(cbeg, 0);
    GdpChunkInfo ck_next = cbeg < cend ? chunk_at(cbeg) : GdpChunkInfo{0, 0, 0, 0};
    for (int ci = cbeg; ci < cend; ci++) {
        const int it = ci - cbeg, b = it & 1;
        const GdpChunkInfo ck = ck_next;
        if (ci + 1 < cend) ck_next = chunk_at(ci + 1);
        mbar_wait(bar + b, (it >> 1) & 1);
        __syncthreads(); /* chunk ci's tiles, Sop (h of chunk ci) and Dst (Delta of chunk ci - 1) are complete; buffer b ^ 1 is free */
        const int64_t ch = (int64_t)ci * P.H + h;
        if (tid == 0) {
            if (ci + 1 < cend) prefetch(ci + 1, b ^ 1);
            if (store_hd) {
#pragma unroll
                for (int x = 0; x < BV; x += 64) {
                    tma_store_2d(&M.h, v0 + x, (int)(ch * KP), Sop.p + x * KP);
                    if (it > 0) tma_store_2d(&M.D, v0 + x, (int)((ch - P.H) * 64), Dst.p + x * 64);
                }
                bulk_commit();
            }
        }
        const uint32_t wa = smem_addr(Wb(b)), ka = smem_addr(Kb(b)), qa = smem_addr(Qb(b)), pa = smem_addr(Pb(b));
        float X[8][4]; /* (W h)^T: the warp's 16 V rows x 64 chunk rows */
        [[maybe_unused]] float O[NQ > 0 ? NQ : 2][4];
        frag_zero(X);
        uint32_t A[KP / 16][4];
#pragma unroll
        for (int ks = 0; ks < KP / 16; ks++) frag_a_of(S, ks, A[ks]);
        wgmma_fence_regs(A);
        wgmma_fence_acc(X);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < KP / 16; ks++) /* W: 64 rows x 128 bytes a box, k 64 a box */
            Wgmma<64, 0>::run(X, A[ks], wgmma_desc(wa + (ks >> 2) * 8192 + (ks & 3) * 32, 16, 1024));
        if constexpr (CTPO > 0) {
            frag_zero(O);
            wgmma_fence_acc(O);
#pragma unroll
            for (int ks = 0; ks < KP / 16; ks++)
                Wgmma<CTPO, 0>::run(O, A[ks], wgmma_desc(qa + (ks >> 2) * (QR * 128) + (ks & 3) * 32, 16, 1024));
        }
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_acc(X);
        const float *G = Gb(b);
        if constexpr (CTPO > 0) {
            wgmma_fence_acc(O);
#pragma unroll
            for (int nt = 0; nt < NQ; nt++) { /* o's row scale, here a column's */
                const float f0 = o_row_scale(P, G, ck.ct, 8 * nt + tq2), f1 = o_row_scale(P, G, ck.ct, 8 * nt + tq2 + 1);
                O[nt][0] *= f0, O[nt][1] *= f1, O[nt][2] *= f0, O[nt][3] *= f1;
            }
            wgmma_fence_acc(O);
        }
        const Swz128<64> U = Ub(b);
        uint32_t DA[4][4]; /* Delta^T = U^T - (W h)^T in bf16 */
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t u[4];
            ldsm_a<true>(u, U, vw, 16 * np);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u[i]));
                const float *x = X[2 * np + (i >> 1)] + 2 * (i & 1);
                DA[np][i] = bf16x2_bits(f.x - x[0], f.y - x[1]);
            }
        }
        const float gL = gate_exp(G[ck.ct - 1]);
#pragma unroll
        for (int nt = 0; nt < KP / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) S[nt][e] *= gL;
        wgmma_fence_regs(DA);
        wgmma_fence_acc(S);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ks++) /* Kwd MN-major: rows t 16 ks .., k 64 a box (8192 bytes) */
            Wgmma<KP, 1>::run(S, DA[ks], wgmma_desc(ka + ks * 2048, 8192, 1024));
        if constexpr (CTPO > 0) {
#pragma unroll
            for (int ks = 0; ks < 4; ks++) /* P: QR rows x 128 bytes (64 chunk rows) */
                Wgmma<CTPO, 0>::run(O, DA[ks], wgmma_desc(pa + ks * 32, 16, 1024));
        }
        wgmma_commit();
        if (store_hd) { /* Delta into Dst's columns once the last stores have read it */
            if (tid == 0) {
                bulk_wait_read();
                GDP_SM90_ONLY(asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar + 2)) : "memory"));
            }
            mbar_wait(bar + 2, it & 1);
            frags_a_store_t(Dst, vw, DA);
        }
        wgmma_wait<0>();
        wgmma_fence_acc(S);
        if constexpr (CTPO > 0) { /* o's rows t < ct through the warp's columns of Ost */
            wgmma_fence_acc(O);
            uint32_t OA[CTPO / 16][4];
#pragma unroll
            for (int ks = 0; ks < CTPO / 16; ks++) frag_a_of(O, ks, OA[ks]);
            frags_a_store_t(RowMajor{Ost, LDO}, vw, OA);
            __syncwarp();
            warp_rows16_out<CTPO>((bf16_t *)P.o + ((int64_t)ck.tok0 * P.H + h) * P.V + v0 + vw, (int64_t)P.H * P.V, Ost + vw, LDO,
                                  ck.ct);
        }
        if (store_hd) {
            h_out(); /* h of chunk ci + 1 */
            fence_proxy_async(); /* Sop's and Dst's writes before the stores that read them */
        }
        __syncwarp();
    }
    if (store_hd && cend > cbeg) { /* the last chunk's Delta */
        __syncthreads();
        if (tid == 0) {
#pragma unroll
            for (int x = 0; x < BV; x += 64) tma_store_2d(&M.D, v0 + x, (int)(((int64_t)(cend - 1) * P.H + h) * 64), Dst.p + x * 64);
            bulk_commit();
        }
    }
    if (tid == 0) bulk_wait_all();
    if (P.ht)
        frag_each(S, vw, 0, [&](int v, int k, float &x) {
            if (k < P.K && v0 + v < P.V) P.ht[st0 + (int64_t)k * P.V + v0 + v] = x;
        });
}

/* ---------------------------------------------------------------- host */
/* ctpo: 0, or the output's token rows that the pass makes */
static void (*state_fast_kernel(int KP, int bv, int ctpo))(Params) {
#define GDP_SF(kp, b, c) \
    if (KP == kp && bv == b && ctpo == c) return k_state_fast<kp, b, 2, c>;
    GDP_SF(128, 128, 0) GDP_SF(128, 64, 0) GDP_SF(128, 32, 0) GDP_SF(64, 128, 0) GDP_SF(64, 64, 0) GDP_SF(64, 32, 0)
    GDP_SF(256, 64, 0) GDP_SF(256, 32, 0) /* K 256: no bv 128 (registers) */
    GDP_SF(128, 128, 16) GDP_SF(128, 128, 32) GDP_SF(128, 128, 64) GDP_SF(64, 128, 16) GDP_SF(64, 128, 32) GDP_SF(64, 128, 64)
    GDP_SF(128, 64, 32) GDP_SF(128, 64, 64) GDP_SF(64, 64, 32) GDP_SF(64, 64, 64)
    GDP_SF(256, 64, 32) /* K 256: q single-buffered (StateFastSmem::QONE); 64 does not fit, 16 leaves a warp one n8 tile */
#undef GDP_SF
    return nullptr;
}
#define GDP_SS(kp, b, c) static_assert(StateFastSmem<kp, b, c>::bytes(2) == gdp_smem_state_fast(kp, b, c, 2), "smem.h: state_fast");
GDP_SS(128, 128, 0) GDP_SS(128, 64, 0) GDP_SS(128, 32, 0) GDP_SS(64, 128, 0) GDP_SS(64, 64, 0) GDP_SS(64, 32, 0)
GDP_SS(256, 64, 0) GDP_SS(256, 32, 0) GDP_SS(128, 128, 16) GDP_SS(128, 128, 32) GDP_SS(128, 128, 64) GDP_SS(64, 128, 16)
GDP_SS(64, 128, 32) GDP_SS(64, 128, 64) GDP_SS(128, 64, 32) GDP_SS(128, 64, 64) GDP_SS(64, 64, 32) GDP_SS(64, 64, 64)
GDP_SS(256, 64, 32)
#undef GDP_SS
static void (*state_tma_kernel(int bv, int ctpo))(Params, StateTmaMaps) {
    if (bv == 128)
        return ctpo == 16 ? k_state_tma<128, 128, 16> : ctpo == 32 ? k_state_tma<128, 128, 32> : ctpo == 64 ? k_state_tma<128, 128, 64> : k_state_tma<128, 128, 0>;
    if (bv == 64) return ctpo == 32 ? k_state_tma<128, 64, 32> : ctpo == 64 ? k_state_tma<128, 64, 64> : ctpo == 0 ? k_state_tma<128, 64, 0> : nullptr;
    return nullptr;
}
#define GDP_ST(b, c) static_assert(StateTmaSmem<128, b, c>::BYTES == gdp_smem_state_tma(b, c), "smem.h: state_tma");
GDP_ST(128, 0) GDP_ST(128, 16) GDP_ST(128, 32) GDP_ST(128, 64) GDP_ST(64, 0) GDP_ST(64, 32) GDP_ST(64, 64)
#undef GDP_ST
static void (*state_wg_kernel(int ctpo))(Params, StateTmaMaps) {
    return ctpo == 0 ? k_state_wg<0> : ctpo == 16 ? k_state_wg<16> : ctpo == 32 ? k_state_wg<32> : ctpo == 64 ? k_state_wg<64> : nullptr;
}
static_assert(StateWgSmem<0>::BYTES == gdp_smem_state_wg(0) && StateWgSmem<16>::BYTES == gdp_smem_state_wg(16) &&
                  StateWgSmem<32>::BYTES == gdp_smem_state_wg(32) && StateWgSmem<64>::BYTES == gdp_smem_state_wg(64),
              "smem.h: state_wg");

/* the maps of k_state_tma and k_state_wg for this call's workspace and q */
static bool state_tma_maps(const GdpLayout &pl, const Params &P, int ctpo, StateTmaMaps &M) {
    const PFN_cuTensorMapEncodeTiled_v12000 enc = tensor_map_encoder();
    if (!enc) return false;
    memset(&M, 0, sizeof M);
    const bool ok = encode_chunk_tiles(enc, &M.W, P.W, pl, pl.KP, 64, 64) && encode_chunk_tiles(enc, &M.Kwd, P.Kwd, pl, pl.KP, 64, 64) &&
                    encode_chunk_tiles(enc, &M.U, P.U, pl, pl.VP, 64, 64) && encode_chunk_tiles(enc, &M.h, P.h, pl, pl.VP, pl.KP, pl.KP) &&
                    encode_chunk_tiles(enc, &M.D, P.D, pl, pl.VP, 64, 64);
    if (!ok || !ctpo) return ok;
    return encode_token_rows(enc, &M.q, P.q, P, P.K, ctpo) && encode_chunk_tiles(enc, &M.P, P.P, pl, 64, pl.Ctp, ctpo);
}

int generic_state_regs(bool bf16) {
    cudaFuncAttributes fa;
    const cudaError_t e = bf16 ? cudaFuncGetAttributes(&fa, k_state<__nv_bfloat16>) : cudaFuncGetAttributes(&fa, k_state<float>);
    return e == cudaSuccess ? fa.numRegs : 0;
}

GdpStatus run_state(const Launch &L, const GdpStep &s, const Params &P, bool bf16) {
    StateTmaMaps maps;
    switch (s.kernel) {
    case GDP_KERNEL_STATE_WG:
        if (!state_tma_maps(*L.lay, P, s.ctpo, maps)) return tensor_map_failed(L, s);
        return launch_step(L, s, state_wg_kernel(s.ctpo), P, false, false, maps);
    case GDP_KERNEL_STATE_TMA:
        if (!state_tma_maps(*L.lay, P, s.ctpo, maps)) return tensor_map_failed(L, s);
        return launch_step(L, s, state_tma_kernel(s.bv, s.ctpo), P, false, false, maps);
    case GDP_KERNEL_STATE_FAST:
        return launch_step(L, s, state_fast_kernel(s.kp, s.bv, s.ctpo), P, false, false);
    case GDP_KERNEL_STATE: {
        GdpStatus r = check_smem(L, s, bf16 ? StateSmem<__nv_bfloat16>::carve(nullptr, L.lay->KP, s.bv, s.nst, nullptr)
                                            : StateSmem<float>::carve(nullptr, L.lay->KP, s.bv, s.nst, nullptr));
        if (r != GDP_OK) return r;
        return bf16 ? launch_step(L, s, k_state<__nv_bfloat16>, P, false, false) : launch_step(L, s, k_state<float>, P, false, false);
    }
    default:
        return gdp_fail(GDP_ERR_INTERNAL, "%s: %s is not a state kernel", L.who, gdp_kernel_name(s.kernel));
    }
}

} // namespace gdp
