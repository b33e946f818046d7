/* test_it_prune — removing jobs through a real bfd: `bfctl rm` refuses a
 * job with a running trial and removes it with --cancel; `bfctl gc
 * --dry-run` lists what it would remove and removes nothing; `bfctl gc`
 * removes the rows (trials, points, attempts, events) and the files (trial
 * folders, logs, TensorBoard folder); `bfctl show` of a job bigger than one page of the `job`
 * reply pages through it whole, and so it does when each page ends after
 * one trial (a page's work budget, BF_JOB_PAGE_MS=0); a trial log that is a FIFO gets an
 * error instead of blocking bfd's loop in open(); and while a 20,000-trial
 * job is being cancelled (a chunk per round) bfd answers `daemon status`. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "it_bfd.h"

static char g_dir[256], g_home[320];
static pid_t g_bfd = -1;

static void setup(void) {
    it_worker_env();
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-itp-XXXXXX");
    it_copy_glosses(g_dir);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"),
                  "slots: 2\nheartbeat_timeout: 5\nheartbeat_interval: 0.2\nkill_grace: 2\n", 0644);
    g_bfd = it_bfd_start(g_dir, g_home);
}

static void teardown(void) {
    it_stop(&g_bfd, SIGKILL);
    it_kill_workers(g_home);
    if (tmpdir_remove(g_dir)) { /* nothing left to clean is fine */
    }
}

TestSuite(prune, .init = setup, .fini = teardown, .timeout = 120);

static int ctl(char *out, size_t outlen, const char *args) {
    return it_bfctl(g_dir, out, outlen, args);
}
static long long db_int(const char *sql, long long arg) { return it_db_int(g_home, sql, arg); }

/* 1 when path exists */
static int exists(const char *fmt, long long id) {
    char p[512], rel[64];
    snprintf(rel, sizeof rel, fmt, id);
    snprintf(p, sizeof p, "%s/%s", g_home, rel);
    struct stat sb;
    return lstat(p, &sb) == 0;
}

/* Waits until no job row of id is left (bfd removes a chunk per round). */
static void wait_removed(long long job) {
    double t0 = it_now_s();
    while (db_int("SELECT COUNT(*) FROM jobs WHERE id = ?1", job) != 0) {
        cr_assert(it_now_s() - t0 < 30, "job %lld still in the store (see %s/bfd.log)", job, g_dir);
        it_sleep_s(0.1);
    }
}

Test(prune, rm_refuses_a_running_job_and_gc_dry_run_then_removes) {
    long long run = it_submit(g_dir, it_write_sweep(g_dir, "long", 1, 3000, ""));
    long long done = it_submit(g_dir, it_write_sweep(g_dir, "short", 2, 10, ""));
    it_db_wait(g_dir, g_home, "the long trial running",
               "SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'RUNNING'", run, 1, 30);
    char args[64], out[8192];
    snprintf(args, sizeof args, "wait %lld", done);
    cr_assert_eq(ctl(NULL, 0, args), 0);
    long long t1 = db_int("SELECT MIN(id) FROM trials WHERE job = ?1", done);
    cr_assert(exists("trials/%lld", t1) && exists("logs/%lld.log", t1));
    cr_assert(exists("tensorboard/short-%lld", done), "the job's TensorBoard folder");
    cr_assert_gt(db_int("SELECT COUNT(*) FROM metrics WHERE trial = ?1", t1), 0);

    snprintf(args, sizeof args, "rm %lld", run);
    cr_assert_neq(ctl(NULL, 0, args), 0, "rm of a job with a running trial is refused");
    cr_assert_eq(db_int("SELECT COUNT(*) FROM trials WHERE job = ?1", run), 1);

    cr_assert_eq(ctl(out, sizeof out, "gc --older-than 0s --dry-run"), 0);
    cr_assert(strstr(out, "would remove 1 job") && strstr(out, "short"), "%s", out);
    cr_assert_null(strstr(out, "long"), "a running job is never a candidate: %s", out);
    cr_assert_eq(ctl(out, sizeof out, "gc --older-than 0s --dry-run --json"), 0);
    json_error_t je;
    json_t *arr = json_loads(out, 0, &je);
    cr_assert(json_is_array(arr) && json_array_size(arr) == 1, "%s", out);
    cr_assert_eq(json_integer_value(json_object_get(json_array_get(arr, 0), "id")), done);
    cr_assert_gt(json_integer_value(json_object_get(json_array_get(arr, 0), "points")), 0);
    json_decref(arr);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM trials WHERE job = ?1", done), 2,
                 "a dry run removes nothing");
    cr_assert(exists("trials/%lld", t1));

    cr_assert_eq(ctl(out, sizeof out, "gc --older-than 0s --state completed"), 0);
    wait_removed(done);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM trials WHERE job = ?1", done), 0);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM metrics WHERE trial = ?1", t1), 0);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM attempts WHERE trial = ?1", t1), 0);
    cr_assert_eq(db_int("SELECT COUNT(*) FROM events WHERE job = ?1", done), 0);
    cr_assert_not(exists("trials/%lld", t1), "the trial folder is removed");
    cr_assert_not(exists("logs/%lld.log", t1), "the log is removed");
    cr_assert_not(exists("tensorboard/short-%lld", done), "the TensorBoard folder is removed");
    cr_assert_eq(db_int("SELECT COUNT(*) FROM trials WHERE job = ?1", run), 1, "the other stays");

    snprintf(args, sizeof args, "rm --cancel %lld", run);
    cr_assert_eq(ctl(NULL, 0, args), 0);
    wait_removed(run);
    cr_assert_eq(ctl(out, sizeof out, "ls --json"), 0);
    cr_assert_str_eq(out, "[]\n", "%s", out);
}

