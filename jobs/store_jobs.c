/* store_jobs.c — jobs: a submit (the job, every trial of a grid or random
 * sweep and their stage plans, in chunks of short transactions, the job
 * hidden until the last one commits), the trials a tpe job
 * proposes one by one, cancelling a job, the reads of jobs, and the counts
 * bfctl and the tests show. It never moves a trial by hand: a cancel goes
 * through store_transition, trial by trial. */
#include "jobs/store_priv.h"
#include "common/errbuf.h"
#include "jobs/sched_stop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- submit */

int store_insert_trial(store *s, sqlite3_stmt *st, int64_t job, const sweep_trial *t,
                       double updated, const char *point_json, int64_t *id, char *err,
                       size_t errlen) {
    sqlite3_reset(st);
    if (sqlite3_bind_int64(st, 1, job) != SQLITE_OK ||
        sqlite3_bind_int64(st, 2, t->index) != SQLITE_OK ||
        sqlite3_bind_text(st, 3, t->hash, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
        sqlite3_bind_text(st, 4, t->params_json, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
        sqlite3_bind_text(st, 5, t->config_text, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
        sqlite3_bind_double(st, 6, updated) != SQLITE_OK ||
        sqlite3_bind_text(st, 7, point_json, -1, SQLITE_TRANSIENT) != SQLITE_OK)
        return store_sqlfail(s, err, errlen, "sqlite3_bind(INSERT INTO trials)");
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_sqlfail(s, err, errlen, "sqlite3_step(INSERT INTO trials)");
    *id = sqlite3_last_insert_rowid(s->db);
    return store_put_plan(s, *id, t->config, err, errlen);
}

/* Trials written per transaction of a submit: the loop's metric flush waits
 * for at most one trial (store_others_wait), not for the whole expansion of a
 * 100,000-trial grid (which held one transaction for seconds). */
#define SUBMIT_CHUNK 500

typedef struct submit_ctx {
    store *s;
    sqlite3_stmt *ins;
    int64_t job;
    double t;
    int in_chunk; /* trials written in the open transaction */
    int deaf;     /* this chunk gives way to no one (a waiter did not come) */
    char *err;
    size_t errlen;
} submit_ctx;

static int submit_trial(void *ud, const sweep_trial *t) {
    submit_ctx *c = ud;
    int64_t id;
    if (store_insert_trial(c->s, c->ins, c->job, t, c->t, NULL, &id, c->err, c->errlen) < 0)
        return -1;
    /* a chunk ends early when another writer of bfd (the loop's metric
     * flush) waits for the lock: it goes in between two chunks */
    if (++c->in_chunk < SUBMIT_CHUNK && (c->deaf || !store_others_wait(c->s))) return 0;
    c->in_chunk = 0;
    /* the statement is reset so that the commit finds none in progress */
    sqlite3_reset(c->ins);
    int rc = store_give_way(c->s, c->err, c->errlen);
    /* a waiter that did not come within 100 ms (a stale count) costs one
     * wait per whole chunk, not one per trial */
    c->deaf = rc == 1;
    return rc < 0 ? -1 : 0;
}

int store_submit(store *s, const sweep_spec *spec, const char *source, int64_t *job_id, char *err,
                 size_t errlen) {
    if (store_begin(s, err, errlen) < 0) return -1;
    sqlite3_stmt *st = NULL;
    submit_ctx c = {s, NULL, 0, store_now(), 0, 0, err, errlen};
    long long n = spec->is_sweep ? spec->n_trials : 1;
    char early[512];
    if (sched_stop_json(spec, early, sizeof early) < 0) {
        bf_fail(err, errlen, "store_submit: early_stop does not fit in %zu bytes", sizeof early);
        goto fail;
    }
    char objectives[SWEEP_MAX_OBJECTIVES * 96];
    if (store_objectives_text(spec, objectives, sizeof objectives) < 0) {
        bf_fail(err, errlen, "store_submit: the objectives do not fit in %zu bytes",
                sizeof objectives);
        goto fail;
    }
    int tpe = spec->is_sweep && spec->method == SWEEP_TPE;
    if (store_prepare(
            s,
            "INSERT INTO jobs(name, pipeline, file, source, metric_name, metric_goal, priority,"
            " retries, ranks, gpus_per_rank, cpus_per_rank, time_limit_s, early_stop, n_trials,"
            " submitted, method, parallel, nodes, hidden, objectives, source_trial) VALUES (?1, ?2,"
            " ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, 1, ?19, "
            "?20)",
            &st, err, errlen) < 0)
        goto fail;
    sqlite3_bind_text(st, 1, spec->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, spec->base.pipeline, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, spec->file, -1, SQLITE_STATIC);
    if (source) sqlite3_bind_text(st, 4, source, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, spec->metric_name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, spec->metric_maximize ? "max" : "min", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 7, spec->priority);
    sqlite3_bind_int(st, 8, spec->retries);
    sqlite3_bind_int(st, 9, spec->resources.ranks);
    sqlite3_bind_int(st, 10, spec->resources.gpus_per_rank);
    sqlite3_bind_int(st, 11, spec->resources.cpus_per_rank);
    sqlite3_bind_int64(st, 12, spec->resources.time_limit_s);
    sqlite3_bind_text(st, 13, early, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 14, n);
    sqlite3_bind_text(st, 16, spec->is_sweep ? sweep_method_name(spec->method) : "grid", -1,
                      SQLITE_STATIC);
    sqlite3_bind_int(st, 17, tpe ? spec->parallel : 0);
    sqlite3_bind_int(st, 18, spec->resources.nodes);
    sqlite3_bind_text(st, 19, objectives, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 20, spec->source_trial);
    if (sqlite3_bind_double(st, 15, c.t) != SQLITE_OK) {
        store_sqlfail(s, err, errlen, "sqlite3_bind(INSERT INTO jobs)");
        goto fail;
    }
    if (sqlite3_step(st) != SQLITE_DONE) {
        store_sqlfail(s, err, errlen, "sqlite3_step(INSERT INTO jobs)");
        goto fail;
    }
    store_done(s, st);
    st = NULL;
    c.job = sqlite3_last_insert_rowid(s->db);
    if (store_prepare(s, STORE_INSERT_TRIAL, &c.ins, err, errlen) < 0) goto fail;
    /* a tpe job's trials are proposed later, one by one (store_add_trial) */
    if (!tpe && sweep_expand(spec, submit_trial, &c, err, errlen) != 0) goto fail;
    store_done(s, c.ins);
    c.ins = NULL;
    char msg[256];
    snprintf(msg, sizeof msg, "submitted '%s' with %lld trials%s", spec->name, n,
             tpe ? " to be proposed by tpe" : "");
    if (store_event(s, c.job, 0, "submit", msg, err, errlen) < 0 ||
        store_prepare(s, "UPDATE jobs SET hidden = 0 WHERE id = ?1", &st, err, errlen) < 0)
        goto fail;
    sqlite3_bind_int64(st, 1, c.job);
    if (store_step_done(s, st, "sqlite3_step(UPDATE jobs SET hidden = 0)", err, errlen) < 0) {
        st = NULL;
        goto fail;
    }
    st = NULL;
    if (store_commit(s, err, errlen) < 0) goto fail;
    *job_id = c.job;
    return 0;
fail:
    store_done(s, st);
    store_done(s, c.ins);
    store_rollback(s);
    /* chunks already committed stay hidden: the job is marked for removal
     * (store_prune_step deletes it); a crash here leaves it hidden (1), which
     * store_prune_abandoned marks at the next start */
    if (c.job > 0) {
        char e2[256];
        if (store_prune_mark(s, c.job, 0, e2, sizeof e2) < 0)
            snprintf(err + strlen(err), errlen - strlen(err), "; %s", e2);
    }
    return -1;
}

int store_add_trial(store *s, int64_t job, const sweep_trial *t, const char *point_json,
                    int64_t *trial_id, char *err, size_t errlen) {
    if (store_begin(s, err, errlen) < 0) return -1;
    sqlite3_stmt *st = NULL;
    long long have = 0, want = 0, closed = 0;
    if (store_prepare(
            s,
            "SELECT (SELECT IFNULL(SUM(n), 0) FROM trial_counts WHERE job = ?1), n_trials, closed"
            " FROM jobs"
            " WHERE id = ?1 AND hidden = 0",
            &st, err, errlen) < 0)
        goto fail;
    sqlite3_bind_int64(st, 1, job);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        have = sqlite3_column_int64(st, 0);
        want = sqlite3_column_int64(st, 1);
        closed = sqlite3_column_int64(st, 2);
    }
    store_done(s, st);
    st = NULL;
    if (rc != SQLITE_ROW) {
        if (rc == SQLITE_DONE)
            bf_fail(err, errlen, "no job with id %lld", (long long)job);
        else
            store_sqlfail(s, err, errlen, "sqlite3_step(SELECT job counts)");
        goto fail;
    }
    if (closed || have >= want) {
        bf_fail(err, errlen, "job %lld %s", (long long)job,
                closed ? "is cancelled" : "has all its trials");
        goto fail;
    }
    if (store_prepare(s, STORE_INSERT_TRIAL, &st, err, errlen) < 0) goto fail;
    rc = store_insert_trial(s, st, job, t, store_now(), point_json, trial_id, err, errlen);
    store_done(s, st);
    if (rc < 0) goto fail;
    char msg[256];
    snprintf(msg, sizeof msg, "proposed trial %lld of %lld", (long long)t->index + 1, want);
    if (store_event(s, job, *trial_id, "propose", msg, err, errlen) < 0 ||
        store_commit(s, err, errlen) < 0)
        goto fail;
    return 0;
fail:
    store_rollback(s);
    return -1;
}

int store_job_cancel(store *s, int64_t job_id, int *n_cancelled, char *err, size_t errlen) {
    *n_cancelled = 0;
    if (store_begin(s, err, errlen) < 0) return -1;
    sqlite3_stmt *st;
    /* the running trials now (a few: they hold workers); the pending ones
     * are counted, left to store_cancel_step */
    if (store_prepare(s, "SELECT id FROM trials WHERE job = ?1 AND state = 'RUNNING' ORDER BY idx",
                      &st, err, errlen) < 0)
        goto fail;
    sqlite3_bind_int64(st, 1, job_id);
    int64_t *ids = NULL;
    size_t n = 0;
    if (store_collect_column(s, st, &ids, NULL, &n, "store_job_cancel: SELECT trials", err, errlen))
        goto fail;
    long long pending = 0;
    if (store_prepare(s, "UPDATE jobs SET closed = 1 WHERE id = ?1", &st, err, errlen) < 0)
        goto fail_ids;
    sqlite3_bind_int64(st, 1, job_id);
    if (store_step_done(s, st, "sqlite3_step(UPDATE jobs SET closed)", err, errlen) < 0)
        goto fail_ids;
    for (size_t i = 0; i < n; i++)
        if (store_transition(s, ids[i], TRIAL_CANCELLED, "job cancelled", 0, err, errlen) < 0)
            goto fail_ids;
    free(ids);
    if (store_prepare(s,
                      "SELECT IFNULL(SUM(n), 0) FROM trial_counts WHERE state = 'PENDING' AND"
                      " job = ?1",
                      &st, err, errlen) < 0)
        goto fail;
    sqlite3_bind_int64(st, 1, job_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) pending = sqlite3_column_int64(st, 0);
    store_done(s, st);
    if (rc != SQLITE_ROW) {
        store_sqlfail(s, err, errlen, "sqlite3_step(SELECT COUNT pending)");
        goto fail;
    }
    if (store_commit(s, err, errlen) < 0) goto fail;
    *n_cancelled = (int)(n + (size_t)pending);
    return 0;
fail_ids:
    free(ids);
fail:
    store_rollback(s);
    return -1;
}

int store_cancel_step(store *s, int max_trials, int64_t *job, int *n_cancelled, int *more,
                      char *err, size_t errlen) {
    *job = 0;
    *n_cancelled = 0;
    *more = 0;
    if (store_begin(s, err, errlen) < 0) return -1;
    sqlite3_stmt *st;
    /* the oldest closed job with a pending trial: one index probe a job */
    if (store_prepare(s,
                      "SELECT id FROM jobs WHERE closed AND EXISTS (SELECT 1 FROM trials"
                      " WHERE state = 'PENDING' AND job = jobs.id) ORDER BY id LIMIT 2",
                      &st, err, errlen) < 0)
        goto fail;
    int rc;
    int jobs = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (jobs++ == 0) *job = sqlite3_column_int64(st, 0);
    store_done(s, st);
    if (rc != SQLITE_DONE) {
        store_sqlfail(s, err, errlen, "sqlite3_step(SELECT jobs to cancel)");
        goto fail;
    }
    if (!*job) return store_commit(s, err, errlen);
    if (store_prepare(s,
                      "SELECT id FROM trials WHERE state = 'PENDING' AND job = ?1 ORDER BY idx"
                      " LIMIT ?2",
                      &st, err, errlen) < 0)
        goto fail;
    sqlite3_bind_int64(st, 1, *job);
    sqlite3_bind_int(st, 2, (max_trials > 0 ? max_trials : 1) + 1); /* one more: any left? */
    int64_t *ids = NULL;
    size_t n = 0;
    if (store_collect_column(s, st, &ids, NULL, &n, "store_cancel_step: SELECT trials", err,
                             errlen))
        goto fail;
    size_t take = n > (size_t)(max_trials > 0 ? max_trials : 1) ? n - 1 : n;
    for (size_t i = 0; i < take; i++)
        if (store_transition(s, ids[i], TRIAL_CANCELLED, "job cancelled", 0, err, errlen) < 0) {
            free(ids);
            goto fail;
        }
    free(ids);
    if (store_commit(s, err, errlen) < 0) goto fail;
    *n_cancelled = (int)take;
    *more = take < n || jobs > 1;
    return 0;
fail:
    store_rollback(s);
    *job = 0;
    *n_cancelled = 0;
    return -1;
}

/* ------------------------------------------------------------------ reads */

/* the columns of a job and its trials in each state (each an index range of
 * trials_state), so listing jobs is one query, not one per job */
#define STATE_COUNT(S)                                                                             \
    " (SELECT IFNULL(SUM(n), 0) FROM trial_counts WHERE job = jobs.id AND state = '" S "'),"
#define JOB_COLS                                                                                   \
    "SELECT id, name, pipeline, submitted, priority, retries, ranks, gpus_per_rank,"               \
    " cpus_per_rank, time_limit_s, metric_name, metric_goal, n_trials, method, parallel, closed,"  \
    " early_stop, (SELECT IFNULL(SUM(n), 0) FROM trial_counts WHERE job = jobs.id), "              \
    "nodes," STATE_COUNT("PENDING") STATE_COUNT("RUNNING") STATE_COUNT("COMPLETED")                \
        STATE_COUNT("FAILED") STATE_COUNT("CANCELLED")                                             \
            STATE_COUNT("STOPPED") " objectives FROM jobs"

static void row_to_job(sqlite3_stmt *st, store_job *j) {
    memset(j, 0, sizeof *j);
    j->id = sqlite3_column_int64(st, 0);
    store_col_text(st, 1, j->name, sizeof j->name);
    store_col_text(st, 2, j->pipeline, sizeof j->pipeline);
    j->submitted = sqlite3_column_double(st, 3);
    j->priority = sqlite3_column_int(st, 4);
    j->retries = sqlite3_column_int(st, 5);
    j->ranks = sqlite3_column_int(st, 6);
    j->gpus_per_rank = sqlite3_column_int(st, 7);
    j->cpus_per_rank = sqlite3_column_int(st, 8);
    j->time_limit_s = sqlite3_column_int64(st, 9);
    store_col_text(st, 10, j->metric, sizeof j->metric);
    store_col_text(st, 11, j->goal, sizeof j->goal);
    j->n_trials = sqlite3_column_int64(st, 12);
    store_col_text(st, 13, j->method, sizeof j->method);
    j->parallel = sqlite3_column_int(st, 14);
    j->closed = sqlite3_column_int(st, 15);
    store_col_text(st, 16, j->early_stop, sizeof j->early_stop);
    j->n_proposed = sqlite3_column_int64(st, 17);
    j->nodes = sqlite3_column_int(st, 18);
    for (int k = 0; k < TRIAL_N_STATES; k++) j->counts[k] = sqlite3_column_int64(st, 19 + k);
    if (store_objectives_parse((const char *)sqlite3_column_text(st, 19 + TRIAL_N_STATES),
                               j->objectives, &j->n_objectives) < 0) {
        /* not a list this build reads: the job's one metric */
        snprintf(j->objectives[0].name, sizeof j->objectives[0].name, "%s", j->metric);
        j->objectives[0].maximize = strcmp(j->goal, "max") == 0;
        j->n_objectives = 1;
    }
}

int store_job_get(store *s, int64_t job_id, store_job *out, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s, JOB_COLS " WHERE id = ?1 AND hidden = 0", &st, err, errlen) < 0) return -1;
    sqlite3_bind_int64(st, 1, job_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) row_to_job(st, out);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        store_sqlfail(s, err, errlen, "sqlite3_step(SELECT job)");
    store_done(s, st);
    return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? 1 : -1;
}

