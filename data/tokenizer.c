#include "data/tokenizer.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "base/heap.h"
#include "data/json.h"
#include "data/text.h"
#include "data/unicode_tables.h"

/* ------------------------------------------------------------------ helpers */

static bool fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return false;
}

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static inline uint64_t hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    return mix64(h ^ n) | 1; /* never 0: 0 marks an empty slot */
}

static inline uint64_t pair_key(uint32_t a, uint32_t b) { return ((uint64_t)a << 32) | b; }

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

/* ------------------------------------------------------------------ pre-tokenizer */

enum { C_SPACE, C_LETTER, C_DIGIT, C_OTHER };

static inline int byte_class(uint8_t c) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return C_SPACE;
    if (((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c >= 0x80) return C_LETTER;
    if (c >= '0' && c <= '9') return C_DIGIT;
    return C_OTHER;
}

size_t bpe_chunk_end(const uint8_t *s, size_t n, size_t i) {
    size_t limit = GDP_MIN(n, i + BPE_MAX_CHUNK);
    size_t j = i;
    int c = byte_class(s[i]);
    if (s[i] == ' ' && i + 1 < limit && byte_class(s[i + 1]) != C_SPACE) {
        j = i + 1;
        c = byte_class(s[j]);
    }
    if (c != C_SPACE) {
        while (j < limit && byte_class(s[j]) == c) j++;
        return j;
    }
    while (j < limit && byte_class(s[j]) == C_SPACE) j++;
    /* "   word": the run keeps all but its last space, which starts " word". */
    if (j < n && j - i >= 2 && s[j - 1] == ' ' && byte_class(s[j]) != C_SPACE) j--;
    return j;
}

/* ------------------------------------------------------------------ regex pre-tokenizers (2, 3) */

enum { U_OTHER = 0, U_LETTER = 1, U_NUMBER = 2, U_SPACE = 3 };

static uint8_t ascii_class[128];

static void init_ascii_class(void) {
    if (ascii_class['a']) return;
    for (int c = 0; c < 128; c++) {
        uint8_t k = U_OTHER;
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') k = U_LETTER;
        else if (c >= '0' && c <= '9') k = U_NUMBER;
        else if (c == ' ' || (c >= 0x09 && c <= 0x0D)) k = U_SPACE;
        ascii_class[c] = k;
    }
}

static int unicode_class(uint32_t cp) {
    int lo = 0, hi = (int)GDP_ARRAY_LEN(unicode_class_ranges) - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < unicode_class_ranges[mid][0]) hi = mid - 1;
        else if (cp > unicode_class_ranges[mid][1]) lo = mid + 1;
        else return (int)unicode_class_ranges[mid][2];
    }
    return U_OTHER;
}

/* The character at s[i] (i < n): its length in bytes and class, and the code point in *cp (0xFFFFFFFF
 * for a byte that starts no valid UTF-8 sequence: overlong forms, surrogates and values past
 * U+10FFFF are invalid, as in Rust's str). */
static inline size_t utf8_char(const uint8_t *s, size_t n, size_t i, int *cls, uint32_t *cp) {
    uint8_t c = s[i];
    if (c < 0x80) {
        *cls = ascii_class[c];
        *cp = c;
        return 1;
    }
    uint32_t v;
    size_t len;
    uint32_t min;
    if (c >= 0xC2 && c <= 0xDF) v = c & 0x1F, len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) v = c & 0x0F, len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) v = c & 0x07, len = 4, min = 0x10000;
    else goto invalid;
    if (i + len > n) goto invalid;
    for (size_t k = 1; k < len; k++) {
        if ((s[i + k] & 0xC0) != 0x80) goto invalid;
        v = v << 6 | (s[i + k] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v < 0xE000)) goto invalid;
    *cp = v;
    *cls = unicode_class(v);
    return len;
invalid:
    *cp = 0xFFFFFFFFu;
    *cls = U_OTHER;
    return 1;
}

/* End of the run of characters of class cls starting at j; at most max characters. */
static inline size_t run_end(const uint8_t *s, size_t n, size_t j, int cls, int max) {
    int count = 0;
    while (j < n && count < max) {
        int k;
        uint32_t cp;
        size_t l = utf8_char(s, n, j, &k, &cp);
        if (k != cls) break;
        j += l;
        count++;
    }
    return j;
}

/* 's 't 're 've 'm 'll 'd at s[i] == '\'': the length matched, or 0. */
static inline size_t contraction(const uint8_t *s, size_t n, size_t i, bool fold) {
    uint8_t a = i + 1 < n ? s[i + 1] : 0, b = i + 2 < n ? s[i + 2] : 0;
    if (fold) {
        if (a >= 'A' && a <= 'Z') a |= 0x20;
        if (b >= 'A' && b <= 'Z') b |= 0x20;
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* \s+(?!\S) | \s+ from i, the white space run ending at k with `chars` characters: the run leaves
 * its last character to what follows when that is not white space and the run has two or more. */
static inline size_t space_run(const uint8_t *s, size_t n, size_t i, size_t k, size_t last, int chars) {
    (void)s, (void)i;
    if (k < n && chars >= 2) return last;
    return k;
}

static size_t gpt2_chunk_end(const uint8_t *s, size_t n, size_t i) {
    int c0;
    uint32_t cp0;
    size_t l0 = utf8_char(s, n, i, &c0, &cp0);
    if (cp0 == '\'') {
        size_t m = contraction(s, n, i, false);
        if (m) return i + m;
    }
    if (cp0 == ' ' && i + 1 < n) {
        int c1;
        uint32_t cp1;
        utf8_char(s, n, i + 1, &c1, &cp1);
        if (c1 != U_SPACE) return run_end(s, n, i + 1, c1, INT32_MAX);
    }
    if (c0 != U_SPACE) return run_end(s, n, i + l0, c0, INT32_MAX);
    size_t k = i, last = i;
    int chars = 0;
    while (k < n) {
        int c;
        uint32_t cp;
        size_t l = utf8_char(s, n, k, &c, &cp);
        if (c != U_SPACE) break;
        last = k;
        k += l;
        chars++;
    }
    return space_run(s, n, i, k, last, chars);
}

static size_t llama3_chunk_end(const uint8_t *s, size_t n, size_t i) {
    int c0;
    uint32_t cp0;
    size_t l0 = utf8_char(s, n, i, &c0, &cp0);
    if (cp0 == '\'') {
        size_t m = contraction(s, n, i, true);
        if (m) return i + m;
    }
    int c1 = -1;
    uint32_t cp1 = 0;
    if (i + l0 < n) utf8_char(s, n, i + l0, &c1, &cp1);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c0 == U_LETTER) return run_end(s, n, i + l0, U_LETTER, INT32_MAX);
    if (c1 == U_LETTER && c0 != U_NUMBER && cp0 != '\r' && cp0 != '\n')
        return run_end(s, n, i + l0, U_LETTER, INT32_MAX);
    if (c0 == U_NUMBER) return run_end(s, n, i, U_NUMBER, 3);
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t j = c0 == U_OTHER ? i : cp0 == ' ' && c1 == U_OTHER ? i + 1 : SIZE_MAX;
    if (j != SIZE_MAX) {
        j = run_end(s, n, j, U_OTHER, INT32_MAX);
        while (j < n && (s[j] == '\r' || s[j] == '\n')) j++;
        return j;
    }
    /* white space: \s*[\r\n]+ ends after the run's last \r or \n; else \s+(?!\S) | \s+ */
    size_t k = i, last = i, after_nl = 0;
    int chars = 0;
    while (k < n) {
        int c;
        uint32_t cp;
        size_t l = utf8_char(s, n, k, &c, &cp);
        if (c != U_SPACE) break;
        if (cp == '\r' || cp == '\n') after_nl = k + 1;
        last = k;
        k += l;
        chars++;
    }
    if (after_nl) return after_nl;
    return space_run(s, n, i, k, last, chars);
}

size_t tokenizer_chunk_end(const Tokenizer *t, const uint8_t *s, size_t n, size_t i) {
    switch (t->pretok) {
    case PRETOK_SIMPLE: return bpe_chunk_end(s, n, i);
    case PRETOK_GPT2: return gpt2_chunk_end(s, n, i);
    case PRETOK_LLAMA3: return llama3_chunk_end(s, n, i);
    default: return n;
    }
}

/* ------------------------------------------------------------------ tables of a tokenizer */

static int32_t rank_find(const Tokenizer *t, uint32_t a, uint32_t b) {
    uint64_t key = pair_key(a, b) + 1;
    size_t mask = t->rank_cap - 1;
    for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
        if (t->rank_keys[i] == key) return t->rank_vals[i];
        if (t->rank_keys[i] == 0) return -1;
    }
}

