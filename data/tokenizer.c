#include "data/tokenizer.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

#include "core/common.h"
#include "data/text.h"

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

/* ------------------------------------------------------------------ tables of a tokenizer */

static int32_t rank_find(const Tokenizer *t, uint32_t a, uint32_t b) {
    uint64_t key = pair_key(a, b) + 1;
    size_t mask = t->rank_cap - 1;
    for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
        if (t->rank_keys[i] == key) return t->rank_vals[i];
        if (t->rank_keys[i] == 0) return -1;
    }
}

static void build_tables(Tokenizer *t) {
    t->tok_off = (int64_t *)xmalloc(((size_t)t->vocab + 1) * sizeof(int64_t));
    if (t->kind != TOKENIZER_LLMC) {
        int64_t total = 256;
        int64_t *len = (int64_t *)xmalloc((size_t)t->vocab * sizeof(int64_t));
        for (int i = 0; i < 256; i++) len[i] = 1;
        for (int k = 0; k < t->n_merges; k++) {
            len[256 + k] = len[t->merges[2 * k]] + len[t->merges[2 * k + 1]];
            total += len[256 + k];
        }
        t->tok_bytes = (uint8_t *)xmalloc((size_t)total);
        int64_t off = 0;
        for (int i = 0; i < t->vocab; i++) {
            t->tok_off[i] = off;
            if (i < 256) {
                t->tok_bytes[off] = (uint8_t)i;
            } else {
                int32_t a = t->merges[2 * (i - 256)], b = t->merges[2 * (i - 256) + 1];
                memcpy(t->tok_bytes + off, t->tok_bytes + t->tok_off[a], (size_t)len[a]);
                memcpy(t->tok_bytes + off + len[a], t->tok_bytes + t->tok_off[b], (size_t)len[b]);
            }
            off += len[i];
        }
        t->tok_off[t->vocab] = off;
        free(len);
    }
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

Tokenizer *tokenizer_byte(void) {
    Tokenizer *t = (Tokenizer *)xcalloc(1, sizeof(Tokenizer));
    t->kind = TOKENIZER_BYTE;
    t->vocab = 256;
    t->eot = -1;
    build_tables(t);
    return t;
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

Tokenizer *tokenizer_from_merges(const int32_t *merges, int n_merges) {
    char err[256];
    if (!check_merges(merges, n_merges, "tokenizer_from_merges", err, sizeof err)) gdp_fatal("%s", err);
    Tokenizer *t = (Tokenizer *)xcalloc(1, sizeof(Tokenizer));
    t->kind = TOKENIZER_BPE;
    t->n_merges = n_merges;
    t->vocab = 256 + n_merges;
    t->eot = -1;
    t->merges = (int32_t *)xmalloc(((size_t)n_merges * 2 + 1) * sizeof(int32_t));
    if (n_merges) memcpy(t->merges, merges, (size_t)n_merges * 2 * sizeof(int32_t));
    build_tables(t);
    return t;
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    free(t->merges);
    free(t->tok_off);
    free(t->tok_bytes);
    free(t->rank_keys);
    free(t->rank_vals);
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

static void heap_sift_down(Heap *h, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && heap_before(h->a[l], h->a[m])) m = l;
        if (r < h->n && heap_before(h->a[r], h->a[m])) m = r;
        if (m == i) return;
        HeapItem tmp = h->a[i];
        h->a[i] = h->a[m];
        h->a[m] = tmp;
        i = m;
    }
}

static void heap_push(Heap *h, int64_t count, uint64_t key) {
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 1024;
        h->a = (HeapItem *)xrealloc(h->a, h->cap * sizeof(HeapItem));
    }
    size_t i = h->n++;
    h->a[i] = (HeapItem){count, key};
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_before(h->a[i], h->a[p])) break;
        HeapItem tmp = h->a[i];
        h->a[i] = h->a[p];
        h->a[p] = tmp;
        i = p;
    }
}

