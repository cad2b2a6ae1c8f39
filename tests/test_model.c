/* The Gated DeltaProduct model and its training loop on the CPU: config files and parameter counts,
 * whole-model gradients (f64), the GDP op's decode step at T = 1 against its chunked path (f64),
 * per-token decoding against the full forward, a tiny model learning
 * real text (this repository's own headers), exact resume, corrupt checkpoints, and the
 * classification head on a state-tracking task (running parity). */
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "core/gradcheck.h"
#include "core/ops/gdp.h"
#include "kernels/gdp/decode.h"
#include "kernels/sample.h"
#include "layers/decode.h"
#include "layers/model.h"
#include "layers/sampler.h"
#include "train/checkpoint.h"
#include "tools/model_gradcheck.h"
#include "train/train.h"
#include "tests/check_main.h"

/* ---- helpers -------------------------------------------------------------------------------------- */

/* A new folder under $TMPDIR (or /tmp), its path in buf. */
static char *tmpdir_new(char *buf, size_t len) {
    snprintf(buf, len, "%s/gdp_test_model_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_msg(mkdtemp(buf) != NULL, "mkdtemp failed");
    return buf;
}

static void rm_rf(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
}

/* Exit tests end inside gdp_fatal: remove their folder at exit. */
static char exit_dir[300];
static void remove_exit_dir(void) {
    if (exit_dir[0]) rm_rf(exit_dir);
}
static void remove_at_exit(const char *dir) {
    snprintf(exit_dir, sizeof exit_dir, "%s", dir);
    atexit(remove_exit_dir);
}

/* Real English-and-C text: the repository's own headers, concatenated (run from the repo root). */
static char corpus_path[400];
static const char *write_corpus(const char *dir) {
    static const char *patterns[] = {"base/*.h", "core/*.h", "core/ops/*.h", "layers/*.h", "train/*.h", "train/cli/*.h",
                                     "tools/*.h", "data/*.h", "kernels/*.h", "kernels/gdp/*.h"};
    char *path = corpus_path;
    snprintf(path, sizeof corpus_path, "%s/corpus.txt", dir);
    FILE *out = xfopen(path, "wb");
    size_t total = 0;
    for (size_t p = 0; p < GDP_ARRAY_LEN(patterns); p++) {
        glob_t g;
        if (glob(patterns[p], 0, NULL, &g) != 0) continue;
        for (size_t i = 0; i < g.gl_pathc; i++) {
            FILE *f = fopen(g.gl_pathv[i], "rb");
            if (!f) continue;
            char buf[8192];
            size_t n;
            while ((n = fread(buf, 1, sizeof buf, f)) > 0) total += fwrite(buf, 1, n, out);
            fclose(f);
        }
        globfree(&g);
    }
    fclose(out);
    ck_assert_msg(total > 50000, "only %zu bytes of headers found: run the test from the repository root", total);
    return path;
}

static TrainOptions quick_options(const char *data, const char *out) {
    TrainOptions o = train_default_options();
    o.data = data;
    o.out = out;
    o.batch = 4, o.seq = 32;
    o.lr = 3e-3, o.warmup = 5;
    o.eval_every = 0, o.eval_batches = 2;
    o.quiet = true;
    o.seed = 7;
    return o;
}

/* ---- config --------------------------------------------------------------------------------------- */

START_TEST(config_file_and_overrides) {
    ModelConfig c = model_config_default();
    char err[512];
    const char *text = "# a model\npreset = tiny\nhidden_size = 96  # wider\nmode = split\nuse_output_gate=false\n"
                       "tie_word_embeddings = True\nexpand_v = 2\n";
    ck_assert_msg(model_config_load_text(&c, text, "test", err, sizeof err), "%s", err);
    ck_assert_int_eq(c.hidden_size, 96);
    ck_assert_int_eq(c.num_hidden_layers, 2);
    ck_assert_int_eq(c.mode, GDP_MODE_SPLIT);
    ck_assert(!c.use_output_gate && c.tie_word_embeddings);
    ck_assert_int_eq(cfg_head_v_dim(&c), 64);
    /* round trip through the text form a checkpoint stores */
    char buf[4096];
    ck_assert(model_config_to_text(&c, buf, sizeof buf) > 0);
    ModelConfig d = model_config_default();
    ck_assert_msg(model_config_load_text(&d, buf, "roundtrip", err, sizeof err), "%s", err);
    ck_assert_mem_eq(&c, &d, sizeof c);
    /* errors name the key and the line */
    ck_assert(!model_config_load_text(&d, "hidden_size = 64\nnum_heds = 3\n", "f.cfg", err, sizeof err));
    ck_assert_msg(strstr(err, "f.cfg line 2") && strstr(err, "num_heds"), "%s", err);
    ck_assert(!model_config_set_kv(&d, "mode=diagonal", err, sizeof err));
    ck_assert_msg(strstr(err, "householder or split"), "%s", err);
    ck_assert(!model_config_set_kv(&d, "num_heads=-1", err, sizeof err));
    /* split mode needs head_dim divisible by r */
    model_config_preset(&d, "tiny");
    d.mode = GDP_MODE_SPLIT, d.num_householder = 3;
    ck_assert(!model_config_validate(&d, err, sizeof err));
}
END_TEST

START_TEST(parameter_counts) {
    /* base: 155.7M at n_h = 2, vocab 32000, untied (docs/spec.md §4); small about 20M */
    ModelConfig c;
    ck_assert(model_config_preset(&c, "base"));
    ck_assert_int_eq(cfg_intermediate(&c), 2048);
    ck_assert_int_eq(model_config_param_count(&c), 155691408);
    /* the registry holds exactly that many (registration only: no 600 MB allocation) */
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    ParamStore ps;
    params_init_store(&ps, ctx);
    ParamMaker pm;
    pm_init_registry(&pm, &ps);
    Model m;
    model_build(&m, &c, &pm);
    ck_assert_int_eq(params_count(&ps), 155691408);
    ck_assert(params_find(&ps, "model.layers.11.attn.k_proj.weight") != NULL);
    ck_assert_int_eq(params_find(&ps, "model.layers.11.attn.k_proj.weight")->t->shape[0], 2 * 768);
    ck_assert(params_find(&ps, "model.layers.0.attn.q_conv1d.weight")->t->ndim == 3);
    ck_assert(!params_find(&ps, "model.layers.0.attn.A_log")->decay);
    ck_assert(!params_find(&ps, "model.layers.0.attn.dt_bias")->decay);
    ck_assert(!params_find(&ps, "model.layers.0.attn.o_norm.weight")->decay);
    ck_assert(params_find(&ps, "model.layers.0.attn.q_conv1d.weight")->decay);
    ck_assert(params_find(&ps, "lm_head.weight") != NULL);
    model_free(&m);
    pm_free(&pm);
    params_free_store(&ps);
    ctx_destroy(ctx);
    ck_assert(model_config_preset(&c, "small"));
    int64_t n = model_config_param_count(&c);
    ck_assert_msg(n > 18000000 && n < 22000000, "small has %lld parameters", (long long)n);
}
END_TEST

START_TEST(gate_initialisation) {
    float a[4096], dt[4096];
    Rng rng;
    rng_seed(&rng, 3);
    init_a_log(a, 4096, &rng, NULL);
    init_dt_bias(dt, 4096, &rng, NULL);
    for (int i = 0; i < 4096; i++) {
        double A = exp(a[i]);
        ck_assert(A >= 1e-4 * 0.999 && A <= 16.0);
        double d = log1p(exp((double)dt[i])); /* softplus(dt_bias) = dt */
        ck_assert_msg(d >= 1e-3 * 0.999 && d <= 1e-1 * 1.001, "dt %g", d);
    }
    float mask[2 * 9];
    int r = 3;
    init_identity_mask(mask, 18, &rng, &r);
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) ck_assert(mask[h * 9 + i * 3 + j] == (i == j ? 1.0f : 0.0f));
}
END_TEST

