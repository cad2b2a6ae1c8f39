/* Ops silu, sigmoid, softplus, exp, rmsnorm, l2norm, conv1d_causal and the fused gated_rmsnorm, swiglu
 * and conv1d_causal_silu (also over packed documents) on the CPU: forward on hand cases, backward against finite differences
 * (gradcheck_fd), the set-or-accumulate rule (fan-out and aliased inputs), the f32 path against f64,
 * and argument errors (each exits 1 with a message). */
#include <math.h>

#include "core/gradcheck.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "core/ops_fused.h"
#include "kernels/conv1d_causal.h"
#include "tests/check_main.h"
#include "tests/support/op_tests.h"

/* ---- pointwise ------------------------------------------------------------------------------ */
START_TEST(pointwise_forward_hand_cases) {
    Ctx *ctx = cpu();
    for (int k = 0; k < 2; k++) {
        DType dt = k ? GDP_F32 : GDP_F64;
        double tol = k ? 1e-6 : 1e-14;
        Tensor *x = from(ctx, dt, SHAPE(5), (double[]){0, 1, -1, 20, -20}, false);
        expect_values(op_silu(ctx, x),
                      (double[]){0, 0.7310585786300049, -0.2689414213699951, 19.999999958776925, -4.1223072363804067e-08},
                      5, tol);
        /* far outside exp's range: no overflow, no NaN */
        Tensor *s = from(ctx, dt, SHAPE(5), (double[]){0, 2, -2, 80, -80}, false);
        expect_values(op_sigmoid(ctx, s), (double[]){0.5, 0.8807970779778823, 0.11920292202211755, 1, 0}, 5, tol);
        Tensor *p = from(ctx, dt, SHAPE(6), (double[]){0, 1, -1, 200, -200, -30}, false);
        expect_values(op_softplus(ctx, p),
                      (double[]){0.6931471805599453, 1.3132616875182228, 0.31326168751822286, 200, 0,
                                 9.357622968839737e-14},
                      6, tol);
        Tensor *e = from(ctx, dt, SHAPE(2, 2), (double[]){0, 1, -1, 2}, false);
        Tensor *y = op_exp(ctx, e);
        ck_assert_int_eq(y->ndim, 2);
        expect_values(y, (double[]){1, 2.718281828459045, 0.36787944117144233, 7.38905609893065}, 4, tol);
    }
    ctx_destroy(ctx);
}
END_TEST

START_TEST(pointwise_backward_hand_cases) {
    Ctx *ctx = cpu();
    Tensor *x = from(ctx, GDP_F64, SHAPE(2), (double[]){0, 1}, true);
    Tensor *dy = from(ctx, GDP_F64, SHAPE(2), (double[]){2, 1}, false);
    tape_backward_seeded(ctx, op_silu(ctx, x), dy);
    /* silu'(0) = 1/2; silu'(1) = s(1 + 1 - s), s = sigmoid(1) */
    double s1 = 0.7310585786300049;
    expect_values(x->grad, (double[]){1, s1 * (2 - s1)}, 2, 1e-14);
    ctx_step_reset(ctx);
    x = from(ctx, GDP_F64, SHAPE(2), (double[]){0, 1}, true);
    tape_backward_seeded(ctx, op_sigmoid(ctx, x), from(ctx, GDP_F64, SHAPE(2), (double[]){4, 1}, false));
    expect_values(x->grad, (double[]){1, s1 * (1 - s1)}, 2, 1e-14);
    ctx_step_reset(ctx);
    x = from(ctx, GDP_F64, SHAPE(2), (double[]){0, 1}, true);
    tape_backward_seeded(ctx, op_softplus(ctx, x), from(ctx, GDP_F64, SHAPE(2), (double[]){2, 1}, false));
    expect_values(x->grad, (double[]){1, s1}, 2, 1e-14);
    ctx_step_reset(ctx);
    x = from(ctx, GDP_F64, SHAPE(2), (double[]){0, 1}, true);
    tape_backward_seeded(ctx, op_exp(ctx, x), from(ctx, GDP_F64, SHAPE(2), (double[]){3, 1}, false));
    expect_values(x->grad, (double[]){3, 2.718281828459045}, 2, 1e-14);
    ctx_destroy(ctx);
}
END_TEST