/* A sweep file of n trials (one per seed) in the test folder; its path
 * into p. */
static void write_big(char *p, size_t plen, int n) {
    snprintf(p, plen, "%s/big.yaml", g_dir);
    FILE *f = fopen(p, "w");
    cr_assert(f);
    fprintf(f,
            "name: big\npipeline: budgetformer\ndevice: cpu\n"
            "data: {train: %s/train.tsv, val: %s/val.tsv}\n"
            "model: {layers: 1, d_model: 32, heads: 4, seq_len: 16, vocab: 256}\n"
            "train: {steps: 10, batch: 8, log_every: 5}\n"
            "sweep:\n  parameters:\n    train.seed: {values: [",
            g_dir, g_dir);
    for (int i = 1; i <= n; i++) fprintf(f, "%s%d", i > 1 ? ", " : "", i);
    fprintf(f, "]}\nmetric: {name: train/loss, goal: min}\n");
    fclose(f);
}

Test(prune, show_pages_through_a_job_bigger_than_one_reply) {
    /* 2500 trials: five pages (500 each) of the `job` reply */
    char p[512];
    write_big(p, sizeof p, 2500);
    long long job = it_submit(g_dir, p);
    char args[64];
    snprintf(args, sizeof args, "cancel %lld", job);
    cr_assert_eq(ctl(NULL, 0, args), 0);
    static char out[8 << 20];
    snprintf(args, sizeof args, "show %lld --json", job);
    cr_assert_eq(ctl(out, sizeof out, args), 0);
    json_error_t je;
    json_t *r = json_loads(out, 0, &je);
    cr_assert(r, "%s", je.text);
    json_t *trials = json_object_get(r, "trials");
    cr_assert_eq(json_array_size(trials), 2500);
    for (size_t i = 0; i < 2500; i++)
        cr_assert_eq(json_integer_value(json_object_get(json_array_get(trials, i), "index")),
                     (json_int_t)i);
    cr_assert_null(json_object_get(r, "more"));
    json_decref(r);
}

/* The body of bfd's reply to a `job` request for job's first page, sent on
 * the control socket as bfctl would (a new JSON object). */
static json_t *job_page(long long job) {
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
    int to = 10000, zero = 0;
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &to, sizeof to);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    char ep[512], body[64];
    snprintf(ep, sizeof ep, "ipc://%s/ctl.sock", g_home);
    cr_assert_eq(zmq_connect(s, ep), 0);
    snprintf(body, sizeof body, "{\"job\": %lld}", job);
    const char *f[] = {"bf", "1", "job", body};
    for (int i = 0; i < 4; i++)
        cr_assert_geq(zmq_send(s, f[i], strlen(f[i]), i < 3 ? ZMQ_SNDMORE : 0), 0);
    static char fr[4][1 << 16];
    int n = 0, more = 1;
    while (more && n < 4) {
        int k = zmq_recv(s, fr[n], sizeof fr[n] - 1, 0);
        cr_assert_geq(k, 0, "no reply: %s", zmq_strerror(zmq_errno()));
        fr[n][k < (int)sizeof fr[n] - 1 ? k : (int)sizeof fr[n] - 1] = '\0';
        n++;
        size_t ml = sizeof more;
        zmq_getsockopt(s, ZMQ_RCVMORE, &more, &ml);
    }
    cr_assert_eq(n, 4);
    cr_assert_str_eq(fr[2], "job", "%s", fr[3]);
    zmq_close(s);
    zmq_ctx_term(ctx);
    json_error_t je;
    json_t *r = json_loads(fr[3], 0, &je);
    cr_assert(r, "%s", je.text);
    return r;
}

