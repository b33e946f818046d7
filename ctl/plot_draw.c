/* plot_draw — the drawing half of `bfctl plot`: see plot_draw.h. */
#include "ctl/plot_draw.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <errno.h>
#include <fontconfig/fontconfig.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const double plot_grey[3] = {0.78, 0.78, 0.78};

/* Ten well separated colours (matplotlib's tab10, its grey swapped for a
 * navy, grey being the colour of the trials --best leaves out), then 54
 * more: 18 hues 20 degrees apart at each of three lightness/saturation
 * levels (each level's hues turned a third of a step; the offset keeps
 * them off the first ten). */
void plot_palette(size_t i, double rgb[3]) {
    static const unsigned base[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                    0x8c564b, 0xe377c2, 0xbcbd22, 0x17becf, 0x393b79};
    i %= PLOT_PALETTE;
    if (i < 10) {
        rgb[0] = ((base[i] >> 16) & 0xff) / 255.0;
        rgb[1] = ((base[i] >> 8) & 0xff) / 255.0;
        rgb[2] = (base[i] & 0xff) / 255.0;
        return;
    }
    static const double vs[3][2] = {{0.80, 0.95}, {0.50, 0.90}, {1.00, 0.50}};
    size_t j = i - 10, lv = j / 18;
    double h = fmod(((double)(j % 18) + 0.6 + (double)lv / 3.0) / 18.0, 1.0) * 6;
    double v = vs[lv][0], s = vs[lv][1];
    double c = v * s, x = c * (1 - fabs(fmod(h, 2) - 1)), m = v - c;
    double rr = 0, gg = 0, bb = 0;
    int k = (int)h;
    if (k == 0) rr = c, gg = x;
    if (k == 1) rr = x, gg = c;
    if (k == 2) gg = c, bb = x;
    if (k == 3) gg = x, bb = c;
    if (k == 4) rr = x, bb = c;
    if (k >= 5) rr = c, bb = x;
    /* quantised as a PNG stores it, so a pixel can be matched exactly */
    rgb[0] = round((rr + m) * 255) / 255;
    rgb[1] = round((gg + m) * 255) / 255;
    rgb[2] = round((bb + m) * 255) / 255;
}

/* The index of trial t's group (its first swept value), in order of first
 * appearance. */
static size_t group_of(const plot *p, size_t t) {
    size_t g = 0;
    for (size_t u = 0; u < t; u++) {
        size_t v = 0;
        while (v < u && strcmp(p->s[0][v].group, p->s[0][u].group)) v++;
        if (v < u) continue; /* u is not the first of its group */
        if (!strcmp(p->s[0][u].group, p->s[0][t].group)) return g;
        g++;
    }
    return g;
}

void plot_trial_colour(const plot *p, size_t t, double rgb[3]) {
    if (p->best_n > 0 && !p->s[0][t].ranked) {
        memcpy(rgb, plot_grey, sizeof plot_grey);
        return;
    }
    plot_palette(p->n_trials <= PLOT_PALETTE ? t : group_of(p, t), rgb);
}

void plot_ema(const double *y, size_t n, double w, double *out) {
    double last = 0;
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) {
            out[i] = y[i];
            continue;
        }
        last = last * w + (1 - w) * y[i];
        k++;
        double debias = w == 1 ? 1 : 1 - pow(w, k);
        out[i] = last / debias;
    }
}

/* ----------------------------------------------------------------- drawing */

/* Round tick spacing: 1, 2 or 5 times a power of ten, about n ticks. */
static double tick_step(double lo, double hi, int n) {
    double raw = (hi - lo) / n;
    if (!(raw > 0)) return 1;
    double p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static void fmt_tick(char *buf, size_t len, double v, double step) {
    if (fabs(v) < step * 1e-6) v = 0;
    if (fabs(v) >= 1e5 || (fabs(v) < 1e-3 && v != 0))
        snprintf(buf, len, "%.2g", v);
    else {
        int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
        snprintf(buf, len, "%.*f", dec > 6 ? 6 : dec, v);
    }
}

static void text_at(cairo_t *cr, double x, double y, const char *s, double ax, double ay) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    cairo_move_to(cr, x - e.x_advance * ax, y + e.height * ay);
    cairo_show_text(cr, s);
}

