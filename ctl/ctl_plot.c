/* bfctl plot JOB|tTRIAL: metric curves drawn with cairo into a PNG or SVG.
 * One panel per metric (default: the job's), one line per trial coloured
 * from one palette, a legend with each trial's swept values, the best trial
 * by the job's metric drawn thicker with its best point marked, labelled
 * axes with round ticks. Data from bfd: `job`, `best`, paged `metrics`. */
#include <cairo-svg.h>
#include <cairo.h>
#include <fontconfig/fontconfig.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"

#define PLOT_MAX_METRICS 8
#define PLOT_PAGE 10000
#define PLOT_MAX_NAMES 256      /* metric names remembered to list */
#define PLOT_MAX_POINTS 2000000 /* per series; more is refused, not drawn */

static const char usage_text[] =
    "usage: bfctl plot JOB|tTRIAL [--metric NAME ...] [--x step|time] [-o FILE.png|FILE.svg] "
    "[--size WxH]\n";

typedef struct series {
    long long trial;
    char label[400];
    int best;
    size_t n, cap;
    double *x, *y;
} series;

typedef struct plot {
    long long job;
    char name[128], metric[64], goal[8];
    const char *metrics[PLOT_MAX_METRICS];
    int n_metrics;
    int x_time;
    series *s[PLOT_MAX_METRICS]; /* per metric: one series per trial */
    size_t n_trials;
    double t0;                   /* earliest point time (x = time - t0) */
    char *names[PLOT_MAX_NAMES]; /* every metric name the trials wrote (owned) */
    int n_names;
} plot;

