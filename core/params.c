/* The parameter registry: names, layout in the flat buffers, deterministic host-side init. */
#include "core/params.h"

#include <math.h>

#include "base/common.h"

#define PARAM_ALIGN 64 /* elements: 256 bytes, the arena alignment */

void params_init_store(ParamStore *ps, Ctx *ctx) {
    memset(ps, 0, sizeof(*ps));
    ps->ctx = ctx;
}

void params_free_store(ParamStore *ps) {
    free(ps->items);
    memset(ps, 0, sizeof(*ps));
}

static Tensor *register_param(ParamStore *ps, const char *name, int ndim, const int64_t *shape, bool decay,
                              ParamInit init, double a, double b, ParamInitFn fn, const void *user) {
    GDP_CHECK(ps && ps->ctx, "param_new: the ParamStore is not initialised (call params_init_store first)");
    GDP_CHECK(name && name[0], "param_new: a parameter needs a non-empty name");
    GDP_CHECK(strlen(name) < GDP_NAME_LEN, "param_new: parameter name '%s' is longer than %d characters", name,
              GDP_NAME_LEN - 1);
    GDP_CHECK(!ps->allocated,
              "param_new('%s'): parameters are already allocated; register every parameter before params_allocate",
              name);
    GDP_CHECK(ndim >= 1 && ndim <= GDP_MAX_DIMS, "param_new('%s'): ndim %d is outside [1, %d]", name, ndim,
              GDP_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        GDP_CHECK(shape[i] > 0, "param_new('%s'): dimension %d is %lld; every dimension must be positive", name, i,
                  (long long)shape[i]);
    for (int i = 0; i < ps->n; i++)
        GDP_CHECK(strcmp(ps->items[i].t->name, name) != 0,
                  "param_new: duplicate parameter name '%s' (parameter names must be unique)", name);
    if (ps->n == ps->cap) {
        ps->cap = ps->cap ? 2 * ps->cap : 64;
        ps->items = (ParamInfo *)xrealloc(ps->items, (size_t)ps->cap * sizeof(ParamInfo));
    }
    Tensor *t = (Tensor *)arena_alloc_zeroed(&ps->ctx->persist_meta, sizeof(Tensor));
    t->dtype = GDP_F32;
    t->device = ps->ctx->device;
    tensor_set_shape(t, ndim, shape);
    t->data = NULL;
    t->is_param = true;
    t->requires_grad = true;
    snprintf(t->name, sizeof t->name, "%s", name);
    ParamInfo *p = &ps->items[ps->n++];
    memset(p, 0, sizeof(*p));
    p->t = t;
    p->decay = decay;
    p->init = init;
    p->init_a = a;
    p->init_b = b;
    p->init_fn = fn;
    p->init_user = user;
    p->offset = -1;
    p->bucket = ps->current_bucket;
    return t;
}

Tensor *param_new(ParamStore *ps, const char *name, int ndim, const int64_t *shape, bool decay, ParamInit init,
                  double a, double b) {
    GDP_CHECK(init != INIT_CUSTOM, "param_new('%s'): INIT_CUSTOM needs param_new_custom with a fill function",
              name ? name : "?");
    GDP_CHECK(init >= INIT_ZEROS && init <= INIT_UNIFORM, "param_new('%s'): unknown init kind %d", name ? name : "?",
              (int)init);
    return register_param(ps, name, ndim, shape, decay, init, a, b, NULL, NULL);
}

Tensor *param_new_custom(ParamStore *ps, const char *name, int ndim, const int64_t *shape, bool decay,
                         ParamInitFn fn, const void *user) {
    GDP_CHECK(fn, "param_new_custom('%s'): the fill function is NULL", name ? name : "?");
    return register_param(ps, name, ndim, shape, decay, INIT_CUSTOM, 0, 0, fn, user);
}

void params_begin_bucket(ParamStore *ps) {
    /* A new bucket only once the current one holds something: no empty buckets. */
    if (ps->n > 0 && ps->items[ps->n - 1].bucket == ps->current_bucket) ps->current_bucket++;
}

void params_allocate(ParamStore *ps) {
    GDP_CHECK(!ps->allocated, "params_allocate: called twice");
    GDP_CHECK(ps->n > 0, "params_allocate: no parameters were registered");
    int64_t off = 0;
    for (int i = 0; i < ps->n; i++) {
        ps->items[i].offset = off;
        off += CEIL_DIV(ps->items[i].t->numel, (int64_t)PARAM_ALIGN) * PARAM_ALIGN;
    }
    ps->total = off;
    Ctx *ctx = ps->ctx;
    size_t bytes = (size_t)ps->total * sizeof(float);
    ps->flat_params = (float *)arena_alloc(&ctx->persist, bytes);
    ps->flat_grads = (float *)arena_alloc(&ctx->persist, bytes);
    ctx_synchronize(ctx);
    device_memset(ctx->device, ps->flat_params, 0, bytes);
    device_memset(ctx->device, ps->flat_grads, 0, bytes);
    device_synchronize(ctx->device);
    for (int i = 0; i < ps->n; i++) {
        ParamInfo *p = &ps->items[i];
        Tensor *t = p->t;
        t->data = ps->flat_params + p->offset;
        Tensor *g = (Tensor *)arena_alloc_zeroed(&ctx->persist_meta, sizeof(Tensor));
        g->dtype = GDP_F32;
        g->device = ctx->device;
        tensor_set_shape(g, t->ndim, t->shape);
        g->data = ps->flat_grads + p->offset;
        snprintf(g->name, sizeof g->name, "%.*s.grad", GDP_NAME_LEN - 6, t->name);
        t->grad = g;
        t->grad_written = false;
    }
    ps->allocated = true;
}

void params_initialize(ParamStore *ps, uint64_t seed) {
    GDP_CHECK(ps->allocated, "params_initialize: call params_allocate first");
    float *host = (float *)xcalloc((size_t)ps->total, sizeof(float));
    Rng rng;
    rng_seed(&rng, seed);
    for (int i = 0; i < ps->n; i++) {
        ParamInfo *p = &ps->items[i];
        float *dst = host + p->offset;
        int64_t n = p->t->numel;
        switch (p->init) {
        case INIT_ZEROS: break;
        case INIT_ONES:
            for (int64_t j = 0; j < n; j++) dst[j] = 1.0f;
            break;
        case INIT_NORMAL:
            for (int64_t j = 0; j < n; j++) dst[j] = (float)(p->init_a * rng_normal(&rng));
            break;
        case INIT_UNIFORM:
            for (int64_t j = 0; j < n; j++)
                dst[j] = (float)(p->init_a + (p->init_b - p->init_a) * rng_uniform(&rng));
            break;
        case INIT_CUSTOM: p->init_fn(dst, n, &rng, p->init_user); break;
        default: gdp_fatal("params_initialize: parameter '%s' has unknown init kind %d", p->t->name, (int)p->init);
        }
    }
    Ctx *ctx = ps->ctx;
    ctx_synchronize(ctx);
    device_memcpy(ps->flat_params, ctx->device, host, DEV_CPU, (size_t)ps->total * sizeof(float));
    device_synchronize(ctx->device);
    free(host);
}

void params_zero_grad(ParamStore *ps) {
    GDP_CHECK(ps->allocated, "params_zero_grad: call params_allocate first");
    Ctx *ctx = ps->ctx;
    /* device_memset runs on the legacy stream, which does not order with ctx's non-blocking
     * stream: finish what is queued first and wait for the memset after. */
    ctx_synchronize(ctx);
    device_memset(ctx->device, ps->flat_grads, 0, (size_t)ps->total * sizeof(float));
    device_synchronize(ctx->device);
    for (int i = 0; i < ps->n; i++) ps->items[i].t->grad_written = true;
}

ParamInfo *params_find(ParamStore *ps, const char *name) {
    for (int i = 0; i < ps->n; i++)
        if (!strcmp(ps->items[i].t->name, name)) return &ps->items[i];
    return NULL;
}

int64_t params_count(const ParamStore *ps) {
    int64_t n = 0;
    for (int i = 0; i < ps->n; i++) n += ps->items[i].t->numel;
    return n;
}
