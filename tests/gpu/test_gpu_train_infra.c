/* Training infrastructure on CUDA against the CPU path: parameter init and zero_grad, the
 * deterministic gradient norm, AdamW with decay and clipping, ZeRO-1 shard updates, an HDF5
 * checkpoint written from GPU memory, bf16 autocast training against f32 training, the model
 * with bf16 activations against the CPU float64 model, a NaN gradient step skipped on the GPU, and
 * exact resume after SIGTERM on the GPU (default and selective recompute). */
#include <math.h>
#include <signal.h>
#include <unistd.h>

#include "core/params.h"
#include "kernels/adamw.h"
#include "tests/gpu/gpu_test.h"
#include "train/checkpoint.h"
#include "tools/model_gradcheck.h"
#include "train/optim.h"
#include "train/train.h"

static void model(ParamStore *ps, Ctx *ctx) {
    params_init_store(ps, ctx);
    param_new(ps, "emb", SHAPE(1000, 37), true, INIT_NORMAL, 0.02, 0);
    params_begin_bucket(ps);
    param_new(ps, "l0.w", SHAPE(37, 129), true, INIT_UNIFORM, -0.1, 0.1);
    param_new(ps, "l0.b", SHAPE(129), false, INIT_ZEROS, 0, 0);
    param_new(ps, "norm", SHAPE(37), false, INIT_ONES, 0, 0);
    params_allocate(ps);
    params_initialize(ps, 31);
}

static float *host_of(const float *p, Device dev, int64_t n) {
    float *h = (float *)xmalloc((size_t)n * sizeof(float));
    device_synchronize(dev);
    device_memcpy(h, DEV_CPU, p, dev, (size_t)n * sizeof(float));
    return h;
}

static void set_grads(ParamStore *ps, int step) {
    params_zero_grad(ps);
    float *g = (float *)xcalloc((size_t)ps->total, sizeof(float));
    Rng rng;
    rng_seed(&rng, 500 + (uint64_t)step);
    for (int i = 0; i < ps->n; i++)
        for (int64_t j = 0; j < ps->items[i].t->numel; j++) g[ps->items[i].offset + j] = (float)rng_normal(&rng);
    device_memcpy(ps->flat_grads, ps->ctx->device, g, DEV_CPU, (size_t)ps->total * sizeof(float));
    device_synchronize(ps->ctx->device);
    free(g);
}

GPU_TEST(params_init_and_zero_grad_match_cpu) {
    Ctx *c = ctx_create(DEV_CPU, ctx_default_sizes()), *g = ctx_create(DEV_CUDA, ctx_default_sizes());
    ParamStore pc, pg;
    model(&pc, c);
    model(&pg, g);
    float *h = host_of(pg.flat_params, DEV_CUDA, pg.total);
    GPU_EXPECT(pc.total == pg.total && !memcmp(h, pc.flat_params, (size_t)pc.total * 4), "CUDA init differs from CPU");
    set_grads(&pg, 0);
    params_zero_grad(&pg);
    float *gr = host_of(pg.flat_grads, DEV_CUDA, pg.total);
    int nz = 0;
    for (int64_t i = 0; i < pg.total; i++) nz += gr[i] != 0;
    GPU_EXPECT(nz == 0, "%d gradient elements not zero after params_zero_grad", nz);
    free(h);
    free(gr);
    params_free_store(&pc);
    params_free_store(&pg);
    ctx_destroy(c);
    ctx_destroy(g);
}

GPU_TEST(grad_norm_deterministic_and_matches_cpu) {
    Ctx *g = ctx_create(DEV_CUDA, ctx_default_sizes());
    ParamStore ps;
    model(&ps, g);
    set_grads(&ps, 1);
    Optimizer opt;
    optim_init(&opt, &ps, adamw_default_config(), 0, ps.total);
    double a = optim_grad_sumsq(&opt, 0, ps.total), b = optim_grad_sumsq(&opt, 0, ps.total);
    float *h = host_of(ps.flat_grads, DEV_CUDA, ps.total);
    double want = grad_sumsq_cpu(h, ps.total);
    GPU_EXPECT(a == b, "two CUDA sums differ: %.17g vs %.17g", a, b);
    GPU_EXPECT(fabs(a - want) <= 1e-12 * want, "CUDA sumsq %.17g vs CPU %.17g", a, want);
    double part = optim_grad_sumsq(&opt, 64, 5000), wpart = grad_sumsq_cpu(h + 64, 5000 - 64);
    GPU_EXPECT(fabs(part - wpart) <= 1e-12 * wpart, "sub-range sumsq %.17g vs %.17g", part, wpart);
    free(h);
    optim_free(&opt);
    params_free_store(&ps);
    ctx_destroy(g);
}

