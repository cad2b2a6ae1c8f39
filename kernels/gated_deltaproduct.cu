/* Gated DeltaProduct, CUDA path: the chunked WY/UT algorithm of shared/spec/gated-deltaproduct.md
 * §2 ("one engine for both modes": read keys R and write keys K_w on interleaved rows), forward
 * and a dedicated backward. Grid and workspace layout: kernels/gdp_cuda_plan.h; the float64 model
 * of exactly these steps: tests/gpu/gdp_chunk_model.h.
 *
 * Forward  1 tables   sequence and chunk tables (varlen or not), built on the device
 *          2 prep     per chunk: G (cumsum), A (fp32), T = (I+A)^-1 (four 16x16 forward
 *                     substitutions + block merges, fp32), W, U, Kwd, P
 *          3 state    sequential per (sequence, head, V tile): h, Delta = U - W h,
 *                     S <- e^{G_last} S + Kwd^T Delta
 *          4 output   per chunk: o = (scale e^G q) h + P Delta (the fast state pass makes it
 *                     itself at V tile 128, or 64 with one CTA an SM; else k_output_fast or
 *                     the generic k_output)
 * Backward 2, 3 again (recompute), then
 *          5 dh       sequential in reverse: dDelta = P^T dO + Kwd dS,
 *                     dS <- e^{G_last} dS + (scale e^G q)^T dO - W^T dDelta
 *          6 bwd_a    per chunk and K tile: dq, dK_w (output + state write), dW, gate parts
 *          7 bwd_b    per chunk: WY backward through T (dX = T^T dW, dA = -T^T dT T^T), dk, dv,
 *                     dbeta, dg (reverse cumsum in the chunk), per-chunk dmask
 *          8 dmask    fixed-order sum of the per-chunk mask gradients
 * bf16 runs passes 2 to 7 through fast kernels with their sizes fixed at compile time
 * (k_prep2_fast, k_state_fast, k_output_fast, k_dh_fast, k_bwd_a_fast, k_bwd_b_fast) where the
 * shape allows (K 64, 128 or 256 for prep, state, output and dh; K and V multiples of 64 for prep
 * and the backward; 16-byte rows); at K = V = 128 the saving forward's state pass and the dh pass
 * are k_state_tma and k_dh_tma (tensor-map copies; seq_tma says where);
 * f32 and other shapes run the generic kernels, which GDP_GENERIC=all also selects for bf16.
 * Every gradient element is written by exactly one thread (no atomics); reductions run in a fixed
 * order, so results are deterministic. Exponentials are taken only of differences G_i - G_j with
 * j not after i, selected before exp. */
#include <cuda.h> /* CUtensorMap */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h> /* PFN_cuTensorMapEncodeTiled */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/gated_deltaproduct.h"
#include "kernels/gated_deltaproduct_common.h"
#include "kernels/gdp_cuda_plan.h"
#include "kernels/gdp_mma.cuh"
#include "kernels/gdp_wgmma.cuh"

namespace gdp {

constexpr int NTHREADS = 256;
constexpr int LDT = GDP_TILE + 8; /* leading dimension of 64-wide operand tiles */
constexpr int LDF = GDP_TILE + 4; /* leading dimension of 64-wide fp32 tiles */
constexpr int LDA = 65;           /* fp32 64x64 A and T */
/* the fast prep's A and T: rows 16-byte aligned, so the solve's row reads are 16-byte loads (row
 * pieces 2 rows apart land 8 banks apart) */
constexpr int LDAF = 68;

struct Params {
    int mode, B, T, H, K, V, n, KP, VP, Ct, Ctp, N, NCmax, nkt, nvt, bv, nst;
    bool veck, vecv; /* rows of K (V) elements may be moved 16 bytes at a time */
    bool fuse_out;   /* forward: the state pass writes o (and no h, Delta) */
    bool fast_out;   /* forward: k_state_fast writes o (k_output is not run) */
    bool keep_hd;    /* k_state_fast with the output: store h and Delta too (the forward saves them) */
    bool dw_discard; /* k_bwd_ab: drop each chunk's dW and dK_w lines from L2 once read (never written back) */
    bool seq_hv;     /* state and dh passes: grid (N H, V tiles), not (V tiles, H, N) (seq_cta); it sits in
                      * the padding before ninv, so that no other field moves */
    int ninv;        /* 65536/n + 1: p/n == (p*ninv) >> 16 exactly for p < 64 */
    int sinv;        /* split mode: 65536/(K/n) + 1: x/(K/n) == (x*sinv) >> 16 exactly for x < 256 */
    bool wsl8;       /* split mode: the slice width K/n is a multiple of 8 */
    int ci0;         /* per-chunk kernels: the first chunk of this launch (chunk grids of over 65535 chunks) */
    /* a batch of equal sequences: chunks a sequence, and ci / ncs == umulhi(4 ci, ncs_mul) >> ncs_shift,
     * exact for ci < 2^30 (chunks hold at least 8 tokens, so ci < 2^28) */
    int ncs, ncs_shift;
    unsigned ncs_mul;
    float scale;
    const void *q, *k, *v, *beta, *d_o;
    const float *g, *mask, *h0, *dht;
    const int32_t *cu;
    void *o, *dq, *dk, *dv, *dbeta;
    float *ht, *dg, *dmask, *dh0;
    GdpSeqInfo *seq;
    GdpChunkInfo *chunk;
    float *G;
    void *W, *Kwd, *U, *P, *h, *D, *dh, *dD, *dW, *Tsave;
    void *dKw;
    float *dGa, *dM;
    int64_t sW, sU, sP, sH, sD;
};

/* ---------------------------------------------------------------- shared-memory carving */
struct Carve {
    char *base;
    size_t off;
    __host__ __device__ explicit Carve(char *b) : base(b), off(0) {}
    template <typename T> __host__ __device__ T *take(size_t count) {
        T *p = (T *)(base + off);
        off += (sizeof(T) * count + 15) & ~(size_t)15;
        return p;
    }
};


/* two adjacent elements (even offset) with one store */
__device__ __forceinline__ void store2(float *p, float a, float b) { *(float2 *)p = make_float2(a, b); }
__device__ __forceinline__ void store2(__nv_bfloat16 *p, float a, float b) { *(__nv_bfloat162 *)p = __floats2bfloat162_rn(a, b); }
/* e^x of a gate (log-decay) difference or sum: __expf's ex2.approx with results below 2^-126 flushed
 * to zero, which __expf keeps as denormals at three more instructions an exp (a compare and two
 * predicated multiplies around MUFU.EX2; prep is bound by instruction issue). A decay that small is
 * zero to every product it scales (bf16 has fp32's exponent range). Same bits as __expf elsewhere. */
__device__ __forceinline__ float gate_exp(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
    return y;
}


/* o's row scale for token t of a chunk of ct tokens (G its gates): scale e^{G_t} (q's part of o is
 * scale e^{G_t} q_t h), 0 past the chunk's tokens */
__device__ __forceinline__ float o_row_scale(const Params &P, const float *G, int ct, int t) {
    return t < ct ? P.scale * gate_exp(G[t]) : 0.f;
}

/* ---------------------------------------------------------------- row access */
/* Chunk ci of sequence s (table entry si). k_chunks fills the chunk table with it; the sequential
 * passes call it instead of reading the table, a dependent global load in every step (state pass,
 * n_h 2: the next chunk's q address waited on it, ~6% of the stall samples). */
__device__ __forceinline__ GdpChunkInfo seq_chunk(const GdpSeqInfo &si, int s, int ci, int Ct) {
    GdpChunkInfo ck;
    ck.seq = s;
    ck.c = ci - si.c0;
    ck.tok0 = si.base + ck.c * Ct;
    ck.ct = min(Ct, si.len - ck.c * Ct);
    return ck;
}
/* Key and value rows of chunk row p (householder: the slot row; split: the token row). */
template <typename IT> __device__ __forceinline__ const IT *krow(const Params &P, int tok0, int h, int p) {
    if (P.mode == GDP_MODE_HOUSEHOLDER) return (const IT *)P.k + (((int64_t)tok0 * P.n + p) * P.H + h) * P.K;
    return (const IT *)P.k + ((int64_t)(tok0 + p / P.n) * P.H + h) * P.K;
}
template <typename IT> __device__ __forceinline__ const IT *vrow(const Params &P, int tok0, int h, int p) {
    if (P.mode == GDP_MODE_HOUSEHOLDER) return (const IT *)P.v + (((int64_t)tok0 * P.n + p) * P.H + h) * P.V;
    return (const IT *)P.v + ((int64_t)(tok0 + p / P.n) * P.H + h) * P.V;
}
/* Chunk row p's key, value and beta rows sit chunk_row_step(p) rows of one head past row 0's (a
 * row a step in householder mode, a token in split mode): row 0's address plus one multiply-add,
 * where krow / vrow recompute the whole index (p < 64). */
__device__ __forceinline__ int64_t chunk_row_step(const Params &P, int p) {
    return (int64_t)(P.mode == GDP_MODE_HOUSEHOLDER ? p : (p * P.ninv) >> 16) * P.H;
}
/* Write key K_w of row p at column x from the key value kv: split mode keeps only slice p%n. */
__device__ __forceinline__ float kw_of(const Params &P, int p, int x, float kv) {
    if (P.mode == GDP_MODE_HOUSEHOLDER) return kv;
    return x / (P.K / P.n) == p % P.n ? kv : 0.f;
}
/* Read key R: split mode weights slice b of the key by M[a,b], a = p%n. */
__device__ __forceinline__ float r_of(const Params &P, int h, int p, int x, float kv) {
    if (P.mode == GDP_MODE_HOUSEHOLDER) return kv;
    return P.mask[((int64_t)h * P.n + p % P.n) * P.n + x / (P.K / P.n)] * kv;
}
template <typename IT> __device__ __forceinline__ float beta_at(const Params &P, int tok0, int h, int p) {
    const IT *b = (const IT *)P.beta;
    if (P.mode == GDP_MODE_HOUSEHOLDER) return to_f32(b[((int64_t)tok0 * P.n + p) * P.H + h]);
    return to_f32(b[(int64_t)(tok0 + p / P.n) * P.H + h]);
}
/* token of chunk row p (< 64) without a division */
__device__ __forceinline__ int tokof(const Params &P, int p) { return (p * P.ninv) >> 16; }
/* Row j is "earlier" than row i: an earlier row (householder) or an earlier token (split). */
__device__ __forceinline__ bool earlier(const Params &P, int i, int j) {
    return P.mode == GDP_MODE_HOUSEHOLDER ? j < i : tokof(P, j) < tokof(P, i);
}

/* s[r*ld + c] = f(r, c) for r < rows, c < cols (rounded to the operand type). */
template <typename OT, class F> __device__ __forceinline__ void fill(OT *s, int ld, int rows, int cols, F f) {
    for (int e = threadIdx.x; e < rows * cols; e += blockDim.x) {
        const int r = e / cols, c = e - (e / cols) * cols;
        s[r * ld + c] = from_f32<OT>(f(r, c));
    }
}

/* A per-chunk kernel's CTA: chunk ci, head h. The grid is (H, chunks) (chunk_grid), so that a
 * chunk's heads run side by side: at H 16, n_h 2 bwd_b took 0.529-0.536 ms against 0.543-0.546
 * with the heads of one chunk 512 CTAs apart (H200, session 26 call 5). (ci as blockIdx.x / H of a
 * one-dimensional grid made five fast kernels spill.) */
/* KT_X (k_bwd_a_fast): the grid is (K tiles, H, chunks) instead, so that a chunk's K tiles run side
 * by side and each reads the chunk's dO, D and dD where the one before it left them, in L2. */
template <bool KT_X = false> __device__ __forceinline__ void block_chunk_head(const Params &P, int &ci, int &h) {
    ci = P.ci0 + (int)(KT_X ? blockIdx.z : blockIdx.y);
    h = (int)(KT_X ? blockIdx.y : blockIdx.x);
}

/* A state or dh pass's CTA: sequence s, head h, V tile v0 (BV columns). The grid is (V tiles, H,
 * sequences), so that a (sequence, head)'s V tiles are adjacent CTAs: they run in the same wave and
 * share each chunk's W, Kwd, q and P through L2. With (N H, V tiles) and more CTAs than fit the GPU
 * at once (K 256: one CTA an SM, 512 CTAs at B 8, H 16), each V tile of a head ran in another wave
 * and read those tiles from DRAM again. P.seq_hv keeps that order (GDP_SEQ_GRID=hv, for A/B runs, and
 * over 65535 sequences, which the z dimension cannot hold). */
__device__ __forceinline__ void seq_cta(const Params &P, int bv, int &s, int &h, int &v0) {
    const unsigned sh = P.seq_hv ? blockIdx.x : blockIdx.z * P.H + blockIdx.y; /* s H + h */
    s = (int)(sh / P.H);
    h = (int)(sh % P.H);
    v0 = (int)(P.seq_hv ? blockIdx.y : blockIdx.x) * bv;
}

struct ChunkCtx {
    int ci, h, tok0, ct, lc;
    int64_t ch;
};

/* Chunk ci of head h, or false for a padding chunk. With TABLE_FREE (k_prep2_fast, k_bwd_a_fast,
 * k_bwd_b_fast), a batch of equal sequences (no cu_seqlens) needs no table: chunk ci is chunk
 * ci % ncs of sequence ci / ncs, as k_chunks lays it out; reading the table is a dependent global
 * load at the start of every CTA, ahead of all its addresses. (The division's registers made the
 * generic kernels and k_bwd_a_kres spill.) tok0 and ct are seq_chunk's formula spelled out: calling
 * seq_chunk here, with frag_earlier_decay through earlier(), moved k_prep2_fast from 77 / 78 to 72
 * registers and made it 3% slower (H200, session 27 call 1). */
template <bool TABLE_FREE = false, bool KT_X = false>
__device__ __forceinline__ bool chunk_ctx(const Params &P, ChunkCtx &c) {
    int ci, h;
    block_chunk_head<KT_X>(P, ci, h);
    if (TABLE_FREE && !P.cu) {
        const int s = (int)(__umulhi((unsigned)ci << 2, P.ncs_mul) >> P.ncs_shift), cc = ci - s * P.ncs;
        if (s >= P.N) return false;
        c.tok0 = s * P.T + cc * P.Ct;
        c.ct = P.T - cc * P.Ct < P.Ct ? P.T - cc * P.Ct : P.Ct;
    } else {
        const GdpChunkInfo ck = P.chunk[ci];
        if (ck.seq < 0) return false;
        c.tok0 = ck.tok0;
        c.ct = ck.ct;
    }
    c.ci = ci;
    c.h = h;
    c.lc = c.ct * P.n;
    c.ch = (int64_t)ci * P.H + h;
    return true;
}

/* Tile loaders of the chunk's rows (NULL rows past the chunk end read as zeros). */
template <typename IT> __device__ __forceinline__ void load_kw(const Params &P, const ChunkCtx &c, IT *s, int c0, int wk) {
    load_rows(s, LDT, 64, wk, c0, P.K, P.veck, [&](int r) { return r < c.lc ? krow<IT>(P, c.tok0, c.h, r) : (const IT *)nullptr; },
              [&](int r, int x, float v) { return kw_of(P, r, x, v); });
}
/* scale_mode 0: R; 1: beta*gamma*R (X_r) */
template <typename IT>
__device__ __forceinline__ void load_r(const Params &P, const ChunkCtx &c, IT *s, int c0, int wk, const float *Gs,
                                       const float *br, int scale_mode) {
    load_rows(s, LDT, 64, wk, c0, P.K, P.veck, [&](int r) { return r < c.lc ? krow<IT>(P, c.tok0, c.h, r) : (const IT *)nullptr; },
              [&](int r, int x, float v) {
                  const float rv = r_of(P, c.h, r, x, v);
                  return scale_mode ? br[r] * gate_exp(Gs[tokof(P, r)]) * rv : rv;
              });
}
/* scale_mode 0: V; 1: beta*V (X_v) */
template <typename IT>
__device__ __forceinline__ void load_v(const Params &P, const ChunkCtx &c, IT *s, int c0, int wv, const float *br, int scale_mode) {
    load_rows(s, LDT, 64, wv, c0, P.V, P.vecv, [&](int r) { return r < c.lc ? vrow<IT>(P, c.tok0, c.h, r) : (const IT *)nullptr; },
              [&](int r, int x, float v) { return scale_mode ? br[r] * v : v; });
}
/* q rows of the chunk's tokens, times rowf[t] (or 1 when rowf is NULL); rows >= ct are zero */
template <typename IT>
__device__ __forceinline__ void load_q(const Params &P, const ChunkCtx &c, IT *s, int lds, int c0, int wk, const float *rowf) {
    load_rows(s, lds, P.Ctp, wk, c0, P.K, P.veck,
              [&](int t) { return t < c.ct ? (const IT *)P.q + ((int64_t)(c.tok0 + t) * P.H + c.h) * P.K : (const IT *)nullptr; },
              [&](int t, int, float v) { return rowf ? rowf[t] * v : v; });
}

/* ---------------------------------------------------------------- split-mode keys in shared memory */
/* slice of key column x (< 256) in split mode, without a division */
__device__ __forceinline__ int slice_of(const Params &P, int x) { return (x * P.sinv) >> 16; }

/* 8 consecutive elements (16-byte aligned) of a shared tile as floats, and back */
__device__ __forceinline__ void ld8(float (&v)[8], const __nv_bfloat16 *p) {
    const uint4 u = *(const uint4 *)p;
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const float2 f = __bfloat1622float2(h[j]);
        v[2 * j] = f.x;
        v[2 * j + 1] = f.y;
    }
}
__device__ __forceinline__ void ld8(float (&v)[8], const float *p) {
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void st8(__nv_bfloat16 *p, const float (&v)[8]) {
    uint4 u;
    __nv_bfloat162 *h = (__nv_bfloat162 *)&u;
#pragma unroll
    for (int j = 0; j < 4; j++) h[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
    *(uint4 *)p = u;
}
__device__ __forceinline__ void st8(float *p, const float (&v)[8]) {
    *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
    *(float4 *)(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}

/* dst[0..8) = f * src[0..8) (16-byte aligned groups; dst may be src) */
template <typename T> __device__ __forceinline__ void scale8(T *dst, const T *src, float f) {
    float v[8];
    ld8(v, src);
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] *= f;
    st8(dst, v);
}

/* f(r, x) for every 8-column group x of rows r < rows (cols % 8 == 0), spread over the block */
template <class F> __device__ __forceinline__ void for_chunks8(int rows, int cols, F f) {
    const int cpr = cols >> 3;
    const FastDiv fd(cpr);
    for (int e = threadIdx.x; e < rows * cpr; e += blockDim.x) {
        const int r = fd.div(e);
        f(r, (e - r * cpr) * 8);
    }
}

/* Split mode: the key columns [c0, c0+cols) of the chunk's rows p = t*n + a sit in Kw (ld ldk), where
 * row (t, b) holds k_t at least in slice b (raw keys loaded for every row, or write keys). Writes,
 * for every row of every token, the read keys R(t,a)[x] = M[a, b(x)] k_t[x] into R (when R is not
 * NULL) and, with mask_kw, the write keys Kw(t,a)[x] = [a == b(x)] k_t[x] in place. Tokens >= ct
 * and columns >= K come out zero. One thread reads a token's 8-column group and then writes all of
 * that token's rows of it, so R may be Kw itself (R rebuilt in place from write keys). cols % 8 == 0. */
template <typename IT>
__device__ void split_keys(const Params &P, const ChunkCtx &c, IT *Kw, int ldk, IT *R, int ldr, int c0, int cols,
                           bool mask_kw) {
    const int n = P.n, cpr = cols >> 3, ntok = (GDP_CHUNK + n - 1) / n;
    /* cols is a tile width or KP: a power of two but for odd KP, where the division stays */
    const bool cpr_pow2 = (cpr & (cpr - 1)) == 0;
    const int cpr_log = __ffs(cpr) - 1;
    const float *M = P.mask + (int64_t)c.h * n * n;
    for (int e = threadIdx.x; e < ntok * cpr; e += blockDim.x) {
        const int t = cpr_pow2 ? e >> cpr_log : e / cpr, x = (e - t * cpr) * 8, X = c0 + x;
        float v[8];
        /* The group lies in one slice: one mask entry per row. A loop of its own: folding it into the
         * general loop below (a select on the slice array) made k_bwd_b_fast<true> spill 84 bytes. */
        if (P.wsl8 && X + 8 <= P.K) {
            const int bb = slice_of(P, X);
            if (t < c.ct) {
                ld8(v, Kw + (t * n + bb) * ldk + x);
            } else {
#pragma unroll
                for (int j = 0; j < 8; j++) v[j] = 0.f;
            }
            for (int a = 0; a < n; a++) {
                const int row = t * n + a;
                if (row >= GDP_CHUNK) break;
                float o[8];
                if (R) {
                    const float m = __ldg(M + a * n + bb);
#pragma unroll
                    for (int j = 0; j < 8; j++) o[j] = m * v[j];
                    st8(R + row * ldr + x, o);
                }
                if (mask_kw) {
#pragma unroll
                    for (int j = 0; j < 8; j++) o[j] = bb == a ? v[j] : 0.f;
                    st8(Kw + row * ldk + x, o);
                }
            }
            continue;
        }
        int b[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            b[j] = X + j < P.K ? slice_of(P, X + j) : -1;
            v[j] = t < c.ct && b[j] >= 0 ? tof(Kw[(t * n + b[j]) * ldk + x + j]) : 0.f;
        }
        for (int a = 0; a < n; a++) {
            const int row = t * n + a;
            if (row >= GDP_CHUNK) break;
            float o[8];
            if (R) {
#pragma unroll
                for (int j = 0; j < 8; j++) o[j] = b[j] >= 0 ? __ldg(M + a * n + b[j]) * v[j] : 0.f;
                st8(R + row * ldr + x, o);
            }
            if (mask_kw) {
#pragma unroll
                for (int j = 0; j < 8; j++) o[j] = b[j] == a ? v[j] : 0.f;
                st8(Kw + row * ldk + x, o);
            }
        }
    }
}

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

/* ---------------------------------------------------------------- A and T of one chunk */
/* Gs[64]: chunk-local inclusive cumsum of g per token (0 past ct), by a warp scan;
 * br[64]: row beta (0 past lc). */
template <typename IT> __device__ void load_gates(const Params &P, const ChunkCtx &c, float *Gs, float *br) {
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        float a = 0.f, b = 0.f;
        if (P.g) {
            if (lane < c.ct) a = P.g[(int64_t)(c.tok0 + lane) * P.H + c.h];
            if (lane + 32 < c.ct) b = P.g[(int64_t)(c.tok0 + lane + 32) * P.H + c.h];
        }
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float ya = __shfl_up_sync(0xffffffffu, a, o), yb = __shfl_up_sync(0xffffffffu, b, o);
            if (lane >= o) {
                a += ya;
                b += yb;
            }
        }
        b += __shfl_sync(0xffffffffu, a, 31);
        Gs[lane] = lane < c.ct ? a : 0.f;
        Gs[lane + 32] = lane + 32 < c.ct ? b : 0.f;
    }
    for (int p = threadIdx.x; p < 64; p += blockDim.x) br[p] = p < c.lc ? beta_at<IT>(P, c.tok0, c.h, p) : 0.f;
}

