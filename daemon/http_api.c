/* http_api.c — the GETs of /api/v1/ that the store answers, and a job's
 * event stream (see http_api.h). Read-only SQL on the dashboard's own
 * connection; every list is a bare JSON array of flat records (what
 * pandas.read_json makes a table of) paged by ?after= and ?limit=. */
#include "daemon/http_api.h"
#include "common/errbuf.h"
#include "common/tfevents.h"
#include "jobs/pareto.h"
#include "jobs/front.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define DEFAULT_LIMIT 1000
#define DEFAULT_MAX_POINTS 2000
#define MAX_POINTS_CAP 100000    /* ?max_points= at most */
#define JOB_CURVES_MAX 500       /* trials in one /jobs/J/points answer */
#define FILES_MAX 500            /* entries listed of a trial's folder */
#define STREAM_POINTS_MAX 2000   /* points in one stream poll */
#define STREAM_TRIALS_MAX 4096   /* trials a stream follows */
#define STREAM_ID_MAX 8192       /* bytes of a record's id (the cursor) */
#define PARETO_TRIALS_MAX 100000 /* completed trials ranked by one /jobs/J/pareto */
#define FRONT_TRIALS_MAX 20000   /* trials of one job ranked for groups and compare */
#define BAND_TRIALS_MAX 500      /* trials of one band */

static int prep(sqlite3 *db, const char *sql, sqlite3_stmt **st, char *err, size_t errlen) {
    if (sqlite3_prepare_v2(db, sql, -1, st, NULL) == SQLITE_OK) return 0;
    return bf_fail(err, errlen, "sqlite3_prepare_v2: %s", sqlite3_errmsg(db));
}

/* A column as JSON: integer, real, text or null. */
static json_t *col_json(sqlite3_stmt *st, int i) {
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER:
        return json_integer(sqlite3_column_int64(st, i));
    case SQLITE_FLOAT:
        return json_real(sqlite3_column_double(st, i));
    case SQLITE_TEXT:
        return json_string((const char *)sqlite3_column_text(st, i));
    default:
        return json_null();
    }
}

/* ?key= as an integer in [lo, hi] (def when absent): 0, or -1 with err. */
static int arg_int(http_arg_fn arg, void *cls, const char *key, long long def, long long lo,
                   long long hi, long long *out, char *err, size_t errlen) {
    const char *s = arg(cls, key);
    *out = def;
    if (!s) return 0;
    char *end;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end || x < lo || x > hi)
        return bf_fail(err, errlen, "?%s must be an integer in [%lld, %lld], got '%.40s'", key, lo,
                       hi, s);
    *out = x;
    return 0;
}

/* A list of positive ids separated by commas ("3,7,12", no spaces) into
 * ids[max]: how many, or 0 when list is empty or malformed or holds more
 * than max. */
static size_t id_list(const char *list, long long *ids, size_t max) {
    size_t n = 0;
    for (const char *p = list; *p;) {
        char *end;
        long long id = strtoll(p, &end, 10);
        if (end == p || id < 1 || (*end && *end != ',') || n == max) return 0;
        ids[n++] = id;
        p = *end ? end + 1 : end;
    }
    return n;
}

/* The id of metric name (0 when no point has it yet), or -1 with err. */
static long long metric_id(sqlite3 *db, const char *name, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (prep(db, "SELECT id FROM metric_names WHERE name = ?1", &st, err, errlen)) return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    long long id = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return id;
}

/* 200 when the store has a row of table (jobs or trials) with id, else 404
 * (or 500) with err. */
static unsigned exists(sqlite3 *db, const char *table, long long id, char *err, size_t errlen) {
    sqlite3_stmt *st;
    /* a job hidden while a submit writes it or its removal runs is not there */
    const char *sql = !strcmp(table, "jobs") ? "SELECT 1 FROM jobs WHERE id = ?1 AND hidden = 0"
                                             : "SELECT 1 FROM trials t JOIN jobs j ON j.id = t.job"
                                               " WHERE t.id = ?1 AND j.hidden = 0";
    if (prep(db, sql, &st, err, errlen)) return 500;
    sqlite3_bind_int64(st, 1, id);
    int found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    if (found) return 200;
    bf_fail(err, errlen, "no %s %lld", !strcmp(table, "jobs") ? "job" : "trial", id);
    return 404;
}

/* ------------------------------------------------------------------- jobs */

#define JOB_COLS                                                                                   \
    "SELECT id, name, pipeline, method, metric_name, metric_goal, submitted, n_trials, parallel,"  \
    " closed, priority, objectives FROM jobs"

/* A job's record from a JOB_COLS row: with its states and best value. */
static json_t *job_record(sqlite3 *db, sqlite3_stmt *row, char *err, size_t errlen) {
    static const char *names[] = {"id",           "name",   "pipeline",  "method",
                                  "metric",       "goal",   "submitted", "n_trials",
                                  "max_parallel", "closed", "priority"};
    json_t *o = json_object();
    for (int i = 0; i < 11; i++) json_object_set_new(o, names[i], col_json(row, i));
    long long id = sqlite3_column_int64(row, 0);
    const char *metric = (const char *)sqlite3_column_text(row, 4);
    const char *goal = (const char *)sqlite3_column_text(row, 5);
    /* the job's objectives as submitted (jobs.objectives, jobs/store_objectives.c);
     * the one metric when the column holds no list */
    const char *objs = (const char *)sqlite3_column_text(row, 11);
    json_error_t je;
    json_t *list = objs && objs[0] ? json_loads(objs, 0, &je) : NULL;
    if (!json_is_array(list) || json_array_size(list) == 0) {
        json_decref(list);
        list = json_pack("[{s:s, s:s}]", "name", metric ? metric : "", "goal", goal ? goal : "min");
    }
    json_object_set_new(o, "objectives", list);
    sqlite3_stmt *st;
    json_t *states = json_object();
    json_object_set_new(o, "states", states);
    /* the counts the store's triggers keep (trial_counts, jobs/store.c), as
     * `ls` and status read them: counting a 100,000-trial job's trials took
     * the dashboard's thread 40-110 ms a job record */
    if (prep(db, "SELECT state, n FROM trial_counts WHERE job = ?1 AND n > 0", &st, err, errlen)) {
        json_decref(o);
        return NULL;
    }
    sqlite3_bind_int64(st, 1, id);
    while (sqlite3_step(st) == SQLITE_ROW)
        json_object_set_new(states, (const char *)sqlite3_column_text(st, 0),
                            json_integer(sqlite3_column_int64(st, 1)));
    sqlite3_finalize(st);
    if (prep(db,
             "SELECT MIN(ml.vmin), MAX(ml.vmax) FROM metric_latest ml JOIN trials t ON t.id ="
             " ml.trial WHERE t.job = ?1 AND ml.name = (SELECT id FROM metric_names WHERE name ="
             " ?2)",
             &st, err, errlen)) {
        json_decref(o);
        return NULL;
    }
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, metric ? metric : "", -1, SQLITE_TRANSIENT);
    json_t *best = json_null();
    if (sqlite3_step(st) == SQLITE_ROW) {
        json_decref(best);
        best = col_json(st, goal && !strcmp(goal, "max") ? 1 : 0);
    }
    sqlite3_finalize(st);
    json_object_set_new(o, "best", best);
    return o;
}

static unsigned get_jobs(sqlite3 *db, http_arg_fn arg, void *cls, json_t **out, char *next,
                         size_t nextlen, char *err, size_t errlen) {
    long long after, limit;
    if (arg_int(arg, cls, "after", 0, 0, 1LL << 53, &after, err, errlen) ||
        arg_int(arg, cls, "limit", DEFAULT_LIMIT, 1, HTTP_API_MAX_LIMIT, &limit, err, errlen))
        return 400;
    sqlite3_stmt *st;
    if (prep(db, JOB_COLS " WHERE hidden = 0 AND id > ?1 ORDER BY id LIMIT ?2", &st, err, errlen))
        return 500;
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int64(st, 2, limit);
    json_t *a = json_array();
    long long last = 0, n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *j = job_record(db, st, err, errlen);
        if (!j) break;
        last = sqlite3_column_int64(st, 0);
        json_array_append_new(a, j);
        n++;
    }
    sqlite3_finalize(st);
    if (n == limit) snprintf(next, nextlen, "%lld", last);
    *out = a;
    return 200;
}