GPU_TEST(adamw_matches_cpu_with_decay_clip_and_shard) {
    Ctx *c = ctx_create(DEV_CPU, ctx_default_sizes()), *g = ctx_create(DEV_CUDA, ctx_default_sizes());
    ParamStore pc, pg, psh;
    model(&pc, c);
    model(&pg, g);
    model(&psh, g);
    AdamWConfig cfg = adamw_default_config();
    cfg.grad_clip = 1.0; /* the norm of ~42k N(0,1) values is ~200: clipped */
    Optimizer oc, og, osh;
    optim_init(&oc, &pc, cfg, 0, pc.total);
    optim_init(&og, &pg, cfg, 0, pg.total);
    int64_t s0 = 64 * 300, s1 = 64 * 600; /* a shard cutting through "emb" */
    optim_init(&osh, &psh, cfg, s0, s1);
    for (int step = 0; step < 4; step++) {
        set_grads(&pc, step);
        set_grads(&pg, step);
        set_grads(&psh, step);
        double nc = optim_step(&oc, 1e-3 * (step + 1), 0.5, NULL);
        double ng = optim_step(&og, 1e-3 * (step + 1), 0.5, NULL);
        /* The shard's own norm would differ: clip with the full norm as the trainer would. */
        optim_update(&osh, 1e-3 * (step + 1), 0.5, ng);
        GPU_EXPECT(fabs(nc - ng) <= 1e-12 * nc, "step %d: norm cpu %.17g cuda %.17g", step, nc, ng);
    }
    float *hp = host_of(pg.flat_params, DEV_CUDA, pg.total), *hs = host_of(psh.flat_params, DEV_CUDA, psh.total);
    float *init = (float *)xmalloc((size_t)pc.total * sizeof(float));
    {
        ParamStore fresh;
        model(&fresh, c);
        memcpy(init, fresh.flat_params, (size_t)pc.total * sizeof(float));
        params_free_store(&fresh);
    }
    /* Elementwise relative error is meaningless for parameters that crossed zero; judge the
     * whole buffer (relative L2) and the largest absolute difference against the update size
     * (4 steps of lr <= 4e-3: a wrong formula moves parameters by ~1e-3, rounding by ~1e-9). */
    double num = 0, den = 0, worst_abs = 0;
    for (int64_t i = 0; i < pc.total; i++) {
        double d = (double)hp[i] - pc.flat_params[i];
        num += d * d, den += (double)pc.flat_params[i] * pc.flat_params[i];
        worst_abs = fmax(worst_abs, fabs(d));
    }
    double rel = sqrt(num / fmax(den, 1e-300));
    GPU_EXPECT(rel <= 1e-6 && worst_abs <= 1e-7, "CUDA AdamW differs from CPU: rel L2 %.3e, max abs %.3e", rel,
               worst_abs);
    printf("   AdamW cuda vs cpu: rel L2 %.3e, max abs diff %.3e\n", rel, worst_abs);
    int outside = 0, inside = 0;
    for (int64_t i = 0; i < psh.total; i++) {
        if (i < s0 || i >= s1) outside += hs[i] != init[i];
        else inside += hs[i] != hp[i];
    }
    GPU_EXPECT(outside == 0, "%d elements outside the shard moved", outside);
    GPU_EXPECT(inside == 0, "%d shard elements differ from the full CUDA update", inside);
    free(hp);
    free(hs);
    free(init);
    optim_free(&oc);
    optim_free(&og);
    optim_free(&osh);
    params_free_store(&pc);
    params_free_store(&pg);
    params_free_store(&psh);
    ctx_destroy(c);
    ctx_destroy(g);
}

