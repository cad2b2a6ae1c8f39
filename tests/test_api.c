/* The model-level C API (api/gdp_model.h) on the CPU, on checkpoints trained here in both modes: a
 * batch of prompts of different lengths, each ending on its own, gives every sequence the tokens and
 * logits of its prompt alone; a batch larger than one step's group of rows; the sampler's contract
 * (logits untouched, a new prefill restarts the generator); and mistakes coming back as errors with
 * a message instead of ending the process. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "api/gdp_model.h"
#include "base/common.h"
#include "train/train.h"
#include "tests/check_main.h"

static char dir[300], ckpt[2][400], corpus[400];

/* Trains two tiny models (householder, split) in each test's own process: OpenMP's threads do not
 * survive Check's fork, so the parent must not train. */
static void train_models(void) {
    snprintf(dir, sizeof dir, "%s/gdp_test_api_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) gdp_fatal("test_api: mkdtemp failed");
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cat layers/*.h core/*.h > '%s'", corpus);
    if (system(cmd) != 0) gdp_fatal("test_api: cannot write %s (run the test from the repository root)", corpus);
    for (int k = 0; k < 2; k++) {
        snprintf(ckpt[k], sizeof ckpt[k], "%s/run%d", dir, k);
        TrainOptions o = train_default_options();
        o.data = corpus, o.out = ckpt[k];
        o.batch = 2, o.seq = 32, o.steps = 20, o.lr = 1e-2, o.warmup = 2;
        o.eval_every = 0, o.eval_batches = 1, o.quiet = true, o.seed = 3;
        if (k == 1) o.sets[o.n_sets++] = "mode=split";
        Dist d;
        dist_init_single(&d);
        TrainResult r;
        train_run(&o, &d, &r);
    }
}

static void remove_models(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (dir[0] && system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
}

static GdpModel *load(int k) {
    GdpModel *m = NULL;
    ck_assert_msg(gdp_model_load(ckpt[k], "cpu", NULL, &m) == 0, "%s", gdp_model_last_error());
    return m;
}

static double rel_l2f(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) num += (double)(a[i] - b[i]) * (a[i] - b[i]), den += (double)b[i] * b[i];
    return sqrt(num / (den > 0 ? den : 1e-300));
}

/* Generates from n prompts (ids back to back, lens) in one batch, sequence i ending after stop[i]
 * tokens; writes each sequence's tokens to out[i * max_new ...] and its logits after its last step to
 * last[i * V ...]. */
static void run_batch(GdpModel *m, int n, const GdpSampling *s, const int32_t *ids, const int64_t *lens,
                      const int *stop, int max_new, int32_t *out, float *last) {
    const int V = gdp_model_vocab_size(m);
    GdpBatch *b = NULL;
    ck_assert_msg(gdp_batch_new(m, n, s, &b) == 0, "%s", gdp_model_last_error());
    ck_assert_msg(gdp_batch_prefill(b, ids, lens) == 0, "%s", gdp_model_last_error());
    int32_t *next = (int32_t *)xmalloc((size_t)n * sizeof(int32_t));
    int *made = (int *)xcalloc((size_t)n, sizeof(int));
    for (int live = n, step = 0; live > 0; step++) {
        ck_assert_int_eq(gdp_batch_sample(b, next), 0);
        for (int i = 0; i < n; i++) {
            if (made[i] == stop[i]) {
                ck_assert_int_eq(next[i], -1); /* ended at the previous step */
                continue;
            }
            ck_assert(next[i] >= 0 && next[i] < V);
            out[i * max_new + made[i]++] = next[i];
            if (made[i] == stop[i]) {
                memcpy(last + (int64_t)i * V, gdp_batch_logits(b, i), (size_t)V * sizeof(float));
                next[i] = -1;
            }
        }
        const int was = live;
        live = gdp_batch_step(b, next);
        ck_assert_msg(live >= 0 && live <= was, "%s", gdp_model_last_error());
        ck_assert(step <= max_new);
    }
    for (int i = 0; i < n; i++) {
        ck_assert_ptr_null(gdp_batch_logits(b, i));
        ck_assert_int_eq(gdp_batch_position(b, i), lens[i] + stop[i] - 1); /* the last token is not consumed */
    }
    free(next), free(made);
    gdp_batch_free(b);
}

/* The batch's tokens and final logits equal each prompt's alone. */
static void check_batch_equals_alone(GdpModel *m, int n, const GdpSampling *s, const int32_t *ids,
                                     const int64_t *lens, const int *stop, int max_new) {
    const int V = gdp_model_vocab_size(m);
    int32_t *tb = (int32_t *)xcalloc((size_t)(n * max_new), sizeof(int32_t));
    int32_t *ta = (int32_t *)xcalloc((size_t)(n * max_new), sizeof(int32_t));
    float *lb = (float *)xcalloc((size_t)n * V, sizeof(float)), *la = (float *)xcalloc((size_t)n * V, sizeof(float));
    run_batch(m, n, s, ids, lens, stop, max_new, tb, lb);
    int64_t off = 0;
    double worst = 0;
    for (int i = 0; i < n; i++) {
        run_batch(m, 1, s, ids + off, lens + i, stop + i, max_new, ta + i * max_new, la + (int64_t)i * V);
        off += lens[i];
        for (int t = 0; t < stop[i]; t++)
            ck_assert_msg(tb[i * max_new + t] == ta[i * max_new + t], "sequence %d token %d: batch %d, alone %d", i,
                          t, tb[i * max_new + t], ta[i * max_new + t]);
        const double e = rel_l2f(lb + (int64_t)i * V, la + (int64_t)i * V, V);
        worst = e > worst ? e : worst;
    }
    ck_assert_msg(worst < 1e-5, "last logits: batch vs alone rel L2 %.2e", worst);
    printf("batch of %d = each alone: tokens equal, last logits rel L2 %.1e\n", n, worst);
    free(tb), free(ta), free(lb), free(la);
}

START_TEST(batch_equals_each_alone_both_modes) {
    /* prompts of 1, 9, 40 and 300 tokens (the last crosses a prefill chunk), ending after 3 to 25 */
    const char *text = "#pragma once\n/* The Gated DeltaProduct language model */ typedef struct Block {";
    static char big[400];
    for (int i = 0; i < 300; i++) big[i] = text[i % (int)strlen(text)];
    const char *prompts[4] = {"s", "static in", "Tensor *op_matmul(Ctx *ctx, Tensor *a, T", big};
    const size_t plen[4] = {1, 9, 40, 300};
    const int stop[4] = {7, 25, 3, 12};
    for (int k = 0; k < 2; k++) {
        GdpModel *m = load(k);
        int32_t ids[400];
        int64_t lens[4], off = 0;
        for (int i = 0; i < 4; i++) {
            lens[i] = gdp_model_encode(m, prompts[i], plen[i], ids + off, 400 - off);
            ck_assert_int_eq(lens[i], (int64_t)plen[i]); /* bytes: one token each */
            off += lens[i];
        }
        GdpSampling s = {0.9, 40, 0.95, 1.3, 5};
        check_batch_equals_alone(m, 4, &s, ids, lens, stop, 25);
        s.temperature = 0; /* greedy */
        check_batch_equals_alone(m, 4, &s, ids, lens, stop, 25);
        gdp_model_free(m);
    }
}
END_TEST

START_TEST(batch_larger_than_a_step_group) {
    /* 130 sequences: more than a step's group of rows (2 x 256 / (conv_size + 1) = 102 for conv 4) */
    enum { N = 130 };
    GdpModel *m = load(0);
    int32_t ids[N * 5];
    int64_t lens[N], off = 0;
    int stop[N];
    for (int i = 0; i < N; i++) {
        lens[i] = 1 + i % 5, stop[i] = 1 + (i * 7) % 6;
        for (int t = 0; t < lens[i]; t++) ids[off++] = 'a' + (i + 3 * t) % 26;
    }
    GdpSampling s = {1.0, 0, 0.9, 1.0, 11};
    check_batch_equals_alone(m, N, &s, ids, lens, stop, 6);
    gdp_model_free(m);
}
END_TEST

START_TEST(sampling_contract) {
    GdpModel *m = load(0);
    const int V = gdp_model_vocab_size(m);
    ck_assert_int_eq(V, 256);
    ck_assert_str_eq(gdp_model_device(m), "cpu");
    GdpBatch *b = NULL;
    GdpSampling s = {1.0, 0, 1.0, 1.0, 9};
    ck_assert_int_eq(gdp_batch_new(m, 2, &s, &b), 0);
    int32_t next[2], tok[2] = {1, 2};
    ck_assert_int_eq(gdp_batch_sample(b, next), 0); /* before a prefill every sequence has ended */
    ck_assert(next[0] == -1 && next[1] == -1);
    ck_assert_int_eq(gdp_batch_step(b, tok), 0);
    const int32_t ids[5] = {'a', 'b', 'c', 'x', 'y'};
    const int64_t lens[2] = {3, 2};
    ck_assert_int_eq(gdp_batch_prefill(b, ids, lens), 0);
    ck_assert_int_eq(gdp_batch_position(b, 1), 2);
    float *before = (float *)xmalloc((size_t)V * sizeof(float));
    memcpy(before, gdp_batch_logits(b, 0), (size_t)V * sizeof(float));
    int32_t seq[2][8];
    for (int t = 0; t < 8; t++) {
        ck_assert_int_eq(gdp_batch_sample(b, next), 0);
        if (t == 0) ck_assert(memcmp(before, gdp_batch_logits(b, 0), (size_t)V * sizeof(float)) == 0);
        seq[0][t] = next[0];
        ck_assert_int_eq(gdp_batch_step(b, next), 2);
    }
    ck_assert_int_eq(gdp_batch_prefill(b, ids, lens), 0); /* starts over: the same sample again */
    for (int t = 0; t < 8; t++) {
        ck_assert_int_eq(gdp_batch_sample(b, next), 0);
        ck_assert_int_eq(next[0], seq[0][t]);
        seq[1][t] = next[1];
        ck_assert_int_eq(gdp_batch_step(b, next), 2);
    }
    size_t n = 0;
    const char *bytes = gdp_model_token_bytes(m, 'q', &n);
    ck_assert(bytes && n == 1 && bytes[0] == 'q');
    ck_assert_ptr_null(gdp_model_token_bytes(m, V, &n));
    ck_assert_int_eq(gdp_model_encode(m, "hello", 5, NULL, 0), 5);
    free(before);
    gdp_batch_free(b);
    gdp_model_free(m);
}
END_TEST

/* Each mistake returns -1 and a message naming it; the process goes on. */
#define EXPECT_ERROR(call, needle)                                                                          \
    do {                                                                                                    \
        ck_assert_int_lt((call), 0);                                                                        \
        ck_assert_msg(strstr(gdp_model_last_error(), (needle)) != NULL, "'%s' does not mention '%s'",       \
                      gdp_model_last_error(), (needle));                                                    \
    } while (0)

START_TEST(mistakes_are_errors) {
    GdpModel *m = NULL;
    char path[600];
    snprintf(path, sizeof path, "%s/none.h5", dir);
    EXPECT_ERROR(gdp_model_load(path, "cpu", NULL, &m), "no such file");
    ck_assert_ptr_null(m);
    EXPECT_ERROR(gdp_model_load(dir, "cpu", NULL, &m), "no valid checkpoint");
    EXPECT_ERROR(gdp_model_load(corpus, "cpu", NULL, &m), "not a usable gdp.c checkpoint");
    EXPECT_ERROR(gdp_model_load(ckpt[0], "tpu", NULL, &m), "not cpu, cuda or auto");
    EXPECT_ERROR(gdp_model_load(ckpt[0], "cpu", corpus, &m), "tokenizer");
    /* a checkpoint with one byte flipped fails the whole-file check */
    char cmd[2000], bad[400];
    snprintf(bad, sizeof bad, "%s/bad.h5", dir);
    snprintf(cmd, sizeof cmd, "cp \"$(ls %s/ckpt_*.h5 | tail -1)\" '%s' && printf 'X' | dd of='%s' bs=1 seek=5000 "
             "conv=notrunc 2>/dev/null", ckpt[0], bad, bad);
    ck_assert_int_eq(system(cmd), 0);
    EXPECT_ERROR(gdp_model_load(bad, "cpu", NULL, &m), "checksum");

    m = load(0);
    GdpBatch *b = NULL;
    EXPECT_ERROR(gdp_batch_new(m, 0, NULL, &b), "at least 1");
    GdpSampling s = gdp_sampling_default();
    s.top_p = 2;
    EXPECT_ERROR(gdp_batch_new(m, 1, &s, &b), "top_p");
    ck_assert_int_eq(gdp_batch_new(m, 2, NULL, &b), 0);
    const int32_t ids[3] = {1, 2, 300};
    int64_t lens[2] = {1, 2};
    EXPECT_ERROR(gdp_batch_prefill(b, ids, lens), "outside the vocabulary");
    lens[0] = 0;
    EXPECT_ERROR(gdp_batch_prefill(b, ids, lens), "at least 1");
    const int32_t good[3] = {1, 2, 3};
    lens[0] = 2, lens[1] = 1;
    ck_assert_int_eq(gdp_batch_prefill(b, good, lens), 0);
    const int32_t far[2] = {5, 1000};
    EXPECT_ERROR(gdp_batch_step(b, far), "outside the vocabulary");
    ck_assert_int_eq(gdp_batch_position(b, 1), 1); /* the failed step changed nothing */
    const int32_t end_first[2] = {-1, 7};
    ck_assert_int_eq(gdp_batch_step(b, end_first), 1);
    ck_assert_ptr_null(gdp_batch_logits(b, 0));
    ck_assert_ptr_nonnull(gdp_batch_logits(b, 1));
    gdp_batch_free(b);
    gdp_model_free(m);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, train_models, remove_models);
    tcase_add_test(tc, batch_equals_each_alone_both_modes);
    tcase_add_test(tc, batch_larger_than_a_step_group);
    tcase_add_test(tc, sampling_contract);
    tcase_add_test(tc, mistakes_are_errors);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
