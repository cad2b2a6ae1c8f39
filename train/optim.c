/* AdamW over the flat parameter buffers (see train/optim.h). */
#include "train/optim.h"

#include <math.h>

#include "base/common.h"
#include "kernels/adamw.h"

AdamWConfig adamw_default_config(void) {
    AdamWConfig c = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 1.0};
    return c;
}

static void check_config(const AdamWConfig *c) {
    GDP_CHECK(c->beta1 >= 0 && c->beta1 < 1, "AdamW: beta1 = %g must be in [0, 1)", c->beta1);
    GDP_CHECK(c->beta2 >= 0 && c->beta2 < 1, "AdamW: beta2 = %g must be in [0, 1)", c->beta2);
    GDP_CHECK(c->eps > 0, "AdamW: eps = %g must be positive", c->eps);
    GDP_CHECK(c->weight_decay >= 0, "AdamW: weight decay = %g must not be negative", c->weight_decay);
}

/* Runs of flat elements inside [s, e) with one decay flag; each parameter owns the padding after it. */
static void build_segments(Optimizer *opt) {
    ParamStore *ps = opt->ps;
    opt->segs = (OptSegment *)xcalloc((size_t)ps->n + 1, sizeof(OptSegment));
    opt->n_seg = 0;
    for (int i = 0; i < ps->n; i++) {
        int64_t lo = ps->items[i].offset, hi = i + 1 < ps->n ? ps->items[i + 1].offset : ps->total;
        lo = GDP_MAX(lo, opt->shard_start);
        hi = GDP_MIN(hi, opt->shard_end);
        if (lo >= hi) continue;
        bool decay = ps->items[i].decay;
        if (opt->n_seg > 0 && opt->segs[opt->n_seg - 1].decay == decay && opt->segs[opt->n_seg - 1].end == lo)
            opt->segs[opt->n_seg - 1].end = hi;
        else
            opt->segs[opt->n_seg++] = (OptSegment){lo, hi, decay};
    }
}

void optim_init(Optimizer *opt, ParamStore *ps, AdamWConfig cfg, int64_t shard_start, int64_t shard_end) {
    GDP_CHECK(ps && ps->allocated, "optim_init: the ParamStore must be allocated first (params_allocate)");
    GDP_CHECK(shard_start >= 0 && shard_start <= shard_end && shard_end <= ps->total,
              "optim_init: shard [%lld, %lld) is not inside the %lld flat elements", (long long)shard_start,
              (long long)shard_end, (long long)ps->total);
    check_config(&cfg);
    memset(opt, 0, sizeof(*opt));
    opt->cfg = cfg;
    opt->ps = ps;
    opt->ctx = ps->ctx;
    opt->shard_start = shard_start;
    opt->shard_end = shard_end;
    opt->sharded = !(shard_start == 0 && shard_end == ps->total);
    Ctx *ctx = ps->ctx;
    size_t n = (size_t)(shard_end - shard_start);
    opt->m = (float *)arena_alloc(&ctx->persist, n * sizeof(float));
    opt->v = (float *)arena_alloc(&ctx->persist, n * sizeof(float));
    ctx_synchronize(ctx);
    device_memset(ctx->device, opt->m, 0, n * sizeof(float));
    device_memset(ctx->device, opt->v, 0, n * sizeof(float));
    if (ctx->device == DEV_CUDA)
        opt->norm_scratch = (double *)arena_alloc(&ctx->persist, (GRAD_SUMSQ_BLOCKS + 1) * sizeof(double));
    device_synchronize(ctx->device);
    build_segments(opt);
    opt->last_norm = NAN;
    opt->last_clip = 1.0;
}

void optim_free(Optimizer *opt) {
    free(opt->segs);
    opt->segs = NULL;
    opt->n_seg = 0;
}

double optim_grad_sumsq(Optimizer *opt, int64_t start, int64_t end) {
    ParamStore *ps = opt->ps;
    GDP_CHECK(start >= 0 && start <= end && end <= ps->total, "optim_grad_sumsq: range [%lld, %lld) outside [0, %lld)",
              (long long)start, (long long)end, (long long)ps->total);
    if (opt->ctx->device == DEV_CPU) return grad_sumsq_cpu(ps->flat_grads + start, end - start);
    double result = 0.0;
#ifdef GDP_CUDA
    double *partials = opt->norm_scratch, *res_dev = opt->norm_scratch + GRAD_SUMSQ_BLOCKS;
    grad_sumsq_cuda(ps->flat_grads + start, end - start, partials, res_dev, ctx_stream(opt->ctx));
    ctx_synchronize(opt->ctx);
    device_memcpy(&result, DEV_CPU, res_dev, DEV_CUDA, sizeof(double));
#else
    gdp_fatal("optim_grad_sumsq on cuda: this build has no CUDA support");
#endif
    return result;
}

