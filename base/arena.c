#include "base/arena.h"

#include "base/common.h"

/* The arena's memory. A request the machine cannot meet is a usage problem, not a bug: the sizes
 * follow the model, --batch and --seq (or a size flag), so the message says to lower those. */
static unsigned char *arena_reserve(const Arena *a, size_t capacity) {
    if (!capacity) return NULL;
    unsigned char *p = (unsigned char *)device_try_malloc(a->device, capacity);
    if (!p)
        gdp_fatal("arena '%s': %.1f MiB of %s memory could not be allocated; the arenas grow with the model, --batch "
                  "and --seq: lower those (or a size you gave, such as --persist-mem or --act-mem)",
                  a->name, (double)capacity / (1 << 20), a->device == DEV_CUDA ? "GPU" : "host");
    return p;
}

void arena_init(Arena *a, const char *name, Device dev, size_t capacity, const char *hint) {
    memset(a, 0, sizeof(*a));
    a->name = name;
    a->hint = hint ? hint : "raise the arena size";
    a->device = dev;
    a->capacity = capacity;
    a->base = arena_reserve(a, capacity);
}

void arena_release(Arena *a) {
    if (a->base) device_free(a->device, a->base);
    a->base = NULL;
    a->capacity = a->used = 0;
}

void arena_resize(Arena *a, size_t capacity) {
    GDP_CHECK(a->used == 0, "arena '%s': resized while %zu bytes are in use", a->name, a->used);
    if (a->base) device_free(a->device, a->base);
    a->capacity = capacity;
    a->base = arena_reserve(a, capacity);
}

/* ---- traces ------------------------------------------------------------------------------------- */

static void trace_push_event(ArenaTrace *t, int64_t e) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->events = (int64_t *)xrealloc(t->events, (size_t)t->cap * sizeof(int64_t));
    }
    t->events[t->n++] = e;
}

static void trace_alloc(ArenaTrace *t, size_t bytes, size_t used) {
    trace_push_event(t, (int64_t)bytes);
    if (t->depth == t->live_cap) {
        t->live_cap = t->live_cap ? 2 * t->live_cap : 256;
        t->live = (size_t *)xrealloc(t->live, (size_t)t->live_cap * sizeof(size_t));
    }
    t->live[t->depth++] = used;
}

/* Marks are plain offsets; callers rewind in LIFO order, so the allocations still live after a
 * rewind are those that ended at or below the mark, and the mark is where the last of them ended. */
static void trace_rewind(ArenaTrace *t, size_t mark) {
    while (t->depth > 0 && t->live[t->depth - 1] > mark) t->depth--;
    if ((t->depth ? t->live[t->depth - 1] : t->start) != mark) t->broken = true;
    trace_push_event(t, -1 - (int64_t)t->depth);
}

void arena_trace_start(Arena *a, ArenaTrace *t) {
    arena_trace_free(t);
    t->start = a->used;
    a->trace = t;
}

void arena_trace_stop(Arena *a) { a->trace = NULL; }

void arena_trace_free(ArenaTrace *t) {
    free(t->events);
    free(t->live);
    memset(t, 0, sizeof *t);
}

int arena_trace_allocs(const ArenaTrace *t) {
    int k = 0;
    for (int i = 0; i < t->n; i++) k += t->events[i] >= 0;
    return k;
}

bool arena_trace_same_calls(const ArenaTrace *a, const ArenaTrace *b) {
    if (a->n != b->n || a->broken || b->broken || a->start != b->start) return false;
    for (int i = 0; i < a->n; i++)
        if ((a->events[i] < 0 || b->events[i] < 0) && a->events[i] != b->events[i]) return false;
    return true;
}

size_t arena_trace_replay(const ArenaTrace *t, const int64_t *bytes) {
    GDP_CHECK(!t->broken && t->start == 0, "internal: arena trace replay needs an unbroken trace from an empty arena");
    size_t *live = (size_t *)xmalloc((size_t)(t->n + 1) * sizeof(size_t));
    int depth = 0, k = 0;
    size_t hw = 0;
    for (int i = 0; i < t->n; i++) {
        if (t->events[i] < 0) {
            depth = (int)(-1 - t->events[i]);
            continue;
        }
        size_t used = depth ? live[depth - 1] : 0;
        used = CEIL_DIV(used, (size_t)ARENA_ALIGN) * ARENA_ALIGN + (size_t)bytes[k++];
        live[depth++] = used;
        if (used > hw) hw = used;
    }
    free(live);
    return hw;
}

/* ---- allocation ---------------------------------------------------------------------------------- */

void *arena_alloc(Arena *a, size_t bytes) {
    size_t start = CEIL_DIV(a->used, (size_t)ARENA_ALIGN) * ARENA_ALIGN;
    if (start + bytes > a->capacity || start + bytes < start) {
        double kib = 1.0 / 1024;
        gdp_fatal("arena '%s' (%s) is exhausted: %.1f KiB needed, %.1f KiB in use, capacity %.1f KiB; %s", a->name,
                  device_name(a->device), (double)bytes * kib, (double)a->used * kib, (double)a->capacity * kib,
                  a->hint);
    }
    a->used = start + bytes;
    if (a->used > a->high_water) a->high_water = a->used;
    if (a->trace) trace_alloc(a->trace, bytes, a->used);
    return a->base + start;
}

void arena_expect(Arena *a, size_t bytes) {
    const size_t mark = a->used;
    arena_alloc(a, bytes);
    arena_rewind(a, mark);
}

void *arena_alloc_zeroed(Arena *a, size_t bytes) {
    GDP_CHECK(a->device == DEV_CPU, "arena_alloc_zeroed on '%s': only host arenas can be zero-filled here",
              a->name);
    void *p = arena_alloc(a, bytes);
    memset(p, 0, bytes);
    return p;
}

void arena_rewind(Arena *a, size_t mark) {
    GDP_CHECK(mark <= a->used, "arena '%s': rewind to %zu beyond the current use %zu", a->name, mark, a->used);
    a->used = mark;
    if (a->trace) trace_rewind(a->trace, mark);
}
