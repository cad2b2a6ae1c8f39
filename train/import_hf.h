/* An fla / Hugging Face GatedDeltaProduct folder (config.json, model.safetensors, optionally
 * tokenizer.json) as a gdp.c checkpoint: parameters by their fla names (which are ours), the config
 * mapped key by key, fresh AdamW moments (step 0), so gdp train --resume, eval and generate take it.
 * Every config key is either honoured, known not to change the model, or refused by name; every
 * tensor of the file must be a parameter of the model it describes. */
#pragma once

/* out ending in ".h5": that file; otherwise a folder that gets ckpt_00000000.h5 and `latest`.
 * A tokenizer.json is copied beside the checkpoint (<out>.tokenizer.json, or DIR/tokenizer.json for
 * a folder) and recorded in its config. Returns the checkpoint's path (malloc'd). Any problem is a
 * fatal error naming the file and the key or tensor. */
char *import_hf(const char *dir, const char *out);
