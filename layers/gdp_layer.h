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

void gdp_layer_new(GdpLayer *l, ParamMaker *pm, const ModelConfig *c, const char *prefix);
/* x [B, T, hidden] (already normed) -> [B, T, hidden]. With `recompute`, the q and k short convs
 * and L2 norms keep only their inputs (the projections) and run again in backward. */
Tensor *gdp_layer_forward(Ctx *ctx, const GdpLayer *l, const ModelConfig *c, Tensor *x, bool recompute);
