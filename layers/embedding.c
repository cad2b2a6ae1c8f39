#include "layers/embedding.h"

Tensor *embedding_new(ParamMaker *pm, const char *name, int64_t vocab, int64_t dim, double std) {
    return pm_param(pm, name, SHAPE(vocab, dim), true, INIT_NORMAL, std, 0);
}

Tensor *embedding_forward(Ctx *ctx, Tensor *w, const Tensor *ids) { return op_embedding(ctx, w, ids); }
