/* gdp gradcheck: every registered op (and whole small graphs) against finite differences in
 * float64 on the CPU, or, with --device cuda, the CUDA path against the CPU float64 path. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/common.h"
#include "core/gradcheck.h"
#include "core/tape.h"
#include "train/cli/cli.h"
#include "train/cli/commands.h"
#include "tools/model_gradcheck.h"

static const CliOpt gradcheck_opts[] = {
    {"device", 'd', "DEV", "cpu (finite differences in f64, default), cuda (CUDA f32 and bf16 vs CPU f64) or auto"},
    {"op", 'o', "NAME", "check only this op (default: all registered ops)"},
    {"seed", 's', "N", "random seed for inputs (default 1)"},
    {"list", 'l', NULL, "list the registered ops and exit"},
    {"model", 'm', "PRESET", "tiny (the one preset it takes): the whole model, every parameter, both modes, f64 on cpu"},
    {"verbose", 'v', NULL, "with --model: one line per parameter (default: failures only)"},
};
static const CliCommand gradcheck_cmd = {
    "gradcheck", "gdp gradcheck [--device cpu|cuda] [--op NAME] [--seed N] | --model tiny [--verbose]",
    "Checks gradients of every registered op. On cpu: central finite differences in float64, bound 1e-6\n"
    "relative L2 (per op where stated). On cuda: forward and backward of each op in f32 (bound 1e-4) and\n"
    "bf16 (bound 1e-2; 2e-2 for gated_deltaproduct, the op's own bound) against the CPU float64 path.\nExits 1 if any check fails.",
    gradcheck_opts, (int)GDP_ARRAY_LEN(gradcheck_opts)};

typedef struct GradcheckArgs {
    const char *device, *op;
    uint64_t seed;
    bool list;
    const char *model;
    bool verbose;
} GradcheckArgs;

static void on_opt(const CliOpt *o, const char *v, void *user) {
    GradcheckArgs *a = (GradcheckArgs *)user;
    if (!strcmp(o->name, "device")) a->device = cli_device(&gradcheck_cmd, v);
    if (!strcmp(o->name, "op")) a->op = v;
    if (!strcmp(o->name, "seed")) a->seed = (uint64_t)cli_int("seed", v, 0, (long long)1 << 62);
    if (!strcmp(o->name, "list")) a->list = true;
    if (!strcmp(o->name, "model")) a->model = v;
    if (!strcmp(o->name, "verbose")) a->verbose = true;
}

static int report(const char *op, const char *what, const GradcheckResult *r, double bound, bool forward) {
    int fails = 0;
    if (forward) {
        bool ok = r->out_rel_err <= bound;
        printf("%-18s %-6s %-22s rel_err %.3e  bound %.0e  %s\n", op, what, "forward", r->out_rel_err, bound,
               ok ? "PASS" : "FAIL");
        fails += !ok;
    }
    for (int k = 0; k < r->n_leaves; k++) {
        bool ok = r->leaves[k].rel_err <= bound && !isnan(r->leaves[k].rel_err);
        char label[GDP_NAME_LEN + 8];
        snprintf(label, sizeof label, "d/d %s", r->leaves[k].label);
        printf("%-18s %-6s %-22s rel_err %.3e  bound %.0e  %s\n", op, what, label, r->leaves[k].rel_err, bound,
               ok ? "PASS" : "FAIL");
        fails += !ok;
    }
    return fails;
}

int cmd_gradcheck(int argc, char **argv) {
    GradcheckArgs a = {"cpu", NULL, 1, false, NULL, false};
    char *pos[1];
    cli_parse(&gradcheck_cmd, argc, argv, on_opt, &a, pos, 0);
    if (a.list) {
        for (int i = 0; i < gdp_op_registry_len; i++) printf("%s\n", gdp_op_registry[i]->name);
        return 0;
    }
    /* before device_parse, which ends a CPU-only build's --device cuda as a runtime error */
    if (a.model && !strcmp(a.device, "cuda"))
        cli_usage_error(&gradcheck_cmd, "--model checks on the cpu in float64; drop --device");
    Device dev = device_parse(a.device, "--device");
    if (a.model) {
        if (dev != DEV_CPU) cli_usage_error(&gradcheck_cmd, "--model checks on the cpu in float64; drop --device");
        ModelConfig probe;
        if (!model_config_preset(&probe, a.model))
            cli_usage_error(&gradcheck_cmd, "--model '%s' is not a preset: use tiny", a.model);
        /* the check's context has the default 64 MiB parameter arena (core/ctx.c), which the
         * float64 parameters of small and base overflow */
        if (strcmp(a.model, "tiny"))
            cli_usage_error(&gradcheck_cmd, "--model %s: only the tiny preset fits the check's float64 arenas; use "
                            "--model tiny", a.model);
        int n = 0, f = model_gradcheck_preset(a.model, a.seed, a.verbose, &n);
        printf("gradcheck model %s: %d parameter checks, %d failed\n", a.model, n, f);
        return f ? 1 : 0;
    }
    if (a.op && !op_find(a.op)) cli_usage_error(&gradcheck_cmd, "no op named '%s' (see gdp gradcheck --list)", a.op);
    int fails = 0, checks = 0;
    for (int i = 0; i < gdp_op_registry_len; i++) {
        const OpDef *def = gdp_op_registry[i];
        if (a.op && strcmp(a.op, def->name)) continue;
        if (!gradcheck_has_case(def)) continue;
        if (dev == DEV_CPU) {
            GradcheckResult r = gradcheck_fd(gradcheck_registered_case, (void *)def, a.seed, 64);
            double bound = def->gradcheck_tol > 0 ? def->gradcheck_tol : 1e-6;
            fails += report(def->name, "f64", &r, bound, false);
            checks += r.n_leaves;
        } else {
            GradcheckResult r32 = gradcheck_vs_cpu(gradcheck_registered_case, (void *)def, a.seed, dev, GDP_F32);
            fails += report(def->name, "f32", &r32, 1e-4, true);
            GradcheckResult r16 = gradcheck_vs_cpu(gradcheck_registered_case, (void *)def, a.seed, dev, GDP_BF16);
            fails += report(def->name, "bf16", &r16, def->bf16_tol > 0 ? def->bf16_tol : 1e-2, true);
            checks += 2 * (r32.n_leaves + 1);
        }
    }
    printf("gradcheck %s: %d checks, %d failed\n", device_name(dev), checks, fails);
    return fails ? 1 : 0;
}
