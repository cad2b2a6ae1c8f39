/* The model-level C API (api/gdp_model.h) on CUDA against the same API on the CPU: a tiny model
 * trained here on the CPU, loaded on both devices; a batch of four prompts (1, 12, 257 and 300
 * tokens: the last two cross a prefill chunk, and 257 leaves a one-token chunk, which the GDP op
 * runs with its decode kernel) prefilled on each, then 20 steps that feed both devices the CPU's
 * greedy tokens, the sequences ending after 5, 20, 12 and 1 of them. Both devices run the same
 * code (layers/decode.h: the live rows stepped together through model_forward_state, on CUDA
 * replayed from CUDA graphs). The logits after the prefill and after every step agree within
 * rel L2 1e-3 (float32 on both), a greedy sample on CUDA is its logits' argmax, and an ended
 * sequence has no logits. The whole run is made twice on the same batches (a new prefill): the
 * second round finds the first round's graphs for the same rows, so it replays (or captures) where
 * the first ran its warm-up steps plain, and its CUDA logits equal the first round's bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/gdp_model.h"
#include "base/common.h"
#include "train/train.h"
#include "tests/gpu/gpu_test.h"

static double rel_l2f(const float *a, const float *b, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) num += (double)(a[i] - b[i]) * (a[i] - b[i]), den += (double)b[i] * b[i];
    return sqrt(num / (den > 0 ? den : 1e-300));
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

GPU_TEST(api_cuda_matches_cpu) {
    char dir[300], corpus[400], run[400], cmd[1000];
    snprintf(dir, sizeof dir, "%s/gdp_gpu_api_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) gdp_fatal("test_gpu_api: mkdtemp failed");
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    snprintf(run, sizeof run, "%s/run", dir);
    snprintf(cmd, sizeof cmd, "cat layers/*.h core/*.h > '%s'", corpus);
    if (system(cmd) != 0) gdp_fatal("test_gpu_api: cannot write %s (run from the repository root)", corpus);
    TrainOptions o = train_default_options();
    o.data = corpus, o.out = run, o.device = "cpu";
    o.batch = 2, o.seq = 32, o.steps = 20, o.lr = 1e-2, o.warmup = 2;
    o.eval_every = 0, o.eval_batches = 1, o.quiet = true, o.seed = 3;
    Dist d;
    dist_init_single(&d);
    TrainResult r;
    train_run(&o, &d, &r);

    enum { NSEQ = 4, STEPS = 20, NIDS = 1 + 12 + 257 + 300 };
    GdpModel *m[2] = {NULL, NULL};
    GdpBatch *b[2] = {NULL, NULL};
    const char *dev[2] = {"cpu", "cuda"};
    GdpSampling greedy = gdp_sampling_default();
    greedy.temperature = 0;
    for (int k = 0; k < 2; k++) {
        if (gdp_model_load(run, dev[k], NULL, &m[k]) != 0 || gdp_batch_new(m[k], NSEQ, &greedy, &b[k]) != 0)
            gdp_fatal("test_gpu_api: %s", gdp_model_last_error());
    }
    GPU_EXPECT(!strcmp(gdp_model_device(m[1]), "cuda"), "device %s", gdp_model_device(m[1]));
    const int V = gdp_model_vocab_size(m[0]);
    int32_t ids[NIDS];
    const int64_t lens[NSEQ] = {1, 12, 257, 300};
    for (int i = 0; i < NIDS; i++) ids[i] = "static Tensor *op_matmul(Ctx *ctx) {\n"[i % 38];
    const int stop[NSEQ] = {5, 20, 12, 1};
    /* the CUDA logits of each round: [round][step][sequence][V] */
    float *cuda_logits[2];
    for (int round = 0; round < 2; round++) {
        cuda_logits[round] = (float *)xcalloc((size_t)(STEPS + 1) * NSEQ * V, sizeof(float));
        for (int k = 0; k < 2; k++)
            if (gdp_batch_prefill(b[k], ids, lens) != 0) gdp_fatal("test_gpu_api: %s", gdp_model_last_error());
        double worst = 0;
        for (int step = 0; step <= STEPS; step++) {
            int32_t next[2][NSEQ];
            for (int k = 0; k < 2; k++) gdp_batch_sample(b[k], next[k]);
            int want_live = 0;
            for (int i = 0; i < NSEQ; i++) {
                const float *lc = gdp_batch_logits(b[0], i), *lg = gdp_batch_logits(b[1], i);
                const bool live = step < stop[i];
                GPU_EXPECT(!live == (lc == NULL) && !live == (lg == NULL),
                           "round %d step %d sequence %d: logits %p / %p", round, step, i, (const void *)lc,
                           (const void *)lg);
                if (!live || !lc || !lg) {
                    next[0][i] = -1;
                    continue;
                }
                memcpy(cuda_logits[round] + ((size_t)step * NSEQ + i) * V, lg, (size_t)V * sizeof(float));
                const double e = rel_l2f(lg, lc, V);
                worst = e > worst ? e : worst;
                GPU_EXPECT(e <= 1e-3, "round %d step %d sequence %d: cuda vs cpu logits rel L2 %.2e", round, step, i,
                           e);
                GPU_EXPECT(next[1][i] == argmax(lg, V), "round %d step %d sequence %d: greedy %d, argmax %d", round,
                           step, i, next[1][i], argmax(lg, V));
                if (step + 1 == stop[i]) next[0][i] = -1;
                else want_live++;
            }
            for (int k = 0; k < 2; k++) { /* both consume the CPU's tokens */
                const int live = gdp_batch_step(b[k], next[0]);
                GPU_EXPECT(live == want_live, "round %d step %d on %s: %d live, want %d", round, step, dev[k], live,
                           want_live);
            }
        }
        printf("   round %d: cuda vs cpu through the API: worst logits rel L2 %.2e\n", round + 1, worst);
    }
    const size_t n = (size_t)(STEPS + 1) * NSEQ * V;
    GPU_EXPECT(!memcmp(cuda_logits[0], cuda_logits[1], n * sizeof(float)),
               "the second round's CUDA logits (replayed graphs) differ from the first's (warm-up steps plain)");
    free(cuda_logits[0]), free(cuda_logits[1]);
    for (int k = 0; k < 2; k++) gdp_batch_free(b[k]), gdp_model_free(m[k]);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
}

int main(int argc, char **argv) { return gpu_test_run(argc, argv); }
