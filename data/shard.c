#include "data/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"

static bool fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return false;
}

int shard_token_bytes_for_vocab(int64_t vocab) { return vocab <= 65536 ? 2 : 4; }

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* pread until count bytes or end of file; returns bytes read, -1 on error. */
static int64_t pread_full(int fd, void *dst, int64_t count, int64_t offset) {
    int64_t done = 0;
    while (done < count) {
        ssize_t got = pread(fd, (uint8_t *)dst + done, (size_t)(count - done), (off_t)(offset + done));
        if (got < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (got == 0) break;
        done += got;
    }
    return done;
}

bool shard_inspect_err(const char *path, ShardInfo *info, char *err, size_t errlen) {
    memset(info, 0, sizeof *info);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return fail(err, errlen, "cannot open shard '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail(err, errlen, "shard '%s' is not a regular file", path);
    }
    int64_t size = (int64_t)st.st_size;
    uint8_t hdr[SHARD_HEADER_BYTES];
    int64_t got = size >= SHARD_HEADER_BYTES ? pread_full(fd, hdr, SHARD_HEADER_BYTES, 0) : 0;
    close(fd);
    if (size < SHARD_HEADER_BYTES || got != SHARD_HEADER_BYTES)
        return fail(err, errlen,
                    "shard '%s' has %lld bytes, too few for the %d-byte header: it is not a token shard "
                    "(make one with gdp prepare)",
                    path, (long long)size, SHARD_HEADER_BYTES);
    int32_t magic = (int32_t)le32(hdr), version = (int32_t)le32(hdr + 4);
    int64_t n = (int64_t)le32(hdr + 8);
    int width = 0;
    if (magic == SHARD_MAGIC) {
        if (version == SHARD_VERSION_U16) width = 2;
        else if (version == SHARD_VERSION_U32) width = 4;
        else
            return fail(err, errlen,
                        "shard '%s' has version %d: this gdp.c reads version %d (uint16 tokens) and %d (uint32) "
                        "with magic %d",
                        path, version, SHARD_VERSION_U16, SHARD_VERSION_U32, SHARD_MAGIC);
    } else if (magic == SHARD_MAGIC_LLAMA) {
        if (version != SHARD_VERSION_LLAMA)
            return fail(err, errlen, "shard '%s' has llama magic %d but version %d: only version %d (uint32) is known",
                        path, magic, version, SHARD_VERSION_LLAMA);
        width = 4;
    } else {
        return fail(err, errlen,
                    "shard '%s' has magic %d, not %d (llm.c/gdp.c token shard) or %d (llm.c llama-3): "
                    "not a token shard, or a corrupt one",
                    path, magic, SHARD_MAGIC, SHARD_MAGIC_LLAMA);
    }
    /* llm.c writes the count as int32; read it as unsigned so counts up to 2^32-1 work. */
    int64_t want = SHARD_HEADER_BYTES + n * width;
    if (want != size)
        return fail(err, errlen,
                    "shard '%s' header says %lld tokens of %d bytes (%lld bytes with the header) but the file has "
                    "%lld bytes: truncated or corrupt",
                    path, (long long)n, width, (long long)want, (long long)size);
    info->magic = magic;
    info->version = version;
    info->token_bytes = width;
    info->n_tokens = n;
    info->file_bytes = size;
    return true;
}

ShardInfo shard_inspect(const char *path) {
    ShardInfo info;
    char err[1024];
    if (!shard_inspect_err(path, &info, err, sizeof err)) gdp_fatal("%s", err);
    return info;
}

bool shard_read_tokens_err(int fd, const char *path, const ShardInfo *info, int64_t start, int64_t count,
                           uint32_t *out, char *err, size_t errlen) {
    if (start < 0 || count < 0 || start + count > info->n_tokens)
        return fail(err, errlen, "read of tokens [%lld, %lld) is outside shard '%s' of %lld tokens", (long long)start,
                    (long long)(start + count), path, (long long)info->n_tokens);
    int w = info->token_bytes;
    int64_t bytes = count * w;
    int64_t off = SHARD_HEADER_BYTES + start * w;
    /* Read into the tail of out (4 bytes per token), then widen from the front: no extra buffer. */
    uint8_t *raw = (uint8_t *)out + (count * 4 - bytes);
    int64_t got = pread_full(fd, raw, bytes, off);
    if (got != bytes)
        return fail(err, errlen, "short read from shard '%s' at byte %lld: wanted %lld bytes, got %lld (%s)", path,
                    (long long)off, (long long)bytes, (long long)got, got < 0 ? strerror(errno) : "file shrank?");
    if (w == 2) {
        for (int64_t i = 0; i < count; i++) out[i] = (uint32_t)raw[2 * i] | (uint32_t)raw[2 * i + 1] << 8;
    } else {
        for (int64_t i = 0; i < count; i++) out[i] = le32(raw + 4 * i);
    }
    return true;
}

bool shard_check_tokens_err(const char *path, const ShardInfo *info, int64_t vocab, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return fail(err, errlen, "cannot open shard '%s': %s", path, strerror(errno));
    const int64_t chunk = 1 << 20;
    uint32_t *buf = (uint32_t *)xmalloc((size_t)chunk * 4);
    bool ok = true;
    for (int64_t s = 0; s < info->n_tokens && ok; s += chunk) {
        int64_t c = GDP_MIN(chunk, info->n_tokens - s);
        ok = shard_read_tokens_err(fd, path, info, s, c, buf, err, errlen);
        for (int64_t i = 0; ok && i < c; i++)
            if ((int64_t)buf[i] >= vocab)
                ok = fail(err, errlen,
                          "shard '%s' holds token %u at position %lld, but the vocabulary has %lld tokens: the shard "
                          "was made with another tokenizer (re-run gdp prepare, or give the matching --vocab)",
                          path, buf[i], (long long)(s + i), (long long)vocab);
    }
    free(buf);
    close(fd);
    return ok;
}

uint32_t *shard_read_all(const char *path, ShardInfo *info) {
    char err[1024];
    ShardInfo si;
    if (!shard_inspect_err(path, &si, err, sizeof err)) gdp_fatal("%s", err);
    int fd = open(path, O_RDONLY);
    if (fd < 0) gdp_fatal("cannot open shard '%s': %s", path, strerror(errno));
    uint32_t *t = (uint32_t *)xmalloc((size_t)si.n_tokens * 4);
    if (!shard_read_tokens_err(fd, path, &si, 0, si.n_tokens, t, err, sizeof err)) gdp_fatal("%s", err);
    close(fd);
    if (info) *info = si;
    return t;
}

static char *xstrdup_cat(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = (char *)xmalloc(na + nb + 1);
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

static void write_header(ShardWriter *w) {
    uint8_t hdr[SHARD_HEADER_BYTES] = {0};
    put_le32(hdr, SHARD_MAGIC);
    put_le32(hdr + 4, w->token_bytes == 2 ? SHARD_VERSION_U16 : SHARD_VERSION_U32);
    put_le32(hdr + 8, (uint32_t)w->n_tokens);
    if (fseeko(w->f, 0, SEEK_SET) != 0) gdp_fatal("cannot seek in '%s': %s", w->tmp_path, strerror(errno));
    xfwrite(hdr, 1, sizeof hdr, w->f, w->tmp_path);
}

void shard_writer_open(ShardWriter *w, const char *path, int token_bytes) {
    GDP_CHECK(token_bytes == 2 || token_bytes == 4, "shard token width %d: use 2 or 4", token_bytes);
    memset(w, 0, sizeof *w);
    w->path = xstrdup_cat(path, "");
    w->tmp_path = xstrdup_cat(path, ".tmp");
    w->token_bytes = token_bytes;
    w->f = fopen(w->tmp_path, "wb");
    if (!w->f) gdp_fatal("cannot create shard '%s': %s", w->tmp_path, strerror(errno));
    write_header(w);
}

void shard_writer_append(ShardWriter *w, const uint32_t *tokens, int64_t n) {
    GDP_CHECK(w->f, "shard writer for '%s' is not open", w->path ? w->path : "?");
    /* llm.c stores the count in an int32 header slot; keep within what it (and we) can read. */
    GDP_CHECK(w->n_tokens + n <= INT32_MAX,
              "shard '%s' would exceed %d tokens: use a smaller --shard-tokens", w->path, INT32_MAX);
    const int64_t chunk = 1 << 16;
    if (!w->buf) {
        w->buf_cap = (size_t)chunk * 4;
        w->buf = (uint8_t *)xmalloc(w->buf_cap);
    }
    uint32_t limit = w->token_bytes == 2 ? 0xFFFFu : 0xFFFFFFFFu;
    for (int64_t s = 0; s < n; s += chunk) {
        int64_t c = GDP_MIN(chunk, n - s);
        for (int64_t i = 0; i < c; i++) {
            uint32_t t = tokens[s + i];
            GDP_CHECK(t <= limit, "token %u does not fit the %d-byte tokens of shard '%s'", t, w->token_bytes,
                      w->path);
            if (w->token_bytes == 2) {
                w->buf[2 * i] = (uint8_t)t;
                w->buf[2 * i + 1] = (uint8_t)(t >> 8);
            } else {
                put_le32(w->buf + 4 * i, t);
            }
        }
        xfwrite(w->buf, (size_t)w->token_bytes, (size_t)c, w->f, w->tmp_path);
    }
    w->n_tokens += n;
}

void shard_writer_close(ShardWriter *w) {
    if (!w->f) return;
    write_header(w);
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0)
        gdp_fatal("cannot flush shard '%s': %s (disk full?)", w->tmp_path, strerror(errno));
    if (fclose(w->f) != 0) gdp_fatal("cannot close shard '%s': %s", w->tmp_path, strerror(errno));
    w->f = NULL;
    if (rename(w->tmp_path, w->path) != 0)
        gdp_fatal("cannot rename '%s' to '%s': %s", w->tmp_path, w->path, strerror(errno));
    free(w->path);
    free(w->tmp_path);
    free(w->buf);
    memset(w, 0, sizeof *w);
}

void shard_write(const char *path, const uint32_t *tokens, int64_t n, int token_bytes) {
    ShardWriter w;
    shard_writer_open(&w, path, token_bytes);
    shard_writer_append(&w, tokens, n);
    shard_writer_close(&w);
}
