/* Training log: progress lines on stdout and DIR/log.tsv, rank 0 only (other ranks' loggers are
 * silent no-ops, so callers need no rank checks). log.tsv has a header row and one row per step:
 *     step  loss  lr  grad_norm  tokens_per_s  val_loss  elapsed_s  skipped
 * (tab-separated; val_loss is empty when the step had no validation; skipped is 1 for a step whose
 * update was skipped (a NaN/Inf or outlier loss or gradient norm), else 0). At the end of a run
 * logger_finish draws the loss curve: DIR/loss.png through gnuplot when it is installed (pngcairo,
 * else png terminal), otherwise DIR/loss.svg written by our own code, so a plot always appears. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Logger {
    bool active;         /* rank 0 */
    bool quiet;          /* no stdout progress */
    int print_every;     /* progress line every N steps (1 default; the TSV gets every step) */
    char dir[1024];      /* "" when no output directory */
    FILE *tsv;
    double t0;           /* gdp_now_seconds at init */
    double elapsed_offset;  /* elapsed_s of the last kept row when resuming */
    int64_t rows;
    char plot_path[1100];   /* set by logger_finish */
} Logger;

/* dir may be NULL (stdout only). resume_step < 0: a new log.tsv (truncated). resume_step >= 0:
 * keep the existing rows with step < resume_step (rows of a crashed run past the checkpoint
 * go), append after them, and continue elapsed_s from the last kept row. */
void logger_init(Logger *lg, const char *dir, int rank, int64_t resume_step);
/* One row (and a progress line). val_loss: NAN when none. tokens_per_s: NAN or <= 0 when unknown. */
void logger_step(Logger *lg, int64_t step, double loss, double lr, double grad_norm, double tokens_per_s,
                 double val_loss, bool skipped);
/* printf on rank 0 only (stdout, flushed). */
__attribute__((format(printf, 2, 3))) void logger_printf(const Logger *lg, const char *fmt, ...);
/* Closes log.tsv and writes the plot; returns the plot path (lg->plot_path; "" when there is no
 * directory, no rows, or this is not rank 0). */
const char *logger_finish(Logger *lg);

/* Plot of a log.tsv: with use_gnuplot and gnuplot found, out_dir/loss.png; else out_dir/loss.svg.
 * Writes the path into out (len bytes). Returns false when the TSV has no rows. */
bool logger_plot(const char *tsv_path, const char *out_dir, bool use_gnuplot, char *out, size_t len);

#ifdef __cplusplus
}
#endif
