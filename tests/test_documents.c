/* Training over document boundaries on the CPU: the loader's boundaries, the model on a packed
 * batch equal to each document run alone (float64, loss and every gradient, both modes, the
 * prediction across a boundary counted or not), recomputation over documents giving the same bits,
 * batches that the loader reads from a corpus of many short documents ended by end-of-text (as gdp
 * prepare --doc-sep writes them) equal to their documents run alone, and malformed boundaries refused. The conv op's own checks are in tests/test_ops_b.c. */
#include <stdio.h>
#include <unistd.h>

#include "data/loader.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "tests/check_main.h"
#include "tests/support/documents_case.h"

START_TEST(loader_documents_finds_boundaries) {
    /* rows of 5: [7 9 | 9 1 2] [9 | 3 9 | 4 9]; end-of-text 9 */
    const int32_t in[10] = {7, 9, 9, 1, 2, 9, 3, 9, 4, 9};
    int32_t tg[10], cu[11];
    for (int i = 0; i < 10; i++) tg[i] = 100 + i;
    int n = loader_documents(in, tg, 2, 5, 9, false, cu);
    const int32_t want[] = {0, 2, 3, 5, 6, 8, 10};
    ck_assert_int_eq(n, 6);
    for (int i = 0; i <= n; i++) ck_assert_msg(cu[i] == want[i], "cu[%d] = %d, want %d", i, cu[i], want[i]);
    for (int i = 0; i < 10; i++) ck_assert_int_eq(tg[i], 100 + i);
    n = loader_documents(in, tg, 2, 5, 9, true, cu);
    ck_assert_int_eq(n, 6);
    for (int i = 0; i < 10; i++) ck_assert_int_eq(tg[i], in[i] == 9 ? -1 : 100 + i);
    /* no end-of-text id: one sequence a row */
    n = loader_documents(in, NULL, 2, 5, -1, true, cu);
    ck_assert_int_eq(n, 2);
    ck_assert(cu[0] == 0 && cu[1] == 5 && cu[2] == 10);
}
END_TEST

static void expect_packed_equals_alone(GdpMode mode, bool loss_across) {
    DocsCase c;
    docs_case_make(&c, mode);
    double *g = (double *)xmalloc(sizeof(double) << 20), *ga = (double *)xmalloc(sizeof(double) << 20);
    int64_t n = 0, na = 0;
    double l = docs_case_packed(&c, DEV_CPU, GDP_F64, false, loss_across, g, &n);
    double la = docs_case_alone(&c, DEV_CPU, GDP_F64, false, loss_across, ga, &na);
    ck_assert(n == na && n > 0 && n < (1 << 20));
    const double e = docs_case_rel_err(g, ga, n);
    ck_assert_msg(fabs(l - la) <= 1e-12 * fabs(la), "%s, loss across %d: loss %.17g packed, %.17g alone",
                  mode ? "split" : "householder", loss_across, l, la);
    ck_assert_msg(e <= 1e-11, "%s, loss across %d: gradients differ by %.3e (relative to the largest)",
                  mode ? "split" : "householder", loss_across, e);
    printf("   %s, loss across %s: loss %.12f, gradients max rel err %.2e\n", mode ? "split" : "householder",
           loss_across ? "on" : "off", l, e);
    free(g), free(ga);
}

START_TEST(packed_documents_equal_separate_runs) {
    for (int mode = 0; mode < 2; mode++)
        for (int across = 1; across >= 0; across--) expect_packed_equals_alone((GdpMode)mode, across);
}
END_TEST

