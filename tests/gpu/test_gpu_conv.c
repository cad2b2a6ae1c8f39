/* The depthwise causal conv (+ SiLU) CUDA kernels (kernels/conv1d_causal.cu) on raw device buffers:
 *   - bf16 and f32 against the f32 CPU reference on the same (bf16-rounded) inputs, over C odd, even,
 *     and a multiple of 4 or 8 (each width of channels per thread, with and without a partly idle last
 *     block), W 1..8, silu on/off, acc_dx / acc_dw on/off, dx or dw alone, T of 0, below W, below one
 *     segment and not a multiple of CONV_STEPS, many segments of 64 steps, B 1..4;
 *   - the same bf16 case with every tensor moved by 2, 4 and 8 bytes, which caps the channels per thread
 *     at 1, 2 and 4, or at the kernels' own maxima where those are lower (conv_fwd_max_vec /
 *     conv_bwd_max_vec): each path must give the bits of the one-channel path (offset 2).
 *   - packed documents (doc_start): every case again with document starts drawn with probability 1/4
 *     and 1/16 (adjacent starts, documents shorter than W, starts at segment boundaries), bf16 and f32
 *     against the CPU reference with the same starts, at every alignment; and a doc_start of zeros
 *     gives the plain kernels' bits.
 * Outputs start as NaN (0xFF bytes) unless accumulated into, so an element nobody wrote fails, and the
 * bytes around each output must stay 0xFF (no vector store past a row).
 * GDP_CONV_BENCH=1 then times forward and backward at the base model's shapes (B 8, T 2048, bf16, W 4,
 * silu) for each alignment, which bounds the channel width: a report, not a test. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "base/common.h"
#include "base/cuda_check.h"
#include "kernels/conv1d_causal.h"
#include "tests/gpu/gpu_poisoned.h"
#include "tests/gpu/gpu_test.h"

typedef struct ConvCase {
    int B, T, C, W, silu, acc_dx, acc_dw, want_dx, want_dw;
} ConvCase;

static const ConvCase conv_cases[] = {
    /* B  T      C     W  silu acc_dx acc_dw dx dw */
    {1, 1, 1, 4, 1, 0, 0, 1, 1},
    {2, 7, 5, 4, 1, 0, 0, 1, 1},          /* odd C; T below CONV_STEPS * 2 and not a multiple of it */
    {3, 37, 6, 4, 1, 1, 1, 1, 1},         /* C = 2 mod 4; two segments */
    {2, 33, 12, 3, 0, 0, 1, 1, 1},        /* C = 4 mod 8, W 3 */
    {2, 45, 8, 5, 1, 1, 0, 1, 1},         /* W 5 */
    {1, 130, 24, 4, 0, 1, 1, 1, 1},
    {3, 70, 40, 4, 1, 0, 0, 1, 0},        /* dx alone */
    {2, 31, 136, 4, 1, 0, 1, 0, 1},       /* dw alone, T below one segment */
    {2, 100, 1030, 4, 1, 1, 1, 1, 1},     /* C = 2 mod 4 over several blocks */
    {1, 65, 1544, 4, 1, 0, 0, 1, 1},      /* C = 8 mod 16: the last block partly idle */
    {2, 50, 2304, 4, 1, 1, 1, 1, 1},      /* the base model's widest conv */
    {2, 9, 768, 1, 1, 0, 0, 1, 1},        /* W 1 */
    {1, 40, 64, 8, 1, 1, 1, 1, 1},        /* W = CONV1D_MAX_W */
    {2, 20001, 24, 4, 1, 0, 1, 1, 1},     /* seg_len 64, 313 segments, T = 1 mod 4 */
    {4, 3, 7, 2, 0, 0, 0, 1, 1},          /* T below W */
    {1, 2, 16, 6, 1, 1, 1, 1, 1},         /* T below W, vectorised */
    {1, 300, 1, 4, 1, 0, 0, 1, 1},        /* C 1 */
    {3, 1000, 130, 7, 1, 1, 1, 1, 1},     /* 32 segments, W 7 */
    {2, 0, 8, 4, 1, 0, 0, 1, 1},          /* no time steps: dw is zeroed */
    {2, 0, 8, 4, 1, 0, 1, 1, 1},          /* ... or left as it was */
};

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* n uniform values in [-1, 1) in storage type dt (*bits) and as the floats they hold (*f). */
static void make_input(DType dt, int64_t n, uint64_t *rng, void **bits, float **f) {
    *f = (float *)xmalloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    *bits = xmalloc((size_t)(n > 0 ? n : 1) * dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        float v = (float)((double)(rng_next(rng) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        if (dt == GDP_BF16) {
            uint16_t h = f32_to_bf16(v);
            ((uint16_t *)*bits)[i] = h;
            v = bf16_to_f32(h);
        } else {
            ((float *)*bits)[i] = v;
        }
        (*f)[i] = v;
    }
}

typedef struct ConvIO {
    DType dt;
    int64_t nx, nw;
    void *x, *w, *dy, *dx0, *dw0;      /* storage bits */
    float *xf, *wf, *dyf, *dx0f, *dw0f; /* the same values as floats */
} ConvIO;

static ConvIO io_make(const ConvCase *k, DType dt, uint64_t seed) {
    ConvIO io;
    memset(&io, 0, sizeof io);
    io.dt = dt;
    io.nx = (int64_t)k->B * k->T * k->C, io.nw = (int64_t)k->C * k->W;
    make_input(dt, io.nx, &seed, &io.x, &io.xf);
    make_input(dt, io.nw, &seed, &io.w, &io.wf);
    make_input(dt, io.nx, &seed, &io.dy, &io.dyf);
    make_input(dt, io.nx, &seed, &io.dx0, &io.dx0f);
    make_input(dt, io.nw, &seed, &io.dw0, &io.dw0f);
    return io;
}

static void io_free(ConvIO *io) {
    free(io->x), free(io->w), free(io->dy), free(io->dx0), free(io->dw0);
    free(io->xf), free(io->wf), free(io->dyf), free(io->dx0f), free(io->dw0f);
}

typedef struct ConvOut {
    void *y, *dx, *dw; /* storage bits, malloc'd (dx / dw NULL when not asked for) */
    bool guards_ok;
} ConvOut;

static void out_free(ConvOut *o) { free(o->y), free(o->dx), free(o->dw); }

/* Forward, then backward, on CUDA with every tensor moved by `off` bytes; starts (host, [B, T]) or NULL. */
static ConvOut run_gpu_docs(const ConvCase *k, const ConvIO *io, size_t off, const int32_t *starts) {
    const size_t es = dtype_size(io->dt), bx = (size_t)io->nx * es, bw = (size_t)io->nw * es;
    ConvOut o = {xmalloc(bx ? bx : 1), k->want_dx ? xmalloc(bx ? bx : 1) : NULL,
                 k->want_dw ? xmalloc(bw ? bw : 1) : NULL, true};
    DevBuf x = dev_buf(1, bx, off, io->x), w = dev_buf(1, bw, off, io->w), dy = dev_buf(1, bx, off, io->dy);
    DevBuf y = dev_buf(1, bx, off, NULL);
    DevBuf dx = dev_buf(1, k->want_dx ? bx : 0, off, k->acc_dx ? io->dx0 : NULL);
    DevBuf dw = dev_buf(1, k->want_dw ? bw : 0, off, k->acc_dw ? io->dw0 : NULL);
    float *partial = NULL;
    size_t np = (size_t)(conv1d_causal_dw_chunks(k->B, k->T) * k->C * k->W);
    if (k->want_dw && np) CUDA_CHECK(cudaMalloc((void **)&partial, np * sizeof(float)));
    int32_t *ds = NULL;
    const size_t nds = (size_t)k->B * k->T * sizeof(int32_t);
    if (starts && nds) {
        CUDA_CHECK(cudaMalloc((void **)&ds, nds));
        CUDA_CHECK(cudaMemcpy(ds, starts, nds, cudaMemcpyHostToDevice));
    }
    conv1d_causal_forward_cuda(io->dt, y.p, x.p, w.p, ds, k->B, k->T, k->C, k->W, k->silu, NULL);
    conv1d_causal_backward_cuda(io->dt, k->want_dx ? dx.p : NULL, k->want_dw ? dw.p : NULL, partial, dy.p, x.p, w.p,
                                ds, k->B, k->T, k->C, k->W, k->silu, k->acc_dx, k->acc_dw, NULL);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaFree(ds));
    o.guards_ok &= dev_take(&y, o.y);
    o.guards_ok &= dev_take(&dx, o.dx);
    o.guards_ok &= dev_take(&dw, o.dw);
    dev_take(&x, NULL), dev_take(&w, NULL), dev_take(&dy, NULL);
    CUDA_CHECK(cudaFree(partial));
    return o;
}

static ConvOut run_gpu(const ConvCase *k, const ConvIO *io, size_t off) { return run_gpu_docs(k, io, off, NULL); }

static float stored(DType dt, const void *p, int64_t i) {
    return dt == GDP_BF16 ? bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* |got - ref| <= rtol |ref| + atol max|ref| everywhere (NaN fails); prints the first miss. */
static void expect_close(int *failures, const char *what, const char *label, DType dt, const void *got,
                         const float *ref, int64_t n, double rtol, double atol) {
    double scale = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (int64_t i = 0; i < n; i++) {
        double g = stored(dt, got, i), err = fabs(g - ref[i]);
        if (!(err <= rtol * fabs(ref[i]) + atol * scale)) {
            GPU_EXPECT(0, "%s %s: element %lld is %.8g, CPU %.8g", label, what, (long long)i, g, ref[i]);
            return;
        }
    }
}

static void expect_same_bits(int *failures, const char *what, const char *label, const void *a, const void *b,
                             size_t bytes) {
    GPU_EXPECT(!bytes || memcmp(a, b, bytes) == 0, "%s %s: bits differ from the one-channel path", label, what);
}

static void check_case(int *failures, const ConvCase *k, DType dt, uint64_t seed) {
    char label[160];
    snprintf(label, sizeof label, "%s B %d T %d C %d W %d silu %d acc_dx %d acc_dw %d dx %d dw %d", dtype_name(dt),
             k->B, k->T, k->C, k->W, k->silu, k->acc_dx, k->acc_dw, k->want_dx, k->want_dw);
    ConvIO io = io_make(k, dt, seed);
    const int64_t n = io.nx > 0 ? io.nx : 1, nw = io.nw > 0 ? io.nw : 1;
    float *y = (float *)xmalloc((size_t)n * sizeof(float)), *dx = (float *)xmalloc((size_t)n * sizeof(float));
    float *dw = (float *)xmalloc((size_t)nw * sizeof(float));
    memcpy(dx, io.dx0f, (size_t)io.nx * sizeof(float));
    memcpy(dw, io.dw0f, (size_t)io.nw * sizeof(float));
    conv1d_causal_forward_cpu(GDP_F32, y, io.xf, io.wf, NULL, k->B, k->T, k->C, k->W, k->silu);
    conv1d_causal_backward_cpu(GDP_F32, k->want_dx ? dx : NULL, k->want_dw ? dw : NULL, io.dyf, io.xf, io.wf, NULL,
                               k->B, k->T, k->C, k->W, k->silu, k->acc_dx, k->acc_dw);

    const double rtol = dt == GDP_BF16 ? 1e-2 : 1e-4, atol = dt == GDP_BF16 ? 1e-3 : 1e-4;
    /* f32 takes the one-channel kernels at any alignment; bf16 offset 2 is that path. */
    const size_t offs_bf16[] = {2, 0, 4, 8}, offs_f32[] = {0, 4};
    const size_t *offs = dt == GDP_BF16 ? offs_bf16 : offs_f32;
    const int n_offs = dt == GDP_BF16 ? 4 : 2;
    const size_t es = dtype_size(dt), bx = (size_t)io.nx * es, bw = (size_t)io.nw * es;
    ConvOut first = run_gpu(k, &io, offs[0]);
    for (int i = 0; i < n_offs; i++) {
        char l[200];
        snprintf(l, sizeof l, "%s, tensors at +%zu bytes", label, offs[i]);
        ConvOut o = i ? run_gpu(k, &io, offs[i]) : first;
        GPU_EXPECT(o.guards_ok, "%s: a byte next to an output changed", l);
        expect_close(failures, "y", l, dt, o.y, y, io.nx, rtol, atol);
        if (k->want_dx) expect_close(failures, "dx", l, dt, o.dx, dx, io.nx, rtol, atol);
        if (k->want_dw) expect_close(failures, "dw", l, dt, o.dw, dw, io.nw, rtol, atol);
        if (i) {
            expect_same_bits(failures, "y", l, o.y, first.y, bx);
            if (k->want_dx) expect_same_bits(failures, "dx", l, o.dx, first.dx, bx);
            if (k->want_dw) expect_same_bits(failures, "dw", l, o.dw, first.dw, bw);
            out_free(&o);
        }
    }
    out_free(&first);
    free(y), free(dx), free(dw);
    io_free(&io);
}

/* Packed documents: starts drawn with probability 1 / every (0: none marked), against the CPU reference
 * with the same starts at every alignment; with none marked, the plain kernels' bits too. */
static void check_case_docs(int *failures, const ConvCase *k, DType dt, uint64_t seed, int every) {
    char label[200];
    snprintf(label, sizeof label, "docs 1/%d %s B %d T %d C %d W %d silu %d acc_dx %d acc_dw %d dx %d dw %d", every,
             dtype_name(dt), k->B, k->T, k->C, k->W, k->silu, k->acc_dx, k->acc_dw, k->want_dx, k->want_dw);
    ConvIO io = io_make(k, dt, seed);
    const int64_t n = io.nx > 0 ? io.nx : 1, nw = io.nw > 0 ? io.nw : 1, nt = (int64_t)k->B * k->T;
    int32_t *st = (int32_t *)xcalloc((size_t)(nt > 0 ? nt : 1), sizeof(int32_t));
    uint64_t r = seed * 977;
    for (int64_t i = 0; i < nt && every > 0; i++) st[i] = rng_next(&r) % (uint64_t)every == 0;
    for (int64_t i = 64; i < nt && every > 0; i += 64) st[i] = 1; /* segment boundaries (seg_len 64 at large T) */
    float *y = (float *)xmalloc((size_t)n * sizeof(float)), *dx = (float *)xmalloc((size_t)n * sizeof(float));
    float *dw = (float *)xmalloc((size_t)nw * sizeof(float));
    memcpy(dx, io.dx0f, (size_t)io.nx * sizeof(float));
    memcpy(dw, io.dw0f, (size_t)io.nw * sizeof(float));
    conv1d_causal_forward_cpu(GDP_F32, y, io.xf, io.wf, st, k->B, k->T, k->C, k->W, k->silu);
    conv1d_causal_backward_cpu(GDP_F32, k->want_dx ? dx : NULL, k->want_dw ? dw : NULL, io.dyf, io.xf, io.wf, st,
                               k->B, k->T, k->C, k->W, k->silu, k->acc_dx, k->acc_dw);
    const double rtol = dt == GDP_BF16 ? 1e-2 : 1e-4, atol = dt == GDP_BF16 ? 1e-3 : 1e-4;
    const size_t offs_bf16[] = {2, 0, 4, 8}, offs_f32[] = {0, 4};
    const size_t *offs = dt == GDP_BF16 ? offs_bf16 : offs_f32;
    const int n_offs = dt == GDP_BF16 ? 4 : 2;
    const size_t es = dtype_size(dt), bx = (size_t)io.nx * es, bw = (size_t)io.nw * es;
    for (int i = 0; i < n_offs; i++) {
        char l[260];
        snprintf(l, sizeof l, "%s, tensors at +%zu bytes", label, offs[i]);
        ConvOut o = run_gpu_docs(k, &io, offs[i], st);
        GPU_EXPECT(o.guards_ok, "%s: a byte next to an output changed", l);
        expect_close(failures, "y", l, dt, o.y, y, io.nx, rtol, atol);
        if (k->want_dx) expect_close(failures, "dx", l, dt, o.dx, dx, io.nx, rtol, atol);
        if (k->want_dw) expect_close(failures, "dw", l, dt, o.dw, dw, io.nw, rtol, atol);
        if (every == 0) {
            ConvOut p = run_gpu(k, &io, offs[i]);
            GPU_EXPECT(memcmp(o.y, p.y, bx) == 0, "%s y: bits differ from the plain kernels", l);
            if (k->want_dx) GPU_EXPECT(memcmp(o.dx, p.dx, bx) == 0, "%s dx: bits differ from the plain kernels", l);
            if (k->want_dw) GPU_EXPECT(memcmp(o.dw, p.dw, bw) == 0, "%s dw: bits differ from the plain kernels", l);
            out_free(&p);
        }
        out_free(&o);
    }
    free(y), free(dx), free(dw), free(st);
    io_free(&io);
}

GPU_TEST(conv_docs_matches_cpu) {
    const int every[] = {4, 16, 0};
    for (size_t e = 0; e < GDP_ARRAY_LEN(every); e++)
        for (size_t i = 0; i < GDP_ARRAY_LEN(conv_cases); i++) {
            check_case_docs(failures, &conv_cases[i], GDP_BF16, 211 + i, every[e]);
            check_case_docs(failures, &conv_cases[i], GDP_F32, 307 + i, every[e]);
        }
}

GPU_TEST(conv_bf16_matches_cpu_and_one_channel_bits) {
    for (size_t i = 0; i < GDP_ARRAY_LEN(conv_cases); i++) check_case(failures, &conv_cases[i], GDP_BF16, 11 + i);
}

GPU_TEST(conv_f32_matches_cpu) {
    for (size_t i = 0; i < GDP_ARRAY_LEN(conv_cases); i++) check_case(failures, &conv_cases[i], GDP_F32, 101 + i);
}

/* ---------------------------------------------------------------- GDP_CONV_BENCH=1 */
static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

#define BENCH_ITERS 20
#define BENCH_WARMUP 3

static void conv_bench(void) {
    const int B = 8, T = 2048, W = 4, Cs[] = {768, 1536, 2304};
    const size_t offs[] = {0, 8, 4, 2};
    const char *widths[] = {"any", "<= 4", "<= 2", "1"};
    const int64_t cmax = 2304, nmax = (int64_t)B * T * cmax;
    uint64_t seed = 7;
    void *hx, *hw;
    float *fx, *fw;
    make_input(GDP_BF16, nmax, &seed, &hx, &fx);
    make_input(GDP_BF16, cmax * W, &seed, &hw, &fw);
    const size_t bx = (size_t)nmax * 2, bw = (size_t)cmax * W * 2;
    unsigned char *x, *dy, *y, *dx, *w, *dw;
    float *partial;
    CUDA_CHECK(cudaMalloc((void **)&x, bx + 64));
    CUDA_CHECK(cudaMalloc((void **)&dy, bx + 64));
    CUDA_CHECK(cudaMalloc((void **)&y, bx + 64));
    CUDA_CHECK(cudaMalloc((void **)&dx, bx + 64));
    CUDA_CHECK(cudaMalloc((void **)&w, bw));
    CUDA_CHECK(cudaMalloc((void **)&dw, bw));
    CUDA_CHECK(cudaMalloc((void **)&partial, (size_t)(conv1d_causal_dw_chunks(B, T) * cmax * W) * sizeof(float)));
    CUDA_CHECK(cudaMemset(x, 0, bx + 64));
    CUDA_CHECK(cudaMemset(dy, 0, bx + 64));
    CUDA_CHECK(cudaMemcpy(x, hx, bx, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dy, hx, bx, cudaMemcpyHostToDevice)); /* any finite values do */
    CUDA_CHECK(cudaMemcpy(w, hw, bw, cudaMemcpyHostToDevice));
    cudaEvent_t ev0, ev1;
    CUDA_CHECK(cudaEventCreate(&ev0));
    CUDA_CHECK(cudaEventCreate(&ev1));
    printf("conv bench: B %d T %d W %d, silu, bf16, median of %d; dw via partials + column sum\n", B, T, W,
           BENCH_ITERS);
    for (size_t ci = 0; ci < GDP_ARRAY_LEN(Cs); ci++) {
        const int C = Cs[ci];
        for (size_t oi = 0; oi < GDP_ARRAY_LEN(offs); oi++) {
            const size_t o = offs[oi];
            float ms[2][BENCH_ITERS];
            for (int pass = 0; pass < 2; pass++)
                for (int it = -BENCH_WARMUP; it < BENCH_ITERS; it++) {
                    CUDA_CHECK(cudaEventRecord(ev0, NULL));
                    if (pass == 0)
                        conv1d_causal_forward_cuda(GDP_BF16, y + o, x + o, w, NULL, B, T, C, W, 1, NULL);
                    else
                        conv1d_causal_backward_cuda(GDP_BF16, dx + o, dw, partial, dy + o, x + o, w, NULL, B, T, C, W, 1,
                                                    0, 0, NULL);
                    CUDA_CHECK(cudaEventRecord(ev1, NULL));
                    CUDA_CHECK(cudaEventSynchronize(ev1));
                    if (it >= 0) CUDA_CHECK(cudaEventElapsedTime(&ms[pass][it], ev0, ev1));
                }
            qsort(ms[0], BENCH_ITERS, sizeof(float), cmp_float);
            qsort(ms[1], BENCH_ITERS, sizeof(float), cmp_float);
            const double f = ms[0][BENCH_ITERS / 2], b = ms[1][BENCH_ITERS / 2], n = (double)B * T * C;
            printf("  C %4d, tensors at +%zu bytes (channels per thread %-13s): fwd %.4f ms %6.0f GB/s, "
                   "bwd %.4f ms %6.0f GB/s\n",
                   C, o, widths[oi], f, 4 * n / f * 1e-6, b, 6 * n / b * 1e-6);
        }
    }
    CUDA_CHECK(cudaEventDestroy(ev0));
    CUDA_CHECK(cudaEventDestroy(ev1));
    CUDA_CHECK(cudaFree(x));
    CUDA_CHECK(cudaFree(dy));
    CUDA_CHECK(cudaFree(y));
    CUDA_CHECK(cudaFree(dx));
    CUDA_CHECK(cudaFree(w));
    CUDA_CHECK(cudaFree(dw));
    CUDA_CHECK(cudaFree(partial));
    free(hx), free(hw), free(fx), free(fw);
}

int main(int argc, char **argv) {
    int rc = gpu_test_run(argc, argv);
    const char *bench = getenv("GDP_CONV_BENCH");
    if (bench && *bench && strcmp(bench, "0")) conv_bench();
    return rc;
}
