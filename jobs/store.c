/* store.c — the database file: opening it (WAL, FULL sync, a writable file
 * or a refusal), the schema and its migrations, closing it, and the names
 * of trial and stage states that the tables' CHECK constraints hold. Schema
 * versions live in PRAGMA user_version; migrations[i] moves a database from
 * version i to i+1 inside one transaction, and a newer database is refused.
 * It reads and writes no job, trial, point or stage: those rows belong to
 * the other store_*.c files (store_priv.h lists them). */
#include "jobs/store_priv.h"
#include "common/errbuf.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ state names */

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
    /* 5 -> 6: resources.nodes, the hosts a trial's ranks span (0: not given) */
    "ALTER TABLE jobs ADD COLUMN nodes INTEGER NOT NULL DEFAULT 0;",
    /* 6 -> 7: a job hidden from every reader while a submit writes its
     * trials in chunks (1) or while its removal deletes them (2); a start-up
     * finds a 1 only after a crash, and removes that job */
    "ALTER TABLE jobs ADD COLUMN hidden INTEGER NOT NULL DEFAULT 0;",
    /* 7 -> 8: bfd's own tables, written by jobs/dstate.c on its connection:
     * each running attempt's process, token, GPUs, Slurm job or agent (what
     * a restarted bfd reattaches to), and each job's working directory.
     * dstate made them itself before this version, so a file may hold them
     * already (IF NOT EXISTS); dstate_columns first gives an older one the
     * columns later builds added */
    "CREATE TABLE IF NOT EXISTS bfd_runs("
    " trial INTEGER PRIMARY KEY,"
    " attempt INTEGER NOT NULL,"
    " token TEXT NOT NULL,"
    " pid INTEGER NOT NULL,"
    " gpus TEXT NOT NULL,"
    " started REAL NOT NULL,"
    " slurm_job TEXT NOT NULL DEFAULT '',"
    " agent TEXT NOT NULL DEFAULT '');"
    "CREATE TABLE IF NOT EXISTS bfd_jobs(job INTEGER PRIMARY KEY, cwd TEXT NOT NULL);",
    /* 8 -> 9: a point carries the attempt that logged it (0: logged before
     * this version), and superseded = 1 once a later attempt logged its step
     * again (a retry resumed before the last logged step): kept, left out
     * of the current curve */
    "ALTER TABLE metrics ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE metrics ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0;",
    /* 9 -> 10: the objectives of a job (`metric:` may list several), a JSON
     * array [{"name", "goal"}]; metric_name and metric_goal stay the first.
     * A job stored before has its one metric. An MO-ASHA decision keeps the
     * trial's value of each objective at the rung (point: "V1 V2 ...").
     * A job cloned from a trial names it (source_trial) */
    "ALTER TABLE decisions ADD COLUMN point TEXT;"
    /* and the trial a job was cloned from (bfctl clone; 0: none) */
    "ALTER TABLE jobs ADD COLUMN source_trial INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN objectives TEXT NOT NULL DEFAULT '';"
    "UPDATE jobs SET objectives = '[{\"name\": \"' || metric_name || '\", \"goal\": \"' ||"
    " metric_goal || '\"}]';",
    /* 10 -> 11: how many trials each job has in each state, kept by
     * triggers on every insert, state change and delete of a trial: a job's
     * row (store_job_get, every `job` page, every launch), `ls`, status and
     * the Prometheus snapshot read it, where counting a 100,000-trial job's
     * trials took 40-110 ms of bfd's loop each time (BF_LOOP_TRACE) */
    "CREATE TABLE trial_counts("
    " job INTEGER NOT NULL,"
    " state TEXT NOT NULL,"
    " n INTEGER NOT NULL,"
    " PRIMARY KEY (job, state)) WITHOUT ROWID;"
    "INSERT INTO trial_counts(job, state, n) SELECT job, state, COUNT(*) FROM trials"
    " GROUP BY job, state;"
    "CREATE TRIGGER trial_counts_insert AFTER INSERT ON trials BEGIN"
    " INSERT INTO trial_counts(job, state, n) VALUES (NEW.job, NEW.state, 1)"
    "  ON CONFLICT (job, state) DO UPDATE SET n = n + 1;"
    " END;"
    "CREATE TRIGGER trial_counts_update AFTER UPDATE OF job, state ON trials"
    " WHEN OLD.state IS NOT NEW.state OR OLD.job IS NOT NEW.job BEGIN"
    " UPDATE trial_counts SET n = n - 1 WHERE job = OLD.job AND state = OLD.state;"
    " INSERT INTO trial_counts(job, state, n) VALUES (NEW.job, NEW.state, 1)"
    "  ON CONFLICT (job, state) DO UPDATE SET n = n + 1;"
    " END;"
    "CREATE TRIGGER trial_counts_delete AFTER DELETE ON trials BEGIN"
    " UPDATE trial_counts SET n = n - 1 WHERE job = OLD.job AND state = OLD.state;"
    " END;"
    "CREATE TRIGGER trial_counts_job_delete AFTER DELETE ON jobs BEGIN"
    " DELETE FROM trial_counts WHERE job = OLD.id;"
    " END;",
};