static void build_ranks(Tokenizer *t) {
    t->rank_cap = pow2_at_least((size_t)t->n_merges * 2 + 2);
    t->rank_keys = (uint64_t *)xcalloc(t->rank_cap, sizeof(uint64_t));
    t->rank_vals = (int32_t *)xmalloc(t->rank_cap * sizeof(int32_t));
    size_t mask = t->rank_cap - 1;
    for (int k = 0; k < t->n_merges; k++) {
        uint64_t key = pair_key((uint32_t)t->merges[2 * k], (uint32_t)t->merges[2 * k + 1]) + 1;
        size_t i = mix64(key) & mask;
        while (t->rank_keys[i] && t->rank_keys[i] != key) i = (i + 1) & mask;
        if (t->rank_keys[i] == key) continue; /* a repeated pair: the first (lowest) rank wins */
        t->rank_keys[i] = key;
        t->rank_vals[i] = k;
    }
}

/* Token bytes -> id over tok_off/tok_bytes; the first id with given bytes wins. */
static int32_t bytes_find(const Tokenizer *t, const uint8_t *b, size_t len) {
    if (!t->bytes_cap) return -1;
    uint64_t h = hash_bytes(b, len);
    size_t mask = t->bytes_cap - 1;
    for (size_t i = h & mask; t->bytes_keys[i]; i = (i + 1) & mask) {
        int32_t id = t->bytes_vals[i];
        if (t->bytes_keys[i] == h && (size_t)(t->tok_off[id + 1] - t->tok_off[id]) == len &&
            !memcmp(t->tok_bytes + t->tok_off[id], b, len))
            return id;
    }
    return -1;
}

static void bytes_put(Tokenizer *t, uint64_t h, int32_t id) {
    size_t mask = t->bytes_cap - 1, i = h & mask;
    while (t->bytes_keys[i]) i = (i + 1) & mask;
    t->bytes_keys[i] = h;
    t->bytes_vals[i] = id;
}

/* Adds id under its bytes unless an earlier id has them. */
static void bytes_insert(Tokenizer *t, int32_t id) {
    const uint8_t *b = t->tok_bytes + t->tok_off[id];
    size_t len = (size_t)(t->tok_off[id + 1] - t->tok_off[id]);
    if (bytes_find(t, b, len) >= 0) return;
    if ((t->bytes_n + 1) * 2 > t->bytes_cap) {
        uint64_t *ok = t->bytes_keys;
        int32_t *ov = t->bytes_vals;
        size_t ocap = t->bytes_cap;
        t->bytes_cap = pow2_at_least((t->bytes_n + 1) * 4);
        t->bytes_keys = (uint64_t *)xcalloc(t->bytes_cap, sizeof(uint64_t));
        t->bytes_vals = (int32_t *)xmalloc(t->bytes_cap * sizeof(int32_t));
        for (size_t i = 0; i < ocap; i++)
            if (ok[i]) bytes_put(t, ok[i], ov[i]);
        free(ok), free(ov);
    }
    bytes_put(t, hash_bytes(b, len), id);
    t->bytes_n++;
}

static void add_special(Tokenizer *t, const char *text, size_t len, uint32_t id) {
    t->special = (TokenizerSpecial *)xrealloc(t->special, ((size_t)t->n_special + 1) * sizeof(TokenizerSpecial));
    TokenizerSpecial *sp = &t->special[t->n_special++];
    sp->text = (uint8_t *)xmalloc(len + 1);
    memcpy(sp->text, text, len);
    sp->len = len;
    sp->id = id;
    /* longest first, so that the longest of specials starting at one place wins */
    for (int k = t->n_special - 1; k > 0 && t->special[k].len > t->special[k - 1].len; k--) {
        TokenizerSpecial tmp = t->special[k];
        t->special[k] = t->special[k - 1];
        t->special[k - 1] = tmp;
    }
}

/* Our byte and BPE kinds: token bytes and results from the merges (version 1: merge k makes 256 + k;
 * version 2: the earlier token with the same bytes, else the next id), then the end-of-text token
 * when eot_last. */
static bool build_ours(Tokenizer *t, bool eot_last) {
    for (int i = 0; i < 256; i++) t->byte_id[i] = (uint32_t)i;
    int cap = 256 + t->n_merges + 1;
    t->tok_off = (int64_t *)xmalloc(((size_t)cap + 1) * sizeof(int64_t));
    ByteBuf bytes = {0};
    for (int i = 0; i < 256; i++) {
        t->tok_off[i] = i;
        uint8_t c = (uint8_t)i;
        bytebuf_append(&bytes, &c, 1);
    }
    t->tok_off[256] = 256;
    t->tok_bytes = bytes.data;
    t->merge_res = (int32_t *)xmalloc(((size_t)t->n_merges + 1) * sizeof(int32_t));
    int vocab = 256;
    if (t->version >= 2)
        for (int32_t i = 0; i < 256; i++) bytes_insert(t, i);
    for (int k = 0; k < t->n_merges; k++) {
        int32_t a = t->merges[2 * k], b = t->merges[2 * k + 1];
        if (a < 0 || b < 0 || a >= vocab || b >= vocab) { /* only a version 2 file gets here */
            t->tok_bytes = bytes.data;
            return false;
        }
        int64_t la = t->tok_off[a + 1] - t->tok_off[a], lb = t->tok_off[b + 1] - t->tok_off[b];
        size_t at = bytes.len;
        bytebuf_reserve(&bytes, (size_t)(la + lb));
        memcpy(bytes.data + at, bytes.data + t->tok_off[a], (size_t)la);
        memcpy(bytes.data + at + la, bytes.data + t->tok_off[b], (size_t)lb);
        t->tok_bytes = bytes.data;
        int32_t same = t->version >= 2 ? bytes_find(t, bytes.data + at, (size_t)(la + lb)) : -1;
        if (same >= 0) {
            t->merge_res[k] = same;
            continue;
        }
        bytes.len += (size_t)(la + lb);
        t->tok_off[vocab + 1] = (int64_t)bytes.len;
        t->merge_res[k] = vocab;
        if (t->version >= 2) bytes_insert(t, vocab);
        vocab++;
    }
    t->vocab = vocab;
    if (eot_last) {
        bytebuf_append(&bytes, TOKENIZER_EOT_TEXT, strlen(TOKENIZER_EOT_TEXT));
        t->tok_off[vocab + 1] = (int64_t)bytes.len;
        t->eot = vocab;
        add_special(t, TOKENIZER_EOT_TEXT, strlen(TOKENIZER_EOT_TEXT), (uint32_t)vocab);
        t->vocab = ++vocab;
    }
    t->tok_bytes = bytes.data;
    build_ranks(t);
    return true;
}

Tokenizer *tokenizer_byte(void) {
    Tokenizer *t = (Tokenizer *)xcalloc(1, sizeof(Tokenizer));
    t->kind = TOKENIZER_BYTE;
    t->version = TOKENIZER_VERSION;
    t->pretok = PRETOK_NONE;
    t->eot = -1;
    build_ours(t, false);
    return t;
}

void tokenizer_add_eot(Tokenizer *t) {
    GDP_CHECK(t->kind == TOKENIZER_BYTE || t->kind == TOKENIZER_BPE,
              "tokenizer_add_eot: only our byte and BPE tokenizers take an added end-of-text token");
    GDP_CHECK(t->eot < 0, "tokenizer_add_eot: the tokenizer has an end-of-text token already (%d)", t->eot);
    GDP_CHECK(t->version >= 2, "tokenizer_add_eot: a version 1 tokenizer has no room for it: re-run gdp prepare");
    t->tok_off = (int64_t *)xrealloc(t->tok_off, ((size_t)t->vocab + 2) * sizeof(int64_t));
    size_t old = (size_t)t->tok_off[t->vocab], el = strlen(TOKENIZER_EOT_TEXT);
    t->tok_bytes = (uint8_t *)xrealloc(t->tok_bytes, old + el);
    memcpy(t->tok_bytes + old, TOKENIZER_EOT_TEXT, el);
    t->tok_off[t->vocab + 1] = (int64_t)(old + el);
    t->eot = t->vocab;
    add_special(t, TOKENIZER_EOT_TEXT, el, (uint32_t)t->vocab);
    t->vocab++;
}

static bool check_merges(const int32_t *merges, int n_merges, const char *what, char *err, size_t errlen) {
    if (n_merges < 0 || n_merges > BPE_MAX_VOCAB - 256)
        return fail(err, errlen, "%s: %d merges is out of range (0 to %d)", what, n_merges, BPE_MAX_VOCAB - 256);
    for (int k = 0; k < n_merges; k++)
        for (int j = 0; j < 2; j++)
            if (merges[2 * k + j] < 0 || merges[2 * k + j] >= 256 + k)
                return fail(err, errlen, "%s: merge %d refers to token %d, which is not defined before it (corrupt)",
                            what, k, merges[2 * k + j]);
    return true;
}

/* NULL when a merge refers to a token not made before it. */

