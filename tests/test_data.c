/* The data pipeline: shards (ours and hand-made llm.c ones), gzip text, the byte and BPE
 * tokenizers, tokenizer files, the loader (order, ranks, resume, text files) and every bad input. */
#include <dirent.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/common.h"
#include "data/loader.h"
#include "data/shard.h"
#include "data/text.h"
#include "data/tokenizer.h"
#include "tests/check_main.h"

/* ------------------------------------------------------------------ helpers */

static char rootdir[256]; /* made by the parent for the whole run (unchecked fixture) */
static char tmpdir[300];  /* one per test, inside rootdir (checked fixture, in the forked child) */

/* Removes tmpdir and the files in it (and one level of sub-folders). */
static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void root_setup(void) {
    snprintf(rootdir, sizeof rootdir, "%s/gdp_test_data_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(rootdir)) {
        perror("mkdtemp");
        exit(1);
    }
}
static void root_teardown(void) { remove_tree(rootdir); } /* also what exit tests leave behind */
static void setup(void) {
    snprintf(tmpdir, sizeof tmpdir, "%s/t_XXXXXX", rootdir);
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}
static void teardown(void) { remove_tree(tmpdir); }

static const char *tpath(const char *name) {
    static char buf[8][600];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    if (n) ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* A shard written byte by byte the way llm.c's Python writer does (not through shard.c). */
static void write_raw_shard(const char *path, int32_t magic, int32_t version, int32_t count, const uint32_t *tok,
                            int n, int width) {
    size_t bytes = 1024 + (size_t)n * (size_t)width;
    uint8_t *b = (uint8_t *)calloc(bytes, 1);
    put32(b, (uint32_t)magic);
    put32(b + 4, (uint32_t)version);
    put32(b + 8, (uint32_t)count);
    for (int i = 0; i < n; i++) {
        if (width == 2) {
            b[1024 + 2 * i] = (uint8_t)tok[i];
            b[1024 + 2 * i + 1] = (uint8_t)(tok[i] >> 8);
        } else {
            put32(b + 1024 + 4 * (size_t)i, tok[i]);
        }
    }
    write_bytes(path, b, bytes);
    free(b);
}

#define ck_assert_err_has(err, needle) \
    ck_assert_msg(strstr((err), (needle)) != NULL, "error '%s' does not mention '%s'", (err), (needle))

/* Text of pseudo-words (syllables drawn by a seeded RNG, word frequencies Zipf-like) with commas,
 * full stops and newlines: enough distinct pairs for a few hundred merges. */
static ByteBuf english_like(size_t n, uint64_t seed) {
    static const char *syl[] = {"ab", "di", "ca", "tion", "re", "nun", "ci", "sov", "er", "eign", "the", "of",
                                "an", "in", "to", "is", "ing", "ed", "con", "pro", "ly", "ment", "al", "ous",
                                "un", "de", "ex", "per", "ter", "ble", "st", "qu", "or", "ic", "en", "ge"};
    enum { NW = 1500 };
    static char words[NW][24];
    Rng rng;
    rng_seed(&rng, seed);
    for (int w = 0; w < NW; w++) {
        words[w][0] = 0;
        int ns = 1 + (int)rng_below(&rng, 4);
        for (int k = 0; k < ns; k++) strcat(words[w], syl[rng_below(&rng, GDP_ARRAY_LEN(syl))]);
        if (rng_below(&rng, 10) == 0) words[w][0] = (char)(words[w][0] - 32); /* capitalised */
    }
    ByteBuf b = {0};
    int since_nl = 0;
    while (b.len < n) {
        double u = rng_uniform(&rng);
        size_t k = (size_t)(u * u * u * NW);
        if (k >= NW) k = NW - 1;
        if (since_nl) bytebuf_append(&b, " ", 1);
        bytebuf_append(&b, words[k], strlen(words[k]));
        since_nl++;
        if (rng_below(&rng, 12) == 0) bytebuf_append(&b, ",", 1);
        if (since_nl > 9 && rng_below(&rng, 4) == 0) {
            bytebuf_append(&b, ".\n", 2);
            since_nl = 0;
        }
    }
    b.len = n;
    return b;
}

static void assert_roundtrip(const Tokenizer *t, const uint8_t *s, size_t n) {
    uint32_t *tok = (uint32_t *)malloc((n + 1) * sizeof(uint32_t));
    int64_t nt = tokenizer_encode(t, s, n, tok);
    ck_assert_int_le(nt, (int64_t)n);
    for (int64_t i = 0; i < nt; i++) ck_assert_uint_lt(tok[i], (uint32_t)t->vocab);
    size_t need = tokenizer_decode(t, tok, nt, NULL, 0);
    ck_assert_uint_eq(need, n);
    uint8_t *back = (uint8_t *)malloc(n + 1);
    ck_assert_uint_eq(tokenizer_decode(t, tok, nt, back, n), n);
    ck_assert_msg(n == 0 || memcmp(back, s, n) == 0, "decode(encode(x)) != x for %zu bytes", n);
    free(back);
    free(tok);
}

/* ------------------------------------------------------------------ shards */

START_TEST(shard_roundtrip_u16_and_u32) {
    uint32_t tok16[1000], tok32[1000];
    for (int i = 0; i < 1000; i++) {
        tok16[i] = (uint32_t)(i * 977) % 65536;
        tok32[i] = (uint32_t)i * 4000037u;
    }
    shard_write(tpath("a.bin"), tok16, 1000, 2);
    shard_write(tpath("b.bin"), tok32, 1000, 4);
    ShardInfo ia, ib;
    uint32_t *ra = shard_read_all(tpath("a.bin"), &ia);
    uint32_t *rb = shard_read_all(tpath("b.bin"), &ib);
    ck_assert_int_eq(ia.magic, SHARD_MAGIC);
    ck_assert_int_eq(ia.version, SHARD_VERSION_U16);
    ck_assert_int_eq(ib.version, SHARD_VERSION_U32);
    ck_assert_int_eq(ia.n_tokens, 1000);
    ck_assert_int_eq(ia.file_bytes, 1024 + 2000);
    ck_assert_int_eq(ib.file_bytes, 1024 + 4000);
    ck_assert_mem_eq(ra, tok16, sizeof tok16);
    ck_assert_mem_eq(rb, tok32, sizeof tok32);
    free(ra);
    free(rb);
    ck_assert_int_eq(shard_token_bytes_for_vocab(4096), 2);
    ck_assert_int_eq(shard_token_bytes_for_vocab(65536), 2);
    ck_assert_int_eq(shard_token_bytes_for_vocab(65537), 4);
    /* no .tmp left behind */
    ck_assert_int_ne(access(tpath("a.bin.tmp"), F_OK), 0);
    /* an empty shard is valid */
    shard_write(tpath("e.bin"), tok16, 0, 2);
    ck_assert_int_eq(shard_inspect(tpath("e.bin")).n_tokens, 0);
}
END_TEST

START_TEST(hand_made_llmc_shards_read) {
    uint32_t gpt2[6] = {50256, 464, 2068, 65535, 0, 13};
    write_raw_shard(tpath("fineweb_train_000001.bin"), 20240520, 1, 6, gpt2, 6, 2);
    ShardInfo i;
    uint32_t *r = shard_read_all(tpath("fineweb_train_000001.bin"), &i);
    ck_assert_int_eq(i.token_bytes, 2);
    ck_assert_int_eq(i.n_tokens, 6);
    ck_assert_mem_eq(r, gpt2, sizeof gpt2);
    free(r);
    uint32_t llama[4] = {128000, 9906, 1917, 128001};
    write_raw_shard(tpath("llama_val.bin"), 20240801, 7, 4, llama, 4, 4);
    r = shard_read_all(tpath("llama_val.bin"), &i);
    ck_assert_int_eq(i.token_bytes, 4);
    ck_assert_mem_eq(r, llama, sizeof llama);
    free(r);
    /* the loader takes an llm.c shard as is: GPT-2 ids, no tokenizer file beside it */
    LoaderConfig c = loader_config(tpath("fineweb_train_000001.bin"), SPLIT_TRAIN, 1, 5);
    Loader *l = loader_open(&c);
    int32_t in[5], tg[5];
    loader_next_batch(l, in, tg);
    for (int t = 0; t < 5; t++) {
        ck_assert_int_eq(in[t], (int32_t)gpt2[t]);
        ck_assert_int_eq(tg[t], (int32_t)gpt2[t + 1]);
    }
    loader_close(l);
}
END_TEST

START_TEST(bad_shards_are_clear_errors) {
    uint32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    char err[1024];
    ShardInfo i;
    write_bytes(tpath("empty.bin"), "", 0);
    ck_assert(!shard_inspect_err(tpath("empty.bin"), &i, err, sizeof err));
    ck_assert_err_has(err, tpath("empty.bin"));
    ck_assert_err_has(err, "header");
    write_raw_shard(tpath("magic.bin"), 12345, 1, 8, tok, 8, 2);
    ck_assert(!shard_inspect_err(tpath("magic.bin"), &i, err, sizeof err));
    ck_assert_err_has(err, tpath("magic.bin"));
    ck_assert_err_has(err, "magic 12345");
    write_raw_shard(tpath("version.bin"), 20240520, 3, 8, tok, 8, 2);
    ck_assert(!shard_inspect_err(tpath("version.bin"), &i, err, sizeof err));
    ck_assert_err_has(err, tpath("version.bin"));
    ck_assert_err_has(err, "version 3");
    write_raw_shard(tpath("llamav.bin"), 20240801, 1, 8, tok, 8, 4);
    ck_assert(!shard_inspect_err(tpath("llamav.bin"), &i, err, sizeof err));
    ck_assert_err_has(err, "version 1");
    write_raw_shard(tpath("count.bin"), 20240520, 1, 9, tok, 8, 2); /* says 9, holds 8 */
    ck_assert(!shard_inspect_err(tpath("count.bin"), &i, err, sizeof err));
    ck_assert_err_has(err, tpath("count.bin"));
    ck_assert_err_has(err, "9 tokens");
    ck_assert(!shard_inspect_err(tpath("missing.bin"), &i, err, sizeof err));
    ck_assert_err_has(err, tpath("missing.bin"));
    /* a token >= vocab */
    write_raw_shard(tpath("vocab_train.bin"), 20240520, 1, 8, tok, 8, 2);
    ck_assert(shard_inspect_err(tpath("vocab_train.bin"), &i, err, sizeof err));
    ck_assert(!shard_check_tokens_err(tpath("vocab_train.bin"), &i, 6, err, sizeof err));
    ck_assert_err_has(err, tpath("vocab_train.bin"));
    ck_assert_err_has(err, "token 6 at position 5");
    ck_assert(shard_check_tokens_err(tpath("vocab_train.bin"), &i, 9, err, sizeof err));
    /* ... and each through the loader, which checks every shard at open */
    const char *bad[] = {"empty.bin", "magic.bin", "version.bin", "count.bin", "missing.bin"};
    for (size_t k = 0; k < GDP_ARRAY_LEN(bad); k++) {
        LoaderConfig c = loader_config(tpath(bad[k]), SPLIT_TRAIN, 1, 2);
        Loader *l;
        ck_assert(!loader_open_err(&c, &l, err, sizeof err));
        ck_assert_err_has(err, tpath(bad[k]));
    }
    LoaderConfig c = loader_config(tpath("vocab_train.bin"), SPLIT_TRAIN, 1, 2);
    c.vocab = 6;
    Loader *l;
    ck_assert(!loader_open_err(&c, &l, err, sizeof err));
    ck_assert_err_has(err, "token 6");
    /* a folder with one good and one bad shard fails naming the bad one */
    mkdir(tpath("mixed"), 0777);
    shard_write(tpath("mixed/train_000000.bin"), tok, 8, 2);
    write_raw_shard(tpath("mixed/train_000001.bin"), 20240520, 1, 100, tok, 8, 2);
    c = loader_config(tpath("mixed"), SPLIT_TRAIN, 1, 2);
    ck_assert(!loader_open_err(&c, &l, err, sizeof err));
    ck_assert_err_has(err, "train_000001.bin");
}
END_TEST

START_TEST(bad_shard_is_fatal_through_loader_open) {
    uint32_t tok[4] = {1, 2, 3, 4};
    write_raw_shard(tpath("x.bin"), 7, 1, 4, tok, 4, 2);
    LoaderConfig c = loader_config(tpath("x.bin"), SPLIT_TRAIN, 1, 2);
    loader_open(&c); /* exits 1 */
}
END_TEST

/* ------------------------------------------------------------------ text */

START_TEST(gzip_and_plain_text_read_the_same) {
    ByteBuf t = english_like(300000, 5);
    write_bytes(tpath("a.txt"), t.data, t.len);
    gzFile gz = gzopen(tpath("a.txt.gz"), "wb");
    ck_assert_int_eq(gzwrite(gz, t.data, (unsigned)t.len), (int)t.len);
    gzclose(gz);
    ByteBuf p = {0}, z = {0};
    text_read_file(tpath("a.txt"), &p);
    text_read_file(tpath("a.txt.gz"), &z);
    ck_assert_uint_eq(p.len, t.len);
    ck_assert_uint_eq(z.len, t.len);
    ck_assert_mem_eq(p.data, t.data, t.len);
    ck_assert_mem_eq(z.data, t.data, t.len);
    /* a truncated gzip file is an error naming it */
    FILE *f = fopen(tpath("a.txt.gz"), "rb");
    uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    write_bytes(tpath("cut.gz"), buf, n);
    ByteBuf c = {0};
    char err[512];
    ck_assert(!text_read_file_err(tpath("cut.gz"), &c, err, sizeof err));
    ck_assert_err_has(err, tpath("cut.gz"));
    ck_assert(!text_read_file_err(tpath("nope.txt"), &c, err, sizeof err));
    ck_assert_err_has(err, tpath("nope.txt"));
    bytebuf_free(&t);
    bytebuf_free(&p);
    bytebuf_free(&z);
    bytebuf_free(&c);
}
END_TEST

START_TEST(text_split_is_a_partition_spread_over_the_text) {
    ByteBuf t = english_like(1 << 20, 9);
    ByteBuf tr = {0}, va = {0};
    text_split(t.data, t.len, 0.1, &tr, &va);
    ck_assert_uint_eq(tr.len + va.len, t.len);
    double f = (double)va.len / (double)t.len;
    ck_assert_msg(f > 0.07 && f < 0.13, "val share %g, wanted about 0.1", f);
    /* val is spread: its first bytes come from the first quarter of the text */
    ck_assert_ptr_nonnull(memmem(t.data, t.len / 4, va.data, 200));
    ByteBuf tr0 = {0};
    text_split(t.data, t.len, 0.0, &tr0, NULL);
    ck_assert_uint_eq(tr0.len, t.len);
    bytebuf_free(&t);
    bytebuf_free(&tr);
    bytebuf_free(&va);
    bytebuf_free(&tr0);
}
END_TEST

/* ------------------------------------------------------------------ tokenizers */

START_TEST(pretokenizer_chunks) {
    const char *s = "Hello  world\n\n 42x, ok";
    const char *want[] = {"Hello", " ", " world", "\n\n", " 42", "x", ",", " ok"};
    size_t n = strlen(s), i = 0, k = 0;
    while (i < n) {
        size_t e = bpe_chunk_end((const uint8_t *)s, n, i);
        ck_assert_uint_gt(e, i);
        ck_assert_uint_lt(k, GDP_ARRAY_LEN(want));
        ck_assert_msg(e - i == strlen(want[k]) && !memcmp(s + i, want[k], e - i), "chunk %zu is '%.*s', wanted '%s'",
                      k, (int)(e - i), s + i, want[k]);
        i = e;
        k++;
    }
    ck_assert_uint_eq(k, GDP_ARRAY_LEN(want));
    /* long runs are capped */
    uint8_t run[200];
    memset(run, 'a', sizeof run);
    ck_assert_uint_eq(bpe_chunk_end(run, sizeof run, 0), BPE_MAX_CHUNK);
}
END_TEST

START_TEST(bpe_hand_example) {
    /* "aaabdaaabac": aa (4) first; then ab and Za tie at 2, the smaller pair (a,b) wins; then ZY. */
    const char *s = "aaabdaaabac";
    Tokenizer *t = tokenizer_train_bpe((const uint8_t *)s, strlen(s), 300, 0, NULL);
    ck_assert_int_eq(t->n_merges, 3);
    ck_assert_int_eq(t->vocab, 259);
    int32_t want[6] = {'a', 'a', 'a', 'b', 256, 257};
    ck_assert_mem_eq(t->merges, want, sizeof want);
    uint32_t tok[11];
    int64_t n = tokenizer_encode(t, (const uint8_t *)s, strlen(s), tok);
    uint32_t want_tok[] = {258, 'd', 258, 'a', 'c'};
    ck_assert_int_eq(n, 5);
    ck_assert_mem_eq(tok, want_tok, sizeof want_tok);
    size_t len;
    const uint8_t *b = tokenizer_token_bytes(t, 258, &len);
    ck_assert_uint_eq(len, 4);
    ck_assert_mem_eq(b, "aaab", 4);
    tokenizer_free(t);
}
END_TEST

START_TEST(byte_tokenizer_roundtrips) {
    Tokenizer *t = tokenizer_byte();
    ck_assert_int_eq(t->vocab, 256);
    uint8_t all[256];
    for (int i = 0; i < 256; i++) all[i] = (uint8_t)i;
    assert_roundtrip(t, all, 256);
    uint32_t tok[256];
    ck_assert_int_eq(tokenizer_encode(t, all, 256, tok), 256);
    for (int i = 0; i < 256; i++) ck_assert_uint_eq(tok[i], (uint32_t)i);
    tokenizer_free(t);
}
END_TEST

START_TEST(bpe_random_bytes_roundtrip) {
    Rng rng;
    rng_seed(&rng, 42);
    size_t n = 300000;
    uint8_t *s = (uint8_t *)malloc(n);
    /* random bytes, drawn from a skewed distribution so that pairs repeat */
    for (size_t i = 0; i < n; i++) {
        double u = rng_uniform(&rng);
        s[i] = (uint8_t)(u * u * u * 256.0);
    }
    Tokenizer *t = tokenizer_train_bpe(s, n, 1024, 0, NULL);
    ck_assert_int_gt(t->n_merges, 100);
    assert_roundtrip(t, s, n);
    /* other random byte strings, uniform this time, of every small length and a long one */
    uint8_t buf[4096];
    for (int trial = 0; trial < 200; trial++) {
        size_t len = trial < 100 ? (size_t)trial : rng_below(&rng, sizeof buf);
        for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)rng_u64(&rng);
        assert_roundtrip(t, buf, len);
    }
    tokenizer_free(t);
    free(s);
}
END_TEST

