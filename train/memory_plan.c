#include "train/memory_plan.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/common.h"
#include "core/tape.h"
#include "kernels/adamw.h"
#include "kernels/gdp/gdp.h"
#include "layers/module.h"
#include "train/dist.h"

#define GiB (1024.0 * 1024.0 * 1024.0)
#define N_STEP_ARENAS 3

/* Headers and tape nodes are host memory touched only as used, so the context gets room for far
 * more than a step records (a 1024-layer model's step records about 65k nodes). */
#define PLAN_TAPE_NODES (1 << 17)

MemorySpec memory_spec_default(Device dev, int64_t batch, int64_t seq) {
    MemorySpec s;
    memset(&s, 0, sizeof s);
    s.device = dev;
    s.batch = batch, s.seq = seq;
    s.train = true;
    s.world = 1;
    s.margin = 0.02;
    return s;
}

/* ---- the parameter arena -------------------------------------------------------------------------- */

size_t memory_persist_bytes(const ModelConfig *cfg, const MemorySpec *s) {
    /* model_build registers every parameter without allocating one; only frozen constants (the
     * split mode's identity mask) take persist memory then, so a host context measures them. */
    Ctx *host = ctx_create(DEV_CPU, (CtxSizes){(size_t)64 << 20, 0, 0, 0, 64});
    ParamStore ps;
    params_init_store(&ps, host);
    ParamMaker pm;
    pm_init_registry(&pm, &ps);
    Model m;
    model_build(&m, cfg, &pm);
    pm_free(&pm);
    /* params_allocate's layout: every parameter starts on 64 elements (256 bytes) */
    int64_t total = 0;
    for (int i = 0; i < ps.n; i++) total += CEIL_DIV(ps.items[i].t->numel, (int64_t)64) * 64;
    size_t bytes = CEIL_DIV(host->persist.high_water, (size_t)ARENA_ALIGN) * ARENA_ALIGN;
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(host);
    bytes += 2 * (size_t)total * sizeof(float); /* parameters and their gradients */
    if (s->optimizer) {                         /* AdamW m and v of this rank's shard (train/optim.c) */
        int64_t start = 0, end = total;
        if (s->zero_stage == 1) dist_shard_range(total, s->rank, s->world, &start, &end);
        bytes += 2 * (size_t)(end - start) * sizeof(float);
        if (s->device == DEV_CUDA) bytes += (GRAD_SUMSQ_BLOCKS + 1) * sizeof(double);
    }
    return bytes;
}

/* ---- measuring a step ----------------------------------------------------------------------------- */

static Arena *step_arena(Ctx *ctx, int i) { return i == 0 ? &ctx->acts : i == 1 ? &ctx->grads : &ctx->scratch; }

int64_t memory_probe_period(const ModelConfig *cfg) {
    const int64_t ct = gdp_chunk_tokens(cfg->num_householder);
    return 64 / ct * ct;
}

/* One training step (if s->train) and one evaluation forward at batch x T, recording the step
 * arenas' calls into tr. Token 0 everywhere: no allocation depends on the values. */
static void probe(Model *m, const MemorySpec *s, int64_t T, ArenaTrace tr[N_STEP_ARENAS]) {
    Ctx *ctx = m->ctx;
    const int64_t B = s->batch, n = B * T;
    int32_t *ids = (int32_t *)xcalloc((size_t)n, sizeof(int32_t));
    int32_t *tg = (int32_t *)xcalloc((size_t)n, sizeof(int32_t));
    /* Documents: the op's memory grows with their count, not their lengths; rows cut evenly. */
    int32_t *cu = NULL;
    int n_seqs = 0;
    if (s->max_seqs > 0) {
        const int64_t k = GDP_MIN(CEIL_DIV(s->max_seqs, B), T);
        cu = (int32_t *)xmalloc((size_t)(B * k + 1) * sizeof(int32_t));
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < k; j++) cu[n_seqs++] = (int32_t)(b * T + j * T / k);
        cu[n_seqs] = (int32_t)n;
    }
    const bool was = ctx->grad_enabled;
    ctx_step_reset(ctx);
    for (int i = 0; i < N_STEP_ARENAS; i++) arena_trace_start(step_arena(ctx, i), &tr[i]);
    if (s->train) {
        /* as every optimizer step begins: parameter gradients count as written, so ops accumulate
         * into them (some through a scratch buffer) */
        params_zero_grad(m->ps);
        ctx->grad_enabled = true;
        tape_backward(ctx, model_loss_host_docs(m, ids, tg, cu, n_seqs, B, T));
        ctx_step_reset(ctx);
    }
    ctx->grad_enabled = false; /* validation (train_evaluate) runs in the same arenas */
    model_loss_host_docs(m, ids, tg, cu, n_seqs, B, T);
    ctx_step_reset(ctx);
    ctx->grad_enabled = was;
    for (int i = 0; i < N_STEP_ARENAS; i++) arena_trace_stop(step_arena(ctx, i));
    ctx_synchronize(ctx);
    free(ids), free(tg), free(cu);
}

