/* A trained model back from a checkpoint: finding the checkpoint (a file, or a run folder's
 * newest valid one) and building the model it describes. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/common.h"
#include "core/params.h"
#include "layers/model.h"
#include "train/checkpoint.h"
#include "train/memory_plan.h"
#include "train/train.h"

char *train_resolve_checkpoint(const char *path, const char *flag) {
    struct stat st;
    if (stat(path, &st) != 0) gdp_fatal("%s '%s': no such file or folder", flag, path);
    if (S_ISDIR(st.st_mode)) {
        char note[2048];
        char *p = checkpoint_find_resume(path, note, sizeof note);
        if (!p)
            gdp_fatal("%s '%s': the folder holds no valid checkpoint (ckpt_NNNNNNNN.h5)%s%s: give a checkpoint file or "
                      "the --out folder of a gdp train run that saved one",
                      flag, path, note[0] ? ": " : "", note);
        if (note[0]) fprintf(stderr, "note: %s '%s': %s\n", flag, path, note);
        return p;
    }
    char *p = (char *)xmalloc(strlen(path) + 1);
    strcpy(p, path);
    return p;
}

Ctx *train_load_model(const char *ckpt, Device dev, int64_t B, int64_t T, Model *m, ParamStore *ps) {
    return train_load_model_docs(ckpt, dev, B, T, 0, m, ps);
}

Ctx *train_load_model_docs(const char *ckpt, Device dev, int64_t B, int64_t T, int64_t max_seqs, Model *m,
                           ParamStore *ps) {
    char err[1024];
    char *text = checkpoint_read_config(ckpt);
    ModelConfig cfg = model_config_default();
    if (!model_config_load_text(&cfg, text, ckpt, err, sizeof err) || !model_config_validate(&cfg, err, sizeof err))
        gdp_fatal("checkpoint '%s' has an unusable model config: %s", ckpt, err);
    free(text);
    MemorySpec spec = memory_spec_default(dev, B, T);
    spec.train = false; /* forward passes only */
    spec.max_seqs = max_seqs;
    MemoryPlan plan;
    Ctx *ctx = memory_plan_create(&cfg, &spec, 0, m, ps, &plan);
    checkpoint_load(ckpt, ps, NULL, NULL);
    return ctx;
}
