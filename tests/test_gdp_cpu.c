/* The Gated DeltaProduct CPU reference: the float64 reference vectors (f64 and f32), gradients of
 * both modes against finite differences, the special cases of docs/spec.md, varlen, argument
 * errors, the tape node and the HDF5 reader's errors. Vectors: $GDP_VECTORS or
 * tests/data/gdp_vectors.h5 (relative to the repository root, where `make test` runs; the Makefile
 * refuses to run the tests without it). */
#include <hdf5.h>
#include <math.h>
#include <unistd.h>

#include "core/gradcheck.h"
#include "base/h5_check.h"
#include "core/op_util.h"
#include "kernels/gdp/gdp.h"
#include "kernels/gdp/desc.h"
#include "kernels/gdp/decode.h"
#include "core/ops/gdp.h"
#include "tests/check_main.h"
#include "tools/vectors_h5.h"

static const char *vectors_path(void) {
    const char *p = getenv("GDP_VECTORS");
    return p && *p ? p : "tests/data/gdp_vectors.h5";
}

/* ---- a problem on host doubles, run through the public API in f64 or f32 ---------------------- */

typedef struct Prob {
    GdpDesc d;
    int32_t cu[16];
    double *q, *k, *v, *beta, *g, *mask, *h0, *d_o, *dht; /* g, h0 may be NULL; mask NULL in householder */
} Prob;

typedef struct Res {
    double *o, *ht, *dq, *dk, *dv, *dbeta, *dg, *dmask, *dh0;
} Res;

