/* Gradient checks of taped computations, used by `gdp gradcheck` and the tests.
 * A "case" records a computation on a fresh context and returns its output; the checker seeds
 * backward with random weights w (loss = sum(out * w)), then compares every leaf's gradient
 * with central finite differences obtained by replaying the tape's forward functions. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/ctx.h"

typedef Tensor *(*GradcheckCaseFn)(Ctx *ctx, DType dt, uint64_t seed, void *user);

typedef struct GradcheckLeaf {
    char label[GDP_NAME_LEN]; /* tensor name, or "input <k>" */
    int64_t numel;
    double rel_err;           /* relative L2 error of the checked entries (or vs the CPU f64 path) */
} GradcheckLeaf;

#define GRADCHECK_MAX_LEAVES 32
typedef struct GradcheckResult {
    int n_leaves;
    GradcheckLeaf leaves[GRADCHECK_MAX_LEAVES];
    double out_rel_err; /* device comparison only: forward output vs CPU f64 */
    double worst;
} GradcheckResult;

/* Finite differences in float64 on the CPU. max_entries bounds how many entries of each leaf
 * are perturbed (spread evenly; 0 = all). */
GradcheckResult gradcheck_fd(GradcheckCaseFn fn, void *user, uint64_t seed, int max_entries);
/* The same case on `dev` in dtype dt against the CPU float64 path: forward output and every
 * leaf gradient, by relative L2 error. */
GradcheckResult gradcheck_vs_cpu(GradcheckCaseFn fn, void *user, uint64_t seed, Device dev, DType dt);

/* A registered op's case as a GradcheckCaseFn (user: its OpDef), for loops over gdp_op_registry.
 * The tape's own nodes (op_grad_boundary, op_checkpoint) get their cases here, since core/tape.c
 * builds no ops. */
Tensor *gradcheck_registered_case(Ctx *ctx, DType dt, uint64_t seed, void *user);
/* Whether gradcheck_registered_case has a case for def. */
bool gradcheck_has_case(const OpDef *def);

/* Argument-error checks: gc_random (core/op_util.h) can hand a case a bad tensor in place of its
 * k-th random input, so that every registered op's argument checks run through its gradcheck case
 * with no code that knows the op (tests/support/op_checks.h). A test-only switch of this process. */
typedef enum GcFault {
    GC_FAULT_NONE,
    GC_FAULT_NULL,    /* NULL */
    GC_FAULT_INT,     /* an i32 tensor of the shape */
    GC_FAULT_DTYPE,   /* the other float dtype: f32 for f64 and back on the CPU; f64 (no CUDA dtype) on CUDA */
    GC_FAULT_STRIDED, /* the shape as a strided view (every other element of the last dim) */
    GC_FAULT_SHAPE,   /* the last dim one longer */
    GC_FAULT_KINDS
} GcFault;
/* From now on gc_random call number `input` (0-based) returns `fault`; resets the call count.
 * gc_fault_set(-1, GC_FAULT_NONE) only counts. */
void gc_fault_set(int input, GcFault fault);
/* gc_random calls since the last gc_fault_set. */
int gc_fault_calls(void);
const char *gc_fault_name(GcFault fault);

/* ‖a − b‖ / max(‖b‖, tiny) */
double rel_l2(const double *a, const double *b, int64_t n);
