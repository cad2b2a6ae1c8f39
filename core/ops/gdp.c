/* op_gated_deltaproduct: argument checks, the tape node and its backward, over the public
 * kernel API (gdp_forward_cpu / gdp_backward_cpu, gdp_forward_cuda / gdp_backward_cuda); an
 * inference step of one token from a state runs the decode kernel (kernels/gdp/decode.h). */
#include "core/ops/gdp.h"

#include "core/op_util.h"
#include "kernels/gdp/decode.h"
#include "kernels/gdp/desc.h"
#ifdef GDP_CUDA
#include <cuda_runtime.h>

#include "base/cuda_check.h"
#endif

#define OPN "gated_deltaproduct"

/* Node layout: in = q, k, v, beta, g, mask, h0, cu_seqlens (i32, no gradient); out = o [, ht];
 * saved = the saving forward's buffer (CUDA, save_for_backward) or none; attr = mode, n, scale,
 * n_seqs (0 without cu_seqlens). */
enum { IN_Q, IN_K, IN_V, IN_BETA, IN_G, IN_MASK, IN_H0, IN_CU, N_IN };

static GdpDesc node_desc(const Node *nd) {
    const Tensor *q = nd->in[IN_Q], *v = nd->in[IN_V];
    GdpDesc d;
    memset(&d, 0, sizeof d);
    d.mode = (GdpMode)nd->attr[0].i;
    d.n = (int)nd->attr[1].i;
    d.scale = nd->attr[2].f;
    d.B = (int)q->shape[0], d.T = (int)q->shape[1], d.H = (int)q->shape[2], d.K = (int)q->shape[3];
    d.V = (int)v->shape[v->ndim - 1];
    d.dtype = q->dtype;
    if (nd->in[IN_CU]) {
        d.cu_seqlens = (const int32_t *)nd->in[IN_CU]->data;
        d.n_seqs = (int)nd->attr[3].i;
    }
    return d;
}

static const void *data_or_null(const Tensor *t) { return t ? t->data : NULL; }

static void check_status(GdpStatus st, const char *what) {
    if (st != GDP_OK) gdp_fatal("op '" OPN "': the %s failed (status %d): %s", what, (int)st, gdp_last_error());
}

#ifdef GDP_CUDA
/* (CUDA builds only: without CUDA, CUDA_ONLY drops its one caller, and -Wextra flagged it unused) */
static Tensor *saved_of(const Node *nd) { return nd->n_saved ? nd->saved[0] : NULL; }

static void forward_cuda(Ctx *ctx, const GdpDesc *d, GdpForwardArgs *fa, Tensor *saved) {
    if (saved) { /* the saved buffer is the whole workspace */
        /* an evaluation forward (no gradient, nothing saved) takes its workspace from scratch here:
         * keep that room when the arenas are fitted to a training step */
        arena_expect(&ctx->scratch, gdp_forward_workspace_bytes(d));
        fa->saved = saved->data, fa->saved_bytes = (size_t)tensor_bytes(saved);
        check_status(gdp_forward_cuda(d, fa, NULL, 0, ctx_stream(ctx)), "CUDA forward");
        return;
    }
    size_t bytes = gdp_forward_workspace_bytes(d);
    void *ws = bytes ? arena_alloc(&ctx->scratch, bytes) : NULL;
    check_status(gdp_forward_cuda(d, fa, ws, bytes, ctx_stream(ctx)), "CUDA forward");
}

static void backward_cuda(Ctx *ctx, const GdpDesc *d, GdpBackwardArgs *ba, const Tensor *saved) {
    ba->saved = saved ? saved->data : NULL;
    size_t bytes = saved ? gdp_backward_scratch_bytes(d) : gdp_backward_workspace_bytes(d);
    void *ws = bytes ? arena_alloc(&ctx->scratch, bytes) : NULL;
    check_status(gdp_backward_cuda(d, ba, ws, bytes, ctx_stream(ctx)), "CUDA backward");
}
#endif

