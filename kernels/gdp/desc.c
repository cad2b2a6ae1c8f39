/* Gated DeltaProduct: descriptor validation and the thread-local error message, shared by the
 * CPU reference (cpu.c) and the CUDA kernels (kernels/gdp/). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels/gdp/desc.h"

static _Thread_local char gdp_error_msg[512];

const char *gdp_last_error(void) { return gdp_error_msg; }

void gdp_clear_error(void) { gdp_error_msg[0] = 0; }

GdpStatus gdp_fail(GdpStatus status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(gdp_error_msg, sizeof gdp_error_msg, fmt, ap);
    va_end(ap);
    return status;
}

double gdp_effective_scale(const GdpDesc *d) { return d->scale != 0 ? d->scale : 1.0 / sqrt((double)d->K); }

GdpSizes gdp_sizes(const GdpDesc *d) {
    GdpSizes s;
    int64_t B = d->B, T = d->T, H = d->H, K = d->K, V = d->V, n = d->n;
    int64_t slots = d->mode == GDP_MODE_HOUSEHOLDER ? n : 1;
    s.q = B * T * H * K;
    s.k = B * T * slots * H * K;
    s.v = B * T * slots * H * V;
    s.beta = B * T * slots * H;
    s.g = B * T * H;
    s.mask = d->mode == GDP_MODE_SPLIT ? H * n * n : 0;
    s.state = (int64_t)gdp_num_seqs(d) * H * K * V;
    s.o = B * T * H * V;
    return s;
}

int gdp_chunk_tokens(int n) { return n >= 1 && n <= 64 ? 64 / n : 1; }

GdpStatus gdp_validate(const GdpDesc *d) {
    if (!d) return gdp_fail(GDP_ERR_INVALID, "gdp: the descriptor is NULL");
    if (d->mode != GDP_MODE_HOUSEHOLDER && d->mode != GDP_MODE_SPLIT)
        return gdp_fail(GDP_ERR_INVALID, "gdp: mode %d is neither GDP_MODE_HOUSEHOLDER (0) nor GDP_MODE_SPLIT (1)",
                        (int)d->mode);
    const char *mode = d->mode == GDP_MODE_SPLIT ? "split" : "householder";
    const int dims[5] = {d->B, d->T, d->H, d->K, d->V};
    const char *names[5] = {"B", "T", "H", "K", "V"};
    for (int i = 0; i < 5; i++)
        if (dims[i] < 1)
            return gdp_fail(GDP_ERR_INVALID, "gdp %s mode: %s=%d, every dimension must be at least 1", mode,
                            names[i], dims[i]);
    if (d->n < 1)
        return gdp_fail(GDP_ERR_INVALID, "gdp %s mode: n=%d, the number of %s must be at least 1", mode, d->n,
                        d->mode == GDP_MODE_SPLIT ? "slices r" : "householder steps n_h");
    if (d->mode == GDP_MODE_SPLIT && d->K % d->n != 0)
        return gdp_fail(GDP_ERR_INVALID, "split mode: K=%d is not divisible by r=%d (each slice is K/r wide)", d->K,
                        d->n);
    if (!isfinite(d->scale))
        return gdp_fail(GDP_ERR_INVALID, "gdp %s mode: scale=%g is not finite (0 means K^-1/2)", mode, d->scale);
    if (d->dtype != GDP_F32 && d->dtype != GDP_F64 && d->dtype != GDP_BF16)
        return gdp_fail(GDP_ERR_INVALID, "gdp %s mode: dtype %d is not a float dtype (GDP_F32, GDP_F64 or GDP_BF16)",
                        mode, (int)d->dtype);
    if (d->cu_seqlens) {
        if (d->B != 1)
            return gdp_fail(GDP_ERR_INVALID,
                            "gdp %s mode: with cu_seqlens B must be 1 (the sequences are packed along T), got B=%d",
                            mode, d->B);
        if (d->n_seqs < 1)
            return gdp_fail(GDP_ERR_INVALID, "gdp %s mode: cu_seqlens is given but n_seqs=%d; it must be at least 1",
                            mode, d->n_seqs);
        if (d->n_seqs > d->T)
            return gdp_fail(GDP_ERR_INVALID,
                            "gdp %s mode: n_seqs=%d sequences cannot be packed into T=%d tokens (each needs one)",
                            mode, d->n_seqs, d->T);
    }
    /* Every element count must fit comfortably in int64 (and size_t byte counts). */
    double biggest = (double)d->B * d->T * (d->mode == GDP_MODE_HOUSEHOLDER ? d->n : 1) * d->H *
                     (d->K > d->V ? d->K : d->V);
    double state = (double)(d->cu_seqlens ? d->n_seqs : d->B) * d->H * d->K * d->V;
    if (biggest > 1e15 || state > 1e15)
        return gdp_fail(GDP_ERR_INVALID, "gdp %s mode: B=%d T=%d H=%d K=%d V=%d n=%d gives tensors too large to address",
                        mode, d->B, d->T, d->H, d->K, d->V, d->n);
    return GDP_OK;
}

#define NEED(ptr, name)                                                                                   \
    do {                                                                                                  \
        if (!(ptr)) return gdp_fail(GDP_ERR_INVALID, "%s: '%s' is NULL; it is required", who, name);     \
    } while (0)

GdpStatus gdp_check_forward_args(const char *who, const GdpDesc *d, const GdpForwardArgs *args) {
    NEED(args, "args");
    NEED(args->q, "q");
    NEED(args->k, "k");
    NEED(args->v, "v");
    NEED(args->beta, "beta");
    NEED(args->o, "o");
    if (d->mode == GDP_MODE_SPLIT) NEED(args->mask, "mask (split mode)");
    if (d->mode == GDP_MODE_HOUSEHOLDER && args->mask)
        return gdp_fail(GDP_ERR_INVALID, "%s: householder mode takes no mask; pass mask = NULL", who);
    return GDP_OK;
}

GdpStatus gdp_check_backward_args(const char *who, const GdpDesc *d, const GdpBackwardArgs *args) {
    NEED(args, "args");
    NEED(args->q, "q");
    NEED(args->k, "k");
    NEED(args->v, "v");
    NEED(args->beta, "beta");
    NEED(args->d_o, "d_o");
    NEED(args->dq, "dq");
    NEED(args->dk, "dk");
    NEED(args->dv, "dv");
    NEED(args->dbeta, "dbeta");
    if (d->mode == GDP_MODE_SPLIT) NEED(args->mask, "mask (split mode)");
    if (d->mode == GDP_MODE_HOUSEHOLDER && (args->mask || args->dmask))
        return gdp_fail(GDP_ERR_INVALID, "%s: householder mode has no mask; pass mask = NULL and dmask = NULL", who);
    return GDP_OK;
}
