/* store_trials.c — trials: their rows as callers read them, and the trial
 * state machine. Every change of a trial's state is made by
 * store_transition here, against store_transition_legal's edges and the
 * job's retries, with its attempt row, its event, and the stage its attempt
 * runs (stage_follow) in the caller's transaction; the public moves
 * (transition, fail, preempt, resume) are one transaction each around it.
 * Nothing here plans or claims stages (store_stages.c) or writes points
 * (store_points.c), and no other file writes trials.state. */
#include "jobs/store_priv.h"
#include "common/errbuf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------- state machine */

int store_transition_legal(trial_state from, trial_state to) {
    switch (from) {
    case TRIAL_PENDING:
        return to == TRIAL_RUNNING || to == TRIAL_CANCELLED;
    case TRIAL_RUNNING:
        /* RUNNING -> PENDING is a preemption: the attempt checkpointed on
         * SIGTERM (exit 75) and the trial waits to resume, retries untouched */
        return to == TRIAL_COMPLETED || to == TRIAL_FAILED || to == TRIAL_CANCELLED ||
               to == TRIAL_STOPPED || to == TRIAL_PENDING;
    case TRIAL_FAILED:
        return to == TRIAL_PENDING;
    case TRIAL_STOPPED:
        return to == TRIAL_PENDING; /* resume: a manual promotion */
    default:
        return 0;
    }
}

/* *attempts counts every start; *failures those that did not end in a
 * preemption or a finished stage (what retries are measured against). */
static int load_state(store *s, int64_t trial, trial_state *state, int *attempts, int *failures,
                      int *retries, int64_t *job, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "SELECT t.state, t.attempts, j.retries, t.job,"
                      " t.attempts - t.preemptions - t.stage_runs"
                      " FROM trials t JOIN jobs j ON j.id = t.job WHERE t.id = ?1",
                      &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, trial);
    int rc = sqlite3_step(st), out = -1;
    if (rc == SQLITE_ROW) {
        if (store_state_parse((const char *)sqlite3_column_text(st, 0), state) < 0) {
            bf_fail(err, errlen, "trial %lld has an unknown state '%s' in the database",
                    (long long)trial, (const char *)sqlite3_column_text(st, 0));
        } else {
            *attempts = sqlite3_column_int(st, 1);
            *retries = sqlite3_column_int(st, 2);
            *job = sqlite3_column_int64(st, 3);
            *failures = sqlite3_column_int(st, 4);
            out = 0;
        }
    } else if (rc == SQLITE_DONE) {
        bf_fail(err, errlen, "no trial with id %lld", (long long)trial);
    } else {
        store_sqlfail(s, err, errlen, "sqlite3_step(SELECT trial state)");
    }
    store_done(s, st);
    return out;
}

/* The stage the RUNNING trial's attempt runs follows the trial's own
 * transition `to` (from RUNNING), in the caller's transaction. */
