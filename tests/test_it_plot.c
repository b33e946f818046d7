/* test_it_plot — `bfctl plot` on a real finished sweep: the PNG decodes (with
 * cairo's PNG reader), has the requested size, is not blank and shows one
 * colour (hue) per trial — three for the job, one for a single trial; the
 * SVG parses as XML (Python's xml.etree) with the requested size; bad
 * options are refused with exit status 2. */
#include <cairo.h>
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctl/plot_draw.h"
#include "it_bfd.h"

static char g_dir[256], g_home[320];
static pid_t g_bfd = -1;

static void setup(void) {
    it_worker_env();
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-plot-XXXXXX");
    it_copy_glosses(g_dir);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), "slots: 2\nthreads_per_slot: 1\n", 0644);
}

static void teardown(void) {
    it_stop(&g_bfd, SIGKILL);
    if (tmpdir_remove(g_dir)) fprintf(stderr, "could not remove %s\n", g_dir);
}

TestSuite(plot, .init = setup, .fini = teardown, .timeout = 300);

/* Hue clusters of the saturated pixels: runs of 5-degree hue bins holding
 * at least 40 pixels each (antialiased edges keep their line's hue). */
static int hue_clusters(cairo_surface_t *s, double *ink) {
    int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
    int stride = cairo_image_surface_get_stride(s);
    const unsigned char *d = cairo_image_surface_get_data(s);
    long bins[72] = {0}, nonwhite = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint32_t px;
            memcpy(&px, d + (size_t)y * stride + 4 * (size_t)x, 4);
            double r = ((px >> 16) & 0xff) / 255.0, g = ((px >> 8) & 0xff) / 255.0,
                   b = (px & 0xff) / 255.0;
            double mx = fmax(r, fmax(g, b)), mn = fmin(r, fmin(g, b));
            if (mn < 0.98) nonwhite++;
            if (mx < 0.25 || (mx - mn) / mx < 0.35) continue;
            double hue;
            if (mx == r)
                hue = fmod((g - b) / (mx - mn) + 6, 6);
            else if (mx == g)
                hue = (b - r) / (mx - mn) + 2;
            else
                hue = (r - g) / (mx - mn) + 4;
            bins[(int)(hue * 60) / 5 % 72]++;
        }
    *ink = (double)nonwhite / ((double)w * h);
    int clusters = 0;
    for (int i = 0; i < 72; i++) {
        int on = bins[i] >= 40, prev = bins[(i + 71) % 72] >= 40;
        if (on && !prev) clusters++;
    }
    return clusters;
}

static void check_png(const char *path, int w, int h, int trials) {
    cairo_surface_t *s = cairo_image_surface_create_from_png(path);
    cr_assert_eq(cairo_surface_status(s), CAIRO_STATUS_SUCCESS, "%s does not decode: %s", path,
                 cairo_status_to_string(cairo_surface_status(s)));
    cr_assert_eq(cairo_image_surface_get_width(s), w);
    cr_assert_eq(cairo_image_surface_get_height(s), h);
    double ink;
    int n = hue_clusters(s, &ink);
    cairo_surface_destroy(s);
    cr_assert(ink > 0.01 && ink < 0.6, "%s: %.1f%% of the pixels are not white", path, ink * 100);
    cr_assert_eq(n, trials, "%s: %d line colours for %d trials", path, n, trials);
}

