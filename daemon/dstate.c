#include "daemon/dstate.h"

#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dstate {
    sqlite3 *db;
};

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int prep(dstate *d, const char *sql, sqlite3_stmt **st, char *err, size_t errlen) {
    if (sqlite3_prepare_v2(d->db, sql, -1, st, NULL) != SQLITE_OK)
        return fail(err, errlen, "sqlite3_prepare_v2(%.60s): %s", sql, sqlite3_errmsg(d->db));
    return 0;
}

int dstate_open(const char *path, dstate **out, char *err, size_t errlen) {
    *out = NULL;
    dstate *d = calloc(1, sizeof *d);
    if (!d) return fail(err, errlen, "out of memory");
    if (sqlite3_open_v2(path, &d->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        fail(err, errlen, "sqlite3_open_v2(%s): %s", path,
             d->db ? sqlite3_errmsg(d->db) : "out of memory");
        dstate_close(&d);
        return -1;
    }
    char *msg = NULL;
    if (sqlite3_busy_timeout(d->db, 10000) != SQLITE_OK ||
        sqlite3_exec(d->db,
                     "PRAGMA synchronous = FULL;"
                     "CREATE TABLE IF NOT EXISTS bfd_runs(trial INTEGER PRIMARY KEY,"
                     " attempt INTEGER NOT NULL, token TEXT NOT NULL, pid INTEGER NOT NULL,"
                     " gpus TEXT NOT NULL, started REAL NOT NULL);"
                     "CREATE TABLE IF NOT EXISTS bfd_jobs(job INTEGER PRIMARY KEY, cwd TEXT NOT NULL);",
                     NULL, NULL, &msg) != SQLITE_OK) {
        fail(err, errlen, "sqlite3_exec(CREATE TABLE bfd_runs): %s",
             msg ? msg : sqlite3_errmsg(d->db));
        sqlite3_free(msg);
        dstate_close(&d);
        return -1;
    }
    *out = d;
    return 0;
}

void dstate_close(dstate **d) {
    if (!d || !*d) return;
    if ((*d)->db) sqlite3_close((*d)->db);
    free(*d);
    *d = NULL;
}

static int step_done(dstate *d, sqlite3_stmt *st, const char *what, char *err, size_t errlen) {
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) return fail(err, errlen, "sqlite3_step(%s): %s", what, sqlite3_errmsg(d->db));
    return 0;
}

int dstate_run_put(dstate *d, const dstate_run *r, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (prep(d,
             "INSERT OR REPLACE INTO bfd_runs(trial, attempt, token, pid, gpus, started)"
             " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
             &st, err, errlen))
        return -1;
    sqlite3_bind_int64(st, 1, r->trial);
    sqlite3_bind_int(st, 2, r->attempt);
    sqlite3_bind_text(st, 3, r->token, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, r->pid);
    sqlite3_bind_text(st, 5, r->gpus, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 6, r->started);
    return step_done(d, st, "INSERT bfd_runs", err, errlen);
}

int dstate_run_del(dstate *d, int64_t trial, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (prep(d, "DELETE FROM bfd_runs WHERE trial = ?1", &st, err, errlen)) return -1;
    sqlite3_bind_int64(st, 1, trial);
    return step_done(d, st, "DELETE bfd_runs", err, errlen);
}

int dstate_runs(dstate *d, dstate_run **out, size_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    if (prep(d, "SELECT trial, attempt, token, pid, gpus, started FROM bfd_runs ORDER BY trial",
             &st, err, errlen))
        return -1;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            dstate_run *nr = realloc(*out, cap * sizeof *nr);
            if (!nr) {
                sqlite3_finalize(st);
                free(*out);
                *out = NULL;
                return fail(err, errlen, "out of memory");
            }
            *out = nr;
        }
        dstate_run *r = &(*out)[(*n)++];
        memset(r, 0, sizeof *r);
        r->trial = sqlite3_column_int64(st, 0);
        r->attempt = sqlite3_column_int(st, 1);
        snprintf(r->token, sizeof r->token, "%s", (const char *)sqlite3_column_text(st, 2));
        r->pid = (pid_t)sqlite3_column_int64(st, 3);
        snprintf(r->gpus, sizeof r->gpus, "%s", (const char *)sqlite3_column_text(st, 4));
        r->started = sqlite3_column_double(st, 5);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(*out);
        *out = NULL;
        return fail(err, errlen, "sqlite3_step(SELECT bfd_runs): %s", sqlite3_errmsg(d->db));
    }
    return 0;
}

