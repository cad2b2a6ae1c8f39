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
