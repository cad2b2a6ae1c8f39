/* Training infrastructure: parameter registry, AdamW (and its skip of non-finite gradients), schedules, HDF5
 * checkpoints (whole-file check, byte-flip fuzzing, full disks, range-checked attributes, finding the
 * checkpoint to resume), logger. CPU only. */
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/resource.h>
#include <zlib.h>
#include <math.h>
#include <omp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/h5_check.h"
#include "core/params.h"
#include "kernels/adamw.h"
#include "tests/check_main.h"
#include "train/checkpoint.h"
#include "train/dist.h"
#include "train/logger.h"
#include "train/optim.h"
#include "train/schedule.h"

static Ctx *cpu(void) { return ctx_create(DEV_CPU, ctx_default_sizes()); }

/* Every test's files live under one base directory made by the runner (parent) process and removed
 * after the test case, also when a test ends through exit(1). */
static char test_base[64];

static void make_base(void) {
    snprintf(test_base, sizeof test_base, "/tmp/gdp_infra_XXXXXX");
    if (!mkdtemp(test_base)) {
        perror("mkdtemp");
        exit(1);
    }
}

static void remove_base(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_base);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", test_base);
}

static char *make_tmpdir(void) {
    char *d = (char *)xmalloc(128);
    snprintf(d, 128, "%s/t_XXXXXX", test_base);
    ck_assert_ptr_nonnull(mkdtemp(d));
    return d;
}

static void rm_rf(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static bool file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static long file_size(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

/* ---- params ------------------------------------------------------------------------------------------- */

/* A small model: emb [10, 6] (decay), layer 0: w [6, 6] (decay), b [6] (no decay); layer 1: norm [6] ones. */
static void small_model(ParamStore *ps, Ctx *ctx) {
    params_init_store(ps, ctx);
    param_new(ps, "emb.weight", SHAPE(10, 6), true, INIT_NORMAL, 0.02, 0);
    params_begin_bucket(ps);
    param_new(ps, "layers.0.w", SHAPE(6, 6), true, INIT_UNIFORM, -0.5, 0.5);
    param_new(ps, "layers.0.b", SHAPE(6), false, INIT_ZEROS, 0, 0);
    params_begin_bucket(ps);
    param_new(ps, "layers.1.norm", SHAPE(6), false, INIT_ONES, 0, 0);
    params_allocate(ps);
}

START_TEST(params_layout) {
    Ctx *ctx = cpu();
    ParamStore ps;
    small_model(&ps, ctx);
    ck_assert_int_eq(ps.n, 4);
    int64_t want_off[4] = {0, 64, 128, 192};
    int want_bucket[4] = {0, 1, 1, 2};
    for (int i = 0; i < 4; i++) {
        ParamInfo *p = &ps.items[i];
        ck_assert_int_eq(p->offset, want_off[i]);
        ck_assert_int_eq(p->offset % 64, 0);
        ck_assert_int_eq(p->bucket, want_bucket[i]);
        ck_assert(p->t->is_param && p->t->requires_grad);
        ck_assert_ptr_eq(p->t->data, ps.flat_params + p->offset);
        ck_assert_ptr_nonnull(p->t->grad);
        ck_assert_ptr_eq(p->t->grad->data, ps.flat_grads + p->offset);
        ck_assert(tensor_same_shape(p->t, p->t->grad));
        ck_assert_int_eq(p->t->dtype, GDP_F32);
    }
    ck_assert_int_eq(ps.total, 256);
    ck_assert_int_eq(params_count(&ps), 60 + 36 + 6 + 6);
    ck_assert_ptr_eq(params_find(&ps, "layers.0.b"), &ps.items[2]);
    ck_assert_ptr_null(params_find(&ps, "nope"));
    ck_assert(ps.items[0].decay && !ps.items[2].decay);
    params_free_store(&ps);
    ctx_destroy(ctx);
}
END_TEST

START_TEST(params_init_is_deterministic) {
    Ctx *ctx = cpu();
    ParamStore a, b, c;
    small_model(&a, ctx);
    small_model(&b, ctx);
    small_model(&c, ctx);
    params_initialize(&a, 1234);
    params_initialize(&b, 1234);
    params_initialize(&c, 1235);
    ck_assert_int_eq(memcmp(a.flat_params, b.flat_params, (size_t)a.total * 4), 0);
    ck_assert_int_ne(memcmp(a.flat_params, c.flat_params, (size_t)a.total * 4), 0);
    /* Init kinds: normal std ~0.02, uniform in range, zeros, ones, padding stays zero. */
    double ss = 0;
    for (int i = 0; i < 60; i++) ss += a.flat_params[i] * a.flat_params[i];
    double sd = sqrt(ss / 60);
    ck_assert_msg(sd > 0.01 && sd < 0.03, "normal init std %g, want about 0.02", sd);
    for (int i = 60; i < 64; i++) ck_assert_float_eq(a.flat_params[i], 0.0f);
    for (int i = 64; i < 100; i++) ck_assert(a.flat_params[i] >= -0.5f && a.flat_params[i] < 0.5f);
    for (int i = 128; i < 134; i++) ck_assert_float_eq(a.flat_params[i], 0.0f);
    for (int i = 192; i < 198; i++) ck_assert_float_eq(a.flat_params[i], 1.0f);
    for (int i = 198; i < 256; i++) ck_assert_float_eq(a.flat_params[i], 0.0f);
    params_free_store(&a);
    params_free_store(&b);
    params_free_store(&c);
    ctx_destroy(ctx);
}
END_TEST

static void fill_iota(float *host, int64_t n, Rng *rng, const void *user) {
    (void)rng;
    float base = *(const float *)user;
    for (int64_t i = 0; i < n; i++) host[i] = base + (float)i;
}

START_TEST(params_custom_init_and_zero_grad) {
    Ctx *ctx = cpu();
    ParamStore ps;
    params_init_store(&ps, ctx);
    float base = 100;
    Tensor *t = param_new_custom(&ps, "x", SHAPE(2, 3), false, fill_iota, &base);
    params_allocate(&ps);
    params_initialize(&ps, 7);
    for (int i = 0; i < 6; i++) ck_assert_float_eq(((float *)t->data)[i], 100.0f + i);
    for (int64_t i = 0; i < ps.total; i++) ps.flat_grads[i] = 3.0f;
    params_zero_grad(&ps);
    for (int64_t i = 0; i < ps.total; i++) ck_assert_float_eq(ps.flat_grads[i], 0.0f);
    ck_assert(t->grad_written);
    bool acc = false;
    Tensor *g = grad_dest(ctx, t, &acc);
    ck_assert(acc); /* after zero_grad every write accumulates */
    ck_assert_ptr_eq(g, t->grad);
    params_free_store(&ps);
    ctx_destroy(ctx);
}
END_TEST

START_TEST(params_duplicate_name_is_fatal) {
    Ctx *ctx = cpu();
    ParamStore ps;
    params_init_store(&ps, ctx);
    param_new(&ps, "a.weight", SHAPE(3), true, INIT_ZEROS, 0, 0);
    param_new(&ps, "a.weight", SHAPE(4), true, INIT_ZEROS, 0, 0);
}
END_TEST

START_TEST(params_register_after_allocate_is_fatal) {
    Ctx *ctx = cpu();
    ParamStore ps;
    params_init_store(&ps, ctx);
    param_new(&ps, "a", SHAPE(3), true, INIT_ZEROS, 0, 0);
    params_allocate(&ps);
    param_new(&ps, "b", SHAPE(3), true, INIT_ZEROS, 0, 0);
}
END_TEST

/* ---- AdamW ------------------------------------------------------------------------------------------- */

/* PyTorch's AdamW in double for one element (param, grad already scaled), step t (1-based). */
static double ref_adamw(double p, double g, double *m, double *v, int t, double lr, double b1, double b2, double eps,
                        double wd) {
    p *= 1 - lr * wd;
    *m = b1 * *m + (1 - b1) * g;
    *v = b2 * *v + (1 - b2) * g * g;
    double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
    double denom = sqrt(*v) / sqrt(bc2) + eps;
    return p - lr / bc1 * (*m / denom);
}

/* Two parameters: "w" [4] with decay, "b" [3] without. */
static void adam_model(ParamStore *ps, Ctx *ctx) {
    params_init_store(ps, ctx);
    param_new(ps, "w", SHAPE(4), true, INIT_ZEROS, 0, 0);
    param_new(ps, "b", SHAPE(3), false, INIT_ZEROS, 0, 0);
    params_allocate(ps);
    float pw[4] = {1.0f, -2.0f, 0.5f, 3.0f}, pb[3] = {0.25f, -0.75f, 1.5f};
    memcpy(ps->flat_params + ps->items[0].offset, pw, sizeof pw);
    memcpy(ps->flat_params + ps->items[1].offset, pb, sizeof pb);
}

static void set_grads(ParamStore *ps, const float *gw, const float *gb) {
    memcpy(ps->flat_grads + ps->items[0].offset, gw, 4 * sizeof(float));
    memcpy(ps->flat_grads + ps->items[1].offset, gb, 3 * sizeof(float));
}

START_TEST(adamw_first_step_by_hand) {
    /* At t = 1, m_hat = g and v_hat = g^2, so p1 = p0 (1 - lr wd) - lr g / (|g| + eps). */
    Ctx *ctx = cpu();
    ParamStore ps;
    adam_model(&ps, ctx);
    AdamWConfig cfg = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 0};
    Optimizer opt;
    optim_init(&opt, &ps, cfg, 0, ps.total);
    float gw[4] = {0.5f, 0.5f, -0.25f, 0}, gb[3] = {2.0f, -1.0f, 0};
    set_grads(&ps, gw, gb);
    double norm = optim_step(&opt, 0.1, 1.0, NULL);
    ck_assert_double_eq_tol(norm, sqrt(0.25 + 0.25 + 0.0625 + 4 + 1), 1e-12);
    const float *w = ps.flat_params + ps.items[0].offset, *b = ps.flat_params + ps.items[1].offset;
    /* w: decay 0.1 * 0.1 = 1%: 1 -> 0.99 - 0.1 = 0.89; -2 -> -1.98 - 0.1 = -2.08; 0.5 -> 0.495 + 0.1 = 0.595;
     * zero gradient: only the decay, 3 -> 2.97. */
    ck_assert_float_eq_tol(w[0], 0.89f, 1e-6f);
    ck_assert_float_eq_tol(w[1], -2.08f, 1e-6f);
    ck_assert_float_eq_tol(w[2], 0.595f, 1e-6f);
    ck_assert_float_eq_tol(w[3], 2.97f, 1e-6f);
    /* b: no decay: 0.25 - 0.1 = 0.15; -0.75 + 0.1 = -0.65; 1.5 unchanged. */
    ck_assert_float_eq_tol(b[0], 0.15f, 1e-6f);
    ck_assert_float_eq_tol(b[1], -0.65f, 1e-6f);
    ck_assert_float_eq(b[2], 1.5f);
    /* m and v at t = 1: (1 - beta) g and (1 - beta2) g^2, laid out like the parameters. */
    ck_assert_float_eq_tol(opt.m[ps.items[1].offset], 0.2f, 1e-7f);
    ck_assert_float_eq_tol(opt.v[ps.items[1].offset], 0.2f, 1e-7f);
    ck_assert_int_eq(opt.t, 1);
    optim_free(&opt);
    params_free_store(&ps);
    ctx_destroy(ctx);
}
END_TEST

/* Several steps, with decay where flagged, grad_scale and (optionally) clipping, against PyTorch's formula. */
static void check_against_reference(double clip, double grad_scale) {
    Ctx *ctx = cpu();
    ParamStore ps;
    adam_model(&ps, ctx);
    AdamWConfig cfg = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.05, .grad_clip = clip};
    Optimizer opt;
    optim_init(&opt, &ps, cfg, 0, ps.total);
    double p[7], m[7] = {0}, v[7] = {0};
    for (int i = 0; i < 4; i++) p[i] = ps.flat_params[ps.items[0].offset + i];
    for (int i = 0; i < 3; i++) p[4 + i] = ps.flat_params[ps.items[1].offset + i];
    Rng rng;
    rng_seed(&rng, 99);
    for (int t = 1; t <= 5; t++) {
        float gw[4], gb[3];
        double g[7], ss = 0;
        for (int i = 0; i < 7; i++) {
            float x = (float)(4.0 * (rng_uniform(&rng) - 0.5));
            if (i < 4) gw[i] = x;
            else gb[i - 4] = x;
            g[i] = x;
            ss += (double)x * x;
        }
        set_grads(&ps, gw, gb);
        double lr = 0.01 * t;
        double norm = optim_step(&opt, lr, grad_scale, NULL);
        double want_norm = fabs(grad_scale) * sqrt(ss);
        ck_assert_double_eq_tol(norm, want_norm, 1e-9 * want_norm);
        double f = 1.0;
        if (clip > 0) f = fmin(1.0, clip / (want_norm + 1e-6));
        ck_assert_double_eq_tol(opt.last_clip, f, 1e-12);
        for (int i = 0; i < 7; i++)
            p[i] = ref_adamw(p[i], g[i] * grad_scale * f, &m[i], &v[i], t, lr, cfg.beta1, cfg.beta2, cfg.eps,
                             i < 4 ? cfg.weight_decay : 0);
        for (int i = 0; i < 7; i++) {
            float got = i < 4 ? ps.flat_params[ps.items[0].offset + i] : ps.flat_params[ps.items[1].offset + i - 4];
            ck_assert_msg(fabs(got - p[i]) <= 1e-6 + 1e-5 * fabs(p[i]), "step %d element %d: got %.8g want %.8g", t, i,
                          got, p[i]);
        }
    }
    /* Padding never moves. */
    for (int64_t i = 4; i < 64; i++) ck_assert_float_eq(ps.flat_params[i], 0.0f);
    optim_free(&opt);
    params_free_store(&ps);
    ctx_destroy(ctx);
}

