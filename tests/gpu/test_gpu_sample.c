/* Batched sampling on CUDA (kernels/sample.cu) against its CPU reference (kernels/sample_cpu.c, which
 * tests/test_model.c checks against sample_next):
 *   - every setting (greedy, temperature alone, top-k, top-p, repetition penalty and their
 *     combinations) on six kinds of rows (normal logits, peaked, nearly flat, integer ties, one
 *     value repeated, signed zeros with -inf), vocabularies of 1 to 4097 tokens and 32000, with and
 *     without padding columns past n_tok (filled with a logit larger than any candidate, so that a
 *     padding id picked shows), 64 rows a batch, u from each row's Rng (u = 0 and the largest u below
 *     1 on two rows), the GPU reading the masks through seen_row every other batch (in reverse order,
 *     in wider rows). A row must give the CPU's id; where it does not, the CPU run again with u and
 *     top_p moved by up to 1e-5 must give the GPU's id (a boundary that summation order may flip),
 *     else the row fails. Rows of continuous logits may have at most one such boundary row per 1000;
 *   - the same batch twice gives the same ids; nothing is written past the rows or n_tok
 *     (the argument checks, shared with the CPU reference, are tests/test_model.c's);
 *   - sample_mark_seen_cuda sets exactly the listed tokens of the listed masks.
 * `test_gpu_sample --bench` prints the time of a 64 x 32000 batch for a few settings instead;
 * `test_gpu_sample NAME...` runs only the tests whose name contains one of the NAMEs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "base/common.h"
#include "base/cuda_check.h"
#include "kernels/sample.h"
#include "tests/gpu/gpu_poisoned.h"
#include "tests/gpu/gpu_test.h"

#ifndef SAMPLE_TEST_ROWS
#define SAMPLE_TEST_ROWS 64
#endif
#define BOUNDARY_EPS 1e-5
#define PAD_LOGIT 1.0e4f

typedef struct Setting {
    const char *name;
    double temperature;
    int top_k;
    double top_p;
    double penalty;
} Setting;

static const Setting settings[] = {
    {"greedy", 0, 0, 1, 1},
    {"greedy, penalty 1.3", 0, 0, 1, 1.3},
    {"greedy (negative temperature), top-k and top-p unused", -1, 5, 0.5, 1},
    {"temperature 1", 1, 0, 1, 1},
    {"temperature 0.7, top_p 0 (off)", 0.7, 0, 0, 1},
    {"temperature 1.8", 1.8, 0, 1, 1},
    {"top-k 1", 1, 1, 1, 1},
    {"top-k 2", 1, 2, 1, 1},
    {"top-k 40, temperature 0.8", 0.8, 40, 1, 1},
    {"top-k 1000, temperature 1.2", 1.2, 1000, 1, 1},
    {"top-p 0.1", 1, 0, 0.1, 1},
    {"top-p 0.5, temperature 0.7", 0.7, 0, 0.5, 1},
    {"top-p 0.9", 1, 0, 0.9, 1},
    {"top-p 0.999, temperature 1.5", 1.5, 0, 0.999, 1},
    {"penalty 1.3", 1, 0, 1, 1.3},
    {"penalty 0.7, temperature 0.9", 0.9, 0, 1, 0.7},
    {"top-k 50, penalty 1.2", 1, 50, 1, 1.2},
    {"top-k 50, top-p 0.9, temperature 0.8", 0.8, 50, 0.9, 1},
    {"top-k 50, top-p 0.9, penalty 1.2, temperature 0.8", 0.8, 50, 0.9, 1.2},
    {"top-k 3, top-p 0.95", 1, 3, 0.95, 1},
    {"top-k 1, top-p 0.5", 1, 1, 0.5, 1},
    {"top-p 0.6, penalty 2", 1.1, 0, 0.6, 2},
};
#define N_SETTINGS ((int)GDP_ARRAY_LEN(settings))

enum { D_NORMAL, D_PEAKED, D_FLAT, D_TIES, D_EQUAL, D_ZEROS_INF, N_DIST };
static const char *dist_names[N_DIST] = {"normal", "peaked", "flat", "integer ties", "all equal", "signed zeros, -inf"};
/* Rows whose logits are continuous: a boundary there is a coincidence, so they may have few. */
static bool dist_continuous(int d) { return d == D_NORMAL || d == D_PEAKED || d == D_FLAT; }

