/* Data-parallel plumbing on 2 MPI ranks, CPU: all-reduce, reduce-scatter, all-gather, host scalars,
 * ZeRO-1 (reduce-scatter, shard update, all-gather) against plain data parallel, a checkpoint
 * written under ZeRO-1, gradient buckets reduced during backward against one reduction after it
 * (and the trainer with and without them), and dist_abort ending every rank.
 *
 * Run directly (as `make test` does) it re-runs itself under
 *     mpirun --allow-run-as-root --oversubscribe -np 2 -x CK_FORK=no ...
 * Check then runs without fork on each rank. Every test does all its collectives before it
 * asserts anything, so a failure on one rank cannot leave the other waiting in a collective.
 * With --cuda (tests/run_dist.sh adds it on a machine with 2+ GPUs) the same tests run on CUDA
 * buffers through NCCL, one GPU per rank. */
#include <limits.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/params.h"
#include "layers/model.h"
#include "tests/check_main.h"
#include "train/checkpoint.h"
#include "train/dist.h"
#include "train/optim.h"
#include "train/train.h"

static Dist D;    /* the test process's Dist: set up once in main */
static Ctx *G;    /* one context per rank, on TEST_DEV, attached to D (as in the trainer) */
static Device TEST_DEV = DEV_CPU;

/* Device copies of host float arrays (synchronous). */
static float *to_dev(const float *h, int64_t n) {
    float *d = (float *)device_malloc(TEST_DEV, (size_t)n * sizeof(float));
    device_memcpy(d, TEST_DEV, h, DEV_CPU, (size_t)n * sizeof(float));
    device_synchronize(TEST_DEV);
    return d;
}
static void to_host(float *h, const float *d, int64_t n) {
    ctx_synchronize(G);
    device_memcpy(h, DEV_CPU, d, TEST_DEV, (size_t)n * sizeof(float));
}
static float *host_copy(const float *d, int64_t n) {
    float *h = (float *)xmalloc((size_t)GDP_MAX(n, 1) * sizeof(float));
    to_host(h, d, n);
    return h;
}

static float value_of(int rank, int64_t i) { return (float)((rank + 1) * 0.5 + 0.001 * (double)(i % 997)); }

/* Rank 0 removes a test folder both ranks used (call after a barrier). */
static void remove_on_root(const Dist *D, const char *dir) {
    if (D->rank != 0) return;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

START_TEST(ranks_and_world) {
    ck_assert_int_eq(D.world, 2);
    ck_assert(D.rank == 0 || D.rank == 1);
    ck_assert_int_eq(D.local_world, 2);
    ck_assert_int_eq(D.local_rank, D.rank);
    ck_assert_str_eq(getenv("NCCL_NVLS_ENABLE"), "0");
}
END_TEST

START_TEST(allreduce_mean_and_sum) {
    int64_t ns[3] = {1, 1000, 300001};
    int bad = 0;
    for (int k = 0; k < 3; k++) {
        int64_t n = ns[k];
        float *a = (float *)xmalloc((size_t)n * sizeof(float)), *b = (float *)xmalloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) a[i] = b[i] = value_of(D.rank, i);
        float *da = to_dev(a, n), *db = to_dev(b, n);
        dist_allreduce_mean_f32(&D, da, n);
        dist_allreduce_sum_f32(&D, db, n);
        to_host(a, da, n);
        to_host(b, db, n);
        device_free(TEST_DEV, da);
        device_free(TEST_DEV, db);
        for (int64_t i = 0; i < n; i++) {
            float s = value_of(0, i) + value_of(1, i);
            if (a[i] != s / 2.0f || b[i] != s) bad++;
        }
        free(a);
        free(b);
    }
    ck_assert_int_eq(dist_sum_i64(&D, bad), 0);
}
END_TEST