START_TEST(adamw_matches_pytorch_formula) { check_against_reference(0, 1.0); }
END_TEST
START_TEST(adamw_clipping_and_grad_scale) {
    check_against_reference(1.0, 1.0); /* the norm of 7 U(-2,2) values is well above 1: clipped */
    check_against_reference(1.0, 0.25);
    check_against_reference(100.0, 0.5); /* never clipped */
    AdamWConfig c = adamw_default_config();
    c.grad_clip = 1.0;
    ck_assert_double_eq_tol(optim_clip_factor(&c, 10.0), 1.0 / (10.0 + 1e-6), 1e-15);
    ck_assert_double_eq(optim_clip_factor(&c, 0.5), 1.0);
    c.grad_clip = 0;
    ck_assert_double_eq(optim_clip_factor(&c, 1e9), 1.0);
}
END_TEST

START_TEST(grad_sumsq_is_deterministic) {
    int64_t n = 1000003;
    float *g = (float *)xmalloc((size_t)n * sizeof(float));
    Rng rng;
    rng_seed(&rng, 5);
    for (int64_t i = 0; i < n; i++) g[i] = (float)rng_normal(&rng);
    /* Reference: the documented order (chunks in double, chunk sums in order). */
    double want = 0;
    for (int64_t lo = 0; lo < n; lo += GRAD_SUMSQ_CHUNK) {
        double s = 0;
        for (int64_t i = lo; i < lo + GRAD_SUMSQ_CHUNK && i < n; i++) s += (double)g[i] * g[i];
        want += s;
    }
    omp_set_num_threads(1);
    double a = grad_sumsq_cpu(g, n);
    omp_set_num_threads(3);
    double b = grad_sumsq_cpu(g, n);
    ck_assert(a == want && b == want);
    ck_assert_double_eq_tol(a, (double)n, 0.01 * n);
    free(g);
}
END_TEST

