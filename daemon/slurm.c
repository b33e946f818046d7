/* slurm.c — the Slurm launcher's commands (see slurm.h): the batch script,
 * sbatch, scontrol, scancel, each run synchronously with a hard timeout. It
 * knows nothing of bfd's state: it takes values and returns a status, so
 * its unit tests link it alone. */
#include "daemon/slurm.h"
#include "common/errbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SLURM_TIMEOUT_S 20.0 /* a controller slower than this is treated as an error */

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Drops trailing newlines and spaces. */
static void chomp(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) s[--n] = '\0';
}

int slurm_run(const char *const *argv, double timeout_s, char *out, size_t outlen, char *err,
              size_t errlen) {
    int fds[2];
    out[0] = '\0';
    if (pipe(fds) != 0) return bf_fail(err, errlen, "%s: pipe: %s", argv[0], strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        return bf_fail(err, errlen, "%s: fork: %s", argv[0], strerror(e));
    }
    if (pid == 0) {
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        for (int k = 3; k < 1024; k++) close(k);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    size_t used = 0;
    double deadline = mono_s() + timeout_s;
    int timed_out = 0;
    for (;;) {
        double left = deadline - mono_s();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd p = {fds[0], POLLIN, 0};
        int rc = poll(&p, 1, (int)(left * 1000) + 1);
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) break;
        if (rc == 0) continue;
        char buf[4096];
        ssize_t k = read(fds[0], buf, sizeof buf);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        size_t take = (size_t)k;
        if (used + take > outlen - 1) take = outlen - 1 - used; /* the rest is dropped */
        memcpy(out + used, buf, take);
        used += take;
        out[used] = '\0';
    }
    close(fds[0]);
    if (timed_out) kill(pid, SIGKILL);
    int status;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (w < 0) return bf_fail(err, errlen, "%s: waitpid: %s", argv[0], strerror(errno));
    chomp(out);
    if (timed_out)
        return bf_fail(err, errlen, "%s: no answer within %.0f s (killed)", argv[0], timeout_s);
    if (WIFSIGNALED(status))
        return bf_fail(err, errlen, "%s: killed by signal %d", argv[0], WTERMSIG(status));
    return WEXITSTATUS(status);
}

/* Appends s to the script in single quotes ('it'\''s' for a quote inside). */
static void put_quoted(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++)
        if (*s == '\'')
            fputs("'\\''", f);
        else
            fputc(*s, f);
    fputc('\'', f);
}

/* #SBATCH lines are not parsed by a shell: they may not hold a newline, and
 * Slurm splits them at spaces unless quoted, so such values are refused. */
static int sbatch_safe(const char *what, const char *v, char *err, size_t errlen) {
    if (strpbrk(v, " \t\n\r\"'"))
        return bf_fail(
            err, errlen,
            "slurm: the %s '%s' holds a space or quote, which #SBATCH lines cannot carry", what, v);
    return 0;
}

