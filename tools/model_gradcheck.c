#include "tools/model_gradcheck.h"

#include <math.h>
#include <stdio.h>

#include "base/common.h"
#include "core/gradcheck.h"
#include "layers/model.h"

/* gradcheck_fd collects at most GRADCHECK_MAX_LEAVES leaves, so the parameters are checked in
 * groups: only group `group` requires a gradient in a run. */
#define GROUP_SIZE 24

typedef struct CaseArgs {
    const ModelConfig *cfg;
    int B, T, group;
    int n_params;          /* filled by the case */
    ModelPrecision precision; /* on CUDA */
} CaseArgs;

static Tensor *model_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    CaseArgs *a = (CaseArgs *)user;
    if (ctx->device == DEV_CUDA) {
        ctx->autocast_bf16 = a->precision != MODEL_F32;
        ctx->bf16_activations = a->precision == MODEL_BF16_ACTIVATIONS;
        ctx->autocast_gemm_copies = a->precision == MODEL_AUTOCAST_F32_ACTIVATIONS;
    }
    ParamMaker pm;
    pm_init_direct(&pm, ctx, dt, seed);
    Model m;
    model_build(&m, a->cfg, &pm);
    a->n_params = pm.n_made;
    for (int i = 0; i < pm.n_made; i++) pm.made[i]->requires_grad = (i / GROUP_SIZE) == a->group;
    pm_free(&pm);
    Rng rng;
    rng_seed(&rng, seed ^ 0xda7aULL);
    int64_t n = (int64_t)a->B * a->T;
    int32_t *ids = (int32_t *)xmalloc((size_t)n * sizeof(int32_t));
    int32_t *tg = (int32_t *)xmalloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) {
        ids[i] = (int32_t)rng_below(&rng, (uint64_t)a->cfg->vocab_size);
        tg[i] = (int32_t)rng_below(&rng, (uint64_t)cfg_out_dim(a->cfg));
    }
    tg[n - 1] = -1; /* an ignored target, as at a document edge */
    Tensor *loss = model_loss_host(&m, ids, tg, a->B, a->T);
    free(ids), free(tg);
    model_free(&m);
    return loss;
}

int model_gradcheck(const ModelConfig *cfg, int B, int T, uint64_t seed, int max_entries, double tol, bool verbose,
                    int *n_checked) {
    CaseArgs a = {cfg, B, T, 0, 0, MODEL_F32};
    int fails = 0, checked = 0;
    for (a.group = 0;; a.group++) {
        GradcheckResult r = gradcheck_fd(model_case, &a, seed, max_entries);
        for (int k = 0; k < r.n_leaves; k++) {
            bool ok = r.leaves[k].rel_err <= tol && !isnan(r.leaves[k].rel_err);
            if (verbose || !ok)
                printf("%-8s %-11s d/d %-44s rel_err %.3e  bound %.0e  %s\n", "model",
                       cfg->mode == GDP_MODE_SPLIT ? "split" : "householder", r.leaves[k].label, r.leaves[k].rel_err,
                       tol, ok ? "PASS" : "FAIL");
            fails += !ok;
            checked++;
        }
        if ((a.group + 1) * GROUP_SIZE >= a.n_params) break;
    }
    /* Every parameter must have been reached (a leaf missing from the tape has no gradient path). */
    if (checked != a.n_params) {
        printf("model: only %d of %d parameters reached the loss  FAIL\n", checked, a.n_params);
        fails++;
    }
    if (n_checked) *n_checked += checked;
    return fails;
}

double model_vs_cpu(const ModelConfig *cfg, int B, int T, uint64_t seed, Device dev, ModelPrecision precision,
                    ModelVsCpu *out) {
    CaseArgs a = {cfg, B, T, 0, 0, precision};
    memset(out, 0, sizeof *out);
    double sum_sq = 0;
    for (a.group = 0;; a.group++) {
        GradcheckResult r = gradcheck_vs_cpu(model_case, &a, seed, dev, GDP_F32);
        for (int k = 0; k < r.n_leaves; k++) {
            double e = r.leaves[k].rel_err;
            if (isnan(e) || e > out->worst) {
                out->worst = e;
                snprintf(out->worst_label, sizeof out->worst_label, "%s", r.leaves[k].label);
            }
            sum_sq += e * e;
        }
        out->loss_rel_err = GDP_MAX(out->loss_rel_err, r.out_rel_err);
        out->n_checked += r.n_leaves;
        if ((a.group + 1) * GROUP_SIZE >= a.n_params) break;
    }
    out->rms = out->n_checked ? sqrt(sum_sq / out->n_checked) : NAN;
    if (out->n_checked != a.n_params) out->worst = NAN; /* a parameter off the tape has no gradient path */
    return out->worst;
}

int model_gradcheck_preset(const char *preset, uint64_t seed, bool verbose, int *n_checked) {
    ModelConfig cfg;
    GDP_CHECK(model_config_preset(&cfg, preset), "gradcheck --model: unknown preset '%s' (use one of %s)", preset,
              model_config_preset_names());
    cfg.initializer_range = 0.1;
    int fails = 0;
    for (int mode = 0; mode < 2; mode++) {
        cfg.mode = mode ? GDP_MODE_SPLIT : GDP_MODE_HOUSEHOLDER;
        fails += model_gradcheck(&cfg, 2, 11, seed, 16, 1e-6, verbose, n_checked);
    }
    return fails;
}
