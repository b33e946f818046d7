/* store_stages.c — the shared stages of s2s trials (store.h, "shared
 * stages"): the plan written with each s2s trial, the one row per stage key
 * that every trial needing it shares, what a PENDING trial does next (run,
 * wait, fail, or reuse every stage), claiming a stage at launch, and the
 * counts of sharing. It makes no trial move of its own: each one here goes
 * through store_transition (store_trials.c), which also moves the stage
 * the attempt ran; the stage rows are plain bookkeeping around it. */
#include "jobs/store_priv.h"
#include "common/errbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int store_put_plan(store *s, int64_t trial, const bf_config *c, char *err, size_t errlen) {
    const stage_graph *g = c ? pipeline_stages(c->pipeline) : NULL;
    if (!g) return 0;
    stage_node plan[STAGE_MAX];
    int n = stage_graph_plan(g, c, plan);
    for (int i = 0; i < n; i++) {
        sqlite3_stmt *st = s->ins_plan;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, trial);
        sqlite3_bind_int(st, 2, i);
        sqlite3_bind_text(st, 3, plan[i].name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, plan[i].key, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 5, plan[i].parent, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 6, plan[i].dir, -1, SQLITE_TRANSIENT);
        int rc = sqlite3_step(st);
        sqlite3_reset(st);
        if (rc != SQLITE_DONE)
            return store_sqlfail(s, err, errlen, "sqlite3_step(INSERT INTO trial_stages)");
    }
    return 0;
}

#define STAGE_COLS                                                                                 \
    "ts.idx, ts.name, ts.key, ts.parent, ts.dir, st.state, st.trial,"                              \
    " (SELECT job FROM trials WHERE id = st.trial), st.attempts, st.failures, st.created,"         \
    " st.started, st.ended, st.message, (SELECT state FROM trials WHERE id = st.trial),"           \
    " ts.waited, (SELECT name FROM trial_stages n WHERE n.trial = ts.trial AND n.idx = ts.idx + "  \
    "1)"

/* One row of STAGE_COLS into *o; *runner_state the runner's trial state
 * (TRIAL_N_STATES: none), *waited the plan row's flag. */
static void read_stage_row(sqlite3_stmt *st, store_stage *o, trial_state *runner_state,
                           int *waited) {
    memset(o, 0, sizeof *o);
    o->idx = sqlite3_column_int(st, 0);
    store_col_text(st, 1, o->name, sizeof o->name);
    store_col_text(st, 2, o->key, sizeof o->key);
    store_col_text(st, 3, o->parent, sizeof o->parent);
    store_col_text(st, 4, o->dir, sizeof o->dir);
    store_col_text(st, 16, o->next, sizeof o->next);
    o->known = sqlite3_column_type(st, 5) != SQLITE_NULL;
    if (o->known) {
        o->state = store_stage_state_of(sqlite3_column_text(st, 5));
        o->trial = sqlite3_column_int64(st, 6);
        o->job = sqlite3_column_int64(st, 7);
        o->attempts = sqlite3_column_int(st, 8);
        o->failures = sqlite3_column_int(st, 9);
        o->created = sqlite3_column_double(st, 10);
        o->started = sqlite3_column_double(st, 11);
        o->ended = sqlite3_column_double(st, 12);
        store_col_text(st, 13, o->message, sizeof o->message);
    }
    trial_state rs = TRIAL_N_STATES;
    if (sqlite3_column_type(st, 14) != SQLITE_NULL &&
        store_state_parse((const char *)sqlite3_column_text(st, 14), &rs) < 0)
        rs = TRIAL_N_STATES;
    if (runner_state) *runner_state = rs;
    if (waited) *waited = sqlite3_column_int(st, 15);
}

/* The plan of trial with its rows; *n 0 (a pipeline without stages) or its
 * graph's count, rows idx 0..n-1. */
