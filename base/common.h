/* Shared host-side helpers: fatal errors with file:line, checked allocation and file I/O. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GDP_VERSION "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* Prints "gdp: error: <message> (file:line)" and exits with status 1.
 * Every message names what was wrong and, where it can, what to do about it. */
__attribute__((noreturn, format(printf, 3, 4))) void gdp_fatal_at(const char *file, int line, const char *fmt, ...);
#define gdp_fatal(...) gdp_fatal_at(__FILE__, __LINE__, __VA_ARGS__)
#define GDP_CHECK(cond, ...)                    \
    do {                                        \
        if (!(cond)) gdp_fatal(__VA_ARGS__);    \
    } while (0)

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define GDP_MIN(a, b) ((a) < (b) ? (a) : (b))
#define GDP_MAX(a, b) ((a) > (b) ? (a) : (b))
#define GDP_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

void *xmalloc_at(const char *file, int line, size_t bytes);
void *xcalloc_at(const char *file, int line, size_t count, size_t size);
void *xrealloc_at(const char *file, int line, void *p, size_t bytes);
FILE *xfopen_at(const char *file, int line, const char *path, const char *mode);
void xfread_at(const char *file, int line, void *dst, size_t size, size_t count, FILE *f, const char *path);
void xfwrite_at(const char *file, int line, const void *src, size_t size, size_t count, FILE *f, const char *path);
#define xmalloc(n) xmalloc_at(__FILE__, __LINE__, (n))
#define xcalloc(n, s) xcalloc_at(__FILE__, __LINE__, (n), (s))
#define xrealloc(p, n) xrealloc_at(__FILE__, __LINE__, (p), (n))
#define xfopen(path, mode) xfopen_at(__FILE__, __LINE__, (path), (mode))
#define xfread(dst, size, count, f, path) xfread_at(__FILE__, __LINE__, (dst), (size), (count), (f), (path))
#define xfwrite(src, size, count, f, path) xfwrite_at(__FILE__, __LINE__, (src), (size), (count), (f), (path))
/* Frees *p and sets it to NULL, so a second free is harmless. */
#define free_check(pp)      \
    do {                    \
        free(*(pp));        \
        *(pp) = NULL;       \
    } while (0)

/* Only rank 0 (or a single process) prints progress; see train/dist.h. */
double gdp_now_seconds(void);
/* Creates the folder `dir` and its parents as needed; exits naming what failed and why, also when
 * `dir` exists and is not a folder. `what` names the folder in the message ("output", "checkpoint"). */
#define gdp_mkdir_p(dir, what) gdp_mkdir_p_at(__FILE__, __LINE__, (dir), (what))
void gdp_mkdir_p_at(const char *file, int line, const char *dir, const char *what);

/* A small deterministic RNG (splitmix64 seeding + xoshiro256**): every random number in gdp.c
 * comes from a state the caller owns, so runs and checkpoints reproduce exactly. */
typedef struct Rng {
    uint64_t s[4];
} Rng;
void rng_seed(Rng *rng, uint64_t seed);
uint64_t rng_u64(Rng *rng);
double rng_uniform(Rng *rng);               /* [0, 1) */
double rng_normal(Rng *rng);                /* N(0, 1), Box-Muller */
uint64_t rng_below(Rng *rng, uint64_t n);   /* uniform in [0, n) without modulo bias */

#ifdef __cplusplus
}
#endif
