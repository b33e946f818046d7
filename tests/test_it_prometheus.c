/* test_it_prometheus — bfd's /metrics as Prometheus reads it. A real bfd
 * with `prometheus: 127.0.0.1:PORT` runs a real 3-trial sweep on 2 slots;
 * tests/test_it_prometheus.py scrapes it with prometheus_client's text
 * parser while the trials run and checks the counts against `bfctl daemon
 * status --json`. Also: a taken port stops bfd at start with the reason,
 * and a bad address (or tensorboard value) in bfd.yaml is refused naming
 * the line. The Python package comes from build/pydeps (scripts/setup.sh). */
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

#define PYTHON "/usr/bin/python3"
#define PYDEPS BF_BIN_DIR "/pydeps"

static char g_dir[256], g_home[320];
static pid_t g_bfd = -1;

static void setup(void) {
    it_worker_env();
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-prom-XXXXXX");
    it_copy_glosses(g_dir);
    setenv("PYTHONPATH", PYDEPS, 1);
}

static void teardown(void) {
    it_stop(&g_bfd, SIGKILL);
    if (tmpdir_remove(g_dir)) fprintf(stderr, "could not remove %s\n", g_dir);
}

TestSuite(prometheus, .init = setup, .fini = teardown, .timeout = 300);

/* A loopback TCP socket bound to a free port (left open when keep; the
 * port in *port). */
static int bound_socket(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(fd, 1), 0);
    socklen_t len = sizeof sa;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

static void write_config(int port) {
    char y[256];
    snprintf(y, sizeof y,
             "slots: 2\nthreads_per_slot: 1\nheartbeat_timeout: 30\nprometheus: 127.0.0.1:%d\n",
             port);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"), y, 0644);
}

Test(prometheus, page_agrees_with_daemon_status_during_a_sweep) {
    cr_assert_eq(system(PYTHON " -c 'import prometheus_client' 2>/dev/null"), 0,
                 "%s cannot import prometheus_client from %s: run sh scripts/setup.sh", PYTHON,
                 PYDEPS);
    int port, fd = bound_socket(&port);
    close(fd); /* free again for bfd (a tiny race with other programs) */
    write_config(port);
    g_bfd = it_bfd_start(g_dir, g_home);
    const char *sweep = it_write_sweep(g_dir, "prom", 3, 3000, "");
    long long job = it_submit(g_dir, sweep);
    cr_assert(job >= 1);
    char url[128], cmd[1024], logp[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
    snprintf(logp, sizeof logp, "%s/py.log", g_dir);
    snprintf(cmd, sizeof cmd, "%s %s/tests/test_it_prometheus.py %s %s > %s 2>&1", PYTHON,
             BF_SOURCE_DIR, url, IT_BFCTL, logp);
    int st = system(cmd);
    it_show_tail(logp, 3000);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok) it_show_tail(tmpdir_path(g_dir, "bfd.log"), 4000);
    cr_assert(ok, "the Prometheus page disagrees with bfctl daemon status");
    char args[64];
    snprintf(args, sizeof args, "cancel %lld", job);
    it_bfctl(g_dir, NULL, 0, args);
}

Test(prometheus, taken_port_and_bad_address_stop_bfd_with_the_reason) {
    int port, fd = bound_socket(&port);
    write_config(port);
    char logp[512];
    snprintf(logp, sizeof logp, "%s/bfd.log", g_dir);
    char *argv[] = {IT_BFD, "--home", g_home, NULL};
    pid_t pid = it_spawn(logp, argv, 0);
    int st;
    cr_assert_eq(it_wait_pid(pid, 20, &st), 0, "bfd kept running on a taken port");
    close(fd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    char *log = it_slurp(logp, NULL);
    cr_assert(strstr(log, "prometheus: cannot listen on 127.0.0.1:") &&
                  strstr(log, "Address already in use"),
              "%s", log);
    free(log);

    it_write_text(tmpdir_path(g_home, "bfd.yaml"), "slots: 2\nprometheus: localhost:x\n", 0644);
    pid = it_spawn(logp, argv, 0);
    cr_assert_eq(it_wait_pid(pid, 20, &st), 0, "bfd kept running with a bad address");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    log = it_slurp(logp, NULL);
    cr_assert(strstr(log, "bfd.yaml:2:13: prometheus must be PORT or ADDRESS:PORT"), "%s", log);
    free(log);

    it_write_text(tmpdir_path(g_home, "bfd.yaml"), "tensorboard: maybe\n", 0644);
    pid = it_spawn(logp, argv, 0);
    cr_assert_eq(it_wait_pid(pid, 20, &st), 0, "bfd kept running with tensorboard: maybe");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    log = it_slurp(logp, NULL);
    cr_assert(strstr(log, "bfd.yaml:1:14: tensorboard must be true or false"), "%s", log);
    free(log);
}
