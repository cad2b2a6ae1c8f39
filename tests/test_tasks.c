/* The state-tracking tasks: group tables are groups of the right orders, the product convention,
 * labels are running products, seeded generation, the prefix-accuracy metric on a hand case, the
 * frozen identity mask of split mode, and the whole pipeline (gdp tasks) on a CPU-sized run:
 * running parity with a tiny one-layer model, which negative eigenvalues make learnable and
 * positive ones do not (the paper's claim, in miniature). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/params.h"
#include "core/tape.h"
#include "data/tasks.h"
#include "layers/model.h"
#include "tests/check_main.h"
#include "train/tasks.h"

/* ---- groups ------------------------------------------------------------------------------------- */

static void make(Group *g, const char *name) {
    char err[256];
    ck_assert_msg(group_make(g, name, err, sizeof err), "group_make(%s): %s", name, err);
}

START_TEST(group_orders_and_axioms) {
    const char *names[] = {"S2", "S3", "S4", "S5", "A3", "A4", "A5", "Z2", "Z5", "parity", "s3"};
    const int orders[] = {2, 6, 24, 120, 3, 12, 60, 2, 5, 2, 6};
    const char *canon[] = {"S2", "S3", "S4", "S5", "A3", "A4", "A5", "Z2", "Z5", "Z2", "S3"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        Group g;
        make(&g, names[i]);
        ck_assert_int_eq(g.order, orders[i]);
        ck_assert_str_eq(g.name, canon[i]);
        char err[256];
        ck_assert_msg(group_check(&g, err, sizeof err), "%s", err);
        /* id 0 is the identity permutation; the elements are distinct permutations */
        ck_assert_int_eq(g.identity, 0);
        for (int p = 0; p < g.degree; p++) ck_assert_int_eq(g.perms[p], p);
        for (int a = 0; a < g.order; a++) ck_assert_int_eq(group_find(&g, g.perms + (size_t)a * g.degree), a);
        /* closure, from the permutations themselves: each row of the table is a permutation of the group */
        for (int a = 0; a < g.order; a++) {
            char *seen = (char *)calloc((size_t)g.order, 1);
            for (int b = 0; b < g.order; b++) {
                int ab = group_mul(&g, a, b);
                ck_assert(ab >= 0 && ab < g.order);
                ck_assert_msg(!seen[ab], "%s: row %d of the table repeats %d", g.name, a, ab);
                seen[ab] = 1;
            }
            free(seen);
        }
        group_free(&g);
    }
}
END_TEST

START_TEST(alternating_groups_are_even_and_s3_is_not_abelian) {
    Group a5, s3, z5;
    make(&a5, "A5"), make(&s3, "S3"), make(&z5, "Z5");
    for (int e = 0; e < a5.order; e++) {
        const uint8_t *p = a5.perms + (size_t)e * 5;
        int inv = 0;
        for (int i = 0; i < 5; i++)
            for (int j = i + 1; j < 5; j++) inv += p[i] > p[j];
        ck_assert_msg(inv % 2 == 0, "A5 element %d is odd", e);
    }
    bool commutes = true;
    for (int a = 0; a < s3.order; a++)
        for (int b = 0; b < s3.order; b++) commutes &= group_mul(&s3, a, b) == group_mul(&s3, b, a);
    ck_assert_msg(!commutes, "S3 must not be abelian");
    for (int a = 0; a < z5.order; a++)
        for (int b = 0; b < z5.order; b++) ck_assert_int_eq(group_mul(&z5, a, b), (a + b) % 5);
    group_free(&a5), group_free(&s3), group_free(&z5);
}
END_TEST

