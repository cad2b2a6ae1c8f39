/* gdp bench op: times the Gated DeltaProduct op on CUDA (forward, forward + backward, and forward +
 * backward with the saved forward) with CUDA events, the median of --iters runs after --warmup
 * runs, and prints TFLOP/s (FLOPs counted as docs/performance.md "Floors": full 64x64 tiles, chunk
 * C = 64, L = n*T rows) and the time over the floor max(FLOPs / 709 TFLOP/s, minimum bytes /
 * 4.2 TB/s) (an H200's measured bf16 GEMM rate and copy bandwidth).
 * --profile: after the timing, one more run with every kernel timed on its own (stderr). --plan prints
 * which kernels run (kernels/gdp/plan.h) instead, for this GPU or, with --arch, any supported one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "kernels/gdp/gdp.h"
#include "kernels/gdp/plan.h"
#include "train/cli/cli.h"
#include "train/cli/commands.h"

#ifdef GDP_CUDA
#include <cuda_runtime.h>

#include "core/cuda_ctx.h"
#include "kernels/matmul.h"
#endif

static const CliOpt bench_opts[] = {
    {"B", 0, "N", "batch size (default 8)"},
    {"T", 0, "N", "tokens per sequence (default 2048)"},
    {"H", 0, "N", "heads (default 16)"},
    {"K", 0, "N", "key dimension (default 128)"},
    {"V", 0, "N", "value dimension (default 128)"},
    {"n", 0, "LIST", "n_h (householder) or r (split) values, comma separated (default 1,2,3)"},
    {"mode", 0, "MODE", "householder (default) or split"},
    {"dtype", 0, "DT", "bf16 (default) or f32"},
    {"iters", 0, "N", "timed runs, median reported (default 20)"},
    {"warmup", 0, "N", "untimed runs first (default 3)"},
    {"tokens", 0, "N", "matmul: rows of the activations, B*T (default 16384)"},
    {"profile", 0, NULL, "op: after the timing, time every kernel of one more run (stderr)"},
    {"plan", 0, NULL, "op: print which kernels run each pass instead of timing (no GPU needed with --arch)"},
    {"arch", 0, "SM", "op --plan: the plan for 80, 86, 89 or 90 instead of this machine's GPU"},
};
static const CliCommand bench_cmd = {
    "bench", "gdp bench op [--B N --T N --H N --K N --V N --n 1,2,3 --mode householder|split --dtype bf16|f32 "
             "--iters N --profile] | gdp bench op --plan [--arch 80|86|89|90] | gdp bench matmul [--tokens N --iters N]",
    "op: times the Gated DeltaProduct op on the GPU: forward and forward+backward in ms (median of --iters\n"
    "runs timed with CUDA events after --warmup runs), TFLOP/s with FLOPs counted as docs/performance.md, and\n"
    "the ratio to the floor max(FLOPs / 709 TFLOP/s, minimum bytes / 4.2 TB/s). Gate on, no h0/ht. The last\n"
    "column, saved f+b, is forward+backward with the forward's chunk intermediates kept for the backward\n"
    "(GdpForwardArgs.saved, as training without --selective-recompute runs the op). The peer columns are\n"
    "fla's times on an H200 (docs/performance.md), filled in at the default shape only (bf16 householder, n 1 to 3).\n"
    "matmul: times the base preset's linear-layer GEMMs (y, dx, dW) over --tokens rows, with f32 operands\n"
    "rounded inside cuBLAS, bf16 operands and outputs, and bf16 operands with f32 outputs.",
    bench_opts, (int)GDP_ARRAY_LEN(bench_opts)};

typedef struct BenchArgs {
    int B, T, H, K, V, iters, warmup, tokens;
    int ns[16], n_ns;
    GdpMode mode;
    DType dt;
    bool profile, plan;
    int arch; /* 0: this machine's GPU */
} BenchArgs;

