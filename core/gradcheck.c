#include "core/gradcheck.h"

#include <math.h>

#include "base/common.h"
#include "core/op_util.h"
#include "core/ops.h"

static struct {
    int input, calls;
    GcFault fault;
} gc_fault = {-1, 0, GC_FAULT_NONE};

void gc_fault_set(int input, GcFault fault) { gc_fault.input = input, gc_fault.fault = fault, gc_fault.calls = 0; }

int gc_fault_calls(void) { return gc_fault.calls; }

const char *gc_fault_name(GcFault fault) {
    static const char *const names[GC_FAULT_KINDS] = {"none", "NULL", "i32", "other dtype", "strided", "longer last dim"};
    return fault >= 0 && fault < GC_FAULT_KINDS ? names[fault] : "?";
}

static Tensor *random_tensor(Ctx *ctx, DType dt, uint64_t seed, double lo, double hi, int ndim, const int64_t *shape) {
    Rng rng;
    rng_seed(&rng, seed);
    Tensor tmp = {0};
    tensor_set_shape(&tmp, ndim, shape);
    double *vals = (double *)xmalloc((size_t)tmp.numel * sizeof(double));
    for (int64_t i = 0; i < tmp.numel; i++) vals[i] = lo + (hi - lo) * rng_uniform(&rng);
    Tensor *t = tensor_from_doubles(ctx, LIFE_ACT, dt, ndim, shape, vals);
    free(vals);
    t->requires_grad = true;
    return t;
}

/* The bad input gc_fault asks for, in place of a random [shape] tensor of dtype dt. */
static Tensor *faulty_tensor(Ctx *ctx, DType dt, uint64_t seed, double lo, double hi, int ndim, const int64_t *shape) {
    int64_t s[GDP_MAX_DIMS];
    for (int i = 0; i < ndim; i++) s[i] = shape[i];
    switch (gc_fault.fault) {
    case GC_FAULT_NULL: return NULL;
    case GC_FAULT_INT: return tensor_zeros(ctx, LIFE_ACT, GDP_I32, ndim, shape);
    case GC_FAULT_DTYPE: {
        DType other = ctx->device == DEV_CPU ? (dt == GDP_F64 ? GDP_F32 : GDP_F64) : GDP_F64;
        return random_tensor(ctx, other, seed, lo, hi, ndim, shape);
    }
    case GC_FAULT_STRIDED: {
        s[ndim - 1] *= 2;
        Tensor *base = random_tensor(ctx, dt, seed, lo, hi, ndim, s);
        int64_t st[GDP_MAX_DIMS];
        for (int i = 0; i < ndim; i++) st[i] = base->stride[i];
        st[ndim - 1] = 2;
        Tensor *t = tensor_view(ctx, base, ndim, shape, st, 0);
        t->requires_grad = true;
        return t;
    }
    case GC_FAULT_SHAPE: s[ndim - 1] += 1; return random_tensor(ctx, dt, seed, lo, hi, ndim, s);
    default: return random_tensor(ctx, dt, seed, lo, hi, ndim, shape);
    }
}

Tensor *gc_random(Ctx *ctx, DType dt, uint64_t *seed, double lo, double hi, int ndim, const int64_t *shape) {
    uint64_t s = (*seed)++;
    if (gc_fault.calls++ == gc_fault.input && gc_fault.fault != GC_FAULT_NONE)
        return faulty_tensor(ctx, dt, s, lo, hi, ndim, shape);
    return random_tensor(ctx, dt, s, lo, hi, ndim, shape);
}

double rel_l2(const double *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = a[i] - b[i];
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        num += d * d;
        den += b[i] * b[i];
    }
    if (den < 1e-300) return sqrt(num);
    return sqrt(num / den);
}

static bool is_output_of_some_node(const Tape *tape, const Tensor *t) {
    for (int i = 0; i < tape->n; i++)
        for (int j = 0; j < tape->nodes[i].n_out; j++)
            if (tape->nodes[i].out[j] == t) return true;
    return false;
}

/* Leaves: node inputs that need a gradient and that no node produced, in first-use order. */
static int collect_leaves(const Tape *tape, Tensor **leaves, int max) {
    int n = 0;
    for (int i = 0; i < tape->n; i++)
        for (int j = 0; j < tape->nodes[i].n_in; j++) {
            Tensor *t = tape->nodes[i].in[j];
            if (!t || !t->requires_grad || is_output_of_some_node(tape, t)) continue;
            bool seen = false;
            for (int k = 0; k < n; k++) seen |= leaves[k] == t;
            if (!seen && n < max) leaves[n++] = t;
        }
    return n;
}

