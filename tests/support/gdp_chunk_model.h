/* A float64 model of the CUDA path's chunked algorithm (kernels/gdp/layout.h): the same
 * chunk grid, the same intermediates in the same workspace layout, computed with plain loops.
 * The GPU test compares the device workspace against it, kernel by kernel, so a wrong result
 * points at the stage that made it; it is also checked against the per-token CPU reference.
 * Test code only: static functions, included by test_gdp_chunk_model, the GPU test and
 * bench/lookahead_bf16.c. */
#pragma once
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gdp/layout.h"

/* what not every includer calls */
#define GDPM_OPTIONAL __attribute__((unused))

typedef struct GdpModel {
    GdpLayout p;
    int nchunks;
    GdpSeqInfo *seq;    /* N+1 */
    GdpChunkInfo *chunk; /* nchunks */
    /* per chunk-head arrays in the plan layout (double); dGa holds the sum over K tiles in row 0..63 */
    double *G, *W, *Kwd, *U, *P, *h, *D, *dh, *dD, *dW, *dKw, *dGa, *dM;
} GdpModel;

static void gdpm_tables(const GdpDesc *d, const int32_t *cu_host, GdpModel *m) {
    GdpLayout *p = &m->p;
    m->seq = (GdpSeqInfo *)calloc((size_t)p->N + 1, sizeof(GdpSeqInfo));
    int c0 = 0;
    for (int s = 0; s < p->N; s++) {
        int base = cu_host ? cu_host[s] : s * d->T;
        int len = cu_host ? cu_host[s + 1] - cu_host[s] : d->T;
        m->seq[s] = (GdpSeqInfo){base, len, c0, 0};
        c0 += (len + p->Ct - 1) / p->Ct;
    }
    m->seq[p->N] = (GdpSeqInfo){0, 0, c0, 0};
    m->nchunks = c0;
    m->chunk = (GdpChunkInfo *)calloc((size_t)(c0 > 0 ? c0 : 1), sizeof(GdpChunkInfo));
    for (int s = 0; s < p->N; s++)
        for (int c = 0; m->seq[s].c0 + c < m->seq[s + 1].c0; c++) {
            int ct = m->seq[s].len - c * p->Ct;
            if (ct > p->Ct) ct = p->Ct;
            m->chunk[m->seq[s].c0 + c] = (GdpChunkInfo){s, m->seq[s].base + c * p->Ct, ct, c};
        }
}

/* Inputs are float64 in the public layouts. */
typedef struct GdpModelIn {
    const double *q, *k, *v, *beta, *g, *mask, *h0, *d_o, *dht;
} GdpModelIn;

/* Row p of chunk-head (ci,h): read key R, write key Kw (length K), value (V), beta. */
static void gdpm_row(const GdpDesc *d, const GdpModelIn *in, int tok, int h, int a, double *R, double *Kw, double *vv,
                     double *bb) {
    int K = d->K, V = d->V, H = d->H, n = d->n;
    if (d->mode == GDP_MODE_HOUSEHOLDER) {
        const double *kk = in->k + (((int64_t)tok * n + a) * H + h) * K;
        for (int x = 0; x < K; x++) R[x] = Kw[x] = kk[x];
        memcpy(vv, in->v + (((int64_t)tok * n + a) * H + h) * V, sizeof(double) * V);
        *bb = in->beta[((int64_t)tok * n + a) * H + h];
    } else {
        const double *kk = in->k + ((int64_t)tok * H + h) * K;
        const double *M = in->mask + (int64_t)h * n * n;
        int w = K / n;
        for (int x = 0; x < K; x++) {
            Kw[x] = x / w == a ? kk[x] : 0;
            R[x] = M[a * n + x / w] * kk[x];
        }
        memcpy(vv, in->v + ((int64_t)tok * H + h) * V, sizeof(double) * V);
        *bb = in->beta[(int64_t)tok * H + h];
    }
}

static int gdpm_earlier(int mode, int n, int i, int j) { return mode == GDP_MODE_HOUSEHOLDER ? j < i : j / n < i / n; }

/* Per-chunk local data (recomputed by forward and backward) */
typedef struct GdpmChunk {
    int lc, ct;
    double R[64][256], Kw[64][256], Vr[64][256], br[64], Gt[64], A[64][64], T[64][64];
} GdpmChunk;

