/* The context: one per process and device. It owns every arena, the tape and the GPU handles,
 * so tests can build one, use it and free it with nothing left behind (no global state). */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "base/arena.h"
#include "core/tensor.h"
#include "core/tape.h"

typedef enum TensorLife {
    LIFE_PERSIST = 0, /* parameters, gradients, optimizer state: lives as long as the context */
    LIFE_ACT,         /* forward outputs and saved tensors: reset every micro-step */
    LIFE_GRAD,        /* activation gradients: reset every micro-step */
    LIFE_SCRATCH,     /* per-op temporaries: mark/rewind around the use */
} TensorLife;

typedef struct CtxSizes {
    size_t persist_bytes, act_bytes, grad_bytes, scratch_bytes;
    int tape_nodes;
} CtxSizes;

typedef struct Ctx {
    Device device;
    Arena persist, acts, grads, scratch;  /* data, on `device` */
    Arena persist_meta, step_meta;        /* tensor headers, on the host */
    Tape tape;
    bool grad_enabled;                    /* ops record nodes only when true */
    bool autocast_bf16;                   /* CUDA: f32 matmuls on bf16 tensor cores, layers may run
                                           * their heavy ops in bf16 (off by default: exact f32) */
    bool autocast_gemm_copies;            /* with autocast_bf16: linear GEMMs on bf16 copies of their
                                           * operands (core/ops/matmul.c) instead of cuBLAS rounding f32 */
    bool bf16_activations;                /* with autocast_bf16: the model keeps its residual stream in f32
                                           * and runs each block's branches on bf16 tensors (layers/module.h) */
    struct CudaCtx *cuda;                 /* stream and cuBLAS(Lt) handles; NULL on CPU */
    struct OpProfile *profile;            /* non-NULL: every op is timed into it (core/profile.h) */
} Ctx;

/* Sizes that suit the tests and the tiny model; trainers pass their own. */
CtxSizes ctx_default_sizes(void);
Ctx *ctx_create(Device dev, CtxSizes sizes);
void ctx_destroy(Ctx *ctx);
/* Ends a micro-step: clears the tape and resets acts, grads, scratch and step headers. */
void ctx_step_reset(Ctx *ctx);
void ctx_synchronize(Ctx *ctx);
/* Between steps (acts, grads and scratch empty): gives the step arenas these capacities (their
 * memory is freed and allocated again) and clears their high-water marks (train/memory_plan.h
 * measures the sizes). */
void ctx_plan_arenas(Ctx *ctx, size_t acts, size_t grads, size_t scratch);
/* The CUDA stream every op launches on (NULL = legacy default on CPU builds). */
void *ctx_stream(Ctx *ctx);

/* New tensors. Data comes from the arena of `life` on ctx->device (LIFE_SCRATCH: ctx->scratch);
 * headers from persist_meta (LIFE_PERSIST) or step_meta (everything else). Contents undefined. */
Tensor *tensor_new(Ctx *ctx, TensorLife life, DType dt, int ndim, const int64_t *shape);
Tensor *tensor_zeros(Ctx *ctx, TensorLife life, DType dt, int ndim, const int64_t *shape);
/* New tensor on ctx->device holding a copy of `host` (host data of dtype dt, contiguous). */
Tensor *tensor_from_host(Ctx *ctx, TensorLife life, DType dt, int ndim, const int64_t *shape, const void *host);
/* New tensor on ctx->device from host doubles, converted to dt (tests and small inputs). */
Tensor *tensor_from_doubles(Ctx *ctx, TensorLife life, DType dt, int ndim, const int64_t *shape,
                            const double *values);
/* Copies a contiguous tensor's bytes to host memory. */
void tensor_to_host(const Tensor *t, void *host);
/* Copies any tensor to host as doubles, converting from its dtype (tests, checks, dumps). */
void tensor_to_doubles(const Tensor *t, double *out);
/* A view header sharing t's memory: new shape and strides (in elements) from element `offset`. */
Tensor *tensor_view(Ctx *ctx, const Tensor *t, int ndim, const int64_t *shape, const int64_t *stride,
                    int64_t offset);
/* The gradient of t for writing: allocated (contiguous, t's shape and dtype, from LIFE_GRAD, or
 * LIFE_PERSIST for parameters) on the first call. *accumulate tells the writer whether to add
 * (a gradient was already written) or overwrite; after the call the gradient counts as written. */
Tensor *grad_dest(Ctx *ctx, Tensor *t, bool *accumulate);