static double *random_weights(int64_t n, uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed ^ 0x5eedULL);
    double *w = (double *)xmalloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) w[i] = rng_uniform(&rng) * 2 - 1;
    return w;
}

static double weighted_sum(const Tensor *out, const double *w) {
    double *v = (double *)xmalloc((size_t)out->numel * sizeof(double));
    tensor_to_doubles(out, v);
    double s = 0;
    for (int64_t i = 0; i < out->numel; i++) s += v[i] * w[i];
    free(v);
    return s;
}

static void replay_forward(Ctx *ctx) {
    for (int i = 0; i < ctx->tape.n; i++) ctx->tape.nodes[i].op->forward(ctx, &ctx->tape.nodes[i]);
}

static void label_leaf(GradcheckLeaf *l, const Tensor *t, int k) {
    if (t->name[0])
        snprintf(l->label, sizeof l->label, "%s", t->name);
    else
        snprintf(l->label, sizeof l->label, "input %d", k);
    l->numel = t->numel;
}

GradcheckResult gradcheck_fd(GradcheckCaseFn fn, void *user, uint64_t seed, int max_entries) {
    GradcheckResult r;
    memset(&r, 0, sizeof r);
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    Tensor *out = fn(ctx, GDP_F64, seed, user);
    GDP_CHECK(out && out->requires_grad, "gradcheck: the case's output does not depend on any input needing a gradient");
    double *w = random_weights(out->numel, seed);
    Tensor *dout = tensor_from_doubles(ctx, LIFE_GRAD, GDP_F64, out->ndim, out->shape, w);
    tape_backward_seeded(ctx, out, dout);
    Tensor *leaves[GRADCHECK_MAX_LEAVES];
    r.n_leaves = collect_leaves(&ctx->tape, leaves, GRADCHECK_MAX_LEAVES);
    for (int k = 0; k < r.n_leaves; k++) {
        Tensor *x = leaves[k];
        label_leaf(&r.leaves[k], x, k);
        double *ana = (double *)xcalloc((size_t)x->numel, sizeof(double));
        double *num = (double *)xcalloc((size_t)x->numel, sizeof(double));
        if (x->grad && x->grad_written) tensor_to_doubles(x->grad, ana);
        int64_t step = (max_entries > 0 && x->numel > max_entries) ? x->numel / max_entries : 1;
        int64_t m = 0;
        double *a_sel = (double *)xmalloc((size_t)x->numel * sizeof(double));
        for (int64_t i = 0; i < x->numel; i += step) {
            double x0 = tensor_get_host(x, i);
            double h = 1e-6 * GDP_MAX(1.0, fabs(x0));
            tensor_set_host(x, i, x0 + h);
            replay_forward(ctx);
            double fp = weighted_sum(out, w);
            tensor_set_host(x, i, x0 - h);
            replay_forward(ctx);
            double fm = weighted_sum(out, w);
            tensor_set_host(x, i, x0);
            num[m] = (fp - fm) / (2 * h);
            a_sel[m] = ana[i];
            m++;
        }
        replay_forward(ctx);
        r.leaves[k].rel_err = rel_l2(a_sel, num, m);
        if (r.leaves[k].rel_err > r.worst) r.worst = r.leaves[k].rel_err;
        free(ana), free(num), free(a_sel);
    }
    free(w);
    ctx_destroy(ctx);
    return r;
}

typedef struct RunOut {
    int n_leaves;
    double *out;
    int64_t out_n;
    double *grads[GRADCHECK_MAX_LEAVES];
    Tensor leaf_hdr[GRADCHECK_MAX_LEAVES];
} RunOut;

