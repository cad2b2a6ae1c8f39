/* HDF5 checkpoints: DIR/ckpt_<step, 8 digits>.h5 and DIR/latest (a text file holding that file
 * name). Plain datasets, readable by h5py:
 *     /params/<name>   float32, the parameter's shape
 *     /optim/m/<name>  float32, same shape (AdamW first moment; absent when saved without optimizer)
 *     /optim/v/<name>
 * each dataset with a uint32 attribute crc32 (zlib's CRC-32 of its float32 bytes, required and
 * checked on load); attributes on the root group (strings are variable-length UTF-8, which h5py
 * reads as str):
 *     format = "gdp.c checkpoint", format_version (int), gdp_version (string), step (int64, >= 0),
 *     optim_steps (int64, AdamW's update count, 0 to step: skipped steps advance step only),
 *     rng_state (uint64[4], the Rng of base/common.h), loader_state (int64[n], opaque, the caller's
 *     data-loader position), train_state (float64[n], opaque, the trainer's own state; absent in
 *     older files), config (string of "key = value" lines), world_size (int), zero_stage (0 or 1).
 * Whole-file check: the file starts with a 512-byte HDF5 user block (HDF5 and h5py skip it) holding
 *     bytes [0, 16)  "gdp.c checkpoint"     [16, 24) the file's size, uint64 little-endian
 *     bytes [24, 28) CRC-32 of the whole file, these 4 bytes counted as zeros (uint32 LE)
 *     bytes [28, 32) the header layout, 1   the rest zeros
 * checked before HDF5 reads anything (a flipped byte in HDF5's metadata can crash libhdf5). Files
 * of older gdp.c versions (no user block) still load, with a warning. A file edited with h5py no
 * longer matches its CRC: tools that edit checkpoints must recompute it.
 * Writing builds the file in memory, writes it to ckpt_<step>.h5.tmp with write() + fsync (on a
 * failure the .tmp is removed and the error names it), renames it, fsyncs the directory; then
 * `latest` is written the same way (tmp + rename), and any .tmp a killed run left in DIR is
 * deleted. Only the newest keep_last checkpoints stay. HDF5's object timestamps are off, so the
 * same state always gives the same bytes (a resumed run's file compares equal to an uninterrupted
 * run's with cmp).
 * The file always holds the full state, whatever the world size or ZeRO stage at save, so any
 * world size can resume from it. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "base/common.h"
#include "core/params.h"
#include "train/dist.h"
#include "train/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CHECKPOINT_FORMAT "gdp.c checkpoint"
#define CHECKPOINT_FORMAT_VERSION 1
#define CHECKPOINT_MAX_STATE 4096           /* values in loader_state and train_state, each */
#define CHECKPOINT_MAX_STEP ((int64_t)1 << 50)
#define CKPT_HEADER_BYTES 512
#define CKPT_HEADER_MAGIC "gdp.c checkpoint"
#define CKPT_HEADER_MAGIC_LEN 16
#define CKPT_HEADER_SIZE_AT 16
#define CKPT_HEADER_CRC_AT 24
#define CKPT_HEADER_VERSION 1

/* What the caller adds to the parameters and optimizer state. */
typedef struct CheckpointMeta {
    int64_t step;
    Rng rng;
    const int64_t *loader_state; /* may be NULL when n_loader is 0 */
    int n_loader;
    const char *config;          /* "key = value" lines; NULL is stored as "" */
    int world_size;              /* 0: taken from dist (1 when dist is NULL) */
    int zero_stage;
    const double *train_state;   /* may be NULL when n_train_state is 0 */
    int n_train_state;
} CheckpointMeta;

/* Everything a load gives back besides the tensors. Free with checkpoint_info_free. */
typedef struct CheckpointInfo {
    int64_t step, optim_steps;
    Rng rng;
    int64_t *loader_state;
    int n_loader;
    double *train_state;         /* NULL when the file has none */
    int n_train_state;
    char *config;
    char gdp_version[32];
    int format_version, world_size, zero_stage;
    bool has_optim;
} CheckpointInfo;

/* Collective when dist has world > 1: every rank calls it; under ZeRO-1 (opt->sharded) the m/v
 * shards are gathered to rank 0, which alone writes. opt may be NULL (parameters only); dist may
 * be NULL (one process). keep_last <= 0 keeps every checkpoint. Returns the path written
 * (malloc'd; NULL on ranks other than 0). A write error (disk full, ...) is fatal, names the file
 * and leaves no .tmp; a NaN or Inf in the parameters or moments is fatal before anything is
 * written. Either way the directory's earlier checkpoints and `latest` are untouched. */
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
/* The checkpoint to resume DIR from (malloc'd; NULL when DIR has no ckpt_*.h5): the one `latest`
 * names when that is the newest file, else the newest that passes the whole-file check, with the
 * reason (and any file skipped as corrupt) in note ("" when `latest` was used). */
char *checkpoint_find_resume(const char *dir, char *note, size_t len);
/* Whether path passes the whole-file check; else false with the reason in why (may be NULL). */
bool checkpoint_verify(const char *path, char *why, size_t len);
/* Whether checkpoint_load would open path: it passes the whole-file check, or it is an older gdp.c
 * checkpoint without one (read on its datasets' checksums); else false with the reason in why. */
bool checkpoint_readable(const char *path, char *why, size_t len);
/* "DIR/ckpt_00000042.h5" into buf. */
void checkpoint_path(char *buf, size_t len, const char *dir, int64_t step);
/* Deletes all but the newest keep_last ckpt_*.h5 of DIR (never `protect`, which may be NULL). */
void checkpoint_prune(const char *dir, int keep_last, const char *protect);

#ifdef __cplusplus
}
#endif
