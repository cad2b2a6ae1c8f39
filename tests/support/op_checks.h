/* The checks every registered op gets, generated from the op registry and shared by the CPU test
 * (tests/test_op_checks.c) and the CUDA one (tests/gpu/test_gpu_ops.c):
 *
 * - argument errors: each op's gradcheck case runs again with one of its random inputs replaced by a
 *   bad tensor (NULL, i32, the other float dtype, a strided view, a longer last dim: GcFault in
 *   core/gradcheck.h), in a child process; the op must stop with "gdp: error: op '<op>': ..." naming
 *   an op of the case and exit 1, unless op_arg_legal says the op accepts that input;
 * - gradients: the case against float64 finite differences (CPU), or on a device in f32 / bf16
 *   against the CPU float64 path.
 *
 * Nothing here knows an op: a new registered op gets these checks from its gradcheck case alone. */
#pragma once
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/gradcheck.h"
#include "core/tape.h"

/* Bad inputs an op accepts by design: each is checked to run through, not to fail. */
static const struct {
    const char *op;
    int input;
    GcFault fault;
} op_arg_legal[] = {
    {"rmsnorm", 1, GC_FAULT_NULL},         /* the weight is optional: no scale */
    {"rmsnorm_to_bf16", 1, GC_FAULT_NULL},
    {"contiguous", 0, GC_FAULT_INT},       /* views and copies move any dtype */
    {"contiguous", 0, GC_FAULT_STRIDED},   /* what it is for */
    {"reshape", 0, GC_FAULT_INT},
    {"transpose", 0, GC_FAULT_INT},
    {"transpose", 0, GC_FAULT_STRIDED},    /* a view of a view */
    {"matmul_tt", 2, GC_FAULT_SHAPE},      /* the last dim of these inputs is the product's M or N */
    {"matmul_shared", 2, GC_FAULT_SHAPE},
    {"matmul_shared_ta", 1, GC_FAULT_SHAPE},
    {"matmul_bf16_by_f32", 2, GC_FAULT_SHAPE},
    {"conv1d_causal", 1, GC_FAULT_SHAPE},  /* a wider kernel */
    {"conv1d_causal_silu", 1, GC_FAULT_SHAPE},
    {"conv1d_causal_docs", 1, GC_FAULT_SHAPE},
    {"conv1d_causal_silu_docs", 1, GC_FAULT_SHAPE},
    {"gated_deltaproduct", 4, GC_FAULT_NULL}, /* no gate */
    {"gated_deltaproduct", 5, GC_FAULT_NULL}, /* no initial state */
};

static inline bool op_arg_is_legal(const OpDef *def, int input, GcFault fault) {
    for (size_t i = 0; i < sizeof op_arg_legal / sizeof op_arg_legal[0]; i++)
        if (!strcmp(op_arg_legal[i].op, def->name) && op_arg_legal[i].input == input && op_arg_legal[i].fault == fault)
            return true;
    return false;
}

typedef struct OpArgCheck {
    const OpDef *def;
    int input;         /* which gc_random call of the case gets the bad tensor */
    GcFault fault;
    bool legal;        /* the op must accept it */
    char ops[256];     /* " add mul ": the ops the case records, one of which must name the error */
} OpArgCheck;

/* The registry's argument checks: every input of every op's case with each fault. A fault that
 * needs a second input to disagree with (dtype, shape) is generated only for cases with two or more. */
static inline int op_arg_checks(OpArgCheck *out, int cap) {
    /* one thread: an OpenMP pool started here would hang the forked test processes that use one */
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    int n = 0;
    for (int i = 0; i < gdp_op_registry_len; i++) {
        const OpDef *def = gdp_op_registry[i];
        if (!def->gradcheck_case) continue; /* the tape's own nodes: no arguments of their own to check */
        OpArgCheck c;
        memset(&c, 0, sizeof c);
        c.def = def;
        gc_fault_set(-1, GC_FAULT_NONE);
        Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
        def->gradcheck_case(ctx, GDP_F64, 1);
        const int inputs = gc_fault_calls();
        snprintf(c.ops, sizeof c.ops, " ");
        for (int k = 0; k < ctx->tape.n; k++) {
            char name[64];
            snprintf(name, sizeof name, " %s ", ctx->tape.nodes[k].op->name);
            if (!strstr(c.ops, name) && strlen(c.ops) + strlen(name) < sizeof c.ops) strcat(c.ops, name + 1);
        }
        ctx_destroy(ctx);
        for (c.input = 0; c.input < inputs; c.input++)
            for (int f = GC_FAULT_NULL; f < GC_FAULT_KINDS; f++) {
                if ((f == GC_FAULT_DTYPE || f == GC_FAULT_SHAPE) && inputs < 2) continue;
                c.fault = (GcFault)f;
                c.legal = op_arg_is_legal(def, c.input, c.fault);
                if (n < cap) out[n] = c;
                n++;
            }
    }
    gc_fault_set(-1, GC_FAULT_NONE);
    omp_set_num_threads(threads);
    return n;
}

/* What runs in the child: the case with its fault, on dev (f64 on the CPU, f32 on CUDA). Exits 0 if
 * the op accepted the input; a rejected one exits 1 from gdp_fatal. */
static inline void op_arg_check_child(const OpArgCheck *c, Device dev) {
    gc_fault_set(c->input, c->fault);
    Ctx *ctx = ctx_create(dev, ctx_default_sizes());
    c->def->gradcheck_case(ctx, dev == DEV_CPU ? GDP_F64 : GDP_F32, 1);
    ctx_destroy(ctx);
    exit(0);
}