Test(plot, png_and_svg_of_a_finished_sweep) {
    g_bfd = it_bfd_start(g_dir, g_home);
    char sweep[512];
    snprintf(sweep, sizeof sweep, "%s/plot.yaml", g_dir);
    FILE *f = fopen(sweep, "w");
    cr_assert(f);
    fprintf(f,
            "name: plot-test\npipeline: budgetformer\ndevice: cpu\n"
            "data: {train: %s/train.tsv, val: %s/val.tsv}\n"
            "model: {layers: 1, d_model: 32, heads: 4, seq_len: 16, vocab: 256}\n"
            "train: {steps: 200, batch: 8, log_every: 5, eval_every: 50}\n"
            "sweep:\n  parameters:\n"
            "    budget.range: {values: [[0.1, 0.3], [0.3, 0.6], [1.0, 1.0]]}\n"
            "metric: {name: val/acc, goal: max}\n",
            g_dir, g_dir);
    cr_assert_eq(fclose(f), 0);
    long long job = it_submit(g_dir, sweep);
    char args[600], out[1024];
    snprintf(args, sizeof args, "wait %lld", job);
    cr_assert_eq(it_bfctl(g_dir, NULL, 0, args), 0);

    /* the job's metric by default, the default name, its path printed */
    snprintf(args, sizeof args, "plot %lld --size 800x500", job);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "%s", out);
    cr_assert_str_eq(out, "plot-test-1.png\n");
    check_png(tmpdir_path(g_dir, "plot-test-1.png"), 800, 500, 3);
    /* two panels against time */
    snprintf(args, sizeof args, "plot %lld --metric train/loss --metric val/acc --x time -o t.png",
             job);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "%s", out);
    check_png(tmpdir_path(g_dir, "t.png"), 1000, 1080, 3);
    /* the default size, as docs/daemon.md says: 1000 wide, 600 tall for one
     * panel and 480 more for each further one */
    snprintf(args, sizeof args, "plot %lld -o d1.png", job);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "%s", out);
    check_png(tmpdir_path(g_dir, "d1.png"), 1000, 600, 3);
    snprintf(args, sizeof args,
             "plot %lld --metric val/acc --metric train/loss --metric val/acc -o d3.png", job);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "%s", out);
    check_png(tmpdir_path(g_dir, "d3.png"), 1000, 1560, 3);
    /* one trial: one line */
    snprintf(args, sizeof args, "plot t2 --metric train/loss -o one.png --size 640x400");
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "%s", out);
    check_png(tmpdir_path(g_dir, "one.png"), 640, 400, 1);

    /* --best 1: one curve in colour, the others grey; --smooth and --logy */
    snprintf(args, sizeof args, "plot %lld --best 1 --smooth 0.6 -o b1.png", job);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "%s", out);
    check_png(tmpdir_path(g_dir, "b1.png"), 1000, 600, 1);
    snprintf(args, sizeof args, "plot %lld --metric train/loss --logy --smooth 0.9 -o l.png", job);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "%s", out);
    check_png(tmpdir_path(g_dir, "l.png"), 1000, 600, 3);

    /* SVG: well-formed XML of the requested size */
    snprintf(args, sizeof args, "plot %lld -o p.svg --size 700x450", job);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0, "%s", out);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import sys, xml.etree.ElementTree as E; "
             "r = E.parse(sys.argv[1]).getroot(); "
             "assert r.tag.endswith('svg'), r.tag; "
             "assert r.get('width').startswith('700') and r.get('height').startswith('450'); "
             "assert len(list(r.iter())) > 50\" %s/p.svg",
             g_dir);
    cr_assert_eq(system(cmd), 0, "the SVG does not parse as an SVG of 700x450");

    /* refused, with usage errors */
    const char *bad[] = {"plot %lld --x epoch",
                         "plot %lld -o p.jpg",
                         "plot %lld --size 10x10",
                         "plot",
                         "plot x%lld",
                         "plot %lld --smooth 1",
                         "plot %lld --smooth -0.1",
                         "plot %lld --best 0",
                         "plot %lld --best x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, bad[i], job);
        cr_assert_eq(it_bfctl(g_dir, NULL, 0, args), 64, "'%s' must be a usage error (64)", args);
    }
    /* a file that cannot be written: exit 1 with the open's errno text
     * (not cairo's "no error has occurred"), nothing drawn, nothing left */
    struct {
        const char *o, *why;
    } unwritable[] = {{"/nonexistent/dir/p.png", "No such file or directory"},
                      {"missing_dir/x.png", "No such file or directory"},
                      {"adir.png", "Is a directory"}};
    char adir[400];
    snprintf(adir, sizeof adir, "%s/adir.png", g_dir);
    cr_assert_eq(mkdir(adir, 0755), 0);
    for (size_t i = 0; i < sizeof unwritable / sizeof unwritable[0]; i++) {
        char errf[400];
        snprintf(errf, sizeof errf, "%s/bfctl.err", g_dir);
        cr_assert_eq(truncate(errf, 0), 0);
        snprintf(args, sizeof args, "plot %lld -o %s", job, unwritable[i].o);
        cr_assert_eq(it_bfctl(g_dir, NULL, 0, args), 1, "'%s'", args);
        char e[2048] = "";
        FILE *ef = fopen(errf, "r");
        cr_assert(ef);
        size_t n = fread(e, 1, sizeof e - 1, ef);
        e[n] = '\0';
        fclose(ef);
        cr_assert(strstr(e, unwritable[i].why) && strstr(e, unwritable[i].o) &&
                      !strstr(e, "no error has occurred"),
                  "'%s' says: %s", args, e);
    }

    /* a metric the finished job never wrote ('' included): exit 1, no file,
     * and the message lists the metrics it has */
    const char *missing[] = {"val/nonexistent", "''"};
    for (size_t i = 0; i < 2; i++) {
        char errf[400];
        snprintf(errf, sizeof errf, "%s/bfctl.err", g_dir);
        cr_assert_eq(truncate(errf, 0), 0);
        snprintf(args, sizeof args, "plot %lld --metric %s -o none.png", job, missing[i]);
        cr_assert_eq(it_bfctl(g_dir, NULL, 0, args), 1, "'%s' must fail", args);
        struct stat sb;
        cr_assert_neq(stat(tmpdir_path(g_dir, "none.png"), &sb), 0, "'%s' wrote a file", args);
        char e[4096] = "";
        FILE *ef = fopen(errf, "r");
        cr_assert(ef);
        size_t n = fread(e, 1, sizeof e - 1, ef);
        e[n] = '\0';
        fclose(ef);
        cr_assert(strstr(e, "has no metric") && strstr(e, "train/loss") && strstr(e, "val/acc"),
                  "'%s' says: %s", args, e);
    }
    /* with one good metric beside a missing one it fails too */
    snprintf(args, sizeof args, "plot %lld --metric val/acc --metric val/nope -o none.png", job);
    cr_assert_eq(it_bfctl(g_dir, NULL, 0, args), 1);
}

