/* The normalisation kernels (kernels/rmsnorm.cu, kernels/l2norm.cu, kernels/gated_rmsnorm.cu) on raw
 * device buffers, against the float64 CPU reference on the same (storage-rounded) inputs:
 *   - RMSNorm f32, bf16, and f32 x into bf16 y; with and without w; dx alone, dw alone, both; the acc
 *     flags; C from 1 to 2048: the row-group kernels at every (lanes, chunks) shape, chunks partly
 *     idle (C 136, 520), and past them (C 1032, 2048: the one-warp-a-row 8-column loops); C not a
 *     multiple of 8; 33001 rows of 768 (dw from 516 chunks of 64 rows, the last short), and the
 *     1024-chunk cap;
 *   - L2 norm f32 and bf16, G 1 to 520, with and without acc, 66001 rows of 128;
 *   - gated RMSNorm f32 and bf16, do / dz / dw in every combination the glue makes, the acc flags,
 *     o and z one tensor with do and dz one buffer (acc_o 1), D from 1 to 520, 66001 rows of 128, and
 *     the 1024-chunk cap.
 * Each case runs with the tensors aligned (the row-group kernels where the shape allows) and moved
 * by 2 bytes (bf16) or 4 (f32), which sends every call to the one-warp-a-row kernels. Outputs start as
 * NaN (0xFF bytes) unless accumulated into, so an element nobody wrote fails, and the bytes around each
 * output must stay 0xFF. The aligned run is made twice: the same bits both times (the fixed-order dw
 * sums).
 * GDP_NORM_BENCH=1 then times each op at the base model's shapes (B 8 x T 2048 tokens, 6 heads of
 * 128; bf16, RMSNorm from the f32 stream): a report, not a test. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "base/common.h"
#include "base/cuda_check.h"
#include "kernels/gated_rmsnorm.h"
#include "kernels/l2norm.h"
#include "kernels/rmsnorm.h"
#include "tests/gpu/gpu_poisoned.h"
#include "tests/gpu/gpu_test.h"

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* n values uniform in [lo, hi) in storage type dt (bits) and as the doubles they hold (d). */
typedef struct Input {
    DType dt;
    int64_t n;
    void *bits;
    double *d;
} Input;

static Input make_input(DType dt, int64_t n, uint64_t *rng, double lo, double hi) {
    Input in = {dt, n, xmalloc((size_t)(n > 0 ? n : 1) * dtype_size(dt)), (double *)xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double))};
    for (int64_t i = 0; i < n; i++) {
        float v = (float)(lo + (hi - lo) * ((double)(rng_next(rng) >> 11) / 9007199254740992.0));
        if (dt == GDP_BF16) {
            uint16_t h = f32_to_bf16(v);
            ((uint16_t *)in.bits)[i] = h;
            v = bf16_to_f32(h);
        } else {
            ((float *)in.bits)[i] = v;
        }
        in.d[i] = v;
    }
    return in;
}

static void input_free(Input *in) { free(in->bits), free(in->d); }

static double *dup_doubles(const double *d, int64_t n) {
    double *c = (double *)xmalloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (n > 0) memcpy(c, d, (size_t)n * sizeof(double));
    return c;
}