/* ---- gradients ------------------------------------------------------------------------------------ */

/* Few entries on a short batch keep this quick; the bound is 1e-5 because finite differences of a
 * loss near 5 carry ~1e-10 of rounding, which is 1e-6 of the smallest gradients here (the last
 * layer's A_log). `gdp gradcheck --model tiny` checks more entries on a longer batch at 1e-6. */
START_TEST(whole_model_gradients_f64) {
    ModelConfig c;
    model_config_preset(&c, "tiny");
    c.initializer_range = 0.1;
    for (int mode = 0; mode < 2; mode++) {
        c.mode = mode ? GDP_MODE_SPLIT : GDP_MODE_HOUSEHOLDER;
        int n = 0, f = model_gradcheck(&c, 1, 6, 11, 2, 1e-5, false, &n);
        ck_assert_msg(f == 0, "%d of %d parameter checks failed (%s mode)", f, n, mode ? "split" : "householder");
        ck_assert_int_ge(n, 38);
    }
    /* the ungated, conv-free, untied variant with n_h = 3 */
    model_config_preset(&c, "tiny");
    c.initializer_range = 0.1, c.use_forget_gate = false, c.use_short_conv = false, c.use_output_gate = false;
    c.tie_word_embeddings = false, c.num_householder = 3, c.allow_neg_eigval = false;
    int n = 0, f = model_gradcheck(&c, 1, 5, 12, 2, 1e-5, false, &n);
    ck_assert_msg(f == 0, "%d of %d parameter checks failed (plain variant)", f, n);
}
END_TEST

/* ---- recomputation ------------------------------------------------------------------------------- */

/* Loss and every parameter gradient of one step on the CPU: recompute 0 none, 1 whole blocks, 2
 * selective (the MLP halves and the q/k conv + norm). */
static double recompute_step(ModelConfig c, int recompute, float *grads, int64_t *n_grads, size_t *acts_peak) {
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    ParamStore ps;
    Model m;
    c.initializer_range = 0.2;
    model_create(&m, &c, ctx, &ps, 5);
    m.recompute = recompute == 1;
    m.selective_recompute = recompute == 2;
    const int B = 2, T = 37;
    int32_t ids[2 * 37], tg[2 * 37];
    Rng rng;
    rng_seed(&rng, 4);
    for (int i = 0; i < B * T; i++) ids[i] = (int32_t)rng_below(&rng, (uint64_t)c.vocab_size);
    for (int i = 0; i < B * T; i++) tg[i] = (int32_t)rng_below(&rng, (uint64_t)c.vocab_size);
    params_zero_grad(&ps);
    Tensor *loss = model_loss_host(&m, ids, tg, B, T);
    tape_backward(ctx, loss);
    double l = tensor_get_host(loss, 0);
    *n_grads = ps.total;
    device_memcpy(grads, DEV_CPU, ps.flat_grads, ctx->device, (size_t)ps.total * sizeof(float));
    *acts_peak = ctx->acts.high_water;
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
    return l;
}

/* Recomputed blocks (or their cheap parts) run the same ops on the same inputs: the loss and every
 * gradient are the same bits, with less activation memory. */
START_TEST(recompute_gives_identical_gradients) {
    ModelConfig c;
    model_config_preset(&c, "tiny");
    for (int mode = 0; mode < 2; mode++) {
        c.mode = mode ? GDP_MODE_SPLIT : GDP_MODE_HOUSEHOLDER;
        float *g0 = (float *)xmalloc(sizeof(float) << 20), *g1 = (float *)xmalloc(sizeof(float) << 20);
        int64_t n0, n1;
        size_t a0, a1;
        double l0 = recompute_step(c, 0, g0, &n0, &a0);
        for (int how = 1; how <= 2; how++) {
            double l1 = recompute_step(c, how, g1, &n1, &a1);
            const char *name = how == 1 ? "recompute" : "selective recompute";
            ck_assert(n0 == n1 && n0 < (1 << 20));
            ck_assert_msg(l0 == l1, "loss %.17g with %s vs %.17g without", l1, name, l0);
            for (int64_t i = 0; i < n0; i++)
                ck_assert_msg(g0[i] == g1[i], "gradient element %lld: %.9g with %s vs %.9g without", (long long)i,
                              g1[i], name, g0[i]);
            ck_assert_msg(a1 < a0, "%s used %zu activation bytes, not fewer than %zu", name, a1, a0);
            printf("   %s %s: activations %zu -> %zu bytes\n", mode ? "split" : "householder", name, a0, a1);
        }
        free(g0), free(g1);
    }
}
END_TEST

/* ---- decoding ------------------------------------------------------------------------------------- */

/* The op at T = 1 from a state with the final state wanted: not recorded (inference) it runs the
 * decode kernel (kernels/gdp/decode.h), recorded the chunked op (gdp_forward_cpu). In float64 the
 * two agree to rounding (o and ht); the unrecorded one equals gdp_decode_step_cpu bit for bit, so
 * it is the decode kernel that ran; h0 is left as it was. */
static Tensor *uniform_f64(Ctx *ctx, Rng *rng, double lo, double hi, int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    double *x = (double *)xmalloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rng_uniform(rng);
    Tensor *t = tensor_from_doubles(ctx, LIFE_ACT, GDP_F64, ndim, shape, x);
    t->requires_grad = true;
    free(x);
    return t;
}

