/* spawn — the child side of starting a worker process: what bfd's local
 * launcher and `bfworker serve` (the remote launcher's agent) both do after
 * fork(), so an attempt sees the same session, descriptors, signals and
 * environment wherever it was started. */
#ifndef BF_SPAWN_H
#define BF_SPAWN_H

/* In a forked child: a session (and process group) of its own; stdin from
 * /dev/null, stdout and stderr appended to logp; descriptors above 2 closed;
 * default signal dispositions and an empty mask; OMP_NUM_THREADS = threads
 * and Open MPI's run-as-root permission (unless set); banner (NULL: none) as
 * the log's next line; then chdir(cwd) and execvp(argv). Never returns: exit
 * status 127 when chdir or exec fails (said in the log). */
void bf_exec_logged(const char *const *argv, const char *logp, const char *cwd, int threads,
                    const char *banner) __attribute__((noreturn));

#endif
