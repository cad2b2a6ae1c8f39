/* Pass 1 and 2: the sequence and chunk tables, and per chunk G, A, T = (I+A)^-1, W, U, Kwd, P. */
#include "kernels/gdp/launch.cuh"
#include "kernels/gdp/frag.cuh"

namespace gdp {

/* ---------------------------------------------------------------- tables */
__global__ void k_tables(Params P) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    int c0 = 0, prev = 0;
    for (int s = 0; s < P.N; s++) {
        int base, len;
        if (P.cu) {
            /* clamped to [prev, T] so that bad offsets can never overrun the workspace */
            int lo = P.cu[s], hi = P.cu[s + 1];
            lo = lo < prev ? prev : (lo > P.T ? P.T : lo);
            hi = hi < lo ? lo : (hi > P.T ? P.T : hi);
            base = lo;
            len = hi - lo;
            prev = hi;
        } else {
            base = s * P.T;
            len = P.T;
        }
        GdpSeqInfo si;
        si.base = base;
        si.len = len;
        si.c0 = c0;
        si.pad = 0;
        P.seq[s] = si;
        c0 += (len + P.Ct - 1) / P.Ct;
    }
    GdpSeqInfo last;
    last.base = 0;
    last.len = 0;
    last.c0 = c0;
    last.pad = 0;
    P.seq[P.N] = last;
}

__global__ void k_chunks(Params P) {
    const int ci = blockIdx.x * blockDim.x + threadIdx.x;
    if (ci >= P.NCmax) return;
    GdpChunkInfo ck;
    ck.seq = -1;
    ck.tok0 = 0;
    ck.ct = 0;
    ck.c = 0;
    if (ci < P.seq[P.N].c0) {
        int lo = 0, hi = P.N - 1; /* last s with seq[s].c0 <= ci */
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (P.seq[mid].c0 <= ci) lo = mid; else hi = mid - 1;
        }
        ck = seq_chunk(P.seq[lo], lo, ci, P.Ct);
    }
    P.chunk[ci] = ck;
}

/* ---------------------------------------------------------------- 2. prep */
template <typename IT> struct PrepSmem {
    float *Gs, *br, *Af, *Pacc, *Tf;
    IT *Top, *b0, *b1, *b2;
    __host__ __device__ static size_t carve(char *base, PrepSmem *s) {
        Carve cv(base);
        PrepSmem t;
        t.Gs = cv.take<float>(64);
        t.br = cv.take<float>(64);
        t.Af = cv.take<float>(64 * LDA);
        t.Pacc = cv.take<float>(64 * LDA);
        t.Tf = cv.take<float>(64 * LDA);
        t.Top = cv.take<IT>(64 * LDT);
        t.b0 = cv.take<IT>(64 * LDT);
        t.b1 = cv.take<IT>(64 * LDT);
        t.b2 = cv.take<IT>(64 * LDT);
        if (s) *s = t;
        return cv.off;
    }
};

