/* The model configuration: fla's GatedDeltaProductConfig names (so a config.json maps key for
 * key), plus `mode` (householder | split), `num_labels` (a per-position classification head
 * instead of the LM head) and `split_mask_trainable` (split mode: false freezes the mask at the
 * identity, as a constant instead of a parameter). Read from a `key = value` file, from `key=value` overrides, or from a
 * preset (tiny, small, base); written back in the same text form into checkpoints. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "kernels/gdp/gdp.h"

#define MODEL_PATH_LEN 512

typedef struct ModelConfig {
    int hidden_size;
    int num_hidden_layers;
    int num_heads;
    int head_dim;          /* d_k */
    double expand_v;       /* d_v = expand_v * d_k (must come out whole) */
    int num_householder;   /* n_h (householder) or r, the number of key slices (split) */
    bool use_forget_gate;
    bool allow_neg_eigval;
    bool use_short_conv;
    int conv_size;
    bool use_output_gate;
    int hidden_ratio;      /* used when intermediate_size is 0 */
    int intermediate_size; /* 0: 256 * ceil(int(hidden * hidden_ratio * 2/3) / 256), as fla */
    int vocab_size;
    double norm_eps;       /* every RMSNorm of the model, o_norm included (fla passes it to the layer) */
    bool tie_word_embeddings;
    double initializer_range;
    GdpMode mode;
    int num_labels;        /* > 0: classification head "classifier.weight" [num_labels, hidden] */
    bool split_mask_trainable; /* split mode: the mask is a parameter (default); false: a frozen identity */
    char tokenizer[MODEL_PATH_LEN]; /* tokenizer file the data was prepared with ("" = bytes) */
} ModelConfig;

/* Derived sizes. */
static inline int cfg_head_v_dim(const ModelConfig *c) { return (int)(c->expand_v * c->head_dim + 0.5); }
static inline int cfg_key_dim(const ModelConfig *c) { return c->num_heads * c->head_dim; }
static inline int cfg_value_dim(const ModelConfig *c) { return c->num_heads * cfg_head_v_dim(c); }
int cfg_intermediate(const ModelConfig *c);
/* Slots per token in the projections: n_h in householder mode, 1 in split mode. */
static inline int cfg_slots(const ModelConfig *c) { return c->mode == GDP_MODE_HOUSEHOLDER ? c->num_householder : 1; }
static inline int cfg_out_dim(const ModelConfig *c) { return c->num_labels > 0 ? c->num_labels : c->vocab_size; }

/* fla's GatedDeltaProductConfig defaults with the layer's DeltaProduct knobs (gate, negative
 * eigenvalues, n_h = 2), householder mode. */
ModelConfig model_config_default(void);
/* Presets: "tiny", "small", "base". Returns false for an unknown name. */
bool model_config_preset(ModelConfig *c, const char *name);
const char *model_config_preset_names(void);

/* One `key = value` (or `key=value`). On failure returns false with the problem in err. */
bool model_config_set(ModelConfig *c, const char *key, const char *value, char *err, size_t err_len);
/* "key=value" in one string. */
bool model_config_set_kv(ModelConfig *c, const char *kv, char *err, size_t err_len);
/* Reads a file of `key = value` lines ('#' starts a comment, blank lines ignored); a line it
 * cannot use is an error naming the file and line. A line `preset = NAME` loads a preset first. */
bool model_config_load_text(ModelConfig *c, const char *text, const char *origin, char *err, size_t err_len);
bool model_config_load_file(ModelConfig *c, const char *path, char *err, size_t err_len);
/* Whether the combination is usable (sizes positive, split mode's K % r == 0, ...). */
bool model_config_validate(const ModelConfig *c, char *err, size_t err_len);
/* Writes every key as `key = value\n` into buf (returns the length; 0 if buf is too small). */
size_t model_config_to_text(const ModelConfig *c, char *buf, size_t len);

/* The exact number of parameters the model registers (tied head counted once). */
int64_t model_config_param_count(const ModelConfig *c);
/* Forward FLOPs per token of the matmuls and the GDP op (for MFU), 2 per multiply-add. */
double model_config_flops_per_token(const ModelConfig *c, int seq_len);