/* ------------------------------------------- synthetic plots (no daemon) */

/* A plot of n trials of one metric, trial t a line from (0, t+1) to
 * (100, t+2) over 20 points; labels "tN  a=G" with group G = t / per. */
static plot *synthetic(size_t n, size_t per) {
    plot *p = calloc(1, sizeof *p);
    cr_assert(p);
    p->job = 1;
    snprintf(p->name, sizeof p->name, "synthetic");
    snprintf(p->metric, sizeof p->metric, "loss");
    snprintf(p->goal, sizeof p->goal, "min");
    p->metrics[0] = "loss";
    p->n_metrics = 1;
    p->s[0] = calloc(n, sizeof *p->s[0]);
    cr_assert(p->s[0]);
    p->n_trials = n;
    for (size_t t = 0; t < n; t++) {
        plot_series *s = &p->s[0][t];
        s->trial = (long long)t + 1;
        s->ranked = 1;
        snprintf(s->group, sizeof s->group, "a=%zu", t / per);
        snprintf(s->label, sizeof s->label, "t%zu  %s", t + 1, s->group);
        s->n = s->cap = 20;
        s->x = malloc(20 * sizeof *s->x);
        s->y = malloc(20 * sizeof *s->y);
        cr_assert(s->x && s->y);
        for (int i = 0; i < 20; i++) s->x[i] = 5.0 * i, s->y[i] = (double)t + 1 + i / 19.0;
    }
    p->s[0][0].best = 1;
    return p;
}

static void synthetic_free(plot *p) {
    for (size_t t = 0; t < p->n_trials; t++) free(p->s[0][t].x), free(p->s[0][t].y);
    free(p->s[0]);
    free(p);
}

