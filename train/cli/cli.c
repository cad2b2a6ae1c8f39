#include "train/cli/cli.h"

#include "base/common.h"

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

/* The command being parsed, so that cli_int and cli_double, called from its handler, can name it
 * and point to its --help like every other usage error. */
static const CliCommand *parsing;

/* getopt_long answers '?' alike for an unknown option, an ambiguous abbreviation and a value given
 * to a switch; each needs a different change, so the message tells them apart. */
static void bad_option(const CliCommand *cmd, const char *arg) {
    if (optopt >= 1000 && optopt < 1000 + cmd->n_opts)
        cli_usage_error(cmd, "option '--%s' takes no value", cmd->opts[optopt - 1000].name);
    if (optopt == 'h' && !strncmp(arg, "--", 2)) cli_usage_error(cmd, "option '--help' takes no value");
    if (optopt) cli_usage_error(cmd, "unknown option '-%c'", optopt);
    if (strncmp(arg, "--", 2)) cli_usage_error(cmd, "unknown option '%s'", arg);
    const char *name = arg + 2;
    const int len = (int)strcspn(name, "=");
    char list[1024] = "";
    size_t used = 0;
    int n = 0;
    for (int i = 0; len > 0 && i < cmd->n_opts && used < sizeof list; i++)
        if (!strncmp(cmd->opts[i].name, name, (size_t)len))
            used += (size_t)snprintf(list + used, sizeof list - used, "%s--%s", n++ ? ", " : "", cmd->opts[i].name);
    if (n > 1) cli_usage_error(cmd, "option '--%.*s' is ambiguous: it could be %s", len, name, list);
    cli_usage_error(cmd, "unknown option '--%.*s'", len, name);
}

int cli_parse(const CliCommand *cmd, int argc, char **argv, CliHandler handler, void *user, char **positional,
              int max_positional) {
    /* on the stack: every usage error exits from inside the loop (LeakSanitizer counted a heap copy
     * that no live pointer held any more as leaked) */
    struct option longopts[CLI_MAX_OPTS + 2];
    if (cmd->n_opts > CLI_MAX_OPTS)
        gdp_fatal("command '%s' has %d options, more than CLI_MAX_OPTS (%d)", cmd->name, cmd->n_opts, CLI_MAX_OPTS);
    memset(longopts, 0, sizeof longopts);
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
            exit(0);
        }
        if (c == '?') bad_option(cmd, argv[optind - 1]);
        if (c == ':') cli_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
        const CliOpt *o = NULL;
        if (c >= 1000)
            o = &cmd->opts[c - 1000];
        else
            for (int i = 0; i < cmd->n_opts; i++)
                if (cmd->opts[i].short_name == c) o = &cmd->opts[i];
        if (!o) cli_usage_error(cmd, "unknown option");
        parsing = cmd;
        handler(o, o->arg ? optarg : NULL, user);
        parsing = NULL;
    }
    return npos;
}

const char *cli_device(const CliCommand *cmd, const char *text) {
    if (strcmp(text, "cpu") && strcmp(text, "cuda") && strcmp(text, "auto"))
        cli_usage_error(cmd, "--device '%s': use cpu, cuda or auto", text);
    return text;
}

long long cli_int(const char *flag, const char *text, long long lo, long long hi) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno == ERANGE && end && end != text && !*end) { /* a whole number, too large for any flag */
        if (parsing) cli_usage_error(parsing, "--%s %s is out of range: use a value from %lld to %lld", flag, text, lo, hi);
        fprintf(stderr, "gdp: --%s %s is out of range: use a value from %lld to %lld\n", flag, text, lo, hi);
        exit(2);
    }
    if (errno || !end || end == text || *end) {
        if (parsing) cli_usage_error(parsing, "--%s '%s' is not a whole number", flag, text);
        fprintf(stderr, "gdp: --%s '%s' is not a whole number\n", flag, text);
        exit(2);
    }
    if (v < lo || v > hi) {
        if (parsing) cli_usage_error(parsing, "--%s %lld is out of range: use a value from %lld to %lld", flag, v, lo, hi);
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
        if (parsing) cli_usage_error(parsing, "--%s '%s' is not a number", flag, text);
        fprintf(stderr, "gdp: --%s '%s' is not a number\n", flag, text);
        exit(2);
    }
    if (v < lo || v > hi) {
        if (parsing) cli_usage_error(parsing, "--%s %g is out of range: use a value from %g to %g", flag, v, lo, hi);
        fprintf(stderr, "gdp: --%s %g is out of range: use a value from %g to %g\n", flag, v, lo, hi);
        exit(2);
    }
    return v;
}
