/* Body of the CPU reference, instantiated twice by kernels/gdp/cpu.c: once with
 * R = float (suffix f32) and once with R = double (suffix f64). Everything, the running state
 * and every sum included, is computed in R. Not a header to include anywhere else. */
#ifndef GDP_R
#error "kernels/gdp/cpu_impl.h needs GDP_R, GDP_SUF and GDP_EXP defined"
#endif

#define R GDP_R
#define GDP_CAT_(a, b) a##_##b
#define GDP_CAT(a, b) GDP_CAT_(a, b)
#define FN(name) GDP_CAT(name, GDP_SUF)

/* Pointers of one (sequence, head) task; `tok` indexes [B*T] tokens, as b*T + t. */
typedef struct FN(GdpTask) {
    const GdpDesc *d;
    const GdpSeq *seq;
    int h;
    R scale;
    const R *q, *k, *v, *beta, *g, *mask;
} FN(GdpTask);

static inline const R *FN(key)(const FN(GdpTask) * a, int64_t tok, int j) {
    const GdpDesc *d = a->d;
    if (d->mode == GDP_MODE_HOUSEHOLDER) return a->k + ((tok * d->n + j) * d->H + a->h) * (int64_t)d->K;
    return a->k + (tok * d->H + a->h) * (int64_t)d->K;
}
static inline const R *FN(val)(const FN(GdpTask) * a, int64_t tok, int j) {
    const GdpDesc *d = a->d;
    if (d->mode == GDP_MODE_HOUSEHOLDER) return a->v + ((tok * d->n + j) * d->H + a->h) * (int64_t)d->V;
    return a->v + (tok * d->H + a->h) * (int64_t)d->V;
}
static inline R FN(bet)(const FN(GdpTask) * a, int64_t tok, int j) {
    const GdpDesc *d = a->d;
    if (d->mode == GDP_MODE_HOUSEHOLDER) return a->beta[(tok * d->n + j) * d->H + a->h];
    return a->beta[tok * d->H + a->h];
}
static inline R FN(decay)(const FN(GdpTask) * a, int64_t tok) {
    return a->g ? GDP_EXP(a->g[tok * a->d->H + a->h]) : (R)1;
}

/* One householder step in place: S <- S + beta k (v - S^T k)^T. p is scratch of V. */
static void FN(hh_step)(R *S, const R *kk, const R *vv, R bb, int K, int V, R *p) {
    for (int e = 0; e < V; e++) p[e] = 0;
    for (int c = 0; c < K; c++) {
        const R *row = S + (int64_t)c * V;
        for (int e = 0; e < V; e++) p[e] += row[e] * kk[c];
    }
    for (int e = 0; e < V; e++) p[e] = vv[e] - p[e];
    for (int c = 0; c < K; c++) {
        R *row = S + (int64_t)c * V;
        R bk = bb * kk[c];
        for (int e = 0; e < V; e++) row[e] += bk * p[e];
    }
}

/* Split-mode projections of the (decayed) state: P[b] = k^(b)T S^(b) and
 * U[a] = v - sum_b M[a,b] P[b], each a V-vector. */
static void FN(split_proj)(const R *S, const R *kk, const R *vv, const R *M, int K, int V, int r, R *P, R *U) {
    int w = K / r;
    for (int i = 0; i < r * V; i++) P[i] = 0;
    for (int c = 0; c < K; c++) {
        const R *row = S + (int64_t)c * V;
        R *pb = P + (int64_t)(c / w) * V;
        for (int e = 0; e < V; e++) pb[e] += row[e] * kk[c];
    }
    for (int a = 0; a < r; a++) {
        R *ua = U + (int64_t)a * V;
        for (int e = 0; e < V; e++) ua[e] = vv[e];
        for (int b = 0; b < r; b++) {
            R m = M[a * r + b];
            const R *pb = P + (int64_t)b * V;
            for (int e = 0; e < V; e++) ua[e] -= m * pb[e];
        }
    }
}