/* One token per row from a given state with the final state wanted and nothing recorded for a
 * backward: an inference step, which the per-token kernel of kernels/gdp/decode.h does without the
 * chunked op's workspace or chunk-sized launches. At T = 1 the op's layouts are the decode step's
 * (q [B,1,H,K] is [B,H,K]; householder k [B,1,n,H,K] is [B,n,H,K], v and beta alike; split k
 * [B,1,H,K] is [B,H,K]; g [B,1,H] is [B,H]; o [B,1,H,V] is [B,H,V]; h0, ht [B,H,K,V]), so the
 * pointers go through unchanged. The CUDA kernel is float32 only: bf16 keeps the chunked path. */
static bool decode_step_applies(Ctx *ctx, const Node *nd, const GdpDesc *d) {
    if (d->T != 1 || d->cu_seqlens || !nd->in[IN_H0] || nd->n_out < 2 || op_records(ctx, nd)) return false;
    if (ctx->device == DEV_CPU) return d->dtype == GDP_F32 || d->dtype == GDP_F64;
    return d->dtype == GDP_F32 && d->K <= GDP_DECODE_MAX_K && d->B <= 65535 && d->H <= 65535;
}

/* ht = h0, then the step updates ht in place (h0 stays as it was unless it is ht). */
static void decode_step_forward(Ctx *ctx, Node *nd, const GdpDesc *d) {
    const Tensor *h0 = nd->in[IN_H0];
    Tensor *ht = nd->out[1];
    const size_t bytes = (size_t)tensor_bytes(ht);
    GDP_CHECK((size_t)tensor_bytes(h0) == bytes && h0->dtype == ht->dtype,
              "op '" OPN "': internal: h0 and ht differ in size or dtype");
    if (ht->data != h0->data) {
        if (ctx->device == DEV_CPU)
            memmove(ht->data, h0->data, bytes);
        else
            CUDA_ONLY(CUDA_CHECK(cudaMemcpyAsync(ht->data, h0->data, bytes, cudaMemcpyDeviceToDevice,
                                                 (cudaStream_t)ctx_stream(ctx))));
    }
    GdpDecodeArgs a = {.S = ht->data, .q = nd->in[IN_Q]->data, .k = nd->in[IN_K]->data, .v = nd->in[IN_V]->data,
                       .beta = nd->in[IN_BETA]->data, .g = data_or_null(nd->in[IN_G]),
                       .mask = data_or_null(nd->in[IN_MASK]), .o = nd->out[0]->data};
    if (ctx->device == DEV_CPU)
        check_status(gdp_decode_step_cpu(d, &a), "CPU decode step");
    else
        CUDA_ONLY(check_status(gdp_decode_step_cuda(d, &a, ctx_stream(ctx)), "CUDA decode step"));
}

static void gdp_forward_node(Ctx *ctx, Node *nd) {
    GdpDesc d = node_desc(nd);
    if (decode_step_applies(ctx, nd, &d)) {
        decode_step_forward(ctx, nd, &d);
        return;
    }
    GdpForwardArgs fa = {nd->in[IN_Q]->data, nd->in[IN_K]->data, nd->in[IN_V]->data, nd->in[IN_BETA]->data,
                         data_or_null(nd->in[IN_G]), data_or_null(nd->in[IN_MASK]), data_or_null(nd->in[IN_H0]),
                         nd->out[0]->data, nd->n_out > 1 ? nd->out[1]->data : NULL, NULL, 0};
    if (ctx->device == DEV_CPU) {
        check_status(gdp_forward_cpu(&d, &fa), "CPU forward");
    } else {
        size_t mark = arena_mark(&ctx->scratch);
        CUDA_ONLY(forward_cuda(ctx, &d, &fa, saved_of(nd)));
        arena_rewind(&ctx->scratch, mark); /* later users of scratch run after it on the same stream */
    }
}

static void zero_fill(Ctx *ctx, Tensor *t) {
    if (t->device == DEV_CPU)
        memset(t->data, 0, tensor_bytes(t));
    else
        CUDA_ONLY(CUDA_CHECK(cudaMemsetAsync(t->data, 0, tensor_bytes(t), (cudaStream_t)ctx_stream(ctx))));
}

/* Where the kernel writes the gradient of t. NULL when t is NULL or needs no gradient (unless
 * `required`: then a throw-away scratch buffer). The gradient buffer itself on the first write;
 * a scratch tensor (*tmp) to be accumulated with grad_write after the kernel otherwise. */