static void read_job(sqlite3_stmt *st, void *row, void *ud) {
    (void)ud;
    row_to_job(st, row);
}

int store_jobs(store *s, int64_t after, int limit, store_job **out, size_t *n, char *err,
               size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    if (store_prepare(s, JOB_COLS " WHERE hidden = 0 AND id > ?1 ORDER BY id LIMIT ?2", &st, err,
                      errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, after);
    sqlite3_bind_int(st, 2, limit > 0 ? limit : -1);
    void *rows = NULL;
    if (store_rows(s, st, sizeof **out, 16, read_job, NULL, NULL, &rows, n, "SELECT jobs", err,
                   errlen) < 0)
        return -1;
    *out = rows;
    return 0;
}

int store_proposing_jobs(store *s, int64_t **out, size_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "SELECT id FROM jobs WHERE method = 'tpe' AND closed = 0 AND hidden = 0 AND"
                      " (SELECT IFNULL(SUM(n), 0) FROM trial_counts WHERE job = jobs.id) < n_trials"
                      " ORDER BY id",
                      &st, err, errlen) < 0)
        return -1;
    return store_collect_column(s, st, out, NULL, n, "store_proposing_jobs: SELECT tpe jobs", err,
                                errlen);
}

int store_job_source(store *s, int64_t job, char **text, char *file, size_t filelen, char *err,
                     size_t errlen) {
    *text = NULL;
    sqlite3_stmt *st;
    if (store_prepare(s, "SELECT source, file FROM jobs WHERE id = ?1", &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, job);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *text = store_col_dup(st, 0);
        store_col_text(st, 1, file, filelen);
    }
    store_done(s, st);
    if (rc == SQLITE_DONE) return bf_fail(err, errlen, "no job with id %lld", (long long)job);
    if (rc != SQLITE_ROW) return store_sqlfail(s, err, errlen, "sqlite3_step(SELECT jobs.source)");
    return 0;
}