double optim_grad_norm(Optimizer *opt, double grad_scale, Dist *dist) {
    double ss;
    if (opt->sharded) {
        ss = optim_grad_sumsq(opt, opt->shard_start, opt->shard_end);
        if (dist && dist->world > 1) ss = dist_sum_double(dist, ss);
    } else {
        ss = optim_grad_sumsq(opt, 0, opt->ps->total);
    }
    return fabs(grad_scale) * sqrt(ss);
}

double optim_clip_factor(const AdamWConfig *cfg, double grad_norm) {
    if (cfg->grad_clip <= 0) return 1.0;
    double c = cfg->grad_clip / (grad_norm + 1e-6);
    return c < 1.0 ? c : 1.0; /* PyTorch's clip_grad_norm_: clamp(max_norm / (norm + 1e-6), max = 1) */
}

void optim_update(Optimizer *opt, double lr, double grad_scale, double grad_norm) {
    const AdamWConfig *c = &opt->cfg;
    ParamStore *ps = opt->ps;
    /* NaN < clip is false: a NaN norm would pass through unclipped and poison every weight */
    GDP_CHECK(isfinite(grad_norm) || c->grad_clip <= 0,
              "optim_update: the gradient norm is %g; skip the step instead (optim_step does)", grad_norm);
    opt->t++;
    double clip = optim_clip_factor(c, grad_norm);
    opt->last_norm = grad_norm;
    opt->last_clip = clip;
    float scale = (float)(grad_scale * clip);
    float bc1 = (float)(1.0 - pow(c->beta1, (double)opt->t));
    float bc2_sqrt = (float)sqrt(1.0 - pow(c->beta2, (double)opt->t));
    for (int s = 0; s < opt->n_seg; s++) {
        const OptSegment *seg = &opt->segs[s];
        int64_t n = seg->end - seg->start, mo = seg->start - opt->shard_start;
        float wd = seg->decay ? (float)c->weight_decay : 0.0f;
        float *p = ps->flat_params + seg->start;
        const float *g = ps->flat_grads + seg->start;
        if (opt->ctx->device == DEV_CPU)
            adamw_update_cpu(p, g, opt->m + mo, opt->v + mo, n, (float)lr, (float)c->beta1, (float)c->beta2,
                             (float)c->eps, wd, scale, bc1, bc2_sqrt);
        else {
#ifdef GDP_CUDA
            adamw_update_cuda(p, g, opt->m + mo, opt->v + mo, n, (float)lr, (float)c->beta1, (float)c->beta2,
                              (float)c->eps, wd, scale, bc1, bc2_sqrt, ctx_stream(opt->ctx));
#else
            gdp_fatal("optim_update on cuda: this build has no CUDA support");
#endif
        }
    }
}

double optim_step(Optimizer *opt, double lr, double grad_scale, Dist *dist) {
    double norm = optim_grad_norm(opt, grad_scale, dist);
    if (!isfinite(norm)) {
        opt->last_norm = norm;
        return norm;
    }
    optim_update(opt, lr, grad_scale, norm);
    return norm;
}

const char *optim_first_nonfinite_grad(Optimizer *opt, int64_t *elem) {
    ParamStore *ps = opt->ps;
    ctx_synchronize(opt->ctx);
    float *host = NULL;
    size_t cap = 0;
    const char *found = NULL;
    for (int i = 0; i < ps->n && !found; i++) {
        int64_t lo = GDP_MAX(ps->items[i].offset, opt->shard_start);
        int64_t hi = GDP_MIN(ps->items[i].offset + ps->items[i].t->numel, opt->shard_end);
        if (lo >= hi) continue;
        const float *g = ps->flat_grads + lo;
        if (opt->ctx->device != DEV_CPU) {
            if ((size_t)(hi - lo) > cap) {
                cap = (size_t)(hi - lo);
                host = (float *)xrealloc(host, cap * sizeof(float));
            }
            device_memcpy(host, DEV_CPU, g, opt->ctx->device, (size_t)(hi - lo) * sizeof(float));
            g = host;
        }
        for (int64_t j = 0; j < hi - lo; j++)
            if (!isfinite(g[j])) {
                if (elem) *elem = lo + j - ps->items[i].offset;
                found = ps->items[i].t->name;
                break;
            }
    }
    free(host);
    return found;
}
