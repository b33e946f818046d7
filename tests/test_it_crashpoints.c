/* Crash points: bfd is killed with SIGKILL at 20 random moments of a
 * 4-trial sweep (started again each time, as a supervisor would), and one
 * worker is killed with SIGKILL too. Every trial must complete, and every
 * trial's stored points must equal its metrics.jsonl line for line: line k
 * is seq k, each of its values is stored once with that step and exactly
 * that value, nothing else is stored (nothing lost, nothing twice, no value
 * changed). The moments come from a seed printed at the start: a fixed
 * one (CRASH_SEED), so every run of the suite tries the same moments, or
 * BF_CRASH_SEED=N to try others (and to repeat a run that failed). */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "it_bfd.h"

#define KILLS 20
#define TRIALS 4
#define STEPS 2500
#define CRASH_SEED 37 /* the default moments; BF_CRASH_SEED=N tries others */

static char g_dir[256], g_home[320];
static pid_t g_bfd = -1;

static void setup(void) {
    it_worker_env();
    it_bfd_home(g_dir, sizeof g_dir, g_home, sizeof g_home, "/tmp/bf-itc-XXXXXX");
    it_copy_glosses(g_dir);
    it_write_text(tmpdir_path(g_home, "bfd.yaml"),
                  "slots: 2\nheartbeat_timeout: 10\nheartbeat_interval: 0.2\nkill_grace: 2\n",
                  0644);
}

static void teardown(void) {
    it_stop(&g_bfd, SIGKILL);
    it_kill_workers(g_home);
    if (tmpdir_remove(g_dir)) { /* nothing left to clean is fine */
    }
}

TestSuite(crashpoints, .init = setup, .fini = teardown, .timeout = 300);