static double *rand_arr(Rng *r, int64_t n, double lo, double hi) {
    double *x = (double *)xmalloc((size_t)GDP_MAX(n, 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(r);
    return x;
}

static double *copy_arr(const double *x, int64_t n) {
    if (!x) return NULL;
    double *y = (double *)xmalloc((size_t)GDP_MAX(n, 1) * sizeof(double));
    memcpy(y, x, (size_t)n * sizeof(double));
    return y;
}

/* Random problem: keys unit norm per slot (householder) or per slice (split), beta in (0, 2),
 * g = log sigmoid(N(0,1) + 2) like the vector file, mask = I + 0.3 noise. */
static Prob make_prob(GdpMode mode, int B, int T, int H, int K, int V, int n, bool gate, bool h0, const int *lens,
                      int nseq, uint64_t seed) {
    Prob p;
    memset(&p, 0, sizeof p);
    p.d.mode = mode;
    p.d.B = B, p.d.T = T, p.d.H = H, p.d.K = K, p.d.V = V, p.d.n = n;
    p.d.dtype = GDP_F64;
    if (lens) {
        p.cu[0] = 0;
        for (int i = 0; i < nseq; i++) p.cu[i + 1] = p.cu[i] + lens[i];
        ck_assert_int_eq(p.cu[nseq], T);
        p.d.cu_seqlens = p.cu;
        p.d.n_seqs = nseq;
    }
    GdpSizes z = gdp_sizes(&p.d);
    Rng r;
    rng_seed(&r, seed);
    p.q = rand_arr(&r, z.q, -1, 1);
    p.k = rand_arr(&r, z.k, -1, 1);
    int w = mode == GDP_MODE_SPLIT ? K / n : K;
    for (int64_t i = 0; i < z.k; i += w) {
        double s = 0;
        for (int j = 0; j < w; j++) s += p.k[i + j] * p.k[i + j];
        for (int j = 0; j < w; j++) p.k[i + j] /= sqrt(s);
    }
    p.v = rand_arr(&r, z.v, -1, 1);
    p.beta = rand_arr(&r, z.beta, 0.05, 1.95);
    if (gate) {
        p.g = rand_arr(&r, z.g, 0, 1);
        for (int64_t i = 0; i < z.g; i++) p.g[i] = -log1p(exp(-(rng_normal(&r) + 2.0)));
    }
    if (mode == GDP_MODE_SPLIT) {
        p.mask = rand_arr(&r, z.mask, 0, 1);
        for (int h = 0; h < H; h++)
            for (int a = 0; a < n; a++)
                for (int b = 0; b < n; b++) p.mask[(h * n + a) * n + b] = (a == b) + 0.3 * rng_normal(&r);
    }
    if (h0) p.h0 = rand_arr(&r, z.state, -0.5, 0.5);
    p.d_o = rand_arr(&r, z.o, -1, 1);
    p.dht = rand_arr(&r, z.state, -1, 1);
    return p;
}

static void prob_free(Prob *p) {
    free(p->q), free(p->k), free(p->v), free(p->beta), free(p->g), free(p->mask), free(p->h0), free(p->d_o),
        free(p->dht);
}

static void res_free(Res *r) {
    free(r->o), free(r->ht), free(r->dq), free(r->dk), free(r->dv), free(r->dbeta), free(r->dg), free(r->dmask),
        free(r->dh0);
}

static void *conv(const double *x, int64_t n, DType dt) {
    if (!x) return NULL;
    if (dt == GDP_F64) return copy_arr(x, n);
    float *y = (float *)xmalloc((size_t)GDP_MAX(n, 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) y[i] = (float)x[i];
    return y;
}

static double *back(void *x, int64_t n, DType dt) {
    if (!x) return NULL;
    if (dt == GDP_F64) return (double *)x;
    double *y = (double *)xmalloc((size_t)GDP_MAX(n, 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) y[i] = ((float *)x)[i];
    free(x);
    return y;
}

/* Forward (o, ht) and, when `grads`, backward with every gradient requested. */
static Res run(const Prob *p, DType dt, bool grads) {
    GdpDesc d = p->d;
    d.dtype = dt;
    if (d.cu_seqlens) d.cu_seqlens = p->cu; /* Probs are copied by value: point at this one's offsets */
    GdpSizes z = gdp_sizes(&d);
    size_t es = dtype_size(dt);
    void *q = conv(p->q, z.q, dt), *k = conv(p->k, z.k, dt), *v = conv(p->v, z.v, dt),
         *beta = conv(p->beta, z.beta, dt), *g = conv(p->g, z.g, dt), *mask = conv(p->mask, z.mask, dt),
         *h0 = conv(p->h0, z.state, dt), *d_o = conv(p->d_o, z.o, dt), *dht = conv(p->dht, z.state, dt);
    void *o = xcalloc((size_t)z.o, es), *ht = xcalloc((size_t)z.state, es);
    GdpForwardArgs fa = {q, k, v, beta, g, mask, h0, o, ht, NULL, 0};
    ck_assert_msg(gdp_forward_cpu(&d, &fa) == GDP_OK, "forward failed: %s", gdp_last_error());
    Res r;
    memset(&r, 0, sizeof r);
    if (grads) {
        void *dq = xcalloc((size_t)z.q, es), *dk = xcalloc((size_t)z.k, es), *dv = xcalloc((size_t)z.v, es),
             *db = xcalloc((size_t)z.beta, es), *dg = xcalloc((size_t)z.g, es), *dh0 = xcalloc((size_t)z.state, es);
        void *dm = d.mode == GDP_MODE_SPLIT ? xcalloc((size_t)z.mask, es) : NULL;
        GdpBackwardArgs ba = {q, k, v, beta, g, mask, h0, d_o, dht, dq, dk, dv, db, dg, dm, dh0, NULL};
        ck_assert_msg(gdp_backward_cpu(&d, &ba) == GDP_OK, "backward failed: %s", gdp_last_error());
        r.dq = back(dq, z.q, dt), r.dk = back(dk, z.k, dt), r.dv = back(dv, z.v, dt);
        r.dbeta = back(db, z.beta, dt), r.dg = back(dg, z.g, dt), r.dh0 = back(dh0, z.state, dt);
        r.dmask = back(dm, z.mask, dt);
    }
    r.o = back(o, z.o, dt), r.ht = back(ht, z.state, dt);
    free(q), free(k), free(v), free(beta), free(g), free(mask), free(h0), free(d_o), free(dht);
    return r;
}

static double loss_of(const Prob *p) {
    GdpSizes z = gdp_sizes(&p->d);
    Res r = run(p, GDP_F64, false);
    double L = 0;
    for (int64_t i = 0; i < z.o; i++) L += r.o[i] * p->d_o[i];
    for (int64_t i = 0; i < z.state; i++) L += r.ht[i] * p->dht[i];
    res_free(&r);
    return L;
}

/* Central differences of the loss w.r.t. every entry of *slot (n entries) vs `ana`. */
static void fd_check(Prob *p, double **slot, int64_t n, const double *ana, const char *what) {
    double *num = (double *)xmalloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        double x0 = (*slot)[i], h = 1e-6 * GDP_MAX(1.0, fabs(x0));
        (*slot)[i] = x0 + h;
        double fp = loss_of(p);
        (*slot)[i] = x0 - h;
        double fm = loss_of(p);
        (*slot)[i] = x0;
        num[i] = (fp - fm) / (2 * h);
    }
    double e = rel_l2(ana, num, n);
    ck_assert_msg(e <= 1e-6, "%s: analytic vs finite-difference gradient rel err %.3e > 1e-6", what, e);
    free(num);
}

/* All gradients of p by finite differences; an absent g or h0 is checked at zero (the op's
 * gradient for a NULL input is the one at zero). */
static void fd_all(Prob *p) {
    GdpSizes z = gdp_sizes(&p->d);
    Res r = run(p, GDP_F64, true);
    fd_check(p, &p->q, z.q, r.dq, "dq");
    fd_check(p, &p->k, z.k, r.dk, "dk");
    fd_check(p, &p->v, z.v, r.dv, "dv");
    fd_check(p, &p->beta, z.beta, r.dbeta, "dbeta");
    if (p->mask) fd_check(p, &p->mask, z.mask, r.dmask, "dmask");
    bool had_g = p->g, had_h0 = p->h0;
    if (!p->g) p->g = (double *)xcalloc((size_t)z.g, sizeof(double));
    if (!p->h0) p->h0 = (double *)xcalloc((size_t)z.state, sizeof(double));
    fd_check(p, &p->g, z.g, r.dg, had_g ? "dg" : "dg (ungated, at g = 0)");
    fd_check(p, &p->h0, z.state, r.dh0, had_h0 ? "dh0" : "dh0 (no h0, at h0 = 0)");
    res_free(&r);
}

/* ---- shared vectors ------------------------------------------------------------------------- */

static void vectors_on_cpu(DType dt, double bound) {
    GdpVecFile f;
    gdp_vectors_load(vectors_path(), &f);
    ck_assert_int_ge(f.n_cases, 7);
    for (int i = 0; i < f.n_cases; i++) {
        const GdpVecCase *c = &f.cases[i];
        Prob p;
        memset(&p, 0, sizeof p);
        p.d = gdp_vec_desc(c, GDP_F64);
        p.q = c->q, p.k = c->k, p.v = c->v, p.beta = c->beta, p.mask = c->mask;
        p.g = c->gate ? c->g : NULL;
        p.h0 = c->has_h0 ? c->h0 : NULL;
        p.d_o = c->d_o, p.dht = c->dht;
        GdpSizes z = gdp_sizes(&p.d);
        Res r = run(&p, dt, true);
        const struct {
            const char *name;
            const double *got, *ref;
            int64_t n;
        } t[] = {{"o", r.o, c->o, z.o},           {"ht", r.ht, c->ht, z.state},       {"dq", r.dq, c->dq, z.q},
                 {"dk", r.dk, c->dk, z.k},        {"dv", r.dv, c->dv, z.v},           {"dbeta", r.dbeta, c->dbeta, z.beta},
                 {"dg", r.dg, c->dg, z.g},        {"dh0", r.dh0, c->dh0, z.state},    {"dmask", r.dmask, c->dmask, z.mask}};
        for (size_t j = 0; j < GDP_ARRAY_LEN(t); j++) {
            if (!t[j].ref) continue;
            double e = rel_l2(t[j].got, t[j].ref, t[j].n);
            ck_assert_msg(e <= bound, "case %s %s %s: rel err %.3e > %.0e", c->name, dtype_name(dt), t[j].name, e, bound);
        }
        res_free(&r);
    }
    gdp_vectors_free(&f);
}

START_TEST(vectors_f64) { vectors_on_cpu(GDP_F64, 1e-10); }
END_TEST

START_TEST(vectors_f32) { vectors_on_cpu(GDP_F32, 1e-4); }
END_TEST

/* ---- finite differences --------------------------------------------------------------------- */

START_TEST(fd_householder_gated_h0) {
    Prob p = make_prob(GDP_MODE_HOUSEHOLDER, 2, 6, 2, 4, 3, 2, true, true, NULL, 0, 11);
    fd_all(&p);
    prob_free(&p);
}
END_TEST

START_TEST(fd_householder_n3_ungated_no_h0) {
    Prob p = make_prob(GDP_MODE_HOUSEHOLDER, 1, 7, 2, 5, 4, 3, false, false, NULL, 0, 12);
    fd_all(&p);
    prob_free(&p);
}
END_TEST

START_TEST(fd_split_random_mask) {
    Prob p = make_prob(GDP_MODE_SPLIT, 2, 6, 2, 6, 3, 2, true, true, NULL, 0, 13);
    fd_all(&p);
    prob_free(&p);
}
END_TEST

START_TEST(fd_split_r3_ungated_no_h0) {
    Prob p = make_prob(GDP_MODE_SPLIT, 1, 8, 2, 6, 4, 3, false, false, NULL, 0, 14);
    fd_all(&p);
    prob_free(&p);
}
END_TEST

static const int varlen_lens[3] = {1, 7, 12};

START_TEST(fd_varlen_householder) {
    Prob p = make_prob(GDP_MODE_HOUSEHOLDER, 1, 20, 2, 4, 3, 2, true, true, varlen_lens, 3, 15);
    fd_all(&p);
    prob_free(&p);
}
END_TEST

START_TEST(fd_varlen_split) {
    Prob p = make_prob(GDP_MODE_SPLIT, 1, 20, 2, 4, 3, 2, true, true, varlen_lens, 3, 16);
    fd_all(&p);
    prob_free(&p);
}
END_TEST

/* Packed sequences give exactly what running each on its own gives. */
START_TEST(varlen_equals_separate_runs) {
    for (int mode = 0; mode < 2; mode++) {
        Prob p = make_prob((GdpMode)mode, 1, 20, 2, 4, 3, 2, true, true, varlen_lens, 3, 17);
        GdpSizes z = gdp_sizes(&p.d);
        Res all = run(&p, GDP_F64, true);
        const int64_t H = 2, K = 4, V = 3, slots = mode == GDP_MODE_HOUSEHOLDER ? 2 : 1;
        double dmask_sum[8] = {0};
        for (int s = 0; s < 3; s++) {
            int t0 = p.cu[s], L = varlen_lens[s];
            Prob one = p;
            one.d.cu_seqlens = NULL, one.d.n_seqs = 0, one.d.T = L;
            one.q = p.q + t0 * H * K, one.k = p.k + t0 * slots * H * K, one.v = p.v + t0 * slots * H * V;
            one.beta = p.beta + t0 * slots * H, one.g = p.g + t0 * H, one.d_o = p.d_o + t0 * H * V;
            one.h0 = p.h0 + s * H * K * V, one.dht = p.dht + s * H * K * V;
            Res r = run(&one, GDP_F64, true);
            ck_assert_rel_l2(r.o, all.o + t0 * H * V, L * H * V, 1e-14);
            ck_assert_rel_l2(r.ht, all.ht + s * H * K * V, H * K * V, 1e-14);
            ck_assert_rel_l2(r.dq, all.dq + t0 * H * K, L * H * K, 1e-14);
            ck_assert_rel_l2(r.dk, all.dk + t0 * slots * H * K, L * slots * H * K, 1e-14);
            ck_assert_rel_l2(r.dv, all.dv + t0 * slots * H * V, L * slots * H * V, 1e-14);
            ck_assert_rel_l2(r.dbeta, all.dbeta + t0 * slots * H, L * slots * H, 1e-14);
            ck_assert_rel_l2(r.dg, all.dg + t0 * H, L * H, 1e-14);
            ck_assert_rel_l2(r.dh0, all.dh0 + s * H * K * V, H * K * V, 1e-14);
            if (r.dmask)
                for (int64_t i = 0; i < z.mask; i++) dmask_sum[i] += r.dmask[i];
            res_free(&r);
        }
        if (all.dmask) ck_assert_rel_l2(dmask_sum, all.dmask, z.mask, 1e-13);
        res_free(&all);
        prob_free(&p);
    }
}
END_TEST

/* ---- special cases of docs/spec.md (§1.2) ------------------------------------------------------- */

/* Split with M = I is householder with n = r, zero-padded slice keys and shared v, beta. */
START_TEST(split_identity_is_padded_householder) {
    const int B = 2, T = 9, H = 2, K = 6, V = 3, r = 3, w = K / r;
    Prob s = make_prob(GDP_MODE_SPLIT, B, T, H, K, V, r, true, true, NULL, 0, 21);
    for (int h = 0; h < H; h++)
        for (int a = 0; a < r; a++)
            for (int b = 0; b < r; b++) s.mask[(h * r + a) * r + b] = a == b;
    Prob hh = s;
    hh.d.mode = GDP_MODE_HOUSEHOLDER;
    hh.mask = NULL;
    GdpSizes zh = gdp_sizes(&hh.d);
    hh.k = (double *)xcalloc((size_t)zh.k, sizeof(double));
    hh.v = (double *)xmalloc((size_t)zh.v * sizeof(double));
    hh.beta = (double *)xmalloc((size_t)zh.beta * sizeof(double));
    for (int64_t bt = 0; bt < (int64_t)B * T; bt++)
        for (int j = 0; j < r; j++)
            for (int h = 0; h < H; h++) {
                int64_t slot = (bt * r + j) * H + h, row = bt * H + h;
                for (int c = j * w; c < (j + 1) * w; c++) hh.k[slot * K + c] = s.k[row * K + c];
                for (int x = 0; x < V; x++) hh.v[slot * V + x] = s.v[row * V + x];
                hh.beta[slot] = s.beta[row];
            }
    GdpSizes z = gdp_sizes(&s.d);
    Res rs = run(&s, GDP_F64, true), rh = run(&hh, GDP_F64, true);
    ck_assert_rel_l2(rs.o, rh.o, z.o, 1e-12);
    ck_assert_rel_l2(rs.ht, rh.ht, z.state, 1e-12);
    ck_assert_rel_l2(rs.dq, rh.dq, z.q, 1e-12);
    ck_assert_rel_l2(rs.dg, rh.dg, z.g, 1e-12);
    ck_assert_rel_l2(rs.dh0, rh.dh0, z.state, 1e-12);
    /* chain rule through the padding and the sharing */
    double *dk = (double *)xcalloc((size_t)z.k, sizeof(double)), *dv = (double *)xcalloc((size_t)z.v, sizeof(double)),
           *db = (double *)xcalloc((size_t)z.beta, sizeof(double));
    for (int64_t bt = 0; bt < (int64_t)B * T; bt++)
        for (int j = 0; j < r; j++)
            for (int h = 0; h < H; h++) {
                int64_t slot = (bt * r + j) * H + h, row = bt * H + h;
                for (int c = j * w; c < (j + 1) * w; c++) dk[row * K + c] = rh.dk[slot * K + c];
                for (int x = 0; x < V; x++) dv[row * V + x] += rh.dv[slot * V + x];
                db[row] += rh.dbeta[slot];
            }
    ck_assert_rel_l2(rs.dk, dk, z.k, 1e-12);
    ck_assert_rel_l2(rs.dv, dv, z.v, 1e-12);
    ck_assert_rel_l2(rs.dbeta, db, z.beta, 1e-12);
    free(dk), free(dv), free(db);
    res_free(&rs), res_free(&rh);
    free(hh.k), free(hh.v), free(hh.beta);
    prob_free(&s);
}
END_TEST

/* Split with M = all ones is Gated DeltaNet (householder, n = 1) on the whole key. */
START_TEST(split_all_ones_is_deltanet) {
    const int B = 2, T = 9, H = 2, K = 6, V = 4, r = 2;
    Prob s = make_prob(GDP_MODE_SPLIT, B, T, H, K, V, r, true, true, NULL, 0, 22);
    for (int i = 0; i < H * r * r; i++) s.mask[i] = 1;
    /* unit norm over the whole key, as a DeltaNet key would be */
    for (int64_t i = 0; i < (int64_t)B * T * H * K; i += K) {
        double n2 = 0;
        for (int c = 0; c < K; c++) n2 += s.k[i + c] * s.k[i + c];
        for (int c = 0; c < K; c++) s.k[i + c] /= sqrt(n2);
    }
    Prob hh = s;
    hh.d.mode = GDP_MODE_HOUSEHOLDER;
    hh.d.n = 1;
    hh.mask = NULL;
    GdpSizes z = gdp_sizes(&s.d);
    Res rs = run(&s, GDP_F64, true), rh = run(&hh, GDP_F64, true);
    ck_assert_rel_l2(rs.o, rh.o, z.o, 1e-12);
    ck_assert_rel_l2(rs.ht, rh.ht, z.state, 1e-12);
    ck_assert_rel_l2(rs.dq, rh.dq, z.q, 1e-12);
    ck_assert_rel_l2(rs.dk, rh.dk, z.k, 1e-12);
    ck_assert_rel_l2(rs.dv, rh.dv, z.v, 1e-12);
    ck_assert_rel_l2(rs.dbeta, rh.dbeta, z.beta, 1e-12);
    ck_assert_rel_l2(rs.dg, rh.dg, z.g, 1e-12);
    ck_assert_rel_l2(rs.dh0, rh.dh0, z.state, 1e-12);
    res_free(&rs), res_free(&rh);
    prob_free(&s);
}
END_TEST

/* f32 and f64 agree on a long sequence (the checkpointed backward with many chunks). */
START_TEST(f32_tracks_f64_long_sequence) {
    Prob p = make_prob(GDP_MODE_HOUSEHOLDER, 1, 300, 2, 16, 8, 2, true, true, NULL, 0, 23);
    GdpSizes z = gdp_sizes(&p.d);
    Res a = run(&p, GDP_F64, true), b = run(&p, GDP_F32, true);
    ck_assert_rel_l2(b.o, a.o, z.o, 1e-4);
    ck_assert_rel_l2(b.dk, a.dk, z.k, 1e-4);
    ck_assert_rel_l2(b.dh0, a.dh0, z.state, 1e-4);
    res_free(&a), res_free(&b);
    prob_free(&p);
}
END_TEST

/* ---- the decode step's CPU reference (kernels/gdp/decode_cpu.c) against the recurrence ------- */

/* B batch rows, one token: gdp_decode_step_cpu from h0 against gdp_forward_cpu with T = 1 (o, ht). */
static void decode_vs_forward_t1(GdpMode mode, int B, int H, int K, int V, int n, bool gate, uint64_t seed) {
    Prob p = make_prob(mode, B, 1, H, K, V, n, gate, true, NULL, 0, seed);
    GdpSizes z = gdp_sizes(&p.d);
    Res ref = run(&p, GDP_F64, false);
    double *S = copy_arr(p.h0, z.state), *o = (double *)xcalloc((size_t)z.o, sizeof(double));
    GdpDecodeArgs a = {S, p.q, p.k, p.v, p.beta, p.g, p.mask, o};
    GdpStatus st = gdp_decode_step_cpu(&p.d, &a);
    ck_assert_msg(st == GDP_OK, "gdp_decode_step_cpu: %s", gdp_last_error());
    ck_assert_rel_l2(o, ref.o, z.o, 1e-12);
    ck_assert_rel_l2(S, ref.ht, z.state, 1e-12);
    free(S), free(o);
    res_free(&ref);
    prob_free(&p);
}

START_TEST(decode_step_matches_recurrence_t1_f64) {
    decode_vs_forward_t1(GDP_MODE_HOUSEHOLDER, 3, 2, 16, 8, 1, true, 41);
    decode_vs_forward_t1(GDP_MODE_HOUSEHOLDER, 2, 3, 12, 20, 2, true, 42);
    decode_vs_forward_t1(GDP_MODE_HOUSEHOLDER, 2, 1, 32, 7, 3, false, 43);
    decode_vs_forward_t1(GDP_MODE_HOUSEHOLDER, 1, 2, 8, 33, 4, true, 44);
    decode_vs_forward_t1(GDP_MODE_SPLIT, 3, 2, 16, 8, 2, true, 45);
    decode_vs_forward_t1(GDP_MODE_SPLIT, 2, 2, 12, 5, 3, false, 46);
    decode_vs_forward_t1(GDP_MODE_SPLIT, 1, 1, 16, 9, 4, true, 47);
    decode_vs_forward_t1(GDP_MODE_SPLIT, 2, 1, 10, 6, 1, true, 48);
}
END_TEST

/* T tokens of one sequence, decoded one at a time from h0 (the token slices of the [1, T, ...]
 * inputs), against one gdp_forward_cpu over all T: every o_t and the final state. f64 to 1e-12,
 * and the f32 decode against the f64 recurrence to 1e-5. */
static void decode_chain(GdpMode mode, int T, int H, int K, int V, int n, uint64_t seed) {
    Prob p = make_prob(mode, 1, T, H, K, V, n, true, true, NULL, 0, seed);
    GdpSizes z = gdp_sizes(&p.d);
    Res ref = run(&p, GDP_F64, false);
    const int slots = mode == GDP_MODE_HOUSEHOLDER ? n : 1;
    GdpDesc d1 = p.d;
    d1.T = 1;
    for (int di = 0; di < 2; di++) {
        DType dt = di ? GDP_F32 : GDP_F64;
        d1.dtype = dt;
        const size_t es = dtype_size(dt);
        void *S = conv(p.h0, z.state, dt), *q = conv(p.q, z.q, dt), *k = conv(p.k, z.k, dt), *v = conv(p.v, z.v, dt);
        void *beta = conv(p.beta, z.beta, dt), *g = conv(p.g, z.g, dt), *mask = conv(p.mask, z.mask, dt);
        void *o = xcalloc((size_t)z.o, es);
        for (int t = 0; t < T; t++) {
            GdpDecodeArgs a = {S,
                               (char *)q + es * (size_t)t * H * K,
                               (char *)k + es * (size_t)t * slots * H * K,
                               (char *)v + es * (size_t)t * slots * H * V,
                               (char *)beta + es * (size_t)t * slots * H,
                               (char *)g + es * (size_t)t * H,
                               mask,
                               (char *)o + es * (size_t)t * H * V};
            GdpStatus st = gdp_decode_step_cpu(&d1, &a);
            ck_assert_msg(st == GDP_OK, "gdp_decode_step_cpu: %s", gdp_last_error());
        }
        double *od = back(o, z.o, dt), *Sd = back(S, z.state, dt);
        const double bound = dt == GDP_F64 ? 1e-12 : 1e-5;
        ck_assert_rel_l2(od, ref.o, z.o, bound);
        ck_assert_rel_l2(Sd, ref.ht, z.state, bound);
        free(od), free(Sd);
        free(q), free(k), free(v), free(beta), free(g), free(mask);
    }
    res_free(&ref);
    prob_free(&p);
}

START_TEST(decode_step_chain_matches_recurrence) {
    decode_chain(GDP_MODE_HOUSEHOLDER, 40, 2, 16, 12, 2, 51);
    decode_chain(GDP_MODE_HOUSEHOLDER, 25, 1, 24, 9, 3, 52);
    decode_chain(GDP_MODE_SPLIT, 40, 2, 16, 12, 2, 53);
    decode_chain(GDP_MODE_SPLIT, 25, 1, 24, 9, 3, 54);
}
END_TEST

static void expect_invalid(GdpStatus st, const char *needle);

START_TEST(decode_step_invalid_args) {
    double S[64] = {0}, buf[64] = {0}, out[64];
    GdpDesc d;
    memset(&d, 0, sizeof d);
    d.mode = GDP_MODE_HOUSEHOLDER, d.B = 1, d.T = 1, d.H = 1, d.K = 4, d.V = 2, d.n = 2, d.dtype = GDP_F64;
    GdpDecodeArgs a = {S, buf, buf, buf, buf, NULL, NULL, out};
    ck_assert_int_eq(gdp_decode_step_cpu(&d, &a), GDP_OK);
    d.T = 2;
    expect_invalid(gdp_decode_step_cpu(&d, &a), "T = 1");
    d.T = 1;
    a.S = NULL;
    expect_invalid(gdp_decode_step_cpu(&d, &a), "'S'");
    a.S = S;
    a.mask = buf;
    expect_invalid(gdp_decode_step_cpu(&d, &a), "no mask");
    d.mode = GDP_MODE_SPLIT;
    a.mask = NULL;
    expect_invalid(gdp_decode_step_cpu(&d, &a), "mask");
    d.n = 3;
    a.mask = buf;
    expect_invalid(gdp_decode_step_cpu(&d, &a), "divisible");
    d.n = 2;
    d.dtype = GDP_BF16;
    expect_invalid(gdp_decode_step_cpu(&d, &a), "not supported on the CPU");
}
END_TEST

/* ---- invalid descriptors -------------------------------------------------------------------- */

static GdpDesc good_desc(void) {
    GdpDesc d;
    memset(&d, 0, sizeof d);
    d.mode = GDP_MODE_SPLIT;
    d.B = 1, d.T = 4, d.H = 1, d.K = 4, d.V = 2, d.n = 2;
    d.dtype = GDP_F64;
    return d;
}

static void expect_invalid(GdpStatus st, const char *needle) {
    ck_assert_int_eq(st, GDP_ERR_INVALID);
    const char *m = gdp_last_error();
    ck_assert_msg(m && strstr(m, needle), "message '%s' does not mention '%s'", m ? m : "(null)", needle);
}

START_TEST(invalid_descriptors) {
    double buf[64] = {0}, out[64];
    GdpForwardArgs fa = {buf, buf, buf, buf, NULL, buf, NULL, out, NULL, NULL, 0};
    GdpDesc d = good_desc();
    ck_assert_int_eq(gdp_validate(&d), GDP_OK);
    ck_assert_int_eq(gdp_forward_cpu(&d, &fa), GDP_OK);

    d = good_desc(), d.K = 30, d.n = 4;
    expect_invalid(gdp_validate(&d), "split mode: K=30 is not divisible by r=4");
    d = good_desc(), d.B = 0;
    expect_invalid(gdp_validate(&d), "B=0");
    d = good_desc(), d.n = 0;
    expect_invalid(gdp_validate(&d), "n=0");
    d = good_desc(), d.mode = (GdpMode)7;
    expect_invalid(gdp_validate(&d), "mode 7");
    d = good_desc(), d.scale = NAN;
    expect_invalid(gdp_validate(&d), "scale");
    d = good_desc(), d.dtype = GDP_I32;
    expect_invalid(gdp_validate(&d), "dtype");
    d = good_desc(), d.dtype = GDP_BF16;
    ck_assert_int_eq(gdp_validate(&d), GDP_OK); /* valid for CUDA ... */
    expect_invalid(gdp_forward_cpu(&d, &fa), "not supported on the CPU"); /* ... not here */
    expect_invalid(gdp_validate(NULL), "NULL");

    int32_t cu[3] = {0, 2, 4};
    d = good_desc(), d.B = 2, d.cu_seqlens = cu, d.n_seqs = 2;
    expect_invalid(gdp_validate(&d), "B must be 1");
    d = good_desc(), d.cu_seqlens = cu, d.n_seqs = 0;
    expect_invalid(gdp_validate(&d), "n_seqs=0");
    d = good_desc(), d.cu_seqlens = cu, d.n_seqs = 2;
    ck_assert_int_eq(gdp_forward_cpu(&d, &fa), GDP_OK);
    int32_t bad_end[3] = {0, 2, 3};
    d.cu_seqlens = bad_end;
    expect_invalid(gdp_forward_cpu(&d, &fa), "end at T=4");
    int32_t not_incr[3] = {0, 0, 4};
    d.cu_seqlens = not_incr;
    expect_invalid(gdp_forward_cpu(&d, &fa), "strictly increasing");

    d = good_desc();
    GdpForwardArgs f2 = fa;
    f2.q = NULL;
    expect_invalid(gdp_forward_cpu(&d, &f2), "'q' is NULL");
    f2 = fa, f2.mask = NULL;
    expect_invalid(gdp_forward_cpu(&d, &f2), "mask");
    d.mode = GDP_MODE_HOUSEHOLDER;
    expect_invalid(gdp_forward_cpu(&d, &fa), "householder mode takes no mask");
    expect_invalid(gdp_forward_cpu(&d, NULL), "'args' is NULL");

    double g[64] = {0};
    GdpBackwardArgs ba = {buf, buf, buf, buf, NULL, NULL, NULL, buf, NULL, g, g, g, NULL, NULL, NULL, NULL, NULL};
    expect_invalid(gdp_backward_cpu(&d, &ba), "'dbeta' is NULL");
    ba.dbeta = g, ba.dmask = g;
    expect_invalid(gdp_backward_cpu(&d, &ba), "householder mode has no mask");
    ba.dmask = NULL;
    ck_assert_int_eq(gdp_backward_cpu(&d, &ba), GDP_OK);
}
END_TEST

/* ---- the tape node ---------------------------------------------------------------------------- */

static Tensor *named(Tensor *t, const char *name) {
    snprintf(t->name, GDP_NAME_LEN, "%s", name);
    return t;
}

/* Split mode with a random (non-identity) mask, every input needing a gradient. */
static Tensor *tape_split_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    GdpOpArgs a;
    memset(&a, 0, sizeof a);
    a.mode = GDP_MODE_SPLIT;
    a.n = 2;
    a.scale = 0.7;
    a.q = named(gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 4, 2, 4)), "q");
    a.k = named(gc_random(ctx, dt, &seed, -0.7, 0.7, SHAPE(2, 4, 2, 4)), "k");
    a.v = named(gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 4, 2, 3)), "v");
    a.beta = named(gc_random(ctx, dt, &seed, 0.1, 1.9, SHAPE(2, 4, 2)), "beta");
    a.g = named(gc_random(ctx, dt, &seed, -1, 0, SHAPE(2, 4, 2)), "g");
    a.mask = named(gc_random(ctx, dt, &seed, -0.5, 1.0, SHAPE(2, 2, 2)), "mask");
    a.h0 = named(gc_random(ctx, dt, &seed, -0.5, 0.5, SHAPE(2, 2, 4, 3)), "h0");
    return op_gated_deltaproduct(ctx, &a);
}

