/* How bfd ends attempts that will not succeed (real bfd, real bfworker
 * processes, the real store read back):
 *   - progress_timeout: a worker that heartbeats but stores no new metric
 *     point (it trains without logging, or hangs in open() of a FIFO nobody
 *     writes) is failed with that reason; without the key it runs on;
 *   - a config or data error (the worker exits 64) is not retried: one
 *     attempt although retries: 2, for each kind of bad input tried; a
 *     runtime failure (a diverging run, a killed worker) still is;
 *   - a launch whose crash-recovery record cannot be written (a trigger
 *     refuses the bfd_runs row) does not happen: the trial stays PENDING. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "it_bfd.h"

static char g_dir[256], g_home[320];
static pid_t g_bfd = -1;

static void setup(void) {
    it_worker_env();
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-itf-XXXXXX");
    it_copy_glosses(g_dir);
}

static void teardown(void) {
    it_stop(&g_bfd, SIGKILL);
    it_kill_workers(g_home);
    if (tmpdir_remove(g_dir)) { /* nothing left to clean is fine */
    }
}

TestSuite(bfd_failures, .init = setup, .fini = teardown, .timeout = 150);

static void start_bfd(const char *extra_yaml) {
    char y[512];
    snprintf(y, sizeof y,
             "slots: 2\nheartbeat_timeout: 5\nheartbeat_interval: 0.2\nkill_grace: 1\n%s",
             extra_yaml);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), y, 0644);
    g_bfd = it_bfd_start(g_dir, g_home);
}

/* Writes dir/NAME.yaml: one CPU BudgetFormer trial on DATA (a flow mapping's
 * inside, e.g. "train: X, val: Y"), TRAIN (the train mapping's inside) and
 * `retries`; returns its path. */
static const char *sweep_with(const char *name, const char *data, const char *train, int retries,
                              const char *extra);
static const char *sweep(const char *name, const char *data, const char *train, int retries) {
    return sweep_with(name, data, train, retries, "");
}

/* sweep() with EXTRA (whole lines of top-level keys) added to the file. */
static const char *sweep_with(const char *name, const char *data, const char *train, int retries,
                              const char *extra) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s.yaml", g_dir, name);
    char text[8192];
    snprintf(text, sizeof text,
             "name: %s\npipeline: budgetformer\ndevice: cpu\ndata: {%s}\n"
             "model: {layers: 1, d_model: 32, heads: 4, seq_len: 16, vocab: 256}\n"
             "train: {batch: 8, %s}\nretries: %d\n"
             "sweep:\n  parameters:\n    train.seed: {values: [1]}\n"
             "metric: {name: train/loss, goal: min}\n%s",
             name, data, train, retries, extra);
    it_write_text(p, text, 0644);
    return p;
}

static long long trial_int(const char *col, long long trial) {
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT %s FROM trials WHERE id = ?1", col);
    return it_db_int(g_home, sql, trial);
}

/* Waits until trial is FAILED (with no retry pending: not PENDING or
 * RUNNING again) for at most timeout s; returns the seconds it took. */
static double wait_failed(long long trial, double timeout) {
    double t0 = it_now_s();
    char st[32];
    for (;;) {
        it_db_text(g_home, "SELECT state FROM trials WHERE id = ?1", trial, st, sizeof st);
        if (!strcmp(st, "FAILED")) return it_now_s() - t0;
        cr_assert(it_now_s() - t0 < timeout, "trial %lld is %s after %.0f s (see %s/bfd.log)",
                  trial, st, timeout, g_dir);
        it_sleep_s(0.1);
    }
}

/* The message of the trial's last event. */
static void last_event(long long trial, char *buf, size_t len) {
    it_db_text(g_home, "SELECT message FROM events WHERE trial = ?1 ORDER BY id DESC LIMIT 1",
               trial, buf, len);
}

/* A worker that trains but logs nothing (log_every = steps) heartbeats and
 * stores no point after its first: progress_timeout 2 fails it within a
 * few seconds, with the reason, and the retry fails the same way. */
