/* Gated DeltaProduct decode step, CPU reference (float32 and float64, every sum in the storage
 * type): the math of kernels/gdp/decode.h written out per (b, h) and per state column, the way
 * the CUDA kernel computes it. Independent of cpu_impl.h on purpose, so the
 * tests can hold the two against each other. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "kernels/gdp/desc.h"
#include "kernels/gdp/decode.h"

GdpStatus gdp_decode_check(const char *who, const GdpDesc *d, const GdpDecodeArgs *a) {
    GdpStatus st = gdp_validate(d);
    if (st != GDP_OK) return st;
    if (d->T != 1)
        return gdp_fail(GDP_ERR_INVALID, "%s: T=%d, a decode step takes exactly one token (T = 1)", who, d->T);
    if (d->cu_seqlens)
        return gdp_fail(GDP_ERR_INVALID, "%s: cu_seqlens is not taken by a decode step (one token per batch row)", who);
    if (!a) return gdp_fail(GDP_ERR_INVALID, "%s: 'args' is NULL; it is required", who);
    if (!a->S)
        return gdp_fail(GDP_ERR_INVALID, "%s: 'S' is NULL; the state is required (zeros for an empty prefix)", who);
    GdpForwardArgs fa = {a->q, a->k, a->v, a->beta, a->g, a->mask, NULL, a->o, NULL, NULL, 0};
    return gdp_check_forward_args(who, d, &fa);
}

#define DEFINE_DECODE(R, SUF, EXP)                                                                               \
    static bool decode_##SUF(const GdpDesc *d, const GdpDecodeArgs *a) {                                         \
        const int B = d->B, H = d->H, K = d->K, V = d->V, n = d->n;                                              \
        const bool split = d->mode == GDP_MODE_SPLIT;                                                            \
        const int w = split ? K / n : K; /* slice width */                                                       \
        const R scale = (R)gdp_effective_scale(d);                                                               \
        const R *q = (const R *)a->q, *k = (const R *)a->k, *v = (const R *)a->v, *beta = (const R *)a->beta;    \
        const R *g = (const R *)a->g, *mask = (const R *)a->mask;                                                \
        R *S = (R *)a->S, *o = (R *)a->o;                                                                        \
        R *P = (R *)malloc(sizeof(R) * (size_t)(split ? n : 1));                                                 \
        if (!P) return false;                                                                                    \
        for (int b = 0; b < B; b++)                                                                              \
            for (int h = 0; h < H; h++) {                                                                        \
                R *Sh = S + ((int64_t)b * H + h) * K * V;                                                        \
                const R e = g ? EXP(g[(int64_t)b * H + h]) : (R)1;                                               \
                const R *qh = q + ((int64_t)b * H + h) * K;                                                      \
                for (int x = 0; x < V; x++) { /* columns are independent */                                      \
                    for (int c = 0; c < K; c++) Sh[(int64_t)c * V + x] *= e;                                     \
                    if (!split) {                                                                                \
                        for (int j = 0; j < n; j++) {                                                            \
                            const int64_t slot = ((int64_t)b * n + j) * H + h;                                   \
                            const R *kj = k + slot * K;                                                          \
                            R p = 0;                                                                             \
                            for (int c = 0; c < K; c++) p += Sh[(int64_t)c * V + x] * kj[c];                     \
                            const R u = beta[slot] * (v[slot * V + x] - p);                                      \
                            for (int c = 0; c < K; c++) Sh[(int64_t)c * V + x] += kj[c] * u;                     \
                        }                                                                                        \
                    } else {                                                                                     \
                        const int64_t row = (int64_t)b * H + h;                                                  \
                        const R *kk = k + row * K, *M = mask + (int64_t)h * n * n;                               \
                        for (int s = 0; s < n; s++) {                                                            \
                            R p = 0;                                                                             \
                            for (int c = s * w; c < (s + 1) * w; c++) p += Sh[(int64_t)c * V + x] * kk[c];       \
                            P[s] = p;                                                                            \
                        }                                                                                        \
                        for (int s = 0; s < n; s++) {                                                            \
                            R u = v[row * V + x];                                                                \
                            for (int t = 0; t < n; t++) u -= M[s * n + t] * P[t];                                \
                            u *= beta[row];                                                                      \
                            for (int c = s * w; c < (s + 1) * w; c++) Sh[(int64_t)c * V + x] += kk[c] * u;       \
                        }                                                                                        \
                    }                                                                                            \
                    R acc = 0;                                                                                   \
                    for (int c = 0; c < K; c++) acc += Sh[(int64_t)c * V + x] * qh[c];                           \
                    o[((int64_t)b * H + h) * V + x] = scale * acc;                                               \
                }                                                                                                \
            }                                                                                                    \
        free(P);                                                                                                 \
        return true;                                                                                             \
    }

DEFINE_DECODE(float, f32, expf)
DEFINE_DECODE(double, f64, exp)

GdpStatus gdp_decode_step_cpu(const GdpDesc *d, const GdpDecodeArgs *a) {
    const char *who = "gdp_decode_step_cpu";
    GdpStatus st = gdp_decode_check(who, d, a);
    if (st != GDP_OK) return st;
    bool ok;
    if (d->dtype == GDP_F64)
        ok = decode_f64(d, a);
    else if (d->dtype == GDP_F32)
        ok = decode_f32(d, a);
    else
        return gdp_fail(GDP_ERR_INVALID, "%s: dtype %s is not supported on the CPU; use GDP_F32 or GDP_F64", who,
                        dtype_name(d->dtype));
    if (!ok) return gdp_fail(GDP_ERR_INVALID, "%s: out of host memory", who);
    return GDP_OK;
}
