/* How the lookahead state step (docs/performance.md, "Decisions") rounds in bf16, against the state pass
 * of the kernels: both emulated on the CPU from the float64 chunk model's intermediates, with the
 * kernels' rounding points (W, U, Kwd, P, q and the state operand h in bf16; Delta stored in bf16;
 * products summed in fp32; the state itself in fp32), and o compared with the float64 model's.
 * Lookahead: Delta_{c+1} = U'_{c+1} - M_c Delta_c, U'_{c+1} = U_{c+1} - g_c W_{c+1} h_c (in fp32, or
 * rounded to bf16), M_c = W_{c+1} Kwd_c^T in bf16; and the kernels' step with Kwd's factor rounded
 * to bf16 (the keys-in-seq variant: the sequential passes making Kwd from the keys). Householder
 * mode, B 1, H 1. Its output: the lookahead with U' in fp32 rounds like the kernels' step (within
 * 0.5% of o's error), U' in bf16 up to 5% worse at n_h 3.
 *
 * `make` builds it: build/lookahead_bf16 [T] [K] (defaults 2048, 128; a few seconds).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "core/gradcheck.h"
#include "kernels/gdp/desc.h"
#include "tests/support/gdp_chunk_model.h"

/* round to bf16 (nearest, ties to even), kept in a double */
static double bf(double x) {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}
static double f32(double x) { return (float)x; }

/* Kwd of chunk row i (householder, H 1) as a kernel makes it: the factor e^{G_L - G} in fp32 times
 * the bf16 key, rounded (as prep does), or the factor rounded to bf16 first (the keys-in-seq
 * variant's bf16x2 products) */
static double kwd_of(const GdpDesc *d, const GdpModelIn *in, const GdpModel *m, int ci, int i, int x, int factor_bf16) {
    const GdpLayout *p = &m->p;
    const int ct = m->chunk[ci].ct;
    const double f = exp(m->G[(int64_t)ci * p->sG + ct - 1] - m->G[(int64_t)ci * p->sG + i / d->n]);
    const double kx = bf(in->k[((int64_t)m->chunk[ci].tok0 * d->n + i) * d->K + x]);
    return bf((factor_bf16 ? bf(f) : f32(f)) * kx);
}

/* mode 0: the kernels' step; 1: lookahead, U' in fp32; 2: lookahead, U' in bf16; 3: the kernels'
 * step with Kwd's factor in bf16 */
static void emulate(const GdpDesc *d, const GdpModelIn *in, const GdpModel *m, int mode, double *o) {
    const GdpLayout *p = &m->p;
    const int K = d->K, V = d->V, n = d->n, KP = p->KP, VP = p->VP;
    const double scale = 1.0 / sqrt((double)K);
    double *S = calloc((size_t)K * V, 8), *hb = calloc((size_t)K * V, 8);
    double *Dc = calloc((size_t)64 * V, 8), *Dn = calloc((size_t)64 * V, 8), *Un = calloc((size_t)64 * V, 8);
    const int c0 = m->seq[0].c0, c1 = m->seq[1].c0;
    for (int ci = c0; ci < c1; ci++) {
        const int64_t ch = ci; /* H 1 */
        const int ct = m->chunk[ci].ct, lc = n * ct;
        const double gL = f32(exp(m->G[ch * p->sG + ct - 1]));
        for (int e = 0; e < K * V; e++) hb[e] = bf(S[e]);
        if (mode == 0 || mode == 3 || ci == c0)
            for (int i = 0; i < lc; i++)
                for (int y = 0; y < V; y++) {
                    double acc = 0;
                    for (int x = 0; x < K; x++) acc += bf(m->W[ch * p->sW + (int64_t)i * KP + x]) * hb[x * V + y];
                    Dc[i * V + y] = bf(f32(bf(m->U[ch * p->sU + (int64_t)i * VP + y]) - f32(acc)));
                }
        /* o of this chunk */
        for (int t = 0; t < ct; t++) {
            const int tok = m->chunk[ci].tok0 + t;
            const double gq = f32(scale * exp(m->G[ch * p->sG + t]));
            for (int y = 0; y < V; y++) {
                double acc = 0;
                for (int x = 0; x < K; x++) acc += bf(in->q[(int64_t)tok * K + x]) * hb[x * V + y];
                acc = f32(gq * f32(acc));
                for (int s2 = 0; s2 < lc; s2++) acc += bf(m->P[ch * p->sP + (int64_t)t * 64 + s2]) * Dc[s2 * V + y];
                o[(int64_t)tok * V + y] = bf(acc);
            }
        }
        if ((mode == 1 || mode == 2) && ci + 1 < c1) { /* the next chunk's Delta from h_c and Delta_c */
            const int64_t cn = ch + 1;
            const int ln = n * m->chunk[ci + 1].ct;
            for (int i = 0; i < ln; i++) {
                double Mrow[64];
                for (int j = 0; j < lc; j++) {
                    double a = 0;
                    for (int x = 0; x < K; x++) a += bf(m->W[cn * p->sW + (int64_t)i * KP + x]) * kwd_of(d, in, m, ci, j, x, 0);
                    Mrow[j] = bf(f32(a));
                }
                for (int y = 0; y < V; y++) {
                    double acc = 0;
                    for (int x = 0; x < K; x++) acc += bf(m->W[cn * p->sW + (int64_t)i * KP + x]) * hb[x * V + y];
                    double u = f32(bf(m->U[cn * p->sU + (int64_t)i * VP + y]) - f32(gL * f32(acc)));
                    if (mode == 2) u = bf(u);
                    double md = 0;
                    for (int j = 0; j < lc; j++) md += Mrow[j] * Dc[j * V + y];
                    Un[i * V + y] = bf(f32(u - f32(md)));
                }
            }
        }
        for (int x = 0; x < K; x++)
            for (int y = 0; y < V; y++) {
                double acc = 0;
                for (int i = 0; i < lc; i++) acc += kwd_of(d, in, m, ci, i, x, mode == 3) * Dc[i * V + y];
                S[x * V + y] = f32(gL * S[x * V + y] + f32(acc));
            }
        if (mode == 1 || mode == 2) memcpy(Dc, Un, sizeof(double) * 64 * V);
    }
    free(S), free(hb), free(Dc), free(Dn), free(Un);
}

