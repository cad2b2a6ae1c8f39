/* Training log: stdout progress, DIR/log.tsv and the loss plot (see train/logger.h). */
#include "train/logger.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "train/plot.h"

static const char *const TSV_HEADER = "step\tloss\tlr\tgrad_norm\ttokens_per_s\tval_loss\telapsed_s\tskipped\n";

static void ensure_dir(const char *dir) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", dir);
    size_t n = strlen(buf);
    for (size_t i = 1; i <= n; i++)
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                gdp_fatal("cannot create log directory '%s': %s", buf, strerror(errno));
            buf[i] = c;
        }
}

/* Field k (0-based, tab-separated) of line as a double; NAN when empty or missing. */
static double tsv_field(const char *line, int k) {
    const char *p = line;
    for (int i = 0; i < k; i++) {
        p = strchr(p, '\t');
        if (!p) return NAN;
        p++;
    }
    if (*p == '\t' || *p == '\n' || *p == '\0' || *p == '\r') return NAN;
    char *end = NULL;
    double v = strtod(p, &end);
    return end == p ? NAN : v;
}

/* Keeps the rows with step < resume_step; returns the elapsed_s of the last one kept. */
static double truncate_for_resume(const char *path, int64_t resume_step) {
    FILE *in = fopen(path, "r");
    if (!in) return 0.0;
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = xfopen(tmp, "w");
    fputs(TSV_HEADER, out);
    char line[4096];
    double elapsed = 0.0;
    bool first = true;
    while (fgets(line, sizeof line, in)) {
        if (first) {
            first = false;
            if (!strncmp(line, "step\t", 5)) continue; /* header */
        }
        double step = tsv_field(line, 0);
        if (isnan(step) || step >= (double)resume_step) continue;
        fputs(line, out);
        double e = tsv_field(line, 6);
        if (!isnan(e)) elapsed = e;
    }
    fclose(in);
    if (fclose(out) != 0) gdp_fatal("writing '%s' failed (disk full?)", tmp);
    if (rename(tmp, path) != 0) gdp_fatal("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    return elapsed;
}

void logger_init(Logger *lg, const char *dir, int rank, int64_t resume_step) {
    memset(lg, 0, sizeof(*lg));
    lg->active = rank == 0;
    lg->print_every = 1;
    lg->t0 = gdp_now_seconds();
    if (!lg->active || !dir || !dir[0]) return;
    GDP_CHECK(strlen(dir) < sizeof lg->dir - 16, "log directory name '%s' is too long", dir);
    snprintf(lg->dir, sizeof lg->dir, "%s", dir);
    ensure_dir(dir);
    char path[1100];
    snprintf(path, sizeof path, "%s/log.tsv", dir);
    if (resume_step >= 0 && access(path, F_OK) == 0) {
        lg->elapsed_offset = truncate_for_resume(path, resume_step);
        lg->tsv = xfopen(path, "a");
    } else {
        lg->tsv = xfopen(path, "w");
        fputs(TSV_HEADER, lg->tsv);
    }
    setvbuf(lg->tsv, NULL, _IOLBF, 0);
    fflush(lg->tsv);
}

void logger_step(Logger *lg, int64_t step, double loss, double lr, double grad_norm, double tokens_per_s,
                 double val_loss, bool skipped) {
    if (!lg->active) return;
    double elapsed = lg->elapsed_offset + (gdp_now_seconds() - lg->t0);
    bool has_val = !isnan(val_loss), has_tps = !isnan(tokens_per_s) && tokens_per_s > 0;
    if (lg->tsv) {
        char val[64] = "", tps[64] = "";
        if (has_val) snprintf(val, sizeof val, "%.6f", val_loss);
        if (has_tps) snprintf(tps, sizeof tps, "%.1f", tokens_per_s);
        if (fprintf(lg->tsv, "%lld\t%.6f\t%.6e\t%.6f\t%s\t%s\t%.3f\t%d\n", (long long)step, loss, lr, grad_norm, tps,
                    val, elapsed, skipped ? 1 : 0) < 0)
            gdp_fatal("writing %s/log.tsv failed (disk full?)", lg->dir);
    }
    lg->rows++;
    int every = lg->print_every > 0 ? lg->print_every : 1;
    if (!lg->quiet && (step % every == 0 || has_val)) {
        printf("step %7lld | loss %.6f | lr %.3e | norm %.4f%s", (long long)step, loss, lr, grad_norm,
               skipped ? " | skipped" : "");
        if (has_tps) printf(" | %.0f tok/s", tokens_per_s);
        if (has_val) printf(" | val %.6f", val_loss);
        printf(" | %.1f s\n", elapsed);
        fflush(stdout);
    }
}

void logger_printf(const Logger *lg, const char *fmt, ...) {
    if (!lg->active) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

const char *logger_finish(Logger *lg) {
    lg->plot_path[0] = '\0';
    if (!lg->active) return lg->plot_path;
    if (lg->tsv) {
        if (fclose(lg->tsv) != 0) gdp_fatal("closing %s/log.tsv failed (disk full?)", lg->dir);
        lg->tsv = NULL;
    }
    if (!lg->dir[0]) return lg->plot_path;
    char tsv[1100];
    snprintf(tsv, sizeof tsv, "%s/log.tsv", lg->dir);
    if (!logger_plot(tsv, lg->dir, true, lg->plot_path, sizeof lg->plot_path)) lg->plot_path[0] = '\0';
    return lg->plot_path;
}

/* ---- plotting ---------------------------------------------------------------------------------------- */

/* True when some row of the TSV has a number in column col. */
static bool tsv_has_number(const char *path, int col) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) found = !isnan(tsv_field(line, 0)) && !isnan(tsv_field(line, col));
    fclose(f);
    return found;
}

bool logger_plot(const char *tsv_path, const char *out_dir, bool use_gnuplot, char *out, size_t len) {
    /* log.tsv's columns: 0 step, 1 loss, 5 val_loss */
    const PlotCurve curves[2] = {{tsv_path, "train", 1, false}, {tsv_path, "val", 5, true}};
    const PlotSpec spec = {.title = "gdp.c training loss", .xlabel = "step", .ylabel = "loss", .xcol = 0};
    char base[1100];
    snprintf(base, sizeof base, "%s/loss", out_dir);
    return plot_curves(curves, tsv_has_number(tsv_path, 5) ? 2 : 1, base, &spec, use_gnuplot, out, len);
}