/* y = f(x) + x: add's backward sets dx, f's backward must accumulate into it. */
#define FAN_OUT_CASE(NAME, OP, LO, HI)                                                  \
    static Tensor *NAME(Ctx *ctx, DType dt, uint64_t seed, void *user) {               \
        Tensor *x = gc_random(ctx, dt, &seed, LO, HI, SHAPE(4, 9));                     \
        return op_add(ctx, OP(ctx, x), x);                                              \
    }
FAN_OUT_CASE(silu_fan_case, op_silu, -5, 5)
FAN_OUT_CASE(sigmoid_fan_case, op_sigmoid, -5, 5)
FAN_OUT_CASE(softplus_fan_case, op_softplus, -4, 4)
FAN_OUT_CASE(exp_fan_case, op_exp, -2, 2)

START_TEST(pointwise_gradcheck) {
    expect_gradcheck(silu_fan_case, NULL, 1e-6);
    expect_gradcheck(sigmoid_fan_case, NULL, 1e-6);
    expect_gradcheck(softplus_fan_case, NULL, 1e-6);
    expect_gradcheck(exp_fan_case, NULL, 1e-6);
    expect_f32_matches_f64(silu_fan_case);
    expect_f32_matches_f64(softplus_fan_case);
    expect_f32_matches_f64(exp_fan_case);
}
END_TEST

/* ---- rmsnorm -------------------------------------------------------------------------------- */
START_TEST(rmsnorm_forward_hand_case) {
    Ctx *ctx = cpu();
    Tensor *x = from(ctx, GDP_F64, SHAPE(2, 2), (double[]){3, 4, 1, 1}, false);
    Tensor *w = from(ctx, GDP_F64, SHAPE(2), (double[]){2, 0.5}, false);
    /* row 0: mean(x^2) = 12.5; row 1: mean = 1 */
    expect_values(op_rmsnorm(ctx, x, NULL, 0), (double[]){0.848528137423857, 1.131370849898476, 1, 1}, 4, 1e-14);
    expect_values(op_rmsnorm(ctx, x, w, 0), (double[]){1.697056274847714, 0.565685424949238, 2, 0.5}, 4, 1e-14);
    /* eps = 1 on a zero row: zeros, not NaN */
    Tensor *z = from(ctx, GDP_F32, SHAPE(1, 3), (double[]){0, 0, 0}, false);
    expect_values(op_rmsnorm(ctx, z, NULL, 1), (double[]){0, 0, 0}, 3, 0);
    ctx_destroy(ctx);
}
END_TEST

START_TEST(rmsnorm_backward_hand_case) {
    /* eps = 0: |y|^2 = C for every x, so dy = y (the gradient of |y|^2 / 2) gives dx = 0;
     * dw[c] = sum_rows dy * xhat with dy = xhat gives the column sums of xhat^2. */
    Ctx *ctx = cpu();
    Tensor *x = from(ctx, GDP_F64, SHAPE(2, 2), (double[]){3, 4, 1, 1}, true);
    Tensor *w = from(ctx, GDP_F64, SHAPE(2), (double[]){1, 1}, true);
    Tensor *y = op_rmsnorm(ctx, x, w, 0);
    Tensor *dy = from(ctx, GDP_F64, SHAPE(2, 2), (double[]){0.848528137423857, 1.131370849898476, 1, 1}, false);
    tape_backward_seeded(ctx, y, dy);
    expect_values(x->grad, (double[]){0, 0, 0, 0}, 4, 1e-12);
    expect_values(w->grad, (double[]){0.72 + 1, 1.28 + 1}, 2, 1e-12);
    ctx_destroy(ctx);
}
END_TEST

