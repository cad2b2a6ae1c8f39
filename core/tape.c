#include "core/tape.h"

#include "core/common.h"
#include "core/ctx.h"
#include "core/ops.h"

void op_run(Ctx *ctx, Node *node) {
    node->op->forward(ctx, node);
    bool needs = false;
    for (int i = 0; i < node->n_in; i++)
        if (node->in[i] && node->in[i]->requires_grad) needs = true;
    if (!needs || !ctx->grad_enabled || !node->op->backward) return;
    Tape *tape = &ctx->tape;
    GDP_CHECK(tape->n < tape->cap, "tape is full (%d nodes) recording op '%s': raise --tape-nodes", tape->cap,
              node->op->name);
    for (int i = 0; i < node->n_out; i++) {
        node->out[i]->requires_grad = true;
        node->out[i]->grad = NULL;
        node->out[i]->grad_written = false;
    }
    tape->nodes[tape->n++] = *node;
}

static void run_backward(Ctx *ctx) {
    Tape *tape = &ctx->tape;
    for (int i = tape->n - 1; i >= 0; i--) {
        Node *node = &tape->nodes[i];
        bool any = false;
        for (int j = 0; j < node->n_out; j++)
            if (node->out[j]->grad_written) any = true;
        /* Nothing downstream reached this node's outputs: no gradient flows through it. */
        if (!any) continue;
        node->op->backward(ctx, node);
    }
}

void tape_backward_seeded(Ctx *ctx, Tensor *out, const Tensor *dout) {
    char a[TENSOR_DESC_LEN], b[TENSOR_DESC_LEN];
    GDP_CHECK(out && dout, "tape_backward: NULL output or seed gradient");
    GDP_CHECK(tensor_same_shape(out, dout) && out->dtype == dout->dtype,
              "tape_backward: seed gradient %s does not match output %s", tensor_describe(dout, a, sizeof a),
              tensor_describe(out, b, sizeof b));
    GDP_CHECK(out->requires_grad, "tape_backward: the output does not depend on anything that requires a gradient");
    bool acc;
    Tensor *g = grad_dest(ctx, out, &acc);
    if (acc)
        op_accumulate_into(ctx, g, dout);
    else
        device_memcpy(g->data, g->device, dout->data, dout->device, tensor_bytes(g));
    run_backward(ctx);
}

void tape_backward(Ctx *ctx, Tensor *loss) {
    char d[TENSOR_DESC_LEN];
    GDP_CHECK(loss && loss->numel == 1, "tape_backward: the loss must be a scalar, got %s",
              tensor_describe(loss, d, sizeof d));
    double one = 1.0;
    Tensor *seed = tensor_from_doubles(ctx, LIFE_GRAD, loss->dtype, loss->ndim, loss->shape, &one);
    tape_backward_seeded(ctx, loss, seed);
}

const OpDef *op_find(const char *name) {
    for (int i = 0; i < gdp_op_registry_len; i++)
        if (!strcmp(gdp_op_registry[i]->name, name)) return gdp_op_registry[i];
    return NULL;
}