START_TEST(bpe_text_roundtrip_compresses_and_is_deterministic) {
    ByteBuf text = english_like(600000, 3);
    BpeTrainStats st;
    Tokenizer *t = tokenizer_train_bpe(text.data, text.len, 600, 0, &st);
    ck_assert_int_eq(t->vocab, 600);
    ck_assert_int_eq(st.merges, 344);
    ck_assert_uint_eq(st.sample_bytes, text.len);
    Tokenizer *t2 = tokenizer_train_bpe(text.data, text.len, 600, 0, NULL);
    ck_assert_mem_eq(t->merges, t2->merges, (size_t)t->n_merges * 2 * sizeof(int32_t));
    assert_roundtrip(t, text.data, text.len);
    uint32_t *tok = (uint32_t *)malloc(text.len * sizeof(uint32_t));
    int64_t nt = tokenizer_encode(t, text.data, text.len, tok);
    double bpt = (double)text.len / (double)nt;
    ck_assert_msg(bpt > 3.0, "BPE at vocab 600 gives %.2f bytes/token on word text, expected > 3", bpt);
    /* the cached path (long input) equals chunk-aligned short encodes (no cache) */
    int64_t nt2 = 0;
    uint32_t *tok2 = (uint32_t *)malloc(text.len * sizeof(uint32_t));
    for (size_t i = 0; i < text.len;) {
        size_t e = i;
        while (e < text.len && e - i < 1000) e = bpe_chunk_end(text.data, text.len, e);
        nt2 += tokenizer_encode(t, text.data + i, e - i, tok2 + nt2);
        i = e;
    }
    ck_assert_int_eq(nt2, nt);
    ck_assert_mem_eq(tok2, tok, (size_t)nt * sizeof(uint32_t));
    /* a sample: fewer bytes learned from, still a full vocabulary and a round trip */
    Tokenizer *ts = tokenizer_train_bpe(text.data, text.len, 600, 200000, &st);
    ck_assert_uint_le(st.sample_bytes, 200000 + 65536);
    ck_assert_int_eq(ts->vocab, 600);
    assert_roundtrip(ts, text.data, text.len);
    /* a sample larger than a short text: all of it */
    Tokenizer *tshort = tokenizer_train_bpe(text.data, 100000, 300, 1000, &st);
    ck_assert_uint_eq(st.sample_bytes, 100000);
    tokenizer_free(tshort);
    /* UTF-8 and control bytes never learned from still round-trip */
    const char *odd = "na\xc3\xafve caf\xc3\xa9 \x01\x02\xff\xfe \t\t\r\n  \xe2\x80\x94 end";
    assert_roundtrip(t, (const uint8_t *)odd, strlen(odd));
    free(tok);
    free(tok2);
    tokenizer_free(t);
    tokenizer_free(t2);
    tokenizer_free(ts);
    bytebuf_free(&text);
}
END_TEST