/* The x range over every panel (they share the x axis). */
static void x_range(const plot *p, double *lo, double *hi) {
    *lo = INFINITY, *hi = -INFINITY;
    for (int k = 0; k < p->n_metrics; k++)
        for (size_t t = 0; t < p->n_trials; t++)
            for (size_t i = 0; i < p->s[k][t].n; i++) {
                double x = p->x_time ? p->s[k][t].x[i] - p->t0 : p->s[k][t].x[i];
                *lo = fmin(*lo, x), *hi = fmax(*hi, x);
            }
}

/* One panel in the box (x, y, w, h), x from xlo to xhi. */
/* y as drawn: log10 under logy (NAN for a point <= 0, left out). */
static double ydraw(const plot *p, double y) { return !p->logy ? y : y > 0 ? log10(y) : NAN; }

/* One trial's line through the points (x[i], y[i]) of the panel; points
 * whose drawn y is NAN are left out (the line joins their neighbours). */
static void trace(cairo_t *cr, const plot *p, const plot_series *s, const double *y, double px,
                  double py, double pw, double ph, double xlo, double xhi, double ylo, double yhi) {
    int started = 0;
    size_t drawn = 0;
    double lx = 0, ly = 0;
    for (size_t i = 0; i < s->n; i++) {
        double yy = ydraw(p, y[i]);
        if (!isfinite(yy)) continue;
        double xv = p->x_time ? s->x[i] - p->t0 : s->x[i];
        lx = px + (xv - xlo) / (xhi - xlo) * pw;
        ly = py + ph - (yy - ylo) / (yhi - ylo) * ph;
        if (!started)
            cairo_move_to(cr, lx, ly), started = 1;
        else
            cairo_line_to(cr, lx, ly);
        drawn++;
    }
    if (drawn == 1) {
        cairo_new_path(cr);
        cairo_arc(cr, lx, ly, 2.5, 0, 2 * M_PI);
        cairo_fill(cr);
    } else if (drawn > 1) {
        cairo_stroke(cr);
    }
}

/* Log-axis tick labels: 10^k as a plain number. */
static void fmt_log_tick(char *buf, size_t len, double e) {
    double v = pow(10, e);
    if (fabs(e) >= 4)
        snprintf(buf, len, "1e%d", (int)lround(e));
    else
        snprintf(buf, len, "%.4g", v);
}

