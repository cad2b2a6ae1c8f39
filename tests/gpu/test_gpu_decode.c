/* Per-token decoding on CUDA:
 *   - the decode kernel (kernels/gdp/decode.cu) against its float64 CPU reference
 *     (kernels/gdp/decode_cpu.c) over 8 chained steps: both modes, K 16..256 (also not a multiple
 *     of 8), V with tails past a 32-column tile, B > 1, n 1..4 (split r up to 64), gate on and off.
 *     o is filled with NaN before every step, so an element nobody wrote fails; o and S are
 *     compared after every step (rel L2, bound 1e-5);
 *   - decoding through the model's one definition (model_forward_state at T = 1, where the GDP op
 *     runs the decode kernel, replayed from a CUDA graph: layers/decode.h, layers/decode_graph.h)
 *     against the chunked CUDA forward (model_forward) on 72 random tokens (past one 64-token
 *     chunk) of tiny configs with random weights: householder n_h = 1, 2, 3, split r = 2 and r = 4
 *     with a random non-identity mask, and variants without short conv / gates / tied head: the
 *     logits of every position within rel L2 1e-4, the graph replays equal to the plain steps bit
 *     for bit, a new prefill starting over, a graph captured again when the acts arena has moved, a
 *     prefill then a step;
 *   - a batch of five sequences (DecodeBatch, what the C API runs): prompts of 1 to 300 tokens,
 *     sequences ending after 0 to 12 steps, in one group and in groups of two rows: every logit row
 *     against each sequence's own chunked forward (rel L2 1e-4), graphs against plain bit for bit;
 *   - sampling on the GPU (decode_batch_*_pick, what gdp generate and the C API run) against the
 *     logits brought back and sampled on the host (sampler_pick): the same tokens, greedy exactly,
 *     sampled up to kernels/sample.h's rounding at a boundary, and the same logits bit for bit;
 *   - the kernel's error paths.
 * `test_gpu_decode --sanitize` runs one small kernel case, one model case, one batch case and one
 * sampling case, for compute-sanitizer; `test_gpu_decode NAME...` only the tests whose name contains
 * one of the NAMEs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "base/common.h"
#include "core/ctx.h"
#include "kernels/gdp/desc.h"
#include "kernels/gdp/decode.h"
#include "kernels/sample.h"
#include "layers/decode.h"
#include "layers/model.h"
#include "base/cuda_check.h"
#include "core/gradcheck.h" /* rel_l2 */
#include "tests/gpu/gpu_test.h"

/* ---------------------------------------------------------------- the kernel alone */
typedef struct DecCase {
    GdpMode mode;
    int B, H, K, V, n, gate;
} DecCase;

/* n doubles, rounded through float so that the CPU reference sees exactly the GPU's inputs */
static void fill_normal(Rng *r, double *x, int64_t n, double sd) {
    for (int64_t i = 0; i < n; i++) x[i] = (double)(float)(sd * rng_normal(r));
}

