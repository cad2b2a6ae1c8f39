/* A linear layer without bias, as torch.nn.Linear stores it: weight [out, in], y = x W^T. */
#pragma once
#include "core/ops.h"
#include "layers/module.h"

/* Registers "<name>" [out, in], N(0, std^2), with weight decay. */
Tensor *linear_new(ParamMaker *pm, const char *name, int64_t in, int64_t out, double std);
/* x [..., in] -> [..., out]. */
Tensor *linear_forward(Ctx *ctx, Tensor *x, Tensor *w);
/* x's rows as one [rows, in] tensor. Flatten once when several linears read the same x: their
 * input gradients then add up inside the GEMMs (beta = 1) instead of through gradient copies. */
Tensor *linear_flatten(Ctx *ctx, Tensor *x);
/* linear_forward of rows = linear_flatten(x), shaped as x's leading dims + the output dim. */
Tensor *linear_forward_rows(Ctx *ctx, Tensor *rows, Tensor *w, const Tensor *x);
