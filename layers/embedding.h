/* Token embedding: weight [V, C], ids int32 -> rows. */
#pragma once
#include "core/ops.h"
#include "layers/module.h"

Tensor *embedding_new(ParamMaker *pm, const char *name, int64_t vocab, int64_t dim, double std);
Tensor *embedding_forward(Ctx *ctx, Tensor *w, const Tensor *ids);