static unsigned get_job(sqlite3 *db, long long id, json_t **out, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (prep(db, JOB_COLS " WHERE hidden = 0 AND id = ?1", &st, err, errlen)) return 500;
    sqlite3_bind_int64(st, 1, id);
    unsigned code = 404;
    if (sqlite3_step(st) == SQLITE_ROW) {
        *out = job_record(db, st, err, errlen);
        code = *out ? 200 : 500;
    } else {
        bf_fail(err, errlen, "no job %lld", id);
    }
    sqlite3_finalize(st);
    return code;
}

/* ----------------------------------------------------------------- trials */

/* The record of trial id in recs (sorted by id, n of them), or NULL. */
static json_t *find_rec(json_t *const *recs, const long long *ids, size_t n, long long id) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && ids[lo] == id ? recs[lo] : NULL;
}

/* Sorts recs by ids (insertion: a page is at most HTTP_API_MAX_LIMIT and
 * nearly sorted already, trial ids growing with their index). */
static void sort_recs(json_t **recs, long long *ids, size_t n) {
    for (size_t i = 1; i < n; i++)
        for (size_t k = i; k > 0 && ids[k - 1] > ids[k]; k--) {
            long long t = ids[k];
            ids[k] = ids[k - 1];
            ids[k - 1] = t;
            json_t *r = recs[k];
            recs[k] = recs[k - 1];
            recs[k - 1] = r;
        }
}

#define PAGE_IDS "SELECT id FROM trials WHERE job = ?1 AND idx > ?2 ORDER BY idx LIMIT ?3"

/* Adds to each record of the page (job, after, limit) its latest metric
 * values ("metrics.NAME"), its best value of the job's metric
 * ("objective.NAME") and its last attempt's message ("reason"). */
static int page_details(sqlite3 *db, long long job, long long after, long long limit,
                        const char *metric, int maximize, json_t **recs, long long *ids, size_t n,
                        char *err, size_t errlen) {
    sort_recs(recs, ids, n);
    sqlite3_stmt *st;
    if (prep(db,
             "SELECT ml.trial, mn.name, ml.value, ml.vmin, ml.vmax FROM metric_latest ml JOIN"
             " metric_names mn ON mn.id = ml.name WHERE ml.trial IN (" PAGE_IDS ")",
             &st, err, errlen))
        return -1;
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int64(st, 3, limit);
    char key[160];
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *r = find_rec(recs, ids, n, sqlite3_column_int64(st, 0));
        const char *name = (const char *)sqlite3_column_text(st, 1);
        if (!r || !name) continue;
        snprintf(key, sizeof key, "metrics.%s", name);
        json_object_set_new(r, key, json_real(sqlite3_column_double(st, 2)));
        if (metric && !strcmp(name, metric)) {
            snprintf(key, sizeof key, "objective.%s", name);
            json_object_set_new(r, key, json_real(sqlite3_column_double(st, maximize ? 4 : 3)));
        }
    }
    sqlite3_finalize(st);
    if (prep(db,
             "SELECT a.trial, a.message FROM attempts a WHERE a.trial IN (" PAGE_IDS ")"
             " AND a.n = (SELECT MAX(n) FROM attempts WHERE trial = a.trial)",
             &st, err, errlen))
        return -1;
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int64(st, 3, limit);
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *r = find_rec(recs, ids, n, sqlite3_column_int64(st, 0));
        if (r && sqlite3_column_type(st, 1) == SQLITE_TEXT)
            json_object_set_new(r, "reason", col_json(st, 1));
    }
    sqlite3_finalize(st);
    return 0;
}

static unsigned get_trials(sqlite3 *db, long long job, http_arg_fn arg, void *cls, json_t **out,
                           char *next, size_t nextlen, char *err, size_t errlen) {
    long long after, limit;
    if (arg_int(arg, cls, "after", -1, -1, 1LL << 53, &after, err, errlen) ||
        arg_int(arg, cls, "limit", DEFAULT_LIMIT, 1, HTTP_API_MAX_LIMIT, &limit, err, errlen))
        return 400;
    json_t *jo = NULL;
    unsigned code = get_job(db, job, &jo, err, errlen);
    if (code != 200) return code;
    char metric[128], goal[8];
    snprintf(metric, sizeof metric, "%s", json_string_value(json_object_get(jo, "metric")));
    snprintf(goal, sizeof goal, "%s", json_string_value(json_object_get(jo, "goal")));
    json_decref(jo);
    sqlite3_stmt *st;
    if (prep(db,
             "SELECT id, idx, state, attempts, updated, params FROM trials WHERE job = ?1 AND"
             " idx > ?2 ORDER BY idx LIMIT ?3",
             &st, err, errlen))
        return 500;
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int64(st, 3, limit);
    json_t **recs = malloc((size_t)limit * sizeof *recs);
    long long *ids = malloc((size_t)limit * sizeof *ids);
    if (!recs || !ids) {
        free(recs);
        free(ids);
        sqlite3_finalize(st);
        bf_fail(err, errlen, "out of memory");
        return 500;
    }
    json_t *a = json_array();
    size_t n = 0;
    long long last = -1;
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *r = json_object();
        static const char *names[] = {"id", "idx", "state", "attempts", "updated"};
        for (int i = 0; i < 5; i++) json_object_set_new(r, names[i], col_json(st, i));
        json_object_set_new(r, "job", json_integer(job));
        json_t *params = json_loads((const char *)sqlite3_column_text(st, 5), 0, NULL);
        const char *k;
        json_t *v;
        char key[160];
        json_object_foreach(params, k, v) {
            snprintf(key, sizeof key, "params.%s", k);
            json_object_set(r, key, v);
        }
        json_decref(params);
        json_array_append_new(a, r);
        recs[n] = r;
        ids[n++] = sqlite3_column_int64(st, 0);
        last = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    int rc = page_details(db, job, after, limit, metric, !strcmp(goal, "max"), recs, ids, n, err,
                          errlen);
    free(recs);
    free(ids);
    if (rc) {
        json_decref(a);
        return 500;
    }
    if ((long long)n == limit) snprintf(next, nextlen, "%lld", last);
    *out = a;
    return 200;
}

/* Names of the metrics the job's trials have logged, sorted. */
static unsigned get_job_metrics(sqlite3 *db, long long job, json_t **out, char *err,
                                size_t errlen) {
    unsigned code = exists(db, "jobs", job, err, errlen);
    if (code != 200) return code;
    sqlite3_stmt *st;
    if (prep(db,
             "SELECT DISTINCT mn.name FROM metric_latest ml JOIN metric_names mn ON mn.id ="
             " ml.name JOIN trials t ON t.id = ml.trial WHERE t.job = ?1 ORDER BY mn.name",
             &st, err, errlen))
        return 500;
    sqlite3_bind_int64(st, 1, job);
    json_t *a = json_array();
    while (sqlite3_step(st) == SQLITE_ROW) json_array_append_new(a, col_json(st, 0));
    sqlite3_finalize(st);
    *out = a;
    return 200;
}

/* ----------------------------------------------------------------- points */

/* Appends trial's points of metric mid with seq > after to a, at most
 * max_points of them: when there are more, each of max_points / 2 equal
 * runs of points gives its lowest and its highest (in step order), so a
 * spike survives the thinning. Records {trial?, seq, step, value, time}. */