/* Remembers a metric name the job's trials wrote, once. */
static void saw_name(plot *p, const char *name) {
    for (int i = 0; i < p->n_names; i++)
        if (!strcmp(p->names[i], name)) return;
    if (p->n_names < PLOT_MAX_NAMES) {
        char *d = strdup(name);
        if (d) p->names[p->n_names++] = d;
    }
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A palette of well separated hues (the first ten), then evenly spaced
 * hues for more trials. */
static void colour(size_t i, double *r, double *g, double *b) {
    static const unsigned rgb[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                   0x8c564b, 0xe377c2, 0xbcbd22, 0x17becf, 0x7f7f7f};
    if (i < 10) {
        *r = ((rgb[i] >> 16) & 0xff) / 255.0;
        *g = ((rgb[i] >> 8) & 0xff) / 255.0;
        *b = (rgb[i] & 0xff) / 255.0;
        return;
    }
    double h = fmod((double)(i - 10) * 0.618033988749895, 1.0) * 6, v = 0.8, s = 0.75;
    double c = v * s, x = c * (1 - fabs(fmod(h, 2) - 1)), m = v - c;
    double rr = 0, gg = 0, bb = 0;
    int k = (int)h;
    if (k == 0) rr = c, gg = x;
    if (k == 1) rr = x, gg = c;
    if (k == 2) gg = c, bb = x;
    if (k == 3) gg = x, bb = c;
    if (k == 4) rr = x, bb = c;
    if (k >= 5) rr = c, bb = x;
    *r = rr + m;
    *g = gg + m;
    *b = bb + m;
}

static int push(series *s, double x, double y) {
    if (s->n == s->cap) {
        if (s->cap >= PLOT_MAX_POINTS) return -1;
        size_t cap = s->cap ? 2 * s->cap : 256;
        double *nx = realloc(s->x, cap * sizeof *nx);
        if (!nx) return -1;
        s->x = nx;
        double *ny = realloc(s->y, cap * sizeof *ny);
        if (!ny) return -1;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
    return 0;
}

static int call_or_say(ctl_conn *c, const char *type, json_t *body, json_t **reply) {
    char err[4096];
    if (!body) {
        fprintf(stderr, "bfctl plot: out of memory\n");
        return -1;
    }
    int rc = ctl_call(c, type, body, reply, NULL, err, sizeof err);
    json_decref(body);
    if (rc == 0) return 0;
    if (rc == 1) json_decref(*reply);
    *reply = NULL;
    fprintf(stderr, "bfctl: %s\n", err);
    return -1;
}

static void params_label(json_t *params, long long trial, char *buf, size_t len) {
    size_t w = (size_t)snprintf(buf, len, "t%lld", trial);
    const char *k;
    json_t *v;
    json_object_foreach(params, k, v) {
        char *vt = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(6));
        if (w < len) w += (size_t)snprintf(buf + w, len - w, "  %s=%s", k, vt ? vt : "?");
        free(vt);
    }
}

/* Every point of one trial into the series of each metric. */
static int load_trial(ctl_conn *c, plot *p, size_t ti, long long trial) {
    long long after = 0;
    for (;;) {
        json_t *m;
        if (call_or_say(c, "metrics",
                        json_pack("{s:I, s:I, s:i}", "trial", (json_int_t)trial, "after",
                                  (json_int_t)after, "limit", PLOT_PAGE),
                        &m))
            return -1;
        size_t i;
        json_t *pt;
        json_array_foreach(json_object_get(m, "points"), i, pt) {
            json_t *vals = json_object_get(pt, "values");
            const char *key;
            json_t *kv;
            json_object_foreach(vals, key, kv) saw_name(p, key);
            double t = json_number_value(json_object_get(pt, "time"));
            double x = p->x_time ? t : (double)json_integer_value(json_object_get(pt, "step"));
            for (int k = 0; k < p->n_metrics; k++) {
                json_t *v = json_object_get(vals, p->metrics[k]);
                if (!json_is_number(v) || !isfinite(json_number_value(v))) continue;
                if (p->t0 == 0 || t < p->t0) p->t0 = t;
                if (push(&p->s[k][ti], x, json_number_value(v))) {
                    fprintf(stderr, "bfctl plot: trial %lld has too many points to draw\n", trial);
                    json_decref(m);
                    return -1;
                }
            }
        }
        long long last = (long long)json_integer_value(json_object_get(m, "last"));
        int more = json_is_true(json_object_get(m, "more")) && last > after;
        json_decref(m);
        after = last;
        if (!more) return 0;
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
static void draw_panel(cairo_t *cr, const plot *p, int k, double bx, double by, double bw,
                       double bh, double xlo, double xhi) {
    const series *ss = p->s[k];
    double ylo = INFINITY, yhi = -INFINITY;
    for (size_t t = 0; t < p->n_trials; t++)
        for (size_t i = 0; i < ss[t].n; i++)
            ylo = fmin(ylo, ss[t].y[i]), yhi = fmax(yhi, ss[t].y[i]);
    int empty = !isfinite(ylo);
    if (empty) ylo = 0, yhi = 1;
    if (!isfinite(xlo)) xlo = 0, xhi = 1;
    if (xhi - xlo <= 0) xhi = xlo + 1;
    if (yhi - ylo <= 0) {
        double pad = fabs(ylo) > 0 ? fabs(ylo) * 0.05 : 0.5;
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
    for (double v = ceil(ylo / ys) * ys; v <= yhi + ys * 1e-9; v += ys) {
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, px, floor(SY(v)) + 0.5);
        cairo_line_to(cr, px + pw, floor(SY(v)) + 0.5);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.25, 0.25, 0.25);
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
    text_at(cr, 0, 0, p->metrics[k], 0.5, 0.5);
    cairo_restore(cr);
    if (empty) {
        cairo_set_font_size(cr, 13);
        cairo_set_source_rgb(cr, 0.5, 0.5, 0.5);
        text_at(cr, px + pw / 2, py + ph / 2, "no points of this metric yet", 0.5, 0.5);
        return;
    }
    /* lines: the best trial last (on top) and thicker */
    cairo_save(cr);
    cairo_rectangle(cr, px, py, pw, ph);
    cairo_clip(cr);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    double ring_x = NAN, ring_y = NAN;
    for (int pass = 0; pass < 2; pass++)
        for (size_t t = 0; t < p->n_trials; t++) {
            if (ss[t].best != pass || ss[t].n == 0) continue;
            double r, g, bl;
            colour(t, &r, &g, &bl);
            cairo_set_source_rgb(cr, r, g, bl);
            cairo_set_line_width(cr, ss[t].best ? 3.0 : 1.6);
            for (size_t i = 0; i < ss[t].n; i++) {
                double x = SX(p->x_time ? ss[t].x[i] - p->t0 : ss[t].x[i]), y = SY(ss[t].y[i]);
                if (i == 0)
                    cairo_move_to(cr, x, y);
                else
                    cairo_line_to(cr, x, y);
            }
            if (ss[t].n == 1) {
                cairo_arc(cr, SX(p->x_time ? ss[t].x[0] - p->t0 : ss[t].x[0]), SY(ss[t].y[0]), 2.5,
                          0, 2 * M_PI);
                cairo_fill(cr);
            } else {
                cairo_stroke(cr);
            }
            if (ss[t].best && strcmp(p->metrics[k], p->metric) == 0) {
                /* the best value of the job's metric: a ring */
                size_t bi = 0;
                int max = strcmp(p->goal, "max") == 0;
                for (size_t i = 1; i < ss[t].n; i++)
                    if (max ? ss[t].y[i] > ss[t].y[bi] : ss[t].y[i] < ss[t].y[bi]) bi = i;
                ring_x = SX(p->x_time ? ss[t].x[bi] - p->t0 : ss[t].x[bi]);
                ring_y = SY(ss[t].y[bi]);
            }
        }
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

/* The legend in the box (x, y, w): a swatch and the label of each trial. */
static void draw_legend(cairo_t *cr, const plot *p, double x, double y, double w) {
    cairo_set_font_size(cr, 11);
    for (size_t t = 0; t < p->n_trials; t++) {
        const series *s = &p->s[0][t];
        double r, g, b, yy = y + 18.0 * (double)t;
        colour(t, &r, &g, &b);
        cairo_set_source_rgb(cr, r, g, b);
        cairo_rectangle(cr, x, yy - 4, 22, s->best ? 5 : 3);
        cairo_fill(cr);
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        char label[460];
        snprintf(label, sizeof label, "%s%s", s->label, s->best ? "  (best)" : "");
        /* cut to the width, with an ellipsis */
        cairo_text_extents_t e;
        size_t len = strlen(label);
        cairo_text_extents(cr, label, &e);
        while (len > 4 && e.x_advance > w - 30) {
            len--;
            while (len > 0 && ((unsigned char)label[len] & 0xC0) == 0x80) len--;
            memcpy(label + len, "...", 4);
            cairo_text_extents(cr, label, &e);
        }
        text_at(cr, x + 28, yy, label, 0, 0.4);
    }
}

/* Draws the plot into a new surface of w x h (SVG when svg_path). */
static int render(const plot *p, const char *path, int svg, int w, int h) {
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
    /* the legend to the right, as wide as its longest label allows */
    cairo_set_font_size(cr, 11);
    double lw = 0;
    for (size_t t = 0; t < p->n_trials; t++) {
        cairo_text_extents_t e;
        cairo_text_extents(cr, p->s[0][t].label, &e);
        lw = fmax(lw, e.x_advance + 90);
    }
    lw = fmin(lw, w * 0.42);
    double pw = w - lw, ph = (double)h / p->n_metrics;
    double xlo, xhi;
    x_range(p, &xlo, &xhi);
    for (int k = 0; k < p->n_metrics; k++) draw_panel(cr, p, k, 0, ph * k, pw, ph, xlo, xhi);
    draw_legend(cr, p, pw + 4, 40, lw - 8);
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

/* -------------------------------------------------------------- the command */

static int parse_target(const char *s, long long *job, long long *trial) {
    char *end;
    errno = 0;
    int t = s[0] == 't';
    long long v = strtoll(s + t, &end, 10);
    if (!s[t] || *end || errno || v < 1) return -1;
    *(t ? trial : job) = v;
    return 0;
}

int bfctl_plot(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("%s  metric curves of a job's trials (or one trial): one line per trial, the "
                   "legend with its swept values, the best trial by the job's metric drawn "
                   "thicker with its best point ringed; one panel per --metric (default: the "
                   "job's metric); x is the step or the seconds since the first point; -o "
                   "names a .png or .svg (default NAME-JOB.png), --size its pixels (default "
                   "1000 wide, 600 tall for one panel and 480 more per further panel); a "
                   "metric a finished job never wrote is an error listing those it has; "
                   "prints the file's path\n",
                   usage_text);
            return 0;
        }
    plot p;
    memset(&p, 0, sizeof p);
    const char *out = NULL, *target = NULL;
    int w = 0, h = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--metric") && has) {
            if (p.n_metrics == PLOT_MAX_METRICS) {
                fprintf(stderr, "bfctl plot: at most %d --metric\n", PLOT_MAX_METRICS);
                return BF_EX_USAGE;
            }
            p.metrics[p.n_metrics++] = argv[++i];
        } else if (!strcmp(a, "--x") && has) {
            const char *v = argv[++i];
            if (strcmp(v, "step") && strcmp(v, "time")) {
                fprintf(stderr, "bfctl plot: --x must be step or time, got '%s'\n", v);
                return BF_EX_USAGE;
            }
            p.x_time = !strcmp(v, "time");
        } else if (!strcmp(a, "-o") && has) {
            out = argv[++i];
        } else if (!strcmp(a, "--size") && has) {
            if (sscanf(argv[++i], "%dx%d", &w, &h) != 2 || w < 200 || h < 150 || w > 8000 ||
                h > 8000) {
                fprintf(stderr, "bfctl plot: --size must be WxH within 200x150 .. 8000x8000\n");
                return BF_EX_USAGE;
            }
        } else if (a[0] != '-' && !target) {
            target = a;
        } else {
            fputs(usage_text, stderr);
            return BF_EX_USAGE;
        }
    }
    long long job = 0, trial = 0;
    if (!target || parse_target(target, &job, &trial)) {
        fputs(usage_text, stderr);
        return BF_EX_USAGE;
    }
    int svg = 0;
    if (out) {
        size_t n = strlen(out);
        svg = n > 4 && !strcmp(out + n - 4, ".svg");
        if (!svg && !(n > 4 && !strcmp(out + n - 4, ".png"))) {
            fprintf(stderr, "bfctl plot: -o must name a .png or .svg file, got '%s'\n", out);
            return BF_EX_USAGE;
        }
    }
    ctl_conn *c;
    char err[2048];
    if (ctl_connect(&c, err, sizeof err)) {
        fprintf(stderr, "bfctl: %s\n", err);
        return 1;
    }
    int rc = 1;
    json_t *jr = NULL, *br = NULL;
    if (trial) {
        json_t *tr;
        if (call_or_say(c, "trial", json_pack("{s:I}", "trial", (json_int_t)trial), &tr)) goto out;
        job = (long long)json_integer_value(json_object_get(tr, "job"));
        json_decref(tr);
    }
    if (call_or_say(c, "job", json_pack("{s:I}", "job", (json_int_t)job), &jr) ||
        call_or_say(c, "best", json_pack("{s:I, s:i}", "job", (json_int_t)job, "n", 1), &br))
        goto out;
    p.job = job;
    snprintf(p.name, sizeof p.name, "%s", json_string_value(json_object_get(jr, "name")));
    snprintf(p.metric, sizeof p.metric, "%s", json_string_value(json_object_get(jr, "metric")));
    snprintf(p.goal, sizeof p.goal, "%s", json_string_value(json_object_get(jr, "goal")));
    if (p.n_metrics == 0) p.metrics[p.n_metrics++] = p.metric;
    json_t *top = json_array_get(json_object_get(br, "trials"), 0);
    long long best = top ? (long long)json_integer_value(json_object_get(top, "id")) : 0;
    json_t *trials = json_object_get(jr, "trials");
    size_t nt = json_array_size(trials);
    for (int k = 0; k < p.n_metrics; k++) {
        p.s[k] = calloc(nt ? nt : 1, sizeof *p.s[k]);
        if (!p.s[k]) goto out;
    }
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t) {
        long long id = (long long)json_integer_value(json_object_get(t, "id"));
        if (trial && id != trial) continue;
        size_t ti = p.n_trials++;
        for (int k = 0; k < p.n_metrics; k++) {
            p.s[k][ti].trial = id;
            p.s[k][ti].best = id == best;
            params_label(json_object_get(t, "params"), id, p.s[k][ti].label,
                         sizeof p.s[k][ti].label);
        }
        if (load_trial(c, &p, ti, id)) goto out;
    }
    if (p.n_trials == 0) {
        fprintf(stderr, "bfctl plot: job %lld has no trials\n", job);
        goto out;
    }
    char def[300];
    if (!out) {
        char safe[128];
        size_t k = 0;
        for (const char *q = p.name; *q && k + 1 < sizeof safe; q++)
            safe[k++] = (*q == '/' || *q == ' ') ? '_' : *q;
        safe[k] = '\0';
        if (trial)
            snprintf(def, sizeof def, "%s-%lld-t%lld.png", safe, job, trial);
        else
            snprintf(def, sizeof def, "%s-%lld.png", safe, job);
        out = def;
    }
    /* a metric none of the trials wrote, on a job that writes no more: an
     * error naming the metrics it has (not a blank plot); '' never exists */
    json_t *states = json_object_get(jr, "states");
    int finished = !json_object_get(states, "PENDING") && !json_object_get(states, "RUNNING") &&
                   json_integer_value(json_object_get(jr, "to_propose")) <= 0;
    for (int k = 0; k < p.n_metrics; k++) {
        size_t pts = 0;
        for (size_t j = 0; j < p.n_trials; j++) pts += p.s[k][j].n;
        if (pts || (!finished && p.metrics[k][0])) continue;
        qsort(p.names, (size_t)p.n_names, sizeof *p.names, cmp_names);
        fprintf(stderr, "bfctl plot: %s %lld has no metric '%s'; ", trial ? "trial" : "job",
                trial ? trial : job, p.metrics[k]);
        if (p.n_names == 0) {
            fprintf(stderr, "it has no metric points at all\n");
        } else {
            fprintf(stderr, "it has:");
            for (int n = 0; n < p.n_names; n++) fprintf(stderr, " %s", p.names[n]);
            fprintf(stderr, "\n");
        }
        goto out;
    }
    /* the file must be writable before anything is drawn: the reason is
     * the errno of that open (a missing folder, a folder, no permission) */
    struct stat sb;
    int existed = stat(out, &sb) == 0;
    int fd = open(out, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0) {
        fprintf(stderr, "bfctl plot: cannot write %s: %s\n", out, strerror(errno));
        goto out;
    }
    int regular = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode);
    close(fd);
    if (!regular) {
        fprintf(stderr, "bfctl plot: cannot write %s: not a regular file\n", out);
        goto out;
    }
    if (!w) w = 1000, h = 600 * p.n_metrics - 120 * (p.n_metrics - 1);
    rc = render(&p, out, svg, w, h);
    if (rc && !existed) unlink(out); /* nothing half-written left behind */
    if (!rc) printf("%s\n", out);
out:
    for (int k = 0; k < p.n_metrics; k++) {
        for (size_t j = 0; p.s[k] && j < p.n_trials; j++) {
            free(p.s[k][j].x);
            free(p.s[k][j].y);
        }
        free(p.s[k]);
    }
    for (int n = 0; n < p.n_names; n++) free(p.names[n]);
    json_decref(jr);
    json_decref(br);
    ctl_close(&c);
    return rc;
}