static float *to_dev(const double *x, int64_t n) {
    float *h = (float *)xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) h[i] = (float)x[i];
    float *d;
    CUDA_CHECK(cudaMalloc((void **)&d, (size_t)n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static void upload(float *d, const double *x, int64_t n) {
    float *h = (float *)xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) h[i] = (float)x[i];
    CUDA_CHECK(cudaMemcpy(d, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
}

static double *from_dev(const float *d, int64_t n) {
    float *h = (float *)xmalloc((size_t)n * sizeof(float));
    CUDA_CHECK(cudaMemcpy(h, d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
    double *x = (double *)xmalloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) x[i] = h[i];
    free(h);
    return x;
}

/* Runs `steps` chained decode steps on the GPU and in float64 on the CPU; returns the number of
 * failed comparisons and the worst error in *worst. */
static int kernel_case(const DecCase *c, uint64_t seed, int steps, double bound, double *worst) {
    Rng rng;
    rng_seed(&rng, seed);
    GdpDesc d;
    memset(&d, 0, sizeof d);
    d.mode = c->mode, d.B = c->B, d.T = 1, d.H = c->H, d.K = c->K, d.V = c->V, d.n = c->n, d.dtype = GDP_F64;
    const GdpSizes z = gdp_sizes(&d);
    double *S = (double *)xmalloc(sizeof(double) * (size_t)z.state);
    double *q = (double *)xmalloc(sizeof(double) * (size_t)z.q), *k = (double *)xmalloc(sizeof(double) * (size_t)z.k);
    double *v = (double *)xmalloc(sizeof(double) * (size_t)z.v);
    double *beta = (double *)xmalloc(sizeof(double) * (size_t)z.beta);
    double *g = (double *)xmalloc(sizeof(double) * (size_t)z.g), *o = (double *)xmalloc(sizeof(double) * (size_t)z.o);
    double *mask = z.mask ? (double *)xmalloc(sizeof(double) * (size_t)z.mask) : NULL;
    fill_normal(&rng, S, z.state, 0.5);
    for (int64_t i = 0; i < z.mask; i++) {
        int e = (int)(i % (c->n * c->n));
        mask[i] = (double)(float)((e / c->n == e % c->n ? 1.0 : 0.0) + 0.3 * rng_normal(&rng));
    }
    float *S_d = to_dev(S, z.state), *mask_d = mask ? to_dev(mask, z.mask) : NULL;
    float *q_d, *k_d, *v_d, *beta_d, *g_d, *o_d;
    CUDA_CHECK(cudaMalloc((void **)&q_d, sizeof(float) * (size_t)z.q));
    CUDA_CHECK(cudaMalloc((void **)&k_d, sizeof(float) * (size_t)z.k));
    CUDA_CHECK(cudaMalloc((void **)&v_d, sizeof(float) * (size_t)z.v));
    CUDA_CHECK(cudaMalloc((void **)&beta_d, sizeof(float) * (size_t)z.beta));
    CUDA_CHECK(cudaMalloc((void **)&g_d, sizeof(float) * (size_t)z.g));
    CUDA_CHECK(cudaMalloc((void **)&o_d, sizeof(float) * (size_t)z.o));
    const int w = c->mode == GDP_MODE_SPLIT ? c->K / c->n : c->K; /* unit norm per slot / slice */
    int fails = 0;
    *worst = 0;
    for (int step = 0; step < steps; step++) {
        fill_normal(&rng, q, z.q, 1.0);
        for (int64_t i = 0; i < z.k / w; i++) {
            double a = 0;
            for (int x = 0; x < w; x++) k[i * w + x] = rng_normal(&rng);
            for (int x = 0; x < w; x++) a += k[i * w + x] * k[i * w + x];
            for (int x = 0; x < w; x++) k[i * w + x] = (double)(float)(k[i * w + x] / sqrt(a));
        }
        fill_normal(&rng, v, z.v, 1.0);
        for (int64_t i = 0; i < z.beta; i++) beta[i] = (double)(float)(2.0 * rng_uniform(&rng));
        for (int64_t i = 0; i < z.g; i++) g[i] = (double)(float)(-log1p(exp(-(rng_normal(&rng) + 2.0))));
        upload(q_d, q, z.q), upload(k_d, k, z.k), upload(v_d, v, z.v), upload(beta_d, beta, z.beta);
        upload(g_d, g, z.g);
        CUDA_CHECK(cudaMemset(o_d, 0xFF, sizeof(float) * (size_t)z.o)); /* NaN */
        GdpDecodeArgs ag = {S_d, q_d, k_d, v_d, beta_d, c->gate ? g_d : NULL, mask_d, o_d};
        GdpDesc df = d;
        df.dtype = GDP_F32;
        GdpStatus st = gdp_decode_step_cuda(&df, &ag, NULL);
        if (st != GDP_OK) {
            printf("  gdp_decode_step_cuda: status %d: %s\n", (int)st, gdp_last_error());
            fails++;
            break;
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        GdpDecodeArgs ac = {S, q, k, v, beta, c->gate ? g : NULL, mask, o};
        st = gdp_decode_step_cpu(&d, &ac);
        if (st != GDP_OK) gdp_fatal("gdp_decode_step_cpu: %s", gdp_last_error());
        double *og = from_dev(o_d, z.o), *Sg = from_dev(S_d, z.state);
        double eo = rel_l2(og, o, z.o), es = rel_l2(Sg, S, z.state);
        if (!(eo <= bound) || !(es <= bound)) {
            if (fails < 3) printf("  step %d: o rel err %.3e, S rel err %.3e (bound %.0e)\n", step, eo, es, bound);
            fails++;
        }
        if (!(eo <= *worst)) *worst = eo;
        if (!(es <= *worst)) *worst = es;
        free(og), free(Sg);
    }
    float *all[] = {S_d, q_d, k_d, v_d, beta_d, g_d, o_d, mask_d};
    for (size_t i = 0; i < GDP_ARRAY_LEN(all); i++)
        if (all[i]) CUDA_CHECK(cudaFree(all[i]));
    free(S), free(q), free(k), free(v), free(beta), free(g), free(o), free(mask);
    return fails;
}

static const DecCase dec_cases[] = {
    /* mode, B, H, K, V, n, gate */
    {GDP_MODE_HOUSEHOLDER, 1, 1, 16, 16, 1, 1},
    {GDP_MODE_HOUSEHOLDER, 2, 3, 32, 32, 2, 1},
    {GDP_MODE_HOUSEHOLDER, 1, 2, 64, 100, 3, 0},
    {GDP_MODE_HOUSEHOLDER, 3, 2, 128, 64, 2, 1},
    {GDP_MODE_HOUSEHOLDER, 1, 1, 256, 256, 4, 1},
    {GDP_MODE_HOUSEHOLDER, 2, 1, 100, 40, 1, 1},
    {GDP_MODE_HOUSEHOLDER, 1, 2, 250, 33, 2, 0},
    {GDP_MODE_HOUSEHOLDER, 4, 6, 128, 128, 2, 1},
    {GDP_MODE_SPLIT, 1, 1, 16, 16, 2, 1},
    {GDP_MODE_SPLIT, 2, 2, 64, 64, 2, 1},
    {GDP_MODE_SPLIT, 1, 2, 128, 100, 4, 0},
    {GDP_MODE_SPLIT, 1, 1, 256, 256, 2, 1},
    {GDP_MODE_SPLIT, 2, 1, 96, 40, 3, 1},
    {GDP_MODE_SPLIT, 1, 1, 64, 16, 1, 1},
    {GDP_MODE_SPLIT, 1, 1, 64, 33, 64, 1},
    {GDP_MODE_SPLIT, 3, 2, 200, 70, 4, 1},
};

GPU_TEST(decode_kernel_matches_cpu_f64) {
    for (size_t i = 0; i < GDP_ARRAY_LEN(dec_cases); i++) {
        const DecCase *c = &dec_cases[i];
        double worst = 0;
        int bad = kernel_case(c, 300 + i, 8, 1e-5, &worst);
        printf("  %-5s B%d H%d K%d V%d n%d g%d: worst rel err %.2e  %s\n", c->mode == GDP_MODE_SPLIT ? "split" : "hh",
               c->B, c->H, c->K, c->V, c->n, c->gate, worst, bad ? "FAIL" : "ok");
        GPU_EXPECT(bad == 0, "decode kernel case %zu: %d of 8 steps over 1e-5", i, bad);
    }
}

GPU_TEST(decode_kernel_error_paths) {
    GdpDesc d;
    memset(&d, 0, sizeof d);
    d.mode = GDP_MODE_HOUSEHOLDER, d.B = 1, d.T = 1, d.H = 1, d.K = 300, d.V = 16, d.n = 1, d.dtype = GDP_F32;
    char dummy[16];
    GdpDecodeArgs a = {dummy, dummy, dummy, dummy, dummy, NULL, NULL, dummy};
    GdpStatus st = gdp_decode_step_cuda(&d, &a, NULL);
    GPU_EXPECT(st == GDP_ERR_UNSUPPORTED, "K=300: status %d, want GDP_ERR_UNSUPPORTED (%s)", (int)st, gdp_last_error());
    d.K = 16, d.dtype = GDP_F64;
    st = gdp_decode_step_cuda(&d, &a, NULL);
    GPU_EXPECT(st == GDP_ERR_UNSUPPORTED, "f64: status %d, want GDP_ERR_UNSUPPORTED (%s)", (int)st, gdp_last_error());
    d.dtype = GDP_F32, d.T = 2;
    st = gdp_decode_step_cuda(&d, &a, NULL);
    GPU_EXPECT(st == GDP_ERR_INVALID, "T=2: status %d, want GDP_ERR_INVALID (%s)", (int)st, gdp_last_error());
    d.T = 1, a.S = NULL;
    st = gdp_decode_step_cuda(&d, &a, NULL);
    GPU_EXPECT(st == GDP_ERR_INVALID, "S NULL: status %d, want GDP_ERR_INVALID (%s)", (int)st, gdp_last_error());
    CUDA_CHECK(cudaDeviceSynchronize());
}

/* ---------------------------------------------------------------- decoding through the model */
static void random_masks(Model *m, const ModelConfig *c, Rng *rng) {
    if (c->mode != GDP_MODE_SPLIT) return;
    const int r = c->num_householder; /* a random, non-identity mask in every layer */
    for (int i = 0; i < c->num_hidden_layers; i++) {
        Tensor *mk = m->blocks[i].attn.mask;
        float *h = (float *)xmalloc((size_t)mk->numel * sizeof(float));
        for (int64_t j = 0; j < mk->numel; j++) {
            int e = (int)(j % (r * r));
            h[j] = (float)((e / r == e % r ? 1.0 : 0.0) + 0.5 * rng_normal(rng));
        }
        device_memcpy(mk->data, DEV_CUDA, h, DEV_CPU, (size_t)mk->numel * sizeof(float));
        free(h);
    }
}

/* The chunked forward of one sequence of T tokens: logits [T, out] as doubles (malloc'd); the
 * arenas are left as they were. */
static double *forward_logits(Model *m, const int32_t *ids, int T) {
    Ctx *ctx = m->ctx;
    const size_t acts = arena_mark(&ctx->acts), scratch = arena_mark(&ctx->scratch);
    const size_t meta = arena_mark(&ctx->step_meta);
    ctx->grad_enabled = false;
    Tensor *ti = tensor_from_host(ctx, LIFE_ACT, GDP_I32, SHAPE(1, T), ids);
    Tensor *logits = model_forward(m, ti);
    double *full = (double *)xmalloc((size_t)logits->numel * sizeof(double));
    tensor_to_doubles(logits, full); /* synchronous: the arenas may be rewound after it */
    arena_rewind(&ctx->acts, acts), arena_rewind(&ctx->scratch, scratch), arena_rewind(&ctx->step_meta, meta);
    return full;
}

static double rel_l2_fd(const float *a, const double *b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += b[i] * b[i];
    return sqrt(num / (den > 0 ? den : 1e-300));
}

/* Positions at which two runs' logits [n, V] differ in any bit; the largest difference in *maxd. */
static int bit_diffs(const float *a, const float *b, int n, int V, double *maxd) {
    int bad = 0;
    *maxd = 0;
    for (int p = 0; p < n; p++) {
        if (!memcmp(a + (int64_t)p * V, b + (int64_t)p * V, (size_t)V * sizeof(float))) continue;
        bad++;
        for (int v = 0; v < V; v++) {
            double d = fabs((double)a[(int64_t)p * V + v] - b[(int64_t)p * V + v]);
            if (!(d <= *maxd)) *maxd = d;
        }
    }
    return bad;
}

/* One sequence (a DecodeBatch of one, layers/decode.h): a prefill of its first token, then T - 1
 * single steps, against the chunked forward of all T tokens (rel L2 1e-4 at every position), twice:
 * with the step's CUDA graph (the first step plain, the second captured, then replays) and without,
 * which must give the same logits bit for bit. Then, with the graph: a new prefill gives position 0
 * again; an activation left in the acts arena makes the next step capture its graph again above
 * it, with the same result; a prefill of T - 1 tokens (the chunked op) and a step from its state
 * give the last two positions. Returns the number of failures. */
static int model_case(ModelConfig c, const char *label, int T, uint64_t seed) {
    Ctx *ctx = ctx_create(DEV_CUDA, ctx_default_sizes());
    ParamStore ps;
    Model m;
    c.initializer_range = 0.2; /* far from the identity-like init: every part matters */
    model_create(&m, &c, ctx, &ps, seed);
    Rng rng;
    rng_seed(&rng, seed + 100);
    random_masks(&m, &c, &rng);
    int32_t *ids = (int32_t *)xmalloc((size_t)T * sizeof(int32_t));
    for (int t = 0; t < T; t++) ids[t] = (int32_t)rng_below(&rng, (uint64_t)c.vocab_size);
    double *full = forward_logits(&m, ids, T);
    const int V = cfg_out_dim(&c);
    float *steps[2];
    int fails = 0;
    double worst = 0, e0 = 0, er = 0, ep = 0, es = 0;
    for (int pass = 0; pass < 2; pass++) {
        float *got = steps[pass] = (float *)xmalloc((size_t)T * V * sizeof(float));
        DecodeBatch b;
        decode_batch_init(&b, &m, 1);
        b.graph.enabled = pass == 0;
        const int64_t first = 1;
        for (int t = 0; t < T; t++) {
            float *row = got + (int64_t)t * V;
            for (int v = 0; v < V; v++) row[v] = NAN;
            if (t == 0) decode_batch_prefill(&b, ids, &first, row);
            else decode_batch_step(&b, &ids[t], row);
            double e = rel_l2_fd(row, full + (int64_t)t * V, V);
            if (!(e <= worst)) worst = e;
            if (!(e <= 1e-4)) {
                if (fails < 3) printf("  %s: %s: position %d: decode vs forward rel err %.3e\n", label,
                                      pass ? "plain" : "graph", t, e);
                fails++;
            }
        }
        DecodeGraphStats gs = decode_graph_stats(&b.graph);
        if (pass == 0 && (gs.capture_failed || gs.captures != 1 || gs.replays != T - 2 || gs.plain != 1)) {
            printf("  %s: graph stats after %d steps: %d captures, %lld replays, %lld plain%s (want 1, %d, 1)\n",
                   label, T - 1, gs.captures, (long long)gs.replays, (long long)gs.plain,
                   gs.capture_failed ? ", a capture failed" : "", T - 2);
            fails++;
        }
        if (pass == 1 && (gs.captures != 0 || gs.replays != 0)) {
            printf("  %s: graphs off, yet %d captures and %lld replays\n", label, gs.captures, (long long)gs.replays);
            fails++;
        }
        if (pass == 0) {
            float *row = (float *)xmalloc((size_t)V * sizeof(float));
            decode_batch_prefill(&b, ids, &first, row);
            e0 = rel_l2_fd(row, full, V);
            /* something live in the acts arena above the graph's mark */
            const size_t mark = arena_mark(&ctx->acts);
            tensor_new(ctx, LIFE_ACT, GDP_F32, SHAPE(1000));
            decode_batch_step(&b, &ids[1], row);
            er = rel_l2_fd(row, full + V, V);
            arena_rewind(&ctx->acts, mark);
            gs = decode_graph_stats(&b.graph);
            if (gs.captures != 2) {
                printf("  %s: %d captures after the acts arena moved, want 2\n", label, gs.captures);
                fails++;
            }
            const int64_t all_but_one = T - 1;
            decode_batch_prefill(&b, ids, &all_but_one, row);
            ep = rel_l2_fd(row, full + (int64_t)(T - 2) * V, V);
            decode_batch_step(&b, &ids[T - 1], row);
            es = rel_l2_fd(row, full + (int64_t)(T - 1) * V, V);
            if (!(e0 <= 1e-4) || !(er <= 1e-4) || !(ep <= 1e-4) || !(es <= 1e-4)) {
                printf("  %s: prefill again %.3e, recaptured %.3e, prefill of %d %.3e, the step after it %.3e\n",
                       label, e0, er, T - 1, ep, es);
                fails++;
            }
            free(row);
        }
        decode_batch_free(&b);
    }
    double maxd = 0;
    const int diff = bit_diffs(steps[0], steps[1], T, V, &maxd);
    if (diff) {
        printf("  %s: graph replay vs plain step: %d of %d positions differ (max abs diff %.3e)\n", label, diff, T,
               maxd);
        fails++;
    }
    printf("  %-34s T=%d: worst rel err %.2e, prefill again %.2e, recaptured %.2e, prefill %.2e, then a step %.2e, "
           "graph = plain bitwise: %s  %s\n",
           label, T, worst, e0, er, ep, es, diff ? "no" : "yes", fails ? "FAIL" : "ok");
    free(ids), free(full), free(steps[0]), free(steps[1]);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
    return fails;
}

GPU_TEST(decode_steps_match_chunked_forward) {
    ModelConfig c;
    model_config_preset(&c, "tiny");
    c.num_householder = 1;
    GPU_EXPECT(model_case(c, "householder n_h=1", 72, 5) == 0, "householder n_h=1");
    model_config_preset(&c, "tiny");
    c.num_householder = 2;
    GPU_EXPECT(model_case(c, "householder n_h=2", 72, 6) == 0, "householder n_h=2");
    model_config_preset(&c, "tiny");
    c.num_householder = 3;
    GPU_EXPECT(model_case(c, "householder n_h=3", 72, 7) == 0, "householder n_h=3");
    model_config_preset(&c, "tiny");
    c.mode = GDP_MODE_SPLIT, c.num_householder = 2;
    GPU_EXPECT(model_case(c, "split r=2, random mask", 72, 8) == 0, "split r=2");
    model_config_preset(&c, "tiny");
    c.mode = GDP_MODE_SPLIT, c.num_householder = 4, c.expand_v = 2;
    GPU_EXPECT(model_case(c, "split r=4, expand_v 2, random mask", 72, 9) == 0, "split r=4");
    model_config_preset(&c, "tiny");
    c.use_short_conv = false, c.use_output_gate = false, c.use_forget_gate = false, c.num_householder = 3;
    c.tie_word_embeddings = false, c.allow_neg_eigval = false;
    GPU_EXPECT(model_case(c, "n_h=3 no conv/gates, untied", 72, 10) == 0, "plain variant");
    model_config_preset(&c, "tiny");
    c.conv_size = 2, c.expand_v = 2, c.num_householder = 2, c.num_heads = 4, c.head_dim = 16;
    GPU_EXPECT(model_case(c, "conv 2, expand_v 2, 4 heads x 16", 72, 11) == 0, "conv 2 variant");
}

/* A batch (DecodeBatch, as the C API runs it) of five sequences on CUDA: prompts of 1, 7, 65, 257
 * (a 256-token prefill chunk, then a chunk of one token: the decode kernel inside a prefill) and
 * 300 tokens, each continuing with its own tokens and ending after 3, 12, 0, 9 and 12 steps, so
 * rows leave and the rest move up. Every logit row after the prefill and after each step against
 * the chunked forward of that sequence alone (rel L2 1e-4); the run with graphs against the run
 * without, bit for bit. `group` > 0 caps the rows of one forward, so that a step is several
 * graphs over different rows of the state. Returns the number of failures. */
enum { BN = 5, BSTEPS = 12 };
static int batch_case(ModelConfig c, const char *label, int group, uint64_t seed) {
    static const int lens[BN] = {1, 7, 65, 257, 300}, steps[BN] = {3, 12, 0, 9, 12};
    Ctx *ctx = ctx_create(DEV_CUDA, ctx_default_sizes());
    ParamStore ps;
    Model m;
    c.initializer_range = 0.2;
    model_create(&m, &c, ctx, &ps, seed);
    Rng rng;
    rng_seed(&rng, seed + 100);
    random_masks(&m, &c, &rng);
    const int V = cfg_out_dim(&c);
    int32_t *seq[BN], *prompts = (int32_t *)xmalloc(sizeof(int32_t) * (1 + 7 + 65 + 257 + 300));
    int64_t lens64[BN];
    double *full[BN];
    int off = 0;
    for (int i = 0; i < BN; i++) {
        const int total = lens[i] + steps[i];
        seq[i] = (int32_t *)xmalloc((size_t)total * sizeof(int32_t));
        for (int t = 0; t < total; t++) seq[i][t] = (int32_t)rng_below(&rng, (uint64_t)c.vocab_size);
        memcpy(prompts + off, seq[i], (size_t)lens[i] * sizeof(int32_t));
        off += lens[i];
        lens64[i] = lens[i];
        full[i] = forward_logits(&m, seq[i], total);
    }
    /* rows[pass][(s * BN + i) * V]: sequence i's logits after step s (0: after the prefill) */
    const size_t nrows = (size_t)(BSTEPS + 1) * BN;
    float *rows[2];
    float *logits = (float *)xmalloc((size_t)BN * V * sizeof(float));
    int32_t tokens[BN];
    int fails = 0;
    double worst = 0;
    DecodeGraphStats gs = {0};
    for (int pass = 0; pass < 2; pass++) {
        rows[pass] = (float *)xcalloc(nrows * (size_t)V, sizeof(float));
        DecodeBatch b;
        decode_batch_init(&b, &m, BN);
        b.graph.enabled = pass == 0;
        if (group > 0) b.group = group; /* fewer rows than the work buffer holds */
        for (size_t j = 0; j < (size_t)BN * V; j++) logits[j] = NAN;
        decode_batch_prefill(&b, prompts, lens64, logits);
        memcpy(rows[pass], logits, (size_t)BN * V * sizeof(float));
        for (int s = 1; s <= BSTEPS; s++) {
            int want_live = 0;
            for (int i = 0; i < BN; i++) {
                tokens[i] = s <= steps[i] ? seq[i][lens[i] + s - 1] : -1;
                want_live += s <= steps[i];
                if (s <= steps[i])
                    for (int v = 0; v < V; v++) logits[(int64_t)i * V + v] = NAN;
            }
            const int live = decode_batch_step(&b, tokens, logits);
            if (live != want_live) {
                printf("  %s: step %d: %d live, want %d\n", label, s, live, want_live);
                fails++;
            }
            for (int i = 0; i < BN; i++)
                if (s <= steps[i])
                    memcpy(rows[pass] + ((size_t)s * BN + i) * V, logits + (int64_t)i * V, (size_t)V * sizeof(float));
        }
        if (pass == 0) gs = decode_graph_stats(&b.graph);
        decode_batch_free(&b);
    }
    for (int i = 0; i < BN; i++)
        for (int s = 0; s <= steps[i]; s++) {
            const double e = rel_l2_fd(rows[0] + ((size_t)s * BN + i) * V, full[i] + (int64_t)(lens[i] - 1 + s) * V, V);
            if (!(e <= worst)) worst = e;
            if (!(e <= 1e-4)) {
                if (fails < 3) printf("  %s: sequence %d after step %d: rel err %.3e\n", label, i, s, e);
                fails++;
            }
        }
    double maxd = 0;
    const int diff = bit_diffs(rows[0], rows[1], (int)nrows, V, &maxd);
    if (diff) {
        printf("  %s: graph vs plain: %d logit rows differ (max abs diff %.3e)\n", label, diff, maxd);
        fails++;
    }
    if (gs.capture_failed || gs.replays == 0) {
        printf("  %s: graphs: %d captures, %lld replays%s\n", label, gs.captures, (long long)gs.replays,
               gs.capture_failed ? ", a capture failed" : "");
        fails++;
    }
    printf("  %-34s group %d: worst rel err %.2e; graphs: %d captured, %lld replays, %lld plain steps; graph = plain "
           "bitwise: %s  %s\n",
           label, group, worst, gs.captures, (long long)gs.replays, (long long)gs.plain, diff ? "no" : "yes",
           fails ? "FAIL" : "ok");
    for (int i = 0; i < BN; i++) free(seq[i]), free(full[i]);
    free(prompts), free(rows[0]), free(rows[1]), free(logits);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
    return fails;
}

GPU_TEST(decode_batch_matches_each_alone) {
    ModelConfig c;
    model_config_preset(&c, "tiny");
    GPU_EXPECT(batch_case(c, "householder n_h=2", 0, 21) == 0, "householder, one group");
    GPU_EXPECT(batch_case(c, "householder n_h=2", 2, 22) == 0, "householder, groups of 2");
    model_config_preset(&c, "tiny");
    c.mode = GDP_MODE_SPLIT, c.num_householder = 2;
    GPU_EXPECT(batch_case(c, "split r=2, random mask", 2, 23) == 0, "split, groups of 2");
}

/* ---------------------------------------------------------------- sampling on the GPU */

/* Whether the CPU, with u and top_p moved by up to 1e-5, picks `want` from row: an interval's
 * boundary, which the GPU's order of summation may put on the other side (kernels/sample.h). */
static bool boundary_explains(const float *row, const unsigned char *seen, int V, int n_tok, const SampleParams *p,
                              double u, int want) {
    float *work = (float *)xmalloc((size_t)V * sizeof(float));
    const bool nucleus = p->top_p > 0 && p->top_p < 1;
    bool hit = false;
    for (int du = -1; du <= 1 && !hit; du++)
        for (int dp = -1; dp <= 1 && !hit; dp++) {
            if (!nucleus && dp) continue;
            const double uu = fmin(fmax(u + du * 1e-5, 0.0), 0x1.fffffffffffffp-1);
            memcpy(work, row, (size_t)V * sizeof(float));
            int32_t out = -1;
            SampleArgs a = {work, seen, NULL, n_tok, &uu, &out, 1, V, n_tok, p->temperature, p->top_k,
                            p->top_p + dp * 1e-5, p->repetition_penalty};
            sample_rows_cpu(&a);
            hit = out == want;
        }
    free(work);
    return hit;
}

typedef struct PickTally {
    long rows, boundary, wrong, logit_rows_differ, not_repeated;
} PickTally;

/* Six sequences on CUDA (prompts of 1, 7, 0, 65, 257 and 300 tokens; 4, 13, 0, 1, 10 and 13 tokens
 * made, so they end at different steps and one never starts), twice over the same batches: sampled
 * on the GPU where the forward left the logits (decode_batch_*_pick, with keep_logits) and, on a
 * second batch of the same model, brought back and sampled on the host (decode_batch_prefill/step +
 * sampler_pick), both samplers seeded alike and both batches fed the host's tokens. Every row: the
 * GPU's token is the host's, or (sampling) one a boundary explains; the GPU batch's logits
 * (decode_batch_logits) are the host batch's bit for bit; the second round, which replays graphs
 * the first captured and uploads the restarted sequences' masks again, gives the first round's
 * tokens; the generators drew alike. At one step every sequence observes two more tokens than it
 * is fed, more than the GPU's list of observed tokens holds. `group` > 0 caps the rows of a step's
 * forward. Returns the number of failures. */
enum { PN = 6, PMAX_LEN = 300, PSTEPS = 13 };
static int pick_case(Model *m, const SampleParams *p, const char *label, int group, PickTally *t) {
    static const int lens[PN] = {1, 7, 0, 65, 257, 300}, made[PN] = {4, 13, 0, 1, 10, 13};
    const int V = (int)cfg_out_dim(&m->cfg), n_tok = V - 3;
    Rng rng;
    rng_seed(&rng, 41);
    int32_t *prompts = (int32_t *)xmalloc((size_t)PN * PMAX_LEN * sizeof(int32_t));
    int64_t lens64[PN], total = 0;
    for (int i = 0; i < PN; i++) {
        for (int k = 0; k < lens[i]; k++) prompts[total + k] = (int32_t)rng_below(&rng, (uint64_t)n_tok);
        lens64[i] = lens[i], total += lens[i];
    }
    DecodeBatch pick, ref;
    decode_batch_init(&pick, m, PN), decode_batch_init(&ref, m, PN);
    pick.keep_logits = true;
    if (group > 0) pick.group = ref.group = group;
    Sampler sp, sr;
    sampler_init(&sp, PN, n_tok, V, p, 7), sampler_init(&sr, PN, n_tok, V, p, 7);
    float *logits = (float *)xmalloc((size_t)PN * V * sizeof(float));
    int32_t got[PN], want[PN], feed[PN], first_round[PSTEPS][PN];
    Rng before[PN];
    int fails = 0;
    for (int round = 0; round < 2; round++) {
        int64_t off = 0;
        for (int i = 0; i < PN; off += lens[i++])
            sampler_start(&sp, i, prompts + off, lens[i]), sampler_start(&sr, i, prompts + off, lens[i]);
        memcpy(before, sr.rng, sizeof before);
        decode_batch_prefill_pick(&pick, prompts, lens64, &sp, got);
        decode_batch_prefill(&ref, prompts, lens64, logits);
        sampler_pick(&sr, logits, ref.ended, want);
        for (int step = 0;; step++) {
            int live = 0;
            for (int i = 0; i < PN; i++) {
                feed[i] = -1;
                if (step >= made[i]) {
                    if (got[i] != -1 || want[i] != -1) {
                        printf("  %s: round %d step %d: ended sequence %d got %d (gpu) / %d (host)\n", label, round,
                               step, i, got[i], want[i]);
                        fails++;
                    }
                    continue;
                }
                t->rows++;
                const float *kept = decode_batch_logits(&pick, i);
                if (!kept || memcmp(kept, logits + (int64_t)i * V, (size_t)V * sizeof(float))) t->logit_rows_differ++;
                if (round == 0) first_round[step][i] = got[i];
                else if (got[i] != first_round[step][i]) t->not_repeated++;
                if (got[i] != want[i]) {
                    Rng draw = before[i];
                    const double u = p->temperature > 0 ? rng_uniform(&draw) : 0;
                    const unsigned char *mask = sr.seen ? sr.seen + (size_t)i * n_tok : NULL;
                    if (p->temperature > 0 && got[i] >= 0 && got[i] < n_tok &&
                        boundary_explains(logits + (int64_t)i * V, mask, V, n_tok, p, u, got[i])) {
                        t->boundary++;
                    } else if (++t->wrong <= 5) {
                        printf("  %s: round %d step %d sequence %d: gpu %d, host %d (u %.17g)\n", label, round, step,
                               i, got[i], want[i], u);
                    }
                }
                if (step + 1 == made[i]) continue; /* its last token needs no step */
                feed[i] = want[i];
                sampler_observe(&sp, i, feed[i]), sampler_observe(&sr, i, feed[i]);
                if (step == 2)
                    for (int e = 1; e <= 2; e++) {
                        const int32_t extra = (int32_t)((feed[i] + 17 * e) % n_tok);
                        sampler_observe(&sp, i, extra), sampler_observe(&sr, i, extra);
                    }
                live++;
            }
            if (live == 0) break;
            memcpy(before, sr.rng, sizeof before);
            const int lp = decode_batch_step_pick(&pick, feed, &sp, got), lr = decode_batch_step(&ref, feed, logits);
            if (lp != live || lr != live) {
                printf("  %s: round %d step %d: %d / %d live, want %d\n", label, round, step + 1, lp, lr, live);
                fails++;
            }
            sampler_pick(&sr, logits, ref.ended, want);
        }
    }
    if (memcmp(sp.rng, sr.rng, sizeof(Rng) * PN)) {
        printf("  %s: the GPU sampler's generators drew other than the host's\n", label);
        fails++;
    }
    const DecodeGraphStats gs = decode_graph_stats(&pick.graph);
    if (gs.capture_failed || gs.replays == 0) {
        printf("  %s: graphs: %d captures, %lld replays%s\n", label, gs.captures, (long long)gs.replays,
               gs.capture_failed ? ", a capture failed" : "");
        fails++;
    }
    decode_batch_free(&pick), decode_batch_free(&ref);
    sampler_free(&sp), sampler_free(&sr);
    free(prompts), free(logits);
    return fails;
}

static const SampleParams pick_settings[] = {
    {0, 0, 1, 1}, {0, 0, 1, 1.3}, {0.8, 40, 0.9, 1.3}, {1.0, 40, 1, 1.3},
};
static const char *pick_labels[] = {
    "greedy", "greedy, penalty 1.3", "T 0.8, top-k 40, top-p 0.9, penalty 1.3", "T 1, top-k 40, penalty 1.3",
};

static Model *pick_model(Ctx **ctx, ParamStore *ps, Model *m) {
    ModelConfig c;
    model_config_preset(&c, "tiny");
    c.initializer_range = 0.2;
    *ctx = ctx_create(DEV_CUDA, ctx_default_sizes());
    model_create(m, &c, *ctx, ps, 51);
    return m;
}

GPU_TEST(decode_pick_matches_logits_and_sampler) {
    Ctx *ctx;
    ParamStore ps;
    Model m;
    pick_model(&ctx, &ps, &m);
    PickTally all = {0};
    for (size_t k = 0; k < GDP_ARRAY_LEN(pick_settings); k++)
        for (int group = 0; group <= 2; group += 2) {
            PickTally t = {0};
            const int f = pick_case(&m, &pick_settings[k], pick_labels[k], group, &t);
            printf("  %-42s group %d: %ld rows, %ld boundary, %ld wrong, %ld logit rows differ, %ld not repeated  %s\n",
                   pick_labels[k], group, t.rows, t.boundary, t.wrong, t.logit_rows_differ, t.not_repeated,
                   f || t.wrong || t.logit_rows_differ || t.not_repeated ? "FAIL" : "ok");
            GPU_EXPECT(f == 0, "%s, group %d: %d failures", pick_labels[k], group, f);
            GPU_EXPECT(pick_settings[k].temperature > 0 || t.boundary == 0,
                       "%s, group %d: greedy picks must equal the host's exactly", pick_labels[k], group);
            all.rows += t.rows, all.boundary += t.boundary, all.wrong += t.wrong;
            all.logit_rows_differ += t.logit_rows_differ, all.not_repeated += t.not_repeated;
        }
    GPU_EXPECT(all.wrong == 0, "%ld of %ld rows picked other than the host away from any boundary", all.wrong,
               all.rows);
    GPU_EXPECT(all.boundary <= 1 + all.rows / 1000, "%ld of %ld rows are boundary cases: more than 1 in 1000",
               all.boundary, all.rows);
    GPU_EXPECT(all.logit_rows_differ == 0, "%ld logit rows of the GPU-sampled batch differ from the host batch's",
               all.logit_rows_differ);
    GPU_EXPECT(all.not_repeated == 0, "%ld rows gave another token in the second round", all.not_repeated);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
}

/* ---------------------------------------------------------------- small run for compute-sanitizer */
static int sanitize_main(void) {
    double worst;
    int f = kernel_case(&dec_cases[1], 1, 2, 1e-5, &worst);
    f += kernel_case(&dec_cases[12], 2, 2, 1e-5, &worst);
    ModelConfig c;
    model_config_preset(&c, "tiny");
    c.mode = GDP_MODE_SPLIT;
    f += model_case(c, "split r=2 (sanitize)", 4, 3);
    model_config_preset(&c, "tiny");
    f += batch_case(c, "householder (sanitize)", 2, 4);
    Ctx *ctx;
    ParamStore ps;
    Model m;
    PickTally t = {0};
    f += pick_case(pick_model(&ctx, &ps, &m), &pick_settings[2], "sampled (sanitize)", 2, &t) + (int)t.wrong;
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
    printf("sanitize run: %s\n", f ? "FAILED" : "done");
    return f ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--sanitize")) return sanitize_main();
    return gpu_test_run(argc, argv);
}
