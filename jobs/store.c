/* store — SQLite (WAL) job store. Schema versions live in PRAGMA
 * user_version; migrations[i] moves a database from version i to i+1 inside
 * one transaction. Every SQLite call is checked and its message passed on. */
#include "jobs/store_priv.h"
#include "common/errbuf.h"
#include "jobs/sched_stop.h"

#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const state_names[TRIAL_N_STATES] = {"PENDING", "RUNNING",   "COMPLETED",
                                                        "FAILED",  "CANCELLED", "STOPPED"};

const char *store_state_name(trial_state s) {
    return (unsigned)s < TRIAL_N_STATES ? state_names[s] : "?";
}

int store_state_parse(const char *name, trial_state *out) {
    for (int i = 0; i < TRIAL_N_STATES; i++)
        if (name && strcmp(name, state_names[i]) == 0) {
            *out = (trial_state)i;
            return 0;
        }
    return -1;
}

static const char *const stage_state_names[STAGE_N_STATES] = {"pending", "running", "done",
                                                              "failed"};

const char *store_stage_state_name(stage_state st) {
    return (unsigned)st < STAGE_N_STATES ? stage_state_names[st] : "?";
}

stage_state store_stage_state_of(const unsigned char *text) {
    for (int i = 0; text && i < STAGE_N_STATES; i++)
        if (strcmp((const char *)text, stage_state_names[i]) == 0) return (stage_state)i;
    return STAGE_PENDING;
}

/* "avit 3f2a91c0…": a stage as messages name it */
void store_stage_label(char *buf, size_t n, const char *name, const char *key) {
    snprintf(buf, n, "%s %.8s\xe2\x80\xa6", name, key);
}

/* ------------------------------------------------------------- migrations */

