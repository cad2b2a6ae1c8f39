/* Arenas, tensors, the tape (set-or-accumulate, fan-out, skipping) and argument errors. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/gradcheck.h"
#include "core/op_util.h"
#include "core/ops.h"
#include "tests/check_main.h"

#ifdef __SANITIZE_ADDRESS__
/* under ASan, a request beyond its limit returns NULL as libc's would (its default is to abort,
 * which would pass arena_too_large_for_the_machine_is_a_clear_error for the wrong reason) */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

START_TEST(arena_aligns_and_rewinds) {
    Arena a;
    arena_init(&a, "test", DEV_CPU, 4096, "raise it");
    void *p = arena_alloc(&a, 3);
    void *q = arena_alloc(&a, 5);
    ck_assert_uint_eq((uintptr_t)p % ARENA_ALIGN, 0);
    ck_assert_uint_eq((uintptr_t)q % ARENA_ALIGN, 0);
    size_t m = arena_mark(&a);
    arena_alloc(&a, 1000);
    arena_rewind(&a, m);
    ck_assert_uint_eq(a.used, m);
    ck_assert_uint_ge(a.high_water, m + 1000);
    arena_release(&a);
}
END_TEST

/* A recorded sequence of calls replays at other sizes: rewinds go back to the allocation their mark
 * ended, whatever the sizes. */
START_TEST(arena_trace_replays_calls_at_other_sizes) {
    Arena a;
    arena_init(&a, "test", DEV_CPU, 1 << 20, NULL);
    ArenaTrace t = {0};
    arena_trace_start(&a, &t);
    arena_alloc(&a, 100);
    size_t m = arena_mark(&a);
    arena_alloc(&a, 1000);
    arena_rewind(&a, m);
    arena_alloc(&a, 50);
    arena_expect(&a, 3000);
    arena_reset(&a);
    arena_trace_stop(&a);
    ck_assert(!t.broken);
    ck_assert_int_eq(arena_trace_allocs(&t), 4);
    const int64_t own[4] = {100, 1000, 50, 3000}, other[4] = {200, 10, 5000, 7};
    ck_assert_uint_eq(arena_trace_replay(&t, own), a.high_water);
    ck_assert_uint_eq(arena_trace_replay(&t, other), 5376 + 7); /* c after a (b rewound), then the expectation */
    arena_trace_free(&t);
    arena_release(&a);
}
END_TEST

/* A step's recorded arenas replay to its high water; arenas planned to exactly that serve the step
 * again with the same result. */
START_TEST(ctx_plan_arenas_to_a_recorded_step) {
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    Arena *ar[3] = {&ctx->acts, &ctx->grads, &ctx->scratch};
    ArenaTrace tr[3];
    memset(tr, 0, sizeof tr);
    uint64_t seed = 5;
    double first = 0, second = 0;
    for (int step = 0; step < 2; step++) {
        if (step == 0)
            for (int i = 0; i < 3; i++) arena_trace_start(ar[i], &tr[i]);
        uint64_t s = seed;
        Tensor *x = gc_random(ctx, GDP_F64, &s, -1, 1, SHAPE(32, 32));
        Tensor *loss = op_sum(ctx, op_mul(ctx, x, op_sigmoid(ctx, x)));
        tape_backward(ctx, loss);
        double v[32 * 32];
        tensor_to_doubles(x->grad, v);
        *(step ? &second : &first) = v[17];
        ctx_step_reset(ctx);
        if (step == 0) {
            size_t hw[3];
            for (int i = 0; i < 3; i++) {
                arena_trace_stop(ar[i]);
                int64_t sz[64];
                int n = 0;
                for (int e = 0; e < tr[i].n; e++)
                    if (tr[i].events[e] >= 0) sz[n++] = tr[i].events[e];
                ck_assert_int_lt(n, 64);
                hw[i] = arena_trace_replay(&tr[i], sz);
                ck_assert_uint_eq(hw[i], ar[i]->high_water);
                arena_trace_free(&tr[i]);
            }
            ctx_plan_arenas(ctx, hw[0], hw[1], hw[2]);
            ck_assert_uint_eq(ctx->acts.capacity, hw[0]);
        }
    }
    ck_assert_uint_le(ctx->acts.high_water, ctx->acts.capacity);
    ck_assert_double_eq(first, second);
    ctx_destroy(ctx);
}
END_TEST