/* The convention of data/tasks.h: a·b applies a first, then b: (a·b)(i) = b(a(i)). */
START_TEST(product_convention) {
    Group g;
    make(&g, "S3");
    const uint8_t swap01[3] = {1, 0, 2}, swap12[3] = {0, 2, 1}, ab[3] = {2, 0, 1}, ba[3] = {1, 2, 0};
    int a = group_find(&g, swap01), b = group_find(&g, swap12);
    ck_assert(a > 0 && b > 0);
    ck_assert_int_eq(group_mul(&g, a, b), group_find(&g, ab));
    ck_assert_int_eq(group_mul(&g, b, a), group_find(&g, ba));
    /* lexicographic ids: 012, 021, 102, 120, 201, 210 */
    ck_assert_int_eq(b, 1);
    ck_assert_int_eq(a, 2);
    ck_assert_int_eq(group_find(&g, ab), 4);
    group_free(&g);
}
END_TEST

START_TEST(unknown_groups_are_refused) {
    const char *bad[] = {"S7", "S1", "A2", "Z1", "Z65", "Q8", "", "S", "S3x", "parityy"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Group g;
        char err[256] = "";
        ck_assert_msg(!group_make(&g, bad[i], err, sizeof err), "'%s' was accepted", bad[i]);
        ck_assert_msg(strstr(err, "S2..S6"), "the message for '%s' does not list the groups: %s", bad[i], err);
    }
}
END_TEST

/* ---- labels and generation ---------------------------------------------------------------------- */

START_TEST(labels_are_running_products) {
    Group g;
    make(&g, "S4");
    TaskGen gen;
    const int B = 5, T = 40;
    task_gen_init(&gen, &g, B, T, false, 7);
    int32_t in[5 * 40], lab[5 * 40];
    task_gen_next(&gen, in, lab);
    for (int b = 0; b < B; b++) {
        /* compose the permutations by hand: P = x_1 first, ..., x_t last */
        uint8_t P[4] = {0, 1, 2, 3}, Q[4];
        for (int t = 0; t < T; t++) {
            int x = in[b * T + t];
            ck_assert(x >= 0 && x < g.order);
            const uint8_t *px = g.perms + (size_t)x * 4;
            for (int i = 0; i < 4; i++) Q[i] = px[P[i]];
            memcpy(P, Q, 4);
            ck_assert_int_eq(lab[b * T + t], group_find(&g, P));
        }
        ck_assert_int_eq(lab[b * T], in[b * T]); /* y_1 = x_1 */
    }
    int32_t y[3];
    group_running_product(&g, (const int32_t[]){0, 0, 0}, 3, y);
    ck_assert(y[0] == 0 && y[1] == 0 && y[2] == 0);
    group_free(&g);
}
END_TEST

/* With a BOS token each row is the token |G| with no label, then the same word and labels as without. */
START_TEST(bos_rows_hold_the_same_words) {
    Group g;
    make(&g, "S3");
    enum { B = 4, T = 20 };
    TaskGen plain, bos;
    task_gen_init(&plain, &g, B, T, false, 9), task_gen_init(&bos, &g, B, T, true, 9);
    ck_assert_int_eq(task_gen_row_len(&plain), T);
    ck_assert_int_eq(task_gen_row_len(&bos), T + 1);
    int32_t ip[B * T], lp[B * T], ib[B * (T + 1)], lb[B * (T + 1)];
    for (int batch = 0; batch < 2; batch++) { /* the second batch too: the BOS draws no random number */
        task_gen_next(&plain, ip, lp);
        task_gen_next(&bos, ib, lb);
        for (int b = 0; b < B; b++) {
            ck_assert_int_eq(ib[b * (T + 1)], g.order);
            ck_assert_int_eq(lb[b * (T + 1)], TASK_NO_LABEL);
            ck_assert(!memcmp(ib + b * (T + 1) + 1, ip + b * T, T * sizeof(int32_t)));
            ck_assert(!memcmp(lb + b * (T + 1) + 1, lp + b * T, T * sizeof(int32_t)));
        }
    }
    group_free(&g);
}
END_TEST