/* s += the 2 x 2 product of rows x, x + LD (16 entries each) and the 16 x 2 column pair at y
 * (rows LD apart), in ascending m */
template <int LD = LDA> __device__ __forceinline__ void mac_piece16(const float *x, const float *y, float (&s)[4]) {
#pragma unroll
    for (int m = 0; m < 16; m++) {
        const float x0 = x[m], x1 = x[LD + m], y0 = y[m * LD], y1 = y[m * LD + 1];
        s[0] += x0 * y0;
        s[1] += x0 * y1;
        s[2] += x1 * y0;
        s[3] += x1 * y1;
    }
}
/* Pieces of the block substitution, T_IJ = -T_II Z_IJ with Z_IJ = sum_{M=J}^{I-1} A_IM T_MJ: a thread
 * makes a 2 x 2 piece (pc: 8 x 8 pieces of a 16 x 16 block), so each operand read from shared
 * memory serves two products (the merges are bound by shared-memory loads). Z_IJ lives in Tf's
 * block (J, I) above the diagonal, which T never uses; it is one fp32 sum in ascending m, carried
 * through shared memory from one term M to the next. */
template <int LD = LDA> __device__ __forceinline__ void solve_z_term(const float *Af, float *Tf, int I, int J, int M, int pc) {
    const int r = (pc >> 3) * 2, cc = (pc & 7) * 2;
    float *z = Tf + (16 * J + r) * LD + 16 * I + cc;
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    if (M != J) s[0] = z[0], s[1] = z[1], s[2] = z[LD], s[3] = z[LD + 1];
    mac_piece16<LD>(Af + (16 * I + r) * LD + 16 * M, Tf + 16 * M * LD + 16 * J + cc, s);
    z[0] = s[0], z[1] = s[1], z[LD] = s[2], z[LD + 1] = s[3];
}
template <int LD = LDA> __device__ __forceinline__ void solve_t_block(float *Tf, int I, int J, int pc) {
    const int r = (pc >> 3) * 2, cc = (pc & 7) * 2;
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    mac_piece16<LD>(Tf + (16 * I + r) * LD + 16 * I, Tf + 16 * J * LD + 16 * I + cc, s);
    float *o = Tf + (16 * I + r) * LD + 16 * J + cc;
    o[0] = -s[0], o[1] = -s[1], o[LD] = -s[2], o[LD + 1] = -s[3];
}

/* The off-diagonal blocks of T on CUDA cores: the terms of Z_IJ as soon as their operands exist, at
 * most one block piece a thread in each of six steps (the order by distance I - J took 144 serial
 * multiply-adds a thread, this 96), in ascending m, each ended by a barrier. */
template <int LD> __device__ __forceinline__ void solve_merges_terms(const float *Af, float *Tf) {
    const int tid = threadIdx.x, q = tid >> 6, pc = tid & 63;
    /* q = tid / 64 picks the block a quarter of the threads works on (warp-uniform) */
    if (q < 3) solve_z_term<LD>(Af, Tf, q + 1, q, q, pc); /* Z_10, Z_21, Z_32 */
    else solve_z_term<LD>(Af, Tf, 3, 0, 0, pc);          /* Z_30, term 0 */
    __syncthreads();
    if (q < 3) solve_t_block<LD>(Tf, q + 1, q, pc); /* T_10, T_21, T_32 */
    else solve_z_term<LD>(Af, Tf, 2, 0, 0, pc);    /* Z_20, term 0 */
    __syncthreads();
    if (q == 0) solve_z_term<LD>(Af, Tf, 2, 0, 1, pc);      /* Z_20, term 1 */
    else if (q == 1) solve_z_term<LD>(Af, Tf, 3, 1, 1, pc); /* Z_31, term 1 */
    else if (q == 2) solve_z_term<LD>(Af, Tf, 3, 0, 1, pc); /* Z_30, term 1 */
    __syncthreads();
    if (q == 0) solve_t_block<LD>(Tf, 2, 0, pc);            /* T_20 */
    else if (q == 1) solve_z_term<LD>(Af, Tf, 3, 1, 2, pc); /* Z_31, term 2 */
    __syncthreads();
    if (q == 0) solve_t_block<LD>(Tf, 3, 1, pc);            /* T_31 */
    else if (q == 1) solve_z_term<LD>(Af, Tf, 3, 0, 2, pc); /* Z_30, term 2 */
    __syncthreads();
    if (q == 0) solve_t_block<LD>(Tf, 3, 0, pc); /* T_30 */
    __syncthreads();
}

/* The off-diagonal blocks on tensor cores, once T's diagonal blocks are in Tf (and visible): for
 * distance d = I - J = 1, 2, 3 in turn, Z_IJ = A[I, J..I-1] T[J..I-1, J] (one product 16(I - J)
 * deep) and T_IJ = -T_II Z_IJ, two warps a block (8 columns each), 3xTF32 so that T keeps about
 * fp32's precision. Z passes through Tf's block (J, I) above the diagonal, which T never uses, from
 * the C layout of one product to the B layout of the next (each warp reads only what it wrote).
 * Needs LD even (8-byte stores) and NTHREADS >= 192. */
template <int LD> __device__ __forceinline__ void solve_merges_tc(const float *Af, float *Tf) {
    static_assert(LD % 2 == 0, "float2 stores into Tf");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int d = 1; d <= 3; d++) {
        if (warp < 2 * (4 - d)) {
            const int J = warp >> 1, I = J + d, half = 8 * (warp & 1), n0 = 16 * J + half;
            float z[4] = {0.f, 0.f, 0.f, 0.f};
            warp_mma_f32x3(z, Af + 16 * I * LD + 16 * J, LD, Tf + 16 * J * LD + n0, LD, 16 * d);
            float *zs = Tf + 16 * J * LD + 16 * I + half; /* Z's 16 x 8 piece, rows LD apart */
            store2(zs + g * LD + 2 * tq, z[0], z[1]);
            store2(zs + (g + 8) * LD + 2 * tq, z[2], z[3]);
            __syncwarp();
            float t[4] = {0.f, 0.f, 0.f, 0.f};
            warp_mma_f32x3(t, Tf + 16 * I * LD + 16 * I, LD, zs, LD, 16);
            store2(Tf + (16 * I + g) * LD + n0 + 2 * tq, -t[0], -t[1]);
            store2(Tf + (16 * I + g + 8) * LD + n0 + 2 * tq, -t[2], -t[3]);
        }
        __syncthreads();
    }
}

/* After A (fp32, finished and visible to the block, strictly "earlier" entries only) is in Af:
 * Tf = (I + A)^-1, then conv(i, j, T_ij, T_i,j+1) for every pair (j even) on or below the diagonal
 * 16 x 16 blocks, and with `upper` also for those above it, with zeros. The diagonal blocks by
 * forward substitution in fp32 on threads 0-63, while the others run side(e, stride) for e from 0
 * (the caller's independent work); then the off-diagonal blocks by solve_merges_tc (TC: tensor
 * cores, 3xTF32; the fast prep) or solve_merges_terms (fp32 on CUDA cores; the generic kernels).
 * Tf is not cleared: the steps write every block they read. */
template <int LD = LDA, bool TC = false, class Conv, class Side>
__device__ void solve_T(const float *Af, float *Tf, bool upper, Conv conv, Side side) {
    const int tid = threadIdx.x;
    if (tid < 64) {
        const int b = tid >> 4, j = tid & 15, o = b * 16;
        float x[16];
#pragma unroll
        for (int i = 0; i < 16; i++) {
            float s = i == j ? 1.f : 0.f;
#pragma unroll
            for (int m = 0; m < i; m++) s -= Af[(o + i) * LD + o + m] * x[m];
            x[i] = i < j ? 0.f : s;
        }
#pragma unroll
        for (int i = 0; i < 16; i++) Tf[(o + i) * LD + o + j] = x[i];
    } else {
        side(tid - 64, NTHREADS - 64);
    }
    __syncthreads();
    if constexpr (TC)
        solve_merges_tc<LD>(Af, Tf);
    else
        solve_merges_terms<LD>(Af, Tf);
    /* the 10 blocks on or below the diagonal (16 rows x 8 pairs each), then the 6 above. Every
     * caller runs NTHREADS threads; a thread reads all its pairs of Tf before it converts any (conv's
     * stores may alias Tf as far as the compiler knows), so the reads are in flight together. */
    constexpr int KMAX = 16 * 128 / NTHREADS;
    const int n_pairs = (upper ? 16 : 10) * 128;
    int pos[KMAX];
    float2 tv[KMAX];
#pragma unroll
    for (int k = 0; k < KMAX; k++) {
        const int e = tid + k * NTHREADS, blk = e >> 7;
        int I, J;
        if (blk < 10) {
            I = blk < 1 ? 0 : blk < 3 ? 1 : blk < 6 ? 2 : 3; /* blk = I (I + 1) / 2 + J */
            J = blk - I * (I + 1) / 2;
        } else {
            const int l = blk - 10; /* (0,1) (0,2) (0,3) (1,2) (1,3) (2,3) */
            I = l < 3 ? 0 : l < 5 ? 1 : 2;
            J = l < 3 ? l + 1 : l < 5 ? l - 1 : 3;
        }
        const int i = 16 * I + ((e >> 3) & 15), j = 16 * J + (e & 7) * 2;
        pos[k] = i * 64 + j;
        tv[k] = e < n_pairs && J <= I ? make_float2(Tf[i * LD + j], Tf[i * LD + j + 1]) : make_float2(0.f, 0.f);
    }
#pragma unroll
    for (int k = 0; k < KMAX; k++)
        if (tid + k * NTHREADS < n_pairs) conv(pos[k] >> 6, pos[k] & 63, tv[k].x, tv[k].y);
    __syncthreads();
}