int slurm_write_script(const char *path, const slurm_batch *b, char *err, size_t errlen) {
    if (b->ranks < 1 || b->nodes < 0 || b->nodes > b->ranks || b->cpus_per_rank < 0 ||
        b->gpus_per_rank < 0 || b->time_limit_s < 0)
        return bf_fail(err, errlen,
                       "slurm: trial %lld: ranks %d, nodes %d, cpus %d, gpus %d: out of range",
                       b->trial, b->ranks, b->nodes, b->cpus_per_rank, b->gpus_per_rank);
    if (sbatch_safe("log path", b->log_path, err, errlen) ||
        sbatch_safe("working directory", b->cwd, err, errlen) ||
        (b->partition && sbatch_safe("partition", b->partition, err, errlen)))
        return -1;
    if (b->mpi_cidr && strspn(b->mpi_cidr, "0123456789abcdefABCDEF.:/") != strlen(b->mpi_cidr))
        return bf_fail(err, errlen, "slurm: the MPI subnet '%s' is not a CIDR (e.g. 10.1.0.0/16)",
                       b->mpi_cidr);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return bf_fail(err, errlen, "slurm: open %s: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        return bf_fail(err, errlen, "slurm: fdopen %s: %s", path, strerror(errno));
    }
    fprintf(f, "#!/bin/sh\n");
    fprintf(f, "# bfd: trial %lld attempt %d (written by bfd; the token is secret)\n", b->trial,
            b->attempt);
    fprintf(f, "#SBATCH --job-name=bf-%lld\n", b->trial);
    fprintf(f, "#SBATCH --ntasks=%d\n", b->ranks);
    if (b->nodes > 0) fprintf(f, "#SBATCH --nodes=%d\n", b->nodes);
    if (b->cpus_per_rank > 0) fprintf(f, "#SBATCH --cpus-per-task=%d\n", b->cpus_per_rank);
    if (b->gpus_per_rank > 0) fprintf(f, "#SBATCH --gpus-per-task=%d\n", b->gpus_per_rank);
    if (b->time_limit_s > 0) {
        /* --time takes whole minutes at least; round up so a limit is never cut */
        long long m = (b->time_limit_s + 59) / 60;
        fprintf(f, "#SBATCH --time=%lld:%02lld:00\n", m / 60, m % 60);
    }
    if (b->partition && *b->partition) fprintf(f, "#SBATCH --partition=%s\n", b->partition);
    fprintf(f, "#SBATCH --output=%s\n", b->log_path);
    fprintf(f, "#SBATCH --open-mode=append\n");
    fprintf(f, "#SBATCH --chdir=%s\n", b->cwd);
    fprintf(f, "#SBATCH --no-requeue\n");
    fprintf(f, "OMP_NUM_THREADS=%d\nexport OMP_NUM_THREADS\n", b->threads > 0 ? b->threads : 1);
    /* ranks on several hosts talk over the network bfd is reached on, not
     * over whichever interface Open MPI finds first (the user's own setting wins) */
    if (b->ranks > 1 && b->mpi_cidr && *b->mpi_cidr) {
        /* (a CIDR: digits, dots, colons and a slash, safe unquoted) */
        fprintf(f,
                ": \"${OMPI_MCA_btl_tcp_if_include:=%s}\" \"${OMPI_MCA_oob_tcp_if_include:=%s}\"\n"
                "export OMPI_MCA_btl_tcp_if_include OMPI_MCA_oob_tcp_if_include\n",
                b->mpi_cidr, b->mpi_cidr);
    }
    fprintf(f,
            "echo \"== bfd: trial %lld attempt %d, %d rank%s, Slurm job $SLURM_JOB_ID on "
            "$(hostname)\"\n",
            b->trial, b->attempt, b->ranks, b->ranks == 1 ? "" : "s");
    /* exec: the script's exit status is srun's, which is the worker's (75 = preempted) */
    fprintf(f, "exec ");
    put_quoted(f, b->srun);
    fprintf(f, " --kill-on-bad-exit=1");
    if (b->mpi && *b->mpi) {
        fprintf(f, " ");
        char mpi[300];
        snprintf(mpi, sizeof mpi, "--mpi=%s", b->mpi);
        put_quoted(f, mpi);
    }
    const char *args[] = {b->bfworker, "run",    "--trial", NULL,       "--connect", b->endpoint,
                          "--token",   b->token, "--out",   b->out_dir, "--attempt", NULL};
    char trial[32], attempt[32];
    snprintf(trial, sizeof trial, "%lld", b->trial);
    snprintf(attempt, sizeof attempt, "%d", b->attempt);
    args[3] = trial;
    args[11] = attempt;
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        fputc(' ', f);
        put_quoted(f, args[i]);
    }
    if (b->stage && b->stage_root) {
        const char *st[] = {"--stage-root", b->stage_root, "--stage", b->stage};
        for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
            fputc(' ', f);
            put_quoted(f, st[i]);
        }
    }
    fputc('\n', f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return bf_fail(err, errlen, "slurm: writing %s: %s", path, strerror(errno));
    return 0;
}