static int trial_points(sqlite3 *db, long long trial, long long mid, long long after,
                        long long max_points, int with_trial, json_t *a, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (prep(db, "SELECT COUNT(*) FROM metrics WHERE trial = ?1 AND name = ?2 AND seq > ?3", &st,
             err, errlen))
        return -1;
    sqlite3_bind_int64(st, 1, trial);
    sqlite3_bind_int64(st, 2, mid);
    sqlite3_bind_int64(st, 3, after);
    long long total = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    if (prep(db,
             "SELECT seq, step, value, time FROM metrics WHERE trial = ?1 AND name = ?2 AND seq >"
             " ?3 ORDER BY seq",
             &st, err, errlen))
        return -1;
    sqlite3_bind_int64(st, 1, trial);
    sqlite3_bind_int64(st, 2, mid);
    sqlite3_bind_int64(st, 3, after);
    long long run = total <= max_points ? 1 : (total + max_points / 2 - 1) / (max_points / 2);
    long long in_run = 0, lo_seq = 0, hi_seq = 0, lo_step = 0, hi_step = 0;
    double lo = 0, hi = 0, lo_t = 0, hi_t = 0;
    for (long long i = 0; sqlite3_step(st) == SQLITE_ROW; i++) {
        long long seq = sqlite3_column_int64(st, 0), step = sqlite3_column_int64(st, 1);
        double v = sqlite3_column_double(st, 2), t = sqlite3_column_double(st, 3);
        if (in_run == 0 || v < lo) lo = v, lo_seq = seq, lo_step = step, lo_t = t;
        if (in_run == 0 || v > hi) hi = v, hi_seq = seq, hi_step = step, hi_t = t;
        if (++in_run < run && i + 1 < total) continue;
        /* the run's lowest and highest, in the order they came */
        int lo_first = lo_seq <= hi_seq, n_out = lo_seq == hi_seq ? 1 : 2;
        for (int k = 0; k < n_out; k++) {
            int use_lo = (k == 0) == lo_first;
            json_t *p =
                json_pack("{s:I, s:I, s:f, s:f}", "seq", (json_int_t)(use_lo ? lo_seq : hi_seq),
                          "step", (json_int_t)(use_lo ? lo_step : hi_step), "value",
                          use_lo ? lo : hi, "time", use_lo ? lo_t : hi_t);
            if (with_trial) json_object_set_new(p, "trial", json_integer(trial));
            json_array_append_new(a, p);
        }
        in_run = 0;
    }
    sqlite3_finalize(st);
    return 0;
}

/* The arguments of a points request on row id of table ("jobs" or
 * "trials"), which must exist: ?metric= (required) as its id in *mid (0:
 * nothing logged under it yet), ?max_points= in *maxp: 0, or an HTTP status
 * with err. */
static unsigned points_args(sqlite3 *db, const char *table, long long id, http_arg_fn arg,
                            void *cls, long long *mid, long long *maxp, char *err, size_t errlen) {
    unsigned code = exists(db, table, id, err, errlen);
    if (code != 200) return code;
    const char *metric = arg(cls, "metric");
    if (!metric || !*metric || strlen(metric) > 63)
        return bf_fail(err, errlen, "?metric=NAME is required (a metric name, e.g. train/loss)"),
               400;
    if (arg_int(arg, cls, "max_points", DEFAULT_MAX_POINTS, 2, MAX_POINTS_CAP, maxp, err, errlen))
        return 400;
    *mid = metric_id(db, metric, err, errlen);
    return *mid < 0 ? 500 : 0;
}

static unsigned get_trial_points(sqlite3 *db, long long trial, http_arg_fn arg, void *cls,
                                 json_t **out, char *err, size_t errlen) {
    long long mid, maxp, after;
    unsigned code = points_args(db, "trials", trial, arg, cls, &mid, &maxp, err, errlen);
    if (code) return code;
    if (arg_int(arg, cls, "after", 0, 0, 1LL << 53, &after, err, errlen)) return 400;
    json_t *a = json_array();
    if (mid && trial_points(db, trial, mid, after, maxp, 0, a, err, errlen)) {
        json_decref(a);
        return 500;
    }
    *out = a;
    return 200;
}

/* The curves of a job: each of its trials' points (?trials=ID,ID,... or the
 * first JOB_CURVES_MAX by index), each trial thinned to ?max_points=. */
static unsigned get_job_points(sqlite3 *db, long long job, http_arg_fn arg, void *cls, json_t **out,
                               char *err, size_t errlen) {
    long long mid, maxp;
    unsigned code = points_args(db, "jobs", job, arg, cls, &mid, &maxp, err, errlen);
    if (code) return code;
    long long ids[JOB_CURVES_MAX];
    size_t n = 0;
    const char *list = arg(cls, "trials");
    if (list) {
        for (const char *p = list; *p && n < JOB_CURVES_MAX;) {
            char *end;
            long long id = strtoll(p, &end, 10);
            if (end == p || id < 1 || (*end && *end != ','))
                return bf_fail(err, errlen, "?trials must be trial ids separated by commas"), 400;
            ids[n++] = id;
            p = *end ? end + 1 : end;
        }
    } else {
        sqlite3_stmt *st;
        if (prep(db, "SELECT id FROM trials WHERE job = ?1 ORDER BY idx LIMIT ?2", &st, err,
                 errlen))
            return 500;
        sqlite3_bind_int64(st, 1, job);
        sqlite3_bind_int64(st, 2, JOB_CURVES_MAX);
        while (sqlite3_step(st) == SQLITE_ROW) ids[n++] = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    json_t *a = json_array();
    for (size_t i = 0; mid && i < n; i++)
        if (trial_points(db, ids[i], mid, 0, maxp, 1, a, err, errlen)) {
            json_decref(a);
            return 500;
        }
    *out = a;
    return 200;
}

/* ----------------------------------------------------------------- stages */

/* What a trial's chain of stages says it does now, from its first stage not
 * done (at: its key; NULL when every stage is done): "done" (the trial
 * ended), "reused" (nothing left to run), "runs" (its attempt runs it),
 * "waits" (another trial's attempt runs it: *on), "next" (it would run it
 * at its next launch). */
static const char *trial_doing(const char *tstate, const char *at, const char *sstate,
                               long long runner, long long trial, long long *on) {
    *on = 0;
    if (strcmp(tstate, "PENDING") && strcmp(tstate, "RUNNING")) return "done";
    if (!at) return "reused";
    if (sstate && !strcmp(sstate, "running")) {
        if (runner == trial) return "runs";
        *on = runner;
        return "waits";
    }
    return "next";
}

/* The job's stage graph: each stage key its trials' plans hold (with the
 * stage row's state, runner and counts, the job's trials sharing it and how
 * many trials of other jobs hold it too), and each trial's chain with what
 * it does now. */
static unsigned get_job_stages(sqlite3 *db, long long job, json_t **out, char *err, size_t errlen) {
    unsigned code = exists(db, "jobs", job, err, errlen);
    if (code != 200) return code;
    sqlite3_stmt *st;
    if (prep(db,
             "SELECT ts.key, MIN(ts.idx), ts.name, ts.parent, st.state, st.trial, st.attempts,"
             " st.failures, st.message, group_concat(ts.trial), (SELECT COUNT(*) FROM"
             " trial_stages o JOIN trials ot ON ot.id = o.trial WHERE o.key = ts.key AND ot.job"
             " != ?1) FROM trial_stages ts JOIN trials t ON t.id = ts.trial LEFT JOIN stages st"
             " ON st.key = ts.key WHERE t.job = ?1 GROUP BY ts.key ORDER BY MIN(ts.idx), ts.key"
             " LIMIT ?2",
             &st, err, errlen))
        return 500;
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, HTTP_API_MAX_LIMIT);
    json_t *stages = json_array();
    static const char *names[] = {"key",    "stage",    "name",     "parent", "state",
                                  "runner", "attempts", "failures", "message"};
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *r = json_object();
        for (int i = 0; i < 9; i++) json_object_set_new(r, names[i], col_json(st, i));
        if (sqlite3_column_type(st, 4) == SQLITE_NULL) /* no trial claimed it yet */
            json_object_set_new(r, "state", json_string("pending"));
        json_t *ids = json_array();
        const char *p = (const char *)sqlite3_column_text(st, 9);
        while (p && *p) {
            char *end;
            json_array_append_new(ids, json_integer(strtoll(p, &end, 10)));
            p = *end ? end + 1 : end;
        }
        json_object_set_new(r, "trials", ids);
        json_object_set_new(r, "other_jobs_trials", col_json(st, 10));
        json_array_append_new(stages, r);
    }
    sqlite3_finalize(st);
    if (prep(db,
             "SELECT t.id, t.idx, t.state, ts.key, st.state, st.trial FROM trials t JOIN"
             " trial_stages ts ON ts.trial = t.id LEFT JOIN stages st ON st.key = ts.key WHERE"
             " t.id IN (SELECT id FROM trials WHERE job = ?1 ORDER BY idx LIMIT ?2)"
             " ORDER BY t.idx, ts.idx",
             &st, err, errlen)) {
        json_decref(stages);
        return 500;
    }
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, HTTP_API_MAX_LIMIT);
    json_t *trials = json_array(), *cur = NULL;
    long long cur_id = -1, runner = 0;
    char tstate[16] = "", at[80] = "", sstate[16] = "";
    for (int more = 1; more;) {
        more = sqlite3_step(st) == SQLITE_ROW;
        long long id = more ? sqlite3_column_int64(st, 0) : -2;
        if (id != cur_id && cur) { /* the previous trial is complete */
            long long on;
            const char *d = trial_doing(tstate, at[0] ? at : NULL, sstate[0] ? sstate : NULL,
                                        runner, cur_id, &on);
            json_object_set_new(cur, "doing", json_string(d));
            json_object_set_new(cur, "at", at[0] ? json_string(at) : json_null());
            json_object_set_new(cur, "on", on ? json_integer(on) : json_null());
            json_array_append_new(trials, cur);
            cur = NULL;
        }
        if (!more) break;
        if (id != cur_id) {
            cur_id = id;
            cur = json_pack("{s:I, s:I, s:s, s:[]}", "id", (json_int_t)id, "idx",
                            (json_int_t)sqlite3_column_int64(st, 1), "state",
                            (const char *)sqlite3_column_text(st, 2), "chain");
            snprintf(tstate, sizeof tstate, "%s", (const char *)sqlite3_column_text(st, 2));
            at[0] = sstate[0] = '\0';
            runner = 0;
        }
        const char *key = (const char *)sqlite3_column_text(st, 3);
        const char *ss = (const char *)sqlite3_column_text(st, 4);
        json_array_append_new(json_object_get(cur, "chain"), json_string(key ? key : ""));
        if (!at[0] && (!ss || strcmp(ss, "done"))) { /* the first stage not done */
            snprintf(at, sizeof at, "%s", key ? key : "");
            snprintf(sstate, sizeof sstate, "%s", ss ? ss : "");
            runner = sqlite3_column_int64(st, 5);
        }
    }
    sqlite3_finalize(st);
    *out = json_pack("{s:I, s:o, s:o}", "job", (json_int_t)job, "stages", stages, "trials", trials);
    return 200;
}

