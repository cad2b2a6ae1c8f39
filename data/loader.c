#include "data/loader.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "data/shard.h"
#include "data/text.h"
#include "data/tokenizer.h"

_Static_assert(sizeof(LoaderState) == LOADER_STATE_N * sizeof(int64_t), "LoaderState must be int64 only");

#define LOADER_MAX_OPEN_FDS 256

typedef struct LoaderShard {
    char *path;
    ShardInfo info;     /* token_bytes 1 for in-memory text */
    int fd;             /* -1: opened per read (many shards) or in memory */
    const uint8_t *mem; /* text bytes, or NULL */
} LoaderShard;

struct Loader {
    LoaderConfig cfg;
    char *source;
    bool shuffle;
    int64_t vocab;
    int n_shards;
    LoaderShard *shards;
    uint8_t *text; /* owned bytes of a text source */
    int64_t n_tokens;
    uint64_t seed;
    /* current epoch */
    int64_t epoch, batch_idx, shift, n_windows, batches;
    int64_t *prefix; /* [n_shards + 1] windows before shard s */
    uint64_t keys[4];
    int half_bits;
    uint32_t *buf; /* T + 1 tokens */
};

static bool fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return false;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = (char *)xmalloc(n);
    memcpy(d, s, n);
    return d;
}

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

LoaderConfig loader_config(const char *source, DataSplit split, int batch, int seq_len) {
    LoaderConfig c;
    memset(&c, 0, sizeof c);
    c.source = source;
    c.split = split;
    c.batch = batch;
    c.seq_len = seq_len;
    c.seed = 1;
    c.rank = 0;
    c.world = 1;
    c.vocab = 0;
    c.val_fraction = LOADER_DEFAULT_VAL_FRACTION;
    c.shuffle = -1;
    return c;
}

static const char *split_word(DataSplit s) { return s == SPLIT_VAL ? "val" : "train"; }

/* Whether name has word as a whole part between '_', '-', '.' or the ends. */
static bool has_word(const char *name, const char *word) {
    size_t wl = strlen(word);
    for (const char *p = strstr(name, word); p; p = strstr(p + 1, word)) {
        bool left = p == name || p[-1] == '_' || p[-1] == '-' || p[-1] == '.';
        char r = p[wl];
        bool right = r == 0 || r == '_' || r == '-' || r == '.';
        if (left && right) return true;
    }
    return false;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct PathList {
    char **p;
    int n, cap;
} PathList;

static void paths_add(PathList *l, const char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->p = (char **)xrealloc(l->p, (size_t)l->cap * sizeof(char *));
    }
    l->p[l->n++] = xstrdup(s);
}

static void paths_free(PathList *l) {
    for (int i = 0; i < l->n; i++) free(l->p[i]);
    free(l->p);
    memset(l, 0, sizeof *l);
}

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool has_glob(const char *s) { return strpbrk(s, "*?[") != NULL; }

/* The pattern (or file) for the split: for val, "train" in the name becomes "val". */
static bool split_pattern(const char *source, DataSplit split, char *out, size_t len, char *err, size_t errlen) {
    const char *base = strrchr(source, '/');
    base = base ? base + 1 : source;
    if (split == SPLIT_TRAIN || has_word(base, "val")) {
        snprintf(out, len, "%s", source);
        return true;
    }
    const char *t = NULL;
    for (const char *p = strstr(base, "train"); p; p = strstr(p + 1, "train")) t = p;
    if (!t)
        return fail(err, errlen,
                    "cannot tell the validation shards of '%s' (no \"train\" in the name to replace by \"val\"): "
                    "name them explicitly (e.g. --val-data)",
                    source);
    snprintf(out, len, "%.*sval%s", (int)(t - source), source, t + 5);
    return true;
}

