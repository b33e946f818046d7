/* spawn — starting a child process from a program that runs threads (bfd's
 * submit, Slurm, HTTP and ZeroMQ threads; `bfworker serve`): argv, the
 * environment, the log's banner and every message the child may need are
 * built before fork(), and the child makes only async-signal-safe calls
 * (dup2, close_range, sigaction, chdir, write, execve) before its exec, so
 * it can never block on a lock (malloc's, stdio's, the environment's) that
 * another thread held at the moment of the fork. This is what git's
 * run-command does. bfd's local launcher, `bfworker serve` and the Slurm
 * commands all start their children through it. */
#ifndef BF_SPAWN_H
#define BF_SPAWN_H

#include <sys/types.h>

/* What to start and how. */
typedef struct bf_spawn_req {
    const char *const *argv; /* argv[0]: a path, or a name looked up in $PATH */
    const char *logp;        /* stdout and stderr appended here (mode 0600) ... */
    int out_fd;              /* ... or, when logp is NULL, dup'ed onto this descriptor */
    const char *cwd;         /* NULL: the caller's */
    const char *const *env;  /* "NAME=VALUE" set over the caller's environment; NULL-ended */
    const char *banner;      /* the log's next line before the exec; NULL: none */
    int new_session;         /* a session and process group of its own (setsid) */
    int die_with_parent;     /* SIGKILL when the parent dies (PR_SET_PDEATHSIG) */
} bf_spawn_req;

/* Forks and execs req: the child has stdin from /dev/null, no descriptor
 * above 2, default signal dispositions and an empty signal mask. Returns
 * the child's pid, or -1 with err set when argv[0] is not found or
 * executable, memory runs out or fork fails. A chdir or exec that fails in
 * the child is said in its output and ends it with status 127. */
pid_t bf_spawn(const bf_spawn_req *req, char *err, size_t errlen);

/* The path execve would run for name: name itself when it holds a '/',
 * else the first executable file of that name in $PATH, into buf. 0, or
 * -1 with err naming what was searched. */
int bf_spawn_resolve(const char *name, char *buf, size_t len, char *err, size_t errlen);

#endif
