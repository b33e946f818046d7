/* it_bfd — what the integration tests do with a real bfd: a temporary
 * BF_HOME, the WordNet-gloss fixtures, bfd started and waited for, bfctl
 * run, sweep files written, and the SQLite store read back directly.
 * Header-only (static inline), like it_proc.h; failures are Criterion
 * assertions. */
#ifndef BF_TESTS_IT_BFD_H
#define BF_TESTS_IT_BFD_H

#include <jansson.h>
#include <sqlite3.h>

#include "it_proc.h"

#define IT_BFD BF_BIN_DIR "/bfd"
#define IT_BFCTL BF_BIN_DIR "/bfctl"

/* Makes a temporary directory from tmpl (into dir[dirlen]) with a BF_HOME
 * below it, dir/home, mode 0700 (into home[homelen]), and points BF_HOME at
 * it. */
static inline void it_bfd_home(char *dir, size_t dirlen, char *home, size_t homelen,
                               const char *tmpl) {
    tmpdir_make(dir, dirlen, tmpl);
    snprintf(home, homelen, "%s/home", dir);
    cr_assert_eq(mkdir(home, 0700), 0, "mkdir %s: %s", home, strerror(errno));
    setenv("BF_HOME", home, 1);
}

/* Starts `bfd --home HOME` with its output in dir/bfd.log and waits until
 * `bfctl daemon status` answers (10 s at most); returns bfd's pid. */
static inline pid_t it_bfd_start(const char *dir, const char *home) {
    char logp[512];
    snprintf(logp, sizeof logp, "%s/bfd.log", dir);
    char *argv[] = {IT_BFD, "--home", (char *)home, NULL};
    pid_t pid = it_spawn(logp, argv, 0);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "BF_HOME=%s " IT_BFCTL " daemon status > /dev/null 2>&1", home);
    double t0 = it_now_s();
    while (system(cmd) != 0) {
        cr_assert(it_now_s() - t0 < 10, "bfd did not come up (see %s)", logp);
        it_sleep_s(0.05);
    }
    return pid;
}

/* Runs `bfctl ARGS` in dir (stderr appended to dir/bfctl.err); returns its
 * exit status, and at most outlen - 1 bytes of its stdout in out (when out
 * is not NULL). */
static inline int it_bfctl(const char *dir, char *out, size_t outlen, const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd %s && " IT_BFCTL " %s 2>>%s/bfctl.err", dir, args, dir);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    size_t n = out ? fread(out, 1, outlen - 1, p) : 0;
    if (out) out[n] = '\0';
    char sink[4096];
    while (!out && fread(sink, 1, sizeof sink, p) > 0) {
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `bfctl submit SWEEP` run in dir, which must succeed; returns the job id. */
static inline long long it_submit(const char *dir, const char *sweep) {
    char out[256], args[600];
    snprintf(args, sizeof args, "submit %s", sweep);
    cr_assert_eq(it_bfctl(dir, out, sizeof out, args), 0, "submit %s failed", sweep);
    return atoll(out);
}

/* Writes dir/NAME.yaml: a CPU BudgetFormer sweep of n_seeds trials (train.seed
 * 1..n_seeds) training `steps` steps on dir/train.tsv and dir/val.tsv,
 * logging every 5 steps and checkpointing every 50, then the YAML in extra
 * (more top-level keys, or ""). Returns the path (a static buffer). */
static inline const char *it_write_sweep(const char *dir, const char *name, int n_seeds, int steps,
                                         const char *extra) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s.yaml", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert(f, "cannot write %s: %s", p, strerror(errno));
    fprintf(f,
            "name: %s\npipeline: budgetformer\ndevice: cpu\n"
            "data: {train: %s/train.tsv, val: %s/val.tsv}\n"
            "model: {layers: 1, d_model: 32, heads: 4, seq_len: 16, vocab: 256}\n"
            "train: {steps: %d, batch: 8, log_every: 5, eval_every: 100000, "
            "checkpoint_every: 50}\n"
            "sweep:\n  parameters:\n    train.seed: {values: [",
            name, dir, dir, steps);
    for (int i = 0; i < n_seeds; i++) fprintf(f, "%s%d", i ? ", " : "", i + 1);
    fprintf(f, "]}\nmetric: {name: train/loss, goal: min}\n%s", extra);
    cr_assert_eq(fclose(f), 0);
    return p;
}

/* ------------------------------------------------------ the store, read back */

/* home/bf.db opened read-only, waiting up to 5 s on bfd's locks. */
/* Kills (SIGKILL, whole process group) every worker bfd recorded in home's
 * store: a test's teardown, so no trial outlives its test. */
static inline void it_kill_workers(const char *home) {
    char p[512];
    snprintf(p, sizeof p, "%s/bf.db", home);
    sqlite3 *db;
    if (sqlite3_open_v2(p, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db, "SELECT pid FROM bfd_runs", -1, &st, NULL) == SQLITE_OK) {
            while (sqlite3_step(st) == SQLITE_ROW)
                if (sqlite3_column_int64(st, 0) > 0)
                    kill(-(pid_t)sqlite3_column_int64(st, 0), SIGKILL);
            sqlite3_finalize(st);
        }
    }
    sqlite3_close(db);
}

