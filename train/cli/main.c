/* gdp: one program, many subcommands. `gdp --help` lists them; `gdp CMD --help` lists CMD's flags. */
#include <stdio.h>
#include <string.h>

#include "base/common.h"
#include "train/cli/commands.h"

static const SubCommand commands[] = {
    {"gradcheck", cmd_gradcheck, "check every op's gradients (finite differences, f64) or CUDA vs CPU"},
    {"vectors", cmd_vectors, "check the Gated DeltaProduct op against the float64 reference vectors (.h5)"},
    {"prepare", cmd_prepare, "text files (plain or gzip) -> tokenizer + llm.c-format token shards"},
    {"tokenize", cmd_tokenize, "text -> token ids and back with a tokenizer.json, tokenizer.bin or data folder"},
    {"train", cmd_train, "train a Gated DeltaProduct language model (AdamW, checkpoints, exact resume)"},
    {"generate", cmd_generate, "continue a prompt from a checkpoint (recurrent decoding on the cpu or cuda)"},
    {"import", cmd_import, "an fla / Hugging Face GatedDeltaProduct folder (safetensors) -> a gdp.c checkpoint"},
    {"eval", cmd_eval, "loss, perplexity and bits per byte of a checkpoint on a data split"},
    {"tasks", cmd_tasks, "state tracking: train and test on group word problems (S3, S4, A5, S5, parity)"},
    {"bench", cmd_bench, "time on CUDA: 'bench op' the Gated DeltaProduct op, 'bench matmul' the model's GEMMs"},
};

static void print_help(void) {
    printf("gdp %s: train Gated DeltaProduct language models (C/CUDA)\n\nusage: gdp COMMAND [options]\n\ncommands:\n",
           GDP_VERSION);
    for (size_t i = 0; i < GDP_ARRAY_LEN(commands); i++) printf("  %-12s %s\n", commands[i].name, commands[i].summary);
    printf("\nrun 'gdp COMMAND --help' for a command's options; 'gdp --version' prints the version\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        print_help();
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("gdp %s\n", GDP_VERSION);
        return 0;
    }
    for (size_t i = 0; i < GDP_ARRAY_LEN(commands); i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "gdp: unknown command '%s'\n", argv[1]);
    print_help();
    return 2;
}