/* S (already decayed) <- S + beta k^(a) U[a]^T on each slice a. */
static void FN(split_update)(R *S, const R *kk, R bb, int K, int V, int r, const R *U) {
    int w = K / r;
    for (int c = 0; c < K; c++) {
        R *row = S + (int64_t)c * V;
        const R *ua = U + (int64_t)(c / w) * V;
        R bk = bb * kk[c];
        for (int e = 0; e < V; e++) row[e] += bk * ua[e];
    }
}

/* One whole token: decay, then the n householder steps or the split update. scratch holds
 * at least 2*n*V (split) or V (householder) elements. */
static void FN(token_step)(const FN(GdpTask) * a, R *S, int64_t tok, R *scratch) {
    const GdpDesc *d = a->d;
    int K = d->K, V = d->V;
    R e = FN(decay)(a, tok);
    if (e != (R)1)
        for (int64_t i = 0; i < (int64_t)K * V; i++) S[i] *= e;
    if (d->mode == GDP_MODE_HOUSEHOLDER) {
        for (int j = 0; j < d->n; j++) FN(hh_step)(S, FN(key)(a, tok, j), FN(val)(a, tok, j), FN(bet)(a, tok, j), K, V, scratch);
    } else {
        const R *kk = FN(key)(a, tok, 0);
        R *P = scratch, *U = scratch + (int64_t)d->n * V;
        FN(split_proj)(S, kk, FN(val)(a, tok, 0), a->mask + (int64_t)a->h * d->n * d->n, K, V, d->n, P, U);
        FN(split_update)(S, kk, FN(bet)(a, tok, 0), K, V, d->n, U);
    }
}

/* o_t = scale S^T q_t */
static void FN(read_out)(const R *S, const R *qq, R scale, int K, int V, R *oo) {
    for (int e = 0; e < V; e++) oo[e] = 0;
    for (int c = 0; c < K; c++) {
        const R *row = S + (int64_t)c * V;
        for (int e = 0; e < V; e++) oo[e] += row[e] * qq[c];
    }
    for (int e = 0; e < V; e++) oo[e] *= scale;
}

static GdpStatus FN(forward)(const GdpDesc *d, const GdpForwardArgs *args, const GdpSeq *seqs, int n_seqs) {
    const int K = d->K, V = d->V, H = d->H;
    const int64_t KV = (int64_t)K * V;
    const int ntask = n_seqs * H;
    int oom = 0;
#pragma omp parallel for schedule(dynamic, 1) if (ntask > 1)
    for (int task = 0; task < ntask; task++) {
        const int s = task / H, h = task % H;
        FN(GdpTask) a = {d, &seqs[s], h, (R)gdp_effective_scale(d), (const R *)args->q, (const R *)args->k,
                         (const R *)args->v, (const R *)args->beta, (const R *)args->g, (const R *)args->mask};
        R *S = (R *)malloc(sizeof(R) * (size_t)(KV + 2 * (int64_t)d->n * V + V));
        if (!S) {
#pragma omp atomic write
            oom = 1;
            continue;
        }
        R *scratch = S + KV;
        const int64_t st = ((int64_t)s * H + h) * KV;
        if (args->h0)
            memcpy(S, (const R *)args->h0 + st, sizeof(R) * (size_t)KV);
        else
            memset(S, 0, sizeof(R) * (size_t)KV);
        for (int t = seqs[s].t0; t < seqs[s].t1; t++) {
            const int64_t tok = (int64_t)seqs[s].b * d->T + t;
            FN(token_step)(&a, S, tok, scratch);
            FN(read_out)(S, a.q + (tok * H + h) * K, a.scale, K, V, (R *)args->o + (tok * H + h) * V);
        }
        if (args->ht) memcpy((R *)args->ht + st, S, sizeof(R) * (size_t)KV);
        free(S);
    }
    if (oom) return gdp_fail(GDP_ERR_INVALID, "gdp_forward_cpu: out of host memory for the running state");
    return GDP_OK;
}

/* Backward through one token. On entry dS is the gradient of the loss w.r.t. the state after
 * the token (S_t) and Sin the state before it; on exit dS is the gradient w.r.t. Sin.
 * buf holds (n+1)*K*V + 6*n*V + 2*K elements; dM (split) receives this token's mask gradient. */
