/* test_it_dashboard — bfd's dashboard in a real browser. A real bfd with
 * `http: 127.0.0.1:PORT` runs a real 4-trial sweep on 2 slots and a
 * 2-trial S2S sweep whose trials share a teacher stage on the third;
 * tests/test_it_dashboard.py drives Debian's chromium (headless) through
 * chromium-driver and python3-selenium against it: the token (401 without
 * it), a cross-origin POST refused, the trial table against `bfctl show`,
 * a curve growing without a reload, the pandas example of docs/http.md,
 * grid values added and pending trials dropped from the page, the S2S
 * stage graph, a trial's checkpoint links, a stream resumed by
 * Last-Event-ID without a gap, cancel from the page; screenshots of each
 * page into Testing/dashboard/.
 * Also: bfd refuses a non-loopback address without http_insecure, and a
 * taken address it was told to use. Skipped (77) without the browser. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "it_bfd.h"
#include "tests/it_idx.h"

#define PYTHON "/usr/bin/python3"

static char g_dir[256], g_home[320];
static pid_t g_bfd = -1;

static void setup(void) {
    it_worker_env();
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-dash-XXXXXX");
    it_copy_glosses(g_dir);
}

static void teardown(void) {
    it_stop(&g_bfd, SIGKILL);
    it_kill_workers(g_home);
    if (tmpdir_remove(g_dir)) fprintf(stderr, "could not remove %s\n", g_dir);
}

TestSuite(dashboard, .init = setup, .fini = teardown, .timeout = 300);

/* A free loopback port (bound, then closed: a tiny race with other programs);
 * with keep, the socket stays bound and is returned in *fd. */
static int free_port(int *fd) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(s >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(s, 1), 0);
    socklen_t len = sizeof sa;
    cr_assert_eq(getsockname(s, (struct sockaddr *)&sa, &len), 0);
    if (fd)
        *fd = s;
    else
        close(s);
    return ntohs(sa.sin_port);
}

/* dir/s2s.yaml: two trials of a tiny S2S config sharing a teacher stage
 * long enough to run through the whole browser check (the second trial
 * waits on the first's). */
static const char *write_s2s(const char *dir) {
    static char p[512];
    char text[2048];
    snprintf(p, sizeof p, "%s/s2s.yaml", dir);
    snprintf(text, sizeof text,
             "name: stages\npipeline: s2s\ndevice: cpu\n"
             "data: {train_images: %s/train-images, train_labels: %s/train-labels,\n"
             "       test_images: %s/test-images, test_labels: %s/test-labels, val_fraction: 0.1}\n"
             "model: {patch: 4, layers: 3, d_model: 16, heads: 2}\n"
             "train: {steps: 100000, batch: 16, eval_every: 0, log_every: 10}\n"
             "avit: {steps: 20, retention: 0.7}\n"
             "distill: {replace_layers: 'auto:1', stage1_steps: 10, stage2_steps: 10}\n"
             "s2s: {speed_widths: '16', speed_batches: '1', speed_warmup: 0, speed_reps: 1}\n"
             "sweep:\n  parameters:\n    distill.mixer: {values: [bimamba, bilstm]}\n"
             "metric: {name: eval/student/test/acc, goal: max}\n",
             dir, dir, dir, dir);
    it_write_text(p, text, 0644);
    return p;
}

Test(dashboard, browser_sees_and_steers_a_running_sweep) {
    int port = free_port(NULL);
    char y[256];
    snprintf(y, sizeof y, "slots: 3\nthreads_per_slot: 1\nhttp: 127.0.0.1:%d\n", port);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), y, 0644);
    g_bfd = it_bfd_start(g_dir, g_home);
    /* first an S2S sweep whose second trial waits on the first's teacher
     * (one slot), for the stage graph */
    it_idx_write(g_dir, "train", 240, 1, 0);
    it_idx_write(g_dir, "test", 60, 2, 0);
    long long s2s = it_submit(g_dir, write_s2s(g_dir));
    cr_assert(s2s >= 1);
    /* 4 trials on 2 slots: two run while the browser looks, two wait */
    const char *sweep = it_write_sweep(g_dir, "dash", 4, 20000, "");
    long long job = it_submit(g_dir, sweep);
    cr_assert(job >= 1);
    /* bfctl dashboard prints the URL with the token */
    char out[512];
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "dashboard"), 0);
    char want[64];
    snprintf(want, sizeof want, "http://127.0.0.1:%d/?token=", port);
    cr_assert(strncmp(out, want, strlen(want)) == 0, "bfctl dashboard printed %s", out);
    char url[128], cmd[2048], logp[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    snprintf(logp, sizeof logp, "%s/py.log", g_dir);
    snprintf(cmd, sizeof cmd,
             "BF_HOME=%s %s %s/tests/test_it_dashboard.py %s %s %s %lld %s/Testing/dashboard "
             "%s/docs/http.md %lld > %s 2>&1",
             g_home, PYTHON, BF_SOURCE_DIR, url, g_home, IT_BFCTL, job, BF_BIN_DIR, BF_SOURCE_DIR,
             s2s, logp);
    int st = system(cmd);
    it_show_tail(logp, 4000);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok) it_show_tail(tmpdir_path(g_dir, "bfd.log"), 4000);
    cr_assert(ok, "the dashboard check failed (above)");
}