/* Runs sql on home/bf.db beside bfd (a read-write connection of the test's
 * own). */
static inline void it_db_exec(const char *home, const char *sql) {
    char p[512], *msg = NULL;
    snprintf(p, sizeof p, "%s/bf.db", home);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(p, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s", sql, msg);
    sqlite3_close(db);
}

static inline sqlite3 *it_db_open(const char *home) {
    char p[512];
    snprintf(p, sizeof p, "%s/bf.db", home);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(p, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

/* Runs sql with ?1 bound to arg and returns the statement, its first row
 * stepped to: SQLITE_ROW in *rc when there is one. */
static inline sqlite3_stmt *it_db_query(sqlite3 *db, const char *sql, long long arg, int *rc) {
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    sqlite3_bind_int64(st, 1, arg);
    *rc = sqlite3_step(st);
    return st;
}

/* The integer in the first column of sql's first row (?1 = arg), or -1
 * when there is no row. */
static inline long long it_db_int(const char *home, const char *sql, long long arg) {
    sqlite3 *db = it_db_open(home);
    int rc;
    sqlite3_stmt *st = it_db_query(db, sql, arg, &rc);
    long long v = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* The text in the first column of sql's first row (?1 = arg) into buf, or
 * "" when there is no row or it is NULL. */
static inline void it_db_text(const char *home, const char *sql, long long arg, char *buf,
                              size_t len) {
    sqlite3 *db = it_db_open(home);
    int rc;
    sqlite3_stmt *st = it_db_query(db, sql, arg, &rc);
    buf[0] = '\0';
    if (rc == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(buf, len, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* Polls it_db_int(home, sql, arg) every 0.1 s until it is at least at_least;
 * fails after timeout seconds, naming `what` and dir/bfd.log. */
static inline void it_db_wait(const char *dir, const char *home, const char *what, const char *sql,
                              long long arg, long long at_least, double timeout) {
    double t0 = it_now_s();
    while (it_db_int(home, sql, arg) < at_least) {
        cr_assert(it_now_s() - t0 < timeout, "timed out waiting for %s (see %s/bfd.log)", what,
                  dir);
        it_sleep_s(0.1);
    }
}

/* Reads home/trials/TRIAL/metrics.jsonl: its lines in *lines and the numeric
 * values other than step and time in *values. A line that is not JSON fails
 * the test, unless cut_ok (a worker killed mid-write leaves one; it counts as
 * a line with no values). The file must exist. */
static inline void it_metrics_file(const char *home, long long trial, int cut_ok, long long *lines,
                                   long long *values) {
    char p[512];
    snprintf(p, sizeof p, "%s/trials/%lld/metrics.jsonl", home, trial);
    FILE *f = fopen(p, "r");
    cr_assert(f, "no %s", p);
    *lines = *values = 0;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        (*lines)++;
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        if (!o && cut_ok) continue;
        cr_assert(o, "%s:%lld: %s", p, *lines, je.text);
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v) if (strcmp(k, "step") && strcmp(k, "time") &&
                                         json_is_number(v))(*values)++;
        json_decref(o);
    }
    fclose(f);
}

#endif