static void check_op_t1_decode(GdpMode mode, bool gate) {
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    const int64_t B = 3, H = 2, K = 8, V = 6, n = mode == GDP_MODE_SPLIT ? 4 : 3;
    Rng rng;
    rng_seed(&rng, 41 + 2 * (uint64_t)mode + (gate ? 1 : 0));
    const char *what = mode == GDP_MODE_SPLIT ? "split" : "householder";
    GdpOpArgs a;
    memset(&a, 0, sizeof a);
    a.mode = mode, a.n = (int)n;
    a.q = uniform_f64(ctx, &rng, -1, 1, SHAPE(B, 1, H, K));
    if (mode == GDP_MODE_SPLIT) {
        a.k = uniform_f64(ctx, &rng, -0.5, 0.5, SHAPE(B, 1, H, K));
        a.v = uniform_f64(ctx, &rng, -1, 1, SHAPE(B, 1, H, V));
        a.beta = uniform_f64(ctx, &rng, 0.1, 1.5, SHAPE(B, 1, H));
        a.mask = uniform_f64(ctx, &rng, -0.5, 1, SHAPE(H, n, n));
    } else {
        a.k = uniform_f64(ctx, &rng, -0.5, 0.5, SHAPE(B, 1, n, H, K));
        a.v = uniform_f64(ctx, &rng, -1, 1, SHAPE(B, 1, n, H, V));
        a.beta = uniform_f64(ctx, &rng, 0.1, 1.5, SHAPE(B, 1, n, H));
    }
    if (gate) a.g = uniform_f64(ctx, &rng, -1, 0, SHAPE(B, 1, H));
    a.h0 = uniform_f64(ctx, &rng, -0.5, 0.5, SHAPE(B, H, K, V));
    const int64_t no = B * H * V, ns = B * H * K * V;
    double *h0_before = (double *)xmalloc((size_t)ns * sizeof(double));
    memcpy(h0_before, a.h0->data, (size_t)ns * sizeof(double));

    Tensor *ht_dec = NULL, *ht_ref = NULL;
    ctx->grad_enabled = false;
    a.ht_out = &ht_dec;
    const Tensor *o_dec = op_gated_deltaproduct(ctx, &a);
    ck_assert_int_eq(ctx->tape.n, 0);
    ctx->grad_enabled = true;
    a.ht_out = &ht_ref;
    const Tensor *o_ref = op_gated_deltaproduct(ctx, &a);
    ck_assert_msg(ctx->tape.n == 1, "%s: the recorded op is on the tape (it runs the chunked path)", what);
    ctx->grad_enabled = false;
    ck_assert_msg(memcmp(h0_before, a.h0->data, (size_t)ns * sizeof(double)) == 0, "%s: h0 was changed", what);
    const double eo = rel_l2((const double *)o_dec->data, (const double *)o_ref->data, no);
    const double es = rel_l2((const double *)ht_dec->data, (const double *)ht_ref->data, ns);
    ck_assert_msg(eo < 1e-13 && es < 1e-13, "%s, gate %d: decode step vs chunked op: o rel err %.3e, ht %.3e", what,
                  (int)gate, eo, es);

    /* the kernel itself on copies of the same inputs */
    GdpDesc d;
    memset(&d, 0, sizeof d);
    d.mode = mode, d.B = (int)B, d.T = 1, d.H = (int)H, d.K = (int)K, d.V = (int)V, d.n = (int)n, d.dtype = GDP_F64;
    double *S = (double *)xmalloc((size_t)ns * sizeof(double)), *o = (double *)xmalloc((size_t)no * sizeof(double));
    memcpy(S, h0_before, (size_t)ns * sizeof(double));
    GdpDecodeArgs da = {S, a.q->data, a.k->data, a.v->data, a.beta->data, gate ? a.g->data : NULL,
                        a.mask ? a.mask->data : NULL, o};
    ck_assert_msg(gdp_decode_step_cpu(&d, &da) == GDP_OK, "gdp_decode_step_cpu: %s", gdp_last_error());
    ck_assert_msg(memcmp(o, o_dec->data, (size_t)no * sizeof(double)) == 0 &&
                      memcmp(S, ht_dec->data, (size_t)ns * sizeof(double)) == 0,
                  "%s, gate %d: the unrecorded op at T = 1 is not the decode kernel's result bit for bit", what,
                  (int)gate);
    free(S), free(o), free(h0_before);
    ctx_destroy(ctx);
}

START_TEST(op_t1_decode_kernel_matches_chunked_f64) {
    for (int gate = 0; gate < 2; gate++) {
        check_op_t1_decode(GDP_MODE_HOUSEHOLDER, gate);
        check_op_t1_decode(GDP_MODE_SPLIT, gate);
    }
}
END_TEST

static void check_decode_matches_forward(ModelConfig c) {
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    ParamStore ps;
    Model m;
    c.initializer_range = 0.2; /* far from the identity-like init: every part matters */
    model_create(&m, &c, ctx, &ps, 5);
    const int T = 13;
    int32_t ids[13];
    Rng rng;
    rng_seed(&rng, 9);
    for (int t = 0; t < T; t++) ids[t] = (int32_t)rng_below(&rng, (uint64_t)c.vocab_size);
    ctx->grad_enabled = false;
    Tensor *ti = tensor_from_host(ctx, LIFE_ACT, GDP_I32, SHAPE(1, T), ids);
    Tensor *logits = model_forward(&m, ti);
    int V = c.vocab_size;
    double *full = (double *)xmalloc((size_t)T * V * sizeof(double));
    tensor_to_doubles(logits, full);
    DecodeBatch b; /* one sequence: its first token a prefill, then a step each */
    decode_batch_init(&b, &m, 1);
    const int64_t one = 1;
    float *step = (float *)xmalloc((size_t)V * sizeof(float));
    double *stepd = (double *)xmalloc((size_t)V * sizeof(double));
    for (int t = 0; t < T; t++) {
        if (t == 0) decode_batch_prefill(&b, ids, &one, step);
        else decode_batch_step(&b, &ids[t], step);
        for (int v = 0; v < V; v++) stepd[v] = step[v];
        double e = rel_l2(stepd, full + (int64_t)t * V, V);
        ck_assert_msg(e < 1e-4, "position %d: decode vs forward relative error %.3e (%s mode)", t, e,
                      c.mode == GDP_MODE_SPLIT ? "split" : "householder");
    }
    /* a new prefill starts over: the first position again */
    decode_batch_prefill(&b, ids, &one, step);
    for (int v = 0; v < V; v++) stepd[v] = step[v];
    ck_assert(rel_l2(stepd, full, V) < 1e-4);
    decode_batch_free(&b);
    free(full), free(step), free(stepd);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
}