static RunOut run_case(GradcheckCaseFn fn, void *user, uint64_t seed, Device dev, DType dt) {
    RunOut ro;
    memset(&ro, 0, sizeof ro);
    Ctx *ctx = ctx_create(dev, ctx_default_sizes());
    Tensor *out = fn(ctx, dt, seed, user);
    GDP_CHECK(out && out->requires_grad, "gradcheck: the case's output does not depend on any input needing a gradient");
    ro.out_n = out->numel;
    ro.out = (double *)xmalloc((size_t)out->numel * sizeof(double));
    tensor_to_doubles(out, ro.out);
    double *w = random_weights(out->numel, seed);
    Tensor *dout = tensor_from_doubles(ctx, LIFE_GRAD, out->dtype, out->ndim, out->shape, w);
    free(w);
    tape_backward_seeded(ctx, out, dout);
    Tensor *leaves[GRADCHECK_MAX_LEAVES];
    ro.n_leaves = collect_leaves(&ctx->tape, leaves, GRADCHECK_MAX_LEAVES);
    for (int k = 0; k < ro.n_leaves; k++) {
        ro.leaf_hdr[k] = *leaves[k];
        ro.grads[k] = (double *)xcalloc((size_t)leaves[k]->numel, sizeof(double));
        if (leaves[k]->grad && leaves[k]->grad_written) tensor_to_doubles(leaves[k]->grad, ro.grads[k]);
    }
    ctx_destroy(ctx);
    return ro;
}

static void run_free(RunOut *ro) {
    free(ro->out);
    for (int k = 0; k < ro->n_leaves; k++) free(ro->grads[k]);
}

GradcheckResult gradcheck_vs_cpu(GradcheckCaseFn fn, void *user, uint64_t seed, Device dev, DType dt) {
    GradcheckResult r;
    memset(&r, 0, sizeof r);
    RunOut ref = run_case(fn, user, seed, DEV_CPU, GDP_F64);
    RunOut got = run_case(fn, user, seed, dev, dt);
    GDP_CHECK(ref.n_leaves == got.n_leaves && ref.out_n == got.out_n,
              "gradcheck: the case built different graphs on cpu f64 and %s %s", device_name(dev), dtype_name(dt));
    r.out_rel_err = rel_l2(got.out, ref.out, ref.out_n);
    r.worst = r.out_rel_err;
    r.n_leaves = ref.n_leaves;
    for (int k = 0; k < ref.n_leaves; k++) {
        label_leaf(&r.leaves[k], &ref.leaf_hdr[k], k);
        r.leaves[k].rel_err = rel_l2(got.grads[k], ref.grads[k], ref.leaf_hdr[k].numel);
        if (r.leaves[k].rel_err > r.worst) r.worst = r.leaves[k].rel_err;
    }
    run_free(&ref);
    run_free(&got);
    return r;
}

/* ---- cases of the tape's own nodes ------------------------------------------------------------ */

/* Two blocks, each using its boundary's output twice: y -> y * y + y -> z -> z * z + z (mild enough
 * for the bf16 bound of `gdp gradcheck --device cuda`). */
static Tensor *boundary_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 4));
    Tensor *y = op_grad_boundary(ctx, op_scale(ctx, x, 0.5));
    Tensor *z = op_grad_boundary(ctx, op_add(ctx, op_mul(ctx, y, y), y));
    return op_add(ctx, op_mul(ctx, z, z), z);
}

/* y = x * x * 0.5 + x through two checkpoints, so that the second recomputation reads the first
 * checkpoint's output. */
static Tensor *checkpoint_case_block(Ctx *ctx, const void *user, Tensor *x) {
    (void)user;
    return op_add(ctx, op_scale(ctx, op_mul(ctx, x, x), 0.5), x);
}

static Tensor *checkpoint_case(Ctx *ctx, DType dt, uint64_t seed) {
    Tensor *x = gc_random(ctx, dt, &seed, -1, 1, SHAPE(3, 4));
    Tensor *y = op_checkpoint(ctx, checkpoint_case_block, NULL, op_scale(ctx, x, 0.5));
    return op_checkpoint(ctx, checkpoint_case_block, NULL, y);
}

typedef Tensor *(*OpCaseFn)(Ctx *ctx, DType dt, uint64_t seed);

static OpCaseFn case_of(const OpDef *def) {
    if (def == &op_grad_boundary_def) return boundary_case;
    if (def == &op_checkpoint_def) return checkpoint_case;
    return def->gradcheck_case;
}

bool gradcheck_has_case(const OpDef *def) { return case_of(def) != NULL; }

Tensor *gradcheck_registered_case(Ctx *ctx, DType dt, uint64_t seed, void *user) {
    OpCaseFn fn = case_of((const OpDef *)user);
    GDP_CHECK(fn, "gradcheck: op '%s' has no gradcheck case", ((const OpDef *)user)->name);
    return fn(ctx, dt, seed);
}