Test(bfd_failures, progress_timeout_fails_a_worker_that_stores_no_point) {
    start_bfd("progress_timeout: 2\n");
    char data[600];
    snprintf(data, sizeof data, "train: %s/train.tsv, val: %s/val.tsv", g_dir, g_dir);
    it_submit(g_dir, sweep("quiet", data,
                           "steps: 100000000, log_every: 100000000, eval_every: 0, "
                           "checkpoint_every: 0",
                           1));
    /* 120 s: a guard against a worker never failed, not a bound on the time */
    double took = wait_failed(1, 120);
    fprintf(stderr, "two attempts of progress_timeout 2 s failed in %.1f s\n", took);
    cr_assert_eq(trial_int("attempts", 1), 2,
                 "the timed-out attempt is a runtime failure: retried");
    char msg[600];
    it_db_text(g_home,
               "SELECT COUNT(*) FROM events WHERE trial = ?1 AND message LIKE "
               "'%progress_timeout 2 s%'",
               1, msg, sizeof msg);
    cr_assert_eq(atoi(msg), 2, "both attempts fail with the progress_timeout reason");
}

/* Without progress_timeout the same worker is left running. The clock is
 * bfd's own: a second trial started after it has its worker stopped
 * (SIGSTOP), and once bfd has failed that one for its silence
 * (heartbeat_timeout 5 s), the quiet worker has gone longer than that
 * without a new point, and must still be RUNNING. */
Test(bfd_failures, without_progress_timeout_a_quiet_worker_runs_on) {
    start_bfd("");
    char data[600];
    snprintf(data, sizeof data, "train: %s/train.tsv, val: %s/val.tsv", g_dir, g_dir);
    it_submit(g_dir, sweep("quiet", data,
                           "steps: 100000000, log_every: 100000000, eval_every: 0, "
                           "checkpoint_every: 0",
                           0));
    it_db_wait(g_dir, g_home, "the quiet trial's worker",
               "SELECT COUNT(*) FROM bfd_runs WHERE trial = ?1 AND pid > 0", 1, 1, 60);
    it_submit(g_dir, sweep("stopped", data, "steps: 100000000, log_every: 10, eval_every: 0", 0));
    it_db_wait(g_dir, g_home, "the second trial's first point",
               "SELECT COUNT(*) FROM metrics WHERE trial = ?1", 2, 1, 60);
    pid_t w = (pid_t)it_db_int(g_home, "SELECT pid FROM bfd_runs WHERE trial = ?1", 2);
    cr_assert_gt(w, 0);
    cr_assert_eq(kill(w, SIGSTOP), 0);
    wait_failed(2, 120);
    char msg[600];
    last_event(2, msg, sizeof msg);
    cr_assert(strstr(msg, "heartbeat timeout"), "the stopped worker failed for: %s", msg);
    char st[32];
    it_db_text(g_home, "SELECT state FROM trials WHERE id = ?1", 1, st, sizeof st);
    cr_assert_str_eq(st, "RUNNING");
    kill(w, SIGKILL);
}

/* The training file is a FIFO that nobody writes: the worker either hangs
 * in open() (progress_timeout ends it) or refuses it as not a regular file
 * (a data error: one attempt). Either way the trial is FAILED, and soon. */
Test(bfd_failures, data_on_a_fifo_nobody_writes_does_not_hold_a_slot) {
    start_bfd("progress_timeout: 2\n");
    char fifo[400], data[900];
    snprintf(fifo, sizeof fifo, "%s/train.fifo", g_dir);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    snprintf(data, sizeof data, "train: %s, val: %s/val.tsv", fifo, g_dir);
    it_submit(g_dir, sweep("fifo", data, "steps: 20, log_every: 5, eval_every: 0", 0));
    double took = wait_failed(1, 120);
    fprintf(stderr, "the trial on a FIFO failed in %.1f s\n", took);
    /* the state is written before the run's record goes: wait for the record */
    it_db_wait(g_dir, g_home, "its slot to be free", "SELECT COUNT(*) = 0 FROM bfd_runs", 0, 1, 20);
}

/* The rule: every config/data error the worker finds at the start ends the
 * trial after one attempt whatever its retries (exit status 64, "not
 * retried" in the reason). Each bad input here is one the sweep check
 * cannot see (it reads no file). */