/* ------------------------------------------------------------------ trial */

/* The files below dir (relative names in prefix), depth levels deep, as
 * {path, size, mtime} records into a, at most FILES_MAX in all. */
static void list_files(const char *dir, const char *prefix, int depth, json_t *a) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) && json_array_size(a) < FILES_MAX) {
        if (e->d_name[0] == '.') continue;
        char p[2048], rel[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        snprintf(rel, sizeof rel, "%s%s%s", prefix, *prefix ? "/" : "", e->d_name);
        struct stat sb;
        if (lstat(p, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) {
            if (depth > 0) list_files(p, rel, depth - 1, a);
        } else if (S_ISREG(sb.st_mode)) {
            json_array_append_new(a,
                                  json_pack("{s:s, s:I, s:f}", "path", rel, "size",
                                            (json_int_t)sb.st_size, "mtime", (double)sb.st_mtime));
        }
    }
    closedir(d);
}

#define STATE_JSON_MAX (4 << 20) /* bytes of a checkpoint's state.json read */

/* The checkpoint set in dir (rel: its name for the page, under the trial
 * folder or not) as {dir, rel, step, files}, or NULL when dir holds none:
 * the set of docs/checkpoints.md (state.json the commit record, its step)
 * or the older checkpoint.bin (step unknown: null). */
static json_t *checkpoint_in(const char *dir, const char *rel) {
    static const char *set[] = {"model.safetensors", "optimizer.safetensors", "state.json"};
    char p[2048];
    struct stat sb;
    json_t *files = json_array(), *step = json_null();
    snprintf(p, sizeof p, "%s/state.json", dir);
    if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) {
        if (sb.st_size <= STATE_JSON_MAX) {
            json_t *st = json_load_file(p, 0, NULL);
            json_t *v = json_object_get(st, "step");
            if (json_is_integer(v)) {
                json_decref(step);
                step = json_integer(json_integer_value(v));
            }
            json_decref(st);
        }
        for (int i = 0; i < 3; i++) {
            snprintf(p, sizeof p, "%s/%s", dir, set[i]);
            if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
                json_array_append_new(
                    files, json_pack("{s:s, s:I}", "name", set[i], "size", (json_int_t)sb.st_size));
        }
    } else {
        snprintf(p, sizeof p, "%s/checkpoint.bin", dir);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
            json_array_append_new(files, json_pack("{s:s, s:I}", "name", "checkpoint.bin", "size",
                                                   (json_int_t)sb.st_size));
    }
    if (!json_array_size(files)) {
        json_decref(files);
        json_decref(step);
        return NULL;
    }
    return json_pack("{s:s, s:s, s:o, s:o}", "dir", dir, "rel", rel, "step", step, "files", files);
}

/* A trial's checkpoints: "last", the set in its folder (an S2S trial's:
 * the latest stage of its chain that holds one), and "best", the step of
 * its best value of the job's metric with the checkpoint of that step
 * when the last set is of it (a run keeps one set, overwritten at each
 * save: a best checkpoint apart from it is not kept). */
static json_t *trial_checkpoints(sqlite3 *db, const char *home, long long id, const char *dir,
                                 const char *metric, int maximize) {
    json_t *last = checkpoint_in(dir, "");
    sqlite3_stmt *st;
    char err[256];
    if (!last && !prep(db, "SELECT dir FROM trial_stages WHERE trial = ?1 ORDER BY idx DESC", &st,
                       err, sizeof err)) {
        sqlite3_bind_int64(st, 1, id);
        while (!last && sqlite3_step(st) == SQLITE_ROW) {
            char sd[2048], rel[300];
            const char *name = (const char *)sqlite3_column_text(st, 0);
            if (!name || strchr(name, '/')) continue;
            snprintf(sd, sizeof sd, "%s/stages/%s", home, name);
            snprintf(rel, sizeof rel, "stages/%s", name);
            last = checkpoint_in(sd, rel);
        }
        sqlite3_finalize(st);
    }
    json_t *best = json_null();
    long long mid = metric && metric[0] ? metric_id(db, metric, err, sizeof err) : 0;
    if (mid > 0 && !prep(db,
                         maximize ? "SELECT step, value FROM metrics WHERE trial = ?1 AND name = ?2"
                                    " ORDER BY value DESC, seq LIMIT 1"
                                  : "SELECT step, value FROM metrics WHERE trial = ?1 AND name = ?2"
                                    " ORDER BY value ASC, seq LIMIT 1",
                         &st, err, sizeof err)) {
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, mid);
        if (sqlite3_step(st) == SQLITE_ROW) {
            long long step = sqlite3_column_int64(st, 0);
            json_t *ls = json_object_get(last, "step");
            int same = json_is_integer(ls) && json_integer_value(ls) == step;
            json_decref(best);
            best = json_pack("{s:s, s:f, s:I, s:O}", "metric", metric, "value",
                             sqlite3_column_double(st, 1), "step", (json_int_t)step, "checkpoint",
                             same ? last : json_null());
        }
        sqlite3_finalize(st);
    }
    return json_pack("{s:o, s:o}", "last", last ? last : json_null(), "best", best);
}

