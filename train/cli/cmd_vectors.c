/* gdp vectors: runs the Gated DeltaProduct op on every case of the float64 reference vectors
 * (tests/data/gdp_vectors.h5), forward and backward with L = sum(o*do) + sum(ht*dht), and
 * compares each output and gradient with the file by relative L2 error. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/common.h"
#include "base/device.h"
#include "core/gradcheck.h"
#include "kernels/gdp/gdp.h"
#include "kernels/gdp/desc.h"
#include "train/cli/cli.h"
#include "train/cli/commands.h"
#include "tools/vectors_h5.h"

static const CliOpt vectors_opts[] = {
    {"device", 'd', "DEV", "cpu (the per-token reference, default) or cuda (the chunked kernels)"},
    {"dtype", 't', "DT", "cpu: f64 (default, bound 1e-10) or f32 (1e-4); cuda: f32 (default, 1e-4) or bf16 (2e-2)"},
    {"case", 'c', "NAME", "run only this case (default: every case in the file)"},
};
static const CliCommand vectors_cmd = {
    "vectors", "gdp vectors FILE.h5 [--device cpu|cuda] [--dtype f64|f32|bf16] [--case NAME]",
    "Checks the Gated DeltaProduct op against the float64 reference vectors (tests/data/gdp_vectors.h5):\n"
    "forward (o, ht) and backward (dq, dk, dv, dbeta, dg, dmask, dh0) of every case, one line per tensor with\n"
    "its relative L2 error and PASS/FAIL, then a summary. Cases without a gate or h0 run with g = NULL and\n"
    "h0 = NULL (their gradients are then the ones at zero). Exits 1 if any check fails, 2 on bad usage.",
    vectors_opts, (int)GDP_ARRAY_LEN(vectors_opts)};

typedef struct VecArgs {
    const char *device, *dtype, *only;
} VecArgs;

static void on_opt(const CliOpt *o, const char *v, void *user) {
    VecArgs *a = (VecArgs *)user;
    if (!strcmp(o->name, "device")) a->device = v;
    if (!strcmp(o->name, "dtype")) a->dtype = v;
    if (!strcmp(o->name, "case")) a->only = v;
}

/* A buffer on dev holding x converted to dt (NULL when x is NULL). */
static void *upload(Device dev, const double *x, int64_t n, DType dt) {
    if (!x) return NULL;
    size_t es = dtype_size(dt);
    unsigned char *h = (unsigned char *)xmalloc((size_t)GDP_MAX(n, 1) * es);
    for (int64_t i = 0; i < n; i++) {
        if (dt == GDP_F64) ((double *)h)[i] = x[i];
        else if (dt == GDP_F32) ((float *)h)[i] = (float)x[i];
        else ((uint16_t *)h)[i] = f32_to_bf16((float)x[i]);
    }
    void *d = device_malloc(dev, (size_t)GDP_MAX(n, 1) * es);
    device_memcpy(d, dev, h, DEV_CPU, (size_t)n * es);
    free(h);
    return d;
}

static void *alloc_on(Device dev, int64_t n, DType dt) {
    void *d = device_malloc(dev, (size_t)GDP_MAX(n, 1) * dtype_size(dt));
    device_memset(dev, d, 0, (size_t)GDP_MAX(n, 1) * dtype_size(dt));
    return d;
}

