/* gdp tasks: the command line of the state-tracking study (train/tasks.h): flags into
 * TasksOptions, checked before the run, or --plot of finished runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "data/tasks.h"
#include "layers/config.h"
#include "train/cli/cli.h"
#include "train/cli/commands.h"
#include "train/tasks.h"
#include "train/train.h"

/* ---- the command line ----------------------------------------------------------------------------- */

static const CliOpt tasks_opts[] = {
    {"group", 'G', "NAME", "S3 (default), S4, A5, S5, parity; any of S2..S6, A3..A6, Z2..Z64"},
    {"n-h", 'n', "N", "Householder steps per token, or r slices in split mode (default 2)"},
    {"neg-eigval", 'e', "0|1", "1 (default): beta in (0,2) (negative eigenvalues); 0: beta in (0,1)"},
    {"mode", 'M', "MODE", "householder (default) or split"},
    {"mask", 'k', "KIND", "split mode: learned (default; a parameter, initialised to the identity) or identity "
                          "(frozen)"},
    {"layers", 0, "N", "layers (default 1)"},
    {"hidden", 0, "D", "hidden size (default 128)"},
    {"heads", 0, "H", "heads (default 8)"},
    {"head-dim", 0, "K", "key/value dim per head (default 32)"},
    {"set", 0, "KEY=VALUE", "any other model config key (repeatable), e.g. --set use_short_conv=true"},
    {"train-len", 'T', "N", "training word length (default 128)"},
    {"test-len", 'L', "N", "test word length: accuracy is reported for every L up to it (default 512)"},
    {"test-seqs", 0, "N", "test words (default 2048)"},
    {"test-seed", 0, "N", "seed of the test words (default fixed, the same for every run)"},
    {"bos", 0, NULL, "start every word with a BOS token (id |G|, no label), as the paper's tokenizer does"},
    {"steps", 'x', "N", "optimizer steps (default 2000)"},
    {"batch", 'b', "B", "words per step (default 256; the paper used 2048)"},
    {"lr", 'l', "LR", "peak learning rate, cosine to --final-lr-frac (default 1e-3)"},
    {"final-lr-frac", 0, "F", "final learning rate as a fraction of --lr (default 0)"},
    {"warmup", 'u', "N", "linear warmup steps (default min(100, steps/10))"},
    {"weight-decay", 0, "W", "AdamW weight decay (default 1e-6, as the paper)"},
    {"clip", 0, "NORM", "clip the gradient norm (default 0 = off, as the paper)"},
    {"beta2", 0, "B2", "AdamW beta2 (default 0.999, as the paper)"},
    {"device", 'd', "DEV", "cpu (default), cuda or auto"},
    {"autocast", 0, "MODE", "off (default: f32) or bf16 (the paper's precision; CUDA), as gdp train's"},
    {"eval-every", 'v', "N", "check accuracy at --train-len every N steps (progress.tsv; default 0 = off)"},
    {"eval-seqs", 0, "N", "words per such check (default 256)"},
    {"early-stop", 0, "ACC", "stop once a check reaches this accuracy, e.g. 0.99 as the paper (default off)"},
    {"eval-batch", 0, "B", "words per forward pass at evaluation (default: --batch)"},
    {"out", 'o', "DIR", "run folder (required): accuracy.tsv, accuracy.png (or .svg), result.txt, progress.tsv "
                        "(with --eval-every), and the training's log.tsv, loss plot, config.txt and checkpoint"},
    {"seed", 's', "N", "seed of the initialisation and the training words (default 1)"},
    {"print-every", 0, "N", "training progress line every N steps (default 50)"},
    {"quiet", 'q', NULL, "only the result line"},
    {"plot", 0, "OUT", "instead of training: plot the accuracy curves of the run folders given as arguments into "
                       "OUT.png (or OUT.svg)"},
};
static const CliCommand tasks_cmd = {
    "tasks", "gdp tasks [--group S3] [--n-h 2] [--neg-eigval 1] [--mode householder|split] --out DIR [options]\n"
             "       gdp tasks --plot OUT RUN_DIR...",
    "State tracking: trains the model with a classification head on group word problems (the label at every\n"
    "position is the running product of the elements so far) on words of --train-len, then reports the\n"
    "paper's metric on --test-seqs longer words: accuracy at length L = the fraction of test words whose first\n"
    "L predictions are all correct, for every L up to --test-len (DIR/accuracy.tsv and a plot). The default\n"
    "model is the paper's: 1 layer, hidden 128, 8 heads x 32, no short conv, no gates, expand_v 1. The batch\n"
    "defaults to 256 (the paper: 2048; fresh random words every step instead of 100 epochs of 99k words).",
    tasks_opts, (int)GDP_ARRAY_LEN(tasks_opts)};