template <typename IT> __global__ void __launch_bounds__(NTHREADS) k_prep(Params P) {
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (!chunk_ctx(P, c)) return;
    PrepSmem<IT> S;
    PrepSmem<IT>::carve(smem, &S);
    const int tid = threadIdx.x;
    load_gates<IT>(P, c, S.Gs, S.br);
    __syncthreads();
    for (int t = tid; t < 64; t += blockDim.x) P.G[c.ch * GDP_CHUNK + t] = S.Gs[t];
    build_A<IT>(P, c, S.Gs, S.br, S.b0, S.b1, S.b2, S.Af, true, S.Pacc);
    IT *Tg = P.Tsave ? (IT *)P.Tsave + c.ch * (GDP_CHUNK * GDP_CHUNK) : nullptr;
    solve_T(S.Af, S.Tf, true, [&](int i, int j, float t0, float t1) {
        store2(S.Top + i * LDT + j, t0, t1);
        if (Tg) store2(Tg + i * 64 + j, t0, t1);
    }, [](int, int) {});
    IT *W = (IT *)P.W + c.ch * P.sW, *U = (IT *)P.U + c.ch * P.sU;
    for (int kt = 0; kt < P.nkt + P.nvt; kt++) {
        const bool isv = kt >= P.nkt;
        const int c0 = (isv ? kt - P.nkt : kt) * GDP_TILE, wk = min(GDP_TILE, (isv ? P.VP : P.KP) - c0);
        if (isv)
            load_v<IT>(P, c, S.b1, c0, wk, S.br, 1);
        else
            load_r<IT>(P, c, S.b1, c0, wk, S.Gs, S.br, 1);
        __syncthreads();
        gemm(64, wk, smat(S.Top, LDT), smat(S.b1, LDT), 64, Zero(), [&](int r, int cc, float v) { S.b0[r * LDT + cc] = from_f32<IT>(v); });
        __syncthreads();
        if (isv)
            st_tile(U + c0, P.VP, S.b0, LDT, 64, wk);
        else
            st_tile(W + c0, P.KP, S.b0, LDT, 64, wk);
    }
}


/* Whole-K prep: the chunk's keys (and read keys), queries and values sit in shared memory at
 * once, loaded asynchronously; A and P are register tiles; W = (T diag(beta gamma)) R and
 * U = (T diag(beta)) V with the scaling folded into T. Used whenever it fits. */
template <typename IT> struct Prep2Smem {
    float *Gs, *br, *rowf, *bg, *Af, *Tf;
    IT *Kw, *R, *QV;
    __host__ __device__ static size_t carve(char *base, int KP, int VP, int Ctp, bool split, Prep2Smem *s) {
        Carve cv(base);
        Prep2Smem t;
        t.Gs = cv.take<float>(64);
        t.br = cv.take<float>(64);
        t.rowf = cv.take<float>(64);
        t.bg = cv.take<float>(64);
        const size_t afb = (size_t)64 * LDA * 4 > (size_t)2 * 64 * LDT * sizeof(IT) ? (size_t)64 * LDA * 4 : (size_t)2 * 64 * LDT * sizeof(IT);
        t.Af = (float *)cv.take<char>(afb);
        t.Tf = cv.take<float>(64 * LDA);
        t.Kw = cv.take<IT>((size_t)64 * (KP + 8));
        /* split mode: R shares the A region while A is formed when it fits there (rebuilt in Kw for W) */
        t.R = !split ? t.Kw : (size_t)64 * (KP + 8) * sizeof(IT) <= afb ? (IT *)t.Af : cv.take<IT>((size_t)64 * (KP + 8));
        const size_t qv = (size_t)Ctp * (KP + 8) > (size_t)64 * (VP + 8) ? (size_t)Ctp * (KP + 8) : (size_t)64 * (VP + 8);
        t.QV = cv.take<IT>(qv);
        if (s) *s = t;
        return cv.off;
    }
};

