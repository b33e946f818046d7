/* test_store — the SQLite job store on real files: schema and migrations,
 * submit, the trial state machine (legal and illegal edges, retries),
 * queries, metric resends and paging, a submit killed with SIGKILL,
 * metric insert throughput (printed, not asserted) and a writer waiting
 * for the lock let in between the chunks of a big submit. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jobs/dstate.h"
#include "jobs/store.h"
#include "jobs/sweep.h"
#include "tmpdir.h"

static char tmpdir[256];

static void setup(void) {
    tmpdir_make(tmpdir, sizeof tmpdir, "/tmp/bf_test_store_XXXXXX");
    unsetenv("BF_DATA");
}

static void teardown(void) { cr_assert_eq(tmpdir_remove(tmpdir), 0); }

TestSuite(store, .init = setup, .fini = teardown);

static const char *path_in(const char *name) { return tmpdir_path(tmpdir, name); }

static store *open_store(const char *name) {
    store *s = NULL;
    char err[512];
    cr_assert_eq(store_open(path_in(name), &s, err, sizeof err), 0, "%s", err);
    return s;
}

static sweep_spec *spec_from(const char *text) {
    sweep_spec *sp = NULL;
    sweep_errors e = {0};
    int rc = sweep_load_string(text, strlen(text), "t.yaml", &sp, &e);
    cr_assert_eq(rc, 0, "%s", e.n ? e.msgs[0] : "?");
    sweep_errors_free(&e);
    return sp;
}

static int64_t submit(store *s, const char *text) {
    sweep_spec *sp = spec_from(text);
    int64_t job = 0;
    char err[512];
    cr_assert_eq(store_submit(s, sp, text, &job, err, sizeof err), 0, "%s", err);
    sweep_spec_destroy(&sp);
    return job;
}

static const char *SIX = "name: six\nsweep:\n  parameters:\n"
                         "    budget.range: {values: [[0.1, 0.3], [0.3, 0.6], [0.6, 1.0]]}\n"
                         "    train.seed: {values: [1, 2]}\n"
                         "metric: {name: val/acc, goal: max}\nretries: 1\n";

static int64_t trial_id(store *s, int64_t job, long long index) {
    store_trial *t;
    size_t n;
    char err[512];
    cr_assert_eq(store_job_trials(s, job, &t, &n, err, sizeof err), 0, "%s", err);
    cr_assert(index < (long long)n);
    int64_t id = t[index].id;
    store_trials_free(t, n);
    return id;
}

static trial_state state_of(store *s, int64_t id, int *attempts) {
    store_trial t;
    char err[512];
    cr_assert_eq(store_get_trial(s, id, &t, err, sizeof err), 0, "%s", err);
    trial_state st = t.state;
    if (attempts) *attempts = t.attempts;
    store_trial_free(&t);
    return st;
}

Test(store, schema_versions_and_wal) {
    store *s = open_store("a.db");
    cr_assert_eq(store_schema_version(s), STORE_SCHEMA_VERSION);
    store_close(&s);
    cr_assert_null(s);
    s = open_store("a.db"); /* reopening an up-to-date database is a no-op */
    cr_assert_eq(store_schema_version(s), STORE_SCHEMA_VERSION);
    store_close(&s);
    /* WAL files exist next to the database while it is open */
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path_in("a.db"), &db), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    /* a database from a newer build is refused, not written */
    cr_assert_eq(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    char err[512];
    cr_assert_eq(store_open(path_in("a.db"), &s, err, sizeof err), -1);
    char want[128];
    snprintf(want, sizeof want, "database schema version 99 is newer than this build knows (%d)",
             STORE_SCHEMA_VERSION);
    cr_assert(strstr(err, want), "%s", err);
    cr_assert_null(s);
    /* not a database */
    FILE *fp = fopen(path_in("junk.db"), "w");
    fputs("this is not sqlite, just text that is long enough to have a header..........\n", fp);
    fclose(fp);
    cr_assert_eq(store_open(path_in("junk.db"), &s, err, sizeof err), -1);
    cr_assert(strstr(err, "file is not a database"), "%s", err);
}

/* Files made before bfd's own tables were a migration (version 8): the
 * store at version 6 with bfd_runs and bfd_jobs as dstate_open made them
 * until then (the DDL below is its text), holding a running attempt; and
 * the same from a build before the remote launcher (no agent column).
 * store_open migrates each to the current version, and dstate reads the
 * row back and writes a new one with every column. */
Test(store, migrates_v6_with_the_daemon_s_tables) {
    static const char *const made[] = {
        /* dstate_open up to schema 6 */
        "CREATE TABLE IF NOT EXISTS bfd_runs(trial INTEGER PRIMARY KEY,"
        " attempt INTEGER NOT NULL, token TEXT NOT NULL, pid INTEGER NOT NULL,"
        " gpus TEXT NOT NULL, started REAL NOT NULL,"
        " slurm_job TEXT NOT NULL DEFAULT '', agent TEXT NOT NULL DEFAULT '');"
        "CREATE TABLE IF NOT EXISTS bfd_jobs(job INTEGER PRIMARY KEY, cwd TEXT NOT NULL);"
        "INSERT INTO bfd_runs VALUES (1, 2, 'tok', 4242, '0,1', 5.0, '77_3', '');",
        /* before the remote launcher: no agent */
        "CREATE TABLE bfd_runs(trial INTEGER PRIMARY KEY,"
        " attempt INTEGER NOT NULL, token TEXT NOT NULL, pid INTEGER NOT NULL,"
        " gpus TEXT NOT NULL, started REAL NOT NULL, slurm_job TEXT NOT NULL DEFAULT '');"
        "CREATE TABLE bfd_jobs(job INTEGER PRIMARY KEY, cwd TEXT NOT NULL);"
        "INSERT INTO bfd_runs VALUES (1, 2, 'tok', 4242, '0,1', 5.0, '77_3');",
    };
    for (size_t k = 0; k < sizeof made / sizeof *made; k++) {
        char err[512], name[32];
        snprintf(name, sizeof name, "v6-%zu.db", k);
        cr_assert_eq(store_create_at_version(path_in(name), 6, err, sizeof err), 0, "%s", err);
        sqlite3 *db;
        cr_assert_eq(sqlite3_open(path_in(name), &db), SQLITE_OK);
        char *msg = NULL;
        cr_assert_eq(sqlite3_exec(db, made[k], NULL, NULL, &msg), SQLITE_OK, "%s", msg);
        cr_assert_eq(
            sqlite3_exec(db, "INSERT INTO bfd_jobs VALUES (3, '/work/x')", NULL, NULL, &msg),
            SQLITE_OK, "%s", msg);
        sqlite3_close(db);
        store *s = open_store(name);
        cr_assert_eq(store_schema_version(s), STORE_SCHEMA_VERSION, "case %zu", k);
        dstate *d = NULL;
        cr_assert_eq(dstate_open(path_in(name), &d, err, sizeof err), 0, "case %zu: %s", k, err);
        dstate_run *rows = NULL;
        size_t n = 0;
        cr_assert_eq(dstate_runs(d, &rows, &n, err, sizeof err), 0, "case %zu: %s", k, err);
        cr_assert_eq(n, 1, "case %zu", k);
        cr_expect(rows[0].trial == 1 && rows[0].attempt == 2 && rows[0].pid == 4242 &&
                      !strcmp(rows[0].token, "tok") && !strcmp(rows[0].gpus, "0,1") &&
                      !strcmp(rows[0].slurm_job, "77_3") && !strcmp(rows[0].agent, ""),
                  "case %zu: the running attempt's row changed", k);
        free(rows);
        dstate_run r = {.trial = 2, .attempt = 1, .token = "t2", .agent = "node-b"};
        cr_assert_eq(dstate_run_put(d, &r, err, sizeof err), 0, "case %zu: %s", k, err);
        cr_assert_eq(dstate_runs(d, &rows, &n, err, sizeof err), 0, "%s", err);
        cr_expect(n == 2 && !strcmp(rows[1].agent, "node-b"), "case %zu: agent not kept", k);
        free(rows);
        char cwd[64];
        cr_assert_eq(dstate_job_cwd(d, 3, cwd, sizeof cwd, err, sizeof err), 0, "%s", err);
        cr_expect_str_eq(cwd, "/work/x", "case %zu", k);
        dstate_close(&d);
        store_close(&s);
    }
    /* a new file: the tables come from the migrations alone */
    store *s = open_store("new.db");
    dstate *d = NULL;
    char err[512];
    cr_assert_eq(dstate_open(path_in("new.db"), &d, err, sizeof err), 0, "%s", err);
    dstate_run r = {.trial = 1, .attempt = 1, .token = "t", .slurm_job = "5", .agent = "a"};
    cr_expect_eq(dstate_run_put(d, &r, err, sizeof err), 0, "%s", err);
    cr_expect_eq(dstate_job_cwd_set(d, 1, "/w", err, sizeof err), 0, "%s", err);
    dstate_close(&d);
    store_close(&s);
}

