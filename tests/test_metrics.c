/* metrics.jsonl holds whole lines only (worker/link/metrics.c): a partial
 * last line left by a kill or a full disk is cut off before a new attempt
 * appends, and a write that fails part-way (the file size limit stands in
 * for a full disk: write() stops short, then fails) is taken back, so
 * every line of the file parses whatever happened to it. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "tmpdir.h"
#include "worker/link/metrics.h"

/* Every line of path parses as JSON and ends with a newline; returns the
 * number of lines and the step of the last in *last_step. */
static int whole_lines(const char *path, long *last_step) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        size_t len = strlen(line);
        cr_assert(len > 0 && line[len - 1] == '\n', "%s:%d has no newline: '%s'", path, n, line);
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        cr_assert_not_null(o, "%s:%d: %s: '%s'", path, n, je.text, line);
        *last_step = (long)json_integer_value(json_object_get(o, "step"));
        json_decref(o);
    }
    fclose(f);
    return n;
}

static void write_line(metrics *m, long step) {
    metrics_begin(m, step);
    metrics_add(m, "train/loss", 1.0 / (double)(step + 1));
    metrics_flush(m);
}

Test(metrics, a_partial_last_line_is_cut_before_appending) {
    char dir[256], path[400];
    tmpdir_make(dir, sizeof dir, "/tmp/bf-metrics-XXXXXX");
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("{\"step\": 5, \"time\": 1.0, \"train/loss\": 2.5}\n{\"step\": 10, \"ti", f);
    fclose(f);
    metrics_set_tensorboard(0);
    metrics m;
    char err[256];
    cr_assert_eq(metrics_open(&m, dir, err, sizeof err), 0, "%s", err);
    write_line(&m, 10);
    metrics_close(&m);
    long last = -1;
    cr_assert_eq(whole_lines(path, &last), 2, "the whole line kept, the cut one gone");
    cr_assert_eq(last, 10);
    /* a file of one partial line only */
    f = fopen(path, "w");
    fputs("{\"step\": 5, \"ti", f);
    fclose(f);
    cr_assert_eq(metrics_open(&m, dir, err, sizeof err), 0, "%s", err);
    write_line(&m, 15);
    metrics_close(&m);
    cr_assert_eq(whole_lines(path, &last), 1);
    cr_assert_eq(last, 15);
    tmpdir_remove(dir);
}

Test(metrics, a_write_cut_short_is_taken_back) {
    char dir[256], path[400];
    tmpdir_make(dir, sizeof dir, "/tmp/bf-metrics-XXXXXX");
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    metrics_set_tensorboard(0);
    metrics m;
    char err[256];
    cr_assert_eq(metrics_open(&m, dir, err, sizeof err), 0, "%s", err);
    write_line(&m, 0);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    /* room for 10 more bytes: the next line (about 50) is cut short */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {.rlim_cur = (rlim_t)st.st_size + 10, .rlim_max = RLIM_INFINITY};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    write_line(&m, 5);
    cr_assert_neq(metrics_status(&m, err, sizeof err), 0, "the failed write is reported");
    cr_assert(strstr(err, "metrics.jsonl"), "%s", err);
    rl.rlim_cur = RLIM_INFINITY;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    write_line(&m, 10); /* the run ends on the failure: nothing more is written */
    metrics_close(&m);
    long last = -1;
    cr_assert_eq(whole_lines(path, &last), 1, "only the line written whole");
    cr_assert_eq(last, 0);
    /* the retry appends after whole lines */
    cr_assert_eq(metrics_open(&m, dir, err, sizeof err), 0, "%s", err);
    write_line(&m, 5);
    metrics_close(&m);
    cr_assert_eq(whole_lines(path, &last), 2);
    cr_assert_eq(last, 5);
    tmpdir_remove(dir);
}