/* Pixels of exactly colour c (as a PNG stores it) with x in [x0, x1). */
static long exact_pixels(cairo_surface_t *s, const double c[3], int x0, int x1) {
    int h = cairo_image_surface_get_height(s), stride = cairo_image_surface_get_stride(s);
    const unsigned char *d = cairo_image_surface_get_data(s);
    uint32_t want = (uint32_t)lround(c[0] * 255) << 16 | (uint32_t)lround(c[1] * 255) << 8 |
                    (uint32_t)lround(c[2] * 255);
    long n = 0;
    for (int y = 0; y < h; y++)
        for (int x = x0; x < x1; x++) {
            uint32_t px;
            memcpy(&px, d + (size_t)y * stride + 4 * (size_t)x, 4);
            n += (px & 0xffffff) == want;
        }
    return n;
}

static cairo_surface_t *render_png(plot *p, const char *name, int w, int h) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/bf-plot-synth-%d-%s", (int)getpid(), name);
    cr_assert_eq(plot_render(p, path, 0, w, h), 0, "%s", path);
    cairo_surface_t *s = cairo_image_surface_create_from_png(path);
    cr_assert_eq(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
    unlink(path);
    return s;
}

/* --smooth K: TensorBoard's debiased EMA, checked against its closed form
 * s_i = sum_j<=i (1-w) w^(i-j) y_j / (1 - w^(i+1)). */
Test(plot_draw, ema_is_tensorboards) {
    const double y[] = {1, 3, 2, 5, 4, 0, 7, -2, 10};
    const size_t n = sizeof y / sizeof y[0];
    const double ws[] = {0, 0.3, 0.6, 0.99};
    for (size_t k = 0; k < 4; k++) {
        double out[16], w = ws[k];
        plot_ema(y, n, w, out);
        for (size_t i = 0; i < n; i++) {
            double num = 0;
            for (size_t j = 0; j <= i; j++) num += (1 - w) * pow(w, (double)(i - j)) * y[j];
            double want = num / (1 - pow(w, (double)i + 1));
            cr_assert(fabs(out[i] - want) < 1e-9 * fmax(1, fabs(want)), "w=%g i=%zu: %g, want %g",
                      w, i, out[i], want);
        }
    }
    /* the first point is the first value (debiased), w = 0 is the raw series */
    double out[16];
    plot_ema(y, n, 0.9, out);
    cr_assert(fabs(out[0] - 1) < 1e-12);
    /* a non-finite value passes through and does not count */
    const double z[] = {2, NAN, 4};
    plot_ema(z, 3, 0.5, out);
    cr_assert(isnan(out[1]));
    cr_assert(fabs(out[2] - (0.25 * 2 + 0.5 * 4) / 0.75) < 1e-12, "%g", out[2]);
}

/* 30 trials: 30 distinct colours, each trial's swatch in the legend in its
 * exact colour, the legend right of the curves; the 64 colours of the
 * palette are distinct and none is the grey of --best. */
Test(plot_draw, thirty_trials_thirty_colours) {
    for (size_t i = 0; i < PLOT_PALETTE; i++) {
        double a[3];
        plot_palette(i, a);
        cr_assert(fmax(fabs(a[0] - a[1]), fmax(fabs(a[1] - a[2]), fabs(a[0] - a[2]))) > 0.1,
                  "colour %zu is a grey", i);
        for (size_t j = 0; j < i; j++) {
            double b[3];
            plot_palette(j, b);
            double d = fmax(fabs(a[0] - b[0]), fmax(fabs(a[1] - b[1]), fabs(a[2] - b[2])));
            cr_assert(d > 0.08, "colours %zu and %zu are alike (%.3f)", j, i, d);
        }
    }
    plot *p = synthetic(30, 1);
    int w = 1200, h = 700;
    double right, lx;
    plot_layout(p, w, h, &right, &lx);
    cr_assert(lx >= right && right >= w * 0.69, "legend at %g, curves to %g", lx, right);
    cairo_surface_t *s = render_png(p, "30.png", w, h);
    for (size_t t = 0; t < 30; t++) {
        double c[3];
        plot_trial_colour(p, t, c);
        for (size_t u = 0; u < t; u++) {
            double d[3];
            plot_trial_colour(p, u, d);
            cr_assert(c[0] != d[0] || c[1] != d[1] || c[2] != d[2], "t%zu and t%zu alike", u, t);
        }
        long n = exact_pixels(s, c, (int)lx, w);
        cr_assert(n >= 22 * 3, "trial %zu's colour: %ld legend pixels", t, n);
    }
    cairo_surface_destroy(s);
    synthetic_free(p);
}