START_TEST(tokenizer_files_save_load_and_errors) {
    ByteBuf text = english_like(100000, 4);
    Tokenizer *t = tokenizer_train_bpe(text.data, text.len, 400, 0, NULL);
    tokenizer_save(t, tpath("tok.bin"));
    Tokenizer *u = tokenizer_load(tpath("tok.bin"));
    ck_assert_int_eq(u->kind, TOKENIZER_BPE);
    ck_assert_int_eq(u->vocab, t->vocab);
    ck_assert_mem_eq(u->merges, t->merges, (size_t)t->n_merges * 8);
    Tokenizer *b = tokenizer_byte();
    tokenizer_save(b, tpath("byte.bin"));
    Tokenizer *b2 = tokenizer_load(tpath("byte.bin"));
    ck_assert_int_eq(b2->kind, TOKENIZER_BYTE);
    ck_assert_int_eq(b2->vocab, 256);
    char err[1024];
    Tokenizer *x;
    /* truncated */
    FILE *f = fopen(tpath("tok.bin"), "rb");
    uint8_t buf[8192];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    write_bytes(tpath("cut.bin"), buf, n - 3);
    ck_assert(!tokenizer_load_err(tpath("cut.bin"), &x, err, sizeof err));
    ck_assert_err_has(err, tpath("cut.bin"));
    /* a merge referring to a later token */
    put32(buf + 256, 300);
    write_bytes(tpath("bad_merge.bin"), buf, n);
    ck_assert(!tokenizer_load_err(tpath("bad_merge.bin"), &x, err, sizeof err));
    ck_assert_err_has(err, "merge 0");
    /* not a tokenizer */
    write_bytes(tpath("junk.bin"), "hello world, no tokenizer", 25);
    ck_assert(!tokenizer_load_err(tpath("junk.bin"), &x, err, sizeof err));
    ck_assert_err_has(err, "not a tokenizer");
    ck_assert(!tokenizer_load_err(tpath("none.bin"), &x, err, sizeof err));
    ck_assert_err_has(err, tpath("none.bin"));
    /* llm.c's decode-only file: version 2 with an end-of-text token */
    uint8_t l[1024 + 32] = {0};
    put32(l, 20240328);
    put32(l + 4, 2);
    put32(l + 8, 3);
    put32(l + 12, 2);
    size_t p = 1024;
    const char *toks[3] = {"he", "llo", "<|endoftext|>"};
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(toks[i]);
        ck_assert_uint_le(p + 1 + k, sizeof l);
        l[p++] = (uint8_t)k;
        memcpy(l + p, toks[i], k);
        p += k;
    }
    write_bytes(tpath("gpt2_tokenizer.bin"), l, p);
    Tokenizer *g = tokenizer_load(tpath("gpt2_tokenizer.bin"));
    ck_assert_int_eq(g->kind, TOKENIZER_LLMC);
    ck_assert_int_eq(g->vocab, 3);
    ck_assert_int_eq(g->eot, 2);
    ck_assert(!tokenizer_can_encode(g));
    uint32_t ids[2] = {0, 1};
    uint8_t out[8];
    ck_assert_uint_eq(tokenizer_decode(g, ids, 2, out, sizeof out), 5);
    ck_assert_mem_eq(out, "hello", 5);
    tokenizer_free(g);
    tokenizer_free(t);
    tokenizer_free(u);
    tokenizer_free(b);
    tokenizer_free(b2);
    bytebuf_free(&text);
}
END_TEST