/* ----------------------------------------------------------------- counts */

/* trials of the jobs no reader sees (a submit half written, a removal half
 * done) are left out of the counts */
#define NOT_HIDDEN " AND job NOT IN (SELECT id FROM jobs WHERE hidden != 0)"

static int count_query(store *s, const char *sql, int64_t a, int b, int nb, long long *count,
                       char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s, sql, &st, err, errlen) < 0) return -1;
    if (nb >= 1) sqlite3_bind_int64(st, 1, a);
    if (nb >= 2) sqlite3_bind_text(st, 2, store_state_name((trial_state)b), -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *count = sqlite3_column_int64(st, 0);
    else
        store_sqlfail(s, err, errlen, "sqlite3_step(SELECT COUNT)");
    store_done(s, st);
    return rc == SQLITE_ROW ? 0 : -1;
}

int store_count_trials(store *s, int64_t job_id, int state, long long *count, char *err,
                       size_t errlen) {
    if (state < 0)
        return count_query(s, "SELECT IFNULL(SUM(n), 0) FROM trial_counts WHERE job = ?1", job_id,
                           0, 1, count, err, errlen);
    return count_query(s,
                       "SELECT IFNULL(SUM(n), 0) FROM trial_counts WHERE job = ?1 AND state = ?2",
                       job_id, state, 2, count, err, errlen);
}