static void fill_row(float *row, int v, int n, int dist, Rng *r) {
    for (int i = 0; i < n; i++) {
        switch (dist) {
        case D_NORMAL: row[i] = (float)(2.0 * rng_normal(r)); break;
        case D_PEAKED: row[i] = (float)(6.0 * rng_normal(r)); break;
        case D_FLAT: row[i] = (float)(0.05 * rng_normal(r)); break;
        case D_TIES: row[i] = (float)((int)rng_below(r, 7) - 3); break;
        case D_EQUAL: row[i] = 1.5f; break;
        default: {
            static const float vals[5] = {-0.0f, 0.0f, -1.0f, 1.0f, -INFINITY};
            row[i] = vals[rng_below(r, 5)];
        }
        }
    }
    if (dist == D_ZEROS_INF) row[rng_below(r, (uint64_t)n)] = -0.0f; /* one finite logit at least */
    for (int i = n; i < v; i++) row[i] = PAD_LOGIT;
}

typedef struct Tally {
    long rows, exact, boundary, wrong;
    long cont_rows, cont_boundary; /* continuous rows only */
} Tally;

/* A device buffer of `bytes`, holding h when given. */
static float *dev_copy(const void *h, size_t bytes) {
    void *d = NULL;
    CUDA_CHECK(cudaMalloc(&d, bytes ? bytes : 1));
    if (h && bytes) CUDA_CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return (float *)d;
}

/* The CPU's id for one row again, with u and top_p moved. */
static int cpu_one(const float *row0, const unsigned char *seen, int v, int n, const Setting *s, double u,
                   double top_p) {
    float *row = (float *)xmalloc((size_t)v * sizeof(float));
    memcpy(row, row0, (size_t)v * sizeof(float));
    int32_t out = -1;
    SampleArgs a = {row, seen, NULL, 0, &u, &out, 1, v, n, s->temperature, s->top_k, top_p, s->penalty};
    sample_rows_cpu(&a);
    free(row);
    return out;
}

/* Whether some u and top_p within BOUNDARY_EPS of the row's make the CPU pick `want`. */
static bool boundary_explains(const float *row0, const unsigned char *seen, int v, int n, const Setting *s, double u,
                              int want) {
    const bool nucleus = s->top_p > 0 && s->top_p < 1;
    const double below1 = 0x1.fffffffffffffp-1;
    for (int du = -1; du <= 1; du++)
        for (int dp = -1; dp <= 1; dp++) {
            if (!nucleus && dp) continue;
            const double uu = fmin(fmax(u + du * BOUNDARY_EPS, 0.0), below1);
            const double pp = nucleus ? fmin(fmax(s->top_p + dp * BOUNDARY_EPS, 1e-12), 1 - 1e-12) : s->top_p;
            if (cpu_one(row0, seen, v, n, s, uu, pp) == want) return true;
        }
    return false;
}

