/* Pass 4: the output where the state pass does not make it. */
#include "kernels/gdp/launch.cuh"
#include "kernels/gdp/seq_tiles.cuh"

namespace gdp {

/* ---------------------------------------------------------------- 4. output */
template <typename IT> struct OutSmem {
    float *Gs, *qf, *Of;
    IT *Qs, *Hs, *Ps, *Ds;
    __host__ __device__ static size_t carve(char *base, int Ctp, OutSmem *s) {
        Carve cv(base);
        OutSmem t;
        t.Gs = cv.take<float>(64);
        t.qf = cv.take<float>(64);
        t.Of = cv.take<float>((size_t)Ctp * LDF);
        t.Qs = cv.take<IT>((size_t)Ctp * LDT);
        t.Hs = cv.take<IT>((size_t)64 * LDT);
        t.Ps = cv.take<IT>((size_t)Ctp * LDT);
        t.Ds = cv.take<IT>((size_t)64 * LDT);
        if (s) *s = t;
        return cv.off;
    }
};

template <typename IT> __global__ void __launch_bounds__(NTHREADS) k_output(Params P) {
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (!chunk_ctx(P, c)) return;
    OutSmem<IT> S;
    OutSmem<IT>::carve(smem, P.Ctp, &S);
    const int v0 = blockIdx.z * GDP_TILE, wv = min(GDP_TILE, P.VP - v0), Ctp = P.Ctp;
    for (int t = threadIdx.x; t < 64; t += blockDim.x) {
        const float G = P.G[c.ch * GDP_CHUNK + t];
        S.Gs[t] = G;
        S.qf[t] = t < c.ct ? P.scale * expf(G) : 0.f;
    }
    cp_tile(S.Ps, LDT, (const IT *)P.P + c.ch * P.sP, 64, Ctp, 64);
    cp_tile(S.Ds, LDT, (const IT *)P.D + c.ch * P.sD + v0, P.VP, 64, wv);
    cp_commit();
    __syncthreads();
    float acc[4][4];
    for (int i = 0; i < 16; i++) acc[i >> 2][i & 3] = 0.f;
    const IT *hg = (const IT *)P.h + c.ch * P.sH + v0;
    for (int kt = 0; kt < P.nkt; kt++) {
        const int c0 = kt * GDP_TILE, wk = min(GDP_TILE, P.KP - c0);
        cp_tile(S.Hs, LDT, hg + (int64_t)c0 * P.VP, P.VP, wk, wv);
        cp_commit();
        load_q<IT>(P, c, S.Qs, LDT, c0, wk, S.qf);
        cp_wait<0>();
        __syncthreads();
        tile_gemm(acc, Ctp, wv, smat(S.Qs, LDT), smat(S.Hs, LDT), wk);
        __syncthreads();
    }
    tile_gemm(acc, Ctp, wv, smat(S.Ps, LDT), smat(S.Ds, LDT), 64);
    tile_each(acc, Ctp, wv, [&](int r, int cc, float v) { S.Of[r * LDF + cc] = v; });
    __syncthreads();
    store_rows<IT>(S.Of, LDF, c.ct, wv, v0, P.V, P.vecv,
                   [&](int t) { return (IT *)P.o + ((int64_t)(c.tok0 + t) * P.H + c.h) * P.V; });
}

/* The output where the state pass does not make it (K 256; V tiles of 32): o = (scale e^G q) h +
 * P Delta for one chunk, with k_state_fast's products in its order (so the same bits as its output).
 * One CTA a chunk and head loads q and P once and walks the 64-wide V tiles with h's and Delta's tiles
 * double-buffered, so a tile's loads overlap the last one's products. (The generic k_output waits for
 * every 64-row K tile in turn and rounds e^G q to bf16 first: H200, K = V = 256, n_h 2, 0.655 ms; a
 * first version with a CTA a V tile and no pipeline took 0.546.) */
template <int KP, int CTP> struct OutFastSmem {
    static constexpr int LDK = KP + 8, LDS = 64 + 8;
    static constexpr size_t PT = (size_t)CTP * LDK * 2, G = PT + (size_t)CTP * LDT * 2, STAGE0 = G + 64 * 4,
                            STAGE = (size_t)KP * LDS * 2 + (size_t)64 * LDS * 2, BYTES = STAGE0 + 2 * STAGE;
};
template <int KP, int CTP> __global__ void __launch_bounds__(NTHREADS) k_output_fast(Params P) {
    using SM = OutFastSmem<KP, CTP>;
    constexpr int BV = 64, LDK = SM::LDK, LDS = SM::LDS;
    using OT = OutTiles<CTP, BV>;
    constexpr int NO = OT::NO;
    extern __shared__ __align__(16) char smem[];
    int ci, h;
    block_chunk_head(P, ci, h);
    const GdpChunkInfo ck = P.chunk[ci];
    if (ck.seq < 0) return;
    const int nvt = P.VP / BV;
    const OT ot;
    const int mo = ot.mo, no = ot.no;
    const bool active = ot.active;
    const int64_t ch = (int64_t)ci * P.H + h;
    bf16_t *Q = (bf16_t *)smem, *Ps = (bf16_t *)(smem + SM::PT);
    float *G = (float *)(smem + SM::G);
    auto Hb = [&](int b) { return (bf16_t *)(smem + SM::STAGE0 + b * SM::STAGE); };
    auto Db = [&](int b) { return Hb(b) + KP * LDS; };
    auto issue = [&](int vt) {
        cp_tile16<KP, BV>(Hb(vt & 1), LDS, (const bf16_t *)P.h + ch * P.sH + vt * BV, P.VP);
        cp_tile16<64, BV>(Db(vt & 1), LDS, (const bf16_t *)P.D + ch * P.sD + vt * BV, P.VP);
    };
    cp_token_rows<CTP, KP>(Q, LDK, (const bf16_t *)P.q + ((int64_t)ck.tok0 * P.H + h) * KP, (int64_t)P.H * KP, ck.ct);
    cp_tile16<CTP, 64>(Ps, LDT, (const bf16_t *)P.P + ch * P.sP, 64);
    issue(0);
    cp_commit();
    if (threadIdx.x < 64) G[threadIdx.x] = P.G[ch * GDP_CHUNK + threadIdx.x];
    for (int vt = 0; vt < nvt; vt++) {
        if (vt + 1 < nvt) {
            issue(vt + 1); /* its buffer's last readers passed the barrier at the end of vt - 1 */
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        if (active) {
            float O[NO][4];
            frag_zero(O);
            warp_mma<NO, false>(O, Q, LDK, Hb(vt & 1), LDS, KP, mo, no);
            frag_scale_rows(O, mo, [&](int t) { return o_row_scale(P, G, ck.ct, t); });
            warp_mma<NO, false>(O, Ps, LDT, Db(vt & 1), LDS, 64, mo, no);
            store_o_frag(P, O, ck, h, vt * BV, mo, no);
        }
        __syncthreads();
    }
}

/* ---------------------------------------------------------------- host */
static void (*output_fast_kernel(int KP, int ctp))(Params) {
#define GDP_OF(kp) \
    if (KP == kp) return ctp == 16 ? k_output_fast<kp, 16> : ctp == 32 ? k_output_fast<kp, 32> : ctp == 64 ? k_output_fast<kp, 64> : nullptr;
    GDP_OF(64) GDP_OF(128) GDP_OF(256)
#undef GDP_OF
    return nullptr;
}
#define GDP_OS(kp, c) static_assert(OutFastSmem<kp, c>::BYTES == gdp_smem_output_fast(kp, c), "smem.h: output_fast");
GDP_OS(64, 16) GDP_OS(64, 32) GDP_OS(64, 64) GDP_OS(128, 16) GDP_OS(128, 32) GDP_OS(128, 64) GDP_OS(256, 16) GDP_OS(256, 32)
GDP_OS(256, 64)
#undef GDP_OS

GdpStatus run_output(const Launch &L, const GdpStep &s, const Params &P, bool bf16) {
    if (s.kernel == GDP_KERNEL_OUTPUT_FAST) return launch_step(L, s, output_fast_kernel(s.kp, s.ctp), P, true, false);
    if (s.kernel != GDP_KERNEL_OUTPUT) return gdp_fail(GDP_ERR_INTERNAL, "%s: %s is not an output kernel", L.who, gdp_kernel_name(s.kernel));
    GdpStatus r = check_smem(L, s, bf16 ? OutSmem<__nv_bfloat16>::carve(nullptr, s.ctp, nullptr) : OutSmem<float>::carve(nullptr, s.ctp, nullptr));
    if (r != GDP_OK) return r;
    return bf16 ? launch_step(L, s, k_output<__nv_bfloat16>, P, true, false) : launch_step(L, s, k_output<float>, P, true, false);
}

} // namespace gdp