START_TEST(reduce_scatter_and_all_gather) {
    int64_t totals[4] = {50, 128, 1000, 70001};
    int bad_rs = 0, bad_ag = 0;
    for (int k = 0; k < 4; k++) {
        int64_t total = totals[k], s, e;
        dist_shard_range(total, D.rank, D.world, &s, &e);
        float *buf = (float *)xmalloc((size_t)total * sizeof(float));
        for (int64_t i = 0; i < total; i++) buf[i] = value_of(D.rank, i);
        float *dbuf = to_dev(buf, total);
        dist_reduce_scatter_mean_f32(&D, dbuf, total);
        to_host(buf, dbuf, total);
        device_free(TEST_DEV, dbuf);
        for (int64_t i = s; i < e; i++)
            if (buf[i] != (value_of(0, i) + value_of(1, i)) / 2.0f) bad_rs++;
        /* All-gather: own shard holds 1000 * rank + i, the rest garbage. */
        for (int64_t i = 0; i < total; i++) buf[i] = (i >= s && i < e) ? (float)(1000 * D.rank + i) : -7.0f;
        dbuf = to_dev(buf, total);
        dist_all_gather_f32(&D, dbuf, total);
        to_host(buf, dbuf, total);
        device_free(TEST_DEV, dbuf);
        for (int r = 0; r < D.world; r++) {
            int64_t rs, re;
            dist_shard_range(total, r, D.world, &rs, &re);
            for (int64_t i = rs; i < re; i++)
                if (buf[i] != (float)(1000 * r + i)) bad_ag++;
        }
        free(buf);
    }
    bad_rs = (int)dist_sum_i64(&D, bad_rs);
    bad_ag = (int)dist_sum_i64(&D, bad_ag);
    ck_assert_int_eq(bad_rs, 0);
    ck_assert_int_eq(bad_ag, 0);
}
END_TEST

START_TEST(host_scalars_gather_broadcast) {
    double s = dist_sum_double(&D, D.rank + 1.5);
    double m = dist_mean_double(&D, D.rank + 1.5);
    double mx = dist_max_double(&D, D.rank == 1 ? -3.0 : -4.0);
    int64_t si = dist_sum_i64(&D, (int64_t)1 << 40);
    int64_t total = 200, st, en;
    dist_shard_range(total, D.rank, D.world, &st, &en);
    float shard[200], full[200] = {0};
    for (int64_t i = st; i < en; i++) shard[i - st] = (float)i * 2;
    dist_gather_to_root_f32(&D, shard, full, total);
    char msg[32] = {0};
    if (D.rank == 0) snprintf(msg, sizeof msg, "hello from 0");
    dist_broadcast_bytes(&D, msg, sizeof msg);
    dist_barrier(&D);
    ck_assert_double_eq(s, 4.0);
    ck_assert_double_eq(m, 2.0);
    ck_assert_double_eq(mx, -3.0);
    ck_assert_int_eq(si, (int64_t)1 << 41);
    if (D.rank == 0)
        for (int i = 0; i < 200; i++) ck_assert_float_eq(full[i], (float)i * 2);
    ck_assert_str_eq(msg, "hello from 0");
}
END_TEST

/* ---- ZeRO-1 against plain data parallel ------------------------------------------------------------- */

typedef struct Replica {
    ParamStore ps;
    Optimizer opt;
    int zero;
} Replica;

static void build(Replica *m, int zero) {
    m->zero = zero;
    params_init_store(&m->ps, G);
    param_new(&m->ps, "emb", SHAPE(33, 8), true, INIT_NORMAL, 0.5, 0);
    params_begin_bucket(&m->ps);
    param_new(&m->ps, "l0.w", SHAPE(8, 8), true, INIT_NORMAL, 0.5, 0);
    param_new(&m->ps, "l0.b", SHAPE(8), false, INIT_UNIFORM, -1, 1);
    params_begin_bucket(&m->ps);
    param_new(&m->ps, "l1.w", SHAPE(8, 17), true, INIT_NORMAL, 0.5, 0);
    param_new(&m->ps, "norm", SHAPE(8), false, INIT_ONES, 0, 0);
    params_allocate(&m->ps);
    params_initialize(&m->ps, 2024); /* the same on every rank */
    int64_t s = 0, e = m->ps.total;
    if (zero == 1) dist_shard_range(m->ps.total, D.rank, D.world, &s, &e);
    AdamWConfig cfg = adamw_default_config();
    cfg.grad_clip = 1.0;
    optim_init(&m->opt, &m->ps, cfg, s, e);
}