GPU_TEST(checkpoint_from_gpu_loads_on_cpu) {
    Ctx *c = ctx_create(DEV_CPU, ctx_default_sizes()), *g = ctx_create(DEV_CUDA, ctx_default_sizes());
    ParamStore pg, pc;
    model(&pg, g);
    model(&pc, c);
    Optimizer og, oc;
    optim_init(&og, &pg, adamw_default_config(), 0, pg.total);
    optim_init(&oc, &pc, adamw_default_config(), 0, pc.total);
    set_grads(&pg, 3);
    optim_step(&og, 1e-2, 1.0, NULL);
    char dir[] = "/tmp/gdp_gpu_ckpt_XXXXXX";
    GPU_EXPECT(mkdtemp(dir) != NULL, "mkdtemp failed");
    CheckpointMeta meta = {.step = 1, .config = "x = 1\n"};
    char *path = checkpoint_save(dir, &pg, &og, &meta, 1, NULL);
    checkpoint_load(path, &pc, &oc, NULL);
    float *hp = host_of(pg.flat_params, DEV_CUDA, pg.total), *hm = host_of(og.m, DEV_CUDA, pg.total);
    GPU_EXPECT(!memcmp(hp, pc.flat_params, (size_t)pc.total * 4), "parameters differ after GPU save / CPU load");
    GPU_EXPECT(!memcmp(hm, oc.m, (size_t)pc.total * 4), "m differs after GPU save / CPU load");
    /* And back onto the GPU. */
    ParamStore pg2;
    model(&pg2, g);
    checkpoint_load(path, &pg2, NULL, NULL);
    float *hp2 = host_of(pg2.flat_params, DEV_CUDA, pg2.total);
    GPU_EXPECT(!memcmp(hp, hp2, (size_t)pc.total * 4), "parameters differ after a GPU load");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    GPU_EXPECT(system(cmd) == 0, "cleanup failed");
    free(path);
    free(hp);
    free(hm);
    free(hp2);
    optim_free(&og);
    optim_free(&oc);
    params_free_store(&pg);
    params_free_store(&pc);
    params_free_store(&pg2);
    ctx_destroy(c);
    ctx_destroy(g);
}

/* The repository's own text (README and docs) as a small byte corpus; the test runs from the root. */
static const char *autocast_corpus(void) {
    static char path[] = "/tmp/gdp_autocast_corpus.txt";
    return system("cat README.md docs/*.md > /tmp/gdp_autocast_corpus.txt") == 0 ? path : NULL;
}

/* Same seed, data and steps with and without bf16 autocast: the first loss agrees to bf16
 * rounding, both runs learn, and the final train and validation losses stay close. A wrong
 * autocast path (bad casts, missing gradient through them, f32 GEMM flags) breaks one of these. */
GPU_TEST(autocast_bf16_trains_like_f32) {
    const char *corpus = autocast_corpus();
    GPU_EXPECT(corpus != NULL, "could not write the corpus (run from the repository root)");
    if (!corpus) return;
    TrainResult r[4];
    const char *modes[4] = {"off", "bf16", "bf16", "bf16"}; /* run 2 with f32 activations, 3 recomputing */
    for (int i = 0; i < 4; i++) {
        TrainOptions o = train_default_options();
        o.data = corpus, o.device = "cuda", o.autocast = modes[i], o.f32_activations = i == 2;
        o.selective_recompute = i == 3;
        o.batch = 8, o.seq = 128, o.steps = 80, o.lr = 6e-3, o.warmup = 5;
        o.eval_every = 0, o.eval_batches = 8, o.quiet = true, o.seed = 3;
        Dist d;
        dist_init_single(&d);
        train_run(&o, &d, &r[i]);
        printf("   autocast %-4s%s: loss %.4f -> %.4f, val %.4f\n", modes[i],
               i == 2 ? " f32 activations" : i == 3 ? " selective recompute" : "",
               r[i].first_loss, r[i].last_loss,
               r[i].last_val_loss);
    }
    for (int i = 1; i < 3; i++) {
        GPU_EXPECT(fabs(r[i].first_loss - r[0].first_loss) < 0.02, "first loss f32 %.4f vs bf16 run %d %.4f",
                   r[0].first_loss, i, r[i].first_loss);
        GPU_EXPECT(fabs(r[i].last_val_loss - r[0].last_val_loss) < 0.15, "val loss f32 %.4f vs bf16 run %d %.4f",
                   r[0].last_val_loss, i, r[i].last_val_loss);
    }
    /* recomputation runs the same kernels on the same inputs: the same bits (run 1 keeps the GDP
     * op's saved forward for its backward, run 3 recomputes it) */
    GPU_EXPECT(r[3].first_loss == r[1].first_loss && r[3].last_loss == r[1].last_loss &&
                   r[3].last_val_loss == r[1].last_val_loss,
               "--selective-recompute: losses %.9g -> %.9g, val %.9g; without it %.9g -> %.9g, val %.9g", r[3].first_loss,
               r[3].last_loss, r[3].last_val_loss, r[1].first_loss, r[1].last_loss, r[1].last_val_loss);
    for (int i = 0; i < 3; i++)
        GPU_EXPECT(r[i].last_val_loss < r[i].first_loss - 1.5, "autocast %s (run %d) did not learn: %.4f -> val %.4f",
                   modes[i], i, r[i].first_loss, r[i].last_val_loss);
}

