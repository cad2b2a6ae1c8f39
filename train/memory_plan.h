/* Memory planning: the context's arenas sized from the model itself. The parameter arena from the
 * registered parameters (and the optimizer state), the step arenas (acts, grads, scratch) from a
 * measured step: the model runs forward, loss and backward (and an evaluation forward) on the
 * target device, with the run's options, at three short sequence lengths while the arenas record
 * every allocation and rewind; each allocation's size is extended to the run's --seq and the
 * recorded calls are replayed at those sizes, which gives the high water of the full step. A run
 * that cannot fit is stopped with what it needs and what to change before the step arenas are
 * allocated. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/ctx.h"
#include "core/params.h"
#include "layers/config.h"
#include "layers/model.h"

typedef struct MemorySpec {
    Device device;
    int64_t batch, seq;          /* one micro-step's shapes */
    bool train;                  /* a training step (forward, loss, backward) besides the evaluation forward */
    bool recompute, selective_recompute;
    bool autocast_bf16, bf16_activations, autocast_gemm_copies; /* the Ctx flags of the same names */
    bool optimizer;              /* room for AdamW's state of this rank's shard (zero_stage, rank, world) */
    int zero_stage, rank, world;
    size_t limit_bytes;          /* memory the run may use; 0: the GPU's free memory (unchecked on the cpu) */
    /* > 0: a size the user gave (--persist-mem, --act-mem, ...): taken as it is */
    size_t persist_bytes, act_bytes, grad_bytes, scratch_bytes;
    int64_t probe_period;        /* tokens between the measured lengths; 0 (default): memory_probe_period */
    int64_t max_seqs;            /* > 0: documents, at most this many sequences a batch (model_forward_docs):
                                  * the step is measured with that many (at most one a token); 0: none */
    double margin;               /* fraction added to each planned step arena (default 0.02) */
} MemorySpec;

typedef struct MemoryPlan {
    size_t persist;              /* parameters, their gradients and the optimizer state */
    size_t acts, grads, scratch; /* the step's high water (before the margin), per arena */
    size_t acts_cap, grads_cap, scratch_cap; /* what the arenas get: + margin, or the user's size */
    int64_t probe_period;        /* the tokens between them */
    int64_t probe_seq[3];        /* the lengths measured; one (the run's own) when --seq is short */
    int n_probes;
} MemoryPlan;

/* The default probe period: the most tokens up to 64 that hold whole chunks of the GDP op
 * (gdp_chunk_tokens: 64 at n = 1, 2, 4; 63 at n = 3, whose chunks hold 21 tokens), so that every
 * buffer that grows by whole chunks grows by the same amount from one probe to the next and is
 * extended exactly. */
int64_t memory_probe_period(const ModelConfig *cfg);

/* Defaults for a training step of batch x seq on dev: no optimizer, no limit, no user sizes. */
MemorySpec memory_spec_default(Device dev, int64_t batch, int64_t seq);

/* Parameters + gradients (+ AdamW m and v of this rank's shard, + the CUDA norm partials), exact:
 * from the parameters model_build registers, nothing allocated. */
size_t memory_persist_bytes(const ModelConfig *cfg, const MemorySpec *s);

/* Measures one step of m (already created on its context, its recompute flags set) and fills
 * plan's step sizes. The context's step arenas must be empty; their capacity must hold the probes. */
void memory_plan_step(struct Model *m, const MemorySpec *s, MemoryPlan *plan);

/* Whether plan fits in `avail` bytes; otherwise writes what it needs and what to change into msg. */
bool memory_plan_fits(const MemoryPlan *plan, const MemorySpec *s, size_t avail, char *msg, size_t len);

/* The whole sequence: checks the parameters fit, creates the context (its Ctx flags set from s) and
 * the model on it, plans the step, stops with memory_plan_fits's message when the run cannot fit, and
 * sizes the step arenas. Free with model_free, params_free_store, ctx_destroy. */
Ctx *memory_plan_create(const ModelConfig *cfg, const MemorySpec *s, uint64_t seed, struct Model *m,
                        ParamStore *ps, MemoryPlan *plan);

/* One line: the planned sizes in GiB (for the run's log). */
void memory_plan_describe(const MemoryPlan *plan, char *buf, size_t len);