static void FN(token_backward)(const FN(GdpTask) * a, const R *Sin, int64_t tok, R *dS, R *buf, const R *d_o,
                               R *dq, R *dk, R *dv, R *dbeta, R *dg, R *dM) {
    const GdpDesc *d = a->d;
    const int K = d->K, V = d->V, H = d->H, n = d->n, h = a->h;
    const int64_t KV = (int64_t)K * V;
    const R e = FN(decay)(a, tok);
    const R *qq = a->q + (tok * H + h) * K;
    const R *doo = d_o + (tok * H + h) * V;
    R *dqq = dq + (tok * H + h) * K;
    const int nst = d->mode == GDP_MODE_HOUSEHOLDER ? n + 1 : 2;
    R *Sj = buf;                    /* nst states: S^0 = e^g Sin, then after each step */
    R *vecs = buf + nst * KV;       /* r*V each: P, U, dU, dP; V each: p, du */
    R *w = vecs + 6 * (int64_t)n * V; /* K */
    R *P = vecs, *U = vecs + (int64_t)n * V, *dU = vecs + 2 * (int64_t)n * V, *dP = vecs + 3 * (int64_t)n * V;
    R *p = vecs + 4 * (int64_t)n * V, *du = vecs + 5 * (int64_t)n * V;

    for (int64_t i = 0; i < KV; i++) Sj[i] = e * Sin[i];
    if (d->mode == GDP_MODE_HOUSEHOLDER) {
        for (int j = 0; j < n; j++) {
            memcpy(Sj + (j + 1) * KV, Sj + j * KV, sizeof(R) * (size_t)KV);
            FN(hh_step)(Sj + (j + 1) * KV, FN(key)(a, tok, j), FN(val)(a, tok, j), FN(bet)(a, tok, j), K, V, p);
        }
    } else {
        const R *M = a->mask + (int64_t)h * n * n;
        FN(split_proj)(Sj, FN(key)(a, tok, 0), FN(val)(a, tok, 0), M, K, V, n, P, U);
        memcpy(Sj + KV, Sj, sizeof(R) * (size_t)KV);
        FN(split_update)(Sj + KV, FN(key)(a, tok, 0), FN(bet)(a, tok, 0), K, V, n, U);
    }
    const R *St = Sj + (nst - 1) * KV;

    /* o = scale St^T q: dq = scale St do, dSt += scale q do^T */
    for (int c = 0; c < K; c++) {
        const R *row = St + (int64_t)c * V;
        R *drow = dS + (int64_t)c * V;
        R acc = 0;
        for (int x = 0; x < V; x++) acc += row[x] * doo[x];
        dqq[c] = a->scale * acc;
        R sq = a->scale * qq[c];
        for (int x = 0; x < V; x++) drow[x] += sq * doo[x];
    }

    if (d->mode == GDP_MODE_HOUSEHOLDER) {
        for (int j = n - 1; j >= 0; j--) {
            const R *S = Sj + j * KV;
            const R *kk = FN(key)(a, tok, j), *vv = FN(val)(a, tok, j);
            const R bb = FN(bet)(a, tok, j);
            const int64_t slot = (tok * n + j) * H + h;
            R *dkk = dk + slot * K, *dvv = dv + slot * V;
            /* u = v - S^T k (into p); S' = S + b k u^T */
            for (int x = 0; x < V; x++) p[x] = 0;
            for (int c = 0; c < K; c++)
                for (int x = 0; x < V; x++) p[x] += S[(int64_t)c * V + x] * kk[c];
            for (int x = 0; x < V; x++) p[x] = vv[x] - p[x];
            /* du = b dS^T k, w = dS u; dbeta = k.w; dk = b w - S du; dv = du; dS -= k du^T */
            for (int x = 0; x < V; x++) du[x] = 0;
            R db = 0;
            for (int c = 0; c < K; c++) {
                const R *drow = dS + (int64_t)c * V;
                R wc = 0;
                for (int x = 0; x < V; x++) {
                    du[x] += drow[x] * kk[c];
                    wc += drow[x] * p[x];
                }
                w[c] = wc;
                db += kk[c] * wc;
            }
            for (int x = 0; x < V; x++) du[x] *= bb;
            dbeta[slot] = db;
            for (int x = 0; x < V; x++) dvv[x] = du[x];
            for (int c = 0; c < K; c++) {
                const R *row = S + (int64_t)c * V;
                R *drow = dS + (int64_t)c * V;
                R acc = 0;
                for (int x = 0; x < V; x++) {
                    acc += row[x] * du[x];
                    drow[x] -= kk[c] * du[x];
                }
                dkk[c] = bb * w[c] - acc;
            }
        }
    } else {
        const int r = n, wd = K / r;
        const R *M = a->mask + (int64_t)h * r * r;
        const R *S0 = Sj, *kk = FN(key)(a, tok, 0);
        const R bb = FN(bet)(a, tok, 0);
        const int64_t row_i = tok * H + h;
        R *dkk = dk + row_i * K, *dvv = dv + row_i * V;
        /* dU[a] = b dS^(a)T k^(a); w = dS U[slice]; dbeta = k.w; dk = b w (direct part) */
        for (int i = 0; i < r * V; i++) dU[i] = 0;
        R db = 0;
        for (int c = 0; c < K; c++) {
            const R *drow = dS + (int64_t)c * V;
            const R *ua = U + (int64_t)(c / wd) * V;
            R *dua = dU + (int64_t)(c / wd) * V;
            R wc = 0;
            for (int x = 0; x < V; x++) {
                dua[x] += drow[x] * kk[c];
                wc += drow[x] * ua[x];
            }
            db += kk[c] * wc;
            dkk[c] = bb * wc;
        }
        for (int i = 0; i < r * V; i++) dU[i] *= bb;
        dbeta[row_i] = db;
        for (int x = 0; x < V; x++) {
            R acc = 0;
            for (int aa = 0; aa < r; aa++) acc += dU[(int64_t)aa * V + x];
            dvv[x] = acc;
        }
        /* U[a] = v - sum_b M[a,b] P[b]: dM[a,b] = -dU[a].P[b]; dP[b] = -sum_a M[a,b] dU[a] */
        for (int aa = 0; aa < r; aa++)
            for (int b = 0; b < r; b++) {
                R acc = 0;
                for (int x = 0; x < V; x++) acc += dU[(int64_t)aa * V + x] * P[(int64_t)b * V + x];
                dM[aa * r + b] -= acc;
            }
        for (int b = 0; b < r; b++) {
            R *dpb = dP + (int64_t)b * V;
            for (int x = 0; x < V; x++) dpb[x] = 0;
            for (int aa = 0; aa < r; aa++) {
                R m = M[aa * r + b];
                for (int x = 0; x < V; x++) dpb[x] -= m * dU[(int64_t)aa * V + x];
            }
        }
        /* P[b] = S0^(b)T k^(b): dk += S0 dP[slice]; dS0 += k dP[slice]^T */
        for (int c = 0; c < K; c++) {
            const R *row = S0 + (int64_t)c * V;
            R *drow = dS + (int64_t)c * V;
            const R *dpb = dP + (int64_t)(c / wd) * V;
            R acc = 0;
            for (int x = 0; x < V; x++) {
                acc += row[x] * dpb[x];
                drow[x] += kk[c] * dpb[x];
            }
            dkk[c] += acc;
        }
    }
    /* S0 = e^g Sin: dg = sum(S0 o dS0), dSin = e^g dS0 */
    R acc = 0;
    for (int64_t i = 0; i < KV; i++) acc += Sj[i] * dS[i];
    if (dg) dg[tok * H + h] = acc;
    if (e != (R)1)
        for (int64_t i = 0; i < KV; i++) dS[i] *= e;
}

