#include "data/text.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "base/common.h"

void bytebuf_reserve(ByteBuf *b, size_t extra) {
    if (b->len + extra > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + extra) cap *= 2;
        b->data = (uint8_t *)xrealloc(b->data, cap);
        b->cap = cap;
    }
}

void bytebuf_append(ByteBuf *b, const void *src, size_t n) {
    bytebuf_reserve(b, n);
    if (n) memcpy(b->data + b->len, src, n);
    b->len += n;
}

void bytebuf_free(ByteBuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static bool fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return false;
}

bool text_read_file_err(const char *path, ByteBuf *out, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0)
        return fail(err, errlen, "cannot read input '%s': %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return fail(err, errlen, "input '%s' is a directory, not a text file", path);
    gzFile gz = gzopen(path, "rb");
    if (!gz) return fail(err, errlen, "cannot open input '%s': %s", path, strerror(errno ? errno : ENOMEM));
    gzbuffer(gz, 1 << 20);
    size_t chunk = 1 << 22;
    for (;;) {
        bytebuf_reserve(out, chunk);
        int got = gzread(gz, out->data + out->len, (unsigned)chunk);
        if (got < 0) {
            int code = 0;
            const char *msg = gzerror(gz, &code);
            char copy[256];
            snprintf(copy, sizeof copy, "%s", msg ? msg : "unknown zlib error");
            gzclose(gz);
            return fail(err, errlen, "cannot read input '%s': %s (a truncated or corrupt gzip file?)", path, copy);
        }
        if (got == 0) break;
        out->len += (size_t)got;
    }
    /* gzread reports a truncated stream as a plain end of file; gzerror still tells. */
    int code = 0;
    const char *msg = gzerror(gz, &code);
    if (code != Z_OK && code != Z_BUF_ERROR) {
        char copy[256];
        snprintf(copy, sizeof copy, "%s", msg ? msg : "unknown zlib error");
        gzclose(gz);
        return fail(err, errlen, "cannot read input '%s': %s (a truncated or corrupt gzip file?)", path, copy);
    }
    int rc = gzclose(gz);
    if (rc == Z_BUF_ERROR)
        return fail(err, errlen, "cannot read input '%s': the gzip stream ends early (truncated file?)", path);
    if (rc != Z_OK) return fail(err, errlen, "cannot read input '%s': zlib error %d on close", path, rc);
    return true;
}

void text_read_file(const char *path, ByteBuf *out) {
    char err[512];
    if (!text_read_file_err(path, out, err, sizeof err)) gdp_fatal("%s", err);
}

size_t text_split_block(size_t n) { return GDP_MAX((size_t)1024, GDP_MIN((size_t)65536, n / 256)); }

void text_split(const uint8_t *text, size_t n, double val_fraction, ByteBuf *train, ByteBuf *val) {
    GDP_CHECK(val_fraction >= 0 && val_fraction < 1, "val fraction %g is out of range: use 0 <= f < 1", val_fraction);
    size_t block = text_split_block(n);
    size_t pos = 0;
    for (int64_t i = 0; pos < n; i++) {
        size_t end = pos + block;
        if (end >= n) {
            end = n;
        } else {
            const uint8_t *nl = memchr(text + end, '\n', GDP_MIN(block, n - end));
            if (nl) end = (size_t)(nl - text) + 1;
        }
        bool to_val = floor((double)(i + 1) * val_fraction + 0.5) > floor((double)i * val_fraction + 0.5);
        ByteBuf *dst = to_val ? val : train;
        if (dst) bytebuf_append(dst, text + pos, end - pos);
        pos = end;
    }
}

bool path_is_shard_name(const char *path) {
    size_t n = strlen(path);
    return n >= 4 && !strcmp(path + n - 4, ".bin");
}