/* Without boundaries in the inputs the packed run is still right: one sequence a row. */
START_TEST(packed_documents_differ_from_unpacked) {
    DocsCase c;
    docs_case_make(&c, GDP_MODE_HOUSEHOLDER);
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    Model m;
    Tensor *params[DOCS_CASE_MAX_PARAMS];
    docs_case_model(&c, ctx, GDP_F64, &m, params, DOCS_CASE_MAX_PARAMS);
    int32_t tg[DOCS_CASE_N], cu[DOCS_CASE_N + 1];
    memcpy(tg, c.tg, sizeof tg);
    double plain = tensor_get_host(model_loss_host(&m, c.ids, tg, DOCS_CASE_B, DOCS_CASE_T), 0);
    TrainDocs none = {.eot = -1};
    double off = tensor_get_host(train_batch_loss(&m, &none, c.ids, tg, cu, DOCS_CASE_B, DOCS_CASE_T), 0);
    TrainDocs docs = {.eot = DOCS_CASE_EOT, .loss_across = true};
    double on = tensor_get_host(train_batch_loss(&m, &docs, c.ids, tg, cu, DOCS_CASE_B, DOCS_CASE_T), 0);
    const int32_t rows[3] = {0, DOCS_CASE_T, DOCS_CASE_N};
    double rows_only = tensor_get_host(model_loss_host_docs(&m, c.ids, tg, rows, 2, DOCS_CASE_B, DOCS_CASE_T), 0);
    ck_assert_msg(off == plain, "no documents: %.17g, plain %.17g", off, plain);
    ck_assert_msg(fabs(rows_only - plain) <= 1e-13, "one sequence a row, packed: %.17g, plain %.17g", rows_only, plain);
    ck_assert_msg(fabs(on - plain) > 1e-6, "documents changed nothing (%.17g): the boundaries were not used", on);
    model_free(&m);
    ctx_destroy(ctx);
}
END_TEST

/* A corpus of 300 short documents of varied length (some shorter than the conv window), byte
 * tokenizer with end-of-text 256, written as gdp prepare writes it (each document followed by
 * end-of-text) into a shard folder; the loader's random windows then cut documents anywhere. Every
 * batch of 2 x 45 (several documents each) through the training library equals its documents alone. */