static void free_model(Replica *m) {
    optim_free(&m->opt);
    params_free_store(&m->ps); /* the flat buffers stay in G's persist arena until the end */
}

/* Rank- and step-dependent gradients (padding stays zero). */
static void fake_backward(Replica *m, int step) {
    params_zero_grad(&m->ps);
    Rng rng;
    rng_seed(&rng, 77 + 1000 * (uint64_t)step + (uint64_t)D.rank);
    float *g = (float *)xcalloc((size_t)m->ps.total, sizeof(float));
    for (int i = 0; i < m->ps.n; i++) {
        ParamInfo *p = &m->ps.items[i];
        for (int64_t j = 0; j < p->t->numel; j++) g[p->offset + j] = (float)rng_normal(&rng);
    }
    device_memcpy(m->ps.flat_grads, TEST_DEV, g, DEV_CPU, (size_t)m->ps.total * sizeof(float));
    device_synchronize(TEST_DEV);
    free(g);
}

static double train_step(Replica *m, int step) {
    fake_backward(m, step);
    dist_sync_grads(&D, &m->ps, m->zero);
    double norm = optim_step(&m->opt, 1e-2, 1.0, &D);
    dist_sync_params(&D, &m->ps, m->zero);
    return norm;
}

static double max_rel_diff(const float *a, const float *b, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (1e-6 + fabs((double)b[i]));
        if (d > worst) worst = d;
    }
    return worst;
}

START_TEST(zero1_equals_plain_data_parallel) {
    Replica z0, z1;
    build(&z0, 0);
    build(&z1, 1);
    double worst_norm = 0;
    for (int step = 0; step < 4; step++) {
        double n0 = train_step(&z0, step), n1 = train_step(&z1, step);
        worst_norm = fmax(worst_norm, fabs(n0 - n1) / n0);
    }
    /* Norm > clip here, so the global (cross-shard) norm decides every update. */
    int64_t total = z0.ps.total, s = z1.opt.shard_start, n = z1.opt.shard_end - s;
    float *p0 = host_copy(z0.ps.flat_params, total), *p1 = host_copy(z1.ps.flat_params, total);
    float *m0 = host_copy(z0.opt.m, total), *v0 = host_copy(z0.opt.v, total);
    float *m1 = host_copy(z1.opt.m, n), *v1 = host_copy(z1.opt.v, n);
    double worst = max_rel_diff(p1, p0, total);
    double worst_m = max_rel_diff(m1, m0 + s, n), worst_v = max_rel_diff(v1, v0 + s, n);
    double last_clip = z0.opt.last_clip;
    /* The replicas agree with each other: rank 0's parameters equal rank 1's. */
    float *other = (float *)xmalloc((size_t)total * sizeof(float));
    memcpy(other, p1, (size_t)total * sizeof(float));
    dist_broadcast_bytes(&D, other, total * (int64_t)sizeof(float));
    int replicas_differ = memcmp(other, p1, (size_t)total * sizeof(float)) != 0;
    replicas_differ = (int)dist_sum_i64(&D, replicas_differ);
    ck_assert_msg(last_clip < 1.0, "the test should exercise clipping (clip factor %g)", last_clip);
    ck_assert_msg(worst_norm < 1e-12, "grad norms differ by %.3e (relative)", worst_norm);
    ck_assert_msg(worst < 1e-6, "ZeRO-1 parameters differ from ZeRO-0 by %.3e (relative)", worst);
    ck_assert_msg(worst_m < 1e-6 && worst_v < 1e-6, "moments differ: m %.3e v %.3e", worst_m, worst_v);
    ck_assert_int_eq(replicas_differ, 0);
    ck_assert(z1.opt.sharded && !z0.opt.sharded);
    free(other);
    free(p0), free(p1), free(m0), free(v0), free(m1), free(v1);
    free_model(&z0);
    free_model(&z1);
}
END_TEST