/* Varlen householder on the tape, returning ht (o unused: a zero d_o flows into the kernel). */
static Tensor *tape_varlen_ht_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    static const int32_t cu[4] = {0, 1, 8, 20};
    GdpOpArgs a;
    memset(&a, 0, sizeof a);
    a.mode = GDP_MODE_HOUSEHOLDER;
    a.q = named(gc_random(ctx, dt, &seed, -1, 1, SHAPE(1, 20, 1, 3)), "q");
    a.k = named(gc_random(ctx, dt, &seed, -0.5, 0.5, SHAPE(1, 20, 2, 1, 3)), "k");
    a.v = named(gc_random(ctx, dt, &seed, -1, 1, SHAPE(1, 20, 2, 1, 2)), "v");
    a.beta = named(gc_random(ctx, dt, &seed, 0.1, 1.9, SHAPE(1, 20, 2, 1)), "beta");
    a.g = named(gc_random(ctx, dt, &seed, -0.5, 0, SHAPE(1, 20, 1)), "g");
    a.h0 = named(gc_random(ctx, dt, &seed, -0.5, 0.5, SHAPE(3, 1, 3, 2)), "h0");
    a.cu_seqlens = cu;
    a.n_seqs = 3;
    Tensor *ht = NULL;
    a.ht_out = &ht;
    Tensor *o = op_gated_deltaproduct(ctx, &a);
    ck_assert(o->requires_grad && ht && ht->requires_grad);
    ck_assert_int_eq(ht->shape[0], 3);
    return ht;
}

