#include "layers/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

int cfg_intermediate(const ModelConfig *c) {
    if (c->intermediate_size > 0) return c->intermediate_size;
    int h = (int)((double)c->hidden_size * c->hidden_ratio * 2.0 / 3.0);
    return 256 * ((h + 255) / 256);
}

ModelConfig model_config_default(void) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    c.hidden_size = 2048;
    c.num_hidden_layers = 21;
    c.num_heads = 6;
    c.head_dim = 256;
    c.expand_v = 2.0;
    c.num_householder = 2;
    c.use_forget_gate = true;
    c.allow_neg_eigval = true;
    c.use_short_conv = true;
    c.conv_size = 4;
    c.use_output_gate = true;
    c.hidden_ratio = 4;
    c.intermediate_size = 0;
    c.vocab_size = 32000;
    c.norm_eps = 1e-6;
    c.tie_word_embeddings = false;
    c.initializer_range = 0.02;
    c.mode = GDP_MODE_HOUSEHOLDER;
    c.num_labels = 0;
    c.split_mask_trainable = true;
    return c;
}

bool model_config_preset(ModelConfig *c, const char *name) {
    ModelConfig d = model_config_default();
    if (!strcmp(name, "tiny")) {
        /* CPU in CI: trains in minutes on 2 cores, byte vocabulary. */
        d.hidden_size = 64, d.num_hidden_layers = 2, d.num_heads = 2, d.head_dim = 32, d.expand_v = 1;
        d.intermediate_size = 128, d.vocab_size = 256, d.tie_word_embeddings = true;
    } else if (!strcmp(name, "small")) {
        /* ~20M parameters with an 8192-token vocabulary (13.4M without the embeddings). */
        d.hidden_size = 384, d.num_hidden_layers = 6, d.num_heads = 6, d.head_dim = 64, d.expand_v = 1;
        d.vocab_size = 8192, d.tie_word_embeddings = false;
    } else if (!strcmp(name, "base")) {
        /* The GPU comparison model: 155.7M parameters at n_h = 2 with vocab 32000, untied. */
        d.hidden_size = 768, d.num_hidden_layers = 12, d.num_heads = 6, d.head_dim = 128, d.expand_v = 1;
        d.num_householder = 2, d.vocab_size = 32000, d.tie_word_embeddings = false;
    } else {
        return false;
    }
    *c = d;
    return true;
}

const char *model_config_preset_names(void) { return "tiny, small, base"; }

/* ---- parsing ------------------------------------------------------------------------------------- */

static bool parse_int(const char *v, int lo, int hi, int *out) {
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return false;
    *out = (int)x;
    return true;
}

static bool parse_double(const char *v, double lo, double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || isnan(x) || x < lo || x > hi) return false;
    *out = x;
    return true;
}

static bool parse_bool(const char *v, bool *out) {
    if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1") || !strcmp(v, "yes")) return *out = true, true;
    if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0") || !strcmp(v, "no")) return *out = false, true;
    return false;
}

typedef enum { K_INT, K_DOUBLE, K_BOOL, K_MODE, K_STR } KeyKind;
typedef struct KeyDef {
    const char *key;
    KeyKind kind;
    size_t offset;
    double lo, hi;
} KeyDef;

#define OFF(f) offsetof(ModelConfig, f)
static const KeyDef keys[] = {
    {"hidden_size", K_INT, OFF(hidden_size), 1, 1 << 16},
    {"num_hidden_layers", K_INT, OFF(num_hidden_layers), 1, 1024},
    {"num_heads", K_INT, OFF(num_heads), 1, 1024},
    {"head_dim", K_INT, OFF(head_dim), 1, 256},
    {"expand_v", K_DOUBLE, OFF(expand_v), 0.0625, 16},
    {"num_householder", K_INT, OFF(num_householder), 1, 16},
    {"use_forget_gate", K_BOOL, OFF(use_forget_gate), 0, 0},
    {"allow_neg_eigval", K_BOOL, OFF(allow_neg_eigval), 0, 0},
    {"use_short_conv", K_BOOL, OFF(use_short_conv), 0, 0},
    {"conv_size", K_INT, OFF(conv_size), 1, 64},
    {"use_output_gate", K_BOOL, OFF(use_output_gate), 0, 0},
    {"hidden_ratio", K_INT, OFF(hidden_ratio), 1, 64},
    {"intermediate_size", K_INT, OFF(intermediate_size), 0, 1 << 20},
    {"vocab_size", K_INT, OFF(vocab_size), 1, 1 << 24},
    {"norm_eps", K_DOUBLE, OFF(norm_eps), 0, 1},
    {"tie_word_embeddings", K_BOOL, OFF(tie_word_embeddings), 0, 0},
    {"initializer_range", K_DOUBLE, OFF(initializer_range), 0, 10},
    {"mode", K_MODE, OFF(mode), 0, 0},
    {"num_labels", K_INT, OFF(num_labels), 0, 1 << 24},
    {"split_mask_trainable", K_BOOL, OFF(split_mask_trainable), 0, 0},
    {"tokenizer", K_STR, OFF(tokenizer), 0, 0},
};