template <typename IT> __global__ void __launch_bounds__(NTHREADS, sizeof(IT) == 2 ? 3 : 2) k_prep2(Params P) {
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (!chunk_ctx(P, c)) return;
    const bool hh = P.mode == GDP_MODE_HOUSEHOLDER;
    Prep2Smem<IT> S;
    Prep2Smem<IT>::carve(smem, P.KP, P.VP, P.Ctp, !hh, &S);
    const int tid = threadIdx.x, KP = P.KP, VP = P.VP, ldk = KP + 8, ldv = VP + 8, Ctp = P.Ctp;
    auto krowp = [&](int r) { return r < c.lc ? krow<IT>(P, c.tok0, c.h, r) : (const IT *)nullptr; };
    /* raw keys (split mode: every row of a token holds the token's key; made into R and K_w below) */
    cp_rows(S.Kw, ldk, 64, KP, 0, P.K, P.veck, krowp);
    cp_rows(S.QV, ldk, Ctp, KP, 0, P.K, P.veck,
            [&](int t) { return t < c.ct ? (const IT *)P.q + ((int64_t)(c.tok0 + t) * P.H + c.h) * P.K : (const IT *)nullptr; });
    cp_commit();
    load_gates<IT>(P, c, S.Gs, S.br);
    cp_wait<0>();
    __syncthreads();
    const bool r_in_a = !hh && (void *)S.R == (void *)S.Af;
    if (!hh) {
        split_keys<IT>(P, c, S.Kw, ldk, S.R, ldk, 0, KP, true);
        __syncthreads();
    }
    const float GL = S.Gs[c.ct - 1];
    for (int t = tid; t < 64; t += blockDim.x) {
        S.rowf[t] = t < c.lc ? gate_exp(GL - S.Gs[tokof(P, t)]) : 0.f;
        S.bg[t] = S.br[t] * gate_exp(S.Gs[tokof(P, t)]); /* beta gamma per row (0 past lc) */
        P.G[c.ch * GDP_CHUNK + t] = S.Gs[t];
    }
    {
        float aA[4][4], aP[4][4];
#pragma unroll
        for (int i = 0; i < 16; i++) aA[i >> 2][i & 3] = aP[i >> 2][i & 3] = 0.f;
        tile_gemm(aA, 64, 64, smat(S.R, ldk), smat(S.Kw, ldk, true), KP);
        tile_gemm(aP, Ctp, 64, smat(S.QV, ldk), smat(S.Kw, ldk, true), KP);
        if (r_in_a) __syncthreads(); /* R is read; A goes over it */
        tile_each(aA, 64, 64, [&](int i, int j, float v) {
            float a = 0.f;
            if (i < c.lc && j < c.lc && earlier(P, i, j)) a = S.br[i] * gate_exp(S.Gs[tokof(P, i)] - S.Gs[tokof(P, j)]) * v;
            S.Af[i * LDA + j] = a;
        });
        IT *Pg = (IT *)P.P + c.ch * P.sP;
        tile_each(aP, Ctp, 64, [&](int t, int s2, float v) {
            float val = 0.f;
            if (t < c.ct && s2 < c.lc && tokof(P, s2) <= t) val = P.scale * gate_exp(S.Gs[t] - S.Gs[tokof(P, s2)]) * v;
            Pg[t * 64 + s2] = fromf<IT>(val);
        });
    }
    __syncthreads();
    /* V into QV (q is no longer needed) while Kwd is written and T solved */
    cp_rows(S.QV, ldv, 64, VP, 0, P.V, P.vecv, [&](int r) { return r < c.lc ? vrow<IT>(P, c.tok0, c.h, r) : (const IT *)nullptr; });
    cp_commit();
    st_tile_f((IT *)P.Kwd + c.ch * P.sW, KP, S.Kw, ldk, 64, KP, [&](int r, int, IT v) { return fromf<IT>(S.rowf[r] * tof(v)); });
    IT *Tw = (IT *)S.Af, *Tu = Tw + 64 * LDT;
    IT *Tg = P.Tsave ? (IT *)P.Tsave + c.ch * (GDP_CHUNK * GDP_CHUNK) : nullptr;
    solve_T(S.Af, S.Tf, true, [&](int i, int j, float t0, float t1) {
        /* Af is dead once the merges are done (solve_T syncs before calling conv) */
        store2(Tw + i * LDT + j, t0 * S.bg[j], t1 * S.bg[j + 1]);
        store2(Tu + i * LDT + j, t0 * S.br[j], t1 * S.br[j + 1]);
        if (Tg) store2(Tg + i * 64 + j, t0, t1);
    }, [](int, int) {});
    IT *Wg = (IT *)P.W + c.ch * P.sW, *Ug = (IT *)P.U + c.ch * P.sU;
    IT *R3 = S.R;
    if (r_in_a) { /* Kwd is stored (solve_T synced): R again, in place of K_w */
        split_keys<IT>(P, c, S.Kw, ldk, S.Kw, ldk, 0, KP, false);
        __syncthreads();
        R3 = S.Kw;
    }
    gemm_pairs(64, KP, smat(Tw, LDT), smat(R3, ldk), 64, [&](int r, int cc, float v0, float v1) {
        store2(Wg + (int64_t)r * KP + cc, v0, v1);
    });
    cp_wait<0>();
    __syncthreads();
    gemm_pairs(64, VP, smat(Tu, LDT), smat(S.QV, ldv), 64, [&](int r, int cc, float v0, float v1) {
        store2(Ug + (int64_t)r * VP + cc, v0, v1);
    });
}

