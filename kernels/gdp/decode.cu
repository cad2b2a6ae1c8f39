/* Gated DeltaProduct decode step on CUDA (float32): kernels/gdp/decode.h.
 *
 * Grid (ceil(V/32), H, B); block (32, 8). The CTA of (b, h, tile) owns the state columns
 * x = 32*tile + lane: thread (lane, y) keeps rows c = y, y+8, ..., of its column in registers
 * (at most 256/8 = 32 rows). Keys and q sit in shared memory. A column sum over c (S^T k or S^T q)
 * is a per-thread partial over its rows, then a fixed-order sum over the 8 row groups through
 * shared memory, so every thread gets the same bits on every run. Per token:
 *   decay:        s *= e^g
 *   householder:  for each slot j: p = S^T k_j (column sums), s += k_j * beta_j (v_j - p)
 *   split:        P[a] = k^(a)T S^(a) for every slice a (column sums over the slice's rows), then
 *                 row c of slice a: s += k[c] * beta (v - sum_b M[a,b] P[b])
 *   read-out:     o = scale * S^T q;  then the tile goes back to S.
 * Each CTA reads and writes only its own tile of S: no inter-CTA hazards. Columns past V and rows
 * past K hold zeros and are never stored. */
#include "kernels/common.cuh"
#include "kernels/gdp/desc.h"
#include "kernels/gdp/decode.h"

#define DEC_BV 32                                 /* state columns per CTA (= lanes) */
#define DEC_NY 8                                  /* row groups per CTA */
#define DEC_THREADS (DEC_BV * DEC_NY)
#define DEC_RPT (GDP_DECODE_MAX_K / DEC_NY)       /* rows per thread, at most */

struct DecParams {
    float *S, *o;
    const float *q, *k, *v, *beta, *g, *mask;
    int H, K, V, n, split;
    float scale;
};

/* Sum over the 8 row groups of one column; every thread of the block must call it. */
static __device__ __forceinline__ float dec_col_sum(float part, float *red) {
    red[threadIdx.y * DEC_BV + threadIdx.x] = part;
    __syncthreads();
    float t = 0.f;
#pragma unroll
    for (int y = 0; y < DEC_NY; y++) t += red[y * DEC_BV + threadIdx.x];
    __syncthreads(); /* red is reused by the next call */
    return t;
}

__global__ void __launch_bounds__(DEC_THREADS) gdp_decode_kernel(DecParams P) {
    extern __shared__ float smem[];
    const int K = P.K, V = P.V, H = P.H, n = P.n;
    const int nk = P.split ? 1 : n; /* keys per (b, h) */
    const int b = blockIdx.z, h = blockIdx.y;
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * DEC_BV + tx;
    const int x = blockIdx.x * DEC_BV + tx;
    const bool col_ok = x < V;
    const long long bh = (long long)b * H + h;

    float *ks = smem;               /* [nk][K] */
    float *qs = ks + (size_t)nk * K; /* [K] */
    float *red = qs + K;            /* [DEC_NY][DEC_BV] */
    float *Ps = red + DEC_NY * DEC_BV; /* split: [r][DEC_BV] */

    for (int i = tid; i < nk * K; i += DEC_THREADS) {
        const int j = i / K, c = i - j * K;
        const long long src = P.split ? bh * K + c : (((long long)b * n + j) * H + h) * K + c;
        ks[i] = P.k[src];
    }
    for (int c = tid; c < K; c += DEC_THREADS) qs[c] = P.q[bh * K + c];

    float *Sh = P.S + bh * (long long)K * V;
    float s[DEC_RPT];
#pragma unroll
    for (int i = 0; i < DEC_RPT; i++) {
        const int c = ty + i * DEC_NY;
        s[i] = (col_ok && c < K) ? Sh[(long long)c * V + x] : 0.f;
    }
    if (P.g) {
        const float e = expf(P.g[bh]);
#pragma unroll
        for (int i = 0; i < DEC_RPT; i++) s[i] *= e;
    }
    __syncthreads(); /* ks, qs written */

    if (!P.split) {
        for (int j = 0; j < n; j++) {
            const float *kj = ks + (size_t)j * K;
            float part = 0.f;
#pragma unroll
            for (int i = 0; i < DEC_RPT; i++) {
                const int c = ty + i * DEC_NY;
                if (c < K) part += s[i] * kj[c];
            }
            const float p = dec_col_sum(part, red);
            const long long slot = ((long long)b * n + j) * H + h;
            const float vx = col_ok ? P.v[slot * V + x] : 0.f;
            const float u = P.beta[slot] * (vx - p);
#pragma unroll
            for (int i = 0; i < DEC_RPT; i++) {
                const int c = ty + i * DEC_NY;
                if (c < K) s[i] += kj[c] * u;
            }
        }
    } else {
        const int r = n, w = K / r;
        for (int a = 0; a < r; a++) {
            const int c0 = a * w, c1 = c0 + w;
            float part = 0.f;
#pragma unroll
            for (int i = 0; i < DEC_RPT; i++) {
                const int c = ty + i * DEC_NY;
                if (c >= c0 && c < c1) part += s[i] * ks[c];
            }
            const float p = dec_col_sum(part, red);
            if (ty == 0) Ps[a * DEC_BV + tx] = p;
        }
        __syncthreads(); /* Ps written */
        const float vx = col_ok ? P.v[bh * V + x] : 0.f;
        const float bb = P.beta[bh];
        const float *M = P.mask + (long long)h * r * r;
#pragma unroll
        for (int i = 0; i < DEC_RPT; i++) {
            const int c = ty + i * DEC_NY;
            if (c < K) {
                const int a = c / w;
                float u = vx;
                for (int t = 0; t < r; t++) u -= M[a * r + t] * Ps[t * DEC_BV + tx];
                s[i] += ks[c] * (bb * u);
            }
        }
    }

    float part = 0.f;
#pragma unroll
    for (int i = 0; i < DEC_RPT; i++) {
        const int c = ty + i * DEC_NY;
        if (c < K) part += s[i] * qs[c];
    }
    const float ox = dec_col_sum(part, red);
    if (ty == 0 && col_ok) P.o[bh * V + x] = P.scale * ox;
#pragma unroll
    for (int i = 0; i < DEC_RPT; i++) {
        const int c = ty + i * DEC_NY;
        if (col_ok && c < K) Sh[(long long)c * V + x] = s[i];
    }
}