bool model_config_set(ModelConfig *c, const char *key, const char *value, char *err, size_t err_len) {
    if (!strcmp(key, "preset")) {
        if (model_config_preset(c, value)) return true;
        snprintf(err, err_len, "unknown preset '%s': use one of %s", value, model_config_preset_names());
        return false;
    }
    for (size_t i = 0; i < GDP_ARRAY_LEN(keys); i++) {
        const KeyDef *k = &keys[i];
        if (strcmp(k->key, key)) continue;
        char *field = (char *)c + k->offset;
        bool ok = false;
        const char *want = "";
        switch (k->kind) {
        case K_INT:
            ok = parse_int(value, (int)k->lo, (int)k->hi, (int *)field);
            want = "a whole number in range";
            if (!ok) {
                snprintf(err, err_len, "%s = '%s': use a whole number from %d to %d", key, value, (int)k->lo,
                         (int)k->hi);
                return false;
            }
            break;
        case K_DOUBLE:
            ok = parse_double(value, k->lo, k->hi, (double *)field);
            if (!ok) {
                snprintf(err, err_len, "%s = '%s': use a number from %g to %g", key, value, k->lo, k->hi);
                return false;
            }
            break;
        case K_BOOL: ok = parse_bool(value, (bool *)field), want = "true or false"; break;
        case K_MODE:
            if (!strcmp(value, "householder")) *(GdpMode *)field = GDP_MODE_HOUSEHOLDER, ok = true;
            if (!strcmp(value, "split")) *(GdpMode *)field = GDP_MODE_SPLIT, ok = true;
            want = "householder or split";
            break;
        case K_STR:
            ok = strlen(value) < MODEL_PATH_LEN;
            if (ok) snprintf(field, MODEL_PATH_LEN, "%s", value);
            want = "a path shorter than 512 characters";
            break;
        }
        if (!ok) snprintf(err, err_len, "%s = '%s': use %s", key, value, want);
        return ok;
    }
    snprintf(err, err_len, "unknown model config key '%s' (keys: hidden_size, num_hidden_layers, num_heads, head_dim, "
             "expand_v, num_householder, use_forget_gate, allow_neg_eigval, use_short_conv, conv_size, "
             "use_output_gate, hidden_ratio, intermediate_size, vocab_size, norm_eps, tie_word_embeddings, "
             "initializer_range, mode, num_labels, split_mask_trainable, tokenizer, preset)", key);
    return false;
}

static char *trim(char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

bool model_config_set_kv(ModelConfig *c, const char *kv, char *err, size_t err_len) {
    const char *eq = strchr(kv, '=');
    if (!eq) {
        snprintf(err, err_len, "'%s' is not key=value", kv);
        return false;
    }
    char key[128], value[MODEL_PATH_LEN + 8];
    size_t kl = (size_t)(eq - kv);
    if (kl >= sizeof key || strlen(eq + 1) >= sizeof value) {
        snprintf(err, err_len, "'%s' is too long", kv);
        return false;
    }
    memcpy(key, kv, kl), key[kl] = 0;
    snprintf(value, sizeof value, "%s", eq + 1);
    return model_config_set(c, trim(key), trim(value), err, err_len);
}

bool model_config_load_text(ModelConfig *c, const char *text, const char *origin, char *err, size_t err_len) {
    char *copy = (char *)xmalloc(strlen(text) + 1);
    strcpy(copy, text);
    int lineno = 0;
    bool ok = true;
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line && ok; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *s = trim(line);
        if (!*s) continue;
        char inner[512];
        if (!model_config_set_kv(c, s, inner, sizeof inner)) {
            snprintf(err, err_len, "%s line %d: %s", origin, lineno, inner);
            ok = false;
        }
    }
    free(copy);
    return ok;
}

bool model_config_load_file(ModelConfig *c, const char *path, char *err, size_t err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_len, "cannot open model config '%s': %s", path, strerror(errno));
        return false;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || n > (1 << 20)) {
        fclose(f);
        snprintf(err, err_len, "model config '%s' is not a small text file", path);
        return false;
    }
    char *buf = (char *)xmalloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = 0;
    bool ok = model_config_load_text(c, buf, path, err, err_len);
    free(buf);
    return ok;
}

