/* Internal helpers shared by the CPU and CUDA halves of the Gated DeltaProduct op (not part of
 * the public API in kernels/gdp/gdp.h): the thread-local error message and size
 * helpers. gdp_validate and gdp_last_error themselves are declared in the public header. */
#pragma once
#include <stdint.h>

#include "kernels/gdp/gdp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the message gdp_last_error() returns (printf format) and returns `status`, so a failing
 * path reads `return gdp_fail(GDP_ERR_INVALID, "K=%d ...", K);`. */
GdpStatus gdp_fail(GdpStatus status, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Clears the message (gdp_last_error() returns ""). */
void gdp_clear_error(void);

/* Number of sequences a descriptor describes: n_seqs with cu_seqlens, B without. */
static inline int gdp_num_seqs(const GdpDesc *d) { return d->cu_seqlens ? d->n_seqs : d->B; }
/* The scale the op uses: desc->scale, or K^-1/2 when it is 0. */
double gdp_effective_scale(const GdpDesc *d);
/* Element counts of each tensor (householder and split layouts, see the public header). */
typedef struct GdpSizes {
    int64_t q, k, v, beta, g, mask, state, o;
} GdpSizes;
GdpSizes gdp_sizes(const GdpDesc *d);

/* The pointer checks every path makes before running: the required inputs and outputs are
 * non-NULL and the mask is given exactly in split mode. `who` names the caller in the message. */
GdpStatus gdp_check_forward_args(const char *who, const GdpDesc *d, const GdpForwardArgs *args);
GdpStatus gdp_check_backward_args(const char *who, const GdpDesc *d, const GdpBackwardArgs *args);

#ifdef __cplusplus
}
#endif
