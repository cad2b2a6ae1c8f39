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

/* ‖a − b‖ / max(‖b‖, tiny) */
double rel_l2(const double *a, const double *b, int64_t n);