START_TEST(checkpoint_under_zero1_holds_full_state) {
    Replica z0, z1;
    build(&z0, 0);
    build(&z1, 1);
    for (int step = 0; step < 3; step++) {
        train_step(&z0, step);
        train_step(&z1, step);
    }
    char dir[128] = {0};
    if (D.rank == 0) {
        snprintf(dir, sizeof dir, "/tmp/gdp_dist_XXXXXX");
        if (!mkdtemp(dir)) dir[0] = '\0';
    }
    dist_broadcast_bytes(&D, dir, sizeof dir);
    CheckpointMeta meta = {.step = 3, .config = "zero = 1\n", .zero_stage = 1};
    char *path = checkpoint_save(dir, &z1.ps, &z1.opt, &meta, 2, &D);
    int have_path = path != NULL;
    free(path);
    char p[256];
    checkpoint_path(p, sizeof p, dir, 3);
    /* Into a non-sharded optimizer: the full gathered state, as ZeRO-0 has it. */
    Replica full, shard;
    build(&full, 0);
    build(&shard, 1);
    CheckpointInfo info;
    checkpoint_load(p, &full.ps, &full.opt, &info);
    checkpoint_load(p, &shard.ps, &shard.opt, NULL);
    int64_t total = z0.ps.total, n = z1.opt.shard_end - z1.opt.shard_start;
    float *hp[3] = {host_copy(full.ps.flat_params, total), host_copy(full.opt.m, total), host_copy(full.opt.v, total)};
    float *zp[3] = {host_copy(z0.ps.flat_params, total), host_copy(z0.opt.m, total), host_copy(z0.opt.v, total)};
    float *sp[3] = {host_copy(shard.ps.flat_params, total), host_copy(shard.opt.m, n), host_copy(shard.opt.v, n)};
    float *z1p[3] = {host_copy(z1.ps.flat_params, total), host_copy(z1.opt.m, n), host_copy(z1.opt.v, n)};
    double wp = max_rel_diff(hp[0], zp[0], total), wm = max_rel_diff(hp[1], zp[1], total),
           wv = max_rel_diff(hp[2], zp[2], total);
    int shard_same = !memcmp(sp[1], z1p[1], (size_t)n * 4) && !memcmp(sp[2], z1p[2], (size_t)n * 4) &&
                     !memcmp(sp[0], z1p[0], (size_t)total * 4);
    for (int k = 0; k < 3; k++) free(hp[k]), free(zp[k]), free(sp[k]), free(z1p[k]);
    int all_same = (int)dist_sum_i64(&D, shard_same);
    dist_barrier(&D);
    remove_on_root(&D, dir);
    ck_assert(dir[0]);
    ck_assert_int_eq(have_path, D.rank == 0);
    ck_assert_int_eq(info.world_size, 2);
    ck_assert_int_eq(info.zero_stage, 1);
    ck_assert_int_eq(info.optim_steps, 3);
    ck_assert_int_eq(full.opt.t, 3);
    ck_assert_msg(wp < 1e-6 && wm < 1e-6 && wv < 1e-6, "loaded state differs from ZeRO-0: p %.3e m %.3e v %.3e", wp,
                  wm, wv);
    ck_assert_int_eq(all_same, 2);
    checkpoint_info_free(&info);
    free_model(&full);
    free_model(&shard);
    free_model(&z0);
    free_model(&z1);
}
END_TEST

/* ---- gradient buckets reduced during backward ------------------------------------------------------- */

/* The tiny model with a small vocabulary on G: 4 groups (embeddings, 2 blocks, final norm). */
static ModelConfig bucket_model_config(void) {
    ModelConfig cfg;
    ck_assert(model_config_preset(&cfg, "tiny"));
    cfg.vocab_size = 64;
    return cfg;
}

