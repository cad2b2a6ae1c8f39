/* Ops mul, scale, cast, matmul, sum, mean, embedding, cross_entropy on the CPU: forward on hand
 * cases, backward against finite differences (gradcheck_fd), determinism, and argument errors. */
#include <math.h>
#include <omp.h>

#include "core/gradcheck.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "kernels/matmul.h"
#include "tests/check_main.h"
#include "tests/support/op_tests.h"

/* ---- mul ------------------------------------------------------------------------------------ */
START_TEST(mul_forward_broadcast_and_full) {
    Ctx *ctx = cpu();
    Tensor *a = from(ctx, GDP_F64, SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}, false);
    Tensor *b = from(ctx, GDP_F64, SHAPE(3), (double[]){10, -1, 0.5}, false);
    expect_values(op_mul(ctx, a, b), (double[]){10, -2, 1.5, 40, -5, 3}, 6, 0);
    Tensor *c = from(ctx, GDP_F32, SHAPE(2, 2), (double[]){1, 2, 3, 4}, false);
    expect_values(op_mul(ctx, c, c), (double[]){1, 4, 9, 16}, 4, 0);
    ctx_destroy(ctx);
}
END_TEST

START_TEST(mul_backward_hand_and_self) {
    Ctx *ctx = cpu();
    Tensor *a = from(ctx, GDP_F64, SHAPE(2, 2), (double[]){1, 2, 3, 4}, true);
    Tensor *b = from(ctx, GDP_F64, SHAPE(2), (double[]){5, 7}, true);
    Tensor *y = op_mul(ctx, a, b);
    tape_backward_seeded(ctx, y, from(ctx, GDP_F64, SHAPE(2, 2), (double[]){1, 10, 100, 1000}, false));
    expect_values(a->grad, (double[]){5, 70, 500, 7000}, 4, 0);
    expect_values(b->grad, (double[]){1 * 1 + 100 * 3, 10 * 2 + 1000 * 4}, 2, 0);
    /* x * x: both gradients land in x (first sets, second accumulates): 2 x dy */
    Tensor *x = from(ctx, GDP_F64, SHAPE(3), (double[]){1, -2, 3}, true);
    Tensor *z = op_mul(ctx, x, x);
    tape_backward_seeded(ctx, z, from(ctx, GDP_F64, SHAPE(3), (double[]){1, 1, 2}, false));
    expect_values(x->grad, (double[]){2, -4, 12}, 3, 0);
    ctx_destroy(ctx);
}
END_TEST

static Tensor *mul_chain_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *a = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 2, 4));
    Tensor *b = gc_random(ctx, dt, &seed, -1, 1, SHAPE(4));
    return op_mul(ctx, op_mul(ctx, a, b), a); /* a used twice */
}

START_TEST(mul_gradcheck) { expect_gradcheck(mul_chain_case, NULL, 1e-6); }
END_TEST

/* ---- scale ---------------------------------------------------------------------------------- */
START_TEST(scale_forward_backward) {
    Ctx *ctx = cpu();
    Tensor *a = from(ctx, GDP_F32, SHAPE(3), (double[]){1, -2, 0.5}, true);
    Tensor *y = op_scale(ctx, a, -3);
    expect_values(y, (double[]){-3, 6, -1.5}, 3, 0);
    tape_backward_seeded(ctx, y, from(ctx, GDP_F32, SHAPE(3), (double[]){1, 2, 3}, false));
    expect_values(a->grad, (double[]){-3, -6, -9}, 3, 0);
    ctx_destroy(ctx);
}
END_TEST

static Tensor *scale_chain_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *a = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 5));
    return op_add(ctx, op_scale(ctx, a, 2.5), a); /* fan-out: 3.5 */
}

START_TEST(scale_gradcheck) { expect_gradcheck(scale_chain_case, NULL, 1e-6); }
END_TEST

START_TEST(scale_nonfinite_alpha) {
    Ctx *ctx = cpu();
    op_scale(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(3)), NAN);
}
END_TEST