/* The flag of a test program that runs one check in a fresh process (a CUDA context cannot cross a
 * fork): `<program> --op-arg-check <index>`. */
#define OP_ARG_CHECK_FLAG "--op-arg-check"

/* A check running in a child process: its pid and the read end of its stderr. */
typedef struct OpArgCheckProc {
    pid_t pid;
    int fd;
} OpArgCheckProc;

/* Starts check c (number `index` of op_arg_checks) in a child process with its stderr captured;
 * exe NULL: a plain fork, else fork and exec exe with OP_ARG_CHECK_FLAG. pid -1: no pipe. */
static inline OpArgCheckProc op_arg_check_start(const OpArgCheck *c, int index, Device dev, const char *exe) {
    int fd[2];
    if (pipe(fd) != 0) return (OpArgCheckProc){-1, -1};
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        close(fd[1]);
        if (exe) {
            char arg[16];
            snprintf(arg, sizeof arg, "%d", index);
            execl(exe, exe, OP_ARG_CHECK_FLAG, arg, (char *)NULL);
            _exit(3);
        }
        op_arg_check_child(c, dev);
    }
    close(fd[1]);
    return (OpArgCheckProc){pid, fd[0]};
}

/* Waits for check c's child p. Returns true if the outcome is the expected one, else false with the
 * reason in why. A child's message is a line or two, well within a pipe's buffer, so children
 * started together can be finished in any order. */
static inline bool op_arg_check_finish(const OpArgCheck *c, OpArgCheckProc p, char *why, size_t cap) {
    if (p.pid < 0) {
        snprintf(why, cap, "%s input %d: pipe failed", c->def->name, c->input);
        return false;
    }
    const int fd0 = p.fd;
    const pid_t pid = p.pid;
    char msg[2048];
    size_t len = 0;
    ssize_t got;
    while ((got = read(fd0, msg + len, sizeof msg - 1 - len)) > 0) len += (size_t)got;
    msg[len] = 0;
    close(fd0);
    int status = 0;
    waitpid(pid, &status, 0);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    char *nl = strchr(msg, '\n');
    if (nl && !nl[1]) *nl = 0;
    const char *what = msg[0] ? msg : "(no message)";
    snprintf(why, cap, "%s input %d %s: ", c->def->name, c->input, gc_fault_name(c->fault));
    size_t used = strlen(why);
    if (c->legal) {
        if (code == 0) return true;
        snprintf(why + used, cap - used, "the op should accept it, exit %d: %.400s", code, what);
        return false;
    }
    const char *at = strstr(msg, "gdp: error: op '");
    if (code != 1 || !at) {
        snprintf(why + used, cap - used, "expected an argument error (exit 1, \"op '...'\"), got exit %d: %.400s", code, what);
        return false;
    }
    char name[64];
    snprintf(name, sizeof name, " %s", at + strlen("gdp: error: op '"));
    char *q = strchr(name, '\'');
    if (q) q[0] = ' ', q[1] = 0;
    if (!strstr(c->ops, name)) {
        snprintf(why + used, cap - used, "the error names no op of the case (%.200s): %.400s", c->ops, what);
        return false;
    }
    return true;
}

/* Runs check c to its end: op_arg_check_start, then op_arg_check_finish. */
static inline bool op_arg_check_run(const OpArgCheck *c, int index, Device dev, const char *exe, char *why, size_t cap) {
    return op_arg_check_finish(c, op_arg_check_start(c, index, dev, exe), why, cap);
}

/* For OP_ARG_CHECK_FLAG in a test program's main: runs check `index` here and exits. */
static inline void op_arg_check_main(const char *index, Device dev) {
    static OpArgCheck checks[1024];
    int n = op_arg_checks(checks, 1024), i = atoi(index);
    if (i < 0 || i >= n || n > 1024) exit(4);
    op_arg_check_child(&checks[i], dev);
}

/* Float64 finite differences of def's case, every entry of every leaf. */
static inline bool op_grad_check_fd(const OpDef *def, uint64_t seed, char *why, size_t cap) {
    GradcheckResult r = gradcheck_fd(gradcheck_registered_case, (void *)def, seed, 0);
    const double bound = def->gradcheck_tol > 0 ? def->gradcheck_tol : 1e-6;
    if (r.n_leaves == 0) {
        snprintf(why, cap, "op %s: its gradcheck case has no leaf needing a gradient", def->name);
        return false;
    }
    for (int k = 0; k < r.n_leaves; k++)
        if (!(r.leaves[k].rel_err <= bound)) {
            snprintf(why, cap, "op %s seed %llu leaf %s: gradient rel err %.3e > %.0e", def->name,
                     (unsigned long long)seed, r.leaves[k].label, r.leaves[k].rel_err, bound);
            return false;
        }
    return true;
}

/* def's case on dev in dt against the CPU float64 path, forward and gradients: bound 1e-4 in f32,
 * the op's bf16_tol (default 1e-2) in bf16. */
static inline bool op_grad_check_vs_cpu(const OpDef *def, uint64_t seed, Device dev, DType dt, char *why, size_t cap) {
    GradcheckResult r = gradcheck_vs_cpu(gradcheck_registered_case, (void *)def, seed, dev, dt);
    const double bound = dt == GDP_BF16 ? (def->bf16_tol > 0 ? def->bf16_tol : 1e-2) : 1e-4;
    if (r.worst <= bound) return true;
    snprintf(why, cap, "op %s %s %s seed %llu: worst rel err %.3e > %.0e", def->name, device_name(dev), dtype_name(dt),
             (unsigned long long)seed, r.worst, bound);
    return false;
}
