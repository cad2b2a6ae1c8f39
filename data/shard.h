/* Token shards in llm.c's format, so that gdp.c trains on shards made by llm.c's own scripts
 * (GPT-2 tokens) unchanged, and llm.c could read ours of small vocabularies.
 *
 * A shard is a header of 256 little-endian int32, then the tokens:
 *     header[0] magic    20240520 (llm.c), or 20240801 (llm.c's llama-3 writer, read only)
 *     header[1] version  1: uint16 tokens (llm.c's GPT-2 shards, and ours when every id fits)
 *                        2: uint32 tokens (gdp.c, for vocabularies over 65536) with magic 20240520
 *                        7: uint32 tokens with the llama magic 20240801 (llm.c's llama-3 shards)
 *     header[2] number of tokens N; header[3..255] zero
 *     then N tokens of 2 or 4 bytes; the file is exactly 1024 + N * width bytes.
 * Offsets are 64-bit throughout (a shard may exceed 2 GiB). A problem with a shard (too short
 * for the header, a bad magic, an unknown version, a size that does not match the count, a token
 * >= the vocabulary) is an error that names the file. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define SHARD_MAGIC 20240520
#define SHARD_MAGIC_LLAMA 20240801
#define SHARD_VERSION_U16 1
#define SHARD_VERSION_U32 2
#define SHARD_VERSION_LLAMA 7

typedef struct ShardInfo {
    int32_t magic, version;
    int token_bytes;    /* 2 or 4 */
    int64_t n_tokens;
    int64_t file_bytes;
} ShardInfo;

/* Token width for a vocabulary: 2 when every id < vocab fits in uint16 (vocab <= 65536), else 4. */
int shard_token_bytes_for_vocab(int64_t vocab);

/* Reads and checks the header of path against the file size. Returns false with a message naming
 * the file in err on any problem. */
bool shard_inspect_err(const char *path, ShardInfo *info, char *err, size_t errlen);
ShardInfo shard_inspect(const char *path); /* fatal on error */

/* Reads tokens [start, start + count) of an open shard (fd from open(2)) into out as uint32.
 * Returns false with a message naming path on a short read. */
bool shard_read_tokens_err(int fd, const char *path, const ShardInfo *info, int64_t start, int64_t count,
                           uint32_t *out, char *err, size_t errlen);
/* Checks that every token of the shard is < vocab; false with the file, the position and the
 * token in err otherwise. */
bool shard_check_tokens_err(const char *path, const ShardInfo *info, int64_t vocab, char *err, size_t errlen);
/* The whole shard (checked), malloc'd; info may be NULL. */
uint32_t *shard_read_all(const char *path, ShardInfo *info);

/* Streaming writer: the header is written with the final count at close. The data go to
 * "<path>.tmp", renamed to path by shard_writer_close, so a crash never leaves a half shard
 * under the real name. Write errors are fatal and name the file. */
typedef struct ShardWriter {
    FILE *f;
    char *path, *tmp_path;
    int token_bytes;
    int64_t n_tokens;
    uint8_t *buf;
    size_t buf_cap;
} ShardWriter;
void shard_writer_open(ShardWriter *w, const char *path, int token_bytes);
/* Every token must fit the width (checked). */
void shard_writer_append(ShardWriter *w, const uint32_t *tokens, int64_t n);
void shard_writer_close(ShardWriter *w);
/* One call: header + tokens. */
void shard_write(const char *path, const uint32_t *tokens, int64_t n, int token_bytes);

#ifdef __cplusplus
}
#endif