/* ---- cast ----------------------------------------------------------------------------------- */
START_TEST(cast_f64_f32_roundtrip_and_gradient) {
    Ctx *ctx = cpu();
    Tensor *a = from(ctx, GDP_F64, SHAPE(3), (double[]){1.0 / 3.0, -2, 1e-3}, true);
    Tensor *f = op_cast(ctx, a, GDP_F32);
    ck_assert_int_eq(f->dtype, GDP_F32);
    expect_values(f, (double[]){(float)(1.0 / 3.0), -2, (float)1e-3}, 3, 0);
    Tensor *g = op_cast(ctx, f, GDP_F64);
    ck_assert_int_eq(g->dtype, GDP_F64);
    Tensor *y = op_scale(ctx, g, 2);
    tape_backward_seeded(ctx, y, from(ctx, GDP_F64, SHAPE(3), (double[]){1, 0.25, -4}, false));
    ck_assert_int_eq(f->grad->dtype, GDP_F32);
    ck_assert_int_eq(a->grad->dtype, GDP_F64);
    expect_values(a->grad, (double[]){2, 0.5, -8}, 3, 0);
    ctx_destroy(ctx);
}
END_TEST

static Tensor *cast_same_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *a = gc_random(ctx, dt, &seed, -1, 1, SHAPE(4, 3));
    return op_mul(ctx, op_cast(ctx, a, dt), a);
}

START_TEST(cast_gradcheck) { expect_gradcheck(cast_same_case, NULL, 1e-6); }
END_TEST

START_TEST(cast_to_bf16_on_cpu_is_an_error) {
    Ctx *ctx = cpu();
    op_cast(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F32, SHAPE(3)), GDP_BF16);
}
END_TEST

START_TEST(cast_to_int_is_an_error) {
    Ctx *ctx = cpu();
    op_cast(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F32, SHAPE(3)), GDP_I32);
}
END_TEST

/* ---- matmul --------------------------------------------------------------------------------- */
START_TEST(matmul_forward_hand) {
    Ctx *ctx = cpu();
    Tensor *a = from(ctx, GDP_F64, SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}, false);
    Tensor *b = from(ctx, GDP_F64, SHAPE(3, 2), (double[]){7, 8, 9, 10, 11, 12}, false);
    expect_values(op_matmul(ctx, a, b, false, false), (double[]){58, 64, 139, 154}, 4, 0);
    /* a^T a^T... : a^T [3,2] times b^T [2,3] */
    expect_values(op_matmul(ctx, a, b, true, true),
                  (double[]){1 * 7 + 4 * 8, 1 * 9 + 4 * 10, 1 * 11 + 4 * 12, 2 * 7 + 5 * 8, 2 * 9 + 5 * 10,
                             2 * 11 + 5 * 12, 3 * 7 + 6 * 8, 3 * 9 + 6 * 10, 3 * 11 + 6 * 12},
                  9, 0);
    /* a a^T */
    expect_values(op_matmul(ctx, a, a, false, true), (double[]){14, 32, 32, 77}, 4, 0);
    /* shared weight over a batch of 2: rows of x times w^T */
    Tensor *x = from(ctx, GDP_F32, SHAPE(2, 1, 2), (double[]){1, 2, 3, 4}, false);
    Tensor *w = from(ctx, GDP_F32, SHAPE(3, 2), (double[]){1, 0, 0, 1, 1, 1}, false);
    Tensor *y = op_matmul(ctx, x, w, false, true);
    ck_assert_int_eq(y->ndim, 3);
    ck_assert_int_eq(y->shape[2], 3);
    expect_values(y, (double[]){1, 2, 3, 3, 4, 7}, 6, 0);
    ctx_destroy(ctx);
}
END_TEST

static void naive_gemm(double *c, const double *a, const double *b, int64_t m, int64_t n, int64_t k, int ta, int tb) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t l = 0; l < k; l++) s += (ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
            c[i * n + j] = s;
        }
}

/* Sizes that cross every block boundary of the CPU kernel, all four flag pairs, f64 and f32,
 * overwrite and accumulate, against a naive triple loop. */