static const char *const migrations[STORE_SCHEMA_VERSION] = {
    /* 0 -> 1: base tables */
    "CREATE TABLE jobs("
    " id INTEGER PRIMARY KEY,"
    " name TEXT NOT NULL,"
    " pipeline TEXT NOT NULL,"
    " file TEXT NOT NULL DEFAULT '',"
    " source TEXT,"
    " metric_name TEXT NOT NULL,"
    " metric_goal TEXT NOT NULL CHECK (metric_goal IN ('min', 'max')),"
    " priority INTEGER NOT NULL DEFAULT 0,"
    " retries INTEGER NOT NULL DEFAULT 0,"
    " ranks INTEGER NOT NULL DEFAULT 1,"
    " gpus_per_rank INTEGER NOT NULL DEFAULT 0,"
    " cpus_per_rank INTEGER NOT NULL DEFAULT 1,"
    " time_limit_s INTEGER NOT NULL DEFAULT 0,"
    " early_stop TEXT NOT NULL DEFAULT '{}',"
    " n_trials INTEGER NOT NULL,"
    " submitted REAL NOT NULL);"
    "CREATE TABLE trials("
    " id INTEGER PRIMARY KEY,"
    " job INTEGER NOT NULL REFERENCES jobs(id),"
    " idx INTEGER NOT NULL,"
    " state TEXT NOT NULL CHECK (state IN ('PENDING', 'RUNNING', 'COMPLETED', 'FAILED',"
    "   'CANCELLED', 'STOPPED')),"
    " attempts INTEGER NOT NULL DEFAULT 0,"
    " hash TEXT NOT NULL,"
    " params TEXT NOT NULL,"
    " config TEXT NOT NULL,"
    " updated REAL NOT NULL,"
    " UNIQUE (job, idx));"
    "CREATE INDEX trials_state ON trials(state, job, idx);"
    "CREATE TABLE attempts("
    " id INTEGER PRIMARY KEY,"
    " trial INTEGER NOT NULL REFERENCES trials(id),"
    " n INTEGER NOT NULL,"
    " started REAL NOT NULL,"
    " ended REAL,"
    " outcome TEXT,"
    " message TEXT,"
    " UNIQUE (trial, n));"
    "CREATE TABLE metric_names(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"
    "CREATE TABLE metrics("
    " trial INTEGER NOT NULL,"
    " seq INTEGER NOT NULL,"
    " name INTEGER NOT NULL,"
    " step INTEGER NOT NULL,"
    " value REAL NOT NULL,"
    " time REAL NOT NULL,"
    " PRIMARY KEY (trial, seq, name)) WITHOUT ROWID;"
    "CREATE TABLE events("
    " id INTEGER PRIMARY KEY,"
    " time REAL NOT NULL,"
    " job INTEGER,"
    " trial INTEGER,"
    " kind TEXT NOT NULL,"
    " message TEXT);",
    /* 1 -> 2: latest and best value per (trial, metric), kept on insert, so
     * listing a job does not scan its metric history */
    "CREATE TABLE metric_latest("
    " trial INTEGER NOT NULL,"
    " name INTEGER NOT NULL,"
    " seq INTEGER NOT NULL,"
    " step INTEGER NOT NULL,"
    " value REAL NOT NULL,"
    " time REAL NOT NULL,"
    " vmin REAL NOT NULL,"
    " vmax REAL NOT NULL,"
    " PRIMARY KEY (trial, name)) WITHOUT ROWID;"
    "INSERT INTO metric_latest(trial, name, seq, step, value, time, vmin, vmax)"
    " SELECT m.trial, m.name, m.seq, m.step, m.value, m.time, a.vmin, a.vmax"
    " FROM (SELECT trial, name, MAX(seq) AS mseq, MIN(value) AS vmin, MAX(value) AS vmax"
    "       FROM metrics GROUP BY trial, name) a"
    " JOIN metrics m ON m.trial = a.trial AND m.name = a.name AND m.seq = a.mseq;"
    "CREATE INDEX events_trial ON events(trial, id);",
    /* 2 -> 3: preempted attempts (RUNNING -> PENDING) are counted apart, so
     * they do not use up the job's retries */
    "ALTER TABLE trials ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;",
    /* 3 -> 4: adaptive sweeps. Early-stopping decisions (one row per trial
     * and rung, committed before the stop is sent) and the stop reason of a
     * trial; tpe jobs, whose trials are proposed one by one (point: the
     * sampler's coordinates of a proposed trial) */
    "ALTER TABLE trials ADD COLUMN stop_reason TEXT;"
    "ALTER TABLE trials ADD COLUMN point TEXT;"
    "ALTER TABLE jobs ADD COLUMN method TEXT NOT NULL DEFAULT 'grid';"
    "ALTER TABLE jobs ADD COLUMN parallel INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN closed INTEGER NOT NULL DEFAULT 0;"
    "CREATE TABLE decisions("
    " id INTEGER PRIMARY KEY,"
    " job INTEGER NOT NULL,"
    " trial INTEGER NOT NULL REFERENCES trials(id),"
    " method TEXT NOT NULL,"
    " rung INTEGER NOT NULL,"
    " rung_step INTEGER NOT NULL,"
    " step INTEGER NOT NULL,"
    " value REAL NOT NULL,"
    " cutoff REAL,"
    " n INTEGER NOT NULL,"
    " stop INTEGER NOT NULL,"
    " reason TEXT NOT NULL,"
    " time REAL NOT NULL,"
    " UNIQUE (trial, method, rung_step));"
    "CREATE INDEX decisions_job ON decisions(job, rung, id);",
    /* 4 -> 5: shared stages of s2s trials. One row per stage key (shared by
     * every trial and job that needs it), the plan of each s2s trial, and the
     * attempts that ran one stage to the end (not failures, like preemptions) */
    "ALTER TABLE trials ADD COLUMN stage_runs INTEGER NOT NULL DEFAULT 0;"
    "CREATE TABLE stages("
    " key TEXT PRIMARY KEY,"
    " name TEXT NOT NULL,"
    " parent TEXT NOT NULL,"
    " dir TEXT NOT NULL,"
    " state TEXT NOT NULL CHECK (state IN ('pending', 'running', 'done', 'failed')),"
    " trial INTEGER REFERENCES trials(id),"
    " attempts INTEGER NOT NULL DEFAULT 0,"
    " failures INTEGER NOT NULL DEFAULT 0,"
    " created REAL NOT NULL,"
    " started REAL,"
    " ended REAL,"
    " message TEXT NOT NULL DEFAULT '') WITHOUT ROWID;"
    "CREATE INDEX stages_trial ON stages(trial, state);"
    "CREATE TABLE trial_stages("
    " trial INTEGER NOT NULL REFERENCES trials(id),"
    " idx INTEGER NOT NULL,"
    " name TEXT NOT NULL,"
    " key TEXT NOT NULL,"
    " parent TEXT NOT NULL,"
    " dir TEXT NOT NULL,"
    " waited INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (trial, idx)) WITHOUT ROWID;"
    "CREATE INDEX trial_stages_key ON trial_stages(key, trial);",
};