static Tokenizer *from_merges(const int32_t *merges, int n_merges, int version, bool eot_last) {
    Tokenizer *t = (Tokenizer *)xcalloc(1, sizeof(Tokenizer));
    t->kind = TOKENIZER_BPE;
    t->version = version;
    t->pretok = version >= 2 ? PRETOK_GPT2 : PRETOK_SIMPLE;
    t->n_merges = n_merges;
    t->eot = -1;
    t->merges = (int32_t *)xmalloc(((size_t)n_merges * 2 + 1) * sizeof(int32_t));
    if (n_merges) memcpy(t->merges, merges, (size_t)n_merges * 2 * sizeof(int32_t));
    if (!build_ours(t, eot_last)) {
        tokenizer_free(t);
        return NULL;
    }
    return t;
}

Tokenizer *tokenizer_from_merges(const int32_t *merges, int n_merges) {
    char err[256];
    if (!check_merges(merges, n_merges, "tokenizer_from_merges", err, sizeof err)) gdp_fatal("%s", err);
    return from_merges(merges, n_merges, 1, false);
}

typedef struct TokCache TokCache;
static void cache_free(TokCache *c);

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    free(t->merges);
    free(t->merge_res);
    free(t->tok_off);
    free(t->tok_bytes);
    free(t->rank_keys);
    free(t->rank_vals);
    free(t->bytes_keys);
    free(t->bytes_vals);
    for (int k = 0; k < t->n_special; k++) free(t->special[k].text);
    free(t->special);
    cache_free(t->cache);
    free(t);
}

/* ------------------------------------------------------------------ BPE training */

typedef struct HeapItem {
    int64_t count;
    uint64_t key;
} HeapItem;

typedef struct Heap {
    HeapItem *a;
    size_t n, cap;
} Heap;

static inline bool heap_before(HeapItem x, HeapItem y) {
    return x.count > y.count || (x.count == y.count && x.key < y.key);
}

GDP_DEFINE_HEAP(pair_heap, HeapItem, heap_before)

static void heap_push(Heap *h, int64_t count, uint64_t key) {
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 1024;
        h->a = (HeapItem *)xrealloc(h->a, h->cap * sizeof(HeapItem));
    }
    pair_heap_push(h->a, &h->n, (HeapItem){count, key});
}

static HeapItem heap_pop(Heap *h) { return pair_heap_pop(h->a, &h->n); }

/* Adjacent pairs: a hash table key -> index, and per pair its count and the chunks holding it. */
typedef struct Pairs {
    uint64_t *slot_key; /* key + 1, 0 empty */
    int32_t *slot_idx;
    size_t cap;
    int32_t n, n_cap;
    uint64_t *key;
    int64_t *count;
    int32_t **words;
    int32_t *n_words, *cap_words, *stamp;
} Pairs;

static void pairs_grow_table(Pairs *p) {
    size_t cap = p->cap ? p->cap * 2 : 1 << 16;
    uint64_t *sk = (uint64_t *)xcalloc(cap, sizeof(uint64_t));
    int32_t *si = (int32_t *)xmalloc(cap * sizeof(int32_t));
    for (size_t i = 0; i < p->cap; i++) {
        if (!p->slot_key[i]) continue;
        size_t j = mix64(p->slot_key[i]) & (cap - 1);
        while (sk[j]) j = (j + 1) & (cap - 1);
        sk[j] = p->slot_key[i];
        si[j] = p->slot_idx[i];
    }
    free(p->slot_key);
    free(p->slot_idx);
    p->slot_key = sk;
    p->slot_idx = si;
    p->cap = cap;
}

static int32_t pairs_get(Pairs *p, uint64_t key, bool create) {
    if (create && (size_t)(p->n + 1) * 2 > p->cap) pairs_grow_table(p);
    uint64_t k1 = key + 1;
    size_t mask = p->cap - 1;
    size_t i = mix64(k1) & mask;
    while (p->slot_key[i]) {
        if (p->slot_key[i] == k1) return p->slot_idx[i];
        i = (i + 1) & mask;
    }
    if (!create) return -1;
    if (p->n == p->n_cap) {
        p->n_cap = p->n_cap ? p->n_cap * 2 : 1 << 15;
        p->key = (uint64_t *)xrealloc(p->key, (size_t)p->n_cap * sizeof(uint64_t));
        p->count = (int64_t *)xrealloc(p->count, (size_t)p->n_cap * sizeof(int64_t));
        p->words = (int32_t **)xrealloc(p->words, (size_t)p->n_cap * sizeof(int32_t *));
        p->n_words = (int32_t *)xrealloc(p->n_words, (size_t)p->n_cap * sizeof(int32_t));
        p->cap_words = (int32_t *)xrealloc(p->cap_words, (size_t)p->n_cap * sizeof(int32_t));
        p->stamp = (int32_t *)xrealloc(p->stamp, (size_t)p->n_cap * sizeof(int32_t));
    }
    int32_t idx = p->n++;
    p->key[idx] = key;
    p->count[idx] = 0;
    p->words[idx] = NULL;
    p->n_words[idx] = p->cap_words[idx] = 0;
    p->stamp[idx] = -1;
    p->slot_key[i] = k1;
    p->slot_idx[i] = idx;
    return idx;
}

static void pairs_add_word(Pairs *p, int32_t idx, int32_t w) {
    int32_t n = p->n_words[idx];
    if (n && p->words[idx][n - 1] == w) return;
    if (n == p->cap_words[idx]) {
        p->cap_words[idx] = n ? n * 2 : 4;
        p->words[idx] = (int32_t *)xrealloc(p->words[idx], (size_t)p->cap_words[idx] * sizeof(int32_t));
    }
    p->words[idx][p->n_words[idx]++] = w;
}

static void pairs_free(Pairs *p) {
    for (int32_t i = 0; i < p->n; i++) free(p->words[i]);
    free(p->slot_key);
    free(p->slot_idx);
    free(p->key);
    free(p->count);
    free(p->words);
    free(p->n_words);
    free(p->cap_words);
    free(p->stamp);
}

typedef struct Delta {
    uint64_t key;
    int64_t d;
} Delta;

static int delta_cmp(const void *x, const void *y) {
    uint64_t a = ((const Delta *)x)->key, b = ((const Delta *)y)->key;
    return a < b ? -1 : a > b;
}

/* Evenly spaced blocks of the text adding up to about sample_bytes. */
static void take_sample(const uint8_t *text, size_t n, size_t sample_bytes, ByteBuf *out) {
    const size_t block = 1 << 16;
    if (sample_bytes == 0 || sample_bytes >= n || n <= 2 * block) {
        bytebuf_append(out, text, n);
        return;
    }
    size_t n_blocks = CEIL_DIV(sample_bytes, block);
    double stride = (double)(n - block) / (double)(n_blocks > 1 ? n_blocks - 1 : 1);
    for (size_t i = 0; i < n_blocks; i++) {
        size_t start = (size_t)((double)i * stride);
        size_t len = GDP_MIN(block, n - start);
        bytebuf_append(out, text + start, len);
    }
}