START_TEST(matmul_kernel_matches_naive) {
    const int64_t m = 70, n = 261, k = 133, batch = 2;
    Rng rng;
    rng_seed(&rng, 3);
    double *a = (double *)xmalloc(sizeof(double) * batch * m * k), *b = (double *)xmalloc(sizeof(double) * batch * k * n);
    double *c = (double *)xmalloc(sizeof(double) * batch * m * n), *ref = (double *)xmalloc(sizeof(double) * m * n);
    float *af = (float *)xmalloc(sizeof(float) * batch * m * k), *bf = (float *)xmalloc(sizeof(float) * batch * k * n);
    float *cf = (float *)xmalloc(sizeof(float) * batch * m * n);
    for (int64_t i = 0; i < batch * m * k; i++) af[i] = (float)(a[i] = rng_uniform(&rng) * 2 - 1);
    for (int64_t i = 0; i < batch * k * n; i++) bf[i] = (float)(b[i] = rng_uniform(&rng) * 2 - 1);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int shared = 0; shared < 2; shared++) {
                int64_t sb = shared ? 0 : k * n;
                for (int64_t i = 0; i < batch * m * n; i++) c[i] = 1.0, cf[i] = 1.0f;
                matmul_cpu(GDP_F64, c, a, b, batch, m, n, k, ta, tb, m * k, sb, m * n, 1);
                matmul_cpu(GDP_F32, cf, af, bf, batch, m, n, k, ta, tb, m * k, sb, m * n, 0);
                for (int64_t bi = 0; bi < batch; bi++) {
                    naive_gemm(ref, a + bi * m * k, b + bi * sb, m, n, k, ta, tb);
                    double *got = (double *)xmalloc(sizeof(double) * m * n);
                    for (int64_t i = 0; i < m * n; i++) {
                        ck_assert_msg(fabs(c[bi * m * n + i] - (ref[i] + 1.0)) < 1e-11, "f64 ta %d tb %d shared %d", ta, tb,
                                      shared);
                        got[i] = cf[bi * m * n + i];
                    }
                    ck_assert_rel_l2(got, ref, m * n, 1e-6);
                    free(got);
                }
            }
    free(a), free(b), free(c), free(ref), free(af), free(bf), free(cf);
}
END_TEST

START_TEST(matmul_result_does_not_depend_on_thread_count) {
    const int64_t m = 150, n = 90, k = 300;
    float *a = (float *)xmalloc(sizeof(float) * m * k), *b = (float *)xmalloc(sizeof(float) * k * n);
    float *c1 = (float *)xmalloc(sizeof(float) * m * n), *c2 = (float *)xmalloc(sizeof(float) * m * n);
    Rng rng;
    rng_seed(&rng, 5);
    for (int64_t i = 0; i < m * k; i++) a[i] = (float)rng_normal(&rng);
    for (int64_t i = 0; i < k * n; i++) b[i] = (float)rng_normal(&rng);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    matmul_cpu(GDP_F32, c1, a, b, 1, m, n, k, 0, 1, 0, 0, 0, 0);
    omp_set_num_threads(3);
    matmul_cpu(GDP_F32, c2, a, b, 1, m, n, k, 0, 1, 0, 0, 0, 0);
    omp_set_num_threads(saved);
    ck_assert(memcmp(c1, c2, sizeof(float) * m * n) == 0);
    free(a), free(b), free(c1), free(c2);
}
END_TEST

typedef struct MatmulCase {
    bool ta, tb;
    int mode; /* 0: 2-D x 2-D, 1: batched 3-D, 2: shared 2-D b over 4-D a, 3: a x a (both grads into one) */
} MatmulCase;

