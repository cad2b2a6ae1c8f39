/* Validation loss: the mean over a fixed set of batches, without gradients. */
#include <math.h>
#include <stdio.h>

#include "base/common.h"
#include "data/loader.h"
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