static int load_plan(store *s, int64_t trial, store_stage out[STAGE_MAX],
                     trial_state runner[STAGE_MAX], int waited[STAGE_MAX], int *n, char *err,
                     size_t errlen) {
    sqlite3_stmt *st;
    *n = 0;
    if (store_prepare(s,
                      "SELECT " STAGE_COLS
                      " FROM trial_stages ts LEFT JOIN stages st ON st.key = ts.key"
                      " WHERE ts.trial = ?1 ORDER BY ts.idx",
                      &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, trial);
    int rc;
    int gap = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && *n < STAGE_MAX) {
        read_stage_row(st, &out[*n], runner ? &runner[*n] : NULL, waited ? &waited[*n] : NULL);
        gap |= out[*n].idx != *n;
        (*n)++;
    }
    store_done(s, st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return store_sqlfail(s, err, errlen, "sqlite3_step(SELECT trial_stages)");
    if (gap || rc == SQLITE_ROW)
        return bf_fail(err, errlen,
                       "trial %lld: its stages in the database are not 0..%d in order (at most %d)",
                       (long long)trial, *n - 1, STAGE_MAX);
    return 0;
}

int store_trial_stages(store *s, int64_t trial, store_stage out[STAGE_MAX], int *n, char *err,
                       size_t errlen) {
    return load_plan(s, trial, out, NULL, NULL, n, err, errlen);
}

/* When the trial's job was submitted. */
static int job_submitted(store *s, int64_t trial, double *t, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(
            s, "SELECT j.submitted FROM trials t JOIN jobs j ON j.id = t.job WHERE t.id = ?1", &st,
            err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, trial);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *t = sqlite3_column_double(st, 0);
    store_done(s, st);
    if (rc == SQLITE_ROW) return 0;
    if (rc == SQLITE_DONE) return bf_fail(err, errlen, "no trial with id %lld", (long long)trial);
    return store_sqlfail(s, err, errlen, "sqlite3_step(SELECT jobs.submitted)");
}

/* What the trial does with stage o (not done): claim it, wait, or fail. */
static stage_next stage_verdict(const store_stage *o, trial_state runner, int64_t trial,
                                double submitted) {
    if (!o->known || o->state == STAGE_PENDING) return STAGE_NEXT_RUN;
    if (o->state == STAGE_RUNNING)
        return o->trial != trial && runner == TRIAL_RUNNING ? STAGE_NEXT_WAIT : STAGE_NEXT_RUN;
    if (o->state == STAGE_FAILED) return o->ended < submitted ? STAGE_NEXT_RUN : STAGE_NEXT_FAILED;
    return STAGE_NEXT_RUN;
}

int store_stage_next(store *s, int64_t trial, stage_next *next, int *idx, char *reason,
                     size_t reasonlen, int *first_wait, char *err, size_t errlen) {
    *next = STAGE_NEXT_NONE;
    *idx = 0;
    *first_wait = 0;
    if (reasonlen) reason[0] = '\0';
    store_stage plan[STAGE_MAX];
    trial_state runner[STAGE_MAX];
    int waited[STAGE_MAX], n;
    double submitted = 0;
    if (store_begin(s, err, errlen) < 0) return -1;
    if (load_plan(s, trial, plan, runner, waited, &n, err, errlen) < 0) goto fail;
    if (n == 0) return store_commit(s, err, errlen);
    if (job_submitted(s, trial, &submitted, err, errlen) < 0) goto fail;
    int i = 0;
    while (i < n && plan[i].known && plan[i].state == STAGE_DONE) i++;
    *idx = i;
    if (i == n) {
        *next = STAGE_NEXT_REUSED;
        return store_commit(s, err, errlen);
    }
    store_stage *o = &plan[i];
    *next = stage_verdict(o, runner[i], trial, submitted);
    char label[64];
    store_stage_label(label, sizeof label, o->name, o->key);
    if (*next == STAGE_NEXT_WAIT) {
        snprintf(reason, reasonlen, "waiting for stage %s of t%lld", label, (long long)o->trial);
        if (!waited[i]) {
            sqlite3_stmt *st;
            if (store_prepare(s, "UPDATE trial_stages SET waited = 1 WHERE trial = ?1 AND idx = ?2",
                              &st, err, errlen) < 0)
                goto fail;
            sqlite3_bind_int64(st, 1, trial);
            sqlite3_bind_int(st, 2, i);
            if (store_step_done(s, st, "sqlite3_step(UPDATE trial_stages)", err, errlen) < 0)
                goto fail;
            int64_t job = 0;
            if (store_trial_job(s, trial, &job, err, errlen) < 0 ||
                store_event(s, job, trial, "stage", reason, err, errlen) < 0)
                goto fail;
            *first_wait = 1;
        }
    } else if (*next == STAGE_NEXT_FAILED) {
        snprintf(reason, reasonlen, "stage %s failed (run by t%lld): %s", label,
                 (long long)o->trial, o->message);
    }
    return store_commit(s, err, errlen);
fail:
    store_rollback(s);
    return -1;
}

int store_stage_launch(store *s, int64_t trial, int idx, const char *message, char *err,
                       size_t errlen) {
    store_stage plan[STAGE_MAX];
    trial_state runner[STAGE_MAX];
    int n;
    double submitted = 0;
    if (store_begin(s, err, errlen) < 0) return -1;
    if (load_plan(s, trial, plan, runner, NULL, &n, err, errlen) < 0 ||
        job_submitted(s, trial, &submitted, err, errlen) < 0)
        goto fail;
    if (idx < 0 || idx >= n) {
        bf_fail(err, errlen, "trial %lld has no stage %d%s", (long long)trial, idx,
                n ? "" : " (it is not an s2s trial)");
        goto fail;
    }
    store_stage *o = &plan[idx];
    char label[64];
    store_stage_label(label, sizeof label, o->name, o->key);
    if (o->known && o->state == STAGE_DONE) {
        bf_fail(err, errlen, "stage %s is done already (run by t%lld)", label, (long long)o->trial);
        goto fail;
    }
    if (stage_verdict(o, runner[idx], trial, submitted) != STAGE_NEXT_RUN) {
        bf_fail(err, errlen, "stage %s is %s (t%lld)", label, store_stage_state_name(o->state),
                (long long)o->trial);
        goto fail;
    }
    if (store_transition(s, trial, TRIAL_RUNNING, message, 0, err, errlen) < 0) goto fail;
    double t = store_now();
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "INSERT INTO stages(key, name, parent, dir, state, trial, attempts, failures,"
                      " created, started) VALUES (?1, ?2, ?3, ?4, 'running', ?5, 1, 0, ?6, ?6)"
                      " ON CONFLICT (key) DO UPDATE SET state = 'running', trial = excluded.trial,"
                      "  attempts = attempts + 1,"
                      "  failures = CASE WHEN state = 'failed' THEN 0 ELSE failures END,"
                      "  started = excluded.started, ended = NULL, message = ''",
                      &st, err, errlen) < 0)
        goto fail;
    sqlite3_bind_text(st, 1, o->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, o->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, o->parent, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, o->dir, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, trial);
    sqlite3_bind_double(st, 6, t);
    if (store_step_done(s, st, "sqlite3_step(INSERT INTO stages)", err, errlen) < 0) goto fail;
    int64_t job = 0;
    char msg[256];
    snprintf(msg, sizeof msg, "stage %s started by t%lld (its attempt %d)", label, (long long)trial,
             o->known ? o->attempts + 1 : 1);
    if (store_trial_job(s, trial, &job, err, errlen) < 0 ||
        store_event(s, job, trial, "stage", msg, err, errlen) < 0 ||
        store_commit(s, err, errlen) < 0)
        goto fail;
    return 0;
