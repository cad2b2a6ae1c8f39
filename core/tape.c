#include "core/tape.h"

#include "base/common.h"
#include "core/ctx.h"
#include "core/ops.h"
#include "core/op_util.h"
#include "core/profile.h"

/* Runs a node's forward or backward, timed into ctx->profile when there is one (not a checkpoint:
 * the ops inside it are timed themselves). */
static void run_timed(Ctx *ctx, Node *node, int backward) {
    if (!ctx->profile || node->op == &op_checkpoint_def) {
        (backward ? node->op->backward : node->op->forward)(ctx, node);
        return;
    }
    ctx_synchronize(ctx);
    double t0 = gdp_now_seconds();
    (backward ? node->op->backward : node->op->forward)(ctx, node);
    ctx_synchronize(ctx);
    profile_add(ctx->profile, node->op->name, backward, gdp_now_seconds() - t0);
}

bool op_records(const Ctx *ctx, const Node *node) {
    if (!ctx->grad_enabled || !node->op->backward) return false;
    for (int i = 0; i < node->n_in; i++)
        if (node->in[i] && node->in[i]->requires_grad) return true;
    return false;
}

void op_run(Ctx *ctx, Node *node) {
    run_timed(ctx, node, 0);
    if (!op_records(ctx, node)) return;
    Tape *tape = &ctx->tape;
    GDP_CHECK(tape->n < tape->cap, "tape is full (%d nodes) recording op '%s': raise --tape-nodes", tape->cap,
              node->op->name);
    for (int i = 0; i < node->n_out; i++) {
        node->out[i]->requires_grad = true;
        node->out[i]->recorded = true;
        node->out[i]->grad = NULL;
        node->out[i]->grad_written = false;
    }
    tape->nodes[tape->n++] = *node;
}

/* ---- gradient boundaries ----------------------------------------------------------------------- */

static void boundary_forward(Ctx *ctx, Node *n) { (void)ctx, (void)n; /* the view was made with the node */ }

static bool in_range(const Tensor *t, const unsigned char *lo, const unsigned char *hi) {
    return t && t->grad && !t->is_param && (const unsigned char *)t->grad->data >= lo &&
           (const unsigned char *)t->grad->data < hi;
}

static void boundary_backward(Ctx *ctx, Node *n) {
    Tape *tape = &ctx->tape;
    GradRelease *r = &tape->release;
    Tensor *x = n->in[0], *g = n->out[0]->grad;
    if (!x->requires_grad) return;
    GDP_CHECK(r->buf[0] && (size_t)tensor_bytes(g) <= r->buf_bytes, "internal: gradient boundary without its buffers");
    void *dst = r->buf[r->passed++ & 1]; /* g may live in the other buffer (the previous boundary's) */
    device_memcpy(dst, ctx->device, g->data, ctx->device, (size_t)tensor_bytes(g));
    const unsigned char *lo = ctx->grads.base + r->mark, *hi = ctx->grads.base + ctx->grads.used;
    /* Nothing recorded before this node may hold a gradient in the memory about to be reused. */
    int self = (int)(n - tape->nodes);
    for (int i = 0; i < self; i++) {
        const Node *m = &tape->nodes[i];
        for (int j = 0; j < m->n_in; j++)
            if (m->in[j] != x && in_range(m->in[j], lo, hi))
                gdp_fatal("gradient boundary: '%s' (input of op '%s', before the boundary) has its gradient in the "
                          "memory the boundary releases; a boundary must enclose everything that uses the tensors "
                          "it releases", m->in[j]->name, m->op->name);
        for (int j = 0; j < m->n_out; j++)
            if (m->out[j] != x && in_range(m->out[j], lo, hi))
                gdp_fatal("gradient boundary: the output of op '%s' (before the boundary) has its gradient in the "
                          "memory the boundary releases", m->op->name);
    }
    arena_rewind(&ctx->grads, r->mark);
    GDP_CHECK(!x->grad, "gradient boundary: its input already has a gradient (it must be the input's only use)");
    x->grad = tensor_view(ctx, g, x->ndim, x->shape, x->stride, 0);
    x->grad->data = dst;
    x->grad_written = true;
}

