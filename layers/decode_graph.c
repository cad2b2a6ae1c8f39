/* The decode step over a state's rows, captured into and replayed from CUDA graphs
 * (layers/decode_graph.h). */
#include "layers/decode_graph.h"

#include "base/common.h"

#ifdef GDP_CUDA
#include "core/cuda_ctx.h"

/* The rows of one state: seen once (a plain step, warming up), then captured and replayed. */
typedef struct GraphEntry {
    int64_t rows;
    const void **keys;        /* the state rows' tensor addresses, 4 a layer */
    cudaGraphExec_t exec;     /* NULL until captured */
    int32_t *ids;             /* device [rows]: the graph's input */
    int32_t *ids_host;        /* pinned [rows]: what is copied into it, so that the copy never waits */
    cudaEvent_t ids_read;     /* the last replay's copy has read ids_host */
    Tensor ids_t;             /* its header, [rows, 1] */
    float *logits;            /* device [rows, out] in the acts arena: the graph's output */
    size_t acts_mark, scratch_mark; /* the arenas' use when it was captured */
} GraphEntry;

struct DecodeGraphCache {
    Ctx *ctx;
    void *workspace;          /* cuBLAS's, for every step of this decoder */
    size_t workspace_bytes;
    GraphEntry *e;
    int n, cap;
    DecodeGraphStats stats;
};

static int n_keys(const ModelState *s) { return 4 * s->m->cfg.num_hidden_layers; }

static const void *state_key(const ModelState *s, int i) {
    const GdpLayerState *l = &s->layers[i / 4];
    const Tensor *t[4] = {&l->conv_q, &l->conv_k, &l->conv_v, &l->S};
    return t[i % 4]->data;
}

static GraphEntry *entry_find(struct DecodeGraphCache *c, const ModelState *s) {
    for (int i = 0; i < c->n; i++) {
        GraphEntry *e = &c->e[i];
        bool same = e->rows == s->B;
        for (int k = 0; same && k < n_keys(s); k++) same = e->keys[k] == state_key(s, k);
        if (same) return e;
    }
    return NULL;
}

static void entry_add(struct DecodeGraphCache *c, const ModelState *s) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 8;
        c->e = (GraphEntry *)xrealloc(c->e, (size_t)c->cap * sizeof(GraphEntry));
    }
    GraphEntry *e = &c->e[c->n++];
    memset(e, 0, sizeof *e);
    e->rows = s->B;
    e->keys = (const void **)xmalloc((size_t)n_keys(s) * sizeof(void *));
    for (int k = 0; k < n_keys(s); k++) e->keys[k] = state_key(s, k);
}

/* Back to seen-but-not-captured; the stream must have finished with the graph. */
static void entry_uncapture(struct DecodeGraphCache *c, GraphEntry *e) {
    if (e->exec) {
        CUDA_CHECK(cudaGraphExecDestroy(e->exec));
        c->stats.graphs--;
    }
    if (e->ids) {
        device_free(DEV_CUDA, e->ids);
        CUDA_CHECK(cudaFreeHost(e->ids_host));
        CUDA_CHECK(cudaEventDestroy(e->ids_read));
    }
    e->exec = NULL, e->ids = NULL, e->ids_host = NULL, e->ids_read = NULL, e->logits = NULL;
}

/* Hopper's GEMMs want 32 MiB (cuBLAS's guidance for cublasSetWorkspace), earlier GPUs 4 MiB. */
static size_t workspace_bytes_for(const CudaCtx *cu) { return (size_t)(cu->props.major >= 9 ? 32 : 4) << 20; }

static void use_workspace(struct DecodeGraphCache *c) {
    CUBLAS_CHECK(cublasSetWorkspace(c->ctx->cuda->cublas, c->workspace, c->workspace_bytes));
}

/* Records one forward of s's rows into e's graph; nothing runs. False when the capture fails:
 * then every later step takes the plain forward. The host side of the forward (arena use, s->pos)
 * is undone, so the replay that follows is the step. */
