/* Gated DeltaProduct, CPU reference: the per-token recurrence of the spec
 * (docs/spec.md §1) in float32 and float64, and its hand-derived backward.
 *
 * Forward, per (sequence, head), for each token: S <- e^g S, then
 *   householder: n steps S <- S + beta_j k_j (v_j - S^T k_j)^T;
 *   split:       P[b] = k^(b)T S^(b), U[a] = v - sum_b M[a,b] P[b], S^(a) <- S^(a) + beta k^(a) U[a]^T;
 * and o = scale S^T q.
 * Backward runs the same recurrence in reverse: the state before every token is recomputed
 * from checkpoints kept every ~sqrt(len) tokens, and dS (the gradient w.r.t. the state after
 * the token) is carried back through the read-out, the steps and the decay:
 *   read-out     dq = scale S dO,         dS += scale q dO^T
 *   step (hh)    u = v - S^T k:  du = beta dS^T k, dbeta = k^T dS u, dv = du,
 *                dk = beta dS u - S du,   dS <- dS - k du^T
 *   split        dU[a] = beta dS^(a)T k^(a), dbeta = sum_a k^(a)T dS^(a) U[a], dv = sum_a dU[a],
 *                dM[a,b] = -dU[a].P[b],   dP[b] = -sum_a M[a,b] dU[a],
 *                dk^(a) = beta dS^(a) U[a] + S0^(a) dP[a],  dS0^(b) = dS^(b) + k^(b) dP[b]^T
 *   decay        dg = sum(S0 o dS0),      dS_prev = e^g dS0
 * Sequences and heads are independent and run in parallel (OpenMP); the mask gradient is
 * reduced over them in a fixed order, so results do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gdp/desc.h"

/* Tokens [t0, t1) of batch row b form one sequence. */
typedef struct GdpSeq {
    int b, t0, t1;
} GdpSeq;

#define GDP_R float
#define GDP_SUF f32
#define GDP_EXP expf
#include "kernels/gdp/cpu_impl.h"
#undef GDP_R
#undef GDP_SUF
#undef GDP_EXP

#define GDP_R double
#define GDP_SUF f64
#define GDP_EXP exp
#include "kernels/gdp/cpu_impl.h"
#undef GDP_R
#undef GDP_SUF
#undef GDP_EXP

/* Checks what every CPU call needs beyond gdp_validate and builds the sequence list
 * (caller frees *out). `who` names the entry point in messages. */
static GdpStatus cpu_prepare(const GdpDesc *d, const char *who, GdpSeq **out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    GdpStatus st = gdp_validate(d);
    if (st != GDP_OK) return st;
    if (d->dtype != GDP_F32 && d->dtype != GDP_F64)
        return gdp_fail(GDP_ERR_INVALID, "%s: dtype %s is not supported on the CPU; use GDP_F32 or GDP_F64", who,
                        dtype_name(d->dtype));
    int N = d->cu_seqlens ? d->n_seqs : d->B;
    GdpSeq *seqs = (GdpSeq *)malloc(sizeof(GdpSeq) * (size_t)N);
    if (!seqs) return gdp_fail(GDP_ERR_INVALID, "%s: out of host memory", who);
    if (d->cu_seqlens) {
        const int32_t *cu = d->cu_seqlens;
        if (cu[0] != 0 || cu[N] != d->T) {
            free(seqs);
            return gdp_fail(GDP_ERR_INVALID,
                            "%s: cu_seqlens must start at 0 and end at T=%d, got cu_seqlens[0]=%d, cu_seqlens[%d]=%d",
                            who, d->T, (int)cu[0], N, (int)cu[N]);
        }
        for (int i = 0; i < N; i++) {
            if (cu[i + 1] <= cu[i]) {
                free(seqs);
                return gdp_fail(GDP_ERR_INVALID,
                                "%s: cu_seqlens must be strictly increasing (every sequence at least one token), "
                                "got cu_seqlens[%d]=%d, cu_seqlens[%d]=%d",
                                who, i, (int)cu[i], i + 1, (int)cu[i + 1]);
            }
            seqs[i] = (GdpSeq){0, (int)cu[i], (int)cu[i + 1]};
        }
    } else {
        for (int b = 0; b < N; b++) seqs[b] = (GdpSeq){b, 0, d->T};
    }
    *out = seqs;
    *n_out = N;
    return GDP_OK;
}

GdpStatus gdp_forward_cpu(const GdpDesc *d, const GdpForwardArgs *args) {
    const char *who = "gdp_forward_cpu";
    GdpStatus st = gdp_validate(d);
    if (st != GDP_OK) return st;
    st = gdp_check_forward_args(who, d, args);
    if (st != GDP_OK) return st;
    GdpSeq *seqs;
    int N;
    st = cpu_prepare(d, who, &seqs, &N);
    if (st != GDP_OK) return st;
    st = d->dtype == GDP_F64 ? forward_f64(d, args, seqs, N) : forward_f32(d, args, seqs, N);
    free(seqs);
    return st;
}

GdpStatus gdp_backward_cpu(const GdpDesc *d, const GdpBackwardArgs *args) {
    const char *who = "gdp_backward_cpu";
    GdpStatus st = gdp_validate(d);
    if (st != GDP_OK) return st;
    st = gdp_check_backward_args(who, d, args);
    if (st != GDP_OK) return st;
    GdpSeq *seqs;
    int N;
    st = cpu_prepare(d, who, &seqs, &N);
    if (st != GDP_OK) return st;
    st = d->dtype == GDP_F64 ? backward_f64(d, args, seqs, N) : backward_f32(d, args, seqs, N);
    free(seqs);
    return st;
}
