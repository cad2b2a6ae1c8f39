/* Recurrent decoding on CUDA, one token: model_forward_state's math for T = 1 with every array on
 * the GPU, in per-token kernels (a second copy of the layer kept for speed: the chunked ops at
 * T = 1 would launch a chunk's work for one row). Matvecs are 1-row cuBLAS products through
 * kernels/matmul (the residual adds folded in as accumulate = 1), norms, activations and SwiGLU
 * reuse the ops' kernels, the short convs and the gate are kernels/decode_step.cu, the recurrent
 * state is updated in place by kernels/gdp/decode.cu.
 * Everything is queued on the context's stream; only the logits come back to the host. */
#include "layers/decode_cuda.h"

#include "base/common.h"

#ifdef GDP_CUDA
#include "core/cuda_ctx.h"
#include "kernels/decode_step.h"
#include "kernels/gated_rmsnorm.h"
#include "kernels/gdp/decode.h"
#include "kernels/l2norm.h"
#include "kernels/matmul.h"
#include "kernels/pointwise.h"
#include "kernels/rmsnorm.h"
#include "kernels/scale.h"
#include "kernels/swiglu.h"

#define L2NORM_EPS 1e-6 /* as layers/gdp_layer.c */

typedef struct CudaLayerState {
    float *conv_q, *conv_k, *conv_v; /* [conv_size-1, C], oldest first */
    float *S;                        /* [H, K, V] */
} CudaLayerState;

/* Per-token work buffers, all on the device. */
typedef struct CudaBufs {
    float *x, *h, *q, *qc, *k, *kc, *vc, *v, *beta, *a, *g, *o, *z, *y, *gate, *up, *act, *logits, *rstd;
} CudaBufs;

typedef struct DecodeCuda {
    float *state_mem; /* every layer's caches and state, one allocation */
    size_t state_floats;
    float *buf_mem;
    CudaLayerState *layers;
    CudaBufs b;
    void *stream;
    void *cublas;
} DecodeCuda;

static const float *dev_f32(const Tensor *t) {
    GDP_CHECK(t->device == DEV_CUDA && t->dtype == GDP_F32 && t->data && tensor_is_contiguous(t),
              "decode on cuda: parameter '%s' must be contiguous float32 on cuda", t->name);
    return (const float *)t->data;
}

/* y[out] (+)= W[out, in] x[in]: the 1-row product x W^T, as linear_forward computes it. */
static void matvec(DecodeCuda *dc, const Tensor *w, const float *x, float *y, int accumulate) {
    const float *W = dev_f32(w);
    matmul_cuda(GDP_F32, dc->cublas, y, x, W, 1, 1, w->shape[0], w->shape[1], 0, 1, 0, 0, 0, accumulate);
}

static size_t bufs_layout(const ModelConfig *c, float *base, CudaBufs *b) {
    const int64_t D = c->hidden_size, kd = cfg_key_dim(c), vd = cfg_value_dim(c), s = cfg_slots(c);
    const int64_t H = c->num_heads, I = cfg_intermediate(c), out = cfg_out_dim(c);
    const int64_t rstd = s * kd + H + 1; /* rows of any norm: at most s*kd (l2norm per slice) */
    const int64_t sizes[] = {D, D, kd, kd, s * kd, s * kd, s * vd, s * vd, s * H, H, H, vd, vd, vd, I, I, I, out, rstd};
    float **slots[] = {&b->x,  &b->h,  &b->q,    &b->qc,   &b->k,    &b->kc, &b->vc, &b->v,    &b->beta, &b->a,
                       &b->g,  &b->o,  &b->z,    &b->y,    &b->gate, &b->up, &b->act, &b->logits, &b->rstd};
    _Static_assert(GDP_ARRAY_LEN(sizes) == GDP_ARRAY_LEN(slots), "one size per buffer");
    size_t off = 0;
    for (size_t i = 0; i < GDP_ARRAY_LEN(sizes); i++) {
        if (base) *slots[i] = base + off;
        off += ((size_t)sizes[i] + 63) & ~(size_t)63; /* 256-byte aligned buffers */
    }
    return off;
}

