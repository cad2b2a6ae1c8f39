/* The training loop against what a long run meets: a NaN gradient (skipped, logged, counted; too
 * many in a row end the run naming the parameter), outlier steps skipped by z-score and resumed
 * exactly, and SIGTERM / SIGINT / SIGUSR1 ending a run with a checkpoint that resumes bit for bit.
 * CPU, tiny model, synthetic data through TrainData. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/common.h"
#include "layers/model.h"
#include "tests/check_main.h"
#include "train/checkpoint.h"
#include "train/optim.h"
#include "train/train.h"

/* ---- helpers -------------------------------------------------------------------------------------- */

static char base_dir[128];

static void make_base(void) {
    snprintf(base_dir, sizeof base_dir, "%s/gdp_faults_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(base_dir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static void remove_base(void) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", base_dir);
}

static const char *sub(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", base_dir, name);
    return buf;
}

/* Byte text with some structure (a repeating pattern plus noise), its position an Rng. */
typedef struct Synth {
    Rng rng;
    int B, T;
} Synth;

static void synth_next(void *u, int32_t *in, int32_t *tg) {
    Synth *s = (Synth *)u;
    for (int b = 0; b < s->B; b++) {
        int32_t prev = (int32_t)rng_below(&s->rng, 64);
        for (int t = 0; t < s->T; t++) {
            int32_t next = rng_below(&s->rng, 4) == 0 ? (int32_t)rng_below(&s->rng, 64) : (prev * 7 + 3) % 64;
            in[b * s->T + t] = prev;
            tg[b * s->T + t] = next;
            prev = next;
        }
    }
}
static void synth_reset(void *u) { rng_seed(&((Synth *)u)->rng, 99); }
static int synth_get(void *u, int64_t *out, int max) {
    ck_assert(max >= 4);
    memcpy(out, ((Synth *)u)->rng.s, sizeof(uint64_t) * 4);
    return 4;
}
static void synth_set(void *u, const int64_t *st, int n) {
    ck_assert_int_eq(n, 4);
    memcpy(((Synth *)u)->rng.s, st, sizeof(uint64_t) * 4);
}

typedef struct Run {
    Synth data;
    TrainData td;
    TrainOptions o;
} Run;

/* The options every test starts from: tiny model, 16 steps, checkpoints into out. */
static void run_init(Run *r, const char *out) {
    memset(r, 0, sizeof *r);
    r->data.B = 4, r->data.T = 16;
    synth_reset(&r->data);
    r->td = (TrainData){&r->data, synth_next, synth_reset, synth_get, synth_set};
    r->o = train_default_options();
    r->o.train_data = &r->td;
    r->o.preset = "tiny";
    r->o.batch = 4, r->o.seq = 16, r->o.steps = 16, r->o.lr = 3e-3, r->o.warmup = 2;
    r->o.eval_every = 0, r->o.quiet = true, r->o.seed = 5, r->o.keep = 0;
    r->o.out = out;
}

static TrainResult run(Run *r) {
    Dist d;
    dist_init_single(&d);
    TrainResult res;
    train_run(&r->o, &d, &res);
    return res;
}

/* Parameters, m, v and the counters of a checkpoint. */
typedef struct State {
    float *p, *m, *v;
    int64_t n, step, optim_steps;
} State;

static State load_state(const char *path) {
    char *text = checkpoint_read_config(path);
    ModelConfig cfg = model_config_default();
    char err[512];
    ck_assert_msg(model_config_load_text(&cfg, text, path, err, sizeof err), "%s", err);
    free(text);
    Ctx *ctx = ctx_create(DEV_CPU, ctx_default_sizes());
    Model m;
    ParamStore ps;
    model_create(&m, &cfg, ctx, &ps, 0);
    Optimizer opt;
    optim_init(&opt, &ps, adamw_default_config(), 0, ps.total);
    CheckpointInfo info;
    checkpoint_load(path, &ps, &opt, &info);
    State s = {.n = ps.total, .step = info.step, .optim_steps = info.optim_steps};
    size_t bytes = (size_t)ps.total * sizeof(float);
    s.p = (float *)xmalloc(bytes), s.m = (float *)xmalloc(bytes), s.v = (float *)xmalloc(bytes);
    memcpy(s.p, ps.flat_params, bytes), memcpy(s.m, opt.m, bytes), memcpy(s.v, opt.v, bytes);
    checkpoint_info_free(&info);
    optim_free(&opt);
    model_free(&m);
    params_free_store(&ps);
    ctx_destroy(ctx);
    return s;
}

static bool same_state(const State *a, const State *b) {
    size_t bytes = (size_t)a->n * sizeof(float);
    return a->n == b->n && !memcmp(a->p, b->p, bytes) && !memcmp(a->m, b->m, bytes) && !memcmp(a->v, b->v, bytes);
}

static void free_state(State *s) { free(s->p), free(s->m), free(s->v); }

static bool all_finite(const State *s) {
    for (int64_t i = 0; i < s->n; i++)
        if (!isfinite(s->p[i]) || !isfinite(s->m[i]) || !isfinite(s->v[i])) return false;
    return true;
}

