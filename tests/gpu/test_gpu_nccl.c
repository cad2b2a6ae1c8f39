/* The NCCL path on a machine with one GPU: Dist.force_nccl gives a communicator of one rank, so
 * every device collective, the gradient buckets reduced during backward, ZeRO-1's reduce-scatter
 * and all-gather and the trainer run through NCCL as they do on several GPUs (over one rank a mean
 * is the value itself, which makes the results checkable exactly). Then the watchdog: an injected
 * asynchronous NCCL error in an all-reduce and in the gradient buckets, and a stream stalled past
 * timeout_s, must each end the process with exit 1 and a message naming the rank and the cause.
 *
 * Run directly (make test-gpu) it re-runs itself as `mpirun -np 1 EXE --child` for the tests and
 * once per watchdog case (those end their process); without mpirun it says the test is skipped. */
#include <limits.h>
#include <math.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/params.h"
#include "layers/model.h"
#include "tests/gpu/gpu_test.h"
#include "train/checkpoint.h"
#include "train/dist.h"
#include "train/train.h"

static Dist D;  /* the child's Dist: mpirun's world of 1, NCCL forced, attached to G */
static Ctx *G;

static float value_of(int64_t i) { return (float)(0.5 + 0.001 * (double)(i % 997)); }

static float *to_dev(const float *h, int64_t n) {
    float *d = (float *)device_malloc(DEV_CUDA, (size_t)n * sizeof(float));
    device_memcpy(d, DEV_CUDA, h, DEV_CPU, (size_t)n * sizeof(float));
    device_synchronize(DEV_CUDA);
    return d;
}

static float *host_copy(const float *d, int64_t n) {
    float *h = (float *)xmalloc((size_t)GDP_MAX(n, 1) * sizeof(float));
    ctx_synchronize(G);
    device_memcpy(h, DEV_CPU, d, DEV_CUDA, (size_t)n * sizeof(float));
    return h;
}

static double max_rel_diff(const float *a, const float *b, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (1e-6 + fabs((double)b[i]));
        if (d > worst) worst = d;
    }
    return worst;
}

/* All-reduce (mean and sum), reduce-scatter and all-gather of device buffers: each one NCCL call
 * (nccl_ops counts them), each giving back its input over one rank. */
GPU_TEST(collectives_run_through_nccl) {
    GPU_EXPECT(D.nccl_comm != NULL, "force_nccl: dist_attach made no communicator");
    int64_t ns[3] = {1, 1000, 70001};
    for (int k = 0; k < 3; k++) {
        int64_t n = ns[k], ops = D.nccl_ops;
        float *h = (float *)xmalloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) h[i] = value_of(i);
        float *d = to_dev(h, n);
        dist_allreduce_mean_f32(&D, d, n);
        dist_allreduce_sum_f32(&D, d, n);
        dist_reduce_scatter_mean_f32(&D, d, n);
        dist_all_gather_f32(&D, d, n);
        float *got = host_copy(d, n);
        GPU_EXPECT(!memcmp(got, h, (size_t)n * sizeof(float)), "n %lld: the collectives changed the values",
                   (long long)n);
        GPU_EXPECT(D.nccl_ops - ops == 4, "n %lld: %lld NCCL collectives ran, expected 4", (long long)n,
                   (long long)(D.nccl_ops - ops));
        device_free(DEV_CUDA, d);
        free(h), free(got);
    }
}

/* One micro-step of the tiny model on fixed tokens (B = 2, T = 16): forward, loss, backward. */
static void micro_step(Model *m, int micro) {
    enum { B = 2, T = 16 };
    int32_t in[B * T], tg[B * T];
    Rng rng;
    rng_seed(&rng, 5 + (uint64_t)micro);
    for (int i = 0; i < B * T; i++) in[i] = (int32_t)rng_below(&rng, 64), tg[i] = (int32_t)rng_below(&rng, 64);
    Tensor *loss = model_loss_host(m, in, tg, B, T);
    tape_backward(m->ctx, loss);
    ctx_step_reset(m->ctx);
}

/* Two micro-steps, the buckets armed for the second: 3 buckets of 0.01 MiB, each started through
 * NCCL during the backward walk (an all-reduce, or under ZeRO-1 grouped ncclReduce to the shard
 * owners), give the gradients of the same micro-steps without any reduction; under ZeRO-1 the
 * all-gather of the parameters then leaves them as they were. */