static Tensor *rmsnorm_w_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 2, 11));
    Tensor *w = gc_random(ctx, dt, &seed, 0.5, 1.5, SHAPE(11));
    return op_rmsnorm(ctx, x, w, 1e-5);
}
static Tensor *rmsnorm_now_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *x = gc_random(ctx, dt, &seed, -2, 2, SHAPE(5, 7));
    return op_rmsnorm(ctx, x, NULL, 1e-3);
}
/* The weight used twice (dw set then accumulated) and x fanned out (dx accumulated). */
static Tensor *rmsnorm_twice_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(4, 6));
    Tensor *w = gc_random(ctx, dt, &seed, 0.5, 1.5, SHAPE(6));
    return op_add(ctx, op_rmsnorm(ctx, op_rmsnorm(ctx, x, w, 1e-5), w, 1e-5), x);
}

START_TEST(rmsnorm_gradcheck) {
    expect_gradcheck(rmsnorm_w_case, NULL, 1e-6);
    expect_gradcheck(rmsnorm_now_case, NULL, 1e-6);
    expect_gradcheck(rmsnorm_twice_case, NULL, 1e-6);
    expect_f32_matches_f64(rmsnorm_w_case);
    expect_f32_matches_f64(rmsnorm_twice_case);
}
END_TEST

/* ---- l2norm --------------------------------------------------------------------------------- */
START_TEST(l2norm_forward_hand_case) {
    Ctx *ctx = cpu();
    Tensor *x = from(ctx, GDP_F64, SHAPE(1, 4), (double[]){3, 4, 0, 5}, false);
    expect_values(op_l2norm(ctx, x, 2, 0), (double[]){0.6, 0.8, 0, 1}, 4, 1e-15);
    expect_values(op_l2norm(ctx, x, 4, 0), (double[]){0.4242640687119285, 0.565685424949238, 0, 0.7071067811865475},
                  4, 1e-15);
    Tensor *x32 = from(ctx, GDP_F32, SHAPE(4), (double[]){3, 4, 0, 5}, false);
    expect_values(op_l2norm(ctx, x32, 2, 0), (double[]){0.6, 0.8, 0, 1}, 4, 1e-7);
    ctx_destroy(ctx);
}
END_TEST

static Tensor *l2norm_head_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 3, 8));
    return op_l2norm(ctx, x, 8, 1e-6);
}
static Tensor *l2norm_slice_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 12));
    return op_add(ctx, op_l2norm(ctx, x, 3, 1e-6), x);
}

START_TEST(l2norm_gradcheck) {
    expect_gradcheck(l2norm_head_case, NULL, 1e-6);
    expect_gradcheck(l2norm_slice_case, NULL, 1e-6);
    expect_f32_matches_f64(l2norm_slice_case);
}
END_TEST

/* ---- conv1d_causal -------------------------------------------------------------------------- */
START_TEST(conv1d_causal_hand_case) {
    Ctx *ctx = cpu();
    /* x [1, 3, 2]: channel 0 = 1, 2, 3; channel 1 = 10, 20, 30. w [2, 2]: c0 (0.5, 1), c1 (1, -1). */
    Tensor *x = from(ctx, GDP_F64, SHAPE(1, 3, 2), (double[]){1, 10, 2, 20, 3, 30}, true);
    Tensor *w = from(ctx, GDP_F64, SHAPE(2, 2), (double[]){0.5, 1, 1, -1}, true);
    Tensor *y = op_conv1d_causal(ctx, x, w);
    expect_values(y, (double[]){1, -10, 2.5, -10, 4, -10}, 6, 0);
    tape_backward_seeded(ctx, y, from(ctx, GDP_F64, SHAPE(1, 3, 2), (double[]){1, 1, 1, 1, 1, 1}, false));
    /* dx[t] = w[., 1] + w[., 0] where t + 1 < T; dw[c, 0] = x[0] + x[1], dw[c, 1] = x[0] + x[1] + x[2] */
    expect_values(x->grad, (double[]){1.5, 0, 1.5, 0, 1, -1}, 6, 0);
    expect_values(w->grad, (double[]){3, 6, 30, 60}, 4, 0);
    ctx_destroy(ctx);
}
END_TEST