static void draw_panel(cairo_t *cr, plot *p, int k, double bx, double by, double bw, double bh,
                       double xlo, double xhi) {
    const plot_series *ss = p->s[k];
    double ylo = INFINITY, yhi = -INFINITY;
    p->skipped[k] = 0;
    for (size_t t = 0; t < p->n_trials; t++)
        for (size_t i = 0; i < ss[t].n; i++) {
            double y = ydraw(p, ss[t].y[i]);
            if (!isfinite(y)) {
                p->skipped[k]++;
                continue;
            }
            ylo = fmin(ylo, y), yhi = fmax(yhi, y);
        }
    int empty = !isfinite(ylo);
    if (empty) ylo = 0, yhi = 1;
    if (!isfinite(xlo)) xlo = 0, xhi = 1;
    if (xhi - xlo <= 0) xhi = xlo + 1;
    if (yhi - ylo <= 0) {
        double pad = p->logy ? 0.5 : fabs(ylo) > 0 ? fabs(ylo) * 0.05 : 0.5;
        ylo -= pad, yhi += pad;
    }
    double ypad = (yhi - ylo) * 0.05;
    ylo -= ypad, yhi += ypad;
    const double ml = 72, mr = 16, mt = 30, mb = 46;
    double px = bx + ml, py = by + mt, pw = bw - ml - mr, ph = bh - mt - mb;
#define SX(v) (px + ((v)-xlo) / (xhi - xlo) * pw)
#define SY(v) (py + ph - ((v)-ylo) / (yhi - ylo) * ph)
    /* title */
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    cairo_set_font_size(cr, 14);
    char title[300];
    if (strcmp(p->metrics[k], p->metric) == 0)
        snprintf(title, sizeof title, "%s (%s)  job %lld '%s'", p->metrics[k], p->goal, p->job,
                 p->name);
    else
        snprintf(title, sizeof title, "%s  job %lld '%s'", p->metrics[k], p->job, p->name);
    text_at(cr, px, by + 20, title, 0, 0);
    /* grid, ticks and labels */
    cairo_set_font_size(cr, 11);
    cairo_set_line_width(cr, 1);
    double xs = tick_step(xlo, xhi, 7), ys = tick_step(ylo, yhi, 6);
    char b[64];
    for (double v = ceil(xlo / xs) * xs; v <= xhi + xs * 1e-9; v += xs) {
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, floor(SX(v)) + 0.5, py);
        cairo_line_to(cr, floor(SX(v)) + 0.5, py + ph);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.25, 0.25, 0.25);
        fmt_tick(b, sizeof b, v, xs);
        text_at(cr, SX(v), py + ph + 6, b, 0.5, 1);
    }
    /* log axis: whole decades when it spans more than one (every few when
     * many), else 1, 2 and 5 times a power of ten */
    double ticks[64];
    int nt = 0;
    if (p->logy && yhi - ylo >= 1) {
        double st = ceil((yhi - ylo) / 6);
        for (double e = ceil(ylo / st) * st; e <= yhi + 1e-9 && nt < 64; e += st) ticks[nt++] = e;
    } else if (p->logy) {
        for (double e = floor(ylo); e <= ceil(yhi) && nt < 61; e++)
            for (int m = 0; m < 3; m++) {
                double v = e + log10((double[]){1, 2, 5}[m]);
                if (v >= ylo - 1e-9 && v <= yhi + 1e-9) ticks[nt++] = v;
            }
        if (nt < 2) { /* under a factor of 2: round values of y itself */
            nt = 0;
            double a = pow(10, ylo), z = pow(10, yhi), st = tick_step(a, z, 4);
            for (double v = ceil(a / st) * st; v <= z && nt < 64; v += st) ticks[nt++] = log10(v);
        }
    } else {
        for (double v = ceil(ylo / ys) * ys; v <= yhi + ys * 1e-9 && nt < 64; v += ys)
            ticks[nt++] = v;
    }
    for (int ti = 0; ti < nt; ti++) {
        double v = ticks[ti];
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, px, floor(SY(v)) + 0.5);
        cairo_line_to(cr, px + pw, floor(SY(v)) + 0.5);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.25, 0.25, 0.25);
        if (p->logy)
            fmt_log_tick(b, sizeof b, v);
        else
            fmt_tick(b, sizeof b, v, ys);
        text_at(cr, px - 6, SY(v), b, 1, 0.5);
    }
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    cairo_rectangle(cr, floor(px) + 0.5, floor(py) + 0.5, floor(pw), floor(ph));
    cairo_stroke(cr);
    cairo_set_font_size(cr, 12);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    const char *xl = p->x_time ? "seconds since the first point" : "step";
    text_at(cr, px + pw / 2, py + ph + 24, xl, 0.5, 1);
    cairo_save(cr);
    cairo_translate(cr, bx + 16, py + ph / 2);
    cairo_rotate(cr, -M_PI / 2);
    char yl[160];
    snprintf(yl, sizeof yl, "%s%s%s", p->metrics[k], p->logy ? " (log)" : "",
             p->smooth > 0 ? " (smoothed)" : "");
    text_at(cr, 0, 0, yl, 0.5, 0.5);
    cairo_restore(cr);
    if (empty) {
        cairo_set_font_size(cr, 13);
        cairo_set_source_rgb(cr, 0.5, 0.5, 0.5);
        text_at(cr, px + pw / 2, py + ph / 2,
                p->logy && p->skipped[k] ? "no points above 0 for --logy"
                                         : "no points of this metric yet",
                0.5, 0.5);
        return;
    }
    /* lines: grey ones first, then the coloured, the best trial last (on
     * top) and thicker; smoothed: the raw points faint beneath */
    cairo_save(cr);
    cairo_rectangle(cr, px, py, pw, ph);
    cairo_clip(cr);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    double ring_x = NAN, ring_y = NAN;
    double *sm = NULL;
    for (int pass = 0; pass < 3; pass++)
        for (size_t t = 0; t < p->n_trials; t++) {
            const plot_series *s = &ss[t];
            int grey = p->best_n > 0 && !s->ranked;
            int want = s->best ? 2 : grey ? 0 : 1;
            if (want != pass || s->n == 0) continue;
            double c[3];
            plot_trial_colour(p, t, c);
            const double *y = s->y;
            if (p->smooth > 0) {
                double *nsm = realloc(sm, s->n * sizeof *sm);
                if (nsm) {
                    sm = nsm;
                    plot_ema(s->y, s->n, p->smooth, sm);
                    y = sm;
                    cairo_set_source_rgba(cr, c[0], c[1], c[2], 0.25);
                    cairo_set_line_width(cr, 1.0);
                    trace(cr, p, s, s->y, px, py, pw, ph, xlo, xhi, ylo, yhi);
                }
            }
            cairo_set_source_rgb(cr, c[0], c[1], c[2]);
            cairo_set_line_width(cr, s->best ? 3.0 : 1.6);
            trace(cr, p, s, y, px, py, pw, ph, xlo, xhi, ylo, yhi);
            if (s->best && strcmp(p->metrics[k], p->metric) == 0) {
                /* the best raw value of the job's metric: a ring */
                size_t bi = s->n;
                int max = strcmp(p->goal, "max") == 0;
                for (size_t i = 0; i < s->n; i++) {
                    if (!isfinite(ydraw(p, s->y[i]))) continue;
                    if (bi == s->n || (max ? s->y[i] > s->y[bi] : s->y[i] < s->y[bi])) bi = i;
                }
                if (bi < s->n) {
                    ring_x = SX(p->x_time ? s->x[bi] - p->t0 : s->x[bi]);
                    ring_y = SY(ydraw(p, s->y[bi]));
                }
            }
        }
    free(sm);
    cairo_restore(cr);
    if (!isnan(ring_x)) { /* drawn unclipped: a best point on the edge shows whole */
        cairo_new_path(cr);
        cairo_arc(cr, ring_x, ring_y, 6, 0, 2 * M_PI);
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_fill_preserve(cr);
        cairo_set_source_rgb(cr, 0, 0, 0);
        cairo_set_line_width(cr, 2);
        cairo_stroke(cr);
    }
