/* Validation loss: the mean over a fixed set of batches, without gradients; documents set up from the
 * flags; and the loss by position in the sequence (gdp eval --per-position). */
#include <math.h>
#include <stdio.h>

#include "base/common.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "layers/model.h"
#include "train/train.h"

/* Each sequence costs the CUDA op up to one more chunk of 64 tokens of saved state and workspace, so
 * its arenas are planned for a count: documents of 64 tokens on average (twice the chunks of one
 * sequence a row), at most 64 a row. The CPU op takes host memory as it goes: any count. */
int train_docs_max_seqs(Device dev, int64_t B, int64_t T) {
    if (dev == DEV_CPU) return (int)(B * T);
    int64_t k = 1 + T / 64;
    return (int)(B * (k < 64 ? k : 64));
}

/* Past max_seqs the last documents of the batch join the ones before them (row starts stay): the
 * arenas hold no more, and a run should not stop on one odd batch. */
static int join_documents(TrainDocs *docs, int32_t *cu, int n, int64_t T) {
    int excess = n - docs->max_seqs, k = 1;
    for (int i = n - 1; i > 0 && excess > 0; i--)
        if (cu[i] % T) cu[i] = -1, excess--;
    for (int i = 1; i <= n; i++)
        if (cu[i] >= 0) cu[k++] = cu[i];
    if (docs->joined++ == 0)
        fprintf(stderr, "warning: a batch holds %d documents, more than the %d the memory plan allows for; its last "
                "ones are joined to the documents before them (counted in the summary). Shorter --seq or larger "
                "documents avoid it\n", n, docs->max_seqs);
    return k - 1;
}

Tensor *train_batch_loss(Model *m, TrainDocs *docs, const int32_t *inputs, int32_t *targets, int32_t *cu, int64_t B,
                         int64_t T) {
    if (!docs || docs->eot < 0) return model_loss_host(m, inputs, targets, B, T);
    int n = loader_documents(inputs, targets, B, T, docs->eot, !docs->loss_across, cu);
    if (docs->max_seqs > 0 && n > docs->max_seqs) n = join_documents(docs, cu, n, T);
    return model_loss_host_docs(m, inputs, targets, cu, n, B, T);
}

double train_evaluate(Model *m, TrainData *src, int batches, int B, int T, Dist *dist) {
    return train_evaluate_docs(m, src, batches, B, T, dist, NULL);
}

double train_evaluate_docs(Model *m, TrainData *src, int batches, int B, int T, Dist *dist, TrainDocs *docs) {
    Ctx *ctx = m->ctx;
    int32_t *in = (int32_t *)xmalloc((size_t)B * T * sizeof(int32_t));
    int32_t *tg = (int32_t *)xmalloc((size_t)B * T * sizeof(int32_t));
    int32_t *cu = (int32_t *)xmalloc(((size_t)B * T + 1) * sizeof(int32_t));
    bool was = ctx->grad_enabled;
    ctx->grad_enabled = false;
    if (src->reset) src->reset(src->user);
    double sum = 0;
    for (int i = 0; i < batches; i++) {
        src->next_batch(src->user, in, tg);
        Tensor *loss = train_batch_loss(m, docs, in, tg, cu, B, T);
        double v;
        tensor_to_doubles(loss, &v);
        sum += v;
        ctx_step_reset(ctx);
    }
    ctx->grad_enabled = was;
    free(in), free(tg), free(cu);
    double mean = batches > 0 ? sum / batches : NAN;
    return dist ? dist_mean_double(dist, mean) : mean;
}

void train_docs_open(TrainDocs *d, int documents, int64_t eot, bool loss_across, const char *data, Device dev,
                     int64_t B, int64_t T) {
    *d = (TrainDocs){.eot = -1, .loss_across = loss_across};
    if (documents == 0) return;
    if (eot < 0 && data) {
        Tokenizer *tok = tokenizer_for_data(data, NULL, 0);
        if (tok) eot = tok->eot, tokenizer_free(tok);
    }
    if (eot < 0) {
        if (documents == 1)
            gdp_fatal("--documents on: the data's tokenizer has no end-of-text token (or the data comes without a "
                      "tokenizer file): give its id with --eot ID (llm.c's GPT-2 shards: 50256), or --documents off");
        return;
    }
    d->eot = (int32_t)eot;
    d->max_seqs = train_docs_max_seqs(dev, B, T);
}

