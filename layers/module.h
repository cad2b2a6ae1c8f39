/* What every layer module shares: a parameter maker. Modules register their parameters through
 * it by fla name; it either
 *   - registers them in a ParamStore (training, generation: float32 master weights in the flat
 *     buffers, initialised later by params_initialize), or
 *   - creates them at once as plain leaf tensors of any dtype on a context, initialised from the
 *     same specs with its own RNG (gradient checks of whole models in float64).
 * Same model code either way. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "base/common.h" /* Rng, which core/params.h uses */
#include "core/ctx.h"
#include "core/params.h"

typedef struct ParamMaker {
    ParamStore *ps; /* registry mode when not NULL */
    Ctx *ctx;       /* the context tensors live on */
    DType dtype;    /* direct mode: dtype of the leaves */
    Rng rng;        /* direct mode: initialisation */
    Tensor **made;  /* every parameter made, in order (both modes) */
    int n_made, cap_made;
} ParamMaker;

void pm_init_registry(ParamMaker *pm, ParamStore *ps);
void pm_init_direct(ParamMaker *pm, Ctx *ctx, DType dt, uint64_t seed);
void pm_free(ParamMaker *pm); /* the list of made parameters (host memory) */

Tensor *pm_param(ParamMaker *pm, const char *name, int ndim, const int64_t *shape, bool decay, ParamInit init,
                 double a, double b);
Tensor *pm_param_custom(ParamMaker *pm, const char *name, int ndim, const int64_t *shape, bool decay,
                        ParamInitFn fn, const void *user);
/* A new gradient bucket (one per layer) in registry mode; nothing in direct mode. */
void pm_begin_bucket(ParamMaker *pm);

/* Gate initialisers (docs/spec.md §3): A_log = log U(0,16) clamped away from 0; dt_bias = softplus^-1(dt),
 * dt = exp(U(log 1e-3, log 1e-1)) clamped >= 1e-4; the split-mode mask = identity (user: &r). */
void init_a_log(float *host, int64_t numel, Rng *rng, const void *user);
void init_dt_bias(float *host, int64_t numel, Rng *rng, const void *user);
void init_identity_mask(float *host, int64_t numel, Rng *rng, const void *user);

/* bf16 activations (ctx->bf16_activations, CUDA): the residual stream stays f32, and every
 * branch (attention, MLP, the head) runs on bf16 tensors: its input norm writes branch_dtype
 * (op_rmsnorm_to), and op_add takes its bf16 output into the f32 stream. Inside a branch the linear
 * layers take the f32 weights as they are (op_matmul's bf16 x f32 path); other parameters are used
 * through param_like, a bf16 copy whose gradient accumulates into the f32 master gradient. Without
 * the flag the branch dtype is x's and param_like returns w. */
DType branch_dtype(const Ctx *ctx, const Tensor *x);
Tensor *param_like(Ctx *ctx, Tensor *w, const Tensor *x);