START_TEST(zero1_shard_updates_only_its_range) {
    /* A shard optimizer over [64, total) gives the same bits there as the full optimizer and leaves
     * [0, 64) alone. */
    Ctx *ctx = cpu();
    ParamStore full, shard;
    adam_model(&full, ctx);
    adam_model(&shard, ctx);
    AdamWConfig cfg = adamw_default_config();
    cfg.grad_clip = 0;
    Optimizer of, os;
    optim_init(&of, &full, cfg, 0, full.total);
    optim_init(&os, &shard, cfg, 64, shard.total);
    ck_assert(os.sharded && !of.sharded);
    ck_assert_int_eq(os.n_seg, 1);
    ck_assert(!os.segs[0].decay);
    float w0[4];
    memcpy(w0, shard.flat_params, sizeof w0);
    for (int t = 0; t < 3; t++) {
        float gw[4] = {0.1f * t, -0.2f, 0.3f, 0.4f}, gb[3] = {0.5f, -0.6f * t, 0.7f};
        set_grads(&full, gw, gb);
        set_grads(&shard, gw, gb);
        optim_step(&of, 0.01, 1.0, NULL);
        optim_step(&os, 0.01, 1.0, NULL);
    }
    ck_assert_int_eq(memcmp(shard.flat_params, w0, sizeof w0), 0);
    ck_assert_int_eq(memcmp(shard.flat_params + 64, full.flat_params + 64, 3 * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(os.m, of.m + 64, 3 * sizeof(float)), 0);
    ck_assert_int_eq(memcmp(os.v, of.v + 64, 3 * sizeof(float)), 0);
    /* The sharded norm covers only the shard (world 1: nothing to add). */
    double ss = 0.25 + 0.36 * 4 + 0.49;
    ck_assert_double_eq_tol(optim_grad_norm(&os, 1.0, NULL), sqrt(ss), 1e-6);
    optim_free(&of);
    optim_free(&os);
    params_free_store(&full);
    params_free_store(&shard);
    ctx_destroy(ctx);
}
END_TEST

START_TEST(shard_ranges_cover_everything) {
    int64_t totals[] = {0, 1, 64, 100, 256, 1000, 12345};
    for (size_t k = 0; k < GDP_ARRAY_LEN(totals); k++)
        for (int world = 1; world <= 5; world++) {
            int64_t prev = 0;
            for (int r = 0; r < world; r++) {
                int64_t s, e;
                dist_shard_range(totals[k], r, world, &s, &e);
                ck_assert_int_eq(s, prev);
                ck_assert(e >= s);
                ck_assert(s % 64 == 0 || s == totals[k]);
                prev = e;
            }
            ck_assert_int_eq(prev, totals[k]);
        }
}
END_TEST

/* Gradient buckets (train/dist.c): whole groups, contiguous, in reverse order, merged up to the cap. */
static void check_cover(const GradBucket *b, int n, int64_t total) {
    int64_t end = total; /* bucket k ends where bucket k - 1 starts: they tile [0, total) downward */
    for (int k = 0; k < n; k++) {
        ck_assert_int_eq(b[k].end, end);
        ck_assert(b[k].start < b[k].end);
        end = b[k].start;
    }
    ck_assert_int_eq(end, 0);
}

START_TEST(bucket_plan_groups_in_reverse_up_to_cap) {
    /* groups: emb [0,640), layer 0 [640,1000), layer 1 [1000,1360), norm [1360,1424) */
    const int64_t starts[4] = {0, 640, 1000, 1360}, total = 1424;
    GradBucket b[4];
    /* cap 0 (or below): one bucket, everything */
    ck_assert_int_eq(dist_plan_buckets(starts, 4, total, 0, b), 1);
    ck_assert(b[0].start == 0 && b[0].end == total);
    ck_assert_int_eq(dist_plan_buckets(starts, 4, total, -5, b), 1);
    /* cap 1: every group alone, last layer first */
    ck_assert_int_eq(dist_plan_buckets(starts, 4, total, 1, b), 4);
    check_cover(b, 4, total);
    ck_assert(b[0].start == 1360 && b[1].start == 1000 && b[2].start == 640 && b[3].start == 0);
    /* cap 400: norm (64) + layer 1 (360) = 424 >= 400 closes; layer 0 (360) + emb (640) closes at the end */
    ck_assert_int_eq(dist_plan_buckets(starts, 4, total, 400, b), 2);
    check_cover(b, 2, total);
    ck_assert(b[0].start == 1000 && b[0].end == 1424 && b[1].start == 0 && b[1].end == 1000);
    /* cap 360: layer 1 alone reaches it once norm is in; layer 0 (360) alone; emb alone */
    ck_assert_int_eq(dist_plan_buckets(starts, 4, total, 360, b), 3);
    check_cover(b, 3, total);
    ck_assert(b[0].start == 1000 && b[1].start == 640 && b[2].start == 0);
    /* a cap above everything: one bucket (the remainder closes at group 0) */
    ck_assert_int_eq(dist_plan_buckets(starts, 4, total, 1 << 20, b), 1);
    check_cover(b, 1, total);
    /* one group: one bucket; no groups: none */
    ck_assert_int_eq(dist_plan_buckets(starts, 1, 640, 10, b), 1);
    ck_assert(b[0].start == 0 && b[0].end == 640);
    ck_assert_int_eq(dist_plan_buckets(starts, 0, 0, 10, b), 0);
}
END_TEST

START_TEST(bucket_plan_on_a_param_store) {
    /* Buckets are planned from the ParamStore's groups (params_begin_bucket): small_model has
     * groups emb [0,64), layer 0 [64,192) (w 36 padded to 64, b 6 padded to 64), layer 1 [192,256). */
    Ctx *ctx = cpu();
    ParamStore ps;
    small_model(&ps, ctx);
    int64_t starts[8];
    int ng = 0;
    for (int i = 0; i < ps.n; i++)
        if (i == 0 || ps.items[i].bucket != ps.items[i - 1].bucket) starts[ng++] = ps.items[i].offset;
    ck_assert_int_eq(ng, 3);
    GradBucket b[8];
    int n = dist_plan_buckets(starts, ng, ps.total, 1, b);
    ck_assert_int_eq(n, 3);
    check_cover(b, n, ps.total);
    ck_assert(b[0].start == 192 && b[1].start == 64 && b[2].start == 0);
    /* world 1: bucketing is off whatever the size; sync falls back to dist_sync_grads (a no-op) */
    Dist d;
    dist_init_single(&d);
    DistBuckets gb;
    dist_buckets_init(&gb, &d, &ps, 0, 25);
    ck_assert_int_eq(gb.n, 0);
    dist_buckets_arm(&gb);
    ck_assert_ptr_null(ctx->tape.hook);
    dist_buckets_sync(&gb);
    dist_buckets_free(&gb);
    params_free_store(&ps);
    ctx_destroy(ctx);
}
END_TEST

/* ---- schedules ------------------------------------------------------------------------------------------ */

START_TEST(schedule_values) {
    const double tol = 1e-12;
    LrSchedule s = {.kind = LR_COSINE, .lr = 1.0, .final_frac = 0.1, .warmup = 10, .total_steps = 111};
    lr_schedule_check(&s);
    ck_assert_double_eq_tol(lr_at(&s, 0), 0.1, tol);
    ck_assert_double_eq_tol(lr_at(&s, 4), 0.5, tol);
    ck_assert_double_eq_tol(lr_at(&s, 9), 1.0, tol);
    ck_assert_double_eq_tol(lr_at(&s, 10), 1.0, tol);
    ck_assert_double_eq_tol(lr_at(&s, 60), 0.55, tol); /* half way: (1 + 0.1) / 2 */
    ck_assert_double_eq_tol(lr_at(&s, 35), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * 0.25)), tol);
    ck_assert_double_eq_tol(lr_at(&s, 110), 0.1, tol);
    ck_assert_double_eq_tol(lr_at(&s, 500), 0.1, tol);

    s.kind = LR_LINEAR;
    ck_assert_double_eq_tol(lr_at(&s, 4), 0.5, tol);
    ck_assert_double_eq_tol(lr_at(&s, 60), 0.55, tol);
    ck_assert_double_eq_tol(lr_at(&s, 35), 1.0 - 0.9 * 0.25, tol);
    ck_assert_double_eq_tol(lr_at(&s, 110), 0.1, tol);

    s.kind = LR_CONSTANT;
    ck_assert_double_eq_tol(lr_at(&s, 4), 0.5, tol);
    ck_assert_double_eq_tol(lr_at(&s, 60), 1.0, tol);
    ck_assert_double_eq_tol(lr_at(&s, 1000), 1.0, tol);

    /* wsd over 100 steps, warmup 10, default decay over the last 20: flat until step 79. */
    LrSchedule w = {.kind = LR_WSD, .lr = 2.0, .final_frac = 0.0, .warmup = 10, .total_steps = 100};
    ck_assert_double_eq_tol(lr_at(&w, 0), 0.2, tol);
    ck_assert_double_eq_tol(lr_at(&w, 50), 2.0, tol);
    ck_assert_double_eq_tol(lr_at(&w, 79), 2.0, tol);
    ck_assert_double_eq_tol(lr_at(&w, 80), 2.0 * (1 - sqrt(1.0 / 20)), tol);
    ck_assert_double_eq_tol(lr_at(&w, 84), 2.0 * (1 - sqrt(5.0 / 20)), tol);
    ck_assert_double_eq_tol(lr_at(&w, 99), 0.0, tol);
    w.decay_frac = 0.5;
    w.final_frac = 0.5;
    ck_assert_double_eq_tol(lr_at(&w, 49), 2.0, tol);
    ck_assert_double_eq_tol(lr_at(&w, 74), 1.0 + 1.0 * (1 - sqrt(25.0 / 50)), tol);
    ck_assert_double_eq_tol(lr_at(&w, 99), 1.0, tol);

    /* No warmup: step 0 gets the peak. */
    LrSchedule z = {.kind = LR_COSINE, .lr = 3e-4, .final_frac = 0.0, .warmup = 0, .total_steps = 1};
    ck_assert_double_eq_tol(lr_at(&z, 0), 0.0, tol); /* one step: it is also the last, lr_min */
    z.total_steps = 3;
    ck_assert_double_eq_tol(lr_at(&z, 0), 3e-4, tol);
    ck_assert_double_eq_tol(lr_at(&z, 1), 1.5e-4, tol);

    LrKind k;
    ck_assert(lr_kind_parse("wsd", &k) && k == LR_WSD);
    ck_assert(lr_kind_parse("cosine", &k) && k == LR_COSINE);
    ck_assert(!lr_kind_parse("cos", &k));
    ck_assert_str_eq(lr_kind_name(LR_LINEAR), "linear");
}
END_TEST