static void on_opt(const CliOpt *o, const char *v, void *user) {
    BenchArgs *a = (BenchArgs *)user;
    if (!strcmp(o->name, "B")) a->B = (int)cli_int("B", v, 1, 1 << 20);
    if (!strcmp(o->name, "T")) a->T = (int)cli_int("T", v, 1, 1 << 24);
    if (!strcmp(o->name, "H")) a->H = (int)cli_int("H", v, 1, 1 << 12);
    if (!strcmp(o->name, "K")) a->K = (int)cli_int("K", v, 1, 256);
    if (!strcmp(o->name, "V")) a->V = (int)cli_int("V", v, 1, 256);
    if (!strcmp(o->name, "iters")) a->iters = (int)cli_int("iters", v, 1, 100000);
    if (!strcmp(o->name, "warmup")) a->warmup = (int)cli_int("warmup", v, 0, 100000);
    if (!strcmp(o->name, "tokens")) a->tokens = (int)cli_int("tokens", v, 4096, 1 << 22);
    if (!strcmp(o->name, "profile")) a->profile = true;
    if (!strcmp(o->name, "plan")) a->plan = true;
    if (!strcmp(o->name, "arch")) {
        a->arch = (int)cli_int("arch", v, 1, 1000);
        GdpDeviceCaps caps;
        if (gdp_device_caps_of_arch(a->arch, &caps) != GDP_OK) cli_usage_error(&bench_cmd, "--arch %s: use 80, 86, 89 or 90", v);
    }
    if (!strcmp(o->name, "mode")) {
        if (!strcmp(v, "householder")) a->mode = GDP_MODE_HOUSEHOLDER;
        else if (!strcmp(v, "split")) a->mode = GDP_MODE_SPLIT;
        else cli_usage_error(&bench_cmd, "--mode '%s' must be householder or split", v);
    }
    if (!strcmp(o->name, "dtype")) {
        if (!strcmp(v, "bf16")) a->dt = GDP_BF16;
        else if (!strcmp(v, "f32")) a->dt = GDP_F32;
        else cli_usage_error(&bench_cmd, "--dtype '%s' must be bf16 or f32", v);
    }
    if (!strcmp(o->name, "n")) {
        a->n_ns = 0;
        char buf[128];
        snprintf(buf, sizeof buf, "%s", v);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            if (a->n_ns >= 16) cli_usage_error(&bench_cmd, "--n takes at most 16 values");
            a->ns[a->n_ns++] = (int)cli_int("n", tok, 1, 64);
        }
        if (a->n_ns == 0) cli_usage_error(&bench_cmd, "--n needs at least one value, e.g. --n 1,2,3");
    }
}

#ifdef GDP_CUDA
/* FLOPs as docs/performance.md "Floors" counts them (full 64-wide tiles), whole batch */
static double flops_fwd(double B, double T, double H, double K, double V, double n) {
    const double C = 64, L = n * T;
    return B * H * (L * (2 * C * K + 4 * C * (K + V) + 4 * K * V) + 2 * T * K * V);
}
static double flops_bwd(double B, double T, double H, double K, double V, double n) {
    const double C = 64, L = n * T;
    return B * H * L * (18 * C * K + 10 * C * V + 16 * K * V + 4 * C * C);
}

/* Peer (fla, bf16, B=8 T=2048 H=16 K=V=128 householder) on an H200, 2026-12-02 (docs/performance.md) */
static const double peer_fwd[4] = {0, 1.264, 1.177, 1.405}, peer_fb[4] = {0, 3.470, 3.738, 5.353};

