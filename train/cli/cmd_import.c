/* gdp import: an fla / Hugging Face GatedDeltaProduct folder -> a gdp.c checkpoint (train/import_hf.h). */
#include <stdio.h>
#include <string.h>

#include "base/common.h"
#include "train/cli/cli.h"
#include "train/cli/commands.h"
#include "train/import_hf.h"

static const CliOpt imp_opts[] = {
    {"from", 'f', "DIR", "the model folder: config.json, model.safetensors and optionally tokenizer.json"},
    {"out", 'o', "PATH", "FILE.h5 (one checkpoint file) or a folder (ckpt_00000000.h5 + latest)"},
};
static const CliCommand imp_cmd = {
    "import", "gdp import --from DIR --out FILE.h5|DIR",
    "Turns an fla / Hugging Face GatedDeltaProductForCausalLM folder (as scripts/export_hf.py writes it, or\n"
    "from the hub) into a gdp.c checkpoint at step 0 with fresh AdamW moments, which gdp train --resume, gdp\n"
    "eval and gdp generate take. F32 tensors come over bit for bit (F16, BF16, F64 are converted). Config keys\n"
    "that gdp.c cannot honour (hybrid attn layers, num_v_heads, conv_bias, unknown keys) stop the import\n"
    "with their name. A tokenizer.json is copied beside the checkpoint and recorded in its config.",
    imp_opts, (int)GDP_ARRAY_LEN(imp_opts)};

typedef struct ImpArgs {
    const char *from, *out;
} ImpArgs;

static void on_opt(const CliOpt *o, const char *v, void *user) {
    ImpArgs *a = (ImpArgs *)user;
    if (!strcmp(o->name, "from")) a->from = v;
    if (!strcmp(o->name, "out")) a->out = v;
}

int cmd_import(int argc, char **argv) {
    ImpArgs a = {0};
    char *pos[1];
    cli_parse(&imp_cmd, argc, argv, on_opt, &a, pos, 0);
    if (!a.from) cli_usage_error(&imp_cmd, "--from DIR is required");
    if (!a.out) cli_usage_error(&imp_cmd, "--out FILE.h5 or --out DIR is required");
    char *written = import_hf(a.from, a.out);
    printf("imported %s to %s\n", a.from, written);
    free(written);
    return 0;
}
