#include "train/cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_print_help(const CliCommand *cmd) {
    printf("usage: %s\n\n%s\n\noptions:\n", cmd->usage, cmd->summary);
    for (int i = 0; i < cmd->n_opts; i++) {
        const CliOpt *o = &cmd->opts[i];
        char left[64];
        if (o->short_name)
            snprintf(left, sizeof left, "-%c, --%s%s%s", o->short_name, o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        else
            snprintf(left, sizeof left, "    --%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
        printf("  %-30s %s\n", left, o->help);
    }
    printf("  %-30s %s\n", "-h, --help", "show this help and exit");
}

void cli_usage_error(const CliCommand *cmd, const char *fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "gdp %s: ", cmd->name);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: %s\nrun 'gdp %s --help' for every option\n", cmd->usage, cmd->name);
    exit(2);
}

int cli_parse(const CliCommand *cmd, int argc, char **argv, CliHandler handler, void *user, char **positional,
              int max_positional) {
    struct option *longopts = calloc((size_t)cmd->n_opts + 2, sizeof(struct option));
    char shortopts[256] = ":h";
    size_t sl = strlen(shortopts);
    for (int i = 0; i < cmd->n_opts; i++) {
        const CliOpt *o = &cmd->opts[i];
        longopts[i].name = o->name;
        longopts[i].has_arg = o->arg ? required_argument : no_argument;
        longopts[i].flag = NULL;
        longopts[i].val = 1000 + i;
        if (o->short_name && sl + 3 < sizeof shortopts) {
            shortopts[sl++] = (char)o->short_name;
            if (o->arg) shortopts[sl++] = ':';
            shortopts[sl] = 0;
        }
    }
    longopts[cmd->n_opts].name = "help";
    longopts[cmd->n_opts].has_arg = no_argument;
    longopts[cmd->n_opts].val = 'h';
    int npos = 0;
    optind = 1;
    opterr = 0;
    for (;;) {
        int idx = -1;
        int c = getopt_long(argc, argv, shortopts, longopts, &idx);
        if (c == -1) {
            /* getopt_long has moved every positional argument to the end of argv. */
            for (; optind < argc; optind++) {
                if (npos >= max_positional) cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
                positional[npos++] = argv[optind];
            }
            break;
        }
        if (c == 'h') {
            cli_print_help(cmd);
            free(longopts);
            exit(0);
        }
        if (c == '?') {
            if (optopt) cli_usage_error(cmd, "unknown option '-%c'", optopt);
            cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        }
        if (c == ':') cli_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
        const CliOpt *o = NULL;
        if (c >= 1000)
            o = &cmd->opts[c - 1000];
        else
            for (int i = 0; i < cmd->n_opts; i++)
                if (cmd->opts[i].short_name == c) o = &cmd->opts[i];
        if (!o) cli_usage_error(cmd, "unknown option");
        handler(o, o->arg ? optarg : NULL, user);
    }
    free(longopts);
    return npos;
}

long long cli_int(const char *flag, const char *text, long long lo, long long hi) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || !end || end == text || *end) {
        fprintf(stderr, "gdp: --%s '%s' is not a whole number\n", flag, text);
        exit(2);
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "gdp: --%s %lld is out of range: use a value from %lld to %lld\n", flag, v, lo, hi);
        exit(2);
    }
    return v;
}

double cli_double(const char *flag, const char *text, double lo, double hi) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || !end || end == text || *end || isnan(v)) {
        fprintf(stderr, "gdp: --%s '%s' is not a number\n", flag, text);
        exit(2);
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "gdp: --%s %g is out of range: use a value from %g to %g\n", flag, v, lo, hi);
        exit(2);
    }
    return v;
}
