/* Line plots of TSV columns (train/plot.h). */
#include "train/plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"

typedef struct Curve {
    double *x, *y;
    int n;
} Curve;

/* Field col of a tab-separated line as a number; NAN when it is missing, empty or not a number. */
static double field(const char *line, int col) {
    for (int c = 0; c < col; c++) {
        line = strchr(line, '\t');
        if (!line) return NAN;
        line++;
    }
    char *end;
    double v = strtod(line, &end);
    return end == line || (*end && *end != '\t' && *end != '\n' && *end != '\r') ? NAN : v;
}

static bool read_curve(const char *tsv, int xcol, int ycol, Curve *c) {
    memset(c, 0, sizeof *c);
    FILE *f = fopen(tsv, "r");
    if (!f) {
        fprintf(stderr, "plot: cannot read a curve from '%s': %s\n", tsv, strerror(errno));
        return false;
    }
    char line[4096];
    int cap = 0;
    while (fgets(line, sizeof line, f)) {
        double x = field(line, xcol), y = field(line, ycol);
        if (!isfinite(x) || !isfinite(y)) continue;
        if (c->n == cap) {
            cap = cap ? 2 * cap : 256;
            c->x = (double *)xrealloc(c->x, (size_t)cap * sizeof(double));
            c->y = (double *)xrealloc(c->y, (size_t)cap * sizeof(double));
        }
        c->x[c->n] = x, c->y[c->n] = y, c->n++;
    }
    fclose(f);
    if (c->n == 0) fprintf(stderr, "plot: '%s' has no row with numbers in columns %d and %d\n", tsv, xcol + 1,
                           ycol + 1);
    return c->n > 0;
}

/* A string inside gnuplot single quotes: ' is written ''. */
static void gp_quote(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

/* Curve i's colour, and from the eleventh curve on a dash pattern, so that no two curves look alike
 * (gnuplot's own cycle repeats after eight). The same in the PNG and the SVG. */
static const char *const curve_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
enum { N_CURVE_COLORS = sizeof curve_colors / sizeof curve_colors[0] };
static const char *const curve_svg_dashes[] = {"", "8,4", "2,3", "12,3,2,3"};

static bool try_gnuplot(const PlotCurve *cu, int n, const char *png, const char *terminal, const PlotSpec *s) {
    unlink(png);
    FILE *gp = popen("gnuplot >/dev/null 2>&1", "w");
    if (!gp) return false;
    fprintf(gp, "set terminal %s noenhanced size 1000,600\nset output ", terminal);
    gp_quote(gp, png);
    fprintf(gp, "\nset datafile separator \"\\t\"\nset grid\nset key below\n"
                "set autoscale xfix\n");
    if (s->ymin < s->ymax) fprintf(gp, "set yrange [%g:%g]\n", s->ymin, s->ymax);
    fprintf(gp, "set title ");
    gp_quote(gp, s->title);
    fprintf(gp, "\nset xlabel ");
    gp_quote(gp, s->xlabel);
    fprintf(gp, "\nset ylabel ");
    gp_quote(gp, s->ylabel);
    fprintf(gp, "\n");
    if (s->marker_x > 0)
        fprintf(gp, "set arrow from %g, graph 0 to %g, graph 1 nohead dashtype 2 lc rgb \"gray40\"\n", s->marker_x,
                s->marker_x);
    fprintf(gp, "plot ");
    for (int i = 0; i < n; i++) {
        gp_quote(gp, cu[i].tsv);
        fprintf(gp, " using %d:%d skip 1 with %s lc rgb \"%s\" dashtype %d title ", s->xcol + 1, cu[i].ycol + 1,
                cu[i].points ? "points pt 7 ps 1" : "lines lw 2", curve_colors[i % N_CURVE_COLORS],
                1 + (i / N_CURVE_COLORS) % 4);
        gp_quote(gp, cu[i].title);
        fprintf(gp, "%s", i + 1 < n ? ", " : "\n");
    }
    fprintf(gp, "set output\n");
    int st = pclose(gp);
    struct stat sb;
    return st == 0 && stat(png, &sb) == 0 && sb.st_size > 0;
}

static void svg_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

/* A round tick spacing giving about five ticks over range. */
static double nice_step(double range) {
    if (!(range > 0)) return 1;
    double raw = range / 5, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
}

static bool write_svg(const Curve *cv, const PlotCurve *cu, int n, const char *svg, const PlotSpec *s) {
    FILE *f = fopen(svg, "w");
    if (!f) return false;
    /* the legend goes below the plot, one row per curve */
    const double W = 1000, H = 610 + 18.0 * n, L = 80, R = 30, T = 50, B = 70 + 18.0 * n;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < cv[i].n; j++) {
            x0 = fmin(x0, cv[i].x[j]), x1 = fmax(x1, cv[i].x[j]);
            y0 = fmin(y0, cv[i].y[j]), y1 = fmax(y1, cv[i].y[j]);
        }
    if (x1 <= x0) x1 = x0 + 1;
    if (y1 <= y0) y1 = y0 + 1;
    const double pad = 0.05 * (y1 - y0);
    y0 -= pad, y1 += pad;
    if (s->ymin < s->ymax) y0 = s->ymin, y1 = s->ymax;
#define SX(x) (L + ((x) - x0) / (x1 - x0) * (W - L - R))
#define SY(y) (H - B - ((y) - y0) / (y1 - y0) * (H - T - B))
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
               "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H, W, H);
    fprintf(f, "<text x=\"%.0f\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">", W / 2);
    svg_text(f, s->title);
    fprintf(f, "</text>\n");
    const double xs = nice_step(x1 - x0), ys = nice_step(y1 - y0);
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
    if (s->marker_x > x0 && s->marker_x < x1)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#666\" stroke-dasharray=\"6,4\"/>\n",
                SX(s->marker_x), T, SX(s->marker_x), H - B);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">", (L + W - R) / 2, H - B + 40);
    svg_text(f, s->xlabel);
    fprintf(f, "</text>\n<text x=\"18\" y=\"%.0f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.0f)\">",
            (T + H - B) / 2, (T + H - B) / 2);
    svg_text(f, s->ylabel);
    fprintf(f, "</text>\n");
    for (int i = 0; i < n; i++) {
        const char *col = curve_colors[i % N_CURVE_COLORS];
        const char *dash = curve_svg_dashes[(i / N_CURVE_COLORS) % 4];
        const double ly = H - B + 62 + 18.0 * i;
        if (cu[i].points) {
            for (int j = 0; j < cv[i].n; j++)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>\n", SX(cv[i].x[j]), SY(cv[i].y[j]),
                        col);
            fprintf(f, "<circle cx=\"%.0f\" cy=\"%.0f\" r=\"4\" fill=\"%s\"/>", L + 35, ly, col);
        } else {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" stroke-dasharray=\"%s\" points=\"",
                    col, *dash ? dash : "none");
            for (int j = 0; j < cv[i].n; j++) fprintf(f, "%.1f,%.1f ", SX(cv[i].x[j]), SY(cv[i].y[j]));
            fprintf(f, "\"/>\n<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"2\" "
                       "stroke-dasharray=\"%s\"/>", L + 20, ly, L + 50, ly, col, *dash ? dash : "none");
        }
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">", L + 56, ly + 4);
        svg_text(f, cu[i].title);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