int slurm_submit(const char *sbatch, const char *script, char id[SLURM_JOB_ID_MAX], char *err,
                 size_t errlen) {
    char out[4096];
    const char *argv[] = {sbatch, "--parsable", script, NULL};
    int rc = slurm_run(argv, SLURM_TIMEOUT_S, out, sizeof out, err, errlen);
    if (rc < 0) return -1;
    if (rc != 0) return bf_fail(err, errlen, "%s %s: exit status %d: %s", sbatch, script, rc, out);
    /* "123" or "123;cluster", possibly after warning lines: take the last line */
    char *line = strrchr(out, '\n');
    line = line ? line + 1 : out;
    size_t n = strspn(line, "0123456789");
    if (n == 0 || n >= SLURM_JOB_ID_MAX || (line[n] && line[n] != ';'))
        return bf_fail(err, errlen, "%s: expected a job id, got '%.200s'", sbatch, out);
    memcpy(id, line, n);
    id[n] = '\0';
    return 0;
}

/* Value of " KEY=" in line (or at its start) into buf; 0 found, -1 not. */
static int field(const char *line, const char *key, char *buf, size_t len) {
    size_t kl = strlen(key);
    for (const char *p = line; (p = strstr(p, key)); p += kl) {
        if ((p != line && p[-1] != ' ') || p[kl] != '=') continue;
        const char *v = p + kl + 1;
        size_t n = strcspn(v, " \n");
        if (n >= len) n = len - 1;
        memcpy(buf, v, n);
        buf[n] = '\0';
        return 0;
    }
    return -1;
}

int slurm_parse_job_line(const char *line, slurm_status *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->exit_code = -1;
    char ec[64];
    if (field(line, "JobState", out->state, sizeof out->state))
        return bf_fail(err, errlen, "scontrol: no JobState in '%.200s'", line);
    if (field(line, "ExitCode", ec, sizeof ec) == 0) {
        int a, b;
        if (sscanf(ec, "%d:%d", &a, &b) == 2) {
            out->exit_code = a;
            out->signal = b;
        }
    }
    static const char *const queued[] = {
        "PENDING",  "CONFIGURING", "REQUEUED", "REQUEUE_HOLD",  "REQUEUE_FED",
        "RESIZING", "SUSPENDED",   "STOPPED",  "RESV_DEL_HOLD", "SIGNALING"};
    static const char *const running[] = {"RUNNING", "COMPLETING", "STAGE_OUT"};
    out->phase = SLURM_ENDED;
    for (size_t i = 0; i < sizeof queued / sizeof queued[0]; i++)
        if (!strcmp(out->state, queued[i])) out->phase = SLURM_QUEUED;
    for (size_t i = 0; i < sizeof running / sizeof running[0]; i++)
        if (!strcmp(out->state, running[i])) out->phase = SLURM_RUNNING;
    return 0;
}

int slurm_query(const char *scontrol, const char *id, slurm_status *out, char *err, size_t errlen) {
    char buf[16384];
    const char *argv[] = {scontrol, "show", "job", "-o", id, NULL};
    int rc = slurm_run(argv, SLURM_TIMEOUT_S, buf, sizeof buf, err, errlen);
    if (rc < 0) return -1;
    if (rc != 0) {
        if (strstr(buf, "Invalid job id")) {
            memset(out, 0, sizeof *out);
            out->phase = SLURM_UNKNOWN;
            out->exit_code = -1;
            snprintf(out->state, sizeof out->state, "UNKNOWN");
            return 0;
        }
        return bf_fail(err, errlen, "%s show job %s: exit status %d: %.300s", scontrol, id, rc,
                       buf);
    }
    char want[64];
    snprintf(want, sizeof want, "JobId=%s ", id);
    char *line = strstr(buf, want);
    if (!line)
        return bf_fail(err, errlen, "%s show job %s: no such job in '%.200s'", scontrol, id, buf);
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    return slurm_parse_job_line(line, out, err, errlen);
}

int slurm_cancel(const char *scancel, const char *id, int term, char *err, size_t errlen) {
    char out[4096];
    const char *argv_term[] = {scancel, "--signal=TERM", id, NULL};
    const char *argv_kill[] = {scancel, id, NULL};
    int rc = slurm_run(term ? argv_term : argv_kill, SLURM_TIMEOUT_S, out, sizeof out, err, errlen);
    if (rc < 0) return -1;
    if (rc != 0)
        return bf_fail(err, errlen, "%s%s %s: exit status %d: %.300s", scancel,
                       term ? " --signal=TERM" : "", id, rc, out);
    return 0;
}