Test(bfd_failures, config_and_data_errors_are_not_retried) {
    start_bfd("");
    char bad[4][900];
    /* a training file that does not exist */
    snprintf(bad[0], sizeof bad[0], "train: %s/nope.tsv, val: %s/val.tsv", g_dir, g_dir);
    /* a validation file that does not exist */
    snprintf(bad[1], sizeof bad[1], "train: %s/train.tsv, val: %s/nope.tsv", g_dir, g_dir);
    /* a folder where a file is expected */
    snprintf(bad[2], sizeof bad[2], "train: %s, val: %s/val.tsv", g_dir, g_dir);
    /* a file that is not TSV (binary garbage) */
    char junk[400];
    snprintf(junk, sizeof junk, "%s/junk.tsv", g_dir);
    it_write_text(junk, "\x01\x02\x03 no tab here\n\x7f\n", 0644);
    snprintf(bad[3], sizeof bad[3], "train: %s, val: %s/val.tsv", junk, g_dir);
    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof name, "bad%d", i);
        it_submit(g_dir, sweep(name, bad[i], "steps: 20, log_every: 5, eval_every: 0", 2));
    }
    /* good data, a bad init.from: a file that is not there, one that is not
     * a checkpoint, one whose tensor does not fit the model (head.bias of 1
     * class), an init.map without init.from */
    char good[900], from[4][900];
    snprintf(good, sizeof good, "train: %s/train.tsv, val: %s/val.tsv", g_dir, g_dir);
    char junk_st[400], small[400];
    snprintf(junk_st, sizeof junk_st, "%s/junk.safetensors", g_dir);
    it_write_text(junk_st, "not a safetensors file, not even close to one", 0644);
    snprintf(small, sizeof small, "%s/small.safetensors", g_dir);
    {
        static const char hdr[] =
            "{\"head.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
        FILE *f = fopen(small, "wb");
        cr_assert_not_null(f);
        unsigned char len[8] = {(unsigned char)(sizeof hdr - 1)};
        float one = 1.0f;
        fwrite(len, 1, 8, f);
        fwrite(hdr, 1, sizeof hdr - 1, f);
        fwrite(&one, sizeof one, 1, f);
        fclose(f);
    }
    snprintf(from[0], sizeof from[0], "init: {from: %s/nowhere}\n", g_dir);
    snprintf(from[1], sizeof from[1], "init: {from: %s}\n", junk_st);
    snprintf(from[2], sizeof from[2], "init: {from: %s}\n", small);
    snprintf(from[3], sizeof from[3], "init: {map: timm}\n");
    static const char *const from_says[] = {"nowhere", "junk.safetensors", "head.bias", "init.map"};
    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof name, "from%d", i);
        it_submit(g_dir,
                  sweep_with(name, good, "steps: 20, log_every: 5, eval_every: 0", 2, from[i]));
    }
    for (long long t = 1; t <= 8; t++) {
        wait_failed(t, 60);
        cr_assert_eq(trial_int("attempts", t), 1, "trial %lld (%s): one attempt, retries: 2", t,
                     t <= 4 ? bad[t - 1] : from[t - 5]);
        if (t > 4) {
            static char out[65536];
            char args[32];
            snprintf(args, sizeof args, "show t%lld", t);
            cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0);
            cr_assert(strstr(out, from_says[t - 5]), "show t%lld does not name '%s':\n%s", t,
                      from_says[t - 5], out);
        }
        char msg[600];
        last_event(t, msg, sizeof msg);
        cr_assert(strstr(msg, "exit status 64") && strstr(msg, "not retried"),
                  "trial %lld: last event '%s'", t, msg);
    }
}

/* A failure while training (here the worker killed by a signal, each
 * attempt) is retried until retries are spent. */
Test(bfd_failures, a_runtime_failure_is_still_retried) {
    start_bfd("");
    char data[600];
    snprintf(data, sizeof data, "train: %s/train.tsv, val: %s/val.tsv", g_dir, g_dir);
    it_submit(g_dir, sweep("killed", data, "steps: 100000000, log_every: 5, eval_every: 0", 1));
    for (long long a = 1; a <= 2; a++) {
        it_db_wait(g_dir, g_home, "the attempt's worker",
                   "SELECT COUNT(*) FROM bfd_runs WHERE trial = 1 AND attempt >= ?1", a, 1, 30);
        it_db_wait(g_dir, g_home, "a pid", "SELECT MAX(pid) FROM bfd_runs WHERE attempt = ?1", a, 1,
                   30);
        long long pid = it_db_int(g_home, "SELECT pid FROM bfd_runs WHERE attempt = ?1", a);
        cr_assert_eq(kill((pid_t)pid, SIGKILL), 0);
    }
    wait_failed(1, 60);
    cr_assert_eq(trial_int("attempts", 1), 2, "retries: 1 gives two attempts");
    char msg[600];
    last_event(1, msg, sizeof msg);
    cr_assert(strstr(msg, "killed by signal 9") && !strstr(msg, "not retried"), "last event '%s'",
              msg);
}