/* One batch of `rows` rows on both devices; mismatches are judged and counted. */
static void run_batch(const Setting *s, int dist, int v, int n, int rows, uint64_t seed, Tally *t) {
    Rng r;
    rng_seed(&r, seed);
    const size_t nl = (size_t)rows * (size_t)v;
    float *logits = (float *)xmalloc(nl * sizeof(float)), *work = (float *)xmalloc(nl * sizeof(float));
    for (int i = 0; i < rows; i++) fill_row(logits + (size_t)i * v, v, n, dist, &r);
    /* the history mask: also given with no penalty (then unused), and with ids past n_tok */
    unsigned char *seen = NULL;
    if (s->penalty != 1 || rng_below(&r, 2)) {
        seen = (unsigned char *)xcalloc(nl, 1);
        for (int i = 0; i < rows; i++) {
            const int hist = (int)rng_below(&r, (uint64_t)(2 * n + 1));
            for (int h = 0; h < hist; h++) seen[(size_t)i * v + rng_below(&r, (uint64_t)v)] = 1;
        }
    }
    const bool sampling = s->temperature > 0;
    double *u = (double *)xmalloc((size_t)rows * sizeof(double));
    for (int i = 0; i < rows; i++) {
        Rng seq; /* each row its own sequence, as a batch of generations would have */
        rng_seed(&seq, seed * 1000003u + (uint64_t)i);
        u[i] = rng_uniform(&seq);
    }
    if (rows > 2) u[0] = 0.0, u[1] = 0x1.fffffffffffffp-1;

    int32_t *cpu = (int32_t *)xmalloc((size_t)rows * sizeof(int32_t));
    int32_t *gpu = (int32_t *)xmalloc((size_t)rows * sizeof(int32_t));
    memcpy(work, logits, nl * sizeof(float));
    SampleArgs ca = {work, seen, NULL, 0, sampling ? u : NULL, cpu, rows, v, n, s->temperature, s->top_k, s->top_p,
                     s->penalty};
    sample_rows_cpu(&ca);

    /* every other batch the GPU finds the masks through seen_row: in reverse order, in wider rows */
    const bool by_index = seen && seed % 2;
    const int64_t stride = by_index ? v + 7 : 0;
    unsigned char *masks = seen;
    int32_t *mask_of = NULL;
    if (by_index) {
        masks = (unsigned char *)xcalloc((size_t)(rows * stride), 1);
        mask_of = (int32_t *)xmalloc((size_t)rows * sizeof(int32_t));
        for (int i = 0; i < rows; i++) {
            mask_of[i] = rows - 1 - i;
            memcpy(masks + mask_of[i] * stride, seen + (size_t)i * v, (size_t)v);
        }
    }
    float *d_logits = dev_copy(logits, nl * sizeof(float));
    unsigned char *d_seen = seen ? (unsigned char *)dev_copy(masks, by_index ? (size_t)(rows * stride) : nl) : NULL;
    int32_t *d_mask_of = by_index ? (int32_t *)dev_copy(mask_of, (size_t)rows * sizeof(int32_t)) : NULL;
    double *d_u = sampling ? (double *)dev_copy(u, (size_t)rows * sizeof(double)) : NULL;
    int32_t *d_out = (int32_t *)dev_copy(NULL, (size_t)rows * sizeof(int32_t));
    SampleArgs ga = {d_logits, d_seen, d_mask_of, stride, d_u, d_out, rows, v, n, s->temperature, s->top_k, s->top_p,
                     s->penalty};
    sample_rows_cuda(&ga, NULL);
    CUDA_CHECK(cudaMemcpy(gpu, d_out, (size_t)rows * sizeof(int32_t), cudaMemcpyDeviceToHost));

    for (int i = 0; i < rows; i++) {
        const float *row = logits + (size_t)i * v;
        const unsigned char *srow = seen ? seen + (size_t)i * v : NULL;
        t->rows++;
        if (dist_continuous(dist)) t->cont_rows++;
        if (gpu[i] == cpu[i]) {
            t->exact++;
            continue;
        }
        const bool in_range = gpu[i] >= 0 && gpu[i] < n;
        if (in_range && sampling && boundary_explains(row, srow, v, n, s, u[i], gpu[i])) {
            t->boundary++;
            if (dist_continuous(dist)) t->cont_boundary++;
            continue;
        }
        if (++t->wrong <= 10)
            printf("  differs: %s, %s rows, v %d, n_tok %d, row %d (u %.17g): gpu picked %d, cpu %d%s\n", s->name,
                   dist_names[dist], v, n, i, u[i], gpu[i], cpu[i], in_range ? "" : " (not a candidate)");
    }
    CUDA_CHECK(cudaFree(d_logits));
    if (d_seen) CUDA_CHECK(cudaFree(d_seen));
    if (d_mask_of) CUDA_CHECK(cudaFree(d_mask_of));
    if (d_u) CUDA_CHECK(cudaFree(d_u));
    CUDA_CHECK(cudaFree(d_out));
    if (by_index) free(masks), free(mask_of);
    free(logits), free(work), free(seen), free(u), free(cpu), free(gpu);
}

static void report(const char *what, const Tally *t, int *failures) {
    printf("   %s: %ld rows, %ld exact, %ld boundary (%ld of %ld continuous), %ld wrong\n", what, t->rows, t->exact,
           t->boundary, t->cont_boundary, t->cont_rows, t->wrong);
    GPU_EXPECT(t->wrong == 0, "%s: %ld rows differ from the CPU away from any boundary", what, t->wrong);
    GPU_EXPECT(t->cont_boundary <= 1 + t->cont_rows / 1000,
               "%s: %ld of %ld rows of continuous logits are boundary cases; more than 1 in 1000 means a "
               "systematic difference, not summation order",
               what, t->cont_boundary, t->cont_rows);
}