GPU_TEST(buckets_and_zero1_through_nccl) {
    for (int zero = 0; zero < 2; zero++) {
        ModelConfig cfg;
        GPU_EXPECT(model_config_preset(&cfg, "tiny"), "no tiny preset");
        cfg.vocab_size = 64;
        Model m;
        ParamStore ps;
        model_create(&m, &cfg, G, &ps, 11);
        int64_t total = ps.total;
        params_zero_grad(&ps);
        micro_step(&m, 0);
        micro_step(&m, 1);
        float *want = host_copy(ps.flat_grads, total), *params = host_copy(ps.flat_params, total);
        DistBuckets gb;
        dist_buckets_init(&gb, &D, &ps, zero, 0.01);
        params_zero_grad(&ps);
        micro_step(&m, 0);
        dist_buckets_arm(&gb);
        int64_t ops = D.nccl_ops;
        micro_step(&m, 1);
        int in_walk = 0;
        for (int k = 0; k < gb.n; k++) in_walk += gb.launched_at[k] >= 0;
        int64_t started_in_backward = D.nccl_ops - ops;
        dist_buckets_sync(&gb);
        float *got = host_copy(ps.flat_grads, total);
        double worst = max_rel_diff(got, want, total);
        GPU_EXPECT(gb.n == 3, "zero %d: %d buckets, expected 3", zero, gb.n);
        GPU_EXPECT(in_walk == gb.n && started_in_backward == gb.n,
                   "zero %d: %d of %d buckets started during backward, %lld NCCL calls", zero, in_walk, gb.n,
                   (long long)started_in_backward);
        /* over one rank the reduction is the identity: any difference is the backward's own (none
         * where its kernels are deterministic) */
        GPU_EXPECT(worst < 1e-5, "zero %d: the bucketed gradients differ from unreduced ones by %.3e", zero, worst);
        printf("   zero %d: %d buckets through NCCL during backward, gradients %s\n", zero, gb.n,
               worst == 0 ? "bit-identical" : "within 1e-5");
        ops = D.nccl_ops;
        dist_sync_params(&D, &ps, zero);
        float *after = host_copy(ps.flat_params, total);
        GPU_EXPECT(D.nccl_ops - ops == zero, "zero %d: %lld NCCL all-gathers of the parameters, expected %d", zero,
                   (long long)(D.nccl_ops - ops), zero);
        GPU_EXPECT(!memcmp(after, params, (size_t)total * sizeof(float)), "zero %d: the all-gather changed parameters",
                   zero);
        dist_buckets_free(&gb);
        free(want), free(params), free(got), free(after);
        model_free(&m);
        params_free_store(&ps);
    }
}

/* Parameters of a checkpoint (CPU copy). */
static float *ckpt_params(const char *path, int64_t *n) {
    Model m;
    ParamStore ps;
    Ctx *ctx = train_load_model(path, DEV_CPU, 1, 1, &m, &ps);
    float *p = (float *)xmalloc((size_t)ps.total * sizeof(float));
    memcpy(p, ps.flat_params, (size_t)ps.total * sizeof(float));
    *n = ps.total;
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
    return p;
}

/* The trainer with NCCL forced (one reduction after backward; buckets; buckets and ZeRO-1) against
 * the trainer without collectives: the same losses and final parameters. */