Tokenizer *tokenizer_train_bpe(const uint8_t *text, size_t n, int vocab, size_t sample_bytes, BpeTrainStats *stats) {
    GDP_CHECK(vocab >= 256 && vocab <= BPE_MAX_VOCAB, "BPE vocabulary %d is out of range: use 256 to %d", vocab,
              BPE_MAX_VOCAB);
    double t0 = gdp_now_seconds();
    init_ascii_class();
    ByteBuf sample = {0};
    take_sample(text, n, sample_bytes, &sample);
    const uint8_t *s = sample.data;
    size_t sn = sample.len;

    /* 1. Distinct chunks and their counts. */
    size_t wcap = 1 << 16;
    uint64_t *wslot_h = (uint64_t *)xcalloc(wcap, sizeof(uint64_t));
    int32_t *wslot_i = (int32_t *)xmalloc(wcap * sizeof(int32_t));
    int32_t nw = 0, nw_cap = 1 << 14;
    int64_t *w_src = (int64_t *)xmalloc((size_t)nw_cap * sizeof(int64_t));
    int32_t *w_len = (int32_t *)xmalloc((size_t)nw_cap * sizeof(int32_t));
    int64_t *w_count = (int64_t *)xmalloc((size_t)nw_cap * sizeof(int64_t));
    uint64_t *w_hash = (uint64_t *)xmalloc((size_t)nw_cap * sizeof(uint64_t));
    for (size_t i = 0; i < sn;) {
        size_t e = gpt2_chunk_end(s, sn, i);
        size_t len = e - i;
        GDP_CHECK(len < INT32_MAX / 4, "BPE sample has a chunk of %zu bytes: too long to learn from", len);
        uint64_t h = hash_bytes(s + i, len);
        size_t mask = wcap - 1, j = h & mask;
        int32_t found = -1;
        while (wslot_h[j]) {
            int32_t w = wslot_i[j];
            if (wslot_h[j] == h && w_len[w] == (int32_t)len && !memcmp(s + w_src[w], s + i, len)) {
                found = w;
                break;
            }
            j = (j + 1) & mask;
        }
        if (found >= 0) {
            w_count[found]++;
        } else {
            GDP_CHECK(nw < INT32_MAX - 1, "BPE sample has too many distinct chunks: use a smaller --bpe-sample");
            if (nw == nw_cap) {
                nw_cap *= 2;
                w_src = (int64_t *)xrealloc(w_src, (size_t)nw_cap * sizeof(int64_t));
                w_len = (int32_t *)xrealloc(w_len, (size_t)nw_cap * sizeof(int32_t));
                w_count = (int64_t *)xrealloc(w_count, (size_t)nw_cap * sizeof(int64_t));
                w_hash = (uint64_t *)xrealloc(w_hash, (size_t)nw_cap * sizeof(uint64_t));
            }
            w_src[nw] = (int64_t)i;
            w_len[nw] = (int32_t)len;
            w_count[nw] = 1;
            w_hash[nw] = h;
            wslot_h[j] = h;
            wslot_i[j] = nw;
            nw++;
            if ((size_t)nw * 2 > wcap) { /* grow and rehash */
                size_t ncap = wcap * 2;
                uint64_t *nh = (uint64_t *)xcalloc(ncap, sizeof(uint64_t));
                int32_t *ni = (int32_t *)xmalloc(ncap * sizeof(int32_t));
                for (int32_t w = 0; w < nw; w++) {
                    size_t k = w_hash[w] & (ncap - 1);
                    while (nh[k]) k = (k + 1) & (ncap - 1);
                    nh[k] = w_hash[w];
                    ni[k] = w;
                }
                free(wslot_h);
                free(wslot_i);
                wslot_h = nh;
                wslot_i = ni;
                wcap = ncap;
            }
        }
        i = e;
    }
    free(wslot_h);
    free(wslot_i);
    free(w_hash);

    /* 2. Symbols of every chunk (bytes at first), pair counts and pair -> chunks lists. */
    int64_t *w_off = (int64_t *)xmalloc(((size_t)nw + 1) * sizeof(int64_t));
    int64_t total = 0;
    int32_t max_len = 1;
    for (int32_t w = 0; w < nw; w++) {
        w_off[w] = total;
        total += w_len[w];
        max_len = GDP_MAX(max_len, w_len[w]);
    }
    int32_t *sym = (int32_t *)xmalloc((size_t)(total ? total : 1) * sizeof(int32_t));
    for (int32_t w = 0; w < nw; w++)
        for (int32_t k = 0; k < w_len[w]; k++) sym[w_off[w] + k] = s[w_src[w] + k];
    free(w_src);
    bytebuf_free(&sample);

    Pairs P = {0};
    pairs_grow_table(&P);
    for (int32_t w = 0; w < nw; w++) {
        const int32_t *ws = sym + w_off[w];
        for (int32_t k = 0; k + 1 < w_len[w]; k++) {
            int32_t p = pairs_get(&P, pair_key((uint32_t)ws[k], (uint32_t)ws[k + 1]), true);
            P.count[p] += w_count[w];
            pairs_add_word(&P, p, w);
        }
    }
    Heap H = {0};
    for (int32_t p = 0; p < P.n; p++) heap_push(&H, P.count[p], P.key[p]);

    /* 3. Merges, until the vocabulary is full. The tokens' bytes go into a growing tokenizer, so that
     * a merge whose bytes some token has already makes that token (as Hugging Face's trainer does). */
    Tokenizer *made = tokenizer_byte();
    made->tok_off = (int64_t *)xrealloc(made->tok_off, ((size_t)vocab + 1) * sizeof(int64_t));
    for (int32_t i = 0; i < 256; i++) bytes_insert(made, i);
    ByteBuf made_bytes = {made->tok_bytes, 256, 256};
    int n_tokens = 256, merges_cap = GDP_MAX(16, vocab - 256);
    int32_t *merges = (int32_t *)xmalloc(((size_t)merges_cap * 2 + 1) * sizeof(int32_t));
    int32_t *w_stamp = (int32_t *)xmalloc(((size_t)nw + 1) * sizeof(int32_t));
    for (int32_t w = 0; w < nw; w++) w_stamp[w] = -1;
    Delta *deltas = (Delta *)xmalloc(2 * (size_t)max_len * sizeof(Delta));
    int32_t *touched = NULL;
    size_t n_touched = 0, cap_touched = 0;
    int m = 0;
    for (; n_tokens < vocab; m++) {
        int32_t bp = -1;
        while (H.n) {
            HeapItem top = heap_pop(&H);
            int32_t p = pairs_get(&P, top.key, false);
            if (p < 0) continue;
            if (P.count[p] == top.count) {
                bp = p;
                break;
            }
            if (P.count[p] > 0 && P.count[p] < top.count) heap_push(&H, P.count[p], top.key);
        }
        if (bp < 0 || P.count[bp] < 2) break;
        uint32_t a = (uint32_t)(P.key[bp] >> 32), b = (uint32_t)P.key[bp];
        if (m == merges_cap) {
            merges_cap *= 2;
            merges = (int32_t *)xrealloc(merges, ((size_t)merges_cap * 2 + 1) * sizeof(int32_t));
        }
        int64_t la = made->tok_off[a + 1] - made->tok_off[a], lb = made->tok_off[b + 1] - made->tok_off[b];
        bytebuf_reserve(&made_bytes, (size_t)(la + lb));
        memcpy(made_bytes.data + made_bytes.len, made_bytes.data + made->tok_off[a], (size_t)la);
        memcpy(made_bytes.data + made_bytes.len + la, made_bytes.data + made->tok_off[b], (size_t)lb);
        made->tok_bytes = made_bytes.data;
        int32_t nid = bytes_find(made, made_bytes.data + made_bytes.len, (size_t)(la + lb));
        if (nid < 0) {
            nid = n_tokens++;
            made_bytes.len += (size_t)(la + lb);
            made->tok_off[nid + 1] = (int64_t)made_bytes.len;
            bytes_insert(made, nid);
        }
        merges[2 * m] = (int32_t)a;
        merges[2 * m + 1] = (int32_t)b;
        int32_t *ids = P.words[bp];
        int32_t n_ids = P.n_words[bp];
        P.words[bp] = NULL;
        P.n_words[bp] = P.cap_words[bp] = 0;
        n_touched = 0;
        for (int32_t q = 0; q < n_ids; q++) {
            int32_t w = ids[q];
            if (w_stamp[w] == m) continue;
            w_stamp[w] = m;
            int32_t *ws = sym + w_off[w];
            int32_t L = w_len[w];
            bool has = false;
            for (int32_t k = 0; k + 1 < L && !has; k++) has = (uint32_t)ws[k] == a && (uint32_t)ws[k + 1] == b;
            if (!has) continue;
            int64_t f = w_count[w];
            int nd = 0;
            for (int32_t k = 0; k + 1 < L; k++) deltas[nd++] = (Delta){pair_key((uint32_t)ws[k], (uint32_t)ws[k + 1]), -f};
            int32_t j = 0;
            for (int32_t k = 0; k < L;) {
                if (k + 1 < L && (uint32_t)ws[k] == a && (uint32_t)ws[k + 1] == b) {
                    ws[j++] = nid;
                    k += 2;
                } else {
                    ws[j++] = ws[k++];
                }
            }
            w_len[w] = j;
            for (int32_t k = 0; k + 1 < j; k++) deltas[nd++] = (Delta){pair_key((uint32_t)ws[k], (uint32_t)ws[k + 1]), f};
            qsort(deltas, (size_t)nd, sizeof(Delta), delta_cmp);
            for (int x = 0; x < nd;) {
                int y = x;
                int64_t sum = 0;
                while (y < nd && deltas[y].key == deltas[x].key) sum += deltas[y++].d;
                if (sum != 0) {
                    int32_t p = pairs_get(&P, deltas[x].key, true);
                    P.count[p] += sum;
                    if (sum > 0) {
                        pairs_add_word(&P, p, w);
                        if (P.stamp[p] != m) {
                            P.stamp[p] = m;
                            if (n_touched == cap_touched) {
                                cap_touched = cap_touched ? cap_touched * 2 : 1024;
                                touched = (int32_t *)xrealloc(touched, cap_touched * sizeof(int32_t));
                            }
                            touched[n_touched++] = p;
                        }
                    }
                }
                x = y;
            }
        }
        free(ids);
        for (size_t q = 0; q < n_touched; q++) heap_push(&H, P.count[touched[q]], P.key[touched[q]]);
    }

    if (stats) {
        stats->sample_bytes = sn;
        stats->distinct_chunks = nw;
        stats->merges = m;
        stats->seconds = gdp_now_seconds() - t0;
    }
    made->tok_bytes = made_bytes.data;
    tokenizer_free(made);
    Tokenizer *t = from_merges(merges, m, TOKENIZER_VERSION, false);
    GDP_CHECK(t, "BPE training made a merge of tokens not made before it (a bug)");
    free(merges);
    free(touched);
    free(deltas);
    free(w_stamp);
    free(H.a);
    pairs_free(&P);
    free(sym);
    free(w_off);
    free(w_len);
    free(w_count);
    return t;
}

/* ------------------------------------------------------------------ encode / decode */