/* x is both q and k, and o and ht both reach the loss: the set-or-accumulate rule. T = K so
 * o [1,4,1,4] and ht [1,1,4,4] can be added. */
static Tensor *tape_shared_input_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    GdpOpArgs a;
    memset(&a, 0, sizeof a);
    a.mode = GDP_MODE_SPLIT;
    a.n = 2;
    Tensor *x = named(gc_random(ctx, dt, &seed, -0.7, 0.7, SHAPE(1, 4, 1, 4)), "x");
    a.q = x, a.k = x;
    a.v = named(gc_random(ctx, dt, &seed, -1, 1, SHAPE(1, 4, 1, 4)), "v");
    a.beta = named(gc_random(ctx, dt, &seed, 0.1, 1.9, SHAPE(1, 4, 1)), "beta");
    a.mask = named(gc_random(ctx, dt, &seed, -0.5, 1.0, SHAPE(1, 2, 2)), "mask");
    Tensor *ht = NULL;
    a.ht_out = &ht;
    Tensor *o = op_gated_deltaproduct(ctx, &a);
    return op_add(ctx, op_reshape(ctx, o, SHAPE(4, 4)), op_reshape(ctx, ht, SHAPE(4, 4)));
}

static void tape_fd(GradcheckCaseFn fn, const char *what) {
    GradcheckResult r = gradcheck_fd(fn, NULL, 5, 0);
    ck_assert_msg(r.n_leaves > 0, "%s: no leaves", what);
    for (int i = 0; i < r.n_leaves; i++)
        ck_assert_msg(r.leaves[i].rel_err <= 1e-6, "%s: d/d %s rel err %.3e", what, r.leaves[i].label,
                      r.leaves[i].rel_err);
}