static void gdpm_load_chunk(const GdpDesc *d, const GdpModelIn *in, const GdpChunkInfo *ck, int h, GdpmChunk *c) {
    int n = d->n, K = d->K, H = d->H;
    c->ct = ck->ct;
    c->lc = n * ck->ct;
    memset(c->R, 0, sizeof c->R);
    memset(c->Kw, 0, sizeof c->Kw);
    memset(c->Vr, 0, sizeof c->Vr);
    memset(c->br, 0, sizeof c->br);
    memset(c->Gt, 0, sizeof c->Gt);
    double acc = 0;
    for (int t = 0; t < c->ct; t++) {
        if (in->g) acc += in->g[(int64_t)(ck->tok0 + t) * H + h];
        c->Gt[t] = acc;
    }
    for (int p = 0; p < c->lc; p++) gdpm_row(d, in, ck->tok0 + p / n, h, p % n, c->R[p], c->Kw[p], c->Vr[p], &c->br[p]);
    memset(c->A, 0, sizeof c->A);
    for (int i = 0; i < c->lc; i++)
        for (int j = 0; j < c->lc; j++) {
            if (!gdpm_earlier(d->mode, n, i, j)) continue;
            double s = 0;
            for (int x = 0; x < K; x++) s += c->R[i][x] * c->Kw[j][x];
            c->A[i][j] = c->br[i] * exp(c->Gt[i / n] - c->Gt[j / n]) * s;
        }
    /* T = (I + A)^-1 by forward substitution */
    memset(c->T, 0, sizeof c->T);
    for (int i = 0; i < 64; i++) {
        for (int j = 0; j < 64; j++) {
            double s = i == j ? 1 : 0;
            for (int m = 0; m < i; m++) s -= c->A[i][m] * c->T[m][j];
            c->T[i][j] = s;
        }
    }
}

static void gdpm_init(const GdpDesc *d, const int32_t *cu_host, GdpModel *m, int backward) {
    memset(m, 0, sizeof *m);
    gdp_layout_make(d, &m->p);
    gdpm_tables(d, cu_host, m);
    GdpLayout *p = &m->p;
    size_t CH = (size_t)p->CH;
    m->G = (double *)calloc(CH * p->sG, sizeof(double));
    m->W = (double *)calloc(CH * p->sW, sizeof(double));
    m->Kwd = (double *)calloc(CH * p->sW, sizeof(double));
    m->U = (double *)calloc(CH * p->sU, sizeof(double));
    m->P = (double *)calloc(CH * p->sP, sizeof(double));
    m->h = (double *)calloc(CH * p->sH, sizeof(double));
    m->D = (double *)calloc(CH * p->sD, sizeof(double));
    if (backward) {
        m->dh = (double *)calloc(CH * p->sH, sizeof(double));
        m->dD = (double *)calloc(CH * p->sD, sizeof(double));
        m->dW = (double *)calloc(CH * p->sW, sizeof(double));
        m->dKw = (double *)calloc(CH * p->sW, sizeof(double));
        m->dGa = (double *)calloc(CH * 64, sizeof(double));
        m->dM = (double *)calloc(CH * (p->sdM > 0 ? p->sdM : 1), sizeof(double));
    }
}

static void gdpm_free(GdpModel *m) {
    free(m->seq); free(m->chunk);
    free(m->G); free(m->W); free(m->Kwd); free(m->U); free(m->P); free(m->h); free(m->D);
    free(m->dh); free(m->dD); free(m->dW); free(m->dKw); free(m->dGa); free(m->dM);
    memset(m, 0, sizeof *m);
}

/* S = sequence s, head h's K x V state of src ([N][H][K][V]), or zeros without one */
static void gdpm_state_of(double *S, const double *src, int s, int h, const GdpDesc *d) {
    const size_t kv = (size_t)d->K * d->V;
    if (src)
        memcpy(S, src + ((size_t)s * d->H + h) * kv, sizeof(double) * kv);
    else
        memset(S, 0, sizeof(double) * kv);
}

/* The state pass's pieces for chunk-head (ci, h): Delta = U - f W S (rows < lc, into out[64][V]; f is
 * 1, or the last chunk's gate where the lookahead makes U'), S = g S + Kwd^T Delta in place, and the
 * lookahead's M[i][j] = <row i of W of chunk ci + 1, row j of Kwd of chunk ci> */
