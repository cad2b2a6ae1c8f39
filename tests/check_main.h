/* Each tests/test_*.c is its own Check program: it defines make_suite() and ends with
 * GDP_TEST_MAIN(make_suite). Check forks a child per test (never touch CUDA in the parent). */
#pragma once
#include <check.h>
#include <stdlib.h>

#define GDP_TEST_MAIN(make_suite_fn)                                     \
    int main(void) {                                                     \
        SRunner *sr = srunner_create(make_suite_fn());                   \
        srunner_run_all(sr, CK_NORMAL);                                  \
        int failed = srunner_ntests_failed(sr);                          \
        srunner_free(sr);                                                \
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;                     \
    }

/* Asserts the relative L2 error of two double arrays is at most tol, printing it on failure. */
#define ck_assert_rel_l2(a, b, n, tol)                                                          \
    do {                                                                                        \
        double e_ = rel_l2((a), (b), (n));                                                      \
        ck_assert_msg(e_ <= (tol), "relative L2 error %.3e exceeds %.1e (%s vs %s)", e_, (double)(tol), #a, #b); \
    } while (0)