static HeapItem heap_pop(Heap *h) {
    HeapItem top = h->a[0];
    h->a[0] = h->a[--h->n];
    heap_sift_down(h, 0);
    return top;
}

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
        size_t e = bpe_chunk_end(s, sn, i);
        size_t len = e - i;
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
    for (int32_t w = 0; w < nw; w++) {
        w_off[w] = total;
        total += w_len[w];
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

    /* 3. Merges. */
    int target = vocab - 256;
    int32_t *merges = (int32_t *)xmalloc(((size_t)target * 2 + 1) * sizeof(int32_t));
    int32_t *w_stamp = (int32_t *)xmalloc(((size_t)nw + 1) * sizeof(int32_t));
    for (int32_t w = 0; w < nw; w++) w_stamp[w] = -1;
    Delta *deltas = (Delta *)xmalloc(2 * BPE_MAX_CHUNK * sizeof(Delta));
    int32_t *touched = NULL;
    size_t n_touched = 0, cap_touched = 0;
    int m = 0;
    for (; m < target; m++) {
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
        int32_t nid = 256 + m;
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
    Tokenizer *t = tokenizer_from_merges(merges, m);
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

bool tokenizer_can_encode(const Tokenizer *t) { return t->kind == TOKENIZER_BYTE || t->kind == TOKENIZER_BPE; }

static int encode_chunk(const Tokenizer *t, const uint8_t *s, size_t len, uint32_t *out) {
    uint32_t buf[BPE_MAX_CHUNK];
    int L = (int)len;
    for (int i = 0; i < L; i++) buf[i] = s[i];
    while (L >= 2) {
        int32_t best = INT32_MAX;
        for (int i = 0; i + 1 < L; i++) {
            int32_t r = rank_find(t, buf[i], buf[i + 1]);
            if (r >= 0 && r < best) best = r;
        }
        if (best == INT32_MAX) break;
        uint32_t a = (uint32_t)t->merges[2 * best], b = (uint32_t)t->merges[2 * best + 1];
        int j = 0;
        for (int i = 0; i < L;) {
            if (i + 1 < L && buf[i] == a && buf[i + 1] == b) {
                buf[j++] = 256u + (uint32_t)best;
                i += 2;
            } else {
                buf[j++] = buf[i++];
            }
        }
        L = j;
    }
    memcpy(out, buf, (size_t)L * sizeof(uint32_t));
    return L;
}

/* Distinct chunk -> tokens, for one long encode call. Keys point into the text being encoded. */
typedef struct ChunkCache {
    uint64_t *h;
    int64_t *off;
    uint32_t *len, *tok_off, *tok_len;
    size_t cap, n;
    uint32_t *pool;
    size_t pool_len, pool_cap;
} ChunkCache;

int64_t tokenizer_encode(const Tokenizer *t, const uint8_t *text, size_t n, uint32_t *out) {
    GDP_CHECK(tokenizer_can_encode(t),
              "this tokenizer (an llm.c tokenizer file) can only decode: it does not hold the BPE merges");
    if (t->kind == TOKENIZER_BYTE || t->n_merges == 0) {
        for (size_t i = 0; i < n; i++) out[i] = text[i];
        return (int64_t)n;
    }
    bool use_cache = n >= (1 << 16);
    ChunkCache c = {0};
    if (use_cache) {
        c.cap = 1 << 20;
        c.h = (uint64_t *)xcalloc(c.cap, sizeof(uint64_t));
        c.off = (int64_t *)xmalloc(c.cap * sizeof(int64_t));
        c.len = (uint32_t *)xmalloc(c.cap * sizeof(uint32_t));
        c.tok_off = (uint32_t *)xmalloc(c.cap * sizeof(uint32_t));
        c.tok_len = (uint32_t *)xmalloc(c.cap * sizeof(uint32_t));
        c.pool_cap = 1 << 20;
        c.pool = (uint32_t *)xmalloc(c.pool_cap * sizeof(uint32_t));
    }
    int64_t nt = 0;
    for (size_t i = 0; i < n;) {
        size_t e = bpe_chunk_end(text, n, i), len = e - i;
        if (!use_cache || len == 1) {
            nt += encode_chunk(t, text + i, len, out + nt);
            i = e;
            continue;
        }
        uint64_t h = hash_bytes(text + i, len);
        size_t mask = c.cap - 1, j = h & mask;
        bool hit = false;
        while (c.h[j]) {
            if (c.h[j] == h && c.len[j] == len && !memcmp(text + c.off[j], text + i, len)) {
                memcpy(out + nt, c.pool + c.tok_off[j], c.tok_len[j] * sizeof(uint32_t));
                nt += c.tok_len[j];
                hit = true;
                break;
            }
            j = (j + 1) & mask;
        }
        if (!hit) {
            int k = encode_chunk(t, text + i, len, out + nt);
            if (c.n * 2 < c.cap && c.pool_len + (size_t)k <= UINT32_MAX) {
                if (c.pool_len + (size_t)k > c.pool_cap) {
                    c.pool_cap *= 2;
                    c.pool = (uint32_t *)xrealloc(c.pool, c.pool_cap * sizeof(uint32_t));
                }
                memcpy(c.pool + c.pool_len, out + nt, (size_t)k * sizeof(uint32_t));
                c.h[j] = h;
                c.off[j] = (int64_t)i;
                c.len[j] = (uint32_t)len;
                c.tok_off[j] = (uint32_t)c.pool_len;
                c.tok_len[j] = (uint32_t)k;
                c.pool_len += (size_t)k;
                c.n++;
            }
            nt += k;
        }
        i = e;
    }
    if (use_cache) {
        free(c.h);
        free(c.off);
        free(c.len);
        free(c.tok_off);
        free(c.tok_len);
        free(c.pool);
    }
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
    GDP_CHECK(tokenizer_can_encode(t), "cannot save an llm.c tokenizer as a gdp.c tokenizer file ('%s')", path);
    size_t bytes = 64 * 4 + (size_t)t->n_merges * 8;
    uint8_t *buf = (uint8_t *)xcalloc(bytes, 1);
    put32(buf, TOKENIZER_MAGIC);
    put32(buf + 4, TOKENIZER_VERSION);
    put32(buf + 8, t->kind);
    put32(buf + 12, t->vocab);
    put32(buf + 16, t->n_merges);
    put32(buf + 20, BPE_PRETOKENIZER_ID);
    put32(buf + 24, BPE_MAX_CHUNK);
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
    t->eot = version == 2 ? get32(buf + 12) : -1;
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
    bool ok = true;
    if (read_error) {
        ok = fail(err, errlen, "cannot read tokenizer '%s': %s", path, strerror(errno));
    } else if (b.len < 8) {
        ok = fail(err, errlen, "tokenizer '%s' has %zu bytes: too short to be a tokenizer file", path, b.len);
    } else if (get32(b.data) == TOKENIZER_LLMC_MAGIC) {
        ok = load_llmc(path, b.data, b.len, out, err, errlen);
    } else if (get32(b.data) != TOKENIZER_MAGIC) {
        ok = fail(err, errlen, "'%s' has magic %d: not a tokenizer file (gdp.c %d or llm.c %d)", path, get32(b.data),
                  TOKENIZER_MAGIC, TOKENIZER_LLMC_MAGIC);
    } else if (b.len < 256) {
        ok = fail(err, errlen, "tokenizer '%s' is shorter than its 256-byte header: truncated", path);
    } else {
        int32_t version = get32(b.data + 4), kind = get32(b.data + 8), vocab = get32(b.data + 12),
                nm = get32(b.data + 16), pre = get32(b.data + 20), maxc = get32(b.data + 24);
        if (version != TOKENIZER_VERSION)
            ok = fail(err, errlen, "tokenizer '%s' has version %d: this gdp.c reads version %d", path, version,
                      TOKENIZER_VERSION);
        else if (kind != TOKENIZER_BYTE && kind != TOKENIZER_BPE)
            ok = fail(err, errlen, "tokenizer '%s' has kind %d: not 1 (byte) or 2 (bpe)", path, kind);
        else if (nm < 0 || nm > BPE_MAX_VOCAB - 256 || vocab != 256 + nm || (kind == TOKENIZER_BYTE && nm != 0))
            ok = fail(err, errlen, "tokenizer '%s': vocabulary %d and %d merges do not agree (corrupt)", path, vocab,
                      nm);
        else if (pre != BPE_PRETOKENIZER_ID || maxc != BPE_MAX_CHUNK)
            ok = fail(err, errlen,
                      "tokenizer '%s' was made with pre-tokenizer %d (chunks of %d) but this gdp.c has %d (%d): "
                      "re-run gdp prepare",
                      path, pre, maxc, BPE_PRETOKENIZER_ID, BPE_MAX_CHUNK);
        else if (b.len != 256 + (size_t)nm * 8)
            ok = fail(err, errlen, "tokenizer '%s' has %zu bytes but %d merges need %zu: truncated or corrupt", path,
                      b.len, nm, 256 + (size_t)nm * 8);
        else {
            int32_t *merges = (int32_t *)xmalloc(((size_t)nm * 2 + 1) * sizeof(int32_t));
            for (int k = 0; k < 2 * nm; k++) merges[k] = get32(b.data + 256 + 4 * (size_t)k);
            char what[4200];
            snprintf(what, sizeof what, "tokenizer '%s'", path);
            ok = check_merges(merges, nm, what, err, errlen);
            if (ok) *out = kind == TOKENIZER_BYTE ? tokenizer_byte() : tokenizer_from_merges(merges, nm);
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
    static const char *names[] = {TOKENIZER_FILE, "gpt2_tokenizer.bin"};
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