typedef struct TasksCli {
    TasksOptions o;
    const char *plot;
} TasksCli;

static void on_tasks_opt(const CliOpt *opt, const char *v, void *user) {
    TasksCli *c = (TasksCli *)user;
    TasksOptions *o = &c->o;
    const char *n = opt->name;
    const long long BIG = (long long)1 << 40;
    char err[512];
    if (!strcmp(n, "group")) {
        Group g;
        if (!group_make(&g, v, err, sizeof err)) cli_usage_error(&tasks_cmd, "--group: %s", err);
        group_free(&g);
        o->group = v;
    } else if (!strcmp(n, "n-h")) o->n_h = (int)cli_int(n, v, 1, 16);
    else if (!strcmp(n, "neg-eigval")) o->neg_eigval = cli_int(n, v, 0, 1) == 1;
    else if (!strcmp(n, "mode")) {
        if (!strcmp(v, "householder")) o->mode = GDP_MODE_HOUSEHOLDER;
        else if (!strcmp(v, "split")) o->mode = GDP_MODE_SPLIT;
        else cli_usage_error(&tasks_cmd, "--mode '%s': use householder or split", v);
    } else if (!strcmp(n, "mask")) {
        if (!strcmp(v, "learned")) o->mask_learned = true;
        else if (!strcmp(v, "identity")) o->mask_learned = false;
        else cli_usage_error(&tasks_cmd, "--mask '%s': use learned or identity", v);
    } else if (!strcmp(n, "layers")) o->layers = (int)cli_int(n, v, 1, 1024);
    else if (!strcmp(n, "hidden")) o->hidden = (int)cli_int(n, v, 1, 1 << 16);
    else if (!strcmp(n, "heads")) o->heads = (int)cli_int(n, v, 1, 1024);
    else if (!strcmp(n, "head-dim")) o->head_dim = (int)cli_int(n, v, 1, 256);
    else if (!strcmp(n, "set")) {
        if (o->n_sets >= TASKS_MAX_SETS) cli_usage_error(&tasks_cmd, "too many --set (at most %d)", TASKS_MAX_SETS);
        ModelConfig probe = model_config_default();
        if (!model_config_set_kv(&probe, v, err, sizeof err)) cli_usage_error(&tasks_cmd, "--set %s: %s", v, err);
        o->sets[o->n_sets++] = v;
    } else if (!strcmp(n, "train-len")) o->train_len = (int)cli_int(n, v, 1, 1 << 20);
    else if (!strcmp(n, "test-len")) o->test_len = (int)cli_int(n, v, 1, 1 << 20);
    else if (!strcmp(n, "test-seqs")) o->test_seqs = (int)cli_int(n, v, 1, 1 << 24);
    else if (!strcmp(n, "test-seed")) o->test_seed = (uint64_t)cli_int(n, v, 0, (long long)1 << 62);
    else if (!strcmp(n, "steps")) o->steps = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "batch")) o->batch = (int)cli_int(n, v, 1, 1 << 20);
    else if (!strcmp(n, "lr")) o->lr = cli_double(n, v, 0, 10);
    else if (!strcmp(n, "final-lr-frac")) o->final_lr_frac = cli_double(n, v, 0, 1);
    else if (!strcmp(n, "warmup")) o->warmup = cli_int(n, v, 0, BIG);
    else if (!strcmp(n, "weight-decay")) o->weight_decay = cli_double(n, v, 0, 10);
    else if (!strcmp(n, "clip")) o->clip = cli_double(n, v, 0, 1e9);
    else if (!strcmp(n, "beta2")) o->beta2 = cli_double(n, v, 0, 0.999999999);
    else if (!strcmp(n, "device")) o->device = cli_device(&tasks_cmd, v);
    else if (!strcmp(n, "bos")) o->bos = true;
    else if (!strcmp(n, "autocast")) {
        if (strcmp(v, "off") && strcmp(v, "bf16")) cli_usage_error(&tasks_cmd, "--autocast '%s': use off or bf16", v);
        o->autocast = v;
    }
    else if (!strcmp(n, "eval-every")) o->eval_every = cli_int(n, v, 0, BIG);
    else if (!strcmp(n, "eval-seqs")) o->eval_seqs = (int)cli_int(n, v, 1, 1 << 24);
    else if (!strcmp(n, "early-stop")) o->early_stop = cli_double(n, v, 0, 1);
    else if (!strcmp(n, "eval-batch")) o->eval_batch = (int)cli_int(n, v, 1, 1 << 20);
    else if (!strcmp(n, "out")) o->out = v;
    else if (!strcmp(n, "seed")) o->seed = (uint64_t)cli_int(n, v, 0, (long long)1 << 62);
    else if (!strcmp(n, "print-every")) o->print_every = (int)cli_int(n, v, 1, 1 << 30);
    else if (!strcmp(n, "quiet")) o->quiet = true;
    else if (!strcmp(n, "plot")) c->plot = v;
}