/* more than any machine has: an error that says what to lower, not a crash */
START_TEST(arena_too_large_for_the_machine_is_a_clear_error) {
    Arena a;
    arena_init(&a, "huge", DEV_CPU, (size_t)1 << 62, NULL); /* exits 1 naming the arena */
}
END_TEST

START_TEST(arena_exhaustion_is_a_clear_error) {
    Arena a;
    arena_init(&a, "tiny", DEV_CPU, 1024, "raise --tiny-mem");
    arena_alloc(&a, 2048); /* exits 1 with a message naming the arena */
}
END_TEST

static Ctx *cpu(void) { return ctx_create(DEV_CPU, ctx_default_sizes()); }

START_TEST(add_forward_hand_case) {
    Ctx *ctx = cpu();
    Tensor *a = tensor_from_doubles(ctx, LIFE_ACT, GDP_F64, SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    Tensor *b = tensor_from_doubles(ctx, LIFE_ACT, GDP_F64, SHAPE(3), (double[]){10, 20, 30});
    Tensor *c = op_add(ctx, a, b);
    double out[6];
    tensor_to_doubles(c, out);
    double want[6] = {11, 22, 33, 14, 25, 36};
    for (int i = 0; i < 6; i++) ck_assert_double_eq(out[i], want[i]);
    ck_assert(!c->requires_grad); /* nothing required a gradient: nothing recorded */
    ck_assert_int_eq(ctx->tape.n, 0);
    ctx_destroy(ctx);
}
END_TEST

START_TEST(fan_out_accumulates_gradients) {
    /* y = (x + b) + x: dx must be 2 * dy (first write sets, second accumulates), db = colsum dy. */
    Ctx *ctx = cpu();
    Tensor *x = tensor_from_doubles(ctx, LIFE_ACT, GDP_F64, SHAPE(2, 2), (double[]){1, 2, 3, 4});
    Tensor *b = tensor_from_doubles(ctx, LIFE_ACT, GDP_F64, SHAPE(2), (double[]){0.5, -0.5});
    x->requires_grad = b->requires_grad = true;
    Tensor *y = op_add(ctx, op_add(ctx, x, b), x);
    ck_assert_int_eq(ctx->tape.n, 2);
    Tensor *dy = tensor_from_doubles(ctx, LIFE_GRAD, GDP_F64, SHAPE(2, 2), (double[]){1, 2, 3, 4});
    tape_backward_seeded(ctx, y, dy);
    double dx[4], db[2];
    tensor_to_doubles(x->grad, dx);
    tensor_to_doubles(b->grad, db);
    for (int i = 0; i < 4; i++) ck_assert_double_eq(dx[i], 2.0 * (i + 1));
    ck_assert_double_eq(db[0], 4);
    ck_assert_double_eq(db[1], 6);
    ctx_destroy(ctx);
}
END_TEST

START_TEST(nodes_without_a_path_are_skipped) {
    Ctx *ctx = cpu();
    Tensor *x = tensor_from_doubles(ctx, LIFE_ACT, GDP_F64, SHAPE(2), (double[]){1, 2});
    Tensor *c = tensor_from_doubles(ctx, LIFE_ACT, GDP_F64, SHAPE(2), (double[]){3, 4});
    x->requires_grad = true;
    Tensor *unused = op_add(ctx, x, c); /* recorded, but the loss below does not use it */
    Tensor *y = op_add(ctx, x, x);
    Tensor *dy = tensor_from_doubles(ctx, LIFE_GRAD, GDP_F64, SHAPE(2), (double[]){1, 1});
    tape_backward_seeded(ctx, y, dy);
    ck_assert(!unused->grad_written);
    ck_assert(c->grad == NULL); /* constants never get gradients */
    double dx[2];
    tensor_to_doubles(x->grad, dx);
    ck_assert_double_eq(dx[0], 2);
    ctx_destroy(ctx);
}
END_TEST

START_TEST(tape_reuse_after_step_reset) {
    Ctx *ctx = cpu();
    for (int step = 0; step < 3; step++) {
        Tensor *x = tensor_from_doubles(ctx, LIFE_ACT, GDP_F64, SHAPE(1), (double[]){step});
        x->requires_grad = true;
        Tensor *y = op_add(ctx, x, x);
        tape_backward_seeded(ctx, y, tensor_from_doubles(ctx, LIFE_GRAD, GDP_F64, SHAPE(1), (double[]){1}));
        ck_assert_double_eq(tensor_get_host(x->grad, 0), 2);
        ck_assert_int_eq(ctx->tape.n, 1);
        ctx_step_reset(ctx);
        ck_assert_uint_eq(ctx->acts.used, 0);
    }
    ctx_destroy(ctx);
}
END_TEST

START_TEST(transpose_view_shares_memory_and_backprops) {
    Ctx *ctx = cpu();
    Tensor *x = tensor_from_doubles(ctx, LIFE_ACT, GDP_F64, SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    x->requires_grad = true;
    Tensor *t = op_transpose(ctx, x, 0, 1);
    ck_assert(t->data == x->data);
    ck_assert(!tensor_is_contiguous(t));
    Tensor *c = op_contiguous(ctx, t);
    double v[6];
    tensor_to_doubles(c, v);
    double want[6] = {1, 4, 2, 5, 3, 6};
    for (int i = 0; i < 6; i++) ck_assert_double_eq(v[i], want[i]);
    tape_backward_seeded(ctx, c, tensor_from_doubles(ctx, LIFE_GRAD, GDP_F64, SHAPE(3, 2), (double[]){1, 2, 3, 4, 5, 6}));
    tensor_to_doubles(x->grad, v);
    double wantg[6] = {1, 3, 5, 2, 4, 6};
    for (int i = 0; i < 6; i++) ck_assert_double_eq(v[i], wantg[i]);
    ctx_destroy(ctx);
}
END_TEST

/* Six blocks y <- y * sigmoid(y) + y, with and without a boundary at each block's input: the same
 * gradient bit for bit, and the activation gradients of one block at a time instead of six. */
static void boundary_chain(bool boundaries, double *dx, size_t *grad_high_water) {
    Ctx *ctx = cpu();
    uint64_t seed = 11;
    Tensor *x = gc_random(ctx, GDP_F64, &seed, -1, 1, SHAPE(64, 64));
    Tensor *y = op_scale(ctx, x, 1.0);
    for (int b = 0; b < 6; b++) {
        if (boundaries) y = op_grad_boundary(ctx, y);
        y = op_add(ctx, op_mul(ctx, y, op_sigmoid(ctx, y)), y);
    }
    size_t before = ctx->grads.high_water;
    tape_backward(ctx, op_sum(ctx, y));
    *grad_high_water = ctx->grads.high_water - before;
    tensor_to_doubles(x->grad, dx);
    ctx_destroy(ctx);
}

START_TEST(grad_boundary_releases_block_gradients) {
    static double with[64 * 64], without[64 * 64];
    size_t hw_with, hw_without;
    boundary_chain(true, with, &hw_with);
    boundary_chain(false, without, &hw_without);
    ck_assert_msg(!memcmp(with, without, sizeof with), "gradients differ with boundaries");
    printf("grad boundaries: activation-gradient high water %zu bytes with, %zu without\n", hw_with, hw_without);
    ck_assert_msg(hw_with * 2 < hw_without, "boundaries should at least halve the gradient memory (%zu vs %zu)",
                  hw_with, hw_without);
}
END_TEST

/* A tensor from before the boundary used inside the next block: its gradient would be released. */
START_TEST(grad_boundary_misuse_is_an_error) {
    Ctx *ctx = cpu();
    uint64_t seed = 3;
    Tensor *x = gc_random(ctx, GDP_F64, &seed, -1, 1, SHAPE(4, 4));
    Tensor *a = op_exp(ctx, x);
    Tensor *y = op_grad_boundary(ctx, op_scale(ctx, a, 2.0));
    tape_backward(ctx, op_sum(ctx, op_mul(ctx, y, a)));
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, arena_aligns_and_rewinds);
    tcase_add_exit_test(tc, arena_exhaustion_is_a_clear_error, 1);
    tcase_add_exit_test(tc, arena_too_large_for_the_machine_is_a_clear_error, 1);
    tcase_add_test(tc, arena_trace_replays_calls_at_other_sizes);
    tcase_add_test(tc, ctx_plan_arenas_to_a_recorded_step);
    tcase_add_test(tc, add_forward_hand_case);
    tcase_add_test(tc, fan_out_accumulates_gradients);
    tcase_add_test(tc, nodes_without_a_path_are_skipped);
    tcase_add_test(tc, tape_reuse_after_step_reset);
    tcase_add_test(tc, transpose_view_shares_memory_and_backprops);
    tcase_add_test(tc, grad_boundary_releases_block_gradients);
    tcase_add_exit_test(tc, grad_boundary_misuse_is_an_error, 1);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
