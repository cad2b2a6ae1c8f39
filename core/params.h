/* The parameter registry. Layers register parameters by name at model-build time
 * (e.g. "layers.3.attn.q_proj.weight"); params_allocate then lays them out layer-major in
 * one flat float32 buffer on the context's device, with gradients at identical offsets in a
 * second buffer. That layout is what the optimizer, the gradient all-reduce (one call per
 * contiguous bucket) and ZeRO sharding work on. Parameters are float32 master weights. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "base/common.h"
#include "core/ctx.h"

typedef enum ParamInit {
    INIT_ZEROS = 0,
    INIT_ONES,
    INIT_NORMAL,  /* N(0, a^2) with a = init_a */
    INIT_UNIFORM, /* U(init_a, init_b) */
    INIT_CUSTOM,  /* init_fn fills the host buffer */
} ParamInit;

typedef void (*ParamInitFn)(float *host, int64_t numel, Rng *rng, const void *user);

typedef struct ParamInfo {
    Tensor *t;           /* data and grad point into the flat buffers after params_allocate */
    bool decay;          /* weight decay applies (matrices and embeddings) */
    ParamInit init;
    double init_a, init_b;
    ParamInitFn init_fn;
    const void *init_user;
    int64_t offset;      /* in elements, into the flat buffers */
    int bucket;          /* gradient-reduction bucket (one per layer, by registration order) */
} ParamInfo;

typedef struct ParamStore {
    Ctx *ctx;
    int n, cap;
    ParamInfo *items;
    int current_bucket;
    int64_t total;       /* elements, including alignment padding */
    float *flat_params;  /* device (ctx->device) */
    float *flat_grads;
    bool allocated;
} ParamStore;

void params_init_store(ParamStore *ps, Ctx *ctx);
void params_free_store(ParamStore *ps);
/* Registers a parameter; the returned tensor has no data until params_allocate. Names must be
 * unique (a duplicate is a fatal error naming it). */
Tensor *param_new(ParamStore *ps, const char *name, int ndim, const int64_t *shape, bool decay, ParamInit init,
                  double a, double b);
Tensor *param_new_custom(ParamStore *ps, const char *name, int ndim, const int64_t *shape, bool decay,
                         ParamInitFn fn, const void *user);
/* Starts a new gradient bucket: call at the start of each layer. */
void params_begin_bucket(ParamStore *ps);
/* Lays out all registered parameters in the flat buffers (from ctx->persist). */
void params_allocate(ParamStore *ps);
/* Fills every parameter from its init spec with one RNG seeded by `seed`, in registration
 * order, on the host, then copies to the device: the same seed gives the same model anywhere. */
void params_initialize(ParamStore *ps, uint64_t seed);
/* Zeroes the flat gradient buffer (one memset) and marks every parameter gradient written, so
 * all writes in the step accumulate and parameters no path reached have a true zero gradient.
 * Call once per optimizer step, before the first micro-step (llm.c's rule for parameters). */
void params_zero_grad(ParamStore *ps);
ParamInfo *params_find(ParamStore *ps, const char *name);
int64_t params_count(const ParamStore *ps); /* real elements, no padding */
