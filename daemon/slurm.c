/* slurm.c — the Slurm launcher's commands (see slurm.h): the batch script,
 * sbatch, scontrol, scancel, each run synchronously with a hard timeout. It
 * knows nothing of bfd's state: it takes values and returns a status, so
 * its unit tests link it alone. */
#include "daemon/slurm.h"
#include "common/errbuf.h"
#include "common/spawn.h"

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
    bf_spawn_req req = {.argv = argv, .out_fd = fds[1]};
    pid_t pid = bf_spawn(&req, err, errlen);
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
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

/* A subnet for MPI's TCP: digits, hex, dots, colons and a slash only (so it
 * is safe unquoted in a script); NULL or "" passes (not set). */
static int cidr_ok(const char *cidr, char *err, size_t errlen) {
    if (!cidr || strspn(cidr, "0123456789abcdefABCDEF.:/") == strlen(cidr)) return 0;
    return bf_fail(err, errlen, "slurm: the MPI subnet '%s' is not a CIDR (e.g. 198.18.0.0/24)",
                   cidr);
}

/* path opened for writing, mode 0600 (a script or manifest holds tokens). */
static FILE *open_private(const char *path, char *err, size_t errlen) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        bf_fail(err, errlen, "slurm: open %s: %s", path, strerror(errno));
        return NULL;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        bf_fail(err, errlen, "slurm: fdopen %s: %s", path, strerror(errno));
    }
    return f;
}

/* The #SBATCH lines of an attempt's resources (0 / NULL / "": not passed). */
static void put_resources(FILE *f, int ranks, int nodes, int cpus, int gpus, long long time_s,
                          const char *partition) {
    fprintf(f, "#SBATCH --ntasks=%d\n", ranks);
    if (nodes > 0) fprintf(f, "#SBATCH --nodes=%d\n", nodes);
    if (cpus > 0) fprintf(f, "#SBATCH --cpus-per-task=%d\n", cpus);
    if (gpus > 0) fprintf(f, "#SBATCH --gpus-per-task=%d\n", gpus);
    if (time_s > 0) {
        /* --time takes whole minutes at least; round up so a limit is never cut */
        long long m = (time_s + 59) / 60;
        fprintf(f, "#SBATCH --time=%lld:%02lld:00\n", m / 60, m % 60);
    }
    if (partition && *partition) fprintf(f, "#SBATCH --partition=%s\n", partition);
}

/* Each task's threads, and with ranks > 1 on a subnet: ranks on several
 * hosts talk over the network bfd is reached on, not over whichever
 * interface Open MPI finds first (the user's own setting wins). */
static void put_task_env(FILE *f, int threads, int ranks, const char *cidr) {
    fprintf(f, "OMP_NUM_THREADS=%d\nexport OMP_NUM_THREADS\n", threads > 0 ? threads : 1);
    if (ranks > 1 && cidr && *cidr)
        fprintf(f,
                ": \"${OMPI_MCA_btl_tcp_if_include:=%s}\" \"${OMPI_MCA_oob_tcp_if_include:=%s}\"\n"
                "export OMPI_MCA_btl_tcp_if_include OMPI_MCA_oob_tcp_if_include\n",
                cidr, cidr);
}

