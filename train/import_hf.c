#include "train/import_hf.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "data/json.h"
#include "data/safetensors.h"
#include "data/text.h"
#include "data/tokenizer.h"
#include "layers/model.h"
#include "train/checkpoint.h"
#include "train/memory_plan.h"
#include "train/optim.h"

/* fla GatedDeltaProductConfig keys that are ours under the same name: each must be in config.json. */
static const char *const HONOURED[] = {
    "hidden_size", "num_hidden_layers", "num_heads", "head_dim", "expand_v", "num_householder",
    "use_forget_gate", "allow_neg_eigval", "use_short_conv", "conv_size", "use_output_gate", "hidden_ratio",
    "intermediate_size", "vocab_size", "norm_eps", "tie_word_embeddings", "initializer_range",
};
/* Our own keys, in the self-contained format (model_type "gdp", scripts/hf/modeling_gdp.py). */
static const char *const OWN[] = {"mode", "split_mask_trainable", "num_labels"};
/* Keys that do not change the model's function: kernels picked, fused training losses, generation
 * defaults, bookkeeping (and scripts/export_hf.py's own gdp_* notes). */
static const char *const IGNORED[] = {
    "architectures", "attn_mode", "fuse_norm", "fuse_swiglu", "fuse_cross_entropy", "fuse_linear_cross_entropy",
    "use_l2warp", "max_position_embeddings", "use_cache", "pad_token_id", "bos_token_id", "eos_token_id",
    "transformers_version", "torch_dtype", "dtype", "_name_or_path", "gdp_step", "gdp_tokenizer",
    "gdp_tied_embeddings", "model_type", "hidden_act", "attn", "num_v_heads", "conv_bias", "output_attentions",
    "output_hidden_states", "return_dict", "use_return_dict", "auto_map",
};

static bool in_list(const char *key, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(key, list[i])) return true;
    return false;
}

static char *read_text(const char *path) {
    ByteBuf b = {0};
    char err[1024];
    if (!text_read_file_err(path, &b, err, sizeof err)) gdp_fatal("import: %s", err);
    bytebuf_append(&b, "", 1);
    return (char *)b.data;
}

/* config.json -> ModelConfig; refuses what gdp.c cannot run, by key. *gdp_tied: our exporter's note
 * that the head is the embedding matrix written twice. */
