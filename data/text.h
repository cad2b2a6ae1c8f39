/* Reading text corpora (plain or gzip, through zlib) and the train/val split of a text.
 *
 * The split is by blocks so that validation text comes from all over the corpus (a dictionary is
 * alphabetical: holding out its last 5% would hold out only the words from "T" on). The text is
 * cut into blocks of text_split_block(n) bytes (n/256 clamped to [1 KiB, 64 KiB]), each extended
 * to the next newline when one follows within another block; block i goes to val when
 * floor((i+1)*f + 1/2) > floor(i*f + 1/2) (the share f of the blocks, evenly spread), the rest to
 * train. f = 0 puts everything in train. `gdp prepare` and the loader's plain-text path use the same rule. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The split block size for a text of n bytes. */
size_t text_split_block(size_t n);

typedef struct ByteBuf {
    uint8_t *data;
    size_t len, cap;
} ByteBuf;

/* Makes room for `extra` more bytes after len. */
void bytebuf_reserve(ByteBuf *b, size_t extra);
void bytebuf_append(ByteBuf *b, const void *src, size_t n);
void bytebuf_free(ByteBuf *b);

/* Appends the whole file (gzip, dictzip or plain: zlib tells them apart by the gzip magic) to out.
 * Returns false with a message naming the file in err (a missing file, a read error, a corrupt
 * gzip stream); out keeps what was appended before the failure. */
bool text_read_file_err(const char *path, ByteBuf *out, char *err, size_t errlen);
/* Same, fatal on error. */
void text_read_file(const char *path, ByteBuf *out);

/* Appends the train and val parts of text[0, n) to train and val (either may be NULL). */
void text_split(const uint8_t *text, size_t n, double val_fraction, ByteBuf *train, ByteBuf *val);

/* True when path names a token shard (ends in ".bin") rather than text. */
bool path_is_shard_name(const char *path);

#ifdef __cplusplus
}
#endif