static void gdpm_delta(const GdpDesc *d, const GdpModel *m, int ci, int h, const double *S, double f, double *out) {
    const GdpLayout *p = &m->p;
    const int K = d->K, V = d->V, KP = p->KP, VP = p->VP;
    const int64_t ch = (int64_t)ci * d->H + h;
    for (int i = 0; i < d->n * m->chunk[ci].ct; i++)
        for (int y = 0; y < V; y++) {
            double acc = m->U[ch * p->sU + (int64_t)i * VP + y];
            for (int x = 0; x < K; x++) acc -= f * m->W[ch * p->sW + (int64_t)i * KP + x] * S[x * V + y];
            out[i * V + y] = acc;
        }
}
static void gdpm_state_step(const GdpDesc *d, const GdpModel *m, int ci, int h, double *S, const double *Dl) {
    const GdpLayout *p = &m->p;
    const int K = d->K, V = d->V, KP = p->KP;
    const int64_t ch = (int64_t)ci * d->H + h;
    const double gL = exp(m->G[ch * p->sG + m->chunk[ci].ct - 1]);
    for (int x = 0; x < K; x++)
        for (int y = 0; y < V; y++) {
            double acc = gL * S[x * V + y];
            for (int i = 0; i < d->n * m->chunk[ci].ct; i++) acc += m->Kwd[ch * p->sW + (int64_t)i * KP + x] * Dl[i * V + y];
            S[x * V + y] = acc;
        }
}
static double gdpm_m_entry(const GdpDesc *d, const GdpModel *m, int ci, int h, int i, int j) {
    const GdpLayout *p = &m->p;
    const int64_t ch = (int64_t)ci * d->H + h;
    const double *w = m->W + (ch + d->H) * p->sW + (int64_t)i * p->KP, *kw = m->Kwd + ch * p->sW + (int64_t)j * p->KP;
    double a = 0;
    for (int x = 0; x < d->K; x++) a += w[x] * kw[x];
    return a;
}
/* rows < rows of a [64][V] tile into chunk-head ch's rows of a workspace array (row stride VP) */
static void gdpm_put_rows(double *dst, int64_t ch, int64_t per, int rows, const double *src, const GdpDesc *d, int VP) {
    for (int i = 0; i < rows; i++)
        for (int y = 0; y < d->V; y++) dst[ch * per + (int64_t)i * VP + y] = src[i * d->V + y];
}

/* Forward: fills G, W, Kwd, U, P, h, D; writes o [B,T,H,V] and ht (if non-NULL). */
static void gdpm_forward(const GdpDesc *d, const GdpModelIn *in, GdpModel *m, double *o, double *ht) {
    GdpLayout *p = &m->p;
    const int K = d->K, V = d->V, H = d->H, n = d->n, KP = p->KP, VP = p->VP;
    const double scale = d->scale != 0 ? d->scale : 1.0 / sqrt((double)K);
    GdpmChunk *c = (GdpmChunk *)malloc(sizeof(GdpmChunk));
    /* per-chunk parallel part */
    for (int ci = 0; ci < m->nchunks; ci++)
        for (int h = 0; h < H; h++) {
            const GdpChunkInfo *ck = &m->chunk[ci];
            int64_t ch = (int64_t)ci * H + h;
            gdpm_load_chunk(d, in, ck, h, c);
            for (int t = 0; t < c->ct; t++) m->G[ch * p->sG + t] = c->Gt[t];
            double GL = c->Gt[c->ct - 1];
            for (int i = 0; i < c->lc; i++) {
                double gi = exp(c->Gt[i / n]);
                for (int x = 0; x < K; x++) {
                    double s = 0;
                    for (int j = 0; j <= i; j++) s += c->T[i][j] * c->br[j] * exp(c->Gt[j / n]) * c->R[j][x];
                    m->W[ch * p->sW + (int64_t)i * KP + x] = s;
                    m->Kwd[ch * p->sW + (int64_t)i * KP + x] = exp(GL - c->Gt[i / n]) * c->Kw[i][x];
                }
                (void)gi;
                for (int x = 0; x < V; x++) {
                    double s = 0;
                    for (int j = 0; j <= i; j++) s += c->T[i][j] * c->br[j] * c->Vr[j][x];
                    m->U[ch * p->sU + (int64_t)i * VP + x] = s;
                }
            }
            for (int t = 0; t < c->ct; t++) {
                const double *qq = in->q + ((int64_t)(ck->tok0 + t) * H + h) * K;
                for (int s = 0; s < c->lc; s++) {
                    if (s / n > t) continue;
                    double acc = 0;
                    for (int x = 0; x < K; x++) acc += qq[x] * c->Kw[s][x];
                    m->P[ch * p->sP + (int64_t)t * 64 + s] = scale * exp(c->Gt[t] - c->Gt[s / n]) * acc;
                }
            }
        }
    /* state pass */
    double *S = (double *)malloc(sizeof(double) * K * V);
    double *Dl = (double *)malloc(sizeof(double) * 64 * V);
    for (int s = 0; s < p->N; s++)
        for (int h = 0; h < H; h++) {
            gdpm_state_of(S, in->h0, s, h, d);
            for (int ci = m->seq[s].c0; ci < m->seq[s + 1].c0; ci++) {
                int64_t ch = (int64_t)ci * H + h;
                gdpm_put_rows(m->h, ch, p->sH, K, S, d, VP);
                gdpm_delta(d, m, ci, h, S, 1.0, Dl);
                gdpm_put_rows(m->D, ch, p->sD, n * m->chunk[ci].ct, Dl, d, VP);
                gdpm_state_step(d, m, ci, h, S, Dl);
            }
            if (ht) memcpy(ht + ((int64_t)s * H + h) * K * V, S, sizeof(double) * K * V);
        }
    /* output */
    for (int ci = 0; ci < m->nchunks; ci++)
        for (int h = 0; h < H; h++) {
            const GdpChunkInfo *ck = &m->chunk[ci];
            int64_t ch = (int64_t)ci * H + h;
            int lc = n * ck->ct;
            for (int t = 0; t < ck->ct; t++) {
                const double *qq = in->q + ((int64_t)(ck->tok0 + t) * H + h) * K;
                double gq = scale * exp(m->G[ch * p->sG + t]);
                double *oo = o + ((int64_t)(ck->tok0 + t) * H + h) * V;
                for (int y = 0; y < V; y++) {
                    double acc = 0;
                    for (int x = 0; x < K; x++) acc += gq * qq[x] * m->h[ch * p->sH + (int64_t)x * VP + y];
                    for (int s2 = 0; s2 < lc; s2++)
                        acc += m->P[ch * p->sP + (int64_t)t * 64 + s2] * m->D[ch * p->sD + (int64_t)s2 * VP + y];
                    oo[y] = acc;
                }
            }
        }
    free(S);
    free(Dl);
    free(c);
}