#define DEC_CU(call)                                                                                           \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess)                                                                                 \
            return gdp_fail(GDP_ERR_CUDA, "%s: CUDA call failed: %s: %s (%s:%d)", who, #call, cudaGetErrorString(e_), \
                            __FILE__, __LINE__);                                                               \
    } while (0)

extern "C" GdpStatus gdp_decode_step_cuda(const GdpDesc *d, const GdpDecodeArgs *a, void *stream) {
    const char *who = "gdp_decode_step_cuda";
    GdpStatus st = gdp_decode_check(who, d, a);
    if (st != GDP_OK) return st;
    if (d->dtype != GDP_F32)
        return gdp_fail(GDP_ERR_UNSUPPORTED, "%s: dtype %s: the decode kernel is float32 only (GDP_F32)", who,
                        dtype_name(d->dtype));
    if (d->K > GDP_DECODE_MAX_K)
        return gdp_fail(GDP_ERR_UNSUPPORTED, "%s: K=%d, the decode kernel takes K up to %d", who, d->K,
                        GDP_DECODE_MAX_K);
    if (d->B > 65535 || d->H > 65535)
        return gdp_fail(GDP_ERR_UNSUPPORTED, "%s: B=%d, H=%d: at most 65535 each (grid dimensions)", who, d->B, d->H);
    const bool split = d->mode == GDP_MODE_SPLIT;
    const int nk = split ? 1 : d->n;
    const size_t smem = sizeof(float) * ((size_t)nk * d->K + (size_t)d->K + DEC_NY * DEC_BV +
                                         (split ? (size_t)d->n * DEC_BV : 0));
    int dev = 0, limit = 0;
    DEC_CU(cudaGetDevice(&dev));
    DEC_CU(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (smem > (size_t)limit)
        return gdp_fail(GDP_ERR_UNSUPPORTED, "%s: n=%d, K=%d need %zu bytes of shared memory, the GPU allows %d", who,
                        d->n, d->K, smem, limit);
    if (smem > 48 * 1024)
        DEC_CU(cudaFuncSetAttribute(gdp_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    DecParams P;
    P.S = (float *)a->S, P.o = (float *)a->o;
    P.q = (const float *)a->q, P.k = (const float *)a->k, P.v = (const float *)a->v;
    P.beta = (const float *)a->beta, P.g = (const float *)a->g, P.mask = (const float *)a->mask;
    P.H = d->H, P.K = d->K, P.V = d->V, P.n = d->n, P.split = split ? 1 : 0;
    P.scale = (float)gdp_effective_scale(d);
    dim3 grid((unsigned)((d->V + DEC_BV - 1) / DEC_BV), (unsigned)d->H, (unsigned)d->B), block(DEC_BV, DEC_NY);
    gdp_decode_kernel<<<grid, block, smem, (cudaStream_t)stream>>>(P);
    DEC_CU(cudaGetLastError());
#ifdef GDP_DEBUG_SYNC
    DEC_CU(cudaStreamSynchronize((cudaStream_t)stream));
#endif
    return GDP_OK;
}