START_TEST(generation_is_deterministic) {
    Group g;
    make(&g, "A5");
    enum { B = 8, T = 64, N = B * T };
    TaskGen a, b, c;
    task_gen_init(&a, &g, B, T, false, 42), task_gen_init(&b, &g, B, T, false, 42);
    task_gen_init(&c, &g, B, T, false, 43);
    static int32_t ia[N], la[N], ib[N], lb[N], ic[N], lc[N], first[N];
    task_gen_next(&a, ia, la);
    memcpy(first, ia, sizeof ia);
    task_gen_next(&b, ib, lb);
    task_gen_next(&c, ic, lc);
    ck_assert(!memcmp(ia, ib, sizeof ia) && !memcmp(la, lb, sizeof la));
    ck_assert(memcmp(ia, ic, sizeof ia)); /* another seed, other words */
    task_gen_next(&a, ia, la);
    ck_assert(memcmp(ia, first, sizeof ia)); /* the next batch is new */
    task_gen_reset(&a);
    task_gen_next(&a, ia, la);
    ck_assert(!memcmp(ia, first, sizeof ia)); /* reset: the first batch again */
    /* roughly uniform over the 60 elements: 40 batches, about 341 draws per element */
    static int counts[60];
    for (int r = 0; r < 40; r++) {
        task_gen_next(&a, ia, la);
        for (int i = 0; i < N; i++) counts[ia[i]]++;
    }
    for (int e = 0; e < 60; e++) ck_assert_msg(counts[e] > 250 && counts[e] < 440, "element %d drawn %d times", e, counts[e]);
    group_free(&g);
}
END_TEST

/* ---- the metric --------------------------------------------------------------------------------- */

START_TEST(metric_hand_case) {
    TaskMetric m;
    task_metric_init(&m, 4);
    const int32_t lab[3 * 4] = {1, 2, 3, 4, /**/ 1, 2, 3, 4, /**/ 1, 2, 3, 4};
    const int32_t pred[3 * 4] = {1, 2, 3, 4,  /* all right */
                                 1, 2, 0, 4,  /* first error at t = 2 (L = 3 fails) */
                                 0, 2, 3, 4}; /* first error at t = 0 */
    task_metric_add(&m, pred, lab, 2);
    task_metric_add(&m, pred + 8, lab + 8, 1); /* batches accumulate */
    ck_assert_int_eq(m.n_seqs, 3);
    const double want[4] = {2.0 / 3, 2.0 / 3, 1.0 / 3, 1.0 / 3};
    for (int L = 1; L <= 4; L++) ck_assert_double_eq_tol(task_metric_prefix_acc(&m, L), want[L - 1], 1e-12);
    const double pos[4] = {2.0 / 3, 1, 2.0 / 3, 1};
    for (int t = 0; t < 4; t++) ck_assert_double_eq_tol(task_metric_position_acc(&m, t), pos[t], 1e-12);
    ck_assert_int_eq(task_metric_length_at(&m, 0.9), 0);
    ck_assert_int_eq(task_metric_length_at(&m, 0.5), 2);
    ck_assert_int_eq(task_metric_length_at(&m, 0.3), 4);
    task_metric_free(&m);
}
END_TEST

/* ---- split mode's frozen identity mask ---------------------------------------------------------- */

START_TEST(frozen_identity_mask) {
    ModelConfig c;
    ck_assert(model_config_preset(&c, "tiny"));
    char err[256];
    ck_assert(model_config_set_kv(&c, "mode=split", err, sizeof err));
    ck_assert(model_config_set_kv(&c, "num_householder=2", err, sizeof err));
    ck_assert(model_config_set_kv(&c, "num_hidden_layers=1", err, sizeof err));
    ModelConfig frozen = c;
    ck_assert(model_config_set_kv(&frozen, "split_mask_trainable=false", err, sizeof err));
    ck_assert_int_eq(model_config_param_count(&c) - model_config_param_count(&frozen), c.num_heads * 2 * 2);
    char text[8192];
    ck_assert(model_config_to_text(&frozen, text, sizeof text) > 0);
    ck_assert(strstr(text, "split_mask_trainable = false"));

    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    ParamStore ps;
    Model m;
    model_create(&m, &frozen, ctx, &ps, 3);
    ck_assert_int_eq(params_count(&ps), model_config_param_count(&frozen));
    ck_assert_ptr_null(params_find(&ps, "model.layers.0.attn.mask"));
    Tensor *mask = m.blocks[0].attn.mask;
    ck_assert_ptr_nonnull(mask);
    ck_assert(!mask->requires_grad && !mask->is_param);
    /* a training step's backward runs and leaves the mask the identity */
    int32_t ids[2 * 8], tg[2 * 8];
    for (int i = 0; i < 16; i++) ids[i] = (i * 37) % 256, tg[i] = (i * 11) % 256;
    params_zero_grad(&ps);
    tape_backward(ctx, model_loss_host(&m, ids, tg, 2, 8));
    ctx_step_reset(ctx);
    for (int64_t i = 0; i < mask->numel; i++) {
        int64_t w = i % 4;
        ck_assert_double_eq(tensor_get_host(mask, i), w / 2 == w % 2 ? 1.0 : 0.0);
    }
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);

    ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    model_create(&m, &c, ctx, &ps, 3);
    ck_assert_ptr_nonnull(params_find(&ps, "model.layers.0.attn.mask")); /* learned: a parameter */
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
}
END_TEST

