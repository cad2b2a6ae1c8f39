/* The host side of sampling (layers/sampler.h): the per-sequence state and the gathering of live
 * rows around kernels/sample.h's CPU form, which runs the rows in parallel; and the GPU side, which
 * samples logits a CUDA step left on the device with the kernel's CUDA form. */
#include "layers/sampler.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/sample.h"

#ifdef GDP_CUDA
#include "base/cuda_check.h"
#include "base/device.h"
#endif

static bool penalty_on(const SampleParams *p) { return p->repetition_penalty > 0 && p->repetition_penalty != 1; }

/* The one place a SampleArgs is built, for a row and for a batch on either device; masks are a row's
 * own (seen_row NULL) unless the caller says otherwise. */
static SampleArgs sample_args(const SampleParams *p, float *logits, const unsigned char *seen, const double *u,
                              int32_t *out, int64_t rows, int64_t v, int n_tok) {
    return (SampleArgs){logits, seen, NULL, 0, p->temperature > 0 ? u : NULL, out, rows, v, n_tok,
                        p->temperature, p->top_k, p->top_p, p->repetition_penalty};
}

/* A Sampler's GPU side. Its masks are kept by sequence, as s->seen is, not by the decoder's rows: a
 * sequence that ends moves no mask, and each row finds its sequence's through the kernel's seen_row.
 * They follow the host's masks without a copy of them each step: a sequence started over has its
 * mask uploaded whole at the next begin, and the tokens observed since the last begin are listed and
 * marked by a kernel. The list holds n tokens, one per sequence of a step; a token past that makes
 * its sequence's mask stale instead. */
struct SamplerCuda {
    void *stream;               /* the last begin's */
    int rows;                   /* the last begin's */
    unsigned char *seen;        /* device [n, n_tok], with s->seen */
    bool *stale;                /* [n], with s->seen: masks to upload whole at the next begin */
    int32_t *obs_seq, *obs_tok; /* [n] each, with s->seen: tokens observed since the last begin */
    int n_obs;
    /* a begin's upload, pinned on the host (so that no copy waits for the stream) and its device copy,
     * packed: u [rows] (doubles, when temperature > 0), then as int32 the sequence of each row [rows],
     * obs_seq [n_obs] and obs_tok [n_obs] */
    unsigned char *in_host, *in_dev;
    int32_t *out_host, *out_dev; /* [n]: the ids, pinned and on the device */
};

void sampler_init(Sampler *s, int n, int n_tok, int64_t v, const SampleParams *p, uint64_t seed) {
    GDP_CHECK(n >= 1 && n_tok >= 1 && n_tok <= v,
              "sampler_init: %d sequences of %d candidates in rows of %lld: needs n >= 1 and 1 <= n_tok <= v", n,
              n_tok, (long long)v);
    memset(s, 0, sizeof *s);
    s->p = *p, s->seed = seed, s->n = n, s->n_tok = n_tok, s->v = v;
    const size_t cells = (size_t)n * (size_t)n_tok;
    s->rng = (Rng *)xcalloc((size_t)n, sizeof(Rng));
    for (int i = 0; i < n; i++) rng_seed(&s->rng[i], seed);
    if (penalty_on(p)) {
        s->seen = (unsigned char *)xcalloc(cells, 1);
        s->seen_rows = (unsigned char *)xmalloc(cells);
    }
    s->rows = (float *)xmalloc(cells * sizeof(float));
    s->u = (double *)xmalloc((size_t)n * sizeof(double));
    s->out = (int32_t *)xmalloc((size_t)n * sizeof(int32_t));
    s->seq_of_row = (int *)xmalloc((size_t)n * sizeof(int));
}

static void cuda_side_free(struct SamplerCuda *c);

void sampler_free(Sampler *s) {
    cuda_side_free(s->cuda);
    free(s->rng), free(s->seen), free(s->seen_rows), free(s->rows), free(s->u), free(s->out), free(s->seq_of_row);
    memset(s, 0, sizeof *s);
}

void sampler_start(Sampler *s, int i, const int32_t *prompt, int64_t len) {
    GDP_CHECK(i >= 0 && i < s->n, "sampler_start: sequence %d of %d", i, s->n);
    rng_seed(&s->rng[i], s->seed);
    if (!s->seen) return;
    memset(s->seen + (size_t)i * s->n_tok, 0, (size_t)s->n_tok);
    if (s->cuda) s->cuda->stale[i] = true;
    for (int64_t t = 0; t < len; t++) sampler_observe(s, i, prompt[t]);
}