/* log.tsv without the timing columns (tokens_per_s, elapsed_s), which differ between runs. */
static char *log_values(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/log.tsv", dir);
    FILE *f = xfopen(path, "r");
    char line[1024];
    size_t cap = 1 << 16, len = 0;
    char *out = (char *)xcalloc(cap, 1);
    while (fgets(line, sizeof line, f)) {
        char *col[8] = {0};
        int n = 0;
        for (char *tok = strtok(line, "\t\n"); tok && n < 8; tok = strtok(NULL, "\t\n")) col[n++] = tok;
        /* empty fields collapse in strtok: keep step, loss, lr, grad_norm and the last column */
        if (n >= 5 && len < cap)
            len += (size_t)snprintf(out + len, cap - len, "%s %s %s %s %s\n", col[0], col[1], col[2], col[3],
                                    col[n - 1]);
    }
    fclose(f);
    return out;
}

static char *ckpt(char *buf, size_t len, const char *dir, int64_t step) {
    checkpoint_path(buf, len, dir, step);
    return buf;
}

/* ---- non-finite and outlier steps ---------------------------------------------------------------- */

START_TEST(nan_gradient_step_is_skipped) {
    char out[256], p3[600], p4[600];
    Run r;
    run_init(&r, sub(out, sizeof out, "nan"));
    r.o.steps = 8, r.o.checkpoint_every = 1;
    r.o.test_nan_grad_step = 3, r.o.test_nan_grad_count = 1;
    r.o.test_nan_grad_param = "model.layers.0.mlp_norm.weight";
    TrainResult res = run(&r);
    ck_assert_int_eq(res.steps_done, 8);
    ck_assert_int_eq(res.skipped, 1);
    /* the skipped step (index 3, checkpoint 4) changed no weight, moment or update count */
    State a = load_state(ckpt(p3, sizeof p3, out, 3)), b = load_state(ckpt(p4, sizeof p4, out, 4));
    ck_assert_msg(same_state(&a, &b), "the skipped step changed the state");
    ck_assert_int_eq(a.optim_steps, 3);
    ck_assert_int_eq(b.optim_steps, 3);
    ck_assert_int_eq(b.step, 4);
    State last = load_state(res.checkpoint);
    ck_assert_int_eq(last.optim_steps, 7);
    ck_assert(all_finite(&last));
    ck_assert_msg(!same_state(&b, &last), "training did not go on after the skip");
    /* log.tsv: step 3 is marked, the others are not */
    char *lv = log_values(out);
    int marked = 0;
    for (const char *q = lv; (q = strchr(q, '\n')) && q[1]; q++) {
        long st;
        char last_col[32];
        if (sscanf(q + 1, "%ld %*s %*s %*s %31s", &st, last_col) == 2 && !strcmp(last_col, "1")) {
            ck_assert_int_eq(st, 3);
            marked++;
        }
    }
    ck_assert_int_eq(marked, 1);
    free(lv);
    free_state(&a), free_state(&b), free_state(&last);
}
END_TEST

/* Every step from 2 on has a NaN gradient: the third skip in a row ends the run (exit 1) with a
 * message naming the parameter, and no checkpoint after step 2 holds a NaN. */
static void max_skips_child(const char *out) {
    Run r;
    run_init(&r, out);
    r.o.steps = 10, r.o.checkpoint_every = 1, r.o.max_skips = 3;
    r.o.test_nan_grad_step = 2, r.o.test_nan_grad_count = 100;
    r.o.test_nan_grad_param = "model.layers.0.attn_norm.weight";
    run(&r);
    _exit(0);
}

START_TEST(max_skips_ends_the_run_naming_the_parameter) {
    char out[256];
    sub(out, sizeof out, "maxskips");
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        max_skips_child(out);
    }
    close(fds[1]);
    char err[4096] = {0};
    size_t got = 0;
    ssize_t n;
    while (got < sizeof err - 1 && (n = read(fds[0], err + got, sizeof err - 1 - got)) > 0) got += (size_t)n;
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d: %s", st, err);
    ck_assert_msg(strstr(err, "3 steps in a row were skipped (--max-skips 3)") &&
                      strstr(err, "parameter model.layers.0.attn_norm.weight (element 0)") &&
                      strstr(err, "the gradient norm is nan"),
                  "message: %s", err);
    /* checkpoints 1..5 exist (steps 2..4 were skipped, the run ended at step 5) and are finite */
    char p[600];
    for (int s = 1; s <= 4; s++) {
        State x = load_state(ckpt(p, sizeof p, out, s));
        ck_assert_msg(all_finite(&x), "checkpoint %d holds a NaN", s);
        ck_assert_int_eq(x.optim_steps, s < 2 ? s : 2);
        free_state(&x);
    }
}
END_TEST

/* Outlier skipping by z-score: a tight limit skips some steps; stopping at step 9 and resuming gives
 * the same skips, losses and final state as one run (the history is in the checkpoint). */
