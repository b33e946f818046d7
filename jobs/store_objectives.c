/* store_objectives.c — the objectives of a job (its `metric:`, one entry or
 * several): written with the job at submit as a JSON array
 * [{"name": NAME, "goal": "min"|"max"}, ...] in jobs.objectives, and read
 * back for bfd, bfctl and the dashboard. It never ranks a trial (that is
 * jobs/pareto.c) and changes no other column. */
#include "jobs/store_priv.h"
#include "common/errbuf.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

int store_objectives_text(const sweep_spec *spec, char *buf, size_t len) {
    size_t w = 0;
    int n = spec->n_objectives > 0 ? spec->n_objectives : 1;
    w += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < n && w < len; i++) {
        const char *name = spec->n_objectives > 0 ? spec->objectives[i].name : spec->metric_name;
        int max = spec->n_objectives > 0 ? spec->objectives[i].maximize : spec->metric_maximize;
        /* names are letters, digits and /_.-@ (sweep.c): nothing to escape */
        w += (size_t)snprintf(buf + w, len - w, "%s{\"name\": \"%s\", \"goal\": \"%s\"}",
                              i ? ", " : "", name, max ? "max" : "min");
    }
    if (w < len) w += (size_t)snprintf(buf + w, len - w, "]");
    return w >= len ? -1 : 0;
}

int store_objectives_parse(const char *text, sweep_objective out[SWEEP_MAX_OBJECTIVES], int *n) {
    *n = 0;
    json_error_t je;
    json_t *a = text && text[0] ? json_loads(text, 0, &je) : NULL;
    if (!json_is_array(a)) {
        json_decref(a);
        return -1;
    }
    size_t i;
    json_t *o;
    json_array_foreach(a, i, o) {
        const char *name = json_string_value(json_object_get(o, "name"));
        const char *goal = json_string_value(json_object_get(o, "goal"));
        if (!name || !goal || *n == SWEEP_MAX_OBJECTIVES) {
            json_decref(a);
            return -1;
        }
        snprintf(out[*n].name, sizeof out[*n].name, "%s", name);
        out[*n].maximize = strcmp(goal, "max") == 0;
        (*n)++;
    }
    json_decref(a);
    return *n > 0 ? 0 : -1;
}

int store_job_objectives(store *s, int64_t job, sweep_objective out[SWEEP_MAX_OBJECTIVES], int *n,
                         char *err, size_t errlen) {
    *n = 0;
    sqlite3_stmt *st;
    if (store_prepare(s, "SELECT objectives, metric_name, metric_goal FROM jobs WHERE id = ?1", &st,
                      err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, job);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW &&
        store_objectives_parse((const char *)sqlite3_column_text(st, 0), out, n) < 0) {
        /* not a list this build reads: the job's one metric */
        store_col_text(st, 1, out[0].name, sizeof out[0].name);
        const char *goal = (const char *)sqlite3_column_text(st, 2);
        out[0].maximize = goal && strcmp(goal, "max") == 0;
        *n = 1;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        store_sqlfail(s, err, errlen, "sqlite3_step(SELECT jobs.objectives)");
    store_done(s, st);
    if (rc == SQLITE_DONE) return bf_fail(err, errlen, "no job with id %lld", (long long)job);
    return rc == SQLITE_ROW ? 0 : -1;
}