/* A run folder's label (result.txt) for the combined plot; the folder name when there is none. */
static void run_label(const char *dir, char *buf, size_t len) {
    snprintf(buf, len, "%s", dir);
    char path[1100], line[256];
    snprintf(path, sizeof path, "%s/result.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) return;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "label\t", 6)) {
            line[strcspn(line, "\n")] = 0;
            size_t k = strlen(line + 6) < len ? strlen(line + 6) : len - 1;
            memcpy(buf, line + 6, k), buf[k] = 0;
        }
    fclose(f);
}

int cmd_tasks(int argc, char **argv) {
    TasksCli c = {tasks_default_options(), NULL};
    char *pos[TASKS_MAX_PLOT];
    int npos = cli_parse(&tasks_cmd, argc, argv, on_tasks_opt, &c, pos, TASKS_MAX_PLOT);
    if (c.plot) {
        if (npos < 1) cli_usage_error(&tasks_cmd, "--plot needs run folders (holding accuracy.tsv) as arguments");
        static char tsv[TASKS_MAX_PLOT][1100], lab[TASKS_MAX_PLOT][128];
        const char *tp[TASKS_MAX_PLOT], *lp[TASKS_MAX_PLOT];
        for (int i = 0; i < npos; i++) {
            snprintf(tsv[i], sizeof tsv[i], "%s/accuracy.tsv", pos[i]);
            run_label(pos[i], lab[i], sizeof lab[i]);
            tp[i] = tsv[i], lp[i] = lab[i];
        }
        /* runs with the same label (the same config in two folders) are told apart by their folder */
        static char uniq[TASKS_MAX_PLOT][1300];
        for (int i = 0; i < npos; i++) {
            bool dup = false;
            for (int j = 0; j < npos; j++) dup |= j != i && !strcmp(lab[i], lab[j]);
            snprintf(uniq[i], sizeof uniq[i], dup ? "%s (%s)" : "%s", lab[i], pos[i]);
            lp[i] = uniq[i];
        }
        char out[1200];
        if (!tasks_plot(tp, lp, npos, c.plot, "state tracking: accuracy at length L", 0, true, out, sizeof out))
            gdp_fatal("tasks --plot: could not write %s.png or %s.svg", c.plot, c.plot);
        printf("plot: %s\n", out);
        return 0;
    }
    if (npos > 0) cli_usage_error(&tasks_cmd, "unexpected argument '%s' (run folders go with --plot)", pos[0]);
    TasksOptions *o = &c.o;
    if (!o->out) cli_usage_error(&tasks_cmd, "--out DIR is required (the run folder)");
    if (o->test_len < o->train_len)
        cli_usage_error(&tasks_cmd, "--test-len %d is shorter than --train-len %d", o->test_len, o->train_len);
    if (o->warmup >= o->steps)
        cli_usage_error(&tasks_cmd, "--warmup %lld must be below --steps %lld", (long long)o->warmup, (long long)o->steps);
    if (o->mode == GDP_MODE_SPLIT && o->head_dim % o->n_h)
        cli_usage_error(&tasks_cmd, "split mode cuts --head-dim %d into --n-h %d slices: it must divide evenly",
                        o->head_dim, o->n_h);
    if (o->mode != GDP_MODE_SPLIT && !o->mask_learned)
        cli_usage_error(&tasks_cmd, "--mask identity is for split mode (--mode split)");
    /* the config as the run will build it, so a bad combination fails here with exit 2 */
    {
        char err[1100];
        if (!tasks_check_config(o, err, sizeof err)) cli_usage_error(&tasks_cmd, "%s", err);
    }
    if (o->eval_every == 0 && o->early_stop > 0)
        cli_usage_error(&tasks_cmd, "--early-stop needs --eval-every N (the checks it stops on)");
    return tasks_run(o, NULL);
}