int store_count_jobs(store *s, long long *count, char *err, size_t errlen) {
    return count_query(s, "SELECT COUNT(*) FROM jobs WHERE hidden = 0", 0, 0, 0, count, err,
                       errlen);
}

int store_job_state_counts(store *s, int64_t job_id, long long counts[TRIAL_N_STATES], char *err,
                           size_t errlen) {
    for (int i = 0; i < TRIAL_N_STATES; i++) counts[i] = 0;
    sqlite3_stmt *st;
    if (store_prepare(s, "SELECT state, n FROM trial_counts WHERE job = ?1", &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, job_id);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        trial_state ts;
        /* the CHECK constraint on trials.state makes an unknown name impossible */
        if (store_state_parse((const char *)sqlite3_column_text(st, 0), &ts) == 0)
            counts[ts] = sqlite3_column_int64(st, 1);
    }
    if (rc != SQLITE_DONE) store_sqlfail(s, err, errlen, "sqlite3_step(SELECT trial states)");
    store_done(s, st);
    return rc == SQLITE_DONE ? 0 : -1;
}

int store_counts(store *s, long long *jobs, long long *pending, long long *running, char *err,
                 size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(
            s,
            "SELECT (SELECT COUNT(*) FROM jobs WHERE hidden = 0),"
            " (SELECT IFNULL(SUM(n), 0) FROM trial_counts WHERE state = 'PENDING'" NOT_HIDDEN "),"
            " (SELECT IFNULL(SUM(n), 0) FROM trial_counts WHERE state = 'RUNNING'" NOT_HIDDEN ")",
            &st, err, errlen) < 0)
        return -1;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *jobs = sqlite3_column_int64(st, 0);
        *pending = sqlite3_column_int64(st, 1);
        *running = sqlite3_column_int64(st, 2);
    } else {
        store_sqlfail(s, err, errlen, "sqlite3_step(SELECT counts)");
    }
    store_done(s, st);
    return rc == SQLITE_ROW ? 0 : -1;
}

int store_state_counts(store *s, long long *jobs, long long counts[TRIAL_N_STATES], char *err,
                       size_t errlen) {
    sqlite3_stmt *st;
    for (int k = 0; k < TRIAL_N_STATES; k++) counts[k] = 0;
    if (store_prepare(s,
                      "SELECT 'JOBS', COUNT(*) FROM jobs WHERE hidden = 0"
                      " UNION ALL SELECT state, SUM(n) FROM trial_counts"
                      " WHERE 1" NOT_HIDDEN " GROUP BY state",
                      &st, err, errlen) < 0)
        return -1;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        trial_state ts;
        if (name && strcmp(name, "JOBS") == 0)
            *jobs = sqlite3_column_int64(st, 1);
        else if (name && store_state_parse(name, &ts) == 0)
            counts[ts] = sqlite3_column_int64(st, 1);
    }
    if (rc != SQLITE_DONE) store_sqlfail(s, err, errlen, "sqlite3_step(SELECT state counts)");
    store_done(s, st);
    return rc == SQLITE_DONE ? 0 : -1;
}