/* Floats of one layer's caches and state, each part 256-byte aligned. */
static size_t layer_parts(const ModelConfig *c, size_t parts[4]) {
    const int64_t kd = cfg_key_dim(c), vd = cfg_value_dim(c), s = cfg_slots(c), W = c->conv_size;
    const size_t hist = (size_t)(c->use_short_conv && W > 1 ? W - 1 : 0);
    parts[0] = hist * (size_t)kd;
    parts[1] = hist * (size_t)(s * kd);
    parts[2] = hist * (size_t)(s * vd);
    parts[3] = (size_t)c->num_heads * (size_t)c->head_dim * (size_t)cfg_head_v_dim(c);
    size_t total = 0;
    for (int i = 0; i < 4; i++) total += (parts[i] + 63) & ~(size_t)63;
    return total;
}

void decode_cuda_init(DecodeState *st) {
    const Model *m = st->m;
    const ModelConfig *c = &m->cfg;
    GDP_CHECK(m->ctx->device == DEV_CUDA && m->ctx->cuda, "decode on cuda: the model's context is not on cuda");
    GDP_CHECK(c->head_dim <= GDP_DECODE_MAX_K, "decode on cuda: head_dim %d exceeds the decode kernel's %d",
              c->head_dim, GDP_DECODE_MAX_K);
    DecodeCuda *dc = (DecodeCuda *)xcalloc(1, sizeof(DecodeCuda));
    dc->stream = ctx_stream(m->ctx);
    dc->cublas = (void *)m->ctx->cuda->cublas;
    const int L = c->num_hidden_layers;
    size_t parts[4];
    const size_t per_layer = layer_parts(c, parts);
    dc->state_floats = per_layer * (size_t)L;
    dc->state_mem = (float *)device_malloc(DEV_CUDA, dc->state_floats * sizeof(float));
    dc->layers = (CudaLayerState *)xcalloc((size_t)L, sizeof(CudaLayerState));
    for (int i = 0; i < L; i++) {
        float *p = dc->state_mem + (size_t)i * per_layer;
        float **dst[4] = {&dc->layers[i].conv_q, &dc->layers[i].conv_k, &dc->layers[i].conv_v, &dc->layers[i].S};
        for (int j = 0; j < 4; j++) {
            *dst[j] = p;
            p += (parts[j] + 63) & ~(size_t)63;
        }
    }
    const size_t nbuf = bufs_layout(c, NULL, &dc->b);
    dc->buf_mem = (float *)device_malloc(DEV_CUDA, nbuf * sizeof(float));
    bufs_layout(c, dc->buf_mem, &dc->b);
    CUDA_CHECK(cudaMemsetAsync(dc->buf_mem, 0, nbuf * sizeof(float), (cudaStream_t)dc->stream));
    st->cuda = dc;
    decode_cuda_reset(st);
}

void decode_cuda_reset(DecodeState *st) {
    DecodeCuda *dc = st->cuda;
    if (dc->state_floats)
        CUDA_CHECK(cudaMemsetAsync(dc->state_mem, 0, dc->state_floats * sizeof(float), (cudaStream_t)dc->stream));
    CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)dc->stream));
    st->pos = 0;
}

void decode_cuda_free(DecodeState *st) {
    DecodeCuda *dc = st->cuda;
    if (!dc) return;
    CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)dc->stream));
    device_free(DEV_CUDA, dc->state_mem);
    device_free(DEV_CUDA, dc->buf_mem);
    free(dc->layers);
    free(dc);
    st->cuda = NULL;
}

/* Short conv + SiLU of C channels from x into y (the cache moves on). */
static void conv_silu(DecodeCuda *dc, const ModelConfig *c, const Tensor *w, float *cache, const float *x, float *y,
                      int64_t C) {
    if (w) GDP_CHECK(w->ndim == 3 && w->shape[0] == C && w->shape[1] == 1 && w->shape[2] == c->conv_size,
                     "decode on cuda: conv weight '%s' is not [%lld, 1, %d]", w->name, (long long)C, c->conv_size);
    decode_conv_silu_step_cuda(y, cache, x, w ? dev_f32(w) : NULL, C, c->conv_size, dc->stream);
}