static unsigned get_trial(sqlite3 *db, const char *home, long long id, json_t **out, char *err,
                          size_t errlen) {
    sqlite3_stmt *st;
    if (prep(db,
             "SELECT t.id, t.job, t.idx, t.state, t.attempts, t.hash, t.updated, t.config,"
             " t.params, j.metric_name, j.metric_goal, j.source_trial FROM trials t JOIN jobs j ON"
             " j.id = t.job WHERE t.id = ?1",
             &st, err, errlen))
        return 500;
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_finalize(st);
        return bf_fail(err, errlen, "no trial %lld", id), 404;
    }
    static const char *names[] = {"id",      "job",    "idx",    "state",  "attempts", "hash",
                                  "updated", "config", "params", "metric", "goal"};
    json_t *o = json_object();
    for (int i = 0; i < 11; i++) json_object_set_new(o, names[i], col_json(st, i));
    json_t *params = json_loads((const char *)sqlite3_column_text(st, 8), 0, NULL);
    json_object_set_new(o, "params", params ? params : json_object());
    /* the trial its job was cloned from (bfctl clone) */
    long long source = sqlite3_column_int64(st, 11);
    json_object_set_new(o, "source", source ? json_integer(source) : json_null());
    sqlite3_finalize(st);
    json_t *att = json_array();
    json_object_set_new(o, "attempt_list", att);
    if (prep(db,
             "SELECT n, started, ended, outcome, message FROM attempts WHERE trial = ?1 ORDER BY"
             " n",
             &st, err, errlen)) {
        json_decref(o);
        return 500;
    }
    sqlite3_bind_int64(st, 1, id);
    static const char *an[] = {"n", "started", "ended", "outcome", "message"};
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *r = json_object();
        for (int i = 0; i < 5; i++) json_object_set_new(r, an[i], col_json(st, i));
        json_array_append_new(att, r);
    }
    sqlite3_finalize(st);
    json_t *ms = json_array();
    json_object_set_new(o, "metrics", ms);
    if (prep(db,
             "SELECT mn.name, ml.step, ml.value, ml.vmin, ml.vmax FROM metric_latest ml JOIN"
             " metric_names mn ON mn.id = ml.name WHERE ml.trial = ?1 ORDER BY mn.name",
             &st, err, errlen)) {
        json_decref(o);
        return 500;
    }
    sqlite3_bind_int64(st, 1, id);
    static const char *mnames[] = {"name", "step", "value", "min", "max"};
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *r = json_object();
        for (int i = 0; i < 5; i++) json_object_set_new(r, mnames[i], col_json(st, i));
        json_array_append_new(ms, r);
    }
    sqlite3_finalize(st);
    char dir[1300];
    snprintf(dir, sizeof dir, "%s/trials/%lld", home, id);
    json_t *files = json_array();
    list_files(dir, "", 3, files);
    json_object_set_new(o, "dir", json_string(dir));
    json_object_set_new(o, "files", files);
    const char *metric = json_string_value(json_object_get(o, "metric"));
    const char *goal = json_string_value(json_object_get(o, "goal"));
    json_object_set_new(o, "checkpoints",
                        trial_checkpoints(db, home, id, dir, metric, goal && !strcmp(goal, "max")));
    /* where bfd's TensorBoard exporter writes the trial's run (tensorboard:
     * true in bfd.yaml), as `bfctl export --tensorboard` lays it out */
    char tb[1300], jobdir[1300], base[1100], job_name[256] = "";
    long long job = json_integer_value(json_object_get(o, "job"));
    snprintf(base, sizeof base, "%s/tensorboard", home);
    if (!prep(db, "SELECT name FROM jobs WHERE id = ?1", &st, err, errlen)) {
        sqlite3_bind_int64(st, 1, job);
        if (sqlite3_step(st) == SQLITE_ROW)
            snprintf(job_name, sizeof job_name, "%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
    }
    if (!tfevents_job_dir(jobdir, sizeof jobdir, base, job_name, job) &&
        snprintf(tb, sizeof tb, "%s/t%lld", jobdir, id) < (int)sizeof tb) {
        struct stat sb;
        json_object_set_new(o, "tensorboard",
                            json_pack("{s:s, s:s, s:b}", "run", tb, "logdir", jobdir, "exists",
                                      stat(tb, &sb) == 0 && S_ISDIR(sb.st_mode)));
    }
    *out = o;
    return 200;
}

/* ----------------------------------------------------------------- events */

#define EVENT_COLS "SELECT id, time, job, trial, kind, message FROM events"

static json_t *event_record(sqlite3_stmt *st) {
    static const char *names[] = {"id", "time", "job", "trial", "kind", "message"};
    json_t *r = json_object();
    for (int i = 0; i < 6; i++) json_object_set_new(r, names[i], col_json(st, i));
    return r;
}

static unsigned get_events(sqlite3 *db, http_arg_fn arg, void *cls, json_t **out, char *next,
                           size_t nextlen, char *err, size_t errlen) {
    long long after, limit, job, trial;
    if (arg_int(arg, cls, "after", 0, 0, 1LL << 53, &after, err, errlen) ||
        arg_int(arg, cls, "limit", DEFAULT_LIMIT, 1, HTTP_API_MAX_LIMIT, &limit, err, errlen) ||
        arg_int(arg, cls, "job", 0, 0, 1LL << 53, &job, err, errlen) ||
        arg_int(arg, cls, "trial", 0, 0, 1LL << 53, &trial, err, errlen))
        return 400;
    sqlite3_stmt *st;
    if (prep(db,
             EVENT_COLS " WHERE id > ?1 AND (?2 = 0 OR job = ?2) AND (?3 = 0 OR trial = ?3)"
                        " ORDER BY id LIMIT ?4",
             &st, err, errlen))
        return 500;
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int64(st, 2, job);
    sqlite3_bind_int64(st, 3, trial);
    sqlite3_bind_int64(st, 4, limit);
    json_t *a = json_array();
    long long last = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_array_append_new(a, event_record(st));
        last = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    if ((long long)json_array_size(a) == limit) snprintf(next, nextlen, "%lld", last);
    *out = a;
    return 200;
}

/* ----------------------------------------------------------------- pareto */

/* One completed trial's values of the job's objectives (NAN: none yet). */
typedef struct pt {
    long long id, idx;
    double v[PARETO_MAX_OBJECTIVES];
} pt;

static int cmp_pt(const void *a, const void *b) {
    long long x = ((const pt *)a)->id, y = ((const pt *)b)->id;
    return x < y ? -1 : x > y;
}

/* The COMPLETED trials of job with the latest value of each objective k
 * (names[k]) into *out (sorted by id; *n of them): 200, else 500 or 413. */