START_TEST(outlier_skips_resume_exactly) {
    char a[256], b[256];
    Run r;
    run_init(&r, sub(a, sizeof a, "zs_a"));
    r.o.steps = 24, r.o.skip_loss_z = 0.5, r.o.skip_norm_z = 0.8, r.o.skip_window = 4, r.o.max_skips = 0;
    r.o.lr = 2e-2;
    TrainResult ra = run(&r);
    ck_assert_msg(ra.skipped > 0 && ra.skipped < 20, "%lld steps skipped: the test needs some, not all",
                  (long long)ra.skipped);
    run_init(&r, sub(b, sizeof b, "zs_b"));
    r.o.steps = 24, r.o.skip_loss_z = 0.5, r.o.skip_norm_z = 0.8, r.o.skip_window = 4, r.o.max_skips = 0;
    r.o.lr = 2e-2;
    r.o.stop_at = 9;
    run(&r);
    run_init(&r, b);
    r.o.steps = 24, r.o.skip_loss_z = 0.5, r.o.skip_norm_z = 0.8, r.o.skip_window = 4, r.o.max_skips = 0;
    r.o.lr = 2e-2;
    r.o.resume = b;
    TrainResult rb = run(&r);
    ck_assert_int_eq(rb.skipped, ra.skipped);
    ck_assert_int_eq(rb.steps_run, 15);
    char *la = log_values(a), *lb = log_values(b);
    ck_assert_msg(!strcmp(la, lb), "log.tsv differs:\n%s\nvs\n%s", la, lb);
    State sa = load_state(ra.checkpoint), sb = load_state(rb.checkpoint);
    ck_assert_msg(same_state(&sa, &sb), "final state differs after resume");
    ck_assert_int_eq(sa.optim_steps, 24 - ra.skipped);
    free(la), free(lb);
    free_state(&sa), free_state(&sb);
}
END_TEST

/* ---- stop signals -------------------------------------------------------------------------------- */

/* The signal arrives as step 5 begins: step 5 finishes, checkpoint 6 is written and named by
 * latest, the caller's handler is back; resuming to 16 steps equals an uninterrupted run bit for bit. */
static void stop_and_resume(int sig, const char *name) {
    char a[256], b[256], p[600];
    char na[64], nb[64];
    snprintf(na, sizeof na, "sig_%s_a", name);
    snprintf(nb, sizeof nb, "sig_%s_b", name);
    struct sigaction before, now;
    sigaction(sig, NULL, &before);
    Run r;
    run_init(&r, sub(a, sizeof a, na));
    TrainResult ra = run(&r);
    run_init(&r, sub(b, sizeof b, nb));
    r.o.test_signal = sig, r.o.test_signal_step = 5;
    TrainResult rb1 = run(&r);
    ck_assert_int_eq(rb1.stopped_by, sig);
    ck_assert_int_eq(rb1.steps_done, 6);
    ck_assert_str_eq(rb1.checkpoint, ckpt(p, sizeof p, b, 6));
    char *latest = checkpoint_latest(b);
    ck_assert_str_eq(latest, p);
    free(latest);
    sigaction(sig, NULL, &now);
    ck_assert_msg(now.sa_handler == before.sa_handler, "the %s handler was not restored", name);
    run_init(&r, b);
    r.o.resume = b;
    TrainResult rb2 = run(&r);
    ck_assert_int_eq(rb2.stopped_by, 0);
    ck_assert_int_eq(rb2.steps_done, 16);
    ck_assert_int_eq(rb2.steps_run, 10);
    ck_assert_msg(ra.last_loss == rb2.last_loss, "%s: last loss %.9g vs resumed %.9g", name, ra.last_loss,
                  rb2.last_loss);
    char *la = log_values(a), *lb = log_values(b);
    ck_assert_msg(!strcmp(la, lb), "%s: log.tsv differs:\n%s\nvs\n%s", name, la, lb);
    State sa = load_state(ra.checkpoint), sb = load_state(rb2.checkpoint);
    ck_assert_msg(same_state(&sa, &sb), "%s: the resumed run's final state differs", name);
    free(la), free(lb);
    free_state(&sa), free_state(&sb);
}

START_TEST(sigterm_checkpoints_and_resumes_exactly) { stop_and_resume(SIGTERM, "term"); }
END_TEST
START_TEST(sigint_checkpoints_and_resumes_exactly) { stop_and_resume(SIGINT, "int"); }
END_TEST
START_TEST(sigusr1_checkpoints_and_resumes_exactly) { stop_and_resume(SIGUSR1, "usr1"); }
END_TEST

static Suite *make_suite(void) {
    Suite *s = suite_create("train_faults");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 300);
    make_base();
    tcase_add_unchecked_fixture(tc, NULL, remove_base);
    tcase_add_test(tc, nan_gradient_step_is_skipped);
    tcase_add_test(tc, max_skips_ends_the_run_naming_the_parameter);
    tcase_add_test(tc, outlier_skips_resume_exactly);
    tcase_add_test(tc, sigterm_checkpoints_and_resumes_exactly);
    tcase_add_test(tc, sigint_checkpoints_and_resumes_exactly);
    tcase_add_test(tc, sigusr1_checkpoints_and_resumes_exactly);
    suite_add_tcase(s, tc);
    return s;
}

GDP_TEST_MAIN(make_suite)