static void attn_step(DecodeCuda *dc, const ModelConfig *c, const GdpLayer *L, CudaLayerState *ls) {
    CudaBufs *b = &dc->b;
    void *s_ = dc->stream;
    const int64_t H = c->num_heads, K = c->head_dim, V = cfg_head_v_dim(c), s = cfg_slots(c);
    const int64_t kd = cfg_key_dim(c), vd = cfg_value_dim(c);
    const bool split = c->mode == GDP_MODE_SPLIT;
    matvec(dc, L->q_proj, b->h, b->q, 0);
    matvec(dc, L->k_proj, b->h, b->k, 0);
    matvec(dc, L->v_proj, b->h, b->v, 0);
    conv_silu(dc, c, L->q_conv, ls->conv_q, b->q, b->qc, kd);
    conv_silu(dc, c, L->k_conv, ls->conv_k, b->k, b->kc, s * kd);
    conv_silu(dc, c, L->v_conv, ls->conv_v, b->v, b->vc, s * vd);
    /* q, k L2-normalised per head (split: per slice), back into b->q, b->k */
    const int64_t group = split ? K / c->num_householder : K;
    l2norm_forward_cuda(GDP_F32, b->q, b->rstd, b->qc, kd / group, group, L2NORM_EPS, s_);
    l2norm_forward_cuda(GDP_F32, b->k, b->rstd, b->kc, s * kd / group, group, L2NORM_EPS, s_);
    /* beta = sigmoid(b_proj h), x2 with negative eigenvalues */
    matvec(dc, L->b_proj, b->h, b->beta, 0);
    pointwise_forward_cuda(PW_SIGMOID, GDP_F32, b->beta, b->beta, s * H, s_); /* elementwise: in place is fine */
    if (c->allow_neg_eigval) scale_cuda(GDP_F32, b->beta, b->beta, 2.0, s * H, 0, s_);
    if (L->a_proj) {
        matvec(dc, L->a_proj, b->h, b->a, 0);
        decode_gate_cuda(b->g, b->a, dev_f32(L->A_log), dev_f32(L->dt_bias), H, s_);
    }
    GdpDesc desc = {.mode = c->mode, .B = 1, .T = 1, .H = (int)H, .K = (int)K, .V = (int)V,
                    .n = c->num_householder, .scale = 0, .dtype = GDP_F32};
    GdpDecodeArgs args = {.S = ls->S, .q = b->q, .k = b->k, .v = b->vc, .beta = b->beta,
                          .g = L->a_proj ? b->g : NULL, .mask = split ? dev_f32(L->mask) : NULL, .o = b->o};
    GdpStatus st = gdp_decode_step_cuda(&desc, &args, s_);
    GDP_CHECK(st == GDP_OK, "decode on cuda: the GDP decode step failed: %s", gdp_last_error());
    /* o_norm per head (weight [V] shared by the heads), gated by SiLU(g_proj h) */
    if (L->g_proj) {
        matvec(dc, L->g_proj, b->h, b->z, 0);
        gated_rmsnorm_forward_cuda(GDP_F32, b->y, b->rstd, b->o, b->z, dev_f32(L->o_norm), H, V, c->norm_eps, s_);
    } else {
        rmsnorm_forward_cuda(GDP_F32, GDP_F32, b->y, b->rstd, b->o, dev_f32(L->o_norm), H, V, c->norm_eps, s_);
    }
    matvec(dc, L->o_proj, b->y, b->x, 1); /* x += o_proj y: the residual add */
}

