/* plot_draw — the drawing half of `bfctl plot` (ctl/ctl_plot.c fetches the
 * points from bfd): series, the trial palette, EMA smoothing, a log y axis,
 * the legend, and the render into a PNG or SVG. No daemon in here, so
 * tests/test_it_plot.c draws synthetic plots with it. */
#ifndef BF_CTL_PLOT_DRAW_H
#define BF_CTL_PLOT_DRAW_H

#include <stddef.h>

#define PLOT_MAX_METRICS 8
#define PLOT_MAX_NAMES 256      /* metric names remembered to list */
#define PLOT_MAX_POINTS 2000000 /* per series; more is refused, not drawn */
#define PLOT_PALETTE 64         /* distinct trial colours; more trials: by group */

typedef struct plot_series {
    long long trial;
    char label[400];
    char group[200]; /* the trial's first swept value ("k=v"): its group past 64 trials */
    int best;        /* the best trial by the job's metric (drawn thicker) */
    int ranked;      /* among the --best N (or every trial without --best) */
    size_t n, cap;
    double *x, *y;
} plot_series;

typedef struct plot {
    long long job;
    char name[128], metric[64], goal[8];
    const char *metrics[PLOT_MAX_METRICS];
    int n_metrics;
    int x_time;
    int logy;      /* log10 y axis: points <= 0 are skipped (counted in skipped[]) */
    double smooth; /* EMA weight in [0, 1); 0 draws the raw points only */
    int best_n;    /* 0: every trial in colour; N: the N ranked ones, the rest grey */
    plot_series *s[PLOT_MAX_METRICS]; /* per metric: one series per trial */
    size_t n_trials;
    double t0;                   /* earliest point time (x = time - t0) */
    char *names[PLOT_MAX_NAMES]; /* every metric name the trials wrote (owned) */
    int n_names;
    size_t skipped[PLOT_MAX_METRICS]; /* points <= 0 left out under logy (set by render) */
} plot;

/* Colour i (0 .. PLOT_PALETTE-1) of the trial palette, channels in [0, 1]. */
void plot_palette(size_t i, double rgb[3]);
/* The colour trial t is drawn in: its palette colour (by its index up to
 * PLOT_PALETTE trials, else by its group's index modulo PLOT_PALETTE), or
 * grey when --best N leaves it out. */
void plot_trial_colour(const plot *p, size_t t, double rgb[3]);
extern const double plot_grey[3];
/* TensorBoard's smoothing: last = last*w + (1-w)*y, out = last / (1 - w^k)
 * at the k-th finite point (debiased); a non-finite y passes through. */
void plot_ema(const double *y, size_t n, double w, double *out);
/* Where render puts the legend for a w x h picture: the curves' area ends at
 * *plot_right, the legend starts at *legend_x (>= *plot_right). */
void plot_layout(const plot *p, int w, int h, double *plot_right, double *legend_x);
/* Draws p into path (PNG, or SVG when svg); 0 or 1 with a message. */
int plot_render(plot *p, const char *path, int svg, int w, int h);

#endif
