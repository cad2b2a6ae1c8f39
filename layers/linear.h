/* A linear layer without bias, as torch.nn.Linear stores it: weight [out, in], y = x W^T. */
#pragma once
#include "core/ops.h"
#include "layers/module.h"

/* Registers "<name>" [out, in], N(0, std^2), with weight decay. */
Tensor *linear_new(ParamMaker *pm, const char *name, int64_t in, int64_t out, double std);
/* x [..., in] -> [..., out]. */
Tensor *linear_forward(Ctx *ctx, Tensor *x, Tensor *w);
