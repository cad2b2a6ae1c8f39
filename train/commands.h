/* The gdp subcommands. Each takes argv with argv[0] = its own name and returns the exit code. */
#pragma once

int cmd_gradcheck(int argc, char **argv);

typedef struct SubCommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} SubCommand;