START_TEST(decode_matches_forward_both_modes) {
    ModelConfig c;
    model_config_preset(&c, "tiny");
    check_decode_matches_forward(c);
    c.mode = GDP_MODE_SPLIT;
    check_decode_matches_forward(c);
    model_config_preset(&c, "tiny");
    c.use_short_conv = false, c.use_output_gate = false, c.use_forget_gate = false, c.num_householder = 3;
    c.tie_word_embeddings = false;
    check_decode_matches_forward(c);
    model_config_preset(&c, "tiny");
    c.conv_size = 2, c.expand_v = 2, c.num_householder = 1;
    check_decode_matches_forward(c);
}
END_TEST

static double rel_l2_f32(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    return sqrt(num / (den > 0 ? den : 1));
}

/* A prefill of L tokens (the chunked forward from a state) gives the logits of a one-token prefill
 * and L - 1 decode steps, and decoding after it continues the same sequence; a batch of 2 states
 * equals each alone; a prefill in chunks equals one call. */
static void check_prefill_matches_decode(ModelConfig c) {
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    ParamStore ps;
    Model m;
    c.initializer_range = 0.2;
    model_create(&m, &c, ctx, &ps, 7);
    enum { T = 21 };
    int32_t ids[2 * T];
    Rng rng;
    rng_seed(&rng, 11);
    for (int t = 0; t < 2 * T; t++) ids[t] = (int32_t)rng_below(&rng, (uint64_t)c.vocab_size);
    const int V = c.vocab_size;
    const char *mode = c.mode == GDP_MODE_SPLIT ? "split" : "householder";
    float *steps = (float *)xmalloc((size_t)T * V * sizeof(float)), *got = (float *)xmalloc((size_t)2 * V * sizeof(float));
    DecodeBatch b; /* one sequence */
    decode_batch_init(&b, &m, 1);
    const int64_t first = 1;
    decode_batch_prefill(&b, ids, &first, steps);
    for (int t = 1; t < T; t++) decode_batch_step(&b, &ids[t], steps + (int64_t)t * V);
    const int64_t lens[] = {1, 2, 4, 5, 13, T - 1};
    for (size_t i = 0; i < GDP_ARRAY_LEN(lens); i++) {
        const int64_t L = lens[i];
        decode_batch_prefill(&b, ids, &L, got);
        double e = rel_l2_f32(got, steps + (L - 1) * V, V);
        ck_assert_msg(e < 1e-5, "%s: prefill of %lld vs decoding: relative error %.3e", mode, (long long)L, e);
        decode_batch_step(&b, &ids[L], got); /* then decoding goes on from the prefill's state */
        e = rel_l2_f32(got, steps + L * V, V);
        ck_assert_msg(e < 1e-5, "%s: a step after a prefill of %lld: relative error %.3e", mode, (long long)L, e);
    }
    /* two sequences in one state, in chunks of 4, against each alone in one call */
    ModelState two, one;
    model_state_init(&two, &m, 2);
    model_state_init(&one, &m, 1);
    model_prefill_host(&m, &two, ids, T, 4, got);
    for (int b = 0; b < 2; b++) {
        float *alone = (float *)xmalloc((size_t)V * sizeof(float));
        model_state_reset(&one);
        model_prefill_host(&m, &one, ids + b * T, T, 0, alone);
        double e = rel_l2_f32(got + (int64_t)b * V, alone, V);
        ck_assert_msg(e < 1e-5, "%s: batch row %d of 2 (chunks of 4) vs alone: relative error %.3e", mode, b, e);
        if (b == 0) ck_assert(rel_l2_f32(alone, steps + (int64_t)(T - 1) * V, V) < 1e-5);
        free(alone);
    }
    ck_assert_int_eq(two.pos, T);
    model_state_free(&two), model_state_free(&one);
    decode_batch_free(&b);
    free(steps), free(got);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
}

START_TEST(prefill_matches_decode_both_modes) {
    ModelConfig c;
    model_config_preset(&c, "tiny");
    check_prefill_matches_decode(c);
    c.mode = GDP_MODE_SPLIT;
    check_prefill_matches_decode(c);
    model_config_preset(&c, "tiny");
    c.use_short_conv = false, c.use_output_gate = false, c.use_forget_gate = false, c.num_householder = 3;
    c.tie_word_embeddings = false;
    check_prefill_matches_decode(c);
    model_config_preset(&c, "tiny");
    c.conv_size = 2, c.expand_v = 2, c.num_householder = 1, c.allow_neg_eigval = false;
    check_prefill_matches_decode(c);
}
END_TEST

START_TEST(sampling) {
    float l[5] = {0, 3, 1, 2, -1};
    Rng rng;
    rng_seed(&rng, 1);
    ck_assert_int_eq(sample_logits(l, 5, 0, 0, &rng), 1);
    int counts[5] = {0};
    for (int i = 0; i < 2000; i++) {
        float c[5] = {0, 3, 1, 2, -1};
        counts[sample_logits(c, 5, 1.0, 2, &rng)]++;
    }
    ck_assert_int_eq(counts[0] + counts[2] + counts[4], 0); /* top-2 keeps tokens 1 and 3 only */
    ck_assert(counts[1] > counts[3] && counts[3] > 200);
}
END_TEST

/* The sampling rule written out plainly for one row, as the reference of the batched sampler's CPU
 * form (kernels/sample_cpu.c, which sample_next runs): repetition penalty over the distinct history
 * tokens, greedy argmax, top-k by partial selection, then a draw in id order, or for top-p a sort by
 * (logit desc, id asc), the smallest prefix reaching top_p and a draw in that order. */
typedef struct RefCand {
    float logit;
    int id;
} RefCand;

/* Largest logit first; ties by id, so the order (and a seeded sample) never depends on qsort. */
static int ref_cand_cmp(const void *a, const void *b) {
    const RefCand *x = (const RefCand *)a, *y = (const RefCand *)b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}