fail:
    store_rollback(s);
    return -1;
}

int store_trial_running_stage(store *s, int64_t trial, store_stage *out, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "SELECT " STAGE_COLS " FROM stages st JOIN trial_stages ts"
                      " ON ts.key = st.key AND ts.trial = st.trial"
                      " WHERE st.trial = ?1 AND st.state = 'running'",
                      &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, trial);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) read_stage_row(st, out, NULL, NULL);
    store_done(s, st);
    if (rc == SQLITE_ROW) return 0;
    if (rc == SQLITE_DONE) return 1;
    return store_sqlfail(s, err, errlen, "sqlite3_step(SELECT running stage)");
}

int store_trial_stage_done(store *s, int64_t trial, const char *message, char *err, size_t errlen) {
    store_stage o;
    if (store_begin(s, err, errlen) < 0) return -1;
    int rc = store_trial_running_stage(s, trial, &o, err, errlen);
    if (rc == 1) bf_fail(err, errlen, "trial %lld runs no stage", (long long)trial);
    if (rc != 0 || store_transition(s, trial, TRIAL_PENDING, message, 1, err, errlen) < 0 ||
        store_commit(s, err, errlen) < 0) {
        store_rollback(s);
        return -1;
    }
    return 0;
}

/* PENDING -> RUNNING (why) -> to (message): the attempt of a trial whose
 * outcome its stages already decided, in the caller's transaction. */