bool tokenizer_can_encode(const Tokenizer *t) { return t->kind != TOKENIZER_LLMC; }

/* Chunk bytes -> tokens over the tokenizer's life; keys are copies, so calls on any text share it.
 * Emptied when full: a bound on memory for corpora of many distinct chunks. */
#define CACHE_SLOTS ((size_t)1 << 20)
#define CACHE_POOL ((size_t)64 << 20)
struct TokCache {
    uint64_t *h;
    uint32_t *key_off, *key_len, *tok_off, *tok_len;
    size_t n;
    uint8_t *keys;
    uint32_t *toks;
    size_t keys_len, toks_len;
};

static void cache_free(TokCache *c) {
    if (!c) return;
    free(c->h), free(c->key_off), free(c->key_len), free(c->tok_off), free(c->tok_len);
    free(c->keys), free(c->toks);
    free(c);
}

static TokCache *cache_new(void) {
    TokCache *c = (TokCache *)xcalloc(1, sizeof(TokCache));
    c->h = (uint64_t *)xcalloc(CACHE_SLOTS, sizeof(uint64_t));
    c->key_off = (uint32_t *)xmalloc(CACHE_SLOTS * sizeof(uint32_t));
    c->key_len = (uint32_t *)xmalloc(CACHE_SLOTS * sizeof(uint32_t));
    c->tok_off = (uint32_t *)xmalloc(CACHE_SLOTS * sizeof(uint32_t));
    c->tok_len = (uint32_t *)xmalloc(CACHE_SLOTS * sizeof(uint32_t));
    c->keys = (uint8_t *)xmalloc(CACHE_POOL);
    c->toks = (uint32_t *)xmalloc(CACHE_POOL / 4 * sizeof(uint32_t));
    return c;
}

/* Byte-pair merges of one chunk, Hugging Face's way: a min-heap of (rank, position) over the
 * adjacent pairs of a linked list of symbols; a popped pair that has changed since it was pushed is
 * dropped. Ties go to the leftmost pair, so "aaa" with (a, a) gives "aa a". */
typedef struct MergeItem {
    int32_t rank, pos;
} MergeItem;

typedef struct BpeWork {
    uint32_t *id;
    int32_t *next, *prev;
    MergeItem *heap;
    size_t cap, hn;
} BpeWork;

static inline bool mi_less(MergeItem a, MergeItem b) { return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos); }

GDP_DEFINE_HEAP(merge_heap, MergeItem, mi_less)

static void mh_push(BpeWork *w, int32_t rank, int32_t pos) { merge_heap_push(w->heap, &w->hn, (MergeItem){rank, pos}); }

static MergeItem mh_pop(BpeWork *w) { return merge_heap_pop(w->heap, &w->hn); }

static size_t bpe_chunk(const Tokenizer *t, BpeWork *w, const uint8_t *s, size_t len, uint32_t *out) {
    if (t->ignore_merges) {
        int32_t id = bytes_find(t, s, len);
        if (id >= 0) {
            out[0] = (uint32_t)id;
            return 1;
        }
    }
    if (len == 1 || t->n_merges == 0) {
        for (size_t i = 0; i < len; i++) out[i] = t->byte_id[s[i]];
        return len;
    }
    if (len > w->cap) {
        w->cap = len * 2;
        w->id = (uint32_t *)xrealloc(w->id, w->cap * sizeof(uint32_t));
        w->next = (int32_t *)xrealloc(w->next, w->cap * sizeof(int32_t));
        w->prev = (int32_t *)xrealloc(w->prev, w->cap * sizeof(int32_t));
        w->heap = (MergeItem *)xrealloc(w->heap, 3 * w->cap * sizeof(MergeItem));
    }
    const int32_t L = (int32_t)len;
    w->hn = 0;
    for (int32_t i = 0; i < L; i++) {
        w->id[i] = t->byte_id[s[i]];
        w->next[i] = i + 1 < L ? i + 1 : -1;
        w->prev[i] = i - 1;
    }
    for (int32_t i = 0; i + 1 < L; i++) {
        int32_t r = rank_find(t, w->id[i], w->id[i + 1]);
        if (r >= 0) mh_push(w, r, i);
    }
    while (w->hn) {
        MergeItem m = mh_pop(w);
        int32_t p = m.pos, q = w->next[p];
        /* stale: p was merged into its left neighbour, or the pair at p is no longer this merge's */
        if (w->id[p] == UINT32_MAX || q < 0 || (uint32_t)t->merges[2 * m.rank] != w->id[p] ||
            (uint32_t)t->merges[2 * m.rank + 1] != w->id[q])
            continue;
        w->id[p] = (uint32_t)t->merge_res[m.rank];
        w->id[q] = UINT32_MAX;
        w->next[p] = w->next[q];
        if (w->next[q] >= 0) w->prev[w->next[q]] = p;
        if (w->prev[p] >= 0) {
            int32_t r = rank_find(t, w->id[w->prev[p]], w->id[p]);
            if (r >= 0) mh_push(w, r, w->prev[p]);
        }
        if (w->next[p] >= 0) {
            int32_t r = rank_find(t, w->id[p], w->id[w->next[p]]);
            if (r >= 0) mh_push(w, r, p);
        }
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = w->next[i]) out[k++] = w->id[i];
    return k;
}

/* Text without special tokens: chunks, each through the cache or the merges. */
static int64_t encode_plain(const Tokenizer *t, BpeWork *w, const uint8_t *text, size_t n, uint32_t *out) {
    if (t->kind == TOKENIZER_BYTE || (t->n_merges == 0 && !t->ignore_merges)) {
        for (size_t i = 0; i < n; i++) out[i] = t->byte_id[text[i]];
        return (int64_t)n;
    }
    TokCache *c = t->cache;
    int64_t nt = 0;
    for (size_t i = 0; i < n;) {
        size_t e = tokenizer_chunk_end(t, text, n, i), len = e - i;
        if (len == 1) {
            out[nt++] = t->byte_id[text[i]];
            i = e;
            continue;
        }
        uint64_t h = hash_bytes(text + i, len);
        size_t j = h & (CACHE_SLOTS - 1);
        bool hit = false;
        while (c->h[j]) {
            if (c->h[j] == h && c->key_len[j] == len && !memcmp(c->keys + c->key_off[j], text + i, len)) {
                memcpy(out + nt, c->toks + c->tok_off[j], c->tok_len[j] * sizeof(uint32_t));
                nt += c->tok_len[j];
                hit = true;
                break;
            }
            j = (j + 1) & (CACHE_SLOTS - 1);
        }
        if (!hit) {
            size_t k = bpe_chunk(t, w, text + i, len, out + nt);
            if (c->n * 2 >= CACHE_SLOTS || c->keys_len + len > CACHE_POOL || c->toks_len + k > CACHE_POOL / 4) {
                memset(c->h, 0, CACHE_SLOTS * sizeof(uint64_t)); /* full: start again */
                c->n = c->keys_len = c->toks_len = 0;
                j = h & (CACHE_SLOTS - 1);
            }
            if (len <= CACHE_POOL / 16) {
                memcpy(c->keys + c->keys_len, text + i, len);
                memcpy(c->toks + c->toks_len, out + nt, k * sizeof(uint32_t));
                c->h[j] = h;
                c->key_off[j] = (uint32_t)c->keys_len;
                c->key_len[j] = (uint32_t)len;
                c->tok_off[j] = (uint32_t)c->toks_len;
                c->tok_len[j] = (uint32_t)k;
                c->keys_len += len;
                c->toks_len += k;
                c->n++;
            }
            nt += (int64_t)k;
        }
        i = e;
    }
    return nt;
}

/* The first special token at or after i: its index, and its start in *at; -1 when none. */
static int next_special(const Tokenizer *t, const uint8_t *text, size_t n, size_t i, size_t *at) {
    for (; i < n; i++) {
        const uint8_t *p = memchr(text + i, t->special[0].text[0], n - i);
        bool one_first = true;
        for (int k = 1; k < t->n_special && one_first; k++) one_first = t->special[k].text[0] == t->special[0].text[0];
        if (one_first) { /* the usual case, "<|...|>" tokens: memchr skips to the candidates */
            if (!p) return -1;
            i = (size_t)(p - text);
        }
        for (int k = 0; k < t->n_special; k++) {
            const TokenizerSpecial *sp = &t->special[k];
            if (sp->len <= n - i && text[i] == sp->text[0] && !memcmp(text + i, sp->text, sp->len)) {
                *at = i;
                return k;
            }
        }
    }
    return -1;
}