/* Its gradcheck case is core/gradcheck.c's: the tape builds no ops. */
const OpDef op_grad_boundary_def = {"grad_boundary", boundary_forward, boundary_backward, NULL, 0, 0};

Tensor *op_grad_boundary(Ctx *ctx, Tensor *x) {
    GDP_CHECK(x, "op 'grad_boundary': NULL input");
    GDP_CHECK(tensor_is_contiguous(x), "op 'grad_boundary': the input must be contiguous");
    Node n = node_make(&op_grad_boundary_def);
    n.n_in = 1, n.in[0] = x;
    n.n_out = 1, n.out[0] = tensor_view(ctx, x, x->ndim, x->shape, x->stride, 0);
    op_run(ctx, &n);
    return n.out[0];
}

/* Two buffers as large as the largest boundary gradient, below the mark the boundaries rewind to. */
static void release_begin(Ctx *ctx) {
    Tape *tape = &ctx->tape;
    GradRelease *r = &tape->release;
    memset(r, 0, sizeof *r);
    for (int i = 0; i < tape->n; i++)
        if (tape->nodes[i].op == &op_grad_boundary_def) {
            size_t b = (size_t)tensor_bytes(tape->nodes[i].out[0]);
            if (b > r->buf_bytes) r->buf_bytes = b;
        }
    if (!r->buf_bytes) return;
    r->buf[0] = arena_alloc(&ctx->grads, r->buf_bytes);
    r->buf[1] = arena_alloc(&ctx->grads, r->buf_bytes);
    /* Leaves that want a gradient (inputs no node made, other than parameters, whose gradients
     * live elsewhere) may get it from any block: their gradients go below the mark too. */
    for (int i = 0; i < tape->n; i++)
        for (int j = 0; j < tape->nodes[i].n_in; j++) {
            Tensor *t = tape->nodes[i].in[j];
            if (t && t->requires_grad && !t->recorded && !t->grad && !t->is_param) {
                bool acc;
                grad_dest(ctx, t, &acc);
                t->grad_written = false;
            }
        }
    r->mark = ctx->grads.used;
}

static void backward_node(Ctx *ctx, Node *node) {
    bool any = false;
    for (int j = 0; j < node->n_out; j++)
        if (node->out[j]->grad_written) any = true;
    /* Nothing downstream reached this node's outputs: no gradient flows through it. */
    if (any) run_timed(ctx, node, 1);
}

static void run_backward(Ctx *ctx) {
    Tape *tape = &ctx->tape;
    release_begin(ctx);
    TapeHook *hook = tape->hook;
    if (hook && hook->begin) hook->begin(hook->user, tape);
    for (int i = tape->n - 1; i >= 0; i--) {
        backward_node(ctx, &tape->nodes[i]);
        if (hook && hook->passed) hook->passed(hook->user, tape, i);
    }
}

/* ---- recomputation --------------------------------------------------------------------------- */

typedef struct CheckpointCall {
    CheckpointFn fn;
    const void *user;
} CheckpointCall;

/* fn on x, recording nodes or not; its result must look like x (shape and dtype). */
static Tensor *checkpoint_call(Ctx *ctx, const CheckpointCall *call, Tensor *x, bool record) {
    char a[TENSOR_DESC_LEN], b[TENSOR_DESC_LEN];
    const bool grad = ctx->grad_enabled;
    ctx->grad_enabled = record;
    Tensor *r = call->fn(ctx, call->user, x);
    ctx->grad_enabled = grad;
    GDP_CHECK(r && tensor_same_shape(r, x) && r->dtype == x->dtype,
              "op 'checkpoint': the function must return a tensor like its input %s, got %s",
              tensor_describe(x, a, sizeof a), r ? tensor_describe(r, b, sizeof b) : "NULL");
    return r;
}