/* The state pass with one chunk of lookahead (docs/performance.md, "Decisions"), from the intermediates
 * gdpm_forward left in m (W, Kwd, U, G): Delta_{c+1} = U'_{c+1} - M_c Delta_c with U'_{c+1} =
 * U_{c+1} - g_c W_{c+1} h_c and M_c = W_{c+1} Kwd_c^T, so that a step's Delta needs the last Delta and
 * not the state just made; h_{c+1} = g_c h_c + Kwd_c^T Delta_c as before. Writes h and Delta in the
 * workspace layout (h2, D2, CH chunk-heads each) and the final state (ht2, [N][H][K][V]); equal to
 * gdpm_forward's h, D and ht up to rounding. */
GDPM_OPTIONAL static void gdpm_state_lookahead(const GdpDesc *d, const double *h0, const GdpModel *m, double *h2, double *D2,
                                               double *ht2) {
    const GdpLayout *p = &m->p;
    const int K = d->K, V = d->V, H = d->H, n = d->n, VP = p->VP;
    double *S = (double *)malloc(sizeof(double) * K * V);
    double *Dc = (double *)malloc(sizeof(double) * 64 * V), *Dn = (double *)malloc(sizeof(double) * 64 * V);
    for (int s = 0; s < p->N; s++)
        for (int h = 0; h < H; h++) {
            gdpm_state_of(S, h0, s, h, d);
            const int c0 = m->seq[s].c0, c1 = m->seq[s + 1].c0;
            if (c0 < c1) gdpm_delta(d, m, c0, h, S, 1.0, Dc); /* the first chunk's, as the plain pass */
            for (int ci = c0; ci < c1; ci++) {
                const int64_t ch = (int64_t)ci * H + h;
                const int lc = n * m->chunk[ci].ct;
                gdpm_put_rows(h2, ch, p->sH, K, S, d, VP);
                gdpm_put_rows(D2, ch, p->sD, lc, Dc, d, VP);
                if (ci + 1 < c1) { /* the next chunk's Delta: U' - M_c Delta_c */
                    gdpm_delta(d, m, ci + 1, h, S, exp(m->G[ch * p->sG + m->chunk[ci].ct - 1]), Dn);
                    for (int i = 0; i < n * m->chunk[ci + 1].ct; i++)
                        for (int j = 0; j < lc; j++) {
                            const double mij = gdpm_m_entry(d, m, ci, h, i, j);
                            for (int y = 0; y < V; y++) Dn[i * V + y] -= mij * Dc[j * V + y];
                        }
                }
                gdpm_state_step(d, m, ci, h, S, Dc);
                double *t = Dc;
                Dc = Dn, Dn = t;
            }
            memcpy(ht2 + ((int64_t)s * H + h) * K * V, S, sizeof(double) * K * V);
        }
    free(S);
    free(Dc);
    free(Dn);
}