int64_t tokenizer_encode(const Tokenizer *t, const uint8_t *text, size_t n, uint32_t *out) {
    GDP_CHECK(tokenizer_can_encode(t),
              "this tokenizer (an llm.c tokenizer file) can only decode: it does not hold the BPE merges; give the "
              "model's tokenizer.json instead");
    init_ascii_class();
    Tokenizer *mt = (Tokenizer *)t; /* the cache is filled as a side effect, never seen */
    if (!mt->cache && t->kind != TOKENIZER_BYTE) mt->cache = cache_new();
    BpeWork w = {0};
    int64_t nt = 0;
    uint8_t *prefixed = NULL;
    for (size_t i = 0; i < n;) {
        size_t at = n, e = n;
        int k = t->n_special ? next_special(t, text, n, i, &at) : -1;
        if (k < 0) at = n;
        else e = at + t->special[k].len;
        if (at > i) {
            if (t->add_prefix_space && text[i] != ' ') { /* ByteLevel's add_prefix_space, per piece */
                prefixed = (uint8_t *)xrealloc(prefixed, at - i + 1);
                prefixed[0] = ' ';
                memcpy(prefixed + 1, text + i, at - i);
                nt += encode_plain(t, &w, prefixed, at - i + 1, out + nt);
            } else {
                nt += encode_plain(t, &w, text + i, at - i, out + nt);
            }
        }
        if (k >= 0) out[nt++] = t->special[k].id;
        i = e;
    }
    free(prefixed);
    free(w.id), free(w.next), free(w.prev), free(w.heap);
    return nt;
}

const uint8_t *tokenizer_token_bytes(const Tokenizer *t, uint32_t id, size_t *len) {
    if (id >= (uint32_t)t->vocab)
        gdp_fatal("token %u is outside the tokenizer's vocabulary of %d: the model and the tokenizer do not match",
                  id, t->vocab);
    *len = (size_t)(t->tok_off[id + 1] - t->tok_off[id]);
    return t->tok_bytes + t->tok_off[id];
}

size_t tokenizer_decode(const Tokenizer *t, const uint32_t *tokens, int64_t n, uint8_t *out, size_t cap) {
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const uint8_t *b = tokenizer_token_bytes(t, tokens[i], &len);
        if (total + len <= cap) memcpy(out + total, b, len);
        else if (total < cap) memcpy(out + total, b, cap - total);
        total += len;
    }
    return total;
}

/* ------------------------------------------------------------------ files */

static void put32(uint8_t *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (uint8_t)u;
    p[1] = (uint8_t)(u >> 8);
    p[2] = (uint8_t)(u >> 16);
    p[3] = (uint8_t)(u >> 24);
}

static int32_t get32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

