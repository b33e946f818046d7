/* spawn.c — see spawn.h. Everything the child touches is allocated and
 * formatted before fork(); between fork and exec it calls only what POSIX
 * lists as async-signal-safe, plus raw system calls (close_range, prctl). */
#include "common/spawn.h"
#include "common/errbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define SPAWN_MAX_ENV 65536 /* variables; an environment larger than this is refused */

/* Which step of the child failed, sent up the notify pipe with its errno. */
enum { STEP_LOG = 1, STEP_CHDIR, STEP_EXEC };

int bf_spawn_resolve(const char *name, char *buf, size_t len, char *err, size_t errlen) {
    if (!name || !name[0]) return bf_fail(err, errlen, "spawn: empty program name");
    if (strchr(name, '/')) {
        if ((size_t)snprintf(buf, len, "%s", name) >= len)
            return bf_fail(err, errlen, "spawn: path too long: %s", name);
        return 0;
    }
    const char *path = getenv("PATH");
    if (!path || !path[0]) path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path;; p++) {
        size_t n = strcspn(p, ":");
        /* an empty entry of $PATH is the current folder */
        int w = n ? snprintf(buf, len, "%.*s/%s", (int)n, p, name) : snprintf(buf, len, "%s", name);
        struct stat st;
        if (w > 0 && (size_t)w < len && stat(buf, &st) == 0 && S_ISREG(st.st_mode) &&
            access(buf, X_OK) == 0)
            return 0;
        p += n;
        if (!*p) break;
    }
    return bf_fail(err, errlen, "%s: no executable of that name in $PATH (%s)", name, path);
}

/* The caller's environment with each "NAME=VALUE" of set in place of (or
 * after) the variable of that name: a NULL-ended array whose strings are
 * the caller's or set's own (only the array is allocated). NULL when out of
 * memory or past SPAWN_MAX_ENV. */
static char **env_with(const char *const *set) {
    size_t n = 0, k = 0;
    while (environ && environ[n] && n < SPAWN_MAX_ENV) n++;
    while (set && set[k]) k++;
    if (n >= SPAWN_MAX_ENV) return NULL;
    char **e = malloc((n + k + 1) * sizeof *e);
    if (!e) return NULL;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int overridden = 0;
        for (size_t j = 0; j < k && !overridden; j++) {
            size_t l = strcspn(set[j], "=");
            overridden = strncmp(environ[i], set[j], l) == 0 && environ[i][l] == '=';
        }
        if (!overridden) e[m++] = environ[i];
    }
    for (size_t j = 0; j < k; j++) e[m++] = (char *)set[j];
    e[m] = NULL;
    return e;
}

/* write() of all of s, retried on EINTR; async-signal-safe. */
static void put_all(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* Closes every descriptor from lo up: close_range where the kernel has it
 * (5.9+), else one close() each up to the limit the parent read. */
static void close_from(int lo, long limit) {
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)lo, ~0U, 0) == 0) return;
#endif
    for (long k = lo; k < limit; k++) close((int)k);
}

/* The child, between fork and exec: async-signal-safe calls only. On a
 * failure, {step, errno} goes up the close-on-exec pipe nfd, then _exit. */
static void child(const bf_spawn_req *q, const char *path, char *const *envp, const char *banner,
                  size_t banner_len, int nfd, pid_t parent, long fd_limit) {
    int fail[2] = {0, 0};
    if (q->die_with_parent) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127); /* the parent died before the prctl */
    }
    if (q->new_session) setsid();
    /* dispositions first (the mask still blocks everything), then the mask */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++) sigaction(s, &dfl, NULL); /* KILL, STOP: EINVAL, harmless */
    int out = q->out_fd;
    if (q->logp) {
        out = open(q->logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (out < 0) {
            fail[0] = STEP_LOG;
            fail[1] = errno;
            goto failed;
        }
    }
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nul >= 0 && nul != 0) dup2(nul, 0);
    if (out != 1) dup2(out, 1);
    if (out != 2) dup2(out, 2);
    /* one of them may be a close-on-exec descriptor opened above (the
     * parent had 0, 1 or 2 closed): kept across the exec */
    for (int k = 0; k < 3; k++) fcntl(k, F_SETFD, 0);
    /* nfd (>= 3, see bf_spawn) lives to the exec as descriptor 3, close-on-exec */
    if (nfd != 3) dup2(nfd, 3);
    fcntl(3, F_SETFD, FD_CLOEXEC);
    nfd = 3;
    close_from(4, fd_limit);
    if (banner) put_all(2, banner, banner_len);
    if (q->cwd && chdir(q->cwd) != 0) {
        fail[0] = STEP_CHDIR;
        fail[1] = errno;
        goto failed;
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(path, (char *const *)q->argv, envp);
    fail[0] = STEP_EXEC;
    fail[1] = errno;
failed:
    put_all(nfd, (const char *)fail, sizeof fail);
    _exit(127);
}

pid_t bf_spawn(const bf_spawn_req *q, char *err, size_t errlen) {
    char path[PATH_MAX];
    if (bf_spawn_resolve(q->argv[0], path, sizeof path, err, errlen)) return -1;
    char **envp = env_with(q->env);
    size_t blen = q->banner ? strlen(q->banner) + 1 : 0;
    char *banner = blen ? malloc(blen) : NULL;
    if (!envp || (blen && !banner)) {
        free(envp);
        free(banner);
        return bf_fail(err, errlen, "%s: out of memory for its environment", q->argv[0]);
    }
    if (blen) {
        memcpy(banner, q->banner, blen - 1);
        banner[blen - 1] = '\n';
    }
    struct rlimit rl;
    long fd_limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                        ? (long)rl.rlim_cur
                        : 65536;
    int pf[2] = {-1, -1}, nfd = -1;
    /* close-on-exec from the start: another thread's child never holds it */
    if (syscall(SYS_pipe2, pf, O_CLOEXEC) == 0) {
        /* above 0..2, which the child overwrites */
        nfd = fcntl(pf[1], F_DUPFD_CLOEXEC, 3);
        close(pf[1]);
    }
    if (nfd < 0) {
        int e = errno;
        if (pf[0] >= 0) close(pf[0]);
        free(envp);
        free(banner);
        return bf_fail(err, errlen, "%s: pipe: %s", q->argv[0], strerror(e));
    }
    /* every signal blocked across the fork: no handler of the parent's runs
     * in the child before the child has reset them */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) child(q, path, envp, banner, blen, nfd, parent, fd_limit);
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(nfd);
    free(envp);
    free(banner);
    if (pid < 0) {
        close(pf[0]);
        return bf_fail(err, errlen, "%s: fork: %s", q->argv[0], strerror(fork_errno));
    }
    /* the pipe closes at the exec (nothing read) or carries why the child failed */
    int fail[2];
    ssize_t got;
    while ((got = read(pf[0], fail, sizeof fail)) < 0 && errno == EINTR) {
    }
    close(pf[0]);
    if (got != (ssize_t)sizeof fail) return pid;
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    const char *what = fail[0] == STEP_LOG     ? "open the log"
                       : fail[0] == STEP_CHDIR ? "chdir to"
                                               : "exec";
    const char *obj = fail[0] == STEP_LOG ? q->logp : fail[0] == STEP_CHDIR ? q->cwd : path;
    return bf_fail(err, errlen, "%s: cannot %s %s: %s", q->argv[0], what, obj, strerror(fail[1]));
}