#undef SX
#undef SY
    return fclose(f) == 0;
}

bool plot_curves(const PlotCurve *curves, int n, const char *out_base, const PlotSpec *spec, bool use_gnuplot,
                 char *out, size_t len) {
    if (len) out[0] = 0;
    GDP_CHECK(n >= 1 && n <= PLOT_MAX_CURVES, "plot: %d curves (use 1 to %d)", n, PLOT_MAX_CURVES);
    Curve cv[PLOT_MAX_CURVES];
    int read = 0;
    bool ok = true;
    while (ok && read < n) ok = read_curve(curves[read].tsv, spec->xcol, curves[read].ycol, &cv[read]), read++;
    char png[1100], svg[1100];
    snprintf(png, sizeof png, "%s.png", out_base);
    snprintf(svg, sizeof svg, "%s.svg", out_base);
    if (ok) {
        ok = false;
        if (use_gnuplot && system("command -v gnuplot >/dev/null 2>&1") == 0) {
            const char *terms[2] = {"pngcairo", "png"};
            for (int i = 0; i < 2 && !ok; i++) ok = try_gnuplot(curves, n, png, terms[i], spec);
            if (ok) snprintf(out, len, "%s", png);
        }
        if (!ok) {
            ok = write_svg(cv, curves, n, svg, spec);
            if (ok) snprintf(out, len, "%s", svg);
            else fprintf(stderr, "plot: cannot write '%s': %s\n", svg, strerror(errno));
        }
    }
    for (int i = 0; i < read; i++) free(cv[i].x), free(cv[i].y);
    return ok;
}

bool plot_tsv(const char *const *tsv, const char *const *titles, int n, const char *out_base, const PlotSpec *spec,
              bool use_gnuplot, char *out, size_t len) {
    GDP_CHECK(n >= 1 && n <= PLOT_MAX_CURVES, "plot_tsv: %d curves (use 1 to %d)", n, PLOT_MAX_CURVES);
    PlotCurve cu[PLOT_MAX_CURVES];
    for (int i = 0; i < n; i++) cu[i] = (PlotCurve){tsv[i], titles[i], spec->ycol, false};
    return plot_curves(cu, n, out_base, spec, use_gnuplot, out, len);
}