/* `show tN` of a FAILED trial says why: the failed attempt's end (exit
 * status, not retried) and the last lines of its log, which hold the
 * worker's own error naming the missing file; `--json` carries the same
 * fields; `ls` marks the job (FAILED column, "failed" in --json), and a job
 * without failures is not marked. */
Test(bfd_failures, show_says_why_a_trial_failed_and_ls_marks_the_job) {
    start_bfd("");
    char bad[900], good[900];
    snprintf(bad, sizeof bad, "train: %s/nope.tsv, val: %s/val.tsv", g_dir, g_dir);
    snprintf(good, sizeof good, "train: %s/train.tsv, val: %s/val.tsv", g_dir, g_dir);
    it_submit(g_dir, sweep("broken", bad, "steps: 20, log_every: 5, eval_every: 0", 0));
    it_submit(g_dir, sweep("fine", good, "steps: 10, log_every: 5, eval_every: 0", 0));
    wait_failed(1, 60);
    static char out[65536];
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "show t1"), 0);
    cr_assert(strstr(out, "failed: attempt 1: exit status 64"), "show t1:\n%s", out);
    cr_assert(strstr(out, "not retried"), "show t1:\n%s", out);
    cr_assert(strstr(out, "last lines of the log"), "show t1:\n%s", out);
    cr_assert(strstr(out, "  | ") && strstr(out, "nope.tsv"), "the worker's error:\n%s", out);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "show t1 --json"), 0);
    cr_assert(strstr(out, "\"failure\"") && strstr(out, "\"attempt\": 1") &&
                  strstr(out, "\"log_tail\"") && strstr(out, "exit status 64"),
              "show t1 --json:\n%s", out);
    /* show JOB: each FAILED trial's row is followed by why; a fine job has no such line */
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "show 1"), 0);
    char *row = strstr(out, "\nt1 ");
    cr_assert(row && strstr(row, "FAILED"), "show 1:\n%s", out);
    cr_assert(strstr(row, "\n        failed: attempt 1: exit status 64") &&
                  strstr(row, "not retried"),
              "show 1 does not say why t1 failed:\n%s", out);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "show 1 --json"), 0);
    cr_assert(strstr(out, "\"failure\"") && strstr(out, "exit status 64"), "show 1 --json:\n%s",
              out);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "wait 2"), 0, "%s", out);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "show 2"), 0);
    cr_assert(!strstr(out, "failed:"), "show 2 of a job without failures:\n%s", out);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "ls"), 0);
    cr_assert(strstr(out, "FAILED"), "ls:\n%s", out);
    char *l1 = strstr(out, "\n1 "), *l2 = strstr(out, "\n2 ");
    cr_assert(l1 && l2, "ls:\n%s", out);
    cr_assert(strstr(l1, " 1!  "), "job 1 is marked:\n%s", out);
    cr_assert(!strstr(l2, "!"), "job 2 is not:\n%s", out);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "ls --json"), 0);
    cr_assert(strstr(out, "\"failed\": 1") && strstr(out, "\"failed\": 0"), "ls --json:\n%s", out);
}

/* A launch whose crash-recovery record (its bfd_runs row, which a restarted
 * bfd reattaches by) cannot be written does not happen: with a trigger
 * refusing the row, bfd says so and the trial stays PENDING with no attempt
 * and nothing started; once the row can be written, it runs and completes
 * at its first attempt. */
Test(bfd_failures, a_launch_bfd_cannot_record_stays_pending) {
    start_bfd("");
    it_db_exec(g_home, "CREATE TRIGGER refuse BEFORE INSERT ON bfd_runs BEGIN"
                       " SELECT RAISE(ABORT, 'bfd_runs refused by the test'); END");
    char data[600];
    snprintf(data, sizeof data, "train: %s/train.tsv, val: %s/val.tsv", g_dir, g_dir);
    long long job = it_submit(g_dir, sweep("unrecorded", data, "steps: 10, log_every: 5", 0));
    const char *logp = tmpdir_path(g_dir, "bfd.log");
    double t0 = it_now_s();
    while (it_count_lines_with(logp, "bfd_runs refused by the test") == 0) {
        cr_assert_lt(it_now_s() - t0, 30, "bfd did not try to launch (see %s)", logp);
        it_sleep_s(0.1);
    }
    char st[32];
    it_db_text(g_home, "SELECT state FROM trials WHERE id = ?1", 1, st, sizeof st);
    cr_expect_str_eq(st, "PENDING", "a launch bfd could not record went on");
    cr_expect_eq(trial_int("attempts", 1), 0, "an attempt was counted");
    cr_expect_eq(it_db_int(g_home, "SELECT COUNT(*) FROM attempts WHERE trial = ?1", 1), 0);
    cr_expect_eq(access(tmpdir_path(g_home, "logs/1.log"), F_OK), -1, "a worker was started");
    it_db_exec(g_home, "DROP TRIGGER refuse");
    char args[64];
    snprintf(args, sizeof args, "wait %lld", job);
    cr_assert_eq(it_bfctl(g_dir, NULL, 0, args), 0, "the job did not complete (see %s)", logp);
    cr_expect_eq(trial_int("attempts", 1), 1, "not one attempt");
}

