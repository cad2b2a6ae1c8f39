/* Pass 7 and 8: the WY backward per chunk (dk, dv, dbeta, dg, the per-chunk mask gradient), and
 * the fixed-order sum of the mask gradients. */
#include "kernels/gdp/launch.cuh"
#include "kernels/gdp/bwd_b_fast.cuh"

namespace gdp {

/* ---------------------------------------------------------------- 7. bwd_b: WY backward */
/* T comes from the backward's prep (workspace T). Per chunk:
 *   dT = dW X_r^T + dDelta X_v^T (registers), dX_v = T^T dDelta -> dv, dbeta;
 *   dA = -T^T (mask o dT) T^T, D = dA o E, Dp = diag(beta) D;
 *   per K tile: E = gamma T^T dW + D Kw, dR = beta E, dKw = dKw_a + Dp^T R -> dk, dmask;
 *   dbeta += <E, R>, dG += beta <E, R> - <dKw, Kw>; then dg by a reverse scan. */
template <typename IT> struct BwdBSmem {
    float *Gs, *br, *dbr, *dGr, *dMs, *F0, *F1;
    IT *Top, *dTop, *Yop, *Dp, *b0, *b1, *b2;
    __host__ __device__ static size_t carve(char *base, int rr, BwdBSmem *s) {
        Carve cv(base);
        BwdBSmem t;
        t.Gs = cv.take<float>(64);
        t.br = cv.take<float>(64);
        t.dbr = cv.take<float>(64);
        t.dGr = cv.take<float>(64);
        t.dMs = cv.take<float>(rr > 0 ? rr : 1);
        t.F0 = cv.take<float>(64 * LDF);
        t.F1 = cv.take<float>(64 * LDF);
        t.Top = cv.take<IT>(64 * LDT);
        t.dTop = cv.take<IT>(64 * LDT);
        t.Yop = cv.take<IT>(64 * LDT);
        t.Dp = cv.take<IT>(64 * LDT);
        t.b0 = cv.take<IT>(64 * LDT);
        t.b1 = cv.take<IT>(64 * LDT);
        t.b2 = cv.take<IT>(64 * LDT);
        if (s) *s = t;
        return cv.off;
    }
};

template <typename IT> __global__ void __launch_bounds__(NTHREADS) k_bwd_b(Params P) {
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (!chunk_ctx(P, c)) return;
    const int n = P.n, tid = threadIdx.x, rr = P.mode == GDP_MODE_SPLIT ? n * n : 0;
    const bool hh = P.mode == GDP_MODE_HOUSEHOLDER;
    BwdBSmem<IT> S;
    BwdBSmem<IT>::carve(smem, rr, &S);
    cp_tile(S.Top, LDT, (const IT *)P.Tsave + c.ch * (GDP_CHUNK * GDP_CHUNK), 64, 64, 64);
    cp_commit();
    load_gates<IT>(P, c, S.Gs, S.br);
    for (int i = tid; i < 64; i += blockDim.x) {
        S.dbr[i] = 0.f;
        S.dGr[i] = 0.f;
    }
    for (int i = tid; i < rr; i += blockDim.x) S.dMs[i] = 0.f;
    __syncthreads();
    const IT *dWg = (const IT *)P.dW + c.ch * P.sW, *dDg = (const IT *)P.dD + c.ch * P.sD;
    float aT[4][4];
#pragma unroll
    for (int i = 0; i < 16; i++) aT[i >> 2][i & 3] = 0.f;
    /* dT = dW X_r^T + dDelta X_v^T; dX_v = T^T dDelta -> dv, dbeta part */
    for (int kt = 0; kt < P.nkt; kt++) {
        const int c0 = kt * GDP_TILE, wk = min(GDP_TILE, P.KP - c0);
        cp_tile(S.b0, LDT, dWg + c0, P.KP, 64, wk);
        cp_commit();
        load_r<IT>(P, c, S.b1, c0, wk, S.Gs, S.br, 1);
        cp_wait<0>();
        __syncthreads();
        tile_gemm(aT, 64, 64, smat(S.b0, LDT), smat(S.b1, LDT, true), wk);
        __syncthreads();
    }
    for (int vt = 0; vt < P.nvt; vt++) {
        const int v0 = vt * GDP_TILE, wv = min(GDP_TILE, P.VP - v0);
        cp_tile(S.b0, LDT, dDg + v0, P.VP, 64, wv);
        cp_commit();
        load_v<IT>(P, c, S.b2, v0, wv, S.br, 0);
        load_v<IT>(P, c, S.b1, v0, wv, S.br, 1);
        cp_wait<0>();
        __syncthreads();
        tile_gemm(aT, 64, 64, smat(S.b0, LDT), smat(S.b1, LDT, true), wv);
        gemm(64, wv, smat(S.Top, LDT, true), smat(S.b0, LDT), 64, Zero(), [&](int r, int cc, float v) { S.F1[r * LDF + cc] = v; });
        __syncthreads();
        row_reduce(c.lc, wv, [&](int i, int x) { return S.F1[i * LDF + x] * tof(S.b2[i * LDT + x]); },
                   [&](int i, float v) { S.dbr[i] += v; });
        if (hh) {
            for (int e = tid; e < 64 * wv; e += blockDim.x) {
                const int i = e / wv, x = e - i * wv;
                S.F0[i * LDF + x] = S.br[i] * S.F1[i * LDF + x];
            }
        } else {
            for (int e = tid; e < c.ct * wv; e += blockDim.x) {
                const int t = e / wv, x = e - t * wv;
                float acc = 0.f;
                for (int a = 0; a < n; a++) acc += S.br[t * n + a] * S.F1[(t * n + a) * LDF + x];
                S.F0[t * LDF + x] = acc;
            }
        }
        __syncthreads();
        if (hh)
            store_rows<IT>(S.F0, LDF, c.lc, wv, v0, P.V, P.vecv, [&](int i) {
                return (IT *)P.dv + (((int64_t)c.tok0 * n + i) * P.H + c.h) * P.V;
            });
        else
            store_rows<IT>(S.F0, LDF, c.ct, wv, v0, P.V, P.vecv,
                           [&](int t) { return (IT *)P.dv + ((int64_t)(c.tok0 + t) * P.H + c.h) * P.V; });
        __syncthreads();
    }
    /* dA = -T^T (mask o dT) T^T; D = dA o E (earlier only), Dp = diag(beta) D */
    tile_each(aT, 64, 64, [&](int i, int j, float v) {
        const bool on = i < c.lc && j < c.lc && earlier(P, i, j);
        S.dTop[i * LDT + j] = fromf<IT>(on ? v : 0.f);
    });
    __syncthreads();
    gemm(64, 64, smat(S.dTop, LDT), smat(S.Top, LDT, true), 64, Zero(),
         [&](int r, int cc, float v) { S.Yop[r * LDT + cc] = fromf<IT>(v); });
    __syncthreads();
    IT *Dop = S.dTop;
    gemm(64, 64, smat(S.Top, LDT, true), smat(S.Yop, LDT), 64, Zero(), [&](int i, int j, float v) {
        float d = 0.f;
        if (i < c.lc && j < c.lc && earlier(P, i, j)) d = -v * gate_exp(S.Gs[tokof(P, i)] - S.Gs[tokof(P, j)]);
        Dop[i * LDT + j] = fromf<IT>(d);
        S.Dp[i * LDT + j] = fromf<IT>(S.br[i] * d);
    });
    __syncthreads();
    const int wsl = P.K / n;
    const IT *dKwg = (const IT *)P.dKw + c.ch * P.sW;
    IT *Rb = hh ? S.b0 : S.b1;
    IT *stage = S.Yop; /* dk rows, staged in the operand type */
    for (int kt = 0; kt < P.nkt; kt++) {
        const int c0 = kt * GDP_TILE, wk = min(GDP_TILE, P.KP - c0);
        cp_tile(S.b2, LDT, dWg + c0, P.KP, 64, wk);
        cp_commit();
        fill(S.F0, LDF, 64, wk, [&](int r, int x) { return tof(dKwg[(int64_t)r * P.KP + c0 + x]); });
        load_kw<IT>(P, c, S.b0, c0, wk);
        if (!hh) load_r<IT>(P, c, S.b1, c0, wk, S.Gs, S.br, 0);
        cp_wait<0>();
        __syncthreads();
        gemm(64, wk, smat(S.Top, LDT, true), smat(S.b2, LDT), 64, Zero(), [&](int r, int cc, float v) { S.F1[r * LDF + cc] = v; });
        row_reduce(c.lc, wk, [&](int i, int x) { return S.F0[i * LDF + x] * tof(S.b0[i * LDT + x]); },
                   [&](int i, float v) { S.dGr[i] += v; }); /* minus the change below: -<Dp^T R, Kw> */
        __syncthreads();
        /* F1 = E = gamma dX_r + D Kw */
        gemm(64, wk, smat(Dop, LDT), smat(S.b0, LDT), 64,
             [&](int r, int cc) { return r < c.lc ? gate_exp(S.Gs[tokof(P, r)]) * S.F1[r * LDF + cc] : 0.f; },
             [&](int r, int cc, float v) { S.F1[r * LDF + cc] = v; });
        /* F0 = dKw = dKw_a + Dp^T R */
        gemm(64, wk, smat(S.Dp, LDT, true), smat(Rb, LDT), 64, [&](int r, int cc) { return S.F0[r * LDF + cc]; },
             [&](int r, int cc, float v) { S.F0[r * LDF + cc] = v; });
        __syncthreads();
        row_reduce(c.lc, wk, [&](int i, int x) { return S.F1[i * LDF + x] * tof(Rb[i * LDT + x]); },
                   [&](int i, float v) {
                       S.dbr[i] += v;
                       S.dGr[i] += S.br[i] * v;
                   });
        row_reduce(c.lc, wk, [&](int i, int x) { return S.F0[i * LDF + x] * tof(S.b0[i * LDT + x]); },
                   [&](int i, float v) { S.dGr[i] -= v; });
        if (hh) {
            for (int e = tid; e < 64 * wk; e += blockDim.x) {
                const int i = e / wk, x = e - i * wk;
                stage[i * LDT + x] = fromf<IT>(S.br[i] * S.F1[i * LDF + x] + S.F0[i * LDF + x]);
            }
        } else {
            for (int e = tid; e < c.ct * wk; e += blockDim.x) {
                const int t = e / wk, x = e - t * wk;
                float acc = 0.f;
                if (c0 + x < P.K) {
                    const int b = (c0 + x) / wsl;
                    acc = S.F0[(t * n + b) * LDF + x];
                    for (int a = 0; a < n; a++)
                        acc += P.mask[((int64_t)c.h * n + a) * n + b] * S.br[t * n + a] * S.F1[(t * n + a) * LDF + x];
                }
                stage[t * LDT + x] = fromf<IT>(acc);
            }
            /* dM[a,b] += sum_t sum_{x in slice b} dR_(t,a)[x] k_t[x]  (k_t[x] = Kw_(t,b)[x], dR = beta E) */
            const int warp = tid >> 5, lane = tid & 31;
            for (int pr = warp; pr < rr; pr += NTHREADS / 32) {
                const int a = pr / n, b = pr % n;
                const int xlo = max(b * wsl, c0) - c0, xhi = min((b + 1) * wsl, min(c0 + wk, P.K)) - c0;
                float s = 0.f;
                if (xhi > xlo) {
                    const int wx = xhi - xlo;
                    for (int e = lane; e < c.ct * wx; e += 32) {
                        const int t = e / wx, x = xlo + e - t * wx;
                        s += S.br[t * n + a] * S.F1[(t * n + a) * LDF + x] * tof(S.b0[(t * n + b) * LDT + x]);
                    }
                }
                s = warp_sum(s);
                if (lane == 0) S.dMs[pr] += s;
            }
        }
        __syncthreads();
        if (hh)
            store_rows<IT>(stage, LDT, c.lc, wk, c0, P.K, P.veck, [&](int i) {
                return (IT *)P.dk + (((int64_t)c.tok0 * n + i) * P.H + c.h) * P.K;
            });
        else
            store_rows<IT>(stage, LDT, c.ct, wk, c0, P.K, P.veck,
                           [&](int t) { return (IT *)P.dk + ((int64_t)(c.tok0 + t) * P.H + c.h) * P.K; });
        __syncthreads();
    }
    /* gate parts from bwd_a, dbeta, dg (reverse cumsum over the chunk's tokens), dM */
    const float *dga = P.dGa + c.ch * (int64_t)P.nkt * GDP_CHUNK;
    for (int i = tid; i < 64; i += blockDim.x) {
        float s = S.dGr[i];
        for (int kt = 0; kt < P.nkt; kt++) s += dga[kt * GDP_CHUNK + i];
        S.dGr[i] = s;
    }
    IT *dbeta = (IT *)P.dbeta;
    if (hh) {
        for (int i = tid; i < c.lc; i += blockDim.x) dbeta[((int64_t)c.tok0 * n + i) * P.H + c.h] = from_f32<IT>(S.dbr[i]);
    } else {
        for (int t = tid; t < c.ct; t += blockDim.x) {
            float acc = 0.f;
            for (int a = 0; a < n; a++) acc += S.dbr[t * n + a];
            dbeta[(int64_t)(c.tok0 + t) * P.H + c.h] = from_f32<IT>(acc);
        }
        for (int i = tid; i < rr; i += blockDim.x) P.dM[c.ch * rr + i] = S.dMs[i];
    }
    __syncthreads();
    if (tid < 32 && P.dg) dg_scan(P, c, S.dGr);
}

/* ---------------------------------------------------------------- 7b. bwd_b, fast path */
/* Same math as k_bwd_b for householder mode (R = K_w = k) and, with SPLIT, for split mode with
 * n*n <= GDP_SPLIT_FAST_RR: every tile arrives raw by cp.async, double-buffered over the whole
 * kernel (stages: dW|k per K tile, dDelta|v per V tile, dW|k|dKw per K tile), and the beta, gamma
 * scalings move into the epilogues: dT = (dW R^T) diag(beta gamma) + (dDelta v^T) diag(beta).
 * Split mode makes R (and K_w) from the raw key tile in shared memory (split_keys): R in place of
 * the raw tile in the first K pass; K_w in place and R into Yop (free by then) in the last. */
template <typename IT> struct BwdBhSmem {
    float *Gs, *br, *gam, *dbr, *dGr, *part, *dMs, *F1;
    IT *A[2], *B[2], *C[2], *Top, *dTop, *Yop, *Dp;
    __host__ __device__ static size_t carve(char *base, int rr, BwdBhSmem *s) {
        Carve cv(base);
        BwdBhSmem t;
        t.Gs = cv.take<float>(64);
        t.br = cv.take<float>(64);
        t.gam = cv.take<float>(64);
        t.dbr = cv.take<float>(64);
        t.dGr = cv.take<float>(64);
        t.part = cv.take<float>(128);
        t.dMs = cv.take<float>(rr > 0 ? rr : 1);
        t.F1 = cv.take<float>(64 * LDF);
        for (int i = 0; i < 2; i++) {
            t.A[i] = cv.take<IT>(64 * LDT);
            t.B[i] = cv.take<IT>(64 * LDT);
            t.C[i] = cv.take<IT>(64 * LDT);
        }
        t.Top = cv.take<IT>(64 * LDT);
        t.dTop = cv.take<IT>(64 * LDT);
        t.Yop = cv.take<IT>(64 * LDT);
        t.Dp = cv.take<IT>(64 * LDT);
        if (s) *s = t;
        return cv.off;
    }
};

template <typename IT, bool SPLIT> __global__ void __launch_bounds__(NTHREADS, 2) k_bwd_b_hh(Params P) {
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (!chunk_ctx(P, c)) return;
    const int n = P.n, tid = threadIdx.x, nkt = P.nkt, nvt = P.nvt, NS = 2 * nkt + nvt, rr = SPLIT ? n * n : 0;
    BwdBhSmem<IT> S;
    BwdBhSmem<IT>::carve(smem, rr, &S);
    const IT *dWg = (const IT *)P.dW + c.ch * P.sW, *dDg = (const IT *)P.dD + c.ch * P.sD;
    const IT *dKwg = (const IT *)P.dKw + c.ch * P.sW;
    const float *Mh = SPLIT ? P.mask + (int64_t)c.h * rr : nullptr;
    auto krowp = [&](int r) { return r < c.lc ? krow<IT>(P, c.tok0, c.h, r) : (const IT *)nullptr; };
    auto vrowp = [&](int r) { return r < c.lc ? vrow<IT>(P, c.tok0, c.h, r) : (const IT *)nullptr; };
    /* row j earlier than row i (split: an earlier token) */
    auto before = [&](int i, int j) { return SPLIT ? tokof(P, j) < tokof(P, i) : j < i; };
    auto issue = [&](int st, int b) {
        IT *A = b ? S.A[1] : S.A[0], *B = b ? S.B[1] : S.B[0], *C = b ? S.C[1] : S.C[0];
        if (st < nkt) {
            const int c0 = st * GDP_TILE, wk = min(GDP_TILE, P.KP - c0);
            cp_tile(A, LDT, dWg + c0, P.KP, 64, wk);
            cp_rows(B, LDT, 64, wk, c0, P.K, P.veck, krowp);
        } else if (st < nkt + nvt) {
            const int v0 = (st - nkt) * GDP_TILE, wv = min(GDP_TILE, P.VP - v0);
            cp_tile(A, LDT, dDg + v0, P.VP, 64, wv);
            cp_rows(B, LDT, 64, wv, v0, P.V, P.vecv, vrowp);
        } else {
            const int c0 = (st - nkt - nvt) * GDP_TILE, wk = min(GDP_TILE, P.KP - c0);
            cp_tile(A, LDT, dWg + c0, P.KP, 64, wk);
            cp_rows(B, LDT, 64, wk, c0, P.K, P.veck, krowp);
            cp_tile(C, LDT, dKwg + c0, P.KP, 64, wk);
        }
        cp_commit();
    };
    cp_tile(S.Top, LDT, (const IT *)P.Tsave + c.ch * (GDP_CHUNK * GDP_CHUNK), 64, 64, 64);
    issue(0, 0);
    load_gates<IT>(P, c, S.Gs, S.br);
    for (int i = tid; i < 64; i += blockDim.x) {
        S.dbr[i] = 0.f;
        S.dGr[i] = 0.f;
    }
    if (SPLIT)
        for (int i = tid; i < rr; i += blockDim.x) S.dMs[i] = 0.f;
    float aT1[4][4], aT2[4][4];
#pragma unroll
    for (int i = 0; i < 16; i++) aT1[i >> 2][i & 3] = aT2[i >> 2][i & 3] = 0.f;
    IT *Dop = S.dTop;
    bool gam_ready = false;
    for (int st = 0; st < NS; st++) {
        const int b = st & 1;
        issue_next_wait_this(st + 1 < NS, [&] { issue(st + 1, b ^ 1); });
        __syncthreads();
        if (!gam_ready) { /* Gs is complete after the first barrier */
            for (int i = tid; i < 64; i += blockDim.x) S.gam[i] = i < c.lc ? gate_exp(S.Gs[tokof(P, i)]) : 0.f;
            gam_ready = true;
        }
        IT *A = b ? S.A[1] : S.A[0], *B = b ? S.B[1] : S.B[0], *C = b ? S.C[1] : S.C[0];
        if (st < nkt) {
            const int c0 = st * GDP_TILE, wk = min(GDP_TILE, P.KP - c0);
            if (SPLIT) { /* R in place of the raw keys */
                split_keys<IT>(P, c, B, LDT, B, LDT, c0, wk, false);
                __syncthreads();
            }
            tile_gemm(aT1, 64, 64, smat(A, LDT), smat(B, LDT, true), wk);
        } else if (st < nkt + nvt) {
            const int v0 = (st - nkt) * GDP_TILE, wv = min(GDP_TILE, P.VP - v0);
            tile_gemm(aT2, 64, 64, smat(A, LDT), smat(B, LDT, true), wv);
            gemm(64, wv, smat(S.Top, LDT, true), smat(A, LDT), 64, Zero(), [&](int r, int cc, float v) { S.F1[r * LDF + cc] = v; });
            __syncthreads();
            row_reduce(c.lc, wv, [&](int i, int x) { return S.F1[i * LDF + x] * tof(B[i * LDT + x]); },
                       [&](int i, float v) { S.dbr[i] += v; });
            if (SPLIT) { /* dv_t = sum_a beta_(t,a) dX_v(t,a) */
                for (int e = tid; e < c.ct * (wv >> 1); e += blockDim.x) {
                    const int t = e / (wv >> 1), x = (e - t * (wv >> 1)) * 2;
                    float s0 = 0.f, s1 = 0.f;
                    for (int a = 0; a < n; a++) {
                        const float bt = S.br[t * n + a];
                        s0 += bt * S.F1[(t * n + a) * LDF + x];
                        s1 += bt * S.F1[(t * n + a) * LDF + x + 1];
                    }
                    store2(C + t * LDT + x, s0, s1);
                }
            } else {
                for_chunks8(64, wv, [&](int i, int x) {
                    float f[8];
                    ld8(f, S.F1 + i * LDF + x);
                    const float bi = S.br[i];
#pragma unroll
                    for (int j = 0; j < 8; j++) f[j] *= bi;
                    st8(C + i * LDT + x, f);
                });
            }
            __syncthreads();
            if (SPLIT)
                store_rows<IT>(C, LDT, c.ct, wv, v0, P.V, P.vecv,
                               [&](int t) { return (IT *)P.dv + ((int64_t)(c.tok0 + t) * P.H + c.h) * P.V; });
            else
                store_rows<IT>(C, LDT, c.lc, wv, v0, P.V, P.vecv,
                               [&](int i) { return (IT *)P.dv + (((int64_t)c.tok0 * n + i) * P.H + c.h) * P.V; });
            if (st == nkt + nvt - 1) {
                /* dT (masked to the earlier entries), dA = -T^T dT T^T, D = dA o E, Dp = diag(beta) D */
                tile_each(aT1, 64, 64, [&](int i, int j, float v) {
                    float d = 0.f;
                    if (i < c.lc && j < c.lc && before(i, j)) d = v * S.br[j] * S.gam[j];
                    S.dTop[i * LDT + j] = fromf<IT>(d);
                });
                __syncthreads();
                tile_each(aT2, 64, 64, [&](int i, int j, float v) {
                    if (i < c.lc && j < c.lc && before(i, j))
                        S.dTop[i * LDT + j] = fromf<IT>(tof(S.dTop[i * LDT + j]) + v * S.br[j]);
                });
                __syncthreads();
                gemm(64, 64, smat(S.dTop, LDT), smat(S.Top, LDT, true), 64, Zero(),
                     [&](int r, int cc, float v) { S.Yop[r * LDT + cc] = fromf<IT>(v); });
                __syncthreads();
                gemm(64, 64, smat(S.Top, LDT, true), smat(S.Yop, LDT), 64, Zero(), [&](int i, int j, float v) {
                    float d = 0.f;
                    if (i < c.lc && j < c.lc && before(i, j)) d = -v * gate_exp(S.Gs[tokof(P, i)] - S.Gs[tokof(P, j)]);
                    Dop[i * LDT + j] = fromf<IT>(d);
                    S.Dp[i * LDT + j] = fromf<IT>(S.br[i] * d);
                });
            }
        } else {
            const int c0 = (st - nkt - nvt) * GDP_TILE, wk = min(GDP_TILE, P.KP - c0);
            IT *Rt = B; /* read keys; B holds the write keys */
            if (SPLIT) { /* Yop is free after the dA products (synced at the end of the last stage) */
                split_keys<IT>(P, c, B, LDT, S.Yop, LDT, c0, wk, true);
                Rt = S.Yop;
            }
            gemm(64, wk, smat(S.Top, LDT, true), smat(A, LDT), 64, Zero(), [&](int r, int cc, float v) { S.F1[r * LDF + cc] = v; });
            __syncthreads();
            /* F1 = E = gamma dX_r + D Kw; C = dKw = dKw_a + Dp^T R */
            gemm(64, wk, smat(Dop, LDT), smat(B, LDT), 64, [&](int r, int cc) { return S.gam[r] * S.F1[r * LDF + cc]; },
                 [&](int r, int cc, float v) { S.F1[r * LDF + cc] = v; });
            gemm_rowdot(64, wk, smat(S.Dp, LDT, true), smat(Rt, LDT), 64, [&](int r, int cc) { return tof(C[r * LDT + cc]); },
                        [&](int r, int cc, float v) { C[r * LDT + cc] = fromf<IT>(v); },
                        [&](int r, int cc) { return tof(B[r * LDT + cc]); }, S.part);
            __syncthreads();
            row_reduce(c.lc, wk, [&](int i, int x) { return S.F1[i * LDF + x] * tof(Rt[i * LDT + x]); },
                       [&](int i, float v) {
                           const int tn = wk / 32;
                           float y2 = 0.f;
                           for (int j = 0; j < tn; j++) y2 += S.part[i * tn + j];
                           S.dbr[i] += v;
                           S.dGr[i] += S.br[i] * v - y2;
                       });
            if (SPLIT) {
                /* dk_t[x] = dKw_(t,b)[x] + sum_a M[a,b] beta_(t,a) E_(t,a)[x], b = slice of x */
                for (int e = tid; e < c.ct * wk; e += blockDim.x) {
                    const int t = e / wk, x = e - t * wk;
                    float acc = 0.f;
                    if (c0 + x < P.K) {
                        const int bs = slice_of(P, c0 + x);
                        acc = tof(C[(t * n + bs) * LDT + x]);
                        for (int a = 0; a < n; a++) acc += __ldg(Mh + a * n + bs) * S.br[t * n + a] * S.F1[(t * n + a) * LDF + x];
                    }
                    A[t * LDT + x] = fromf<IT>(acc);
                }
                /* dM[a,b] += sum_t sum_{x in slice b} beta_(t,a) E_(t,a)[x] k_t[x] (k_t[x] = Kw_(t,b)[x]) */
                const int warp = tid >> 5, lane = tid & 31, wsl = P.K / n;
                for (int pr = warp; pr < rr; pr += NTHREADS / 32) {
                    const int a = pr / n, bs = pr - a * n;
                    const int xlo = max(bs * wsl, c0) - c0, xhi = min((bs + 1) * wsl, min(c0 + wk, P.K)) - c0;
                    if (xhi <= xlo) continue;
                    float s = 0.f;
                    for (int t = 0; t < c.ct; t++) {
                        float u = 0.f;
                        for (int x = xlo + lane; x < xhi; x += 32) u += S.F1[(t * n + a) * LDF + x] * tof(B[(t * n + bs) * LDT + x]);
                        s += S.br[t * n + a] * u;
                    }
                    s = warp_sum(s);
                    if (lane == 0) S.dMs[pr] += s;
                }
            } else {
                for_chunks8(64, wk, [&](int i, int x) {
                    float f[8], cv[8];
                    ld8(f, S.F1 + i * LDF + x);
                    ld8(cv, C + i * LDT + x);
                    const float bi = S.br[i];
#pragma unroll
                    for (int j = 0; j < 8; j++) f[j] = bi * f[j] + cv[j];
                    st8(A + i * LDT + x, f);
                });
            }
            __syncthreads();
            if (SPLIT)
                store_rows<IT>(A, LDT, c.ct, wk, c0, P.K, P.veck,
                               [&](int t) { return (IT *)P.dk + ((int64_t)(c.tok0 + t) * P.H + c.h) * P.K; });
            else
                store_rows<IT>(A, LDT, c.lc, wk, c0, P.K, P.veck,
                               [&](int i) { return (IT *)P.dk + (((int64_t)c.tok0 * n + i) * P.H + c.h) * P.K; });
        }
        __syncthreads();
    }
    /* gate parts from bwd_a, dbeta, dg (reverse scan over the chunk's tokens), dM */
    const float *dga = P.dGa + c.ch * (int64_t)P.nkt * GDP_CHUNK;
    for (int i = tid; i < 64; i += blockDim.x) {
        float sum = S.dGr[i];
        for (int kt = 0; kt < P.nkt; kt++) sum += dga[kt * GDP_CHUNK + i];
        S.dGr[i] = sum;
    }
    IT *dbeta = (IT *)P.dbeta;
    if (SPLIT) {
        for (int t = tid; t < c.ct; t += blockDim.x) {
            float acc = 0.f;
            for (int a = 0; a < n; a++) acc += S.dbr[t * n + a];
            dbeta[(int64_t)(c.tok0 + t) * P.H + c.h] = fromf<IT>(acc);
        }
        for (int i = tid; i < rr; i += blockDim.x) P.dM[c.ch * rr + i] = S.dMs[i];
    } else {
        for (int i = tid; i < c.lc; i += blockDim.x) dbeta[((int64_t)c.tok0 * n + i) * P.H + c.h] = fromf<IT>(S.dbr[i]);
    }
    __syncthreads();
    if (tid < 32 && P.dg) dg_scan(P, c, S.dGr);
}

template <int KIND> __global__ void __launch_bounds__(NTHREADS, 2) k_bwd_b_fast(Params P) {
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (chunk_ctx<true>(P, c)) bwd_b_fast_chunk<KIND>(P, c, smem);
}

/* ---------------------------------------------------------------- 8. dmask */
__global__ void k_dmask(Params P) {
    const int h = blockIdx.x, rr = P.n * P.n, total = P.seq[P.N].c0;
    for (int e = threadIdx.x; e < rr; e += blockDim.x) {
        float acc = 0.f;
        for (int ci = 0; ci < total; ci++) acc += P.dM[((int64_t)ci * P.H + h) * rr + e];
        P.dmask[(int64_t)h * rr + e] = acc;
    }
}

/* ---------------------------------------------------------------- host */
static_assert(BwdBFastSmem::BYTES == gdp_smem_bwd_b_fast(), "smem.h: bwd_b_fast");
static void (*bwd_b_fast_kernel(int kind))(Params) {
    return kind == GDP_BWDB_HOUSEHOLDER ? k_bwd_b_fast<GDP_BWDB_HOUSEHOLDER>
         : kind == GDP_BWDB_SPLIT_LANES + 2 ? k_bwd_b_fast<GDP_BWDB_SPLIT_LANES + 2>
         : kind == GDP_BWDB_SPLIT_LANES + 4 ? k_bwd_b_fast<GDP_BWDB_SPLIT_LANES + 4>
         : kind == GDP_BWDB_SPLIT_TILES ? k_bwd_b_fast<GDP_BWDB_SPLIT_TILES> : nullptr;
}

template <typename IT> static GdpStatus run_bwd_b_t(const Launch &L, const GdpStep &s, const Params &P) {
    const int rr = P.mode == GDP_MODE_SPLIT ? P.n * P.n : 0;
    GdpStatus r;
    switch (s.kernel) {
    case GDP_KERNEL_BWD_B_FAST:
        return launch_step(L, s, bwd_b_fast_kernel(s.variant), P, true, false);
    case GDP_KERNEL_BWD_B_HH:
        r = check_smem(L, s, BwdBhSmem<IT>::carve(nullptr, rr, nullptr));
        if (r != GDP_OK) return r;
        return s.variant ? launch_step(L, s, k_bwd_b_hh<IT, true>, P, true, false) : launch_step(L, s, k_bwd_b_hh<IT, false>, P, true, false);
    case GDP_KERNEL_BWD_B:
        r = check_smem(L, s, BwdBSmem<IT>::carve(nullptr, rr, nullptr));
        return r != GDP_OK ? r : launch_step(L, s, k_bwd_b<IT>, P, true, false);
    default:
        return gdp_fail(GDP_ERR_INTERNAL, "%s: %s is not a bwd_b kernel", L.who, gdp_kernel_name(s.kernel));
    }
}
GdpStatus run_bwd_b(const Launch &L, const GdpStep &s, const Params &P, bool bf16) {
    return bf16 ? run_bwd_b_t<__nv_bfloat16>(L, s, P) : run_bwd_b_t<float>(L, s, P);
}

GdpStatus run_dmask(const Launch &L, const Params &P) {
    k_dmask<<<P.H, 256, 0, L.st>>>(P);
    GDP_CU(cudaGetLastError());
    return GDP_OK;
}

} // namespace gdp
