/* Error checking for the HDF5 C API, in the style of CUDA_CHECK: H5_CHECK(call) evaluates a call
 * returning herr_t, hid_t or htri_t and, when the result is negative, prints file:line, the call's
 * text and HDF5's innermost message, then exits 1. Call h5_quiet() once before using HDF5 so the
 * library does not print its own error stack (our messages replace it). */
#pragma once
#include <hdf5.h>
#include <stdio.h>
#include <string.h>

#include "base/common.h"

/* Turns off HDF5's automatic printing of its error stack. */
static inline void h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

typedef struct H5ErrText_ {
    char first[128], last[128];
} H5ErrText_;

static inline herr_t h5_walk_collect_(unsigned n, const H5E_error2_t *err, void *data) {
    H5ErrText_ *t = (H5ErrText_ *)data;
    if (!err || !err->desc) return 0;
    if (n == 0) snprintf(t->first, sizeof t->first, "%s", err->desc);
    snprintf(t->last, sizeof t->last, "%s", err->desc);
    return 0;
}

/* HDF5's description of the most recent failure: the API-level message and the innermost one
 * ("" when there is none), for our own messages. */
static inline const char *h5_last_message(char buf[256]) {
    H5ErrText_ t;
    t.first[0] = t.last[0] = 0;
    buf[0] = 0;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, h5_walk_collect_, &t);
    if (t.first[0] && strcmp(t.first, t.last))
        snprintf(buf, 256, "%s: %s", t.first, t.last);
    else
        snprintf(buf, 256, "%s", t.first[0] ? t.first : "no HDF5 error message");
    return buf;
}

#define H5_CHECK(call)                                                                                       \
    __extension__({                                                                                          \
        __typeof__(call) h5r_ = (call);                                                                      \
        if (h5r_ < 0) {                                                                                      \
            char h5m_[256];                                                                                  \
            gdp_fatal_at(__FILE__, __LINE__, "HDF5 call failed: %s: %s", #call, h5_last_message(h5m_));     \
        }                                                                                                    \
        h5r_;                                                                                                \
    })
