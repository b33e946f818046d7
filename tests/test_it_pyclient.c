/* test_it_pyclient — the protocol as another language sees it: starts a real
 * bfd on a temporary BF_HOME and runs tests/test_it_pyclient.py (pyzmq,
 * written from docs/protocol.md alone) against its three endpoints. The
 * script submits a 2-trial BudgetFormer sweep, follows it on PUB, checks the
 * stored metrics (contiguous seqs, same points as published) and sends
 * malformed messages to both ROUTER sockets; this wrapper checks its exit
 * status and that bfd survived everything and stops cleanly on SIGTERM. */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "it_bfd.h"

#define PYTHON "/usr/bin/python3"

static char g_dir[256], g_home[320];
static pid_t g_bfd = -1;

/* Waits up to secs for pid; returns its wait status, or -1 on timeout. */
static int wait_for(pid_t pid, double secs) {
    int st, r = it_wait_pid(pid, secs, &st);
    cr_assert(r >= 0, "waitpid: %s", strerror(errno));
    return r == 0 ? st : -1;
}

static void setup(void) {
    it_worker_env();
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-pyclient-XXXXXX");
    static const char *files[] = {"glosses_train.tsv", "glosses_val.tsv",
                                  "glosses_train.tsv.tok300.model",
                                  "glosses_train.tsv.tok300.vocab"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char from[512], to[512];
        snprintf(from, sizeof from, "%s/tests/data/%s", BF_SOURCE_DIR, files[i]);
        snprintf(to, sizeof to, "%s/%s", g_dir, files[i]);
        it_copy_file(from, to);
    }
    it_write_text(tmpdir_path(g_home, "bfd.yaml"),
                  "slots: 2\nthreads_per_slot: 1\nheartbeat_timeout: 30\n", 0644);
}

static void teardown(void) {
    it_stop(&g_bfd, SIGKILL);
    if (tmpdir_remove(g_dir)) fprintf(stderr, "could not remove %s\n", g_dir);
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
    char *bargv[] = {bfd, NULL};
    g_bfd = it_spawn(bfd_log, bargv, 0);

    /* bfd is up once its control socket exists */
    const char *sock = tmpdir_path(g_home, "ctl.sock");
    int up = it_wait_file(sock, g_bfd, 10);
    if (up != 0) it_show_tail(bfd_log, 4000);
    if (up == 1) {
        g_bfd = -1;
        cr_assert_fail("bfd exited at start");
    }
    cr_assert(up == 0, "bfd did not create %s within 10 s", sock);

    char ctl[600], wk[600], pub[600], script[512];
    snprintf(ctl, sizeof ctl, "ipc://%s/ctl.sock", g_home);
    snprintf(wk, sizeof wk, "ipc://%s/worker.sock", g_home);
    snprintf(pub, sizeof pub, "ipc://%s/pub.sock", g_home);
    snprintf(script, sizeof script, "%s/tests/test_it_pyclient.py", BF_SOURCE_DIR);
    char *pargv[] = {PYTHON,  script, "--ctl", ctl,   "--worker", wk,
                     "--pub", pub,    "--dir", g_dir, NULL};
    pid_t py = it_spawn(py_log, pargv, 0);
    int st = wait_for(py, 180);
    if (st == -1) {
        kill(py, SIGKILL);
        waitpid(py, NULL, 0);
    }
    int ok = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    it_show_tail(py_log, ok ? 2000 : 8000);
    if (!ok) it_show_tail(bfd_log, 8000);
    cr_assert(st != -1, "the python client did not finish within 180 s");
    cr_assert(ok, "the python client failed (status %d)", st);

    /* bfd kept serving through the bad messages and stops cleanly */
    cr_assert_eq(waitpid(g_bfd, NULL, WNOHANG), 0, "bfd is gone");
    cr_assert_eq(kill(g_bfd, SIGTERM), 0);
    st = wait_for(g_bfd, 15);
    if (st == -1) it_show_tail(bfd_log, 4000);
    cr_assert(st != -1, "bfd did not stop within 15 s of SIGTERM");
    g_bfd = -1;
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) it_show_tail(bfd_log, 6000);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "bfd stopped with status %d", st);
}
