/* Training log: stdout progress, DIR/log.tsv and the loss plot (see train/logger.h). */
#include "train/logger.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"

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

typedef struct Series {
    double *step, *loss, *val;
    int n, n_val;
} Series;

static bool read_series(const char *tsv_path, Series *s) {
    memset(s, 0, sizeof(*s));
    FILE *f = fopen(tsv_path, "r");
    if (!f) return false;
    char line[4096];
    int cap = 0;
    while (fgets(line, sizeof line, f)) {
        double st = tsv_field(line, 0), lo = tsv_field(line, 1);
        if (isnan(st)) continue; /* header or junk */
        if (s->n == cap) {
            cap = cap ? 2 * cap : 256;
            s->step = (double *)xrealloc(s->step, (size_t)cap * sizeof(double));
            s->loss = (double *)xrealloc(s->loss, (size_t)cap * sizeof(double));
            s->val = (double *)xrealloc(s->val, (size_t)cap * sizeof(double));
        }
        s->step[s->n] = st;
        s->loss[s->n] = lo;
        s->val[s->n] = tsv_field(line, 5);
        if (!isnan(s->val[s->n])) s->n_val++;
        s->n++;
    }
    fclose(f);
    return s->n > 0;
}

static void free_series(Series *s) {
    free(s->step);
    free(s->loss);
    free(s->val);
}

/* A path inside a gnuplot single-quoted string: ' is written ''. */
static void gp_quote(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static bool gnuplot_found(void) { return system("command -v gnuplot >/dev/null 2>&1") == 0; }

static bool try_gnuplot(const char *tsv, const char *png, const char *terminal, bool with_val) {
    unlink(png);
    FILE *gp = popen("gnuplot >/dev/null 2>&1", "w");
    if (!gp) return false;
    fprintf(gp, "set terminal %s size 1000,600\n", terminal);
    fprintf(gp, "set output ");
    gp_quote(gp, png);
    fprintf(gp, "\nset datafile separator \"\\t\"\nset grid\nset key top right\n");
    fprintf(gp, "set title \"gdp.c training loss\"\nset xlabel \"step\"\nset ylabel \"loss\"\n");
    fprintf(gp, "plot ");
    gp_quote(gp, tsv);
    fprintf(gp, " using 1:2 skip 1 with lines lw 2 title \"train\"");
    if (with_val) {
        fprintf(gp, ", ");
        gp_quote(gp, tsv);
        fprintf(gp, " using 1:6 skip 1 with linespoints pt 7 ps 1 title \"val\"");
    }
    fprintf(gp, "\nset output\n");
    int st = pclose(gp);
    struct stat sb;
    return st == 0 && stat(png, &sb) == 0 && sb.st_size > 0;
}

static double nice_step(double range) {
    if (!(range > 0)) return 1;
    double raw = range / 5, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
}

static bool write_svg(const Series *s, const char *svg) {
    FILE *f = fopen(svg, "w");
    if (!f) return false;
    const double W = 1000, H = 600, L = 80, R = 30, T = 50, B = 60;
    double x0 = s->step[0], x1 = s->step[0], y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < s->n; i++) {
        x0 = fmin(x0, s->step[i]);
        x1 = fmax(x1, s->step[i]);
        double ys[2] = {s->loss[i], s->val[i]};
        for (int k = 0; k < 2; k++)
            if (isfinite(ys[k])) {
                y0 = fmin(y0, ys[k]);
                y1 = fmax(y1, ys[k]);
            }
    }
    if (!isfinite(y0)) y0 = 0, y1 = 1;
    if (x1 <= x0) x1 = x0 + 1;
    if (y1 <= y0) y1 = y0 + 1;
    double pad = 0.05 * (y1 - y0);
    y0 -= pad;
    y1 += pad;
#define SX(x) (L + ((x) - x0) / (x1 - x0) * (W - L - R))
#define SY(y) (H - B - ((y) - y0) / (y1 - y0) * (H - T - B))
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">gdp.c training loss</text>\n", W / 2);
    double xs = nice_step(x1 - x0), ys = nice_step(y1 - y0);
    for (double x = ceil(x0 / xs) * xs; x <= x1 + 1e-9 * xs; x += xs)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
                   "text-anchor=\"middle\">%g</text>\n",
                SX(x), T, SX(x), H - B, SX(x), H - B + 18, fabs(x) < 1e-9 * xs ? 0.0 : x);
    for (double y = ceil(y0 / ys) * ys; y <= y1 + 1e-9 * ys; y += ys)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%.1f\" "
                   "text-anchor=\"end\">%g</text>\n",
                L, SY(y), W - R, SY(y), L - 6, SY(y) + 4, fabs(y) < 1e-9 * ys ? 0.0 : y);
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"black\"/>\n", L, T,
            W - L - R, H - T - B);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n", (L + W - R) / 2, H - 15);
    fprintf(f, "<text x=\"18\" y=\"%.0f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.0f)\">loss</text>\n",
            (T + H - B) / 2, (T + H - B) / 2);
    fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"");
    for (int i = 0; i < s->n; i++)
        if (isfinite(s->loss[i])) fprintf(f, "%.1f,%.1f ", SX(s->step[i]), SY(s->loss[i]));
    fprintf(f, "\"/>\n");
    for (int i = 0; i < s->n; i++)
        if (isfinite(s->val[i]))
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#d62728\"/>\n", SX(s->step[i]), SY(s->val[i]));
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#1f77b4\" stroke-width=\"2\"/><text "
               "x=\"%.0f\" y=\"%.0f\">train</text>\n",
            W - R - 120, T + 20, W - R - 90, T + 20, W - R - 84, T + 24);
    if (s->n_val)
        fprintf(f, "<circle cx=\"%.0f\" cy=\"%.0f\" r=\"4\" fill=\"#d62728\"/><text x=\"%.0f\" y=\"%.0f\">val</text>\n",
                W - R - 105, T + 40, W - R - 84, T + 44);
    fprintf(f, "</svg>\n");
#undef SX
#undef SY
    return fclose(f) == 0;
}

bool logger_plot(const char *tsv_path, const char *out_dir, bool use_gnuplot, char *out, size_t len) {
    Series s;
    if (!read_series(tsv_path, &s)) {
        free_series(&s);
        if (len) out[0] = '\0';
        return false;
    }
    char png[1100], svg[1100];
    snprintf(png, sizeof png, "%s/loss.png", out_dir);
    snprintf(svg, sizeof svg, "%s/loss.svg", out_dir);
    bool ok = false;
    if (use_gnuplot && gnuplot_found()) {
        const char *terms[2] = {"pngcairo", "png"};
        for (int i = 0; i < 2 && !ok; i++) ok = try_gnuplot(tsv_path, png, terms[i], s.n_val > 0);
        if (ok) snprintf(out, len, "%s", png);
    }
    if (!ok) {
        ok = write_svg(&s, svg);
        if (ok)
            snprintf(out, len, "%s", svg);
        else
            fprintf(stderr, "gdp: warning: could not write the loss plot '%s': %s\n", svg, strerror(errno));
    }
    free_series(&s);
    return ok;
}