START_TEST(tokenizer_for_data_finds_the_right_one) {
    mkdir(tpath("d"), 0777);
    char found[600];
    ck_assert_ptr_null(tokenizer_for_data(tpath("d"), found, sizeof found)); /* shards without tokenizer */
    Tokenizer *b = tokenizer_byte();
    tokenizer_save(b, tpath("d/tokenizer.bin"));
    Tokenizer *t = tokenizer_for_data(tpath("d"), found, sizeof found);
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(found, tpath("d/tokenizer.bin"));
    tokenizer_free(t);
    t = tokenizer_for_data(tpath("d/train_000000.bin"), found, sizeof found);
    ck_assert_str_eq(found, tpath("d/tokenizer.bin"));
    tokenizer_free(t);
    t = tokenizer_for_data(tpath("d/*train*.bin"), NULL, 0);
    ck_assert_ptr_nonnull(t);
    tokenizer_free(t);
    t = tokenizer_for_data(tpath("corpus.txt"), found, sizeof found); /* text: bytes */
    ck_assert_int_eq(t->kind, TOKENIZER_BYTE);
    tokenizer_free(t);
    tokenizer_free(b);
}
END_TEST

/* ------------------------------------------------------------------ loader */

/* A shard whose token i is base + i (uint32), so a window's first input names its position. */
static void index_shard(const char *path, int64_t n, uint32_t base) {
    uint32_t *t = (uint32_t *)malloc((size_t)n * sizeof(uint32_t));
    for (int64_t i = 0; i < n; i++) t[i] = base + (uint32_t)i;
    shard_write(path, t, n, 4);
    free(t);
}

