/* op_embedding: weight [V, C], ids int32 [...] -> [..., C]. An id outside [0, V) is a fatal error
 * naming it (on CUDA a device-side flag, read back once per call; not while the stream is being
 * captured into a CUDA graph, where nothing can be read back: a captured forward's ids are checked
 * on the host by its caller, and an id out of range gives a zero row). Backward: a deterministic
 * scatter-add of dout rows into dweight (kernels/embedding.h), no float atomics. */
#include "core/op_util.h"
#include "kernels/embedding.h"
#ifdef GDP_CUDA
#include "base/cuda_check.h"
#endif

/* ---- CPU kernels (f32, f64): the reference every CUDA kernel is tested against --------------- */

#define DEFINE_EMB(T, SUF)                                                                                    \
    static int64_t emb_fwd_##SUF(T *out, const T *w, const int32_t *ids, int64_t n, int64_t v, int64_t c,   \
                                 int32_t *bad_id) {                                                          \
        int64_t bad = -1;                                                                                    \
        for (int64_t p = 0; p < n; p++) {                                                                    \
            int32_t id = ids[p];                                                                             \
            if (id < 0 || id >= v) {                                                                         \
                if (bad < 0) bad = p, *bad_id = id;                                                          \
                memset(out + p * c, 0, (size_t)c * sizeof(T));                                               \
            } else {                                                                                         \
                memcpy(out + p * c, w + (int64_t)id * c, (size_t)c * sizeof(T));                             \
            }                                                                                                \
        }                                                                                                    \
        return bad;                                                                                          \
    }                                                                                                        \
    static void emb_bwd_##SUF(T *dw, const T *dout, const int64_t *start, const int64_t *order, int64_t v,  \
                              int64_t c, int acc) {                                                          \
        _Pragma("omp parallel for schedule(static) if (v * c > 65536)")                                      \
        for (int64_t r = 0; r < v; r++) {                                                                    \
            T *row = dw + r * c;                                                                             \
            if (!acc)                                                                                        \
                for (int64_t j = 0; j < c; j++) row[j] = 0;                                                  \
            for (int64_t q = start[r]; q < start[r + 1]; q++) {                                              \
                const T *src = dout + order[q] * c;                                                          \
                for (int64_t j = 0; j < c; j++) row[j] += src[j];                                            \
            }                                                                                                \
        }                                                                                                    \
    }
DEFINE_EMB(float, f32)
DEFINE_EMB(double, f64)

int64_t embedding_forward_cpu(DType dt, void *out, const void *weight, const int32_t *ids, int64_t n, int64_t v,
                              int64_t c, int32_t *bad_id) {
    if (dt == GDP_F64) return emb_fwd_f64((double *)out, (const double *)weight, ids, n, v, c, bad_id);
    if (dt == GDP_F32) return emb_fwd_f32((float *)out, (const float *)weight, ids, n, v, c, bad_id);
    gdp_fatal("kernel 'embedding' on cpu supports f32 and f64, not %s", dtype_name(dt));
}

void embedding_backward_cpu(DType dt, void *dweight, const void *dout, const int32_t *ids, int64_t n, int64_t v,
                            int64_t c, int accumulate) {
    /* Counting sort of positions by id, stable: each bucket lists its positions in increasing order. */
    int64_t *start = (int64_t *)xcalloc((size_t)v + 1, sizeof(int64_t));
    int64_t *order = (int64_t *)xmalloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    for (int64_t p = 0; p < n; p++) {
        GDP_CHECK(ids[p] >= 0 && ids[p] < v, "kernel 'embedding' backward: id %d at position %lld is outside [0, %lld)",
                  ids[p], (long long)p, (long long)v);
        start[ids[p] + 1]++;
    }
    for (int64_t r = 0; r < v; r++) start[r + 1] += start[r];
    int64_t *cursor = (int64_t *)xmalloc((size_t)(v > 0 ? v : 1) * sizeof(int64_t));
    memcpy(cursor, start, (size_t)v * sizeof(int64_t));
    for (int64_t p = 0; p < n; p++) order[cursor[ids[p]]++] = p;
    free(cursor);
    if (dt == GDP_F64)
        emb_bwd_f64((double *)dweight, (const double *)dout, start, order, v, c, accumulate);
    else if (dt == GDP_F32)
        emb_bwd_f32((float *)dweight, (const float *)dout, start, order, v, c, accumulate);
    else
        gdp_fatal("kernel 'embedding' on cpu supports f32 and f64, not %s", dtype_name(dt));
    free(start);
    free(order);
}

/* ---- the op: tape node, OpDef and public function -------------------------------------------- */

static void bad_id_fatal(const Tensor *weight, const Tensor *ids, int64_t pos, int32_t id) {
    char dw[TENSOR_DESC_LEN], di[TENSOR_DESC_LEN];
    gdp_fatal("op 'embedding': id %d at position %lld of ids %s is outside [0, %lld), the rows of weight %s; "
              "check that the data's token ids fit the model's vocab_size",
              id, (long long)pos, tensor_describe(ids, di, sizeof di), (long long)weight->shape[0],
              tensor_describe(weight, dw, sizeof dw));
}

