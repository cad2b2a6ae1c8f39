/* The fast WY backward of one chunk: run by k_bwd_b_fast and by k_bwd_ab. */
#pragma once
#include "kernels/gdp/bwd_frag.cuh"
#include "kernels/gdp/plan.h" /* the kinds GDP_BWDB_* */

namespace gdp {

constexpr int GDP_SPLIT_FAST_N = 8; /* n * n <= GDP_SPLIT_FAST_RR (smem.h), so n <= N */
static_assert(GDP_SPLIT_FAST_N * GDP_SPLIT_FAST_N == GDP_SPLIT_FAST_RR, "the largest n of the split fast paths");
/* ---------------------------------------------------------------- 7c. bwd_b, fast path */
/* k_bwd_b_hh for bf16 with K and V multiples of 64 (K == KP, V == VP) and 16-byte aligned rows:
 * 64 x 64 tiles at compile time; every product's fragment stays in registers through its epilogue
 * (in householder mode dX_v, E and dK_w do not pass through fp32 shared tiles), and each thread
 * sums its share of the dbeta and dG row dots over all stages. Rounding differs from k_bwd_b_hh only
 * where that kernel rounds an intermediate to bf16 (dT in two steps; householder dK_w before dk);
 * here they stay fp32. Stages as there: dW|k per K tile, dDelta|v per V tile, dW|k|dK_w per K tile,
 * the next stage's tiles in flight while one is computed.
 * Split mode, tiles kind (n*n <= GDP_SPLIT_FAST_RR): R and K_w come from the raw key tile
 * (split_keys; R in place in the first K pass, into dT's buffer in the last), and the sums over a
 * token's rows (dv, dk, dM) read fp32 tiles: dX_v over Y|D (free until the last V tile's dA), E over
 * the stage's dW tile and the output staging, 32 columns each. Lanes kinds (n 2 and 4): those sums
 * by shuffles, and where each key tile lies in one slice no R or K_w tile at all (raw_keys below). */
struct BwdBFastSmem {
    static constexpr int TILE = 64 * LDT;
    /* Gs, br, gam, dGr [64]; pdb, pdg [64][2]; dM [GDP_SPLIT_FAST_RR]; split dM per (warp, a, 8-column
     * group) [NTHREADS / 32][GDP_SPLIT_FAST_N][8] */
    static constexpr int NSCAL = 4 * 64 + 2 * 128 + GDP_SPLIT_FAST_RR + NTHREADS / 32 * GDP_SPLIT_FAST_N * 8;
    /* A, B, C of two stages; T, dT, Y, D, diag(beta) D, the output staging */
    static constexpr size_t BYTES = NSCAL * 4 + (size_t)12 * TILE * 2;
};
static_assert(64 * LDF * 4 <= 2 * BwdBFastSmem::TILE * 2, "dX_v (fp32) fits over Y and D");
static_assert(64 * 36 * 4 <= BwdBFastSmem::TILE * 2, "half of E (fp32) fits in one tile");

/* k_bwd_b_fast's kinds: Householder mode; split mode summing a token's rows (dv, dk, dM) through fp32
 * tiles in shared memory (any n); split mode with n = 2 or 4 (GDP_BWDB_SPLIT_LANES + n) summing them
 * across the lanes that hold them: the n rows of a token lie in one 8-row half of a 16-row fragment,
 * in the lanes whose bits 2 .. 1 + log2 n differ. n is a template argument there: the form
 * with a runtime log2 n (loops in every element, versioned by the compiler) doubled the kernel's
 * code and was 16% slower than the tiles. */
static_assert(GDP_SPLIT_FAST_N <= 8, "split dM per (warp, a, b) fits where it is per (warp, a, 8-column group)");

template <int KIND> __device__ __forceinline__ void bwd_b_fast_chunk(const Params &P, const ChunkCtx &c, char *smem) {
    using SM = BwdBFastSmem;
    constexpr bool SPLIT = KIND != GDP_BWDB_HOUSEHOLDER, LANES = KIND > GDP_BWDB_SPLIT_LANES;
    constexpr int NL = LANES ? KIND - GDP_BWDB_SPLIT_LANES : 1, LN = NL == 4 ? 2 : NL == 2 ? 1 : 0; /* lanes: n, log2 n */
    static_assert(!LANES || NL == 2 || NL == 4, "the lanes kinds are n 2 and 4");
    constexpr int LDH = 36; /* 32-column fp32 halves of E (split mode) */
    /* n is compile-time in the lanes kinds: the row and token address math folds */
    const int nkt = P.nkt, nvt = P.nvt, NS = 2 * nkt + nvt, lc = c.lc, ct = c.ct, n = LANES ? NL : P.n, tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3, rr = SPLIT ? n * n : 0;
    float *Gs = (float *)smem, *br = Gs + 64, *gam = br + 64, *dGr = gam + 64, *pdb = dGr + 64, *pdg = pdb + 128;
    float *dMs = pdg + 128, *dMp = dMs + GDP_SPLIT_FAST_RR;
    bf16_t *buf = (bf16_t *)(smem + SM::NSCAL * 4);
    auto Ab = [&](int b) { return buf + (3 * b) * SM::TILE; };
    auto Bb = [&](int b) { return buf + (3 * b + 1) * SM::TILE; };
    auto Cb = [&](int b) { return buf + (3 * b + 2) * SM::TILE; };
    bf16_t *Top = buf + 6 * SM::TILE, *dTop = Top + SM::TILE, *Yop = dTop + SM::TILE, *Dop = Yop + SM::TILE;
    bf16_t *Dp = Dop + SM::TILE, *Ost = Dp + SM::TILE;
    float *Fv = (float *)Yop; /* split: dX_v of a V tile, fp32 [64][LDF] */
    const bf16_t *dWg = (const bf16_t *)P.dW + c.ch * P.sW, *dDg = (const bf16_t *)P.dD + c.ch * P.sD;
    const bf16_t *dKwg = (const bf16_t *)P.dKw + c.ch * P.sW;
    const int64_t kstride = (int64_t)P.H * P.K, vstride = (int64_t)P.H * P.V;
    const int64_t row0 = (int64_t)c.tok0 * n * P.H + c.h; /* householder: the chunk's first slot row, in rows of one head */
    const int64_t tokrow0 = (int64_t)c.tok0 * P.H + c.h;  /* the chunk's first token row */
    /* a chunk row's token, and the key that orders rows for earlier(): the row (householder), its token (split) */
    auto token_of = [&](int r) { return LANES ? r >> LN : tokof(P, r); };
    auto order_of = [&](int r) { return SPLIT ? token_of(r) : r; };
    /* rows r < lc of k or v (width K or V) from column tile src0 */
    auto rows_in = [&](bf16_t *dst, const bf16_t *src0, int width) {
        if (!SPLIT) {
            cp_token_rows<64, 64>(dst, LDT, src0 + row0 * width, (int64_t)P.H * width, lc);
        } else { /* every row of a token holds the token's key or value */
            cp_rows_of<64, 64>(dst, LDT, [&](int r) { return src0 + (tokrow0 + (int64_t)token_of(r) * P.H) * width; }, lc);
        }
    };
    /* Split mode's raw keys are read by split_keys only, which takes token t's 8-column group x from
     * row (t, slice of x) alone where slices are whole groups (wsl8): each piece once, into that row,
     * where rows_in loads every row of a token (n times the pieces). split_keys rewrites all 64 rows.
     * (Over 64 rows of tokens, for n 1 too, k_bwd_b_fast<true> spilled 104 bytes.) */
    auto keys_in = [&](bf16_t *dst, int c0) {
        if (!SPLIT || !P.wsl8 || n < 2) {
            rows_in(dst, (const bf16_t *)P.k + c0, P.K);
            return;
        }
        for_pieces16<32, 64>([&](int t, int x) { /* n >= 2: at most 32 tokens */
            if (t < ct)
                cp_async16(dst + (t * n + slice_of(P, c0 + x)) * LDT + x,
                           (const bf16_t *)P.k + (tokrow0 + (int64_t)t * P.H) * P.K + c0 + x);
            else if (LANES && t * n < 64) /* the raw-key products contract over these rows */
                *(uint4 *)(dst + (t * n + slice_of(P, c0 + x)) * LDT + x) = make_uint4(0, 0, 0, 0);
        });
    };
    auto issue = [&](int st, int b) {
        if (st < nkt || st >= nkt + nvt) {
            const int c0 = (st < nkt ? st : st - nkt - nvt) * GDP_TILE;
            cp_tile16<64, 64>(Ab(b), LDT, dWg + c0, P.KP);
            keys_in(Bb(b), c0);
            if (st >= nkt) cp_tile16<64, 64>(Cb(b), LDT, dKwg + c0, P.KP);
        } else {
            const int v0 = (st - nkt) * GDP_TILE;
            cp_tile16<64, 64>(Ab(b), LDT, dDg + v0, P.VP);
            rows_in(Bb(b), (const bf16_t *)P.v + v0, P.V);
        }
        cp_commit();
    };
    cp_tile16<64, 64>(Top, LDT, (const bf16_t *)P.Tsave + c.ch * (GDP_CHUNK * GDP_CHUNK), GDP_CHUNK);
    issue(0, 0);
    load_gates<bf16_t>(P, c, Gs, br);
    if (SPLIT && !LANES && tid < rr) dMs[tid] = 0.f;
    if (LANES)
        for (int i = tid; i < NTHREADS / 32 * GDP_SPLIT_FAST_N * 8; i += NTHREADS) dMp[i] = 0.f;
    const int m1 = (warp >> 1) * 16, n1 = (warp & 1) * 32; /* every product here is 64 x 64 */
    const int ta = g & (NL - 1); /* lanes: the slice a of both of the thread's rows */
    /* lanes, each 64-column key tile within one slice: the products take the keys as loaded, and
     * neither split_keys pass runs (nor its barriers) */
    const bool raw_keys = LANES && (P.K >> LN) % GDP_TILE == 0;
    /* lanes, n 2, raw keys: Dp stored once for each slice b, scaled by M[a, b] (see the dA products) */
    const bool slice_dp = raw_keys && NL == 2;
    /* lanes: the fragment summed over each token's rows into token row t of the staging tile (rows < 64 / n;
     * copied out after the next barrier), by halving exchanges: the lanes of a pair (g, g ^ 1) each send
     * the half the other keeps (rows hh = 1 or 0), then at n 4 the pairs (g, g ^ 2) halve the column
     * tiles; 8 shuffles at n 2 and 12 at n 4 where summing every value in every lane took 16 and 32
     * (those were 2% of split's k_bwd_ab samples). The sums pair the rows as before. */
    auto token_rows_stage = [&](float(&F)[4][4]) {
        /* the lane keeps lo or (upper) hi, sends the other to lane ^ xor_mask, and adds what it receives */
        auto halve = [](bool upper, float lo, float hi, int xor_mask) {
            return (upper ? hi : lo) + __shfl_xor_sync(0xffffffffu, upper ? lo : hi, xor_mask);
        };
        const bool p = g & 1; /* keeps row m1 + g + 8 p */
        float S1[4][2];
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int j = 0; j < 2; j++) S1[nt][j] = halve(p, F[nt][j], F[nt][2 + j], 4);
        const int trow = (m1 + (g & ~(NL - 1)) + 8 * p) >> LN;
        if constexpr (NL == 2) {
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
                *(__nv_bfloat162 *)(Ost + trow * LDT + n1 + nt * 8 + 2 * tq) = __floats2bfloat162_rn(S1[nt][0], S1[nt][1]);
        } else {
            const bool q = g & 2; /* keeps column tiles 2 q, 2 q + 1 */
#pragma unroll
            for (int i = 0; i < 2; i++) {
                float S2[2];
#pragma unroll
                for (int j = 0; j < 2; j++) S2[j] = halve(q, S1[i][j], S1[2 + i][j], 8);
                *(__nv_bfloat162 *)(Ost + trow * LDT + n1 + (2 * q + i) * 8 + 2 * tq) = __floats2bfloat162_rn(S2[0], S2[1]);
            }
        }
    };
    /* lanes, after the barrier: the staged token rows t < ct to dst's token rows (width elements) */
    auto token_rows_out = [&](bf16_t *dst, int width) {
        for_pieces16<64 / NL, 64>([&](int t, int x) {
            if (t < ct) *(uint4 *)(dst + (tokrow0 + (int64_t)t * P.H) * width + x) = *(const uint4 *)(Ost + t * LDT + x);
        });
    };
    float aT1[4][4], aT2[4][4];
    frag_zero(aT1);
    frag_zero(aT2);
    float db0 = 0.f, db1 = 0.f, dg0 = 0.f, dg1 = 0.f; /* shares of rows m1 + g and m1 + g + 8 */
    for (int st = 0; st < NS; st++) {
        const int b = st & 1;
        cp_wait<0>();
        __syncthreads(); /* stage st's tiles are in, and every warp is past stage st - 1 */
        if (st + 1 < NS) issue(st + 1, b ^ 1);
        if (st == 0 && tid < 64) gam[tid] = tid < lc ? gate_exp(Gs[token_of(tid)]) : 0.f;
        bf16_t *A = Ab(b), *Bt = Bb(b), *C = Cb(b);
        if (raw_keys && st < nkt) { /* dW R^T = (dW k^T) M[a_j, b] column by column, the tile within slice b */
            const int bsl = slice_of(P, st * GDP_TILE);
            float Y[1][4][4];
            frag_zero(Y[0]);
            warp_mma_rows<1, 4, true>(
                Y, [&](int, int k0, uint32_t(&a)[4]) { ldsm_a<false>(a, RowMajor{A, LDT}, m1, k0); },
                TokenSliceRows{Bt, LDT, -NL, bsl}, GDP_TILE, n1);
            const float2 m = mask_pair(P, c.h, bsl, NL);
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) aT1[nt][e] += (e & 1 ? m.y : m.x) * Y[0][nt][e];
        } else if (st < nkt) {
            if (SPLIT) { /* R in place of the raw keys */
                split_keys<bf16_t>(P, c, Bt, LDT, Bt, LDT, st * GDP_TILE, GDP_TILE, false);
                __syncthreads();
            }
            warp_mma<4, false, true>(aT1, A, LDT, Bt, LDT, GDP_TILE, m1, n1); /* dW R^T */
        } else if (st < nkt + nvt) {
            const int v0 = (st - nkt) * GDP_TILE;
            warp_mma<4, false, true>(aT2, A, LDT, Bt, LDT, GDP_TILE, m1, n1); /* dDelta v^T */
            float X[4][4];
            frag_zero(X);
            warp_mma<4, true, false>(X, Top, LDT, A, LDT, 64, m1, n1); /* dX_v = T^T dDelta */
            frag_rowdot_acc(X, Bt, LDT, m1, n1, db0, db1);
            if (LANES) { /* dv_t = sum_a beta_(t,a) dX_v(t,a) */
                frag_each(X, m1, n1, [&](int r, int, float &v) { v *= br[r]; });
                token_rows_stage(X);
            } else if (SPLIT) {
                frag_each(X, m1, n1, [&](int r, int x, float v) { Fv[r * LDF + x] = v; });
            } else {
                frag_each(X, m1, n1, [&](int r, int, float &v) { v *= br[r]; });
                frag_stsm_bf16(X, Ost, LDT, m1, n1);
            }
            const bool last = st == nkt + nvt - 1;
            if (last) { /* dT, masked to the earlier rows: (dW R^T) diag(beta gamma) + (dDelta v^T) diag(beta) */
                /* gamma and beta of a column pair read once for both rows, the order keys once a row
                 * or column (per element, with earlier()'s runtime token division, these lines and
                 * dA's mask below were a third of split mode's stall samples) */
                if (KIND == GDP_BWDB_SPLIT_TILES) { /* (the forms below made this kind spill 88 bytes) */
#pragma unroll
                    for (int nt = 0; nt < 4; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int i = m1 + g + (e >> 1) * 8, j = n1 + nt * 8 + 2 * tq + (e & 1);
                            aT1[nt][e] = i < lc && earlier(P, i, j) ? (aT1[nt][e] * gam[j] + aT2[nt][e]) * br[j] : 0.f;
                        }
                } else {
#pragma unroll
                    for (int nt = 0; nt < 4; nt++) {
                        const int j = n1 + nt * 8 + 2 * tq;
                        const float2 gj = *(const float2 *)(gam + j), bj = *(const float2 *)(br + j);
                        const int oj0 = order_of(j), oj1 = order_of(j + 1);
#pragma unroll
                        for (int hh = 0; hh < 2; hh++) {
                            const int i = m1 + g + hh * 8, oi = i < lc ? order_of(i) : INT_MIN;
                            float &x0 = aT1[nt][2 * hh], &x1 = aT1[nt][2 * hh + 1];
                            x0 = oj0 < oi ? (x0 * gj.x + aT2[nt][2 * hh]) * bj.x : 0.f;
                            x1 = oj1 < oi ? (x1 * gj.y + aT2[nt][2 * hh + 1]) * bj.y : 0.f;
                        }
                    }
                }
                frag_stsm_bf16(aT1, dTop, LDT, m1, n1);
            }
            __syncthreads();
            if (LANES) {
                token_rows_out((bf16_t *)P.dv + v0, P.V);
            } else if (SPLIT) { /* dv_t = sum_a beta_(t,a) dX_v(t,a) */
                for (int e = tid; e < ct * 32; e += NTHREADS) {
                    const int t = e >> 5, x = (e & 31) * 2;
                    float s0 = 0.f, s1 = 0.f;
                    for (int a = 0; a < n; a++) {
                        const float bt = br[t * n + a];
                        s0 += bt * Fv[(t * n + a) * LDF + x];
                        s1 += bt * Fv[(t * n + a) * LDF + x + 1];
                    }
                    *(__nv_bfloat162 *)((bf16_t *)P.dv + (tokrow0 + (int64_t)t * P.H) * P.V + v0 + x) = __floats2bfloat162_rn(s0, s1);
                }
                if (last) __syncthreads(); /* Y and D go over dX_v */
            } else {
                for_pieces16<64, 64>([&](int i, int x) {
                    if (i < lc) *(uint4 *)((bf16_t *)P.dv + row0 * P.V + i * vstride + v0 + x) = *(const uint4 *)(Ost + i * LDT + x);
                });
            }
            if (last) { /* dA = -T^T dT T^T; D = dA o E (gates of earlier rows), Dp = diag(beta) D */
                float Y[4][4];
                frag_zero(Y);
                warp_mma<4, false, true>(Y, dTop, LDT, Top, LDT, 64, m1, n1);
                frag_stsm_bf16(Y, Yop, LDT, m1, n1);
                __syncthreads();
                frag_zero(Y);
                warp_mma<4, true, false>(Y, Top, LDT, Yop, LDT, 64, m1, n1);
                if (KIND == GDP_BWDB_SPLIT_TILES)
                    frag_each(Y, m1, n1, [&](int i, int j, float &v) {
                        v = i < lc && earlier(P, i, j) ? -v * gate_exp(Gs[tokof(P, i)] - Gs[tokof(P, j)]) : 0.f;
                    });
                else
                    frag_gate_decay(
                        Y, m1, n1, [&](int i) { return make_float2(Gs[token_of(i)], -1.f); },
                        [&](int j) { return Gs[token_of(j)]; }, [&](int i, int j) { return i < lc && order_of(j) < order_of(i); });
                frag_stsm_bf16(Y, Dop, LDT, m1, n1);
                if (slice_dp) {
                    /* Dp of slice b: rows (t, a) times beta_(t,a) M[a, b], b = 0 in Dp and 1 in dT's buffer
                     * (its readers, the dA products, are past the barrier above), so the K_w tiles'
                     * products take it as it is (scaling their A fragments was 6% of the kernel's
                     * instructions) */
                    const float *Mh = P.mask + (int64_t)c.h * rr + ta * NL;
                    const float q0 = __ldg(Mh), q1 = __ldg(Mh + 1);
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        const int i = m1 + g + hh * 8;
                        const float f0 = br[i] * q0, f1 = br[i] * q1;
#pragma unroll
                        for (int nt = 0; nt < 4; nt++) {
                            const int x = n1 + nt * 8 + 2 * tq;
                            const float y0 = Y[nt][2 * hh], y1 = Y[nt][2 * hh + 1];
                            *(__nv_bfloat162 *)(Dp + i * LDT + x) = __floats2bfloat162_rn(y0 * f0, y1 * f0);
                            *(__nv_bfloat162 *)(dTop + i * LDT + x) = __floats2bfloat162_rn(y0 * f1, y1 * f1);
                        }
                    }
                } else {
                    frag_each(Y, m1, n1, [&](int i, int, float &v) { v *= br[i]; });
                    frag_stsm_bf16(Y, Dp, LDT, m1, n1);
                }
            }
        } else {
            const int c0 = (st - nkt - nvt) * GDP_TILE;
            const bf16_t *Rt = Bt; /* read keys; Bt holds the write keys */
            if (SPLIT && !raw_keys) { /* K_w in place, R into dT's buffer (free since the dA products) */
                split_keys<bf16_t>(P, c, Bt, LDT, dTop, LDT, c0, GDP_TILE, true);
                __syncthreads();
                Rt = dTop;
            }
            float EQ[2][4][4];
            float(&E)[4][4] = EQ[0], (&Q)[4][4] = EQ[1];
            frag_zero(E);
            frag_zero(Q);
            warp_mma<4, true, false>(E, Top, LDT, A, LDT, 64, m1, n1); /* dX_r = T^T dW */
            frag_each(E, m1, n1, [&](int r, int, float &v) { v *= gam[r]; });
            if (raw_keys) {
                /* The tile lies in slice b, where K_w(t,a) = [a == b] k_t and R(t,a) = M[a,b] k_t: both
                 * products take token t's keys as loaded (row (t, b)), with [a == b] on D's columns and
                 * M[a, b] on Dp's rows, the contracted rows (t, a) */
                const int bsl = slice_of(P, c0);
                const float2 q = slice_dp ? make_float2(1.f, 1.f) : mask_pair(P, c.h, bsl, NL);
                const int2 ab = pair_slices(NL);
                const uint32_t own = (ab.x == bsl ? 0x0000ffffu : 0u) | (ab.y == bsl ? 0xffff0000u : 0u); /* [a == b], bf16 x2 */
                bf16_t *Dpb = slice_dp && bsl ? dTop : Dp;
                warp_mma_rows<2, 4>(
                    EQ,
                    [&](int mt, int k0, uint32_t(&a)[4]) {
                        if (mt == 0) {
                            ldsm_a<false>(a, RowMajor{Dop, LDT}, m1, k0);
#pragma unroll
                            for (int r = 0; r < 4; r++) a[r] &= own;
                        } else {
                            ldsm_a<true>(a, RowMajor{Dpb, LDT}, m1, k0);
                            if (!slice_dp) frag_a_scale_pairs(a, q.x, q.y);
                        }
                    },
                    TokenSliceRows{Bt, LDT, -NL, bsl}, 64, n1);
            } else if (!SPLIT) { /* E = gamma dX_r + D Kw and Dp^T R with R = K_w: one product, K_w's fragments loaded
                           * once (H200, H 16, n_h 2: 0.522-0.524 -> 0.510 ms) */
                warp_mma_rows<2, 4>(
                    EQ,
                    [&](int mt, int k0, uint32_t(&a)[4]) {
                        if (mt == 0)
                            ldsm_a<false>(a, RowMajor{Dop, LDT}, m1, k0);
                        else
                            ldsm_a<true>(a, RowMajor{Dp, LDT}, m1, k0);
                    },
                    RowMajor{Bt, LDT}, 64, n1);
            } else {
                warp_mma<4, false, false>(E, Dop, LDT, Bt, LDT, 64, m1, n1); /* E = gamma dX_r + D Kw */
                warp_mma<4, true, false>(Q, Dp, LDT, Rt, LDT, 64, m1, n1);  /* Dp^T R */
            }
            float e0 = 0.f, e1 = 0.f, y0 = 0.f, y1 = 0.f;
            if (LANES) {
                /* Row dots against R and K_w, dk and the dM terms, from token t's key on slice b (the
                 * write keys' row (t, b)): R(t,a) = M[a,b] k_t and K_w(t,a) = [a == b] k_t there.
                 * dk_t = sum_a (M[a,b] beta_(t,a) E_(t,a) + [a == b] (dK_w(t,a) + Q_(t,a))), dK_w being
                 * bwd_a's part in C; dM[a,b] gets beta_(t,a) <E_(t,a), k_t> over slice b. */
                const float *Mh = P.mask + (int64_t)c.h * rr;
                /* dm over the lanes of slice ta: the quad, then the rows' other tokens; one lane a slot */
                auto dm_out = [&](float dm, int bs) {
                    dm += __shfl_xor_sync(0xffffffffu, dm, 1);
                    dm += __shfl_xor_sync(0xffffffffu, dm, 2);
#pragma unroll
                    for (int o = LN; o < 3; o++) dm += __shfl_xor_sync(0xffffffffu, dm, 4 << o);
                    if (lane < 4 * NL && tq == 0) dMp[(warp * GDP_SPLIT_FAST_N + ta) * 8 + bs] += dm;
                };
                /* the warp's 32 columns within one slice (slices of 32 columns or more, K 128 n 2 or 4):
                 * the four column groups' dm summed before the lanes' sum, one reduction rather than four
                 * (their shuffles were 3% of split's k_bwd_ab samples) */
                const int warp_slice = slice_of(P, c0 + n1);
                const bool one_slice = warp_slice == slice_of(P, c0 + n1 + 24);
                float dm_warp = 0.f;
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    const int x = n1 + nt * 8 + 2 * tq, bs = slice_of(P, c0 + n1 + nt * 8);
                    const float m = __ldg(Mh + ta * NL + bs);
                    const bool own = ta == bs;
                    float dm = 0.f;
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        const int r = m1 + g + hh * 8, t = r >> LN;
                        const float2 kv = __bfloat1622float2(*(const __nv_bfloat162 *)(Bt + (t * NL + bs) * LDT + x));
                        const float ek = E[nt][2 * hh] * kv.x + E[nt][2 * hh + 1] * kv.y;
                        (hh ? e1 : e0) += m * ek;
                        dm += br[r] * ek;
                        const float mb = m * br[r]; /* E becomes row (t, a)'s term of dk_t */
                        /* selects, not a branch: own differs between a quad's neighbouring rows, so a
                         * branch ran both sides in every warp */
                        const float2 cw = __bfloat1622float2(*(const __nv_bfloat162 *)(C + r * LDT + x));
                        const float q0 = Q[nt][2 * hh], q1 = Q[nt][2 * hh + 1], yq = q0 * kv.x + q1 * kv.y;
                        (hh ? y1 : y0) += own ? yq : 0.f;
                        E[nt][2 * hh] = mb * E[nt][2 * hh] + (own ? cw.x + q0 : 0.f);
                        E[nt][2 * hh + 1] = mb * E[nt][2 * hh + 1] + (own ? cw.y + q1 : 0.f);
                    }
                    if (one_slice)
                        dm_warp += dm;
                    else
                        dm_out(dm, bs);
                }
                if (one_slice) dm_out(dm_warp, warp_slice);
                token_rows_stage(E);
            } else {
                frag_rowdot_acc(E, Rt, LDT, m1, n1, e0, e1);
                frag_rowdot_acc(Q, Bt, LDT, m1, n1, y0, y1);
            }
            db0 += e0;
            db1 += e1;
            dg0 += br[m1 + g] * e0 - y0;
            dg1 += br[m1 + g + 8] * e1 - y1;
            if (LANES) {
                __syncthreads();
                token_rows_out((bf16_t *)P.dk + c0, P.K);
            } else if (SPLIT) {
                /* dK_w = bwd_a's part + Dp^T R into C (bf16, as k_bwd_b_hh); E into two fp32 halves */
                float *Eh = n1 ? (float *)Ost : (float *)A; /* A (dW) is read by every warp: after a barrier */
                frag_each(Q, m1, n1, [&](int r, int x, float v) { C[r * LDT + x] = fromf<bf16_t>(tof(C[r * LDT + x]) + v); });
                __syncthreads();
                frag_each(E, m1, n1, [&](int r, int x, float v) { Eh[r * LDH + x - n1] = v; });
                __syncthreads();
                const float *Mh = P.mask + (int64_t)c.h * rr;
                /* A thread per (token, 8-column group); the group lies in one slice bs (K/n is a multiple
                 * of 8 wherever K is of 64 and n <= 8). dk_t = dK_w(t,bs) + sum_a M[a,bs] beta_(t,a)
                 * E_(t,a), and the same E rows give the dM terms beta_(t,a) <E_(t,a), k_t> over the
                 * group, summed over the lanes of one group (xor 8, 16) into dMp[warp][a][group]. */
                const int x = (tid & 7) * 8, bs = slice_of(P, c0 + x);
                const float *Eb = x < 32 ? (const float *)A + x : (const float *)Ost + (x - 32);
                for (int e0 = 0; e0 < ct * 8; e0 += NTHREADS) { /* the bound is the block's: the shuffles below */
                    const int e = e0 + tid, t = e >> 3;
                    const bool ok = e < ct * 8;
                    float acc[8], kv[8];
                    if (ok) {
                        ld8(acc, C + (t * n + bs) * LDT + x);
                        ld8(kv, Bt + (t * n + bs) * LDT + x);
                    }
                    for (int a = 0; a < n; a++) {
                        float u = 0.f, bt = 0.f;
                        if (ok) {
                            bt = br[t * n + a];
                            const float f = __ldg(Mh + a * n + bs) * bt;
                            float ev[8];
                            ld8(ev, Eb + (t * n + a) * LDH);
#pragma unroll
                            for (int j = 0; j < 8; j++) {
                                acc[j] += f * ev[j];
                                u += ev[j] * kv[j];
                            }
                        }
                        float v = bt * u;
                        v += __shfl_xor_sync(0xffffffffu, v, 8);
                        v += __shfl_xor_sync(0xffffffffu, v, 16);
                        if (lane < 8) {
                            float &slot = dMp[(warp * GDP_SPLIT_FAST_N + a) * 8 + lane];
                            slot = (e0 ? slot : 0.f) + v;
                        }
                    }
                    if (ok) st8((bf16_t *)P.dk + (tokrow0 + (int64_t)t * P.H) * P.K + c0 + x, acc);
                }
                __syncthreads();
                /* dM[a, b] over the warps and the groups of slice b, in a fixed order: a warp an entry,
                 * lane l the groups 2 (l & 3) and 2 (l & 3) + 1 of warp l >> 2's terms, then summed across
                 * the lanes (one thread summing the 64 terms of an entry was a serial tail at every K tile
                 * while the other warps waited at the next barrier) */
                static_assert(NTHREADS / 32 * 8 == 64, "a warp's lanes hold the 8 warps' 8 groups, two a lane");
                for (int o = warp; o < rr; o += NTHREADS / 32) {
                    const int a = o / n, bsl = o - a * n, gi = 2 * (lane & 3);
                    const float *terms = dMp + ((lane >> 2) * GDP_SPLIT_FAST_N + a) * 8;
                    float sm = (slice_of(P, c0 + gi * 8) == bsl ? terms[gi] : 0.f) +
                               (slice_of(P, c0 + gi * 8 + 8) == bsl ? terms[gi + 1] : 0.f);
                    sm = warp_sum(sm);
                    if (lane == 0) dMs[o] += sm;
                }
            } else {
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) { /* dk = beta E + dK_w (bwd_a's part + Dp^T R) */
                        const int r = m1 + g + hh * 8, x = n1 + nt * 8 + 2 * tq;
                        const float2 cw = __bfloat1622float2(*(const __nv_bfloat162 *)(C + r * LDT + x));
                        E[nt][2 * hh] = br[r] * E[nt][2 * hh] + (cw.x + Q[nt][2 * hh]);
                        E[nt][2 * hh + 1] = br[r] * E[nt][2 * hh + 1] + (cw.y + Q[nt][2 * hh + 1]);
                    }
                frag_stsm_bf16(E, Ost, LDT, m1, n1);
                __syncthreads();
                for_pieces16<64, 64>([&](int i, int x) {
                    if (i < lc) *(uint4 *)((bf16_t *)P.dk + row0 * P.K + i * kstride + c0 + x) = *(const uint4 *)(Ost + i * LDT + x);
                });
            }
        }
    }
    /* dbeta; dG with bwd_a's gate parts, then dg by a reverse scan over the chunk's tokens */
    quad_rows_out(db0, db1, m1, n1 >> 5, pdb, 2);
    quad_rows_out(dg0, dg1, m1, n1 >> 5, pdg, 2);
    __syncthreads();
    const float *dga = P.dGa + c.ch * (int64_t)nkt * GDP_CHUNK;
    if (tid < 64) {
        float sum = pdg[2 * tid] + pdg[2 * tid + 1];
        for (int kt = 0; kt < nkt; kt++) sum += dga[kt * GDP_CHUNK + tid];
        dGr[tid] = sum;
    }
    bf16_t *dbeta = (bf16_t *)P.dbeta;
    if (SPLIT) {
        if (tid < ct) {
            float acc = 0.f;
            for (int a = 0; a < n; a++) acc += pdb[2 * (tid * n + a)] + pdb[2 * (tid * n + a) + 1];
            dbeta[tokrow0 + (int64_t)tid * P.H] = fromf<bf16_t>(acc);
        }
        if (tid < rr && !LANES) P.dM[c.ch * rr + tid] = dMs[tid];
        if (tid < rr && LANES) { /* over the warps, in a fixed order */
            float sm = 0.f;
            for (int w = 0; w < NTHREADS / 32; w++) sm += dMp[(w * GDP_SPLIT_FAST_N + (tid >> LN)) * 8 + (tid & (NL - 1))];
            P.dM[c.ch * rr + tid] = sm;
        }
    } else if (tid < lc) {
        dbeta[row0 + (int64_t)tid * P.H] = fromf<bf16_t>(pdb[2 * tid] + pdb[2 * tid + 1]);
    }
    __syncthreads();
    if (tid < 32 && P.dg) dg_scan(P, c, dGr);
}

} // namespace gdp