/* The dh pass's pieces for chunk-head (ci, h): dDelta = P^T dO + Kwd dS (rows < lc, into out[64][V]),
 * and dS_out = g dS + (scale e^G q)^T dO - W^T dDelta (that term left out where dD is NULL) */
static void gdpm_ddelta(const GdpDesc *d, const GdpModelIn *in, const GdpModel *m, int ci, int h, const double *dS, double *out) {
    const GdpLayout *p = &m->p;
    const int K = d->K, V = d->V, H = d->H, KP = p->KP;
    const GdpChunkInfo *ck = &m->chunk[ci];
    const int64_t ch = (int64_t)ci * H + h;
    for (int i = 0; i < d->n * ck->ct; i++)
        for (int y = 0; y < V; y++) {
            double acc = 0;
            for (int t = 0; t < ck->ct; t++)
                acc += m->P[ch * p->sP + (int64_t)t * 64 + i] * in->d_o[((int64_t)(ck->tok0 + t) * H + h) * V + y];
            for (int x = 0; x < K; x++) acc += m->Kwd[ch * p->sW + (int64_t)i * KP + x] * dS[x * V + y];
            out[i * V + y] = acc;
        }
}
static void gdpm_ds_step(const GdpDesc *d, const GdpModelIn *in, const GdpModel *m, int ci, int h, const double *dS,
                         const double *dD, double *dS_out) {
    const GdpLayout *p = &m->p;
    const int K = d->K, V = d->V, H = d->H, KP = p->KP;
    const double scale = d->scale != 0 ? d->scale : 1.0 / sqrt((double)K);
    const GdpChunkInfo *ck = &m->chunk[ci];
    const int64_t ch = (int64_t)ci * H + h;
    const double gL = exp(m->G[ch * p->sG + ck->ct - 1]);
    for (int x = 0; x < K; x++)
        for (int y = 0; y < V; y++) {
            double acc = gL * dS[x * V + y];
            for (int t = 0; t < ck->ct; t++) {
                int64_t tk = (int64_t)(ck->tok0 + t) * H + h;
                acc += scale * exp(m->G[ch * p->sG + t]) * in->q[tk * K + x] * in->d_o[tk * V + y];
            }
            if (dD)
                for (int i = 0; i < d->n * ck->ct; i++) acc -= m->W[ch * p->sW + (int64_t)i * KP + x] * dD[i * V + y];
            dS_out[x * V + y] = acc;
        }
}

/* The dh pass with the same lookahead, which takes the same M: dDelta_{c-1} = dU'_{c-1} - M_{c-1}^T
 * dDelta_c with dU'_{c-1} = P_{c-1}^T dO_{c-1} + Kwd_{c-1} (g_c dS_c + (scale e^G q_c)^T dO_c), dS_c the
 * gradient of the state chunk c ends with; dS_{c-1} as before. From the model after gdpm_forward;
 * writes dh and dDelta in the workspace layout (dh2, dD2) and the gradient of h0 (dh02). */