static ModelConfig map_config(const char *path, bool *gdp_tied) {
    char *text = read_text(path);
    JsonValue *root = NULL;
    char err[512];
    if (!json_parse(text, strlen(text), &root, err, sizeof err)) gdp_fatal("import: %s: not JSON: %s", path, err);
    free(text);
    if (root->type != JSON_OBJECT) gdp_fatal("import: %s: not a JSON object", path);
    const char *mt = json_get_str(root, "model_type");
    const bool own = mt && !strcmp(mt, "gdp");
    if (!mt || (strcmp(mt, "gated_deltaproduct") && !own))
        gdp_fatal("import: %s: model_type is '%s': only fla's gated_deltaproduct models and gdp.c's own exports "
                  "(model_type gdp) can be imported", path, mt ? mt : "(missing)");
    const JsonValue *attn = json_get(root, "attn");
    if (attn && attn->type != JSON_NULL)
        gdp_fatal("import: %s: key 'attn' sets hybrid attention layers, which gdp.c does not have: only pure "
                  "GatedDeltaProduct models (attn = null) can be imported", path);
    const JsonValue *nv = json_get(root, "num_v_heads"), *nh = json_get(root, "num_heads");
    if (nv && nv->type != JSON_NULL && !(nh && nh->type == JSON_NUMBER && nv->number == nh->number))
        gdp_fatal("import: %s: key 'num_v_heads' (grouped value heads) differs from num_heads: gdp.c has one value "
                  "head per key head", path);
    if (json_get_bool(root, "conv_bias", false))
        gdp_fatal("import: %s: key 'conv_bias' is true: gdp.c's short convolutions have no bias", path);
    const char *act = json_get_str(root, "hidden_act");
    if (act && strcmp(act, "swish") && strcmp(act, "silu"))
        gdp_fatal("import: %s: key 'hidden_act' is '%s': gdp.c's MLP is SwiGLU (swish)", path, act);
    const JsonValue *arch = json_get(root, "architectures");
    if (arch && arch->type == JSON_ARRAY) {
        static const char *const known[] = {"GatedDeltaProductForCausalLM", "GdpForCausalLM", "GdpForTokenClassification"};
        bool ours = false;
        for (size_t i = 0; i < arch->len; i++)
            ours |= arch->items[i].type == JSON_STRING && in_list(arch->items[i].str, known + (own ? 1 : 0), own ? 2 : 1);
        if (!ours)
            gdp_fatal("import: %s: key 'architectures' does not list %s", path,
                      own ? "GdpForCausalLM or GdpForTokenClassification" : "GatedDeltaProductForCausalLM");
    }
    ModelConfig c = model_config_default();
    c.mode = GDP_MODE_HOUSEHOLDER, c.num_labels = 0, c.tokenizer[0] = 0;
    for (size_t i = 0; i < root->len; i++) {
        const char *key = root->keys[i];
        const JsonValue *v = &root->items[i];
        if (in_list(key, IGNORED, GDP_ARRAY_LEN(IGNORED))) continue;
        const bool own_key = own && in_list(key, OWN, GDP_ARRAY_LEN(OWN));
        if (!in_list(key, HONOURED, GDP_ARRAY_LEN(HONOURED)) && !own_key)
            gdp_fatal("import: %s: key '%s' is not one gdp.c knows: it may change the model, so the import stops "
                      "(remove it from config.json if it does not)", path, key);
        char val[64];
        if (v->type == JSON_STRING && own_key) snprintf(val, sizeof val, "%s", v->str);
        else if (v->type == JSON_BOOL) snprintf(val, sizeof val, "%s", v->boolean ? "true" : "false");
        else if (v->type == JSON_NUMBER) snprintf(val, sizeof val, "%.17g", v->number);
        else if (v->type == JSON_NULL && !strcmp(key, "intermediate_size")) snprintf(val, sizeof val, "0");
        else gdp_fatal("import: %s: key '%s' must be a number or a boolean%s", path, key, own_key ? " (or a string)" : "");
        if (!model_config_set(&c, key, val, err, sizeof err)) gdp_fatal("import: %s: %s", path, err);
    }
    for (size_t i = 0; i < GDP_ARRAY_LEN(HONOURED); i++)
        if (!json_get(root, HONOURED[i]))
            gdp_fatal("import: %s: key '%s' is missing: gdp.c's default may differ from the model's, so give it",
                      path, HONOURED[i]);
    *gdp_tied = json_get_bool(root, "gdp_tied_embeddings", false);
    json_free(root);
    if (!model_config_validate(&c, err, sizeof err)) gdp_fatal("import: %s: the model it describes: %s", path, err);
    return c;
}

static float *read_tensor(const SafeTensors *st, const char *name, int ndim, const int64_t *shape) {
    const SafeTensor *t = safetensors_find(st, name);
    if (!t) gdp_fatal("import: %s: tensor '%s' is missing (the config says the model has it)", st->path, name);
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char want[128] = "", got[128] = "";
        for (int i = 0; i < ndim; i++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? "," : "", (long long)shape[i]);
        for (int i = 0; i < t->ndim; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? "," : "", (long long)t->shape[i]);
        gdp_fatal("import: %s: tensor '%s' has shape [%s], the config's model needs [%s]", st->path, name, got, want);
    }
    float *host = (float *)xmalloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    char err[1024];
    if (!safetensors_read_f32(st, t, host, err, sizeof err)) gdp_fatal("import: %s", err);
    return host;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* The tokenizer.json copied to dst (checked to load first); its absolute path into cfg. */
static void import_tokenizer(const char *src, const char *dst, ModelConfig *cfg) {
    Tokenizer *tok = NULL;
    char err[1024];
    if (!tokenizer_load_err(src, &tok, err, sizeof err)) gdp_fatal("import: %s", err);
    GDP_CHECK(tok->vocab <= cfg->vocab_size, "import: %s has %d tokens, the model's vocabulary only %d", src,
              tok->vocab, cfg->vocab_size);
    tokenizer_free(tok);
    ByteBuf b = {0};
    if (!text_read_file_err(src, &b, err, sizeof err)) gdp_fatal("import: %s", err);
    FILE *f = xfopen(dst, "wb");
    xfwrite(b.data, 1, b.len, f, dst);
    if (fclose(f) != 0) gdp_fatal("import: cannot write %s: %s", dst, strerror(errno));
    bytebuf_free(&b);
    char abs[PATH_MAX];
    GDP_CHECK(realpath(dst, abs) && strlen(abs) < MODEL_PATH_LEN, "import: %s: its absolute path is too long", dst);
    snprintf(cfg->tokenizer, sizeof cfg->tokenizer, "%s", abs);
}