static unsigned pareto_points(sqlite3 *db, long long job, int m, char names[][128], pt **out,
                              size_t *n, char *err, size_t errlen) {
    sqlite3_stmt *st;
    *out = NULL;
    *n = 0;
    if (prep(db,
             "SELECT id, idx FROM trials WHERE job = ?1 AND state = 'COMPLETED' ORDER BY id"
             " LIMIT ?2",
             &st, err, errlen))
        return 500;
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, PARETO_TRIALS_MAX + 1);
    size_t cap = 0;
    pt *p = NULL;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 256;
            pt *np = realloc(p, cap * sizeof *np);
            if (!np) {
                free(p);
                sqlite3_finalize(st);
                bf_fail(err, errlen, "out of memory");
                return 500;
            }
            p = np;
        }
        pt *q = &p[(*n)++];
        q->id = sqlite3_column_int64(st, 0);
        q->idx = sqlite3_column_int64(st, 1);
        for (int k = 0; k < PARETO_MAX_OBJECTIVES; k++) q->v[k] = NAN;
    }
    sqlite3_finalize(st);
    *out = p;
    if (*n > PARETO_TRIALS_MAX) {
        bf_fail(err, errlen,
                "job %lld has more than %d completed trials: the dashboard ranks at most that "
                "many (bfctl results ranks them all)",
                job, PARETO_TRIALS_MAX);
        return 413;
    }
    for (int k = 0; k < m; k++) {
        if (prep(db,
                 "SELECT t.id, ml.value FROM trials t JOIN metric_latest ml ON ml.trial = t.id"
                 " JOIN metric_names mn ON mn.id = ml.name WHERE t.job = ?1 AND"
                 " t.state = 'COMPLETED' AND mn.name = ?2",
                 &st, err, errlen))
            return 500;
        sqlite3_bind_int64(st, 1, job);
        sqlite3_bind_text(st, 2, names[k], -1, SQLITE_STATIC);
        while (sqlite3_step(st) == SQLITE_ROW) {
            pt key = {.id = sqlite3_column_int64(st, 0)};
            pt *q = bsearch(&key, p, *n, sizeof *p, cmp_pt);
            if (q) q->v[k] = sqlite3_column_double(st, 1);
        }
        sqlite3_finalize(st);
    }
    return 200;
}

/* GET jobs/J/pareto: the job's COMPLETED trials that have every objective,
 * each with its latest values ("objective.NAME"), its non-dominated rank
 * over all the objectives (1: the front), crowding distance and "pareto";
 * the rule and the ranking of `bfctl results` (jobs/pareto.h), so the page
 * and bfctl mark the same trials. */
static unsigned get_job_pareto(sqlite3 *db, long long job, json_t **out, char *err, size_t errlen) {
    json_t *jo = NULL;
    unsigned code = get_job(db, job, &jo, err, errlen);
    if (code != 200) return code;
    json_t *objs = json_object_get(jo, "objectives");
    int m = (int)json_array_size(objs), maximize[PARETO_MAX_OBJECTIVES];
    if (m > PARETO_MAX_OBJECTIVES) m = PARETO_MAX_OBJECTIVES;
    char names[PARETO_MAX_OBJECTIVES][128];
    for (int k = 0; k < m; k++) {
        json_t *o = json_array_get(objs, (size_t)k);
        const char *name = json_string_value(json_object_get(o, "name"));
        const char *goal = json_string_value(json_object_get(o, "goal"));
        snprintf(names[k], sizeof names[k], "%s", name ? name : "");
        maximize[k] = goal && !strcmp(goal, "max");
    }
    json_decref(jo);
    pt *p = NULL;
    size_t n = 0;
    code = m < 1 ? 200 : pareto_points(db, job, m, names, &p, &n, err, errlen);
    /* the trials with every objective, their values row-major */
    size_t kept = 0;
    double *v = malloc((n ? n : 1) * (size_t)(m ? m : 1) * sizeof *v), *crowd = NULL;
    int *rank = malloc((n ? n : 1) * sizeof *rank);
    crowd = malloc((n ? n : 1) * sizeof *crowd);
    if (code == 200 && (!v || !rank || !crowd)) code = 500, bf_fail(err, errlen, "out of memory");
    for (size_t i = 0; code == 200 && i < n; i++) {
        int all = 1;
        for (int k = 0; k < m; k++) all &= isfinite(p[i].v[k]);
        if (!all) continue;
        p[kept] = p[i];
        for (int k = 0; k < m; k++) v[kept * (size_t)m + (size_t)k] = p[i].v[k];
        kept++;
    }
    if (code == 200 && m >= 1 &&
        (pareto_rank(v, kept, m, maximize, rank) < 0 ||
         pareto_crowding(v, kept, m, rank, crowd) < 0))
        code = 500, bf_fail(err, errlen, "out of memory");
    json_t *a = code == 200 ? json_array() : NULL;
    char key[160];
    for (size_t i = 0; a && i < kept; i++) {
        json_t *r = json_pack("{s:I, s:I}", "id", (json_int_t)p[i].id, "idx", (json_int_t)p[i].idx);
        for (int k = 0; k < m; k++) {
            snprintf(key, sizeof key, "objective.%s", names[k]);
            json_object_set_new(r, key, json_real(p[i].v[k]));
        }
        json_object_set_new(r, "rank", json_integer(rank[i]));
        /* JSON has no infinity: a front's end is "inf", as in bfctl results --json */
        json_object_set_new(r, "crowding",
                            isinf(crowd[i]) ? json_string("inf") : json_real(crowd[i]));
        json_object_set_new(r, "pareto", json_boolean(rank[i] == 1));
        json_array_append_new(a, r);
    }
    free(p), free(v), free(rank), free(crowd);
    *out = a;
    return code;
}

/* ----------------------------------------------- seed groups and compare */

/* Job id as `bfctl results` reads it (bfd's `job` reply: objectives and
 * every trial with its latest values) into *out; an HTTP status with err. */
static unsigned front_job(sqlite3 *db, long long id, json_t **out, char *err, size_t errlen) {
    json_t *jo = NULL;
    unsigned code = get_job(db, id, &jo, err, errlen);
    if (code != 200) return code;
    sqlite3_stmt *st;
    if (prep(db,
             "SELECT t.id, t.idx, t.state, t.params, (SELECT json_group_object(n.name,"
             " json_object('step', l.step, 'value', l.value)) FROM metric_latest l JOIN"
             " metric_names n ON n.id = l.name WHERE l.trial = t.id) FROM trials t WHERE"
             " t.job = ?1 ORDER BY t.idx LIMIT ?2",
             &st, err, errlen)) {
        json_decref(jo);
        return 500;
    }
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, FRONT_TRIALS_MAX + 1);
    json_t *trials = json_array();
    json_object_set_new(jo, "trials", trials);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *ptxt = (const char *)sqlite3_column_text(st, 3);
        const char *lt = (const char *)sqlite3_column_text(st, 4);
        json_t *params = ptxt ? json_loads(ptxt, 0, NULL) : NULL;
        json_t *latest = lt ? json_loads(lt, 0, NULL) : NULL;
        json_array_append_new(trials, json_pack("{s:o, s:o, s:o, s:o, s:o}", "id", col_json(st, 0),
                                                "index", col_json(st, 1), "state", col_json(st, 2),
                                                "params", params ? params : json_object(), "latest",
                                                latest ? latest : json_object()));
    }
    sqlite3_finalize(st);
    if (json_array_size(trials) > FRONT_TRIALS_MAX) {
        json_decref(jo);
        return bf_fail(err, errlen,
                       "job %lld has more than %d trials: too many to rank here; bfctl results "
                       "%lld ranks them all",
                       id, FRONT_TRIALS_MAX, id),
               400;
    }
    *out = jo;
    return 200;
}

/* Copies o into flat with nested objects' keys joined by dots
 * ("objectives.val/acc.mean"); arrays and scalars stay values. */
static void flatten(json_t *o, const char *prefix, json_t *flat) {
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        char key[512];
        snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", k);
        if (json_is_object(v))
            flatten(v, key, flat);
        else
            json_object_set(flat, key, v);
    }
}

/* The rows of `bfctl results JOB... [--group-by-seed] --json` (jobs/front.c
 * computes them for both) as flat records, a page of them: ?after= is the
 * number of rows read before (the rows are ranked anew at each request). */