START_TEST(loader_windows_are_contiguous_and_seeded) {
    const int B = 4, T = 16;
    index_shard(tpath("idx_train.bin"), 16 * 100 + 1, 0);
    LoaderConfig c = loader_config(tpath("idx_train.bin"), SPLIT_TRAIN, B, T);
    c.seed = 7;
    Loader *a = loader_open(&c), *b = loader_open(&c);
    c.seed = 8;
    Loader *d = loader_open(&c);
    ck_assert_int_eq(loader_n_tokens(a), 1601);
    int32_t in[64], tg[64], in2[64], tg2[64], in3[64], tg3[64];
    int differ = 0;
    for (int step = 0; step < 60; step++) { /* more than one epoch (24 or 25 batches) */
        loader_next_batch(a, in, tg);
        loader_next_batch(b, in2, tg2);
        loader_next_batch(d, in3, tg3);
        ck_assert_mem_eq(in, in2, sizeof in);
        ck_assert_mem_eq(tg, tg2, sizeof tg);
        differ += memcmp(in, in3, sizeof in) != 0;
        for (int w = 0; w < B; w++)
            for (int t = 0; t < T; t++) {
                ck_assert_int_eq(in[w * T + t], in[w * T] + t);
                ck_assert_int_eq(tg[w * T + t], in[w * T + t] + 1);
            }
    }
    ck_assert_int_gt(differ, 50);
    loader_close(a);
    loader_close(b);
    loader_close(d);
}
END_TEST

