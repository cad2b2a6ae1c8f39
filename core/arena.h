/* Bump arenas: all memory gdp.c uses comes from one of these, allocated once and reused.
 * Alignment is 256 bytes (cuBLASLt and 16-byte vector loads want it). Exhaustion is a clear
 * fatal error naming the arena, the sizes and what to raise. */
#pragma once
#include <stddef.h>

#include "core/device.h"

typedef struct Arena {
    const char *name;  /* "params", "acts", ... used in messages */
    const char *hint;  /* what the user should change when it runs out, e.g. "raise --act-mem" */
    Device device;
    unsigned char *base;
    size_t capacity;
    size_t used;
    size_t high_water;
} Arena;

#define ARENA_ALIGN 256

void arena_init(Arena *a, const char *name, Device dev, size_t capacity, const char *hint);
void arena_release(Arena *a);
/* A new capacity for an empty arena (used == 0): its memory is freed and allocated again. */
void arena_resize(Arena *a, size_t capacity);
void *arena_alloc(Arena *a, size_t bytes);
/* Counts `bytes` at the current position toward the high-water mark without taking them: room that
 * a later call at this point will need (ctx_fit_arenas keeps it). Exhausted: the same error as
 * arena_alloc, raised now. */
void arena_expect(Arena *a, size_t bytes);
/* Host arenas only: zero-filled allocation. */
void *arena_alloc_zeroed(Arena *a, size_t bytes);
static inline size_t arena_mark(const Arena *a) { return a->used; }
void arena_rewind(Arena *a, size_t mark);
static inline void arena_reset(Arena *a) { arena_rewind(a, 0); }