Test(store, migrates_v1_with_metrics) {
    char err[512];
    cr_assert_eq(store_create_at_version(path_in("old.db"), 1, err, sizeof err), 0, "%s", err);
    /* an old build's data: one job, one trial, some metrics */
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path_in("old.db"), &db), SQLITE_OK);
    const char *sql =
        "INSERT INTO jobs(id, name, pipeline, metric_name, metric_goal, n_trials, submitted)"
        " VALUES (1, 'old', 'lm', 'val/loss', 'min', 1, 1.0);"
        "INSERT INTO trials(id, job, idx, state, hash, params, config, updated)"
        " VALUES (1, 1, 0, 'RUNNING', 'h', '{}', 'c', 1.0);"
        "INSERT INTO metric_names(id, name) VALUES (1, 'val/loss');"
        "INSERT INTO metrics VALUES (1, 1, 1, 100, 3.0, 1.0), (1, 2, 1, 200, 2.0, 2.0),"
        " (1, 3, 1, 300, 2.5, 3.0);";
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s", msg);
    sqlite3_close(db);
    store *s = open_store("old.db");
    cr_assert_eq(store_schema_version(s), STORE_SCHEMA_VERSION);
    /* the old file was switched to incremental vacuum (a VACUUM at open) */
    cr_assert_eq(sqlite3_open(path_in("old.db"), &db), SQLITE_OK);
    sqlite3_stmt *av;
    cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA auto_vacuum", -1, &av, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(av), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(av, 0), 2, "auto_vacuum INCREMENTAL");
    sqlite3_finalize(av);
    sqlite3_close(db);
    store_trial *t;
    size_t n;
    cr_assert_eq(store_job_trials(s, 1, &t, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(t[0].latest_json, "{\"val/loss\":{\"step\":300,\"value\":2.5}}");
    cr_assert_float_eq(t[0].best, 2.0, 1e-12, "best of a min metric is its minimum");
    cr_assert_eq(t[0].preemptions, 0, "v3 adds the preemption count, 0 for old trials");
    store_trials_free(t, n);
    /* the migrated RUNNING trial can take the v3 edge */
    cr_assert_eq(store_trial_preempt(s, 1, "node drained", err, sizeof err), 0, "%s", err);
    store_close(&s);
}

Test(store, submit_writes_job_and_trials) {
    store *s = open_store("j.db");
    int64_t job = submit(s, SIX);
    cr_assert_gt(job, 0);
    long long c;
    char err[512];
    cr_assert_eq(store_count_trials(s, job, -1, &c, err, sizeof err), 0);
    cr_assert_eq(c, 6);
    cr_assert_eq(store_count_trials(s, job, TRIAL_PENDING, &c, err, sizeof err), 0);
    cr_assert_eq(c, 6);
    store_trial *t;
    size_t n;
    cr_assert_eq(store_job_trials(s, job, &t, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 6);
    cr_assert_eq(t[3].index, 3);
    cr_assert_str_eq(t[3].params_json, "{\"budget.range\": [0.3, 0.6], \"train.seed\": 2}");
    cr_assert_eq(t[3].retries, 1);
    cr_assert(isnan(t[3].best));
    cr_assert_eq(strlen(t[3].hash), 16);
    int64_t id = t[3].id;
    store_trials_free(t, n);
    store_trial one;
    cr_assert_eq(store_get_trial(s, id, &one, err, sizeof err), 0, "%s", err);
    cr_assert(strstr(one.config, "budget.range: [0.3, 0.6]\n"), "%s", one.config);
    cr_assert(strstr(one.config, "train.seed: 2\n"));
    store_trial_free(&one);
    cr_assert_eq(store_get_trial(s, 999999, &one, err, sizeof err), -1);
    cr_assert_str_eq(err, "no trial with id 999999");
    store_close(&s);
}

Test(store, legal_transitions_and_attempts) {
    store *s = open_store("t.db");
    int64_t job = submit(s, SIX);
    char err[512];
    int64_t a = trial_id(s, job, 0), b = trial_id(s, job, 1), c = trial_id(s, job, 2);
    int64_t d = trial_id(s, job, 3), e = trial_id(s, job, 4);
    cr_assert_eq(store_trial_transition(s, a, TRIAL_RUNNING, "rank 0 on host x", err, sizeof err),
                 0, "%s", err);
    cr_assert_eq(store_trial_transition(s, a, TRIAL_COMPLETED, NULL, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(store_trial_transition(s, b, TRIAL_RUNNING, NULL, err, sizeof err), 0);
    cr_assert_eq(store_trial_transition(s, b, TRIAL_STOPPED, "median rule", err, sizeof err), 0);
    cr_assert_eq(store_trial_transition(s, c, TRIAL_CANCELLED, NULL, err, sizeof err), 0);
    cr_assert_eq(store_trial_transition(s, d, TRIAL_RUNNING, NULL, err, sizeof err), 0);
    cr_assert_eq(store_trial_transition(s, d, TRIAL_CANCELLED, NULL, err, sizeof err), 0);
    int att;
    cr_assert_eq(state_of(s, a, &att), TRIAL_COMPLETED);
    cr_assert_eq(att, 1);
    cr_assert_eq(state_of(s, b, NULL), TRIAL_STOPPED);
    cr_assert_eq(state_of(s, c, &att), TRIAL_CANCELLED);
    cr_assert_eq(att, 0);
    /* retries: 1 -> the trial may run twice */
    int requeued;
    cr_assert_eq(store_trial_transition(s, e, TRIAL_RUNNING, NULL, err, sizeof err), 0);
    cr_assert_eq(store_trial_fail(s, e, "worker exited 1", &requeued, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(requeued, 1);
    cr_assert_eq(state_of(s, e, &att), TRIAL_PENDING);
    cr_assert_eq(att, 1);
    cr_assert_eq(store_trial_transition(s, e, TRIAL_RUNNING, NULL, err, sizeof err), 0);
    cr_assert_eq(store_trial_fail(s, e, "worker exited 1 again", &requeued, err, sizeof err), 0);
    cr_assert_eq(requeued, 0);
    cr_assert_eq(state_of(s, e, &att), TRIAL_FAILED);
    cr_assert_eq(att, 2);
    cr_assert_eq(store_trial_transition(s, e, TRIAL_PENDING, NULL, err, sizeof err), -1);
    cr_assert(strstr(err, "has no retries left: 2 attempts made, the job allows 2 (1 + retries 1)"),
              "%s", err);
    /* attempts and events are recorded */
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path_in("t.db"), &db), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(
                     db, "SELECT n, outcome, message FROM attempts WHERE trial = ?1 ORDER BY n", -1,
                     &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_int64(st, 1, e);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 1), "FAILED");
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 2), "worker exited 1");
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(st, 0), 2);
    cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT message FROM events WHERE trial = ?1 ORDER BY id",
                                    -1, &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_int64(st, 1, a);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0),
                     "PENDING -> RUNNING: rank 0 on host x");
    sqlite3_finalize(st);
    sqlite3_close(db);
    /* cancel the job: only the last PENDING trial is left to cancel */
    int nc;
    cr_assert_eq(store_job_cancel(s, job, &nc, err, sizeof err), 0, "%s", err);
    cr_assert_eq(nc, 1);
    long long pending;
    int64_t cj;
    int more;
    cr_assert_eq(store_cancel_step(s, 100, &cj, &nc, &more, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cj, job);
    cr_assert_eq(nc, 1);
    cr_assert_eq(more, 0);
    store_count_trials(s, job, TRIAL_PENDING, &pending, err, sizeof err);
    cr_assert_eq(pending, 0);
    store_close(&s);
}

