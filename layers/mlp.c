#include "layers/mlp.h"

#include "base/common.h"
#include "core/ops_fused.h"
#include "layers/linear.h"

void mlp_new(Mlp *m, ParamMaker *pm, const ModelConfig *c, const char *prefix) {
    const int64_t D = c->hidden_size, I = cfg_intermediate(c);
    char name[GDP_NAME_LEN];
    snprintf(name, sizeof name, "%s.gate_proj.weight", prefix);
    m->gate_proj = linear_new(pm, name, D, I, c->initializer_range);
    snprintf(name, sizeof name, "%s.up_proj.weight", prefix);
    m->up_proj = linear_new(pm, name, D, I, c->initializer_range);
    snprintf(name, sizeof name, "%s.down_proj.weight", prefix);
    m->down_proj = linear_new(pm, name, I, D, c->initializer_range);
}

Tensor *mlp_forward(Ctx *ctx, const Mlp *m, Tensor *x) {
    Tensor *xr = linear_flatten(ctx, x);
    Tensor *gate = linear_forward_rows(ctx, xr, m->gate_proj, x);
    Tensor *up = linear_forward_rows(ctx, xr, m->up_proj, x);
    return linear_forward(ctx, op_swiglu(ctx, gate, up), m->down_proj);
}
