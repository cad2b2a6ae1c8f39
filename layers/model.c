#include "layers/model.h"

#include "base/common.h"
#include "layers/embedding.h"
#include "layers/linear.h"

static Tensor *norm_weight(ParamMaker *pm, const char *name, int64_t dim) {
    return pm_param(pm, name, SHAPE(dim), false, INIT_ONES, 0, 0);
}

void model_build(Model *m, const ModelConfig *cfg, ParamMaker *pm) {
    char err[512];
    if (!model_config_validate(cfg, err, sizeof err)) gdp_fatal("model config: %s", err);
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->ctx = pm->ctx;
    m->ps = pm->ps;
    const int64_t D = cfg->hidden_size;
    const double std = cfg->initializer_range;
    pm_begin_bucket(pm);
    m->embeddings = embedding_new(pm, "model.embeddings.weight", cfg->vocab_size, D, std);
    m->blocks = (Block *)xcalloc((size_t)cfg->num_hidden_layers, sizeof(Block));
    char name[GDP_NAME_LEN], prefix[GDP_NAME_LEN];
    for (int i = 0; i < cfg->num_hidden_layers; i++) {
        Block *b = &m->blocks[i];
        pm_begin_bucket(pm);
        snprintf(name, sizeof name, "model.layers.%d.attn_norm.weight", i);
        b->attn_norm = norm_weight(pm, name, D);
        snprintf(prefix, sizeof prefix, "model.layers.%d.attn", i);
        gdp_layer_new(&b->attn, pm, cfg, prefix);
        snprintf(name, sizeof name, "model.layers.%d.mlp_norm.weight", i);
        b->mlp_norm = norm_weight(pm, name, D);
        snprintf(prefix, sizeof prefix, "model.layers.%d.mlp", i);
        mlp_new(&b->mlp, pm, cfg, prefix);
    }
    pm_begin_bucket(pm);
    m->norm = norm_weight(pm, "model.norm.weight", D);
    if (cfg->num_labels > 0)
        m->head = linear_new(pm, "classifier.weight", D, cfg->num_labels, std);
    else if (cfg->tie_word_embeddings)
        m->head = m->embeddings;
    else
        m->head = linear_new(pm, "lm_head.weight", D, cfg->vocab_size, std);
}

void model_create(Model *m, const ModelConfig *cfg, Ctx *ctx, ParamStore *ps, uint64_t seed) {
    params_init_store(ps, ctx);
    ParamMaker pm;
    pm_init_registry(&pm, ps);
    model_build(m, cfg, &pm);
    pm_free(&pm);
    params_allocate(ps);
    params_initialize(ps, seed);
}

void model_free(Model *m) { free_check(&m->blocks); }

/* x + mlp(norm(x)) */
static Tensor *mlp_half(Ctx *ctx, const void *user, Tensor *x) {
    const Block *b = (const Block *)user;
    Tensor *h = op_rmsnorm_to(ctx, x, b->mlp_norm, b->cfg->norm_eps, branch_dtype(ctx, x));
    return op_add(ctx, x, mlp_forward(ctx, &b->mlp, h));
}

/* One block: x + attn(norm(x)), then + mlp(norm(.)); the branches may run in bf16 (layers/module.h).
 * Selective recomputation keeps only the MLP half's input: its norm, GEMM outputs and SwiGLU (a
 * quarter of a block's activations) are made again in backward for three GEMMs' forward. */
static Tensor *block_forward(Ctx *ctx, const void *user, Tensor *x) {
    const Block *b = (const Block *)user;
    const ModelConfig *c = b->cfg;
    Tensor *h = op_rmsnorm_to(ctx, x, b->attn_norm, c->norm_eps, branch_dtype(ctx, x));
    x = op_add(ctx, x, b->docs ? gdp_layer_forward_docs(ctx, &b->attn, c, h, b->selective, b->docs)
                               : gdp_layer_forward_state(ctx, &b->attn, c, h, b->selective, b->state));
    return b->selective ? op_checkpoint(ctx, mlp_half, b, x) : mlp_half(ctx, b, x);
}

/* The batch's documents for every layer, in step memory (a recomputing backward reads them again):
 * cu_seqlens checked and copied, and the start flags of the short convs on the device. */