static GdpStatus FN(backward)(const GdpDesc *d, const GdpBackwardArgs *args, const GdpSeq *seqs, int n_seqs) {
    const int K = d->K, V = d->V, H = d->H, n = d->n;
    const int64_t KV = (int64_t)K * V;
    const int ntask = n_seqs * H;
    const int rr = d->mode == GDP_MODE_SPLIT ? n * n : 0;
    R *dM_part = NULL; /* one r*r mask gradient per task, summed in a fixed order afterwards */
    if (rr) {
        dM_part = (R *)calloc((size_t)ntask * rr, sizeof(R));
        if (!dM_part) return gdp_fail(GDP_ERR_INVALID, "gdp_backward_cpu: out of host memory");
    }
    int oom = 0;
#pragma omp parallel for schedule(dynamic, 1) if (ntask > 1)
    for (int task = 0; task < ntask; task++) {
        const int s = task / H, h = task % H;
        FN(GdpTask) a = {d, &seqs[s], h, (R)gdp_effective_scale(d), (const R *)args->q, (const R *)args->k,
                         (const R *)args->v, (const R *)args->beta, (const R *)args->g, (const R *)args->mask};
        const int t0 = seqs[s].t0, len = seqs[s].t1 - seqs[s].t0;
        const int64_t b0 = (int64_t)seqs[s].b * d->T;
        /* Checkpoints every C tokens (C ~ sqrt(len)); the states inside a chunk are recomputed. */
        int C = 1;
        while ((int64_t)C * C < len) C++;
        const int nch = len > 0 ? (len + C - 1) / C : 0;
        const int nst = d->mode == GDP_MODE_HOUSEHOLDER ? n + 1 : 2;
        const size_t elems = (size_t)(nch * KV + (int64_t)C * KV + KV + (int64_t)nst * KV + 6 * (int64_t)n * V + K +
                                      2 * (int64_t)n * V);
        R *mem = (R *)malloc(sizeof(R) * elems);
        if (!mem) {
#pragma omp atomic write
            oom = 1;
            continue;
        }
        R *ckpt = mem, *chunk = ckpt + nch * KV, *dS = chunk + (int64_t)C * KV, *tbuf = dS + KV;
        R *scratch = tbuf + nst * KV + 6 * (int64_t)n * V + K;
        const int64_t st = ((int64_t)s * H + h) * KV;
        /* forward, keeping the state at the start of every chunk */
        R *S = chunk; /* borrowed as the running state */
        if (args->h0)
            memcpy(S, (const R *)args->h0 + st, sizeof(R) * (size_t)KV);
        else
            memset(S, 0, sizeof(R) * (size_t)KV);
        for (int i = 0; i < len; i++) {
            if (i % C == 0) memcpy(ckpt + (i / C) * KV, S, sizeof(R) * (size_t)KV);
            FN(token_step)(&a, S, b0 + t0 + i, scratch);
        }
        if (args->dht)
            memcpy(dS, (const R *)args->dht + st, sizeof(R) * (size_t)KV);
        else
            memset(dS, 0, sizeof(R) * (size_t)KV);
        R *dM = rr ? dM_part + (int64_t)task * rr : NULL;
        for (int c = nch - 1; c >= 0; c--) {
            const int i0 = c * C, i1 = i0 + C < len ? i0 + C : len;
            memcpy(chunk, ckpt + c * KV, sizeof(R) * (size_t)KV);
            for (int i = i0; i + 1 < i1; i++) {
                memcpy(chunk + (i - i0 + 1) * KV, chunk + (i - i0) * KV, sizeof(R) * (size_t)KV);
                FN(token_step)(&a, chunk + (i - i0 + 1) * KV, b0 + t0 + i, scratch);
            }
            for (int i = i1 - 1; i >= i0; i--)
                FN(token_backward)(&a, chunk + (i - i0) * KV, b0 + t0 + i, dS, tbuf, (const R *)args->d_o,
                                   (R *)args->dq, (R *)args->dk, (R *)args->dv, (R *)args->dbeta, (R *)args->dg, dM);
        }
        if (args->dh0) memcpy((R *)args->dh0 + st, dS, sizeof(R) * (size_t)KV);
        free(mem);
    }
    if (!oom && rr && args->dmask) {
        R *dmask = (R *)args->dmask;
        for (int h = 0; h < H; h++)
            for (int i = 0; i < rr; i++) {
                R acc = 0;
                for (int s = 0; s < n_seqs; s++) acc += dM_part[((int64_t)s * H + h) * rr + i];
                dmask[(int64_t)h * rr + i] = acc;
            }
    }
    free(dM_part);
    if (oom) return gdp_fail(GDP_ERR_INVALID, "gdp_backward_cpu: out of host memory for the saved states");
    return GDP_OK;
}

#undef FN
#undef R
#undef GDP_CAT
#undef GDP_CAT_