static bool find_shards(const char *source, DataSplit split, PathList *out, char *err, size_t errlen) {
    if (is_dir(source)) {
        DIR *d = opendir(source);
        if (!d) return fail(err, errlen, "cannot read folder '%s': %s", source, strerror(errno));
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!path_is_shard_name(e->d_name) || !has_word(e->d_name, split_word(split))) continue;
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", source, e->d_name);
            paths_add(out, p);
        }
        closedir(d);
        if (!out->n)
            return fail(err, errlen,
                        "folder '%s' has no %s shards (*%s*.bin): make them with 'gdp prepare --input FILE --out %s'",
                        source, split_word(split), split_word(split), source);
    } else {
        char pat[4200];
        if (!split_pattern(source, split, pat, sizeof pat, err, errlen)) return false;
        if (has_glob(pat)) {
            glob_t g;
            int rc = glob(pat, 0, NULL, &g);
            if (rc == 0)
                for (size_t i = 0; i < g.gl_pathc; i++) paths_add(out, g.gl_pathv[i]);
            globfree(&g);
            if (!out->n) return fail(err, errlen, "no %s shards match '%s'", split_word(split), pat);
        } else {
            struct stat st;
            if (stat(pat, &st) != 0)
                return fail(err, errlen, "cannot open %s shard '%s': %s", split_word(split), pat, strerror(errno));
            paths_add(out, pat);
        }
    }
    qsort(out->p, (size_t)out->n, sizeof(char *), cmp_str);
    return true;
}

/* ------------------------------------------------------------------ epochs */

static int64_t shard_windows(const LoaderShard *s, int64_t shift, int64_t T) {
    int64_t avail = s->info.n_tokens - 1 - shift;
    return avail >= T ? avail / T : 0;
}

static int64_t count_windows(const Loader *l, int64_t shift) {
    int64_t w = 0;
    for (int s = 0; s < l->n_shards; s++) w += shard_windows(&l->shards[s], shift, l->cfg.seq_len);
    return w;
}

static void setup_epoch(Loader *l, int64_t epoch) {
    int64_t T = l->cfg.seq_len, G = (int64_t)l->cfg.world * l->cfg.batch;
    l->epoch = epoch;
    l->batch_idx = 0;
    Rng rng;
    rng_seed(&rng, l->seed ^ mix64((uint64_t)epoch + 0x5bd1e995ULL));
    for (int i = 0; i < 4; i++) l->keys[i] = rng_u64(&rng);
    l->shift = l->shuffle ? (int64_t)rng_below(&rng, (uint64_t)T) : 0;
    if (count_windows(l, l->shift) < G) l->shift = 0; /* a shift must never leave an epoch empty */
    int64_t acc = 0;
    for (int s = 0; s < l->n_shards; s++) {
        l->prefix[s] = acc;
        acc += shard_windows(&l->shards[s], l->shift, T);
    }
    l->prefix[l->n_shards] = acc;
    l->n_windows = acc;
    l->batches = acc / G;
    int bits = 2;
    while (bits < 62 && ((uint64_t)1 << bits) < (uint64_t)acc) bits++;
    if (bits & 1) bits++;
    l->half_bits = bits / 2;
}

static uint64_t feistel(const Loader *l, uint64_t x) {
    int h = l->half_bits;
    uint64_t mask = ((uint64_t)1 << h) - 1;
    uint64_t L = x >> h, R = x & mask;
    for (int r = 0; r < 4; r++) {
        uint64_t F = mix64(R ^ l->keys[r]) & mask;
        uint64_t nl = R;
        R = L ^ F;
        L = nl;
    }
    return (L << h) | R;
}

static int64_t window_at(const Loader *l, int64_t pos) {
    if (!l->shuffle) return pos;
    uint64_t x = (uint64_t)pos;
    do x = feistel(l, x);
    while (x >= (uint64_t)l->n_windows);
    return (int64_t)x;
}

