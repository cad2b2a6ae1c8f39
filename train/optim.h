/* AdamW over a ParamStore's flat buffers, as PyTorch's torch.optim.AdamW computes it:
 *     g   = grad * grad_scale * clip            (clip = min(1, max_norm / (norm + 1e-6)))
 *     p  *= 1 - lr * weight_decay               (only where ParamInfo.decay; decoupled decay)
 *     m   = beta1 m + (1 - beta1) g
 *     v   = beta2 v + (1 - beta2) g^2
 *     p  -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * with t the 1-based update count. m and v are float32 buffers from ctx->persist laid out like
 * the flat parameters (index i of m is flat element shard_start + i), zero at start.
 *
 * ZeRO-1: give [shard_start, shard_end) from dist_shard_range; only those elements are read or
 * updated and m/v hold only them. Without sharding pass 0 and ps->total.
 *
 * The gradient norm is deterministic (fixed-order partial sums in double, no float atomics; the
 * same bits for the same gradient whatever the thread count), over the shard and summed across
 * ranks when sharded, over the whole buffer otherwise. Alignment padding has zero gradient and
 * zero parameters, so it never changes the norm or moves. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/params.h"
#include "train/dist.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct AdamWConfig {
    double beta1, beta2, eps;
    double weight_decay;  /* applied only to parameters registered with decay = true */
    double grad_clip;     /* max global gradient norm; <= 0 turns clipping off */
} AdamWConfig;

/* beta1 0.9, beta2 0.95, eps 1e-8, weight decay 0.1, clip 1.0. */
AdamWConfig adamw_default_config(void);

/* A run of flat elements sharing one decay flag (padding is folded into its neighbours). */
typedef struct OptSegment {
    int64_t start, end; /* flat element range, within the shard */
    bool decay;
} OptSegment;

typedef struct Optimizer {
    AdamWConfig cfg;
    ParamStore *ps;
    Ctx *ctx;
    int64_t shard_start, shard_end;
    bool sharded;          /* the shard is not the whole buffer: the norm is summed across ranks */
    float *m, *v;          /* ctx->device, shard_end - shard_start elements each */
    int64_t t;             /* updates applied so far (bias correction uses t + 1 on the next) */
    int n_seg;
    OptSegment *segs;      /* host */
    double *norm_scratch;  /* device partial sums for the norm (CUDA) */
    double last_norm, last_clip;
} Optimizer;

/* m and v come from ctx->persist (zeroed). ps must be allocated. */
void optim_init(Optimizer *opt, ParamStore *ps, AdamWConfig cfg, int64_t shard_start, int64_t shard_end);
void optim_free(Optimizer *opt); /* host memory only; arena memory belongs to the ctx */

/* Sum of squares of the raw flat gradient over flat elements [start, end), in double. */
double optim_grad_sumsq(Optimizer *opt, int64_t start, int64_t end);
/* Global norm of grad * grad_scale: over the shard summed across ranks (dist may be NULL at world
 * 1) when sharded, else over the whole buffer. */
double optim_grad_norm(Optimizer *opt, double grad_scale, Dist *dist);
/* One AdamW update of the shard with learning rate lr, using grad * grad_scale, clipped with
 * grad_norm (the value optim_grad_norm returned; ignored when clipping is off; a non-finite norm
 * with clipping on is a fatal error, as the clip factor would not stop a NaN). */
void optim_update(Optimizer *opt, double lr, double grad_scale, double grad_norm);
/* optim_grad_norm then optim_update; returns the norm (before clipping). A non-finite norm (a NaN
 * or Inf gradient) skips the update: parameters, m, v and t stay as they are. */
double optim_step(Optimizer *opt, double lr, double grad_scale, Dist *dist);
/* Name of the first parameter (in registration order) whose gradient, within this rank's shard,
 * holds a NaN or Inf, and the element in *elem (may be NULL); NULL when all are finite. For error
 * messages: on CUDA it copies the gradient to the host. */
const char *optim_first_nonfinite_grad(Optimizer *opt, int64_t *elem);
/* The clip multiplier optim_update applies for this norm: min(1, clip / (norm + 1e-6)), 1 when off. */
double optim_clip_factor(const AdamWConfig *cfg, double grad_norm);

#ifdef __cplusplus
}
#endif
