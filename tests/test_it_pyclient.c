/* test_it_pyclient — the protocol as another language sees it: starts a real
 * bfd on a temporary BF_HOME and runs tests/test_it_pyclient.py (pyzmq,
 * written from docs/protocol.md alone) against its three endpoints. The
 * script submits a 2-trial BudgetFormer sweep, follows it on PUB, checks the
 * stored metrics (contiguous seqs, same points as published) and sends
 * malformed messages to both ROUTER sockets; this wrapper checks its exit
 * status and that bfd survived everything and stops cleanly on SIGTERM. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PYTHON "/usr/bin/python3"

static char g_dir[256], g_home[320];
static pid_t g_bfd = -1;

static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    cr_assert(a && b, "copy %s -> %s: %s", from, to, strerror(errno));
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) cr_assert_eq(fwrite(buf, 1, n, b), n);
    fclose(a);
    cr_assert_eq(fclose(b), 0);
}

/* Prints the last `max` bytes of a file to stderr (a failed run's log). */
static void show_tail(const char *path, long max) {
    FILE *f = fopen(path, "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > max ? size - max : 0, SEEK_SET);
    char buf[4096];
    size_t n;
    fprintf(stderr, "---- %s (last %ld bytes) ----\n", path, max);
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stderr);
    fprintf(stderr, "----\n");
    fclose(f);
}

/* Starts argv with stdout and stderr appended to log; returns the pid. */
static pid_t spawn(const char *log, char *const argv[]) {
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Waits up to secs for pid; returns its wait status, or -1 on timeout. */
static int wait_for(pid_t pid, double secs) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    for (double t = 0; t < secs; t += 0.02) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return st;
        cr_assert(r == 0, "waitpid: %s", strerror(errno));
        nanosleep(&ts, NULL);
    }
    return -1;
}

static void setup(void) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    snprintf(g_dir, sizeof g_dir, "/tmp/bf-pyclient-XXXXXX");
    cr_assert(mkdtemp(g_dir));
    snprintf(g_home, sizeof g_home, "%s/home", g_dir);
    cr_assert_eq(mkdir(g_home, 0700), 0);
    static const char *files[] = {"glosses_train.tsv", "glosses_val.tsv",
                                  "glosses_train.tsv.tok300.model",
                                  "glosses_train.tsv.tok300.vocab"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char from[512], to[512];
        snprintf(from, sizeof from, "%s/tests/data/%s", BF_SOURCE_DIR, files[i]);
        snprintf(to, sizeof to, "%s/%s", g_dir, files[i]);
        copy_file(from, to);
    }
    char p[512];
    snprintf(p, sizeof p, "%s/bfd.yaml", g_home);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fprintf(f, "slots: 2\nthreads_per_slot: 1\nheartbeat_timeout: 30\n");
    cr_assert_eq(fclose(f), 0);
}

static void teardown(void) {
    if (g_bfd > 0) {
        kill(g_bfd, SIGKILL);
        waitpid(g_bfd, NULL, 0);
        g_bfd = -1;
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
}

TestSuite(pyclient, .init = setup, .fini = teardown, .timeout = 240);

Test(pyclient, protocol_from_the_doc_alone) {
    char probe[64];
    snprintf(probe, sizeof probe, "%s -c 'import zmq' 2>/dev/null", PYTHON);
    cr_assert_eq(system(probe), 0, "%s cannot import zmq: apt-get install python3-zmq", PYTHON);

    char bfd[512], bfd_log[512], py_log[512];
    snprintf(bfd, sizeof bfd, "%s/bfd", BF_BIN_DIR);
    snprintf(bfd_log, sizeof bfd_log, "%s/bfd.log", g_dir);
    snprintf(py_log, sizeof py_log, "%s/py.log", g_dir);
    setenv("BF_HOME", g_home, 1);
    char *bargv[] = {bfd, NULL};
    g_bfd = spawn(bfd_log, bargv);

    /* bfd is up once its control socket exists */
    char sock[512];
    snprintf(sock, sizeof sock, "%s/ctl.sock", g_home);
    struct timespec ts = {0, 50 * 1000 * 1000};
    int up = 0;
    for (int i = 0; i < 200 && !up; i++) {
        struct stat sb;
        up = stat(sock, &sb) == 0;
        if (!up && waitpid(g_bfd, NULL, WNOHANG) == g_bfd) {
            g_bfd = -1;
            show_tail(bfd_log, 4000);
            cr_assert_fail("bfd exited at start");
        }
        if (!up) nanosleep(&ts, NULL);
    }
    if (!up) show_tail(bfd_log, 4000);
    cr_assert(up, "bfd did not create %s within 10 s", sock);

    char ctl[600], wk[600], pub[600], script[512];
    snprintf(ctl, sizeof ctl, "ipc://%s/ctl.sock", g_home);
    snprintf(wk, sizeof wk, "ipc://%s/worker.sock", g_home);
    snprintf(pub, sizeof pub, "ipc://%s/pub.sock", g_home);
    snprintf(script, sizeof script, "%s/tests/test_it_pyclient.py", BF_SOURCE_DIR);
    char *pargv[] = {PYTHON,  script, "--ctl", ctl,   "--worker", wk,
                     "--pub", pub,    "--dir", g_dir, NULL};
    pid_t py = spawn(py_log, pargv);
    int st = wait_for(py, 180);
    if (st == -1) {
        kill(py, SIGKILL);
        waitpid(py, NULL, 0);
    }
    int ok = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    show_tail(py_log, ok ? 2000 : 8000);
    if (!ok) show_tail(bfd_log, 8000);
    cr_assert(st != -1, "the python client did not finish within 180 s");
    cr_assert(ok, "the python client failed (status %d)", st);

    /* bfd kept serving through the bad messages and stops cleanly */
    cr_assert_eq(waitpid(g_bfd, NULL, WNOHANG), 0, "bfd is gone");
    cr_assert_eq(kill(g_bfd, SIGTERM), 0);
    st = wait_for(g_bfd, 15);
    if (st == -1) show_tail(bfd_log, 4000);
    cr_assert(st != -1, "bfd did not stop within 15 s of SIGTERM");
    g_bfd = -1;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "bfd stopped with status %d", st);
}