GPU_TEST(small_vocab_matches_cpu) {
    static const int vs[] = {1, 2, 7, 100, 1000, 4097};
    Tally t = {0};
    uint64_t seed = 1;
    for (size_t iv = 0; iv < GDP_ARRAY_LEN(vs); iv++)
        for (int pad = 0; pad <= (vs[iv] >= 7); pad++)
            for (int s = 0; s < N_SETTINGS; s++)
                for (int d = 0; d < N_DIST; d++) {
                    const int v = vs[iv] + 3 * pad, n = vs[iv];
                    run_batch(&settings[s], d, v, n, SAMPLE_TEST_ROWS, seed++, &t);
                }
    report("vocabularies 1 to 4097", &t, failures);
}

GPU_TEST(vocab_32000_matches_cpu) {
    Tally t = {0};
    uint64_t seed = 100000;
    for (int s = 0; s < N_SETTINGS; s++)
        for (int d = 0; d < N_DIST; d++) {
            const int v = (s + d) % 2 ? 32064 : 32000; /* a padded head every other batch */
            run_batch(&settings[s], d, v, 32000, SAMPLE_TEST_ROWS, seed++, &t);
        }
    report("vocabulary 32000", &t, failures);
}

/* The same inputs twice give the same ids; the ids, the padding columns and the bytes around every
 * buffer are as they must be. */
GPU_TEST(deterministic_and_in_bounds) {
    const int rows = 37, v = 32003, n = 32000;
    const Setting *s = &settings[18]; /* top-k, top-p, penalty */
    Rng r;
    rng_seed(&r, 77);
    const size_t nl = (size_t)rows * v;
    float *logits = (float *)xmalloc(nl * sizeof(float)), *back = (float *)xmalloc(nl * sizeof(float));
    for (int i = 0; i < rows; i++) fill_row(logits + (size_t)i * v, v, n, i % 2 ? D_FLAT : D_NORMAL, &r);
    unsigned char *seen = (unsigned char *)xcalloc(nl, 1);
    for (size_t i = 0; i < nl; i++) seen[i] = rng_below(&r, 50) == 0;
    double *u = (double *)xmalloc((size_t)rows * sizeof(double));
    for (int i = 0; i < rows; i++) u[i] = rng_uniform(&r);
    int32_t first[37], again[37];
    for (int rep = 0; rep < 2; rep++) {
        DevBuf dl = dev_buf(1, nl * sizeof(float), 4, logits);
        DevBuf ds = dev_buf(1, nl, 1, seen);
        DevBuf du = dev_buf(1, (size_t)rows * sizeof(double), 8, u);
        DevBuf dout = dev_buf(1, (size_t)rows * sizeof(int32_t), 4, NULL);
        SampleArgs a = {(float *)dl.p, (const unsigned char *)ds.p, NULL, 0, (const double *)du.p, (int32_t *)dout.p,
                        rows, v, n, s->temperature, s->top_k, s->top_p, s->penalty};
        sample_rows_cuda(&a, NULL);
        CUDA_CHECK(cudaDeviceSynchronize());
        GPU_EXPECT(dev_take(&dl, back), "logits: bytes around the rows were written");
        GPU_EXPECT(dev_take(&ds, NULL), "seen: bytes around the masks were written");
        GPU_EXPECT(dev_take(&du, NULL), "u: bytes around the uniforms were written");
        GPU_EXPECT(dev_take(&dout, rep ? again : first), "out: bytes past the rows were written");
        int pad_changed = 0;
        for (int i = 0; i < rows; i++)
            for (int j = n; j < v; j++) pad_changed += back[(size_t)i * v + j] != PAD_LOGIT;
        GPU_EXPECT(pad_changed == 0, "%d logits past n_tok were written", pad_changed);
    }
    int same = 0;
    for (int i = 0; i < rows; i++) same += first[i] == again[i];
    GPU_EXPECT(same == rows, "only %d of %d rows gave the same id on a second run", same, rows);
    free(logits), free(back), free(seen), free(u);
}

/* A Sampler's masks on the GPU catch up with the tokens it observed (layers/sampler.c): the listed
 * (mask, token) cells become 1, ids outside [0, n_tok) and repeats included, and no other byte of the
 * masks or around them changes. */