START_TEST(schedule_bad_warmup_is_fatal) {
    LrSchedule s = {.kind = LR_COSINE, .lr = 1.0, .final_frac = 0.1, .warmup = 200, .total_steps = 100};
    lr_schedule_check(&s);
}
END_TEST

/* ---- checkpoints ----------------------------------------------------------------------------------------- */

typedef struct Trained {
    Ctx *ctx;
    ParamStore ps;
    Optimizer opt;
} Trained;

/* small_model, initialised with `seed`, and two AdamW steps so m and v are not zero. */
static void trained_model(Trained *tm, uint64_t seed, bool steps) {
    tm->ctx = cpu();
    small_model(&tm->ps, tm->ctx);
    params_initialize(&tm->ps, seed);
    optim_init(&tm->opt, &tm->ps, adamw_default_config(), 0, tm->ps.total);
    if (!steps) return;
    Rng rng;
    rng_seed(&rng, seed + 1);
    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < tm->ps.n; i++) {
            ParamInfo *p = &tm->ps.items[i];
            for (int64_t j = 0; j < p->t->numel; j++) tm->ps.flat_grads[p->offset + j] = (float)rng_normal(&rng);
        }
        optim_step(&tm->opt, 1e-2, 1.0, NULL);
    }
}

static void free_trained(Trained *tm) {
    optim_free(&tm->opt);
    params_free_store(&tm->ps);
    ctx_destroy(tm->ctx);
}

static const int64_t LOADER[3] = {7, -1, 1234567890123LL};

static char *save_small(const char *dir, Trained *tm, int64_t step, int keep) {
    CheckpointMeta meta = {.step = step, .loader_state = LOADER, .n_loader = 3,
                           .config = "d_model = 6\nn_layers = 2\n", .world_size = 0, .zero_stage = 1};
    rng_seed(&meta.rng, 4242 + (uint64_t)step);
    return checkpoint_save(dir, &tm->ps, &tm->opt, &meta, keep, NULL);
}

