/* bfd end to end: a real bfd, real bfworker processes (tiny BudgetFormer
 * configs on the shipped WordNet-gloss fixture), real signals, the real
 * SQLite store read back directly.
 *   - a 3-trial sweep completes; every line of each trial's metrics.jsonl is
 *     stored exactly once with seq 1..N;
 *   - cancel of a running trial kills it and marks it CANCELLED;
 *   - a worker killed with SIGKILL is retried and resumes from its checkpoint;
 *   - a worker sent SIGTERM from outside (preempted) goes back to PENDING
 *     without using a retry, resumes and completes on attempt 2;
 *   - bfd killed with SIGKILL mid-sweep and restarted finishes the sweep with
 *     every point stored exactly once;
 *   - malformed and oversized messages sent straight to the control and
 *     worker sockets get error replies, and bfd keeps serving. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "it_bfd.h"

#define BFD IT_BFD
#define BFCTL IT_BFCTL

static char g_dir[256], g_home[320];
static pid_t g_bfd = -1;

static void start_bfd(void) { g_bfd = it_bfd_start(g_dir, g_home); }
static void stop_bfd(int sig) { it_stop(&g_bfd, sig); }

static void setup(void) {
    it_worker_env();
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-itd-XXXXXX");
    it_copy_glosses(g_dir);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"),
                  "slots: 2\nheartbeat_timeout: 5\nheartbeat_interval: 0.2\nkill_grace: 2\n", 0644);
}

static void teardown(void) {
    stop_bfd(SIGKILL);
    /* end the process group of any worker this test left running, by the pids bfd recorded */
    it_kill_workers(g_home);
    if (tmpdir_remove(g_dir)) { /* nothing left to clean is fine */
    }
}

/* Writes a sweep of n_seeds trials training `steps` steps; returns its path. */
static const char *write_sweep(const char *name, int n_seeds, int steps, int retries) {
    char extra[32];
    snprintf(extra, sizeof extra, "retries: %d\n", retries);
    return it_write_sweep(g_dir, name, n_seeds, steps, extra);
}

/* Runs bfctl with args; returns its exit status, stdout in out. */
static int ctl(char *out, size_t outlen, const char *args) {
    return it_bfctl(g_dir, out, outlen, args);
}

static long long submit(const char *sweep) { return it_submit(g_dir, sweep); }
static sqlite3 *db_open(void) { return it_db_open(g_home); }
static long long db_int(const char *sql, long long arg) { return it_db_int(g_home, sql, arg); }

static void wait_for(const char *what, const char *sql, long long arg, long long at_least,
                     double timeout) {
    it_db_wait(g_dir, g_home, what, sql, arg, at_least, timeout);
}

/* Every line of the trial's metrics.jsonl is stored exactly once: seqs run
 * 1..N with N the line count and the rows equal the non-null values. */
static void check_exactly_once(long long trial) {
    long long lines, values;
    it_metrics_file(g_home, trial, 1, &lines, &values); /* a line cut by a kill: sent empty */
    cr_assert_gt(lines, 0);
    long long rows = db_int("SELECT COUNT(*) FROM metrics WHERE trial = ?1", trial);
    long long seqs = db_int("SELECT COUNT(DISTINCT seq) FROM metrics WHERE trial = ?1", trial);
    long long mn = db_int("SELECT MIN(seq) FROM metrics WHERE trial = ?1", trial);
    long long mx = db_int("SELECT MAX(seq) FROM metrics WHERE trial = ?1", trial);
    cr_assert_eq(rows, values, "trial %lld: %lld rows stored, %lld values in metrics.jsonl", trial,
                 rows, values);
    cr_assert_eq(mn, 1, "trial %lld: first seq %lld", trial, mn);
    cr_assert_eq(mx, lines, "trial %lld: last seq %lld, %lld lines", trial, mx, lines);
    /* every line with values is one seq (lines cut by a kill have none) */
    cr_assert_leq(seqs, lines);
    cr_assert_geq(seqs, lines - 2, "trial %lld: %lld seqs for %lld lines", trial, seqs, lines);
}

static int wait_job(long long job) {
    char args[64];
    snprintf(args, sizeof args, "wait %lld", job);
    return ctl(NULL, 0, args);
}