static void read_window(Loader *l, int64_t w, uint32_t *dst) {
    int lo = 0, hi = l->n_shards - 1; /* last shard with prefix <= w */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (l->prefix[mid] <= w) lo = mid;
        else hi = mid - 1;
    }
    LoaderShard *s = &l->shards[lo];
    int64_t T = l->cfg.seq_len;
    int64_t start = l->shift + (w - l->prefix[lo]) * T;
    if (s->mem) {
        for (int64_t i = 0; i <= T; i++) dst[i] = s->mem[start + i];
        return;
    }
    char err[1024];
    int fd = s->fd;
    if (fd < 0) {
        fd = open(s->path, O_RDONLY);
        if (fd < 0) gdp_fatal("cannot open shard '%s': %s", s->path, strerror(errno));
    }
    bool ok = shard_read_tokens_err(fd, s->path, &s->info, start, T + 1, dst, err, sizeof err);
    if (s->fd < 0) close(fd);
    if (!ok) gdp_fatal("%s", err);
    if (l->vocab > 0)
        for (int64_t i = 0; i <= T; i++)
            if ((int64_t)dst[i] >= l->vocab)
                gdp_fatal("shard '%s' holds token %u at position %lld, but the vocabulary has %lld tokens: the shard "
                          "was made with another tokenizer (re-run gdp prepare, or give the matching --vocab)",
                          s->path, dst[i], (long long)(start + i), (long long)l->vocab);
}

/* ------------------------------------------------------------------ open / close */

static bool open_text(Loader *l, char *err, size_t errlen) {
    ByteBuf all = {0};
    if (!text_read_file_err(l->source, &all, err, errlen)) {
        bytebuf_free(&all);
        return false;
    }
    if (all.len == 0) {
        bytebuf_free(&all);
        return fail(err, errlen, "input '%s' is empty: there is no text to train on", l->source);
    }
    if (l->cfg.val_fraction < 0 || l->cfg.val_fraction >= 1) {
        bytebuf_free(&all);
        return fail(err, errlen, "val fraction %g is out of range: use 0 <= f < 1", l->cfg.val_fraction);
    }
    ByteBuf part = {0};
    text_split(all.data, all.len, l->cfg.val_fraction, l->cfg.split == SPLIT_TRAIN ? &part : NULL,
               l->cfg.split == SPLIT_VAL ? &part : NULL);
    bytebuf_free(&all);
    if (part.len == 0) {
        bytebuf_free(&part);
        return fail(err, errlen,
                    "text '%s' has no validation part with val fraction %g (too short, or the fraction is 0)",
                    l->source, l->cfg.val_fraction);
    }
    l->text = part.data;
    l->n_shards = 1;
    l->shards = (LoaderShard *)xcalloc(1, sizeof(LoaderShard));
    l->shards[0].path = xstrdup(l->source);
    l->shards[0].fd = -1;
    l->shards[0].mem = l->text;
    l->shards[0].info.token_bytes = 1;
    l->shards[0].info.n_tokens = (int64_t)part.len;
    l->shards[0].info.file_bytes = (int64_t)part.len;
    if (l->vocab == 0) l->vocab = 256;
    if (l->vocab < 256)
        return fail(err, errlen,
                    "text '%s' is byte-tokenised (vocabulary 256) but the vocabulary is %lld: use --vocab 256 or "
                    "more, or prepare the text with gdp prepare",
                    l->source, (long long)l->vocab);
    return true;
}

static bool open_shards(Loader *l, char *err, size_t errlen) {
    PathList paths = {0};
    if (!find_shards(l->source, l->cfg.split, &paths, err, errlen)) {
        paths_free(&paths);
        return false;
    }
    l->n_shards = paths.n;
    l->shards = (LoaderShard *)xcalloc((size_t)paths.n, sizeof(LoaderShard));
    for (int i = 0; i < paths.n; i++) {
        l->shards[i].path = paths.p[i];
        l->shards[i].fd = -1;
        paths.p[i] = NULL;
    }
    paths_free(&paths);
    int64_t total = 0;
    int max_width = 2;
    for (int i = 0; i < l->n_shards; i++) {
        if (!shard_inspect_err(l->shards[i].path, &l->shards[i].info, err, errlen)) return false;
        total += l->shards[i].info.n_tokens;
        max_width = GDP_MAX(max_width, l->shards[i].info.token_bytes);
    }
    if (l->vocab == 0) {
        Tokenizer *t = tokenizer_for_data(l->source, NULL, 0);
        if (t) l->vocab = t->vocab;
        tokenizer_free(t);
    }
    if (l->vocab > 0 && total <= LOADER_SCAN_TOKENS)
        for (int i = 0; i < l->n_shards; i++)
            if (!shard_check_tokens_err(l->shards[i].path, &l->shards[i].info, l->vocab, err, errlen)) return false;
    if (l->n_shards <= LOADER_MAX_OPEN_FDS)
        for (int i = 0; i < l->n_shards; i++) {
            l->shards[i].fd = open(l->shards[i].path, O_RDONLY);
            if (l->shards[i].fd < 0)
                return fail(err, errlen, "cannot open shard '%s': %s", l->shards[i].path, strerror(errno));
        }
    return true;
}