#ifdef GDP_CUDA
static int64_t emb_forward_cuda(Ctx *ctx, Tensor *out, const Tensor *w, const Tensor *ids, int32_t *bad_id) {
    enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing((cudaStream_t)ctx_stream(ctx), &capture));
    size_t mark = arena_mark(&ctx->scratch);
    void *flag = capture == cudaStreamCaptureStatusNone ? arena_alloc(&ctx->scratch, 8) : NULL;
    int64_t bad = embedding_forward_cuda(w->dtype, out->data, w->data, (const int32_t *)ids->data, ids->numel,
                                         w->shape[0], w->shape[1], flag, bad_id, ctx_stream(ctx));
    arena_rewind(&ctx->scratch, mark); /* with a flag the call synchronised the stream */
    return bad;
}

static void emb_backward_cuda(Ctx *ctx, Tensor *dw, const Tensor *dout, const Tensor *ids, bool acc) {
    size_t mark = arena_mark(&ctx->scratch);
    size_t bytes = embedding_backward_cuda_scratch_bytes(ids->numel, dw->shape[0]);
    void *scratch = bytes ? arena_alloc(&ctx->scratch, bytes) : NULL;
    embedding_backward_cuda(dw->dtype, dw->data, dout->data, (const int32_t *)ids->data, ids->numel, dw->shape[0],
                            dw->shape[1], acc, scratch, bytes, ctx_stream(ctx));
    /* Later users of the scratch run after these kernels on the same stream. */
    arena_rewind(&ctx->scratch, mark);
}
#endif

static void embedding_forward(Ctx *ctx, Node *n) {
    Tensor *w = n->in[0], *ids = n->in[1], *out = n->out[0];
    int32_t bad_id = 0;
    int64_t bad = -1;
    if (ctx->device == DEV_CPU)
        bad = embedding_forward_cpu(w->dtype, out->data, w->data, (const int32_t *)ids->data, ids->numel, w->shape[0],
                                    w->shape[1], &bad_id);
    else
        CUDA_ONLY(bad = emb_forward_cuda(ctx, out, w, ids, &bad_id));
    if (bad >= 0) bad_id_fatal(w, ids, bad, bad_id);
}

static void embedding_backward(Ctx *ctx, Node *n) {
    Tensor *w = n->in[0], *ids = n->in[1], *dout = n->out[0]->grad;
    if (!w->requires_grad) return;
    bool acc;
    Tensor *dw = grad_dest(ctx, w, &acc);
    if (ctx->device == DEV_CPU)
        embedding_backward_cpu(w->dtype, dw->data, dout->data, (const int32_t *)ids->data, ids->numel, w->shape[0],
                               w->shape[1], acc);
    else
        CUDA_ONLY(emb_backward_cuda(ctx, dw, dout, ids, acc));
}

/* 10 positions over 7 rows: repeated ids (the scatter-add sums them) and unused rows. */
static Tensor *embedding_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *w = gc_random(ctx, dt, &seed, -1, 1, SHAPE(7, 4));
    Rng rng;
    rng_seed(&rng, seed);
    double id[10];
    for (int i = 0; i < 10; i++) id[i] = (double)rng_below(&rng, 6); /* row 6 stays unused */
    id[3] = id[7];
    Tensor *ids = tensor_from_doubles(ctx, LIFE_ACT, GDP_I32, SHAPE(2, 5), id);
    return op_embedding(ctx, w, ids);
}

const OpDef op_embedding_def = {"embedding", embedding_forward, embedding_backward, embedding_case, 0, 0};

Tensor *op_embedding(Ctx *ctx, Tensor *weight, const Tensor *ids) {
    char dw[TENSOR_DESC_LEN], di[TENSOR_DESC_LEN];
    op_check_float("embedding", "weight", weight, ctx->device);
    op_check_contiguous("embedding", "weight", weight);
    if (weight->ndim != 2)
        gdp_fatal("op 'embedding': weight %s must be 2-D [vocab, channels]", tensor_describe(weight, dw, sizeof dw));
    op_check_not_null("embedding", "ids", ids);
    if (ids->dtype != GDP_I32 || ids->device != ctx->device)
        gdp_fatal("op 'embedding': ids %s must be i32 on %s", tensor_describe(ids, di, sizeof di),
                  device_name(ctx->device));
    op_check_contiguous("embedding", "ids", ids);
    if (ids->ndim + 1 > GDP_MAX_DIMS)
        gdp_fatal("op 'embedding': ids %s has too many dims: the output adds one and at most %d are supported",
                  tensor_describe(ids, di, sizeof di), GDP_MAX_DIMS);
    if (ids->ndim < 1) gdp_fatal("op 'embedding': ids %s must have at least one dim", tensor_describe(ids, di, sizeof di));
    if (weight->shape[0] > 2147483647LL)
        gdp_fatal("op 'embedding': weight %s has more rows than int32 ids can address",
                  tensor_describe(weight, dw, sizeof dw));
    int64_t shape[GDP_MAX_DIMS];
    for (int i = 0; i < ids->ndim; i++) shape[i] = ids->shape[i];
    shape[ids->ndim] = weight->shape[1];
    Node n = node_make(&op_embedding_def);
    n.n_in = 2, n.in[0] = weight, n.in[1] = (Tensor *)ids; /* never written; ids take no gradient */
    n.n_out = 1, n.out[0] = op_new_out(ctx, weight, ids->ndim + 1, shape);
    op_run(ctx, &n);
    return n.out[0];
}