void tokenizer_save(const Tokenizer *t, const char *path) {
    GDP_CHECK(t->kind == TOKENIZER_BYTE || t->kind == TOKENIZER_BPE,
              "cannot save this tokenizer (llm.c's or a tokenizer.json) as a gdp.c tokenizer file ('%s')", path);
    size_t bytes = 64 * 4 + (size_t)t->n_merges * 8;
    uint8_t *buf = (uint8_t *)xcalloc(bytes, 1);
    put32(buf, TOKENIZER_MAGIC);
    put32(buf + 4, t->version);
    put32(buf + 8, t->kind);
    put32(buf + 12, t->vocab);
    put32(buf + 16, t->n_merges);
    put32(buf + 20, t->version >= 2 ? PRETOK_GPT2 : BPE_PRETOKENIZER_ID);
    put32(buf + 24, t->version >= 2 ? 0 : BPE_MAX_CHUNK);
    if (t->version >= 2) put32(buf + 28, t->eot);
    for (int k = 0; k < 2 * t->n_merges; k++) put32(buf + 256 + 4 * (size_t)k, t->merges[k]);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = xfopen(tmp, "wb");
    xfwrite(buf, 1, bytes, f, tmp);
    if (fclose(f) != 0) gdp_fatal("cannot close '%s': %s (disk full?)", tmp, strerror(errno));
    if (rename(tmp, path) != 0) gdp_fatal("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    free(buf);
}

static bool load_llmc(const char *path, const uint8_t *buf, size_t n, Tokenizer **out, char *err, size_t errlen) {
    if (n < 1024) return fail(err, errlen, "llm.c tokenizer '%s' is shorter than its 1024-byte header", path);
    int32_t version = get32(buf + 4), vocab = get32(buf + 8);
    if (version != 1 && version != 2)
        return fail(err, errlen, "llm.c tokenizer '%s' has version %d: only 1 and 2 are known", path, version);
    if (vocab <= 0 || vocab > BPE_MAX_VOCAB)
        return fail(err, errlen, "llm.c tokenizer '%s' has vocabulary %d: corrupt", path, vocab);
    Tokenizer *t = (Tokenizer *)xcalloc(1, sizeof(Tokenizer));
    t->kind = TOKENIZER_LLMC;
    t->vocab = vocab;
    /* Version 1 files predate the header field; GPT-2's vocabulary of 50257 ends with <|endoftext|>. */
    t->eot = version == 2 ? get32(buf + 12) : vocab == 50257 ? 50256 : -1;
    t->tok_off = (int64_t *)xmalloc(((size_t)vocab + 1) * sizeof(int64_t));
    t->tok_bytes = (uint8_t *)xmalloc(n);
    size_t pos = 1024;
    int64_t off = 0;
    for (int i = 0; i < vocab; i++) {
        if (pos >= n) {
            tokenizer_free(t);
            return fail(err, errlen, "llm.c tokenizer '%s' ends at token %d of %d: truncated", path, i, vocab);
        }
        size_t len = buf[pos++];
        if (pos + len > n) {
            tokenizer_free(t);
            return fail(err, errlen, "llm.c tokenizer '%s' ends inside token %d: truncated", path, i);
        }
        t->tok_off[i] = off;
        memcpy(t->tok_bytes + off, buf + pos, len);
        off += (int64_t)len;
        pos += len;
    }
    t->tok_off[vocab] = off;
    t->rank_cap = 16;
    t->rank_keys = (uint64_t *)xcalloc(t->rank_cap, sizeof(uint64_t));
    t->rank_vals = (int32_t *)xmalloc(t->rank_cap * sizeof(int32_t));
    *out = t;
    return true;
}

/* ------------------------------------------------------------------ tokenizer.json */

static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char LLAMA3_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* GPT-2's bytes_to_unicode: byte b is written as code point map[b] in the vocabulary's strings. */
static void byte_level_map(uint32_t map[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        map[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

/* A vocabulary string back to bytes: every character must be one of map's (0x21 to 0x143). */
static bool unmap_string(const char *s, size_t len, const int16_t *inv, ByteBuf *out) {
    init_ascii_class();
    for (size_t i = 0; i < len;) {
        int cls;
        uint32_t cp;
        i += utf8_char((const uint8_t *)s, len, i, &cls, &cp);
        if (cp >= 0x144 || inv[cp] < 0) return false;
        uint8_t b = (uint8_t)inv[cp];
        bytebuf_append(out, &b, 1);
    }
    return true;
}

static bool hf_pretokenizer(Tokenizer *t, const JsonValue *pt, const char *path, char *err, size_t errlen) {
    const char *type = json_get_str(pt, "type");
    if (type && !strcmp(type, "ByteLevel")) {
        t->pretok = json_get_bool(pt, "use_regex", true) ? PRETOK_GPT2 : PRETOK_NONE;
        t->add_prefix_space = json_get_bool(pt, "add_prefix_space", true);
        return true;
    }
    if (type && !strcmp(type, "Sequence")) {
        const JsonValue *list = json_get(pt, "pretokenizers");
        if (list && list->type == JSON_ARRAY && list->len == 2) {
            const JsonValue *sp = &list->items[0], *bl = &list->items[1];
            const char *re = json_get_str(json_get(sp, "pattern"), "Regex");
            const char *st = json_get_str(sp, "type"), *bt = json_get_str(bl, "type");
            const char *beh = json_get_str(sp, "behavior");
            bool split_ok = st && !strcmp(st, "Split") && beh && !strcmp(beh, "Isolated") &&
                            !json_get_bool(sp, "invert", false);
            bool bl_ok = bt && !strcmp(bt, "ByteLevel") && !json_get_bool(bl, "use_regex", true);
            if (split_ok && bl_ok && re && (!strcmp(re, GPT2_REGEX) || !strcmp(re, LLAMA3_REGEX))) {
                t->pretok = !strcmp(re, GPT2_REGEX) ? PRETOK_GPT2 : PRETOK_LLAMA3;
                t->add_prefix_space = json_get_bool(bl, "add_prefix_space", false);
                return true;
            }
        }
    }
    return fail(err, errlen,
                "tokenizer '%s': pre_tokenizer %s is not supported; gdp.c reads ByteLevel, and a Sequence of a Split "
                "with GPT-2's or Llama-3's regex then ByteLevel (use_regex false)",
                path, type ? type : "(missing)");
}

static bool load_hf(const char *path, const JsonValue *root, Tokenizer **out, char *err, size_t errlen) {
    const JsonValue *model = json_get(root, "model"), *norm = json_get(root, "normalizer");
    const char *mtype = json_get_str(model, "type");
    if (!model || (mtype && strcmp(mtype, "BPE")))
        return fail(err, errlen, "tokenizer '%s': model type %s is not supported; gdp.c reads byte-level BPE only", path,
                    mtype ? mtype : "(missing)");
    if (norm && norm->type != JSON_NULL)
        return fail(err, errlen, "tokenizer '%s': normalizer %s is not supported (gdp.c reads byte-level BPEs with none)",
                    path, json_get_str(norm, "type") ? json_get_str(norm, "type") : "?");
    const char *bad_str[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const char *v = json_get_str(model, bad_str[k]);
        if (v && v[0]) return fail(err, errlen, "tokenizer '%s': model.%s '%s' is not supported", path, bad_str[k], v);
    }
    if (json_get_bool(model, "byte_fallback", false))
        return fail(err, errlen, "tokenizer '%s': byte_fallback BPEs (SentencePiece style) are not supported", path);
    const JsonValue *dropout = json_get(model, "dropout");
    if (dropout && dropout->type == JSON_NUMBER && dropout->number > 0)
        return fail(err, errlen, "tokenizer '%s': BPE dropout is not supported", path);
    const JsonValue *vocab = json_get(model, "vocab"), *merges = json_get(model, "merges");
    const JsonValue *added = json_get(root, "added_tokens");
    if (!vocab || vocab->type != JSON_OBJECT || !merges || merges->type != JSON_ARRAY)
        return fail(err, errlen, "tokenizer '%s': model.vocab (an object) and model.merges (a list) are required", path);

    Tokenizer *t = (Tokenizer *)xcalloc(1, sizeof(Tokenizer));
    t->kind = TOKENIZER_HF;
    t->eot = -1;
    t->ignore_merges = json_get_bool(model, "ignore_merges", false);
    const JsonValue *pt = json_get(root, "pre_tokenizer");
    bool ok = pt && pt->type == JSON_OBJECT ? hf_pretokenizer(t, pt, path, err, errlen)
                                            : fail(err, errlen, "tokenizer '%s' has no pre_tokenizer: not byte-level", path);
    uint32_t map[256];
    int16_t inv[0x144];
    byte_level_map(map);
    for (int i = 0; i < 0x144; i++) inv[i] = -1;
    for (int b = 0; b < 256; b++) inv[map[b]] = (int16_t)b;

    /* ids: the vocabulary's and the added tokens'; holes decode to nothing */
    int64_t max_id = -1;
    for (size_t k = 0; ok && k < vocab->len; k++) {
        const JsonValue *v = &vocab->items[k];
        if (v->type != JSON_NUMBER || v->number < 0 || v->number >= BPE_MAX_VOCAB || v->number != (int64_t)v->number)
            ok = fail(err, errlen, "tokenizer '%s': vocabulary entry '%s' has a bad id", path, vocab->keys[k]);
        else max_id = GDP_MAX(max_id, (int64_t)v->number);
    }
    size_t n_added = added && added->type == JSON_ARRAY ? added->len : 0;
    for (size_t k = 0; ok && k < n_added; k++) {
        const JsonValue *a = &added->items[k], *id = json_get(a, "id");
        const char *content = json_get_str(a, "content");
        if (!id || id->type != JSON_NUMBER || id->number < 0 || id->number >= BPE_MAX_VOCAB || !content)
            ok = fail(err, errlen, "tokenizer '%s': added token %zu has no valid id or content", path, k);
        else if (json_get_bool(a, "lstrip", false) || json_get_bool(a, "rstrip", false) ||
                 json_get_bool(a, "single_word", false))
            ok = fail(err, errlen, "tokenizer '%s': added token '%s' uses lstrip, rstrip or single_word: not supported",
                      path, content);
        else max_id = GDP_MAX(max_id, (int64_t)id->number);
    }
    int V = (int)(max_id + 1);
    char **strs = NULL; /* per id: the vocabulary's bytes, or the added token's content */
    size_t *lens = NULL;
    bool *is_added = NULL;
    if (ok) {
        strs = (char **)xcalloc((size_t)V, sizeof(char *));
        lens = (size_t *)xcalloc((size_t)V, sizeof(size_t));
        is_added = (bool *)xcalloc((size_t)V, sizeof(bool));
    }
    ByteBuf tmp = {0};
    for (size_t k = 0; ok && k < vocab->len; k++) {
        int id = (int)vocab->items[k].number;
        tmp.len = 0;
        if (strs[id]) ok = fail(err, errlen, "tokenizer '%s': id %d appears twice in the vocabulary", path, id);
        else if (!unmap_string(vocab->keys[k], strlen(vocab->keys[k]), inv, &tmp))
            ok = fail(err, errlen, "tokenizer '%s': vocabulary entry '%s' is not in the byte-level alphabet: not a "
                      "byte-level BPE", path, vocab->keys[k]);
        else {
            strs[id] = (char *)xmalloc(tmp.len + 1);
            memcpy(strs[id], tmp.data, tmp.len);
            lens[id] = tmp.len;
        }
    }
    for (size_t k = 0; ok && k < n_added; k++) {
        const JsonValue *a = &added->items[k];
        int id = (int)json_get(a, "id")->number;
        const JsonValue *c = json_get(a, "content");
        free(strs[id]);
        strs[id] = (char *)xmalloc(c->len + 1);
        memcpy(strs[id], c->str, c->len);
        lens[id] = c->len;
        is_added[id] = true;
        add_special(t, c->str, c->len, (uint32_t)id);
    }
    if (ok) {
        t->vocab = V;
        t->tok_off = (int64_t *)xmalloc(((size_t)V + 1) * sizeof(int64_t));
        ByteBuf all = {0};
        for (int i = 0; i < V; i++) {
            t->tok_off[i] = (int64_t)all.len;
            if (strs[i]) bytebuf_append(&all, strs[i], lens[i]);
        }
        t->tok_off[V] = (int64_t)all.len;
        t->tok_bytes = all.data ? all.data : (uint8_t *)xcalloc(1, 1);
        for (int i = 0; i < V; i++) /* the model's tokens only: an added token never comes out of merges */
            if (strs[i] && !is_added[i]) bytes_insert(t, i);
        for (int b = 0; ok && b < 256; b++) {
            uint8_t c = (uint8_t)b;
            int32_t id = bytes_find(t, &c, 1);
            if (id < 0) ok = fail(err, errlen, "tokenizer '%s': byte 0x%02x has no token: not a byte-level BPE", path, b);
            else t->byte_id[b] = (uint32_t)id;
        }
    }
    if (ok) {
        t->n_merges = (int)merges->len;
        t->merges = (int32_t *)xmalloc(((size_t)t->n_merges * 2 + 1) * sizeof(int32_t));
        t->merge_res = (int32_t *)xmalloc(((size_t)t->n_merges + 1) * sizeof(int32_t));
    }
    for (size_t k = 0; ok && k < merges->len; k++) {
        const JsonValue *m = &merges->items[k];
        const char *part[2] = {NULL, NULL};
        size_t plen[2] = {0, 0};
        if (m->type == JSON_STRING) { /* "left right" */
            const char *sp = strchr(m->str, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                part[0] = m->str, plen[0] = (size_t)(sp - m->str);
                part[1] = sp + 1, plen[1] = strlen(sp + 1);
            }
        } else if (m->type == JSON_ARRAY && m->len == 2 && m->items[0].type == JSON_STRING &&
                   m->items[1].type == JSON_STRING) { /* ["left", "right"] */
            part[0] = m->items[0].str, plen[0] = m->items[0].len;
            part[1] = m->items[1].str, plen[1] = m->items[1].len;
        }
        int32_t ids[3] = {-1, -1, -1};
        tmp.len = 0;
        for (int j = 0; j < 2 && part[0]; j++) {
            size_t at = tmp.len;
            if (!unmap_string(part[j], plen[j], inv, &tmp)) break;
            ids[j] = bytes_find(t, tmp.data + at, tmp.len - at);
        }
        if (ids[0] >= 0 && ids[1] >= 0) ids[2] = bytes_find(t, tmp.data, tmp.len);
        if (ids[2] < 0) {
            ok = fail(err, errlen, "tokenizer '%s': merge %zu is malformed or joins tokens that are not in the vocabulary",
                      path, k);
            break;
        }
        t->merges[2 * k] = ids[0], t->merges[2 * k + 1] = ids[1], t->merge_res[k] = ids[2];
    }
    static const char *eot_names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};
    for (size_t e = 0; ok && e < GDP_ARRAY_LEN(eot_names) && t->eot < 0; e++)
        for (size_t k = 0; k < n_added; k++) {
            const JsonValue *a = &added->items[k];
            if (json_get_bool(a, "special", false) && !strcmp(json_get_str(a, "content"), eot_names[e])) {
                t->eot = (int)json_get(a, "id")->number;
                break;
            }
        }
    if (strs)
        for (int i = 0; i < V; i++) free(strs[i]);
    free(strs), free(lens), free(is_added);
    bytebuf_free(&tmp);
    if (!ok) {
        tokenizer_free(t);
        return false;
    }
    build_ranks(t);
    *out = t;
    return true;
}

static void json_put_string(FILE *f, const uint8_t *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* A token's bytes as a byte-level vocabulary string (UTF-8 of map[b] for each byte). */
static void json_put_token(FILE *f, const Tokenizer *t, const uint32_t map[256], int32_t id) {
    uint8_t buf[4 * 256];
    size_t len, k = 0;
    const uint8_t *b = tokenizer_token_bytes(t, (uint32_t)id, &len);
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = map[b[i]];
        if (cp == '"' || cp == '\\') buf[k++] = '\\';
        if (cp < 0x80) buf[k++] = (uint8_t)cp;
        else buf[k++] = (uint8_t)(0xC0 | cp >> 6), buf[k++] = (uint8_t)(0x80 | (cp & 0x3F));
        if (k + 4 > sizeof buf) fwrite(buf, 1, k, f), k = 0;
    }
    fwrite(buf, 1, k, f);
    fputc('"', f);
}

bool tokenizer_save_json_err(const Tokenizer *t, const char *path, char *err, size_t errlen) {
    if (!(t->kind == TOKENIZER_BYTE || (t->kind == TOKENIZER_BPE && t->version >= 2)))
        return fail(err, errlen,
                    "cannot write '%s': only byte tokenizers and BPEs of version 2 have a tokenizer.json form (this "
                    "one uses gdp.c's old pre-tokenizer: re-run gdp prepare)",
                    path);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return fail(err, errlen, "cannot create '%s': %s", tmp, strerror(errno));
    uint32_t map[256];
    byte_level_map(map);
    fprintf(f, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[");
    for (int k = 0; k < t->n_special; k++) {
        fprintf(f, "%s{\"id\":%u,\"content\":", k ? "," : "", t->special[k].id);
        json_put_string(f, t->special[k].text, t->special[k].len);
        fprintf(f, ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}");
    }
    fprintf(f, "],\"normalizer\":null,"
               "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
               "\"use_regex\":true},\"post_processor\":null,"
               "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},"
               "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":null,"
               "\"end_of_word_suffix\":null,\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":false,"
               "\"vocab\":{");
    bool first = true;
    for (int32_t id = 0; id < t->vocab; id++) {
        if (id == t->eot) continue;
        fprintf(f, "%s", first ? "" : ",");
        first = false;
        json_put_token(f, t, map, id);
        fprintf(f, ":%d", id);
    }
    fprintf(f, "},\"merges\":[");
    for (int k = 0; k < t->n_merges; k++) {
        fputs(k ? ",[" : "[", f);
        json_put_token(f, t, map, t->merges[2 * k]);
        fputc(',', f);
        json_put_token(f, t, map, t->merges[2 * k + 1]);
        fputc(']', f);
    }
    fprintf(f, "]}}\n");
    bool ok = !ferror(f);
    if (fclose(f) != 0) ok = false;
    if (!ok) {
        unlink(tmp);
        return fail(err, errlen, "cannot write '%s': %s (disk full?)", tmp, strerror(errno));
    }
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        return fail(err, errlen, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    }
    return true;
}

bool tokenizer_load_err(const char *path, Tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, errlen, "cannot open tokenizer '%s': %s", path, strerror(errno));
    ByteBuf b = {0};
    uint8_t chunk[1 << 16];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) bytebuf_append(&b, chunk, got);
    bool read_error = ferror(f);
    fclose(f);
    size_t first = 0;
    while (first < b.len && (b.data[first] == ' ' || b.data[first] == '\n' || b.data[first] == '\r' || b.data[first] == '\t'))
        first++;
    bool ok = true;
    if (read_error) {
        ok = fail(err, errlen, "cannot read tokenizer '%s': %s", path, strerror(errno));
    } else if (first < b.len && b.data[first] == '{') {
        JsonValue *root;
        char jerr[512];
        if (!json_parse((const char *)b.data, b.len, &root, jerr, sizeof jerr))
            ok = fail(err, errlen, "tokenizer '%s' is not valid JSON: %s", path, jerr);
        else
            ok = load_hf(path, root, out, err, errlen);
        json_free(root);
    } else if (b.len < 8) {
        ok = fail(err, errlen, "tokenizer '%s' has %zu bytes: too short to be a tokenizer file", path, b.len);
    } else if (get32(b.data) == TOKENIZER_LLMC_MAGIC) {
        ok = load_llmc(path, b.data, b.len, out, err, errlen);
    } else if (get32(b.data) != TOKENIZER_MAGIC) {
        ok = fail(err, errlen, "'%s' has magic %d: not a tokenizer file (gdp.c %d, llm.c %d, or a tokenizer.json)",
                  path, get32(b.data), TOKENIZER_MAGIC, TOKENIZER_LLMC_MAGIC);
    } else if (b.len < 256) {
        ok = fail(err, errlen, "tokenizer '%s' is shorter than its 256-byte header: truncated", path);
    } else {
        int32_t version = get32(b.data + 4), kind = get32(b.data + 8), vocab = get32(b.data + 12),
                nm = get32(b.data + 16), pre = get32(b.data + 20), maxc = get32(b.data + 24),
                eot = version >= 2 ? get32(b.data + 28) : -1;
        int want_pre = version >= 2 ? PRETOK_GPT2 : BPE_PRETOKENIZER_ID, want_max = version >= 2 ? 0 : BPE_MAX_CHUNK;
        if (version != 1 && version != 2)
            ok = fail(err, errlen, "tokenizer '%s' has version %d: this gdp.c reads versions 1 and 2", path, version);
        else if (kind != TOKENIZER_BYTE && kind != TOKENIZER_BPE)
            ok = fail(err, errlen, "tokenizer '%s' has kind %d: not 1 (byte) or 2 (bpe)", path, kind);
        else if (nm < 0 || nm > BPE_MAX_VOCAB - 256 || (kind == TOKENIZER_BYTE && nm != 0) ||
                 (version == 1 && vocab != 256 + nm) || vocab > 256 + nm + 1 || (eot >= 0 && eot != vocab - 1))
            ok = fail(err, errlen, "tokenizer '%s': vocabulary %d, %d merges and end of text %d do not agree (corrupt)",
                      path, vocab, nm, eot);
        else if (pre != want_pre || maxc != want_max)
            ok = fail(err, errlen,
                      "tokenizer '%s' of version %d was made with pre-tokenizer %d (chunks of %d) but that version has "
                      "%d (%d): corrupt, or re-run gdp prepare",
                      path, version, pre, maxc, want_pre, want_max);
        else if (b.len != 256 + (size_t)nm * 8)
            ok = fail(err, errlen, "tokenizer '%s' has %zu bytes but %d merges need %zu: truncated or corrupt", path,
                      b.len, nm, 256 + (size_t)nm * 8);
        else {
            int32_t *merges = (int32_t *)xmalloc(((size_t)nm * 2 + 1) * sizeof(int32_t));
            for (int k = 0; k < 2 * nm; k++) merges[k] = get32(b.data + 256 + 4 * (size_t)k);
            char what[4200];
            snprintf(what, sizeof what, "tokenizer '%s'", path);
            ok = check_merges(merges, nm, what, err, errlen);
            Tokenizer *t = NULL;
            if (ok) {
                t = from_merges(merges, nm, version, eot >= 0);
                if (t) t->kind = (TokenizerKind)kind;
                if (t && kind == TOKENIZER_BYTE) t->pretok = PRETOK_NONE;
                if (!t) ok = fail(err, errlen, "tokenizer '%s': a merge refers to a token not made before it (corrupt)", path);
                else if (t->vocab != vocab) {
                    ok = fail(err, errlen, "tokenizer '%s' says vocabulary %d but its merges make %d (corrupt)", path,
                              vocab, t->vocab);
                    tokenizer_free(t);
                    t = NULL;
                }
            }
            *out = t;
            free(merges);
        }
    }
    bytebuf_free(&b);
    return ok;
}

Tokenizer *tokenizer_load(const char *path) {
    Tokenizer *t;
    char err[1024];
    if (!tokenizer_load_err(path, &t, err, sizeof err)) gdp_fatal("%s", err);
    return t;
}

static bool is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

Tokenizer *tokenizer_for_data(const char *source, char *path_out, size_t path_len) {
    char dir[4096];
    struct stat st;
    if (stat(source, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", source);
    } else if (path_is_shard_name(source) || strpbrk(source, "*?[")) {
        const char *slash = strrchr(source, '/');
        if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - source), source);
        else snprintf(dir, sizeof dir, ".");
        if (!dir[0]) snprintf(dir, sizeof dir, "/");
    } else {
        if (path_out && path_len) path_out[0] = 0;
        return tokenizer_byte();
    }
    static const char *names[] = {TOKENIZER_FILE, TOKENIZER_JSON_FILE, "gpt2_tokenizer.bin"};
    for (size_t i = 0; i < GDP_ARRAY_LEN(names); i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (!is_file(p)) continue;
        if (path_out && path_len) snprintf(path_out, path_len, "%s", p);
        return tokenizer_load(p);
    }
    if (path_out && path_len) path_out[0] = 0;
    return NULL;
}