static bool capture(struct DecodeGraphCache *c, Model *m, ModelState *s, GraphEntry *e) {
    Ctx *ctx = c->ctx;
    cudaStream_t stream = (cudaStream_t)ctx_stream(ctx);
    e->ids = (int32_t *)device_malloc(DEV_CUDA, (size_t)s->B * sizeof(int32_t));
    CUDA_CHECK(cudaMallocHost((void **)&e->ids_host, (size_t)s->B * sizeof(int32_t)));
    CUDA_CHECK(cudaEventCreateWithFlags(&e->ids_read, cudaEventDisableTiming));
    memset(&e->ids_t, 0, sizeof e->ids_t);
    e->ids_t.dtype = GDP_I32, e->ids_t.device = DEV_CUDA;
    tensor_set_shape(&e->ids_t, 2, (const int64_t[]){s->B, 1});
    e->ids_t.data = e->ids;
    snprintf(e->ids_t.name, sizeof e->ids_t.name, "decode_graph.ids");
    e->acts_mark = arena_mark(&ctx->acts), e->scratch_mark = arena_mark(&ctx->scratch);
    const size_t meta = arena_mark(&ctx->step_meta);
    const int64_t pos = s->pos;
    const bool grad = ctx->grad_enabled;
    ctx->grad_enabled = false;
    c->stats.captures++;
    cudaGraph_t graph = NULL;
    bool ok = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    if (ok) {
        const Tensor *logits = model_forward_state(m, &e->ids_t, s);
        ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph;
        ok = ok && logits->dtype == GDP_F32 && tensor_is_contiguous(logits);
        e->logits = (float *)logits->data;
    }
    if (ok) ok = cudaGraphInstantiate(&e->exec, graph, 0) == cudaSuccess;
    if (graph) CUDA_CHECK(cudaGraphDestroy(graph));
    ctx->grad_enabled = grad;
    s->pos = pos;
    arena_rewind(&ctx->acts, e->acts_mark), arena_rewind(&ctx->scratch, e->scratch_mark);
    arena_rewind(&ctx->step_meta, meta);
    if (!ok) {
        (void)cudaGetLastError(); /* a failed capture leaves its error behind; the plain forward goes on */
        e->exec = NULL;
        entry_uncapture(c, e);
        c->stats.capture_failed = true;
        return false;
    }
    c->stats.graphs++;
    return true;
}

/* The step as a graph replay, enqueued: its logits on the device; NULL when it must run plain. The
 * first step over a set of rows is plain on purpose: it loads every kernel the step launches and
 * lets cuBLAS pick its GEMMs for these shapes outside a capture. */
static float *step_cuda(DecodeGraph *g, Model *m, ModelState *s, const int32_t *ids) {
    struct DecodeGraphCache *c = g->cache;
    if (!c) return NULL;
    use_workspace(c);
#ifdef GDP_DEBUG_SYNC
    const bool debug_sync = true; /* every launch synchronises the device, which a capture refuses */
#else
    const bool debug_sync = false;
#endif
    if (!g->enabled || c->stats.capture_failed || c->ctx->profile || debug_sync) return NULL;
    GraphEntry *e = entry_find(c, s);
    if (!e) {
        entry_add(c, s);
        return NULL;
    }
    cudaStream_t stream = (cudaStream_t)ctx_stream(c->ctx);
    if (e->exec && (arena_mark(&c->ctx->acts) > e->acts_mark || arena_mark(&c->ctx->scratch) > e->scratch_mark)) {
        /* something now lives where the graph's activations go: capture it again from here */
        CUDA_CHECK(cudaStreamSynchronize(stream));
        entry_uncapture(c, e);
    }
    if (!e->exec && !capture(c, m, s, e)) return NULL;
    CUDA_CHECK(cudaEventSynchronize(e->ids_read));
    memcpy(e->ids_host, ids, (size_t)e->rows * sizeof(int32_t));
    CUDA_CHECK(cudaMemcpyAsync(e->ids, e->ids_host, (size_t)e->rows * sizeof(int32_t), cudaMemcpyHostToDevice,
                               stream));
    CUDA_CHECK(cudaEventRecord(e->ids_read, stream));
    CUDA_CHECK(cudaGraphLaunch(e->exec, stream));
    s->pos++;
    c->stats.replays++;
    return e->logits;
}