static const GdpDocs *model_docs(Ctx *ctx, int64_t B, int64_t T, const int32_t *cu, int n) {
    GDP_CHECK(n >= 1 && cu[0] == 0 && cu[n] == B * T,
              "model_forward_docs: cu_seqlens must run from 0 to B*T = %lld over %d sequences, got %d .. %d",
              (long long)(B * T), n, n >= 0 ? (int)cu[0] : -1, n >= 0 ? (int)cu[n] : -1);
    int32_t *starts = (int32_t *)xcalloc((size_t)(B * T), sizeof(int32_t));
    int64_t row = 1; /* the next row start that must be an offset */
    for (int i = 1; i <= n; i++) {
        GDP_CHECK(cu[i] > cu[i - 1], "model_forward_docs: cu_seqlens must be strictly increasing, got [%d] = %d, "
                  "[%d] = %d", i - 1, (int)cu[i - 1], i, (int)cu[i]);
        GDP_CHECK(row * T >= cu[i] || row == B, "model_forward_docs: cu_seqlens has no offset at row %lld's start "
                  "%lld (a sequence may not run across rows)", (long long)row, (long long)(row * T));
        if (cu[i] == row * T) row++;
        else if (i < n) starts[cu[i]] = 1;
    }
    GdpDocs *d = (GdpDocs *)arena_alloc(&ctx->step_meta, sizeof *d);
    int32_t *copy = (int32_t *)arena_alloc(&ctx->step_meta, (size_t)(n + 1) * sizeof(int32_t));
    memcpy(copy, cu, (size_t)(n + 1) * sizeof(int32_t));
    d->cu_seqlens = copy, d->n_seqs = n;
    d->doc_start = tensor_from_host(ctx, LIFE_ACT, GDP_I32, SHAPE(B, T), starts);
    free(starts);
    return d;
}

Tensor *model_forward(Model *m, Tensor *ids) { return model_forward_docs(m, ids, NULL, 0); }

Tensor *model_forward_docs(Model *m, Tensor *ids, const int32_t *cu_seqlens, int n_seqs) {
    Ctx *ctx = m->ctx;
    const ModelConfig *c = &m->cfg;
    char d[TENSOR_DESC_LEN];
    GDP_CHECK(ids->ndim == 2 && ids->dtype == GDP_I32, "model_forward: ids must be int32 [B, T], got %s",
              tensor_describe(ids, d, sizeof d));
    const GdpDocs *docs = cu_seqlens ? model_docs(ctx, ids->shape[0], ids->shape[1], cu_seqlens, n_seqs) : NULL;
    Tensor *x = embedding_forward(ctx, m->embeddings, ids); /* [B, T, D] */
    for (int i = 0; i < c->num_hidden_layers; i++) {
        Block *b = &m->blocks[i];
        b->cfg = c;
        b->docs = docs;
        b->selective = m->selective_recompute && !m->recompute;
        if (m->recompute) { /* only the block's input stays; backward runs it again */
            x = op_checkpoint(ctx, block_forward, b, x);
        } else {
            /* A block's inner gradients are released once backward has left it (core/tape.h). */
            x = block_forward(ctx, b, op_grad_boundary(ctx, x));
        }
    }
    x = op_rmsnorm_to(ctx, x, m->norm, c->norm_eps, branch_dtype(ctx, x)); /* bf16: bf16 logits, f32 loss */
    return linear_forward(ctx, x, m->head);
}

Tensor *model_loss(Model *m, Tensor *ids, Tensor *targets) { return model_loss_docs(m, ids, targets, NULL, 0); }

Tensor *model_loss_docs(Model *m, Tensor *ids, Tensor *targets, const int32_t *cu_seqlens, int n_seqs) {
    char a[TENSOR_DESC_LEN], b[TENSOR_DESC_LEN];
    GDP_CHECK(targets->dtype == GDP_I32 && targets->numel == ids->numel,
              "model_loss: targets %s must be int32 with one entry per input position %s",
              tensor_describe(targets, a, sizeof a), tensor_describe(ids, b, sizeof b));
    Tensor *logits = model_forward_docs(m, ids, cu_seqlens, n_seqs);
    int64_t rows = ids->numel, out = logits->shape[2];
    Tensor *flat = op_reshape(m->ctx, logits, SHAPE(rows, out));
    const Tensor *tflat = targets;
    if (targets->ndim != 1) {
        Tensor *t1 = tensor_view(m->ctx, targets, SHAPE(rows), (const int64_t[]){1}, 0);
        tflat = t1;
    }
    return op_cross_entropy_inplace(m->ctx, flat, tflat); /* the logits feed only the loss */
}

Tensor *model_loss_host(Model *m, const int32_t *ids, const int32_t *targets, int64_t B, int64_t T) {
    return model_loss_host_docs(m, ids, targets, NULL, 0, B, T);
}

Tensor *model_loss_host_docs(Model *m, const int32_t *ids, const int32_t *targets, const int32_t *cu_seqlens,
                             int n_seqs, int64_t B, int64_t T) {
    Tensor *ti = tensor_from_host(m->ctx, LIFE_ACT, GDP_I32, SHAPE(B, T), ids);
    Tensor *tt = tensor_from_host(m->ctx, LIFE_ACT, GDP_I32, SHAPE(B * T), targets);
    return model_loss_docs(m, ti, tt, cu_seqlens, n_seqs);
}