/* --best N: exactly N curves in colour, the rest grey. */
Test(plot_draw, best_n_colours_n_curves) {
    plot *p = synthetic(10, 1);
    p->best_n = 3;
    for (size_t t = 0; t < 10; t++) p->s[0][t].ranked = t == 0 || t == 2 || t == 3;
    int w = 1000, h = 600;
    double right, lx;
    plot_layout(p, w, h, &right, &lx);
    cairo_surface_t *s = render_png(p, "best.png", w, h);
    int coloured = 0, grey = 0;
    for (size_t t = 0; t < 10; t++) {
        double c[3], own[3];
        plot_trial_colour(p, t, c);
        plot_palette(t, own);
        int g = c[0] == plot_grey[0] && c[1] == plot_grey[1] && c[2] == plot_grey[2];
        grey += g;
        /* its own colour shows (legend swatch) only when it is ranked */
        long n = exact_pixels(s, own, 0, w);
        if (n > 0) coloured++;
        cr_assert_eq(n > 0, !g, "trial %zu: %ld pixels of its colour, grey %d", t, n, g);
    }
    cr_assert_eq(coloured, 3);
    cr_assert_eq(grey, 7);
    cr_assert(exact_pixels(s, plot_grey, (int)lx, w) >= 7 * 22 * 3, "grey swatches");
    double ink;
    cr_assert_eq(hue_clusters(s, &ink), 3, "three hues: blue, green, red");
    cairo_surface_destroy(s);
    synthetic_free(p);
}

/* --logy: points <= 0 are left out (counted for the note bfctl prints);
 * a series with only such points draws an empty panel, not an error. */
Test(plot_draw, logy_skips_points_not_above_zero) {
    plot *p = synthetic(2, 1);
    p->logy = 1;
    p->s[0][0].y[3] = 0;
    p->s[0][1].y[5] = -1;
    p->s[0][1].y[6] = 0;
    cairo_surface_t *s = render_png(p, "logy.png", 800, 500);
    cr_assert_eq(p->skipped[0], 3);
    double ink;
    cr_assert_eq(hue_clusters(s, &ink), 2);
    cairo_surface_destroy(s);
    for (size_t t = 0; t < 2; t++)
        for (size_t i = 0; i < 20; i++) p->s[0][t].y[i] = 0;
    s = render_png(p, "logy0.png", 800, 500);
    cr_assert_eq(p->skipped[0], 40);
    cairo_surface_destroy(s);
    /* with --smooth too: smoothed in linear space, drawn in log space */
    p->smooth = 0.6;
    for (size_t i = 0; i < 20; i++) p->s[0][0].y[i] = pow(10, (double)i / 4);
    s = render_png(p, "logys.png", 800, 500);
    cr_assert_eq(p->skipped[0], 20);
    cairo_surface_destroy(s);
    synthetic_free(p);
}

/* Past 64 trials, colours go by group (the first swept value): 70 trials in
 * 7 groups of 10, one colour and one legend entry per group. */
Test(plot_draw, past_64_by_group) {
    plot *p = synthetic(70, 10);
    for (size_t t = 0; t < 70; t++) {
        double c[3], g[3];
        plot_trial_colour(p, t, c);
        plot_palette(t / 10, g);
        cr_assert(c[0] == g[0] && c[1] == g[1] && c[2] == g[2], "t%zu", t);
    }
    cairo_surface_t *s = render_png(p, "70.png", 1000, 600);
    double right, lx;
    plot_layout(p, 1000, 600, &right, &lx);
    for (size_t g = 0; g < 7; g++) {
        double c[3];
        plot_palette(g, c);
        cr_assert(exact_pixels(s, c, (int)lx, 1000) >= 22 * 3, "group %zu", g);
    }
    cairo_surface_destroy(s);
    synthetic_free(p);
}
