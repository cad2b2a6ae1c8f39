/* Tokenizers: byte-level (vocab 256: token = byte) and a byte-level BPE trained by `gdp prepare`.
 * Both round-trip any byte string exactly: decode(encode(x)) == x.
 *
 * BPE. Text is first cut into chunks by a fixed pre-tokenizer (bpe_chunk_end; a simplified GPT-2
 * rule: an optional leading space plus a run of letters (ASCII letters and every byte >= 0x80, so
 * UTF-8 stays together), or of digits, or of other symbols; whitespace runs alone, leaving their
 * last space to the word after; chunks at most BPE_MAX_CHUNK bytes). Merges never cross chunks, so
 * the concatenation of the chunks' tokens is the text. Token i < 256 is byte i; merge k joins the
 * pair (left, right) into token 256 + k.
 *
 * Training (tokenizer_train_bpe) counts the distinct chunks of a sample of the text (evenly
 * spaced blocks adding up to sample_bytes; `gdp prepare --bpe-sample MB`), then merges the most
 * frequent adjacent pair (ties: the smaller (left, right)) until the vocabulary is full or no pair
 * occurs twice. Pair counts are updated incrementally: each merge visits only the chunks that hold
 * the pair (a list per pair) and applies to the counts the difference between the chunk's pairs
 * before and after; a max-heap with lazy re-insertion picks the next pair. The cost therefore
 * grows with the number of distinct chunks, not with the text, and the result is deterministic.
 * Encoding applies, inside each chunk, the lowest-ranked merge present until none is left (the
 * same result as replaying the merges in order), through a pair -> rank hash table; long inputs
 * also cache each distinct chunk's tokens.
 *
 * Tokenizer file (`tokenizer.bin` beside the shards), little-endian:
 *     int32 header[64]: [0] magic 20250301, [1] version 1, [2] kind (1 byte, 2 bpe),
 *                       [3] vocab size, [4] number of merges M (vocab - 256),
 *                       [5] pre-tokenizer id (1, the rule above), [6] BPE_MAX_CHUNK, rest 0
 *     int32 merges[M][2]: (left, right) of merge k, producing token 256 + k; both < 256 + k.
 * llm.c's GPT-2 tokenizer file (magic 20240328; uint32 header[256], then per token a length byte
 * and the bytes) loads too, for decoding only (llm.c's files do not hold the merges). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TOKENIZER_MAGIC 20250301
#define TOKENIZER_VERSION 1
#define TOKENIZER_LLMC_MAGIC 20240328
#define TOKENIZER_FILE "tokenizer.bin"
#define BPE_PRETOKENIZER_ID 1
#define BPE_MAX_CHUNK 64
#define BPE_MAX_VOCAB (1 << 20)

typedef enum TokenizerKind { TOKENIZER_BYTE = 1, TOKENIZER_BPE = 2, TOKENIZER_LLMC = 3 } TokenizerKind;

typedef struct Tokenizer {
    TokenizerKind kind;
    int vocab;
    int n_merges;
    int32_t *merges;   /* [n_merges][2] */
    int eot;           /* end-of-text token of an llm.c file (version 2), else -1 */
    int64_t *tok_off;  /* [vocab + 1] offsets of each token's bytes in tok_bytes */
    uint8_t *tok_bytes;
    uint64_t *rank_keys; /* pair -> merge rank, open addressing; key = (left << 32 | right) + 1, 0 empty */
    int32_t *rank_vals;
    size_t rank_cap;
} Tokenizer;

typedef struct BpeTrainStats {
    size_t sample_bytes;   /* bytes the merges were learned from */
    int64_t distinct_chunks;
    int merges;            /* may be fewer than asked when no pair occurs twice */
    double seconds;
} BpeTrainStats;

Tokenizer *tokenizer_byte(void);
/* Learns vocab - 256 merges (vocab in [256, BPE_MAX_VOCAB]) from a sample of text. sample_bytes 0
 * means all of it. stats may be NULL. */
Tokenizer *tokenizer_train_bpe(const uint8_t *text, size_t n, int vocab, size_t sample_bytes, BpeTrainStats *stats);
/* Builds a BPE tokenizer from merges (checked like a file's); for tests and loading. */
Tokenizer *tokenizer_from_merges(const int32_t *merges, int n_merges);
void tokenizer_free(Tokenizer *t);

bool tokenizer_can_encode(const Tokenizer *t);
/* Encodes text[0, n) into out (room for n tokens is always enough); returns the token count.
 * Fatal for a decode-only tokenizer. */
int64_t tokenizer_encode(const Tokenizer *t, const uint8_t *text, size_t n, uint32_t *out);
/* The bytes of one token (fatal when id >= vocab). */
const uint8_t *tokenizer_token_bytes(const Tokenizer *t, uint32_t id, size_t *len);
/* Writes at most cap bytes to out and returns the full decoded length (call with cap 0 to size). */
size_t tokenizer_decode(const Tokenizer *t, const uint32_t *tokens, int64_t n, uint8_t *out, size_t cap);

/* End of the pre-tokenizer chunk that starts at i < n. */
size_t bpe_chunk_end(const uint8_t *s, size_t n, size_t i);

void tokenizer_save(const Tokenizer *t, const char *path);
/* Ours or llm.c's file; false with a message naming the file in err on any problem. */
bool tokenizer_load_err(const char *path, Tokenizer **out, char *err, size_t errlen);
Tokenizer *tokenizer_load(const char *path);

/* The tokenizer that goes with a data source (what `train --data` takes): for a folder, its
 * tokenizer.bin (or llm.c's gpt2_tokenizer.bin); for shard files or a pattern, the same files in
 * their folder; for a text file, the byte tokenizer. NULL when shards come without a tokenizer
 * file (token ids only). The path of a loaded file goes to path_out (may be NULL) when found. */
Tokenizer *tokenizer_for_data(const char *source, char *path_out, size_t path_len);

#ifdef __cplusplus
}
#endif