static int64_t *trace_sizes(const ArenaTrace *t, int *n) {
    *n = arena_trace_allocs(t);
    int64_t *sz = (int64_t *)xmalloc((size_t)(*n + 1) * sizeof(int64_t));
    for (int i = 0, k = 0; i < t->n; i++)
        if (t->events[i] >= 0) sz[k++] = t->events[i];
    return sz;
}

/* Each allocation's size at x3 + k * P from its sizes y1, y2, y3 at x3 - 2P, x3 - P, x3. Sizes
 * proportional to the length (and to whole 64-token chunks, which P keeps whole) grow by the same
 * step each time and are extended exactly. Any other (a chunk count of another width, a capped
 * partial buffer) is bounded above: its larger step every time, plus its largest deviation. */
static int64_t extend(int64_t y1, int64_t y2, int64_t y3, int64_t k) {
    int64_t d1 = y2 - y1, d2 = y3 - y2;
    if (d1 == d2) return GDP_MAX(y3 + k * d2, (int64_t)0);
    int64_t dev = d1 > d2 ? d1 - d2 : d2 - d1;
    return GDP_MAX(y3 + k * GDP_MAX(GDP_MAX(d1, d2), (int64_t)0) + dev, (int64_t)0);
}

/* The high water of each step arena at s->seq from probes at 3 shorter lengths of the same
 * residue mod P; false when the probes did not make the same calls (then the caller measures the
 * step itself). */
static bool plan_by_extension(Model *m, const MemorySpec *s, int64_t P, size_t hw[N_STEP_ARENAS], MemoryPlan *plan) {
    const int64_t T = s->seq, r = T % P;
    ArenaTrace tr[3][N_STEP_ARENAS];
    memset(tr, 0, sizeof tr);
    for (int j = 0; j < 3; j++) {
        plan->probe_seq[j] = r + (j + 1) * P;
        probe(m, s, plan->probe_seq[j], tr[j]);
    }
    plan->n_probes = 3;
    bool same = true;
    for (int i = 0; i < N_STEP_ARENAS; i++)
        same &= arena_trace_same_calls(&tr[0][i], &tr[1][i]) && arena_trace_same_calls(&tr[1][i], &tr[2][i]);
    const int64_t k = (T - plan->probe_seq[2]) / P;
    for (int i = 0; same && i < N_STEP_ARENAS; i++) {
        int n;
        int64_t *y1 = trace_sizes(&tr[0][i], &n), *y2 = trace_sizes(&tr[1][i], &n), *y3 = trace_sizes(&tr[2][i], &n);
        for (int a = 0; a < n; a++) y3[a] = extend(y1[a], y2[a], y3[a], k);
        hw[i] = arena_trace_replay(&tr[2][i], y3);
        free(y1), free(y2), free(y3);
    }
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < N_STEP_ARENAS; i++) arena_trace_free(&tr[j][i]);
    return same;
}