/* One micro-step on this rank's own tokens (B = 2, T = 16): forward, loss, backward, reset. */
static void micro_step(Model *m, int micro) {
    enum { B = 2, T = 16 };
    int32_t in[B * T], tg[B * T];
    Rng rng;
    rng_seed(&rng, 5 + 100 * (uint64_t)D.rank + (uint64_t)micro);
    for (int i = 0; i < B * T; i++) in[i] = (int32_t)rng_below(&rng, 64), tg[i] = (int32_t)rng_below(&rng, 64);
    Tensor *loss = model_loss_host(m, in, tg, B, T);
    tape_backward(m->ctx, loss);
    ctx_step_reset(m->ctx);
}

/* Two micro-steps (gradient accumulation), the buckets armed for the second only, against the same
 * two micro-steps and dist_sync_grads after backward: the reduced gradients must be identical (bit
 * for bit on the CPU, where the kernels are deterministic), every bucket must have started during
 * the backward walk, and the first (last layers) strictly before the walk reached node 0. */
static void check_buckets_during_backward(int zero) {
    ModelConfig cfg = bucket_model_config();
    Model m;
    ParamStore ps;
    model_create(&m, &cfg, G, &ps, 11);
    int64_t total = ps.total, s = 0, e = total;
    if (zero == 1) dist_shard_range(total, D.rank, D.world, &s, &e);
    /* reference: reduction after backward */
    params_zero_grad(&ps);
    micro_step(&m, 0);
    micro_step(&m, 1);
    dist_sync_grads(&D, &ps, zero);
    float *want = host_copy(ps.flat_grads, total);
    /* buckets of 0.01 MiB = 2622 floats: [final norm + block 1], [block 0], [embeddings] */
    DistBuckets gb;
    dist_buckets_init(&gb, &D, &ps, zero, 0.01);
    params_zero_grad(&ps);
    micro_step(&m, 0);
    dist_buckets_arm(&gb);
    micro_step(&m, 1);
    int n = gb.n, started_in_walk = 0, ordered = 1, first_at = n > 0 ? gb.launched_at[0] : -1,
        last_at = n > 0 ? gb.launched_at[n - 1] : -1;
    for (int k = 0; k < n; k++) {
        started_in_walk += gb.launched_at[k] >= 0;
        if (k > 0 && gb.launched_at[k] > gb.launched_at[k - 1]) ordered = 0;
    }
    dist_buckets_sync(&gb);
    bool unhooked = G->tape.hook == NULL;
    float *got = host_copy(ps.flat_grads, total);
    double worst = max_rel_diff(got + s, want + s, e - s);
    int same = memcmp(got + s, want + s, (size_t)(e - s) * sizeof(float)) == 0;
    int all_same = (int)dist_sum_i64(&D, same);
    dist_buckets_free(&gb);
    free(want), free(got);
    model_free(&m);
    params_free_store(&ps);
    ck_assert_msg(n == 3, "expected 3 buckets, got %d", n);
    ck_assert_msg(started_in_walk == n, "only %d of %d buckets started during backward", started_in_walk, n);
    ck_assert_msg(ordered, "buckets started out of order");
    ck_assert_msg(first_at > last_at && first_at > 0,
                  "the first bucket started after node %d, the last after node %d: no overlap with backward",
                  first_at, last_at);
    ck_assert(unhooked);
    if (TEST_DEV == DEV_CPU)
        ck_assert_msg(all_same == D.world, "bucketed gradients differ from dist_sync_grads's (worst rel %.3e)", worst);
    else
        ck_assert_msg(worst < 1e-5, "bucketed gradients differ from dist_sync_grads's by %.3e (relative)", worst);
}

START_TEST(buckets_during_backward_equal_sync_after) { check_buckets_during_backward(0); }
END_TEST

START_TEST(buckets_during_backward_equal_sync_after_zero1) { check_buckets_during_backward(1); }
END_TEST

/* The trainer: 2 ranks with buckets (several) against 2 ranks with one reduction after backward
 * (--bucket-mb 0), ZeRO 0 and 1: the final weights are bit-identical. Always on the CPU (a copy of
 * D without NCCL), with 2 micro-steps per step. */
