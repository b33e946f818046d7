/* test_http_api — the dashboard's JSON API (daemon/http_api.c) read from a
 * real store file through a read-only connection, as the dashboard's
 * thread reads it: a job's record and its counts of trials by state. */

#include "daemon/http_api.h"
#include "jobs/store.h"
#include "jobs/sweep.h"
#include "store_submit.h"
#include "tmpdir.h"

#include <criterion/criterion.h>
#include <string.h>

static char tmpdir[256];

static void setup(void) { tmpdir_make(tmpdir, sizeof tmpdir, "/tmp/bf_test_http_api_XXXXXX"); }

static void teardown(void) { cr_assert_eq(tmpdir_remove(tmpdir), 0); }

TestSuite(http_api, .init = setup, .fini = teardown);

/* No query arguments. */
static const char *no_arg(void *cls, const char *key) {
    (void)cls;
    (void)key;
    return NULL;
}

/* GET jobs/JOB's "states" object, read through db (owned by the caller). */
static json_t *states_of(sqlite3 *db, int64_t job) {
    char path[64], next[64], err[512];
    snprintf(path, sizeof path, "jobs/%lld", (long long)job);
    json_t *out = NULL;
    cr_assert_eq(
        http_api_get(db, tmpdir, path, no_arg, NULL, &out, next, sizeof next, err, sizeof err), 200,
        "%s", err);
    json_t *states = json_incref(json_object_get(out, "states"));
    json_decref(out);
    cr_assert(json_is_object(states));
    return states;
}

/* A job's counts by state on the dashboard are the ones `bfctl ls` and
 * status report (the store's trial_counts, kept by triggers), not a count
 * of the job's trials of its own (40-110 ms of the dashboard's thread for
 * a 100,000-trial job): equal through start and completion, a state with
 * no trial left is absent, and a count the store keeps is the one shown. */
Test(http_api, job_states_are_the_counts_status_reads) {
    const char *path = tmpdir_path(tmpdir, "jobs.db");
    store *s = NULL;
    char err[512];
    cr_assert_eq(store_open(path, &s, err, sizeof err), 0, "%s", err);
    int64_t job = submit_text(s, "name: six\nsweep:\n  parameters:\n"
                                 "    train.seed: {values: [1, 2, 3, 4, 5, 6]}\n"
                                 "metric: {name: val/acc, goal: max}\n");
    store_trial *t;
    size_t n;
    cr_assert_eq(store_job_trials(s, job, &t, &n, err, sizeof err), 0, "%s", err);
    cr_assert_eq(n, 6);
    int64_t t0 = t[0].id, t1 = t[1].id;
    store_trials_free(t, n);
    cr_assert_eq(store_trial_transition(s, t0, TRIAL_RUNNING, "x", err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_trial_transition(s, t1, TRIAL_RUNNING, "x", err, sizeof err), 0, "%s", err);
    cr_assert_eq(store_trial_transition(s, t0, TRIAL_COMPLETED, "x", err, sizeof err), 0, "%s",
                 err);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    json_t *st = states_of(db, job);
    cr_assert_eq(json_object_size(st), 3, "%s", json_dumps(st, 0));
    cr_assert_eq(json_integer_value(json_object_get(st, "PENDING")), 4);
    cr_assert_eq(json_integer_value(json_object_get(st, "RUNNING")), 1);
    cr_assert_eq(json_integer_value(json_object_get(st, "COMPLETED")), 1);
    json_decref(st);
    /* the running trial completes: RUNNING's count is 0 and not shown */
    cr_assert_eq(store_trial_transition(s, t1, TRIAL_COMPLETED, "x", err, sizeof err), 0, "%s",
                 err);
    st = states_of(db, job);
    cr_assert_eq(json_object_size(st), 2, "%s", json_dumps(st, 0));
    cr_assert_null(json_object_get(st, "RUNNING"));
    cr_assert_eq(json_integer_value(json_object_get(st, "COMPLETED")), 2);
    json_decref(st);
    /* what the store keeps is what status and the dashboard both show */
    sqlite3 *rw;
    cr_assert_eq(sqlite3_open(path, &rw), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(rw, "UPDATE trial_counts SET n = 100000 WHERE state = 'PENDING'",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(rw));
    sqlite3_close(rw);
    long long counts[TRIAL_N_STATES];
    cr_assert_eq(store_job_state_counts(s, job, counts, err, sizeof err), 0, "%s", err);
    st = states_of(db, job);
    cr_assert_eq(json_integer_value(json_object_get(st, "PENDING")), counts[TRIAL_PENDING]);
    cr_assert_eq(counts[TRIAL_PENDING], 100000);
    json_decref(st);
    sqlite3_close(db);
    store_close(&s);
}