/* bfctl edit --max-parallel 1 on a grid sweep of 4 trials with 2 slots:
 * every attempt that starts after the edit starts alone (read back from
 * the store's attempt times once the job is done); the edit is an event
 * and outlives a restart. Without the cap two run at once. */
Test(dashboard, edit_max_parallel_caps_a_running_sweep_and_is_kept) {
    int port = free_port(NULL);
    char y[256];
    snprintf(y, sizeof y, "slots: 2\nthreads_per_slot: 1\nhttp: 127.0.0.1:%d\n", port);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), y, 0644);
    g_bfd = it_bfd_start(g_dir, g_home);
    const char *sweep = it_write_sweep(g_dir, "edit", 4, 300, "");
    long long job = it_submit(g_dir, sweep);
    char args[64], out[256];
    snprintf(args, sizeof args, "edit %lld --max-parallel 1", job);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, args), 0);
    cr_assert(strstr(out, "max_parallel 1 (was 0)"), "%s", out);
    snprintf(args, sizeof args, "wait %lld", job);
    cr_assert_eq(it_bfctl(g_dir, NULL, 0, args), 0, "job %lld did not complete", job);
    long long started_after = it_db_int(
        g_home,
        "SELECT COUNT(*) FROM attempts a JOIN trials t ON t.id = a.trial WHERE t.job = ?1 AND"
        " a.started > (SELECT time FROM events WHERE job = ?1 AND kind = 'EDIT')",
        job);
    cr_assert(started_after >= 2, "only %lld attempts started after the edit", started_after);
    long long overlaps = it_db_int(
        g_home,
        "SELECT COUNT(*) FROM attempts x JOIN trials tx ON tx.id = x.trial, attempts y JOIN"
        " trials ty ON ty.id = y.trial WHERE tx.job = ?1 AND ty.job = ?1 AND x.id != y.id AND"
        " x.started > (SELECT time FROM events WHERE job = ?1 AND kind = 'EDIT') AND"
        " y.started <= x.started AND (y.ended IS NULL OR y.ended > x.started)",
        job);
    cr_assert_eq(overlaps, 0, "%lld attempts started beside another after max_parallel 1",
                 overlaps);
    it_stop(&g_bfd, SIGTERM);
    g_bfd = it_bfd_start(g_dir, g_home);
    cr_assert_eq(it_db_int(g_home, "SELECT parallel FROM jobs WHERE id = ?1", job), 1);
    cr_assert_eq(
        it_db_int(g_home, "SELECT COUNT(*) FROM events WHERE job = ?1 AND kind = 'EDIT'", job), 1);
    /* a bad value is refused before bfd is asked */
    snprintf(args, sizeof args, "edit %lld --max-parallel -3", job);
    cr_assert_eq(it_bfctl(g_dir, NULL, 0, args), 64); /* BF_EX_USAGE */
}

Test(dashboard, outside_loopback_needs_http_insecure_and_a_taken_port_stops_bfd) {
    char logp[512];
    snprintf(logp, sizeof logp, "%s/bfd.log", g_dir);
    char *argv[] = {IT_BFD, "--home", g_home, "--http", "0.0.0.0:18999", NULL};
    pid_t pid = it_spawn(logp, argv, 0);
    int st;
    cr_assert_eq(it_wait_pid(pid, 20, &st), 0, "bfd served 0.0.0.0 without TLS");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    char *log = it_slurp(logp, NULL);
    cr_assert(strstr(log, "refusing to serve the dashboard on 0.0.0.0:18999 without TLS") &&
                  strstr(log, "http_insecure: true"),
              "%s", log);
    free(log);
    int fd, port = free_port(&fd);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    argv[4] = addr;
    pid = it_spawn(logp, argv, 0);
    cr_assert_eq(it_wait_pid(pid, 20, &st), 0, "bfd kept running on a taken --http port");
    close(fd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    log = it_slurp(logp, NULL);
    cr_assert(strstr(log, "http: cannot listen on") && strstr(log, "Address already in use"), "%s",
              log);
    free(log);
}

/* Criterion's main, after the browser check: 77 (skipped) without it. */
int main(int argc, char *argv[]) {
    if (access("/usr/bin/chromium", X_OK) || access("/usr/bin/chromedriver", X_OK) ||
        system(PYTHON " -c 'import selenium, pandas' 2>/dev/null") != 0) {
        printf("test_it_dashboard: SKIPPED: needs chromium, chromium-driver, python3-selenium "
               "and python3-pandas (scripts/setup.sh)\n");
        return 77;
    }
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}
