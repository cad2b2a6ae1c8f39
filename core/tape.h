/* The tape: ops run eagerly and, when some input requires a gradient, append a node here.
 * Backward walks the nodes in reverse and calls each op's backward. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/tensor.h"

#define GDP_MAX_IN 8
#define GDP_MAX_OUT 2
#define GDP_MAX_SAVED 8
#define GDP_MAX_ATTR 16

struct Ctx;
struct Node;

typedef struct OpDef {
    const char *name;
    /* Computes node->out[] from node->in[] and node->attr; may fill node->saved[]. */
    void (*forward)(struct Ctx *ctx, struct Node *node);
    /* Reads out[i]->grad and writes in[j]->grad (via grad_dest) for inputs that require grad. */
    void (*backward)(struct Ctx *ctx, struct Node *node);
    /* Gradient check: builds a small random instance of the op on ctx (float64 on CPU, or the
     * dtype asked for), records it on the tape and returns its first output. Used by
     * `gdp gradcheck` to check every registered op without knowing it. */
    Tensor *(*gradcheck_case)(struct Ctx *ctx, DType dt, uint64_t seed);
    /* Bound on the relative error of the check for float64 (0 = the default 1e-6). */
    double gradcheck_tol;
    /* Bound for CUDA bf16 against CPU float64 (0 = the default 1e-2). */
    double bf16_tol;
} OpDef;

typedef union Attr {
    double f;
    int64_t i;
    const void *p;
} Attr;

typedef struct Node {
    const OpDef *op;
    int n_in, n_out, n_saved;
    Tensor *in[GDP_MAX_IN];
    Tensor *out[GDP_MAX_OUT];
    Tensor *saved[GDP_MAX_SAVED];
    Attr attr[GDP_MAX_ATTR];
} Node;

typedef struct Tape {
    Node *nodes;
    int n, cap;
} Tape;

/* Runs node->op->forward and records the node when grad is enabled and some input requires a
 * gradient; the outputs then require gradients too. Every public op goes through this. */
void op_run(struct Ctx *ctx, Node *node);
/* Backward from a scalar: seeds d(loss)/d(loss) = 1. */
void tape_backward(struct Ctx *ctx, Tensor *loss);
/* Backward seeded with an explicit gradient for `out` (same shape and dtype). */
void tape_backward_seeded(struct Ctx *ctx, Tensor *out, const Tensor *dout);

/* All registered ops (core/op_registry.c), for gradcheck and tests. */
extern const OpDef *const gdp_op_registry[];
extern const int gdp_op_registry_len;
const OpDef *op_find(const char *name);
