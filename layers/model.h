/* The Gated DeltaProduct language model (docs/spec.md §4; fla's GatedDeltaProductForCausalLM):
 *   model.embeddings -> N x [attn_norm -> attn (GatedDeltaProduct) -> + -> mlp_norm -> mlp -> +]
 *   -> model.norm -> lm_head (tied to the embeddings or not)
 * With num_labels > 0 the head is "classifier.weight" [num_labels, hidden] and the targets are
 * per-position labels (state-tracking tasks); everything else is the same code. */
#pragma once
#include "core/ops.h"
#include "layers/config.h"
#include "layers/gdp_layer.h"
#include "layers/mlp.h"
#include "layers/module.h"

typedef struct Block {
    Tensor *attn_norm; /* model.layers.N.attn_norm.weight */
    GdpLayer attn;     /* model.layers.N.attn.* */
    Tensor *mlp_norm;  /* model.layers.N.mlp_norm.weight */
    Mlp mlp;           /* model.layers.N.mlp.* */
    const ModelConfig *cfg; /* the model's, set by model_forward (for recomputation) */
    bool selective;         /* set by model_forward: recompute the MLP half and the q/k conv + norm */
    GdpLayerState *state;   /* set by model_forward_state (layers/state.h): the layer's recurrent state */
    const GdpDocs *docs;    /* set by model_forward_docs: the batch's documents, or NULL */
} Block;

typedef struct Model {
    ModelConfig cfg;
    Ctx *ctx;
    ParamStore *ps;     /* registry mode; NULL when the parameters are direct leaves */
    Tensor *embeddings; /* [V, D] */
    Block *blocks;
    Tensor *norm;       /* [D] */
    Tensor *head;       /* lm_head.weight / classifier.weight; == embeddings when tied */
    bool recompute;     /* blocks recompute their activations in backward (op_checkpoint) */
    bool selective_recompute; /* only the cheap parts: each block's MLP half (from its input) and the
                               * q/k short conv + L2 norm (from the projections); off under recompute */
} Model;

/* Registers (or, in direct mode, creates) every parameter, one gradient bucket per block. */
void model_build(Model *m, const ModelConfig *cfg, ParamMaker *pm);
/* Registry mode in one call: params_init_store, model_build, params_allocate, params_initialize. */
void model_create(Model *m, const ModelConfig *cfg, Ctx *ctx, ParamStore *ps, uint64_t seed);
void model_free(Model *m); /* host memory only; tensors belong to the ctx */

/* ids int32 [B, T] -> logits [B, T, out] (out = vocab_size, or num_labels). */
Tensor *model_forward(Model *m, Tensor *ids);
/* Mean cross-entropy of model_forward(ids) against int32 targets [B, T] (targets < 0 ignored). */
Tensor *model_loss(Model *m, Tensor *ids, Tensor *targets);
/* Host int32 arrays [B*T] to tensors on the model's device, then model_loss. */
Tensor *model_loss_host(Model *m, const int32_t *ids, const int32_t *targets, int64_t B, int64_t T);

/* The same over packed documents (docs/data.md): cu_seqlens (host) holds n_seqs + 1 offsets into the
 * B*T positions of ids taken row after row, strictly increasing from 0 to B*T, with every row's start
 * b*T among them; each sequence between two offsets starts from a zero state and zero conv windows,
 * as if run alone. cu_seqlens NULL: model_forward and model_loss. */
Tensor *model_forward_docs(Model *m, Tensor *ids, const int32_t *cu_seqlens, int n_seqs);
Tensor *model_loss_docs(Model *m, Tensor *ids, Tensor *targets, const int32_t *cu_seqlens, int n_seqs);
Tensor *model_loss_host_docs(Model *m, const int32_t *ids, const int32_t *targets, const int32_t *cu_seqlens,
                             int n_seqs, int64_t B, int64_t T);
