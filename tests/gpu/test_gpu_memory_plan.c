/* Memory planning on CUDA: every preset under every precision (f32, bf16 autocast with bf16 or f32
 * activations, the latter with and without the GEMM operand copies) and recompute mode planned
 * within 10% above the step's measured high water (acts, grads, scratch: the GDP op's saved buffer
 * and workspace, the bf16 copies), the parameter arena exact. A sequence of 1000 is extended from
 * probes at 104, 168 and 232 tokens; with 3 slices, whose chunks hold 21 tokens, from probes 63
 * tokens apart (memory_probe_period), at 145, 208 and 271. */
#include "tests/gpu/gpu_test.h"
#include "tests/support/memory_plan_cases.h"

static void check_case(int *failures, const PlanCase *c) {
    PlanResult r;
    plan_case_run(DEV_CUDA, c, &r);
    char name[256], why[256];
    plan_case_name(c, name, sizeof name);
    printf("   %-56s probes %d: acts %.1f/%.1f grads %.1f/%.1f scratch %.1f/%.1f MiB (planned/used)\n", name,
           r.plan.n_probes, r.cap[0] / 1048576.0, r.hw[0] / 1048576.0, r.cap[1] / 1048576.0, r.hw[1] / 1048576.0,
           r.cap[2] / 1048576.0, r.hw[2] / 1048576.0);
    GPU_EXPECT(plan_case_ok(&r, why, sizeof why), "%s: %s", name, why);
}

GPU_TEST(every_preset_precision_and_recompute_mode) {
    static const char *presets[3] = {"tiny", "small", "base"};
    for (int p = 0; p < 3; p++)
        for (int prec = 0; prec < 4; prec++)
            for (int rc = 0; rc < 3; rc++) {
                PlanCase c = {presets[p], {NULL}, 2, 1000, rc == 1, rc == 2, prec ? "bf16" : "off", prec >= 2,
                              prec == 3, 0, false};
                check_case(failures, &c);
            }
}

GPU_TEST(split_mode_and_eval_plans) {
    const PlanCase cases[] = {
        {"tiny", {"mode=split", "num_householder=3", "head_dim=48"}, 2, 1000, false, false, "bf16", false, false, 0, false},
        {"tiny", {"mode=split", "num_householder=3", "head_dim=48"}, 2, 1000, false, true, "off", false, false, 0, false},
        {"small", {"num_householder=3"}, 2, 777, false, false, NULL, false, false, 0, false},
        {"small", {NULL}, 4, 200, false, false, NULL, false, false, 0, false}, /* measured directly */
        {"base", {NULL}, 2, 1000, false, false, NULL, false, false, 0, true},   /* gdp eval */
        {"tiny", {"num_labels=4", "tie_word_embeddings=false"}, 4, 512, false, false, NULL, false, false, 0, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(failures, &cases[i]);
}

/* The run that did not start on an 80 GB card with the earlier estimate: base, vocabulary 32000,
 * batch 8 x 2048 under the default bf16 autocast (measured then: acts 14.2 GB, grads 0.84 GB,
 * scratch 0.30 GB). */
GPU_TEST(base_batch_8_seq_2048_fits_an_80_gb_card) {
    PlanCase c = {"base", {"vocab_size=32000"}, 8, 2048, false, false, NULL, false, false, 0, false};
    PlanResult r;
    plan_case_run(DEV_CUDA, &c, &r);
    char why[256];
    const double need = (double)(r.plan.persist + r.cap[0] + r.cap[1] + r.cap[2]) / 1073741824.0;
    printf("   planned %.2f GiB: persist %.2f, acts %.2f, grads %.2f, scratch %.2f GiB\n", need,
           r.plan.persist / 1073741824.0, r.cap[0] / 1073741824.0, r.cap[1] / 1073741824.0, r.cap[2] / 1073741824.0);
    GPU_EXPECT(plan_case_ok(&r, why, sizeof why), "%s", why);
    GPU_EXPECT(need < 30, "base at 8 x 2048 planned at %.2f GiB", need);
}

int main(int argc, char **argv) { return gpu_test_run(argc, argv); }
