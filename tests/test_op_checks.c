/* Every registered op's generated checks on the CPU (tests/support/op_checks.h): argument errors,
 * one test per op input and bad-input kind, and gradients against float64 finite differences. */
#include "tests/check_main.h"
#include "tests/support/op_checks.h"

#define MAX_ARG_CHECKS 1024
static OpArgCheck arg_checks[MAX_ARG_CHECKS];
static int n_arg_checks;

START_TEST(registered_op_argument_error) {
    char why[1024];
    ck_assert_msg(op_arg_check_run(&arg_checks[_i], _i, DEV_CPU, NULL, why, sizeof why), "%s", why);
}
END_TEST

/* Every entry of every leaf on seeds 1-3 and 7. */
START_TEST(registered_op_gradcheck) {
    const OpDef *def = gdp_op_registry[_i];
    if (!gradcheck_has_case(def)) return;
    char why[512];
    const uint64_t seeds[] = {1, 2, 3, 7};
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) ck_assert_msg(op_grad_check_fd(def, seeds[s], why, sizeof why), "%s", why);
}
END_TEST

/* The f32 CPU kernels against the f64 ones on every registered case. */
START_TEST(registered_op_f32_matches_f64) {
    const OpDef *def = gdp_op_registry[_i];
    if (!gradcheck_has_case(def)) return;
    char why[512];
    ck_assert_msg(op_grad_check_vs_cpu(def, 3, DEV_CPU, GDP_F32, why, sizeof why), "%s", why);
}
END_TEST

START_TEST(every_registered_op_has_argument_checks) {
    for (int i = 0; i < gdp_op_registry_len; i++) {
        const OpDef *def = gdp_op_registry[i];
        if (!def->gradcheck_case) continue;
        int n = 0;
        for (int k = 0; k < n_arg_checks; k++) n += arg_checks[k].def == def && !arg_checks[k].legal;
        ck_assert_msg(n >= 1, "op %s: no argument check was generated from its case", def->name);
    }
}
END_TEST

static Suite *make_suite(void) {
    n_arg_checks = op_arg_checks(arg_checks, MAX_ARG_CHECKS);
    if (n_arg_checks > MAX_ARG_CHECKS) {
        fprintf(stderr, "%d argument checks, raise MAX_ARG_CHECKS\n", n_arg_checks);
        exit(1);
    }
    Suite *s = suite_create("op_checks");
    TCase *tc = tcase_create("op_checks");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_registered_op_has_argument_checks);
    tcase_add_loop_test(tc, registered_op_argument_error, 0, n_arg_checks);
    tcase_add_loop_test(tc, registered_op_gradcheck, 0, gdp_op_registry_len);
    tcase_add_loop_test(tc, registered_op_f32_matches_f64, 0, gdp_op_registry_len);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
