/* test_it_dashboard — bfd's dashboard in a real browser. A real bfd with
 * `http: 127.0.0.1:PORT` runs a real 4-trial sweep on 2 slots and a
 * 2-trial S2S sweep whose trials share a teacher stage on the third;
 * tests/test_it_dashboard.py drives Debian's chromium (headless) through
 * chromium-driver and python3-selenium against it: the token (401 without
 * it), a cross-origin POST refused, the trial table against `bfctl show`,
 * a curve growing without a reload, the pandas example of docs/http.md,
 * grid values added and pending trials dropped from the page, the S2S
 * stage graph, a trial's checkpoint links, a stream resumed by
 * Last-Event-ID without a gap, cancel from the page, the Pareto page of a
 * finished three-objective sweep against bfctl results, its seed groups
 * against `bfctl results --group-by-seed --json` and the compare view of it
 * against a budget sweep beside it against `bfctl results A B --json`;
 * screenshots of each page into Testing/dashboard/.
 * Also: HTTPS with a self-signed certificate (curl; plain HTTP refused)
 * and what a bad certificate or key says; bfd refuses a non-loopback
 * address without TLS or http_insecure, and a taken address it was told
 * to use. Skipped (77) without the browser. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

/* dir/pareto.yaml: six short trials (three budget ranges, two seeds) of
 * three objectives, for the Pareto page. */
static const char *write_pareto(const char *dir) {
    static char p[512];
    char text[2048];
    snprintf(p, sizeof p, "%s/pareto.yaml", dir);
    snprintf(text, sizeof text,
             "name: front\npipeline: budgetformer\ndevice: cpu\n"
             "data: {train: %s/train.tsv, val: %s/val.tsv}\n"
             "model: {layers: 1, d_model: 32, heads: 4, seq_len: 16, vocab: 256}\n"
             "train: {steps: 40, batch: 8, log_every: 5, eval_every: 100000, "
             "checkpoint_every: 100}\n"
             "sweep:\n  parameters:\n"
             "    budget.range: {values: [[0.1, 0.3], [0.3, 0.6], [0.6, 1.0]]}\n"
             "    train.seed: {values: [1, 2]}\n"
             "metric:\n  - {name: train/loss, goal: min}\n"
             "  - {name: train/heads_used, goal: min}\n  - {name: train/acc, goal: max}\n",
             dir, dir);
    it_write_text(p, text, 0644);
    return p;
}

/* dir/other.yaml: four short trials of the Pareto sweep's objectives, two
 * of its budget ranges by two batch sizes: the job compared with it
 * (matched by budget.range). */
static const char *write_other(const char *dir) {
    static char p[512];
    char text[2048];
    snprintf(p, sizeof p, "%s/other.yaml", dir);
    snprintf(text, sizeof text,
             "name: batches\npipeline: budgetformer\ndevice: cpu\n"
             "data: {train: %s/train.tsv, val: %s/val.tsv}\n"
             "model: {layers: 1, d_model: 32, heads: 4, seq_len: 16, vocab: 256}\n"
             "train: {steps: 40, batch: 8, log_every: 5, eval_every: 100000}\n"
             "sweep:\n  parameters:\n"
             "    budget.range: {values: [[0.1, 0.3], [0.3, 0.6]]}\n"
             "    train.batch: {values: [4, 8]}\n"
             "metric:\n  - {name: train/loss, goal: min}\n"
             "  - {name: train/heads_used, goal: min}\n  - {name: train/acc, goal: max}\n",
             dir, dir);
    it_write_text(p, text, 0644);
    return p;
}

