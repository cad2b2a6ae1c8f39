/* The chunked algorithm that the CUDA kernels implement (tests/support/gdp_chunk_model.h: the chunk
 * grid of kernels/gdp/layout.h, A, T = (I+A)^-1, W, U, the state pass, the output, and the
 * whole dedicated backward) against the per-token CPU reference, in float64 on the CPU, so that CI
 * (no GPU) checks the math of the GPU path: both modes, gates on/off, h0 on/off, partial chunks,
 * varlen, n that does not divide 64. */
#include <math.h>

#include "base/common.h"
#include "core/gradcheck.h"
#include "kernels/gdp/desc.h"
#include "tests/check_main.h"
#include "tests/support/gdp_chunk_model.h"

typedef struct Case {
    GdpMode mode;
    int B, T, H, K, V, n, gate, h0, varlen;
} Case;

static double *randn(Rng *g, int64_t n, double s) {
    double *x = (double *)xcalloc((size_t)(n > 0 ? n : 1), sizeof(double));
    for (int64_t i = 0; i < n; i++) x[i] = s * rng_normal(g);
    return x;
}

/* Worst relative L2 error of the model against the reference over o, ht and every gradient; and
 * in *lookahead_err that of the lookahead state and dh passes against the model's own (h, Delta,
 * ht; dh, dDelta, dh0). */
static double run_case(const Case *cs, uint64_t seed, double *lookahead_err) {
    Rng g;
    rng_seed(&g, seed);
    GdpDesc d = {0};
    d.mode = cs->mode, d.B = cs->B, d.T = cs->T, d.H = cs->H, d.K = cs->K, d.V = cs->V, d.n = cs->n;
    d.dtype = GDP_F64;
    int32_t cu[4] = {0, cs->T / 3, cs->T / 3 + 1 + cs->T / 5, cs->T};
    if (cs->varlen) {
        d.B = 1;
        d.cu_seqlens = cu;
        d.n_seqs = 3;
    }
    GdpSizes s = gdp_sizes(&d);
    double *q = randn(&g, s.q, 1), *k = randn(&g, s.k, 1), *v = randn(&g, s.v, 1), *dO = randn(&g, s.o, 1);
    double *h0 = randn(&g, s.state, 0.5), *dht = randn(&g, s.state, 1);
    double *beta = randn(&g, s.beta, 0), *gg = randn(&g, s.g, 0), *mask = randn(&g, s.mask, 0.3);
    const int w = cs->mode == GDP_MODE_SPLIT ? cs->K / cs->n : cs->K; /* unit keys per slot / slice */
    for (int64_t r = 0; r < s.k / w; r++) {
        double a = 0;
        for (int x = 0; x < w; x++) a += k[r * w + x] * k[r * w + x];
        for (int x = 0; x < w; x++) k[r * w + x] /= sqrt(a);
    }
    for (int64_t i = 0; i < s.beta; i++) beta[i] = 2.0 * rng_uniform(&g);
    for (int64_t i = 0; i < s.g; i++) gg[i] = -log1p(exp(-(rng_normal(&g) + 2.0)));
    for (int64_t i = 0; i < s.mask; i++) mask[i] += (i % (cs->n * cs->n)) % (cs->n + 1) == 0 ? 1.0 : 0.0;
    const double *G = cs->gate ? gg : NULL, *H0 = cs->h0 ? h0 : NULL, *M = cs->mode == GDP_MODE_SPLIT ? mask : NULL;

    double *o1 = randn(&g, s.o, 0), *o2 = randn(&g, s.o, 0), *ht1 = randn(&g, s.state, 0), *ht2 = randn(&g, s.state, 0);
    GdpForwardArgs fa = {q, k, v, beta, G, M, H0, o1, ht1, NULL, 0};
    ck_assert_int_eq(gdp_forward_cpu(&d, &fa), GDP_OK);
    const int64_t ns[7] = {s.q, s.k, s.v, s.beta, s.g, s.mask, s.state};
    double *gr[2][7];
    for (int a = 0; a < 2; a++)
        for (int i = 0; i < 7; i++) gr[a][i] = randn(&g, ns[i], 0);
    GdpBackwardArgs ba = {q, k, v, beta, G, M, H0, dO, dht, gr[0][0], gr[0][1], gr[0][2], gr[0][3], gr[0][4], M ? gr[0][5] : NULL,
                          gr[0][6], NULL};
    ck_assert_int_eq(gdp_backward_cpu(&d, &ba), GDP_OK);

    GdpModel m;
    gdpm_init(&d, cs->varlen ? cu : NULL, &m, 1);
    GdpModelIn in = {q, k, v, beta, G, M, H0, dO, dht};
    gdpm_forward(&d, &in, &m, o2, ht2);
    /* the lookahead state pass must give the model's h, Delta and final state */
    const size_t nh = (size_t)m.p.CH * (size_t)m.p.sH, nd = (size_t)m.p.CH * (size_t)m.p.sD;
    double *h2 = (double *)xcalloc(nh, sizeof(double)), *D2 = (double *)xcalloc(nd, sizeof(double));
    double *ht3 = (double *)xcalloc((size_t)s.state, sizeof(double));
    gdpm_state_lookahead(&d, H0, &m, h2, D2, ht3);
    *lookahead_err = fmax(fmax(rel_l2(h2, m.h, (int64_t)nh), rel_l2(D2, m.D, (int64_t)nd)), rel_l2(ht3, ht2, s.state));
    free(h2);
    free(D2);
    free(ht3);
    gdpm_backward(&d, &in, &m, gr[1][0], gr[1][1], gr[1][2], gr[1][3], gr[1][4], M ? gr[1][5] : NULL, gr[1][6]);
    /* and the lookahead dh pass the model's dh, dDelta and dh0 */
    double *dh2 = (double *)xcalloc(nh, sizeof(double)), *dD2 = (double *)xcalloc(nd, sizeof(double));
    double *dh02 = (double *)xcalloc((size_t)s.state, sizeof(double));
    gdpm_dh_lookahead(&d, &in, &m, dh2, dD2, dh02);
    *lookahead_err = fmax(*lookahead_err, fmax(fmax(rel_l2(dh2, m.dh, (int64_t)nh), rel_l2(dD2, m.dD, (int64_t)nd)),
                                               rel_l2(dh02, gr[1][6], s.state)));
    free(dh2);
    free(dD2);
    free(dh02);
    double worst = fmax(rel_l2(o2, o1, s.o), rel_l2(ht2, ht1, s.state));
    for (int i = 0; i < 7; i++)
        if (ns[i]) worst = fmax(worst, rel_l2(gr[1][i], gr[0][i], ns[i]));
    gdpm_free(&m);
    double *all[] = {q, k, v, dO, h0, dht, beta, gg, mask, o1, o2, ht1, ht2};
    for (size_t i = 0; i < GDP_ARRAY_LEN(all); i++) free(all[i]);
    for (int a = 0; a < 2; a++)
        for (int i = 0; i < 7; i++) free(gr[a][i]);
    return worst;
}

