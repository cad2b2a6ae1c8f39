/* Command-line parsing for the gdp subcommands: one option table per command is the single
 * source for getopt_long and for --help, so the help can never drift from the parser. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

typedef struct CliOpt {
    const char *name;    /* long name without dashes, e.g. "steps" */
    int short_name;      /* 0 when none */
    const char *arg;     /* argument placeholder ("N", "FILE"); NULL for a switch */
    const char *help;    /* one line; the default belongs in it */
} CliOpt;

#define CLI_MAX_OPTS 96 /* options a command may have (cli_parse's table lives on the stack) */

typedef struct CliCommand {
    const char *name;
    const char *usage;   /* e.g. "gdp vectors FILE.h5 [options]" */
    const char *summary; /* one line */
    const CliOpt *opts;
    int n_opts;
} CliCommand;

/* Callback per parsed option: `opt` is the table entry, `value` its argument (NULL for switches).
 * A bad value ends the program through cli_usage_error. Positional arguments are collected into
 * positional[]. */
typedef void (*CliHandler)(const CliOpt *opt, const char *value, void *user);

/* Parses argv (argv[0] is the subcommand name). Prints help and exits 0 on --help; prints the
 * problem and the usage line and exits 2 on an unknown option or a missing argument.
 * Returns the number of positional arguments, stored in positional (at most max_positional). */
int cli_parse(const CliCommand *cmd, int argc, char **argv, CliHandler handler, void *user, char **positional,
              int max_positional);
void cli_print_help(const CliCommand *cmd);

/* Strict number parsing: the whole text must be a number within [lo, hi]; otherwise a clear
 * error naming the flag (from a cli_parse handler, as a usage error of its command), then exit 2. */
long long cli_int(const char *flag, const char *text, long long lo, long long hi);
double cli_double(const char *flag, const char *text, double lo, double hi);
/* --device's value: cpu, cuda or auto, else a usage error of cmd (whether cuda is there is
 * device_parse's question, asked once the command runs) */
const char *cli_device(const CliCommand *cmd, const char *text);
/* Exits 2 with "gdp <cmd>: <message>" and a pointer to --help. */
__attribute__((noreturn, format(printf, 2, 3))) void cli_usage_error(const CliCommand *cmd, const char *fmt, ...);