static double *download(Device dev, const void *d, int64_t n, DType dt) {
    size_t es = dtype_size(dt);
    unsigned char *h = (unsigned char *)xmalloc((size_t)GDP_MAX(n, 1) * es);
    device_memcpy(h, DEV_CPU, d, dev, (size_t)n * es);
    double *out = (double *)xmalloc((size_t)GDP_MAX(n, 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        if (dt == GDP_F64) out[i] = ((double *)h)[i];
        else if (dt == GDP_F32) out[i] = ((float *)h)[i];
        else out[i] = bf16_to_f32(((uint16_t *)h)[i]);
    }
    free(h);
    return out;
}

static int check(const GdpVecCase *c, const char *what, const char *tensor, Device dev, const void *got, int64_t n,
                 DType dt, const double *ref, double bound) {
    double *g = download(dev, got, n, dt);
    double e = rel_l2(g, ref, n);
    free(g);
    bool ok = e <= bound && !isnan(e);
    printf("%-20s %-11s %-6s rel_err %.3e  bound %.0e  %s\n", c->name, what, tensor, e, bound, ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

enum { Q, K_, V_, BETA, G, MASK, H0, DO, DHT, O, HT, DQ, DK, DV, DBETA, DG, DMASK, DH0, NBUF };

/* Runs one case on dev in dtype dt; returns the number of failed checks, *checks gets the count. */
static int run_case(const GdpVecCase *c, Device dev, DType dt, double bound, int *checks) {
    GdpDesc d = gdp_vec_desc(c, dt);
    GdpSizes z = gdp_sizes(&d);
    const DType aux = dev == DEV_CPU ? dt : GDP_F32; /* g, mask, h0, ht and their gradients */
    const bool split = c->mode == GDP_MODE_SPLIT;
    char what[32];
    snprintf(what, sizeof what, "%s %s", device_name(dev), dtype_name(dt));
    void *b[NBUF] = {0};
    b[Q] = upload(dev, c->q, z.q, dt);
    b[K_] = upload(dev, c->k, z.k, dt);
    b[V_] = upload(dev, c->v, z.v, dt);
    b[BETA] = upload(dev, c->beta, z.beta, dt);
    b[G] = c->gate ? upload(dev, c->g, z.g, aux) : NULL;
    b[MASK] = split ? upload(dev, c->mask, z.mask, aux) : NULL;
    b[H0] = c->has_h0 ? upload(dev, c->h0, z.state, aux) : NULL;
    b[DO] = upload(dev, c->d_o, z.o, dt);
    b[DHT] = upload(dev, c->dht, z.state, aux);
    b[O] = alloc_on(dev, z.o, dt);
    b[HT] = alloc_on(dev, z.state, aux);
    b[DQ] = alloc_on(dev, z.q, dt);
    b[DK] = alloc_on(dev, z.k, dt);
    b[DV] = alloc_on(dev, z.v, dt);
    b[DBETA] = alloc_on(dev, z.beta, dt);
    b[DG] = alloc_on(dev, z.g, aux);
    b[DMASK] = split ? alloc_on(dev, z.mask, aux) : NULL;
    b[DH0] = alloc_on(dev, z.state, aux);
    GdpForwardArgs fa = {b[Q], b[K_], b[V_], b[BETA], b[G], b[MASK], b[H0], b[O], b[HT], NULL, 0};
    GdpBackwardArgs ba = {b[Q], b[K_], b[V_], b[BETA], b[G], b[MASK], b[H0], b[DO], b[DHT],
                          b[DQ], b[DK], b[DV], b[DBETA], b[DG], b[DMASK], b[DH0], NULL};
    GdpStatus sf, sb;
    if (dev == DEV_CPU) {
        sf = gdp_forward_cpu(&d, &fa);
        sb = sf == GDP_OK ? gdp_backward_cpu(&d, &ba) : sf;
    } else {
#ifdef GDP_CUDA
        size_t wf = gdp_forward_workspace_bytes(&d), wb = gdp_backward_workspace_bytes(&d);
        void *ws = device_malloc(dev, GDP_MAX(GDP_MAX(wf, wb), (size_t)1));
        sf = gdp_forward_cuda(&d, &fa, ws, wf, NULL);
        sb = sf == GDP_OK ? gdp_backward_cuda(&d, &ba, ws, wb, NULL) : sf;
        device_synchronize(dev);
        device_free(dev, ws);
#else
        gdp_fatal("--device cuda: this build of gdp has no CUDA support");
#endif
    }
    int fails = 0;
    if (sf != GDP_OK || sb != GDP_OK) {
        printf("%-20s %-11s %-6s FAIL: the %s returned status %d: %s\n", c->name, what, "-",
               sf != GDP_OK ? "forward" : "backward", (int)(sf != GDP_OK ? sf : sb), gdp_last_error());
        *checks += 1;
        fails = 1;
    } else {
        fails += check(c, what, "o", dev, b[O], z.o, dt, c->o, bound);
        fails += check(c, what, "ht", dev, b[HT], z.state, aux, c->ht, bound);
        fails += check(c, what, "dq", dev, b[DQ], z.q, dt, c->dq, bound);
        fails += check(c, what, "dk", dev, b[DK], z.k, dt, c->dk, bound);
        fails += check(c, what, "dv", dev, b[DV], z.v, dt, c->dv, bound);
        fails += check(c, what, "dbeta", dev, b[DBETA], z.beta, dt, c->dbeta, bound);
        fails += check(c, what, "dg", dev, b[DG], z.g, aux, c->dg, bound);
        if (split) fails += check(c, what, "dmask", dev, b[DMASK], z.mask, aux, c->dmask, bound);
        fails += check(c, what, "dh0", dev, b[DH0], z.state, aux, c->dh0, bound);
        *checks += split ? 9 : 8;
    }
    for (int i = 0; i < NBUF; i++)
        if (b[i]) device_free(dev, b[i]);
    return fails;
}

int cmd_vectors(int argc, char **argv) {
    VecArgs a = {"cpu", NULL, NULL};
    char *pos[2];
    int npos = cli_parse(&vectors_cmd, argc, argv, on_opt, &a, pos, 1);
    if (npos != 1) cli_usage_error(&vectors_cmd, "give the vectors file, e.g. tests/data/gdp_vectors.h5");
    if (strcmp(a.device, "cpu") && strcmp(a.device, "cuda"))
        cli_usage_error(&vectors_cmd, "--device '%s' is not a device: use cpu or cuda", a.device);
    const bool cuda = !strcmp(a.device, "cuda");
    if (!a.dtype) a.dtype = cuda ? "f32" : "f64";
    DType dt;
    if (!strcmp(a.dtype, "f64")) dt = GDP_F64;
    else if (!strcmp(a.dtype, "f32")) dt = GDP_F32;
    else if (!strcmp(a.dtype, "bf16")) dt = GDP_BF16;
    else cli_usage_error(&vectors_cmd, "--dtype '%s' is not a dtype: use f64, f32 or bf16", a.dtype);
    if (!cuda && dt == GDP_BF16) cli_usage_error(&vectors_cmd, "--dtype bf16 runs only with --device cuda (cpu: f64 or f32)");
    if (cuda && dt == GDP_F64) cli_usage_error(&vectors_cmd, "--dtype f64 runs only on the cpu (cuda: f32 or bf16)");
    double bound = dt == GDP_F64 ? 1e-10 : dt == GDP_F32 ? 1e-4 : 2e-2;
    GdpVecFile f;
    gdp_vectors_load(pos[0], &f);
    if (a.only) {
        bool found = false;
        for (int i = 0; i < f.n_cases; i++) found |= !strcmp(f.cases[i].name, a.only);
        if (!found) {
            char list[1024] = "";
            size_t o = 0;
            for (int i = 0; i < f.n_cases && o < sizeof list; i++)
                o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", f.cases[i].name);
            cli_usage_error(&vectors_cmd, "no case named '%s' in %s (it has: %s)", a.only, pos[0], list);
        }
    }
    /* Only now touch CUDA: usage errors above need no GPU. Fatal, with a clear message, in
     * CPU-only builds or when no GPU is visible. */
    Device dev = cuda ? device_parse("cuda", "--device") : DEV_CPU;
    int fails = 0, checks = 0, ncases = 0;
    for (int i = 0; i < f.n_cases; i++) {
        if (a.only && strcmp(f.cases[i].name, a.only)) continue;
        fails += run_case(&f.cases[i], dev, dt, bound, &checks);
        ncases++;
    }
    printf("vectors %s %s %s: %d cases, %d checks, %d failed: %s\n", pos[0], device_name(dev), dtype_name(dt), ncases,
           checks, fails, fails ? "FAIL" : "PASS");
    gdp_vectors_free(&f);
    return fails ? 1 : 0;
}
