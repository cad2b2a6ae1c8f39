/* The gdp subcommands. Each takes argv with argv[0] = its own name and returns the exit code. */
#pragma once

int cmd_gradcheck(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_vectors(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_tasks(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_import(int argc, char **argv);

typedef struct SubCommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} SubCommand;
