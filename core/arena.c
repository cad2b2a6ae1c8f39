#include "core/arena.h"

#include "core/common.h"

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
    return a->base + start;
}

void arena_expect(Arena *a, size_t bytes) {
    const size_t mark = a->used;
    arena_alloc(a, bytes);
    a->used = mark;
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
}
