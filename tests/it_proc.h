/* it_proc — what the integration tests (tests/test_it_*.c) do with real
 * processes and files: clocks and sleeps, child processes with their output
 * in a log, waits with a timeout, files read whole, copied, counted, and the
 * tail of a log shown when something failed. Header-only (static inline):
 * every tests/test_*.c is a program of its own. Failures are Criterion
 * assertions, so these are for test code only. */
#ifndef BF_TESTS_IT_PROC_H
#define BF_TESTS_IT_PROC_H

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

#include "tmpdir.h"

/* ------------------------------------------------------------------ clocks */

/* Seconds on the monotonic clock. */
static inline double it_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void it_sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* The environment the test's bfworker and mpirun children need: mpirun may
 * run as root (containers), one OpenMP thread per process. */
static inline void it_worker_env(void) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
}

/* ------------------------------------------------------------------- files */

/* Everything f has left to read, NUL-terminated (malloc'd; the caller frees),
 * its length in *len when len is not NULL. */
static inline char *it_read_stream(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
    }
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

/* The whole file, NUL-terminated (malloc'd; the caller frees), its length in
 * *len; NULL (and *len 0) when it cannot be opened. */
static inline char *it_slurp(const char *path, size_t *len) {
    if (len) *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = it_read_stream(f, len);
    fclose(f);
    return s;
}

static inline void it_copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    cr_assert(a && b, "copy %s -> %s: %s", from, to, strerror(errno));
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) cr_assert_eq(fwrite(buf, 1, n, b), n);
    fclose(a);
    cr_assert_eq(fclose(b), 0);
}

/* Writes text to path and gives it mode. */
static inline void it_write_text(const char *path, const char *text, mode_t mode) {
    tmpdir_write(path, text, strlen(text));
    cr_assert_eq(chmod(path, mode), 0, "chmod %s: %s", path, strerror(errno));
}

/* Copies the shipped gloss fixtures to dir/train.tsv and dir/val.tsv. */
static inline void it_copy_glosses(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s/train.tsv", dir);
    it_copy_file(BF_SOURCE_DIR "/tests/data/glosses_train.tsv", p);
    snprintf(p, sizeof p, "%s/val.tsv", dir);
    it_copy_file(BF_SOURCE_DIR "/tests/data/glosses_val.tsv", p);
}

/* Number of '\n' in s. */
static inline long it_count_newlines(const char *s) {
    long n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Number of lines in the file at path; 0 when it does not exist (yet). */
static inline int it_count_lines(const char *path) {
    char *s = it_slurp(path, NULL);
    if (!s) return 0;
    int n = (int)it_count_newlines(s);
    free(s);
    return n;
}

/* Number of lines of the file at path that contain needle; the file must
 * exist. */
static inline int it_count_lines_with(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    cr_assert(f, "no %s", path);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle)) n++;
    fclose(f);
    return n;
}

/* Prints the last `max` bytes of a file to stderr (a failed run's log). */
static inline void it_show_tail(const char *path, long max) {
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

/* --------------------------------------------------------------- processes */

/* Starts argv (argv[0] a path, or a name looked up in PATH) with stdout and
 * stderr appended to log; returns the pid. With own_group the child leads a
 * process group of its own, so kill(-pid, ...) ends it and all it started. */
static inline pid_t it_spawn(const char *log, char *const argv[], int own_group) {
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        if (own_group) setpgid(0, 0);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    if (own_group) setpgid(pid, pid);
    return pid;
}

/* Waits up to timeout seconds for pid to end. Returns 0 with its wait status
 * in *status, 1 when it is still running (not signalled), -1 when waitpid
 * fails (errno says why). */
static inline int it_wait_pid(pid_t pid, double timeout, int *status) {
    double end = it_now_s() + timeout;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid) return 0;
        if (r < 0 && errno != EINTR) return -1;
        if (it_now_s() > end) return 1;
        it_sleep_s(0.005);
    }
}

/* Sends sig to *pid and reaps it; then *pid is -1. Nothing when *pid <= 0. */
static inline void it_stop(pid_t *pid, int sig) {
    if (*pid <= 0) return;
    kill(*pid, sig);
    waitpid(*pid, NULL, 0);
    *pid = -1;
}

/* Waits up to timeout seconds for the file at path (a socket a server
 * creates) while pid runs. Returns 0 once it exists, 1 when pid ended first
 * (reaped), -1 on timeout. */
static inline int it_wait_file(const char *path, pid_t pid, double timeout) {
    double end = it_now_s() + timeout;
    for (;;) {
        struct stat sb;
        if (stat(path, &sb) == 0) return 0;
        if (waitpid(pid, NULL, WNOHANG) == pid) return 1;
        if (it_now_s() > end) return -1;
        it_sleep_s(0.05);
    }
}

#endif
