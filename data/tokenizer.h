/* Tokenizers: byte-level (vocab 256: token = byte), byte-level BPEs trained by `gdp prepare`, and
 * Hugging Face tokenizer.json files of the byte-level BPE kind (GPT-2, Llama-3, RoBERTa, ours).
 * All round-trip any byte string exactly: decode(encode(x)) == x.
 *
 * BPE. Text is first cut at special tokens (their literal text, e.g. "<|endoftext|>", becomes their
 * id, as Hugging Face's added tokens do), then into chunks by a pre-tokenizer, and merges never cross
 * chunks, so the concatenation of the chunks' tokens is the text. Pre-tokenizers:
 *   1 (files of version 1): a simplified GPT-2 rule (bpe_chunk_end: an optional leading space plus a
 *     run of letters (ASCII letters and every byte >= 0x80), or of digits, or of other symbols;
 *     whitespace runs alone, leaving their last space to the word after; chunks at most
 *     BPE_MAX_CHUNK bytes);
 *   2: GPT-2's regex  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   3: Llama-3's regex (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *      ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Both regexes are matched by hand-written code on UTF-8 code points (classes from
 * data/unicode_tables.h); a byte that does not start a valid UTF-8 sequence is one character of
 * neither class (a symbol). Inside a chunk, each byte starts as its token (byte_id) and the pair of
 * lowest merge rank is merged, leftmost first, until no pair has a rank (Hugging Face's algorithm).
 *
 * Our BPE (tokenizer_train_bpe) uses pre-tokenizer 2: token i < 256 is byte i; merge k joins the pair
 * (left, right) into the token of their bytes, which is an earlier token when one has those bytes
 * already (as Hugging Face's trainer does) and else the next new id. Training counts the distinct
 * chunks of a sample of the text (evenly spaced blocks adding up to sample_bytes; `gdp prepare
 * --bpe-sample MB`), then merges the most frequent adjacent pair (ties: the smaller (left, right))
 * until the vocabulary is full or no pair occurs twice. Pair counts are updated incrementally: each
 * merge visits only the chunks that hold the pair and applies the difference between the chunk's
 * pairs before and after; a max-heap with lazy re-insertion picks the next pair.
 *
 * End of text. `gdp prepare` appends a special token "<|endoftext|>" (TOKENIZER_EOT_TEXT) after the
 * merges (id vocab - 1) and ends every document with it; `eot` holds its id (-1: none). For a
 * tokenizer.json it is the first added special token named <|endoftext|>, <|end_of_text|>, </s> or
 * <eos>; for llm.c's GPT-2 file the token its header names (version 2) or 50256.
 *
 * Tokenizer file (`tokenizer.bin` beside the shards), little-endian:
 *     int32 header[64]: [0] magic 20250301, [1] version (2; 1 is read too), [2] kind (1 byte, 2 bpe),
 *                       [3] vocab size, [4] number of merges M, [5] pre-tokenizer id (version 1: 1,
 *                       version 2: 2), [6] BPE_MAX_CHUNK (version 1) or 0, [7] (version 2) the end-of-
 *                       text id or -1, rest 0
 *     int32 merges[M][2]: (left, right) of merge k; both ids made before it. Version 1: merge k makes
 *                       token 256 + k; version 2: the rule above; the end-of-text token comes last.
 * `tokenizer_save_json_err` writes the same tokenizer as a Hugging Face tokenizer.json (version 2 BPE
 * and byte tokenizers).
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
#define TOKENIZER_VERSION 2
#define TOKENIZER_LLMC_MAGIC 20240328
#define TOKENIZER_FILE "tokenizer.bin"
#define TOKENIZER_JSON_FILE "tokenizer.json"
#define TOKENIZER_EOT_TEXT "<|endoftext|>"
#define BPE_PRETOKENIZER_ID 1
enum { PRETOK_NONE = 0, PRETOK_SIMPLE = 1, PRETOK_GPT2 = 2, PRETOK_LLAMA3 = 3 };
#define BPE_MAX_CHUNK 64
#define BPE_MAX_VOCAB (1 << 20)

typedef enum TokenizerKind { TOKENIZER_BYTE = 1, TOKENIZER_BPE = 2, TOKENIZER_LLMC = 3, TOKENIZER_HF = 4 } TokenizerKind;

typedef struct TokenizerSpecial {
    uint8_t *text;
    size_t len;
    uint32_t id;
} TokenizerSpecial;

typedef struct Tokenizer {
    TokenizerKind kind;
    int vocab;
    int n_merges;
    int32_t *merges;   /* [n_merges][2] */
    int32_t *merge_res; /* [n_merges] the token merge k makes */
    int eot;           /* the end-of-text token, or -1 */
    int pretok;        /* PRETOK_*: how text is cut into chunks */
    bool add_prefix_space, ignore_merges; /* tokenizer.json's ByteLevel and BPE options */
    int version;       /* of the tokenizer.bin it came from (or would be saved as) */
    uint32_t byte_id[256];
    int n_special;     /* matched in text before pre-tokenizing, longest first */
    TokenizerSpecial *special;
    struct TokCache *cache; /* chunk -> tokens, filled as encode goes */
    uint64_t *bytes_keys; /* token bytes -> id (ignore_merges), open addressing; hash, 0 empty */
    int32_t *bytes_vals;
    size_t bytes_cap, bytes_n;
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
/* Builds a version 1 BPE tokenizer (pre-tokenizer 1, merge k makes 256 + k) from merges, checked
 * like a file's; for tests. */