void sampler_observe(Sampler *s, int i, int32_t t) {
    GDP_CHECK(i >= 0 && i < s->n, "sampler_observe: sequence %d of %d", i, s->n);
    if (!s->seen || t < 0 || t >= s->n_tok) return;
    s->seen[(size_t)i * s->n_tok + t] = 1;
    struct SamplerCuda *c = s->cuda;
    if (!c || c->stale[i]) return; /* a stale mask's upload carries t */
    if (c->n_obs == s->n) {
        c->stale[i] = true;
        return;
    }
    c->obs_seq[c->n_obs] = i, c->obs_tok[c->n_obs++] = t;
}

void sampler_pick(Sampler *s, const float *logits, const bool *ended, int32_t *next) {
    const size_t nt = (size_t)s->n_tok;
    int rows = 0;
    for (int i = 0; i < s->n; i++) {
        next[i] = -1;
        if (ended[i]) continue;
        memcpy(s->rows + rows * nt, logits + i * s->v, nt * sizeof(float));
        if (s->seen) memcpy(s->seen_rows + rows * nt, s->seen + i * nt, nt);
        if (s->p.temperature > 0) s->u[rows] = rng_uniform(&s->rng[i]);
        s->seq_of_row[rows++] = i;
    }
    if (rows == 0) return;
    const SampleArgs a = sample_args(&s->p, s->rows, s->seen ? s->seen_rows : NULL, s->u, s->out, rows, s->n_tok,
                                     s->n_tok);
    sample_rows_cpu(&a);
    for (int r = 0; r < rows; r++) next[s->seq_of_row[r]] = s->out[r];
}

#ifdef GDP_CUDA

static size_t cuda_in_bytes(int n) { return (size_t)n * (sizeof(double) + 3 * sizeof(int32_t)); }

/* Where the upload's int32 part starts: after the uniforms, when there are any. */
static size_t cuda_ints_at(const Sampler *s, int rows) {
    return s->p.temperature > 0 ? (size_t)rows * sizeof(double) : 0;
}

static struct SamplerCuda *cuda_side_new(const Sampler *s) {
    struct SamplerCuda *c = (struct SamplerCuda *)xcalloc(1, sizeof *c);
    CUDA_CHECK(cudaMallocHost((void **)&c->in_host, cuda_in_bytes(s->n)));
    c->in_dev = (unsigned char *)device_malloc(DEV_CUDA, cuda_in_bytes(s->n));
    CUDA_CHECK(cudaMallocHost((void **)&c->out_host, (size_t)s->n * sizeof(int32_t)));
    c->out_dev = (int32_t *)device_malloc(DEV_CUDA, (size_t)s->n * sizeof(int32_t));
    if (s->seen) {
        c->seen = (unsigned char *)device_malloc(DEV_CUDA, (size_t)s->n * (size_t)s->n_tok);
        c->stale = (bool *)xmalloc((size_t)s->n * sizeof(bool));
        for (int i = 0; i < s->n; i++) c->stale[i] = true; /* nothing is on the GPU yet */
        c->obs_seq = (int32_t *)xmalloc((size_t)s->n * sizeof(int32_t));
        c->obs_tok = (int32_t *)xmalloc((size_t)s->n * sizeof(int32_t));
    }
    return c;
}

static void cuda_side_free(struct SamplerCuda *c) {
    if (!c) return;
    CUDA_CHECK(cudaFreeHost(c->in_host));
    CUDA_CHECK(cudaFreeHost(c->out_host));
    device_free(DEV_CUDA, c->in_dev);
    device_free(DEV_CUDA, c->out_dev);
    if (c->seen) device_free(DEV_CUDA, c->seen);
    free(c->stale), free(c->obs_seq), free(c->obs_tok);
    free(c);
}