START_TEST(trainer_bucketed_weights_bit_identical) {
    char dir[128] = {0};
    if (D.rank == 0) {
        snprintf(dir, sizeof dir, "/tmp/gdp_dist_buckets_XXXXXX");
        if (!mkdtemp(dir)) dir[0] = '\0';
        else {
            char path[256];
            snprintf(path, sizeof path, "%s/text.txt", dir);
            FILE *f = fopen(path, "w");
            for (int i = 0; f && i < 400; i++) fprintf(f, "line %d: the quick brown fox %d jumps over %d dogs\n", i, i * 7, i % 13);
            if (f) fclose(f);
        }
    }
    dist_broadcast_bytes(&D, dir, sizeof dir);
    Dist d = D;
    d.nccl_comm = d.nccl_stream = d.nccl_event = NULL;
    d.ctx = NULL, d.device = DEV_CPU;
    char text[256], out[4][256];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    const double mb[2] = {0, 0.01};
    double last_loss[4];
    for (int r = 0; r < 4; r++) {
        snprintf(out[r], sizeof out[r], "%s/run%d", dir, r);
        if (D.rank == 0) mkdir(out[r], 0777);
        dist_barrier(&D);
        TrainOptions o = train_default_options();
        o.data = text, o.device = "cpu", o.steps = 6, o.batch = 2, o.seq = 16, o.grad_accum = 2, o.lr = 3e-3;
        o.eval_every = 0, o.quiet = true, o.seed = 4, o.out = out[r], o.zero_stage = r / 2, o.bucket_mb = mb[r % 2];
        TrainResult res;
        train_run(&o, &d, &res);
        last_loss[r] = res.last_loss;
    }
    /* rank 0 compares the checkpoints' parameters */
    int same[2] = {1, 1};
    if (D.rank == 0)
        for (int z = 0; z < 2; z++) {
            float *p[2];
            int64_t tot = 0;
            for (int k = 0; k < 2; k++) {
                Model m;
                ParamStore ps;
                char *ck = train_resolve_checkpoint(out[2 * z + k], "--checkpoint");
                Ctx *c = train_load_model(ck, DEV_CPU, 1, 1, &m, &ps);
                tot = ps.total;
                p[k] = (float *)xmalloc((size_t)tot * sizeof(float));
                memcpy(p[k], ps.flat_params, (size_t)tot * sizeof(float));
                free(ck);
                model_free(&m);
                params_free_store(&ps);
                ctx_destroy(c);
            }
            same[z] = memcmp(p[0], p[1], (size_t)tot * sizeof(float)) == 0;
            free(p[0]), free(p[1]);
        }
    dist_broadcast_bytes(&D, same, sizeof same);
    dist_barrier(&D);
    remove_on_root(&D, dir);
    ck_assert(dir[0]);
    ck_assert_msg(same[0], "ZeRO-0: bucketed and unbucketed 2-rank runs end with different weights");
    ck_assert_msg(same[1], "ZeRO-1: bucketed and unbucketed 2-rank runs end with different weights");
    ck_assert(last_loss[0] == last_loss[1] && last_loss[2] == last_loss[3]);
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("dist_mpi");
    TCase *tc = tcase_create("dist");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, ranks_and_world);
    tcase_add_test(tc, allreduce_mean_and_sum);
    tcase_add_test(tc, reduce_scatter_and_all_gather);
    tcase_add_test(tc, host_scalars_gather_broadcast);
    tcase_add_test(tc, zero1_equals_plain_data_parallel);
    tcase_add_test(tc, checkpoint_under_zero1_holds_full_state);
    tcase_add_test(tc, buckets_during_backward_equal_sync_after);
    tcase_add_test(tc, buckets_during_backward_equal_sync_after_zero1);
    tcase_add_test(tc, trainer_bucketed_weights_bit_identical);
    suite_add_tcase(s, tc);
    return s;
}

/* ---- launcher ---------------------------------------------------------------------------------------- */