int dstate_job_cwd_set(dstate *d, int64_t job, const char *cwd, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (prep(d, "INSERT OR REPLACE INTO bfd_jobs(job, cwd) VALUES (?1, ?2)", &st, err, errlen))
        return -1;
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_text(st, 2, cwd, -1, SQLITE_STATIC);
    return step_done(d, st, "INSERT bfd_jobs", err, errlen);
}

int dstate_job_cwd(dstate *d, int64_t job, char *buf, size_t buflen, char *err, size_t errlen) {
    sqlite3_stmt *st;
    buf[0] = '\0';
    if (prep(d, "SELECT cwd FROM bfd_jobs WHERE job = ?1", &st, err, errlen)) return -1;
    sqlite3_bind_int64(st, 1, job);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) snprintf(buf, buflen, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return fail(err, errlen, "sqlite3_step(SELECT bfd_jobs): %s", sqlite3_errmsg(d->db));
    return 0;
}

#define JOB_COLS                                                                            \
    "SELECT id, name, pipeline, submitted, priority, retries, ranks, gpus_per_rank, "       \
    "metric_name, metric_goal, n_trials FROM jobs"

static void job_row(sqlite3_stmt *st, dstate_job *j) {
    memset(j, 0, sizeof *j);
    j->id = sqlite3_column_int64(st, 0);
    snprintf(j->name, sizeof j->name, "%s", (const char *)sqlite3_column_text(st, 1));
    snprintf(j->pipeline, sizeof j->pipeline, "%s", (const char *)sqlite3_column_text(st, 2));
    j->submitted = sqlite3_column_double(st, 3);
    j->priority = sqlite3_column_int(st, 4);
    j->retries = sqlite3_column_int(st, 5);
    j->ranks = sqlite3_column_int(st, 6);
    j->gpus_per_rank = sqlite3_column_int(st, 7);
    snprintf(j->metric, sizeof j->metric, "%s", (const char *)sqlite3_column_text(st, 8));
    snprintf(j->goal, sizeof j->goal, "%s", (const char *)sqlite3_column_text(st, 9));
    j->n_trials = sqlite3_column_int64(st, 10);
}

int dstate_job_get(dstate *d, int64_t job, dstate_job *out, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (prep(d, JOB_COLS " WHERE id = ?1", &st, err, errlen)) return -1;
    sqlite3_bind_int64(st, 1, job);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) job_row(st, out);
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW) return 0;
    if (rc == SQLITE_DONE) return 1;
    return fail(err, errlen, "sqlite3_step(SELECT jobs): %s", sqlite3_errmsg(d->db));
}

json_t *dstate_job_states(dstate *d, int64_t job, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (prep(d, "SELECT state, COUNT(*) FROM trials WHERE job = ?1 GROUP BY state", &st, err,
             errlen))
        return NULL;
    sqlite3_bind_int64(st, 1, job);
    json_t *o = json_object();
    int rc;
    while (o && (rc = sqlite3_step(st)) == SQLITE_ROW)
        json_object_set_new(o, (const char *)sqlite3_column_text(st, 0),
                            json_integer(sqlite3_column_int64(st, 1)));
    sqlite3_finalize(st);
    if (!o) {
        fail(err, errlen, "out of memory");
        return NULL;
    }
    if (rc != SQLITE_DONE) {
        json_decref(o);
        fail(err, errlen, "sqlite3_step(SELECT trial states): %s", sqlite3_errmsg(d->db));
        return NULL;
    }
    return o;
}