static void *grad_target(Ctx *ctx, Tensor *t, bool required, Tensor *like, Tensor **tmp) {
    *tmp = NULL;
    if (!t || !t->requires_grad) {
        if (!required) return NULL;
        return tensor_new(ctx, LIFE_SCRATCH, like->dtype, like->ndim, like->shape)->data;
    }
    if (t->grad_written) {
        *tmp = tensor_new(ctx, LIFE_SCRATCH, t->dtype, t->ndim, t->shape);
        return (*tmp)->data;
    }
    bool acc;
    Tensor *g = grad_dest(ctx, t, &acc);
    return g->data;
}

static void gdp_backward_node(Ctx *ctx, Node *nd) {
    GdpDesc d = node_desc(nd);
    size_t mark = arena_mark(&ctx->scratch);
    Tensor *o = nd->out[0], *ht = nd->n_out > 1 ? nd->out[1] : NULL;
    Tensor *d_o = o->grad_written ? o->grad : NULL;
    if (!d_o) {
        d_o = tensor_new(ctx, LIFE_SCRATCH, o->dtype, o->ndim, o->shape);
        zero_fill(ctx, d_o);
    }
    const void *dht = ht && ht->grad_written ? ht->grad->data : NULL;
    Tensor *tmp[7];
    void *gq = grad_target(ctx, nd->in[IN_Q], true, nd->in[IN_Q], &tmp[0]);
    void *gk = grad_target(ctx, nd->in[IN_K], true, nd->in[IN_K], &tmp[1]);
    void *gv = grad_target(ctx, nd->in[IN_V], true, nd->in[IN_V], &tmp[2]);
    void *gb = grad_target(ctx, nd->in[IN_BETA], true, nd->in[IN_BETA], &tmp[3]);
    void *gg = grad_target(ctx, nd->in[IN_G], false, NULL, &tmp[4]);
    void *gm = grad_target(ctx, nd->in[IN_MASK], false, NULL, &tmp[5]);
    void *gh = grad_target(ctx, nd->in[IN_H0], false, NULL, &tmp[6]);
    GdpBackwardArgs ba = {nd->in[IN_Q]->data, nd->in[IN_K]->data, nd->in[IN_V]->data, nd->in[IN_BETA]->data,
                          data_or_null(nd->in[IN_G]), data_or_null(nd->in[IN_MASK]), data_or_null(nd->in[IN_H0]),
                          d_o->data, dht, gq, gk, gv, gb, gg, gm, gh, NULL};
    if (ctx->device == DEV_CPU) {
        check_status(gdp_backward_cpu(&d, &ba), "CPU backward");
    } else {
        CUDA_ONLY(backward_cuda(ctx, &d, &ba, saved_of(nd)));
    }
    for (int i = 0; i < 7; i++)
        if (tmp[i]) grad_write(ctx, nd->in[i], tmp[i]);
    arena_rewind(&ctx->scratch, mark);
}

/* ---- argument checks ------------------------------------------------------------------------- */

static void check_shape(const char *arg, const Tensor *t, int ndim, const int64_t *want) {
    char d[TENSOR_DESC_LEN], w[96];
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == want[i];
    if (ok) return;
    size_t o = (size_t)snprintf(w, sizeof w, "[");
    for (int i = 0; i < ndim && o < sizeof w; i++) o += (size_t)snprintf(w + o, sizeof w - o, "%s%lld", i ? "," : "", (long long)want[i]);
    if (o < sizeof w) snprintf(w + o, sizeof w - o, "]");
    gdp_fatal("op '" OPN "': '%s' is %s, expected shape %s", arg, tensor_describe(t, d, sizeof d), w);
}

/* Device, dtype and contiguity of one input. `main`: q, k, v, beta (the op's dtype); otherwise an
 * f32 tensor on CUDA (g, mask, h0) or the op's dtype on the CPU. */
static void check_input(Ctx *ctx, const char *arg, const Tensor *t, DType op_dt, bool main) {
    char d[TENSOR_DESC_LEN];
    op_check_float(OPN, arg, t, ctx->device);
    op_check_contiguous(OPN, arg, t);
    DType want = (main || ctx->device == DEV_CPU) ? op_dt : GDP_F32;
    if (t->dtype != want)
        gdp_fatal("op '" OPN "': '%s' %s has dtype %s but must be %s (%s)", arg, tensor_describe(t, d, sizeof d),
                  dtype_name(t->dtype), dtype_name(want),
                  ctx->device == DEV_CPU ? "on the CPU every input shares q's dtype"
                  : main                 ? "q, k, v and beta share one dtype, bf16 or f32"
                                         : "g, mask and h0 are always float32 on CUDA");
}