static Tensor *conv_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 9, 3));
    Tensor *w = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 4));
    return op_conv1d_causal(ctx, x, w);
}
static Tensor *conv_op(Ctx *ctx, Tensor *x, Tensor *w, bool silu) {
    return silu ? op_conv1d_causal_silu(ctx, x, w) : op_conv1d_causal(ctx, x, w);
}
/* Longer kernel than the sequence, and both gradients accumulated by a second use. */
static Tensor *conv_twice(Ctx *ctx, DType dt, uint64_t seed, bool silu) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 3, 2));
    Tensor *w = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 5));
    return op_add(ctx, conv_op(ctx, conv_op(ctx, x, w, silu), w, silu), x);
}
static Tensor *conv_twice_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    return conv_twice(ctx, dt, seed, false);
}

START_TEST(conv1d_causal_gradcheck) {
    expect_gradcheck(conv_case, NULL, 1e-6);
    expect_gradcheck(conv_twice_case, NULL, 1e-6);
    expect_f32_matches_f64(conv_case);
}
END_TEST

/* The fused op against silu(conv) in two ops, values and both gradients, over several time segments
 * (T = 70 at B = 2: segments of 32 steps, the last one short) with W = 4 and W = 3. */
static void conv_silu_run(bool fused, int64_t W, double *y_out, double *dx_out, double *dw_out) {
    Ctx *ctx = cpu();
    uint64_t seed = 5;
    Tensor *x = gc_random(ctx, GDP_F64, &seed, -2, 2, SHAPE(2, 70, 3));
    Tensor *w = gc_random(ctx, GDP_F64, &seed, -1, 1, SHAPE(3, W));
    Tensor *dy = gc_random(ctx, GDP_F64, &seed, -1, 1, SHAPE(2, 70, 3));
    dy->requires_grad = false;
    Tensor *y = fused ? op_conv1d_causal_silu(ctx, x, w) : op_silu(ctx, op_conv1d_causal(ctx, x, w));
    tape_backward_seeded(ctx, y, dy);
    tensor_to_doubles(y, y_out), tensor_to_doubles(x->grad, dx_out), tensor_to_doubles(w->grad, dw_out);
    ctx_destroy(ctx);
}

START_TEST(conv1d_causal_silu_matches_unfused) {
    double y[420], dx[420], dw[3 * 4], want_y[420], want_dx[420], want_dw[3 * 4];
    for (int64_t W = 3; W <= 4; W++) {
        conv_silu_run(false, W, want_y, want_dx, want_dw);
        conv_silu_run(true, W, y, dx, dw);
        for (int i = 0; i < 420; i++) {
            ck_assert_msg(fabs(y[i] - want_y[i]) <= 1e-14, "W %lld y[%d]: %.17g vs %.17g", (long long)W, i, y[i],
                          want_y[i]);
            ck_assert_msg(fabs(dx[i] - want_dx[i]) <= 1e-14, "W %lld dx[%d]: %.17g vs %.17g", (long long)W, i, dx[i],
                          want_dx[i]);
        }
        for (int i = 0; i < 3 * W; i++)
            ck_assert_msg(fabs(dw[i] - want_dw[i]) <= 1e-13, "W %lld dw[%d]: %.17g vs %.17g", (long long)W, i, dw[i],
                          want_dw[i]);
    }
}
END_TEST

static Tensor *conv_silu_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *x = gc_random(ctx, dt, &seed, -2, 2, SHAPE(2, 41, 3));
    Tensor *w = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 3));
    return op_conv1d_causal_silu(ctx, x, w);
}
static Tensor *conv_silu_twice_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    return conv_twice(ctx, dt, seed, true);
}
/* One gradient alone: the backward skips the other. */
static Tensor *conv_silu_one_grad(Ctx *ctx, DType dt, uint64_t seed, bool want_dx) {
    Tensor *x = gc_random(ctx, dt, &seed, -2, 2, SHAPE(2, 35, 3));
    Tensor *w = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 4));
    (want_dx ? w : x)->requires_grad = false;
    return op_conv1d_causal_silu(ctx, x, w);
}
static Tensor *conv_silu_dw_only_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    return conv_silu_one_grad(ctx, dt, seed, false);
}
static Tensor *conv_silu_dx_only_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    return conv_silu_one_grad(ctx, dt, seed, true);
}

