/* Whole-model gradient checks (`gdp gradcheck --model tiny`): the model built with float64 leaf
 * parameters on the CPU, its mean cross-entropy on a small random batch checked against central
 * finite differences (core/gradcheck.h) for every parameter, in both modes. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "base/device.h"
#include "layers/config.h"

/* Checks cfg's model; prints one line per parameter when verbose. max_entries bounds the entries
 * perturbed per parameter. Returns the number of parameters whose relative error exceeds tol. */
int model_gradcheck(const ModelConfig *cfg, int B, int T, uint64_t seed, int max_entries, double tol, bool verbose,
                    int *n_checked);
/* The named preset's model in householder and in split mode (init scale raised to 0.1 so the
 * nonlinearities are exercised); returns the failure count. */
int model_gradcheck_preset(const char *preset, uint64_t seed, bool verbose, int *n_checked);
typedef enum ModelPrecision {
    MODEL_F32,                     /* f32 throughout */
    MODEL_AUTOCAST_F32_ACTIVATIONS, /* bf16 GEMMs (on operand copies) and GDP op, f32 activations */
    MODEL_BF16_ACTIVATIONS,        /* what training on CUDA runs: the branches on bf16 tensors */
} ModelPrecision;

typedef struct ModelVsCpu {
    double worst, rms;   /* over the parameters' gradient rel L2 errors; worst NAN when one had none */
    char worst_label[64]; /* whose gradient is worst */
    double loss_rel_err;
    int n_checked;
} ModelVsCpu;

/* cfg's model on dev at `precision` against the CPU float64 model, every parameter's gradient by
 * relative L2 error. Returns the worst (NAN when a parameter had no gradient). */
double model_vs_cpu(const ModelConfig *cfg, int B, int T, uint64_t seed, Device dev, ModelPrecision precision,
                    ModelVsCpu *out);
