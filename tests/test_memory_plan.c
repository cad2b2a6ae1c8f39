/* Memory planning on the CPU: every preset and recompute mode planned within 10% above the step's
 * measured high water (the sequence measured directly, and extended from shorter probes), the
 * parameter arena exact, and a run that cannot fit stopped with what it needs and what to change. */
#include "tests/check_main.h"
#include "tests/support/memory_plan_cases.h"

/* Small and base keep their widths with 2 layers and a vocabulary of 4096 (every layer plans alike;
 * the head is a matrix like any other), so that the suite stays in seconds on two cores. A probe period of 16 makes a sequence of 96 an
 * extended plan (probes at 16, 32 and 48). */
static const PlanCase cases[] = {
    {"tiny", {NULL}, 2, 40, false, false, NULL, false, false, 0, false}, /* measured directly */
    {"tiny", {NULL}, 2, 96, false, false, NULL, false, false, 16, false},
    {"tiny", {NULL}, 2, 96, true, false, NULL, false, false, 16, false},
    {"tiny", {NULL}, 2, 96, false, true, NULL, false, false, 16, false},
    {"tiny", {NULL}, 3, 100, false, true, NULL, false, false, 16, false}, /* 100 = 4 + 6 x 16 */
    {"tiny", {NULL}, 2, 320, false, false, NULL, false, false, 0, false}, /* the default period */
    /* 3 slots: chunks of 21 tokens, the default period 63 (probes at 111, 174, 237) */
    {"tiny", {"mode=split", "num_householder=3", "head_dim=48"}, 2, 300, false, false, NULL, false, false, 0, false},
    {"tiny", {"mode=split", "split_mask_trainable=false"}, 2, 96, false, false, NULL, false, false, 16, false},
    {"tiny", {"mode=split", "num_householder=4"}, 2, 96, true, false, NULL, false, false, 16, false},
    {"tiny", {"num_labels=4", "tie_word_embeddings=false"}, 2, 96, false, false, NULL, false, false, 16, false}, /* the tasks' classifier */
    {"tiny", {NULL}, 2, 96, false, false, NULL, false, false, 16, true},              /* gdp eval */
    {"small", {"num_hidden_layers=2", "vocab_size=4096"}, 1, 96, false, false, NULL, false, false, 16, false},
    {"small", {"num_hidden_layers=2", "vocab_size=4096"}, 1, 96, true, false, NULL, false, false, 16, false},
    {"small", {"num_hidden_layers=2", "vocab_size=4096"}, 1, 96, false, true, NULL, false, false, 16, false},
    {"base", {"num_hidden_layers=2", "vocab_size=4096"}, 1, 96, false, false, NULL, false, false, 16, false},
    {"base", {"num_hidden_layers=2", "vocab_size=4096"}, 1, 96, true, false, NULL, false, false, 16, false},
    {"base", {"num_hidden_layers=2", "vocab_size=4096"}, 1, 96, false, true, NULL, false, false, 16, false},
};

START_TEST(plan_holds_the_step_within_10_percent) {
    const PlanCase *c = &cases[_i];
    PlanResult r;
    plan_case_run(DEV_CPU, c, &r);
    char name[256], why[256];
    plan_case_name(c, name, sizeof name);
    printf("%-48s probes %d: acts %zu/%zu grads %zu/%zu scratch %zu/%zu persist %zu\n", name, r.plan.n_probes,
           r.cap[0], r.hw[0], r.cap[1], r.hw[1], r.cap[2], r.hw[2], r.plan.persist);
    ck_assert_msg(plan_case_ok(&r, why, sizeof why), "%s: %s", name, why);
    const int64_t P = r.plan.probe_period;
    if (c->probe_period) ck_assert_int_eq(P, c->probe_period);
    ck_assert_int_eq(r.plan.n_probes, c->seq > c->seq % P + 3 * P ? 3 : 1);
}
END_TEST

/* The default period keeps the GDP op's chunks whole: floor(64 / n) tokens each. */
START_TEST(probe_period_holds_whole_chunks) {
    static const int slots[7] = {1, 2, 3, 4, 5, 7, 8}, want[7] = {64, 64, 63, 64, 60, 63, 64};
    for (int i = 0; i < 7; i++) {
        ModelConfig cfg;
        ck_assert(model_config_preset(&cfg, "tiny")); /* only the slot count matters */
        cfg.num_householder = slots[i];
        ck_assert_int_eq(memory_probe_period(&cfg), want[i]);
        ck_assert_int_eq(memory_probe_period(&cfg) % gdp_chunk_tokens(slots[i]), 0);
    }
}
END_TEST