static int reference_sample(float *logits, int n, const SampleParams *p, const int32_t *history, int64_t n_hist,
                            Rng *rng) {
    if (p->repetition_penalty > 0 && p->repetition_penalty != 1 && history && n_hist > 0) {
        unsigned char *seen = (unsigned char *)xcalloc((size_t)n, 1);
        for (int64_t i = 0; i < n_hist; i++) {
            int t = history[i];
            if (t < 0 || t >= n || seen[t]) continue;
            seen[t] = 1;
            logits[t] = logits[t] > 0 ? (float)(logits[t] / p->repetition_penalty)
                                      : (float)(logits[t] * p->repetition_penalty);
        }
        free(seen);
    }
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    if (p->temperature <= 0) return best;
    const bool nucleus = p->top_p > 0 && p->top_p < 1;
    if (!nucleus) {
        float cut = -INFINITY;
        if (p->top_k > 0 && p->top_k < n) {
            /* the k-th largest value: partial selection on a copy */
            float *tmp = (float *)xmalloc((size_t)n * sizeof(float));
            memcpy(tmp, logits, (size_t)n * sizeof(float));
            for (int i = 0; i < p->top_k; i++) {
                int j = i;
                for (int t = i + 1; t < n; t++)
                    if (tmp[t] > tmp[j]) j = t;
                float sw = tmp[i];
                tmp[i] = tmp[j], tmp[j] = sw;
            }
            cut = tmp[p->top_k - 1];
            free(tmp);
        }
        double mx = logits[best], sum = 0;
        for (int i = 0; i < n; i++) {
            double q = logits[i] >= cut ? exp((logits[i] - mx) / p->temperature) : 0;
            logits[i] = (float)q;
            sum += q;
        }
        double u = rng_uniform(rng) * sum, acc = 0;
        for (int i = 0; i < n; i++) {
            acc += logits[i];
            if (u < acc && logits[i] > 0) return i;
        }
        return best;
    }
    /* Nucleus: candidates by probability, cut at k, then at the smallest prefix reaching top_p. */
    RefCand *c = (RefCand *)xmalloc((size_t)n * sizeof(RefCand));
    for (int i = 0; i < n; i++) c[i].logit = logits[i], c[i].id = i;
    qsort(c, (size_t)n, sizeof(RefCand), ref_cand_cmp);
    int keep = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    double *pr = (double *)xmalloc((size_t)keep * sizeof(double)), sum = 0;
    for (int i = 0; i < keep; i++) sum += pr[i] = exp((c[i].logit - c[0].logit) / p->temperature);
    double acc = 0;
    int nk = 0;
    while (nk < keep) {
        acc += pr[nk++] / sum;
        if (acc >= p->top_p) break;
    }
    double tot = 0;
    for (int i = 0; i < nk; i++) tot += pr[i];
    double u = rng_uniform(rng) * tot, run = 0;
    int pick = c[0].id;
    for (int i = 0; i < nk; i++) {
        run += pr[i];
        if (u < run) {
            pick = c[i].id;
            break;
        }
    }
    free(pr), free(c);
    return pick;
}


/* sample_rows_cpu (kernels/sample.h, the CUDA sampler's reference) gives reference_sample's id on
 * every row of random batches (normal, peaked, integer-tied and signed-zero/-inf logits, padding past
 * n_tok, histories with repeats and ids past n_tok) under every setting, with the uniform drawn by the
 * caller and the history as a mask, a row's own or one kept elsewhere (seen_row, seen_stride: the
 * masks in reverse order, in wider rows); sample_next (one row through it) gives the same id and
 * draws one uniform when temperature > 0 and none otherwise, which is what a caller of the batched
 * samplers must do. */
START_TEST(sample_rows_match_sample_next) {
    static const SampleParams ps[] = {
        {0, 0, 1, 1},      {0, 0, 1, 1.3},    {-1, 4, 0.5, 1},   {1, 0, 1, 1},     {0.7, 0, 0, 1},
        {1, 1, 1, 1},      {0.8, 3, 1, 1},    {1.2, 40, 1, 1},   {1, 0, 0.1, 1},   {0.7, 0, 0.5, 1},
        {1, 0, 0.9, 1},    {1, 0, 1, 1.3},    {0.9, 0, 1, 0.7},  {0.8, 5, 0.9, 1.2}, {1, 2, 0.95, 1},
        {1.5, 400, 0.99, 2}, {1, 1, 0.3, 1},
    };
    enum { ROWS = 6 };
    Rng r;
    rng_seed(&r, 11);
    for (int trial = 0; trial < 600; trial++) {
        const SampleParams *p = &ps[trial % (int)GDP_ARRAY_LEN(ps)];
        const int n = 1 + (int)rng_below(&r, trial % 7 == 0 ? 3000 : 120), v = n + (int)rng_below(&r, 4);
        const int kind = (trial / 3) % 4;
        float *logits = (float *)xmalloc((size_t)ROWS * v * sizeof(float));
        float *row = (float *)xmalloc((size_t)v * sizeof(float));
        unsigned char *seen = (unsigned char *)xcalloc((size_t)ROWS * v, 1);
        int32_t *hist = (int32_t *)xmalloc((size_t)(2 * n + 1) * sizeof(int32_t));
        int32_t want[ROWS], got[ROWS];
        double u[ROWS];
        for (int i = 0; i < ROWS; i++) {
            float *l = logits + (size_t)i * v;
            for (int j = 0; j < v; j++) {
                static const float odd[5] = {-0.0f, 0.0f, -1.0f, 1.0f, -INFINITY};
                l[j] = kind == 0 ? (float)(2 * rng_normal(&r))
                     : kind == 1 ? (float)((int)rng_below(&r, 5) - 2)
                     : kind == 2 ? odd[rng_below(&r, 5)]
                                 : (float)(8 * rng_normal(&r));
            }
            l[rng_below(&r, (uint64_t)n)] = 0.5f; /* a finite logit in every row */
            const int nh = (int)rng_below(&r, (uint64_t)(2 * n + 1));
            for (int h = 0; h < nh; h++) {
                hist[h] = (int32_t)rng_below(&r, (uint64_t)v);
                seen[(size_t)i * v + hist[h]] = 1;
            }
            Rng seq, drawn;
            rng_seed(&seq, 1000u * (uint64_t)trial + (uint64_t)i);
            drawn = seq;
            u[i] = p->temperature > 0 ? rng_uniform(&drawn) : 0;
            Rng ref = seq;
            memcpy(row, l, (size_t)v * sizeof(float));
            want[i] = reference_sample(row, n, p, hist, nh, &ref);
            memcpy(row, l, (size_t)v * sizeof(float));
            const int next = sample_next(row, n, p, hist, nh, &seq);
            ck_assert_msg(next == want[i], "trial %d row %d: sample_next %d, reference %d", trial, i, next, want[i]);
            ck_assert_msg(!memcmp(&seq, &drawn, sizeof seq),
                          "trial %d: sample_next drew %s uniforms than one per sampled token (temperature %g)", trial,
                          p->temperature > 0 ? "other" : "more", p->temperature);
        }
        const int64_t stride = v + 5;
        unsigned char *elsewhere = (unsigned char *)xcalloc((size_t)(ROWS * stride), 1);
        int32_t mask_of[ROWS];
        for (int i = 0; i < ROWS; i++) {
            mask_of[i] = ROWS - 1 - i;
            memcpy(elsewhere + mask_of[i] * stride, seen + (size_t)i * v, (size_t)v);
        }
        float *again = (float *)xmalloc((size_t)ROWS * v * sizeof(float));
        memcpy(again, logits, (size_t)ROWS * v * sizeof(float));
        for (int layout = 0; layout < 2; layout++) {
            SampleArgs a = {layout ? again : logits, layout ? elsewhere : seen, layout ? mask_of : NULL,
                            layout ? stride : 0, p->temperature > 0 ? u : NULL, got, ROWS, v, n, p->temperature,
                            p->top_k, p->top_p, p->repetition_penalty};
            sample_rows_cpu(&a);
            for (int i = 0; i < ROWS; i++)
                ck_assert_msg(got[i] == want[i],
                              "trial %d row %d (n %d, v %d, rows of kind %d, temperature %g, top_k %d, top_p %g, "
                              "penalty %g, u %.17g, masks %s): sample_rows_cpu %d, reference %d",
                              trial, i, n, v, kind, p->temperature, p->top_k, p->top_p, p->repetition_penalty, u[i],
                              layout ? "by seen_row" : "by row", got[i], want[i]);
        }
        free(logits), free(again), free(row), free(seen), free(elsewhere), free(hist);
    }
}
END_TEST

