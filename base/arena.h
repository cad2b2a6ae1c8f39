/* Bump arenas: all memory gdp.c uses comes from one of these, allocated once and reused.
 * Alignment is 256 bytes (cuBLASLt and 16-byte vector loads want it). Exhaustion is a clear
 * fatal error naming the arena, the sizes and what to raise. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/device.h"

/* A record of an arena's use, for planning (train/memory_plan.h): every allocation's requested
 * size, and every rewind as the number of allocations it leaves live. Replayed with other sizes
 * (arena_trace_replay), it gives the high water the same sequence of calls would reach. */
typedef struct ArenaTrace {
    int64_t *events;   /* >= 0: an allocation of that many bytes; < 0: a rewind to -1 - depth live ones */
    int n, cap;
    size_t *live;      /* the use after each live allocation (a stack of depth `depth`) */
    int depth, live_cap;
    size_t start;      /* the use when recording began */
    bool broken;       /* a rewind to a point no allocation ended at: the trace cannot be replayed */
} ArenaTrace;

typedef struct Arena {
    const char *name;  /* "params", "acts", ... used in messages */
    const char *hint;  /* what the user should change when it runs out, e.g. "raise --act-mem" */
    Device device;
    unsigned char *base;
    size_t capacity;
    size_t used;
    size_t high_water;
    ArenaTrace *trace; /* NULL, or recording every allocation and rewind */
} Arena;

#define ARENA_ALIGN 256

void arena_init(Arena *a, const char *name, Device dev, size_t capacity, const char *hint);
void arena_release(Arena *a);
/* A new capacity for an empty arena (used == 0): its memory is freed and allocated again. */
void arena_resize(Arena *a, size_t capacity);
void *arena_alloc(Arena *a, size_t bytes);
/* Counts `bytes` at the current position toward the high-water mark without taking them: room that
 * a later call at this point will need (a memory plan keeps it). Exhausted: the same error as
 * arena_alloc, raised now. */
void arena_expect(Arena *a, size_t bytes);
/* Host arenas only: zero-filled allocation. */
void *arena_alloc_zeroed(Arena *a, size_t bytes);
static inline size_t arena_mark(const Arena *a) { return a->used; }
void arena_rewind(Arena *a, size_t mark);
static inline void arena_reset(Arena *a) { arena_rewind(a, 0); }

/* Starts recording a's allocations and rewinds into t (cleared first); arena_trace_stop ends it. */
void arena_trace_start(Arena *a, ArenaTrace *t);
void arena_trace_stop(Arena *a);
void arena_trace_free(ArenaTrace *t);
/* Number of allocations in t. */
int arena_trace_allocs(const ArenaTrace *t);
/* Whether a and b record the same sequence of calls (sizes aside). */
bool arena_trace_same_calls(const ArenaTrace *a, const ArenaTrace *b);
/* The high water (from an empty arena) of t's calls with the i-th allocation taking bytes[i]. */
size_t arena_trace_replay(const ArenaTrace *t, const int64_t *bytes);