/* Starts bfd and a 1-trial, 3000-step sweep, waits until step 150 is logged
 * (checkpoints at 50, 100, 150 exist) and sends sig to the trial's worker;
 * returns the job id. */
static long long signal_worker_at_step_150(const char *name, int retries, int sig) {
    start_bfd();
    long long job = submit(write_sweep(name, 1, 3000, retries));
    wait_for("step 150", "SELECT COALESCE(MAX(step), 0) FROM metrics WHERE trial = ?1", 1, 150, 60);
    long long pid = db_int("SELECT pid FROM bfd_runs WHERE trial = ?1", 1);
    cr_assert_gt(pid, 0);
    cr_assert_eq(kill((pid_t)pid, sig), 0);
    return job;
}

TestSuite(daemon, .init = setup, .fini = teardown, .timeout = 120);

Test(daemon, sweep_completes_with_metrics_stored_once) {
    start_bfd();
    long long job = submit(write_sweep("three", 3, 40, 0));
    cr_assert_eq(job, 1);
    cr_assert_eq(wait_job(job), 0, "wait: a trial did not complete");
    cr_assert_eq(db_int("SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'COMPLETED'", job),
                 3);
    for (long long t = 1; t <= 3; t++) {
        check_exactly_once(t);
        cr_assert_eq(db_int("SELECT MAX(seq) FROM metrics WHERE trial = ?1", t), 40 / 5,
                     "trial %lld: one line per 5 steps (the final evaluation shares the last)", t);
    }
    /* the CLI reads the same: 3 trials listed, tail prints every seq once */
    char out[65536];
    cr_assert_eq(ctl(out, sizeof out, "show 1"), 0);
    cr_assert(strstr(out, "3 COMPLETED"), "%s", out);
    cr_assert_eq(ctl(out, sizeof out, "tail t2"), 0);
    int n = 0;
    for (char *p = out; (p = strstr(p, "t2 seq ")); p++) n++;
    cr_assert_eq(n, 8, "tail t2 printed %d points:\n%s", n, out);
    /* a job's tail: one compact line per point of every trial, in step order per trial */
    cr_assert_eq(ctl(out, sizeof out, "tail 1"), 0);
    int lines = 0, with_loss = 0;
    for (char *p = out; (p = strstr(p, " step ")); p++) lines++;
    for (char *p = out; (p = strstr(p, "| loss ")); p++) with_loss++;
    cr_assert_eq(lines, 3 * 8, "tail 1 printed %d lines:\n%s", lines, out);
    cr_assert_eq(with_loss, 3 * 8, "every point of this sweep carries train/loss:\n%s", out);
    cr_assert(strstr(out, "val/acc "), "the evaluation points show val/acc:\n%s", out);
    cr_assert(!strstr(out, " seq "), "the compact tail shows no sequence numbers:\n%s", out);
    cr_assert_eq(ctl(out, sizeof out, "tail 1 --all"), 0);
    n = 0;
    for (char *p = out; (p = strstr(p, " seq ")); p++) n++;
    cr_assert_eq(n, 3 * 8, "tail 1 --all printed %d points:\n%s", n, out);
}

Test(daemon, cancel_of_a_running_trial) {
    start_bfd();
    long long job = submit(write_sweep("long", 1, 1000000, 0));
    wait_for("points of the running trial", "SELECT COUNT(*) FROM metrics WHERE trial = ?1", 1, 10,
             30);
    long long pid = db_int("SELECT pid FROM bfd_runs WHERE trial = ?1", 1);
    cr_assert_gt(pid, 0);
    cr_assert_eq(ctl(NULL, 0, "cancel t1"), 0);
    cr_assert_eq(wait_job(job), 1, "wait must fail for a cancelled trial");
    sqlite3 *db = db_open();
    sqlite3_stmt *st;
    sqlite3_prepare_v2(db, "SELECT state FROM trials WHERE id = 1", -1, &st, NULL);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "CANCELLED");
    sqlite3_finalize(st);
    sqlite3_close(db);
    double t0 = it_now_s();
    while (kill((pid_t)pid, 0) == 0) {
        cr_assert(it_now_s() - t0 < 10, "worker %lld still alive after cancel", pid);
        it_sleep_s(0.1);
    }
    char out[4096];
    cr_assert_eq(ctl(out, sizeof out, "daemon status"), 0, "bfd stopped serving");
    cr_assert(strstr(out, "slots 2 free of 2"), "%s", out);
}