Tokenizer *tokenizer_from_merges(const int32_t *merges, int n_merges);
void tokenizer_free(Tokenizer *t);

bool tokenizer_can_encode(const Tokenizer *t);
/* Encodes text[0, n) into out (room for n tokens is enough, and n + 1 + the number of special tokens
 * in the text with tokenizer.json's add_prefix_space); returns the token count.
 * Fatal for a decode-only tokenizer. */
int64_t tokenizer_encode(const Tokenizer *t, const uint8_t *text, size_t n, uint32_t *out);
/* The bytes of one token (fatal when id >= vocab). */
const uint8_t *tokenizer_token_bytes(const Tokenizer *t, uint32_t id, size_t *len);
/* Writes at most cap bytes to out and returns the full decoded length (call with cap 0 to size). */
size_t tokenizer_decode(const Tokenizer *t, const uint32_t *tokens, int64_t n, uint8_t *out, size_t cap);

/* End of the pre-tokenizer chunk that starts at i < n: pre-tokenizer 1, or the tokenizer's. */
size_t bpe_chunk_end(const uint8_t *s, size_t n, size_t i);
size_t tokenizer_chunk_end(const Tokenizer *t, const uint8_t *s, size_t n, size_t i);

/* Adds "<|endoftext|>" as a new last token and makes it the end-of-text token (our kinds only). */
void tokenizer_add_eot(Tokenizer *t);

void tokenizer_save(const Tokenizer *t, const char *path);
/* A Hugging Face tokenizer.json of the same tokenizer (byte, or BPE with pre-tokenizer 2). */
bool tokenizer_save_json_err(const Tokenizer *t, const char *path, char *err, size_t errlen);
/* Ours, llm.c's or a tokenizer.json (told apart by content); false with a message naming the file
 * in err on any problem, such as a tokenizer.json of a kind not supported. */
bool tokenizer_load_err(const char *path, Tokenizer **out, char *err, size_t errlen);
Tokenizer *tokenizer_load(const char *path);

/* The tokenizer that goes with a data source (what `train --data` takes): for a folder, its
 * tokenizer.bin, tokenizer.json or llm.c's gpt2_tokenizer.bin (in this order); for shard files or a pattern, the same files in
 * their folder; for a text file, the byte tokenizer. NULL when shards come without a tokenizer
 * file (token ids only). The path of a loaded file goes to path_out (may be NULL) when found. */
Tokenizer *tokenizer_for_data(const char *source, char *path_out, size_t path_len);

#ifdef __cplusplus
}
#endif
