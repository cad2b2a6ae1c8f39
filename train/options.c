/* TrainOptions: their defaults, and what they resolve to before a run starts: the model config
 * (preset, config file, --set), bf16 autocast and the memory plan's description of the step. */
#include <stdio.h>
#include <string.h>

#include "base/common.h"
#include "data/loader.h"
#include "train/train.h"

TrainOptions train_default_options(void) {
    TrainOptions o;
    memset(&o, 0, sizeof o);
    o.val_fraction = LOADER_DEFAULT_VAL_FRACTION;
    o.device = "cpu";
    o.steps = 1000;
    o.batch = 8, o.seq = 256, o.grad_accum = 1;
    o.lr = 1e-3, o.final_lr_frac = 0.1, o.warmup = -1, o.schedule = LR_COSINE;
    o.clip = 1.0, o.weight_decay = 0.1, o.beta1 = 0.9, o.beta2 = 0.95, o.eps = 1e-8;
    o.eval_every = 100, o.eval_batches = 8;
    o.checkpoint_every = 0, o.keep = 3;
    o.seed = 1;
    o.bucket_mb = 25;
    o.print_every = 1;
    o.peak_tflops = 989.0;
    o.bf16_gemm_copies = true;
    o.max_skips = 10;
    o.skip_window = 128;
    o.documents = -1, o.eot = -1, o.loss_across_docs = true;
    return o;
}

static bool text_mentions_key(const char *text, const char *key) {
    for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) {
        bool start = p == text || p[-1] == '\n' || p[-1] == ' ' || p[-1] == '\t';
        const char *q = p + strlen(key);
        while (*q == ' ' || *q == '\t') q++;
        if (start && *q == '=') return true;
    }
    return false;
}

bool train_resolve_config(const TrainOptions *o, ModelConfig *cfg, bool *vocab_given, char *err, size_t len) {
    *cfg = model_config_default();
    *vocab_given = false;
    const char *preset = o->preset ? o->preset : (o->config_file ? NULL : "tiny");
    if (preset && !model_config_preset(cfg, preset)) {
        snprintf(err, len, "unknown preset '%s': use one of %s", preset, model_config_preset_names());
        return false;
    }
    if (o->config_file) {
        if (!model_config_load_file(cfg, o->config_file, err, len)) return false;
        FILE *f = fopen(o->config_file, "rb");
        if (f) {
            char buf[1 << 16];
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            buf[n] = 0;
            fclose(f);
            *vocab_given |= text_mentions_key(buf, "vocab_size");
        }
    }
    for (int i = 0; i < o->n_sets; i++) {
        if (!model_config_set_kv(cfg, o->sets[i], err, len)) return false;
        *vocab_given |= text_mentions_key(o->sets[i], "vocab_size");
    }
    return model_config_validate(cfg, err, len);
}

bool train_autocast_bf16(const TrainOptions *o, Device dev) {
    if (!o->autocast || !strcmp(o->autocast, "auto")) return dev == DEV_CUDA;
    if (!strcmp(o->autocast, "off")) return false;
    GDP_CHECK(!strcmp(o->autocast, "bf16"), "--autocast '%s': use bf16, off or auto", o->autocast);
    GDP_CHECK(dev == DEV_CUDA, "--autocast bf16 needs --device cuda (the cpu runs f32); drop it or use --autocast off");
    return true;
}

bool train_bf16_activations(const TrainOptions *o, Device dev) {
    return train_autocast_bf16(o, dev) && !o->f32_activations;
}

MemorySpec train_memory_spec(const TrainOptions *o, Device dev, const Dist *dist) {
    MemorySpec s = memory_spec_default(dev, o->batch, o->seq);
    s.recompute = o->recompute;
    s.selective_recompute = o->selective_recompute;
    s.autocast_bf16 = train_autocast_bf16(o, dev);
    s.bf16_activations = train_bf16_activations(o, dev);
    s.autocast_gemm_copies = s.autocast_bf16 && !s.bf16_activations && o->bf16_gemm_copies;
    s.optimizer = true;
    s.zero_stage = o->zero_stage;
    s.rank = dist ? dist->rank : 0, s.world = dist ? dist->world : 1;
    const double MiB = 1024.0 * 1024.0;
    s.limit_bytes = (size_t)(o->mem_limit_mb * MiB);
    s.persist_bytes = (size_t)(o->persist_mem_mb * MiB);
    s.act_bytes = (size_t)(o->act_mem_mb * MiB);
    s.grad_bytes = (size_t)(o->grad_mem_mb * MiB);
    s.scratch_bytes = (size_t)(o->scratch_mem_mb * MiB);
    return s;
}