GDPM_OPTIONAL static void gdpm_dh_lookahead(const GdpDesc *d, const GdpModelIn *in, const GdpModel *m, double *dh2,
                                            double *dD2, double *dh02) {
    const GdpLayout *p = &m->p;
    const int K = d->K, V = d->V, H = d->H, n = d->n, VP = p->VP;
    double *dS = (double *)malloc(sizeof(double) * K * V), *dSn = (double *)malloc(sizeof(double) * K * V);
    double *Dc = (double *)malloc(sizeof(double) * 64 * V), *Dn = (double *)malloc(sizeof(double) * 64 * V);
    for (int s = 0; s < p->N; s++)
        for (int h = 0; h < H; h++) {
            gdpm_state_of(dS, in->dht, s, h, d);
            const int c0 = m->seq[s].c0, c1 = m->seq[s + 1].c0;
            if (c0 < c1) gdpm_ddelta(d, in, m, c1 - 1, h, dS, Dc); /* the last chunk's, as the plain pass */
            for (int ci = c1 - 1; ci >= c0; ci--) {
                const int64_t ch = (int64_t)ci * H + h;
                const int lc = n * m->chunk[ci].ct;
                gdpm_put_rows(dh2, ch, p->sH, K, dS, d, VP);
                gdpm_put_rows(dD2, ch, p->sD, lc, Dc, d, VP);
                gdpm_ds_step(d, in, m, ci, h, dS, NULL, dSn); /* dS_{c-1} less its dDelta term, for dU' */
                if (ci - 1 >= c0) { /* the earlier chunk's dDelta: dU' - M_{c-1}^T dDelta_c */
                    gdpm_ddelta(d, in, m, ci - 1, h, dSn, Dn);
                    for (int i = 0; i < n * m->chunk[ci - 1].ct; i++)
                        for (int j = 0; j < lc; j++) {
                            const double mji = gdpm_m_entry(d, m, ci - 1, h, j, i);
                            for (int y = 0; y < V; y++) Dn[i * V + y] -= mji * Dc[j * V + y];
                        }
                }
                gdpm_ds_step(d, in, m, ci, h, dS, Dc, dSn);
                memcpy(dS, dSn, sizeof(double) * K * V);
                double *t = Dc;
                Dc = Dn, Dn = t;
            }
            if (dh02) memcpy(dh02 + ((int64_t)s * H + h) * K * V, dS, sizeof(double) * K * V);
        }
    free(dS);
    free(dSn);
    free(Dc);
    free(Dn);
}

/* Backward (after gdpm_forward on the same model): fills dh, dD, dW, dKw, dGa, dM and writes
 * the gradients (dq, dk, dv, dbeta always; dg, dmask, dh0 if non-NULL). */
