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

struct Tape;
/* An optional observer of backward (the gradient buckets of train/dist.c use it to start each
 * bucket's all-reduce as soon as its gradients are final): `begin` runs before the walk, `passed`
 * after the walk is done with node i (its backward ran, or was skipped because no gradient reached
 * it), so every gradient that nodes i..n-1 write is written; the last call is passed(0). */
typedef struct TapeHook {
    void (*begin)(void *user, const struct Tape *tape);
    void (*passed)(void *user, const struct Tape *tape, int i);
    void *user;
} TapeHook;

/* Gradient release at boundaries (op_grad_boundary): two buffers for the boundary gradients and
 * the grads-arena mark that every boundary rewinds to; set up when backward starts. */
typedef struct GradRelease {
    void *buf[2];
    size_t buf_bytes, mark;
    int passed; /* boundaries passed in this backward */
} GradRelease;

typedef struct Tape {
    Node *nodes;
    int n, cap;
    GradRelease release;
    TapeHook *hook; /* NULL: none (the default); kept across ctx_step_reset */
} Tape;

/* Runs node->op->forward and records the node when grad is enabled and some input requires a
 * gradient; the outputs then require gradients too. Every public op goes through this. */
void op_run(struct Ctx *ctx, Node *node);
/* Whether op_run will record the node (some input requires a gradient, recording is on and the op
 * has a backward): an op may then keep what its backward needs. */
bool op_records(const struct Ctx *ctx, const Node *node);
/* A gradient boundary on x (returns a view of x to use in its place): in backward, once the
 * walk reaches it, every activation gradient allocated since the previous boundary (or since
 * backward began) is released, after x's own gradient is moved into one of two buffers. Put one
 * at the input of each block whose inner tensors nothing outside the block uses (a residual
 * stream): the activation gradients then take one block's worth of memory, not the model's. A
 * tensor from before the boundary that did get a gradient in the released memory is a fatal error
 * (the boundary was put where it does not fit). */
Tensor *op_grad_boundary(struct Ctx *ctx, Tensor *x);
/* Recomputation (activation checkpointing): y = fn(ctx, user, x), where y has x's shape (a
 * residual block). Forward runs fn without recording and keeps only y: fn's inner activations are
 * released at once. Backward runs fn again on x, recording, walks those nodes back from y's
 * gradient, adds the result into x's gradient and releases everything fn made (activations,
 * activation gradients, tape nodes). Costs one more forward of fn; fn must be deterministic, and
 * its leaves that need gradients must be parameters (their gradients outlive the release). Not for
 * use with a TapeHook (the hook would not see the parameters' gradients being written). */
typedef Tensor *(*CheckpointFn)(struct Ctx *ctx, const void *user, Tensor *x);
Tensor *op_checkpoint(struct Ctx *ctx, CheckpointFn fn, const void *user, Tensor *x);
/* The nodes of the two above, registered like any op's (their gradcheck cases are core/gradcheck.c's). */
extern const OpDef op_grad_boundary_def, op_checkpoint_def;
/* Backward from a scalar: seeds d(loss)/d(loss) = 1. */
void tape_backward(struct Ctx *ctx, Tensor *loss);
/* Backward seeded with an explicit gradient for `out` (same shape and dtype). */
void tape_backward_seeded(struct Ctx *ctx, Tensor *out, const Tensor *dout);

/* All registered ops, for gradcheck and tests: generated by the Makefile from every
 * `const OpDef op_NAME_def = ` in the node files (core/ops/, core/tape.c) and the pointwise list. */
extern const OpDef *const gdp_op_registry[];
extern const int gdp_op_registry_len;
const OpDef *op_find(const char *name);
