/* HDF5 checkpoints: DIR/ckpt_<step, 8 digits>.h5 and DIR/latest (a text file holding that file
 * name). Plain datasets, readable by h5py:
 *     /params/<name>   float32, the parameter's shape
 *     /optim/m/<name>  float32, same shape (AdamW first moment; absent when saved without optimizer)
 *     /optim/v/<name>
 * each dataset with a uint32 attribute crc32 (zlib's CRC-32 of its float32 bytes, checked on load
 * when present, so flipped bits are caught); attributes on the root group (strings are
 * variable-length UTF-8, which h5py reads as str):
 *     format = "gdp.c checkpoint", format_version (int), gdp_version (string), step (int64),
 *     optim_steps (int64, AdamW's update count), rng_state (uint64[4], the Rng of core/common.h),
 *     loader_state (int64[n], opaque, the caller's data-loader position), config (string of
 *     "key = value" lines), world_size (int), zero_stage (int).
 * Writing goes to ckpt_<step>.h5.tmp, H5Fclose, fsync, rename, fsync of the directory; then
 * `latest` is written the same way (tmp + rename). Only the newest keep_last checkpoints stay.
 * The file always holds the full state, whatever the world size or ZeRO stage at save, so any
 * world size can resume from it. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "core/common.h"
#include "core/params.h"
#include "train/dist.h"
#include "train/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHECKPOINT_FORMAT "gdp.c checkpoint"
#define CHECKPOINT_FORMAT_VERSION 1

/* What the caller adds to the parameters and optimizer state. */
typedef struct CheckpointMeta {
    int64_t step;
    Rng rng;
    const int64_t *loader_state; /* may be NULL when n_loader is 0 */
    int n_loader;
    const char *config;          /* "key = value" lines; NULL is stored as "" */
    int world_size;              /* 0: taken from dist (1 when dist is NULL) */
    int zero_stage;
} CheckpointMeta;

/* Everything a load gives back besides the tensors. Free with checkpoint_info_free. */
typedef struct CheckpointInfo {
    int64_t step, optim_steps;
    Rng rng;
    int64_t *loader_state;
    int n_loader;
    char *config;
    char gdp_version[32];
    int format_version, world_size, zero_stage;
    bool has_optim;
} CheckpointInfo;

/* Collective when dist has world > 1: every rank calls it; under ZeRO-1 (opt->sharded) the m/v
 * shards are gathered to rank 0, which alone writes. opt may be NULL (parameters only); dist may
 * be NULL (one process). keep_last <= 0 keeps every checkpoint. Returns the path written
 * (malloc'd; NULL on ranks other than 0). A write error is fatal and names the file. */
char *checkpoint_save(const char *dir, ParamStore *ps, Optimizer *opt, const CheckpointMeta *meta, int keep_last,
                      Dist *dist);

/* Reads path into ps (every parameter must be present with the same shape; extra names in the
 * file are an error too) and, when opt is not NULL, this rank's shard of m and v (the file must
 * hold optimizer state then) and opt->t. info may be NULL. Any problem (not HDF5, not a gdp.c
 * checkpoint, a newer format, truncated or corrupt, a missing or mismatched parameter) is a fatal
 * error naming the file and what is wrong. Every rank may call it on the same file. */
void checkpoint_load(const char *path, ParamStore *ps, Optimizer *opt, CheckpointInfo *info);
/* Only the metadata (no tensors): same checks of the format. */
void checkpoint_read_info(const char *path, CheckpointInfo *info);
/* Only the config string (malloc'd), for generate/eval to rebuild the model before loading. */
char *checkpoint_read_config(const char *path);
void checkpoint_info_free(CheckpointInfo *info);

/* DIR/<name in DIR/latest> (malloc'd), or NULL when DIR has no latest file. A latest file naming
 * a missing checkpoint is a fatal error. */
char *checkpoint_latest(const char *dir);
/* "DIR/ckpt_00000042.h5" into buf. */
void checkpoint_path(char *buf, size_t len, const char *dir, int64_t step);
/* Deletes all but the newest keep_last ckpt_*.h5 of DIR (never `protect`, which may be NULL). */
void checkpoint_prune(const char *dir, int keep_last, const char *protect);

#ifdef __cplusplus
}
#endif
