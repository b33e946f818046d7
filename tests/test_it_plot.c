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
    const char *bad[] = {"plot %lld --x epoch", "plot %lld -o p.jpg", "plot %lld --size 10x10",
                         "plot", "plot x%lld"};
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