/* srun, quoted, with its own options: --kill-on-bad-exit and --mpi. */
static void put_srun(FILE *f, const char *srun, const char *mpi) {
    put_quoted(f, srun);
    fprintf(f, " --kill-on-bad-exit=1");
    if (mpi && *mpi) {
        char opt[300];
        snprintf(opt, sizeof opt, "--mpi=%s", mpi);
        fputc(' ', f);
        put_quoted(f, opt);
    }
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
    char array[SLURM_JOB_ID_MAX];
    int task;
    if (slurm_array_task_of(id, array, &task) == 0) {
        /* a pending task is listed inside its array's record (ArrayTaskId=4-39) */
        slurm_status *st = malloc((size_t)(task + 1) * sizeof *st);
        if (!st) return bf_fail(err, errlen, "slurm: out of memory");
        int rc = slurm_query_array(scontrol, array, st, task + 1, err, errlen);
        if (rc == 0) *out = st[task];
        free(st);
        return rc;
    }
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

/* A manifest field: a non-empty word of letters, digits, '_', '-' and '.'
 * (the script splits the line at spaces). */
static int manifest_word(const char *what, const char *v, char *err, size_t errlen) {
    if (!*v ||
        strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != strlen(v))
        return bf_fail(err, errlen, "slurm: the %s '%s' is not a word of letters and digits", what,
                       v);
    return 0;
}

static int write_manifest(const char *path, const slurm_array_task *t, int n, char *err,
                          size_t errlen) {
    for (int i = 0; i < n; i++)
        if (manifest_word("token", t[i].token, err, errlen) ||
            (t[i].stage && *t[i].stage && manifest_word("stage", t[i].stage, err, errlen)))
            return -1;
    FILE *f = open_private(path, err, errlen);
    if (!f) return -1;
    for (int i = 0; i < n; i++)
        fprintf(f, "%lld %d %s %s\n", t[i].trial, t[i].attempt, t[i].token,
                t[i].stage && *t[i].stage ? t[i].stage : "-");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return bf_fail(err, errlen, "slurm: writing %s: %s", path, strerror(errno));
    return 0;
}

int slurm_write_array(const char *script, const char *manifest, const slurm_array *a,
                      const slurm_array_task *tasks, int n, char *err, size_t errlen) {
    if (n < 1 || a->ranks < 1 || a->nodes < 0 || a->nodes > a->ranks || a->cpus_per_rank < 0 ||
        a->gpus_per_rank < 0 || a->time_limit_s < 0)
        return bf_fail(err, errlen,
                       "slurm: job %lld: %d tasks, ranks %d, nodes %d, cpus %d, gpus %d: out of "
                       "range",
                       a->job, n, a->ranks, a->nodes, a->cpus_per_rank, a->gpus_per_rank);
    if (sbatch_safe("working directory", a->cwd, err, errlen) ||
        (a->partition && sbatch_safe("partition", a->partition, err, errlen)))
        return -1;
    if (cidr_ok(a->mpi_cidr, err, errlen)) return -1;
    if (write_manifest(manifest, tasks, n, err, errlen)) return -1;
    FILE *f = open_private(script, err, errlen);
    if (!f) return -1;
    fprintf(f, "#!/bin/sh\n");
    fprintf(f,
            "# bfd: job %lld, %d trial%s as one Slurm job array; task K runs line K+1 of the "
            "manifest (written by bfd)\n",
            a->job, n, n == 1 ? "" : "s");
    fprintf(f, "#SBATCH --job-name=bf-j%lld\n", a->job);
    fprintf(f, "#SBATCH --array=0-%d\n", n - 1);
    put_resources(f, a->ranks, a->nodes, a->cpus_per_rank, a->gpus_per_rank, a->time_limit_s,
                  a->partition);
    /* each task appends to its own trial's log (below): Slurm's file is none */
    fprintf(f, "#SBATCH --output=/dev/null\n");
    fprintf(f, "#SBATCH --chdir=%s\n", a->cwd);
    fprintf(f, "#SBATCH --no-requeue\n");
    fprintf(f, "manifest=");
    put_quoted(f, manifest);
    fprintf(f, "\nhome=");
    put_quoted(f, a->home);
    fprintf(f, "\nset -- $(sed -n \"$((SLURM_ARRAY_TASK_ID + 1))p\" \"$manifest\")\n"
               "if [ $# -ne 4 ]; then\n"
               "    echo \"bfd: no task $SLURM_ARRAY_TASK_ID in $manifest\" >&2\n"
               "    exit 64\n"
               "fi\n"
               "trial=$1 attempt=$2 token=$3 stage=$4\n"
               "exec >>\"$home/logs/$trial.log\" 2>&1\n");
    put_task_env(f, a->threads, a->ranks, a->mpi_cidr);
    fprintf(f,
            "echo \"== bfd: trial $trial attempt $attempt, %d rank%s, Slurm job "
            "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID} on $(hostname)\"\n",
            a->ranks, a->ranks == 1 ? "" : "s");
    fprintf(f, "set -- ");
    put_srun(f, a->srun, a->mpi);
    fputc(' ', f);
    put_quoted(f, a->bfworker);
    fprintf(f, " run --trial \"$trial\" --connect ");
    put_quoted(f, a->endpoint);
    fprintf(f, " --token \"$token\" --out \"$home/trials/$trial\" --attempt \"$attempt\"\n"
               "if [ \"$stage\" != - ]; then\n"
               "    set -- \"$@\" --stage-root \"$home/stages\" --stage \"$stage\"\n"
               "fi\n"
               "exec \"$@\"\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        return bf_fail(err, errlen, "slurm: writing %s: %s", script, strerror(errno));
    return 0;
}

int slurm_max_array_size(const char *scontrol, int *out, char *err, size_t errlen) {
    char buf[65536];
    const char *argv[] = {scontrol, "show", "config", NULL};
    int rc = slurm_run(argv, SLURM_TIMEOUT_S, buf, sizeof buf, err, errlen);
    if (rc < 0) return -1;
    if (rc != 0)
        return bf_fail(err, errlen, "%s show config: exit status %d: %.300s", scontrol, rc, buf);
    /* "MaxArraySize            = 1001" */
    for (char *p = buf; (p = strstr(p, "MaxArraySize")); p++) {
        if (p != buf && p[-1] != '\n') continue;
        char *q = p + strlen("MaxArraySize");
        q += strspn(q, " \t");
        if (*q != '=') continue;
        long v = strtol(q + 1, NULL, 10);
        if (v < 1 || v > 4000001)
            return bf_fail(err, errlen, "%s show config: MaxArraySize %ld out of range", scontrol,
                           v);
        *out = (int)v;
        return 0;
    }
    return bf_fail(err, errlen, "%s show config: no MaxArraySize line", scontrol);
}

int slurm_array_task_of(const char *id, char array[SLURM_JOB_ID_MAX], int *task) {
    size_t n = strspn(id, "0123456789");
    if (n == 0 || n >= SLURM_JOB_ID_MAX || id[n] != '_') return -1;
    const char *t = id + n + 1;
    size_t m = strspn(t, "0123456789");
    if (m == 0 || m > 9 || t[m]) return -1;
    memcpy(array, id, n);
    array[n] = '\0';
    *task = atoi(t);
    return 0;
}

/* Applies s to the tasks of spec ("3", "4-39", "1,3,5-9", "0-99%4") below n. */
static void apply_task_spec(const char *spec, const slurm_status *s, slurm_status *st, int n) {
    const char *p = spec;
    while (*p && *p != '%') {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p) return;
        if (*end == '-') {
            const char *q = end + 1;
            b = strtol(q, &end, 10);
            if (end == q) return;
        }
        for (long k = a < 0 ? 0 : a; k <= b && k < n; k++) st[k] = *s;
        p = *end == ',' ? end + 1 : end;
        if (p == end && *p != '%' && *p) return;
    }
}

int slurm_parse_array_lines(const char *text, slurm_status *st, int n, char *err, size_t errlen) {
    for (int k = 0; k < n; k++) {
        memset(&st[k], 0, sizeof st[k]);
        st[k].phase = SLURM_UNKNOWN;
        st[k].exit_code = -1;
        snprintf(st[k].state, sizeof st[k].state, "UNKNOWN");
    }
    const char *line = text;
    while (*line) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char buf[8192];
        if (len >= sizeof buf) len = sizeof buf - 1;
        memcpy(buf, line, len);
        buf[len] = '\0';
        char spec[4096];
        if (field(buf, "ArrayTaskId", spec, sizeof spec) == 0) {
            slurm_status s;
            if (slurm_parse_job_line(buf, &s, err, errlen)) return -1;
            apply_task_spec(spec, &s, st, n);
        }
        line = nl ? nl + 1 : line + len;
    }
    return 0;
}