/* A `job` page ends once its work passed a budget, not only at 500 trials:
 * with the budget at 0 each page has one trial (and says more follow), and
 * `bfctl show` still lists every trial once, in order, and `bfctl results`
 * every trial. */
Test(prune, show_follows_pages_cut_by_the_work_budget) {
    it_stop(&g_bfd, SIGTERM);
    setenv("BF_JOB_PAGE_MS", "0", 1);
    g_bfd = it_bfd_start(g_dir, g_home);
    unsetenv("BF_JOB_PAGE_MS");
    char p[512];
    write_big(p, sizeof p, 40);
    long long job = it_submit(g_dir, p);
    char args[64];
    snprintf(args, sizeof args, "cancel %lld", job);
    cr_assert_eq(ctl(NULL, 0, args), 0);
    json_t *r = job_page(job);
    cr_assert_eq(json_array_size(json_object_get(r, "trials")), 1);
    cr_assert(json_is_true(json_object_get(r, "more")));
    cr_assert_eq(json_integer_value(json_object_get(r, "last")), 0);
    json_decref(r);
    static char out[1 << 20];
    snprintf(args, sizeof args, "show %lld --json", job);
    cr_assert_eq(ctl(out, sizeof out, args), 0);
    json_error_t je;
    r = json_loads(out, 0, &je);
    cr_assert(r, "%s", je.text);
    json_t *trials = json_object_get(r, "trials");
    cr_assert_eq(json_array_size(trials), 40);
    for (size_t i = 0; i < 40; i++)
        cr_assert_eq(json_integer_value(json_object_get(json_array_get(trials, i), "index")),
                     (json_int_t)i);
    json_decref(r);
    /* and so does `results`, which read only the first page */
    snprintf(args, sizeof args, "results %lld --json", job);
    cr_assert_eq(ctl(out, sizeof out, args), 0);
    r = json_loads(out, 0, &je);
    cr_assert(r, "%s", je.text);
    cr_assert_eq(json_array_size(json_object_get(r, "trials")), 40, "%s", out);
    json_decref(r);
}

Test(prune, a_fifo_for_a_log_gets_an_error_not_a_stuck_loop) {
    long long job = it_submit(g_dir, it_write_sweep(g_dir, "one", 1, 10, ""));
    char args[64], out[4096];
    snprintf(args, sizeof args, "wait %lld", job);
    cr_assert_eq(ctl(NULL, 0, args), 0);
    long long t = db_int("SELECT MIN(id) FROM trials WHERE job = ?1", job);
    char p[512];
    snprintf(p, sizeof p, "%s/logs/%lld.log", g_home, t);
    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(mkfifo(p, 0600), 0);
    snprintf(args, sizeof args, "logs t%lld", t);
    cr_assert_neq(ctl(NULL, 0, args), 0, "a FIFO is no log");
    size_t len;
    char *err = it_slurp(tmpdir_path(g_dir, "bfctl.err"), &len);
    cr_assert(err && strstr(err, "FIFO"), "%s", err ? err : "no bfctl.err");
    free(err);
    cr_assert_eq(ctl(out, sizeof out, "daemon status"), 0, "bfd's loop still answers");
}

Test(prune, status_is_answered_while_a_big_cancel_goes_on) {
    char p[512], args[64], out[8192];
    write_big(p, sizeof p, 20000);
    long long job = it_submit(g_dir, p);
    snprintf(args, sizeof args, "cancel %lld", job);
    cr_assert_eq(ctl(NULL, 0, args), 0);
    /* the cancel is answered at once and so is the next request, while
     * pending trials of the job are still being moved (a chunk per round) */
    cr_assert_eq(ctl(out, sizeof out, "daemon status"), 0);
    const char *at = strstr(out, "trials pending ");
    long long pending = -1;
    cr_assert(at && sscanf(at, "trials pending %lld", &pending) == 1, "%s", out);
    cr_assert_gt(pending, 0, "status answered only after the whole cancel: %s", out);
    /* wait returns when every trial is final: all of them cancelled */
    snprintf(args, sizeof args, "wait %lld", job);
    ctl(NULL, 0, args); /* exits nonzero: the job did not complete */
    cr_assert_eq(db_int("SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'CANCELLED'", job),
                 20000);
    cr_assert_eq(ctl(out, sizeof out, "daemon status"), 0);
    cr_assert(strstr(out, "trials pending 0,"), "%s", out);
}