GDPM_OPTIONAL static void gdpm_backward(const GdpDesc *d, const GdpModelIn *in, GdpModel *m, double *dq, double *dk,
                                        double *dv, double *dbeta, double *dg, double *dmask, double *dh0) {
    GdpLayout *p = &m->p;
    const int K = d->K, V = d->V, H = d->H, n = d->n, KP = p->KP, VP = p->VP;
    const double scale = d->scale != 0 ? d->scale : 1.0 / sqrt((double)K);
    /* dh pass (reverse) */
    double *dS = (double *)malloc(sizeof(double) * K * V), *dSn = (double *)malloc(sizeof(double) * K * V);
    double *dDl = (double *)malloc(sizeof(double) * 64 * V);
    for (int s = 0; s < p->N; s++)
        for (int h = 0; h < H; h++) {
            gdpm_state_of(dS, in->dht, s, h, d);
            for (int ci = m->seq[s + 1].c0 - 1; ci >= m->seq[s].c0; ci--) {
                int64_t ch = (int64_t)ci * H + h;
                int lc = n * m->chunk[ci].ct;
                gdpm_put_rows(m->dh, ch, p->sH, K, dS, d, VP);
                gdpm_ddelta(d, in, m, ci, h, dS, dDl);
                gdpm_put_rows(m->dD, ch, p->sD, lc, dDl, d, VP);
                gdpm_ds_step(d, in, m, ci, h, dS, dDl, dSn);
                memcpy(dS, dSn, sizeof(double) * K * V);
            }
            if (dh0) memcpy(dh0 + ((int64_t)s * H + h) * K * V, dS, sizeof(double) * K * V);
        }
    free(dS);
    free(dSn);
    free(dDl);

    GdpmChunk *c = (GdpmChunk *)malloc(sizeof(GdpmChunk));
    typedef double Row[256];
    Row *dQ = (Row *)calloc(64, sizeof(Row)), *dKwa = (Row *)calloc(64, sizeof(Row)), *dKst = (Row *)calloc(64, sizeof(Row));
    Row *dXr = (Row *)calloc(64, sizeof(Row)), *dXv = (Row *)calloc(64, sizeof(Row)), *Y1 = (Row *)calloc(64, sizeof(Row));
    Row *Y2 = (Row *)calloc(64, sizeof(Row)), *dR = (Row *)calloc(64, sizeof(Row)), *dKwf = (Row *)calloc(64, sizeof(Row));
    Row *dVr = (Row *)calloc(64, sizeof(Row));
    double dSm[64][64], dT[64][64], Y[64][64], dA[64][64], Dm[64][64], dGr[64], dbr[64];
    const int rr = d->mode == GDP_MODE_SPLIT ? n * n : 0;
    for (int ci = 0; ci < m->nchunks; ci++)
        for (int h = 0; h < H; h++) {
            const GdpChunkInfo *ck = &m->chunk[ci];
            int64_t ch = (int64_t)ci * H + h;
            gdpm_load_chunk(d, in, ck, h, c);
            const int ct = c->ct, lc = c->lc;
            const double *Gt = c->Gt, GL = Gt[ct - 1], gL = exp(GL);
            const double *hh = m->h + ch * p->sH, *dhh = m->dh + ch * p->sH, *Dd = m->D + ch * p->sD,
                         *dDd = m->dD + ch * p->sD;
            /* --- dq/dk/dw (bwd_a) --- */
            for (int t = 0; t < ct; t++)
                for (int s = 0; s < lc; s++) {
                    dSm[t][s] = 0;
                    if (s / n > t) continue;
                    double acc = 0;
                    for (int y = 0; y < V; y++) acc += in->d_o[((int64_t)(ck->tok0 + t) * H + h) * V + y] * Dd[(int64_t)s * VP + y];
                    dSm[t][s] = scale * exp(Gt[t] - Gt[s / n]) * acc;
                }
            for (int i = 0; i < 64; i++) dGr[i] = 0;
            for (int t = 0; t < ct; t++) {
                int64_t tk = (int64_t)(ck->tok0 + t) * H + h;
                double dot = 0;
                for (int x = 0; x < K; x++) {
                    double acc = 0;
                    for (int y = 0; y < V; y++) acc += in->d_o[tk * V + y] * hh[(int64_t)x * VP + y];
                    acc *= scale * exp(Gt[t]);
                    for (int s = 0; s < lc; s++) acc += dSm[t][s] * c->Kw[s][x];
                    dQ[t][x] = acc;
                    dot += acc * in->q[tk * K + x];
                }
                for (int x = 0; x < K; x++) dq[tk * K + x] = dQ[t][x];
                dGr[t * n] += dot;
            }
            double hdh = 0;
            for (int x = 0; x < K; x++)
                for (int y = 0; y < V; y++) hdh += hh[(int64_t)x * VP + y] * dhh[(int64_t)x * VP + y];
            double stdot = 0;
            for (int s = 0; s < lc; s++) {
                double e = exp(GL - Gt[s / n]);
                double dot = 0, dot2 = 0;
                for (int x = 0; x < K; x++) {
                    double acc = 0;
                    for (int y = 0; y < V; y++) acc += Dd[(int64_t)s * VP + y] * dhh[(int64_t)x * VP + y];
                    dKst[s][x] = e * acc;
                    dot2 += dKst[s][x] * c->Kw[s][x];
                    double a2 = dKst[s][x];
                    for (int t = 0; t < ct; t++) a2 += dSm[t][s] * in->q[((int64_t)(ck->tok0 + t) * H + h) * K + x];
                    dKwa[s][x] = a2;
                    dot += a2 * c->Kw[s][x];
                    double w = 0;
                    for (int y = 0; y < V; y++) w -= dDd[(int64_t)s * VP + y] * hh[(int64_t)x * VP + y];
                    m->dW[ch * p->sW + (int64_t)s * KP + x] = w;
                    m->dKw[ch * p->sW + (int64_t)s * KP + x] = a2;
                }
                stdot += dot2;
                dGr[s] -= dot;
            }
            dGr[(ct - 1) * n] += gL * hdh + stdot;
            for (int i = 0; i < 64; i++) m->dGa[ch * 64 + i] = dGr[i];
            /* --- WY backward (bwd_b) --- */
            const double *dWc = m->dW + ch * p->sW;
            for (int i = 0; i < 64; i++) {
                for (int x = 0; x < K; x++) {
                    double acc = 0;
                    for (int j = 0; j < 64; j++) acc += c->T[j][i] * dWc[(int64_t)j * KP + x];
                    dXr[i][x] = acc;
                }
                for (int x = 0; x < V; x++) {
                    double acc = 0;
                    for (int j = 0; j < 64; j++) acc += c->T[j][i] * dDd[(int64_t)j * VP + x];
                    dXv[i][x] = acc;
                }
            }
            for (int i = 0; i < 64; i++)
                for (int j = 0; j < 64; j++) {
                    dT[i][j] = 0;
                    if (!(i < lc && j < lc && gdpm_earlier(d->mode, n, i, j))) continue;
                    double gj = exp(Gt[j / n]), acc = 0;
                    for (int x = 0; x < K; x++) acc += dWc[(int64_t)i * KP + x] * c->br[j] * gj * c->R[j][x];
                    for (int x = 0; x < V; x++) acc += dDd[(int64_t)i * VP + x] * c->br[j] * c->Vr[j][x];
                    dT[i][j] = acc;
                }
            for (int i = 0; i < 64; i++)
                for (int j = 0; j < 64; j++) {
                    double acc = 0;
                    for (int m2 = 0; m2 < 64; m2++) acc += dT[i][m2] * c->T[j][m2];
                    Y[i][j] = acc; /* dT T^T */
                }
            for (int i = 0; i < 64; i++)
                for (int j = 0; j < 64; j++) {
                    double acc = 0;
                    for (int m2 = 0; m2 < 64; m2++) acc += c->T[m2][i] * Y[m2][j];
                    dA[i][j] = -acc;
                    Dm[i][j] = (i < lc && j < lc && gdpm_earlier(d->mode, n, i, j)) ? dA[i][j] * exp(Gt[i / n] - Gt[j / n]) : 0;
                }
            for (int i = 0; i < 64; i++) {
                for (int x = 0; x < K; x++) {
                    double a1 = 0, a2 = 0;
                    for (int j = 0; j < 64; j++) {
                        a1 += Dm[i][j] * c->Kw[j][x];
                        a2 += Dm[j][i] * c->br[j] * c->R[j][x];
                    }
                    Y1[i][x] = a1;
                    Y2[i][x] = a2;
                }
            }
            for (int i = 0; i < lc; i++) {
                double gi = exp(Gt[i / n]), bi = c->br[i];
                double d1 = 0, d2 = 0, d3 = 0, d4 = 0;
                for (int x = 0; x < K; x++) {
                    dR[i][x] = bi * gi * dXr[i][x] + bi * Y1[i][x];
                    dKwf[i][x] = dKwa[i][x] + Y2[i][x];
                    d1 += dXr[i][x] * c->R[i][x];
                    d3 += Y1[i][x] * c->R[i][x];
                    d4 += Y2[i][x] * c->Kw[i][x];
                }
                for (int x = 0; x < V; x++) {
                    dVr[i][x] = bi * dXv[i][x];
                    d2 += dXv[i][x] * c->Vr[i][x];
                }
                dbr[i] = gi * d1 + d2 + d3;
                dGr[i] += bi * gi * d1 + bi * d3 - d4;
            }
            /* map rows back to the inputs */
            for (int t = 0; t < ct; t++) {
                int tok = ck->tok0 + t;
                if (d->mode == GDP_MODE_HOUSEHOLDER) {
                    for (int a = 0; a < n; a++) {
                        int64_t slot = ((int64_t)tok * n + a) * H + h;
                        for (int x = 0; x < K; x++) dk[slot * K + x] = dR[t * n + a][x] + dKwf[t * n + a][x];
                        for (int x = 0; x < V; x++) dv[slot * V + x] = dVr[t * n + a][x];
                        dbeta[slot] = dbr[t * n + a];
                    }
                } else {
                    int64_t row = (int64_t)tok * H + h;
                    const double *M = in->mask + (int64_t)h * n * n;
                    int w = K / n;
                    const double *kk = in->k + row * K;
                    for (int x = 0; x < K; x++) {
                        int b = x / w;
                        double acc = dKwf[t * n + b][x];
                        for (int a = 0; a < n; a++) acc += M[a * n + b] * dR[t * n + a][x];
                        dk[row * K + x] = acc;
                    }
                    for (int x = 0; x < V; x++) {
                        double acc = 0;
                        for (int a = 0; a < n; a++) acc += dVr[t * n + a][x];
                        dv[row * V + x] = acc;
                    }
                    double acc = 0;
                    for (int a = 0; a < n; a++) acc += dbr[t * n + a];
                    dbeta[row] = acc;
                    for (int a = 0; a < n; a++)
                        for (int x = 0; x < K; x++) m->dM[ch * rr + a * n + x / w] += dR[t * n + a][x] * kk[x];
                }
            }
            if (dg) {
                double acc = 0;
                for (int t = ct - 1; t >= 0; t--) {
                    for (int a = 0; a < n; a++) acc += dGr[t * n + a];
                    dg[(int64_t)(ck->tok0 + t) * H + h] = acc;
                }
            }
        }
    if (dmask && rr) {
        for (int h = 0; h < H; h++)
            for (int i = 0; i < rr; i++) {
                double acc = 0;
                for (int ci = 0; ci < m->nchunks; ci++) acc += m->dM[((int64_t)ci * H + h) * rr + i];
                dmask[h * rr + i] = acc;
            }
    }
    free(dQ); free(dKwa); free(dKst); free(dXr); free(dXv); free(Y1); free(Y2); free(dR); free(dKwf); free(dVr);
    free(c);
}