bool model_config_validate(const ModelConfig *c, char *err, size_t err_len) {
    int dv = cfg_head_v_dim(c);
    if (fabs(c->expand_v * c->head_dim - dv) > 1e-9 || dv < 1 || dv > 256) {
        snprintf(err, err_len, "expand_v %g * head_dim %d must be a whole number from 1 to 256", c->expand_v,
                 c->head_dim);
        return false;
    }
    if (c->mode == GDP_MODE_SPLIT && c->head_dim % c->num_householder) {
        snprintf(err, err_len, "split mode cuts head_dim %d into num_householder %d slices: it must divide evenly",
                 c->head_dim, c->num_householder);
        return false;
    }
    if (c->num_labels == 0 && c->vocab_size < 2) {
        snprintf(err, err_len, "vocab_size %d is too small", c->vocab_size);
        return false;
    }
    if (c->num_labels > 0 && c->tie_word_embeddings) {
        snprintf(err, err_len, "a classification head (num_labels %d) cannot be tied to the embeddings: set "
                 "tie_word_embeddings = false", c->num_labels);
        return false;
    }
    return true;
}

size_t model_config_to_text(const ModelConfig *c, char *buf, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < GDP_ARRAY_LEN(keys); i++) {
        const KeyDef *k = &keys[i];
        const char *field = (const char *)c + k->offset;
        char v[MODEL_PATH_LEN + 32];
        switch (k->kind) {
        case K_INT: snprintf(v, sizeof v, "%d", *(const int *)field); break;
        case K_DOUBLE: snprintf(v, sizeof v, "%.17g", *(const double *)field); break;
        case K_BOOL: snprintf(v, sizeof v, "%s", *(const bool *)field ? "true" : "false"); break;
        case K_MODE: snprintf(v, sizeof v, "%s", *(const GdpMode *)field == GDP_MODE_SPLIT ? "split" : "householder"); break;
        case K_STR: snprintf(v, sizeof v, "%s", field); break;
        }
        if (k->kind == K_STR && !v[0]) continue;
        int w = snprintf(buf + n, len > n ? len - n : 0, "%s = %s\n", k->key, v);
        if (w < 0 || n + (size_t)w >= len) return 0;
        n += (size_t)w;
    }
    return n;
}

/* ---- sizes --------------------------------------------------------------------------------------- */

static int64_t layer_params(const ModelConfig *c) {
    int64_t D = c->hidden_size, H = c->num_heads, kd = cfg_key_dim(c), vd = cfg_value_dim(c);
    int64_t s = cfg_slots(c), W = c->conv_size, I = cfg_intermediate(c);
    int64_t p = 0;
    p += D;                                  /* attn_norm */
    p += kd * D + s * kd * D + s * vd * D;   /* q, k, v */
    p += s * H * D;                          /* b_proj */
    if (c->use_forget_gate) p += H * D + 2 * H; /* a_proj, A_log, dt_bias */
    if (c->use_output_gate) p += vd * D;     /* g_proj */
    if (c->use_short_conv) p += W * (kd + s * kd + s * vd);
    if (c->mode == GDP_MODE_SPLIT && c->split_mask_trainable) p += H * c->num_householder * c->num_householder; /* mask */
    p += cfg_head_v_dim(c);                  /* o_norm */
    p += vd * D;                             /* o_proj */
    p += D;                                  /* mlp_norm */
    p += 3 * D * I;                          /* gate, up, down */
    return p;
}

int64_t model_config_param_count(const ModelConfig *c) {
    int64_t D = c->hidden_size;
    int64_t p = (int64_t)c->vocab_size * D + D; /* embeddings, final norm */
    p += c->num_hidden_layers * layer_params(c);
    if (c->num_labels > 0)
        p += (int64_t)c->num_labels * D;
    else if (!c->tie_word_embeddings)
        p += (int64_t)c->vocab_size * D;
    return p;
}

double model_config_flops_per_token(const ModelConfig *c, int seq_len) {
    (void)seq_len;
    double D = c->hidden_size, H = c->num_heads, K = c->head_dim, V = cfg_head_v_dim(c);
    double kd = cfg_key_dim(c), vd = cfg_value_dim(c), s = cfg_slots(c), I = cfg_intermediate(c);
    double mm = kd * D + s * kd * D + s * vd * D + s * H * D + vd * D + 3 * D * I;
    if (c->use_forget_gate) mm += H * D;
    if (c->use_output_gate) mm += vd * D;
    double per_layer = 2 * mm;
    /* The recurrence: per head and slot a read S^T k and a rank-1 write (2 K V each), and the
     * output read S^T q (2 K V). */
    double n = c->num_householder;
    per_layer += H * (4 * n * K * V + 2 * K * V);
    return c->num_hidden_layers * per_layer + 2 * D * cfg_out_dim(c);
}