static Tensor *matmul_flag_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    const MatmulCase *mc = (const MatmulCase *)user;
    const int64_t M = 3, K = 4, N = 5;
    int64_t as[2] = {mc->ta ? K : M, mc->ta ? M : K}, bs[2] = {mc->tb ? N : K, mc->tb ? K : N};
    if (mc->mode == 3) {
        Tensor *a = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 4));
        return op_matmul(ctx, a, a, mc->ta, !mc->ta); /* a a^T or a^T a */
    }
    Tensor *a, *b;
    if (mc->mode == 0) {
        a = gc_random(ctx, dt, &seed, -1, 1, SHAPE(as[0], as[1]));
        b = gc_random(ctx, dt, &seed, -1, 1, SHAPE(bs[0], bs[1]));
    } else if (mc->mode == 1) {
        a = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, as[0], as[1]));
        b = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, bs[0], bs[1]));
    } else {
        a = gc_random(ctx, dt, &seed, -1, 1, SHAPE(2, 2, as[0], as[1]));
        b = gc_random(ctx, dt, &seed, -1, 1, SHAPE(bs[0], bs[1]));
    }
    /* b is used twice: its second gradient write accumulates (beta = 1) */
    Tensor *c = op_matmul(ctx, a, b, mc->ta, mc->tb);
    return op_add(ctx, c, op_scale(ctx, op_matmul(ctx, a, b, mc->ta, mc->tb), 0.5));
}

START_TEST(matmul_gradcheck_every_flag_and_layout) {
    for (int mode = 0; mode < 4; mode++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                MatmulCase mc = {ta, tb, mode};
                expect_gradcheck(matmul_flag_case, &mc, 1e-6);
            }
}
END_TEST

START_TEST(matmul_batch_mismatch) {
    Ctx *ctx = cpu();
    op_matmul(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(2, 2, 3)),
              tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(3, 3, 4)), false, false);
}
END_TEST

START_TEST(matmul_1d_input) {
    Ctx *ctx = cpu();
    op_matmul(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(3)), tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(3, 4)),
              false, false);
}
END_TEST

/* ---- sum and mean ----------------------------------------------------------------------------- */
START_TEST(sum_mean_forward_backward) {
    Ctx *ctx = cpu();
    Tensor *x = from(ctx, GDP_F64, SHAPE(2, 2), (double[]){1, 2, 3, 4.5}, true);
    Tensor *s = op_sum(ctx, x);
    ck_assert_int_eq(s->ndim, 1);
    ck_assert_int_eq(s->shape[0], 1);
    expect_values(s, (double[]){10.5}, 1, 0);
    Tensor *m = op_mean(ctx, x);
    expect_values(m, (double[]){10.5 / 4}, 1, 0);
    Tensor *y = op_add(ctx, s, m); /* d/dx = 1 + 1/4 */
    tape_backward(ctx, y);
    expect_values(x->grad, (double[]){1.25, 1.25, 1.25, 1.25}, 4, 0);
    Tensor *f = from(ctx, GDP_F32, SHAPE(3), (double[]){0.5, 0.25, 2}, false);
    expect_values(op_mean(ctx, f), (double[]){2.75 / 3}, 1, 1e-7);
    ctx_destroy(ctx);
}
END_TEST

START_TEST(sum_is_deterministic_and_accurate) {
    Ctx *ctx = cpu();
    const int64_t n = 300001;
    float *v = (float *)xmalloc(sizeof(float) * n);
    double exact = 0;
    for (int64_t i = 0; i < n; i++) v[i] = (float)((i % 7) * 0.125 - 0.25), exact += v[i];
    Tensor *x = tensor_from_host(ctx, LIFE_ACT, GDP_F32, SHAPE(n), v);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    float a = (float)tensor_get_host(op_sum(ctx, x), 0);
    omp_set_num_threads(4);
    float b = (float)tensor_get_host(op_sum(ctx, x), 0);
    omp_set_num_threads(saved);
    ck_assert(memcmp(&a, &b, sizeof a) == 0);
    ck_assert_double_eq_tol(a, exact, 1e-3);
    free(v);
    ctx_destroy(ctx);
}
END_TEST

static Tensor *reduce_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 5));
    Tensor *sq = op_mul(ctx, x, x);
    return op_add(ctx, op_sum(ctx, sq), op_mean(ctx, x));
}

START_TEST(sum_mean_gradcheck) { expect_gradcheck(reduce_case, NULL, 1e-6); }
END_TEST