bool loader_open_err(const LoaderConfig *cfg, Loader **out, char *err, size_t errlen) {
    *out = NULL;
    if (!cfg->source || !cfg->source[0]) return fail(err, errlen, "no data source given");
    if (cfg->batch < 1 || cfg->seq_len < 1)
        return fail(err, errlen, "batch %d and sequence length %d must both be at least 1", cfg->batch, cfg->seq_len);
    if (cfg->world < 1 || cfg->rank < 0 || cfg->rank >= cfg->world)
        return fail(err, errlen, "rank %d of world %d is not valid", cfg->rank, cfg->world);
    Loader *l = (Loader *)xcalloc(1, sizeof(Loader));
    l->cfg = *cfg;
    l->source = xstrdup(cfg->source);
    l->cfg.source = l->source;
    l->shuffle = cfg->shuffle < 0 ? cfg->split == SPLIT_TRAIN : cfg->shuffle != 0;
    l->vocab = cfg->vocab;
    l->seed = cfg->seed;
    bool ok = (is_dir(l->source) || path_is_shard_name(l->source) || has_glob(l->source)) ? open_shards(l, err, errlen)
                                                                                           : open_text(l, err, errlen);
    if (ok) {
        for (int i = 0; i < l->n_shards; i++) l->n_tokens += l->shards[i].info.n_tokens;
        l->prefix = (int64_t *)xmalloc(((size_t)l->n_shards + 1) * sizeof(int64_t));
        l->buf = (uint32_t *)xmalloc(((size_t)cfg->seq_len + 1) * sizeof(uint32_t));
        int64_t G = (int64_t)cfg->world * cfg->batch, W = count_windows(l, 0);
        if (W < G)
            ok = fail(err, errlen,
                      "%s data '%s' has %lld tokens in %d shard(s), %lld windows of %d+1 tokens: too few for one "
                      "batch of %d windows on each of %d rank(s); use a smaller --batch or --seq, or more data",
                      split_word(cfg->split), l->source, (long long)l->n_tokens, l->n_shards, (long long)W,
                      cfg->seq_len, cfg->batch, cfg->world);
        else
            setup_epoch(l, 0);
    }
    if (!ok) {
        loader_close(l);
        return false;
    }
    *out = l;
    return true;
}

Loader *loader_open(const LoaderConfig *cfg) {
    Loader *l;
    char err[2048];
    if (!loader_open_err(cfg, &l, err, sizeof err)) gdp_fatal("%s", err);
    return l;
}

void loader_close(Loader *l) {
    if (!l) return;
    for (int i = 0; i < l->n_shards; i++) {
        if (l->shards[i].fd >= 0) close(l->shards[i].fd);
        free(l->shards[i].path);
    }
    free(l->shards);
    free(l->text);
    free(l->prefix);
    free(l->buf);
    free(l->source);
    free(l);
}

/* ------------------------------------------------------------------ batches and state */

void loader_next_batch(Loader *l, int32_t *inputs, int32_t *targets) {
    if (l->batch_idx >= l->batches) setup_epoch(l, l->epoch + 1);
    int64_t B = l->cfg.batch, T = l->cfg.seq_len, world = l->cfg.world, r = l->cfg.rank;
    for (int64_t b = 0; b < B; b++) {
        int64_t pos = (l->batch_idx * world + r) * B + b;
        read_window(l, window_at(l, pos), l->buf);
        for (int64_t t = 0; t < T; t++) {
            inputs[b * T + t] = (int32_t)l->buf[t];
            targets[b * T + t] = (int32_t)l->buf[t + 1];
        }
    }
    l->batch_idx++;
}

void loader_reset(Loader *l) { setup_epoch(l, 0); }