START_TEST(checkpoint_round_trip_is_bit_identical) {
    char *dir = make_tmpdir();
    char sub[512];
    snprintf(sub, sizeof sub, "%s/run/ckpts", dir); /* created on demand */
    Trained a, b;
    trained_model(&a, 11, true);
    char *path = save_small(sub, &a, 42, 3);
    char want[600];
    checkpoint_path(want, sizeof want, sub, 42);
    ck_assert_str_eq(path, want);
    ck_assert(strstr(path, "ckpt_00000042.h5") != NULL);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ck_assert(!file_exists(tmp));
    char *latest = checkpoint_latest(sub);
    ck_assert_str_eq(latest, path);

    trained_model(&b, 99, false);
    ck_assert_int_ne(memcmp(a.ps.flat_params, b.ps.flat_params, (size_t)a.ps.total * 4), 0);
    CheckpointInfo info;
    checkpoint_load(path, &b.ps, &b.opt, &info);
    ck_assert_int_eq(memcmp(a.ps.flat_params, b.ps.flat_params, (size_t)a.ps.total * 4), 0);
    ck_assert_int_eq(memcmp(a.opt.m, b.opt.m, (size_t)a.ps.total * 4), 0);
    ck_assert_int_eq(memcmp(a.opt.v, b.opt.v, (size_t)a.ps.total * 4), 0);
    ck_assert_int_eq(b.opt.t, 2);
    ck_assert_int_eq(info.step, 42);
    ck_assert_int_eq(info.optim_steps, 2);
    Rng r;
    rng_seed(&r, 4242 + 42);
    ck_assert_int_eq(memcmp(&info.rng, &r, sizeof r), 0);
    ck_assert_int_eq(info.n_loader, 3);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(info.loader_state[i], LOADER[i]);
    ck_assert_str_eq(info.config, "d_model = 6\nn_layers = 2\n");
    ck_assert_str_eq(info.gdp_version, GDP_VERSION);
    ck_assert_int_eq(info.format_version, CHECKPOINT_FORMAT_VERSION);
    ck_assert_int_eq(info.world_size, 1);
    ck_assert_int_eq(info.zero_stage, 1);
    ck_assert(info.has_optim);
    checkpoint_info_free(&info);
    char *cfg = checkpoint_read_config(path);
    ck_assert_str_eq(cfg, "d_model = 6\nn_layers = 2\n");
    free(cfg);

    /* Parameters only (no optimizer state), empty loader state and config. */
    CheckpointMeta meta = {.step = 7};
    char *p2 = checkpoint_save(sub, &a.ps, NULL, &meta, 0, NULL);
    CheckpointInfo i2;
    checkpoint_load(p2, &b.ps, NULL, &i2);
    ck_assert(!i2.has_optim);
    ck_assert_int_eq(i2.n_loader, 0);
    ck_assert_ptr_null(i2.loader_state);
    ck_assert_str_eq(i2.config, "");
    checkpoint_info_free(&i2);
    free(p2);
    free(path);
    free(latest);
    free_trained(&a);
    free_trained(&b);
    rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(checkpoint_keep_last_and_latest) {
    char *dir = make_tmpdir();
    Trained a;
    trained_model(&a, 3, true);
    for (int64_t s = 1; s <= 5; s++) free(save_small(dir, &a, s * 100, 2));
    char p[600];
    for (int64_t s = 1; s <= 5; s++) {
        checkpoint_path(p, sizeof p, dir, s * 100);
        ck_assert_msg(file_exists(p) == (s >= 4), "%s exists: %d", p, file_exists(p));
    }
    char *latest = checkpoint_latest(dir);
    checkpoint_path(p, sizeof p, dir, 500);
    ck_assert_str_eq(latest, p);
    free(latest);
    char lp[600], buf[128] = {0};
    snprintf(lp, sizeof lp, "%s/latest", dir);
    FILE *f = fopen(lp, "r");
    ck_assert(fgets(buf, sizeof buf, f) != NULL);
    fclose(f);
    ck_assert_str_eq(buf, "ckpt_00000500.h5\n");
    snprintf(lp, sizeof lp, "%s/latest.tmp", dir);
    ck_assert(!file_exists(lp));
    /* keep 0 keeps everything; an empty directory has no latest. */
    free(save_small(dir, &a, 600, 0));
    checkpoint_path(p, sizeof p, dir, 400);
    ck_assert(file_exists(p));
    char *empty = make_tmpdir();
    ck_assert_ptr_null(checkpoint_latest(empty));
    rm_rf(empty);
    free(empty);
    free_trained(&a);
    rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(checkpoint_is_plain_hdf5) {
    /* The layout other tools (h5py) see: plain float datasets with the parameter shapes. */
    char *dir = make_tmpdir();
    Trained a;
    trained_model(&a, 5, true);
    char *path = save_small(dir, &a, 1, 0);
    h5_quiet();
    hid_t f = H5_CHECK(H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT));
    hid_t ds = H5_CHECK(H5Dopen2(f, "/params/layers.0.w", H5P_DEFAULT));
    hid_t sp = H5_CHECK(H5Dget_space(ds));
    hsize_t dims[2];
    ck_assert_int_eq(H5Sget_simple_extent_dims(sp, dims, NULL), 2);
    ck_assert(dims[0] == 6 && dims[1] == 6);
    float w[36];
    H5_CHECK(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, w));
    ck_assert_int_eq(memcmp(w, a.ps.flat_params + 64, sizeof w), 0);
    H5Sclose(sp);
    H5Dclose(ds);
    ck_assert(H5Lexists(f, "/optim/m/emb.weight", H5P_DEFAULT) > 0);
    ck_assert(H5Lexists(f, "/optim/v/layers.1.norm", H5P_DEFAULT) > 0);
    H5Fclose(f);
    free(path);
    free_trained(&a);
    rm_rf(dir);
    free(dir);
}
END_TEST

/* Bad files for the loader. Each helper leaves a file in dir and returns its path. */
enum { BAD_TRUNCATED, BAD_NOT_HDF5, BAD_FOREIGN, BAD_MISSING_PARAM, BAD_SHAPE, BAD_EXTRA_PARAM, BAD_CORRUPT_DATA, BAD_NO_OPTIM,
       BAD_NO_CRC, BAD_NEGATIVE_STEP, BAD_NEGATIVE_OPTIM_STEPS, BAD_OPTIM_STEPS_PAST_STEP, BAD_ZERO_STAGE };

/* Recomputes a checkpoint's whole-file CRC (the header layout of train/checkpoint.h) after the test
 * edited it through HDF5, as a tool that edits checkpoints must: the edit is then what gets checked. */
static void reseal(const char *path) {
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    unsigned char *buf = (unsigned char *)xmalloc((size_t)n);
    fseek(f, 0, SEEK_SET);
    ck_assert_int_eq(fread(buf, 1, (size_t)n, f), n);
    ck_assert(!memcmp(buf, CKPT_HEADER_MAGIC, CKPT_HEADER_MAGIC_LEN));
    for (int i = 0; i < 8; i++) buf[CKPT_HEADER_SIZE_AT + i] = (unsigned char)((uint64_t)n >> (8 * i));
    memset(buf + CKPT_HEADER_CRC_AT, 0, 4);
    uLong crc = crc32_z(crc32_z(0L, Z_NULL, 0), buf, (size_t)n);
    for (int i = 0; i < 4; i++) buf[CKPT_HEADER_CRC_AT + i] = (unsigned char)(crc >> (8 * i));
    fseek(f, 0, SEEK_SET);
    ck_assert_int_eq(fwrite(buf, 1, (size_t)n, f), n);
    fclose(f);
    free(buf);
}

/* Sets a root attribute of an existing checkpoint to v (as a hand edit with h5py would). */
static void edit_attr(const char *path, const char *name, long long v) {
    h5_quiet();
    hid_t f = H5_CHECK(H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT));
    hid_t a = H5_CHECK(H5Aopen(f, name, H5P_DEFAULT));
    H5_CHECK(H5Awrite(a, H5T_NATIVE_LLONG, &v));
    H5Aclose(a);
    H5Fclose(f);
    reseal(path);
}

static char *bad_file(const char *dir, int kind) {
    Trained a;
    trained_model(&a, 8, true);
    char *path = (char *)xmalloc(600);
    switch (kind) {
    case BAD_TRUNCATED: {
        char *p = save_small(dir, &a, 1, 0);
        long n = file_size(p);
        ck_assert_int_eq(truncate(p, n / 2), 0);
        snprintf(path, 600, "%s", p);
        free(p);
        break;
    }
    case BAD_NOT_HDF5: {
        snprintf(path, 600, "%s/ckpt_00000001.h5", dir);
        FILE *f = fopen(path, "w");
        fprintf(f, "this is not an HDF5 file, just text\n");
        fclose(f);
        break;
    }
    case BAD_FOREIGN: {
        snprintf(path, 600, "%s/foreign.h5", dir);
        h5_quiet();
        hid_t f = H5_CHECK(H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
        hsize_t d[1] = {4};
        hid_t sp = H5_CHECK(H5Screate_simple(1, d, NULL));
        hid_t ds = H5_CHECK(H5Dcreate2(f, "data", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        float x[4] = {1, 2, 3, 4};
        H5_CHECK(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x));
        H5Dclose(ds);
        H5Sclose(sp);
        H5Fclose(f);
        break;
    }
    case BAD_MISSING_PARAM:
    case BAD_SHAPE:
    case BAD_EXTRA_PARAM:
    case BAD_CORRUPT_DATA:
    case BAD_NO_OPTIM:
    case BAD_NO_CRC:
    case BAD_NEGATIVE_STEP:
    case BAD_NEGATIVE_OPTIM_STEPS:
    case BAD_OPTIM_STEPS_PAST_STEP:
    case BAD_ZERO_STAGE: {
        CheckpointMeta meta = {.step = 3};
        char *p = checkpoint_save(dir, &a.ps, kind == BAD_NO_OPTIM ? NULL : &a.opt, &meta, 0, NULL);
        snprintf(path, 600, "%s", p);
        free(p);
        if (kind == BAD_CORRUPT_DATA) {
            /* Flip one byte inside the raw data of /params/layers.0.w. */
            h5_quiet();
            hid_t f = H5_CHECK(H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT));
            hid_t ds = H5_CHECK(H5Dopen2(f, "/params/layers.0.w", H5P_DEFAULT));
            haddr_t off = H5Dget_offset(ds);
            ck_assert(off != HADDR_UNDEF);
            H5Dclose(ds);
            H5Fclose(f);
            int fd = open(path, O_RDWR);
            unsigned char byte;
            ck_assert_int_eq(pread(fd, &byte, 1, (off_t)off + 5), 1);
            byte ^= 0x40;
            ck_assert_int_eq(pwrite(fd, &byte, 1, (off_t)off + 5), 1);
            close(fd);
        }
        if (kind == BAD_NO_CRC) {
            h5_quiet();
            hid_t f = H5_CHECK(H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT));
            hid_t ds = H5_CHECK(H5Dopen2(f, "/optim/v/layers.0.b", H5P_DEFAULT));
            H5_CHECK(H5Adelete(ds, "crc32"));
            H5Dclose(ds);
            H5Fclose(f);
            reseal(path);
        }
        if (kind == BAD_NEGATIVE_STEP) edit_attr(path, "step", -5);
        if (kind == BAD_NEGATIVE_OPTIM_STEPS) edit_attr(path, "optim_steps", -3);
        if (kind == BAD_OPTIM_STEPS_PAST_STEP) edit_attr(path, "optim_steps", 4);
        if (kind == BAD_ZERO_STAGE) edit_attr(path, "zero_stage", 7);
        break;
    }
    }
    free_trained(&a);
    return path;
}