int slurm_query_array(const char *scontrol, const char *array_id, slurm_status *st, int n,
                      char *err, size_t errlen) {
    /* a line per started task plus one per run of pending ones: 2 KiB a line */
    size_t cap = 65536 + (size_t)n * 2048;
    char *buf = malloc(cap);
    if (!buf) return bf_fail(err, errlen, "slurm: out of memory for %d tasks", n);
    const char *argv[] = {scontrol, "show", "job", "-o", array_id, NULL};
    int rc = slurm_run(argv, SLURM_TIMEOUT_S, buf, cap, err, errlen);
    if (rc < 0) {
        free(buf);
        return -1;
    }
    int ret;
    if (rc != 0 && strstr(buf, "Invalid job id"))
        ret = slurm_parse_array_lines("", st, n, err, errlen);
    else if (rc != 0)
        ret = bf_fail(err, errlen, "%s show job %s: exit status %d: %.300s", scontrol, array_id, rc,
                      buf);
    else
        ret = slurm_parse_array_lines(buf, st, n, err, errlen);
    free(buf);
    return ret;
}

int slurm_cancel_array(const char *scancel, const char *array_id, int term, char *err,
                       size_t errlen) {
    char out[4096];
    const char *argv_pend[] = {scancel, "--state=PENDING", array_id, NULL};
    int rc = slurm_run(argv_pend, SLURM_TIMEOUT_S, out, sizeof out, err, errlen);
    if (rc < 0) return -1;
    if (rc != 0)
        return bf_fail(err, errlen, "%s --state=PENDING %s: exit status %d: %.300s", scancel,
                       array_id, rc, out);
    return slurm_cancel(scancel, array_id, term, err, errlen);
}
