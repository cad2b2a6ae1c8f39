#include "core/ctx.h"

#include "base/common.h"
#ifdef GDP_CUDA
#include "core/cuda_ctx.h"
#endif

CtxSizes ctx_default_sizes(void) {
    CtxSizes s = {
        .persist_bytes = 64u << 20,
        .act_bytes = 256u << 20,
        .grad_bytes = 256u << 20,
        .scratch_bytes = 64u << 20,
        .tape_nodes = 4096,
    };
    return s;
}

Ctx *ctx_create(Device dev, CtxSizes s) {
    Ctx *ctx = (Ctx *)xcalloc(1, sizeof(Ctx));
    ctx->device = dev;
#ifdef GDP_CUDA
    if (dev == DEV_CUDA) ctx->cuda = cuda_ctx_create(0);
#else
    GDP_CHECK(dev == DEV_CPU, "ctx_create on cuda: this build has no CUDA support; use the cpu device");
#endif
    arena_init(&ctx->persist, "persist", dev, s.persist_bytes, "raise --persist-mem (parameters, gradients, optimizer state)");
    arena_init(&ctx->acts, "acts", dev, s.act_bytes, "raise --act-mem or lower --batch/--seq");
    arena_init(&ctx->grads, "grads", dev, s.grad_bytes, "raise --grad-mem or lower --batch/--seq");
    arena_init(&ctx->scratch, "scratch", dev, s.scratch_bytes, "raise --scratch-mem");
    size_t meta_nodes = (size_t)GDP_MAX(s.tape_nodes, 64);
    arena_init(&ctx->persist_meta, "persist headers", DEV_CPU, 4096 * sizeof(Tensor) + (1u << 20),
               "too many parameters: raise the header arena in core/ctx.c");
    arena_init(&ctx->step_meta, "step headers", DEV_CPU, meta_nodes * 8 * sizeof(Tensor),
               "too many tensors in one step: raise --tape-nodes");
    ctx->tape.cap = (int)meta_nodes;
    ctx->tape.nodes = (Node *)xcalloc(meta_nodes, sizeof(Node));
    ctx->grad_enabled = true;
    return ctx;
}

static void plan_arena(Arena *a, size_t capacity) {
    if (capacity != a->capacity) arena_resize(a, capacity);
    a->high_water = 0;
}

void ctx_plan_arenas(Ctx *ctx, size_t acts, size_t grads, size_t scratch) {
    ctx_synchronize(ctx); /* kernels of the last step may still use the memory given back */
    plan_arena(&ctx->acts, acts);
    plan_arena(&ctx->grads, grads);
    plan_arena(&ctx->scratch, scratch);
}

void ctx_destroy(Ctx *ctx) {
    if (!ctx) return;
    ctx_synchronize(ctx);
    arena_release(&ctx->persist);
    arena_release(&ctx->acts);
    arena_release(&ctx->grads);
    arena_release(&ctx->scratch);
    arena_release(&ctx->persist_meta);
    arena_release(&ctx->step_meta);
    free(ctx->tape.nodes);
#ifdef GDP_CUDA
    cuda_ctx_destroy(ctx->cuda);
#endif
    free(ctx);
}

void ctx_step_reset(Ctx *ctx) {
    ctx->tape.n = 0;
    arena_reset(&ctx->acts);
    arena_reset(&ctx->grads);
    arena_reset(&ctx->scratch);
    arena_reset(&ctx->step_meta);
}

void ctx_synchronize(Ctx *ctx) {
#ifdef GDP_CUDA
    if (ctx->cuda) CUDA_CHECK(cudaStreamSynchronize(ctx->cuda->stream));
#else
    (void)ctx;
#endif
}

void *ctx_stream(Ctx *ctx) {
#ifdef GDP_CUDA
    return ctx->cuda ? (void *)ctx->cuda->stream : NULL;
#else
    (void)ctx;
    return NULL;
#endif
}