static void checkpoint_forward(Ctx *ctx, Node *n) {
    const CheckpointCall *call = (const CheckpointCall *)n->attr[0].p;
    Tensor *x = n->in[0], *y = n->out[0];
    size_t acts = arena_mark(&ctx->acts), meta = arena_mark(&ctx->step_meta);
    Tensor *r = checkpoint_call(ctx, call, x, false);
    op_copy_or_accumulate(ctx, y, r, false);
    /* Stream order: whatever reuses this memory next runs after the copy. */
    arena_rewind(&ctx->acts, acts);
    arena_rewind(&ctx->step_meta, meta);
}

static void checkpoint_backward(Ctx *ctx, Node *n) {
    const CheckpointCall *call = (const CheckpointCall *)n->attr[0].p;
    Tensor *x = n->in[0], *y = n->out[0];
    Tape *tape = &ctx->tape;
    GDP_CHECK(!tape->hook, "op 'checkpoint': recomputation cannot run under a tape hook (gradient buckets); "
                           "reduce the gradients after backward instead");
    bool acc = false;
    Tensor *dx = x->requires_grad ? grad_dest(ctx, x, &acc) : NULL; /* outlives the release below */
    size_t acts = arena_mark(&ctx->acts), meta = arena_mark(&ctx->step_meta), grads = arena_mark(&ctx->grads);
    const int first = tape->n;
    Tensor *xin = tensor_view(ctx, x, x->ndim, x->shape, x->stride, 0); /* a fresh leaf */
    xin->requires_grad = true;
    Tensor *r = checkpoint_call(ctx, call, xin, true);
    GDP_CHECK(r->requires_grad && r->recorded, "op 'checkpoint': the function's output does not depend on its input");
    for (int i = first; i < tape->n; i++) /* leaves other than x keep gradients only in persist */
        for (int j = 0; j < tape->nodes[i].n_in; j++) {
            const Tensor *t = tape->nodes[i].in[j];
            if (t && t->requires_grad && !t->recorded && t != xin && !t->is_param)
                gdp_fatal("op 'checkpoint': op '%s' inside the recomputed function reads '%s', a leaf that needs a "
                          "gradient but is not a parameter; pass it as the function's input or register it",
                          tape->nodes[i].op->name, t->name);
        }
    r->grad = tensor_view(ctx, y->grad, y->ndim, y->shape, y->stride, 0);
    r->grad_written = true;
    for (int i = tape->n - 1; i >= first; i--) backward_node(ctx, &tape->nodes[i]);
    if (dx) {
        if (xin->grad_written)
            op_copy_or_accumulate(ctx, dx, xin->grad, acc);
        else if (!acc)
            device_memset(dx->device, dx->data, 0, tensor_bytes(dx));
    }
    tape->n = first;
    arena_rewind(&ctx->grads, grads);
    arena_rewind(&ctx->acts, acts);
    arena_rewind(&ctx->step_meta, meta);
}

const OpDef op_checkpoint_def = {"checkpoint", checkpoint_forward, checkpoint_backward, NULL, 0, 0};

Tensor *op_checkpoint(Ctx *ctx, CheckpointFn fn, const void *user, Tensor *x) {
    GDP_CHECK(fn && x, "op 'checkpoint': NULL function or input");
    GDP_CHECK(tensor_is_contiguous(x), "op 'checkpoint': the input must be contiguous");
    CheckpointCall *call = (CheckpointCall *)arena_alloc(&ctx->step_meta, sizeof *call);
    call->fn = fn, call->user = user;
    Node n = node_make(&op_checkpoint_def);
    n.n_in = 1, n.in[0] = x;
    n.attr[0].p = call;
    n.n_out = 1, n.out[0] = op_new_out(ctx, x, x->ndim, x->shape);
    op_run(ctx, &n);
    return n.out[0];
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