Test(daemon, killed_worker_is_retried_from_its_checkpoint) {
    long long job = signal_worker_at_step_150("retry", 2, SIGKILL);
    cr_assert_eq(wait_job(job), 0, "the retried trial must complete");
    cr_assert_eq(db_int("SELECT attempts FROM trials WHERE id = ?1", 1), 2);
    const char *p = tmpdir_path(g_home, "logs/1.log");
    int resumed = it_count_lines_with(p, "resume: continuing from step") > 0;
    cr_assert(resumed, "attempt 2 did not resume from the checkpoint (see %s)", p);
    check_exactly_once(1);
    /* the last point is the last step */
    cr_assert_eq(db_int("SELECT MAX(step) FROM metrics WHERE trial = ?1", 1), 3000);
}

/* SIGTERM from outside (what a node drain or a Slurm preemption sends): the
 * worker checkpoints and exits 75, the trial goes RUNNING -> PENDING without
 * using a retry (retries: 0), resumes and completes on attempt 2. */
Test(daemon, preempted_worker_resumes_without_using_a_retry) {
    long long job = signal_worker_at_step_150("preempt", 0, SIGTERM);
    cr_assert_eq(wait_job(job), 0, "the preempted trial must complete with retries: 0");
    cr_assert_eq(db_int("SELECT attempts FROM trials WHERE id = ?1", 1), 2);
    cr_assert_eq(db_int("SELECT preemptions FROM trials WHERE id = ?1", 1), 1);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM events WHERE trial = ?1 AND kind = 'preempt'"
                        " AND message LIKE 'RUNNING -> PENDING: preempted (exit status 75)%'",
                        1),
                 1, "one RUNNING -> PENDING event");
    cr_assert_eq(
        db_int("SELECT COUNT(*) FROM events WHERE trial = ?1 AND message LIKE '%FAILED%'", 1), 0,
        "a preemption is not a failure");
    cr_assert_eq(db_int("SELECT COUNT(*) FROM attempts WHERE trial = ?1 AND n = 1"
                        " AND outcome = 'PREEMPTED'",
                        1),
                 1);
    const char *p = tmpdir_path(g_home, "logs/1.log");
    int checkpointed = it_count_lines_with(p, "preempted: checkpoint written at step") > 0;
    int resumed = it_count_lines_with(p, "resume: continuing from step") > 0;
    cr_assert(checkpointed, "attempt 1 did not checkpoint on SIGTERM (see %s)", p);
    cr_assert(resumed, "attempt 2 did not resume from the checkpoint (see %s)", p);
    check_exactly_once(1);
    cr_assert_eq(db_int("SELECT MAX(step) FROM metrics WHERE trial = ?1", 1), 3000);
}

Test(daemon, bfd_killed_and_restarted_loses_and_duplicates_nothing) {
    start_bfd();
    long long job = submit(write_sweep("restart", 2, 5000, 1));
    wait_for("points of both trials", "SELECT COUNT(DISTINCT trial) FROM metrics WHERE ?1 > 0", 1,
             2, 60);
    wait_for("step 500", "SELECT COALESCE(MAX(step), 0) FROM metrics WHERE trial = ?1", 1, 500, 60);
    stop_bfd(SIGKILL);
    it_sleep_s(1.0); /* workers keep training and queue their points */
    start_bfd();
    cr_assert_eq(wait_job(job), 0, "the sweep must finish after the restart");
    for (long long t = 1; t <= 2; t++) {
        check_exactly_once(t);
        cr_assert_eq(db_int("SELECT MAX(step) FROM metrics WHERE trial = ?1", t), 5000);
    }
    int reattached = it_count_lines_with(tmpdir_path(g_dir, "bfd.log"), "reattaching");
    cr_assert_eq(reattached, 2, "both running workers should be reattached");
}

/* ---------------------------------------------------------- bad messages */

static void *g_ctx;

static void *dealer(const char *name) {
    void *s = zmq_socket(g_ctx, ZMQ_DEALER);
    int to = 5000, zero = 0;
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &to, sizeof to);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    char ep[512];
    snprintf(ep, sizeof ep, "ipc://%s/%s", g_home, name);
    cr_assert_eq(zmq_connect(s, ep), 0);
    return s;
}