static double stored(DType dt, const void *p, int64_t i) {
    return dt == GDP_BF16 ? bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* |got - ref| <= rtol |ref| + atol max(1, max|ref|) everywhere (NaN fails); prints the first miss. The
 * floor of 1: the inputs are of order 1, and where the outputs are far smaller (a row of 1 element:
 * dx = r g w (1 - xhat^2)) they are what is left after cancellation, f32 noise of the inputs' size. */
static void expect_close(int *failures, const char *what, const char *label, DType dt, const void *got,
                         const double *ref, int64_t n) {
    const double rtol = dt == GDP_BF16 ? 1e-2 : 1e-4, atol = dt == GDP_BF16 ? 2e-3 : 1e-4;
    double scale = 1;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (int64_t i = 0; i < n; i++) {
        double g = stored(dt, got, i), err = fabs(g - ref[i]);
        if (!(err <= rtol * fabs(ref[i]) + atol * scale)) {
            GPU_EXPECT(0, "%s %s: element %lld of %lld is %.8g, CPU %.8g", label, what, (long long)i, (long long)n, g,
                       ref[i]);
            return;
        }
    }
}

/* Host copies of a run's outputs (NULL where not asked for). */
typedef struct Outs {
    void *o[5];
    size_t bytes[5];
    bool guards_ok;
} Outs;

static void outs_free(Outs *o) {
    for (int i = 0; i < 5; i++) free(o->o[i]);
}

static void expect_same_outs(int *failures, const char *label, const Outs *a, const Outs *b) {
    for (int i = 0; i < 5; i++)
        GPU_EXPECT(!a->o[i] || memcmp(a->o[i], b->o[i], a->bytes[i]) == 0,
                   "%s: output %d differs between two identical runs", label, i);
}

static void *take_out(Outs *o, int i, DevBuf *d) {
    o->bytes[i] = d->bytes;
    o->o[i] = d->base ? xmalloc(d->bytes ? d->bytes : 1) : NULL;
    o->guards_ok &= dev_take(d, o->o[i]);
    return o->o[i];
}

static float *dev_f32(size_t n) {
    float *p;
    CUDA_CHECK(cudaMalloc((void **)&p, (n ? n : 1) * sizeof(float)));
    return p;
}

/* ------------------------------------------------------------------------------------ RMSNorm */
typedef struct RmsCase {
    int64_t rows, C;
    DType xdt, ydt;
    int has_w, want_dx, want_dw, acc_x, acc_w;
} RmsCase;

#define F GDP_F32
#define H GDP_BF16
static const RmsCase rms_cases[] = {
    /* rows  C     x  y  w  dx dw ax aw */
    {37, 768, H, H, 1, 1, 1, 0, 0},       /* 32 lanes x 3 chunks */
    {37, 768, F, H, 1, 1, 1, 1, 1},       /* the model's mixed case */
    {37, 768, F, F, 1, 1, 1, 0, 1},
    {33001, 768, F, H, 1, 1, 1, 1, 0},    /* dw from 516 chunks of 64 rows (8 steps of 8), the last short */
    {70001, 8, H, H, 1, 1, 1, 0, 1},      /* 1024 chunks (the cap) of 69 rows: 3 steps of 32, the last short */
    {50, 64, H, H, 1, 1, 1, 0, 0},        /* 8 lanes a row */
    {51, 128, F, F, 1, 1, 0, 1, 0},       /* 16 lanes, dx alone */
    {52, 256, F, H, 1, 0, 1, 0, 1},       /* 32 lanes x 1, dw alone */
    {9, 512, H, H, 0, 1, 0, 0, 0},        /* 32 x 2, no w */
    {40, 1024, F, H, 1, 1, 1, 1, 1},      /* 32 x 4 */
    {21, 136, H, H, 1, 1, 1, 1, 1},       /* 17 chunks: 32 lanes, 15 idle */
    {23, 520, F, F, 1, 1, 1, 0, 0},       /* 65 chunks: 32 x 3, lanes idle in the third */
    {10, 1032, F, H, 1, 1, 1, 1, 0},      /* past 1024: one warp a row, 8 columns a lane */
    {6, 2048, H, H, 1, 1, 1, 0, 1},
    {11, 36, F, H, 1, 1, 1, 0, 0},        /* not a multiple of 8: one column a lane */
    {5, 7, H, H, 1, 1, 1, 1, 1},
    {3, 1, F, F, 1, 1, 1, 0, 0},
    {1, 8, H, H, 1, 1, 1, 0, 0},          /* one chunk, one row */
    {0, 16, F, F, 1, 1, 1, 0, 0},         /* no rows: dw is zeroed */
    {0, 16, H, H, 1, 1, 1, 0, 1},         /* ... or left as it was */
};

static void rms_gpu(const RmsCase *k, size_t off, const Input *x, const Input *w, const Input *dy, const Input *dx0,
                    const Input *dw0, Outs *out) {
    const int64_t n = k->rows * k->C;
    const size_t xs = dtype_size(k->xdt), ys = dtype_size(k->ydt);
    memset(out, 0, sizeof *out);
    out->guards_ok = true;
    DevBuf bx = dev_buf(1, (size_t)n * xs, off, x->bits), bw = dev_buf(k->has_w, (size_t)k->C * xs, off, w->bits);
    DevBuf bdy = dev_buf(1, (size_t)n * ys, off, dy->bits), by = dev_buf(1, (size_t)n * ys, off, NULL);
    DevBuf bdx = dev_buf(k->want_dx, (size_t)n * xs, off, k->acc_x ? dx0->bits : NULL);
    DevBuf bdw = dev_buf(k->want_dw, (size_t)k->C * xs, off, k->acc_w ? dw0->bits : NULL);
    DevBuf brs = dev_buf(1, (size_t)k->rows * 4, 0, NULL);
    float *partial = dev_f32((size_t)(rmsnorm_dw_chunks(k->rows) * k->C));
    rmsnorm_forward_cuda(k->xdt, k->ydt, by.p, (float *)brs.p, bx.p, bw.p, k->rows, k->C, 1e-5, NULL);
    rmsnorm_backward_cuda(k->xdt, k->ydt, bdx.p, bdw.p, partial, bdy.p, bx.p, bw.p, (const float *)brs.p, k->rows,
                          k->C, k->acc_x, k->acc_w, NULL);
    CUDA_CHECK(cudaDeviceSynchronize());
    take_out(out, 0, &by), take_out(out, 1, &brs), take_out(out, 2, &bdx), take_out(out, 3, &bdw);
    dev_take(&bx, NULL), dev_take(&bw, NULL), dev_take(&bdy, NULL);
    CUDA_CHECK(cudaFree(partial));
}

static void rms_check(int *failures, const RmsCase *k, uint64_t seed) {
    char label[200];
    snprintf(label, sizeof label, "rmsnorm %s->%s rows %lld C %lld w %d dx %d dw %d acc_x %d acc_w %d",
             dtype_name(k->xdt), dtype_name(k->ydt), (long long)k->rows, (long long)k->C, k->has_w, k->want_dx,
             k->want_dw, k->acc_x, k->acc_w);
    const int64_t n = k->rows * k->C;
    Input x = make_input(k->xdt, n, &seed, -2, 2), w = make_input(k->xdt, k->C, &seed, 0.5, 1.5);
    Input dy = make_input(k->ydt, n, &seed, -1, 1), dx0 = make_input(k->xdt, n, &seed, -1, 1);
    Input dw0 = make_input(k->xdt, k->C, &seed, -1, 1);
    double *y = dup_doubles(x.d, n), *rstd = dup_doubles(x.d, k->rows), *dx = dup_doubles(dx0.d, n);
    double *dw = dup_doubles(dw0.d, k->C);
    const double *wd = k->has_w ? w.d : NULL;
    rmsnorm_forward_cpu(GDP_F64, y, rstd, x.d, wd, k->rows, k->C, 1e-5);
    rmsnorm_backward_dx_cpu(GDP_F64, dx, dy.d, x.d, wd, rstd, k->rows, k->C, k->acc_x);
    rmsnorm_backward_dw_cpu(GDP_F64, dw, dy.d, x.d, rstd, k->rows, k->C, k->acc_w);

    /* 4 bytes moves every tensor off 16-byte alignment whatever its type; bf16 alone also 2. */
    const size_t offs[] = {0, 4, 2};
    const int n_offs = k->xdt == GDP_BF16 ? 3 : 2;
    Outs first;
    rms_gpu(k, 0, &x, &w, &dy, &dx0, &dw0, &first);
    for (int i = 0; i < n_offs; i++) {
        char l[260];
        snprintf(l, sizeof l, "%s, tensors at +%zu bytes", label, offs[i]);
        Outs o;
        rms_gpu(k, offs[i], &x, &w, &dy, &dx0, &dw0, &o);
        GPU_EXPECT(o.guards_ok, "%s: a byte next to an output changed", l);
        expect_close(failures, "y", l, k->ydt, o.o[0], y, n);
        expect_close(failures, "rstd", l, GDP_F32, o.o[1], rstd, k->rows);
        if (k->want_dx) expect_close(failures, "dx", l, k->xdt, o.o[2], dx, n);
        if (k->want_dw) expect_close(failures, "dw", l, k->xdt, o.o[3], dw, k->C);
        if (i == 0) expect_same_outs(failures, l, &o, &first);
        outs_free(&o);
    }
    outs_free(&first);
    free(y), free(rstd), free(dx), free(dw);
    input_free(&x), input_free(&w), input_free(&dy), input_free(&dx0), input_free(&dw0);
}

GPU_TEST(rmsnorm_matches_cpu) {
    for (size_t i = 0; i < GDP_ARRAY_LEN(rms_cases); i++) rms_check(failures, &rms_cases[i], 31 + i);
}

/* ------------------------------------------------------------------------------------ L2 norm */
typedef struct L2Case {
    int64_t rows, G;
    int acc;
} L2Case;

static const L2Case l2_cases[] = {
    {66001, 128, 1}, /* the keys' rows (16 lanes a row, 2 rows a warp) */
    {300, 128, 0},   {77, 64, 1}, {70, 8, 0}, {45, 16, 1}, {33, 256, 0}, {20, 512, 1},
    {19, 136, 0},    /* 17 chunks */
    {18, 520, 1},    /* past 512: one warp a row */
    {25, 12, 0},     {25, 33, 1}, {9, 1, 0},
};

static void l2_gpu(DType dt, const L2Case *k, size_t off, const Input *x, const Input *dy, const Input *dx0, Outs *out) {
    const int64_t n = k->rows * k->G;
    const size_t es = dtype_size(dt);
    memset(out, 0, sizeof *out);
    out->guards_ok = true;
    DevBuf bx = dev_buf(1, (size_t)n * es, off, x->bits), bdy = dev_buf(1, (size_t)n * es, off, dy->bits);
    DevBuf by = dev_buf(1, (size_t)n * es, off, NULL), bdx = dev_buf(1, (size_t)n * es, off, k->acc ? dx0->bits : NULL);
    DevBuf brs = dev_buf(1, (size_t)k->rows * 4, 0, NULL);
    l2norm_forward_cuda(dt, by.p, (float *)brs.p, bx.p, k->rows, k->G, 1e-6, NULL);
    l2norm_backward_cuda(dt, bdx.p, bdy.p, bx.p, (const float *)brs.p, k->rows, k->G, k->acc, NULL);
    CUDA_CHECK(cudaDeviceSynchronize());
    take_out(out, 0, &by), take_out(out, 1, &brs), take_out(out, 2, &bdx);
    dev_take(&bx, NULL), dev_take(&bdy, NULL);
}

static void l2_check(int *failures, DType dt, const L2Case *k, uint64_t seed) {
    char label[160];
    snprintf(label, sizeof label, "l2norm %s rows %lld G %lld acc %d", dtype_name(dt), (long long)k->rows,
             (long long)k->G, k->acc);
    const int64_t n = k->rows * k->G;
    Input x = make_input(dt, n, &seed, -2, 2), dy = make_input(dt, n, &seed, -1, 1);
    Input dx0 = make_input(dt, n, &seed, -1, 1);
    double *y = dup_doubles(x.d, n), *rstd = dup_doubles(x.d, k->rows), *dx = dup_doubles(dx0.d, n);
    l2norm_forward_cpu(GDP_F64, y, rstd, x.d, k->rows, k->G, 1e-6);
    l2norm_backward_cpu(GDP_F64, dx, dy.d, x.d, rstd, k->rows, k->G, k->acc);
    const size_t offs[] = {0, 4, 2};
    const int n_offs = dt == GDP_BF16 ? 3 : 2;
    Outs first;
    l2_gpu(dt, k, 0, &x, &dy, &dx0, &first);
    for (int i = 0; i < n_offs; i++) {
        char l[220];
        snprintf(l, sizeof l, "%s, tensors at +%zu bytes", label, offs[i]);
        Outs o;
        l2_gpu(dt, k, offs[i], &x, &dy, &dx0, &o);
        GPU_EXPECT(o.guards_ok, "%s: a byte next to an output changed", l);
        expect_close(failures, "y", l, dt, o.o[0], y, n);
        expect_close(failures, "rstd", l, GDP_F32, o.o[1], rstd, k->rows);
        expect_close(failures, "dx", l, dt, o.o[2], dx, n);
        if (i == 0) expect_same_outs(failures, l, &o, &first);
        outs_free(&o);
    }
    outs_free(&first);
    free(y), free(rstd), free(dx);
    input_free(&x), input_free(&dy), input_free(&dx0);
}

GPU_TEST(l2norm_matches_cpu) {
    for (size_t i = 0; i < GDP_ARRAY_LEN(l2_cases); i++) {
        l2_check(failures, GDP_BF16, &l2_cases[i], 61 + i);
        l2_check(failures, GDP_F32, &l2_cases[i], 91 + i);
    }
}

/* ------------------------------------------------------------------------------ gated RMSNorm */
typedef struct GrmsCase {
    int64_t rows, D;
    int want_do, want_dz, want_dw, acc_o, acc_z, acc_w, alias;
} GrmsCase;

static const GrmsCase grms_cases[] = {
    /* rows   D    do dz dw ao az aw alias */
    {66001, 128, 1, 1, 1, 0, 0, 0, 0}, /* the model's shape: dw from 258 chunks of 256 rows, the last short */
    {270001, 8, 1, 1, 1, 0, 1, 1, 0},  /* 1024 chunks (the cap) of 264 rows: 9 steps of 32, the last short */
    {300, 128, 1, 1, 1, 1, 1, 1, 0},
    {301, 128, 1, 1, 0, 0, 1, 0, 0},   /* no dw: one step of rows a block */
    {77, 128, 0, 0, 1, 0, 0, 1, 0},    /* dw alone */
    {50, 128, 1, 0, 1, 1, 0, 0, 0},    /* do and dw */
    {51, 128, 0, 1, 0, 0, 0, 0, 0},    /* dz alone */
    {40, 128, 1, 1, 1, 1, 0, 0, 1},    /* o and z one tensor, do and dz one buffer */
    {41, 16, 1, 1, 1, 1, 1, 1, 1},
    {70, 64, 1, 1, 1, 1, 0, 1, 0},     /* 8 lanes a row */
    {33, 256, 1, 1, 1, 0, 1, 0, 0},    /* 32 lanes */
    {20, 512, 1, 1, 1, 1, 1, 1, 0},    /* 32 lanes x 2 */
    {19, 136, 1, 1, 1, 0, 0, 1, 0},    /* 17 chunks */
    {18, 520, 1, 1, 1, 0, 0, 0, 0},    /* past 512: one warp a row */
    {25, 12, 1, 1, 1, 0, 1, 1, 0},     /* not a multiple of 8 */
    {24, 6, 1, 1, 1, 1, 0, 0, 1},
    {9, 1, 1, 1, 1, 0, 0, 0, 0},
    {1, 8, 1, 1, 1, 0, 0, 0, 0},
    {0, 16, 1, 1, 1, 0, 0, 0, 0},      /* no rows: dw is zeroed */
    {0, 16, 1, 1, 1, 0, 0, 1, 0},      /* ... or left as it was */
};

static void grms_gpu(DType dt, const GrmsCase *k, size_t off, const Input *o, const Input *z, const Input *w,
                     const Input *dy, const Input *do0, const Input *dz0, const Input *dw0, Outs *out) {
    const int64_t n = k->rows * k->D;
    const size_t es = dtype_size(dt), bn = (size_t)n * es, bd = (size_t)k->D * es;
    memset(out, 0, sizeof *out);
    out->guards_ok = true;
    DevBuf bo = dev_buf(1, bn, off, o->bits), bz = dev_buf(!k->alias, bn, off, z->bits);
    DevBuf bw = dev_buf(1, bd, off, w->bits), bdy = dev_buf(1, bn, off, dy->bits), by = dev_buf(1, bn, off, NULL);
    /* alias: one buffer for do and dz; dz is written first (acc_z), then do added (acc_o). */
    DevBuf bdz = dev_buf(k->want_dz, bn, off, k->acc_z ? dz0->bits : NULL);
    DevBuf bdo = dev_buf(k->want_do && !k->alias, bn, off, k->acc_o ? do0->bits : NULL);
    DevBuf bdw = dev_buf(k->want_dw, bd, off, k->acc_w ? dw0->bits : NULL);
    DevBuf brs = dev_buf(1, (size_t)k->rows * 4, 0, NULL);
    void *zp = k->alias ? bo.p : bz.p, *dop = k->alias ? bdz.p : bdo.p;
    float *partial = dev_f32((size_t)(gated_rmsnorm_dw_chunks(k->rows) * k->D));
    gated_rmsnorm_forward_cuda(dt, by.p, (float *)brs.p, bo.p, zp, bw.p, k->rows, k->D, 1e-5, NULL);
    gated_rmsnorm_backward_cuda(dt, dop, bdz.p, bdw.p, partial, bdy.p, bo.p, zp, bw.p, (const float *)brs.p, k->rows,
                                k->D, k->acc_o, k->acc_z, k->acc_w, NULL);
    CUDA_CHECK(cudaDeviceSynchronize());
    take_out(out, 0, &by), take_out(out, 1, &brs), take_out(out, 2, &bdo), take_out(out, 3, &bdz);
    take_out(out, 4, &bdw);
    dev_take(&bo, NULL), dev_take(&bz, NULL), dev_take(&bw, NULL), dev_take(&bdy, NULL);
    CUDA_CHECK(cudaFree(partial));
}

static void grms_check(int *failures, DType dt, const GrmsCase *k, uint64_t seed) {
    char label[200];
    snprintf(label, sizeof label, "gated_rmsnorm %s rows %lld D %lld do %d dz %d dw %d acc_o %d acc_z %d acc_w %d alias %d",
             dtype_name(dt), (long long)k->rows, (long long)k->D, k->want_do, k->want_dz, k->want_dw, k->acc_o,
             k->acc_z, k->acc_w, k->alias);
    const int64_t n = k->rows * k->D;
    Input o = make_input(dt, n, &seed, -2, 2), z = make_input(dt, n, &seed, -4, 4);
    Input w = make_input(dt, k->D, &seed, 0.5, 1.5), dy = make_input(dt, n, &seed, -1, 1);
    Input do0 = make_input(dt, n, &seed, -1, 1), dz0 = make_input(dt, n, &seed, -1, 1);
    Input dw0 = make_input(dt, k->D, &seed, -1, 1);
    const double *zd = k->alias ? o.d : z.d;
    double *y = dup_doubles(o.d, n), *rstd = dup_doubles(o.d, k->rows), *dz = dup_doubles(dz0.d, n);
    double *d_o = k->alias ? dz : dup_doubles(do0.d, n), *dw = dup_doubles(dw0.d, k->D);
    gated_rmsnorm_forward_cpu(GDP_F64, y, rstd, o.d, zd, w.d, k->rows, k->D, 1e-5);
    gated_rmsnorm_backward_oz_cpu(GDP_F64, k->want_do ? d_o : NULL, k->want_dz ? dz : NULL, dy.d, o.d, zd, w.d, rstd,
                                  k->rows, k->D, k->acc_o, k->acc_z);
    gated_rmsnorm_backward_dw_cpu(GDP_F64, dw, dy.d, o.d, zd, rstd, k->rows, k->D, k->acc_w);
    const size_t offs[] = {0, 4, 2};
    const int n_offs = dt == GDP_BF16 ? 3 : 2;
    Outs first;
    grms_gpu(dt, k, 0, &o, &z, &w, &dy, &do0, &dz0, &dw0, &first);
    for (int i = 0; i < n_offs; i++) {
        char l[260];
        snprintf(l, sizeof l, "%s, tensors at +%zu bytes", label, offs[i]);
        Outs r;
        grms_gpu(dt, k, offs[i], &o, &z, &w, &dy, &do0, &dz0, &dw0, &r);
        GPU_EXPECT(r.guards_ok, "%s: a byte next to an output changed", l);
        expect_close(failures, "y", l, dt, r.o[0], y, n);
        expect_close(failures, "rstd", l, GDP_F32, r.o[1], rstd, k->rows);
        if (k->want_do && !k->alias) expect_close(failures, "do", l, dt, r.o[2], d_o, n);
        if (k->want_dz) expect_close(failures, k->alias ? "do + dz" : "dz", l, dt, r.o[3], dz, n);
        if (k->want_dw) expect_close(failures, "dw", l, dt, r.o[4], dw, k->D);
        if (i == 0) expect_same_outs(failures, l, &r, &first);
        outs_free(&r);
    }
    outs_free(&first);
    free(y), free(rstd), free(dz), free(dw);
    if (!k->alias) free(d_o);
    input_free(&o), input_free(&z), input_free(&w), input_free(&dy), input_free(&do0), input_free(&dz0);
    input_free(&dw0);
}

GPU_TEST(gated_rmsnorm_matches_cpu) {
    for (size_t i = 0; i < GDP_ARRAY_LEN(grms_cases); i++) {
        grms_check(failures, GDP_BF16, &grms_cases[i], 131 + i);
        grms_check(failures, GDP_F32, &grms_cases[i], 171 + i);
    }
}

/* ---------------------------------------------------------------- GDP_NORM_BENCH=1 */
static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

#define BENCH_ITERS 20
#define BENCH_WARMUP 3

typedef struct BenchArgs {
    unsigned char *a, *b, *c, *d, *e, *w, *dw; /* device buffers of the largest shape (+ 16 bytes) */
    float *rstd, *partial;
    size_t off; /* bytes every tensor is moved by: 0, or 4 (the one-warp-a-row kernels) */
} BenchArgs;

typedef void (*BenchFn)(const BenchArgs *b, int64_t rows, int64_t D, int flag);

static float bench_ms(BenchFn fn, const BenchArgs *b, int64_t rows, int64_t D, int flag) {
    cudaEvent_t ev0, ev1;
    float ms[BENCH_ITERS];
    CUDA_CHECK(cudaEventCreate(&ev0));
    CUDA_CHECK(cudaEventCreate(&ev1));
    for (int it = -BENCH_WARMUP; it < BENCH_ITERS; it++) {
        CUDA_CHECK(cudaEventRecord(ev0, NULL));
        fn(b, rows, D, flag);
        CUDA_CHECK(cudaEventRecord(ev1, NULL));
        CUDA_CHECK(cudaEventSynchronize(ev1));
        if (it >= 0) CUDA_CHECK(cudaEventElapsedTime(&ms[it], ev0, ev1));
    }
    CUDA_CHECK(cudaEventDestroy(ev0));
    CUDA_CHECK(cudaEventDestroy(ev1));
    qsort(ms, BENCH_ITERS, sizeof(float), cmp_float);
    return ms[BENCH_ITERS / 2];
}

#define O(p) ((p) + b->off)
static void b_grms_fwd(const BenchArgs *b, int64_t rows, int64_t D, int flag) {
    gated_rmsnorm_forward_cuda(GDP_BF16, O(b->c), b->rstd, O(b->a), O(b->b), O(b->w), rows, D, 1e-5, NULL);
}
static void b_grms_bwd(const BenchArgs *b, int64_t rows, int64_t D, int with_dw) {
    gated_rmsnorm_backward_cuda(GDP_BF16, O(b->d), O(b->e), with_dw ? O(b->dw) : NULL, b->partial, O(b->c), O(b->a),
                                O(b->b), O(b->w), b->rstd, rows, D, 0, 0, 0, NULL);
}
static void b_l2_fwd(const BenchArgs *b, int64_t rows, int64_t G, int flag) {
    l2norm_forward_cuda(GDP_BF16, O(b->c), b->rstd, O(b->a), rows, G, 1e-6, NULL);
}
static void b_l2_bwd(const BenchArgs *b, int64_t rows, int64_t G, int acc) {
    l2norm_backward_cuda(GDP_BF16, O(b->d), O(b->b), O(b->a), b->rstd, rows, G, acc, NULL);
}
/* RMSNorm: f32 x (a) and w, bf16 y (c) and dy (b), f32 dx (d). */
static void b_rms_fwd(const BenchArgs *b, int64_t rows, int64_t C, int flag) {
    rmsnorm_forward_cuda(GDP_F32, GDP_BF16, O(b->c), b->rstd, O(b->a), O(b->w), rows, C, 1e-5, NULL);
}
static void b_rms_bwd(const BenchArgs *b, int64_t rows, int64_t C, int acc_x) {
    rmsnorm_backward_cuda(GDP_F32, GDP_BF16, O(b->d), O(b->dw), b->partial, O(b->b), O(b->a), O(b->w), b->rstd, rows,
                          C, acc_x, 0, NULL);
}
#undef O

static void bench_row(const char *what, BenchFn fn, BenchArgs *b, int64_t rows, int64_t D, int flag, double bytes) {
    const float fast = bench_ms(fn, b, rows, D, flag);
    b->off = 4;
    const float slow = bench_ms(fn, b, rows, D, flag);
    b->off = 0;
    printf("  %-44s %8.4f ms %5.0f GB/s   (one warp a row: %8.4f ms %5.0f GB/s)\n", what, fast, bytes / fast * 1e-6,
           slow, bytes / slow * 1e-6);
}

static void norm_bench(void) {
    const int64_t tokens = 8 * 2048, heads = 6, hd = 128, C = 768, max_rows = tokens * heads * 3;
    const size_t big = (size_t)(max_rows * hd) * 4 + 16; /* f32 x of RMSNorm is smaller: 16384 x 768 */
    BenchArgs b;
    memset(&b, 0, sizeof b);
    unsigned char **bufs[] = {&b.a, &b.b, &b.c, &b.d, &b.e};
    uint64_t seed = 5;
    Input init = make_input(GDP_BF16, (int64_t)(big / 2), &seed, -1, 1); /* any finite values do */
    for (size_t i = 0; i < GDP_ARRAY_LEN(bufs); i++) {
        CUDA_CHECK(cudaMalloc((void **)bufs[i], big));
        CUDA_CHECK(cudaMemcpy(*bufs[i], init.bits, big / 2 * 2, cudaMemcpyHostToDevice));
    }
    float *xf = (float *)xmalloc((size_t)(tokens * C) * sizeof(float) + 16);
    for (int64_t i = 0; i < tokens * C + 4; i++) xf[i] = (float)init.d[i];
    CUDA_CHECK(cudaMalloc((void **)&b.w, (size_t)C * 4 + 16));
    CUDA_CHECK(cudaMalloc((void **)&b.dw, (size_t)C * 4 + 16));
    CUDA_CHECK(cudaMemcpy(b.w, init.bits, (size_t)C * 4 + 16, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMalloc((void **)&b.rstd, (size_t)max_rows * 4));
    CUDA_CHECK(cudaMemset(b.rstd, 0, (size_t)max_rows * 4));
    const int64_t np = GDP_MAX(gated_rmsnorm_dw_chunks(max_rows) * hd, rmsnorm_dw_chunks(tokens) * C);
    CUDA_CHECK(cudaMalloc((void **)&b.partial, (size_t)np * 4));
    printf("norm bench: B 8 x T 2048 = %lld tokens, bf16 (RMSNorm: f32 x and dx, bf16 y and dy), median of %d; "
           "GB/s counts each tensor read or written once\n",
           (long long)tokens, BENCH_ITERS);
    char what[96];
    const double gn = (double)(tokens * heads * hd) * 2; /* bytes of one bf16 [rows, 128] tensor */
    snprintf(what, sizeof what, "gated_rmsnorm fwd, rows %lld D %lld", (long long)(tokens * heads), (long long)hd);
    bench_row(what, b_grms_fwd, &b, tokens * heads, hd, 0, 3 * gn);
    bench_row("gated_rmsnorm bwd (do, dz, dw)", b_grms_bwd, &b, tokens * heads, hd, 1, 5 * gn);
    bench_row("gated_rmsnorm bwd (do, dz)", b_grms_bwd, &b, tokens * heads, hd, 0, 5 * gn);
    for (int n = 1; n <= 3; n++) {
        snprintf(what, sizeof what, "l2norm fwd, rows %lld (n %d) G %lld", (long long)(tokens * heads * n), n,
                 (long long)hd);
        bench_row(what, b_l2_fwd, &b, tokens * heads * n, hd, 0, 2 * gn * n);
        snprintf(what, sizeof what, "l2norm bwd (n %d)", n);
        bench_row(what, b_l2_bwd, &b, tokens * heads * n, hd, 0, 3 * gn * n);
    }
    /* f32 x, w and dx: the bf16 fill would read as arbitrary f32 bit patterns. */
    CUDA_CHECK(cudaMemcpy(b.a, xf, (size_t)(tokens * C) * 4 + 16, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b.w, xf, (size_t)C * 4 + 16, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b.d, xf, (size_t)(tokens * C) * 4 + 16, cudaMemcpyHostToDevice));
    const double rn = (double)(tokens * C);
    snprintf(what, sizeof what, "rmsnorm fwd, rows %lld C %lld (f32 -> bf16)", (long long)tokens, (long long)C);
    bench_row(what, b_rms_fwd, &b, tokens, C, 0, 6 * rn);
    bench_row("rmsnorm bwd (dx, dw)", b_rms_bwd, &b, tokens, C, 0, 10 * rn);
    bench_row("rmsnorm bwd (dx accumulated, dw)", b_rms_bwd, &b, tokens, C, 1, 14 * rn);
    for (size_t i = 0; i < GDP_ARRAY_LEN(bufs); i++) CUDA_CHECK(cudaFree(*bufs[i]));
    CUDA_CHECK(cudaFree(b.w));
    CUDA_CHECK(cudaFree(b.dw));
    CUDA_CHECK(cudaFree(b.rstd));
    CUDA_CHECK(cudaFree(b.partial));
    free(xf);
    input_free(&init);
}

int main(int argc, char **argv) {
    int rc = gpu_test_run(argc, argv);
    const char *bench = getenv("GDP_NORM_BENCH");
    if (bench && *bench && strcmp(bench, "0")) norm_bench();
    return rc;
}