/* ---- the pipeline on the CPU -------------------------------------------------------------------- */

static char tmp_dir[256];
static void make_tmp(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "%s/gdp_test_tasks_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
}
static void remove_tmp(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_dir);
}

/* A tiny one-layer model: hidden 32, 2 heads x 16, MLP 64; running parity on length 128. */
static TasksOptions tiny_parity(const char *out, bool neg) {
    TasksOptions o = tasks_default_options();
    o.group = "parity";
    o.n_h = 1;
    o.neg_eigval = neg;
    o.hidden = 32, o.heads = 2, o.head_dim = 16;
    o.sets[o.n_sets++] = "intermediate_size=64";
    o.train_len = 128, o.test_len = 192;
    o.steps = 150, o.batch = 16, o.lr = 3e-3;
    o.test_seqs = 64;
    o.out = out;
    o.quiet = true;
    return o;
}

static int count_rows(const char *path, double *acc, int max) {
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s is missing", path);
    char line[256];
    int n = 0;
    ck_assert(fgets(line, sizeof line, f) && !strncmp(line, "length\taccuracy", 15));
    while (fgets(line, sizeof line, f)) {
        int L;
        double a, p;
        ck_assert_int_eq(sscanf(line, "%d\t%lf\t%lf", &L, &a, &p), 3);
        ck_assert_int_eq(L, n + 1);
        if (n < max) acc[n] = a;
        n++;
    }
    fclose(f);
    return n;
}

START_TEST(parity_is_learnt_with_negative_eigenvalues) {
    make_tmp();
    char out[300], path[400];
    snprintf(out, sizeof out, "%s/neg", tmp_dir);
    TasksOptions o = tiny_parity(out, true);
    TasksResult r;
    tasks_run(&o, &r);
    printf("parity, beta in (0,2): loss %.4f, acc@128 %.3f, acc@192 %.3f, per-position %.3f, L90 %d\n", r.last_loss,
           r.acc_train_len, r.acc_test_len, r.token_acc, r.len_90);
    /* chance: 0.5 per position, 2^-128 for a whole word */
    ck_assert_msg(r.acc_train_len >= 0.9, "accuracy at length 128 is %.3f: parity was not learnt", r.acc_train_len);
    ck_assert_msg(r.token_acc >= 0.9, "per-position accuracy %.3f", r.token_acc);
    ck_assert_int_ge(r.len_90, 128);
    /* the files of a run */
    snprintf(path, sizeof path, "%s/accuracy.tsv", out);
    double acc[192];
    ck_assert_int_eq(count_rows(path, acc, 192), 192);
    for (int L = 1; L < 192; L++) ck_assert(acc[L] <= acc[L - 1] + 1e-12); /* a prefix metric never rises */
    ck_assert_double_eq_tol(acc[127], r.acc_train_len, 1e-6);
    struct stat st;
    char png[400], svg[400];
    snprintf(png, sizeof png, "%s/accuracy.png", out);
    snprintf(svg, sizeof svg, "%s/accuracy.svg", out);
    ck_assert_msg(stat(png, &st) == 0 || stat(svg, &st) == 0, "no accuracy plot in %s", out);
    snprintf(path, sizeof path, "%s/result.txt", out);
    ck_assert(stat(path, &st) == 0 && st.st_size > 0);
    remove_tmp();
}
END_TEST

