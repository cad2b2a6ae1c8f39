/* Whole-model gradient checks (`gdp gradcheck --model tiny`): the model built with float64 leaf
 * parameters on the CPU, its mean cross-entropy on a small random batch checked against central
 * finite differences (core/gradcheck.h) for every parameter, in both modes. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/device.h"
#include "layers/config.h"

/* Checks cfg's model; prints one line per parameter when verbose. max_entries bounds the entries
 * perturbed per parameter. Returns the number of parameters whose relative error exceeds tol. */
int model_gradcheck(const ModelConfig *cfg, int B, int T, uint64_t seed, int max_entries, double tol, bool verbose,
                    int *n_checked);
/* The named preset's model in householder and in split mode (init scale raised to 0.1 so the
 * nonlinearities are exercised); returns the failure count. */
int model_gradcheck_preset(const char *preset, uint64_t seed, bool verbose, int *n_checked);
/* cfg's model on dev in f32 (with bf16_activations: its branches in bf16, as training on CUDA runs
 * them) against the CPU float64 model: returns the worst relative L2 error of any parameter's
 * gradient (NAN when one is missing), with the loss's in *loss_rel_err and the count checked. */
double model_vs_cpu(const ModelConfig *cfg, int B, int T, uint64_t seed, Device dev, bool bf16_activations,
                    double *loss_rel_err, int *n_checked);
