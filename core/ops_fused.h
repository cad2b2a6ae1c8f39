/* Fused ops the model uses: one kernel where the unfused chain would store several activations.
 * Same conventions as core/ops.h (eager, taped when an input requires a gradient, inputs share a
 * device and dtype, contiguous, fatal errors naming the op and the shapes). */
#pragma once
#include "core/ctx.h"

/* Gated RMSNorm (docs/spec.md §3, output): y = o / sqrt(mean(o^2) + eps) * w * silu(z) per row of D,
 * o and z [..., D] of the same shape, w [D]. Saves the per-row rstd; gradients for o, z and w
 * (dw reduced deterministically over rows). */
Tensor *op_gated_rmsnorm(Ctx *ctx, Tensor *o, Tensor *z, Tensor *w, double eps);

/* SwiGLU gate: y = silu(a) * b elementwise, a and b of the same shape. */
Tensor *op_swiglu(Ctx *ctx, Tensor *a, Tensor *b);

/* Short causal conv + SiLU: y = silu(conv1d_causal(x, w)), x [B, T, C], w [C, W] (see op_conv1d_causal),
 * one kernel each way. Keeps no pre-activation: backward recomputes it from x. */
Tensor *op_conv1d_causal_silu(Ctx *ctx, Tensor *x, Tensor *w);
/* The same over packed documents (see op_conv1d_causal_docs); doc_start NULL: op_conv1d_causal_silu. */
Tensor *op_conv1d_causal_silu_docs(Ctx *ctx, Tensor *x, Tensor *w, const Tensor *doc_start);