START_TEST(parity_is_not_learnt_with_positive_eigenvalues) {
    make_tmp();
    char out[300];
    snprintf(out, sizeof out, "%s/pos", tmp_dir);
    TasksOptions o = tiny_parity(out, false);
    TasksResult r;
    tasks_run(&o, &r);
    printf("parity, beta in (0,1): loss %.4f, acc@128 %.3f, per-position %.3f, L90 %d\n", r.last_loss, r.acc_train_len,
           r.token_acc, r.len_90);
    ck_assert_msg(r.acc_train_len < 0.5, "accuracy %.3f at length 128 without negative eigenvalues contradicts the theory",
                  r.acc_train_len);
    remove_tmp();
}
END_TEST

/* With a BOS token the model reads one more position, which has no label: parity is still learnt
 * and the metric counts the words' positions only (counting the BOS would make every word wrong). */
START_TEST(parity_is_learnt_after_a_bos_token) {
    make_tmp();
    char out[300], path[400];
    snprintf(out, sizeof out, "%s/bos", tmp_dir);
    TasksOptions o = tiny_parity(out, true);
    o.bos = true;
    TasksResult r;
    tasks_run(&o, &r);
    printf("parity after a BOS, beta in (0,2): loss %.4f, acc@128 %.3f, per-position %.3f, L90 %d\n", r.last_loss,
           r.acc_train_len, r.token_acc, r.len_90);
    ck_assert_msg(r.acc_train_len >= 0.9, "accuracy at length 128 is %.3f: parity was not learnt", r.acc_train_len);
    ck_assert_str_eq(r.label, "Z2 householder n_h=1 beta(0,2) BOS");
    double acc[192];
    snprintf(path, sizeof path, "%s/accuracy.tsv", out);
    ck_assert_int_eq(count_rows(path, acc, 192), 192); /* the words' 192 positions, not 193 */
    remove_tmp();
}
END_TEST

/* Split mode with the frozen mask through the whole pipeline, evaluation included. */
START_TEST(split_identity_mask_pipeline) {
    make_tmp();
    char out[300];
    snprintf(out, sizeof out, "%s/split", tmp_dir);
    TasksOptions o = tiny_parity(out, true);
    o.group = "S3";
    o.mode = GDP_MODE_SPLIT, o.n_h = 2, o.mask_learned = false;
    o.train_len = 16, o.test_len = 24, o.steps = 4, o.test_seqs = 8, o.eval_every = 2, o.eval_seqs = 8;
    TasksResult r;
    tasks_run(&o, &r);
    ck_assert_int_eq(r.steps_done, 4);
    ck_assert(r.token_acc >= 0 && r.token_acc <= 1);
    ck_assert_str_eq(r.label, "S3 split r=2 identity mask beta(0,2)");
    remove_tmp();
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("tasks");
    TCase *tc = tcase_create("tasks");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, group_orders_and_axioms);
    tcase_add_test(tc, alternating_groups_are_even_and_s3_is_not_abelian);
    tcase_add_test(tc, product_convention);
    tcase_add_test(tc, unknown_groups_are_refused);
    tcase_add_test(tc, labels_are_running_products);
    tcase_add_test(tc, generation_is_deterministic);
    tcase_add_test(tc, bos_rows_hold_the_same_words);
    tcase_add_test(tc, metric_hand_case);
    tcase_add_test(tc, frozen_identity_mask);
    tcase_add_test(tc, parity_is_learnt_with_negative_eigenvalues);
    tcase_add_test(tc, parity_is_not_learnt_with_positive_eigenvalues);
    tcase_add_test(tc, parity_is_learnt_after_a_bos_token);
    tcase_add_test(tc, split_identity_mask_pipeline);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