#undef SX
#undef SY
}

/* The legend's entries: one per trial, or past PLOT_PALETTE trials one per
 * group (its first swept value and how many trials it has). */
static size_t legend_entries(const plot *p) {
    if (p->n_trials <= PLOT_PALETTE) return p->n_trials;
    size_t g = 0;
    for (size_t t = 0; t < p->n_trials; t++) g = group_of(p, t) + 1 > g ? group_of(p, t) + 1 : g;
    return g;
}

/* Entry e's label, colour and whether it is the best trial's. */
static void legend_entry(const plot *p, size_t e, char *label, size_t len, double rgb[3],
                         int *best) {
    if (p->n_trials <= PLOT_PALETTE) {
        const plot_series *s = &p->s[0][e];
        snprintf(label, len, "%s%s", s->label, s->best ? "  (best)" : "");
        plot_trial_colour(p, e, rgb);
        *best = s->best;
        return;
    }
    size_t n = 0, first = 0, ranked = 0;
    *best = 0;
    for (size_t t = 0; t < p->n_trials; t++)
        if (group_of(p, t) == e) {
            if (n++ == 0) first = t;
            ranked += p->s[0][t].ranked;
            *best |= p->s[0][t].best;
        }
    snprintf(label, len, "%s  (%zu trials)%s", p->s[0][first].group[0] ? p->s[0][first].group : "-",
             n, *best ? "  (best)" : "");
    if (p->best_n > 0 && !ranked)
        memcpy(rgb, plot_grey, sizeof plot_grey);
    else
        plot_palette(e, rgb);
}

#define LEGEND_ROW 16.0
#define LEGEND_TOP 40.0

/* The legend's width and columns for a w x h picture: at most 30% of the
 * width, two columns when one does not hold every entry. */
static double legend_width(const plot *p, int w, int h, int *cols) {
    size_t ne = legend_entries(p);
    size_t rows = (size_t)fmax(1, floor((h - LEGEND_TOP - 10) / LEGEND_ROW));
    *cols = ne > rows ? 2 : 1;
    cairo_surface_t *sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
    cairo_t *cr = cairo_create(sf);
    cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, 11);
    double lw = 0;
    for (size_t e = 0; e < ne; e++) {
        char label[460];
        double rgb[3];
        int best;
        legend_entry(p, e, label, sizeof label, rgb, &best);
        cairo_text_extents_t x;
        cairo_text_extents(cr, label, &x);
        lw = fmax(lw, x.x_advance + 44);
    }
    cairo_destroy(cr);
    cairo_surface_destroy(sf);
    return fmin(lw * *cols, w * 0.30);
}