static unsigned front_rows(sqlite3 *db, const long long *ids, int n, int grouped, http_arg_fn arg,
                           void *cls, json_t **out, char *next, size_t nextlen, char *err,
                           size_t errlen) {
    long long after, limit;
    if (arg_int(arg, cls, "after", 0, 0, 1LL << 53, &after, err, errlen) ||
        arg_int(arg, cls, "limit", DEFAULT_LIMIT, 1, HTTP_API_MAX_LIMIT, &limit, err, errlen))
        return 400;
    json_t *jobs[FRONT_MAX_JOBS] = {0};
    unsigned code = 200;
    for (int j = 0; j < n && code == 200; j++) code = front_job(db, ids[j], &jobs[j], err, errlen);
    json_t *tab = code == 200 ? front_table(jobs, ids, n, grouped, 0, err, errlen) : NULL;
    for (int j = 0; j < n; j++) json_decref(jobs[j]);
    if (code != 200) return code;
    if (!tab) return 400; /* objectives differ (or out of memory) */
    json_t *rows = json_object_get(tab, grouped ? "groups" : "trials"), *a = json_array();
    size_t total = json_array_size(rows);
    for (size_t i = (size_t)after; i < total && i < (size_t)(after + limit); i++) {
        json_t *flat = json_object();
        flatten(json_array_get(rows, i), "", flat);
        json_array_append_new(a, flat);
    }
    if ((size_t)(after + limit) < total) snprintf(next, nextlen, "%lld", after + limit);
    json_decref(tab);
    *out = a;
    return 200;
}

/* ?jobs=A,B,... (2 to FRONT_MAX_JOBS job ids) and ?group_by_seed=0|1:
 * the jobs' rows side by side, matched by the keys they all sweep. */
static unsigned get_compare(sqlite3 *db, http_arg_fn arg, void *cls, json_t **out, char *next,
                            size_t nextlen, char *err, size_t errlen) {
    const char *list = arg(cls, "jobs");
    long long ids[FRONT_MAX_JOBS], grouped;
    int n = (int)id_list(list ? list : "", ids, FRONT_MAX_JOBS);
    if (n < 2)
        return bf_fail(err, errlen,
                       "?jobs= must be 2 to %d job ids separated by commas (e.g. ?jobs=3,7), "
                       "got '%.40s'",
                       FRONT_MAX_JOBS, list ? list : ""),
               400;
    if (arg_int(arg, cls, "group_by_seed", 0, 0, 1, &grouped, err, errlen)) return 400;
    return front_rows(db, ids, n, (int)grouped, arg, cls, out, next, nextlen, err, errlen);
}

/* The mean and sample std over ?trials= (ids, commas) of ?metric= at each
 * step, {step, mean, std, n}: a seed group's curve and its band, the steps
 * thinned evenly to ?max_points=. */
static unsigned get_band(sqlite3 *db, long long job, http_arg_fn arg, void *cls, json_t **out,
                         char *err, size_t errlen) {
    long long mid, maxp;
    unsigned code = points_args(db, "jobs", job, arg, cls, &mid, &maxp, err, errlen);
    if (code) return code;
    const char *list = arg(cls, "trials");
    long long tid[BAND_TRIALS_MAX];
    size_t n = id_list(list ? list : "", tid, BAND_TRIALS_MAX), w = 0;
    char ids[BAND_TRIALS_MAX * 21 + 1] = "";
    for (size_t i = 0; i < n; i++)
        w += (size_t)snprintf(ids + w, sizeof ids - w, "%s%lld", i ? "," : "", tid[i]);
    if (!n)
        return bf_fail(err, errlen, "?trials must be 1 to %d trial ids separated by commas",
                       BAND_TRIALS_MAX),
               400;
    sqlite3_stmt *st;
    /* ids holds digits and commas only */
    char sql[BAND_TRIALS_MAX * 21 + 512];
    snprintf(sql, sizeof sql,
             "SELECT m.step, AVG(m.value), SUM(m.value * m.value), COUNT(*), SUM(m.value) FROM"
             " metrics m JOIN trials t ON t.id = m.trial WHERE t.job = ?1 AND m.name = ?2 AND"
             " m.trial IN (%s) GROUP BY m.step ORDER BY m.step",
             ids);
    if (prep(db, sql, &st, err, errlen)) return 500;
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, mid);
    json_t *all = json_array();
    while (sqlite3_step(st) == SQLITE_ROW) {
        long long k = sqlite3_column_int64(st, 3);
        double mean = sqlite3_column_double(st, 1), s2 = sqlite3_column_double(st, 2),
               s = sqlite3_column_double(st, 4);
        double var = k > 1 ? (s2 - s * s / (double)k) / (double)(k - 1) : 0;
        json_array_append_new(
            all,
            json_pack("{s:I, s:f, s:o, s:I}", "step", (json_int_t)sqlite3_column_int64(st, 0),
                      "mean", mean, "std", k > 1 ? json_real(var > 0 ? sqrt(var) : 0) : json_null(),
                      "n", (json_int_t)k));
    }
    sqlite3_finalize(st);
    size_t total = json_array_size(all);
    if (total <= (size_t)maxp) {
        *out = all;
        return 200;
    }
    json_t *a = json_array(); /* every stride-th step, and the last */
    double stride = (double)(total - 1) / (double)(maxp - 1);
    for (long long i = 0; i < maxp; i++)
        json_array_append(a, json_array_get(all, (size_t)((double)i * stride + 0.5)));
    json_decref(all);
    *out = a;
    return 200;
}

/* ------------------------------------------------------------------ route */

unsigned http_api_get(sqlite3 *db, const char *home, const char *path, http_arg_fn arg, void *cls,
                      json_t **out, char *next, size_t nextlen, char *err, size_t errlen) {
    *out = NULL;
    next[0] = '\0';
    long long id;
    char rest[32] = "";
    int k = 0;
    if (!strcmp(path, "jobs")) return get_jobs(db, arg, cls, out, next, nextlen, err, errlen);
    if (!strcmp(path, "events")) return get_events(db, arg, cls, out, next, nextlen, err, errlen);
    if (!strcmp(path, "compare")) return get_compare(db, arg, cls, out, next, nextlen, err, errlen);
    if (sscanf(path, "jobs/%lld%n", &id, &k) == 1 && id > 0) {
        snprintf(rest, sizeof rest, "%s", path + k);
        if (!rest[0]) return get_job(db, id, out, err, errlen);
        if (!strcmp(rest, "/trials"))
            return get_trials(db, id, arg, cls, out, next, nextlen, err, errlen);
        if (!strcmp(rest, "/points")) return get_job_points(db, id, arg, cls, out, err, errlen);
        if (!strcmp(rest, "/metrics")) return get_job_metrics(db, id, out, err, errlen);
        if (!strcmp(rest, "/stages")) return get_job_stages(db, id, out, err, errlen);
        if (!strcmp(rest, "/pareto")) return get_job_pareto(db, id, out, err, errlen);
        if (!strcmp(rest, "/groups"))
            return front_rows(db, &id, 1, 1, arg, cls, out, next, nextlen, err, errlen);
        if (!strcmp(rest, "/band")) return get_band(db, id, arg, cls, out, err, errlen);
    } else if (sscanf(path, "trials/%lld%n", &id, &k) == 1 && id > 0) {
        snprintf(rest, sizeof rest, "%s", path + k);
        if (!rest[0]) return get_trial(db, home, id, out, err, errlen);
        if (!strcmp(rest, "/points")) return get_trial_points(db, id, arg, cls, out, err, errlen);
    }
    return bf_fail(err, errlen, "no such API path /api/v1/%.200s (docs/http.md lists them)", path),
           404;
}

/* ----------------------------------------------------------------- stream */

typedef struct followed {
    long long trial, seq; /* points up to seq sent */
} followed;

struct http_stream {
    long long job, mid, last_event;
    char metric[64];
    double since; /* trials changed after this are followed */
    followed *f;
    size_t n;
};

