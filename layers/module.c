#include "layers/module.h"

#include <math.h>

#include "base/common.h"
#include "core/ops.h"

void pm_init_registry(ParamMaker *pm, ParamStore *ps) {
    memset(pm, 0, sizeof *pm);
    pm->ps = ps;
    pm->ctx = ps->ctx;
    pm->dtype = GDP_F32;
}

void pm_init_direct(ParamMaker *pm, Ctx *ctx, DType dt, uint64_t seed) {
    memset(pm, 0, sizeof *pm);
    pm->ctx = ctx;
    pm->dtype = dt;
    rng_seed(&pm->rng, seed);
}

/* Direct mode: fill on the host in float (as params_initialize does), then convert. */
static Tensor *direct_param(ParamMaker *pm, const char *name, int ndim, const int64_t *shape, ParamInit init,
                            double a, double b, ParamInitFn fn, const void *user) {
    Tensor tmp = {0};
    tensor_set_shape(&tmp, ndim, shape);
    int64_t n = tmp.numel;
    float *f = (float *)xcalloc((size_t)n, sizeof(float));
    switch (init) {
    case INIT_ZEROS: break;
    case INIT_ONES:
        for (int64_t j = 0; j < n; j++) f[j] = 1.0f;
        break;
    case INIT_NORMAL:
        for (int64_t j = 0; j < n; j++) f[j] = (float)(a * rng_normal(&pm->rng));
        break;
    case INIT_UNIFORM:
        for (int64_t j = 0; j < n; j++) f[j] = (float)(a + (b - a) * rng_uniform(&pm->rng));
        break;
    case INIT_CUSTOM: fn(f, n, &pm->rng, user); break;
    }
    double *d = (double *)xmalloc((size_t)n * sizeof(double));
    for (int64_t j = 0; j < n; j++) d[j] = f[j];
    Tensor *t = tensor_from_doubles(pm->ctx, LIFE_PERSIST, pm->dtype, ndim, shape, d);
    free(f), free(d);
    t->requires_grad = true;
    snprintf(t->name, sizeof t->name, "%s", name);
    return t;
}

static Tensor *remember(ParamMaker *pm, Tensor *t) {
    if (pm->n_made == pm->cap_made) {
        pm->cap_made = pm->cap_made ? 2 * pm->cap_made : 64;
        pm->made = (Tensor **)xrealloc(pm->made, (size_t)pm->cap_made * sizeof(Tensor *));
    }
    pm->made[pm->n_made++] = t;
    return t;
}

void pm_free(ParamMaker *pm) {
    free(pm->made);
    pm->made = NULL;
    pm->n_made = pm->cap_made = 0;
}

Tensor *pm_param(ParamMaker *pm, const char *name, int ndim, const int64_t *shape, bool decay, ParamInit init,
                 double a, double b) {
    if (pm->ps) return remember(pm, param_new(pm->ps, name, ndim, shape, decay, init, a, b));
    return remember(pm, direct_param(pm, name, ndim, shape, init, a, b, NULL, NULL));
}

Tensor *pm_param_custom(ParamMaker *pm, const char *name, int ndim, const int64_t *shape, bool decay,
                        ParamInitFn fn, const void *user) {
    if (pm->ps) return remember(pm, param_new_custom(pm->ps, name, ndim, shape, decay, fn, user));
    return remember(pm, direct_param(pm, name, ndim, shape, INIT_CUSTOM, 0, 0, fn, user));
}

void pm_begin_bucket(ParamMaker *pm) {
    if (pm->ps) params_begin_bucket(pm->ps);
}

void init_a_log(float *host, int64_t numel, Rng *rng, const void *user) {
    (void)user;
    for (int64_t i = 0; i < numel; i++) {
        double A = 16.0 * rng_uniform(rng);
        if (A < 1e-4) A = 1e-4; /* log(0) would be -inf */
        host[i] = (float)log(A);
    }
}

void init_dt_bias(float *host, int64_t numel, Rng *rng, const void *user) {
    (void)user;
    const double lo = log(1e-3), hi = log(1e-1);
    for (int64_t i = 0; i < numel; i++) {
        double dt = exp(lo + (hi - lo) * rng_uniform(rng));
        if (dt < 1e-4) dt = 1e-4;
        host[i] = (float)(dt + log(-expm1(-dt))); /* softplus^-1(dt) = log(e^dt - 1) */
    }
}

void init_identity_mask(float *host, int64_t numel, Rng *rng, const void *user) {
    (void)rng;
    int r = *(const int *)user;
    for (int64_t i = 0; i < numel; i++) {
        int64_t within = i % ((int64_t)r * r);
        host[i] = (within / r == within % r) ? 1.0f : 0.0f;
    }
}

DType branch_dtype(const Ctx *ctx, const Tensor *x) {
    return ctx->bf16_activations && x->dtype == GDP_F32 ? GDP_BF16 : x->dtype;
}

Tensor *param_like(Ctx *ctx, Tensor *w, const Tensor *x) {
    return w && w->dtype != x->dtype ? op_cast(ctx, w, x->dtype) : w;
}