void train_docs_check_vocab(const TrainDocs *d, int vocab_size) {
    if (d->eot >= vocab_size)
        gdp_fatal("--eot %lld is not a token of the model's vocabulary (%d tokens): give the id of the data's "
                  "end-of-text token", (long long)d->eot, vocab_size);
}

/* The mean loss of rows [a, e) of the logits through the same cross-entropy op as the training loss
 * (CPU or CUDA alike), so that the buckets add up to eval's loss. Its few small tensors are taken
 * back at once: a window of L tokens makes L / bucket calls, which must not grow the step arenas
 * past the memory plan's evaluation forward. */
static double rows_loss(Ctx *ctx, Tensor *flat, Tensor *tflat, int64_t a, int64_t e) {
    size_t acts = arena_mark(&ctx->acts), meta = arena_mark(&ctx->step_meta);
    const int64_t V = flat->shape[1];
    Tensor *lg = tensor_view(ctx, flat, SHAPE(e - a, V), (const int64_t[]){V, 1}, a * V);
    Tensor *tg = tensor_view(ctx, tflat, SHAPE(e - a), (const int64_t[]){1}, a);
    double v;
    tensor_to_doubles(op_cross_entropy(ctx, lg, tg), &v); /* waits for the op: the rewind is safe */
    arena_rewind(&ctx->acts, acts);
    arena_rewind(&ctx->step_meta, meta);
    return v;
}

double train_position_loss(Model *m, TrainDocs *docs, const int32_t *inputs, int32_t *targets, int32_t *cu,
                           int64_t B, int64_t T, int64_t bucket, double *nats, int64_t *tokens) {
    Ctx *ctx = m->ctx;
    GDP_CHECK(bucket >= 1, "train_position_loss: bucket %lld must be at least 1", (long long)bucket);
    int n;
    if (docs && docs->eot >= 0) {
        n = loader_documents(inputs, targets, B, T, docs->eot, !docs->loss_across, cu);
        if (docs->max_seqs > 0 && n > docs->max_seqs) n = join_documents(docs, cu, n, T);
    } else { /* every row one sequence */
        n = (int)B;
        for (int64_t b = 0; b <= B; b++) cu[b] = (int32_t)(b * T);
    }
    bool was = ctx->grad_enabled;
    ctx->grad_enabled = false;
    Tensor *ids = tensor_from_host(ctx, LIFE_ACT, GDP_I32, SHAPE(B, T), inputs);
    Tensor *tflat = tensor_from_host(ctx, LIFE_ACT, GDP_I32, SHAPE(B * T), targets);
    Tensor *logits = docs && docs->eot >= 0 ? model_forward_docs(m, ids, cu, n) : model_forward(m, ids);
    Tensor *flat = op_reshape(ctx, logits, SHAPE(B * T, logits->shape[2]));
    double total = 0;
    /* A position's index is its distance from the start of the sequence the model ran it in: the
     * window's start or, with documents, its document's start (the state is fresh at both). */
    for (int s = 0; s < n; s++)
        for (int64_t a = cu[s]; a < cu[s + 1]; a += bucket) {
            const int64_t e = GDP_MIN(a + bucket, (int64_t)cu[s + 1]), k = (a - cu[s]) / bucket;
            int64_t counted = 0;
            for (int64_t i = a; i < e; i++) counted += targets[i] >= 0;
            if (counted == 0) continue; /* the op's mean of no rows is not a number */
            const double v = rows_loss(ctx, flat, tflat, a, e) * (double)counted;
            nats[k] += v, tokens[k] += counted, total += v;
        }
    ctx_step_reset(ctx);
    ctx->grad_enabled = was;
    return total;
}