START_TEST(mean_of_empty) {
    Ctx *ctx = cpu();
    op_mean(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(0, 3)));
}
END_TEST

/* ---- embedding ------------------------------------------------------------------------------ */
static Tensor *ids_of(Ctx *ctx, int ndim, const int64_t *shape, const double *v) {
    return tensor_from_doubles(ctx, LIFE_ACT, GDP_I32, ndim, shape, v);
}

START_TEST(embedding_forward_backward_hand) {
    Ctx *ctx = cpu();
    Tensor *w = from(ctx, GDP_F64, SHAPE(4, 2), (double[]){0, 1, 10, 11, 20, 21, 30, 31}, true);
    Tensor *ids = ids_of(ctx, SHAPE(2, 2), (double[]){2, 0, 2, 1});
    Tensor *y = op_embedding(ctx, w, ids);
    ck_assert_int_eq(y->ndim, 3);
    ck_assert_int_eq(y->shape[2], 2);
    expect_values(y, (double[]){20, 21, 0, 1, 20, 21, 10, 11}, 8, 0);
    tape_backward_seeded(ctx, y, from(ctx, GDP_F64, SHAPE(2, 2, 2), (double[]){1, 2, 3, 4, 5, 6, 7, 8}, false));
    /* row 2 gets positions 0 and 2, row 3 nothing */
    expect_values(w->grad, (double[]){3, 4, 7, 8, 6, 8, 0, 0}, 8, 0);
    ctx_destroy(ctx);
}
END_TEST

START_TEST(embedding_backward_accumulates) {
    /* The same weight looked up twice (a tied embedding): gradients add. */
    Ctx *ctx = cpu();
    Tensor *w = from(ctx, GDP_F32, SHAPE(3, 1), (double[]){1, 2, 3}, true);
    Tensor *y1 = op_embedding(ctx, w, ids_of(ctx, SHAPE(2), (double[]){0, 0}));
    Tensor *y2 = op_embedding(ctx, w, ids_of(ctx, SHAPE(2), (double[]){0, 2}));
    Tensor *y = op_add(ctx, y1, y2);
    expect_values(y, (double[]){2, 4}, 2, 0);
    tape_backward_seeded(ctx, y, from(ctx, GDP_F32, SHAPE(2, 1), (double[]){1, 10}, false));
    expect_values(w->grad, (double[]){1 + 10 + 1, 0, 10}, 3, 0);
    ctx_destroy(ctx);
}
END_TEST

static Tensor *embedding_big_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *w = gc_random(ctx, dt, &seed, -1, 1, SHAPE(5, 3));
    double id[12];
    for (int i = 0; i < 12; i++) id[i] = (i * 7 + (int)seed) % 4; /* row 4 unused, repeats */
    Tensor *e = op_embedding(ctx, w, ids_of(ctx, SHAPE(3, 4), id));
    return op_mul(ctx, e, e);
}

START_TEST(embedding_gradcheck) { expect_gradcheck(embedding_big_case, NULL, 1e-6); }
END_TEST

START_TEST(embedding_id_too_large) {
    Ctx *ctx = cpu();
    op_embedding(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(4, 2)), ids_of(ctx, SHAPE(3), (double[]){0, 4, 1}));
}
END_TEST

START_TEST(embedding_id_negative) {
    Ctx *ctx = cpu();
    op_embedding(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(4, 2)), ids_of(ctx, SHAPE(2), (double[]){-1, 0}));
}
END_TEST

START_TEST(embedding_float_ids) {
    Ctx *ctx = cpu();
    op_embedding(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(4, 2)), tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(2)));
}
END_TEST

START_TEST(embedding_1d_weight) {
    Ctx *ctx = cpu();
    op_embedding(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(4)), ids_of(ctx, SHAPE(1), (double[]){0}));
}
END_TEST

START_TEST(embedding_null_ids) {
    Ctx *ctx = cpu();
    op_embedding(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(4, 2)), NULL);
}
END_TEST