/* ---------------------------------------------------------------- 2c. prep, fast path */
/* k_prep2 for bf16 with K == KP in {64, 128}, V == VP a multiple of 64 and 16-byte aligned rows;
 * CTP = Ctp. The steps, products and roundings of k_prep2, with compile-time tiles: copies by
 * shifts, the A and P masks applied to the fragments, W and U stored from the fragments, Kwd by
 * 16-byte moves. Split mode's R (the mask-weighted keys) lives in T's fp32 tile until the solve
 * (R_IN_TF: K 64 and 128) and is made again in place of K_w after it, so that split mode fits three
 * CTAs an SM as householder mode does; at K 256 it keeps a buffer of its own, unless the keys stay
 * as loaded (RAW), which builds no R. */
template <int KP, int CTP> struct Prep2FastSmem {
    static constexpr int LDK = KP + 8;
    static constexpr size_t AFB = (size_t)2 * 64 * LDT * 2 > (size_t)64 * LDAF * 4 ? (size_t)2 * 64 * LDT * 2 : (size_t)64 * LDAF * 4;
    static constexpr size_t OFF_AF = 4 * 64 * 4; /* after Gs, br, rowf, bg [64] */
    static constexpr size_t OFF_TF = OFF_AF + AFB;       /* Af, then T diag(beta gamma) and T diag(beta) */
    static constexpr size_t OFF_KW = OFF_TF + (size_t)64 * LDAF * 4;
    static constexpr bool R_IN_TF = (size_t)64 * LDK * 2 <= (size_t)64 * LDAF * 4;
    static constexpr size_t bytes(bool split_r, int VP) { /* split_r: split mode building R (not RAW) */
        const size_t qv = (size_t)CTP * LDK > (size_t)64 * (VP + 8) ? (size_t)CTP * LDK : (size_t)64 * (VP + 8);
        return OFF_KW + (size_t)(split_r && !R_IN_TF ? 2 : 1) * 64 * LDK * 2 + qv * 2;
    }
};

/* RAW (split mode, launched where n is a power of two whose slices hold whole column quarters):
 * the keys stay as loaded, see keys_raw below. A template argument: the same code behind a runtime
 * flag made Householder mode's prep 3-7% slower (H200, H 16). */