/* The count of a job's trials in state st. */
static long long count_in(store *s, int64_t job, trial_state st) {
    long long n = -1;
    char err[512];
    cr_assert_eq(store_count_trials(s, job, st, &n, err, sizeof err), 0, "%s", err);
    return n;
}

Test(store, a_big_cancel_proceeds_in_chunks_across_a_reopen) {
    /* 1,000 trials: one running, the rest pending */
    static char text[8192];
    size_t w = (size_t)snprintf(text, sizeof text,
                                "name: many\nsweep:\n  parameters:\n"
                                "    train.seed: {values: [");
    for (int i = 1; i <= 1000; i++)
        w += (size_t)snprintf(text + w, sizeof text - w, "%s%d", i > 1 ? ", " : "", i);
    snprintf(text + w, sizeof text - w, "]}\n");
    store *s = open_store("c.db");
    int64_t job = submit(s, text), other = submit(s, SIX);
    char err[512];
    int64_t first = trial_id(s, job, 0);
    cr_assert_eq(store_trial_transition(s, first, TRIAL_RUNNING, "rank 0", err, sizeof err), 0,
                 "%s", err);
    int n, more;
    int64_t cj;
    cr_assert_eq(store_job_cancel(s, job, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 1000);
    /* at once: the running trial is cancelled, the job is closed (none of
     * its pending trials is runnable), the pending ones wait for the steps */
    cr_assert_eq(state_of(s, first, NULL), TRIAL_CANCELLED);
    cr_assert_eq(count_in(s, job, TRIAL_PENDING), 999);
    store_trial *rt;
    size_t nr;
    cr_assert_eq(store_next_runnable(s, 2000, &rt, &nr, err, sizeof err), 0, "%s", err);
    cr_assert_eq(nr, 6);
    for (size_t i = 0; i < nr; i++) cr_assert_eq(rt[i].job_id, other);
    store_trials_free(rt, nr);
    cr_assert_eq(store_cancel_step(s, 100, &cj, &n, &more, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cj, job);
    cr_assert_eq(n, 100);
    cr_assert(more);
    cr_assert_eq(count_in(s, job, TRIAL_PENDING), 899);
    /* a restart mid-way: what is left is read from the store */
    store_close(&s);
    s = open_store("c.db");
    int chunks = 0;
    do {
        cr_assert_eq(store_cancel_step(s, 100, &cj, &n, &more, err, sizeof err), 0, "%s", err);
        cr_assert_eq(cj, job);
        cr_assert(n > 0 && n <= 100);
        chunks++;
    } while (more);
    cr_assert_eq(chunks, 9);
    cr_assert_eq(count_in(s, job, TRIAL_PENDING), 0);
    cr_assert_eq(count_in(s, job, TRIAL_CANCELLED), 1000);
    cr_assert_eq(count_in(s, other, TRIAL_PENDING), 6);
    cr_assert_eq(store_cancel_step(s, 100, &cj, &n, &more, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cj, 0);
    cr_assert_eq(n, 0);
    store_close(&s);
}

Test(store, illegal_transitions_are_errors) {
    /* the whole table: exactly these edges are legal */
    int legal = 0;
    for (int f = 0; f < TRIAL_N_STATES; f++)
        for (int t = 0; t < TRIAL_N_STATES; t++) legal += store_transition_legal(f, t);
    cr_assert_eq(legal, 9); /* STOPPED -> PENDING: resume */
    store *s = open_store("i.db");
    int64_t job = submit(s, SIX);
    char err[512];
    int64_t a = trial_id(s, job, 0);
    struct {
        trial_state to;
        const char *msg;
    } bad_from_pending[] = {{TRIAL_COMPLETED, "PENDING -> COMPLETED"},
                            {TRIAL_FAILED, "PENDING -> FAILED"},
                            {TRIAL_STOPPED, "PENDING -> STOPPED"},
                            {TRIAL_PENDING, "PENDING -> PENDING"}};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(store_trial_transition(s, a, bad_from_pending[i].to, NULL, err, sizeof err),
                     -1);
        char want[128];
        snprintf(want, sizeof want, "illegal transition for trial %lld: %s", (long long)a,
                 bad_from_pending[i].msg);
        cr_assert_str_eq(err, want);
        cr_assert_eq(state_of(s, a, NULL), TRIAL_PENDING, "a refused edge writes nothing");
    }
    cr_assert_eq(store_trial_transition(s, a, TRIAL_RUNNING, NULL, err, sizeof err), 0);
    cr_assert_eq(store_trial_transition(s, a, TRIAL_RUNNING, NULL, err, sizeof err), -1);
    cr_assert(strstr(err, "RUNNING -> RUNNING"), "%s", err);
    cr_assert_eq(store_trial_preempt(s, a, NULL, err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_trial_preempt(s, a, NULL, err, sizeof err), -1, "PENDING is not preempted");
    cr_assert_str_eq(err, "trial 1 is PENDING; only a RUNNING trial can be preempted");
    cr_assert_eq(store_trial_transition(s, a, TRIAL_RUNNING, NULL, err, sizeof err), 0);
    cr_assert_eq(store_trial_transition(s, a, TRIAL_COMPLETED, NULL, err, sizeof err), 0);
    for (int t = 0; t < TRIAL_N_STATES; t++) {
        cr_assert_eq(store_trial_transition(s, a, (trial_state)t, NULL, err, sizeof err), -1);
        cr_assert(strstr(err, "illegal transition"), "%s", err);
    }
    int requeued;
    cr_assert_eq(store_trial_fail(s, a, "late", &requeued, err, sizeof err), -1);
    cr_assert(strstr(err, "COMPLETED -> FAILED"), "%s", err);
    cr_assert_eq(state_of(s, a, NULL), TRIAL_COMPLETED);
    cr_assert_eq(store_trial_transition(s, 424242, TRIAL_RUNNING, NULL, err, sizeof err), -1);
    cr_assert_str_eq(err, "no trial with id 424242");
    store_close(&s);
}

/* RUNNING -> PENDING (preempted): the attempt is counted and recorded, an
 * event is written, and the job's retries are left for real failures. */
Test(store, preemption_keeps_retries) {
    store *s = open_store("p.db");
    int64_t job = submit(s, SIX); /* retries: 1 */
    char err[512];
    int64_t e = trial_id(s, job, 4);
    int att, requeued;
    cr_assert_eq(store_trial_transition(s, e, TRIAL_RUNNING, NULL, err, sizeof err), 0);
    cr_assert_eq(store_trial_preempt(s, e, "SIGTERM from the node", err, sizeof err), 0, "%s", err);
    cr_assert_eq(state_of(s, e, &att), TRIAL_PENDING);
    cr_assert_eq(att, 1, "the preempted start is an attempt");
    /* preempted twice more: still no retry used */
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(store_trial_transition(s, e, TRIAL_RUNNING, NULL, err, sizeof err), 0);
        cr_assert_eq(store_trial_preempt(s, e, NULL, err, sizeof err), 0, "%s", err);
    }
    /* attempt 4 fails: retries 1 lets it run once more */
    cr_assert_eq(store_trial_transition(s, e, TRIAL_RUNNING, NULL, err, sizeof err), 0);
    cr_assert_eq(store_trial_fail(s, e, "exit 1", &requeued, err, sizeof err), 0, "%s", err);
    cr_assert_eq(requeued, 1, "3 preemptions must not use up retries: 1");
    cr_assert_eq(store_trial_transition(s, e, TRIAL_RUNNING, NULL, err, sizeof err), 0);
    cr_assert_eq(store_trial_fail(s, e, "exit 1 again", &requeued, err, sizeof err), 0);
    cr_assert_eq(requeued, 0, "the second real failure exhausts retries: 1");
    store_trial t;
    cr_assert_eq(store_get_trial(s, e, &t, err, sizeof err), 0, "%s", err);
    cr_assert_eq(t.state, TRIAL_FAILED);
    cr_assert_eq(t.attempts, 5);
    cr_assert_eq(t.preemptions, 3);
    store_trial_free(&t);
    cr_assert_eq(store_trial_transition(s, e, TRIAL_PENDING, NULL, err, sizeof err), -1);
    cr_assert(strstr(err, "no retries left: 2 attempts made, the job allows 2"), "%s", err);
    /* the attempt rows and the events say what happened */
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path_in("p.db"), &db), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT group_concat(outcome, ',') FROM (SELECT outcome FROM"
                                    " attempts WHERE trial = ?1 ORDER BY n)",
                                    -1, &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_int64(st, 1, e);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0),
                     "PREEMPTED,PREEMPTED,PREEMPTED,FAILED,FAILED");
    sqlite3_finalize(st);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT COUNT(*), (SELECT message FROM events WHERE trial = ?1"
                                    " AND kind = 'preempt' ORDER BY id LIMIT 1) FROM events"
                                    " WHERE trial = ?1 AND kind = 'preempt'",
                                    -1, &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_int64(st, 1, e);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int(st, 0), 3);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 1),
                     "RUNNING -> PENDING: SIGTERM from the node");
    sqlite3_finalize(st);
    sqlite3_close(db);
    /* a finished or pending trial is not preempted; nothing is written */
    cr_assert_eq(store_trial_preempt(s, e, NULL, err, sizeof err), -1);
    cr_assert(strstr(err, "is FAILED; only a RUNNING trial can be preempted"), "%s", err);
    cr_assert_eq(store_trial_preempt(s, 424242, NULL, err, sizeof err), -1);
    cr_assert_str_eq(err, "no trial with id 424242");
    store_close(&s);
}