static int user_version(store *s, int *v, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s, "PRAGMA user_version", &st, err, errlen) < 0) return -1;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        store_sqlfail(s, err, errlen, "sqlite3_step(PRAGMA user_version)");
        sqlite3_finalize(st);
        return -1;
    }
    *v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return 0;
}

static int migrate(store *s, char *err, size_t errlen) {
    if (store_begin(s, err, errlen) < 0) return -1;
    int v;
    if (user_version(s, &v, err, errlen) < 0) {
        store_rollback(s);
        return -1;
    }
    if (v > STORE_SCHEMA_VERSION) {
        store_rollback(s);
        return bf_fail(
            err, errlen,
            "database schema version %d is newer than this build knows (%d); use a newer "
            "bf",
            v, STORE_SCHEMA_VERSION);
    }
    for (; v < STORE_SCHEMA_VERSION; v++) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", v + 1);
        if (store_exec(s, migrations[v], err, errlen) < 0 || store_exec(s, sql, err, errlen) < 0) {
            store_rollback(s);
            return -1;
        }
    }
    return store_commit(s, err, errlen);
}

int store_create_at_version(const char *path, int version, char *err, size_t errlen) {
    store tmp;
    memset(&tmp, 0, sizeof tmp);
    if (sqlite3_open(path, &tmp.db) != SQLITE_OK) {
        bf_fail(err, errlen, "sqlite3_open(%s): %s", path,
                tmp.db ? sqlite3_errmsg(tmp.db) : "out of memory");
        sqlite3_close(tmp.db);
        return -1;
    }
    int rc = 0;
    for (int v = 0; v < version && rc == 0; v++) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", v + 1);
        rc = store_exec(&tmp, migrations[v], err, errlen) < 0 ||
                     store_exec(&tmp, sql, err, errlen) < 0
                 ? -1
                 : 0;
    }
    sqlite3_close(tmp.db);
    return rc;
}