/* A Sampler picks for a batch what sample_next gives each sequence alone, with a generator seeded
 * alike and the sequence's history: over steps where sequences end at different times (the first,
 * one in the middle, then all), greedy and sampled, with the repetition penalty off, above 1 and
 * below 1 (the prompt and every observed token seen, ids past n_tok among them), in rows wider than
 * n_tok whose padding holds the largest logits. An ended sequence gets -1 and draws nothing, and the
 * caller's logits are left as they were. */
START_TEST(sampler_matches_sample_next) {
    static const SampleParams ps[] = {
        {0, 0, 1, 1}, {0, 0, 1, 1.3}, {0.9, 0, 1, 1}, {0.8, 5, 1, 1.2}, {1, 0, 0.9, 0.7}, {1.2, 20, 0.95, 2},
    };
    enum { N = 5, STEPS = 14, MAXP = 12 };
    static const int ends[STEPS] = {-1, -1, -1, 0, -1, -1, 2, -1, -1, 4, -1, 1, 3, -1}; /* who ends before a step */
    Rng r;
    rng_seed(&r, 23);
    for (int k = 0; k < (int)GDP_ARRAY_LEN(ps); k++) {
        const SampleParams *p = &ps[k];
        const int n_tok = 30 + 9 * k;
        const int64_t v = n_tok + 3;
        Sampler s;
        sampler_init(&s, N, n_tok, v, p, 77);
        Rng alone[N];
        int32_t hist[N][MAXP + STEPS];
        int64_t nh[N];
        bool ended[N];
        for (int i = 0; i < N; i++) {
            nh[i] = 1 + (int64_t)rng_below(&r, MAXP);
            for (int64_t t = 0; t < nh[i]; t++) hist[i][t] = (int32_t)rng_below(&r, (uint64_t)v);
            sampler_start(&s, i, hist[i], nh[i]);
            rng_seed(&alone[i], 77);
            ended[i] = false;
        }
        float *logits = (float *)xmalloc((size_t)(N * v) * sizeof(float));
        float *before = (float *)xmalloc((size_t)(N * v) * sizeof(float));
        float *row = (float *)xmalloc((size_t)v * sizeof(float));
        for (int step = 0; step < STEPS; step++) {
            if (ends[step] >= 0) ended[ends[step]] = true;
            for (int64_t j = 0; j < N * v; j++)
                logits[j] = j % v >= n_tok  ? 100.0f
                          : step % 3 == 2 ? (float)((int)rng_below(&r, 4) - 1) /* ties */
                                          : (float)(2 * rng_normal(&r));
            memcpy(before, logits, (size_t)(N * v) * sizeof(float));
            int32_t next[N];
            sampler_pick(&s, logits, ended, next);
            ck_assert_msg(!memcmp(before, logits, (size_t)(N * v) * sizeof(float)), "sampler_pick changed the logits");
            for (int i = 0; i < N; i++) {
                if (ended[i]) {
                    ck_assert_msg(next[i] == -1, "settings %d step %d: ended sequence %d got %d", k, step, i, next[i]);
                    continue;
                }
                memcpy(row, logits + i * v, (size_t)v * sizeof(float));
                const int want = sample_next(row, n_tok, p, hist[i], nh[i], &alone[i]);
                ck_assert_msg(next[i] == want, "settings %d step %d sequence %d: sampler %d, sample_next %d", k, step,
                              i, next[i], want);
                /* a caller may step with a token of its own, even one the tokenizer lacks */
                const int32_t t = step % 4 == 3   ? n_tok + (int32_t)rng_below(&r, 3)
                                  : step % 4 == 1 ? (int32_t)rng_below(&r, (uint64_t)n_tok)
                                                  : next[i];
                hist[i][nh[i]++] = t;
                sampler_observe(&s, i, t);
            }
        }
        for (int i = 0; i < N; i++)
            ck_assert_msg(!memcmp(&s.rng[i], &alone[i], sizeof(Rng)),
                          "settings %d: sequence %d's generator drew other than sample_next did alone", k, i);
        free(logits), free(before), free(row);
        sampler_free(&s);
    }
}
END_TEST

/* The pick calls (layers/decode.h) are, on the CPU, the logits calls and sampler_pick: a batch of
 * four prompts of 1 to 30 tokens, stepped in groups of two rows, its sequences making 2 to 9 tokens,
 * greedy and sampled (temperature 0.8, top-k 40, top-p 0.9, repetition penalty 1.3, over fewer
 * candidates than logits), gives the same tokens draw for draw, and decode_batch_logits the same
 * logits bit for bit. */