START_TEST(corpus_documents_equal_separate_runs) {
    char dir[] = "/tmp/gdp_docs_XXXXXX", path[64];
    ck_assert(mkdtemp(dir));
    Tokenizer *tok = tokenizer_byte();
    tokenizer_add_eot(tok);
    ck_assert_int_eq(tok->eot, 256);
    uint32_t *toks = (uint32_t *)xmalloc(sizeof(uint32_t) << 16);
    int64_t n = 0;
    Rng rng;
    rng_seed(&rng, 21);
    for (int d = 0; d < 300; d++) {
        char text[64];
        const int len = 1 + (int)rng_below(&rng, 40);
        for (int i = 0; i < len; i++) text[i] = (char)('a' + rng_below(&rng, 26));
        n += tokenizer_encode(tok, (const uint8_t *)text, (size_t)len, toks + n);
        toks[n++] = (uint32_t)tok->eot;
    }
    snprintf(path, sizeof path, "%s/train_000000.bin", dir);
    shard_write(path, toks, n, 2);
    snprintf(path, sizeof path, "%s/%s", dir, TOKENIZER_FILE);
    tokenizer_save(tok, path);
    LoaderConfig lc = loader_config(dir, SPLIT_TRAIN, DOCS_CASE_B, DOCS_CASE_T);
    Loader *l = loader_open(&lc);
    ck_assert_int_eq(loader_vocab(l), 257);
    double *g = (double *)xmalloc(sizeof(double) << 20), *ga = (double *)xmalloc(sizeof(double) << 20);
    for (int batch = 0; batch < 3; batch++) {
        DocsCase c;
        docs_case_make(&c, batch == 1 ? GDP_MODE_SPLIT : GDP_MODE_HOUSEHOLDER);
        c.cfg.vocab_size = 257, c.eot = 256;
        loader_next_batch(l, c.ids, c.tg);
        int docs = 0;
        for (int i = 0; i < DOCS_CASE_N; i++) docs += c.ids[i] == c.eot;
        ck_assert_msg(docs >= 2 * DOCS_CASE_B, "batch %d has only %d end-of-text tokens", batch, docs);
        int64_t ng = 0, na = 0;
        const bool across = batch != 2;
        double lp = docs_case_packed(&c, DEV_CPU, GDP_F64, false, across, g, &ng);
        double la = docs_case_alone(&c, DEV_CPU, GDP_F64, false, across, ga, &na);
        const double e = docs_case_rel_err(g, ga, ng);
        ck_assert(ng == na && ng > 0);
        ck_assert_msg(fabs(lp - la) <= 1e-12 * fabs(la), "batch %d: loss %.17g packed, %.17g alone", batch, lp, la);
        ck_assert_msg(e <= 1e-11, "batch %d: gradients differ by %.3e", batch, e);
        printf("   corpus batch %d (%d documents ended): loss %.12f, gradients max rel err %.2e\n", batch, docs, lp, e);
    }
    free(g), free(ga), free(toks);
    loader_close(l);
    tokenizer_free(tok);
    snprintf(path, sizeof path, "%s/train_000000.bin", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/%s", dir, TOKENIZER_FILE);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* Recomputation (whole blocks, or the MLP halves and q/k convs) over documents: the same bits. */
static double recompute_docs_step(const DocsCase *c, int recompute, float *grads, int64_t *n_grads) {
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    ParamStore ps;
    Model m;
    model_create(&m, &c->cfg, ctx, &ps, 5);
    m.recompute = recompute == 1;
    m.selective_recompute = recompute == 2;
    int32_t tg[DOCS_CASE_N], cu[DOCS_CASE_N + 1];
    memcpy(tg, c->tg, sizeof tg);
    TrainDocs docs = {.eot = DOCS_CASE_EOT, .loss_across = true};
    params_zero_grad(&ps);
    Tensor *loss = train_batch_loss(&m, &docs, c->ids, tg, cu, DOCS_CASE_B, DOCS_CASE_T);
    tape_backward(ctx, loss);
    double l = tensor_get_host(loss, 0);
    *n_grads = ps.total;
    device_memcpy(grads, DEV_CPU, ps.flat_grads, ctx->device, (size_t)ps.total * sizeof(float));
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
    return l;
}

START_TEST(documents_recompute_same_bits) {
    DocsCase c;
    docs_case_make(&c, GDP_MODE_HOUSEHOLDER);
    float *g0 = (float *)xmalloc(sizeof(float) << 20), *g1 = (float *)xmalloc(sizeof(float) << 20);
    int64_t n0, n1;
    double l0 = recompute_docs_step(&c, 0, g0, &n0);
    for (int how = 1; how <= 2; how++) {
        double l1 = recompute_docs_step(&c, how, g1, &n1);
        ck_assert(n0 == n1 && n0 < (1 << 20));
        ck_assert_msg(l0 == l1, "recompute %d: loss %.17g, without %.17g", how, l1, l0);
        ck_assert_msg(memcmp(g0, g1, (size_t)n0 * sizeof(float)) == 0, "recompute %d: gradients differ", how);
    }
    free(g0), free(g1);
}
END_TEST

/* A sequence may not run across two rows: every row's start must be an offset. */
START_TEST(documents_need_row_starts) {
    DocsCase c;
    docs_case_make(&c, GDP_MODE_HOUSEHOLDER);
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    Model m;
    Tensor *params[DOCS_CASE_MAX_PARAMS];
    docs_case_model(&c, ctx, GDP_F64, &m, params, DOCS_CASE_MAX_PARAMS);
    const int32_t cu[3] = {0, 10, DOCS_CASE_N};
    model_loss_host_docs(&m, c.ids, c.tg, cu, 2, DOCS_CASE_B, DOCS_CASE_T);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("documents");
    TCase *tc = tcase_create("documents");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, loader_documents_finds_boundaries);
    tcase_add_test(tc, packed_documents_equal_separate_runs);
    tcase_add_test(tc, packed_documents_differ_from_unpacked);
    tcase_add_test(tc, corpus_documents_equal_separate_runs);
    tcase_add_test(tc, documents_recompute_same_bits);
    tcase_add_exit_test(tc, documents_need_row_starts, 1);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
