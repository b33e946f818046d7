/* spawn.c — see spawn.h. */
#include "common/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void bf_exec_logged(const char *const *argv, const char *logp, const char *cwd, int threads,
                    const char *banner) {
    setsid();
    int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0600);
    int nul = open("/dev/null", O_RDONLY);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    if (nul >= 0) dup2(nul, 0);
    for (int k = 3; k < 1024; k++) close(k);
    int sigs[] = {SIGPIPE, SIGCHLD, SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    char t[16];
    snprintf(t, sizeof t, "%d", threads);
    setenv("OMP_NUM_THREADS", t, 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    if (banner) fprintf(stderr, "%s\n", banner);
    if (chdir(cwd) != 0) {
        fprintf(stderr, "chdir %s: %s\n", cwd, strerror(errno));
        _exit(127);
    }
    execvp(argv[0], (char *const *)argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}