static int stage_follow(store *s, int64_t trial, int64_t job, trial_state to, int stage_done,
                        int retries, const char *message, double t, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(
            s, "SELECT key, name, failures FROM stages WHERE trial = ?1 AND state = 'running'", &st,
            err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, trial);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        store_done(s, st);
        return rc == SQLITE_DONE ? 0 : store_sqlfail(s, err, errlen, "sqlite3_step(SELECT stage)");
    }
    char key[17], name[16];
    store_col_text(st, 0, key, sizeof key);
    store_col_text(st, 1, name, sizeof name);
    int failures = sqlite3_column_int(st, 2);
    store_done(s, st);
    stage_state next = STAGE_PENDING;
    if (to == TRIAL_COMPLETED || stage_done) {
        next = STAGE_DONE;
    } else if (to == TRIAL_FAILED) {
        failures++;
        next = failures > retries ? STAGE_FAILED : STAGE_PENDING;
    }
    if (store_prepare(s,
                      "UPDATE stages SET state = ?1, failures = ?2, ended = ?3, message = ?4"
                      " WHERE key = ?5",
                      &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_text(st, 1, store_stage_state_name(next), -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, failures);
    sqlite3_bind_double(st, 3, t);
    sqlite3_bind_text(st, 4, message ? message : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, key, -1, SQLITE_STATIC);
    if (store_step_done(s, st, "sqlite3_step(UPDATE stages)", err, errlen) < 0) return -1;
    char label[64], msg[512];
    store_stage_label(label, sizeof label, name, key);
    if (next == STAGE_DONE)
        snprintf(msg, sizeof msg, "stage %s done (run by t%lld)", label, (long long)trial);
    else if (next == STAGE_FAILED)
        snprintf(msg, sizeof msg, "stage %s failed for good after %d attempt%s (run by t%lld): %s",
                 label, failures, failures == 1 ? "" : "s", (long long)trial,
                 message ? message : "");
    else if (to == TRIAL_FAILED)
        snprintf(msg, sizeof msg, "stage %s failed (run by t%lld), %d of %d attempts: %s", label,
                 (long long)trial, failures, 1 + retries, message ? message : "");
    else
        snprintf(msg, sizeof msg, "stage %s released by t%lld (%s)", label, (long long)trial,
                 store_state_name(to));
    return store_event(s, job, trial, "stage", msg, err, errlen);
}

/* The transition itself, inside a transaction the caller holds; stage_done:
 * a RUNNING -> PENDING that ended the attempt's stage (not a preemption). */
int store_transition(store *s, int64_t trial, trial_state to, const char *message, int stage_done,
                     char *err, size_t errlen) {
    trial_state from;
    int attempts, failures, retries;
    int64_t job;
    if (load_state(s, trial, &from, &attempts, &failures, &retries, &job, err, errlen) < 0)
        return -1;
    if (!store_transition_legal(from, to))
        return bf_fail(err, errlen, "illegal transition for trial %lld: %s -> %s", (long long)trial,
                       store_state_name(from), store_state_name(to));
    if (from == TRIAL_FAILED && to == TRIAL_PENDING && failures > retries)
        return bf_fail(err, errlen,
                       "trial %lld has no retries left: %d attempt%s made, the job allows %d "
                       "(1 + retries %d)",
                       (long long)trial, failures, failures == 1 ? "" : "s", 1 + retries, retries);
    stage_done = stage_done && from == TRIAL_RUNNING && to == TRIAL_PENDING;
    int preempted = from == TRIAL_RUNNING && to == TRIAL_PENDING && !stage_done;
    double t = store_now();
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "UPDATE trials SET state = ?1, attempts = attempts + ?2,"
                      " preemptions = preemptions + ?5, stage_runs = stage_runs + ?6, updated = ?3"
                      " WHERE id = ?4",
                      &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_text(st, 1, store_state_name(to), -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, to == TRIAL_RUNNING);
    sqlite3_bind_double(st, 3, t);
    sqlite3_bind_int64(st, 4, trial);
    sqlite3_bind_int(st, 5, preempted);
    sqlite3_bind_int(st, 6, stage_done);
    if (store_step_done(s, st, "sqlite3_step(UPDATE trials SET state)", err, errlen) < 0) return -1;
    if (to == TRIAL_RUNNING) {
        if (store_prepare(s, "INSERT INTO attempts(trial, n, started) VALUES (?1, ?2, ?3)", &st,
                          err, errlen) < 0)
            return -1;
        sqlite3_bind_int64(st, 1, trial);
        sqlite3_bind_int(st, 2, attempts + 1);
        sqlite3_bind_double(st, 3, t);
        if (store_step_done(s, st, "sqlite3_step(INSERT INTO attempts)", err, errlen) < 0)
            return -1;
    } else if (from == TRIAL_RUNNING) {
        if (store_prepare(
                s,
                "UPDATE attempts SET ended = ?1, outcome = ?2, message = ?3 WHERE trial = ?4 "
                "AND n = ?5",
                &st, err, errlen) < 0)
            return -1;
        sqlite3_bind_double(st, 1, t);
        sqlite3_bind_text(st, 2,
                          preempted    ? "PREEMPTED"
                          : stage_done ? "STAGE_DONE"
                                       : store_state_name(to),
                          -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, message ? message : "", -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, trial);
        sqlite3_bind_int(st, 5, attempts);
        if (store_step_done(s, st, "sqlite3_step(UPDATE attempts)", err, errlen) < 0) return -1;
        if (stage_follow(s, trial, job, to, stage_done, retries, message, t, err, errlen) < 0)
            return -1;
    }
    char msg[512];
    snprintf(msg, sizeof msg, "%s -> %s%s%s", store_state_name(from), store_state_name(to),
             message && *message ? ": " : "", message ? message : "");
    return store_event(s, job, trial, preempted ? "preempt" : "state", msg, err, errlen);
}

int store_trial_transition(store *s, int64_t trial_id, trial_state to, const char *message,
                           char *err, size_t errlen) {
    if (store_begin(s, err, errlen) < 0) return -1;
    if (store_transition(s, trial_id, to, message, 0, err, errlen) < 0 ||
        store_commit(s, err, errlen) < 0) {
        store_rollback(s);
        return -1;
    }
    return 0;
}

int store_trial_fail(store *s, int64_t trial_id, const char *message, int *requeued, char *err,
                     size_t errlen) {
    *requeued = 0;
    if (store_begin(s, err, errlen) < 0) return -1;
    if (store_transition(s, trial_id, TRIAL_FAILED, message, 0, err, errlen) < 0) goto fail;
    trial_state st;
    int attempts, failures, retries;
    int64_t job;
    if (load_state(s, trial_id, &st, &attempts, &failures, &retries, &job, err, errlen) < 0)
        goto fail;
    if (failures <= retries) {
        if (store_transition(s, trial_id, TRIAL_PENDING, "retry", 0, err, errlen) < 0) goto fail;
        *requeued = 1;
    }
    if (store_commit(s, err, errlen) < 0) goto fail;
    return 0;
fail:
    store_rollback(s);
    *requeued = 0;
    return -1;
}

/* Begins a transaction for a move that only a trial in state `want` may
 * make ("only a WANT trial can be VERB"); *job its job. On failure no
 * transaction is left open. */
static int begin_in_state(store *s, int64_t trial, trial_state want, const char *verb, int64_t *job,
                          char *err, size_t errlen) {
    trial_state from;
    int attempts, failures, retries;
    if (store_begin(s, err, errlen) < 0) return -1;
    if (load_state(s, trial, &from, &attempts, &failures, &retries, job, err, errlen) < 0) {
        store_rollback(s);
        return -1;
    }
    if (from != want) {
        bf_fail(err, errlen, "trial %lld is %s; only a %s trial can be %s", (long long)trial,
                store_state_name(from), store_state_name(want), verb);
        store_rollback(s);
        return -1;
    }
    return 0;
}

int store_trial_preempt(store *s, int64_t trial_id, const char *message, char *err, size_t errlen) {
    int64_t job;
    if (begin_in_state(s, trial_id, TRIAL_RUNNING, "preempted", &job, err, errlen) < 0) return -1;
    if (store_transition(s, trial_id, TRIAL_PENDING, message, 0, err, errlen) < 0 ||
        store_commit(s, err, errlen) < 0) {
        store_rollback(s);
        return -1;
    }
    return 0;
}

int store_trial_resume(store *s, int64_t trial_id, const char *message, char *err, size_t errlen) {
    int64_t job;
    if (begin_in_state(s, trial_id, TRIAL_STOPPED, "resumed", &job, err, errlen) < 0) return -1;
    sqlite3_stmt *st;
    if (store_prepare(s, "UPDATE trials SET stop_reason = NULL WHERE id = ?1", &st, err, errlen) <
        0)
        goto fail;
    sqlite3_bind_int64(st, 1, trial_id);
    if (store_step_done(s, st, "sqlite3_step(UPDATE trials SET stop_reason)", err, errlen) < 0)
        goto fail;
    if (store_transition(s, trial_id, TRIAL_PENDING, message, 0, err, errlen) < 0 ||
        store_event(s, job, trial_id, "resume", message, err, errlen) < 0 ||
        store_commit(s, err, errlen) < 0)
        goto fail;
    return 0;
fail:
    store_rollback(s);
    return -1;
}

/* ------------------------------------------------------------------ reads */

void store_trial_free(store_trial *t) {
    if (!t) return;
    free(t->params_json);
    free(t->config);
    free(t->latest_json);
    free(t->stop_reason);
    free(t->point_json);
    t->params_json = t->config = t->latest_json = t->stop_reason = t->point_json = NULL;
}

void store_trials_free(store_trial *t, size_t n) {
    if (!t) return;
    for (size_t i = 0; i < n; i++) store_trial_free(&t[i]);
    free(t);
}

/* Columns: 0 id, 1 job, 2 idx, 3 state, 4 attempts, 5 retries, 6 priority,
 * 7 hash, 8 params, 9 preemptions, 10 stop reason, 11 point, 12 config,
 * 13 latest json, 14 best. */
#define TRIAL_COLS                                                                                 \
    "t.id, t.job, t.idx, t.state, t.attempts, j.retries, j.priority, t.hash, t.params,"            \
    " t.preemptions, t.stop_reason, t.point, j.source_trial"

#define TRIAL_NCOLS 13

static void row_to_trial(sqlite3_stmt *st, store_trial *t, int ncols) {
    memset(t, 0, sizeof *t);
    t->id = sqlite3_column_int64(st, 0);
    t->job_id = sqlite3_column_int64(st, 1);
    t->index = sqlite3_column_int64(st, 2);
    if (store_state_parse((const char *)sqlite3_column_text(st, 3), &t->state) < 0)
        t->state = TRIAL_N_STATES;
    t->attempts = sqlite3_column_int(st, 4);
    t->retries = sqlite3_column_int(st, 5);
    t->priority = sqlite3_column_int(st, 6);
    store_col_text(st, 7, t->hash, sizeof t->hash);
    t->params_json = store_col_dup(st, 8);
    t->preemptions = sqlite3_column_int(st, 9);
    t->stop_reason = store_col_dup(st, 10);
    t->point_json = store_col_dup(st, 11);
    t->source_trial = sqlite3_column_int64(st, 12);
    t->best = NAN;
    if (ncols > 13) t->config = store_col_dup(st, 13);
    if (ncols > 14) t->latest_json = store_col_dup(st, 14);
    if (ncols > 15 && sqlite3_column_type(st, 15) != SQLITE_NULL)
        t->best = sqlite3_column_double(st, 15);
}

static void read_trial(sqlite3_stmt *st, void *row, void *ud) {
    row_to_trial(st, row, *(const int *)ud);
}

static void release_trials(void *rows, size_t n) { store_trials_free(rows, n); }

/* Runs a prepared query with bound parameters and collects trial rows of
 * ncols columns (TRIAL_COLS and up to three more). */
static int collect(store *s, sqlite3_stmt *st, int ncols, store_trial **out, size_t *n, char *err,
                   size_t errlen) {
    void *rows = NULL;
    if (store_rows(s, st, sizeof **out, 16, read_trial, &ncols, release_trials, &rows, n,
                   "SELECT trials", err, errlen) < 0)
        return -1;
    *out = rows;
    return 0;
}

int store_get_trial(store *s, int64_t trial_id, store_trial *out, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "SELECT " TRIAL_COLS
                      ", t.config FROM trials t JOIN jobs j ON j.id = t.job WHERE t.id = ?1",
                      &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, trial_id);
    store_trial *rows = NULL;
    size_t n = 0;
    if (collect(s, st, TRIAL_NCOLS + 1, &rows, &n, err, errlen) < 0) return -1;
    if (n == 0) {
        free(rows);
        return bf_fail(err, errlen, "no trial with id %lld", (long long)trial_id);
    }
    *out = rows[0];
    free(rows);
    return 0;
}