/* A bfd_runs table made by dstate before it was a migration (version 8)
 * lacks the columns added after it: slurm_job (the Slurm launcher) and
 * agent (the remote one); older builds added them when bfd opened the file.
 * Adds what is missing; nothing when the table is absent or whole. */
static int dstate_columns(store *s, char *err, size_t errlen) {
    static const char *const cols[] = {"slurm_job", "agent"};
    for (size_t i = 0; i < sizeof cols / sizeof *cols; i++) {
        sqlite3_stmt *st;
        if (store_prepare(s,
                          "SELECT (SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND"
                          " name = 'bfd_runs'), (SELECT COUNT(*) FROM"
                          " pragma_table_info('bfd_runs') WHERE name = ?1)",
                          &st, err, errlen) < 0)
            return -1;
        sqlite3_bind_text(st, 1, cols[i], -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_ROW) {
            store_sqlfail(s, err, errlen, "sqlite3_step(pragma_table_info(bfd_runs))");
            store_done(s, st);
            return -1;
        }
        int table = sqlite3_column_int(st, 0), have = sqlite3_column_int(st, 1);
        store_done(s, st);
        char sql[128];
        snprintf(sql, sizeof sql, "ALTER TABLE bfd_runs ADD COLUMN %s TEXT NOT NULL DEFAULT ''",
                 cols[i]);
        if (table && !have && store_exec(s, sql, err, errlen) < 0) return -1;
    }
    return 0;
}

static int user_version(store *s, int *v, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s, "PRAGMA user_version", &st, err, errlen) < 0) return -1;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        store_sqlfail(s, err, errlen, "sqlite3_step(PRAGMA user_version)");
        store_done(s, st);
        return -1;
    }
    *v = sqlite3_column_int(st, 0);
    store_done(s, st);
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
    if (v < STORE_SCHEMA_VERSION && dstate_columns(s, err, errlen) < 0) {
        store_rollback(s);
        return -1;
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

/* The commit hook of BF_TEST_STORE_FULL: nonzero (the commit becomes a
 * rollback, as a full disk makes it fail) while the file path exists. */
static int store_full_hook(void *path) { return access((const char *)path, F_OK) == 0; }

/* The commit hook: a connection that waited for the lock has it (its wait
 * stops counting); under BF_TEST_STORE_FULL, store_full_hook decides. */
static int store_commit_hook(void *ud) {
    store *s = ud;
    store_wait_over(s);
    return s->full_path ? store_full_hook((void *)s->full_path) : 0;
}

/* The rollback hook: as the commit hook, the wait is over. */
static void store_rollback_hook(void *ud) { store_wait_over(ud); }

/* Makes the file one whose free pages store_shrink can give back (PRAGMA
 * auto_vacuum = INCREMENTAL). A new file takes it before its first table;
 * a file made by an older build takes it through one VACUUM, once (it
 * rewrites the file: seconds for a store of millions of points). */
static int incremental_vacuum_on(store *s, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s, "PRAGMA auto_vacuum", &st, err, errlen) < 0) return -1;
    int rc = sqlite3_step(st);
    int mode = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
    store_done(s, st);
    if (mode < 0) return store_sqlfail(s, err, errlen, "sqlite3_step(PRAGMA auto_vacuum)");
    if (mode == 2) return 0;
    int v;
    if (store_exec(s, "PRAGMA auto_vacuum = INCREMENTAL", err, errlen) < 0 ||
        user_version(s, &v, err, errlen) < 0)
        return -1;
    return v > 0 ? store_exec(s, "VACUUM", err, errlen) : 0;
}

/* One of the handle's own statements (ins_metric, ...), finalized by
 * store_close: prepared outside store_prepare's cache, which would finalize
 * it a second time. */