START_TEST(conv1d_causal_silu_gradcheck) {
    expect_gradcheck(conv_silu_case, NULL, 1e-6);
    expect_gradcheck(conv_silu_twice_case, NULL, 1e-6);
    expect_gradcheck(conv_silu_dw_only_case, NULL, 1e-6);
    expect_gradcheck(conv_silu_dx_only_case, NULL, 1e-6);
    expect_f32_matches_f64(conv_silu_case);
}
END_TEST

/* Packed documents: the op with doc_start equals the op run on each document alone (float64), values
 * and both gradients (dw summed over the documents), for W 2, 4, 7 and 8, with and without SiLU, over
 * rows of 70 steps (three time segments) with documents of every length from 1 up, adjacent starts
 * and starts at the segment boundaries. */
#define DOCS_B 2
#define DOCS_T 70
#define DOCS_C 3
static void docs_starts(int32_t *st) {
    uint64_t seed = 99;
    Rng rng;
    rng_seed(&rng, seed);
    for (int i = 0; i < DOCS_B * DOCS_T; i++) st[i] = rng_below(&rng, 5) == 0;
    st[32] = st[33] = 1, st[DOCS_T + 64] = 1, st[DOCS_T + 31] = 1;
}

static void docs_run(bool silu, int64_t W, const int32_t *starts, double *y, double *dx, double *dw) {
    Ctx *ctx = cpu();
    uint64_t seed = 17;
    Tensor *x = gc_random(ctx, GDP_F64, &seed, -2, 2, SHAPE(DOCS_B, DOCS_T, DOCS_C));
    Tensor *w = gc_random(ctx, GDP_F64, &seed, -1, 1, SHAPE(DOCS_C, W));
    Tensor *dy = gc_random(ctx, GDP_F64, &seed, -1, 1, SHAPE(DOCS_B, DOCS_T, DOCS_C));
    dy->requires_grad = false;
    if (starts) {
        Tensor *ds = tensor_from_host(ctx, LIFE_ACT, GDP_I32, SHAPE(DOCS_B, DOCS_T), starts);
        Tensor *out = silu ? op_conv1d_causal_silu_docs(ctx, x, w, ds) : op_conv1d_causal_docs(ctx, x, w, ds);
        tape_backward_seeded(ctx, out, dy);
        tensor_to_doubles(out, y), tensor_to_doubles(x->grad, dx), tensor_to_doubles(w->grad, dw);
        ctx_destroy(ctx);
        return;
    }
    /* each document alone: its own rows of x and dy, a fresh copy of w */
    double xs[DOCS_B * DOCS_T * DOCS_C], dys[DOCS_B * DOCS_T * DOCS_C], ws[DOCS_C * CONV1D_MAX_W];
    tensor_to_doubles(x, xs), tensor_to_doubles(dy, dys), tensor_to_doubles(w, ws);
    int32_t st[DOCS_B * DOCS_T];
    docs_starts(st);
    for (int64_t i = 0; i < DOCS_C * W; i++) dw[i] = 0;
    for (int64_t b = 0; b < DOCS_B; b++)
        for (int64_t s0 = 0, s1; s0 < DOCS_T; s0 = s1) {
            for (s1 = s0 + 1; s1 < DOCS_T && !st[b * DOCS_T + s1]; s1++) {}
            const int64_t n = s1 - s0, off = (b * DOCS_T + s0) * DOCS_C;
            Tensor *xd = from(ctx, GDP_F64, SHAPE(1, n, DOCS_C), xs + off, true);
            Tensor *wd = from(ctx, GDP_F64, SHAPE(DOCS_C, W), ws, true);
            Tensor *out = silu ? op_conv1d_causal_silu(ctx, xd, wd) : op_conv1d_causal(ctx, xd, wd);
            tape_backward_seeded(ctx, out, from(ctx, GDP_F64, SHAPE(1, n, DOCS_C), dys + off, false));
            double wg[DOCS_C * CONV1D_MAX_W];
            tensor_to_doubles(out, y + off), tensor_to_doubles(xd->grad, dx + off), tensor_to_doubles(wd->grad, wg);
            for (int64_t i = 0; i < DOCS_C * W; i++) dw[i] += wg[i];
            ctx_step_reset(ctx);
        }
    ctx_destroy(ctx);
}