int store_open(const char *path, store **out, char *err, size_t errlen) {
    *out = NULL;
    store *s = calloc(1, sizeof *s);
    if (!s) return bf_fail(err, errlen, "store_open: out of memory");
    int rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) {
        bf_fail(err, errlen, "sqlite3_open_v2(%s): %s", path,
                s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        sqlite3_close(s->db);
        free(s);
        return -1;
    }
    if (sqlite3_busy_timeout(s->db, 10000) != SQLITE_OK) {
        store_sqlfail(s, err, errlen, "sqlite3_busy_timeout");
        store_close(&s);
        return -1;
    }
    /* SQLite opens a file it may not write read-only without a word; every
     * write would then fail later, so the store refuses to open */
    if (sqlite3_db_readonly(s->db, "main") == 1) {
        bf_fail(err, errlen,
                "%s is read-only for this user (uid %d): the store must be writable; fix its "
                "permissions or use another home",
                path, (int)getuid());
        store_close(&s);
        return -1;
    }
    /* WAL: readers do not block the writer; FULL: a commit survives power loss,
     * so an acknowledged submit is never lost */
    sqlite3_stmt *st;
    if (store_prepare(s, "PRAGMA journal_mode = WAL", &st, err, errlen) < 0) {
        store_close(&s);
        return -1;
    }
    rc = sqlite3_step(st);
    const char *mode = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
    if (!mode || strcmp(mode, "wal") != 0) {
        bf_fail(err, errlen, "PRAGMA journal_mode = WAL: %s",
                mode ? "the database refused WAL mode" : sqlite3_errmsg(s->db));
        sqlite3_finalize(st);
        store_close(&s);
        return -1;
    }
    sqlite3_finalize(st);
    /* 64 MiB of page cache: metric inserts from many trials touch pages all
     * over the metrics B-tree */
    if (store_exec(
            s, "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA cache_size = -65536",
            err, errlen) < 0 ||
        migrate(s, err, errlen) < 0) {
        store_close(&s);
        return -1;
    }
    if (store_prepare(s,
                      "INSERT OR IGNORE INTO metrics(trial, seq, name, step, value, time)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                      &s->ins_metric, err, errlen) < 0 ||
        store_prepare(s,
                      "INSERT INTO metric_latest(trial, name, seq, step, value, time, vmin, vmax)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?5, ?5)"
                      " ON CONFLICT (trial, name) DO UPDATE SET"
                      "  step = CASE WHEN excluded.seq > seq THEN excluded.step ELSE step END,"
                      "  value = CASE WHEN excluded.seq > seq THEN excluded.value ELSE value END,"
                      "  time = CASE WHEN excluded.seq > seq THEN excluded.time ELSE time END,"
                      "  seq = MAX(seq, excluded.seq),"
                      "  vmin = MIN(vmin, excluded.vmin), vmax = MAX(vmax, excluded.vmax)",
                      &s->upd_latest, err, errlen) < 0 ||
        store_prepare(s, "SELECT id FROM metric_names WHERE name = ?1", &s->get_name, err, errlen) <
            0 ||
        store_prepare(s, "INSERT INTO metric_names(name) VALUES (?1)", &s->ins_name, err, errlen) <
            0 ||
        store_prepare(s, "SELECT 1 FROM trials WHERE id = ?1", &s->trial_exists, err, errlen) < 0 ||
        store_prepare(s,
                      "INSERT OR IGNORE INTO trial_stages(trial, idx, name, key, parent, dir)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                      &s->ins_plan, err, errlen) < 0) {
        store_close(&s);
        return -1;
    }
    *out = s;
    return 0;
}

void store_close(store **sp) {
    if (!sp || !*sp) return;
    store *s = *sp;
    sqlite3_finalize(s->ins_metric);
    sqlite3_finalize(s->upd_latest);
    sqlite3_finalize(s->get_name);
    sqlite3_finalize(s->ins_name);
    sqlite3_finalize(s->trial_exists);
    sqlite3_finalize(s->ins_plan);
    sqlite3_close(s->db);
    free(s);
    *sp = NULL;
}

int store_schema_version(store *s) {
    int v = -1;
    char err[256];
    if (user_version(s, &v, err, sizeof err) < 0) return -1;
    return v;
}

/* ----------------------------------------------------------------- submit */

typedef struct submit_ctx {
    store *s;
    sqlite3_stmt *ins;
    int64_t job;
    double t;
    char *err;
    size_t errlen;
} submit_ctx;

static int submit_trial(void *ud, const sweep_trial *t) {
    submit_ctx *c = ud;
    sqlite3_stmt *st = c->ins;
    sqlite3_reset(st);
    if (sqlite3_bind_int64(st, 1, c->job) != SQLITE_OK ||
        sqlite3_bind_int64(st, 2, t->index) != SQLITE_OK ||
        sqlite3_bind_text(st, 3, t->hash, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
        sqlite3_bind_text(st, 4, t->params_json, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
        sqlite3_bind_text(st, 5, t->config_text, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
        sqlite3_bind_double(st, 6, c->t) != SQLITE_OK)
        return store_sqlfail(c->s, c->err, c->errlen, "sqlite3_bind(INSERT INTO trials)");
    if (sqlite3_step(st) != SQLITE_DONE)
        return store_sqlfail(c->s, c->err, c->errlen, "sqlite3_step(INSERT INTO trials)");
    return store_put_plan(c->s, sqlite3_last_insert_rowid(c->s->db), t->config, c->err, c->errlen);
}

int store_submit(store *s, const sweep_spec *spec, const char *source, int64_t *job_id, char *err,
                 size_t errlen) {
    if (store_begin(s, err, errlen) < 0) return -1;
    sqlite3_stmt *st = NULL;
    submit_ctx c = {s, NULL, 0, store_now(), err, errlen};
    long long n = spec->is_sweep ? spec->n_trials : 1;
    char early[512];
    if (sched_stop_json(spec, early, sizeof early) < 0) {
        bf_fail(err, errlen, "store_submit: early_stop does not fit in %zu bytes", sizeof early);
        goto fail;
    }
    int tpe = spec->is_sweep && spec->method == SWEEP_TPE;
    if (store_prepare(
            s,
            "INSERT INTO jobs(name, pipeline, file, source, metric_name, metric_goal, priority,"
            " retries, ranks, gpus_per_rank, cpus_per_rank, time_limit_s, early_stop, n_trials,"
            " submitted, method, parallel) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11,"
            " ?12, ?13, ?14, ?15, ?16, ?17)",
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
    if (sqlite3_bind_double(st, 15, c.t) != SQLITE_OK) {
        store_sqlfail(s, err, errlen, "sqlite3_bind(INSERT INTO jobs)");
        goto fail;
    }
    if (sqlite3_step(st) != SQLITE_DONE) {
        store_sqlfail(s, err, errlen, "sqlite3_step(INSERT INTO jobs)");
        goto fail;
    }
    sqlite3_finalize(st);
    st = NULL;
    c.job = sqlite3_last_insert_rowid(s->db);
    if (store_prepare(s,
                      "INSERT INTO trials(job, idx, state, attempts, hash, params, config, updated)"
                      " VALUES (?1, ?2, 'PENDING', 0, ?3, ?4, ?5, ?6)",
                      &c.ins, err, errlen) < 0)
        goto fail;
    /* a tpe job's trials are proposed later, one by one (store_add_trial) */
    if (!tpe && sweep_expand(spec, submit_trial, &c, err, errlen) != 0) goto fail;
    sqlite3_finalize(c.ins);
    c.ins = NULL;
    char msg[256];
    snprintf(msg, sizeof msg, "submitted '%s' with %lld trials%s", spec->name, n,
             tpe ? " to be proposed by tpe" : "");
    if (store_event(s, c.job, 0, "submit", msg, err, errlen) < 0) goto fail;
    if (store_commit(s, err, errlen) < 0) goto fail;
    *job_id = c.job;
    return 0;
fail:
    sqlite3_finalize(st);
    sqlite3_finalize(c.ins);
    store_rollback(s);
    return -1;
}

/* ------------------------------------------------------------ transitions */

int store_job_cancel(store *s, int64_t job_id, int *n_cancelled, char *err, size_t errlen) {
    *n_cancelled = 0;
    if (store_begin(s, err, errlen) < 0) return -1;
    sqlite3_stmt *st;
    if (store_prepare(
            s,
            "SELECT id FROM trials WHERE job = ?1 AND state IN ('PENDING', 'RUNNING') ORDER BY idx",
            &st, err, errlen) < 0) {
        store_rollback(s);
        return -1;
    }
    sqlite3_bind_int64(st, 1, job_id);
    int64_t *ids = NULL;
    size_t n = 0;
    int rc;
    if (store_collect_column(s, st, &ids, NULL, &n, "store_job_cancel: SELECT trials", err,
                             errlen)) {
        store_rollback(s);
        return -1;
    }
    if (store_prepare(s, "UPDATE jobs SET closed = 1 WHERE id = ?1", &st, err, errlen) < 0) {
        free(ids);
        store_rollback(s);
        return -1;
    }
    sqlite3_bind_int64(st, 1, job_id);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        store_sqlfail(s, err, errlen, "sqlite3_step(UPDATE jobs SET closed)");
        free(ids);
        store_rollback(s);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (store_transition(s, ids[i], TRIAL_CANCELLED, "job cancelled", 0, err, errlen) < 0) {
            free(ids);
            store_rollback(s);
            return -1;
        }
    free(ids);
    if (store_commit(s, err, errlen) < 0) {
        store_rollback(s);
        return -1;
    }
    *n_cancelled = (int)n;
    return 0;
}

/* ---------------------------------------------------------------- queries */

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
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : -1;
}

int store_count_trials(store *s, int64_t job_id, int state, long long *count, char *err,
                       size_t errlen) {
    if (state < 0)
        return count_query(s, "SELECT COUNT(*) FROM trials WHERE job = ?1", job_id, 0, 1, count,
                           err, errlen);
    return count_query(s, "SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = ?2", job_id,
                       state, 2, count, err, errlen);
}

int store_count_jobs(store *s, long long *count, char *err, size_t errlen) {
    return count_query(s, "SELECT COUNT(*) FROM jobs", 0, 0, 0, count, err, errlen);
}

/* ------------------------------------------------------------------- jobs */

#define JOB_COLS                                                                                   \
    "SELECT id, name, pipeline, submitted, priority, retries, ranks, gpus_per_rank,"               \
    " cpus_per_rank, time_limit_s, metric_name, metric_goal, n_trials, method, parallel, closed,"  \
    " early_stop, (SELECT COUNT(*) FROM trials WHERE job = jobs.id) FROM jobs"

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
}

int store_job_get(store *s, int64_t job_id, store_job *out, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s, JOB_COLS " WHERE id = ?1", &st, err, errlen) < 0) return -1;
    sqlite3_bind_int64(st, 1, job_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) row_to_job(st, out);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        store_sqlfail(s, err, errlen, "sqlite3_step(SELECT job)");
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : rc == SQLITE_DONE ? 1 : -1;
}

int store_jobs(store *s, store_job **out, size_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    if (store_prepare(s, JOB_COLS " ORDER BY id", &st, err, errlen) < 0) return -1;
    store_job *rows = NULL;
    size_t cnt = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        store_job *nr = store_grow(rows, &cap, cnt, sizeof *rows, 16);
        if (!nr) {
            free(rows);
            sqlite3_finalize(st);
            return bf_fail(err, errlen, "store_jobs: out of memory");
        }
        rows = nr;
        row_to_job(st, &rows[cnt++]);
    }
    if (rc != SQLITE_DONE) {
        store_sqlfail(s, err, errlen, "sqlite3_step(SELECT jobs)");
        free(rows);
        sqlite3_finalize(st);
        return -1;
    }
    sqlite3_finalize(st);
    *out = rows;
    *n = cnt;
    return 0;
}

int store_job_state_counts(store *s, int64_t job_id, long long counts[TRIAL_N_STATES], char *err,
                           size_t errlen) {
    for (int i = 0; i < TRIAL_N_STATES; i++) counts[i] = 0;
    sqlite3_stmt *st;
    if (store_prepare(s, "SELECT state, COUNT(*) FROM trials WHERE job = ?1 GROUP BY state", &st,
                      err, errlen) < 0)
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
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

int store_counts(store *s, long long *jobs, long long *pending, long long *running, char *err,
                 size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "SELECT (SELECT COUNT(*) FROM jobs),"
                      " (SELECT COUNT(*) FROM trials WHERE state = 'PENDING'),"
                      " (SELECT COUNT(*) FROM trials WHERE state = 'RUNNING')",
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
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : -1;
}

/* -------------------------------------------------------- adaptive sweeps */

int store_proposing_jobs(store *s, int64_t **out, size_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "SELECT id FROM jobs WHERE method = 'tpe' AND closed = 0 AND"
                      " (SELECT COUNT(*) FROM trials WHERE job = jobs.id) < n_trials ORDER BY id",
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
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE) return bf_fail(err, errlen, "no job with id %lld", (long long)job);
    if (rc != SQLITE_ROW) return store_sqlfail(s, err, errlen, "sqlite3_step(SELECT jobs.source)");
    return 0;
}

int store_add_trial(store *s, int64_t job, const sweep_trial *t, const char *point_json,
                    int64_t *trial_id, char *err, size_t errlen) {
    if (store_begin(s, err, errlen) < 0) return -1;
    sqlite3_stmt *st = NULL;
    long long have = 0, want = 0, closed = 0;
    if (store_prepare(
            s,
            "SELECT (SELECT COUNT(*) FROM trials WHERE job = ?1), n_trials, closed FROM jobs"
            " WHERE id = ?1",
            &st, err, errlen) < 0)
        goto fail;
    sqlite3_bind_int64(st, 1, job);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        have = sqlite3_column_int64(st, 0);
        want = sqlite3_column_int64(st, 1);
        closed = sqlite3_column_int64(st, 2);
    }
    sqlite3_finalize(st);
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
    if (store_prepare(
            s,
            "INSERT INTO trials(job, idx, state, attempts, hash, params, config, updated, point)"
            " VALUES (?1, ?2, 'PENDING', 0, ?3, ?4, ?5, ?6, ?7)",
            &st, err, errlen) < 0)
        goto fail;
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, t->index);
    sqlite3_bind_text(st, 3, t->hash, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, t->params_json, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, t->config_text, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 6, store_now());
    sqlite3_bind_text(st, 7, point_json, -1, SQLITE_STATIC);
    if (store_step_done(s, st, "sqlite3_step(INSERT INTO trials)", err, errlen) < 0) goto fail;
    *trial_id = sqlite3_last_insert_rowid(s->db);
    if (store_put_plan(s, *trial_id, t->config, err, errlen) < 0) goto fail;
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

int store_state_counts(store *s, long long *jobs, long long counts[TRIAL_N_STATES], char *err,
                       size_t errlen) {
    sqlite3_stmt *st;
    for (int k = 0; k < TRIAL_N_STATES; k++) counts[k] = 0;
    if (store_prepare(s,
                      "SELECT 'JOBS', COUNT(*) FROM jobs"
                      " UNION ALL SELECT state, COUNT(*) FROM trials GROUP BY state",
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
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}