/* Builds A in Af (64 x LDA fp32) from the K tiles: A_ij = beta_i e^{G_i-G_j} <R_i, Kw_j>, j earlier.
 * With `prep`, also writes Kwd and P for the chunk (Pacc is scratch, b2 holds q). */
template <typename IT>
__device__ void build_A(const Params &P, const ChunkCtx &c, const float *Gs, const float *br, IT *b0, IT *b1, IT *b2,
                        float *Af, bool prep, float *Pacc) {
    const int tid = threadIdx.x, n = P.n;
    const bool hh = P.mode == GDP_MODE_HOUSEHOLDER;
    for (int e = tid; e < 64 * 64; e += blockDim.x) {
        Af[(e >> 6) * LDA + (e & 63)] = 0.f;
        if (prep) Pacc[(e >> 6) * LDA + (e & 63)] = 0.f;
    }
    const float GL = Gs[c.ct - 1];
    IT *Rb = hh ? b0 : b1;
    for (int kt = 0; kt < P.nkt; kt++) {
        const int c0 = kt * GDP_TILE, wk = min(GDP_TILE, P.KP - c0);
        load_kw<IT>(P, c, b0, c0, wk);
        if (!hh) load_r<IT>(P, c, b1, c0, wk, Gs, br, 0);
        if (prep) load_q<IT>(P, c, b2, LDT, c0, wk, nullptr);
        __syncthreads();
        if (prep) {
            IT *Kwd = (IT *)P.Kwd + c.ch * P.sW + c0;
            st_tile_f(Kwd, P.KP, b0, LDT, 64, wk,
                      [&](int r, int, IT v) { return fromf<IT>(r < c.lc ? expf(GL - Gs[r / n]) * tof(v) : 0.f); });
            gemm(P.Ctp, 64, smat(b2, LDT), smat(b0, LDT, true), wk, [&](int r, int cc) { return Pacc[r * LDA + cc]; },
                 [&](int r, int cc, float v) { Pacc[r * LDA + cc] = v; });
        }
        gemm(64, 64, smat(Rb, LDT), smat(b0, LDT, true), wk, [&](int r, int cc) { return Af[r * LDA + cc]; },
             [&](int r, int cc, float v) { Af[r * LDA + cc] = v; });
        __syncthreads();
    }
    for (int e = tid; e < 64 * 64; e += blockDim.x) {
        const int i = e >> 6, j = e & 63;
        float a = 0.f;
        if (i < c.lc && j < c.lc && earlier(P, i, j)) a = br[i] * expf(Gs[i / n] - Gs[j / n]) * Af[i * LDA + j];
        Af[i * LDA + j] = a;
    }
    if (prep) {
        IT *Pg = (IT *)P.P + c.ch * P.sP;
        for (int e = tid; e < P.Ctp * 64; e += blockDim.x) {
            const int t = e >> 6, s = e & 63;
            float val = 0.f;
            if (t < c.ct && s < c.lc && s / n <= t) val = P.scale * expf(Gs[t] - Gs[s / n]) * Pacc[t * LDA + s];
            Pg[e] = from_f32<IT>(val);
        }
    }
    __syncthreads();
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

/* ---------------------------------------------------------------- 3. state pass */
/* S (KP x bv, fp32) lives in registers; W, Kwd, U and the gates of the next chunk are prefetched
 * (cp.async) while the current one is processed when nst == 2. Forward (P.fuse_out): the output
 * is made here too, o = (scale e^G q) S_start + P Delta, and h and Delta are not stored; the
 * backward's recomputation stores h and Delta instead. */
template <typename IT> struct StateSmem {
    float *Gst[2];
    IT *Ws[2], *Kd[2], *Us[2], *Qs[2], *Ps[2], *Sop;
    __host__ __device__ static size_t carve(char *base, int KP, int bv, int nst, int Ctp, bool fused, StateSmem *s) {
        Carve cv(base);
        StateSmem t;
        for (int i = 0; i < 2; i++) {
            if (i < nst) {
                t.Gst[i] = cv.take<float>(64);
                t.Ws[i] = cv.take<IT>((size_t)64 * (KP + 8));
                t.Kd[i] = cv.take<IT>((size_t)64 * (KP + 8));
                t.Us[i] = cv.take<IT>((size_t)64 * (bv + 8));
                t.Qs[i] = fused ? cv.take<IT>((size_t)Ctp * (KP + 8)) : nullptr;
                t.Ps[i] = fused ? cv.take<IT>((size_t)Ctp * LDT) : nullptr;
            } else {
                t.Gst[i] = t.Gst[0], t.Ws[i] = t.Ws[0], t.Kd[i] = t.Kd[0], t.Us[i] = t.Us[0];
                t.Qs[i] = t.Qs[0], t.Ps[i] = t.Ps[0];
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
    const int KP = P.KP, ldk = KP + 8, lds = bv + 8, nst = P.nst, Ctp = P.Ctp;
    const bool fused = P.fuse_out;
    StateSmem<IT> S;
    StateSmem<IT>::carve(smem, KP, bv, nst, Ctp, fused, &S);
    const int64_t st = ((int64_t)s * P.H + h) * P.K * P.V;
    Acc acc;
    acc_each(acc, KP, w, [&](int r, int c, float &v) {
        v = P.h0 && r < P.K && v0 + c < P.V ? P.h0[st + (int64_t)r * P.V + v0 + c] : 0.f;
        S.Sop[r * lds + c] = fromf<IT>(v);
    });
    /* the chunk table here: computing the chunks (seq_chunk) made k_state<bf16> spill 28 bytes */
    const int cbeg = P.seq[s].c0, cend = P.seq[s + 1].c0;
    auto prefetch = [&](int ci, int b, int ct, int tok0) {
        const int64_t ch = (int64_t)ci * P.H + h;
        cp_tile(b ? S.Gst[1] : S.Gst[0], 64, P.G + ch * GDP_CHUNK, 64, 1, 64);
        cp_tile(b ? S.Ws[1] : S.Ws[0], ldk, (const IT *)P.W + ch * P.sW, KP, 64, KP);
        cp_tile(b ? S.Kd[1] : S.Kd[0], ldk, (const IT *)P.Kwd + ch * P.sW, KP, 64, KP);
        cp_tile(b ? S.Us[1] : S.Us[0], lds, (const IT *)P.U + ch * P.sU + v0, P.VP, 64, w);
        if (fused) {
            cp_tile(b ? S.Ps[1] : S.Ps[0], LDT, (const IT *)P.P + ch * P.sP, 64, Ctp, 64);
            cp_rows(b ? S.Qs[1] : S.Qs[0], ldk, Ctp, KP, 0, P.K, P.veck, [&](int t) {
                return t < ct ? (const IT *)P.q + ((int64_t)(tok0 + t) * P.H + h) * P.K : (const IT *)nullptr;
            });
        }
        cp_commit();
    };
    GdpChunkInfo nx = cbeg < cend ? P.chunk[cbeg] : GdpChunkInfo{0, 0, 0, 0};
    if (cbeg < cend && nst == 2) prefetch(cbeg, 0, nx.ct, nx.tok0);
    for (int ci = cbeg; ci < cend; ci++) {
        const int b = nst == 2 ? (ci - cbeg) & 1 : 0;
        const int ct = nx.ct, tok0 = nx.tok0;
        if (ci + 1 < cend) nx = P.chunk[ci + 1];
        if (nst == 2) {
            issue_next_wait_this(ci + 1 < cend, [&] { prefetch(ci + 1, b ^ 1, nx.ct, nx.tok0); });
        } else {
            prefetch(ci, 0, ct, tok0);
            cp_wait<0>();
        }
        const int64_t ch = (int64_t)ci * P.H + h;
        const float *Gs = b ? S.Gst[1] : S.Gst[0];
        IT *Us = b ? S.Us[1] : S.Us[0], *Wb = b ? S.Ws[1] : S.Ws[0], *Kb = b ? S.Kd[1] : S.Kd[0];
        IT *Qb = b ? S.Qs[1] : S.Qs[0], *Pb = b ? S.Ps[1] : S.Ps[0];
        __syncthreads();
        const float gL = gate_exp(Gs[ct - 1]);
        if (fused) {
            for_chunks8(ct, KP, [&](int t, int x) { scale8(Qb + t * ldk + x, Qb + t * ldk + x, P.scale * gate_exp(Gs[t])); });
        } else {
            st_tile((IT *)P.h + ch * P.sH + v0, P.VP, S.Sop, lds, KP, w);
        }
        gemm(64, w, smat(Wb, ldk), smat(S.Sop, lds), KP, Zero(),
             [&](int r, int c, float v) { Us[r * lds + c] = fromf<IT>(tof(Us[r * lds + c]) - v); });
        __syncthreads();
        if (fused) {
            IT *o = (IT *)P.o;
            gemm(Ctp, w, smat(Qb, ldk), smat(S.Sop, lds), KP, smat(Pb, LDT), smat(Us, lds), 64, Zero(),
                 [&](int r, int c, float v) {
                     if (r < ct && v0 + c < P.V) o[((int64_t)(tok0 + r) * P.H + h) * P.V + v0 + c] = fromf<IT>(v);
                 });
        } else {
            st_tile((IT *)P.D + ch * P.sD + v0, P.VP, Us, lds, 64, w);
        }
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

/* ---------------------------------------------------------------- 3b/5b. sequential passes, bf16 fast path */
/* k_state (unfused: h and Delta stored) and k_dh again with every size fixed at compile time:
 * KP in {64, 128}, a V tile of BV in {32, 64} columns, CTP (padded tokens per chunk) in
 * {16, 32, 64}. ncu (H 6, n 2) showed the generic k_state issue-bound (an instruction every 2.4
 * cycles per scheduler, 7 cycles a warp) with 18% occupancy: runtime tile loops, per-element
 * lambdas and divisions in the copy loops cost more than the products. Here the products unroll
 * (ldmatrix + mma.sync, as gdp_mma.cuh), the copy offsets are shifts, and each step has two
 * barriers. The same products in the same order as the generic kernels, so the same roundings. */
typedef __nv_bfloat16 bf16_t;

/* Warp tiles of a 64 x BV product (MT1 row tiles of 16 and NT1 n8 tiles a warp) and of a KP x BV
 * one (MT2, NT2). Where a warp can take two row tiles (32 rows), it does: an operand fragment then
 * serves two products, and the shared-memory reads of these passes (their bound with one CTA an
 * SM) fall: at KP = BV = 128 from 448 to 368 KB a state step. */
template <int KP, int BV> struct SeqTiles {
    static constexpr int MT1 = BV == 128 ? 2 : 1, NT1 = MT1 == 2 ? 4 : BV / 16; /* 64 x BV */
    static constexpr int RG2 = KP / 32, NT2W = BV / 8 / (8 / RG2);            /* KP x BV, 32-row tiles */
    static constexpr int MT2 = NT2W >= 2 ? 2 : 1, WN2 = 8 / (KP / (16 * MT2)), NT2 = BV / 8 / WN2;
    int m1, n1, m2, n2;
    __device__ __forceinline__ SeqTiles() {
        const int warp = threadIdx.x >> 5;
        if (MT1 == 2) {
            m1 = (warp & 1) * 32;
            n1 = (warp >> 1) * 32;
        } else {
            m1 = (warp & 3) * 16;
            n1 = (warp >> 2) * (BV / 2);
        }
        constexpr int R2 = KP / (16 * MT2); /* row groups */
        m2 = (warp % R2) * 16 * MT2;
        n2 = (warp / R2) * (BV / WN2);
    }
};

/* f(r, c, v&) for every element of a warp's 16 x 8*NT fragment at (m0, n0) (the mma C layout) */
template <int NT, class F> __device__ __forceinline__ void frag_each(float (&acc)[NT][4], int m0, int n0, F f) {
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) f(m0 + g + (e >> 1) * 8, n0 + nt * 8 + 2 * tq + (e & 1), acc[nt][e]);
}
/* The gated masks of the chunk products, on a warp's fragment at (m0, n0), branch-free: the gate
 * factor of a masked entry may be inf, but it is selected away, never multiplied in (a branch per
 * element, each with its gate loads and exp, is what the compiler made of the select-free form).
 * frag_gate_decay: v = f_r e^{g_r - g_c} v where live(r, c), else 0, with (g_r, f_r) read once a row.
 *   frag_causal_decay: rows t tokens, columns s chunk rows: v = scale e^{G_t - G_tok(s)} v where
 *     t < ct, s < lc and tok(s) <= t, else 0 (P and dS).
 *   frag_earlier_decay: rows and columns chunk rows: v = f(i) e^{G_tok(i) - G_tok(j)} v where i < lc
 *     and row j is earlier than row i (then j < lc too), else 0 (prep's A; bwd_b's dA takes
 *     frag_gate_decay with its own token and order keys, compile-time in split mode's lanes kinds). */
template <int NT, class RowGate, class ColGate, class Live>
__device__ __forceinline__ void frag_gate_decay(float (&acc)[NT][4], int m0, int n0, RowGate row_gate, ColGate col_gate,
                                                Live live) {
    const int lane = threadIdx.x & 31, r0 = m0 + (lane >> 2), c0 = n0 + 2 * (lane & 3);
#pragma unroll
    for (int rh = 0; rh < 2; rh++) {
        const int r = r0 + 8 * rh;
        const float2 gf = row_gate(r); /* (gate, factor) of row r */
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e1 = 0; e1 < 2; e1++) {
                const int col = c0 + 8 * nt + e1;
                float &v = acc[nt][2 * rh + e1];
                const float x = gf.y * gate_exp(gf.x - col_gate(col)) * v;
                v = live(r, col) ? x : 0.f;
            }
    }
}
template <int NT>
__device__ __forceinline__ void frag_causal_decay(const Params &P, float (&acc)[NT][4], const float *Gs, int m0, int n0,
                                                  int ct, int lc) {
    frag_gate_decay(
        acc, m0, n0, [&](int t) { return make_float2(Gs[t], P.scale); }, [&](int s) { return Gs[tokof(P, s)]; },
        [&](int t, int s) { return t < ct && s < lc && tokof(P, s) <= t; });
}
/* (the mask is earlier() spelled out with the mode test hoisted: see chunk_ctx on calling it) */
template <int NT, class RowF>
__device__ __forceinline__ void frag_earlier_decay(const Params &P, float (&acc)[NT][4], const float *Gs, int m0, int n0,
                                                   int lc, RowF row_factor) {
    const bool hh = P.mode == GDP_MODE_HOUSEHOLDER;
    frag_gate_decay(
        acc, m0, n0, [&](int i) { return make_float2(Gs[tokof(P, i)], row_factor(i)); },
        [&](int j) { return Gs[tokof(P, j)]; },
        [&](int i, int j) { return i < lc && (hh ? j < i : tokof(P, j) < tokof(P, i)); });
}
/* a warp's fragment set to zero */
template <int NT> __device__ __forceinline__ void frag_zero(float (&acc)[NT][4]) {
#pragma unroll
    for (int i = 0; i < NT * 4; i++) acc[i >> 2][i & 3] = 0.f;
}
/* each pair of adjacent columns of a warp's 16 x 8*NT fragment at (m0, n0), as bf16, to at(r, c) */
template <int NT, class At>
__device__ __forceinline__ void frag_store_pairs(const float (&acc)[NT][4], int m0, int n0, At at) {
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
            *(__nv_bfloat162 *)at(m0 + g + hh * 8, n0 + nt * 8 + 2 * tq) =
                __floats2bfloat162_rn(acc[nt][hh * 2], acc[nt][hh * 2 + 1]);
}
/* the fragment, rounded to bf16 pairs, into a row-major bf16 tile (shared or global memory) */
template <int NT>
__device__ __forceinline__ void frag_store_bf16(const float (&acc)[NT][4], bf16_t *s, int lds, int m0, int n0) {
    frag_store_pairs(acc, m0, n0, [&](int r, int c) { return s + (r * lds + c); });
}
__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(const uint32_t *)&v;
}
/* frag_store_pairs into shared memory by stmatrix, a 16 x 16 piece an instruction where the pairs
 * took eight stores (at(r, c) for c a multiple of 8 must start 16 aligned bytes holding columns
 * c .. c + 7 of row r, which every tile view here gives). H200, H 16 (session 28, call 4): prep
 * -2% (its W and U staging), the others within noise, and k_state_fast's merged step 3-5% slower,
 * so its state copy keeps the fragment stores. */
template <int NT, class At>
__device__ __forceinline__ void frag_stsm_pairs(const float (&acc)[NT][4], int m0, int n0, At at) {
    if constexpr (NT % 2) {
        frag_store_pairs(acc, m0, n0, at);
    } else {
        const int lane = threadIdx.x & 31, j = lane >> 3;
        const int r = m0 + (j & 1) * 8 + (lane & 7);
#pragma unroll
        for (int np = 0; np < NT / 2; np++)
            stsm_x4(at(r, n0 + (2 * np + (j >> 1)) * 8), bf16x2_bits(acc[2 * np][0], acc[2 * np][1]),
                    bf16x2_bits(acc[2 * np][2], acc[2 * np][3]), bf16x2_bits(acc[2 * np + 1][0], acc[2 * np + 1][1]),
                    bf16x2_bits(acc[2 * np + 1][2], acc[2 * np + 1][3]));
    }
}
/* frag_store_bf16 into a shared tile */
template <int NT>
__device__ __forceinline__ void frag_stsm_bf16(const float (&acc)[NT][4], bf16_t *s, int lds, int m0, int n0) {
    frag_stsm_pairs(acc, m0, n0, [&](int r, int c) { return s + (r * lds + c); });
}
/* a K x V fp32 state (h0, dht; NULL: zeros) into the fragment; and the fragment back out (ht, dh0) */
template <int NT>
__device__ __forceinline__ void frag_load_state(float (&acc)[NT][4], const float *src, const Params &P, int64_t st0,
                                                int v0, int m0, int n0) {
    frag_each(acc, m0, n0, [&](int r, int c, float &v) {
        v = src && r < P.K && v0 + c < P.V ? src[st0 + (int64_t)r * P.V + v0 + c] : 0.f;
    });
}
template <int NT>
__device__ __forceinline__ void frag_store_state(float (&acc)[NT][4], float *dst, const Params &P, int64_t st0, int v0,
                                                 int m0, int n0) {
    if (dst)
        frag_each(acc, m0, n0, [&](int r, int c, float &v) {
            if (r < P.K && v0 + c < P.V) dst[st0 + (int64_t)r * P.V + v0 + c] = v;
        });
}

/* Views of a bf16 tile in shared memory: at(r, c) is element (r, c); c a multiple of 8 gives a
 * 16-byte-aligned chunk of 8 consecutive columns, which is all ldmatrix needs. RowMajor: row r at
 * p + r ld. Swz128<ROWS>: the layout of TMA's 128-byte-swizzled boxes, COLS / 64 boxes of ROWS x 64
 * (128-byte rows) side by side, chunk j of row r stored at chunk j ^ (r & 7), base 1024-aligned;
 * ldmatrix's 8 rows of one chunk column then fall in 8 different bank groups. */
struct RowMajor {
    bf16_t *p;
    int ld;
    __device__ __forceinline__ bf16_t *at(int r, int c) const { return p + r * ld + c; }
};
/* Split mode's keys placed by slice (row (t, b) holds token t's key at least on slice b; n a power of
 * two): row j of this view is row (t_j, b) for the fixed slice b, i.e. token j / n's key there, so
 * that products over slice b's columns take the keys as they were loaded, with M applied to the
 * other operand or the result (no read-key tile R is built). tmask = ~(n - 1). */
struct TokenSliceRows {
    bf16_t *p;
    int ld, tmask, b;
    __device__ __forceinline__ bf16_t *at(int r, int c) const { return p + ((r & tmask) + b) * ld + c; }
};
template <int ROWS> struct Swz128 {
    bf16_t *p;
    __device__ __forceinline__ bf16_t *at(int r, int c) const {
        return p + (c >> 6) * (ROWS * 64) + r * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3) + (c & 7);
    }
};

/* A bf16 tile (any view) minus a warp's MT x NT fragments at (m0, n0), in place, rounded once */
template <int MT, int NT, class View>
__device__ __forceinline__ void frags_sub_from(View X, const float (&F)[MT][NT][4], int m0, int n0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                __nv_bfloat162 *px = (__nv_bfloat162 *)X.at(m0 + 16 * mt + g + hh * 8, n0 + nt * 8 + 2 * tq);
                const float2 x = __bfloat1622float2(*px);
                *px = __floats2bfloat162_rn(x.x - F[mt][nt][hh * 2], x.y - F[mt][nt][hh * 2 + 1]);
            }
}

/* The sequential passes' state, a warp's MT row tiles of 16 at (m0, n0): in from a K x V fp32 state
 * (src; NULL: zeros) with its bf16 copy to at(r, c) (as frag_store_pairs), scaled, and out to dst */
template <int MT, int NT, class At>
__device__ __forceinline__ void state_frags_in(float (&S)[MT][NT][4], const float *src, const Params &P, int64_t st0, int v0,
                                               int m0, int n0, At at) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        frag_load_state(S[mt], src, P, st0, v0, m0 + 16 * mt, n0);
        frag_store_pairs(S[mt], m0 + 16 * mt, n0, at);
    }
}
/* v *= f(r) over a warp's 16 x 8*NT fragment at row m0 (the mma C layout): a thread's two rows, f
 * called once for each (where frag_each called it, an exp and a shared load, for every element) */
