/* Line plots of TSV columns, several curves in one figure: a PNG through gnuplot when it is installed,
 * else an SVG written by our own code, so that a plot always appears (as the training loss plot,
 * train/logger.h). */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#define PLOT_MAX_CURVES 32

typedef struct PlotSpec {
    const char *title, *xlabel, *ylabel;
    int xcol, ycol;  /* 0-based TSV columns (ycol: plot_tsv's); rows whose x or y is not a number (a header, an empty field) are left out */
    double marker_x; /* > 0: a dashed vertical line there (e.g. the training length) */
    double ymin, ymax; /* ymin < ymax: this y range (e.g. an accuracy's); else the y axis fits the data */
} PlotSpec;

/* One curve: column ycol of a TSV file (against the spec's xcol), as a line or as points. */
typedef struct PlotCurve {
    const char *tsv, *title;
    int ycol;
    bool points;
} PlotCurve;

/* The curves into out_base.png (gnuplot, when use_gnuplot and it is found) or out_base.svg. Writes
 * the path into out (len bytes); false, with the reason on stderr, when a curve has no plottable
 * row or the file cannot be written. */
bool plot_curves(const PlotCurve *curves, int n, const char *out_base, const PlotSpec *spec, bool use_gnuplot,
                 char *out, size_t len);
/* plot_curves with curve i the line of column spec->ycol of tsv[i], labelled titles[i]. */
bool plot_tsv(const char *const *tsv, const char *const *titles, int n, const char *out_base, const PlotSpec *spec,
              bool use_gnuplot, char *out, size_t len);
