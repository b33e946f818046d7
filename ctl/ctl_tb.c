/* bfctl export JOB --tensorboard DIR: a job's stored points as TensorBoard
 * event files, DIR/NAME-JOB/ (the HParams experiment) and
 * DIR/NAME-JOB/tTRIAL/ (each trial's scalars, session start and end): the
 * layout bfd writes live into $BF_HOME/tensorboard. Read from bfd with
 * `job` and paged `metrics` requests. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/tfevents.h"
#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"

#define TB_PAGE 10000 /* points per `metrics` request (the protocol's cap) */

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Writes one page of points (values in name order, as bfd stores them);
 * *first and *last get the first and last point's time. */
static int write_points(tfevents *w, json_t *points, double *first, double *last, long long *n,
                        char *err, size_t errlen) {
    size_t i;
    json_t *p;
    json_array_foreach(points, i, p) {
        json_t *vals = json_object_get(p, "values");
        size_t nv = json_object_size(vals), k = 0;
        const char **names = malloc((nv ? nv : 1) * sizeof *names);
        if (!names) return snprintf(err, errlen, "out of memory"), -1;
        const char *name;
        json_t *v;
        json_object_foreach(vals, name, v) if (json_is_number(v)) names[k++] = name;
        qsort(names, k, sizeof *names, cmp_name);
        long long step = (long long)json_integer_value(json_object_get(p, "step"));
        double time = json_number_value(json_object_get(p, "time"));
        if (*first == 0) *first = time;
        *last = time;
        int rc = 0;
        for (size_t j = 0; j < k && !rc; j++)
            rc = tfevents_scalar(w, names[j], step, time,
                                 json_number_value(json_object_get(vals, names[j])), err, errlen);
        free(names);
        if (rc) return -1;
        *n += (long long)k;
    }
    return 0;
}

/* One trial's run folder. */
static int export_trial(ctl_conn *c, const char *jobdir, json_t *t, double job_time) {
    char err[1024], dir[4200];
    long long id = (long long)json_integer_value(json_object_get(t, "id"));
    const char *state = json_string_value(json_object_get(t, "state"));
    snprintf(dir, sizeof dir, "%s/t%lld", jobdir, id);
    tfevents *w;
    if (tfevents_create(dir, job_time, &w, err, sizeof err) ||
        tfevents_session_start(w, json_object_get(t, "params"), "", job_time, err, sizeof err)) {
        fprintf(stderr, "bfctl export: %s\n", err);
        if (w) tfevents_close(&w, err, sizeof err);
        return 1;
    }
    long long after = 0, n = 0;
    double first = 0, last = job_time;
    int rc = 0;
    for (;;) {
        json_t *m;
        if (ctl_call_or_say(c, "metrics",
                            json_pack("{s:I, s:I, s:i}", "trial", (json_int_t)id, "after",
                                      (json_int_t)after, "limit", TB_PAGE),
                            &m)) {
            rc = 1;
            break;
        }
        if (write_points(w, json_object_get(m, "points"), &first, &last, &n, err, sizeof err)) {
            fprintf(stderr, "bfctl export: %s\n", err);
            json_decref(m);
            rc = 1;
            break;
        }
        long long l = (long long)json_integer_value(json_object_get(m, "last"));
        int more = json_is_true(json_object_get(m, "more")) && l > after;
        json_decref(m);
        after = l;
        if (!more) break;
    }
    int ok = state && (!strcmp(state, "COMPLETED") || !strcmp(state, "STOPPED"));
    int bad = state && (!strcmp(state, "FAILED") || !strcmp(state, "CANCELLED"));
    if (!rc && (ok || bad) &&
        tfevents_session_end(w, ok ? TFEVENTS_STATUS_SUCCESS : TFEVENTS_STATUS_FAILURE, last, err,
                             sizeof err)) {
        fprintf(stderr, "bfctl export: %s\n", err);
        rc = 1;
    }
    if (tfevents_close(&w, err, sizeof err) && !rc) {
        fprintf(stderr, "bfctl export: %s\n", err);
        rc = 1;
    }
    if (!rc) fprintf(stderr, "t%lld: %lld scalars\n", id, n);
    return rc;
}

int ctl_export_tensorboard(long long job, const char *dir) {
    ctl_conn *c;
    char err[2048];
    if (ctl_connect(&c, err, sizeof err)) {
        fprintf(stderr, "bfctl: %s\n", err);
        return 1;
    }
    json_t *jr;
    if (ctl_request_pages(c, "job", json_pack("{s:I}", "job", (json_int_t)job), "trials", &jr)) {
        ctl_close(&c);
        return 1;
    }
    const char *name = json_string_value(json_object_get(jr, "name"));
    const char *metric = json_string_value(json_object_get(jr, "metric"));
    double submitted = json_number_value(json_object_get(jr, "submitted"));
    json_t *trials = json_object_get(jr, "trials");
    char jobdir[4096];
    int rc = 0;
    struct stat sb;
    if (tfevents_job_dir(jobdir, sizeof jobdir, dir, name ? name : "job", job)) {
        fprintf(stderr, "bfctl export: folder name too long under %s\n", dir);
        rc = 1;
    } else if (stat(jobdir, &sb) == 0) {
        fprintf(stderr,
                "bfctl export: %s already exists; remove it or name another folder (a second "
                "export into it would repeat every point)\n",
                jobdir);
        rc = 1;
    }
    if (!rc) {
        json_t *all = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(trials, i, t) json_array_append(all, json_object_get(t, "params"));
        const char *metrics[2] = {metric ? metric : "train/loss", "train/loss"};
        size_t nm = strcmp(metrics[0], "train/loss") == 0 ? 1 : 2;
        tfevents *w = NULL;
        if (tfevents_create(jobdir, submitted, &w, err, sizeof err) ||
            tfevents_experiment(w, name ? name : "job", all, metrics, nm, submitted, err,
                                sizeof err) ||
            tfevents_close(&w, err, sizeof err)) {
            fprintf(stderr, "bfctl export: %s\n", err);
            if (w) tfevents_close(&w, err, sizeof err);
            rc = 1;
        }
        json_decref(all);
        json_array_foreach(trials, i, t) {
            if (rc) break;
            rc = export_trial(c, jobdir, t, submitted);
        }
    }
    if (!rc) printf("%s\n", jobdir);
    json_decref(jr);
    ctl_close(&c);
    return rc;
}