template <int NT, class RowF> __device__ __forceinline__ void frag_scale_rows(float (&acc)[NT][4], int m0, RowF f) {
    const int r0 = m0 + ((threadIdx.x & 31) >> 2);
    const float f0 = f(r0), f1 = f(r0 + 8);
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        acc[nt][0] *= f0;
        acc[nt][1] *= f0;
        acc[nt][2] *= f1;
        acc[nt][3] *= f1;
    }
}
template <int MT, int NT> __device__ __forceinline__ void frag_scale(float (&S)[MT][NT][4], float f) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) S[mt][nt][e] *= f;
}
template <int MT, int NT>
__device__ __forceinline__ void state_frags_out(float (&S)[MT][NT][4], float *dst, const Params &P, int64_t st0, int v0, int m0,
                                                int n0) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++) frag_store_state(S[mt], dst, P, st0, v0, m0 + 16 * mt, n0);
}

/* columns n .. n + 15 of B at depth k0 as the mma B fragments of two n8 tiles (b[0], b[1]: columns
 * n .. n + 7; b[2], b[3]: n + 8 .. n + 15): B stored [k][n] (BT false) or [n][k] (BT true) */
template <bool BT, class VB> __device__ __forceinline__ void ldsm_b(uint32_t (&b)[4], VB B, int n, int k0) {
    const int lane = threadIdx.x & 31, mi = lane >> 3, lr = lane & 7;
    if (BT)
        ldsm_x4(b[0], b[1], b[2], b[3], B.at(n + (mi >> 1) * 8 + lr, k0 + (mi & 1) * 8));
    else
        ldsm_x4_t(b[0], b[1], b[2], b[3], B.at(k0 + (mi & 1) * 8 + lr, n + (mi >> 1) * 8));
}
/* acc[MT][NT][4] += A (MT row tiles of 16, KD deep) x B (KD x 8*NT at n0), where load_a(mt, k0, a)
 * puts row tile mt's 16 x 16 A fragment at depth k0 into a (so the row tiles may come from different
 * tiles, or some transposed). B: stored [k][n] (BT false) or [n][k] (BT true). Each B fragment serves
 * the MT row tiles. NB: B negated (its sign bits flipped as loaded). */
template <int MT, int NT, bool BT = false, bool NB = false, class LoadA, class VB>
__device__ __forceinline__ void warp_mma_rows(float (&acc)[MT][NT][4], LoadA load_a, VB B, int kd, int n0) {
    static_assert(NT % 2 == 0, "B fragments are loaded two n8 tiles at a time");
#pragma unroll 4
    for (int k0 = 0; k0 < kd; k0 += 16) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) load_a(mt, k0, a[mt]);
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldsm_b<BT>(b, B, n0 + np * 16, k0);
            if (NB)
#pragma unroll
                for (int i = 0; i < 4; i++) b[i] ^= 0x80008000u;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_bf16(acc[mt][np * 2], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[0], b[1]);
                mma_bf16(acc[mt][np * 2 + 1], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[2], b[3]);
            }
        }
    }
}
/* An mma A fragment's register pairs (depths k0 + 2 tq + e, and + 8) times s0 (e = 0) and s1 (e = 1),
 * rounded once: split mode's M (or a 0/1 slice mask) on the rows of the keys a product contracts */
__device__ __forceinline__ void frag_a_scale_pairs(uint32_t (&a)[4], float s0, float s1) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&a[i]));
        const __nv_bfloat162 r = __floats2bfloat162_rn(f.x * s0, f.y * s1);
        a[i] = *reinterpret_cast<const uint32_t *>(&r);
    }
}
/* Split mode (n a power of two): the slices of this thread's register pair in a fragment, depths or
 * columns 2 tq and 2 tq + 1 mod n */
__device__ __forceinline__ int2 pair_slices(int n) {
    const int tq = threadIdx.x & 3;
    return make_int2((2 * tq) & (n - 1), (2 * tq + 1) & (n - 1));
}
/* M[a, b] of head h for the slices a of this thread's register pairs, the factors
 * frag_a_scale_pairs and the products' column scalings take */
__device__ __forceinline__ float2 mask_pair(const Params &P, int h, int b, int n) {
    const int2 a = pair_slices(n);
    const float *Mb = P.mask + (int64_t)h * n * n + b; /* M[a, b] at Mb[a n] */
    return make_float2(__ldg(Mb + a.x * n), __ldg(Mb + a.y * n));
}
/* row tile m (16 rows) of A at depth k0 as an mma A fragment: A row-major [m][k] (AT false) or stored
 * transposed as [k][m] (AT true) */
template <bool AT, class VA> __device__ __forceinline__ void ldsm_a(uint32_t (&a)[4], VA A, int m, int k0) {
    const int lane = threadIdx.x & 31, mi = lane >> 3, lr = lane & 7;
    if (AT)
        ldsm_x4_t(a[0], a[1], a[2], a[3], A.at(k0 + (mi >> 1) * 8 + lr, m + (mi & 1) * 8));
    else
        ldsm_x4(a[0], a[1], a[2], a[3], A.at(m + lr + (mi & 1) * 8, k0 + (mi >> 1) * 8));
}
/* the same with the MT row tiles of one tile A, 16 MT rows at m0 */
template <int MT, int NT, bool AT, bool BT = false, bool NB = false, class VA, class VB>
__device__ __forceinline__ void warp_mma_v(float (&acc)[MT][NT][4], VA A, VB B, int kd, int m0, int n0) {
    warp_mma_rows<MT, NT, BT, NB>(
        acc, [&](int mt, int k0, uint32_t (&a)[4]) { ldsm_a<AT>(a, A, m0 + 16 * mt, k0); }, B, kd, n0);
}
/* the same on row-major tiles */
template <int MT, int NT, bool AT, bool BT = false>
__device__ __forceinline__ void warp_mma_mt(float (&acc)[MT][NT][4], const bf16_t *A, int lda, const bf16_t *B, int ldb,
                                            int kd, int m0, int n0) {
    warp_mma_v<MT, NT, AT, BT>(acc, RowMajor{(bf16_t *)A, lda}, RowMajor{(bf16_t *)B, ldb}, kd, m0, n0);
}
/* the same for one row tile: acc[NT][4] at m0 */
template <int NT, bool AT, bool BT = false>
__device__ __forceinline__ void warp_mma(float (&acc)[NT][4], const bf16_t *A, int lda, const bf16_t *B, int ldb,
                                         int kd, int m0, int n0) {
    warp_mma_mt<1, NT, AT, BT>(reinterpret_cast<float(&)[1][NT][4]>(acc), A, lda, B, ldb, kd, m0, n0);
}

/* f(r, c) for each 8-element (16-byte) piece of a ROWS x COLS bf16 tile, spread over the block */
template <int ROWS, int COLS, class F> __device__ __forceinline__ void for_pieces16(F f) {
    constexpr int CPR = COLS / 8, N = ROWS * CPR;
#pragma unroll
    for (int i = 0; i < (N + NTHREADS - 1) / NTHREADS; i++) {
        const int e = threadIdx.x + i * NTHREADS;
        if (N % NTHREADS == 0 || e < N) f(e / CPR, (e % CPR) * 8);
    }
}
/* shared -> global with 16-byte moves; xor_mask 0x80008000 negates (flips the sign bits) */
template <int ROWS, int COLS>
__device__ __forceinline__ void store_tile16(bf16_t *g, int64_t ldg, const bf16_t *s, int lds, uint32_t xor_mask = 0) {
    for_pieces16<ROWS, COLS>([&](int r, int c) {
        uint4 u = *(const uint4 *)(s + r * lds + c);
        u.x ^= xor_mask, u.y ^= xor_mask, u.z ^= xor_mask, u.w ^= xor_mask;
        *(uint4 *)(g + r * ldg + c) = u;
    });
}
/* A 64 x 128 bf16 staging tile of 256-byte rows whose 16-byte chunks are XOR-swizzled by row
 * (chunk c of row r at c ^ (r & 7)), so fragment stores and 16-byte reads meet no bank conflicts. */
__device__ __forceinline__ int swz128(int r, int c) { return r * 128 + (((c >> 3) ^ (r & 7)) << 3) + (c & 7); }
template <int NT>
__device__ __forceinline__ void frag_stage_bf16(const float (&acc)[NT][4], bf16_t *s, int m0, int n0) {
    frag_stsm_pairs(acc, m0, n0, [&](int r, int c) { return s + swz128(r, c); });
}
/* columns c0 .. c0 + COLS - 1 (COLS + c0 <= 128) of the staged 64-row tile to global rows (stride
 * ldg), 16 bytes a move */
template <int COLS> __device__ __forceinline__ void unstage_tile(bf16_t *g, int64_t ldg, const bf16_t *s, int c0 = 0) {
    for_pieces16<64, COLS>([&](int r, int c) { *(uint4 *)(g + r * ldg + c) = *(const uint4 *)(s + swz128(r, c0 + c)); });
}
/* global -> shared by cp.async */
template <int ROWS, int COLS> __device__ __forceinline__ void cp_tile16(bf16_t *s, int lds, const bf16_t *g, int64_t ldg) {
    for_pieces16<ROWS, COLS>([&](int r, int c) { cp_async16(s + r * lds + c, g + r * ldg + c); });
}
/* ROWS rows of COLS bf16 by cp.async, row r from rowp(r) (16-byte aligned); rows r >= nrows become
 * zeros */
template <int ROWS, int COLS, class RowP>
__device__ __forceinline__ void cp_rows_of(bf16_t *s, int lds, RowP rowp, int nrows) {
    for_pieces16<ROWS, COLS>([&](int r, int c) {
        if (r < nrows)
            cp_async16(s + r * lds + c, rowp(r) + c);
        else
            *(uint4 *)(s + r * lds + c) = make_uint4(0, 0, 0, 0);
    });
}
/* CTP token rows (stride row_stride) by cp.async; rows t >= ct become zeros */
template <int CTP, int COLS>
__device__ __forceinline__ void cp_token_rows(bf16_t *s, int lds, const bf16_t *g, int64_t row_stride, int ct) {
    cp_rows_of<CTP, COLS>(s, lds, [&](int t) { return g + t * row_stride; }, ct);
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
    static size_t bytes(bool split_r, int VP) { /* split_r: split mode building R (not RAW) */
        const size_t qv = (size_t)CTP * LDK > (size_t)64 * (VP + 8) ? (size_t)CTP * LDK : (size_t)64 * (VP + 8);
        return OFF_KW + (size_t)(split_r && !R_IN_TF ? 2 : 1) * 64 * LDK * 2 + qv * 2;
    }
};