char *import_hf(const char *dir, const char *out) {
    char path[PATH_MAX], err[1024];
    struct stat sb;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (stat(path, &sb) != 0) gdp_fatal("import: %s: no config.json (give an fla / Hugging Face model folder)", dir);
    bool gdp_tied = false;
    ModelConfig cfg = map_config(path, &gdp_tied);

    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (stat(path, &sb) != 0) {
        char idx[PATH_MAX];
        snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
        if (stat(idx, &sb) == 0)
            gdp_fatal("import: %s holds a sharded model (model.safetensors.index.json): merge it into one "
                      "model.safetensors first (safetensors' save_file of the whole state dict)", dir);
        gdp_fatal("import: %s has no model.safetensors (pytorch .bin files are not read: save with safetensors)", dir);
    }
    SafeTensors st;
    if (!safetensors_open(path, &st, err, sizeof err)) gdp_fatal("import: %s", err);

    /* A head equal to the embeddings bit for bit is tied (our exporter writes tied heads twice). */
    const int64_t V = cfg.vocab_size, D = cfg.hidden_size;
    if (!cfg.tie_word_embeddings && gdp_tied && safetensors_find(&st, "lm_head.weight")) {
        float *e = read_tensor(&st, "model.embeddings.weight", 2, (const int64_t[]){V, D});
        float *h = read_tensor(&st, "lm_head.weight", 2, (const int64_t[]){V, D});
        cfg.tie_word_embeddings = memcmp(e, h, (size_t)(V * D) * sizeof(float)) == 0;
        free(e), free(h);
    }

    const bool to_file = ends_with(out, ".h5");
    if (!to_file && mkdir(out, 0777) != 0 && errno != EEXIST) gdp_fatal("import: cannot create folder %s: %s", out, strerror(errno));
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (stat(path, &sb) == 0) {
        char dst[PATH_MAX];
        if (to_file) snprintf(dst, sizeof dst, "%.*s.tokenizer.json", (int)(strlen(out) - 3), out);
        else snprintf(dst, sizeof dst, "%s/tokenizer.json", out);
        import_tokenizer(path, dst, &cfg);
    }

    MemorySpec spec = memory_spec_default(DEV_CPU, 1, 1);
    spec.train = false, spec.optimizer = true;
    Model m;
    ParamStore ps;
    MemoryPlan plan;
    Ctx *ctx = memory_plan_create(&cfg, &spec, 0, &m, &ps, &plan);
    for (int i = 0; i < ps.n; i++) {
        Tensor *t = ps.items[i].t;
        float *host = read_tensor(&st, t->name, t->ndim, t->shape);
        device_memcpy(t->data, DEV_CPU, host, DEV_CPU, (size_t)t->numel * sizeof(float));
        free(host);
    }
    for (int i = 0; i < st.n; i++) {
        const char *name = st.t[i].name;
        if (params_find(&ps, name)) continue;
        if (!strcmp(name, "lm_head.weight") && cfg.tie_word_embeddings) continue; /* the tied head, written out */
        gdp_fatal("import: %s: tensor '%s' is not a parameter of the model config.json describes%s", st.path, name,
                  ends_with(name, ".bias") ? " (gdp.c's layers have no biases)" : "");
    }
    safetensors_close(&st);

    Optimizer opt;
    optim_init(&opt, &ps, adamw_default_config(), 0, ps.total);
    char cfg_text[8192];
    GDP_CHECK(model_config_to_text(&cfg, cfg_text, sizeof cfg_text) > 0, "import: the model config does not fit");
    CheckpointMeta meta = {0};
    meta.step = 0;
    rng_seed(&meta.rng, 1);
    meta.config = cfg_text;
    meta.world_size = 1;
    char *written;
    if (to_file) {
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof tmp, "%s.importXXXXXX", out);
        if (!mkdtemp(tmp)) gdp_fatal("import: cannot create a folder beside %s: %s", out, strerror(errno));
        char *p = checkpoint_save(tmp, &ps, &opt, &meta, 0, NULL);
        if (rename(p, out) != 0) gdp_fatal("import: cannot move %s to %s: %s", p, out, strerror(errno));
        char latest[PATH_MAX + 16];
        snprintf(latest, sizeof latest, "%s/latest", tmp);
        unlink(latest);
        rmdir(tmp);
        free(p);
        written = (char *)xmalloc(strlen(out) + 1);
        strcpy(written, out);
    } else {
        written = checkpoint_save(out, &ps, &opt, &meta, 0, NULL);
    }
    optim_free(&opt);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
    return written;
}