void decode_cuda_step(DecodeState *st, int token, float *logits) {
    DecodeCuda *dc = st->cuda;
    const Model *m = st->m;
    const ModelConfig *c = &m->cfg;
    CudaBufs *b = &dc->b;
    void *s_ = dc->stream;
    const int64_t D = c->hidden_size, I = cfg_intermediate(c);
    CUDA_CHECK(cudaMemcpyAsync(b->x, dev_f32(m->embeddings) + (int64_t)token * D, (size_t)D * sizeof(float),
                               cudaMemcpyDeviceToDevice, (cudaStream_t)s_));
    for (int i = 0; i < c->num_hidden_layers; i++) {
        const Block *blk = &m->blocks[i];
        rmsnorm_forward_cuda(GDP_F32, GDP_F32, b->h, b->rstd, b->x, dev_f32(blk->attn_norm), 1, D, c->norm_eps, s_);
        attn_step(dc, c, &blk->attn, &dc->layers[i]);
        rmsnorm_forward_cuda(GDP_F32, GDP_F32, b->h, b->rstd, b->x, dev_f32(blk->mlp_norm), 1, D, c->norm_eps, s_);
        matvec(dc, blk->mlp.gate_proj, b->h, b->gate, 0);
        matvec(dc, blk->mlp.up_proj, b->h, b->up, 0);
        swiglu_forward_cuda(GDP_F32, b->act, b->gate, b->up, I, s_);
        matvec(dc, blk->mlp.down_proj, b->act, b->x, 1); /* x += down_proj act */
    }
    rmsnorm_forward_cuda(GDP_F32, GDP_F32, b->h, b->rstd, b->x, dev_f32(m->norm), 1, D, c->norm_eps, s_);
    matvec(dc, m->head, b->h, b->logits, 0);
    const int64_t out = cfg_out_dim(c);
    CUDA_CHECK(cudaMemcpyAsync(logits, b->logits, (size_t)out * sizeof(float), cudaMemcpyDeviceToHost,
                               (cudaStream_t)s_));
    CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)s_));
}

void decode_cuda_sync_state(DecodeState *st, bool to_model) {
    DecodeCuda *dc = st->cuda;
    const ModelConfig *c = &st->m->cfg;
    size_t parts[4];
    layer_parts(c, parts);
    cudaStream_t s_ = (cudaStream_t)dc->stream;
    for (int i = 0; i < c->num_hidden_layers; i++) {
        CudaLayerState *ls = &dc->layers[i];
        GdpLayerState *ms = &st->state.layers[i];
        float *mine[4] = {ls->conv_q, ls->conv_k, ls->conv_v, ls->S};
        Tensor *model[4] = {&ms->conv_q, &ms->conv_k, &ms->conv_v, &ms->S};
        for (int j = 0; j < 4; j++) {
            GDP_CHECK((size_t)model[j]->numel == parts[j] && model[j]->device == DEV_CUDA,
                      "decode on cuda: state '%s' does not match the step's layout (%zu floats)", model[j]->name,
                      parts[j]);
            if (!parts[j]) continue;
            void *dst = to_model ? model[j]->data : (void *)mine[j];
            const void *src = to_model ? (const void *)mine[j] : model[j]->data;
            CUDA_CHECK(cudaMemcpyAsync(dst, src, parts[j] * sizeof(float), cudaMemcpyDeviceToDevice, s_));
        }
    }
    CUDA_CHECK(cudaStreamSynchronize(s_));
}

#else /* no CUDA in this build */

static void no_cuda(void) {
    gdp_fatal("decode on cuda: this build of gdp has no CUDA support (nvcc was not found when it was built)");
}
void decode_cuda_init(DecodeState *st) {
    (void)st;
    no_cuda();
}
void decode_cuda_reset(DecodeState *st) {
    (void)st;
    no_cuda();
}
void decode_cuda_free(DecodeState *st) {
    (void)st;
    no_cuda();
}
void decode_cuda_step(DecodeState *st, int token, float *logits) {
    (void)st, (void)token, (void)logits;
    no_cuda();
}
void decode_cuda_sync_state(DecodeState *st, bool to_model) {
    (void)st, (void)to_model;
    no_cuda();
}

#endif