/* RAW (split mode, launched where n is a power of two whose slices hold whole column quarters):
 * the keys stay as loaded, see keys_raw below. A template argument: the same code behind a runtime
 * flag made Householder mode's prep 3-7% slower (H200, H 16; session 29, call 3). */
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
     * k_bwd_ab; session 35) */
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
 * wavefronts; at H 16 it is 10-16% faster (n_h 2: 0.251 -> 0.222 ms; session 28, call 2). The saving
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
             * this pass was 3-5% slower (session 28, call 4). */
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

/* an A fragment (16 rows, depth 16 ks .. 16 ks + 15) from a warp's fp32 accumulators whose columns
 * are that depth (n8 tiles 2 ks and 2 ks + 1), rounded to bf16 */
template <int NT> __device__ __forceinline__ void frag_a_of(const float (&F)[NT][4], int ks, uint32_t (&a)[4]) {
    a[0] = bf16x2_bits(F[2 * ks][0], F[2 * ks][1]);
    a[1] = bf16x2_bits(F[2 * ks][2], F[2 * ks][3]);
    a[2] = bf16x2_bits(F[2 * ks + 1][0], F[2 * ks + 1][1]);
    a[3] = bf16x2_bits(F[2 * ks + 1][2], F[2 * ks + 1][3]);
}
/* A fragments a[KS][4] (16 rows at column c0 of a tile, depth = the tile's rows 16 ks ..) stored
 * transposed into rows 16 ks .. of the tile's columns c0 .. c0 + 15: the inverse of ldsm_a<true> */
template <int KS, class View> __device__ __forceinline__ void frags_a_store_t(View X, int c0, const uint32_t (&a)[KS][4]) {
    const int lane = threadIdx.x & 31, mi = lane >> 3, lr = lane & 7;
#pragma unroll
    for (int ks = 0; ks < KS; ks++) stsm_x4_t(X.at(16 * ks + (mi >> 1) * 8 + lr, c0 + (mi & 1) * 8), a[ks][0], a[ks][1], a[ks][2], a[ks][3]);
}
/* rows r < nrows of ROWS rows x 16 columns of a shared tile (from s) to global rows (from g, stride
 * ldg), by one warp, 16 bytes a move */
template <int ROWS>
__device__ __forceinline__ void warp_rows16_out(bf16_t *g, int64_t ldg, const bf16_t *s, int lds, int nrows = ROWS) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < ROWS / 16; i++) {
        const int p = lane + 32 * i, r = p >> 1, c = (p & 1) * 8;
        if (r < nrows) *(uint4 *)(g + r * ldg + c) = *(const uint4 *)(s + r * lds + c);
    }
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

/* The state pass with tensor copies (TMA, sm_90): a stage is ~9 box copies issued by one thread on
 * one mbarrier, instead of 15 cp.async a thread (1.3k of a step's 8k clocks at K = V = 128, session
 * 23's trace); h and Delta leave by tensor stores. Every tile is in the 128-byte-swizzled box
 * layout (Swz128), which the fragment loads and stores address through. K == KP == 128, V == VP,
 * BV 64 or 128; q's rows past the chunk's tokens hold the next tokens (the output scales them by 0).
 * Taken where seq_tma says (the saving forward's pass, unless GDP_STATE_TMA says otherwise). */
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

/* The state pass by V rows on wgmma (k_state_wg; K = KP = 128, V tile 128, sm_90a; GDP_STATE_WG=0
 * turns it off). Every product of a step multiplies h or Delta from the left, so the V columns are
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
 * backward's recompute), so saved and recomputed h and Delta are the same bits. H200, H 16, B 8
 * (session 31): the plain forward's pass n_h 3 0.317 -> 0.202 ms, n_h 2 0.221 -> 0.152; the passes
 * that store h and Delta unchanged (0.34-0.40, bound by those bytes). The same dataflow on mma.sync
 * (branch wip/state-vt: each warp loads all of W, q, Kwd and P by ldmatrix) was no faster than
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
                asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar + 2)) : "memory");
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

__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

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
 * shared wavefronts at H 16, n_h 2, session 27's profile; this loads 24 fewer fragments a warp and
 * drops the two 64 x 64 tile reads of <h, dh>, ~16% of its wavefronts. H200, H 16: 0.468-0.470 ->
 * 0.436-0.437 ms at n_h 2, 0.689-0.690 -> 0.653-0.655 at n_h 3; session 28, call 5.) */
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

/* KT_X: the grid is (K tiles, H, chunks), a chunk's K tiles side by side (block_chunk_head); false:
 * (H, chunks, K tiles), each K tile of every chunk in turn (GDP_BWD_A_GRID=kz, for A/B runs) */
template <int CTP, bool KT_X> __global__ void __launch_bounds__(NTHREADS, 2) k_bwd_a_fast(Params P) {
    using SM = BwdAFastSmem<CTP>;
    constexpr int QW = SM::QW, NTQ = QW / 8, QCT = SM::QCT;
    /* with 4 warp tiles a CTP x 64 product, warps 0-3 take dQ and 4-7 dS; with 8, every warp both */
    constexpr bool QSPLIT = (CTP / 16) * QCT == 4;
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (!chunk_ctx<true, KT_X>(P, c)) return;
    const int kt = KT_X ? blockIdx.x : blockIdx.z, c0 = kt * GDP_TILE, ct = c.ct, lc = c.lc;
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
         * in the V loop's first step it made k_bwd_ab<16, 1> spill 140 bytes; session 35) */
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
template <int CTP> __global__ void __launch_bounds__(NTHREADS, 2) k_bwd_a_kres(Params P) {
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (chunk_ctx(P, c)) bwd_a_kres_chunk<CTP>(P, c, smem);
}

/* dg for the chunk's tokens from the per-row gate gradients dGr[64]: per-token sums, then a reverse
 * inclusive scan over the tokens (warp 0). */
__device__ void dg_scan(const Params &P, const ChunkCtx &c, const float *dGr) {
    const int lane = threadIdx.x, n = P.n;
    float a = 0.f, b = 0.f;
    for (int j = 0; j < n; j++) {
        if (lane < c.ct) a += dGr[lane * n + j];
        if (lane + 32 < c.ct) b += dGr[(lane + 32) * n + j];
    }
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float ya = __shfl_down_sync(0xffffffffu, a, o), yb = __shfl_down_sync(0xffffffffu, b, o);
        if (lane + o < 32) {
            a += ya;
            b += yb;
        }
    }
    a += __shfl_sync(0xffffffffu, b, 0);
    if (lane < c.ct) P.dg[(int64_t)(c.tok0 + lane) * P.H + c.h] = a;
    if (lane + 32 < c.ct) P.dg[(int64_t)(c.tok0 + lane + 32) * P.H + c.h] = b;
}

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
constexpr int GDP_SPLIT_FAST_RR = 64, GDP_SPLIT_FAST_N = 8; /* n * n <= RR, so n <= N */
static_assert(GDP_SPLIT_FAST_N * GDP_SPLIT_FAST_N == GDP_SPLIT_FAST_RR, "the largest n of the split fast paths");
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

/* ---------------------------------------------------------------- 7c. bwd_b, fast path */
/* k_bwd_b_hh for bf16 with K and V multiples of 64 (K == KP, V == VP) and 16-byte aligned rows:
 * 64 x 64 tiles at compile time; every product's fragment stays in registers through its epilogue
 * (dX_v, E and dK_w no longer pass through fp32 shared tiles in householder mode), and each thread
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
 * tiles in shared memory (any n); split mode with n = 2 or 4 (BWDB_SPLIT_LANES + n) summing them
 * across the lanes that hold them: the n rows of a token lie in one 8-row half of a 16-row fragment,
 * in the lanes whose bits 2 .. 1 + log2 n differ. n is a template argument there: session 27's form
 * with a runtime log2 n (loops in every element, versioned by the compiler) doubled the kernel's
 * code and was 16% slower than the tiles. */
enum { BWDB_HOUSEHOLDER = 0, BWDB_SPLIT_TILES = 1, BWDB_SPLIT_LANES = 16 };
static_assert(GDP_SPLIT_FAST_N <= 8, "split dM per (warp, a, b) fits where it is per (warp, a, 8-column group)");

template <int KIND> __device__ __forceinline__ void bwd_b_fast_chunk(const Params &P, const ChunkCtx &c, char *smem) {
    using SM = BwdBFastSmem;
    constexpr bool SPLIT = KIND != BWDB_HOUSEHOLDER, LANES = KIND > BWDB_SPLIT_LANES;
    constexpr int NL = LANES ? KIND - BWDB_SPLIT_LANES : 1, LN = NL == 4 ? 2 : NL == 2 ? 1 : 0; /* lanes: n, log2 n */
    static_assert(!LANES || NL == 2 || NL == 4, "the lanes kinds are n 2 and 4");
    constexpr int LDH = 36; /* 32-column fp32 halves of E (split mode) */
    /* n is compile-time in the lanes kinds: the row and token address math folds (session 35) */
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
     * (those were 2% of split's k_bwd_ab samples; session 35). The sums pair the rows as before. */
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
                 * dA's mask below were a third of split mode's stall samples; session 34) */
                if (KIND == BWDB_SPLIT_TILES) { /* (the forms below made this kind spill 88 bytes) */
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
                if (KIND == BWDB_SPLIT_TILES)
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
                           * once (H200, H 16, n_h 2: 0.522-0.524 -> 0.510 ms; session 28, call 5) */
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
                 * (their shuffles were 3% of split's k_bwd_ab samples; session 35) */
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
template <int KIND> __global__ void __launch_bounds__(NTHREADS, 2) k_bwd_b_fast(Params P) {
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (chunk_ctx<true>(P, c)) bwd_b_fast_chunk<KIND>(P, c, smem);
}

/* ---------------------------------------------------------------- 7d. bwd_a + bwd_b in one CTA */
/* k_bwd_ab: k_bwd_a_kres and then k_bwd_b_fast on the same chunk, in one CTA (GDP_BWD_FUSE=0 runs
 * them as two kernels). bwd_b's inputs from bwd_a, the chunk's dW and dK_w (32 KB at K 128), were
 * written by this CTA microseconds before, and its dDelta tiles were read by bwd_a: L2 serves them
 * instead of DRAM (H 16, n_h 3: ~0.6 GB of the two kernels' ~3.7 GB). Once bwd_b has read dW and dK_w
 * they are dead, so their lines still in L2 are discarded, never written back (GDP_BWD_DISCARD=0
 * keeps them). Shared memory is the larger of the two kernels' (both fit two CTAs an SM); the
 * products, their order and rounding are the two kernels' own, so gradients are the same bits. */
__device__ __forceinline__ void l2_discard_line(const void *p) {
    asm volatile("discard.global.L2 [%0], 128;\n" ::"l"(p) : "memory");
}
template <int CTP, int KIND> __global__ void __launch_bounds__(NTHREADS, 2) k_bwd_ab(Params P) {
    extern __shared__ __align__(16) char smem[];
    ChunkCtx c;
    if (!chunk_ctx(P, c)) return;
    bwd_a_kres_chunk<CTP, KIND != BWDB_HOUSEHOLDER, (KIND > BWDB_SPLIT_LANES)>(P, c, smem);
    __syncthreads(); /* bwd_a's dW, dK_w and dGa stores before bwd_b reads them; its staging tile before bwd_b's loads */
    bwd_b_fast_chunk<KIND>(P, c, smem);
    if (P.dw_discard) { /* every read of them completed before bwd_b's last barrier */
        const int bytes = 64 * P.KP * (int)sizeof(bf16_t);
        const char *dw = (const char *)((const bf16_t *)P.dW + c.ch * P.sW), *dkw = (const char *)((const bf16_t *)P.dKw + c.ch * P.sW);
        for (int off = threadIdx.x * 128; off < bytes; off += NTHREADS * 128) {
            l2_discard_line(dw + off);
            l2_discard_line(dkw + off);
        }
    }
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

/* ---------------------------------------------------------------- host side */
static int max_smem_optin() {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 48 * 1024;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) return 48 * 1024;
    return v;
}

#define GDP_CU(call)                                                                                          \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess)                                                                                \
            return gdp_fail(GDP_ERR_CUDA, "%s: CUDA call failed: %s: %s (%s:%d)", who, #call,                 \
                            cudaGetErrorString(e_), __FILE__, __LINE__);                                      \
    } while (0)

static int device_attr(cudaDeviceAttr a, int fallback) {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, a, dev) != cudaSuccess) return fallback;
    return v;
}

/* GDP_PROFILE=1 in the environment: every launch is timed (synchronously) and printed to stderr. */
static bool profiling() {
    const char *e = getenv("GDP_PROFILE");
    return e && *e && *e != '0';
}

template <typename K, typename... Extra>
static GdpStatus launch(const char *who, const char *name, K kernel, dim3 grid, size_t smem, cudaStream_t st, const Params &P,
                        const Extra &...extra) {
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return GDP_OK;
    static_assert(sizeof(size_t) >= 8, "64-bit host");
    int limit = max_smem_optin();
    if (smem > (size_t)limit)
        return gdp_fail(GDP_ERR_UNSUPPORTED,
                        "%s: this shape (K=%d, V=%d, n=%d) needs %zu bytes of shared memory in one kernel, the GPU "
                        "allows %d; use bf16 or smaller n",
                        who, P.K, P.V, P.n, smem, limit);
    if (smem > 48 * 1024) {
        GDP_CU(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        /* the largest shared-memory carveout, so that the occupancy the sizes allow is reached */
        GDP_CU(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared));
    }
    const bool prof = profiling();
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    if (prof) {
        GDP_CU(cudaEventCreate(&e0));
        GDP_CU(cudaEventCreate(&e1));
        GDP_CU(cudaEventRecord(e0, st));
    }
    kernel<<<grid, NTHREADS, smem, st>>>(P, extra...);
    GDP_CU(cudaGetLastError());
    if (prof) {
        GDP_CU(cudaEventRecord(e1, st));
        GDP_CU(cudaEventSynchronize(e1));
        float ms = 0.f;
        GDP_CU(cudaEventElapsedTime(&ms, e0, e1));
        fprintf(stderr, "gdp profile: %-8s grid %ux%ux%u smem %6zu bv %3d nst %d  %8.3f ms\n", name, grid.x, grid.y, grid.z,
                smem, P.bv, P.nst, ms);
        GDP_CU(cudaEventDestroy(e0));
        GDP_CU(cudaEventDestroy(e1));
    }
    return GDP_OK;
}
/* The grid of a per-chunk kernel: a CTA a (head, chunk) [, z]. A grid's y is at most 65535, so
 * more chunks go out in several launches, each from chunk P.ci0. */