START_TEST(conv1d_causal_docs_matches_separate_documents) {
    enum { N = DOCS_B * DOCS_T * DOCS_C };
    int32_t st[DOCS_B * DOCS_T];
    docs_starts(st);
    const int64_t widths[] = {2, 4, 7, 8};
    for (int silu = 0; silu <= 1; silu++)
        for (size_t k = 0; k < GDP_ARRAY_LEN(widths); k++) {
            const int64_t W = widths[k];
            double y[N], dx[N], dw[DOCS_C * CONV1D_MAX_W], ry[N], rdx[N], rdw[DOCS_C * CONV1D_MAX_W];
            docs_run(silu, W, st, y, dx, dw);
            docs_run(silu, W, NULL, ry, rdx, rdw);
            for (int i = 0; i < N; i++) {
                ck_assert_msg(fabs(y[i] - ry[i]) <= 1e-14, "silu %d W %lld y[%d]: %.17g, alone %.17g", silu,
                              (long long)W, i, y[i], ry[i]);
                ck_assert_msg(fabs(dx[i] - rdx[i]) <= 1e-14, "silu %d W %lld dx[%d]: %.17g, alone %.17g", silu,
                              (long long)W, i, dx[i], rdx[i]);
            }
            for (int i = 0; i < DOCS_C * W; i++)
                ck_assert_msg(fabs(dw[i] - rdw[i]) <= 1e-12, "silu %d W %lld dw[%d]: %.17g, alone %.17g", silu,
                              (long long)W, i, dw[i], rdw[i]);
        }
}
END_TEST

/* No start marked: the documents path gives the plain op's bits (f32, where the order shows). */
START_TEST(conv1d_causal_docs_without_starts_is_plain) {
    float r[2][3][DOCS_B * DOCS_T * DOCS_C];
    for (int docs = 0; docs <= 1; docs++) {
        Ctx *ctx = cpu();
        uint64_t seed = 3;
        Tensor *x = gc_random(ctx, GDP_F32, &seed, -2, 2, SHAPE(DOCS_B, DOCS_T, DOCS_C));
        Tensor *w = gc_random(ctx, GDP_F32, &seed, -1, 1, SHAPE(DOCS_C, 4));
        Tensor *dy = gc_random(ctx, GDP_F32, &seed, -1, 1, SHAPE(DOCS_B, DOCS_T, DOCS_C));
        dy->requires_grad = false;
        Tensor *ds = tensor_zeros(ctx, LIFE_ACT, GDP_I32, SHAPE(DOCS_B, DOCS_T));
        Tensor *y = docs ? op_conv1d_causal_silu_docs(ctx, x, w, ds) : op_conv1d_causal_silu(ctx, x, w);
        tape_backward_seeded(ctx, y, dy);
        tensor_to_host(y, r[docs][0]), tensor_to_host(x->grad, r[docs][1]), tensor_to_host(w->grad, r[docs][2]);
        ctx_destroy(ctx);
    }
    ck_assert_msg(memcmp(r[0][0], r[1][0], sizeof r[0][0]) == 0, "y differs");
    ck_assert_msg(memcmp(r[0][1], r[1][1], sizeof r[0][1]) == 0, "dx differs");
    ck_assert_msg(memcmp(r[0][2], r[1][2], DOCS_C * 4 * sizeof(float)) == 0, "dw differs");
}
END_TEST