START_TEST(tape_gradcheck_split) { tape_fd(tape_split_case, "split"); }
END_TEST

START_TEST(tape_gradcheck_varlen_ht) { tape_fd(tape_varlen_ht_case, "varlen ht"); }
END_TEST

START_TEST(tape_gradcheck_shared_input) { tape_fd(tape_shared_input_case, "shared input"); }
END_TEST

START_TEST(tape_registered_case) {
    const OpDef *def = op_find("gated_deltaproduct");
    ck_assert_ptr_nonnull(def);
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    Tensor *o = def->gradcheck_case(ctx, GDP_F64, 1);
    ck_assert_int_eq(o->ndim, 4);
    ck_assert_int_eq(o->shape[3], 3);
    ctx_destroy(ctx);
}
END_TEST

/* The op equals the raw API on f32 tensors too (and the node output has q's dtype). */
START_TEST(tape_f32_matches_api) {
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    Prob p = make_prob(GDP_MODE_HOUSEHOLDER, 1, 6, 2, 4, 3, 2, true, false, NULL, 0, 31);
    GdpSizes z = gdp_sizes(&p.d);
    GdpOpArgs a;
    memset(&a, 0, sizeof a);
    a.mode = GDP_MODE_HOUSEHOLDER;
    a.n = 2;
    a.q = tensor_from_doubles(ctx, LIFE_ACT, GDP_F32, SHAPE(1, 6, 2, 4), p.q);
    a.k = tensor_from_doubles(ctx, LIFE_ACT, GDP_F32, SHAPE(1, 6, 2, 2, 4), p.k);
    a.v = tensor_from_doubles(ctx, LIFE_ACT, GDP_F32, SHAPE(1, 6, 2, 2, 3), p.v);
    a.beta = tensor_from_doubles(ctx, LIFE_ACT, GDP_F32, SHAPE(1, 6, 2, 2), p.beta);
    a.g = tensor_from_doubles(ctx, LIFE_ACT, GDP_F32, SHAPE(1, 6, 2), p.g);
    Tensor *o = op_gated_deltaproduct(ctx, &a);
    ck_assert_int_eq(o->dtype, GDP_F32);
    double *got = (double *)xmalloc((size_t)z.o * sizeof(double));
    tensor_to_doubles(o, got);
    Res r = run(&p, GDP_F64, false);
    ck_assert_rel_l2(got, r.o, z.o, 1e-5);
    free(got);
    res_free(&r);
    prob_free(&p);
    ctx_destroy(ctx);
}
END_TEST