struct ChunkGrid {
    int z;
    bool kt_x; /* (z, H, chunks): block_chunk_head<true> */
};
static ChunkGrid chunk_grid(int z = 1) { return ChunkGrid{z, false}; }
static ChunkGrid chunk_grid_kt_x(int nkt) { return ChunkGrid{nkt, true}; }
/* the state and dh passes' grid (seq_cta) */
static dim3 seq_grid(const Params &P, int nvt) { return P.seq_hv ? dim3(P.N * P.H, nvt) : dim3(nvt, P.H, P.N); }
/* the most chunks a launch: 65535, or fewer under GDP_CHUNK_GRID_Y (tests: the pieces' offsets) */
static int chunk_grid_y_max() {
    const char *e = getenv("GDP_CHUNK_GRID_Y");
    const int v = e ? atoi(e) : 0;
    return v >= 1 && v < 65535 ? v : 65535;
}
template <typename K, typename... Extra>
static GdpStatus launch(const char *who, const char *name, K kernel, ChunkGrid g, size_t smem, cudaStream_t st,
                        const Params &P, const Extra &...extra) {
    const int ymax = chunk_grid_y_max();
    Params piece = P;
    for (piece.ci0 = 0; piece.ci0 < P.NCmax; piece.ci0 += ymax) {
        const int nch = min(ymax, P.NCmax - piece.ci0);
        const dim3 grid = g.kt_x ? dim3(g.z, P.H, nch) : dim3(P.H, nch, g.z);
        GdpStatus s = launch(who, name, kernel, grid, smem, st, piece, extra...);
        if (s != GDP_OK) return s;
    }
    return GDP_OK;
}
#define LAUNCH(kernel, grid, smem)                                                                            \
    do {                                                                                                      \
        GdpStatus s_ = launch(who, #kernel, kernel, grid, smem, st, P);                                        \
        if (s_ != GDP_OK) return s_;                                                                          \
    } while (0)

/* V-tile width and pipeline depth of the sequential kernels. The state (KP x bv fp32) must fit the
 * register accumulators (KP*bv <= 16384) and the buffers the shared memory; among those, the
 * fewest waves of CTAs (each CTA runs one whole sequential chain), then a cost that grows with
 * the tile width, then two stages (prefetch) over one. */
template <typename IT, typename Kern>
static bool pick_bv(const GdpPlan &pl, bool dh, bool fused, Kern kern, int &bv_out, int &nst_out) {
    const int limit = max_smem_optin(), nsm = device_attr(cudaDevAttrMultiProcessorCount, 132);
    const int sm_smem = device_attr(cudaDevAttrMaxSharedMemoryPerMultiprocessor, 228 * 1024);
    cudaFuncAttributes fa;
    int regs = 128;
    if (cudaFuncGetAttributes(&fa, kern) == cudaSuccess && fa.numRegs > 0) regs = fa.numRegs;
    const int cands[3] = {128, 64, 32};
    double best = 1e30;
    bool found = false;
    for (int ci = 0; ci < 3; ci++) {
        const int bv = cands[ci] < pl.VP ? cands[ci] : pl.VP;
        if (pl.KP * bv > 16384) continue;
        for (int nst = 2; nst >= 1; nst--) {
            const size_t b = dh ? DhSmem<IT>::carve(nullptr, pl.KP, pl.Ctp, bv, nst, nullptr)
                                : StateSmem<IT>::carve(nullptr, pl.KP, bv, nst, pl.Ctp, fused, nullptr);
            if (b > (size_t)limit) continue;
            int occ = (int)(sm_smem / (b + 1024));
            const int occ_r = 65536 / (regs * NTHREADS);
            if (occ_r < occ) occ = occ_r;
            if (occ < 1) occ = 1;
            const long ctas = (long)pl.N * pl.H * ((pl.VP + bv - 1) / bv);
            const long waves = (ctas + (long)nsm * occ - 1) / ((long)nsm * occ);
            const double cost = (double)waves * (1.0 + bv / 64.0) * (nst == 2 ? 1.0 : 1.3);
            if (cost < best) {
                best = cost;
                bv_out = bv;
                nst_out = nst;
                found = true;
            }
        }
    }
    return found;
}

/* GDP_BV_STATE / GDP_BV_DH = 32|64|128 in the environment replace pick_bv's V-tile width (for
 * measuring the choice); a width that does not fit keeps the pick. */
template <typename IT> static void env_bv(const GdpPlan &pl, bool dh, bool fused, Params &P) {
    const char *e = getenv(dh ? "GDP_BV_DH" : "GDP_BV_STATE");
    if (!e || !*e) return;
    const int bv = atoi(e) < pl.VP ? atoi(e) : pl.VP;
    if ((bv != 32 && bv != 64 && bv != 128) || pl.KP * bv > 16384) return;
    for (int nst = 2; nst >= (fused ? 2 : 1); nst--) { /* the fused output needs the prefetch */
        const size_t b = dh ? DhSmem<IT>::carve(nullptr, pl.KP, pl.Ctp, bv, nst, nullptr)
                            : StateSmem<IT>::carve(nullptr, pl.KP, bv, nst, pl.Ctp, fused, nullptr);
        if (b <= (size_t)max_smem_optin()) {
            P.bv = bv;
            P.nst = nst;
            return;
        }
    }
}

static bool env_on(const char *name) {
    const char *e = getenv(name);
    return e && *e && *e != '0';
}

/* Where the sequential passes use tensor copies (k_state_tma, k_dh_tma) rather than cp.async
 * (k_state_fast, k_dh_fast): unset, in the saving forward's state pass and in the dh pass, where
 * they were faster (bench/NOTES.md, session 24); GDP_STATE_TMA=0 never, =1 wherever the shape
 * allows. Both kernels of a pass make the same products in the same order, so the bits do not
 * depend on the choice (saved_vs_plain compares them whenever the two forwards differ in it). */
static bool seq_tma(bool where_unset) {
    const char *e = getenv("GDP_STATE_TMA");
    if (e && *e) return *e != '0';
    return where_unset;
}

/* The fast kernels are bf16 only (the f32 path is for accuracy). GDP_GENERIC in the environment keeps
 * the generic kernels of the parts it names, for comparison: a list of prep, seq (state and dh),
 * bwd (bwd_a and bwd_b), or all. */
static bool generic_part(const char *part) {
    const char *e = getenv("GDP_GENERIC");
    return e && (strstr(e, part) || strstr(e, "all"));
}
template <typename IT> static bool use_fast(const char *part) {
    return std::is_same<IT, __nv_bfloat16>::value && !generic_part(part);
}
template <typename IT> static bool use_fast_seq() { return use_fast<IT>("seq"); }
/* ctpo: 0, or the token rows of the output that the state pass makes (ns 2; bv 128, or bv 64 with
 * ctpo >= 32) */
static void (*state_fast_kernel(int KP, int bv, int ns, int ctpo))(Params) {
#define GDP_SF(kp, b)                                                                   \
    if (KP == kp && bv == b && !ctpo) return ns == 3 ? k_state_fast<kp, b, 3, 0> : k_state_fast<kp, b, 2, 0>;
    GDP_SF(128, 128) GDP_SF(128, 64) GDP_SF(128, 32) GDP_SF(64, 128) GDP_SF(64, 64) GDP_SF(64, 32)
    GDP_SF(256, 64) GDP_SF(256, 32) /* K 256: no bv 128 (registers) */
#undef GDP_SF
#define GDP_SO(kp, b, c) \
    if (KP == kp && bv == b && ns == 2 && ctpo == c) return k_state_fast<kp, b, 2, c>;
    GDP_SO(128, 128, 16) GDP_SO(128, 128, 32) GDP_SO(128, 128, 64) GDP_SO(64, 128, 16) GDP_SO(64, 128, 32) GDP_SO(64, 128, 64)
    GDP_SO(128, 64, 32) GDP_SO(128, 64, 64) GDP_SO(64, 64, 32) GDP_SO(64, 64, 64)
    GDP_SO(256, 64, 32) /* K 256: q single-buffered (StateFastSmem::QONE); 64 does not fit, 16 leaves a warp one n8 tile */
#undef GDP_SO
    return nullptr;
}
/* k_state_wg where it runs: compute capability 9.0 (its code is sm_90a's), unless GDP_STATE_WG=0 */
static bool state_wg_on() {
    const char *e = getenv("GDP_STATE_WG");
    return !(e && *e == '0') && device_attr(cudaDevAttrComputeCapabilityMajor, 0) == 9 &&
           device_attr(cudaDevAttrComputeCapabilityMinor, 0) == 0;
}
static void (*state_wg_kernel(int ctpo))(Params, StateTmaMaps) {
    return ctpo == 0 ? k_state_wg<0> : ctpo == 16 ? k_state_wg<16> : ctpo == 32 ? k_state_wg<32> : ctpo == 64 ? k_state_wg<64> : nullptr;
}
static size_t state_wg_smem(int ctpo) {
    return ctpo == 0 ? StateWgSmem<0>::BYTES : ctpo == 16 ? StateWgSmem<16>::BYTES : ctpo == 32 ? StateWgSmem<32>::BYTES : StateWgSmem<64>::BYTES;
}
static size_t state_fast_smem(int KP, int bv, int ns, int ctpo) {
#define GDP_SS(kp, b, c) \
    if (KP == kp && bv == b && ctpo == c) return StateFastSmem<kp, b, c>::bytes(ns);
    GDP_SS(128, 128, 0) GDP_SS(128, 64, 0) GDP_SS(128, 32, 0) GDP_SS(64, 128, 0) GDP_SS(64, 64, 0) GDP_SS(64, 32, 0)
    GDP_SS(128, 128, 16) GDP_SS(128, 128, 32) GDP_SS(128, 128, 64) GDP_SS(64, 128, 16) GDP_SS(64, 128, 32) GDP_SS(64, 128, 64)
    GDP_SS(128, 64, 32) GDP_SS(128, 64, 64) GDP_SS(64, 64, 32) GDP_SS(64, 64, 64)
    GDP_SS(256, 64, 0) GDP_SS(256, 32, 0) GDP_SS(256, 64, 32)
#undef GDP_SS
    return 0;
}
static void (*output_fast_kernel(int KP, int ctp))(Params) {
#define GDP_OF(kp) \
    if (KP == kp) return ctp == 16 ? k_output_fast<kp, 16> : ctp == 32 ? k_output_fast<kp, 32> : ctp == 64 ? k_output_fast<kp, 64> : nullptr;
    GDP_OF(64) GDP_OF(128) GDP_OF(256)
#undef GDP_OF
    return nullptr;
}
static size_t output_fast_smem(int KP, int ctp) {
#define GDP_OS(kp) \
    if (KP == kp) return ctp == 16 ? OutFastSmem<kp, 16>::BYTES : ctp == 32 ? OutFastSmem<kp, 32>::BYTES : OutFastSmem<kp, 64>::BYTES;
    GDP_OS(64) GDP_OS(128) GDP_OS(256)
#undef GDP_OS
    return 0;
}
static void (*dh_fast_kernel(int KP, int bv, int ctp))(Params) {
#define GDP_DF(kp, b)                                                                                        \
    if (KP == kp && bv == b)                                                                                 \
        return ctp == 16 ? k_dh_fast<kp, b, 16> : ctp == 32 ? k_dh_fast<kp, b, 32> : ctp == 64 ? k_dh_fast<kp, b, 64> : nullptr;
    GDP_DF(128, 128) GDP_DF(128, 64) GDP_DF(128, 32) GDP_DF(64, 128) GDP_DF(64, 64) GDP_DF(64, 32)
    GDP_DF(256, 64) GDP_DF(256, 32) /* K 256 (q single-buffered): bv 64 up to 32 chunk tokens, bv 32 up to 64 */
#undef GDP_DF
    return nullptr;
}
static size_t dh_fast_smem(int KP, int bv, int ctp) {
#define GDP_DS(kp, b, c) \
    if (KP == kp && bv == b && ctp == c) return DhFastSmem<kp, b, c>::BYTES;
    GDP_DS(128, 64, 16) GDP_DS(128, 64, 32) GDP_DS(128, 64, 64) GDP_DS(128, 32, 16) GDP_DS(128, 32, 32) GDP_DS(128, 32, 64)
    GDP_DS(64, 64, 16) GDP_DS(64, 64, 32) GDP_DS(64, 64, 64) GDP_DS(64, 32, 16) GDP_DS(64, 32, 32) GDP_DS(64, 32, 64)
    GDP_DS(128, 128, 16) GDP_DS(128, 128, 32) GDP_DS(128, 128, 64) GDP_DS(64, 128, 16) GDP_DS(64, 128, 32) GDP_DS(64, 128, 64)
    GDP_DS(256, 64, 16) GDP_DS(256, 64, 32) GDP_DS(256, 64, 64) GDP_DS(256, 32, 16) GDP_DS(256, 32, 32) GDP_DS(256, 32, 64)
#undef GDP_DS
    return 0;
}

/* V-tile width of a fast sequential kernel among cands: the least work on the busiest SM, i.e.
 * ceil(CTAs / SMs) * bv columns, then the widest (each CTA loads the whole W and Kwd, so narrower
 * tiles load them more often; from L2 since seq_cta, so ties such as K 256's bv 64 against 32 are
 * worth measuring again). Measured at H 6, n 2: state bv 64 (96 CTAs) beat bv 32 (192), dh
 * bv 64 beat bv 32; at H 16 (B 8) state bv 128 (128 CTAs, one an SM) beat bv 64 (256 CTAs, two
 * an SM), 0.236 against 0.290 ms at n 2: a third fewer bytes a step, and the pass is bound by them.
 * bv is the environment's GDP_BV_STATE / GDP_BV_DH when set and available; 0 when no candidate
 * has a kernel that fits. */
template <class KernOf, class SmemOf>
static int pick_fast_bv(const GdpPlan &pl, const char *env, const int *cands, int ncand, KernOf kern_of, SmemOf smem_of) {
    const int nsm = device_attr(cudaDevAttrMultiProcessorCount, 132), limit = max_smem_optin();
    const char *e = getenv(env);
    const int want = e && *e ? atoi(e) : 0;
    int best_bv = 0;
    long best = 0;
    for (int i = 0; i < ncand; i++) {
        const int bv = cands[i];
        if (pl.VP % bv || !kern_of(bv) || smem_of(bv) > (size_t)limit) continue;
        if (want == bv) return bv;
        const long ctas = (long)pl.N * pl.H * (pl.VP / bv), load = (ctas + nsm - 1) / nsm * bv;
        if (!best_bv || load < best) best_bv = bv, best = load;
    }
    return want && want != best_bv ? 0 : best_bv;
}

/* raw: split mode's keys as loaded (k_prep2_fast's RAW) */
static void (*prep2_fast_kernel(int KP, int ctp, bool raw))(Params) {
#define GDP_PF(kp, r)                                                                                       \
    if (KP == kp && raw == r)                                                                               \
        return ctp == 16 ? k_prep2_fast<kp, 16, r> : ctp == 32 ? k_prep2_fast<kp, 32, r> : ctp == 64 ? k_prep2_fast<kp, 64, r> : nullptr;
    GDP_PF(256, false) GDP_PF(128, false) GDP_PF(64, false) GDP_PF(256, true) GDP_PF(128, true) GDP_PF(64, true)
#undef GDP_PF
    return nullptr;
}
static size_t prep2_fast_smem(int KP, int ctp, bool split_r, int VP) {
#define GDP_PS(kp, c) \
    if (KP == kp && ctp == c) return Prep2FastSmem<kp, c>::bytes(split_r, VP);
    GDP_PS(256, 16) GDP_PS(256, 32) GDP_PS(256, 64) GDP_PS(128, 16) GDP_PS(128, 32) GDP_PS(128, 64) GDP_PS(64, 16)
    GDP_PS(64, 32) GDP_PS(64, 64)
#undef GDP_PS
    return 0;
}
template <bool KT_X> static void (*bwd_a_fast_kernel(int ctp))(Params) {
    return ctp == 16 ? k_bwd_a_fast<16, KT_X> : ctp == 32 ? k_bwd_a_fast<32, KT_X> : ctp == 64 ? k_bwd_a_fast<64, KT_X> : nullptr;
}
/* the shapes of the fast prep, bwd_a and bwd_b: K and V whole 64-column tiles, 16-byte rows */
static bool fast_shape(const GdpPlan &pl, const Params &P) {
    return pl.K == pl.KP && pl.V == pl.VP && pl.K % GDP_TILE == 0 && pl.V % GDP_TILE == 0 && P.veck && P.vecv;
}
static size_t bwd_a_fast_smem(int ctp) {
    return ctp == 16 ? BwdAFastSmem<16>::BYTES : ctp == 32 ? BwdAFastSmem<32>::BYTES : BwdAFastSmem<64>::BYTES;
}

static void (*bwd_a_kres_kernel(int ctp))(Params) {
    return ctp == 16 ? k_bwd_a_kres<16> : ctp == 32 ? k_bwd_a_kres<32> : ctp == 64 ? k_bwd_a_kres<64> : nullptr;
}
static void (*bwd_b_fast_kernel(int kind))(Params) {
    return kind == BWDB_HOUSEHOLDER ? k_bwd_b_fast<BWDB_HOUSEHOLDER>
         : kind == BWDB_SPLIT_LANES + 2 ? k_bwd_b_fast<BWDB_SPLIT_LANES + 2>
         : kind == BWDB_SPLIT_LANES + 4 ? k_bwd_b_fast<BWDB_SPLIT_LANES + 4>
         : kind == BWDB_SPLIT_TILES ? k_bwd_b_fast<BWDB_SPLIT_TILES> : nullptr;
}
/* k_bwd_ab at 16 and 32 chunk tokens (where k_bwd_a_kres is picked) and k_bwd_b_fast's kind */
template <int CTP> static void (*bwd_ab_kernel_ctp(int kind))(Params) {
    return kind == BWDB_HOUSEHOLDER ? k_bwd_ab<CTP, BWDB_HOUSEHOLDER>
         : kind == BWDB_SPLIT_LANES + 2 ? k_bwd_ab<CTP, BWDB_SPLIT_LANES + 2>
         : kind == BWDB_SPLIT_LANES + 4 ? k_bwd_ab<CTP, BWDB_SPLIT_LANES + 4>
         : kind == BWDB_SPLIT_TILES ? k_bwd_ab<CTP, BWDB_SPLIT_TILES> : nullptr;
}
static void (*bwd_ab_kernel(int ctp, int kind))(Params) {
    return ctp == 16 ? bwd_ab_kernel_ctp<16>(kind) : ctp == 32 ? bwd_ab_kernel_ctp<32>(kind) : nullptr;
}
static size_t bwd_a_kres_smem(int ctp) {
    return ctp == 16 ? BwdAKresSmem<16>::BYTES : ctp == 32 ? BwdAKresSmem<32>::BYTES : BwdAKresSmem<64>::BYTES;
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static GdpStatus check_common(const char *who, const GdpDesc *d) {
    GdpStatus s = gdp_validate(d);
    if (s != GDP_OK) return s;
    if (d->dtype != GDP_F32 && d->dtype != GDP_BF16)
        return gdp_fail(GDP_ERR_UNSUPPORTED, "%s: dtype %s is not supported on CUDA; use GDP_BF16 or GDP_F32", who,
                        dtype_name(d->dtype));
    if (d->K > 256 || d->V > 256)
        return gdp_fail(GDP_ERR_UNSUPPORTED, "%s: K=%d, V=%d; the CUDA path supports K and V up to 256", who, d->K, d->V);
    if (d->n > GDP_CHUNK)
        return gdp_fail(GDP_ERR_UNSUPPORTED, "%s: n=%d; the CUDA path supports n up to %d (one token per chunk)", who,
                        d->n, GDP_CHUNK);
    return GDP_OK;
}

/* ws: the forward's part and T (the workspace, or the saved buffer); scratch: the backward's own
 * part (ws + bytes_saved when one workspace holds both) */
static void fill_params(const GdpDesc *d, const GdpPlan &pl, void *ws, void *scratch, Params &P) {
    memset(&P, 0, sizeof P);
    P.mode = (int)d->mode;
    P.B = d->B;
    P.T = d->T;
    P.H = d->H;
    P.K = d->K;
    P.V = d->V;
    P.n = d->n;
    P.KP = pl.KP;
    P.VP = pl.VP;
    P.Ct = pl.Ct;
    P.Ctp = pl.Ctp;
    P.N = pl.N;
    P.NCmax = pl.NCmax;
    P.nkt = pl.nkt;
    P.nvt = pl.nvt;
    const char *seq_grid_env = getenv("GDP_SEQ_GRID");
    P.seq_hv = (seq_grid_env && !strcmp(seq_grid_env, "hv")) || pl.N > 65535;
    P.scale = (float)gdp_effective_scale(d);
    P.ninv = 65536 / d->n + 1;
    P.sinv = 65536 / (d->K / d->n > 0 ? d->K / d->n : 1) + 1;
    P.wsl8 = (d->K / d->n) % 8 == 0;
    P.cu = d->cu_seqlens;
    /* the uniform chunk context's division by invariant integers: with 2^(l-1) < ncs <= 2^l,
     * mul = ceil(2^(30+l) / ncs) < 2^31, and (4 ci mul) / 2^(32+l) is ci / ncs plus less than 2^-l
     * <= 1/ncs, which never reaches the next integer */
    P.ncs = (d->T + pl.Ct - 1) / pl.Ct;
    while ((1 << P.ncs_shift) < P.ncs) P.ncs_shift++;
    P.ncs_mul = (unsigned)((((uint64_t)1 << (30 + P.ncs_shift)) + P.ncs - 1) / P.ncs);
    char *w = (char *)ws;
    P.seq = (GdpSeqInfo *)(w + pl.o_seq);
    P.chunk = (GdpChunkInfo *)(w + pl.o_chunk);
    P.G = (float *)(w + pl.o_G);
    P.W = w + pl.o_W;
    P.Kwd = w + pl.o_Kwd;
    P.U = w + pl.o_U;
    P.P = w + pl.o_P;
    P.h = w + pl.o_h;
    P.D = w + pl.o_D;
    P.Tsave = w + pl.o_T;
    if (scratch) {
        char *b = (char *)scratch - pl.bytes_saved; /* the o_d* offsets count from the start of ws */
        P.dh = b + pl.o_dh;
        P.dD = b + pl.o_dD;
        P.dW = b + pl.o_dW;
        P.dKw = b + pl.o_dKw;
        P.dGa = (float *)(b + pl.o_dGa);
        P.dM = (float *)(b + pl.o_dM);
    }
    P.sW = pl.sW;
    P.sU = pl.sU;
    P.sP = pl.sP;
    P.sH = pl.sH;
    P.sD = pl.sD;
}

/* k_state_tma (K 128, bv 128 or 64, the output at ctpo chunk tokens or none) and its shared memory */
static void (*state_tma_kernel(int bv, int ctpo))(Params, StateTmaMaps) {
    if (bv == 128)
        return ctpo == 16 ? k_state_tma<128, 128, 16> : ctpo == 32 ? k_state_tma<128, 128, 32> : ctpo == 64 ? k_state_tma<128, 128, 64> : k_state_tma<128, 128, 0>;
    if (bv == 64) return ctpo == 32 ? k_state_tma<128, 64, 32> : ctpo == 64 ? k_state_tma<128, 64, 64> : ctpo == 0 ? k_state_tma<128, 64, 0> : nullptr;
    return nullptr;
}
static size_t state_tma_smem(int bv, int ctpo) {
    if (bv == 128)
        return ctpo == 16 ? StateTmaSmem<128, 128, 16>::BYTES : ctpo == 32 ? StateTmaSmem<128, 128, 32>::BYTES
             : ctpo == 64 ? StateTmaSmem<128, 128, 64>::BYTES : StateTmaSmem<128, 128, 0>::BYTES;
    return ctpo == 32 ? StateTmaSmem<128, 64, 32>::BYTES : ctpo == 64 ? StateTmaSmem<128, 64, 64>::BYTES : StateTmaSmem<128, 64, 0>::BYTES;
}
/* cuTensorMapEncodeTiled through the runtime (no link against the driver library); null if absent */
static PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    void *fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        return nullptr;
    return (PFN_cuTensorMapEncodeTiled_v12000)fn;
}
/* a bf16 tensor (rank 2 or 3; dims innermost first, the outer dims' strides in bytes) read and written
 * as boxes of 128-byte rows, swizzled (Swz128) */
static bool encode_bf16(PFN_cuTensorMapEncodeTiled_v12000 enc, CUtensorMap *m, const void *base, int rank,
                        const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box) {
    const cuuint32_t es[3] = {1, 1, 1};
    return enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, (cuuint32_t)rank, (void *)base, dims, strides, box, es,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
/* A workspace array of CH chunk tiles, each rows_per_chunk rows of `width` bf16, in boxes of 64
 * columns x box_rows rows (W, Kwd, U, Delta, h, P and their gradients) */
static bool encode_chunk_tiles(PFN_cuTensorMapEncodeTiled_v12000 enc, CUtensorMap *m, const void *base, const GdpPlan &pl,
                               int width, int rows_per_chunk, int box_rows) {
    const cuuint64_t dims[2] = {(cuuint64_t)width, (cuuint64_t)pl.CH * rows_per_chunk}, strides[1] = {(cuuint64_t)width * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)box_rows};
    return encode_bf16(enc, m, base, 2, dims, strides, box);
}
/* A token-major input (q, dO: [B T][H][width] bf16) in boxes of 64 columns x one head x box_rows tokens */
static bool encode_token_rows(PFN_cuTensorMapEncodeTiled_v12000 enc, CUtensorMap *m, const void *base, const Params &P,
                              int width, int box_rows) {
    const cuuint64_t dims[3] = {(cuuint64_t)width, (cuuint64_t)P.H, (cuuint64_t)P.B * P.T};
    const cuuint64_t strides[2] = {(cuuint64_t)width * 2, (cuuint64_t)P.H * width * 2};
    const cuuint32_t box[3] = {64, 1, (cuuint32_t)box_rows};
    return encode_bf16(enc, m, base, 3, dims, strides, box);
}
/* the maps of k_state_tma for this call's workspace and q; false where one cannot be made */
static bool state_tma_maps(const GdpPlan &pl, const Params &P, int ctpo, StateTmaMaps &M) {
    const PFN_cuTensorMapEncodeTiled_v12000 enc = tensor_map_encoder();
    if (!enc) return false;
    memset(&M, 0, sizeof M);
    const bool ok = encode_chunk_tiles(enc, &M.W, P.W, pl, pl.KP, 64, 64) && encode_chunk_tiles(enc, &M.Kwd, P.Kwd, pl, pl.KP, 64, 64) &&
                    encode_chunk_tiles(enc, &M.U, P.U, pl, pl.VP, 64, 64) && encode_chunk_tiles(enc, &M.h, P.h, pl, pl.VP, pl.KP, pl.KP) &&
                    encode_chunk_tiles(enc, &M.D, P.D, pl, pl.VP, 64, 64);
    if (!ok || !ctpo) return ok;
    return encode_token_rows(enc, &M.q, P.q, P, P.K, ctpo) && encode_chunk_tiles(enc, &M.P, P.P, pl, 64, pl.Ctp, ctpo);
}

/* k_dh_tma (K 128, bv 128 or 64) and its maps */
static void (*dh_tma_kernel(int bv, int ctp))(Params, DhTmaMaps) {
    if (bv == 128) return ctp == 16 ? k_dh_tma<128, 128, 16> : ctp == 32 ? k_dh_tma<128, 128, 32> : ctp == 64 ? k_dh_tma<128, 128, 64> : nullptr;
    if (bv == 64) return ctp == 16 ? k_dh_tma<128, 64, 16> : ctp == 32 ? k_dh_tma<128, 64, 32> : ctp == 64 ? k_dh_tma<128, 64, 64> : nullptr;
    return nullptr;
}
static size_t dh_tma_smem(int bv, int ctp) {
    if (bv == 128)
        return ctp == 16 ? DhTmaSmem<128, 128, 16>::BYTES : ctp == 32 ? DhTmaSmem<128, 128, 32>::BYTES : DhTmaSmem<128, 128, 64>::BYTES;
    return ctp == 16 ? DhTmaSmem<128, 64, 16>::BYTES : ctp == 32 ? DhTmaSmem<128, 64, 32>::BYTES : DhTmaSmem<128, 64, 64>::BYTES;
}
static bool dh_tma_maps(const GdpPlan &pl, const Params &P, DhTmaMaps &M) {
    const PFN_cuTensorMapEncodeTiled_v12000 enc = tensor_map_encoder();
    if (!enc) return false;
    memset(&M, 0, sizeof M);
    return encode_chunk_tiles(enc, &M.W, P.W, pl, pl.KP, 64, 64) && encode_chunk_tiles(enc, &M.Kwd, P.Kwd, pl, pl.KP, 64, 64) &&
           encode_chunk_tiles(enc, &M.P, P.P, pl, 64, pl.Ctp, pl.Ctp) && encode_token_rows(enc, &M.dO, P.d_o, P, P.V, pl.Ct) &&
           encode_token_rows(enc, &M.q, P.q, P, P.K, pl.Ct) && encode_chunk_tiles(enc, &M.dh, P.dh, pl, pl.VP, pl.KP, pl.KP) &&
           encode_chunk_tiles(enc, &M.dD, P.dD, pl, pl.VP, 64, 64);
}

/* tables, prep, state: shared by the forward and the backward (which recomputes h and Delta) */
template <typename IT> static GdpStatus run_front(const char *who, const GdpPlan &pl, Params &P, cudaStream_t st,
                                                  int limit) {
    const int ns = env_on("GDP_STATE_NS3") ? 3 : 2, cands[3] = {128, 64, 32};
    const int fast_bv = use_fast_seq<IT>() ? pick_fast_bv(
                                                 pl, "GDP_BV_STATE", cands, 3, [&](int b) { return state_fast_kernel(pl.KP, b, ns, 0); },
                                                 [&](int b) { return state_fast_smem(pl.KP, b, ns, 0); })
                                           : 0;
    /* The generic state pass's fused output (GDP_FUSED_OUTPUT) is never taken where the fast state
     * kernel runs: that one makes o itself where its tile allows (below), and else it and k_output
     * beat the generic fusion (H200, B 2, T 8192, H 16, n 2: 1.262 ms against 0.412 + about 0.21). */
    if (fast_bv) P.fuse_out = false;
    if (P.fuse_out && (!pick_bv<IT>(pl, false, true, k_state<IT>, P.bv, P.nst) || P.nst != 2)) P.fuse_out = false;
    if (!P.fuse_out && !pick_bv<IT>(pl, false, false, k_state<IT>, P.bv, P.nst))
        return gdp_fail(GDP_ERR_UNSUPPORTED, "%s: K=%d needs more shared memory than this GPU has", who, P.K);
    env_bv<IT>(pl, false, P.fuse_out, P);
    k_tables<<<1, 32, 0, st>>>(P);
    GDP_CU(cudaGetLastError());
    k_chunks<<<(P.NCmax + 255) / 256, 256, 0, st>>>(P);
    GDP_CU(cudaGetLastError());
    const size_t sp2 = Prep2Smem<IT>::carve(nullptr, pl.KP, pl.VP, pl.Ctp, P.mode == GDP_MODE_SPLIT, nullptr);
    const size_t ss = StateSmem<IT>::carve(nullptr, pl.KP, P.bv, P.nst, pl.Ctp, P.fuse_out, nullptr);
    const bool split = P.mode == GDP_MODE_SPLIT;
    /* split mode's keys as loaded: k_prep2_fast<RAW> takes n as GDP_CHUNK / CTP, which holds at n 1, 2
     * and 4 only, whose slices hold whole quarters of the columns (a warp's W columns). At K 256 this
     * also keeps split's prep at householder's shared memory (two CTAs an SM, not one: R took a 64 x K
     * tile of its own there). */
    const bool raw_keys = split && pl.Ctp * P.n == GDP_CHUNK;
    const size_t spf = prep2_fast_smem(pl.KP, pl.Ctp, split && !raw_keys, pl.VP);
    if (use_fast<IT>("prep") && fast_shape(pl, P) && prep2_fast_kernel(pl.KP, pl.Ctp, raw_keys) && spf <= (size_t)limit) {
        GdpStatus s = launch(who, "k_prep2_fast", prep2_fast_kernel(pl.KP, pl.Ctp, raw_keys), chunk_grid(), spf, st, P);
        if (s != GDP_OK) return s;
    } else if (sp2 <= (size_t)limit)
        LAUNCH(k_prep2<IT>, chunk_grid(), sp2);
    else
        LAUNCH(k_prep<IT>, chunk_grid(), PrepSmem<IT>::carve(nullptr, nullptr));
    if (fast_bv) {
        P.bv = fast_bv;
        /* A forward's fast state pass makes the output too (P.fast_out; the caller then launches no
         * k_output) at bv 128, and at bv 64 where its CTAs fit one an SM (the output's q and P tiles
         * take the shared memory that a second CTA had); whole 16-byte rows of q and o. H200, H 16,
         * n_h 2: forward 0.857 -> 0.722 ms (k_output took 0.21). At K 256 a CTA has an SM with or
         * without the output, so it is made here wherever it fits (bv 64, 32 chunk tokens). */
        const long ctas = (long)P.N * P.H * (pl.VP / fast_bv);
        const bool out_here = P.o && fast_shape(pl, P) && !generic_part("output") &&
                              (fast_bv == 128 || pl.KP == 256 || ctas <= device_attr(cudaDevAttrMultiProcessorCount, 132));
        const int ctpo = out_here && state_fast_kernel(pl.KP, fast_bv, ns, pl.Ctp) &&
                                 state_fast_smem(pl.KP, fast_bv, ns, pl.Ctp) <= (size_t)limit
                             ? pl.Ctp
                             : 0;
        P.fast_out = ctpo != 0;
        /* k_state_wg wherever it applies (every state pass of the shape, so that saved and recomputed
         * h and Delta are the same bits); GDP_STATE_WG=0 keeps k_state_fast and k_state_tma */
        StateTmaMaps wg_maps;
        if (state_wg_on() && fast_bv == 128 && ns == 2 && pl.K == 128 && pl.KP == 128 && pl.V == pl.VP && P.veck &&
            state_wg_kernel(ctpo) && state_wg_smem(ctpo) <= (size_t)limit && state_tma_maps(pl, P, ctpo, wg_maps))
            return launch(who, "k_state_wg", state_wg_kernel(ctpo), seq_grid(P, pl.VP / 128), state_wg_smem(ctpo), st, P,
                          wg_maps);
        StateTmaMaps maps;
        if (seq_tma(P.keep_hd) && pl.K == 128 && pl.KP == 128 && pl.V == pl.VP && P.veck && ns == 2 &&
            state_tma_kernel(fast_bv, ctpo) && state_tma_smem(fast_bv, ctpo) <= (size_t)limit &&
            state_tma_maps(pl, P, ctpo, maps))
            return launch(who, "k_state_tma", state_tma_kernel(fast_bv, ctpo), seq_grid(P, pl.VP / fast_bv),
                          state_tma_smem(fast_bv, ctpo), st, P, maps);
        return launch(who, "k_state_fast", state_fast_kernel(pl.KP, fast_bv, ns, ctpo), seq_grid(P, pl.VP / fast_bv),
                      state_fast_smem(pl.KP, fast_bv, ns, ctpo), st, P);
    }
    LAUNCH(k_state<IT>, seq_grid(P, (P.VP + P.bv - 1) / P.bv), ss);
    return GDP_OK;
}

/* the dh pass: the fast kernel where its conditions hold (see k_dh_fast), else the generic one */
template <typename IT> static GdpStatus launch_dh(const char *who, const GdpPlan &pl, Params &P, cudaStream_t st) {
    if (use_fast_seq<IT>() && pl.K == pl.KP && pl.V == pl.VP && P.veck && P.vecv) {
        const int cands[3] = {128, 64, 32};
        const int bv = pick_fast_bv(
            pl, "GDP_BV_DH", cands, 3, [&](int b) { return dh_fast_kernel(pl.KP, b, pl.Ctp); },
            [&](int b) { return dh_fast_smem(pl.KP, b, pl.Ctp); });
        if (bv) {
            P.bv = bv;
            DhTmaMaps maps;
            if (seq_tma(true) && pl.K == 128 && pl.KP == 128 && dh_tma_kernel(bv, pl.Ctp) &&
                dh_tma_smem(bv, pl.Ctp) <= (size_t)max_smem_optin() && dh_tma_maps(pl, P, maps))
                return launch(who, "k_dh_tma", dh_tma_kernel(bv, pl.Ctp), seq_grid(P, pl.VP / bv), dh_tma_smem(bv, pl.Ctp), st,
                              P, maps);
            return launch(who, "k_dh_fast", dh_fast_kernel(pl.KP, bv, pl.Ctp), seq_grid(P, pl.VP / bv),
                          dh_fast_smem(pl.KP, bv, pl.Ctp), st, P);
        }
    }
    LAUNCH(k_dh<IT>, seq_grid(P, (P.VP + P.bv - 1) / P.bv), DhSmem<IT>::carve(nullptr, pl.KP, pl.Ctp, P.bv, P.nst, nullptr));
    return GDP_OK;
}

template <typename IT> static GdpStatus forward_impl(const GdpDesc *d, const GdpForwardArgs *a, void *ws, cudaStream_t st) {
    const char *who = "gdp_forward_cuda";
    GdpPlan pl;
    gdp_plan_make(d, &pl);
    Params P;
    fill_params(d, pl, a->saved ? a->saved : ws, nullptr, P);
    if (!a->saved) P.Tsave = nullptr; /* only a saving forward keeps T (its buffer has room for it) */
    P.q = a->q;
    P.k = a->k;
    P.v = a->v;
    P.beta = a->beta;
    P.g = (const float *)a->g;
    P.mask = (const float *)a->mask;
    P.h0 = (const float *)a->h0;
    P.o = a->o;
    P.ht = (float *)a->ht;
    P.veck = d->K % 8 == 0 && aligned16(a->q) && aligned16(a->k);
    P.vecv = d->V % 8 == 0 && aligned16(a->v) && aligned16(a->o);
    /* The generic state pass can also write o (GDP_FUSED_OUTPUT=1), storing no h and Delta. It is
     * off by default: it was never faster than state + output (v3: 0.65 against 0.63 ms at n 2, slower
     * at n 1), and with it a forward's o would round differently from a saving forward's, which must
     * keep h and Delta, so training with and without selective recomputation would part ways. */
    P.fuse_out = !a->saved && env_on("GDP_FUSED_OUTPUT");
    P.keep_hd = a->saved != nullptr;
    const int limit = max_smem_optin();
    GdpStatus s = run_front<IT>(who, pl, P, st, limit);
    if (s != GDP_OK) return s;
    if (P.fuse_out || P.fast_out) return GDP_OK;
    if (use_fast<IT>("output") && fast_shape(pl, P) && output_fast_kernel(pl.KP, pl.Ctp) &&
        output_fast_smem(pl.KP, pl.Ctp) <= (size_t)limit)
        return launch(who, "k_output_fast", output_fast_kernel(pl.KP, pl.Ctp), chunk_grid(),
                      output_fast_smem(pl.KP, pl.Ctp), st, P);
    LAUNCH(k_output<IT>, chunk_grid(P.nvt), OutSmem<IT>::carve(nullptr, pl.Ctp, nullptr));
    return GDP_OK;
}

template <typename IT> static GdpStatus backward_impl(const GdpDesc *d, const GdpBackwardArgs *a, void *ws, cudaStream_t st) {
    const char *who = "gdp_backward_cuda";
    GdpPlan pl;
    gdp_plan_make(d, &pl);
    Params P;
    /* with a saved forward, its buffer holds the tables through T and ws is the scratch alone */
    if (a->saved)
        fill_params(d, pl, (void *)a->saved, ws, P);
    else
        fill_params(d, pl, ws, (char *)ws + pl.bytes_saved, P);
    P.q = a->q;
    P.k = a->k;
    P.v = a->v;
    P.beta = a->beta;
    P.g = (const float *)a->g;
    P.mask = (const float *)a->mask;
    P.h0 = (const float *)a->h0;
    P.d_o = a->d_o;
    P.dht = (const float *)a->dht;
    P.dq = a->dq;
    P.dk = a->dk;
    P.dv = a->dv;
    P.dbeta = a->dbeta;
    P.dg = (float *)a->dg;
    P.dmask = (float *)a->dmask;
    P.dh0 = (float *)a->dh0;
    P.veck = d->K % 8 == 0 && aligned16(a->q) && aligned16(a->k) && aligned16(a->dq) && aligned16(a->dk);
    P.vecv = d->V % 8 == 0 && aligned16(a->v) && aligned16(a->d_o) && aligned16(a->dv);
    const int limit = max_smem_optin();
    GdpStatus s = a->saved ? GDP_OK : run_front<IT>(who, pl, P, st, limit);
    if (s != GDP_OK) return s;
    if (!pick_bv<IT>(pl, true, false, k_dh<IT>, P.bv, P.nst))
        return gdp_fail(GDP_ERR_UNSUPPORTED, "%s: K=%d needs more shared memory than this GPU has", who, P.K);
    env_bv<IT>(pl, true, false, P);
    s = launch_dh<IT>(who, pl, P, st);
    if (s != GDP_OK) return s;
    const bool fast_bwd = use_fast<IT>("bwd") && fast_shape(pl, P);
    /* the whole-K bwd_a at K 128 (V <= 128) where two CTAs fit an SM (16 and 32 chunk tokens);
     * GDP_BWD_A=kres / tile forces one or the other where the shape allows */
    const char *bwd_a_env = getenv("GDP_BWD_A");
    const bool kres_shape = fast_bwd && pl.KP == 128 && P.nvt <= 2 && bwd_a_kres_smem(pl.Ctp) <= (size_t)limit;
    const bool kres = kres_shape && (bwd_a_env ? !strcmp(bwd_a_env, "kres") : pl.Ctp <= 32);
    const int rr = d->mode == GDP_MODE_SPLIT ? d->n * d->n : 0;
    const size_t sbh = BwdBhSmem<IT>::carve(nullptr, rr, nullptr);
    const bool fast_b = fast_bwd && BwdBFastSmem::BYTES <= (size_t)limit;
    /* split mode at n 2 and 4 sums a token's rows across lanes; GDP_BWD_B_SPLIT=tiles forces the fp32
     * tiles (the only way for other n) */
    const char *split_env = getenv("GDP_BWD_B_SPLIT");
    const bool split_lanes = (d->n == 2 || d->n == 4) && !(split_env && !strcmp(split_env, "tiles"));
    int bkind = -1; /* k_bwd_b_fast's kind, or none */
    if (fast_b && d->mode == GDP_MODE_HOUSEHOLDER)
        bkind = BWDB_HOUSEHOLDER;
    else if (fast_b && P.wsl8 && split_lanes) /* wsl8 holds wherever fast_shape does */
        bkind = BWDB_SPLIT_LANES + d->n;
    else if (fast_b && rr <= GDP_SPLIT_FAST_RR && P.wsl8)
        bkind = BWDB_SPLIT_TILES;
    const char *fuse_env = getenv("GDP_BWD_FUSE"), *discard_env = getenv("GDP_BWD_DISCARD");
    const size_t sab = bwd_a_kres_smem(pl.Ctp) > BwdBFastSmem::BYTES ? bwd_a_kres_smem(pl.Ctp) : BwdBFastSmem::BYTES;
    const auto fused = kres && bkind >= 0 && sab <= (size_t)limit && !(fuse_env && !strcmp(fuse_env, "0")) ? bwd_ab_kernel(pl.Ctp, bkind) : nullptr;
    if (fused) { /* the discard needs each chunk's dW and dK_w to be whole 128-byte lines */
        P.dw_discard = !(discard_env && !strcmp(discard_env, "0")) && ((uintptr_t)P.dW & 127) == 0 && ((uintptr_t)P.dKw & 127) == 0 &&
                       (P.sW * (int64_t)sizeof(bf16_t)) % 128 == 0;
        s = launch(who, "k_bwd_ab", fused, chunk_grid(), sab, st, P);
        if (s != GDP_OK) return s;
    } else {
        if (kres) {
            s = launch(who, "k_bwd_a_kres", bwd_a_kres_kernel(pl.Ctp), chunk_grid(), bwd_a_kres_smem(pl.Ctp), st, P);
            if (s != GDP_OK) return s;
        } else if (fast_bwd && bwd_a_fast_kernel<true>(pl.Ctp)) {
            const char *grid_env = getenv("GDP_BWD_A_GRID");
            s = grid_env && !strcmp(grid_env, "kz")
                    ? launch(who, "k_bwd_a_fast", bwd_a_fast_kernel<false>(pl.Ctp), chunk_grid(P.nkt), bwd_a_fast_smem(pl.Ctp), st, P)
                    : launch(who, "k_bwd_a_fast", bwd_a_fast_kernel<true>(pl.Ctp), chunk_grid_kt_x(P.nkt), bwd_a_fast_smem(pl.Ctp), st, P);
            if (s != GDP_OK) return s;
        } else {
            LAUNCH(k_bwd_a<IT>, chunk_grid(P.nkt), BwdASmem<IT>::carve(nullptr, pl.Ctp, pl.nvt, nullptr));
        }
        if (bkind >= 0) {
            s = launch(who, "k_bwd_b_fast", bwd_b_fast_kernel(bkind), chunk_grid(), BwdBFastSmem::BYTES, st, P);
            if (s != GDP_OK) return s;
        } else if (d->mode == GDP_MODE_HOUSEHOLDER && sbh <= (size_t)limit)
            LAUNCH((k_bwd_b_hh<IT, false>), chunk_grid(), sbh);
        else if (d->mode == GDP_MODE_SPLIT && rr <= GDP_SPLIT_FAST_RR && sbh <= (size_t)limit)
            LAUNCH((k_bwd_b_hh<IT, true>), chunk_grid(), sbh);
        else
            LAUNCH(k_bwd_b<IT>, chunk_grid(), BwdBSmem<IT>::carve(nullptr, rr, nullptr));
    }
    if (rr && P.dmask) {
        k_dmask<<<P.H, 256, 0, st>>>(P);
        GDP_CU(cudaGetLastError());
    }
    return GDP_OK;
}

} // namespace gdp

