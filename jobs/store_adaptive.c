/* store_adaptive.c — the early-stopping decisions of adaptive sweeps: one
 * row per trial, method and rung step, committed before bfd acts on it, and
 * the values recorded at each ASHA rung. It decides nothing (the verdicts
 * are jobs/sched_stop.c's) and never moves a trial: a stop decided here
 * becomes the trial's stop reason, and bfd stops the trial through
 * store_trial_transition. */
#include "jobs/store_priv.h"
#include "common/errbuf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int store_decision_add(store *s, const store_decision *d, int *added, char *err, size_t errlen) {
    *added = 0;
    if (store_begin(s, err, errlen) < 0) return -1;
    sqlite3_stmt *st;
    if (store_prepare(
            s,
            "INSERT OR IGNORE INTO decisions(job, trial, method, rung, rung_step, step, value,"
            " cutoff, n, stop, reason, time, point) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
            " ?10, ?11, ?12, ?13)",
            &st, err, errlen) < 0)
        goto fail;
    sqlite3_bind_int64(st, 1, d->job);
    sqlite3_bind_int64(st, 2, d->trial);
    sqlite3_bind_text(st, 3, d->method, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 4, d->rung);
    sqlite3_bind_int64(st, 5, d->rung_step);
    sqlite3_bind_int64(st, 6, d->step);
    sqlite3_bind_double(st, 7, d->value);
    if (isfinite(d->cutoff)) sqlite3_bind_double(st, 8, d->cutoff);
    sqlite3_bind_int(st, 9, d->n);
    sqlite3_bind_int(st, 10, d->stop);
    sqlite3_bind_text(st, 11, d->reason, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 12, store_now());
    char point[SWEEP_MAX_OBJECTIVES * 26];
    size_t w = 0;
    for (int k = 0; k < d->n_point && k < SWEEP_MAX_OBJECTIVES; k++)
        w += (size_t)snprintf(point + w, sizeof point - w, "%s%.17g", k ? " " : "", d->point[k]);
    if (d->n_point > 0) sqlite3_bind_text(st, 13, point, -1, SQLITE_TRANSIENT);
    if (store_step_done(s, st, "sqlite3_step(INSERT INTO decisions)", err, errlen) < 0) goto fail;
    if (sqlite3_changes(s->db) == 0) { /* decided before (a restart, a resend) */
        if (store_commit(s, err, errlen) < 0) goto fail;
        return 0;
    }
    if (d->stop) {
        if (store_prepare(s, "UPDATE trials SET stop_reason = ?1 WHERE id = ?2", &st, err, errlen) <
            0)
            goto fail;
        sqlite3_bind_text(st, 1, d->reason, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, d->trial);
        if (store_step_done(s, st, "sqlite3_step(UPDATE trials SET stop_reason)", err, errlen) < 0)
            goto fail;
    }
    char msg[400];
    snprintf(msg, sizeof msg, "%s: %s", d->stop ? "stop" : "continue", d->reason);
    if (store_event(s, d->job, d->trial, "early_stop", msg, err, errlen) < 0 ||
        store_commit(s, err, errlen) < 0)
        goto fail;
    *added = 1;
    return 0;
fail:
    store_rollback(s);
    return -1;
}

static void read_decision(sqlite3_stmt *st, void *row, void *ud) {
    (void)ud;
    store_decision *d = row;
    d->id = sqlite3_column_int64(st, 0);
    d->job = sqlite3_column_int64(st, 1);
    d->trial = sqlite3_column_int64(st, 2);
    store_col_text(st, 3, d->method, sizeof d->method);
    d->rung = sqlite3_column_int(st, 4);
    d->rung_step = sqlite3_column_int64(st, 5);
    d->step = sqlite3_column_int64(st, 6);
    d->value = sqlite3_column_double(st, 7);
    d->cutoff = sqlite3_column_type(st, 8) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 8);
    d->n = sqlite3_column_int(st, 9);
    d->stop = sqlite3_column_int(st, 10);
    store_col_text(st, 11, d->reason, sizeof d->reason);
    d->time = sqlite3_column_double(st, 12);
    const char *p = (const char *)sqlite3_column_text(st, 13);
    char *end;
    while (p && *p && d->n_point < SWEEP_MAX_OBJECTIVES) {
        double x = strtod(p, &end);
        if (end == p) break;
        d->point[d->n_point++] = x;
        p = end;
    }
}

int store_decisions(store *s, int64_t job, int64_t trial, store_decision **out, size_t *n,
                    char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    if (store_prepare(
            s,
            "SELECT id, job, trial, method, rung, rung_step, step, value, cutoff, n, stop,"
            " reason, time, point FROM decisions WHERE (?1 <= 0 OR job = ?1) AND (?2 <= 0 OR"
            " trial = ?2) ORDER BY id",
            &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, trial);
    void *rows = NULL;
    if (store_rows(s, st, sizeof **out, 16, read_decision, NULL, NULL, &rows, n, "SELECT decisions",
                   err, errlen) < 0)
        return -1;
    *out = rows;
    return 0;
}

int store_rung_values(store *s, int64_t job, const char *method, int rung, double **vals, size_t *n,
                      char *err, size_t errlen) {
    *vals = NULL;
    *n = 0;
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "SELECT value FROM decisions WHERE job = ?1 AND method = ?3 AND rung = ?2"
                      " ORDER BY id",
                      &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int(st, 2, rung);
    sqlite3_bind_text(st, 3, method, -1, SQLITE_TRANSIENT);
    return store_collect_column(s, st, NULL, vals, n, "store_rung_values: SELECT rung values", err,
                                errlen);
}

int store_rung_points(store *s, int64_t job, const char *method, int rung, int m, double **vals,
                      size_t *n, char *err, size_t errlen) {
    *vals = NULL;
    *n = 0;
    store_decision *ds = NULL;
    size_t nd = 0;
    if (store_decisions(s, job, 0, &ds, &nd, err, errlen)) return -1;
    *vals = malloc((nd ? nd : 1) * (size_t)(m > 0 ? m : 1) * sizeof **vals);
    if (!*vals) {
        free(ds);
        return bf_fail(err, errlen, "store_rung_points: out of memory");
    }
    for (size_t i = 0; i < nd; i++)
        if (ds[i].rung == rung && ds[i].n_point == m && strcmp(ds[i].method, method) == 0)
            memcpy(*vals + (*n)++ * (size_t)m, ds[i].point, (size_t)m * sizeof **vals);
    free(ds);
    return 0;
}
