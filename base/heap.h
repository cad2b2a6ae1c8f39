/* A binary heap over a caller-owned array: GDP_DEFINE_HEAP(name, T, before) defines
 *   name_push(T *a, size_t *n, T x)   a[*n] must be room (the caller grows the array)
 *   name_pop(T *a, size_t *n)         *n >= 1
 * where before(x, y) is true when x leaves the heap ahead of y. Typed and inlined, because the
 * BPE encoder pushes and pops once per merge. */
#pragma once
#include <stddef.h>

#define GDP_DEFINE_HEAP(name, T, before)                                  \
    static inline void name##_push(T *a, size_t *n, T x) {               \
        size_t i = (*n)++;                                                \
        for (; i > 0 && before(x, a[(i - 1) / 2]); i = (i - 1) / 2)       \
            a[i] = a[(i - 1) / 2];                                        \
        a[i] = x;                                                         \
    }                                                                     \
    static inline T name##_pop(T *a, size_t *n) {                         \
        const T top = a[0], last = a[--(*n)];                             \
        size_t i = 0;                                                     \
        for (;;) {                                                        \
            size_t l = 2 * i + 1, r = l + 1, m = l;                       \
            if (l >= *n) break;                                           \
            if (r < *n && before(a[r], a[l])) m = r;                      \
            if (!before(a[m], last)) break;                               \
            a[i] = a[m];                                                  \
            i = m;                                                        \
        }                                                                 \
        if (*n > 0) a[i] = last;                                          \
        return top;                                                       \
    }