/* The tiny model on CUDA against the CPU float64 model, in both modes: in f32 to f32 rounding;
 * with bf16 activations an rms gradient error at most 2x that of bf16 autocast with f32 activations
 * (the same bf16 GEMMs and GDP op), every gradient within 0.25, and not exact (the bf16 path must
 * have run). On the H200 the rms was 5.6e-2 against 3.7e-2, the worst 0.14 (a dt_bias, a sum with
 * cancellation). Every parameter is compared, so one that loses its gradient (rel err 1) fails. */
GPU_TEST(bf16_activations_model_matches_cpu_f64) {
    ModelConfig cfg;
    GPU_EXPECT(model_config_preset(&cfg, "tiny"), "no tiny preset");
    cfg.initializer_range = 0.1;
    static const char *names[3] = {"f32", "autocast, f32 activations", "bf16 activations"};
    for (int mode = 0; mode < 2; mode++) {
        cfg.mode = mode ? GDP_MODE_SPLIT : GDP_MODE_HOUSEHOLDER;
        ModelVsCpu r[3];
        for (int p = 0; p < 3; p++) {
            model_vs_cpu(&cfg, 2, 80, 7, DEV_CUDA, (ModelPrecision)p, &r[p]);
            printf("   %-11s %-26s %d parameters, gradient rel err rms %.3e, worst %.3e (%s), loss %.3e\n",
                   mode ? "split" : "householder", names[p], r[p].n_checked, r[p].rms, r[p].worst, r[p].worst_label,
                   r[p].loss_rel_err);
            GPU_EXPECT(!isnan(r[p].worst), "%s: a parameter got no gradient", names[p]);
        }
        GPU_EXPECT(r[0].worst <= 1e-3, "f32: worst gradient rel err %.3e > 1e-3", r[0].worst);
        GPU_EXPECT(r[2].worst <= 0.25 && r[2].rms <= GDP_MAX(2e-2, 2 * r[1].rms),
                   "bf16 activations: gradient rel err worst %.3e, rms %.3e; autocast with f32 activations has %.3e, %.3e",
                   r[2].worst, r[2].rms, r[1].worst, r[1].rms);
        GPU_EXPECT(r[2].worst > 1e-5, "bf16 activations: rel err %.3e is f32-exact: the bf16 path did not run",
                   r[2].worst);
    }
}

/* Parameters of a checkpoint (CPU copy) and its update count. */
static float *ckpt_params(const char *path, int64_t *n, int64_t *optim_steps) {
    Model m;
    ParamStore ps;
    Ctx *ctx = train_load_model(path, DEV_CPU, 1, 1, &m, &ps);
    float *p = (float *)xmalloc((size_t)ps.total * sizeof(float));
    memcpy(p, ps.flat_params, (size_t)ps.total * sizeof(float));
    *n = ps.total;
    CheckpointInfo info;
    checkpoint_read_info(path, &info);
    *optim_steps = info.optim_steps;
    checkpoint_info_free(&info);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
    return p;
}

static TrainOptions fault_options(const char *corpus, const char *out, bool selective) {
    TrainOptions o = train_default_options();
    o.data = corpus, o.device = "cuda", o.out = out, o.keep = 0;
    o.selective_recompute = selective;
    o.batch = 4, o.seq = 64, o.steps = 12, o.lr = 3e-3, o.warmup = 2;
    o.eval_every = 0, o.quiet = true, o.seed = 9;
    return o;
}

/* A NaN in one gradient on the GPU (the test hook, after the all-reduce): that step is skipped
 * (checkpoints before and after it hold the same parameters and update count), later steps train,
 * and no checkpoint holds a NaN. */