/* `bfctl daemon status --json`'s slots_free (the whole reply into out). */
static long long slots_free(char *out, size_t len) {
    cr_assert_eq(it_bfctl(g_dir, out, len, "daemon status --json"), 0);
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    cr_assert(o, "daemon status --json: %s:\n%s", je.text, out);
    long long v = json_integer_value(json_object_get(o, "slots_free"));
    json_decref(o);
    return v;
}

/* A stopped worker (SIGSTOP: alive, silent) fails its attempt on the
 * heartbeat timeout; bfd kills and reaps its process group, frees its slot,
 * and the retry is attempt 2, whose worker's hello is accepted (it stores
 * points). When the retry is killed too the trial is FAILED with every slot
 * free. */
Test(bfd_failures, a_stopped_worker_is_killed_and_its_retry_runs) {
    start_bfd("");
    char data[600];
    snprintf(data, sizeof data, "train: %s/train.tsv, val: %s/val.tsv", g_dir, g_dir);
    it_submit(g_dir, sweep("stopped", data, "steps: 100000000, log_every: 5, eval_every: 0", 1));
    it_db_wait(g_dir, g_home, "a point of attempt 1",
               "SELECT COUNT(*) FROM metrics WHERE trial = ?1", 1, 1, 30);
    long long pid1 = it_db_int(g_home, "SELECT pid FROM bfd_runs WHERE attempt = ?1", 1);
    cr_assert_gt(pid1, 0);
    cr_assert_eq(kill((pid_t)pid1, SIGSTOP), 0);
    it_db_wait(g_dir, g_home, "attempt 2's worker",
               "SELECT COUNT(*) FROM bfd_runs WHERE trial = 1 AND attempt = ?1 AND pid > 0", 2, 1,
               30);
    /* attempt 2's worker was accepted: points stored after it started */
    it_db_wait(g_dir, g_home, "a point of attempt 2",
               "SELECT COUNT(*) FROM metrics WHERE trial = 1 AND time > (SELECT started FROM "
               "attempts WHERE trial = 1 AND n = ?1)",
               2, 1, 30);
    /* the stopped process was killed and reaped (a zombie would still answer kill 0) */
    double t0 = it_now_s();
    while (kill((pid_t)pid1, 0) == 0) {
        cr_assert(it_now_s() - t0 < 10, "the stopped worker %lld still lives", pid1);
        it_sleep_s(0.1);
    }
    static char out[65536];
    cr_assert_eq(slots_free(out, sizeof out), 1, "only attempt 2 holds a slot:\n%s", out);
    cr_assert(strstr(out, "\"attempt\": 2"), "%s", out);
    long long pid2 = it_db_int(g_home, "SELECT pid FROM bfd_runs WHERE attempt = ?1", 2);
    cr_assert_eq(kill((pid_t)pid2, SIGKILL), 0);
    wait_failed(1, 120);
    cr_assert_eq(trial_int("attempts", 1), 2);
    t0 = it_now_s();
    while (slots_free(out, sizeof out) != 2) {
        cr_assert(it_now_s() - t0 < 10, "a slot is still held:\n%s", out);
        it_sleep_s(0.1);
    }
}

/* The first live attempt of `daemon status --json` (the reply into out):
 * its "exited" (0 when absent, -1 when no attempt is listed). */
static int first_run_exited(char *out, size_t len) {
    cr_assert_eq(it_bfctl(g_dir, out, len, "daemon status --json"), 0);
    json_t *o = json_loads(out, 0, NULL);
    cr_assert(o, "daemon status --json:\n%s", out);
    json_t *r = json_array_get(json_object_get(o, "running"), 0);
    int v = r ? json_is_true(json_object_get(r, "exited")) : -1;
    json_decref(o);
    return v;
}

