/* Argument checks and small helpers shared by the ops' node files in core/ops/. */
#pragma once
#include "base/common.h"
#include "core/ctx.h"
#include "core/ops.h"

/* Fatal error "op 'NAME': <what>" with the shapes spelled out by the caller. */
#define OP_FAIL(opname, ...) gdp_fatal("op '" opname "': " __VA_ARGS__)

void op_check_not_null(const char *op, const char *arg, const Tensor *t);
void op_check_float(const char *op, const char *arg, const Tensor *t, Device dev);
void op_check_contiguous(const char *op, const char *arg, const Tensor *t);
void op_check_same_dtype(const char *op, const Tensor *a, const Tensor *b);
/* For ops that broadcast b over a: b's shape must equal a's trailing dims (fatal error naming the
 * op and both shapes otherwise); returns the product of a's other (leading) dims. */
int64_t op_broadcast_outer(const char *op, const Tensor *a, const Tensor *b);
/* A new contiguous activation tensor with x's dtype and the given shape. */
Tensor *op_new_out(Ctx *ctx, const Tensor *like, int ndim, const int64_t *shape);
/* Fills a node's in/out arrays (NULL-terminated lists are not used: counts are explicit). */
static inline Node node_make(const OpDef *def) {
    Node n;
    memset(&n, 0, sizeof n);
    n.op = def;
    return n;
}

/* For gradcheck cases: a random tensor with entries in (lo, hi), requires_grad set. */
Tensor *gc_random(Ctx *ctx, DType dt, uint64_t *seed, double lo, double hi, int ndim, const int64_t *shape);

#ifdef GDP_CUDA
#define CUDA_ONLY(stmt) stmt
#else
#define CUDA_ONLY(stmt) gdp_fatal("this build of gdp has no CUDA support (nvcc was not found when it was built)")
#endif
