/* gdp train: the command line of train_run (train/train.h): flags into TrainOptions, checked
 * before anything starts, then MPI when a launcher started the process. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/common.h"
#include "layers/config.h"
#include "train/checkpoint.h"
#include "train/cli/cli.h"
#include "train/cli/commands.h"
#include "train/step_guard.h"
#include "train/train.h"

static const CliOpt train_opts[] = {
    {"preset", 'p', "NAME", "model preset: tiny (default without --config), small, base"},
    {"config", 'c', "FILE", "model config file of `key = value` lines (fla GatedDeltaProductConfig names); keys it "
                            "leaves out come from --preset, or without one from fla's defaults"},
    {"set", 0, "KEY=VALUE", "override one model config key (repeatable), e.g. --set num_householder=3"},
    {"data", 'i', "PATH", "prepared shard folder (gdp prepare), shard file or pattern, or a text file (bytes)"},
    {"val-fraction", 0, "F", "text files: share held out for validation (default 0.05)"},
    {"documents", 0, "on|off", "on: each end-of-text token ends a document and the next token starts from a fresh "
                               "state (the GDP state and the short convs' windows), as if each document ran alone; "
                               "off: every --seq window is one sequence. Default: on when the data's tokenizer has an "
                               "end-of-text token"},
    {"eot", 0, "ID", "the end-of-text token id that ends documents (default: the data tokenizer's; llm.c's GPT-2 "
                     "shards without their tokenizer file: give 50256)"},
    {"loss-across-docs", 0, "on|off", "with documents: on (default, as llm.c and flame): the prediction made at an "
                                      "end-of-text (the next document's first token) counts in the loss; off: it is "
                                      "ignored, so no target depends on another document"},
    {"device", 'd', "DEV", "cpu (default), cuda or auto"},
    {"steps", 'x', "N", "optimizer steps, the schedule's horizon (default 1000)"},
    {"stop-at", 0, "N", "stop after step N (the schedule still spans --steps); resume later"},
    {"batch", 'b', "B", "sequences per micro-step and rank (default 8)"},
    {"seq", 't', "T", "tokens per sequence (default 256)"},
    {"grad-accum", 'g', "N", "micro-steps per optimizer step (default 1)"},
    {"lr", 'l', "LR", "peak learning rate (default 1e-3)"},
    {"final-lr-frac", 'q', "F", "final learning rate as a fraction of --lr (default 0.1)"},
    {"warmup", 'u', "N", "linear warmup steps (default min(100, steps/10))"},
    {"schedule", 'k', "KIND", "cosine (default), wsd, linear or constant"},
    {"clip", 0, "NORM", "clip the global gradient norm to this (default 1.0; 0 = off)"},
    {"weight-decay", 0, "W", "AdamW decoupled weight decay on matrices and embeddings (default 0.1)"},
    {"beta1", 0, "B1", "AdamW beta1 (default 0.9)"},
    {"beta2", 0, "B2", "AdamW beta2 (default 0.95)"},
    {"eps", 0, "EPS", "AdamW epsilon (default 1e-8)"},
    {"eval-every", 'v', "N", "validation loss every N steps (default 100; 0 = only at the end)"},
    {"eval-batches", 'm', "N", "batches per validation (default 8)"},
    {"checkpoint-every", 'n', "N", "checkpoint into --out every N steps (default 0: only at the end)"},
    {"keep", 0, "N", "checkpoints to keep (default 3; 0 = all)"},
    {"out", 'o', "DIR", "output folder: log.tsv, loss plot, config.txt, checkpoints and `latest` (default none: "
                        "nothing is written)"},
    {"resume", 'y', "PATH", "resume from a checkpoint file, or from a folder's latest checkpoint"},
    {"seed", 's', "N", "seed of the initialisation and the data order (default 1)"},
    {"zero", 'z', "STAGE", "0 (default): replicated AdamW; 1: AdamW state sharded over ranks"},
    {"bucket-mb", 0, "MiB", "gradient buckets reduced during backward (default 25; 0 = one reduction after it)"},
    {"print-every", 0, "N", "progress line every N steps (default 1)"},
    {"quiet", 0, NULL, "no progress lines (log.tsv is still written)"},
    {"profile", 0, NULL, "time every op (forward and backward) after the first step; a table at the end (slows training)"},
    {"autocast", 0, "MODE", "bf16: matmuls on bf16 tensor cores (f32 accumulation) and the GDP op in bf16, with f32 "
                            "master weights and optimizer; off: f32 throughout; auto (default): bf16 on cuda, off on cpu"},
    {"recompute", 0, NULL, "keep only each block's input and run the block again in backward (activation "
                           "checkpointing): much less memory for one more forward of the blocks; gradients are "
                           "then reduced after backward, not in buckets"},
    {"selective-recompute", 0, NULL, "recompute only the cheap parts in backward: each block's MLP half (its "
                                     "norm, three GEMMs and SwiGLU), the q/k short convs + L2 norms and the GDP op's chunk "
                                     "intermediates; at base on the H200 40% less GPU memory for about 22% more time "
                                     "(no gradient buckets)"},
    {"activations", 0, "MODE", "with bf16 autocast: bf16 (default): the residual stream stays f32, each block's "
                               "attention and MLP run on bf16 tensors (half the activation memory); f32: f32 "
                               "activations, only the GEMMs and the GDP op in bf16"},
    {"bf16-gemm", 0, "MODE", "with --activations f32: copies (default): the linear GEMMs run on bf16 copies of their "
                             "operands with f32 outputs; inside: cuBLAS rounds the f32 operands (slower)"},
    {"peak-tflops", 0, "TF", "peak TFLOP/s per GPU for MFU (default 989, H100/H200 dense bf16)"},
    {"act-mem", 0, "MiB", "activation arena size (default: measured on a short step of the model and extended "
                          "to --seq)"},
    {"grad-mem", 0, "MiB", "activation-gradient arena size (default: measured)"},
    {"scratch-mem", 0, "MiB", "per-op scratch arena size (default: measured)"},
    {"persist-mem", 0, "MiB", "parameter/optimizer arena size (default: from the model's parameters)"},
    {"mem-limit", 0, "MiB", "memory the run may use (default: the GPU's free memory; none on cpu): a run that needs "
                            "more stops at the start and says what to change"},
    {"max-skips", 0, "N", "end the run with an error after N skipped steps in a row (default 10; 0 = never). A step "
                          "is skipped (no update; logged in log.tsv's skipped column) when its loss or gradient "
                          "norm is NaN or Inf, or an outlier by --skip-loss-z / --skip-norm-z"},
    {"skip-loss-z", 0, "Z", "skip a step whose loss is more than Z standard deviations above the mean of the last "
                            "--skip-window steps (default 0 = off)"},
    {"skip-norm-z", 0, "Z", "the same for the gradient norm (default 0 = off)"},
    {"skip-window", 0, "N", "steps of history for --skip-loss-z and --skip-norm-z (default 128)"},
};
static const CliCommand train_cmd = {
    "train", "gdp train [--preset NAME] [--config FILE] [--set KEY=VALUE ...] --data PATH [options]",
    "Trains a Gated DeltaProduct language model with AdamW: one progress line per step, DIR/log.tsv, a loss\n"
    "plot and checkpoints (exact resume with --resume). Under mpirun every rank trains on its own slice of\n"
    "each global batch and gradients are averaged (MPI on cpu, NCCL on cuda); rank 0 logs and saves.",
    train_opts, (int)GDP_ARRAY_LEN(train_opts)};

static void on_train_opt(const CliOpt *opt, const char *v, void *user) {
    TrainOptions *o = (TrainOptions *)user;
    const char *n = opt->name;
    const long long BIG = (long long)1 << 40;
    if (!strcmp(n, "preset")) {
        ModelConfig probe;
        if (!model_config_preset(&probe, v))
            cli_usage_error(&train_cmd, "--preset '%s' is unknown: use one of %s", v, model_config_preset_names());
        o->preset = v;
    } else if (!strcmp(n, "config")) o->config_file = v;
    else if (!strcmp(n, "set")) {
        if (o->n_sets >= TRAIN_MAX_SETS) cli_usage_error(&train_cmd, "too many --set (at most %d)", TRAIN_MAX_SETS);
        ModelConfig probe = model_config_default();
        char err[512];
        if (!model_config_set_kv(&probe, v, err, sizeof err)) cli_usage_error(&train_cmd, "--set %s: %s", v, err);
        o->sets[o->n_sets++] = v;
    } else if (!strcmp(n, "data")) o->data = v;
    else if (!strcmp(n, "val-fraction")) o->val_fraction = cli_double(n, v, 0, 0.9);
    else if (!strcmp(n, "documents") || !strcmp(n, "loss-across-docs")) {
        if (strcmp(v, "on") && strcmp(v, "off")) cli_usage_error(&train_cmd, "--%s '%s': use on or off", n, v);
        if (!strcmp(n, "documents")) o->documents = !strcmp(v, "on");
        else o->loss_across_docs = !strcmp(v, "on");
    } else if (!strcmp(n, "eot")) o->eot = cli_int(n, v, 0, INT32_MAX);
    else if (!strcmp(n, "device")) o->device = cli_device(&train_cmd, v);
    else if (!strcmp(n, "steps")) o->steps = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "stop-at")) o->stop_at = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "batch")) o->batch = (int)cli_int(n, v, 1, 1 << 20);
    else if (!strcmp(n, "seq")) o->seq = (int)cli_int(n, v, 1, 1 << 24);
    else if (!strcmp(n, "grad-accum")) o->grad_accum = (int)cli_int(n, v, 1, 1 << 20);
    else if (!strcmp(n, "lr")) o->lr = cli_double(n, v, 0, 10);
    else if (!strcmp(n, "final-lr-frac")) o->final_lr_frac = cli_double(n, v, 0, 1);
    else if (!strcmp(n, "warmup")) o->warmup = cli_int(n, v, 0, BIG);
    else if (!strcmp(n, "schedule")) {
        if (!lr_kind_parse(v, &o->schedule))
            cli_usage_error(&train_cmd, "--schedule '%s': use cosine, wsd, linear or constant", v);
    } else if (!strcmp(n, "clip")) o->clip = cli_double(n, v, 0, 1e9);
    else if (!strcmp(n, "weight-decay")) o->weight_decay = cli_double(n, v, 0, 10);
    else if (!strcmp(n, "beta1")) o->beta1 = cli_double(n, v, 0, 0.999999);
    else if (!strcmp(n, "beta2")) o->beta2 = cli_double(n, v, 0, 0.999999999);
    else if (!strcmp(n, "eps")) o->eps = cli_double(n, v, 0, 1);
    else if (!strcmp(n, "eval-every")) o->eval_every = cli_int(n, v, 0, BIG);
    else if (!strcmp(n, "eval-batches")) o->eval_batches = (int)cli_int(n, v, 1, 1 << 20);
    else if (!strcmp(n, "checkpoint-every")) o->checkpoint_every = cli_int(n, v, 0, BIG);
    else if (!strcmp(n, "keep")) o->keep = (int)cli_int(n, v, 0, 1 << 20);
    else if (!strcmp(n, "out")) o->out = v;
    else if (!strcmp(n, "resume")) o->resume = v;
    else if (!strcmp(n, "seed")) o->seed = (uint64_t)cli_int(n, v, 0, (long long)1 << 62);
    else if (!strcmp(n, "zero")) o->zero_stage = (int)cli_int(n, v, 0, 1);
    else if (!strcmp(n, "bucket-mb")) o->bucket_mb = cli_double(n, v, 0, 1e6);
    else if (!strcmp(n, "print-every")) o->print_every = (int)cli_int(n, v, 1, 1 << 30);
    else if (!strcmp(n, "quiet")) o->quiet = true;
    else if (!strcmp(n, "profile")) o->profile = true;
    else if (!strcmp(n, "recompute")) o->recompute = true;
    else if (!strcmp(n, "selective-recompute")) o->selective_recompute = true;
    else if (!strcmp(n, "autocast")) {
        if (strcmp(v, "bf16") && strcmp(v, "off") && strcmp(v, "auto"))
            cli_usage_error(&train_cmd, "--autocast '%s': use bf16, off or auto", v);
        o->autocast = v;
    } else if (!strcmp(n, "activations")) {
        if (strcmp(v, "bf16") && strcmp(v, "f32"))
            cli_usage_error(&train_cmd, "--activations '%s': use bf16 or f32", v);
        o->f32_activations = !strcmp(v, "f32");
        o->activations_given = true;
    } else if (!strcmp(n, "bf16-gemm")) {
        if (strcmp(v, "inside") && strcmp(v, "copies"))
            cli_usage_error(&train_cmd, "--bf16-gemm '%s': use inside or copies", v);
        o->bf16_gemm_copies = !strcmp(v, "copies");
    } else if (!strcmp(n, "peak-tflops")) o->peak_tflops = cli_double(n, v, 1e-3, 1e6);
    else if (!strcmp(n, "act-mem")) o->act_mem_mb = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "grad-mem")) o->grad_mem_mb = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "scratch-mem")) o->scratch_mem_mb = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "persist-mem")) o->persist_mem_mb = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "mem-limit")) o->mem_limit_mb = cli_int(n, v, 1, BIG);
    else if (!strcmp(n, "max-skips")) o->max_skips = cli_int(n, v, 0, BIG);
    else if (!strcmp(n, "skip-loss-z")) o->skip_loss_z = cli_double(n, v, 0, 1e6);
    else if (!strcmp(n, "skip-norm-z")) o->skip_norm_z = cli_double(n, v, 0, 1e6);
    else if (!strcmp(n, "skip-window")) o->skip_window = (int)cli_int(n, v, 2, (CHECKPOINT_MAX_STATE - GUARD_STATE_HEAD) / 2);
}

static bool launched_by_mpi(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_SIZE",
                                 "SLURM_PROCID"};
    for (size_t i = 0; i < GDP_ARRAY_LEN(vars); i++)
        if (getenv(vars[i])) return true;
    return false;
}

int cmd_train(int argc, char **argv) {
    TrainOptions o = train_default_options();
    char *pos[1];
    cli_parse(&train_cmd, argc, argv, on_train_opt, &o, pos, 0);
    if (!o.data) cli_usage_error(&train_cmd, "--data is required (a prepared shard folder or a text file)");
    if (o.stop_at > o.steps) cli_usage_error(&train_cmd, "--stop-at %lld is past --steps %lld", (long long)o.stop_at,
                                             (long long)o.steps);
    if (!o.resume) {
        ModelConfig cfg;
        bool vg;
        char err[1024];
        if (!train_resolve_config(&o, &cfg, &vg, err, sizeof err)) cli_usage_error(&train_cmd, "%s", err);
    }
    if (o.autocast && !strcmp(o.autocast, "bf16") && !strcmp(o.device, "cpu"))
        cli_usage_error(&train_cmd, "--autocast bf16 needs --device cuda (the cpu trains in f32)");
    if (o.activations_given && (!strcmp(o.device, "cpu") || (o.autocast && !strcmp(o.autocast, "off"))))
        cli_usage_error(&train_cmd, "--activations chooses the activation dtype under bf16 autocast on cuda; with "
                                    "--device cpu or --autocast off everything is f32: drop it");
    if (o.warmup >= o.steps && o.schedule != LR_CONSTANT)
        cli_usage_error(&train_cmd, "--warmup %lld must be below --steps %lld", (long long)o.warmup, (long long)o.steps);
    if (o.out) gdp_mkdir_p(o.out, "output");
    /* MPI only when a launcher started us (mpirun, srun, ...): a lone process is world 1 either way,
     * and skipping the singleton MPI_Init saves its helper daemon and start-up time. */
    Dist dist;
    if (launched_by_mpi())
        dist_init(&dist, &argc, &argv);
    else
        dist_init_single(&dist);
    train_run(&o, &dist, NULL);
    dist_finalize(&dist);
    return 0;
}