GPU_TEST(nan_gradient_step_is_skipped_on_cuda) {
    const char *corpus = autocast_corpus();
    GPU_EXPECT(corpus != NULL, "could not write the corpus (run from the repository root)");
    if (!corpus) return;
    char dir[] = "/tmp/gdp_gpu_nan_XXXXXX";
    GPU_EXPECT(mkdtemp(dir) != NULL, "mkdtemp failed");
    TrainOptions o = fault_options(corpus, dir, false);
    o.steps = 8, o.checkpoint_every = 1;
    o.test_nan_grad_step = 3, o.test_nan_grad_count = 1, o.test_nan_grad_param = "model.layers.0.mlp_norm.weight";
    Dist d;
    dist_init_single(&d);
    TrainResult r;
    train_run(&o, &d, &r);
    GPU_EXPECT(r.skipped == 1 && r.steps_done == 8, "skipped %lld, steps %lld", (long long)r.skipped,
               (long long)r.steps_done);
    char p3[600], p4[600];
    checkpoint_path(p3, sizeof p3, dir, 3);
    checkpoint_path(p4, sizeof p4, dir, 4);
    int64_t n3, n4, n8, t3, t4, t8;
    float *a = ckpt_params(p3, &n3, &t3), *b = ckpt_params(p4, &n4, &t4), *c = ckpt_params(r.checkpoint, &n8, &t8);
    GPU_EXPECT(n3 == n4 && !memcmp(a, b, (size_t)n3 * sizeof(float)), "the skipped step changed the parameters");
    GPU_EXPECT(t3 == 3 && t4 == 3 && t8 == 7, "update counts %lld, %lld, %lld (want 3, 3, 7)", (long long)t3,
               (long long)t4, (long long)t8);
    int bad = 0;
    for (int64_t i = 0; i < n8; i++) bad += !isfinite(c[i]);
    GPU_EXPECT(bad == 0 && memcmp(b, c, (size_t)n8 * sizeof(float)), "%d non-finite parameters at the end", bad);
    free(a), free(b), free(c);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("   could not remove %s\n", dir);
}

/* Exact resume on CUDA (bf16 autocast, saved forward; and --selective-recompute): SIGTERM (the test
 * hook raises it as step 5 begins) ends the run after step 5 with a checkpoint; resuming to step 12
 * gives the uninterrupted run's parameters bit for bit. */
GPU_TEST(sigterm_resume_is_exact_on_cuda) {
    const char *corpus = autocast_corpus();
    GPU_EXPECT(corpus != NULL, "could not write the corpus (run from the repository root)");
    if (!corpus) return;
    for (int sel = 0; sel < 2; sel++) {
        char a[] = "/tmp/gdp_gpu_sig_a_XXXXXX", b[] = "/tmp/gdp_gpu_sig_b_XXXXXX";
        GPU_EXPECT(mkdtemp(a) && mkdtemp(b), "mkdtemp failed");
        Dist d;
        dist_init_single(&d);
        TrainOptions o = fault_options(corpus, a, sel);
        TrainResult ra, rb1, rb2;
        train_run(&o, &d, &ra);
        o = fault_options(corpus, b, sel);
        o.test_signal = SIGTERM, o.test_signal_step = 5;
        train_run(&o, &d, &rb1);
        GPU_EXPECT(rb1.stopped_by == SIGTERM && rb1.steps_done == 6, "stopped by %d after %lld steps", rb1.stopped_by,
                   (long long)rb1.steps_done);
        o = fault_options(corpus, b, sel);
        o.resume = b;
        train_run(&o, &d, &rb2);
        int64_t na, nb, ta, tb;
        float *pa = ckpt_params(ra.checkpoint, &na, &ta), *pb = ckpt_params(rb2.checkpoint, &nb, &tb);
        GPU_EXPECT(na == nb && ta == tb && !memcmp(pa, pb, (size_t)na * sizeof(float)) && ra.last_loss == rb2.last_loss,
                   "%s: resumed run differs (last loss %.9g vs %.9g)", sel ? "--selective-recompute" : "default",
                   ra.last_loss, rb2.last_loss);
        free(pa), free(pb);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", a, b);
        if (system(cmd) != 0) printf("   could not remove %s, %s\n", a, b);
    }
}

int main(void) { return gpu_test_main(); }