GPU_TEST(mark_seen_sets_the_listed_tokens) {
    enum { MASKS = 9, COUNT = 40 };
    const int n_tok = 1000;
    const int64_t stride = 1003;
    const size_t bytes = (size_t)(MASKS * stride);
    Rng r;
    rng_seed(&r, 31);
    unsigned char *masks = (unsigned char *)xmalloc(bytes), *want = (unsigned char *)xmalloc(bytes);
    unsigned char *back = (unsigned char *)xmalloc(bytes);
    for (size_t i = 0; i < bytes; i++) masks[i] = rng_below(&r, 20) == 0;
    memcpy(want, masks, bytes);
    int32_t seq[COUNT], tok[COUNT];
    for (int j = 0; j < COUNT; j++) {
        static const int32_t outside[3] = {-1, 1000, 1002};
        seq[j] = (int32_t)rng_below(&r, MASKS);
        tok[j] = j % 7 == 3 ? outside[j % 3] : j % 5 == 4 ? tok[j - 1] : (int32_t)rng_below(&r, (uint64_t)n_tok);
        if (tok[j] >= 0 && tok[j] < n_tok) want[seq[j] * stride + tok[j]] = 1;
    }
    DevBuf dm = dev_buf(1, bytes, 1, masks);
    DevBuf dseq = dev_buf(1, sizeof seq, 4, seq), dtok = dev_buf(1, sizeof tok, 4, tok);
    sample_mark_seen_cuda((unsigned char *)dm.p, stride, (const int32_t *)dseq.p, (const int32_t *)dtok.p, COUNT, n_tok,
                          NULL);
    CUDA_CHECK(cudaDeviceSynchronize());
    GPU_EXPECT(dev_take(&dm, back), "masks: bytes around them were written");
    GPU_EXPECT(dev_take(&dseq, NULL) && dev_take(&dtok, NULL), "the token list was written");
    size_t wrong = 0;
    for (size_t i = 0; i < bytes; i++) wrong += back[i] != want[i];
    GPU_EXPECT(wrong == 0, "%zu mask bytes differ from the host's marks", wrong);
    free(masks), free(want), free(back);
}

/* 64 x 32000 on a stream, the logits restored from a pristine copy before each call. */
static void sample_bench(void) {
    const int rows = 64, v = 32000, reps = 20;
    const size_t nl = (size_t)rows * v;
    Rng r;
    rng_seed(&r, 5);
    float *h = (float *)xmalloc(nl * sizeof(float));
    for (int i = 0; i < rows; i++) fill_row(h + (size_t)i * v, v, v, D_NORMAL, &r);
    unsigned char *hs = (unsigned char *)xcalloc(nl, 1);
    for (size_t i = 0; i < nl; i++) hs[i] = rng_below(&r, 100) == 0;
    double hu[64];
    for (int i = 0; i < rows; i++) hu[i] = rng_uniform(&r);
    float *pristine = dev_copy(h, nl * sizeof(float)), *work = dev_copy(h, nl * sizeof(float));
    unsigned char *seen = (unsigned char *)dev_copy(hs, nl);
    double *u = (double *)dev_copy(hu, sizeof hu);
    int32_t *out = (int32_t *)dev_copy(NULL, rows * sizeof(int32_t));
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    static const int which[] = {0, 3, 8, 12, 18};
    printf("sampling 64 x 32000 (ms a call, the restoring copy subtracted):\n");
    for (size_t w = 0; w < GDP_ARRAY_LEN(which); w++) {
        const Setting *s = &settings[which[w]];
        SampleArgs a = {work, s->penalty != 1 ? seen : NULL, NULL, 0, u, out, rows, v, v, s->temperature, s->top_k,
                        s->top_p,
                        s->penalty};
        float ms_all = 0, ms_copy = 0;
        for (int pass = 0; pass < 2; pass++) {
            CUDA_CHECK(cudaEventRecord(e0, NULL));
            for (int i = 0; i < reps; i++) {
                CUDA_CHECK(cudaMemcpyAsync(work, pristine, nl * sizeof(float), cudaMemcpyDeviceToDevice, NULL));
                if (pass == 0) sample_rows_cuda(&a, NULL);
            }
            CUDA_CHECK(cudaEventRecord(e1, NULL));
            CUDA_CHECK(cudaEventSynchronize(e1));
            CUDA_CHECK(cudaEventElapsedTime(pass ? &ms_copy : &ms_all, e0, e1));
        }
        printf("  %-50s %8.4f\n", s->name, (ms_all - ms_copy) / reps);
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaFree(pristine));
    CUDA_CHECK(cudaFree(work));
    CUDA_CHECK(cudaFree(seen));
    CUDA_CHECK(cudaFree(u));
    CUDA_CHECK(cudaFree(out));
    free(h), free(hs);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--bench")) {
        sample_bench();
        return 0;
    }
    return gpu_test_run(argc, argv);
}
