/* The public ops. Each runs now on ctx->device (eager) and, when an input requires a gradient,
 * records a tape node so tape_backward can compute gradients. Inputs of one op share a device
 * and a dtype (f32/f64 on CPU, f32/bf16 on CUDA) unless the op says otherwise; a mismatch, a
 * NULL, a wrong shape or a non-contiguous input where one is needed is a fatal error naming the
 * op and the shapes. Outputs are new, contiguous tensors from the activation arena (views from
 * reshape/transpose share memory). */
#pragma once
#include <stdbool.h>

#include "core/ctx.h"
#include "kernels/pointwise.h"

/* ---- arithmetic ---------------------------------------------------------------------------- */
/* a + b and a * b, b broadcast over a: b's shape equals a's trailing dims (or a's whole shape). */
Tensor *op_add(Ctx *ctx, Tensor *a, Tensor *b); /* on CUDA also f32 a + bf16 b of a's shape (f32 out) */
Tensor *op_mul(Ctx *ctx, Tensor *a, Tensor *b);
/* alpha * a */
Tensor *op_scale(Ctx *ctx, Tensor *a, double alpha);
/* Converts to another float dtype (the gradient is converted back). */
Tensor *op_cast(Ctx *ctx, Tensor *a, DType dt);

/* Matrix product over the last two dims, batched over the leading ones:
 * a [..., M, K] (or [..., K, M] with trans_a), b [..., K, N] (or [..., N, K] with trans_b).
 * b may also be 2-D and shared by every batch (a weight). cuBLAS(Lt) on CUDA. On CUDA a may be bf16
 * against an f32 2-D b (bf16 activations times a master weight): a bf16 output and a gradient,
 * and an f32 weight gradient. */
Tensor *op_matmul(Ctx *ctx, Tensor *a, Tensor *b, bool trans_a, bool trans_b);
/* bf16 autocast (CUDA) runs a linear layer's GEMMs on bf16 copies of the operands in scratch: the
 * weight whole, the rows in chunks of at most this many bytes (core/ops/matmul.c). */
#define MATMUL_AUTOCAST_CHUNK_BYTES ((size_t)256 << 20)

/* ---- pointwise ------------------------------------------------------------------------------ */
/* op_silu, op_sigmoid, op_softplus, op_exp, ...: y = f(x), one per line of GDP_POINTWISE_OPS. */
#define GDP_PW_DECLARE(E, name, lo, hi) Tensor *op_##name(Ctx *ctx, Tensor *x);
GDP_POINTWISE_OPS(GDP_PW_DECLARE)
#undef GDP_PW_DECLARE

/* ---- normalisation -------------------------------------------------------------------------- */
/* y = x / sqrt(mean(x^2) + eps) * weight over the last dim; weight [C] or NULL (no scale). */
Tensor *op_rmsnorm(Ctx *ctx, Tensor *x, Tensor *weight, double eps);
/* The same with a bf16 output from f32 x and weight on CUDA (out_dtype = x's dtype otherwise). */
Tensor *op_rmsnorm_to(Ctx *ctx, Tensor *x, Tensor *weight, double eps, DType out_dtype);
/* y = x / sqrt(sum(x^2) + eps) over each run of `group` elements of the last dim
 * (group = the last dim for per-head, last dim / r for per-slice normalisation). */
Tensor *op_l2norm(Ctx *ctx, Tensor *x, int64_t group, double eps);

/* ---- sequence ------------------------------------------------------------------------------- */
/* Depthwise causal convolution over time: x [B, T, C], w [C, W] (no bias);
 * y[b,t,c] = sum_{i<W} w[c,i] * x[b, t-W+1+i, c], zeros before t = 0. */
Tensor *op_conv1d_causal(Ctx *ctx, Tensor *x, Tensor *w);
/* The same over packed documents: doc_start int32 [B, T] on the op's device is nonzero where a
 * document begins inside a row, and a position reads no x before its document's start (as if its row
 * began there). doc_start NULL: op_conv1d_causal itself. */
Tensor *op_conv1d_causal_docs(Ctx *ctx, Tensor *x, Tensor *w, const Tensor *doc_start);

/* ---- lookups and losses ---------------------------------------------------------------------- */
/* weight [V, C], ids int32 [...] -> [..., C]. An id outside [0, V) is a fatal error. */
Tensor *op_embedding(Ctx *ctx, Tensor *weight, const Tensor *ids);
/* Mean cross-entropy of logits [N, V] against int32 targets [N]; targets < 0 are ignored.
 * Returns a scalar of the logits' dtype (f32 for bf16 logits). */
Tensor *op_cross_entropy(Ctx *ctx, Tensor *logits, const Tensor *targets);
/* The same loss; its backward overwrites the logits with their gradient. Only for logits that no
 * other op reads after the loss (an LM head's output): their values are gone after backward. */
Tensor *op_cross_entropy_inplace(Ctx *ctx, Tensor *logits, const Tensor *targets);

/* ---- reductions ------------------------------------------------------------------------------ */
Tensor *op_sum(Ctx *ctx, Tensor *x);  /* scalar [1] */
Tensor *op_mean(Ctx *ctx, Tensor *x); /* scalar [1] */

/* ---- views ----------------------------------------------------------------------------------- */
/* Same data, new shape (contiguous input; the element count must match). */
Tensor *op_reshape(Ctx *ctx, Tensor *x, int ndim, const int64_t *shape);
/* Swaps dims d0 and d1: a strided view, no copy. */
Tensor *op_transpose(Ctx *ctx, Tensor *x, int d0, int d1);
/* A contiguous copy of any (strided) tensor. */
Tensor *op_contiguous(Ctx *ctx, Tensor *x);

/* ---- helpers for op implementations (not taped) --------------------------------------------- */
/* dst = src (accumulate false) or dst += src; same shape and dtype, src may be strided. */
void op_copy_or_accumulate(Ctx *ctx, Tensor *dst, const Tensor *src, bool accumulate);
static inline void op_accumulate_into(Ctx *ctx, Tensor *dst, const Tensor *src) {
    op_copy_or_accumulate(ctx, dst, src, true);
}
/* Writes the gradient `g` (contiguous, t's shape) into t's gradient with set-or-accumulate. */
void grad_write(Ctx *ctx, Tensor *t, const Tensor *g);
/* The same for a `g` nothing reads afterwards (the gradient of a node's own output, in that node's
 * backward): when t has no gradient yet and g is contiguous, t's gradient becomes g's memory (a
 * view in t's shape) instead of a copy of it. */
void grad_pass(Ctx *ctx, Tensor *t, const Tensor *g);