/* xorshift64*: the test's own reproducible randomness */
static uint64_t g_rng;
static double uniform(double lo, double hi) {
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return lo + (hi - lo) * (double)((g_rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

typedef struct row {
    long long seq, step;
    char name[64];
    double value;
} row;

static int row_cmp(const void *a, const void *b) {
    const row *x = a, *y = b;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The rows metrics.jsonl of trial says should be stored, sorted by (seq,
 * name): line k is seq k; a line cut by a kill (not JSON) has none. */
static row *file_rows(long long trial, size_t *n, long long *lines) {
    char p[512];
    snprintf(p, sizeof p, "%s/trials/%lld/metrics.jsonl", g_home, trial);
    FILE *f = fopen(p, "r");
    cr_assert(f, "no %s", p);
    size_t cap = 1024;
    row *r = malloc(cap * sizeof *r);
    *n = 0;
    *lines = 0;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        (*lines)++;
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        if (!o) continue;
        long long step = json_integer_value(json_object_get(o, "step"));
        const char *k;
        json_t *v;
        json_object_foreach(o, k, v) {
            if (!strcmp(k, "step") || !strcmp(k, "time") || !json_is_number(v)) continue;
            if (*n == cap) r = realloc(r, (cap *= 2) * sizeof *r);
            cr_assert(r);
            r[*n].seq = *lines;
            r[*n].step = step;
            snprintf(r[*n].name, sizeof r[*n].name, "%s", k);
            r[*n].value = json_number_value(v);
            (*n)++;
        }
        json_decref(o);
    }
    fclose(f);
    qsort(r, *n, sizeof *r, row_cmp);
    return r;
}

/* The rows the store holds for trial, sorted by (seq, name). */
static row *db_rows(long long trial, size_t *n) {
    sqlite3 *db = it_db_open(g_home);
    int rc;
    sqlite3_stmt *st = it_db_query(db,
                                   "SELECT m.seq, m.step, n.name, m.value FROM metrics m "
                                   "JOIN metric_names n ON n.id = m.name WHERE m.trial = ?1",
                                   trial, &rc);
    size_t cap = 1024;
    row *r = malloc(cap * sizeof *r);
    *n = 0;
    for (; rc == SQLITE_ROW; rc = sqlite3_step(st)) {
        if (*n == cap) r = realloc(r, (cap *= 2) * sizeof *r);
        cr_assert(r);
        r[*n].seq = sqlite3_column_int64(st, 0);
        r[*n].step = sqlite3_column_int64(st, 1);
        snprintf(r[*n].name, sizeof r[*n].name, "%s", (const char *)sqlite3_column_text(st, 2));
        r[*n].value = sqlite3_column_double(st, 3);
        (*n)++;
    }
    cr_assert_eq(rc, SQLITE_DONE, "%s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_close(db);
    qsort(r, *n, sizeof *r, row_cmp);
    return r;
}

/* Lines in home/trials/TRIAL/metrics.jsonl (0 when there is none yet). */
static long long file_lines(long long trial) {
    char p[512];
    snprintf(p, sizeof p, "%s/trials/%lld/metrics.jsonl", g_home, trial);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    long long n = 0;
    for (int c; (c = getc(f)) != EOF;) n += c == '\n';
    fclose(f);
    return n;
}

/* Kills (SIGKILL) the first worker bfd recorded that is still alive and has
 * written less than half its steps (its own metrics.jsonl: the store lags
 * while bfd is down, and on a fast machine a trial is over in about two
 * seconds); returns its trial, or 0 when there is none now. */
static long long young_worker(void) {
    sqlite3 *db = it_db_open(g_home);
    int rc;
    sqlite3_stmt *st = it_db_query(
        db, "SELECT trial, pid FROM bfd_runs WHERE pid > 0 AND ?1 > 0 ORDER BY trial", 1, &rc);
    long long found = 0;
    for (; rc == SQLITE_ROW && !found; rc = sqlite3_step(st)) {
        long long trial = sqlite3_column_int64(st, 0), pid = sqlite3_column_int64(st, 1);
        /* log_every 5 (it_write_sweep): a line per 5 steps */
        /* a pid whose process is gone fails the kill (ESRCH): the next row */
        if (file_lines(trial) * 5 < STEPS / 2 && kill((pid_t)pid, SIGKILL) == 0) found = trial;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return found;
}

Test(crashpoints, bfd_killed_at_random_moments_loses_nothing) {
    const char *env = getenv("BF_CRASH_SEED");
    uint64_t seed = CRASH_SEED;
    if (env && *env) {
        char *end;
        errno = 0;
        seed = strtoull(env, &end, 10);
        cr_assert(!*end && !errno && *env != '-',
                  "BF_CRASH_SEED='%s' is not a decimal number from 0 to 2^64-1", env);
    }
    g_rng = seed * 0x9E3779B97F4A7C15ull + 1;
    fprintf(stderr, "crashpoints: seed %llu (BF_CRASH_SEED=%llu repeats this run)\n",
            (unsigned long long)seed, (unsigned long long)seed);
    g_bfd = it_bfd_start(g_dir, g_home);
    long long job = it_submit(g_dir, it_write_sweep(g_dir, "crash", TRIALS, STEPS, "retries: 3\n"));
    long long killed_trial = 0;
    int worker_killed = 0, kills = 0;
    double t0 = it_now_s();
    /* KILLS kills, and more (at most 4 x KILLS) until one found a worker to
     * kill too: under load the workers may all be starting, or done, at the
     * first KILLS moments */
    while (kills < KILLS || (!worker_killed && kills < 4 * KILLS)) {
        it_sleep_s(uniform(0.05, 0.9));
        it_stop(&g_bfd, SIGKILL);
        kills++;
        /* once: a worker too, while bfd is down; a live one far from its
         * last step, so it has not finished (and left its outcome) already */
        if (!worker_killed && (killed_trial = young_worker()) > 0) worker_killed = 1;
        it_sleep_s(uniform(0.0, 0.4)); /* workers go on alone for a moment */
        g_bfd = it_bfd_start(g_dir, g_home);
    }
    fprintf(stderr, "crashpoints: %d kills of bfd in %.1f s, worker killed: %s\n", kills,
            it_now_s() - t0, worker_killed ? "yes" : "no");
    cr_assert(worker_killed, "no worker was running to kill");
    char args[64];
    snprintf(args, sizeof args, "wait %lld", job);
    int wrc = it_bfctl(g_dir, NULL, 0, args);
    if (wrc != 0) {
        it_show_tail(tmpdir_path(g_dir, "bfd.log"), 4000);
        for (long long t = 1; t <= TRIALS; t++) {
            char lp[512];
            snprintf(lp, sizeof lp, "%s/logs/%lld.log", g_home, t);
            it_show_tail(lp, 1500);
        }
    }
    cr_assert_eq(wrc, 0, "the sweep did not complete (bfd.log above)");
    const char *logp = tmpdir_path(g_dir, "bfd.log");
    fprintf(stderr,
            "crashpoints: %d reattaches, %d attempts ended while bfd was down (outcome file), "
            "%d lost attempts retried\n",
            it_count_lines_with(logp, "reattaching"),
            it_count_lines_with(logp, "while bfd was down") -
                it_count_lines_with(logp, "worker gone while bfd was down"),
            it_count_lines_with(logp, "failed: "));
    cr_assert_eq(it_db_int(g_home,
                           "SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = "
                           "'COMPLETED'",
                           job),
                 TRIALS);
    cr_assert_geq(it_db_int(g_home, "SELECT attempts FROM trials WHERE id = ?1", killed_trial), 2,
                  "the killed worker's trial %lld was not retried", killed_trial);
    for (long long t = 1; t <= TRIALS; t++) {
        size_t nf, nd;
        long long lines;
        row *f = file_rows(t, &nf, &lines);
        row *d = db_rows(t, &nd);
        cr_assert_eq(nd, nf, "trial %lld: %zu rows stored, %zu values in its %lld lines", t, nd, nf,
                     lines);
        for (size_t i = 0; i < nf; i++)
            cr_assert(d[i].seq == f[i].seq && d[i].step == f[i].step &&
                          strcmp(d[i].name, f[i].name) == 0 && d[i].value == f[i].value,
                      "trial %lld: stored (seq %lld, step %lld, %s = %.17g), metrics.jsonl has "
                      "(seq %lld, step %lld, %s = %.17g)",
                      t, d[i].seq, d[i].step, d[i].name, d[i].value, f[i].seq, f[i].step, f[i].name,
                      f[i].value);
        cr_assert_eq(it_db_int(g_home, "SELECT MAX(step) FROM metrics WHERE trial = ?1", t), STEPS);
        free(f);
        free(d);
    }
}