int store_next_runnable(store *s, int limit, store_trial **out, size_t *n, char *err,
                        size_t errlen) {
    *out = NULL;
    *n = 0;
    /* the open jobs with a pending trial, by priority then submit order (from
     * trial_counts), then each one's first pending trials by the (state,
     * job, idx) index: one query over every pending trial sorted them all
     * for each pass, and walked a cancelled job's 100,000 still waiting */
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "SELECT j.id FROM jobs j JOIN trial_counts c ON c.job = j.id AND"
                      " c.state = 'PENDING' AND c.n > 0 WHERE j.hidden = 0 AND j.closed = 0"
                      " ORDER BY j.priority DESC, j.submitted, j.id",
                      &st, err, errlen) < 0)
        return -1;
    int64_t *jobs = NULL;
    size_t nj = 0;
    if (store_collect_column(s, st, &jobs, NULL, &nj, "store_next_runnable: SELECT jobs", err,
                             errlen) < 0)
        return -1;
    store_trial *all = NULL;
    size_t na = 0;
    for (size_t k = 0; k < nj && na < (size_t)limit; k++) {
        if (store_prepare(s,
                          "SELECT " TRIAL_COLS " FROM trials t JOIN jobs j ON j.id = t.job"
                          " WHERE t.state = 'PENDING' AND t.job = ?1 ORDER BY t.idx LIMIT ?2",
                          &st, err, errlen) < 0)
            goto fail;
        sqlite3_bind_int64(st, 1, jobs[k]);
        sqlite3_bind_int(st, 2, limit - (int)na);
        store_trial *part = NULL;
        size_t np = 0;
        if (collect(s, st, TRIAL_NCOLS, &part, &np, err, errlen) < 0) goto fail;
        store_trial *grown = np ? realloc(all, (na + np) * sizeof *all) : all;
        if (np && !grown) {
            store_trials_free(part, np);
            bf_fail(err, errlen, "store_next_runnable: out of memory");
            goto fail;
        }
        all = grown;
        if (np) memcpy(all + na, part, np * sizeof *part);
        na += np;
        free(part); /* its rows' strings now belong to all */
    }
    free(jobs);
    *out = all;
    *n = na;
    return 0;