START_TEST(conv_docs_starts_wrong_shape) {
    Ctx *ctx = cpu();
    op_conv1d_causal_docs(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(2, 4, 3)),
                          tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(3, 2)),
                          tensor_zeros(ctx, LIFE_ACT, GDP_I32, SHAPE(1, 4)));
}
END_TEST

/* ---- fused: gated_rmsnorm, swiglu ----------------------------------------------------------- */
START_TEST(gated_rmsnorm_forward_hand_case) {
    Ctx *ctx = cpu();
    Tensor *o = from(ctx, GDP_F64, SHAPE(1, 2), (double[]){3, 4}, false);
    Tensor *z = from(ctx, GDP_F64, SHAPE(1, 2), (double[]){1, -1}, false);
    Tensor *w = from(ctx, GDP_F64, SHAPE(2), (double[]){1, 2}, false);
    /* rmsnorm(o) = (0.8485, 1.1314); times w = (1, 2); times silu(z) */
    expect_values(op_gated_rmsnorm(ctx, o, z, w, 0), (double[]){0.6203237740726504, -0.6085449689365511}, 2, 1e-14);
    Tensor *zero_gate = from(ctx, GDP_F32, SHAPE(1, 2), (double[]){0, 0}, false);
    Tensor *o32 = from(ctx, GDP_F32, SHAPE(1, 2), (double[]){3, 4}, false);
    Tensor *w32 = from(ctx, GDP_F32, SHAPE(2), (double[]){1, 2}, false);
    expect_values(op_gated_rmsnorm(ctx, o32, zero_gate, w32, 1e-5), (double[]){0, 0}, 2, 0);
    ctx_destroy(ctx);
}
END_TEST

static Tensor *grms_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *o = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 3, 10));
    Tensor *z = gc_random(ctx, dt, &seed, -3, 3, SHAPE(2, 3, 10));
    Tensor *w = gc_random(ctx, dt, &seed, 0.5, 1.5, SHAPE(10));
    return op_gated_rmsnorm(ctx, o, z, w, 1e-5);
}
/* o and z one tensor (do and dz land in one gradient, first write of it in both nodes), w used
 * twice (dw set, then accumulated). */
static Tensor *grms_alias_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *o = gc_random(ctx, dt, &seed, -2, 2, SHAPE(4, 6));
    Tensor *w = gc_random(ctx, dt, &seed, 0.5, 1.5, SHAPE(6));
    Tensor *y = op_gated_rmsnorm(ctx, o, o, w, 1e-5);
    return op_gated_rmsnorm(ctx, y, y, w, 1e-5);
}

START_TEST(gated_rmsnorm_gradcheck) {
    expect_gradcheck(grms_case, NULL, 1e-6);
    expect_gradcheck(grms_alias_case, NULL, 1e-6);
    expect_f32_matches_f64(grms_case);
    expect_f32_matches_f64(grms_alias_case);
}
END_TEST

START_TEST(swiglu_hand_case) {
    Ctx *ctx = cpu();
    Tensor *a = from(ctx, GDP_F64, SHAPE(3), (double[]){0, 1, -1}, true);
    Tensor *b = from(ctx, GDP_F64, SHAPE(3), (double[]){2, 3, 4}, true);
    Tensor *y = op_swiglu(ctx, a, b);
    expect_values(y, (double[]){0, 2.193175735890015, -1.0757656854799804}, 3, 1e-14);
    tape_backward_seeded(ctx, y, from(ctx, GDP_F64, SHAPE(3), (double[]){1, 1, 1}, false));
    /* da = b * silu'(a): silu'(0) = 1/2; db = silu(a) */
    double s1 = 0.7310585786300049, sm1 = 1 - s1;
    expect_values(a->grad, (double[]){1, 3 * s1 * (2 - s1), 4 * sm1 * (1 - (1 - sm1))}, 3, 1e-14);
    expect_values(b->grad, (double[]){0, 0.7310585786300049, -0.2689414213699951}, 3, 1e-14);
    ctx_destroy(ctx);
}
END_TEST