START_TEST(op_wrong_k_shape_is_fatal) {
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    GdpOpArgs a;
    memset(&a, 0, sizeof a);
    a.mode = GDP_MODE_HOUSEHOLDER;
    a.n = 2;
    a.q = tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(1, 3, 2, 4));
    a.k = tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(1, 3, 1, 2, 4)); /* n = 1, not 2 */
    a.v = tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(1, 3, 2, 2, 3));
    a.beta = tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(1, 3, 2, 2));
    op_gated_deltaproduct(ctx, &a);
}
END_TEST

START_TEST(op_split_indivisible_is_fatal) {
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    GdpOpArgs a;
    memset(&a, 0, sizeof a);
    a.mode = GDP_MODE_SPLIT;
    a.n = 4;
    a.q = tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(1, 3, 1, 6));
    a.k = tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(1, 3, 1, 6));
    a.v = tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(1, 3, 1, 3));
    a.beta = tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(1, 3, 1));
    a.mask = tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(1, 4, 4));
    op_gated_deltaproduct(ctx, &a);
}
END_TEST

START_TEST(op_mixed_dtypes_is_fatal) {
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    GdpOpArgs a;
    memset(&a, 0, sizeof a);
    a.mode = GDP_MODE_HOUSEHOLDER;
    a.q = tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(1, 3, 1, 4));
    a.k = tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(1, 3, 1, 1, 4));
    a.v = tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(1, 3, 1, 1, 3));
    a.beta = tensor_zeros(ctx, LIFE_ACT, GDP_F32, SHAPE(1, 3, 1, 1));
    op_gated_deltaproduct(ctx, &a);
}
END_TEST