Tensor *op_gated_deltaproduct(Ctx *ctx, const GdpOpArgs *a) {
    char d1[TENSOR_DESC_LEN];
    GDP_CHECK(a, "op '" OPN "': the argument struct is NULL");
    if (a->mode != GDP_MODE_HOUSEHOLDER && a->mode != GDP_MODE_SPLIT)
        gdp_fatal("op '" OPN "': mode %d is neither householder (0) nor split (1)", (int)a->mode);
    const bool split = a->mode == GDP_MODE_SPLIT;
    op_check_not_null(OPN, "q", a->q);
    op_check_not_null(OPN, "k", a->k);
    op_check_not_null(OPN, "v", a->v);
    op_check_not_null(OPN, "beta", a->beta);
    if (split) op_check_not_null(OPN, "mask (split mode)", a->mask);
    if (!split && a->mask) gdp_fatal("op '" OPN "': householder mode takes no mask; pass mask = NULL");
    const DType dt = a->q->dtype;
    check_input(ctx, "q", a->q, dt, true);
    check_input(ctx, "k", a->k, dt, true);
    check_input(ctx, "v", a->v, dt, true);
    check_input(ctx, "beta", a->beta, dt, true);
    if (a->g) check_input(ctx, "g", a->g, dt, false);
    if (a->mask) check_input(ctx, "mask", a->mask, dt, false);
    if (a->h0) check_input(ctx, "h0", a->h0, dt, false);
    if (a->q->ndim != 4) gdp_fatal("op '" OPN "': q is %s, expected [B,T,H,K]", tensor_describe(a->q, d1, sizeof d1));
    const int64_t B = a->q->shape[0], T = a->q->shape[1], H = a->q->shape[2], K = a->q->shape[3];
    int64_t n = a->n;
    if (n <= 0) {
        const Tensor *src = split ? a->mask : a->k;
        if (src->ndim != (split ? 3 : 5))
            gdp_fatal("op '" OPN "': n is 0 and %s is %s, so the number of %s cannot be read from it", split ? "mask" : "k",
                      tensor_describe(src, d1, sizeof d1), split ? "slices" : "householder steps");
        n = split ? src->shape[1] : src->shape[2];
    }
    const int64_t V = a->v->shape[a->v->ndim - 1];
    if (split) {
        check_shape("k", a->k, 4, (int64_t[]){B, T, H, K});
        check_shape("v", a->v, 4, (int64_t[]){B, T, H, V});
        check_shape("beta", a->beta, 3, (int64_t[]){B, T, H});
        check_shape("mask", a->mask, 3, (int64_t[]){H, n, n});
        if (K % n)
            gdp_fatal("op '" OPN "': split mode: K=%lld is not divisible by r=%lld (each slice is K/r wide)",
                      (long long)K, (long long)n);
    } else {
        check_shape("k", a->k, 5, (int64_t[]){B, T, n, H, K});
        check_shape("v", a->v, 5, (int64_t[]){B, T, n, H, V});
        check_shape("beta", a->beta, 4, (int64_t[]){B, T, n, H});
    }
    if (a->g) check_shape("g", a->g, 3, (int64_t[]){B, T, H});
    int64_t N = B;
    if (a->cu_seqlens) {
        const int32_t *cu = a->cu_seqlens;
        N = a->n_seqs;
        if (B != 1) gdp_fatal("op '" OPN "': with cu_seqlens B must be 1 (sequences packed along T), q has B=%lld", (long long)B);
        if (N < 1) gdp_fatal("op '" OPN "': cu_seqlens is given with n_seqs=%lld; it must be at least 1", (long long)N);
        if (cu[0] != 0 || cu[N] != T)
            gdp_fatal("op '" OPN "': cu_seqlens must start at 0 and end at T=%lld, got %d and %d", (long long)T,
                      (int)cu[0], (int)cu[N]);
        for (int64_t i = 0; i < N; i++)
            if (cu[i + 1] <= cu[i])
                gdp_fatal("op '" OPN "': cu_seqlens must be strictly increasing, got cu_seqlens[%lld]=%d, [%lld]=%d",
                          (long long)i, (int)cu[i], (long long)(i + 1), (int)cu[i + 1]);
    }
    if (a->h0) check_shape("h0", a->h0, 4, (int64_t[]){N, H, K, V});

    Node nd = node_make(&op_gated_deltaproduct_def);
    nd.n_in = N_IN;
    nd.in[IN_Q] = a->q, nd.in[IN_K] = a->k, nd.in[IN_V] = a->v, nd.in[IN_BETA] = a->beta;
    nd.in[IN_G] = a->g, nd.in[IN_MASK] = a->mask, nd.in[IN_H0] = a->h0;
    nd.in[IN_CU] = a->cu_seqlens ? tensor_from_host(ctx, LIFE_ACT, GDP_I32, SHAPE(N + 1), a->cu_seqlens) : NULL;
    nd.attr[0].i = a->mode;
    nd.attr[1].i = n;
    nd.attr[2].f = a->scale;
    nd.attr[3].i = a->cu_seqlens ? N : 0;
    GdpDesc desc = node_desc(&nd);
    if (gdp_validate(&desc) != GDP_OK) gdp_fatal("op '" OPN "': %s", gdp_last_error());
#ifdef GDP_CUDA
    if (a->save_for_backward && ctx->device == DEV_CUDA && op_records(ctx, &nd)) {
        const int64_t words = (int64_t)(gdp_saved_bytes(&desc) / 4); /* a multiple of 256 bytes */
        nd.saved[0] = tensor_new(ctx, LIFE_ACT, GDP_I32, SHAPE(words));
        nd.n_saved = 1;
    }
#endif
    nd.n_out = a->ht_out ? 2 : 1;
    nd.out[0] = op_new_out(ctx, a->q, SHAPE(B, T, H, V));
    if (a->ht_out)
        nd.out[1] = tensor_new(ctx, LIFE_ACT, ctx->device == DEV_CPU ? dt : GDP_F32, SHAPE(N, H, K, V));
    op_run(ctx, &nd);
    if (a->ht_out) *a->ht_out = nd.out[1];
    return nd.out[0];
}

