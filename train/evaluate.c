/* Validation loss: the mean over a fixed set of batches, without gradients. */
#include <math.h>

#include "base/common.h"
#include "layers/model.h"
#include "train/train.h"

double train_evaluate(Model *m, TrainData *src, int batches, int B, int T, Dist *dist) {
    Ctx *ctx = m->ctx;
    int32_t *in = (int32_t *)xmalloc((size_t)B * T * sizeof(int32_t));
    int32_t *tg = (int32_t *)xmalloc((size_t)B * T * sizeof(int32_t));
    bool was = ctx->grad_enabled;
    ctx->grad_enabled = false;
    if (src->reset) src->reset(src->user);
    double sum = 0;
    for (int i = 0; i < batches; i++) {
        src->next_batch(src->user, in, tg);
        Tensor *loss = model_loss_host(m, in, tg, B, T);
        double v;
        tensor_to_doubles(loss, &v);
        sum += v;
        ctx_step_reset(ctx);
    }
    ctx->grad_enabled = was;
    free(in), free(tg);
    double mean = batches > 0 ? sum / batches : NAN;
    return dist ? dist_mean_double(dist, mean) : mean;
}