/* The message names every arena and the changes that make the run fit. */
START_TEST(a_run_that_cannot_fit_says_what_to_change) {
    MemorySpec s = memory_spec_default(DEV_CUDA, 8, 2048);
    s.optimizer = true;
    MemoryPlan p = {0};
    const size_t G = (size_t)1 << 30;
    p.persist = 2 * G + G / 2, p.acts_cap = 60 * G, p.grads_cap = 8 * G, p.scratch_cap = 2 * G;
    char msg[2048];
    ck_assert(memory_plan_fits(&p, &s, 80 * G, msg, sizeof msg));
    ck_assert(!memory_plan_fits(&p, &s, 40 * G, msg, sizeof msg));
    printf("%s\n", msg);
    ck_assert_msg(strstr(msg, "72.50 GiB of GPU memory and 40.00 GiB") && strstr(msg, "acts) 60.00 GiB") &&
                      strstr(msg, "grads) 8.00 GiB") && strstr(msg, "scratch 2.00 GiB") && strstr(msg, "2.50 GiB"),
                  "the sizes: %s", msg);
    ck_assert_msg(strstr(msg, "--batch 4 (and a larger --grad-accum") && strstr(msg, "--selective-recompute") &&
                      strstr(msg, "--recompute"), "the changes: %s", msg);
    s.selective_recompute = true;
    ck_assert(!memory_plan_fits(&p, &s, 40 * G, msg, sizeof msg));
    ck_assert_msg(strstr(msg, "with --selective-recompute. To fit") && !strstr(msg, "or --selective") &&
                      strstr(msg, "--recompute (each"), "under selective recomputation: %s", msg);
    ck_assert(!memory_plan_fits(&p, &s, 2 * G, msg, sizeof msg));
    ck_assert_msg(strstr(msg, "alone do not fit") && strstr(msg, "--zero 1"), "parameters too large: %s", msg);
    ck_assert(!memory_plan_fits(&p, &s, 3 * G, msg, sizeof msg));
    ck_assert_msg(strstr(msg, "a shorter --seq"), "not even batch 1: %s", msg);
    MemoryPlan params_only = {.persist = p.persist};
    ck_assert(!memory_plan_fits(&params_only, &s, 2 * G, msg, sizeof msg));
    ck_assert_msg(strstr(msg, "optimizer state need 2.50 GiB of GPU memory and 2.00 GiB") && !strstr(msg, "acts"),
                  "before the step is planned: %s", msg);
}
END_TEST

/* A limit below the plan stops the run before the step arenas are allocated (exit 1, the message). */
START_TEST(a_limit_below_the_plan_stops_the_run) {
    PlanCase c = {"tiny", {NULL}, 4, 128, false, false, NULL, false, false, 0, false};
    TrainOptions o = train_default_options();
    o.batch = c.batch, o.seq = c.seq;
    o.mem_limit_mb = 4; /* the parameters and optimizer take 1.9 MiB, the step's arenas 6.5 */
    ModelConfig cfg;
    bool vg;
    char err[256];
    ck_assert(train_resolve_config(&o, &cfg, &vg, err, sizeof err));
    MemorySpec spec = train_memory_spec(&o, DEV_CPU, NULL);
    Model m;
    ParamStore ps;
    MemoryPlan plan;
    memory_plan_create(&cfg, &spec, 1, &m, &ps, &plan);
}
END_TEST

/* The plan does not change what training computes: two runs' losses are the same bits whether the
 * arenas are planned or given by size. */
static void tokens(void *u, int32_t *in, int32_t *tg) {
    Rng *rng = (Rng *)u;
    for (int i = 0; i < 2 * 64; i++) in[i] = (int32_t)rng_below(rng, 256), tg[i] = (int32_t)rng_below(rng, 256);
}

START_TEST(planned_arenas_train_the_same_bits) {
    TrainResult r[2];
    for (int k = 0; k < 2; k++) {
        Rng rng;
        rng_seed(&rng, 3);
        TrainData d = {&rng, tokens, NULL, NULL, NULL};
        TrainOptions o = train_default_options();
        o.train_data = &d;
        o.batch = 2, o.seq = 64, o.steps = 4, o.quiet = true, o.eval_every = 0;
        if (k) o.act_mem_mb = 64, o.grad_mem_mb = 64, o.scratch_mem_mb = 16, o.persist_mem_mb = 64;
        Dist dist;
        dist_init_single(&dist);
        train_run(&o, &dist, &r[k]);
    }
    ck_assert_double_eq(r[0].first_loss, r[1].first_loss);
    ck_assert_double_eq(r[0].last_loss, r[1].last_loss);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("memory_plan");
    TCase *tc = tcase_create("plan");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, plan_holds_the_step_within_10_percent, 0, (int)GDP_ARRAY_LEN(cases));
    tcase_add_test(tc, probe_period_holds_whole_chunks);
    tcase_add_test(tc, a_run_that_cannot_fit_says_what_to_change);
    tcase_add_exit_test(tc, a_limit_below_the_plan_stops_the_run, 1);
    tcase_add_test(tc, planned_arenas_train_the_same_bits);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