/* One epoch of a rank: the window starts it reads. */
static int64_t epoch_starts(const char *src, int world, int rank, int B, int T, int shuffle, int32_t *starts) {
    LoaderConfig c = loader_config(src, SPLIT_TRAIN, B, T);
    c.world = world;
    c.rank = rank;
    c.seed = 11;
    c.shuffle = shuffle;
    Loader *l = loader_open(&c);
    int64_t nb = loader_batches_per_epoch(l), k = 0;
    int32_t *in = (int32_t *)malloc((size_t)B * T * 4), *tg = (int32_t *)malloc((size_t)B * T * 4);
    for (int64_t s = 0; s < nb; s++) {
        loader_next_batch(l, in, tg);
        for (int w = 0; w < B; w++) starts[k++] = in[w * T];
    }
    free(in);
    free(tg);
    loader_close(l);
    return k;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

START_TEST(loader_ranks_read_disjoint_windows) {
    const int B = 3, T = 8;
    mkdir(tpath("multi"), 0777);
    /* two shards: ids 0.. and 100000.., windows never cross a shard */
    index_shard(tpath("multi/x_train_000000.bin"), 8 * 50 + 1, 0);
    index_shard(tpath("multi/x_train_000001.bin"), 8 * 31 + 1, 100000);
    index_shard(tpath("multi/x_val_000000.bin"), 8 * 10 + 1, 500000);
    int32_t s0[200], s1[200], all[400], one[200];
    int64_t n0 = epoch_starts(tpath("multi"), 2, 0, B, T, 1, s0);
    int64_t n1 = epoch_starts(tpath("multi"), 2, 1, B, T, 1, s1);
    ck_assert_int_eq(n0, n1);
    ck_assert_int_ge(n0, 3 * 12);
    memcpy(all, s0, (size_t)n0 * 4);
    memcpy(all + n0, s1, (size_t)n1 * 4);
    qsort(all, (size_t)(n0 + n1), 4, cmp_i32);
    for (int64_t i = 1; i < n0 + n1; i++) ck_assert_int_ne(all[i], all[i - 1]); /* disjoint, no repeats */
    for (int64_t i = 0; i < n0 + n1; i++) ck_assert_int_lt(all[i], 500000);     /* train only */
    /* in order (no shuffle, shift 0): rank 0 of 1 reads every window start j*T of both shards */
    int64_t n = epoch_starts(tpath("multi"), 1, 0, B, T, 0, one);
    ck_assert_int_eq(n, 81 / B * B);
    for (int64_t i = 0; i < n; i++) ck_assert_int_eq(one[i], i < 50 ? 8 * (int32_t)i : 100000 + 8 * (int32_t)(i - 50));
    /* the val split reads the val shard */
    LoaderConfig c = loader_config(tpath("multi"), SPLIT_VAL, 2, T);
    Loader *v = loader_open(&c);
    int32_t in[16], tg[16];
    loader_next_batch(v, in, tg);
    ck_assert_int_eq(in[0], 500000);
    ck_assert_int_eq(in[T], 500000 + T);
    ck_assert_int_eq(loader_batches_per_epoch(v), 5);
    loader_close(v);
}
END_TEST

START_TEST(loader_global_batch_is_the_same_for_any_world) {
    /* world 1 x B 4 and world 2 x B 2 read the same windows per global batch */
    index_shard(tpath("g_train.bin"), 8 * 77 + 1, 0);
    LoaderConfig c = loader_config(tpath("g_train.bin"), SPLIT_TRAIN, 4, 8);
    c.seed = 5;
    Loader *one = loader_open(&c);
    c.batch = 2;
    c.world = 2;
    Loader *r0 = loader_open(&c);
    c.rank = 1;
    Loader *r1 = loader_open(&c);
    for (int k = 0; k < 40; k++) {
        int32_t in[32], tg[32], a[16], b[16], ta[16], tb[16];
        loader_next_batch(one, in, tg);
        loader_next_batch(r0, a, ta);
        loader_next_batch(r1, b, tb);
        ck_assert_mem_eq(in, a, sizeof a);
        ck_assert_mem_eq(in + 16, b, sizeof b);
    }
    loader_close(one);
    loader_close(r0);
    loader_close(r1);
}
END_TEST

START_TEST(loader_resume_continues_the_same_order) {
    enum { B = 2, T = 8, STEPS = 60 };
    index_shard(tpath("r_train.bin"), 8 * 41 + 1, 0); /* 41 windows: 20 batches per epoch */
    LoaderConfig c = loader_config(tpath("r_train.bin"), SPLIT_TRAIN, B, T);
    c.seed = 99;
    static int32_t ref_in[STEPS][B * T], ref_tg[STEPS][B * T];
    Loader *a = loader_open(&c);
    for (int k = 0; k < STEPS; k++) loader_next_batch(a, ref_in[k], ref_tg[k]);
    loader_close(a);
    const int at[] = {0, 1, 13, 19, 20, 21, 39, 44};
    for (size_t q = 0; q < GDP_ARRAY_LEN(at); q++) {
        Loader *part = loader_open(&c);
        int32_t in[B * T], tg[B * T];
        for (int k = 0; k < at[q]; k++) loader_next_batch(part, in, tg);
        LoaderState st = loader_get_state(part);
        loader_close(part);
        int64_t as_array[LOADER_STATE_N]; /* how a checkpoint stores it */
        memcpy(as_array, &st, sizeof st);
        LoaderState back;
        memcpy(&back, as_array, sizeof back);
        LoaderConfig c2 = c;
        c2.seed = 12345; /* the state's seed wins */
        Loader *r = loader_open(&c2);
        loader_set_state(r, &back);
        for (int k = at[q]; k < at[q] + 10; k++) {
            loader_next_batch(r, in, tg);
            ck_assert_msg(!memcmp(in, ref_in[k], sizeof in) && !memcmp(tg, ref_tg[k], sizeof tg),
                          "resumed after %d batches: batch %d differs", at[q], k);
        }
        loader_close(r);
    }
    /* the epoch counter moves on after 20 batches */
    Loader *e = loader_open(&c);
    int32_t in[B * T], tg[B * T];
    for (int k = 0; k < 21; k++) loader_next_batch(e, in, tg);
    ck_assert_int_eq(loader_get_state(e).epoch, 1);
    ck_assert_int_eq(loader_get_state(e).consumed, B);
    loader_close(e);
}
END_TEST

START_TEST(loader_resume_with_other_seq_is_fatal) {
    index_shard(tpath("s_train.bin"), 1000, 0);
    LoaderConfig c = loader_config(tpath("s_train.bin"), SPLIT_TRAIN, 2, 8);
    Loader *a = loader_open(&c);
    LoaderState s = loader_get_state(a);
    ck_assert_int_eq(s.n_tokens, 1000);
    loader_close(a);
    c.seq_len = 16;
    Loader *b = loader_open(&c);
    loader_set_state(b, &s); /* exits 1 */
}
END_TEST

START_TEST(loader_reads_text_files_as_bytes) {
    ByteBuf t = english_like(200000, 21);
    write_bytes(tpath("corpus.txt"), t.data, t.len);
    LoaderConfig c = loader_config(tpath("corpus.txt"), SPLIT_TRAIN, 4, 32);
    c.val_fraction = 0.2;
    Loader *l = loader_open(&c);
    ck_assert_int_eq(loader_vocab(l), 256);
    int64_t ntr = loader_n_tokens(l);
    int32_t in[128], tg[128];
    for (int k = 0; k < 10; k++) {
        loader_next_batch(l, in, tg);
        for (int w = 0; w < 4; w++) {
            char win[33];
            for (int i = 0; i < 32; i++) {
                ck_assert_int_lt(in[w * 32 + i], 256);
                win[i] = (char)in[w * 32 + i];
                if (i) ck_assert_int_eq(tg[w * 32 + i - 1], in[w * 32 + i]);
            }
            ck_assert_ptr_nonnull(memmem(t.data, t.len, win, 32)); /* a real window of the text */
        }
    }
    loader_close(l);
    c.split = SPLIT_VAL;
    Loader *v = loader_open(&c);
    int64_t nva = loader_n_tokens(v);
    ck_assert_int_eq(ntr + nva, (int64_t)t.len);
    ck_assert_int_gt(nva, (int64_t)t.len / 8);
    loader_close(v);
    ck_assert(loader_split_exists(tpath("corpus.txt"), SPLIT_VAL, 0.2));
    ck_assert(!loader_split_exists(tpath("corpus.txt"), SPLIT_VAL, 0.0));
    /* gzip text works the same */
    gzFile gz = gzopen(tpath("corpus.txt.gz"), "wb");
    gzwrite(gz, t.data, (unsigned)t.len);
    gzclose(gz);
    c = loader_config(tpath("corpus.txt.gz"), SPLIT_TRAIN, 4, 32);
    c.val_fraction = 0.2;
    l = loader_open(&c);
    ck_assert_int_eq(loader_n_tokens(l), ntr);
    loader_close(l);
    bytebuf_free(&t);
}
END_TEST

START_TEST(loader_bad_inputs_are_clear_errors) {
    char err[2048];
    Loader *l;
    LoaderConfig c = loader_config(tpath("missing.txt"), SPLIT_TRAIN, 1, 4);
    ck_assert(!loader_open_err(&c, &l, err, sizeof err));
    ck_assert_err_has(err, tpath("missing.txt"));
    write_bytes(tpath("empty.txt"), "", 0);
    c = loader_config(tpath("empty.txt"), SPLIT_TRAIN, 1, 4);
    ck_assert(!loader_open_err(&c, &l, err, sizeof err));
    ck_assert_err_has(err, tpath("empty.txt"));
    ck_assert_err_has(err, "empty");
    /* too little data for one batch on every rank */
    index_shard(tpath("small_train.bin"), 33, 0);
    c = loader_config(tpath("small_train.bin"), SPLIT_TRAIN, 2, 8);
    c.world = 3;
    ck_assert(!loader_open_err(&c, &l, err, sizeof err));
    ck_assert_err_has(err, tpath("small_train.bin"));
    ck_assert_err_has(err, "too few");
    c.world = 2;
    ck_assert(loader_open_err(&c, &l, err, sizeof err));
    loader_close(l);
    /* a folder without shards of the split */
    mkdir(tpath("nothing"), 0777);
    c = loader_config(tpath("nothing"), SPLIT_TRAIN, 1, 4);
    ck_assert(!loader_open_err(&c, &l, err, sizeof err));
    ck_assert_err_has(err, tpath("nothing"));
    ck_assert_err_has(err, "gdp prepare");
    ck_assert(!loader_split_exists(tpath("nothing"), SPLIT_VAL, 0.1));
    /* val of a single shard named train -> the val file beside it */
    index_shard(tpath("tiny_train.bin"), 100, 0);
    c = loader_config(tpath("tiny_train.bin"), SPLIT_VAL, 1, 4);
    ck_assert(!loader_open_err(&c, &l, err, sizeof err));
    ck_assert_err_has(err, tpath("tiny_val.bin"));
    index_shard(tpath("tiny_val.bin"), 100, 7000);
    ck_assert(loader_open_err(&c, &l, err, sizeof err));
    int32_t in[4], tg[4];
    loader_next_batch(l, in, tg);
    ck_assert_int_eq(in[0], 7000);
    loader_close(l);
    /* a pattern */
    c = loader_config(tpath("*_train.bin"), SPLIT_TRAIN, 1, 4);
    ck_assert(loader_open_err(&c, &l, err, sizeof err));
    ck_assert_int_eq(loader_n_shards(l), 2);
    loader_close(l);
    /* the tokenizer beside the shards bounds the tokens */
    mkdir(tpath("tok"), 0777);
    index_shard(tpath("tok/train_000000.bin"), 300, 0);
    Tokenizer *b = tokenizer_byte();
    tokenizer_save(b, tpath("tok/tokenizer.bin"));
    tokenizer_free(b);
    c = loader_config(tpath("tok"), SPLIT_TRAIN, 1, 4);
    ck_assert(!loader_open_err(&c, &l, err, sizeof err));
    ck_assert_err_has(err, "token 256");
    ck_assert_err_has(err, "train_000000.bin");
    /* bad arguments */
    c = loader_config(tpath("tiny_train.bin"), SPLIT_TRAIN, 0, 4);
    ck_assert(!loader_open_err(&c, &l, err, sizeof err));
    c = loader_config(tpath("tiny_train.bin"), SPLIT_TRAIN, 1, 4);
    c.rank = 2;
    c.world = 2;
    ck_assert(!loader_open_err(&c, &l, err, sizeof err));
}
END_TEST

START_TEST(loader_checks_tokens_of_big_data_at_read) {
    /* LOADER_SCAN_TOKENS is too big to exceed here; the per-window check is tested through a
     * shard that goes bad after open (the loader keeps it open). */
    index_shard(tpath("late_train.bin"), 9, 0);
    LoaderConfig c = loader_config(tpath("late_train.bin"), SPLIT_TRAIN, 1, 8);
    c.vocab = 100;
    Loader *l = loader_open(&c);
    uint32_t bad[9] = {0, 1, 2, 3, 4, 5, 6, 7, 1000};
    FILE *f = fopen(tpath("late_train.bin"), "r+b");
    fseek(f, 1024, SEEK_SET);
    fwrite(bad, 4, 9, f);
    fclose(f);
    int32_t in[8], tg[8];
    loader_next_batch(l, in, tg); /* exits 1 naming the shard and token 1000 */
}
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("data");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, root_setup, root_teardown);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, shard_roundtrip_u16_and_u32);
    tcase_add_test(tc, hand_made_llmc_shards_read);
    tcase_add_test(tc, bad_shards_are_clear_errors);
    tcase_add_exit_test(tc, bad_shard_is_fatal_through_loader_open, 1);
    tcase_add_test(tc, gzip_and_plain_text_read_the_same);
    tcase_add_test(tc, text_split_is_a_partition_spread_over_the_text);
    tcase_add_test(tc, pretokenizer_chunks);
    tcase_add_test(tc, bpe_hand_example);
    tcase_add_test(tc, byte_tokenizer_roundtrips);
    tcase_add_test(tc, bpe_random_bytes_roundtrip);
    tcase_add_test(tc, bpe_text_roundtrip_compresses_and_is_deterministic);
    tcase_add_test(tc, tokenizer_files_save_load_and_errors);
    tcase_add_test(tc, tokenizer_for_data_finds_the_right_one);
    tcase_add_test(tc, loader_windows_are_contiguous_and_seeded);
    tcase_add_test(tc, loader_ranks_read_disjoint_windows);
    tcase_add_test(tc, loader_global_batch_is_the_same_for_any_world);
    tcase_add_test(tc, loader_resume_continues_the_same_order);
    tcase_add_exit_test(tc, loader_resume_with_other_seq_is_fatal, 1);
    tcase_add_test(tc, loader_reads_text_files_as_bytes);
    tcase_add_test(tc, loader_bad_inputs_are_clear_errors);
    tcase_add_exit_test(tc, loader_checks_tokens_of_big_data_at_read, 1);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
