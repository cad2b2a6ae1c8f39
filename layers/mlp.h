/* fla's GatedMLP (SwiGLU): down_proj(silu(gate_proj x) * up_proj x). */
#pragma once
#include "core/ops.h"
#include "layers/config.h"
#include "layers/module.h"

typedef struct Mlp {
    Tensor *gate_proj, *up_proj; /* [intermediate, hidden] */
    Tensor *down_proj;           /* [hidden, intermediate] */
} Mlp;

void mlp_new(Mlp *m, ParamMaker *pm, const ModelConfig *c, const char *prefix);
Tensor *mlp_forward(Ctx *ctx, const Mlp *m, Tensor *x);