static const Case cases[] = {
    {GDP_MODE_HOUSEHOLDER, 2, 70, 2, 32, 32, 1, 1, 1, 0},  {GDP_MODE_HOUSEHOLDER, 1, 100, 2, 32, 48, 2, 1, 1, 0},
    {GDP_MODE_HOUSEHOLDER, 1, 67, 1, 64, 32, 3, 0, 1, 0},  {GDP_MODE_HOUSEHOLDER, 2, 130, 1, 40, 20, 2, 1, 0, 0},
    {GDP_MODE_HOUSEHOLDER, 1, 90, 1, 16, 24, 5, 1, 1, 1},  {GDP_MODE_HOUSEHOLDER, 1, 1, 1, 16, 16, 2, 1, 1, 0},
    {GDP_MODE_SPLIT, 2, 100, 2, 32, 32, 2, 1, 1, 0},       {GDP_MODE_SPLIT, 1, 150, 1, 64, 40, 4, 1, 1, 0},
    {GDP_MODE_SPLIT, 1, 70, 1, 48, 16, 3, 1, 0, 1},        {GDP_MODE_SPLIT, 1, 1, 1, 16, 16, 1, 1, 1, 0},
};

START_TEST(chunk_model_matches_recurrence) {
    const Case *cs = &cases[_i];
    double la = 1;
    double e = run_case(cs, 100 + (uint64_t)_i, &la);
    ck_assert_msg(e <= 1e-9, "%s T=%d K=%d V=%d n=%d gate=%d h0=%d varlen=%d: worst rel L2 %.3e > 1e-9",
                  cs->mode == GDP_MODE_SPLIT ? "split" : "householder", cs->T, cs->K, cs->V, cs->n, cs->gate, cs->h0,
                  cs->varlen, e);
    ck_assert_msg(la <= 1e-11, "%s T=%d K=%d V=%d n=%d: lookahead state or dh pass rel L2 %.3e > 1e-11 against the plain one",
                  cs->mode == GDP_MODE_SPLIT ? "split" : "householder", cs->T, cs->K, cs->V, cs->n, la);
}
END_TEST

START_TEST(chunk_grid_never_cuts_a_token) {
    for (int n = 1; n <= 64; n++) {
        GdpDesc d = {0};
        d.mode = GDP_MODE_SPLIT, d.B = 1, d.T = 1000, d.H = 1, d.K = 64 * n, d.V = 16, d.n = n, d.dtype = GDP_F64;
        GdpLayout p;
        gdp_layout_make(&d, &p);
        ck_assert_int_le(p.Ct * n, GDP_CHUNK);
        ck_assert_int_ge(p.Ct, 1);
        ck_assert_int_eq(p.Ctp % 16, 0);
        ck_assert_int_ge(p.NCmax, (1000 + p.Ct - 1) / p.Ct);
    }
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("gdp_chunk_model");
    TCase *tc = tcase_create("model");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, chunk_model_matches_recurrence, 0, (int)GDP_ARRAY_LEN(cases));
    tcase_add_test(tc, chunk_grid_never_cuts_a_token);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