/* Sends the frames (NULL-terminated; a frame may be given with a length). */
static void send_frames(void *s, int n, const char *const *f, const size_t *len) {
    for (int i = 0; i < n; i++)
        cr_assert_geq(zmq_send(s, f[i], len ? len[i] : strlen(f[i]), i + 1 < n ? ZMQ_SNDMORE : 0),
                      0);
}

/* Receives a reply and returns its error code ("" when not an error). */
static const char *recv_code(void *s, int delim) {
    static char code[64];
    char fr[8][4096];
    int n = 0, more = 1;
    while (more && n < 8) {
        int k = zmq_recv(s, fr[n], sizeof fr[n] - 1, 0);
        cr_assert_geq(k, 0, "no reply: %s", zmq_strerror(zmq_errno()));
        fr[n][k < (int)sizeof fr[n] - 1 ? k : (int)sizeof fr[n] - 1] = '\0';
        n++;
        int m;
        size_t ml = sizeof m;
        zmq_getsockopt(s, ZMQ_RCVMORE, &m, &ml);
        more = m;
    }
    int o = delim ? 1 : 0;
    cr_assert_eq(n, 4 + o);
    if (delim) cr_assert_str_eq(fr[0], "");
    cr_assert_str_eq(fr[o], "bf");
    cr_assert_str_eq(fr[o + 1], "1");
    code[0] = '\0';
    if (strcmp(fr[o + 2], "error") == 0) {
        json_error_t je;
        json_t *b = json_loads(fr[o + 3], 0, &je);
        cr_assert(b, "error body not JSON: %s", fr[o + 3]);
        snprintf(code, sizeof code, "%s", json_string_value(json_object_get(b, "code")));
        cr_assert(json_is_string(json_object_get(b, "message")));
        json_decref(b);
    }
    return code;
}