static Tensor *swiglu_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *a = gc_random(ctx, dt, &seed, -4, 4, SHAPE(5, 6));
    Tensor *b = gc_random(ctx, dt, &seed, -2, 2, SHAPE(5, 6));
    return op_swiglu(ctx, a, b);
}
static Tensor *swiglu_self_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *a = gc_random(ctx, dt, &seed, -4, 4, SHAPE(3, 5));
    Tensor *y = op_swiglu(ctx, a, a); /* a * silu(a): da and db are one gradient, first written here */
    return op_add(ctx, op_swiglu(ctx, y, y), a);
}

START_TEST(swiglu_gradcheck) {
    expect_gradcheck(swiglu_case, NULL, 1e-6);
    expect_gradcheck(swiglu_self_case, NULL, 1e-6);
    expect_f32_matches_f64(swiglu_case);
    expect_f32_matches_f64(swiglu_self_case);
}
END_TEST

/* ---- argument errors the generated checks cannot make (tests/test_op_checks.c has the rest) --- */
/* A bf16 output from f32 is for CUDA only (the CPU has no bf16). */
START_TEST(rmsnorm_to_bf16_on_cpu) {
    Ctx *ctx = cpu();
    op_rmsnorm_to(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F32, SHAPE(2, 4)), NULL, 1e-5, GDP_BF16);
}
END_TEST
START_TEST(rmsnorm_negative_eps) {
    Ctx *ctx = cpu();
    op_rmsnorm(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(2, 4)), NULL, -1);
}
END_TEST
START_TEST(l2norm_group_not_dividing) {
    Ctx *ctx = cpu();
    op_l2norm(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(2, 6)), 4, 1e-6);
}
END_TEST
START_TEST(l2norm_group_zero) {
    Ctx *ctx = cpu();
    op_l2norm(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(2, 6)), 0, 1e-6);
}
END_TEST
START_TEST(conv_x_not_3d) {
    Ctx *ctx = cpu();
    op_conv1d_causal(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(4, 3)),
                     tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(3, 4)));
}
END_TEST
START_TEST(conv_kernel_too_wide) {
    Ctx *ctx = cpu();
    op_conv1d_causal(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(1, 4, 3)),
                     tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(3, 9)));
}
END_TEST
static Suite *make_suite(void) {
    Suite *s = suite_create("ops_b");
    TCase *tc = tcase_create("ops_b");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, pointwise_forward_hand_cases);
    tcase_add_test(tc, pointwise_backward_hand_cases);
    tcase_add_test(tc, pointwise_gradcheck);
    tcase_add_test(tc, rmsnorm_forward_hand_case);
    tcase_add_test(tc, rmsnorm_backward_hand_case);
    tcase_add_test(tc, rmsnorm_gradcheck);
    tcase_add_test(tc, l2norm_forward_hand_case);
    tcase_add_test(tc, l2norm_gradcheck);
    tcase_add_test(tc, conv1d_causal_hand_case);
    tcase_add_test(tc, conv1d_causal_gradcheck);
    tcase_add_test(tc, conv1d_causal_silu_matches_unfused);
    tcase_add_test(tc, conv1d_causal_silu_gradcheck);
    tcase_add_test(tc, conv1d_causal_docs_matches_separate_documents);
    tcase_add_test(tc, conv1d_causal_docs_without_starts_is_plain);
    tcase_add_test(tc, gated_rmsnorm_forward_hand_case);
    tcase_add_test(tc, gated_rmsnorm_gradcheck);
    tcase_add_test(tc, swiglu_hand_case);
    tcase_add_test(tc, swiglu_gradcheck);
    tcase_add_exit_test(tc, rmsnorm_negative_eps, 1);
    tcase_add_exit_test(tc, rmsnorm_to_bf16_on_cpu, 1);
    tcase_add_exit_test(tc, l2norm_group_not_dividing, 1);
    tcase_add_exit_test(tc, l2norm_group_zero, 1);
    tcase_add_exit_test(tc, conv_x_not_3d, 1);
    tcase_add_exit_test(tc, conv_docs_starts_wrong_shape, 1);
    tcase_add_exit_test(tc, conv_kernel_too_wide, 1);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