static int settle_without_run(store *s, int64_t trial, const char *why, trial_state to,
                              const char *message, char *err, size_t errlen) {
    if (store_transition(s, trial, TRIAL_RUNNING, why, 0, err, errlen) < 0) return -1;
    return store_transition(s, trial, to, message, 0, err, errlen);
}

int store_trial_stage_failed(store *s, int64_t trial, const char *message, char *err,
                             size_t errlen) {
    if (store_begin(s, err, errlen) < 0) return -1;
    if (settle_without_run(s, trial, "a stage it needs failed", TRIAL_FAILED, message, err,
                           errlen) < 0 ||
        store_commit(s, err, errlen) < 0) {
        store_rollback(s);
        return -1;
    }
    return 0;
}

int store_trial_stages_reused(store *s, int64_t trial, const char *message, char *err,
                              size_t errlen) {
    store_stage plan[STAGE_MAX];
    int n;
    if (store_begin(s, err, errlen) < 0) return -1;
    if (load_plan(s, trial, plan, NULL, NULL, &n, err, errlen) < 0) goto fail;
    for (int i = 0; i < n; i++)
        if (!plan[i].known || plan[i].state != STAGE_DONE) {
            bf_fail(err, errlen, "trial %lld: stage %s is not done", (long long)trial,
                    plan[i].name);
            goto fail;
        }
    if (n == 0) {
        bf_fail(err, errlen, "trial %lld is not an s2s trial", (long long)trial);
        goto fail;
    }
    const store_stage *ev = &plan[n - 1]; /* the last stage: its points are the trial's */
    if (ev->trial != trial && store_copy_eval_points(s, ev->trial, trial, err, errlen) < 0)
        goto fail;
    if (settle_without_run(s, trial, "every stage is done already", TRIAL_COMPLETED, message, err,
                           errlen) < 0 ||
        store_commit(s, err, errlen) < 0)
        goto fail;
    return 0;
fail:
    store_rollback(s);
    return -1;
}

int store_job_stage_counts(store *s, int64_t job, store_stage_counts *out, char *err,
                           size_t errlen) {
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st;
    if (store_prepare(
            s,
            "WITH u AS (SELECT ts.trial, ts.key, st.state, st.trial AS runner,"
            "  (SELECT job FROM trials WHERE id = st.trial) AS rjob"
            "  FROM trial_stages ts JOIN trials t ON t.id = ts.trial"
            "  LEFT JOIN stages st ON st.key = ts.key WHERE t.job = ?1)"
            " SELECT (SELECT COUNT(*) FROM u), (SELECT COUNT(DISTINCT key) FROM u),"
            "  (SELECT COUNT(*) FROM (SELECT key FROM u GROUP BY key HAVING COUNT(*) > 1)),"
            "  (SELECT COUNT(*) FROM u WHERE state IN ('done', 'running') AND runner <> trial),"
            "  (SELECT COUNT(DISTINCT key) FROM u WHERE rjob IS NOT NULL AND rjob <> ?1),"
            "  (SELECT COUNT(DISTINCT key) FROM u WHERE state = 'done' AND rjob = ?1),"
            "  (SELECT COUNT(DISTINCT key) FROM u WHERE state IS NULL OR state = 'pending'),"
            "  (SELECT COUNT(DISTINCT key) FROM u WHERE state = 'running'),"
            "  (SELECT COUNT(DISTINCT key) FROM u WHERE state = 'done'),"
            "  (SELECT COUNT(DISTINCT key) FROM u WHERE state = 'failed')",
            &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, job);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        out->uses = sqlite3_column_int64(st, 0);
        out->distinct = sqlite3_column_int64(st, 1);
        out->shared = sqlite3_column_int64(st, 2);
        out->reused = sqlite3_column_int64(st, 3);
        out->from_other_jobs = sqlite3_column_int64(st, 4);
        out->run = sqlite3_column_int64(st, 5);
        for (int k = 0; k < STAGE_N_STATES; k++) out->by_state[k] = sqlite3_column_int64(st, 6 + k);
    }
    store_done(s, st);
    return rc == SQLITE_ROW ? 0
                            : store_sqlfail(s, err, errlen, "sqlite3_step(SELECT stage counts)");
}
