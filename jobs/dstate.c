/* dstate.c — bfd's own two tables in bf.db, bfd_runs (the process, token,
 * GPUs and Slurm job or remote agent of each running attempt) and bfd_jobs
 * (each job's working directory), on a connection of its own. Their schema
 * is the store's (jobs/store.c, migration 8). It must not read or write the
 * jobs tables nor know the protocol. */
#include "jobs/dstate.h"
#include "common/errbuf.h"

#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dstate {
    sqlite3 *db;
};

static int prep(dstate *d, const char *sql, sqlite3_stmt **st, char *err, size_t errlen) {
    if (sqlite3_prepare_v2(d->db, sql, -1, st, NULL) != SQLITE_OK)
        return bf_fail(err, errlen, "sqlite3_prepare_v2(%.60s): %s", sql, sqlite3_errmsg(d->db));
    return 0;
}

int dstate_open(const char *path, dstate **out, char *err, size_t errlen) {
    *out = NULL;
    dstate *d = calloc(1, sizeof *d);
    if (!d) return bf_fail(err, errlen, "out of memory");
    if (sqlite3_open_v2(path, &d->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        bf_fail(err, errlen, "sqlite3_open_v2(%s): %s", path,
                d->db ? sqlite3_errmsg(d->db) : "out of memory");
        dstate_close(&d);
        return -1;
    }
    /* the tables are the store's migration 8 (store_open made them) */
    char *msg = NULL;
    if (sqlite3_busy_timeout(d->db, 10000) != SQLITE_OK ||
        sqlite3_exec(d->db, "PRAGMA synchronous = FULL", NULL, NULL, &msg) != SQLITE_OK) {
        bf_fail(err, errlen, "sqlite3_exec(PRAGMA synchronous): %s",
                msg ? msg : sqlite3_errmsg(d->db));
        sqlite3_free(msg);
        dstate_close(&d);
        return -1;
    }
    /* bfd's loop writes through it: the store's checkpointer thread
     * checkpoints the WAL, never this connection (store_defer_checkpoints) */
    sqlite3_wal_autocheckpoint(d->db, 0);
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
    if (rc != SQLITE_DONE)
        return bf_fail(err, errlen, "sqlite3_step(%s): %s", what, sqlite3_errmsg(d->db));
    return 0;
}

int dstate_run_put(dstate *d, const dstate_run *r, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (prep(d,
             "INSERT OR REPLACE INTO bfd_runs(trial, attempt, token, pid, gpus, started,"
             " slurm_job, agent) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
             &st, err, errlen))
        return -1;
    sqlite3_bind_int64(st, 1, r->trial);
    sqlite3_bind_int(st, 2, r->attempt);
    sqlite3_bind_text(st, 3, r->token, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, r->pid);
    sqlite3_bind_text(st, 5, r->gpus, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 6, r->started);
    sqlite3_bind_text(st, 7, r->slurm_job, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 8, r->agent, -1, SQLITE_STATIC);
    return step_done(d, st, "INSERT bfd_runs", err, errlen);
}

int dstate_runs_put(dstate *d, const dstate_run *r, size_t n, char *err, size_t errlen) {
    char *msg = NULL;
    if (sqlite3_exec(d->db, "BEGIN IMMEDIATE", NULL, NULL, &msg) != SQLITE_OK) {
        bf_fail(err, errlen, "BEGIN (bfd_runs): %s", msg ? msg : sqlite3_errmsg(d->db));
        sqlite3_free(msg);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (dstate_run_put(d, &r[i], err, errlen)) {
            sqlite3_exec(d->db, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
    if (sqlite3_exec(d->db, "COMMIT", NULL, NULL, &msg) != SQLITE_OK) {
        bf_fail(err, errlen, "COMMIT (bfd_runs): %s", msg ? msg : sqlite3_errmsg(d->db));
        sqlite3_free(msg);
        sqlite3_exec(d->db, "ROLLBACK", NULL, NULL, NULL);
        return -1;
    }
    return 0;
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
    if (prep(d,
             "SELECT trial, attempt, token, pid, gpus, started, slurm_job, agent FROM bfd_runs"
             " ORDER BY trial",
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
                return bf_fail(err, errlen, "out of memory");
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
        const unsigned char *sj = sqlite3_column_text(st, 6);
        snprintf(r->slurm_job, sizeof r->slurm_job, "%s", sj ? (const char *)sj : "");
        const unsigned char *ag = sqlite3_column_text(st, 7);
        snprintf(r->agent, sizeof r->agent, "%s", ag ? (const char *)ag : "");
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(*out);
        *out = NULL;
        return bf_fail(err, errlen, "sqlite3_step(SELECT bfd_runs): %s", sqlite3_errmsg(d->db));
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
        return bf_fail(err, errlen, "sqlite3_step(SELECT bfd_jobs): %s", sqlite3_errmsg(d->db));
    return 0;
}