/* The store refuses every commit (BF_TEST_STORE_FULL, as a full disk does)
 * when the worker dies: bfd still notices the exit, frees its slot, says
 * in status that the end is unrecorded, and stores it once the store takes
 * writes again: the trial is FAILED, not left RUNNING. */
Test(bfd_failures, a_worker_gone_while_the_store_is_full_is_recorded_later) {
    char full[400];
    snprintf(full, sizeof full, "%s/store-full", g_dir);
    setenv("BF_TEST_STORE_FULL", full, 1);
    start_bfd("");
    unsetenv("BF_TEST_STORE_FULL");
    char data[600];
    snprintf(data, sizeof data, "train: %s/train.tsv, val: %s/val.tsv", g_dir, g_dir);
    it_submit(g_dir, sweep("full", data, "steps: 100000000, log_every: 5, eval_every: 0", 0));
    it_db_wait(g_dir, g_home, "a point", "SELECT COUNT(*) FROM metrics WHERE trial = ?1", 1, 1, 30);
    long long pid = it_db_int(g_home, "SELECT pid FROM bfd_runs WHERE attempt = ?1", 1);
    cr_assert_gt(pid, 0);
    it_write_text(full, "", 0644);
    cr_assert_eq(kill((pid_t)pid, SIGKILL), 0);
    static char out[65536];
    double t0 = it_now_s();
    while (first_run_exited(out, sizeof out) != 1) {
        cr_assert(it_now_s() - t0 < 20, "the worker's exit is not seen:\n%s", out);
        it_sleep_s(0.1);
    }
    cr_assert(strstr(out, "\"unrecorded\"") && strstr(out, "killed by signal 9"), "%s", out);
    cr_assert_eq(slots_free(out, sizeof out), 2, "the dead worker holds no slot:\n%s", out);
    char st[32];
    it_db_text(g_home, "SELECT state FROM trials WHERE id = ?1", 1, st, sizeof st);
    cr_assert_str_eq(st, "RUNNING", "nothing is written while the store is full");
    cr_assert_eq(unlink(full), 0);
    wait_failed(1, 120);
    char msg[600];
    last_event(1, msg, sizeof msg);
    cr_assert(strstr(msg, "killed by signal 9"), "last event '%s'", msg);
    t0 = it_now_s();
    while (first_run_exited(out, sizeof out) != -1) {
        cr_assert(it_now_s() - t0 < 10, "the recorded attempt is still listed:\n%s", out);
        it_sleep_s(0.1);
    }
}

/* A worker killed before its first checkpoint: the retry starts again from
 * step 0 and logs the same steps again. Every point is kept, with the
 * attempt that logged it; the first attempt's steps the retry logged again
 * are superseded, so the current curve (what tail, plot, results and
 * TensorBoard read) has each (metric, step) once, and `export --csv` has
 * the attempt of each row and whether it is current. */