/* The model the bad files are loaded into: small_model, or a variant for the mismatch cases. */
static void load_bad(int kind) {
    static char path[600]; /* static: the load exits, and LeakSanitizer should not see a leak */
    char *dir = make_tmpdir();
    char *p = bad_file(dir, kind);
    snprintf(path, sizeof path, "%s", p);
    free(p);
    free(dir);
    Ctx *ctx = cpu();
    ParamStore ps;
    params_init_store(&ps, ctx);
    param_new(&ps, "emb.weight", SHAPE(10, 6), true, INIT_NORMAL, 0.02, 0);
    if (kind == BAD_SHAPE)
        param_new(&ps, "layers.0.w", SHAPE(6, 7), true, INIT_ZEROS, 0, 0);
    else
        param_new(&ps, "layers.0.w", SHAPE(6, 6), true, INIT_ZEROS, 0, 0);
    param_new(&ps, "layers.0.b", SHAPE(6), false, INIT_ZEROS, 0, 0);
    if (kind != BAD_EXTRA_PARAM) param_new(&ps, "layers.1.norm", SHAPE(6), false, INIT_ONES, 0, 0);
    if (kind == BAD_MISSING_PARAM) param_new(&ps, "layers.1.extra", SHAPE(6), false, INIT_ONES, 0, 0);
    params_allocate(&ps);
    Optimizer opt;
    optim_init(&opt, &ps, adamw_default_config(), 0, ps.total);
    checkpoint_load(path, &ps, &opt, NULL); /* exits 1 */
    ck_abort_msg("checkpoint_load accepted a bad file (case %d)", kind);
}

START_TEST(load_truncated_is_fatal) { load_bad(BAD_TRUNCATED); }
END_TEST
START_TEST(load_not_hdf5_is_fatal) { load_bad(BAD_NOT_HDF5); }
END_TEST
START_TEST(load_foreign_hdf5_is_fatal) { load_bad(BAD_FOREIGN); }
END_TEST
START_TEST(load_missing_param_is_fatal) { load_bad(BAD_MISSING_PARAM); }
END_TEST
START_TEST(load_shape_mismatch_is_fatal) { load_bad(BAD_SHAPE); }
END_TEST
START_TEST(load_extra_param_is_fatal) { load_bad(BAD_EXTRA_PARAM); }
END_TEST
START_TEST(load_corrupt_data_is_fatal) { load_bad(BAD_CORRUPT_DATA); }
END_TEST
START_TEST(load_without_optim_state_is_fatal) { load_bad(BAD_NO_OPTIM); }
END_TEST
START_TEST(load_dataset_without_crc_is_fatal) { load_bad(BAD_NO_CRC); }
END_TEST
START_TEST(load_negative_step_is_fatal) { load_bad(BAD_NEGATIVE_STEP); }
END_TEST
START_TEST(load_negative_optim_steps_is_fatal) { load_bad(BAD_NEGATIVE_OPTIM_STEPS); }
END_TEST

/* Runs fn(arg) in a child with stderr in buf; returns the wait status. */
static int run_child(void (*fn)(void *), void *arg, char *buf, size_t len) {
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got < len - 1 && (r = read(fds[0], buf + got, len - 1 - got)) > 0) got += (size_t)r;
    buf[got] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

static void load_bad_job(void *kind) { load_bad(*(int *)kind); }

/* Runs load_bad(kind) in a child with stderr captured: exit status 1 and a message with `want`. */
static void expect_message(int kind, const char *want) {
    char buf[4096];
    const int status = run_child(load_bad_job, &kind, buf, sizeof buf);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "case %d: status %d, stderr: %s", kind, status, buf);
    ck_assert_msg(strstr(buf, want) != NULL, "case %d: message lacks '%s': %s", kind, want, buf);
    ck_assert_msg(strstr(buf, "/tmp/gdp_infra_") != NULL, "case %d: message does not name the file: %s", kind, buf);
}

START_TEST(load_errors_name_file_and_problem) {
    expect_message(BAD_TRUNCATED, "truncated");
    expect_message(BAD_NOT_HDF5, "neither a gdp.c checkpoint header nor an HDF5 signature");
    expect_message(BAD_FOREIGN, "not a gdp.c checkpoint");
    expect_message(BAD_MISSING_PARAM, "has no parameter /params/layers.1.extra");
    expect_message(BAD_SHAPE, "has shape [6,6] but the model's parameter has shape [6,7]");
    expect_message(BAD_EXTRA_PARAM, "/params/layers.1.norm, which the model does not have");
    expect_message(BAD_CORRUPT_DATA, "fail the whole-file checksum");
    expect_message(BAD_NO_OPTIM, "holds no optimizer state");
    expect_message(BAD_NO_CRC, "/optim/v/layers.0.b has no crc32 attribute");
    expect_message(BAD_NEGATIVE_STEP, "step = -5 is out of range");
    expect_message(BAD_NEGATIVE_OPTIM_STEPS, "optim_steps = -3 is out of range");
    expect_message(BAD_OPTIM_STEPS_PAST_STEP, "optim_steps = 4 is out of range (0 to step = 3)");
    expect_message(BAD_ZERO_STAGE, "zero_stage = 7 must be 0 or 1");
}
END_TEST

/* ---- bad steps, full disks, corrupt files -------------------------------------------------------------- */

START_TEST(adamw_skips_nonfinite_gradient) {
    Trained a;
    trained_model(&a, 21, true);
    size_t bytes = (size_t)a.ps.total * sizeof(float);
    float *p0 = (float *)xmalloc(bytes), *m0 = (float *)xmalloc(bytes), *v0 = (float *)xmalloc(bytes);
    memcpy(p0, a.ps.flat_params, bytes), memcpy(m0, a.opt.m, bytes), memcpy(v0, a.opt.v, bytes);
    int64_t t0 = a.opt.t;
    const float bad[2] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        for (int64_t i = 0; i < a.ps.total; i++) a.ps.flat_grads[i] = 0.01f;
        a.ps.flat_grads[a.ps.items[2].offset + 3] = bad[k]; /* layers.0.b, element 3 */
        double norm = optim_step(&a.opt, 1e-2, 1.0, NULL);
        ck_assert_msg(!isfinite(norm), "norm %g", norm);
        ck_assert_int_eq(a.opt.t, t0);
        ck_assert(!memcmp(p0, a.ps.flat_params, bytes) && !memcmp(m0, a.opt.m, bytes) && !memcmp(v0, a.opt.v, bytes));
        int64_t elem = -1;
        ck_assert_str_eq(optim_first_nonfinite_grad(&a.opt, &elem), "layers.0.b");
        ck_assert_int_eq(elem, 3);
    }
    a.ps.flat_grads[a.ps.items[2].offset + 3] = 0.01f;
    ck_assert_ptr_null(optim_first_nonfinite_grad(&a.opt, NULL));
    free(p0), free(m0), free(v0);
    free_trained(&a);
}
END_TEST