template <int KP, int CTP, bool RAW> __global__ void __launch_bounds__(NTHREADS, 3) k_prep2_fast(Params P) {
    using SM = Prep2FastSmem<KP, CTP>;
    constexpr int LDK = SM::LDK;
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (!chunk_ctx<true>(P, c)) return;
    const bool hh = P.mode == GDP_MODE_HOUSEHOLDER;
    const int tid = threadIdx.x, warp = tid >> 5, ct = c.ct, lc = c.lc;
    const int ldv = P.VP + 8;
    /* W and U go out through a swizzled staging tile (T's dead fp32 tile, then K_w's) as 16-byte
     * row pieces: fragment stores of 4 bytes touch 8 rows a warp instruction, and the stores were a
     * large share of this kernel's L1 traffic (H200, H 16, n_h 2: 0.429 -> 0.394 ms). U's staging
     * needs K_w's tile to hold 64 x 128, so K 64 keeps the fragment stores. */
    constexpr bool stage = KP == 128;
    float *Gs = (float *)smem, *br = Gs + 64, *rowf = br + 64, *bg = rowf + 64;
    float *Af = (float *)(smem + SM::OFF_AF), *Tf = (float *)(smem + SM::OFF_TF);
    constexpr bool r_in_tf = SM::R_IN_TF;
    bf16_t *Kw = (bf16_t *)(smem + SM::OFF_KW), *QV = Kw + (hh || r_in_tf || RAW ? 1 : 2) * 64 * LDK;
    bf16_t *R = hh || RAW ? Kw : r_in_tf ? (bf16_t *)Tf : Kw + 64 * LDK; /* RAW reads no R */
    /* raw keys (split mode: every row of a token holds the token's key; made into R and K_w below) */
    const bf16_t *k0row = krow<bf16_t>(P, c.tok0, c.h, 0), *v0row = vrow<bf16_t>(P, c.tok0, c.h, 0);
    /* RAW's n (1, 2 or 4) is GDP_CHUNK / CTP (the launch checks it): a template constant, so the row
     * and token address math folds (in bwd_b's lanes kinds the same took every spill away and 2.5% off
     * k_bwd_ab) */
    constexpr int NRAW = GDP_CHUNK / CTP;
    auto row_step = [&](int r) { return RAW ? (int64_t)(r / NRAW) * P.H : chunk_row_step(P, r); };
    cp_rows_of<64, KP>(Kw, LDK, [&](int r) { return k0row + row_step(r) * KP; }, lc);
    cp_token_rows<CTP, KP>(QV, LDK, (const bf16_t *)P.q + ((int64_t)c.tok0 * P.H + c.h) * KP, (int64_t)P.H * KP, ct);
    cp_commit();
    load_gates<bf16_t>(P, c, Gs, br);
    cp_wait<0>();
    __syncthreads();
    /* Split mode with n a power of two whose slices hold whole column quarters (a warp's W columns):
     * the keys stay as loaded (every row of a token holds its whole key), and the products apply the
     * slices and M themselves: A and P as one product a slice b, added where column j's slice is b
     * (A with M[a_i, b]); Kwd masked as it is written; W with M[a_j, b] on T's columns. Neither R
     * nor K_w is built (split_keys twice, two barriers). */
    const int n = RAW ? NRAW : P.n, sw = KP / n;
    constexpr bool keys_raw = RAW;
    if (!hh && !keys_raw) {
        split_keys<bf16_t>(P, c, Kw, LDK, R, LDK, 0, KP, true);
        __syncthreads();
    }
    /* acc += A' B^T over the keys' columns for rows m0 of A' and n0 of B = K_w: as loaded, or (keys_raw)
     * slice by slice, column j taking slice b_j's part times rowm(b) */
    auto keys_product = [&](float(&acc)[2][4], const bf16_t *Aop, int m0, int n0, auto rowm) {
        if constexpr (!keys_raw) {
            warp_mma<2, false, true>(acc, Aop, LDK, Kw, LDK, KP, m0, n0);
        } else {
#pragma unroll 1
            for (int b = 0; b < n; b++) {
                float tmp[2][4];
                frag_zero(tmp);
                warp_mma<2, false, true>(tmp, Aop + b * sw, LDK, Kw + b * sw, LDK, sw, m0, n0);
                const int2 ab = pair_slices(n);
                const float f = rowm(b), f0 = ab.x == b ? f : 0.f, f1 = ab.y == b ? f : 0.f;
#pragma unroll
                for (int nt = 0; nt < 2; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[nt][e] += (e & 1 ? f1 : f0) * tmp[nt][e];
            }
        }
    };
    if (tid < 64) {
        const float G = Gs[RAW ? tid / NRAW : tokof(P, tid)];
        rowf[tid] = tid < lc ? gate_exp(Gs[ct - 1] - G) : 0.f;
        bg[tid] = br[tid] * gate_exp(G); /* beta gamma per row (0 past lc) */
        P.G[c.ch * GDP_CHUNK + tid] = Gs[tid];
    }
    /* A and P in 16 x 16 blocks dealt round-robin to the warps: A's ten blocks on or below the
     * diagonal (A is strictly lower, an earlier row or a row of an earlier token, and the solve reads
     * no others), then P's blocks that hold some row of a token at or before their tokens, then P's
     * others, stored as zeros (the state pass reads P whole). At most 2 products a warp at n_h 2 and
     * 4, 3 at n_h 1 and 3 (16 x 32 tiles of both, all computed, took 3 to 4). */
    {
        constexpr int NPB = CTP / 16 * 4; /* P's 16 x 16 blocks */
        auto p_live = [&](int pb) { return tokof(P, 16 * (pb & 3)) <= 16 * (pb >> 2) + 15; };
        int n_live = 0;
        for (int pb = 0; pb < NPB; pb++) n_live += p_live(pb);
        for (int bi = warp; bi < 10 + NPB; bi += NTHREADS / 32) {
            float acc[2][4];
            frag_zero(acc);
            if (bi < 10) {
                const int I = bi < 1 ? 0 : bi < 3 ? 1 : bi < 6 ? 2 : 3, J = bi - I * (I + 1) / 2; /* bi = I (I + 1) / 2 + J */
                /* a row tile's rows share their slice a_i = g mod n (n divides 16) */
                const float *Ma = P.mask + ((int64_t)c.h * n + (((tid & 31) >> 2) & (n - 1))) * n;
                keys_product(acc, keys_raw ? Kw : R, 16 * I, 16 * J, [&](int b) { return __ldg(Ma + b); });
                /* A_ij = beta_i e^{G_i - G_j} <R_i, K_w,j>, j earlier than i */
                frag_earlier_decay(P, acc, Gs, 16 * I, 16 * J, lc, [&](int i) { return br[i]; });
                {
                    const int lane = tid & 31, i0 = 16 * I + (lane >> 2), j0 = 16 * J + 2 * (lane & 3);
#pragma unroll
                    for (int nt = 0; nt < 2; nt++)
#pragma unroll
                        for (int rh = 0; rh < 2; rh++)
                            store2(Af + (i0 + 8 * rh) * LDAF + j0 + 8 * nt, acc[nt][2 * rh], acc[nt][2 * rh + 1]);
                }
                continue;
            }
            /* the k-th live block, or the k-th other one */
            const int k = bi - 10;
            const bool live = k < n_live;
            int pb = 0;
            for (int seen = 0;; pb++)
                if (p_live(pb) == live && seen++ == (live ? k : k - n_live)) break;
            const int mp = 16 * (pb >> 2), np = 16 * (pb & 3);
            if (live) {
                keys_product(acc, QV, mp, np, [](int) { return 1.f; });
                frag_causal_decay(P, acc, Gs, mp, np, ct, lc);
            }
            frag_store_bf16(acc, (bf16_t *)P.P + c.ch * P.sP, 64, mp, np);
        }
    }
    __syncthreads();
    /* V into QV (q is no longer needed) while Kwd is written and T solved */
    for (int v0 = 0; v0 < P.VP; v0 += GDP_TILE)
        cp_rows_of<64, GDP_TILE>(QV + v0, ldv, [&](int r) { return v0row + row_step(r) * P.VP + v0; }, lc);
    cp_commit();
    bf16_t *Tw = (bf16_t *)Af, *Tu = Tw + 64 * LDT, *Kwd = (bf16_t *)P.Kwd + c.ch * P.sW;
    bf16_t *Tg = P.Tsave ? (bf16_t *)P.Tsave + c.ch * (GDP_CHUNK * GDP_CHUNK) : nullptr;
    solve_T<LDAF, true>(
        Af, Tf, Tg != nullptr,
        [&](int i, int j, float t0, float t1) {
            /* Af is dead once the merges are done (solve_T syncs before calling conv). Only the
             * blocks on or below the diagonal are converted (W and U below read no others) unless
             * T is saved, which needs its zeros. */
            store2(Tw + i * LDT + j, t0 * bg[j], t1 * bg[j + 1]);
            store2(Tu + i * LDT + j, t0 * br[j], t1 * br[j + 1]);
            if (Tg) store2(Tg + i * 64 + j, t0, t1);
        },
        [&](int e0, int stride) { /* Kwd, by the threads that do not solve the diagonal blocks */
            for (int e = e0; e < 64 * (KP / 8); e += stride) {
                const int r = e / (KP / 8), x = (e % (KP / 8)) * 8;
                /* keys_raw: K_w(t,a) is k_t on slice a only */
                scale8(Kwd + r * KP + x, Kw + r * LDK + x, keys_raw && slice_of(P, x) != (r & (n - 1)) ? 0.f : rowf[r]);
            }
        });
    /* W = T diag(beta gamma) R and U = T diag(beta) V: T is lower triangular, so row tile mt needs
     * the first 16 (mt + 1) columns of T. Warp pairs take row tiles {0, 3} or {1, 2} (five 16-deep
     * steps each) and a quarter of the columns. */
    const int mta = warp & 1 ? 1 : 0, mtb = 3 - mta, nq = warp >> 1;
    bf16_t *Wg = (bf16_t *)P.W + c.ch * P.sW, *Ug = (bf16_t *)P.U + c.ch * P.sU;
    /* keys_raw: W = T diag(beta gamma) R takes the keys' rows as loaded (row (t, b) holds k_t) with
     * M[a_j, b] on T's columns j, the warp's columns lying in slice b */
    if (!hh && r_in_tf && !keys_raw) { /* R again, in place of K_w (Kwd is written: solve_T ends with a barrier) */
        split_keys<bf16_t>(P, c, Kw, LDK, Kw, LDK, 0, KP, false);
        __syncthreads();
        R = Kw;
    }
    {
        constexpr int NTW = KP / 32;
#pragma unroll
        for (int h2 = 0; h2 < 2; h2++) {
            const int mt = h2 ? mtb : mta;
            float aW[NTW][4];
            frag_zero(aW);
            if constexpr (keys_raw) {
                const int bsl = slice_of(P, nq * (KP / 4));
                warp_mma_rows<1, NTW, false>(
                    reinterpret_cast<float(&)[1][NTW][4]>(aW),
                    [&](int, int k0, uint32_t(&a)[4]) {
                        /* M read at each step: held across the product, prep<128> spilled 8 bytes */
                        ldsm_a<false>(a, RowMajor{Tw, LDT}, 16 * mt, k0);
                        const float2 m = mask_pair(P, c.h, bsl, n);
                        frag_a_scale_pairs(a, m.x, m.y);
                    },
                    TokenSliceRows{Kw, LDK, -n, bsl}, 16 * (mt + 1), nq * (KP / 4));
            } else {
                warp_mma<NTW, false, false>(aW, Tw, LDT, R, LDK, 16 * (mt + 1), 16 * mt, nq * (KP / 4));
            }
            if (stage)
                frag_stage_bf16(aW, (bf16_t *)Tf, 16 * mt, nq * (KP / 4)); /* T (fp32) is dead after solve_T */
            else
                frag_store_bf16(aW, Wg, KP, 16 * mt, nq * (KP / 4));
        }
    }
    cp_wait<0>();
    __syncthreads();
    if (stage) unstage_tile<KP>(Wg, KP, (const bf16_t *)Tf);
    for (int v0 = 0; v0 < P.VP; v0 += 128) { /* 128 columns a round, 32 a warp (VP is a multiple of 64) */
        const int n0 = v0 + nq * 32;
        if (stage && v0 > 0) __syncthreads(); /* the last round's staged U is read out */
        if (n0 < P.VP) {
#pragma unroll
            for (int h2 = 0; h2 < 2; h2++) {
                const int mt = h2 ? mtb : mta;
                float aU[4][4];
                frag_zero(aU);
                warp_mma<4, false, false>(aU, Tu, LDT, QV + n0, ldv, 16 * (mt + 1), 16 * mt, 0);
                if (stage)
                    frag_stage_bf16(aU, Kw, 16 * mt, nq * 32); /* K_w and R are dead after W */
                else
                    frag_store_bf16(aU, Ug + n0, P.VP, 16 * mt, 0);
            }
        }
        if (stage) {
            __syncthreads();
            if (P.VP - v0 >= 128)
                unstage_tile<128>(Ug + v0, P.VP, Kw);
            else
                unstage_tile<64>(Ug + v0, P.VP, Kw);
        }
    }
}

/* ---------------------------------------------------------------- host */
GdpStatus run_tables(const Launch &L, const Params &P) {
    k_tables<<<1, 32, 0, L.st>>>(P);
    GDP_CU(cudaGetLastError());
    k_chunks<<<(P.NCmax + 255) / 256, 256, 0, L.st>>>(P);
    GDP_CU(cudaGetLastError());
    return GDP_OK;
}

static void (*prep2_fast_kernel(int KP, int ctp, bool raw))(Params) {
#define GDP_PF(kp, r)                                                                                       \
    if (KP == kp && raw == r)                                                                               \
        return ctp == 16 ? k_prep2_fast<kp, 16, r> : ctp == 32 ? k_prep2_fast<kp, 32, r> : ctp == 64 ? k_prep2_fast<kp, 64, r> : nullptr;
    GDP_PF(256, false) GDP_PF(128, false) GDP_PF(64, false) GDP_PF(256, true) GDP_PF(128, true) GDP_PF(64, true)
#undef GDP_PF
    return nullptr;
}
#define GDP_PS(kp, c)                                                                                          \
    static_assert(Prep2FastSmem<kp, c>::bytes(false, 128) == gdp_smem_prep2_fast(kp, c, 0, 128) &&           \
                      Prep2FastSmem<kp, c>::bytes(true, 256) == gdp_smem_prep2_fast(kp, c, 1, 256),           \
                  "smem.h: prep2_fast");
GDP_PS(256, 16) GDP_PS(256, 32) GDP_PS(256, 64) GDP_PS(128, 16) GDP_PS(128, 32) GDP_PS(128, 64) GDP_PS(64, 16) GDP_PS(64, 32)
GDP_PS(64, 64)
#undef GDP_PS

template <typename IT> static GdpStatus run_prep_t(const Launch &L, const GdpStep &s, const Params &P) {
    const GdpLayout &l = *L.lay;
    GdpStatus r;
    switch (s.kernel) {
    case GDP_KERNEL_PREP2_FAST:
        return launch_step(L, s, prep2_fast_kernel(s.kp, s.ctp, s.variant != 0), P, true, false);
    case GDP_KERNEL_PREP2:
        r = check_smem(L, s, Prep2Smem<IT>::carve(nullptr, l.KP, l.VP, l.Ctp, P.mode == GDP_MODE_SPLIT, nullptr));
        return r != GDP_OK ? r : launch_step(L, s, k_prep2<IT>, P, true, false);
    case GDP_KERNEL_PREP:
        r = check_smem(L, s, PrepSmem<IT>::carve(nullptr, nullptr));
        return r != GDP_OK ? r : launch_step(L, s, k_prep<IT>, P, true, false);
    default:
        return gdp_fail(GDP_ERR_INTERNAL, "%s: %s is not a prep kernel", L.who, gdp_kernel_name(s.kernel));
    }
}
GdpStatus run_prep(const Launch &L, const GdpStep &s, const Params &P, bool bf16) {
    return bf16 ? run_prep_t<__nv_bfloat16>(L, s, P) : run_prep_t<float>(L, s, P);
}

} // namespace gdp