GPU_TEST(trainer_through_nccl_equals_plain) {
    static const char corpus[] = "/tmp/gdp_nccl_corpus.txt";
    GPU_EXPECT(system("cat README.md docs/*.md > /tmp/gdp_nccl_corpus.txt") == 0,
               "could not write the corpus (run from the repository root)");
    char dir[] = "/tmp/gdp_gpu_nccl_XXXXXX";
    GPU_EXPECT(mkdtemp(dir) != NULL, "mkdtemp failed");
    const int zero[4] = {0, 0, 0, 1};
    const double mb[4] = {0, 0, 0.01, 0.01};
    TrainResult res[4];
    float *p[4];
    int64_t n[4], ops[4];
    for (int r = 0; r < 4; r++) { /* run 0 without NCCL, the others through it */
        char out[256];
        snprintf(out, sizeof out, "%s/run%d", dir, r);
        TrainOptions o = train_default_options();
        o.data = corpus, o.device = "cuda", o.out = out, o.keep = 1;
        o.batch = 4, o.seq = 64, o.steps = 6, o.lr = 3e-3, o.warmup = 2, o.grad_accum = 2;
        o.eval_every = 0, o.quiet = true, o.seed = 9, o.zero_stage = zero[r], o.bucket_mb = mb[r];
        Dist d;
        if (r == 0) dist_init_single(&d);
        else d = D; /* D's communicator, its own counter */
        d.nccl_ops = 0;
        train_run(&o, &d, &res[r]);
        ops[r] = d.nccl_ops;
        p[r] = ckpt_params(res[r].checkpoint, &n[r]);
    }
    for (int r = 1; r < 4; r++) {
        double worst = n[r] == n[0] ? max_rel_diff(p[r], p[0], n[0]) : INFINITY;
        GPU_EXPECT(worst < 1e-6 && fabs(res[r].last_loss - res[0].last_loss) <= 1e-6 * fabs(res[0].last_loss),
                   "run %d (zero %d, bucket-mb %g): parameters differ by %.3e, last loss %.9g vs %.9g", r, zero[r],
                   mb[r], worst, res[r].last_loss, res[0].last_loss);
        /* per step: the gradients (1 call, or one per bucket), and under ZeRO-1 the parameters */
        GPU_EXPECT(ops[r] >= 6 * (1 + zero[r]), "run %d: only %lld NCCL calls in 6 steps", r, (long long)ops[r]);
        printf("   zero %d, bucket-mb %g: %lld NCCL calls, parameters %s\n", zero[r], mb[r], (long long)ops[r],
               worst == 0 ? "bit-identical to the run without NCCL" : "within 1e-6 of the run without NCCL");
    }
    GPU_EXPECT(ops[0] == 0, "the run without force_nccl made %lld NCCL calls", (long long)ops[0]);
    for (int r = 0; r < 4; r++) free(p[r]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("   could not remove %s\n", dir);
}

/* ---- watchdog cases: each ends its process ------------------------------------------------------------ */

static int watchdog_case(const char *name) {
    if (!strcmp(name, "error-allreduce") || !strcmp(name, "stall")) {
        if (name[0] == 'e') D.inject_nccl_error = ncclRemoteError;
        else D.timeout_s = 1.0, D.inject_stall_s = 3.0;
        float *d = (float *)device_malloc(DEV_CUDA, 1024 * sizeof(float));
        dist_allreduce_mean_f32(&D, d, 1024);
    } else if (!strcmp(name, "error-buckets")) {
        ModelConfig cfg;
        if (!model_config_preset(&cfg, "tiny")) return 2;
        cfg.vocab_size = 64;
        Model m;
        ParamStore ps;
        model_create(&m, &cfg, G, &ps, 11);
        DistBuckets gb;
        dist_buckets_init(&gb, &D, &ps, 0, 0.01);
        D.inject_nccl_error = ncclRemoteError;
        dist_buckets_sync(&gb); /* no armed backward: all buckets start here */
    } else {
        fprintf(stderr, "%s:%d: unknown watchdog case '%s'\n", __FILE__, __LINE__, name);
        return 2;
    }
    printf("the collective returned\n");
    return 0;
}

/* ---- launcher ------------------------------------------------------------------------------------------ */

/* `mpirun -np 1 EXE --child ARG`: exit status, output (stdout and stderr) into out when not NULL. */
static int run_child(const char *exe, const char *arg, char *out, size_t out_len) {
    char cmd[PATH_MAX + 512];
    snprintf(cmd, sizeof cmd,
             "mpirun --allow-run-as-root --oversubscribe -np 1 --timeout 300 "
             "--mca btl_vader_single_copy_mechanism none '%s' --child %s 2>&1",
             exe, arg);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t got = 0;
    char line[1024];
    if (out) out[0] = '\0';
    while (fgets(line, sizeof line, p)) {
        if (!out) {
            fputs(line, stdout);
            continue;
        }
        size_t n = strlen(line);
        if (got + n < out_len) {
            memcpy(out + got, line, n + 1);
            got += n;
        }
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--child") != 0) {
        if (system("command -v mpirun >/dev/null 2>&1") != 0) {
            printf("test_gpu_nccl: skipped: mpirun not found (install Open MPI: openmpi-bin)\n");
            return 0;
        }
        if (!gdp_cuda_available()) {
            printf("test_gpu_nccl: skipped: no CUDA GPU visible\n");
            return 0;
        }
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) {
            perror("readlink /proc/self/exe");
            return 1;
        }
        exe[n] = '\0';
        printf("test_gpu_nccl: the tests under mpirun -np 1, NCCL forced\n");
        fflush(stdout);
        int rc = run_child(exe, "", NULL, 0);
        static const struct {
            const char *name, *want;
        } cases[3] = {
            {"error-allreduce", "gdp: error: rank 0 of 1: all-reduce: NCCL reported an asynchronous error"},
            {"error-buckets", "gdp: error: rank 0 of 1: gradient buckets: NCCL reported an asynchronous error"},
            {"stall", "gdp: error: rank 0 of 1: all-reduce: no progress for 1 s"},
        };
        int bad = 0;
        static char out[65536];
        for (int i = 0; i < 3; i++) {
            int crc = run_child(exe, cases[i].name, out, sizeof out);
            bool ok = crc != 0 && strstr(out, cases[i].want) && !strstr(out, "the collective returned");
            printf("watchdog, %s: exit %d, %s\n", cases[i].name, crc, ok ? "ended with the message" : "FAILED");
            if (!ok) printf("---- output (wanted '%s') ----\n%s----\n", cases[i].want, out), bad++;
        }
        return rc == 0 && bad == 0 ? 0 : 1;
    }
    dist_init(&D, &argc, &argv);
    if (!gdp_cuda_available()) dist_abort(&D, "no CUDA GPU visible (this test needs one)");
    G = ctx_create(DEV_CUDA, ctx_default_sizes());
    D.force_nccl = true;
    dist_attach(&D, G);
    int rc = argc > 2 ? watchdog_case(argv[2]) : gpu_test_run(1, argv);
    dist_finalize(&D); /* NCCL before the context it was attached to */
    ctx_destroy(G);
    return rc;
}