typedef struct SaveJob {
    const char *dir;
    Trained *tm;
    int64_t step;
    long fsize_limit; /* > 0: RLIMIT_FSIZE in bytes */
} SaveJob;

static void save_job(void *u) {
    SaveJob *j = (SaveJob *)u;
    if (j->fsize_limit > 0) {
        signal(SIGXFSZ, SIG_IGN); /* as gdp train does: the write fails with EFBIG instead of killing us */
        struct rlimit rl = {(rlim_t)j->fsize_limit, (rlim_t)j->fsize_limit};
        ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    }
    free(save_small(j->dir, j->tm, j->step, 3));
}

static bool has_tmp_file(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q '\\.tmp$'", dir);
    return system(cmd) == 0;
}

START_TEST(checkpoint_disk_full_keeps_earlier) {
    char *dir = make_tmpdir();
    Trained a;
    trained_model(&a, 4, true);
    free(save_small(dir, &a, 1, 3));
    char first[600], second[600];
    checkpoint_path(first, sizeof first, dir, 1);
    checkpoint_path(second, sizeof second, dir, 2);
    long size = file_size(first);
    SaveJob j = {dir, &a, 2, size / 2};
    char err[4096];
    int st = run_child(save_job, &j, err, sizeof err);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d: %s", st, err);
    ck_assert_msg(strstr(err, "writing checkpoint") && strstr(err, "ckpt_00000002.h5.tmp") &&
                      strstr(err, "earlier checkpoints"), "message: %s", err);
    ck_assert_msg(!has_tmp_file(dir), "a .tmp file was left in %s", dir);
    ck_assert(!file_exists(second));
    char *latest = checkpoint_latest(dir);
    ck_assert_str_eq(latest, first);
    ck_assert(checkpoint_verify(first, NULL, 0));
    free(latest);
    free_trained(&a);
    rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(checkpoint_refuses_nonfinite_state) {
    char *dir = make_tmpdir();
    Trained a;
    trained_model(&a, 4, true);
    free(save_small(dir, &a, 1, 3));
    a.ps.flat_params[a.ps.items[1].offset + 7] = NAN; /* layers.0.w */
    SaveJob j = {dir, &a, 2, 0};
    char err[4096];
    int st = run_child(save_job, &j, err, sizeof err);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d: %s", st, err);
    ck_assert_msg(strstr(err, "parameter layers.0.w holds a non-finite value (element 7)"), "message: %s", err);
    a.ps.flat_params[a.ps.items[1].offset + 7] = 0;
    a.opt.v[a.ps.items[3].offset] = INFINITY; /* layers.1.norm's second moment */
    st = run_child(save_job, &j, err, sizeof err);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1 && strstr(err, "second moment of layers.1.norm"), "%d: %s",
                  st, err);
    char p[600];
    checkpoint_path(p, sizeof p, dir, 2);
    ck_assert(!file_exists(p) && !has_tmp_file(dir));
    free_trained(&a);
    rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(find_resume_takes_newest_valid) {
    char *dir = make_tmpdir();
    Trained a;
    trained_model(&a, 6, true);
    for (int s = 1; s <= 3; s++) free(save_small(dir, &a, s, 0));
    char p1[600], p2[600], p3[600], lp[600], note[2048];
    checkpoint_path(p1, sizeof p1, dir, 1);
    checkpoint_path(p2, sizeof p2, dir, 2);
    checkpoint_path(p3, sizeof p3, dir, 3);
    snprintf(lp, sizeof lp, "%s/latest", dir);
    /* latest names the newest: no note */
    char *r = checkpoint_find_resume(dir, note, sizeof note);
    ck_assert_str_eq(r, p3);
    ck_assert_str_eq(note, "");
    free(r);
    /* killed between the rename of ckpt 3 and the latest write: latest names 2 */
    FILE *f = fopen(lp, "w");
    fprintf(f, "ckpt_00000002.h5\n");
    fclose(f);
    r = checkpoint_find_resume(dir, note, sizeof note);
    ck_assert_str_eq(r, p3);
    ck_assert_msg(strstr(note, "older or missing") && strstr(note, p3), "note: %s", note);
    free(r);
    /* no latest at all (the first checkpoint's latest never written) */
    ck_assert_int_eq(unlink(lp), 0);
    r = checkpoint_find_resume(dir, note, sizeof note);
    ck_assert_str_eq(r, p3);
    ck_assert_msg(strstr(note, "no 'latest' file"), "note: %s", note);
    free(r);
    /* a corrupt newest file is passed over, and said so */
    int fd = open(p3, O_RDWR);
    unsigned char b = 0x5a;
    ck_assert_int_eq(pwrite(fd, &b, 1, 2000), 1);
    close(fd);
    r = checkpoint_find_resume(dir, note, sizeof note);
    ck_assert_str_eq(r, p2);
    ck_assert_msg(strstr(note, "skipping") && strstr(note, "whole-file checksum"), "note: %s", note);
    free(r);
    (void)p1;
    char *empty = make_tmpdir();
    ck_assert_ptr_null(checkpoint_find_resume(empty, note, sizeof note));
    rm_rf(empty);
    free(empty);
    free_trained(&a);
    rm_rf(dir);
    free(dir);
}
END_TEST

/* Byte flips anywhere in a checkpoint: each load either fails with exit 1 and a message, or gives
 * exactly the saved state; none may crash (the child's status says which). Forks one child per flip,
 * so it stays quick under ASan. */
typedef struct FlipJob {
    const char *path;
    Trained *want, *into;
} FlipJob;

static void flip_job(void *u) {
    FlipJob *j = (FlipJob *)u;
    CheckpointInfo info;
    checkpoint_load(j->path, &j->into->ps, &j->into->opt, &info);
    size_t bytes = (size_t)j->want->ps.total * sizeof(float);
    bool same = !memcmp(j->want->ps.flat_params, j->into->ps.flat_params, bytes) &&
                !memcmp(j->want->opt.m, j->into->opt.m, bytes) && !memcmp(j->want->opt.v, j->into->opt.v, bytes) &&
                j->into->opt.t == j->want->opt.t && info.step == 5 && info.n_loader == 3;
    checkpoint_info_free(&info);
    _exit(same ? 0 : 3);
}

START_TEST(checkpoint_fuzz_byte_flips) {
    char *dir = make_tmpdir();
    Trained a, b;
    trained_model(&a, 12, true);
    trained_model(&b, 13, false);
    char *path = save_small(dir, &a, 5, 0);
    long n = file_size(path);
    unsigned char *orig = (unsigned char *)xmalloc((size_t)n);
    FILE *f = fopen(path, "rb");
    ck_assert_int_eq(fread(orig, 1, (size_t)n, f), n);
    fclose(f);
    char flipped[700];
    snprintf(flipped, sizeof flipped, "%s/flipped.h5", dir);
    Rng rng;
    rng_seed(&rng, 2024);
    int rejected = 0, identical = 0;
    const int flips = 200;
    for (int i = 0; i < flips; i++) {
        /* a third in the header and HDF5's first metadata (superblock, root attributes), the rest anywhere */
        long at = i % 3 == 0 ? (long)rng_below(&rng, (uint64_t)GDP_MIN(n, 4096)) : (long)rng_below(&rng, (uint64_t)n);
        unsigned char mask = (unsigned char)(1u << rng_below(&rng, 8));
        orig[at] ^= mask;
        f = fopen(flipped, "wb");
        ck_assert_int_eq(fwrite(orig, 1, (size_t)n, f), n);
        fclose(f);
        orig[at] ^= mask;
        FlipJob j = {flipped, &a, &b};
        char err[4096];
        int st = run_child(flip_job, &j, err, sizeof err);
        ck_assert_msg(WIFEXITED(st), "flip of byte %ld (mask %02x) crashed the loader: status %d: %s", at, mask, st,
                      err);
        int code = WEXITSTATUS(st);
        ck_assert_msg(code == 0 || code == 1, "flip of byte %ld (mask %02x): exit %d (3: loaded different state): %s",
                      at, mask, code, err);
        if (code == 1) {
            ck_assert_msg(strstr(err, "gdp: error:") && strstr(err, "flipped.h5"), "flip of byte %ld: no message: %s",
                          at, err);
            rejected++;
        } else {
            identical++;
        }
    }
    printf("checkpoint fuzz: %d flips of a %ld-byte file: %d rejected, %d loaded identically\n", flips, n, rejected,
           identical);
    free(orig);
    free(path);
    free_trained(&a);
    free_trained(&b);
    rm_rf(dir);
    free(dir);
}
END_TEST

/* ---- logger ---------------------------------------------------------------------------------------------- */

static int count_lines(const char *path, char lines[][256], int max) {
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    int n = 0;
    char buf[256];
    while (fgets(buf, sizeof buf, f)) {
        if (n < max) snprintf(lines[n], 256, "%s", buf);
        n++;
    }
    fclose(f);
    return n;
}

START_TEST(logger_writes_tsv_and_plot) {
    char *dir = make_tmpdir();
    Logger lg;
    logger_init(&lg, dir, 0, -1);
    lg.quiet = true;
    for (int s = 0; s < 5; s++)
        logger_step(&lg, s, 4.0 - 0.5 * s, 1e-3, 0.5, s == 0 ? NAN : 1000.0 * s, s == 2 || s == 4 ? 3.9 - 0.5 * s : NAN,
                    s == 3);
    const char *plot = logger_finish(&lg);
    ck_assert(plot[0] != '\0');
    ck_assert_msg(file_size(plot) > 100, "plot %s is missing or tiny", plot);
    char tsv[600], lines[8][256];
    snprintf(tsv, sizeof tsv, "%s/log.tsv", dir);
    ck_assert_int_eq(count_lines(tsv, lines, 8), 6);
    ck_assert_str_eq(lines[0], "step\tloss\tlr\tgrad_norm\ttokens_per_s\tval_loss\telapsed_s\tskipped\n");
    ck_assert_msg(strstr(lines[3], "\t0\n") != NULL && strstr(lines[4], "\t1\n") != NULL, "skipped column: %s%s",
                  lines[3], lines[4]);
    ck_assert(!strncmp(lines[1], "0\t4.000000\t1.000000e-03\t0.500000\t\t\t", 33));
    ck_assert(!strncmp(lines[2], "1\t3.500000\t1.000000e-03\t0.500000\t1000.0\t\t", 40));
    ck_assert(!strncmp(lines[3], "2\t3.000000\t1.000000e-03\t0.500000\t2000.0\t2.900000\t", 48));
    /* The own-code fallback always works. */
    char svg[600];
    ck_assert(logger_plot(tsv, dir, false, svg, sizeof svg));
    ck_assert(strstr(svg, "loss.svg") != NULL);
    FILE *f = fopen(svg, "r");
    char head[64] = {0};
    ck_assert(fgets(head, sizeof head, f) != NULL);
    fclose(f);
    ck_assert(!strncmp(head, "<?xml", 5));
    /* Resume at step 3: rows 0-2 stay, the next row follows them. */
    Logger r;
    logger_init(&r, dir, 0, 3);
    r.quiet = true;
    logger_step(&r, 3, 2.0, 1e-3, 0.5, 100, NAN, false);
    logger_finish(&r);
    ck_assert_int_eq(count_lines(tsv, lines, 8), 5);
    ck_assert(!strncmp(lines[3], "2\t", 2));
    ck_assert(!strncmp(lines[4], "3\t2.000000", 10));
    rm_rf(dir);
    free(dir);
}
END_TEST

START_TEST(logger_other_ranks_are_silent) {
    char *dir = make_tmpdir();
    char sub[600];
    snprintf(sub, sizeof sub, "%s/rank1", dir);
    Logger lg;
    logger_init(&lg, sub, 1, -1);
    logger_step(&lg, 0, 1, 1, 1, 1, 1, false);
    ck_assert_str_eq(logger_finish(&lg), "");
    ck_assert(!file_exists(sub));
    rm_rf(dir);
    free(dir);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("train_infra");
    TCase *tc = tcase_create("infra");
    tcase_set_timeout(tc, 120);
    make_base();
    tcase_add_unchecked_fixture(tc, NULL, remove_base);
    tcase_add_test(tc, params_layout);
    tcase_add_test(tc, bucket_plan_groups_in_reverse_up_to_cap);
    tcase_add_test(tc, bucket_plan_on_a_param_store);
    tcase_add_test(tc, params_init_is_deterministic);
    tcase_add_test(tc, params_custom_init_and_zero_grad);
    tcase_add_exit_test(tc, params_duplicate_name_is_fatal, 1);
    tcase_add_exit_test(tc, params_register_after_allocate_is_fatal, 1);
    tcase_add_test(tc, adamw_first_step_by_hand);
    tcase_add_test(tc, adamw_matches_pytorch_formula);
    tcase_add_test(tc, adamw_clipping_and_grad_scale);
    tcase_add_test(tc, grad_sumsq_is_deterministic);
    tcase_add_test(tc, zero1_shard_updates_only_its_range);
    tcase_add_test(tc, shard_ranges_cover_everything);
    tcase_add_test(tc, schedule_values);
    tcase_add_exit_test(tc, schedule_bad_warmup_is_fatal, 1);
    tcase_add_test(tc, checkpoint_round_trip_is_bit_identical);
    tcase_add_test(tc, checkpoint_keep_last_and_latest);
    tcase_add_test(tc, checkpoint_is_plain_hdf5);
    tcase_add_exit_test(tc, load_truncated_is_fatal, 1);
    tcase_add_exit_test(tc, load_not_hdf5_is_fatal, 1);
    tcase_add_exit_test(tc, load_foreign_hdf5_is_fatal, 1);
    tcase_add_exit_test(tc, load_missing_param_is_fatal, 1);
    tcase_add_exit_test(tc, load_shape_mismatch_is_fatal, 1);
    tcase_add_exit_test(tc, load_extra_param_is_fatal, 1);
    tcase_add_exit_test(tc, load_corrupt_data_is_fatal, 1);
    tcase_add_exit_test(tc, load_without_optim_state_is_fatal, 1);
    tcase_add_exit_test(tc, load_dataset_without_crc_is_fatal, 1);
    tcase_add_exit_test(tc, load_negative_step_is_fatal, 1);
    tcase_add_exit_test(tc, load_negative_optim_steps_is_fatal, 1);
    tcase_add_test(tc, load_errors_name_file_and_problem);
    tcase_add_test(tc, adamw_skips_nonfinite_gradient);
    tcase_add_test(tc, checkpoint_disk_full_keeps_earlier);
    tcase_add_test(tc, checkpoint_refuses_nonfinite_state);
    tcase_add_test(tc, find_resume_takes_newest_valid);
    tcase_add_test(tc, checkpoint_fuzz_byte_flips);
    tcase_add_test(tc, logger_writes_tsv_and_plot);
    tcase_add_test(tc, logger_other_ranks_are_silent);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