/* ---- cross-entropy -------------------------------------------------------------------------- */
START_TEST(cross_entropy_forward_backward_hand) {
    Ctx *ctx = cpu();
    Tensor *x = from(ctx, GDP_F64, SHAPE(3, 3), (double[]){0, 0, 0, 1, 2, 3, 5, 5, 5}, true);
    Tensor *t = ids_of(ctx, SHAPE(3), (double[]){0, 2, -1}); /* the last row is ignored */
    Tensor *loss = op_cross_entropy(ctx, x, t);
    ck_assert_int_eq(loss->dtype, GDP_F64);
    ck_assert_int_eq(loss->numel, 1);
    double lse1 = log(exp(1) + exp(2) + exp(3));
    expect_values(loss, (double[]){(log(3.0) + lse1 - 3) / 2}, 1, 1e-14);
    tape_backward(ctx, loss);
    double want[9] = {(1.0 / 3 - 1) / 2, 1.0 / 6, 1.0 / 6, exp(1 - lse1) / 2, exp(2 - lse1) / 2, (exp(3 - lse1) - 1) / 2,
                      0, 0, 0};
    expect_values(x->grad, want, 9, 1e-14);
    ctx_destroy(ctx);
}
END_TEST

START_TEST(cross_entropy_is_stable_and_handles_all_ignored) {
    Ctx *ctx = cpu();
    Tensor *x = from(ctx, GDP_F32, SHAPE(2, 3), (double[]){1000, 0, -1000, -500, -500, -500}, true);
    Tensor *loss = op_cross_entropy(ctx, x, ids_of(ctx, SHAPE(2), (double[]){1, 2}));
    expect_values(loss, (double[]){(1000 + log(3.0)) / 2}, 1, 1e-6);
    Tensor *none = op_cross_entropy(ctx, x, ids_of(ctx, SHAPE(2), (double[]){-1, -5}));
    expect_values(none, (double[]){0}, 1, 0); /* no counted row: 0, and no gradient */
    tape_backward(ctx, none);
    expect_values(x->grad, (double[]){0, 0, 0, 0, 0, 0}, 6, 0);
    ctx_destroy(ctx);
}
END_TEST

/* user: NULL for op_cross_entropy, non-NULL for op_cross_entropy_inplace. */
static Tensor *ce_case_fn(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    Tensor *x = gc_random(ctx, dt, &seed, -3, 3, SHAPE(5, 9));
    Tensor *s = op_scale(ctx, x, 1.5);
    Tensor *t = ids_of(ctx, SHAPE(5), (double[]){8, -1, 0, (double)(seed % 9), 4});
    return user ? op_cross_entropy_inplace(ctx, s, t) : op_cross_entropy(ctx, s, t);
}

START_TEST(cross_entropy_gradcheck) { expect_gradcheck(ce_case_fn, NULL, 1e-6); }
END_TEST

START_TEST(cross_entropy_inplace_gradcheck) {
    static int in_place = 1;
    expect_gradcheck(ce_case_fn, &in_place, 1e-6);
}
END_TEST

/* The in-place variant: same loss and gradient, written over the logits (no gradient buffer). */
START_TEST(cross_entropy_inplace_reuses_the_logits) {
    double xs[6] = {0.5, -1, 2, 3, 0, -2}, want[6];
    size_t grad_bytes[2];
    for (int pass = 0; pass < 2; pass++) {
        Ctx *ctx = cpu();
        Tensor *x = from(ctx, GDP_F64, SHAPE(2, 3), xs, true);
        Tensor *s = op_scale(ctx, x, 2.0);
        Tensor *t = ids_of(ctx, SHAPE(2), (double[]){2, 0});
        Tensor *loss = pass ? op_cross_entropy_inplace(ctx, s, t) : op_cross_entropy(ctx, s, t);
        size_t grads_before = ctx->grads.used;
        tape_backward(ctx, loss);
        grad_bytes[pass] = ctx->grads.used - grads_before;
        double got[6];
        tensor_to_doubles(x->grad, got);
        if (pass == 0) {
            memcpy(want, got, sizeof want);
            ck_assert_ptr_ne(s->grad->data, s->data);
        } else {
            for (int i = 0; i < 6; i++) ck_assert_double_eq_tol(got[i], want[i], 1e-15);
            ck_assert_ptr_eq(s->grad->data, s->data);
            ck_assert_msg(grad_bytes[1] < grad_bytes[0], "the in-place loss allocated %zu gradient bytes, the plain one %zu",
                          grad_bytes[1], grad_bytes[0]);
        }
        ctx_destroy(ctx);
    }
}
END_TEST