/* ---------------------------------------------------------------- public API */
/* the plan of a descriptor that gdp_validate accepts; false (sizes 0) for any other */
static bool plan_for(const GdpDesc *desc, GdpPlan *pl) {
    if (gdp_validate(desc) != GDP_OK) return false;
    gdp_plan_make(desc, pl);
    return true;
}

/* the kernels move 16 bytes at a time from every region of the saved buffer */
static GdpStatus check_saved_aligned(const char *who, const void *saved) {
    if (((uintptr_t)saved & 15) != 0) return gdp_fail(GDP_ERR_INVALID, "%s: the saved buffer must be 16-byte aligned", who);
    return GDP_OK;
}

extern "C" size_t gdp_forward_workspace_bytes(const GdpDesc *desc) {
    GdpPlan pl;
    return plan_for(desc, &pl) ? pl.bytes_fwd : 0;
}

extern "C" size_t gdp_backward_workspace_bytes(const GdpDesc *desc) {
    GdpPlan pl;
    return plan_for(desc, &pl) ? pl.bytes_bwd : 0;
}

extern "C" size_t gdp_saved_bytes(const GdpDesc *desc) {
    GdpPlan pl;
    return plan_for(desc, &pl) ? pl.bytes_saved : 0;
}

extern "C" size_t gdp_backward_scratch_bytes(const GdpDesc *desc) {
    GdpPlan pl;
    return plan_for(desc, &pl) ? pl.bytes_scratch : 0;
}

