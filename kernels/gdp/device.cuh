/* Gated DeltaProduct CUDA kernels: what every pass shares (the kernel parameters, shared-memory
 * carving, row access, the chunk context, split-mode keys, the A and T solve of a chunk). */
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/common.cuh"
#include "kernels/gdp/gdp.h"
#include "kernels/gdp/desc.h"
#include "kernels/gdp/layout.h"
#include "kernels/gdp/mma.cuh"
#include "kernels/gdp/smem.h"

namespace gdp {

constexpr int NTHREADS = 256;
constexpr int LDT = GDP_TILE + 8; /* leading dimension of 64-wide operand tiles */
constexpr int LDF = GDP_TILE + 4; /* leading dimension of 64-wide fp32 tiles */
constexpr int LDA = 65;           /* fp32 64x64 A and T */
/* the fast prep's A and T: rows 16-byte aligned, so the solve's row reads are 16-byte loads (row
 * pieces 2 rows apart land 8 banks apart) */
constexpr int LDAF = 68;
static_assert(LDT == GDP_SMEM_LDT && LDF == GDP_SMEM_LDF && LDA == GDP_SMEM_LDA && LDAF == GDP_SMEM_LDAF, "smem.h");

struct Params {
    int mode, B, T, H, K, V, n, KP, VP, Ct, Ctp, N, NCmax, nkt, nvt, bv, nst;
    bool veck, vecv; /* rows of K (V) elements may be moved 16 bytes at a time */
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
 * with the heads of one chunk 512 CTAs apart (H200). (ci as blockIdx.x / H of a
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
 * and read those tiles from DRAM again. P.seq_hv keeps that order where there are more sequences than
 * GdpTuning.grid_y_max (65535 by default, what the z dimension can hold). */
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
 * registers and made it 3% slower (H200). */
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

__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

/* dg for the chunk's tokens from the per-row gate gradients dGr[64]: per-token sums, then a reverse
 * inclusive scan over the tokens (warp 0). */
inline __device__ void dg_scan(const Params &P, const ChunkCtx &c, const float *dGr) {
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

} // namespace gdp