START_TEST(decode_pick_matches_logits_and_sampler) {
    ModelConfig c;
    model_config_preset(&c, "tiny");
    c.initializer_range = 0.2;
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    ParamStore ps;
    Model m;
    model_create(&m, &c, ctx, &ps, 13);
    enum { N = 4 };
    static const int64_t lens[N] = {1, 7, 30, 12};
    static const int made[N] = {5, 9, 2, 7}; /* tokens each sequence makes */
    static const SampleParams settings[] = {{0, 0, 1, 1}, {0.8, 40, 0.9, 1.3}};
    const int64_t V = cfg_out_dim(&c);
    const int n_tok = (int)V - 3;
    int32_t ids[50];
    Rng rng;
    rng_seed(&rng, 17);
    for (int t = 0; t < 50; t++) ids[t] = (int32_t)rng_below(&rng, (uint64_t)n_tok);
    float *logits = (float *)xmalloc((size_t)(N * V) * sizeof(float));
    for (size_t k = 0; k < GDP_ARRAY_LEN(settings); k++) {
        DecodeBatch pick, ref;
        Sampler sp, sr;
        decode_batch_init(&pick, &m, N), decode_batch_init(&ref, &m, N);
        pick.group = ref.group = 2;
        sampler_init(&sp, N, n_tok, V, &settings[k], 5), sampler_init(&sr, N, n_tok, V, &settings[k], 5);
        int64_t off = 0;
        for (int i = 0; i < N; off += lens[i++])
            sampler_start(&sp, i, ids + off, lens[i]), sampler_start(&sr, i, ids + off, lens[i]);
        int32_t got[N], want[N], feed[N];
        decode_batch_prefill_pick(&pick, ids, lens, &sp, got);
        decode_batch_prefill(&ref, ids, lens, logits);
        sampler_pick(&sr, logits, ref.ended, want);
        for (int step = 0;; step++) {
            int live = 0;
            for (int i = 0; i < N; i++) {
                ck_assert_msg(got[i] == want[i], "settings %zu step %d sequence %d: pick %d, logits + sampler %d", k,
                              step, i, got[i], want[i]);
                const float *kept = decode_batch_logits(&pick, i);
                ck_assert(step < made[i] ? kept && !memcmp(kept, logits + i * V, (size_t)V * sizeof(float)) : !kept);
                feed[i] = step + 1 < made[i] ? got[i] : -1;
                if (feed[i] < 0) continue;
                sampler_observe(&sp, i, feed[i]), sampler_observe(&sr, i, feed[i]);
                live++;
            }
            if (live == 0) break;
            ck_assert_int_eq(decode_batch_step_pick(&pick, feed, &sp, got), live);
            ck_assert_int_eq(decode_batch_step(&ref, feed, logits), live);
            sampler_pick(&sr, logits, ref.ended, want);
        }
        ck_assert(!memcmp(sp.rng, sr.rng, (size_t)N * sizeof(Rng)));
        decode_batch_free(&pick), decode_batch_free(&ref);
        sampler_free(&sp), sampler_free(&sr);
    }
    free(logits);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
}
END_TEST

/* The batched samplers' argument checks (shared by sample_rows_cpu and sample_rows_cuda). */
START_TEST(sample_rows_rejects_n_tok_past_v) {
    float l[4] = {0};
    int32_t out[1];
    SampleArgs a = {l, NULL, NULL, 0, NULL, out, 1, 4, 5, 0, 0, 1, 1};
    sample_rows_cpu(&a);
}
END_TEST

START_TEST(sample_rows_rejects_masks_narrower_than_n_tok) {
    float l[4] = {0};
    unsigned char seen[3] = {0};
    int32_t out[1];
    SampleArgs a = {l, seen, NULL, 3, NULL, out, 1, 4, 4, 0, 0, 1, 1.3};
    sample_rows_cpu(&a);
}
END_TEST

START_TEST(sample_rows_needs_u_to_sample) {
    float l[4] = {0};
    int32_t out[1];
    SampleArgs a = {l, NULL, NULL, 0, NULL, out, 1, 4, 4, 1.0, 0, 1, 1};
    sample_rows_cpu(&a);
}
END_TEST

/* ---- training ------------------------------------------------------------------------------------- */

START_TEST(tiny_model_learns_text) {
    char dirbuf[300], *dir = tmpdir_new(dirbuf, sizeof dirbuf);
    const char *corpus = write_corpus(dir);
    char out[512];
    snprintf(out, sizeof out, "%s/run", dir);
    TrainOptions o = quick_options(corpus, out);
    o.steps = 100, o.lr = 6e-3;
    o.eval_batches = 8;
    Dist d;
    dist_init_single(&d);
    TrainResult r;
    train_run(&o, &d, &r);
    printf("tiny on %s: loss %.4f -> %.4f, val %.4f after %lld steps\n", corpus, r.first_loss, r.last_loss,
           r.last_val_loss, (long long)r.steps_done);
    ck_assert_int_eq(r.steps_done, 100);
    ck_assert_msg(r.first_loss > 5.0, "initial loss %.4f should be near ln 256 = 5.55", r.first_loss);
    /* judged on held-out text (8 batches): one training batch of 128 bytes is too noisy */
    ck_assert_msg(r.last_val_loss < r.first_loss - 1.8, "loss %.4f -> val %.4f did not fall by 1.8 nats",
                  r.first_loss, r.last_val_loss);
    ck_assert_msg(r.last_val_loss < 3.5, "val loss %.4f should be below 3.5 nats", r.last_val_loss);
    char path[600];
    snprintf(path, sizeof path, "%s/log.tsv", out);
    ck_assert(access(path, F_OK) == 0);
    snprintf(path, sizeof path, "%s/latest", out);
    ck_assert(access(path, F_OK) == 0);
    rm_rf(dir);
}
END_TEST

static void load_flat(const char *ckpt, float **out, int64_t *n) {
    Model m;
    ParamStore ps;
    Ctx *ctx = train_load_model(ckpt, DEV_CPU, 1, 1, &m, &ps);
    *n = ps.total;
    *out = (float *)xmalloc((size_t)ps.total * sizeof(float));
    memcpy(*out, ps.flat_params, (size_t)ps.total * sizeof(float));
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
}

/* Column 2 (loss) of every row of log.tsv, as text: identical runs give identical rows. */
static char *losses_of(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/log.tsv", dir);
    FILE *f = xfopen(path, "r");
    char line[1024];
    size_t cap = 1 << 16, len = 0;
    char *s = (char *)xcalloc(cap, 1);
    while (fgets(line, sizeof line, f)) {
        char *tab1 = strchr(line, '\t');
        if (!tab1) continue;
        char *tab2 = strchr(tab1 + 1, '\t');
        if (tab2) *tab2 = 0;
        len += (size_t)snprintf(s + len, cap - len, "%s\n", line);
    }
    fclose(f);
    return s;
}

START_TEST(exact_resume) {
    char dirbuf[300], *dir = tmpdir_new(dirbuf, sizeof dirbuf);
    const char *corpus = write_corpus(dir);
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    Dist d;
    dist_init_single(&d);
    TrainResult ra, rb1, rb2;
    /* 16 steps in one go, with a cosine schedule, validation and a mid-run checkpoint */
    TrainOptions o = quick_options(corpus, a);
    o.steps = 16, o.eval_every = 5, o.checkpoint_every = 5;
    train_run(&o, &d, &ra);
    /* 8 steps (of the same 16-step schedule), then resumed from the folder for the other 8 */
    o.out = b, o.stop_at = 8;
    train_run(&o, &d, &rb1);
    ck_assert_int_eq(rb1.steps_done, 8);
    o.stop_at = 0, o.resume = b;
    train_run(&o, &d, &rb2);
    ck_assert_int_eq(rb2.steps_done, 16);
    ck_assert_msg(ra.last_loss == rb2.last_loss, "last loss %.9g vs resumed %.9g", ra.last_loss, rb2.last_loss);
    ck_assert(ra.last_val_loss == rb2.last_val_loss);
    char *la = losses_of(a), *lb = losses_of(b);
    ck_assert_msg(!strcmp(la, lb), "log.tsv losses differ:\n%s\nvs\n%s", la, lb);
    float *pa, *pb;
    int64_t na, nb;
    load_flat(ra.checkpoint, &pa, &na);
    load_flat(rb2.checkpoint, &pb, &nb);
    ck_assert_int_eq(na, nb);
    ck_assert_msg(!memcmp(pa, pb, (size_t)na * sizeof(float)), "parameters after 20 steps differ");
    free(pa), free(pb), free(la), free(lb);
    rm_rf(dir);
}
END_TEST