fail:
    store_trials_free(all, na);
    free(jobs);
    return -1;
}

#define LATEST_AND_BEST                                                                            \
    ", NULL,"                                                                                      \
    " (SELECT json_group_object(name, json_object('step', step, 'value', value)) FROM"             \
    "  (SELECT n.name AS name, l.step AS step, l.value AS value FROM metric_latest l"              \
    "   JOIN metric_names n ON n.id = l.name WHERE l.trial = t.id ORDER BY n.name)),"              \
    " (SELECT CASE j.metric_goal WHEN 'max' THEN l.vmax ELSE l.vmin END"                           \
    "  FROM metric_latest l JOIN metric_names n ON n.id = l.name"                                  \
    "  WHERE l.trial = t.id AND n.name = j.metric_name) AS best"

int store_job_trials_page(store *s, int64_t job_id, long long after, int limit, store_trial **out,
                          size_t *n, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "SELECT " TRIAL_COLS LATEST_AND_BEST
                      " FROM trials t JOIN jobs j ON j.id = t.job WHERE t.job = ?1 AND t.idx > ?2"
                      " ORDER BY t.idx LIMIT ?3",
                      &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int(st, 3, limit > 0 ? limit : -1);
    return collect(s, st, TRIAL_NCOLS + 3, out, n, err, errlen);
}