/* ---- gradient check case ----------------------------------------------------------------------- */

/* Names a leaf for gradcheck's report; the generated argument-error checks may hand the case NULL. */
static Tensor *named(Tensor *t, const char *name) {
    if (t) snprintf(t->name, GDP_NAME_LEN, "%s", name);
    return t;
}

/* B=1, T=5, H=2, K=4, V=3, householder with n=2, gate and h0: o. Keys are kept short (|k| <= 1)
 * and beta in (0, 1.5) so the steps stay contractive-ish, as in the model. */
static Tensor *gdp_case(Ctx *ctx, DType dt, uint64_t seed) {
    const DType aux = ctx->device == DEV_CPU ? dt : GDP_F32;
    GdpOpArgs a;
    memset(&a, 0, sizeof a);
    a.mode = GDP_MODE_HOUSEHOLDER;
    a.n = 2;
    a.q = named(gc_random(ctx, dt, &seed, -1, 1, SHAPE(1, 5, 2, 4)), "q");
    a.k = named(gc_random(ctx, dt, &seed, -0.5, 0.5, SHAPE(1, 5, 2, 2, 4)), "k");
    a.v = named(gc_random(ctx, dt, &seed, -1, 1, SHAPE(1, 5, 2, 2, 3)), "v");
    a.beta = named(gc_random(ctx, dt, &seed, 0.1, 1.5, SHAPE(1, 5, 2, 2)), "beta");
    a.g = named(gc_random(ctx, aux, &seed, -1, 0, SHAPE(1, 5, 2)), "g");
    a.h0 = named(gc_random(ctx, aux, &seed, -0.5, 0.5, SHAPE(1, 2, 4, 3)), "h0");
    return op_gated_deltaproduct(ctx, &a);
}

/* bf16 bound 2e-2: the op's own bound (`gdp vectors`); a chain of K/V-long bf16 products. */
const OpDef op_gated_deltaproduct_def = {OPN, gdp_forward_node, gdp_backward_node, gdp_case, 0, 2e-2};