void plot_layout(const plot *p, int w, int h, double *plot_right, double *legend_x) {
    int cols;
    double lw = legend_width(p, w, h, &cols);
    *plot_right = w - lw;
    *legend_x = *plot_right + 4;
}

/* The legend from x (right of every panel), w wide: a swatch and the label
 * of each entry, in cols columns; what does not fit: "+ N more". */
static void draw_legend(cairo_t *cr, const plot *p, double x, double w, int h, int cols) {
    cairo_set_font_size(cr, 11);
    size_t ne = legend_entries(p);
    size_t rows = (size_t)fmax(1, floor((h - LEGEND_TOP - 10) / LEGEND_ROW));
    size_t fit = rows * (size_t)cols;
    double cw = w / cols;
    for (size_t e = 0; e < ne; e++) {
        size_t slot = e;
        if (ne > fit && e + 1 == fit) { /* the last slot says what is left out */
            cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
            char more[64];
            snprintf(more, sizeof more, "+ %zu more", ne - e);
            text_at(cr, x + (double)(slot / rows) * cw + 28,
                    LEGEND_TOP + LEGEND_ROW * (double)(slot % rows), more, 0, 0.4);
            break;
        }
        double xx = x + (double)(slot / rows) * cw,
               yy = LEGEND_TOP + LEGEND_ROW * (double)(slot % rows);
        char label[460];
        double rgb[3];
        int best;
        legend_entry(p, e, label, sizeof label, rgb, &best);
        cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
        cairo_rectangle(cr, floor(xx), floor(yy) - 5, 22, best ? 6 : 4);
        cairo_fill(cr);
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        /* cut to the width, with an ellipsis */
        cairo_text_extents_t te;
        size_t len = strlen(label);
        cairo_text_extents(cr, label, &te);
        while (len > 4 && te.x_advance > cw - 34) {
            len--;
            while (len > 0 && ((unsigned char)label[len] & 0xC0) == 0x80) len--;
            memcpy(label + len, "...", 4);
            cairo_text_extents(cr, label, &te);
        }
        text_at(cr, xx + 28, yy, label, 0, 0.4);
    }
}

/* Draws the plot into a new surface of w x h (SVG when svg). */
int plot_render(plot *p, const char *path, int svg, int w, int h) {
    int cols;
    double lw = legend_width(p, w, h, &cols);
    cairo_surface_t *sf = svg ? cairo_svg_surface_create(path, w, h)
                              : cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
    if (cairo_surface_status(sf) != CAIRO_STATUS_SUCCESS) {
        fprintf(stderr, "bfctl plot: cannot create %s: %s\n", path,
                cairo_status_to_string(cairo_surface_status(sf)));
        cairo_surface_destroy(sf);
        return 1;
    }
    cairo_t *cr = cairo_create(sf);
    cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    double pw = w - lw, ph = (double)h / p->n_metrics;
    double xlo, xhi;
    x_range(p, &xlo, &xhi);
    for (int k = 0; k < p->n_metrics; k++) draw_panel(cr, p, k, 0, ph * k, pw, ph, xlo, xhi);
    draw_legend(cr, p, pw + 4, lw - 8, h, cols);
    cairo_destroy(cr);
    /* the status of the write itself (write_to_png returns it and leaves the
     * surface's own status SUCCESS); a write error is the errno of the
     * failed open or write, which cairo does not keep */
    errno = 0;
    cairo_status_t st;
    if (svg) {
        cairo_surface_finish(sf);
        st = cairo_surface_status(sf);
    } else {
        st = cairo_surface_write_to_png(sf, path);
    }
    int rc = st != CAIRO_STATUS_SUCCESS;
    if (rc)
        fprintf(stderr, "bfctl plot: writing %s failed: %s\n", path,
                st == CAIRO_STATUS_WRITE_ERROR && errno ? strerror(errno)
                                                        : cairo_status_to_string(st));
    cairo_surface_destroy(sf);
    /* cairo's font caches and fontconfig's configuration live until reset:
     * freed here, so leak checkers see only what is really lost */
    cairo_debug_reset_static_data();
    FcFini();
    return rc;
}