void memory_plan_step(Model *m, const MemorySpec *s, MemoryPlan *plan) {
    Ctx *ctx = m->ctx;
    GDP_CHECK(ctx->acts.used == 0 && ctx->grads.used == 0 && ctx->scratch.used == 0,
              "memory_plan_step: the step arenas must be empty (call it between steps)");
    const int64_t P = s->probe_period > 0 ? s->probe_period : memory_probe_period(&m->cfg);
    size_t hw[N_STEP_ARENAS] = {0};
    plan->probe_period = P;
    bool done = false;
    if (s->seq > s->seq % P + 3 * P) done = plan_by_extension(m, s, P, hw, plan);
    if (!done) { /* a short sequence: the step itself is the cheapest measure */
        ArenaTrace tr[N_STEP_ARENAS];
        memset(tr, 0, sizeof tr);
        probe(m, s, s->seq, tr);
        for (int i = 0; i < N_STEP_ARENAS; i++) {
            int n;
            int64_t *y = trace_sizes(&tr[i], &n);
            hw[i] = arena_trace_replay(&tr[i], y);
            free(y);
            arena_trace_free(&tr[i]);
        }
        plan->probe_seq[0] = s->seq;
        plan->n_probes = 1;
    }
    plan->acts = hw[0], plan->grads = hw[1], plan->scratch = hw[2];
    const double f = 1.0 + (s->margin > 0 ? s->margin : 0);
    plan->acts_cap = s->act_bytes ? s->act_bytes : (size_t)((double)hw[0] * f);
    plan->grads_cap = s->grad_bytes ? s->grad_bytes : (size_t)((double)hw[1] * f);
    plan->scratch_cap = s->scratch_bytes ? s->scratch_bytes : (size_t)((double)hw[2] * f);
}

/* ---- fitting ------------------------------------------------------------------------------------- */

/* "12.34 GiB", or "56.7 MiB" below a GiB: one of the four buffers in turn. */
static const char *size_text(size_t bytes) {
    static char buf[4][32];
    static int next;
    char *b = buf[next++ & 3];
    if ((double)bytes >= GiB)
        snprintf(b, sizeof buf[0], "%.2f GiB", (double)bytes / GiB);
    else
        snprintf(b, sizeof buf[0], "%.1f MiB", (double)bytes / (1024.0 * 1024.0));
    return b;
}

bool memory_plan_fits(const MemoryPlan *p, const MemorySpec *s, size_t avail, char *msg, size_t len) {
    const size_t step = p->acts_cap + p->grads_cap + p->scratch_cap, need = p->persist + step;
    if (need <= avail) return true;
    const char *zero = s->optimizer && s->zero_stage == 0 ? " or shard AdamW over several GPUs (--zero 1 under mpirun)" : "";
    if (step == 0) { /* before the step is planned: the parameters alone */
        snprintf(msg, len, "the parameters, gradients and optimizer state need %s of %s memory and %s are available: "
                 "use a smaller model (--set hidden_size / num_hidden_layers)%s", size_text(need),
                 s->device == DEV_CUDA ? "GPU" : "host", size_text(avail), zero);
        return false;
    }
    int n = snprintf(msg, len, "this run needs %s of %s memory and %s are available: ", size_text(need),
                     s->device == DEV_CUDA ? "GPU" : "host", size_text(avail));
    if (n < 0 || (size_t)n >= len) return false;
    int m = snprintf(msg + n, len - (size_t)n, "parameters, gradients and optimizer state %s, activations (acts) %s, ",
                     size_text(p->persist), size_text(p->acts_cap));
    if (m < 0 || (size_t)(n + m) >= len) return false;
    n += m;
    m = snprintf(msg + n, len - (size_t)n, "activation gradients (grads) %s, scratch %s, at --batch %lld --seq %lld%s. "
                 "To fit: ", size_text(p->grads_cap), size_text(p->scratch_cap), (long long)s->batch,
                 (long long)s->seq,
                 s->recompute ? " with --recompute" : s->selective_recompute ? " with --selective-recompute" : "");
    n = m < 0 ? -1 : n + m;
    if (n < 0 || (size_t)n >= len) return false;
    char *out = msg + n;
    size_t left = len - (size_t)n;
    if (p->persist >= avail) {
        snprintf(out, left, "the parameters and optimizer state alone do not fit: use a smaller model (--set "
                            "hidden_size / num_hidden_layers)%s", zero);
        return false;
    }
    /* every step arena grows about in proportion to the batch */
    int64_t b = (int64_t)((double)s->batch * (double)(avail - p->persist) / (double)step);
    if (b >= s->batch) b = s->batch - 1;
    if (b >= 1)
        n = snprintf(out, left, "--batch %lld (and a larger --grad-accum to keep the tokens per step)", (long long)b);
    else
        n = snprintf(out, left, "a shorter --seq (even --batch 1 is too large)");
    if (n < 0 || (size_t)n >= left) return false;
    out += n, left -= (size_t)n;
    if (s->train && !s->recompute && !s->selective_recompute)
        snprintf(out, left, ", or --selective-recompute (about 40%% less activation memory), or --recompute (each "
                            "block keeps only its input)");
    else if (s->train && !s->recompute)
        snprintf(out, left, ", or --recompute (each block keeps only its input)");
    return false;
}