static Arena *data_arena(Ctx *ctx, TensorLife life) {
    switch (life) {
    case LIFE_PERSIST: return &ctx->persist;
    case LIFE_ACT: return &ctx->acts;
    case LIFE_GRAD: return &ctx->grads;
    case LIFE_SCRATCH: return &ctx->scratch;
    }
    gdp_fatal("unknown tensor life %d", (int)life);
}

static Tensor *new_header(Ctx *ctx, TensorLife life) {
    Arena *meta = life == LIFE_PERSIST ? &ctx->persist_meta : &ctx->step_meta;
    return (Tensor *)arena_alloc_zeroed(meta, sizeof(Tensor));
}

Tensor *tensor_new(Ctx *ctx, TensorLife life, DType dt, int ndim, const int64_t *shape) {
    Tensor *t = new_header(ctx, life);
    t->dtype = dt;
    t->device = ctx->device;
    tensor_set_shape(t, ndim, shape);
    t->data = arena_alloc(data_arena(ctx, life), tensor_bytes(t));
    return t;
}

Tensor *tensor_zeros(Ctx *ctx, TensorLife life, DType dt, int ndim, const int64_t *shape) {
    Tensor *t = tensor_new(ctx, life, dt, ndim, shape);
    device_memset(t->device, t->data, 0, tensor_bytes(t));
    return t;
}

Tensor *tensor_from_host(Ctx *ctx, TensorLife life, DType dt, int ndim, const int64_t *shape, const void *host) {
    Tensor *t = tensor_new(ctx, life, dt, ndim, shape);
    device_memcpy(t->data, t->device, host, DEV_CPU, tensor_bytes(t));
    return t;
}

Tensor *tensor_from_doubles(Ctx *ctx, TensorLife life, DType dt, int ndim, const int64_t *shape,
                            const double *values) {
    Tensor host = {0};
    host.dtype = dt;
    host.device = DEV_CPU;
    tensor_set_shape(&host, ndim, shape);
    host.data = xmalloc(tensor_bytes(&host));
    for (int64_t i = 0; i < host.numel; i++) tensor_set_host(&host, i, values[i]);
    Tensor *t = tensor_from_host(ctx, life, dt, ndim, shape, host.data);
    free(host.data);
    return t;
}

void tensor_to_host(const Tensor *t, void *host) {
    char d[TENSOR_DESC_LEN];
    GDP_CHECK(tensor_is_contiguous(t), "tensor_to_host: %s is not contiguous", tensor_describe(t, d, sizeof d));
    device_memcpy(host, DEV_CPU, t->data, t->device, tensor_bytes(t));
}

void tensor_to_doubles(const Tensor *t, double *out) {
    /* Copy the whole span the view covers, then read it through the view's strides. */
    int64_t span = 1;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] > 0) span += (t->shape[i] - 1) * t->stride[i];
    if (t->numel == 0) return;
    Tensor host = *t;
    host.device = DEV_CPU;
    host.data = xmalloc((size_t)span * dtype_size(t->dtype));
    device_memcpy(host.data, DEV_CPU, t->data, t->device, (size_t)span * dtype_size(t->dtype));
    for (int64_t i = 0; i < t->numel; i++) out[i] = tensor_get_host(&host, i);
    free(host.data);
}

Tensor *tensor_view(Ctx *ctx, const Tensor *t, int ndim, const int64_t *shape, const int64_t *stride,
                    int64_t offset) {
    Tensor *v = new_header(ctx, LIFE_ACT);
    v->dtype = t->dtype;
    v->device = t->device;
    tensor_set_shape(v, ndim, shape);
    for (int i = 0; i < ndim; i++) v->stride[i] = stride[i];
    v->data = (unsigned char *)t->data + offset * (int64_t)dtype_size(t->dtype);
    return v;
}

Tensor *grad_dest(Ctx *ctx, Tensor *t, bool *accumulate) {
    if (!t->grad) {
        GDP_CHECK(!t->is_param, "parameter '%s' has no gradient buffer: register it through the ParamStore",
                  t->name);
        t->grad = tensor_new(ctx, LIFE_GRAD, t->dtype, t->ndim, t->shape);
        t->grad_written = false;
    }
    *accumulate = t->grad_written;
    t->grad_written = true;
    return t->grad;
}