Test(daemon, malformed_and_oversized_messages_get_errors) {
    start_bfd();
    g_ctx = zmq_ctx_new();
    const char *sock[2] = {"ctl.sock", "worker.sock"};
    for (int k = 0; k < 2; k++) {
        void *s = dealer(sock[k]);
        const char *three[] = {"bf", "1", "status"};
        send_frames(s, 3, three, NULL);
        cr_assert_str_eq(recv_code(s, 0), "bad_frames");
        const char *name[] = {"xx", "1", "status", "{}"};
        send_frames(s, 4, name, NULL);
        cr_assert_str_eq(recv_code(s, 0), "bad_frames");
        const char *ver[] = {"bf", "2", "status", "{}"};
        send_frames(s, 4, ver, NULL);
        cr_assert_str_eq(recv_code(s, 0), "bad_version");
        const char *type[] = {"bf", "1", "no_such_type", "{}"};
        send_frames(s, 4, type, NULL);
        cr_assert_str_eq(recv_code(s, 0), "unknown_type");
        const char *badtype[] = {"bf", "1", "Status!", "{}"};
        send_frames(s, 4, badtype, NULL);
        cr_assert_str_eq(recv_code(s, 0), "bad_frames");
        const char *json[] = {"bf", "1", k ? "hello" : "status", "{not json"};
        send_frames(s, 4, json, NULL);
        cr_assert_str_eq(recv_code(s, 0), "bad_json");
        const char *arr[] = {"bf", "1", k ? "hello" : "status", "[1, 2]"};
        send_frames(s, 4, arr, NULL);
        cr_assert_str_eq(recv_code(s, 0), "bad_json");
        /* 9 MiB body: over the 8 MiB cap, under the 16 MiB frame limit */
        size_t big = 9u << 20;
        char *body = malloc(big);
        cr_assert(body);
        memset(body, ' ', big);
        body[0] = '{';
        body[big - 1] = '}';
        const char *f[] = {"bf", "1", k ? "metrics" : "submit", body};
        size_t len[] = {2, 1, strlen(f[2]), big};
        send_frames(s, 4, f, len);
        cr_assert_str_eq(recv_code(s, 0), "too_large");
        free(body);
        zmq_close(s);
    }
    /* field checks */
    void *c = dealer("ctl.sock");
    const char *sub1[] = {"bf", "1", "submit", "{\"sweep\": 3, \"file\": \"x.yaml\"}"};
    send_frames(c, 4, sub1, NULL);
    cr_assert_str_eq(recv_code(c, 0), "bad_field");
    const char *sub2[] = {"bf", "1", "submit",
                          "{\"sweep\": \"name: x\\nbogus_key: 1\\n\", \"file\": \"x.yaml\"}"};
    send_frames(c, 4, sub2, NULL);
    cr_assert_str_eq(recv_code(c, 0), "invalid_sweep");
    const char *job[] = {"bf", "1", "job", "{\"job\": 999}"};
    send_frames(c, 4, job, NULL);
    cr_assert_str_eq(recv_code(c, 0), "not_found");
    const char *neg[] = {"bf", "1", "metrics", "{\"trial\": -1}"};
    send_frames(c, 4, neg, NULL);
    cr_assert_str_eq(recv_code(c, 0), "bad_field");
    const char *req[] = {"bf", "1", "status", "{\"req\": \"x\"}"};
    send_frames(c, 4, req, NULL);
    cr_assert_str_eq(recv_code(c, 0), "bad_field");
    /* a REQ-style empty delimiter is mirrored */
    const char *delim[] = {"", "bf", "1", "status", "{}"};
    size_t dl[] = {0, 2, 1, 6, 2};
    send_frames(c, 5, delim, dl);
    cr_assert_str_eq(recv_code(c, 1), "");
    zmq_close(c);
    void *w = dealer("worker.sock");
    const char *tok[] = {"bf", "1", "heartbeat",
                         "{\"trial\": 1, \"token\": \"0123456789abcdef0123456789abcdef\"}"};
    send_frames(w, 4, tok, NULL);
    cr_assert_str_eq(recv_code(w, 0), "bad_token");
    const char *shorttok[] = {"bf", "1", "metrics", "{\"trial\": 1, \"token\": \"abc\"}"};
    send_frames(w, 4, shorttok, NULL);
    cr_assert_str_eq(recv_code(w, 0), "bad_field");
    zmq_close(w);
    zmq_ctx_term(g_ctx);
    /* still serving, and still doing real work */
    char out[4096];
    cr_assert_eq(ctl(out, sizeof out, "daemon status"), 0);
    long long j = submit(write_sweep("after", 1, 10, 0));
    cr_assert_eq(wait_job(j), 0);
}

/* TCP only with CURVE: refused without the server key; with it, an allowed
 * client key is served and an unknown one is not. */
Test(daemon, tcp_requires_curve_and_an_allowed_key) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, BFD " --home %s --tcp 127.0.0.1:17321 --quiet 2>/dev/null", g_home);
    cr_assert_neq(system(cmd), 0, "bfd must refuse TCP without CURVE keys");
    snprintf(cmd, sizeof cmd,
             BFD " keygen --home %s >/dev/null && " BFD
                 " keygen --home %s --client alice >/dev/null"
                 " && " BFD " keygen --home %s/other --client mallory >/dev/null",
             g_home, g_home, g_dir);
    cr_assert_eq(system(cmd), 0);
    char *argv[] = {BFD, "--home", g_home, "--tcp", "127.0.0.1:17321", NULL};
    g_bfd = it_spawn(tmpdir_path(g_dir, "bfd.log"), argv, 0);
    const char *env = "BF_ENDPOINT=tcp://127.0.0.1:17321 BF_TIMEOUT=2";
    double t0 = it_now_s();
    for (;;) {
        snprintf(cmd, sizeof cmd,
                 "%s BF_CURVE_SERVER=%s/curve/server.pub BF_CURVE_KEY=%s/curve/alice.key " BFCTL
                 " daemon status >/dev/null 2>&1",
                 env, g_home, g_home);
        if (system(cmd) == 0) break;
        cr_assert(it_now_s() - t0 < 10, "an allowed CURVE client was not served");
    }
    snprintf(cmd, sizeof cmd,
             "%s BF_CURVE_SERVER=%s/curve/server.pub BF_CURVE_KEY=%s/other/curve/mallory.key " BFCTL
             " daemon status >/dev/null 2>&1",
             env, g_home, g_dir);
    cr_assert_neq(system(cmd), 0, "a client key not in curve/clients/ must be refused");
}