static int run_mpirun(const char *exe, const char *extra_arg, char *out, size_t out_len) {
    /* Open MPI never frees some of its own allocations: under AddressSanitizer (make test-asan)
     * the ranks run without leak checking, the other ASan checks stay on. */
    const char *asan = getenv("ASAN_OPTIONS");
    char cmd[PATH_MAX + 1024];
    snprintf(cmd, sizeof cmd,
             "mpirun --allow-run-as-root --oversubscribe -np 2 --timeout 300 "
             "--mca btl_vader_single_copy_mechanism none -x CK_FORK=no -x GDP_DIST_TEST_CHILD=1 "
             "-x 'ASAN_OPTIONS=%.400s%sdetect_leaks=0' '%s' %s 2>&1",
             asan ? asan : "", asan && asan[0] ? ":" : "", exe, extra_arg);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t got = 0;
    char line[1024];
    while (fgets(line, sizeof line, p)) {
        if (!out) fputs(line, stdout);
        else {
            size_t n = strlen(line);
            if (got + n < out_len) {
                memcpy(out + got, line, n);
                got += n;
                out[got] = '\0';
            }
        }
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int main(int argc, char **argv) {
    if (!getenv("GDP_DIST_TEST_CHILD")) {
        if (system("command -v mpirun >/dev/null 2>&1") != 0) {
            fprintf(stderr, "test_dist_mpi: mpirun not found: install Open MPI (openmpi-bin; scripts/install_deps.sh)\n");
            return 1;
        }
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) {
            perror("readlink /proc/self/exe");
            return 1;
        }
        exe[n] = '\0';
        printf("test_dist_mpi: running the suite on 2 ranks under mpirun\n");
        fflush(stdout);
        bool cuda = argc > 1 && !strcmp(argv[1], "--cuda");
        int rc = run_mpirun(exe, cuda ? "--cuda" : "", NULL, 0);
        /* dist_abort on one rank must end both, with a message naming the rank, while the
         * other waits in a barrier. */
        static char out[65536];
        int rc_abort = run_mpirun(exe, "--abort-case", out, sizeof out);
        bool abort_ok = rc_abort != 0 && strstr(out, "gdp: error: rank 1 of 2: deliberate abort for the test") &&
                        !strstr(out, "rank 0 passed the barrier");
        printf("dist_abort case: mpirun exit %d, %s\n", rc_abort, abort_ok ? "both ranks ended with the message" : "FAILED");
        if (!abort_ok) printf("---- output ----\n%s\n----\n", out);
        return rc == 0 && abort_ok ? 0 : 1;
    }
    dist_init(&D, &argc, &argv);
    if (argc > 1 && !strcmp(argv[1], "--abort-case")) {
        if (D.rank == 1) {
            sleep(1);
            dist_abort(&D, "deliberate abort for the test");
        }
        dist_barrier(&D);
        printf("rank 0 passed the barrier\n");
        dist_finalize(&D);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--cuda")) TEST_DEV = DEV_CUDA;
    if (TEST_DEV == DEV_CUDA && !gdp_cuda_available())
        dist_abort(&D, "--cuda: no CUDA GPU visible to this rank (this build %s CUDA)",
                   gdp_built_with_cuda() ? "has" : "lacks");
    G = ctx_create(TEST_DEV, ctx_default_sizes());
    dist_attach(&D, G);
    if (D.rank == 0) printf("device: %s\n", device_name(TEST_DEV));
    SRunner *sr = srunner_create(make_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, D.rank == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr);
    if (D.rank != 0 && failed) {
        TestResult **tr = srunner_failures(sr);
        for (int i = 0; i < failed; i++)
            fprintf(stderr, "rank %d: %s:%d: %s: %s\n", D.rank, tr_lfile(tr[i]), tr_lno(tr[i]), tr_tcname(tr[i]),
                    tr_msg(tr[i]));
        free(tr);
    }
    srunner_free(sr);
    int64_t total_failed = dist_sum_i64(&D, failed);
    if (D.rank == 0) printf("dist tests: %lld failures over %d ranks\n", (long long)total_failed, D.world);
    dist_finalize(&D); /* NCCL before the context it was attached to */
    ctx_destroy(G);
    return total_failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