Test(dashboard, browser_sees_and_steers_a_running_sweep) {
    int port = free_port(NULL);
    char y[256];
    snprintf(y, sizeof y, "slots: 3\nthreads_per_slot: 1\nhttp: 127.0.0.1:%d\n", port);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), y, 0644);
    g_bfd = it_bfd_start(g_dir, g_home);
    /* a finished sweep of three objectives, for the Pareto page */
    long long pareto = it_submit(g_dir, write_pareto(g_dir));
    /* and one to compare it with (the compare view) */
    long long other = it_submit(g_dir, write_other(g_dir));
    char args[64];
    snprintf(args, sizeof args, "wait %lld", pareto);
    cr_assert_eq(it_bfctl(g_dir, NULL, 0, args), 0, "the Pareto sweep did not complete");
    snprintf(args, sizeof args, "wait %lld", other);
    cr_assert_eq(it_bfctl(g_dir, NULL, 0, args), 0, "the sweep beside it did not complete");
    /* then an S2S sweep whose second trial waits on the first's teacher
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
             "%s/docs/http.md %lld %lld %lld > %s 2>&1",
             g_home, PYTHON, BF_SOURCE_DIR, url, g_home, IT_BFCTL, job, BF_BIN_DIR, BF_SOURCE_DIR,
             s2s, pareto, other, logp);
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

/* Runs cmd in a shell with its stdout into out[len] (stderr into out too
 * when cmd says 2>&1); returns its exit status (-1 when it did not exit). */
static int sh_out(const char *cmd, char *out, size_t len) {
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen %s", cmd);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* bfd.yaml with http on addr and the TLS keys (a line each, or none when
 * NULL); then bfd started on it, which must fail: its log (a new string). */
static char *bfd_refuses(const char *addr, const char *cert, const char *key) {
    char y[1024], logp[512];
    snprintf(y, sizeof y, "slots: 1\nhttp: %s\n%s%s%s%s%s%s", addr, cert ? "http_tls_cert: " : "",
             cert ? cert : "", cert ? "\n" : "", key ? "http_tls_key: " : "", key ? key : "",
             key ? "\n" : "");
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), y, 0644);
    snprintf(logp, sizeof logp, "%s/refused.log", g_dir);
    char *argv[] = {IT_BFD, "--home", g_home, NULL};
    pid_t pid = it_spawn(logp, argv, 0);
    int st;
    cr_assert_eq(it_wait_pid(pid, 20, &st), 0, "bfd kept running with %s", y);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0, "bfd exited 0 with %s", y);
    return it_slurp(logp, NULL);
}

/* HTTPS with a self-signed certificate made here (openssl): bfctl
 * dashboard prints an https URL, the API answers over TLS with the token
 * (401 without), the cookie is Secure, plain HTTP on the port gets no HTTP
 * answer, an address other than loopback is not refused; a missing certificate, a key alone, a file
 * that is not PEM and a key readable by others each stop bfd with a message naming the file. */