Test(bfd_failures, a_retry_that_logs_steps_again_stores_each_step_once_in_the_curve) {
    start_bfd("");
    char data[600];
    snprintf(data, sizeof data, "train: %s/train.tsv, val: %s/val.tsv", g_dir, g_dir);
    it_submit(g_dir, sweep("again", data,
                           "steps: 100000000, log_every: 5, eval_every: 0, "
                           "checkpoint_every: 100000000",
                           1));
    it_db_wait(g_dir, g_home, "attempt 1 at step 30",
               "SELECT MAX(step) FROM metrics WHERE trial = ?1", 1, 30, 30);
    long long pid1 = it_db_int(g_home, "SELECT pid FROM bfd_runs WHERE attempt = ?1", 1);
    cr_assert_eq(kill((pid_t)pid1, SIGKILL), 0);
    it_db_wait(g_dir, g_home, "attempt 2's worker",
               "SELECT COUNT(*) FROM bfd_runs WHERE trial = 1 AND attempt = ?1 AND pid > 0", 2, 1,
               30);
    /* attempt 2 past every step attempt 1 stored */
    long long a1 = it_db_int(g_home, "SELECT MAX(step) FROM metrics WHERE attempt = ?1", 1);
    it_db_wait(g_dir, g_home, "attempt 2 past attempt 1's last step",
               "SELECT MAX(step) FROM metrics WHERE attempt = 2 AND step > ?1", a1, a1 + 1, 30);
    long long pid2 = it_db_int(g_home, "SELECT pid FROM bfd_runs WHERE attempt = ?1", 2);
    cr_assert_eq(kill((pid_t)pid2, SIGKILL), 0);
    wait_failed(1, 120);
    cr_assert_eq(it_db_int(g_home,
                           "SELECT COUNT(*) FROM (SELECT name, step FROM metrics WHERE trial = ?1 "
                           "AND superseded = 0 GROUP BY name, step HAVING COUNT(*) > 1)",
                           1),
                 0, "a (metric, step) twice in the current curve");
    cr_assert_gt(it_db_int(g_home,
                           "SELECT COUNT(*) FROM metrics WHERE trial = ?1 AND attempt = 1 AND "
                           "superseded = 1",
                           1),
                 0, "attempt 1's points are kept, marked superseded");
    cr_assert_eq(
        it_db_int(g_home, "SELECT COUNT(*) FROM metrics WHERE trial = ?1 AND attempt NOT IN (1, 2)",
                  1),
        0, "every point carries its attempt");
    static char out[1 << 20];
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "export 1 --csv"), 0);
    cr_assert(strstr(out, ",seq,step,time,name,value,attempt,current\n"), "%.300s", out);
    cr_assert(strstr(out, ",1,0\n") && strstr(out, ",2,1\n"),
              "rows of attempt 1 superseded and of attempt 2 current:\n%.2000s", out);
    /* tail's history holds each step once */
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "tail t1"), 0);
    static char seen[1 << 16];
    memset(seen, 0, sizeof seen);
    int lines = 0;
    for (char *l = out; (l = strstr(l, " step ")); l++) {
        long long step = atoll(l + 6);
        cr_assert(step >= 0 && step < (long long)sizeof seen, "step %lld", step);
        cr_assert(!seen[step], "tail shows step %lld twice:\n%.3000s", step, out);
        seen[step] = 1;
        lines++;
    }
    cr_assert_gt(lines, 0, "tail t1:\n%s", out);
}

/* Writes dir/NAME, an executable sh script with body (after the #! line). */
static const char *script(const char *name, const char *body) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    char text[4096];
    snprintf(text, sizeof text, "#!/bin/sh\n%s", body);
    it_write_text(p, text, 0755);
    return p;
}

/* srun's step launch can take longer than heartbeat_timeout under load:
 * the heartbeat clock starts at the worker's hello, and before it
 * startup_timeout applies. A worker that takes 7 s to start (heartbeat
 * timeout 5) completes; one that never says hello fails on
 * startup_timeout, saying so. */
Test(bfd_failures, the_heartbeat_clock_starts_at_the_hello) {
    char y[1200];
    snprintf(y, sizeof y, "bfworker: %s\nstartup_timeout: 20\n",
             script("slow_worker", "sleep 7\nexec " BF_BIN_DIR "/bfworker \"$@\"\n"));
    start_bfd(y);
    char data[600];
    snprintf(data, sizeof data, "train: %s/train.tsv, val: %s/val.tsv", g_dir, g_dir);
    it_submit(g_dir, sweep("slow", data, "steps: 20, log_every: 5, eval_every: 0", 0));
    char st[32];
    double t0 = it_now_s();
    for (;;) {
        it_db_text(g_home, "SELECT state FROM trials WHERE id = ?1", 1, st, sizeof st);
        if (strcmp(st, "PENDING") && strcmp(st, "RUNNING")) break;
        cr_assert(it_now_s() - t0 < 60, "trial 1 still %s", st);
        it_sleep_s(0.2);
    }
    char msg[600];
    last_event(1, msg, sizeof msg);
    cr_assert_str_eq(st, "COMPLETED", "last event: %s", msg);
}

Test(bfd_failures, a_worker_that_never_says_hello_fails_on_startup_timeout) {
    char y[1200];
    snprintf(y, sizeof y,
             "slots: 2\nheartbeat_timeout: 600\nheartbeat_interval: 0.2\nkill_grace: 1\n"
             "bfworker: %s\nstartup_timeout: 2\n",
             script("mute_worker", "exec sleep 1000\n"));
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), y, 0644);
    g_bfd = it_bfd_start(g_dir, g_home);
    char data[600];
    snprintf(data, sizeof data, "train: %s/train.tsv, val: %s/val.tsv", g_dir, g_dir);
    it_submit(g_dir, sweep("mute", data, "steps: 20, log_every: 5, eval_every: 0", 0));
    wait_failed(1, 120);
    char msg[600];
    last_event(1, msg, sizeof msg);
    cr_assert(strstr(msg, "no hello from the worker") && strstr(msg, "startup_timeout 2 s"),
              "last event '%s'", msg);
}

