/* test_spawn — bf_spawn (common/spawn.h), the one way bf starts a child:
 * the environment it is given, the descriptors it does not inherit, the log
 * and banner, the errors of a missing program or folder, and that children
 * started while another thread keeps taking the C library's environment
 * lock still run (the child of a plain fork + setenv waits on that lock for
 * ever when the fork happened while it was held). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/spawn.h"

static char dir[256], logp[300];

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/bf_test_spawn_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(logp, sizeof logp, "%s/child.log", dir);
}

static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* The log's text (static buffer). */
static const char *slurp(const char *p) {
    static char buf[8192];
    FILE *f = fopen(p, "r");
    cr_assert_not_null(f, "%s", p);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The exit status of pid, or -1 when it has not ended within limit_s (a
 * child deadlocked is killed, so the test fails instead of hanging). */
static int wait_status(pid_t pid, double limit_s) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 > limit_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(10000);
    }
}

TestSuite(spawn, .init = setup, .fini = teardown);

Test(spawn, env_fds_log_banner_cwd) {
    /* a descriptor the parent holds open without close-on-exec */
    int leak = open("/dev/null", O_RDONLY);
    cr_assert_geq(leak, 3);
    /* and one above 1023, where a close() loop to 1024 stops */
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < 2048 && rl.rlim_max >= 2048) {
        rl.rlim_cur = 2048;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int high = dup2(leak, 1500);
    cr_assert_eq(high, 1500, "cannot open descriptor 1500 (limit %ld)", (long)rl.rlim_cur);
    /* Open MPI's run-as-root permission is the user's to give, not bf's */
    unsetenv("OMPI_ALLOW_RUN_AS_ROOT");
    setenv("BF_SPAWN_KEPT", "kept", 1);
    setenv("BF_SPAWN_SET", "old", 1);
    char script[512];
    snprintf(script, sizeof script,
             "echo \"env $BF_SPAWN_KEPT $BF_SPAWN_SET $BF_SPAWN_NEW\"; echo \"cwd $(pwd)\"; "
             "ls /proc/$$/fd | tr '\\n' ' '; echo; for f in %d 1500; do test -e /proc/$$/fd/$f && "
             "echo LEAKED $f; done; "
             "echo \"ompi ${OMPI_ALLOW_RUN_AS_ROOT:-unset}\"",
             leak);
    const char *argv[] = {"sh", "-c", script, NULL};
    const char *env[] = {"BF_SPAWN_SET=new", "BF_SPAWN_NEW=added", NULL};
    bf_spawn_req q = {.argv = argv,
                      .logp = logp,
                      .cwd = dir,
                      .env = env,
                      .banner = "== banner line",
                      .new_session = 1};
    char err[512];
    pid_t pid = bf_spawn(&q, err, sizeof err);
    cr_assert_gt(pid, 0, "%s", err);
    cr_assert_eq(wait_status(pid, 60), 0);
    close(leak);
    close(high);
    const char *log = slurp(logp);
    char want[400];
    cr_assert(!strncmp(log, "== banner line\n", 15), "the banner comes first: %s", log);
    cr_assert(strstr(log, "env kept new added\n"), "%s", log);
    snprintf(want, sizeof want, "cwd %s\n", dir);
    cr_assert(strstr(log, want), "%s", log);
    cr_assert(strstr(log, "\n0 1 2 ") || strstr(log, "\n0 1 2 3 \n"), "only 0-2 inherited: %s",
              log);
    cr_assert_null(strstr(log, "LEAKED"), "%s", log);
    cr_assert(strstr(log, "ompi unset\n"), "%s", log);
    cr_assert_str_eq(getenv("BF_SPAWN_SET"), "old", "the parent's environment is untouched");
}

Test(spawn, errors_name_the_program_and_folder) {
    char err[512];
    const char *missing[] = {"bf-no-such-program", NULL};
    bf_spawn_req q = {.argv = missing, .logp = logp};
    cr_assert_eq(bf_spawn(&q, err, sizeof err), -1);
    cr_assert(strstr(err, "bf-no-such-program: no executable of that name in $PATH"), "%s", err);
    const char *sh[] = {"sh", "-c", "true", NULL};
    char nodir[400];
    snprintf(nodir, sizeof nodir, "%s/none", dir);
    bf_spawn_req c = {.argv = sh, .logp = logp, .cwd = nodir};
    cr_assert_eq(bf_spawn(&c, err, sizeof err), -1);
    cr_assert(strstr(err, "cannot chdir to") && strstr(err, "No such file"), "%s", err);
    char badlog[400];
    snprintf(badlog, sizeof badlog, "%s/none/x.log", dir);
    bf_spawn_req l = {.argv = sh, .logp = badlog};
    cr_assert_eq(bf_spawn(&l, err, sizeof err), -1);
    cr_assert(strstr(err, "cannot open the log") && strstr(err, badlog), "%s", err);
}

static atomic_int stop_churn;

/* Takes and drops the C library's environment lock as fast as it can
 * (unsetenv of a name that is not set changes nothing), as a thread of bfd
 * could hold any lock at the moment of a fork. */
static void *churn_env_lock(void *arg) {
    (void)arg;
    while (!atomic_load(&stop_churn)) unsetenv("BF_SPAWN_NEVER_SET");
    return NULL;
}

Test(spawn, children_run_while_another_thread_takes_a_lock) {
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, churn_env_lock, NULL), 0);
    const char *argv[] = {"sh", "-c", "echo ran", NULL};
    const char *env[] = {"OMP_NUM_THREADS=1", NULL};
    bf_spawn_req q = {.argv = argv, .logp = logp, .env = env, .banner = "== banner"};
    /* a fork + setenv child (what bfd did) hung on the lock in 199 of 200
     * tries here; one that makes no such call cannot */
    int n = 20, ended = 0;
    char err[512] = "";
    for (int i = 0; i < n; i++) {
        pid_t pid = bf_spawn(&q, err, sizeof err);
        if (pid > 0 && wait_status(pid, 60) == 0) ended++;
    }
    atomic_store(&stop_churn, 1);
    pthread_join(t, NULL);
    cr_assert_eq(ended, n, "%d of %d children hung on a lock held at fork time (%s)", n - ended, n,
                 err);
    const char *log = slurp(logp);
    cr_assert(!strncmp(log, "== banner\nran\n== banner\nran\n", 28), "%s", log);
}