int store_job_params_page(store *s, int64_t job_id, long long after, int limit, char ***params,
                          size_t *n, long long *last, char *err, size_t errlen) {
    *params = NULL;
    *n = 0;
    *last = after;
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "SELECT idx, params FROM trials WHERE job = ?1 AND idx > ?2 ORDER BY idx"
                      " LIMIT ?3",
                      &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int(st, 3, limit);
    char **out = limit > 0 ? calloc((size_t)limit, sizeof *out) : NULL;
    int rc = out ? SQLITE_ROW : SQLITE_NOMEM;
    while (out && (rc = sqlite3_step(st)) == SQLITE_ROW && *n < (size_t)limit) {
        char *p = store_col_dup(st, 1);
        if (!p) {
            rc = SQLITE_NOMEM;
            break;
        }
        out[(*n)++] = p;
        *last = sqlite3_column_int64(st, 0);
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        if (rc == SQLITE_NOMEM)
            bf_fail(err, errlen, "store_job_params_page: out of memory");
        else
            store_sqlfail(s, err, errlen, "sqlite3_step(SELECT trials.params)");
        store_done(s, st);
        for (size_t i = 0; i < *n; i++) free(out[i]);
        free(out);
        *n = 0;
        *last = after;
        return -1;
    }
    store_done(s, st);
    *params = out;
    return 0;
}

int store_job_trials(store *s, int64_t job_id, store_trial **out, size_t *n, char *err,
                     size_t errlen) {
    return store_job_trials_page(s, job_id, -1, 0, out, n, err, errlen);
}

int store_best_trials(store *s, int64_t job_id, int limit, store_trial **out, size_t *n, char *err,
                      size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "SELECT * FROM (SELECT " TRIAL_COLS LATEST_AND_BEST ", j.metric_goal AS goal"
                      " FROM trials t JOIN jobs j ON j.id = t.job WHERE t.job = ?1)"
                      " WHERE best IS NOT NULL"
                      " ORDER BY CASE goal WHEN 'max' THEN -best ELSE best END, idx LIMIT ?2",
                      &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, job_id);
    sqlite3_bind_int(st, 2, limit);
    return collect(s, st, TRIAL_NCOLS + 3, out, n, err, errlen);
}

int store_trial_job(store *s, int64_t trial_id, int64_t *job_id, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s, "SELECT job FROM trials WHERE id = ?1", &st, err, errlen) < 0) return -1;
    sqlite3_bind_int64(st, 1, trial_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *job_id = sqlite3_column_int64(st, 0);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        store_sqlfail(s, err, errlen, "sqlite3_step(SELECT trials.job)");
    store_done(s, st);
    return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? 1 : -1;
}

int store_trial_last_failure(store *s, int64_t trial_id, int *attempt, char *message, size_t mlen,
                             char *err, size_t errlen) {
    *attempt = 0;
    if (mlen) message[0] = '\0';
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "SELECT n, message FROM attempts WHERE trial = ?1 AND outcome = 'FAILED'"
                      " ORDER BY n DESC LIMIT 1",
                      &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, trial_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *attempt = sqlite3_column_int(st, 0);
        store_col_text(st, 1, message, mlen);
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        store_sqlfail(s, err, errlen, "sqlite3_step(SELECT attempts FAILED)");
    store_done(s, st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

int store_running_trials(store *s, int64_t **out, size_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    if (store_prepare(s, "SELECT id FROM trials WHERE state = 'RUNNING' ORDER BY id", &st, err,
                      errlen) < 0)
        return -1;
    return store_collect_column(s, st, out, NULL, n, "store_running_trials: SELECT RUNNING trials",
                                err, errlen);
}