int main(int argc, char **argv) {
    const int T = argc > 1 ? atoi(argv[1]) : 2048, K = argc > 2 ? atoi(argv[2]) : 128;
    printf("T %d, K = V = %d, householder, B 1, H 1: rel L2 error of o against float64\n", T, K);
    printf("%-4s %-12s %-14s %-15s %s\n", "n_h", "kernels", "lookahead f32", "lookahead bf16", "Kwd factor bf16");
    for (int nh = 1; nh <= 3; nh++) {
        GdpDesc d = {0};
        d.mode = GDP_MODE_HOUSEHOLDER, d.B = 1, d.T = T, d.H = 1, d.K = K, d.V = K, d.n = nh, d.dtype = GDP_F64;
        GdpSizes s = gdp_sizes(&d);
        Rng g;
        rng_seed(&g, 7 + (uint64_t)nh);
        double *q = malloc(8 * (size_t)s.q), *k = malloc(8 * (size_t)s.k), *v = malloc(8 * (size_t)s.v);
        double *beta = malloc(8 * (size_t)s.beta), *gg = malloc(8 * (size_t)s.g);
        for (int64_t i = 0; i < s.q; i++) q[i] = rng_normal(&g);
        for (int64_t i = 0; i < s.v; i++) v[i] = rng_normal(&g);
        for (int64_t r = 0; r < s.k / K; r++) { /* unit keys, as the layer's l2 norm makes them */
            double a = 0;
            for (int x = 0; x < K; x++) k[r * K + x] = rng_normal(&g), a += k[r * K + x] * k[r * K + x];
            for (int x = 0; x < K; x++) k[r * K + x] /= sqrt(a);
        }
        for (int64_t i = 0; i < s.beta; i++) beta[i] = 2.0 * rng_uniform(&g);
        for (int64_t i = 0; i < s.g; i++) gg[i] = -log1p(exp(-(rng_normal(&g) + 2.0)));
        GdpModel m;
        gdpm_init(&d, NULL, &m, 0);
        GdpModelIn in = {q, k, v, beta, gg, NULL, NULL, NULL, NULL};
        double *o = calloc((size_t)s.o, 8), *oe = calloc((size_t)s.o, 8);
        gdpm_forward(&d, &in, &m, o, NULL);
        double err[4];
        for (int mode = 0; mode < 4; mode++) {
            emulate(&d, &in, &m, mode, oe);
            err[mode] = rel_l2(oe, o, s.o);
        }
        printf("%-4d %-12.3e %-14.3e %-15.3e %.3e\n", nh, err[0], err[1], err[2], err[3]);
        gdpm_free(&m);
        free(q), free(k), free(v), free(beta), free(gg), free(o), free(oe);
    }
    return 0;
}