/* What the GPU has free (plus what this context holds and will give back); 0 when not known. */
static size_t gpu_free_bytes(const MemorySpec *s, size_t held) {
    size_t used, total;
    return s->device == DEV_CUDA && device_memory_info(&used, &total) ? total - used + held : 0;
}

/* Memory the run may take: the limit given, or on CUDA the GPU's free memory less room for what
 * the libraries allocate outside the arenas later (cuBLAS workspaces, NCCL buffers); 0: no limit
 * known (the cpu: allocation says). */
static size_t available_bytes(const MemorySpec *s, size_t held) {
    if (s->limit_bytes) return s->limit_bytes;
    const size_t free_now = gpu_free_bytes(s, held), keep = free_now / 50 + ((size_t)256 << 20);
    return free_now > keep ? free_now - keep : (free_now ? 1 : 0);
}

/* Each probe arena's capacity: a share of the memory there is (not of a limit: the probes are
 * short). Reserved only: host pages are touched as used, and all of it is given back. */
static size_t probe_room(const MemorySpec *s, size_t persist) {
    if (s->device == DEV_CUDA) {
        size_t free_now = gpu_free_bytes(s, 0);
        return free_now > persist ? (free_now - persist) / 4 : (size_t)1 << 30;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return (pages > 0 && page > 0 ? (size_t)pages * (size_t)page : (size_t)8 << 30) / 8;
}

static void fail_to_fit(const char *msg) {
    gdp_fatal("memory: %s (the sizes come from a measured step: train/memory_plan.c)", msg);
}

Ctx *memory_plan_create(const ModelConfig *cfg, const MemorySpec *s, uint64_t seed, Model *m, ParamStore *ps,
                        MemoryPlan *plan) {
    char msg[2048];
    memset(plan, 0, sizeof *plan);
    plan->persist = s->persist_bytes ? s->persist_bytes : memory_persist_bytes(cfg, s);
    size_t avail = available_bytes(s, 0);
    if (avail && !memory_plan_fits(plan, s, avail, msg, sizeof msg)) fail_to_fit(msg);
    /* A probe that overflows its arena could not fit the run either. */
    const size_t room = probe_room(s, plan->persist);
    CtxSizes sizes = {plan->persist, room, room, room, PLAN_TAPE_NODES};
    Ctx *ctx = ctx_create(s->device, sizes);
    ctx->acts.hint = ctx->grads.hint = ctx->scratch.hint =
        "the step does not fit even at a short --seq while its memory is planned: lower --batch";
    ctx->autocast_bf16 = s->autocast_bf16;
    ctx->bf16_activations = s->bf16_activations;
    ctx->autocast_gemm_copies = s->autocast_gemm_copies;
    model_create(m, cfg, ctx, ps, seed);
    m->recompute = s->recompute;
    m->selective_recompute = s->selective_recompute;
    memory_plan_step(m, s, plan);
    avail = available_bytes(s, ctx->acts.capacity + ctx->grads.capacity + ctx->scratch.capacity);
    if (avail && !memory_plan_fits(plan, s, avail, msg, sizeof msg)) fail_to_fit(msg);
    ctx_plan_arenas(ctx, plan->acts_cap, plan->grads_cap, plan->scratch_cap);
    ctx->acts.hint = "raise --act-mem or lower --batch/--seq";
    ctx->grads.hint = "raise --grad-mem or lower --batch/--seq";
    ctx->scratch.hint = "raise --scratch-mem";
    return ctx;
}

void memory_plan_describe(const MemoryPlan *p, char *buf, size_t len) {
    if (p->n_probes > 1)
        snprintf(buf, len, "memory: parameters + gradients + optimizer %s, acts %s, grads %s, scratch %s (a step "
                           "measured at --seq %lld, %lld and %lld, extended)", size_text(p->persist),
                 size_text(p->acts_cap), size_text(p->grads_cap), size_text(p->scratch_cap),
                 (long long)p->probe_seq[0], (long long)p->probe_seq[1], (long long)p->probe_seq[2]);
    else
        snprintf(buf, len, "memory: parameters + gradients + optimizer %s, acts %s, grads %s, scratch %s (a step "
                           "measured)", size_text(p->persist), size_text(p->acts_cap), size_text(p->grads_cap),
                 size_text(p->scratch_cap));
}