/* A worker that left its outcome file (every point stored, `done` sent)
 * and then went silent, its `done` lost: the attempt is judged by the
 * outcome, COMPLETED, not failed for its silence. */
Test(bfd_failures, a_silent_worker_that_left_its_outcome_is_judged_by_it) {
    char y[1200];
    snprintf(y, sizeof y,
             "slots: 2\nheartbeat_timeout: 600\nheartbeat_interval: 0.2\nkill_grace: 1\n"
             "bfworker: %s\nstartup_timeout: 2\n",
             script("outcome_worker",
                    "while [ $# -gt 0 ]; do case $1 in --out) out=$2;; --attempt) a=$2;; esac; "
                    "shift; done\n"
                    "echo \"$a completed 0\" > \"$out/outcome\"\nexec sleep 1000\n"));
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), y, 0644);
    g_bfd = it_bfd_start(g_dir, g_home);
    char data[600];
    snprintf(data, sizeof data, "train: %s/train.tsv, val: %s/val.tsv", g_dir, g_dir);
    it_submit(g_dir, sweep("done", data, "steps: 20, log_every: 5, eval_every: 0", 0));
    char st[32];
    double t0 = it_now_s();
    for (;;) {
        it_db_text(g_home, "SELECT state FROM trials WHERE id = ?1", 1, st, sizeof st);
        if (strcmp(st, "PENDING") && strcmp(st, "RUNNING")) break;
        cr_assert(it_now_s() - t0 < 30, "trial 1 still %s", st);
        it_sleep_s(0.2);
    }
    char msg[600];
    last_event(1, msg, sizeof msg);
    cr_assert_str_eq(st, "COMPLETED", "last event: %s", msg);
    cr_assert(strstr(msg, "outcome"), "last event: %s", msg);
}

/* 1 when pid is gone or a zombie (it writes nothing more). */
static int pid_gone(pid_t pid) {
    char p[64], buf[512];
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *s = strrchr(buf, ')');
    return !s || s[1] != ' ' || s[2] == 'Z' || s[2] == 'X';
}

/* bfd is killed while a trial runs; the worker goes on logging (nothing
 * acknowledged) and dies before bfd is back. The restarted bfd stores what
 * metrics.jsonl holds past the last stored seq: every complete line of the
 * file is in the store, none lost. */
Test(bfd_failures, lines_a_worker_could_not_deliver_are_stored_by_recovery) {
    start_bfd("");
    char data[600];
    snprintf(data, sizeof data, "train: %s/train.tsv, val: %s/val.tsv", g_dir, g_dir);
    it_submit(g_dir, sweep("down", data, "steps: 100000000, log_every: 5, eval_every: 0", 0));
    it_db_wait(g_dir, g_home, "a point", "SELECT COUNT(*) FROM metrics WHERE trial = ?1", 1, 1, 30);
    long long pid = it_db_int(g_home, "SELECT pid FROM bfd_runs WHERE attempt = ?1", 1);
    long long stored = it_db_int(g_home, "SELECT MAX(seq) FROM metrics WHERE trial = ?1", 1);
    it_stop(&g_bfd, SIGKILL);
    /* the worker logs on, undelivered, then dies */
    long long lines = 0, values = 0;
    double t0 = it_now_s();
    do {
        cr_assert(it_now_s() - t0 < 30, "the worker logged no more lines");
        it_sleep_s(0.2);
        it_metrics_file(g_home, 1, 1, &lines, &values);
    } while (lines < stored + 4);
    cr_assert_eq(kill(-(pid_t)pid, SIGKILL), 0);
    while (!pid_gone((pid_t)pid)) it_sleep_s(0.05);
    it_metrics_file(g_home, 1, 1, &lines, &values);
    g_bfd = it_bfd_start(g_dir, g_home);
    wait_failed(1, 120);
    cr_assert_eq(it_db_int(g_home, "SELECT MAX(seq) FROM metrics WHERE trial = ?1", 1), lines,
                 "every complete line of metrics.jsonl is stored (%lld were before the kill)",
                 stored);
    cr_assert_eq(it_db_int(g_home, "SELECT COUNT(*) FROM metrics WHERE trial = ?1", 1), values);
}