/* The trial's entry, added (from seq 0) when new; NULL when full. */
static followed *follow(http_stream *s, long long trial) {
    for (size_t i = 0; i < s->n; i++)
        if (s->f[i].trial == trial) return &s->f[i];
    if (s->n == STREAM_TRIALS_MAX) return NULL;
    s->f[s->n] = (followed){trial, 0};
    return &s->f[s->n++];
}

/* Takes up a stream where the one that sent the record with id last_id
 * ended (a reconnect's Last-Event-ID): "EVENT;SINCE;T:SEQ,T:SEQ,...", as
 * stream_id writes it. 0, or -1 when it is not one (the stream then starts
 * afresh). */
static int stream_resume(http_stream *s, const char *last_id) {
    char *end;
    long long ev = strtoll(last_id, &end, 10);
    if (end == last_id || *end != ';' || ev < 0) return -1;
    double since = strtod(end + 1, &end);
    if (*end != ';' || !(since >= 0)) return -1;
    const char *p = end + 1;
    size_t n = 0;
    followed f[STREAM_TRIALS_MAX];
    while (*p) {
        long long t = strtoll(p, &end, 10);
        if (end == p || *end != ':' || t <= 0) return -1;
        p = end + 1;
        long long seq = strtoll(p, &end, 10);
        if (end == p || seq < 0 || (*end && *end != ',') || n == STREAM_TRIALS_MAX) return -1;
        f[n++] = (followed){t, seq};
        p = *end ? end + 1 : end;
    }
    s->last_event = ev;
    s->since = since;
    s->n = 0;
    for (size_t i = 0; i < n; i++) *follow(s, f[i].trial) = f[i];
    return 0;
}

http_stream *http_stream_new(sqlite3 *db, long long job, const char *metric, const char *last_id,
                             char *err, size_t errlen) {
    http_stream *s = calloc(1, sizeof *s);
    if (s) s->f = malloc(STREAM_TRIALS_MAX * sizeof *s->f);
    if (!s || !s->f) {
        http_stream_free(&s);
        bf_fail(err, errlen, "out of memory");
        return NULL;
    }
    s->job = job;
    snprintf(s->metric, sizeof s->metric, "%s", metric ? metric : "");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->since = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    sqlite3_stmt *st;
    if (prep(db, "SELECT COALESCE(MAX(id), 0) FROM events", &st, err, errlen)) {
        http_stream_free(&s);
        return NULL;
    }
    if (sqlite3_step(st) == SQLITE_ROW) s->last_event = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    /* the trials running now are followed from their latest point: the page
     * read what came before */
    if (prep(db,
             "SELECT t.id, COALESCE((SELECT MAX(seq) FROM metrics WHERE trial = t.id), 0) FROM"
             " trials t WHERE t.job = ?1 AND t.state = 'RUNNING'",
             &st, err, errlen)) {
        http_stream_free(&s);
        return NULL;
    }
    sqlite3_bind_int64(st, 1, job);
    while (sqlite3_step(st) == SQLITE_ROW) {
        followed *f = follow(s, sqlite3_column_int64(st, 0));
        if (f) f->seq = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    /* a reconnect: from where its last record left (an id not of ours
     * changes nothing: the stream starts afresh) */
    if (last_id) (void)stream_resume(s, last_id);
    return s;
}

/* Appends "event: NAME\ndata: JSON\n\n" to buf when it fits. */
static void sse_put(char *buf, size_t cap, size_t *len, const char *name, json_t *data) {
    char *text = json_dumps(data, JSON_COMPACT);
    if (!text) return;
    int k = snprintf(buf + *len, cap - *len, "event: %s\ndata: %s\n\n", name, text);
    if (k > 0 && *len + (size_t)k < cap) *len += (size_t)k;
    buf[*len] = '\0';
    free(text);
}

/* Gives the last record in buf (when there is one) the stream's cursor as
 * its id: "EVENT;SINCE;T:SEQ,..." for the trials of this look (the n in
 * trials) that points were sent of, so a reconnect (Last-Event-ID) misses
 * nothing sent in the gap. */
static void stream_id(const http_stream *s, const long long *trials, size_t n, char *buf,
                      size_t cap, size_t *len) {
    if (*len < 2) return;
    char id[STREAM_ID_MAX];
    size_t w = (size_t)snprintf(id, sizeof id, "id: %lld;%.3f;", s->last_event, s->since);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < s->n; k++)
            if (s->f[k].trial == trials[i] && s->f[k].seq > 0 && w + 48 < sizeof id)
                w += (size_t)snprintf(id + w, sizeof id - w, "%s%lld:%lld",
                                      id[w - 1] == ';' ? "" : ",", s->f[k].trial, s->f[k].seq);
    if (*len + w + 2 >= cap) return;
    /* before the record's closing blank line */
    (*len)--;
    memcpy(buf + *len, id, w);
    *len += w;
    memcpy(buf + *len, "\n\n", 3);
    *len += 2;
}

long http_stream_poll(http_stream *s, sqlite3 *db, char *buf, size_t cap, char *err,
                      size_t errlen) {
    size_t len = 0;
    buf[0] = '\0';
    sqlite3_stmt *st;
    if (prep(db, EVENT_COLS " WHERE id > ?1 AND job = ?2 ORDER BY id LIMIT 200", &st, err, errlen))
        return -1;
    sqlite3_bind_int64(st, 1, s->last_event);
    sqlite3_bind_int64(st, 2, s->job);
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *e = event_record(st);
        if (e && len + 8192 < cap) {
            sse_put(buf, cap, &len, "state", e);
            s->last_event = sqlite3_column_int64(st, 0);
        }
        json_decref(e);
    }
    sqlite3_finalize(st);
    if (!s->metric[0] || (!s->mid && (s->mid = metric_id(db, s->metric, err, errlen)) <= 0)) {
        s->mid = 0;
        stream_id(s, NULL, 0, buf, cap, &len); /* the events' cursor */
        return (long)len;
    }
    if (prep(db,
             "SELECT id FROM trials WHERE job = ?1 AND (state = 'RUNNING' OR updated > ?2)"
             " ORDER BY idx",
             &st, err, errlen))
        return -1;
    sqlite3_bind_int64(st, 1, s->job);
    sqlite3_bind_double(st, 2, s->since);
    long long trials[256];
    size_t nt = 0;
    while (nt < 256 && sqlite3_step(st) == SQLITE_ROW) trials[nt++] = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    json_t *pts = json_array();
    for (size_t i = 0; i < nt && json_array_size(pts) < STREAM_POINTS_MAX; i++) {
        followed *f = follow(s, trials[i]);
        if (!f) break;
        if (prep(db,
                 "SELECT seq, step, value FROM metrics WHERE trial = ?1 AND name = ?2 AND seq >"
                 " ?3 ORDER BY seq LIMIT ?4",
                 &st, err, errlen)) {
            json_decref(pts);
            return -1;
        }
        sqlite3_bind_int64(st, 1, f->trial);
        sqlite3_bind_int64(st, 2, s->mid);
        sqlite3_bind_int64(st, 3, f->seq);
        sqlite3_bind_int64(st, 4, STREAM_POINTS_MAX);
        while (sqlite3_step(st) == SQLITE_ROW && json_array_size(pts) < STREAM_POINTS_MAX) {
            f->seq = sqlite3_column_int64(st, 0);
            json_array_append_new(pts, json_pack("{s:I, s:I, s:f}", "trial", (json_int_t)f->trial,
                                                 "step", (json_int_t)sqlite3_column_int64(st, 1),
                                                 "value", sqlite3_column_double(st, 2)));
        }
        sqlite3_finalize(st);
    }
    if (json_array_size(pts)) sse_put(buf, cap, &len, "points", pts);
    json_decref(pts);
    stream_id(s, trials, nt, buf, cap, &len);
    return (long)len;
}

void http_stream_free(http_stream **sp) {
    http_stream *s = *sp;
    if (!s) return;
    *sp = NULL;
    free(s->f);
    free(s);
}
