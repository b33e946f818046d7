/* How bfd ends attempts that will not succeed (real bfd, real bfworker
 * processes, the real store read back):
 *   - progress_timeout: a worker that heartbeats but stores no new metric
 *     point (it trains without logging, or hangs in open() of a FIFO nobody
 *     writes) is failed with that reason; without the key it runs on;
 *   - a config or data error (the worker exits 64) is not retried: one
 *     attempt although retries: 2, for each kind of bad input tried; a
 *     runtime failure (a diverging run, a killed worker) still is. */
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
    cr_assert_eq(it_db_int(g_home, "SELECT COUNT(*) FROM bfd_runs", 0), 0, "its slot is free");
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