/* ---- the HDF5 reader's errors ------------------------------------------------------------------ */

static char bad_path[256];

static void unlink_bad_path(void) {
    if (bad_path[0]) unlink(bad_path);
}

/* A one-case file (householder, all sizes 1) with one thing wrong: `drop` names a dataset or
 * attribute left out, `wrong_shape` a dataset written with an extra element. */
static const char *write_bad_file(const char *drop, const char *wrong_shape) {
    snprintf(bad_path, sizeof bad_path, "%s/gdp_test_bad_%d.h5", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    atexit(unlink_bad_path); /* the exit tests end in gdp_fatal */
    h5_quiet();
    hid_t f = H5_CHECK(H5Fcreate(bad_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    hid_t g = H5_CHECK(H5Gcreate2(f, "tiny", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    const char *ints[] = {"B", "T", "H", "K", "V", "n", "gate", "h0"};
    for (size_t i = 0; i < GDP_ARRAY_LEN(ints); i++) {
        if (drop && !strcmp(drop, ints[i])) continue;
        hid_t sp = H5_CHECK(H5Screate(H5S_SCALAR));
        hid_t at = H5_CHECK(H5Acreate2(g, ints[i], H5T_NATIVE_INT64, sp, H5P_DEFAULT, H5P_DEFAULT));
        int64_t one = 1;
        H5_CHECK(H5Awrite(at, H5T_NATIVE_INT64, &one));
        H5_CHECK(H5Aclose(at));
        H5_CHECK(H5Sclose(sp));
    }
    if (!drop || strcmp(drop, "scale")) {
        hid_t sp = H5_CHECK(H5Screate(H5S_SCALAR));
        hid_t at = H5_CHECK(H5Acreate2(g, "scale", H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT, H5P_DEFAULT));
        double one = 1;
        H5_CHECK(H5Awrite(at, H5T_NATIVE_DOUBLE, &one));
        H5_CHECK(H5Aclose(at));
        H5_CHECK(H5Sclose(sp));
    }
    if (!drop || strcmp(drop, "mode")) {
        hid_t ty = H5_CHECK(H5Tcopy(H5T_C_S1));
        H5_CHECK(H5Tset_size(ty, H5T_VARIABLE));
        hid_t sp = H5_CHECK(H5Screate(H5S_SCALAR));
        hid_t at = H5_CHECK(H5Acreate2(g, "mode", ty, sp, H5P_DEFAULT, H5P_DEFAULT));
        const char *mode = "householder";
        H5_CHECK(H5Awrite(at, ty, &mode));
        H5_CHECK(H5Aclose(at));
        H5_CHECK(H5Sclose(sp));
        H5_CHECK(H5Tclose(ty));
    }
    const char *ds[] = {"q", "k", "v", "beta", "g", "h0", "o", "ht", "do", "dht",
                        "dq", "dk", "dv", "dbeta", "dg", "dh0"};
    const int nd[] = {4, 5, 5, 4, 3, 4, 4, 4, 4, 4, 4, 5, 5, 4, 3, 4};
    for (size_t i = 0; i < GDP_ARRAY_LEN(ds); i++) {
        if (drop && !strcmp(drop, ds[i])) continue;
        hsize_t dims[5] = {1, 1, 1, 1, 1};
        if (wrong_shape && !strcmp(wrong_shape, ds[i])) dims[0] = 2;
        hid_t sp = H5_CHECK(H5Screate_simple(nd[i], dims, NULL));
        hid_t d = H5_CHECK(H5Dcreate2(g, ds[i], H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        double vals[2] = {0.5, 0.5};
        H5_CHECK(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, vals));
        H5_CHECK(H5Dclose(d));
        H5_CHECK(H5Sclose(sp));
    }
    H5_CHECK(H5Gclose(g));
    H5_CHECK(H5Fclose(f));
    return bad_path;
}

static void load_and_free(const char *path) {
    GdpVecFile f;
    gdp_vectors_load(path, &f);
    gdp_vectors_free(&f);
}

START_TEST(h5_complete_tiny_file_loads) {
    const char *p = write_bad_file(NULL, NULL);
    GdpVecFile f;
    gdp_vectors_load(p, &f);
    ck_assert_int_eq(f.n_cases, 1);
    ck_assert_str_eq(f.cases[0].name, "tiny");
    ck_assert_int_eq(f.cases[0].mode, GDP_MODE_HOUSEHOLDER);
    ck_assert_double_eq(f.cases[0].dq[0], 0.5);
    gdp_vectors_free(&f);
    unlink(p);
}
END_TEST

START_TEST(h5_missing_dataset_is_fatal) { load_and_free(write_bad_file("dq", NULL)); }
END_TEST

START_TEST(h5_wrong_shape_is_fatal) { load_and_free(write_bad_file(NULL, "k")); }
END_TEST

START_TEST(h5_missing_attribute_is_fatal) { load_and_free(write_bad_file("T", NULL)); }
END_TEST

START_TEST(h5_not_hdf5_is_fatal) {
    snprintf(bad_path, sizeof bad_path, "/tmp/gdp_test_text_%d.h5", (int)getpid());
    FILE *f = fopen(bad_path, "w");
    fputs("this is not an HDF5 file\n", f);
    fclose(f);
    atexit(unlink_bad_path);
    load_and_free(bad_path);
}
END_TEST

START_TEST(h5_missing_file_is_fatal) { load_and_free("/nonexistent/dir/gdp_vectors.h5"); }
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("gdp_cpu");
    TCase *tc = tcase_create("gdp_cpu");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, vectors_f64);
    tcase_add_test(tc, vectors_f32);
    tcase_add_test(tc, fd_householder_gated_h0);
    tcase_add_test(tc, fd_householder_n3_ungated_no_h0);
    tcase_add_test(tc, fd_split_random_mask);
    tcase_add_test(tc, fd_split_r3_ungated_no_h0);
    tcase_add_test(tc, fd_varlen_householder);
    tcase_add_test(tc, fd_varlen_split);
    tcase_add_test(tc, varlen_equals_separate_runs);
    tcase_add_test(tc, split_identity_is_padded_householder);
    tcase_add_test(tc, split_all_ones_is_deltanet);
    tcase_add_test(tc, f32_tracks_f64_long_sequence);
    tcase_add_test(tc, invalid_descriptors);
    tcase_add_test(tc, decode_step_matches_recurrence_t1_f64);
    tcase_add_test(tc, decode_step_chain_matches_recurrence);
    tcase_add_test(tc, decode_step_invalid_args);
    tcase_add_test(tc, tape_gradcheck_split);
    tcase_add_test(tc, tape_gradcheck_varlen_ht);
    tcase_add_test(tc, tape_gradcheck_shared_input);
    tcase_add_test(tc, tape_registered_case);
    tcase_add_test(tc, tape_f32_matches_api);
    tcase_add_exit_test(tc, op_wrong_k_shape_is_fatal, 1);
    tcase_add_exit_test(tc, op_split_indivisible_is_fatal, 1);
    tcase_add_exit_test(tc, op_mixed_dtypes_is_fatal, 1);
    tcase_add_test(tc, h5_complete_tiny_file_loads);
    tcase_add_exit_test(tc, h5_missing_dataset_is_fatal, 1);
    tcase_add_exit_test(tc, h5_wrong_shape_is_fatal, 1);
    tcase_add_exit_test(tc, h5_missing_attribute_is_fatal, 1);
    tcase_add_exit_test(tc, h5_not_hdf5_is_fatal, 1);
    tcase_add_exit_test(tc, h5_missing_file_is_fatal, 1);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