static int prepare_fixed(store *s, const char *sql, sqlite3_stmt **st, char *err, size_t errlen) {
    if (sqlite3_prepare_v2(s->db, sql, -1, st, NULL) != SQLITE_OK)
        return bf_fail(err, errlen, "sqlite3_prepare_v2(%.60s...): %s", sql, sqlite3_errmsg(s->db));
    return 0;
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
    if (sqlite3_busy_handler(s->db, store_busy, s) != SQLITE_OK) {
        store_sqlfail(s, err, errlen, "sqlite3_busy_handler");
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
        store_done(s, st);
        store_close(&s);
        return -1;
    }
    store_done(s, st);
    /* 64 MiB of page cache: metric inserts from many trials touch pages all
     * over the metrics B-tree */
    if (store_exec(
            s, "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA cache_size = -65536",
            err, errlen) < 0 ||
        incremental_vacuum_on(s, err, errlen) < 0 || migrate(s, err, errlen) < 0) {
        store_close(&s);
        return -1;
    }
    if (prepare_fixed(s,
                      "INSERT OR IGNORE INTO metrics(trial, seq, name, step, value, time, attempt)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                      &s->ins_metric, err, errlen) < 0 ||
        prepare_fixed(s,
                      "INSERT INTO metric_latest(trial, name, seq, step, value, time, vmin, vmax)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?5, ?5)"
                      " ON CONFLICT (trial, name) DO UPDATE SET"
                      "  step = CASE WHEN excluded.seq > seq THEN excluded.step ELSE step END,"
                      "  value = CASE WHEN excluded.seq > seq THEN excluded.value ELSE value END,"
                      "  time = CASE WHEN excluded.seq > seq THEN excluded.time ELSE time END,"
                      "  seq = MAX(seq, excluded.seq),"
                      "  vmin = MIN(vmin, excluded.vmin), vmax = MAX(vmax, excluded.vmax)",
                      &s->upd_latest, err, errlen) < 0 ||
        prepare_fixed(s, "SELECT id FROM metric_names WHERE name = ?1", &s->get_name, err, errlen) <
            0 ||
        prepare_fixed(s, "INSERT INTO metric_names(name) VALUES (?1)", &s->ins_name, err, errlen) <
            0 ||
        prepare_fixed(s, "SELECT 1 FROM trials WHERE id = ?1", &s->trial_exists, err, errlen) < 0 ||
        prepare_fixed(s,
                      "INSERT OR IGNORE INTO trial_stages(trial, idx, name, key, parent, dir)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                      &s->ins_plan, err, errlen) < 0) {
        store_close(&s);
        return -1;
    }
    /* tests only (docs/daemon.md, "Testing a full disk"): every commit of
     * this connection fails while the file BF_TEST_STORE_FULL names exists */
    const char *full = getenv("BF_TEST_STORE_FULL");
    s->full_path = full && *full ? full : NULL;
    sqlite3_commit_hook(s->db, store_commit_hook, s);
    sqlite3_rollback_hook(s->db, store_rollback_hook, s);
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
    store_stmts_free(s);
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

void store_defer_checkpoints(store *s) { sqlite3_wal_autocheckpoint(s->db, 0); }

struct store_checkpointer {
    sqlite3 *db;
    double every_s;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
};

/* The checkpointer's thread: a PASSIVE checkpoint, then a wait of every_s
 * (or until stopped). */
static void *checkpointer_main(void *arg) {
    store_checkpointer *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        pthread_mutex_unlock(&c->mu);
        int log = 0, done = 0;
        sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
        pthread_mutex_lock(&c->mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + c->every_s;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        while (!c->stop && pthread_cond_timedwait(&c->cv, &c->mu, &ts) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int store_checkpointer_start(const char *path, double every_s, store_checkpointer **out, char *err,
                             size_t errlen) {
    *out = NULL;
    store_checkpointer *c = calloc(1, sizeof *c);
    if (!c) return bf_fail(err, errlen, "store_checkpointer_start: out of memory");
    c->every_s = every_s;
    /* a new connection knows the file is in WAL mode only once it has read
     * it: until then a checkpoint does nothing (log -1) */
    if (sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        sqlite3_busy_timeout(c->db, 10000) != SQLITE_OK ||
        sqlite3_exec(c->db, "SELECT COUNT(*) FROM sqlite_master", NULL, NULL, NULL) != SQLITE_OK) {
        bf_fail(err, errlen, "store checkpointer: sqlite3_open_v2(%s): %s", path,
                c->db ? sqlite3_errmsg(c->db) : "out of memory");
        sqlite3_close(c->db);
        free(c);
        return -1;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    int rc = pthread_create(&c->thread, NULL, checkpointer_main, c);
    if (rc) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        sqlite3_close(c->db);
        free(c);
        return bf_fail(err, errlen, "pthread_create(store checkpointer): %s", strerror(rc));
    }
    *out = c;
    return 0;
}

void store_checkpointer_stop(store_checkpointer **cp) {
    store_checkpointer *c = *cp;
    if (!c) return;
    *cp = NULL;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    sqlite3_close(c->db);
    free(c);
}
