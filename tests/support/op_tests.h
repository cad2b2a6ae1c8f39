/* Helpers of the hand-written op tests (tests/test_ops_a.c, tests/test_ops_b.c): inputs from
 * literals, exact-value expectations, and gradient checks of cases that are not registered. */
#pragma once
#include <math.h>

#include "core/gradcheck.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "tests/check_main.h"

static inline Ctx *cpu(void) { return ctx_create(DEV_CPU, ctx_default_sizes()); }

static inline Tensor *from(Ctx *ctx, DType dt, int ndim, const int64_t *shape, const double *v, bool grad) {
    Tensor *t = tensor_from_doubles(ctx, LIFE_ACT, dt, ndim, shape, v);
    t->requires_grad = grad;
    return t;
}

/* Every entry within tol relative to max(1, |want|), and none NaN. */
static inline void expect_values(const Tensor *t, const double *want, int64_t n, double tol) {
    ck_assert_int_eq(t->numel, n);
    double *got = (double *)xmalloc((size_t)n * sizeof(double));
    tensor_to_doubles(t, got);
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= tol * GDP_MAX(1.0, fabs(want[i])) && !isnan(got[i]),
                      "entry %lld: got %.15g, want %.15g", (long long)i, got[i], want[i]);
    free(got);
}

/* Finite differences over every entry of every leaf, two seeds, f64. */
static inline void expect_gradcheck(GradcheckCaseFn fn, void *user, double bound) {
    for (uint64_t seed = 1; seed <= 2; seed++) {
        GradcheckResult r = gradcheck_fd(fn, user, seed, 0);
        ck_assert_msg(r.n_leaves > 0, "the case has no leaf");
        for (int k = 0; k < r.n_leaves; k++)
            ck_assert_msg(r.leaves[k].rel_err <= bound, "seed %llu leaf %s: rel err %.3e > %.0e",
                          (unsigned long long)seed, r.leaves[k].label, r.leaves[k].rel_err, bound);
    }
}

/* The f32 CPU kernels against the f64 ones: forward and every gradient. */
static inline void expect_f32_matches_f64(GradcheckCaseFn fn) {
    GradcheckResult r = gradcheck_vs_cpu(fn, NULL, 3, DEV_CPU, GDP_F32);
    ck_assert_msg(r.out_rel_err <= 1e-5, "f32 forward rel err %.3e", r.out_rel_err);
    for (int k = 0; k < r.n_leaves; k++)
        ck_assert_msg(r.leaves[k].rel_err <= 1e-5, "f32 leaf %s: rel err %.3e", r.leaves[k].label, r.leaves[k].rel_err);
}