#define BCK(call)                                                                                       \
    do {                                                                                                \
        cudaError_t e_ = (call);                                                                        \
        if (e_ != cudaSuccess) gdp_fatal("CUDA call failed: %s: %s", #call, cudaGetErrorString(e_));     \
    } while (0)

/* Device buffer of n elements from a fixed random pool (fast for GB-sized inputs). kind: 0 normal,
 * 1 beta = sigmoid(normal), 2 g = logsigmoid(normal + 2), 3 unit-norm rows of width w. */
static void *bench_buffer(int64_t n, DType dt, int kind, int w, const float *pool, int pool_n, uint64_t salt) {
    size_t es = dtype_size(dt);
    float *f = (float *)xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        float x = pool[(uint64_t)(i * 2654435761ULL + salt) % (uint64_t)pool_n];
        if (kind == 1) x = 1.f / (1.f + expf(-x));
        if (kind == 2) x = -log1pf(expf(-(x + 2.f)));
        f[i] = x;
    }
    if (kind == 3)
        for (int64_t r = 0; r < n / w; r++) {
            double a = 0;
            for (int x = 0; x < w; x++) a += (double)f[r * w + x] * f[r * w + x];
            float s = (float)(1.0 / sqrt(a > 0 ? a : 1));
            for (int x = 0; x < w; x++) f[r * w + x] *= s;
        }
    void *h = f;
    if (dt == GDP_BF16) {
        uint16_t *b = (uint16_t *)xmalloc(2 * (size_t)n);
        for (int64_t i = 0; i < n; i++) b[i] = f32_to_bf16(f[i]);
        free(f);
        h = b;
    }
    void *d;
    BCK(cudaMalloc(&d, es * (size_t)n));
    BCK(cudaMemcpy(d, h, es * (size_t)n, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static void check_status(GdpStatus st, const char *what) {
    if (st != GDP_OK) gdp_fatal("%s failed (status %d): %s", what, (int)st, gdp_last_error());
}

/* Median ms of run(user) on stream st over --iters runs after --warmup untimed ones, CUDA events. */
static double median_ms(const BenchArgs *a, cudaStream_t st, void (*run)(void *user), void *user) {
    cudaEvent_t e0, e1;
    BCK(cudaEventCreate(&e0));
    BCK(cudaEventCreate(&e1));
    float *t = (float *)xmalloc(sizeof(float) * (size_t)a->iters);
    for (int it = -a->warmup; it < a->iters; it++) {
        BCK(cudaEventRecord(e0, st));
        run(user);
        BCK(cudaEventRecord(e1, st));
        BCK(cudaEventSynchronize(e1));
        float ms;
        BCK(cudaEventElapsedTime(&ms, e0, e1));
        if (it >= 0) t[it] = ms;
    }
    qsort(t, (size_t)a->iters, sizeof(float), cmp_float);
    double med = t[a->iters / 2];
    free(t);
    BCK(cudaEventDestroy(e0));
    BCK(cudaEventDestroy(e1));
    return med;
}

/* One forward of the op, and its backward when `backward` is set. */
typedef struct OpRun {
    const GdpDesc *d;
    const GdpForwardArgs *fa;
    const GdpBackwardArgs *ba;
    void *ws;
    size_t wsb;
    cudaStream_t st;
    bool backward;
} OpRun;

static void op_once(void *user) {
    const OpRun *r = (const OpRun *)user;
    check_status(gdp_forward_cuda(r->d, r->fa, r->ws, r->wsb, r->st), "gdp_forward_cuda");
    if (r->backward) check_status(gdp_backward_cuda(r->d, r->ba, r->ws, r->wsb, r->st), "gdp_backward_cuda");
}

static int bench_run(const BenchArgs *a) {
    float *pool = (float *)xmalloc(sizeof(float) * (1 << 20));
    Rng rng;
    rng_seed(&rng, 1234);
    for (int i = 0; i < (1 << 20); i++) pool[i] = (float)rng_normal(&rng);
    printf("gdp bench op: mode %s, dtype %s, B=%d T=%d H=%d K=%d V=%d, median of %d (warm-up %d)\n",
           a->mode == GDP_MODE_SPLIT ? "split" : "householder", dtype_name(a->dt), a->B, a->T, a->H, a->K, a->V,
           a->iters, a->warmup);
    /* "saved f+b": the forward keeps its chunk intermediates and the backward reuses them
     * (GdpForwardArgs.saved), as training does without --selective-recompute */
    printf("%-3s %10s %9s %8s %12s %9s %8s %10s %10s %10s\n", "n", "fwd ms", "TFLOP/s", "x floor", "fwd+bwd ms", "TFLOP/s",
           "x floor", "peer fwd", "peer f+b", "saved f+b");
    const double peak = 709e12, bw = 4.2e12;
    for (int ni = 0; ni < a->n_ns; ni++) {
        const int n = a->ns[ni];
        GdpDesc d;
        memset(&d, 0, sizeof d);
        d.mode = a->mode, d.B = a->B, d.T = a->T, d.H = a->H, d.K = a->K, d.V = a->V, d.n = n, d.dtype = a->dt;
        if (gdp_validate(&d) != GDP_OK) gdp_fatal("gdp bench: %s", gdp_last_error());
        const int slots = a->mode == GDP_MODE_HOUSEHOLDER ? n : 1;
        const int64_t BTH = (int64_t)a->B * a->T * a->H;
        const int64_t nq = BTH * a->K, nk = BTH * slots * a->K, nv = BTH * slots * a->V, nb = BTH * slots, no = BTH * a->V;
        void *q = bench_buffer(nq, a->dt, 0, 0, pool, 1 << 20, 1);
        void *k = bench_buffer(nk, a->dt, 3, a->mode == GDP_MODE_SPLIT ? a->K / n : a->K, pool, 1 << 20, 2);
        void *v = bench_buffer(nv, a->dt, 0, 0, pool, 1 << 20, 3);
        void *beta = bench_buffer(nb, a->dt, 1, 0, pool, 1 << 20, 4);
        void *g = bench_buffer(BTH, GDP_F32, 2, 0, pool, 1 << 20, 5);
        void *d_o = bench_buffer(no, a->dt, 0, 0, pool, 1 << 20, 6);
        void *mask = NULL;
        if (a->mode == GDP_MODE_SPLIT) {
            float *m = (float *)xcalloc((size_t)a->H * n * n, sizeof(float));
            for (int h = 0; h < a->H; h++)
                for (int i = 0; i < n; i++) m[(h * n + i) * n + i] = 1.f;
            BCK(cudaMalloc(&mask, sizeof(float) * (size_t)a->H * n * n));
            BCK(cudaMemcpy(mask, m, sizeof(float) * (size_t)a->H * n * n, cudaMemcpyHostToDevice));
            free(m);
        }
        const size_t es = dtype_size(a->dt);
        void *o, *dq, *dk, *dv, *dbeta, *dg, *dmask = NULL, *ws;
        BCK(cudaMalloc(&o, es * (size_t)no));
        BCK(cudaMalloc(&dq, es * (size_t)nq));
        BCK(cudaMalloc(&dk, es * (size_t)nk));
        BCK(cudaMalloc(&dv, es * (size_t)nv));
        BCK(cudaMalloc(&dbeta, es * (size_t)nb));
        BCK(cudaMalloc(&dg, 4 * (size_t)BTH));
        if (mask) BCK(cudaMalloc(&dmask, sizeof(float) * (size_t)a->H * n * n));
        const size_t wsb = gdp_backward_workspace_bytes(&d), svb = gdp_saved_bytes(&d);
        const size_t scb = gdp_backward_scratch_bytes(&d);
        void *saved, *scratch;
        BCK(cudaMalloc(&ws, wsb));
        BCK(cudaMalloc(&saved, svb));
        BCK(cudaMalloc(&scratch, scb));
        cudaStream_t st;
        BCK(cudaStreamCreate(&st));
        GdpForwardArgs fa = {q, k, v, beta, g, mask, NULL, o, NULL, NULL, 0};
        GdpBackwardArgs ba = {q, k, v, beta, g, mask, NULL, d_o, NULL, dq, dk, dv, dbeta, dg, dmask, NULL, NULL};
        GdpForwardArgs fa_s = fa;
        GdpBackwardArgs ba_s = ba;
        fa_s.saved = saved, fa_s.saved_bytes = svb, ba_s.saved = saved;
        OpRun fwd = {&d, &fa, &ba, ws, wsb, st, false}, fb = fwd, fbs = {&d, &fa_s, &ba_s, scratch, scb, st, true};
        fb.backward = true;
        const double mf = median_ms(a, st, op_once, &fwd), mb = median_ms(a, st, op_once, &fb);
        const double ms = median_ms(a, st, op_once, &fbs);
        if (a->profile) { /* one more forward + backward, each kernel timed (stderr) */
            GdpTuning t = gdp_get_tuning();
            t.profile = true;
            gdp_set_tuning(&t);
            fprintf(stderr, "-- kernels, n=%d\n", n);
            check_status(gdp_forward_cuda(&d, &fa, ws, wsb, st), "gdp_forward_cuda");
            check_status(gdp_backward_cuda(&d, &ba, ws, wsb, st), "gdp_backward_cuda");
            fprintf(stderr, "-- kernels, n=%d, the saving forward and its backward\n", n);
            check_status(gdp_forward_cuda(&d, &fa_s, scratch, scb, st), "gdp_forward_cuda (saving)");
            check_status(gdp_backward_cuda(&d, &ba_s, scratch, scb, st), "gdp_backward_cuda (saved)");
            BCK(cudaStreamSynchronize(st));
            t.profile = false;
            gdp_set_tuning(&t);
        }
        const double Ff = flops_fwd(a->B, a->T, a->H, a->K, a->V, n), Fb = flops_bwd(a->B, a->T, a->H, a->K, a->V, n);
        const double e = (double)es;
        const double in_bytes = e * (nq + nk + nv + nb + no /* do */) + 4.0 * BTH;
        const double fwd_bytes = e * (nq + nk + nv + nb + no) + 4.0 * BTH;
        const double bwd_bytes = in_bytes + e * (nq + nk + nv + nb) + 4.0 * BTH;
        const double floor_f = fmax(Ff / peak, fwd_bytes / bw) * 1e3;
        const double floor_fb = fmax((Ff + Fb) / peak, (fwd_bytes + bwd_bytes) / bw) * 1e3;
        char pf[16] = "-", pb[16] = "-";
        if (a->B == 8 && a->T == 2048 && a->H == 16 && a->K == 128 && a->V == 128 && a->dt == GDP_BF16 &&
            a->mode == GDP_MODE_HOUSEHOLDER && n <= 3) {
            snprintf(pf, sizeof pf, "%.3f", peer_fwd[n]);
            snprintf(pb, sizeof pb, "%.3f", peer_fb[n]);
        }
        printf("%-3d %10.3f %9.1f %8.2f %12.3f %9.1f %8.2f %10s %10s %10.3f\n", n, mf, Ff / (mf * 1e-3) / 1e12, mf / floor_f,
               mb, (Ff + Fb) / (mb * 1e-3) / 1e12, mb / floor_fb, pf, pb, ms);
        fflush(stdout);
        BCK(cudaStreamDestroy(st));
        void *bufs[] = {q, k, v, beta, g, d_o, mask, o, dq, dk, dv, dbeta, dg, dmask, ws, saved, scratch};
        for (size_t i = 0; i < GDP_ARRAY_LEN(bufs); i++)
            if (bufs[i]) BCK(cudaFree(bufs[i]));
    }
    free(pool);
    return 0;
}

/* One GEMM configuration (see matmul_cuda_ex). */
typedef struct GemmRun {
    CudaCtx *cu;
    DType dt;
    MatmulCompute mc;
    void *c;
    const void *x, *y;
    int64_t m, n, k;
    int ta, tb, acc;
} GemmRun;

static void gemm_once(void *user) {
    const GemmRun *g = (const GemmRun *)user;
    matmul_cuda_ex(g->dt, g->mc, g->cu->cublas, g->c, g->x, g->y, 1, g->m, g->n, g->k, g->ta, g->tb, 0, 0, 0, g->acc);
}

static double time_gemm(const BenchArgs *a, CudaCtx *cu, DType dt, MatmulCompute mc, void *c, const void *x,
                        const void *y, int64_t m, int64_t n, int64_t k, int ta, int tb, int acc) {
    GemmRun g = {cu, dt, mc, c, x, y, m, n, k, ta, tb, acc};
    return median_ms(a, cu->stream, gemm_once, &g);
}

static int bench_matmul_run(const BenchArgs *a) {
    /* The linear layers of the base preset (hidden 768, n_h 2, SwiGLU 2048, vocab 32000): in, out */
    static const struct { int in, out; const char *what; } shapes[] = {
        {768, 768, "q/g/o_proj"}, {768, 1536, "k/v_proj n_h=2"}, {768, 2048, "gate/up_proj"},
        {2048, 768, "down_proj"}, {768, 32000, "lm_head"},       {768, 12, "b_proj"},
    };
    CudaCtx *cu = cuda_ctx_create(0);
    float *pool = (float *)xmalloc(sizeof(float) * (1 << 20));
    Rng rng;
    rng_seed(&rng, 99);
    for (int i = 0; i < (1 << 20); i++) pool[i] = (float)rng_normal(&rng);
    const int64_t M = a->tokens;
    printf("gdp bench matmul: %lld rows, median of %d (warm-up %d); ms (TFLOP/s)\n", (long long)M, a->iters, a->warmup);
    printf("%-16s %-20s %17s %17s %17s\n", "layer", "operands -> output", "y = x W^T", "dx = dy W", "dW += dy^T x");
    static const char *variant[3] = {"f32 as bf16 -> f32", "bf16 -> bf16", "bf16 -> f32"};
    for (size_t si = 0; si < GDP_ARRAY_LEN(shapes); si++) {
        const int64_t K = shapes[si].in, N = shapes[si].out;
        const double fl = 2.0 * (double)M * N * K;
        for (int v = 0; v < 3; v++) {
            /* 0: cuBLAS rounding f32 operands; 1: bf16 activations' y and dx; 2: their dW, and every
             * GEMM of the f32-activation copies */
            const DType in = v ? GDP_BF16 : GDP_F32, out = v == 1 ? GDP_BF16 : GDP_F32;
            const MatmulCompute mc = v == 0 ? MATMUL_BF16_INPUTS : v == 1 ? MATMUL_EXACT : MATMUL_BF16_F32_OUT;
            void *x = bench_buffer(M * K, in, 0, 0, pool, 1 << 20, 11), *w = bench_buffer(N * K, in, 0, 0, pool, 1 << 20, 12);
            void *dy = bench_buffer(M * N, in, 0, 0, pool, 1 << 20, 13), *yb, *dx, *dw;
            BCK(cudaMalloc(&yb, dtype_size(out) * (size_t)(M * N)));
            BCK(cudaMalloc(&dx, dtype_size(out) * (size_t)(M * K)));
            BCK(cudaMalloc(&dw, dtype_size(out) * (size_t)(N * K)));
            BCK(cudaMemset(dw, 0, dtype_size(out) * (size_t)(N * K)));
            double tf = time_gemm(a, cu, in, mc, yb, x, w, M, N, K, 0, 1, 0);
            double tdx = time_gemm(a, cu, in, mc, dx, dy, w, M, K, N, 0, 0, 0);
            double tdw = time_gemm(a, cu, in, mc, dw, dy, x, N, K, M, 1, 0, 1); /* dW [N,K] = dy^T x */
            printf("%-16s %-20s %8.3f (%6.1f) %8.3f (%6.1f) %8.3f (%6.1f)\n", shapes[si].what, variant[v], tf,
                   fl / tf / 1e9, tdx, fl / tdx / 1e9, tdw, fl / tdw / 1e9);
            fflush(stdout);
            void *bufs[] = {x, w, dy, yb, dx, dw};
            for (size_t i = 0; i < GDP_ARRAY_LEN(bufs); i++) BCK(cudaFree(bufs[i]));
        }
    }
    free(pool);
    cuda_ctx_destroy(cu);
    return 0;
}
#endif

/* gdp bench op --plan: the kernel plan of each n, for both ways the backward can run */
static int bench_plan(const BenchArgs *a) {
    int refused = 0;
    for (int i = 0; i < a->n_ns; i++) {
        const GdpDesc d = {a->mode, a->B, a->T, a->H, a->K, a->V, a->ns[i], 0.0, a->dt, NULL, 0};
        for (int saved = 1; saved >= 0; saved--) {
            GdpDeviceCaps caps;
            GdpKernelPlan plan;
            GdpStatus st = a->arch ? gdp_device_caps_of_arch(a->arch, &caps) : GDP_OK;
#ifdef GDP_CUDA
            if (st == GDP_OK) st = a->arch ? gdp_plan_kernels(&d, &caps, NULL, saved, true, &plan) : gdp_plan_device(&d, saved, &caps, &plan);
#else
            if (!a->arch) {
                fprintf(stderr, "gdp bench op --plan: this build has no CUDA; name a GPU with --arch 80|86|89|90\n");
                return 1;
            }
            if (st == GDP_OK) st = gdp_plan_kernels(&d, &caps, NULL, saved, true, &plan);
#endif
            if (st != GDP_OK) {
                printf("n=%d: refused: %s\n", a->ns[i], gdp_last_error());
                refused = 1;
                break;
            }
            gdp_plan_print(&plan, &d, &caps, saved, stdout);
        }
    }
    return refused;
}

int cmd_bench(int argc, char **argv) {
    BenchArgs a = {8, 2048, 16, 128, 128, 20, 3, 16384, {1, 2, 3}, 3, GDP_MODE_HOUSEHOLDER, GDP_BF16, false, false, 0};
    char *pos[2];
    int np = cli_parse(&bench_cmd, argc, argv, on_opt, &a, pos, 2);
    if (np != 1 || (strcmp(pos[0], "op") && strcmp(pos[0], "matmul")))
        cli_usage_error(&bench_cmd, "say what to time: 'gdp bench op' (the Gated DeltaProduct op) or 'gdp bench "
                                    "matmul' (the model's GEMMs)");
    if (a.mode == GDP_MODE_SPLIT)
        for (int i = 0; i < a.n_ns; i++)
            if (a.K % a.ns[i])
                cli_usage_error(&bench_cmd, "split mode needs K divisible by r: K=%d, r=%d", a.K, a.ns[i]);
    if (a.plan || a.arch) {
        if (strcmp(pos[0], "op") || !a.plan) cli_usage_error(&bench_cmd, "--plan and --arch go with 'gdp bench op --plan'");
        return bench_plan(&a);
    }
#ifdef GDP_CUDA
    return strcmp(pos[0], "matmul") ? bench_run(&a) : bench_matmul_run(&a);
#else
    fprintf(stderr, "gdp bench: this build has no CUDA (built with NO_CUDA=1 or without nvcc); rebuild with CUDA\n");
    return 1;
#endif
}