json_t *dstate_job_json(dstate *d, const dstate_job *j, char *err, size_t errlen) {
    json_t *states = dstate_job_states(d, j->id, err, errlen);
    if (!states) return NULL;
    json_t *o = json_pack("{s:I, s:s, s:s, s:f, s:i, s:i, s:i, s:i, s:I, s:s, s:s, s:o}", "id",
                          (json_int_t)j->id, "name", j->name, "pipeline", j->pipeline,
                          "submitted", j->submitted, "priority", j->priority, "retries",
                          j->retries, "ranks", j->ranks, "gpus_per_rank", j->gpus_per_rank,
                          "n_trials", (json_int_t)j->n_trials, "metric", j->metric, "goal", j->goal,
                          "states", states);
    if (!o) fail(err, errlen, "json_pack(job): out of memory or invalid text");
    return o;
}

json_t *dstate_jobs_json(dstate *d, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (prep(d, JOB_COLS " ORDER BY id", &st, err, errlen)) return NULL;
    /* read all rows first: the per-job queries need the connection */
    dstate_job *jobs = NULL;
    size_t n = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            dstate_job *nj = realloc(jobs, cap * sizeof *nj);
            if (!nj) break;
            jobs = nj;
        }
        job_row(st, &jobs[n++]);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(jobs);
        fail(err, errlen, rc == SQLITE_ROW ? "out of memory" : "sqlite3_step(SELECT jobs): %s",
             sqlite3_errmsg(d->db));
        return NULL;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        json_t *o = dstate_job_json(d, &jobs[i], err, errlen);
        if (!o) {
            json_decref(arr);
            arr = NULL;
            break;
        }
        json_array_append_new(arr, o);
    }
    free(jobs);
    return arr;
}

int dstate_max_seq(dstate *d, int64_t trial, int64_t *out, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (prep(d, "SELECT COALESCE(MAX(seq), 0) FROM metrics WHERE trial = ?1", &st, err, errlen))
        return -1;
    sqlite3_bind_int64(st, 1, trial);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *out = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW)
        return fail(err, errlen, "sqlite3_step(SELECT MAX(seq)): %s", sqlite3_errmsg(d->db));
    return 0;
}

int dstate_counts(dstate *d, long long *jobs, long long *pending, long long *running, char *err,
                  size_t errlen) {
    sqlite3_stmt *st;
    if (prep(d,
             "SELECT (SELECT COUNT(*) FROM jobs),"
             " (SELECT COUNT(*) FROM trials WHERE state = 'PENDING'),"
             " (SELECT COUNT(*) FROM trials WHERE state = 'RUNNING')",
             &st, err, errlen))
        return -1;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *jobs = sqlite3_column_int64(st, 0);
        *pending = sqlite3_column_int64(st, 1);
        *running = sqlite3_column_int64(st, 2);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW)
        return fail(err, errlen, "sqlite3_step(SELECT counts): %s", sqlite3_errmsg(d->db));
    return 0;
}

int dstate_trial_job(dstate *d, int64_t trial, int64_t *job, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (prep(d, "SELECT job FROM trials WHERE id = ?1", &st, err, errlen)) return -1;
    sqlite3_bind_int64(st, 1, trial);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *job = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW) return 0;
    if (rc == SQLITE_DONE) return 1;
    return fail(err, errlen, "sqlite3_step(SELECT trials.job): %s", sqlite3_errmsg(d->db));
}

int dstate_running_trials(dstate *d, int64_t **out, size_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    if (prep(d, "SELECT id FROM trials WHERE state = 'RUNNING' ORDER BY id", &st, err, errlen))
        return -1;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *ni = realloc(*out, cap * sizeof *ni);
            if (!ni) break;
            *out = ni;
        }
        (*out)[(*n)++] = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(*out);
        *out = NULL;
        *n = 0;
        return fail(err, errlen, rc == SQLITE_ROW ? "out of memory" : "sqlite3_step(SELECT RUNNING): %s",
                    sqlite3_errmsg(d->db));
    }
    return 0;
}