START_TEST(cross_entropy_target_too_large) {
    Ctx *ctx = cpu();
    op_cross_entropy(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(2, 3)), ids_of(ctx, SHAPE(2), (double[]){0, 3}));
}
END_TEST

START_TEST(cross_entropy_targets_length) {
    Ctx *ctx = cpu();
    op_cross_entropy(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(2, 3)), ids_of(ctx, SHAPE(3), (double[]){0, 1, 2}));
}
END_TEST

START_TEST(cross_entropy_float_targets) {
    Ctx *ctx = cpu();
    op_cross_entropy(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(2, 3)), tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(2)));
}
END_TEST

START_TEST(cross_entropy_3d_logits) {
    Ctx *ctx = cpu();
    op_cross_entropy(ctx, tensor_zeros(ctx, LIFE_ACT, GDP_F64, SHAPE(1, 2, 3)), ids_of(ctx, SHAPE(2), (double[]){0, 1}));
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("ops_a");
    TCase *tc = tcase_create("ops_a");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, mul_forward_broadcast_and_full);
    tcase_add_test(tc, mul_backward_hand_and_self);
    tcase_add_test(tc, mul_gradcheck);
    tcase_add_test(tc, scale_forward_backward);
    tcase_add_test(tc, scale_gradcheck);
    tcase_add_exit_test(tc, scale_nonfinite_alpha, 1);
    tcase_add_test(tc, cast_f64_f32_roundtrip_and_gradient);
    tcase_add_test(tc, cast_gradcheck);
    tcase_add_exit_test(tc, cast_to_bf16_on_cpu_is_an_error, 1);
    tcase_add_exit_test(tc, cast_to_int_is_an_error, 1);
    tcase_add_test(tc, matmul_forward_hand);
    tcase_add_test(tc, matmul_kernel_matches_naive);
    tcase_add_test(tc, matmul_result_does_not_depend_on_thread_count);
    tcase_add_test(tc, matmul_gradcheck_every_flag_and_layout);
    tcase_add_exit_test(tc, matmul_batch_mismatch, 1);
    tcase_add_exit_test(tc, matmul_1d_input, 1);
    tcase_add_test(tc, sum_mean_forward_backward);
    tcase_add_test(tc, sum_is_deterministic_and_accurate);
    tcase_add_test(tc, sum_mean_gradcheck);
    tcase_add_exit_test(tc, mean_of_empty, 1);
    tcase_add_test(tc, embedding_forward_backward_hand);
    tcase_add_test(tc, embedding_backward_accumulates);
    tcase_add_test(tc, embedding_gradcheck);
    tcase_add_exit_test(tc, embedding_id_too_large, 1);
    tcase_add_exit_test(tc, embedding_id_negative, 1);
    tcase_add_exit_test(tc, embedding_float_ids, 1);
    tcase_add_exit_test(tc, embedding_1d_weight, 1);
    tcase_add_exit_test(tc, embedding_null_ids, 1);
    tcase_add_test(tc, cross_entropy_forward_backward_hand);
    tcase_add_test(tc, cross_entropy_is_stable_and_handles_all_ignored);
    tcase_add_test(tc, cross_entropy_gradcheck);
    tcase_add_test(tc, cross_entropy_inplace_gradcheck);
    tcase_add_test(tc, cross_entropy_inplace_reuses_the_logits);
    tcase_add_exit_test(tc, cross_entropy_target_too_large, 1);
    tcase_add_exit_test(tc, cross_entropy_targets_length, 1);
    tcase_add_exit_test(tc, cross_entropy_float_targets, 1);
    tcase_add_exit_test(tc, cross_entropy_3d_logits, 1);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