void decode_graph_init(DecodeGraph *g, const Model *m) {
    memset(g, 0, sizeof *g);
    g->enabled = true;
    if (m->ctx->device != DEV_CUDA) return;
    GDP_CHECK(m->ctx->cuda, "decode graph: the model's context is on cuda but has no CUDA handles");
    struct DecodeGraphCache *c = (struct DecodeGraphCache *)xcalloc(1, sizeof *c);
    c->ctx = m->ctx;
    c->workspace_bytes = workspace_bytes_for(c->ctx->cuda);
    c->workspace = device_malloc(DEV_CUDA, c->workspace_bytes);
    use_workspace(c);
    g->cache = c;
}

void decode_graph_free(DecodeGraph *g) {
    struct DecodeGraphCache *c = g->cache;
    if (c) {
        CudaCtx *cu = c->ctx->cuda;
        CUDA_CHECK(cudaStreamSynchronize(cu->stream));
        for (int i = 0; i < c->n; i++) entry_uncapture(c, &c->e[i]), free((void *)c->e[i].keys);
        free(c->e);
        /* cublasSetStream puts cuBLAS back on its own workspace, before this one goes */
        CUBLAS_CHECK(cublasSetStream(cu->cublas, cu->stream));
        device_free(DEV_CUDA, c->workspace);
        free(c);
    }
    memset(g, 0, sizeof *g);
}

DecodeGraphStats decode_graph_stats(const DecodeGraph *g) {
    DecodeGraphStats st;
    memset(&st, 0, sizeof st);
    if (g->cache) st = g->cache->stats;
    return st;
}

#else /* no CUDA in this build: every step is the plain forward */

static float *step_cuda(DecodeGraph *g, Model *m, ModelState *s, const int32_t *ids) {
    (void)g, (void)m, (void)s, (void)ids;
    return NULL;
}

void decode_graph_init(DecodeGraph *g, const Model *m) {
    (void)m;
    memset(g, 0, sizeof *g);
    g->enabled = true;
}

void decode_graph_free(DecodeGraph *g) { memset(g, 0, sizeof *g); }

DecodeGraphStats decode_graph_stats(const DecodeGraph *g) {
    (void)g;
    DecodeGraphStats st;
    memset(&st, 0, sizeof st);
    return st;
}

#endif

/* The ids checked, then the step as a replay (its logits on the device), or NULL: it runs plain. */
static float *step_replayed(DecodeGraph *g, Model *m, ModelState *s, const int32_t *ids) {
    GDP_CHECK(s->m == m, "decode step: the state was made for another model");
    for (int64_t r = 0; r < s->B; r++)
        GDP_CHECK(ids[r] >= 0 && ids[r] < m->cfg.vocab_size, "decode step: token %d of row %lld is outside the "
                  "vocabulary [0, %d)", ids[r], (long long)r, m->cfg.vocab_size);
    return m->ctx->device == DEV_CUDA ? step_cuda(g, m, s, ids) : NULL;
}

static void count_plain(DecodeGraph *g) {
#ifdef GDP_CUDA
    if (g->cache) g->cache->stats.plain++;
#else
    (void)g;
#endif
}

void decode_graph_step(DecodeGraph *g, Model *m, ModelState *s, const int32_t *ids, float *logits) {
    const float *replayed = step_replayed(g, m, s, ids);
    if (replayed) {
        device_memcpy(logits, DEV_CPU, replayed, DEV_CUDA, (size_t)(s->B * cfg_out_dim(&m->cfg)) * sizeof(float));
        return;
    }
    model_prefill_host(m, s, ids, 1, 1, logits);
    count_plain(g);
}

float *decode_graph_step_device(DecodeGraph *g, Model *m, ModelState *s, const int32_t *ids) {
    float *replayed = step_replayed(g, m, s, ids);
    if (replayed) return replayed;
    count_plain(g);
    return model_prefill_device(m, s, ids, 1, 1);
}