LoaderState loader_get_state(const Loader *l) {
    LoaderState s;
    s.version = LOADER_STATE_VERSION;
    s.seed = (int64_t)l->seed;
    s.epoch = l->epoch;
    s.consumed = l->batch_idx * l->cfg.world * l->cfg.batch;
    s.seq_len = l->cfg.seq_len;
    s.global_batch = (int64_t)l->cfg.world * l->cfg.batch;
    s.n_tokens = l->n_tokens;
    return s;
}

void loader_set_state(Loader *l, const LoaderState *s) {
    if (s->version != LOADER_STATE_VERSION)
        gdp_fatal("data-loader state has version %lld: this gdp.c reads version %d", (long long)s->version,
                  LOADER_STATE_VERSION);
    if (s->seq_len != l->cfg.seq_len)
        gdp_fatal("the saved data position is for --seq %lld but this run has --seq %d: resume with the same --seq",
                  (long long)s->seq_len, l->cfg.seq_len);
    if (s->epoch < 0 || s->consumed < 0)
        gdp_fatal("data-loader state is corrupt (epoch %lld, consumed %lld)", (long long)s->epoch,
                  (long long)s->consumed);
    if (s->n_tokens != l->n_tokens && l->cfg.rank == 0)
        fprintf(stderr,
                "gdp: warning: the data '%s' (%s) have %lld tokens but had %lld when the position was saved: "
                "resuming at epoch %lld, but the order of windows differs\n",
                l->source, split_word(l->cfg.split), (long long)l->n_tokens, (long long)s->n_tokens,
                (long long)s->epoch);
    l->seed = (uint64_t)s->seed;
    setup_epoch(l, s->epoch);
    l->batch_idx = s->consumed / ((int64_t)l->cfg.world * l->cfg.batch);
    if (l->batch_idx > l->batches) l->batch_idx = l->batches; /* the next batch starts the next epoch */
}

int64_t loader_batches_per_epoch(const Loader *l) { return l->batches; }
int64_t loader_n_tokens(const Loader *l) { return l->n_tokens; }
int64_t loader_vocab(const Loader *l) { return l->vocab; }
int loader_n_shards(const Loader *l) { return l->n_shards; }

void loader_describe(const Loader *l, char *buf, size_t len) {
    snprintf(buf, len, "%s (%s%s): %d %s, %lld tokens, %lld windows of %d+1, %lld batches/epoch of %d x %d%s", l->source,
             split_word(l->cfg.split), l->text ? ", bytes of text" : "", l->n_shards,
             l->n_shards == 1 ? "shard" : "shards", (long long)l->n_tokens, (long long)l->n_windows, l->cfg.seq_len,
             (long long)l->batches, l->cfg.batch, l->cfg.seq_len, l->cfg.world > 1 ? " per rank" : "");
}

bool loader_split_exists(const char *source, DataSplit split, double val_fraction) {
    if (split == SPLIT_TRAIN) return true;
    char err[1024];
    if (is_dir(source) || path_is_shard_name(source) || has_glob(source)) {
        PathList p = {0};
        bool ok = find_shards(source, split, &p, err, sizeof err);
        paths_free(&p);
        return ok;
    }
    if (val_fraction <= 0 || val_fraction >= 1) return false;
    ByteBuf all = {0}, val = {0};
    bool ok = text_read_file_err(source, &all, err, sizeof err);
    if (ok) text_split(all.data, all.len, val_fraction, NULL, &val);
    ok = ok && val.len > 1;
    bytebuf_free(&all);
    bytebuf_free(&val);
    return ok;
}

int loader_documents(const int32_t *inputs, int32_t *targets, int64_t B, int64_t T, int32_t eot, bool mask_across,
                     int32_t *cu) {
    int n = 0;
    for (int64_t b = 0; b < B; b++) {
        cu[n++] = (int32_t)(b * T);
        for (int64_t t = 0; t < T; t++) {
            const int64_t i = b * T + t;
            if (eot < 0 || inputs[i] != eot) continue;
            if (t + 1 < T) cu[n++] = (int32_t)(i + 1);
            if (mask_across && targets) targets[i] = -1;
        }
    }
    cu[n] = (int32_t)(B * T);
    return n;
}