/* The read queries the daemon uses: jobs, state counts, max seq, running ids. */
Test(store, daemon_queries) {
    store *s = open_store("q.db");
    char err[512];
    store_job *jobs;
    size_t nj;
    cr_assert_eq(store_jobs(s, 0, 0, &jobs, &nj, err, sizeof err), 0, "%s", err);
    cr_assert_eq(nj, 0);
    free(jobs);
    int64_t j1 = submit(s, SIX);
    int64_t j2 = submit(s, "name: two\npriority: 3\nresources: {ranks: 2, time_limit: 90}\n"
                           "sweep:\n  parameters:\n    train.seed: {values: [1, 2]}\n"
                           "metric: {name: train/loss, goal: min}\n");
    cr_assert_eq(store_jobs(s, j1, 1, &jobs, &nj, err, sizeof err), 0, "%s", err);
    cr_assert_eq(nj, 1, "a page of one job after the first");
    cr_assert_eq(jobs[0].id, j2);
    free(jobs);
    store_trial *page;
    size_t npage;
    cr_assert_eq(store_job_trials_page(s, j1, 1, 3, &page, &npage, err, sizeof err), 0, "%s", err);
    cr_assert_eq(npage, 3, "trials 2..4 of six");
    cr_assert_eq(page[0].index, 2);
    cr_assert_eq(page[2].index, 4);
    store_trials_free(page, npage);
    cr_assert_eq(store_jobs(s, 0, 0, &jobs, &nj, err, sizeof err), 0, "%s", err);
    cr_assert_eq(nj, 2);
    cr_assert_eq(jobs[0].id, j1);
    cr_assert_eq(jobs[0].counts[TRIAL_PENDING], 6, "the state counts come with the row");
    cr_assert_str_eq(jobs[0].name, "six");
    cr_assert_str_eq(jobs[0].metric, "val/acc");
    cr_assert_str_eq(jobs[0].goal, "max");
    cr_assert_eq(jobs[0].n_trials, 6);
    cr_assert_eq(jobs[0].retries, 1);
    cr_assert_eq(jobs[1].priority, 3);
    cr_assert_eq(jobs[1].ranks, 2);
    cr_assert_eq(jobs[1].time_limit_s, 90);
    free(jobs);
    store_job j;
    cr_assert_eq(store_job_get(s, j2, &j, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(j.goal, "min");
    cr_assert_eq(store_job_get(s, 99, &j, err, sizeof err), 1);
    int64_t a = trial_id(s, j1, 0), b = trial_id(s, j1, 1), c = trial_id(s, j2, 1);
    cr_assert_eq(store_trial_transition(s, a, TRIAL_RUNNING, NULL, err, sizeof err), 0);
    cr_assert_eq(store_trial_transition(s, c, TRIAL_RUNNING, NULL, err, sizeof err), 0);
    cr_assert_eq(store_trial_transition(s, b, TRIAL_CANCELLED, NULL, err, sizeof err), 0);
    long long counts[TRIAL_N_STATES];
    cr_assert_eq(store_job_state_counts(s, j1, counts, err, sizeof err), 0, "%s", err);
    cr_assert_eq(counts[TRIAL_PENDING], 4);
    cr_assert_eq(counts[TRIAL_RUNNING], 1);
    cr_assert_eq(counts[TRIAL_CANCELLED], 1);
    cr_assert_eq(counts[TRIAL_COMPLETED], 0);
    long long nj_, np, nr;
    cr_assert_eq(store_counts(s, &nj_, &np, &nr, err, sizeof err), 0, "%s", err);
    cr_assert_eq(nj_, 2);
    cr_assert_eq(np, 5);
    cr_assert_eq(nr, 2);
    int64_t *ids;
    size_t n;
    cr_assert_eq(store_running_trials(s, &ids, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 2);
    cr_assert_eq(ids[0], a);
    cr_assert_eq(ids[1], c);
    free(ids);
    int64_t job;
    cr_assert_eq(store_trial_job(s, c, &job, err, sizeof err), 0);
    cr_assert_eq(job, j2);
    cr_assert_eq(store_trial_job(s, 4242, &job, err, sizeof err), 1);
    int64_t mx = -1;
    cr_assert_eq(store_max_seq(s, a, &mx, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mx, 0, "no points yet");
    store_metric pts[] = {{.seq = 1, .step = 10, .name = "loss", .value = 1, .time = 1},
                          {.seq = 7, .step = 70, .name = "loss", .value = 1, .time = 2},
                          {.seq = 3, .step = 30, .name = "loss", .value = 1, .time = 3}};
    cr_assert_eq(store_metrics_insert(s, a, pts, 3, err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_max_seq(s, a, &mx, err, sizeof err), 0, "%s", err);
    cr_assert_eq(mx, 7);
    store_close(&s);
}

Test(store, next_runnable_by_priority_then_submit_order) {
    store *s = open_store("q.db");
    int64_t low =
        submit(s, "name: low\npriority: -1\nsweep: {parameters: {train.seed: {values: [1, 2]}}}\n");
    int64_t first = submit(s, "name: first\nsweep: {parameters: {train.seed: {values: [1, 2]}}}\n");
    int64_t high = submit(
        s, "name: high\npriority: 10\nsweep: {parameters: {train.seed: {values: [1, 2]}}}\n");
    int64_t second = submit(s, "name: second\n");
    char err[512];
    store_trial *t;
    size_t n;
    cr_assert_eq(store_next_runnable(s, 100, &t, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 7);
    int64_t want_job[] = {high, high, first, first, second, low, low};
    long long want_idx[] = {0, 1, 0, 1, 0, 0, 1};
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(t[i].job_id, want_job[i], "row %zu", i);
        cr_assert_eq(t[i].index, want_idx[i], "row %zu", i);
    }
    /* a started trial is no longer runnable */
    cr_assert_eq(store_trial_transition(s, t[0].id, TRIAL_RUNNING, NULL, err, sizeof err), 0);
    store_trials_free(t, n);
    cr_assert_eq(store_next_runnable(s, 2, &t, &n, err, sizeof err), 0);
    cr_assert_eq(n, 2);
    cr_assert_eq(t[0].job_id, high);
    cr_assert_eq(t[0].index, 1);
    cr_assert_eq(t[1].job_id, first);
    store_trials_free(t, n);
    store_close(&s);
}

Test(store, metrics_resend_history_latest_best) {
    store *s = open_store("m.db");
    int64_t job = submit(s, SIX);
    char err[512];
    int64_t a = trial_id(s, job, 0), b = trial_id(s, job, 1), c = trial_id(s, job, 2);
    /* trial a: val/acc over 5 evaluations, with train/loss in each seq */
    store_metric pts[10];
    double acc_a[] = {0.5, 0.7, 0.9, 0.8, 0.85};
    for (int i = 0; i < 5; i++) {
        pts[2 * i] = (store_metric){i + 1, (i + 1) * 100, "val/acc", acc_a[i], 1000.0 + i};
        pts[2 * i + 1] =
            (store_metric){i + 1, (i + 1) * 100, "train/loss", 2.0 - 0.1 * i, 1000.0 + i};
    }
    cr_assert_eq(store_metrics_insert(s, a, pts, 6, err, sizeof err), 0, "%s", err);
    /* a resend overlapping what is stored: nothing twice, nothing lost */
    cr_assert_eq(store_metrics_insert(s, a, pts, 10, err, sizeof err), 0, "%s", err);
    store_metric pb[] = {{1, 100, "val/acc", 0.95, 1.0}, {2, 200, "val/acc", 0.6, 2.0}};
    cr_assert_eq(store_metrics_insert(s, b, pb, 2, err, sizeof err), 0);
    store_metric pc[] = {{1, 100, "val/acc", 0.1, 1.0}};
    cr_assert_eq(store_metrics_insert(s, c, pc, 1, err, sizeof err), 0);
    /* a NaN value and an unknown trial are errors, and roll back the batch */
    store_metric nan_pt[] = {{9, 900, "val/acc", 0.99, 1.0}, {10, 900, "val/acc", NAN, 1.0}};
    cr_assert_eq(store_metrics_insert(s, c, nan_pt, 2, err, sizeof err), -1);
    cr_assert(strstr(err, "is NaN"), "%s", err);
    cr_assert_eq(store_metrics_insert(s, 777777, pc, 1, err, sizeof err), -1);
    cr_assert_str_eq(err, "metrics for unknown trial 777777");
    /* points of several trials in one batch; one bad trial id rolls back all */
    int64_t ids2[] = {c, b, 888888};
    store_metric many[] = {
        {2, 200, "val/acc", 0.2, 2.0}, {3, 300, "val/acc", 0.7, 3.0}, {1, 1, "val/acc", 0.1, 1.0}};
    cr_assert_eq(store_metrics_insert_many(s, ids2, many, 3, err, sizeof err), -1);
    cr_assert_str_eq(err, "metrics for unknown trial 888888");
    cr_assert_eq(store_metrics_insert_many(s, ids2, many, 2, err, sizeof err), 0, "%s", err);
    /* history from a sequence number, paged by whole seqs */
    store_point *h;
    size_t n;
    cr_assert_eq(store_metric_history(s, a, 0, 1000, &h, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 10, "5 seqs x 2 names, resend not duplicated");
    free(h);
    int64_t after = 0;
    int seen = 0, pages = 0;
    for (;;) {
        cr_assert_eq(store_metric_history(s, a, after, 2, &h, &n, err, sizeof err), 0);
        if (n == 0) break;
        pages++;
        for (size_t i = 0; i < n; i++) {
            cr_assert_gt(h[i].seq, after, "no repeats across pages");
            seen++;
        }
        cr_assert_str_eq(h[0].name, "train/loss", "names sorted within a seq");
        after = h[n - 1].seq;
        free(h);
    }
    cr_assert_eq(seen, 10);
    cr_assert_eq(pages, 3);
    cr_assert_eq(store_metric_history(s, a, 3, 1, &h, &n, err, sizeof err), 0);
    cr_assert_eq(n, 2);
    cr_assert_eq(h[0].seq, 4);
    cr_assert_eq(h[0].step, 400);
    cr_assert_float_eq(h[1].value, 0.8, 1e-12);
    free(h);
    /* latest values per trial */
    store_trial *t;
    cr_assert_eq(store_job_trials(s, job, &t, &n, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(
        t[0].latest_json,
        "{\"train/loss\":{\"step\":500,\"value\":1.6},\"val/acc\":{\"step\":500,\"value\":0.85}}");
    cr_assert_float_eq(t[0].best, 0.9, 1e-12);
    cr_assert_str_eq(t[5].latest_json, "{}");
    store_trials_free(t, n);
    /* best trials by the job's goal (max over each trial's points) */
    cr_assert_eq(store_best_trials(s, job, 10, &t, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 3);
    cr_assert_eq(t[0].id, b);
    cr_assert_float_eq(t[0].best, 0.95, 1e-12);
    cr_assert_eq(t[1].id, a);
    cr_assert_eq(t[2].id, c);
    store_trials_free(t, n);
    /* goal min orders the other way */
    int64_t job2 =
        submit(s, "name: lm\npipeline: lm\nsweep: {parameters: {train.seed: {values: [1, 2]}}}\n");
    int64_t x = trial_id(s, job2, 0), y = trial_id(s, job2, 1);
    store_metric px[] = {{1, 1, "val/loss", 3.0, 1.0}, {2, 2, "val/loss", 2.0, 1.0}};
    store_metric py[] = {{1, 1, "val/loss", 2.5, 1.0}};
    cr_assert_eq(store_metrics_insert(s, x, px, 2, err, sizeof err), 0);
    cr_assert_eq(store_metrics_insert(s, y, py, 1, err, sizeof err), 0);
    cr_assert_eq(store_best_trials(s, job2, 1, &t, &n, err, sizeof err), 0);
    cr_assert_eq(n, 1);
    cr_assert_eq(t[0].id, x);
    cr_assert_float_eq(t[0].best, 2.0, 1e-12);
    store_trials_free(t, n);
    store_close(&s);
}

/* A retry that logs steps again: attempt 2 re-logs steps 200 and 300 of
 * attempt 1's 100..400. Every point is kept with its attempt; attempt 1's
 * 200..400 of that name are superseded, so the series and the latest and
 * best values (the job's metric is val/acc, max) are the current curve:
 * 0.99 at step 400 of attempt 1 is not the best any more. A batch of the
 * same attempt later supersedes nothing more. */
Test(store, a_retry_supersedes_the_steps_it_logs_again) {
    store *s = open_store("r.db");
    int64_t job = submit(s, SIX);
    char err[512];
    int64_t a = trial_id(s, job, 0);
    store_metric p1[] = {{1, 100, "val/acc", 0.5, 1.0, 1},
                         {2, 200, "val/acc", 0.6, 2.0, 1},
                         {3, 300, "val/acc", 0.7, 3.0, 1},
                         {4, 400, "val/acc", 0.99, 4.0, 1},
                         {4, 400, "train/loss", 1.0, 4.0, 1}};
    cr_assert_eq(store_metrics_insert(s, a, p1, 5, err, sizeof err), 0, "%s", err);
    store_metric p2[] = {{5, 200, "val/acc", 0.65, 5.0, 2}, {6, 300, "val/acc", 0.75, 6.0, 2}};
    cr_assert_eq(store_metrics_insert(s, a, p2, 2, err, sizeof err), 0, "%s", err);
    store_point *h;
    size_t n;
    cr_assert_eq(store_metric_history(s, a, 0, 1000, &h, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 7, "every point kept");
    int superseded = 0;
    for (size_t i = 0; i < n; i++) {
        int want = h[i].attempt == 1 && !strcmp(h[i].name, "val/acc") && h[i].step >= 200;
        cr_assert_eq(h[i].superseded, want, "seq %lld %s step %lld attempt %d", (long long)h[i].seq,
                     h[i].name, (long long)h[i].step, h[i].attempt);
        superseded += want;
    }
    cr_assert_eq(superseded, 3);
    free(h);
    store_series *sr;
    cr_assert_eq(store_job_series(s, job, a, "val/acc", &sr, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 1);
    cr_assert_eq(sr[0].n, 3, "steps 100, 200, 300 once each");
    cr_assert_float_eq(sr[0].values[1], 0.65, 1e-12);
    store_series_free(sr, n);
    store_trial *t;
    cr_assert_eq(store_job_trials(s, job, &t, &n, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(t[0].latest_json, "{\"train/loss\":{\"step\":400,\"value\":1.0},"
                                       "\"val/acc\":{\"step\":300,\"value\":0.75}}");
    cr_assert_float_eq(t[0].best, 0.75, 1e-12);
    store_trials_free(t, n);
    /* attempt 2 goes on: nothing of it is superseded */
    store_metric p3[] = {{7, 400, "val/acc", 0.8, 7.0, 2}};
    cr_assert_eq(store_metrics_insert(s, a, p3, 1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_metric_history(s, a, 4, 1000, &h, &n, err, sizeof err), 0, "%s", err);
    for (size_t i = 0; i < n; i++) cr_assert_eq(h[i].superseded, 0);
    free(h);
    store_close(&s);
}

static double now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 3 x 100 x 50 = 15,000 trials: a submit that takes a noticeable time */
static const char *BIG = "name: big\nsweep:\n  parameters:\n"
                         "    budget.range: {values: [[0.1, 0.3], [0.3, 0.6], [0.6, 1.0]]}\n"
                         "    train.seed: {values: [%s]}\n    train.warmup: {values: [%s]}\n";

static char *big_text(void) {
    static char seeds[1024], warm[1024], text[4096];
    size_t w = 0;
    for (int i = 1; i <= 100; i++)
        w += (size_t)snprintf(seeds + w, sizeof seeds - w, "%s%d", i > 1 ? ", " : "", i);
    w = 0;
    for (int i = 1; i <= 50; i++)
        w += (size_t)snprintf(warm + w, sizeof warm - w, "%s%d", i > 1 ? ", " : "", i);
    snprintf(text, sizeof text, BIG, seeds, warm);
    return text;
}

Test(store, sigkill_during_submit_leaves_all_or_nothing, .timeout = 120) {
    const char *text = big_text();
    /* time one full submit to aim the kills inside it */
    store *s = open_store("time.db");
    double t0 = now_mono();
    int64_t job = submit(s, text);
    double dt = now_mono() - t0;
    long long c;
    char err[512];
    cr_assert_eq(store_count_trials(s, job, -1, &c, err, sizeof err), 0);
    cr_assert_eq(c, 15000);
    store_close(&s);
    srand((unsigned)time(NULL));
    int killed_mid = 0, complete = 0, empty = 0, partial = 0;
    for (int round = 0; round < 8; round++) {
        char name[32];
        snprintf(name, sizeof name, "kill%d.db", round);
        const char *path = path_in(name);
        /* the database exists with its schema before the child starts */
        s = open_store(name);
        store_close(&s);
        int pipefd[2];
        cr_assert_eq(pipe(pipefd), 0);
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0) {
            close(pipefd[0]);
            store *cs = NULL;
            char cerr[512];
            sweep_spec *sp = NULL;
            sweep_errors e = {0};
            if (store_open(path, &cs, cerr, sizeof cerr) < 0 ||
                sweep_load_string(text, strlen(text), "big.yaml", &sp, &e) < 0)
                _exit(3);
            if (write(pipefd[1], "g", 1) != 1) _exit(4);
            int64_t j;
            int rc = store_submit(cs, sp, text, &j, cerr, sizeof cerr);
            _exit(rc == 0 ? 0 : 5);
        }
        close(pipefd[1]);
        char go;
        cr_assert_eq(read(pipefd[0], &go, 1), 1, "child did not start");
        close(pipefd[0]);
        /* kill at a random moment within one submit (the last rounds: maybe after it) */
        double frac = round < 6 ? 0.05 + 0.85 * rand() / RAND_MAX : 3.0 * rand() / RAND_MAX;
        struct timespec ts = {0, (long)(frac * dt * 1e9)};
        while (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status))
            killed_mid++;
        else
            cr_assert_eq(WEXITSTATUS(status), 0, "child failed with %d", WEXITSTATUS(status));
        s = open_store(name);
        long long jobs, trials = 0;
        /* what bfd does at its start: a submit cut short is removed */
        int abandoned;
        cr_assert_eq(store_prune_abandoned(s, &abandoned, err, sizeof err), 0, "%s", err);
        if (abandoned) partial++;
        for (store_pruned p = {.job = 1}; p.job;) {
            cr_assert_eq(store_prune_step(s, 1000, &p, err, sizeof err), 0, "%s", err);
            store_pruned_free(&p);
        }
        cr_assert_eq(store_count_jobs(s, &jobs, err, sizeof err), 0, "%s", err);
        if (jobs == 1) cr_assert_eq(store_count_trials(s, 1, -1, &trials, err, sizeof err), 0);
        sqlite3 *db;
        cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
        sqlite3_stmt *st;
        cr_assert_eq(sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM trials", -1, &st, NULL),
                     SQLITE_OK);
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
        cr_assert_eq(sqlite3_column_int64(st, 0), trials, "no trial of a half job is left");
        sqlite3_finalize(st);
        sqlite3_close(db);
        cr_assert(jobs == 0 || (jobs == 1 && trials == 15000),
                  "round %d: %lld jobs with %lld trials after kill at %.0f%% of a submit", round,
                  jobs, trials, frac * 100);
        if (jobs)
            complete++;
        else
            empty++;
        store_close(&s);
    }
    printf("sigkill during submit: %d rounds killed by the signal; %d left the whole job, %d left "
           "nothing seen (%d of them a half job, removed at start-up) (one submit of 15000 "
           "trials: %.3f s)\n",
           killed_mid, complete, empty, partial, dt);
    cr_assert_gt(empty, 0, "no round was killed inside the transaction: the test showed nothing");
}

Test(store, metric_insert_throughput) {
    store *s = open_store("tp.db");
    int64_t job = submit(s, SIX);
    int64_t id = trial_id(s, job, 0);
    const char *names[] = {"train/loss", "train/lr", "train/budget_s", "train/heads_used"};
    enum { BATCH = 1000, BATCHES = 100 };
    store_metric *pts = malloc(BATCH * sizeof *pts);
    char err[512];
    double t0 = now_mono();
    long seq = 0;
    for (int b = 0; b < BATCHES; b++) {
        for (int i = 0; i < BATCH; i++) {
            long k = (long)b * BATCH + i;
            if (k % 4 == 0) seq++;
            pts[i] = (store_metric){seq, seq * 10, names[k % 4], 1.0 / (double)(k + 1), 1e9 + k};
        }
        cr_assert_eq(store_metrics_insert(s, id, pts, BATCH, err, sizeof err), 0, "%s", err);
    }
    double dt = now_mono() - t0;
    free(pts);
    store_point *h;
    size_t n;
    cr_assert_eq(store_metric_history(s, id, 0, 1000000, &h, &n, err, sizeof err), 0);
    cr_assert_eq(n, (size_t)BATCH * BATCHES);
    free(h);
    printf("metric insert throughput: %d points in batches of %d: %.0f points/s (%.3f s)\n",
           BATCH * BATCHES, BATCH, BATCH * BATCHES / dt, dt);
    store_close(&s);
}

Test(store, objectives_are_kept_with_the_job) {
    store *s = open_store("o.db");
    char err[512];
    int64_t one = submit(s, SIX);
    int64_t two = submit(s, "name: mo\nmetric:\n  - {name: val/acc, goal: max}\n"
                            "  - {name: val/heads_used, goal: min}\n");
    sweep_objective o[SWEEP_MAX_OBJECTIVES];
    int n;
    cr_assert_eq(store_job_objectives(s, one, o, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(o[0].name, "val/acc");
    cr_assert_eq(o[0].maximize, 1);
    cr_assert_eq(store_job_objectives(s, two, o, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(o[1].name, "val/heads_used");
    cr_assert_eq(o[1].maximize, 0);
    cr_assert_eq(store_job_objectives(s, 99, o, &n, err, sizeof err), -1);
    cr_assert_str_eq(err, "no job with id 99");
    /* a clone names the trial it came from; other trials name none */
    int64_t clone = submit(s, "name: c\nsource_trial: 3\n");
    store_trial t;
    cr_assert_eq(store_get_trial(s, trial_id(s, clone, 0), &t, err, sizeof err), 0, "%s", err);
    cr_assert_eq(t.source_trial, 3);
    store_trial_free(&t);
    cr_assert_eq(store_get_trial(s, trial_id(s, one, 0), &t, err, sizeof err), 0, "%s", err);
    cr_assert_eq(t.source_trial, 0);
    store_trial_free(&t);
    store_close(&s);
}

Test(store, migration_gives_old_jobs_their_one_objective) {
    char err[512];
    cr_assert_eq(store_create_at_version(path_in("v6.db"), 6, err, sizeof err), 0, "%s", err);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path_in("v6.db"), &db), SQLITE_OK);
    char *msg = NULL;
    cr_assert_eq(sqlite3_exec(db,
                              "INSERT INTO jobs(id, name, pipeline, metric_name, metric_goal,"
                              " n_trials, submitted) VALUES (1, 'old', 'lm', 'val/loss', 'min',"
                              " 1, 1.0);",
                              NULL, NULL, &msg),
                 SQLITE_OK, "%s", msg);
    sqlite3_close(db);
    store *s = open_store("v6.db");
    sweep_objective o[SWEEP_MAX_OBJECTIVES];
    int n;
    cr_assert_eq(store_job_objectives(s, 1, o, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(o[0].name, "val/loss");
    cr_assert_eq(o[0].maximize, 0);
    store_close(&s);
}

/* Removing a job of 100,000 points gives the pages back to the file system
 * (auto_vacuum INCREMENTAL, store_shrink): the file shrinks. The sizes are
 * printed (docs/results.md). */
Test(store, pruning_a_100000_point_job_shrinks_the_file) {
    store *s = open_store("prune.db");
    int64_t keep = submit(s, SIX);
    int64_t job = submit(s, SIX);
    int64_t id = trial_id(s, job, 0);
    const char *names[] = {"train/loss", "train/lr", "train/budget_s", "train/heads_used"};
    enum { BATCH = 1000, BATCHES = 100 };
    store_metric *pts = malloc(BATCH * sizeof *pts);
    char err[512];
    long seq = 0;
    for (int b = 0; b < BATCHES; b++) {
        for (int i = 0; i < BATCH; i++) {
            long k = (long)b * BATCH + i;
            if (k % 4 == 0) seq++;
            pts[i] = (store_metric){seq, seq * 10, names[k % 4], 1.0 / (double)(k + 1), 1e9 + k};
        }
        cr_assert_eq(store_metrics_insert(s, id, pts, BATCH, err, sizeof err), 0, "%s", err);
    }
    free(pts);
    store_close(&s);
    struct stat before, after;
    cr_assert_eq(stat(path_in("prune.db"), &before), 0);
    s = open_store("prune.db");
    cr_assert_eq(store_prune_mark(s, job, 0, err, sizeof err), 0, "%s", err);
    for (store_pruned p = {.job = 1}; p.job;) {
        cr_assert_eq(store_prune_step(s, 100, &p, err, sizeof err), 0, "%s", err);
        store_pruned_free(&p);
    }
    long long left = 1;
    while (left > 0) cr_assert_eq(store_shrink(s, 2048, &left, err, sizeof err), 0, "%s", err);
    store_close(&s); /* the close checkpoints the WAL into the file */
    cr_assert_eq(stat(path_in("prune.db"), &after), 0);
    printf("store file with a job of 100000 points: %lld bytes; after removing it: %lld bytes\n",
           (long long)before.st_size, (long long)after.st_size);
    cr_assert_lt(after.st_size * 4, before.st_size, "the file gave its pages back");
    s = open_store("prune.db");
    long long n;
    cr_assert_eq(store_count_jobs(s, &n, err, sizeof err), 0);
    cr_assert_eq(n, 1);
    store_job j;
    cr_assert_eq(store_job_get(s, keep, &j, err, sizeof err), 0);
    store_close(&s);
}

typedef struct big_submit {
    const char *path, *text;
    int rc;
    char err[512];
} big_submit;

/* A thread's submit of the 15,000-trial grid on a connection of its own. */
static void *big_submit_main(void *arg) {
    big_submit *b = arg;
    store *s = NULL;
    sweep_spec *sp = NULL;
    sweep_errors e = {0};
    b->rc = store_open(b->path, &s, b->err, sizeof b->err) ||
            sweep_load_string(b->text, strlen(b->text), "big.yaml", &sp, &e);
    int64_t job;
    if (!b->rc) b->rc = store_submit(s, sp, b->text, &job, b->err, sizeof b->err);
    sweep_errors_free(&e);
    sweep_spec_destroy(&sp);
    store_close(&s);
    return NULL;
}

/* Trials stored so far (the big job is hidden, so counted in the file). */
static long long trial_rows(const char *path) {
    sqlite3 *db;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM trials", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    long long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* Trials of job `big` stored before the first trial of job `small`: how far
 * the big submit had gone when the small one took the lock. */
static long long big_before(const char *path, int64_t big, int64_t small) {
    sqlite3 *db;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "SELECT COUNT(*) FROM trials WHERE job = ?1 AND id <"
                                    " (SELECT MIN(id) FROM trials WHERE job = ?2)",
                                    -1, &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_int64(st, 1, big);
    sqlite3_bind_int64(st, 2, small);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    long long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* bfd's loop and its submit thread write through two connections: a write
 * of the loop that waits for the lock goes in at the big submit's next
 * trial, not at the end of one of its 500-trial chunks (SQLite's own busy
 * handler, not fair, let the submit take the lock back at chunk after chunk,
 * starving the loop for seconds). Shown without a clock: a small submit that
 * could only go in at a chunk's end finds a multiple of 500 big trials
 * before its own; two in a row both do so by chance once in 250,000. */
Test(store, a_waiting_writer_goes_in_at_the_next_trial_of_a_submit, .timeout = 120) {
    store *s = open_store("way.db");
    big_submit b = {.path = path_in("way.db"), .text = big_text()};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, big_submit_main, &b), 0);
    while (trial_rows(b.path) == 0) { /* its first chunk is in: the submit goes on */
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    int64_t small[2] = {submit(s, SIX), submit(s, SIX)};
    cr_assert_eq(pthread_join(th, NULL), 0);
    cr_assert_eq(b.rc, 0, "%s", b.err);
    int64_t big = 1; /* its job row went in with its first chunk */
    long long at[2] = {big_before(b.path, big, small[0]), big_before(b.path, big, small[1])};
    cr_assert(at[0] % 500 != 0 || at[1] % 500 != 0,
              "both small submits went in only at the end of a chunk of the big one (after %lld "
              "and %lld of its trials)",
              at[0], at[1]);
    store_close(&s);
}

/* Rows of trial_counts that disagree with the trials themselves (a count
 * for a job and state that has trials, or a nonzero one that has none). */
static long long count_mismatches(const char *path) {
    sqlite3 *db;
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_prepare_v2(
                     db,
                     "SELECT (SELECT COUNT(*) FROM (SELECT job, state, COUNT(*) AS c FROM trials"
                     "  GROUP BY job, state) t WHERE c IS NOT"
                     "  (SELECT n FROM trial_counts k WHERE k.job = t.job AND k.state = t.state))"
                     " + (SELECT COUNT(*) FROM trial_counts k WHERE n <>"
                     "  (SELECT COUNT(*) FROM trials t WHERE t.job = k.job AND t.state = k.state))",
                     -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    long long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* A job's trial counts by state are kept in trial_counts by triggers (a job
 * row no longer counts its trials: 40-110 ms of bfd's loop for 100,000):
 * they stay equal to the trials through submit, start, completion, a
 * requeued failure, cancel and removal, and the migration fills them for a
 * store written before the table existed. */
Test(store, trial_counts_follow_every_change_of_the_trials) {
    store *s = open_store("counts.db");
    const char *path = path_in("counts.db");
    char err[512];
    int64_t a = submit(s, SIX), b = submit(s, SIX);
    cr_assert_eq(count_mismatches(path), 0, "after submit");
    int64_t t0 = trial_id(s, a, 0), t1 = trial_id(s, a, 1);
    cr_assert_eq(store_trial_transition(s, t0, TRIAL_RUNNING, "x", err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_trial_transition(s, t1, TRIAL_RUNNING, "x", err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_trial_transition(s, t0, TRIAL_COMPLETED, "x", err, sizeof err), 0, "%s",
                 err);
    int requeued;
    cr_assert_eq(store_trial_fail(s, t1, "boom", &requeued, err, sizeof err), 0, "%s", err);
    cr_assert_eq(requeued, 1);
    store_job j;
    cr_assert_eq(store_job_get(s, a, &j, err, sizeof err), 0, "%s", err);
    cr_assert_eq(j.counts[TRIAL_COMPLETED], 1);
    cr_assert_eq(j.counts[TRIAL_PENDING], 5);
    cr_assert_eq(count_mismatches(path), 0, "after start, completion and a requeued failure");
    int nc, more;
    int64_t cj;
    cr_assert_eq(store_job_cancel(s, b, &nc, err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_cancel_step(s, 100, &cj, &nc, &more, err, sizeof err), 0, "%s", err);
    long long cancelled;
    cr_assert_eq(store_count_trials(s, b, TRIAL_CANCELLED, &cancelled, err, sizeof err), 0);
    cr_assert_eq(cancelled, 6);
    cr_assert_eq(count_mismatches(path), 0, "after cancel");
    cr_assert_eq(store_prune_mark(s, b, 1, err, sizeof err), 0, "%s", err);
    for (store_pruned p = {.job = 1}; p.job;) {
        cr_assert_eq(store_prune_step(s, 4, &p, err, sizeof err), 0, "%s", err);
        store_pruned_free(&p);
    }
    cr_assert_eq(count_mismatches(path), 0, "after removal");
    store_close(&s);
    /* a store of version 10: no table, no triggers; the migration fills it */
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db,
                              "DROP TRIGGER trial_counts_insert; DROP TRIGGER trial_counts_update;"
                              " DROP TRIGGER trial_counts_delete;"
                              " DROP TRIGGER trial_counts_job_delete; DROP TABLE trial_counts;"
                              " PRAGMA user_version = 10",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_close(db);
    s = open_store("counts.db");
    cr_assert_eq(store_job_get(s, a, &j, err, sizeof err), 0, "%s", err);
    cr_assert_eq(j.counts[TRIAL_COMPLETED], 1);
    cr_assert_eq(j.counts[TRIAL_PENDING], 5);
    cr_assert_eq(count_mismatches(path), 0, "after the migration");
    store_close(&s);
}

/* A file's size in bytes (0 when absent). */
static long long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : 0;
}

/* bfd's loop writes through a connection that never checkpoints the WAL
 * (SQLite checkpoints in the commit that passes 1,000 pages: a commit of
 * the loop wrote the pages back and synced the file); a checkpointer
 * thread on its own connection does. Shown by the files: the WAL grows
 * past 1,000 pages while the database file stays small, and the pages
 * reach the database file once the checkpointer runs. */
Test(store, checkpoints_deferred_to_the_checkpointer, .timeout = 120) {
    store *s = open_store("wal.db");
    const char *path = path_in("wal.db");
    char wal[600], err[512];
    snprintf(wal, sizeof wal, "%s-wal", path);
    store_defer_checkpoints(s);
    long long db0 = file_size(path);
    submit(s, big_text()); /* 15,000 trials in chunks of 500 */
    long long wal_bytes = file_size(wal);
    cr_assert_gt(wal_bytes, 2000LL * 4096, "the WAL (%lld bytes) was checkpointed on the way",
                 wal_bytes);
    cr_assert_eq(file_size(path), db0, "pages reached the database file without a checkpoint");
    store_checkpointer *c = NULL;
    cr_assert_eq(store_checkpointer_start(path, 0.05, &c, err, sizeof err), 0, "%s", err);
    while (file_size(path) < wal_bytes / 4) { /* the checkpointer writes them back */
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    store_checkpointer_stop(&c);
    cr_assert_null(c);
    store_close(&s);
}