extern "C" GdpStatus gdp_forward_cuda(const GdpDesc *desc, const GdpForwardArgs *args, void *workspace,
                                      size_t workspace_bytes, void *stream) {
    const char *who = "gdp_forward_cuda";
    GdpStatus s = gdp::check_common(who, desc);
    if (s != GDP_OK) return s;
    s = gdp_check_forward_args(who, desc, args);
    if (s != GDP_OK) return s;
    if (args->saved) { /* the saved buffer is the workspace; the workspace argument is not used */
        const size_t need = gdp_saved_bytes(desc);
        if (args->saved_bytes < need)
            return gdp_fail(GDP_ERR_WORKSPACE, "%s: the saved buffer has %zu bytes, %zu are needed (gdp_saved_bytes)",
                            who, args->saved_bytes, need);
        s = check_saved_aligned(who, args->saved);
        if (s != GDP_OK) return s;
    } else {
        const size_t need = gdp_forward_workspace_bytes(desc);
        if (!workspace || workspace_bytes < need)
            return gdp_fail(GDP_ERR_WORKSPACE,
                            "%s: the workspace has %zu bytes, %zu are needed (gdp_forward_workspace_bytes)", who,
                            workspace ? workspace_bytes : (size_t)0, need);
    }
    gdp_clear_error();
    cudaStream_t st = (cudaStream_t)stream;
    return desc->dtype == GDP_BF16 ? gdp::forward_impl<__nv_bfloat16>(desc, args, workspace, st)
                                   : gdp::forward_impl<float>(desc, args, workspace, st);
}

extern "C" GdpStatus gdp_backward_cuda(const GdpDesc *desc, const GdpBackwardArgs *args, void *workspace,
                                       size_t workspace_bytes, void *stream) {
    const char *who = "gdp_backward_cuda";
    GdpStatus s = gdp::check_common(who, desc);
    if (s != GDP_OK) return s;
    s = gdp_check_backward_args(who, desc, args);
    if (s != GDP_OK) return s;
    const size_t need = args->saved ? gdp_backward_scratch_bytes(desc) : gdp_backward_workspace_bytes(desc);
    if (!workspace || workspace_bytes < need)
        return gdp_fail(GDP_ERR_WORKSPACE, "%s: the workspace has %zu bytes, %zu are needed (%s)", who,
                        workspace ? workspace_bytes : (size_t)0, need,
                        args->saved ? "gdp_backward_scratch_bytes, with a saved forward" : "gdp_backward_workspace_bytes");
    if (args->saved) {
        s = check_saved_aligned(who, args->saved);
        if (s != GDP_OK) return s;
    }
    gdp_clear_error();
    cudaStream_t st = (cudaStream_t)stream;
    return desc->dtype == GDP_BF16 ? gdp::backward_impl<__nv_bfloat16>(desc, args, workspace, st)
                                   : gdp::backward_impl<float>(desc, args, workspace, st);
}