void sampler_cuda_begin(Sampler *s, const int *seq_of_row, int rows, void *stream) {
    GDP_CHECK(rows >= 0 && rows <= s->n, "sampler_cuda_begin: %d rows for %d sequences", rows, s->n);
    if (!s->cuda) s->cuda = cuda_side_new(s);
    struct SamplerCuda *c = s->cuda;
    c->stream = stream, c->rows = rows;
    double *u = (double *)c->in_host;
    int32_t *seq = (int32_t *)(c->in_host + cuda_ints_at(s, rows));
    for (int r = 0; r < rows; r++) {
        const int i = seq_of_row[r];
        GDP_CHECK(i >= 0 && i < s->n, "sampler_cuda_begin: row %d is sequence %d of %d", r, i, s->n);
        if (s->p.temperature > 0) u[r] = rng_uniform(&s->rng[i]);
        seq[r] = i;
    }
    const int n_obs = c->n_obs;
    if (n_obs) {
        memcpy(seq + rows, c->obs_seq, (size_t)n_obs * sizeof(int32_t));
        memcpy(seq + rows + n_obs, c->obs_tok, (size_t)n_obs * sizeof(int32_t));
    }
    const size_t bytes = cuda_ints_at(s, rows) + (size_t)(rows + 2 * n_obs) * sizeof(int32_t);
    cudaStream_t st = (cudaStream_t)stream;
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(c->in_dev, c->in_host, bytes, cudaMemcpyHostToDevice, st));
    if (!s->seen) return;
    /* the marks first: a stale mask's upload, after them, overrides a token listed before a restart */
    const int32_t *seq_dev = (const int32_t *)(c->in_dev + cuda_ints_at(s, rows));
    sample_mark_seen_cuda(c->seen, s->n_tok, seq_dev + rows, seq_dev + rows + n_obs, n_obs, s->n_tok, stream);
    c->n_obs = 0;
    const size_t nt = (size_t)s->n_tok;
    for (int i = 0; i < s->n;) {
        if (!c->stale[i]) {
            i++;
            continue;
        }
        int j = i;
        while (j < s->n && c->stale[j]) c->stale[j++] = false;
        CUDA_CHECK(cudaMemcpyAsync(c->seen + i * nt, s->seen + i * nt, (size_t)(j - i) * nt, cudaMemcpyHostToDevice,
                                   st));
        i = j;
    }
}

void sampler_cuda_rows(Sampler *s, float *logits, int64_t stride, int row0, int n) {
    struct SamplerCuda *c = s->cuda;
    GDP_CHECK(c && row0 >= 0 && n >= 0 && row0 + n <= c->rows,
              "sampler_cuda_rows: rows [%d, %d) are not among the %d of the last sampler_cuda_begin", row0, row0 + n,
              c ? c->rows : 0);
    const int32_t *seq_dev = (const int32_t *)(c->in_dev + cuda_ints_at(s, c->rows));
    SampleArgs a = sample_args(&s->p, logits, c->seen, (const double *)c->in_dev + row0, c->out_dev + row0, n,
                               stride, s->n_tok);
    a.seen_row = seq_dev + row0, a.seen_stride = s->n_tok;
    sample_rows_cuda(&a, c->stream);
}

void sampler_cuda_end(Sampler *s, int32_t *next) {
    struct SamplerCuda *c = s->cuda;
    GDP_CHECK(c, "sampler_cuda_end: no sampler_cuda_begin before it");
    cudaStream_t st = (cudaStream_t)c->stream;
    if (c->rows)
        CUDA_CHECK(cudaMemcpyAsync(c->out_host, c->out_dev, (size_t)c->rows * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                   st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    const int32_t *seq = (const int32_t *)(c->in_host + cuda_ints_at(s, c->rows));
    for (int i = 0; i < s->n; i++) next[i] = -1;
    for (int r = 0; r < c->rows; r++) next[seq[r]] = c->out_host[r];
}

#else /* no CUDA in this build: no logits are ever on a GPU */

static void cuda_side_free(struct SamplerCuda *c) { (void)c; }

void sampler_cuda_begin(Sampler *s, const int *seq_of_row, int rows, void *stream) {
    (void)s, (void)seq_of_row, (void)rows, (void)stream;
    gdp_fatal("sampler_cuda_begin: this build has no CUDA support");
}

void sampler_cuda_rows(Sampler *s, float *logits, int64_t stride, int row0, int n) {
    (void)s, (void)logits, (void)stride, (void)row0, (void)n;
    gdp_fatal("sampler_cuda_rows: this build has no CUDA support");
}

void sampler_cuda_end(Sampler *s, int32_t *next) {
    (void)s, (void)next;
    gdp_fatal("sampler_cuda_end: this build has no CUDA support");
}

#endif

int sample_next(float *logits, int n, const SampleParams *p, const int32_t *history, int64_t n_hist, Rng *rng) {
    unsigned char *seen = NULL;
    if (penalty_on(p) && history && n_hist > 0) {
        seen = (unsigned char *)xcalloc((size_t)n, 1);
        for (int64_t i = 0; i < n_hist; i++)
            if (history[i] >= 0 && history[i] < n) seen[history[i]] = 1;
    }
    const double u = p->temperature > 0 ? rng_uniform(rng) : 0;
    int32_t pick = 0;
    const SampleArgs a = sample_args(p, logits, seen, &u, &pick, 1, n, n);
    sample_rows_cpu(&a);
    free(seen);
    return pick;
}

int sample_logits(float *logits, int n, double temperature, int top_k, Rng *rng) {
    SampleParams p = {temperature, top_k, 1.0, 1.0};
    return sample_next(logits, n, &p, NULL, 0, rng);
}
