/* The Gated DeltaProduct token mixer (docs/spec.md §3; fla's GatedDeltaProduct layer, same parameter names
 * under "<prefix>.": q_proj, k_proj, v_proj, b_proj, a_proj, A_log, dt_bias, g_proj, o_norm,
 * o_proj, q_conv1d, k_conv1d, v_conv1d, and in split mode our `mask`). */
#pragma once
#include "core/ops.h"
#include "layers/config.h"
#include "layers/module.h"

typedef struct GdpLayer {
    Tensor *q_proj, *k_proj, *v_proj, *b_proj; /* [key_dim|n*key_dim|n*value_dim|n*H, hidden] */
    Tensor *a_proj, *A_log, *dt_bias;          /* forget gate (NULL without) */
    Tensor *g_proj;                            /* output gate (NULL without) */
    Tensor *q_conv, *k_conv, *v_conv;          /* [C, 1, W] (NULL without short conv) */
    Tensor *mask;                              /* split mode: [H, r, r] */
    Tensor *o_norm;                            /* [d_v] */
    Tensor *o_proj;                            /* [hidden, value_dim] */
    struct ConvNorm {                          /* l2norm(silu(conv(x))) of q and k, recomputable */
        Tensor *conv;                          /* q_conv / k_conv, or NULL */
        int64_t group;                         /* the norm's group */
    } q_seg, k_seg;
} GdpLayer;

/* The recurrent state one layer carries between calls (inference; layers/state.h owns the memory):
 * the last W-1 inputs of each short conv (zeros before the first token) and the GDP op's state.
 * Headers over caller-owned memory on the model's device, in the activations' dtype (f32). */
typedef struct GdpLayerState {
    Tensor conv_q, conv_k, conv_v; /* [B, W-1, C], oldest first; unused without short convs */
    Tensor S;                      /* [B, H, K, V] */
} GdpLayerState;

/* Documents packed in a batch (layers/model.h, model_forward_docs): the GDP op's state and the short
 * convs' windows start fresh at each document. */
typedef struct GdpDocs {
    const int32_t *cu_seqlens; /* host: n_seqs + 1 offsets into the B*T tokens taken row after row,
                                * from 0 to B*T, every row's start b*T among them */
    int n_seqs;
    const Tensor *doc_start;   /* int32 [B, T] on the model's device: nonzero where one begins inside a row */
} GdpDocs;

void gdp_layer_new(GdpLayer *l, ParamMaker *pm, const ModelConfig *c, const char *prefix);
/* x [B, T, hidden] (already normed) -> [B, T, hidden]. With `recompute`, the q and k short convs
 * and L2 norms keep only their inputs (the projections) and run again in backward. */
Tensor *gdp_layer_forward(Ctx *ctx, const GdpLayer *l, const ModelConfig *c, Tensor *x, bool recompute);
/* The same continuing from `st` (NULL: from zeros, as in training), which it updates to the state
 * after x's last token: the prompt in one call or a token at a time give the same outputs. With a
 * state, recording must be off (inference) and `recompute` is ignored. */
Tensor *gdp_layer_forward_state(Ctx *ctx, const GdpLayer *l, const ModelConfig *c, Tensor *x, bool recompute,
                                GdpLayerState *st);
/* The same over packed documents (training from the start of every document; no state). */
Tensor *gdp_layer_forward_docs(Ctx *ctx, const GdpLayer *l, const ModelConfig *c, Tensor *x, bool recompute,
                               const GdpDocs *docs);