Test(dashboard, https_with_a_certificate_and_plain_http_refused) {
    char cmd[2048], out[8192], cert[512], key[512], junk[512];
    snprintf(cert, sizeof cert, "%s/cert.pem", g_dir);
    snprintf(key, sizeof key, "%s/key.pem", g_dir);
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
             "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout %s -out %s 2>&1",
             key, cert);
    cr_assert_eq(sh_out(cmd, out, sizeof out), 0, "openssl: %s", out);
    int port = free_port(NULL);
    char y[1500];
    snprintf(y, sizeof y, "slots: 1\nhttp: 127.0.0.1:%d\nhttp_tls_cert: %s\nhttp_tls_key: %s\n",
             port, cert, key);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), y, 0644);
    g_bfd = it_bfd_start(g_dir, g_home);
    cr_assert_eq(it_bfctl(g_dir, out, sizeof out, "dashboard"), 0);
    char want[64], token[64];
    int n = snprintf(want, sizeof want, "https://127.0.0.1:%d/?token=", port);
    cr_assert(strncmp(out, want, (size_t)n) == 0, "bfctl dashboard printed %s", out);
    snprintf(token, sizeof token, "%.48s", out + n);
    /* the API over TLS, the certificate checked against the one made here */
    snprintf(cmd, sizeof cmd,
             "curl -sS --cacert %s -H 'Authorization: Bearer %s' https://127.0.0.1:%d/api/v1/jobs "
             "2>&1",
             cert, token, port);
    cr_assert_eq(sh_out(cmd, out, sizeof out), 0, "%s", out);
    cr_assert_str_eq(out, "[]");
    snprintf(cmd, sizeof cmd,
             "curl -sS --cacert %s -o /dev/null -w '%%{http_code}' "
             "https://127.0.0.1:%d/api/v1/jobs 2>&1",
             cert, port);
    cr_assert_eq(sh_out(cmd, out, sizeof out), 0, "%s", out);
    cr_assert_str_eq(out, "401");
    snprintf(cmd, sizeof cmd,
             "curl -sS --cacert %s -D - -o /dev/null 'https://127.0.0.1:%d/?token=%s' 2>&1", cert,
             port, token);
    cr_assert_eq(sh_out(cmd, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, "HttpOnly; SameSite=Strict; Secure"), "%s", out);
    /* plain HTTP: the TLS handshake fails, no HTTP status comes back */
    snprintf(cmd, sizeof cmd,
             "curl -sS -o /dev/null -w '%%{http_code}' -H 'Authorization: Bearer %s' "
             "http://127.0.0.1:%d/api/v1/jobs 2>&1",
             token, port);
    int rc = sh_out(cmd, out, sizeof out);
    cr_assert(rc != 0 && strstr(out, "000"), "plain http got rc %d: %s", rc, out);
    it_stop(&g_bfd, SIGTERM);
    /* with TLS an address other than loopback passes the refusal: bfd goes
     * on to bind 192.0.2.1 (TEST-NET-1, on no interface here), which fails */
    char addr[64];
    snprintf(addr, sizeof addr, "192.0.2.1:%d", port);
    char *log = bfd_refuses(addr, cert, key);
    cr_assert(strstr(log, "http: cannot listen on 192.0.2.1") && !strstr(log, "refusing"), "%s",
              log);
    free(log);
    /* what stops bfd, each said with the file */
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    snprintf(junk, sizeof junk, "%s/missing.pem", g_dir);
    log = bfd_refuses(addr, junk, key);
    cr_assert(strstr(log, "http_tls_cert") && strstr(log, junk) && strstr(log, "not found"), "%s",
              log);
    free(log);
    log = bfd_refuses(addr, NULL, key);
    cr_assert(strstr(log, "give both http_tls_cert and http_tls_key") &&
                  strstr(log, "only http_tls_key is set"),
              "%s", log);
    free(log);
    snprintf(junk, sizeof junk, "%s/bfd.yaml", g_home);
    log = bfd_refuses(addr, junk, key);
    cr_assert(strstr(log, junk) && strstr(log, "is not PEM text") &&
                  strstr(log, "-----BEGIN ...CERTIFICATE-----"),
              "%s", log);
    free(log);
    cr_assert_eq(chmod(key, 0644), 0);
    log = bfd_refuses(addr, cert, key);
    cr_assert(strstr(log, "http_tls_key") && strstr(log, key) && strstr(log, "open to others"),
              "%s", log);
    free(log);
}

/* Criterion's main, after the browser check: 77 (skipped) without it. */
int main(int argc, char *argv[]) {
    if (access("/usr/bin/chromium", X_OK) || access("/usr/bin/chromedriver", X_OK) ||
        access("/usr/bin/openssl", X_OK) || access("/usr/bin/curl", X_OK) ||
        system(PYTHON " -c 'import selenium, pandas' 2>/dev/null") != 0) {
        printf("test_it_dashboard: SKIPPED: needs chromium, chromium-driver, python3-selenium, "
               "python3-pandas, openssl and curl (scripts/setup.sh)\n");
        return 77;
    }
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}
