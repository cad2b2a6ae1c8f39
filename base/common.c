#include "base/common.h"

#include <math.h>
#include <stdarg.h>
#include <time.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

void gdp_fatal_at(const char *file, int line, const char *fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "gdp: error: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (%s:%d)\n", file, line);
    exit(1);
}

void *xmalloc_at(const char *file, int line, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) gdp_fatal_at(file, line, "out of host memory allocating %zu bytes", bytes);
    return p;
}

void *xcalloc_at(const char *file, int line, size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) gdp_fatal_at(file, line, "out of host memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *xrealloc_at(const char *file, int line, void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) gdp_fatal_at(file, line, "out of host memory reallocating to %zu bytes", bytes);
    return q;
}

FILE *xfopen_at(const char *file, int line, const char *path, const char *mode) {
    FILE *f = fopen(path, mode);
    if (!f) gdp_fatal_at(file, line, "cannot open '%s' (mode %s): %s", path, mode, strerror(errno));
    return f;
}

void xfread_at(const char *file, int line, void *dst, size_t size, size_t count, FILE *f, const char *path) {
    size_t got = fread(dst, size, count, f);
    if (got != count)
        gdp_fatal_at(file, line, "short read from '%s': wanted %zu items of %zu bytes, got %zu", path, count, size,
                     got);
}

void xfwrite_at(const char *file, int line, const void *src, size_t size, size_t count, FILE *f, const char *path) {
    size_t put = fwrite(src, size, count, f);
    if (put != count)
        gdp_fatal_at(file, line, "short write to '%s': wanted %zu items of %zu bytes, wrote %zu (disk full?)", path,
                     count, size, put);
}

double gdp_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void rng_seed(Rng *rng, uint64_t seed) {
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_u64(Rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

double rng_uniform(Rng *rng) { return (double)(rng_u64(rng) >> 11) * 0x1.0p-53; }

double rng_normal(Rng *rng) {
    double u1 = rng_uniform(rng), u2 = rng_uniform(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t rng_below(Rng *rng, uint64_t n) {
    if (n == 0) return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = rng_u64(rng);
    while (x >= limit);
    return x % n;
}

void gdp_mkdir_p_at(const char *file, int line, const char *dir, const char *what) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) gdp_fatal_at(file, line, "%s folder name is too long: '%s'", what, dir);
    const size_t n = strlen(buf);
    for (size_t i = 1; i <= n; i++)
        if (buf[i] == '/' || buf[i] == '\0') {
            const char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                gdp_fatal_at(file, line, "cannot create the %s folder '%s': %s", what, buf, strerror(errno));
            buf[i] = c;
        }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) gdp_fatal_at(file, line, "%s '%s' exists and is not a folder", what, dir);
}