/* Flips bytes in the middle of a checkpoint: loading it must fail with a message (exit 1). */
START_TEST(corrupt_checkpoint_is_an_error) {
    char dirbuf[300], *dir = tmpdir_new(dirbuf, sizeof dirbuf);
    remove_at_exit(dir);
    const char *corpus = write_corpus(dir);
    char out[512];
    snprintf(out, sizeof out, "%s/run", dir);
    TrainOptions o = quick_options(corpus, out);
    o.steps = 2, o.warmup = 1;
    Dist d;
    dist_init_single(&d);
    TrainResult r;
    train_run(&o, &d, &r);
    struct stat st;
    ck_assert(stat(r.checkpoint, &st) == 0);
    FILE *f = xfopen(r.checkpoint, "r+b");
    /* truncate to half: the datasets past the cut are gone */
    ck_assert(ftruncate(fileno(f), st.st_size / 2) == 0);
    fclose(f);
    float *p;
    int64_t n;
    load_flat(r.checkpoint, &p, &n); /* exits 1 */
}
END_TEST

START_TEST(garbage_checkpoint_is_an_error) {
    char dirbuf[300], *dir = tmpdir_new(dirbuf, sizeof dirbuf);
    remove_at_exit(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/ckpt_00000001.h5", dir);
    FILE *f = xfopen(path, "wb");
    for (int i = 0; i < 4096; i++) fputc((i * 7919) & 0xff, f);
    fclose(f);
    float *p;
    int64_t n;
    load_flat(path, &p, &n); /* exits 1 */
}
END_TEST

/* ---- classification head: running parity of a bit string ---------------------------------------- */

typedef struct ParityData {
    Rng rng;
    int B, T;
    uint64_t seed;
} ParityData;

static void parity_next(void *u, int32_t *in, int32_t *tg) {
    ParityData *p = (ParityData *)u;
    for (int b = 0; b < p->B; b++) {
        int acc = 0;
        for (int t = 0; t < p->T; t++) {
            int bit = (int)rng_below(&p->rng, 2);
            acc ^= bit;
            in[b * p->T + t] = bit;
            tg[b * p->T + t] = acc;
        }
    }
}
static void parity_reset(void *u) {
    ParityData *p = (ParityData *)u;
    rng_seed(&p->rng, p->seed);
}
static int parity_get(void *u, int64_t *out, int max) {
    ParityData *p = (ParityData *)u;
    ck_assert(max >= 4);
    memcpy(out, p->rng.s, sizeof p->rng.s);
    return 4;
}
static void parity_set(void *u, const int64_t *s, int n) {
    ParityData *p = (ParityData *)u;
    ck_assert_int_eq(n, 4);
    memcpy(p->rng.s, s, sizeof p->rng.s);
}

START_TEST(classification_head_learns_parity) {
    ParityData tr = {{{0}}, 16, 16, 1}, va = {{{0}}, 16, 16, 2};
    parity_reset(&tr), parity_reset(&va);
    TrainData td = {&tr, parity_next, parity_reset, parity_get, parity_set};
    TrainData vd = {&va, parity_next, parity_reset, parity_get, parity_set};
    TrainOptions o = train_default_options();
    o.train_data = &td, o.val_data = &vd;
    o.preset = "tiny";
    o.sets[o.n_sets++] = "num_labels=2";
    o.sets[o.n_sets++] = "vocab_size=2";
    o.sets[o.n_sets++] = "tie_word_embeddings=false";
    o.sets[o.n_sets++] = "num_hidden_layers=1";
    o.batch = 16, o.seq = 16, o.steps = 50, o.lr = 5e-3, o.warmup = 10, o.weight_decay = 0;
    o.eval_every = 0, o.eval_batches = 2, o.quiet = true;
    Dist d;
    dist_init_single(&d);
    TrainResult r;
    train_run(&o, &d, &r);
    printf("parity tagging: loss %.4f -> %.4f, val %.4f\n", r.first_loss, r.last_loss, r.last_val_loss);
    ck_assert_msg(r.first_loss > 0.6, "initial loss %.4f should be near ln 2", r.first_loss);
    ck_assert_msg(r.last_val_loss < 0.45, "val loss %.4f: running parity was not learnt", r.last_val_loss);
}
END_TEST

static double t_setup;
static void timing_setup(void) { t_setup = gdp_now_seconds(); }
static void timing_teardown(void) {
    if (getenv("GDP_TEST_TIMES")) fprintf(stderr, "  %.2f s\n", gdp_now_seconds() - t_setup);
}

static Suite *make_suite(void) {
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, timing_setup, timing_teardown);
    tcase_add_test(tc, config_file_and_overrides);
    tcase_add_test(tc, parameter_counts);
    tcase_add_test(tc, gate_initialisation);
    tcase_add_test(tc, whole_model_gradients_f64);
    tcase_add_test(tc, recompute_gives_identical_gradients);
    tcase_add_test(tc, op_t1_decode_kernel_matches_chunked_f64);
    tcase_add_test(tc, decode_matches_forward_both_modes);
    tcase_add_test(tc, prefill_matches_decode_both_modes);
    tcase_add_test(tc, sampling);
    tcase_add_test(tc, sample_rows_match_sample_next);
    tcase_add_test(tc, sampler_matches_sample_next);
    tcase_add_test(tc, decode_pick_matches_logits_and_sampler);
    tcase_add_exit_test(tc, sample_rows_rejects_n_tok_past_v, 1);
    tcase_add_exit_test(tc, sample_rows_rejects_masks_narrower_than_n_tok, 1);
    tcase_add_exit_test(tc, sample_rows_needs_u_to_sample, 1);
    tcase_add_test(tc, tiny_model_learns_text);
    tcase_add_test(tc, exact_resume);
    tcase_add_exit_test(tc, corrupt_checkpoint_is_an_error, 1);
    tcase_add_exit_test(tc, garbage_checkpoint_is_an_error, 1);
    tcase_add_test(tc, classification_head_learns_parity);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
