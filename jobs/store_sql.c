/* store_sql.c — the statement helpers every file of the store shares (see
 * store_priv.h): prepare, step, run SQL text, transactions, the event log,
 * reading columns and whole result sets into arrays. It knows no table but
 * events and writes nothing else: what a row means belongs to the file that
 * keeps it. */
#include "jobs/store_priv.h"
#include "common/errbuf.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double store_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Connections of this process in store_busy now. SQLite's own busy
 * handler sleeps longer and longer (up to 100 ms a try) and is not fair: a
 * submit thread committing a chunk and beginning the next at once kept
 * bfd's loop out for 1.9 s (seconds of 500-trial chunks) under
 * bench_daemon --load; a writer that sees this count above its own gives
 * the lock over (store_give_way). */
static atomic_int writers_waiting;

/* Monotonic seconds (the busy wait's clock). */
static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define STORE_BUSY_S 10.0 /* then SQLITE_BUSY: the caller reports it */

int store_busy(void *ud, int count) {
    store *s = ud;
    double t = mono_now();
    if (count == 0) s->busy_since = t;
    if (!s->waiting) {
        s->waiting = 1;
        atomic_fetch_add(&writers_waiting, 1);
    }
    if (t - s->busy_since > STORE_BUSY_S) {
        store_wait_over(s);
        return 0;
    }
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    return 1;
}

void store_wait_over(store *s) {
    if (!s->waiting) return;
    s->waiting = 0;
    atomic_fetch_sub(&writers_waiting, 1);
}

int store_others_wait(const store *s) {
    return atomic_load(&writers_waiting) > (s->waiting ? 1 : 0);
}

int store_give_way(store *s, char *err, size_t errlen) {
    if (store_commit(s, err, errlen) < 0) return -1;
    double t0 = mono_now();
    struct timespec ts = {0, 1000000};
    while (store_others_wait(s) && mono_now() - t0 < 0.1) nanosleep(&ts, NULL);
    int still = store_others_wait(s);
    return store_begin(s, err, errlen) < 0 ? -1 : still;
}

int store_sqlfail(store *s, char *err, size_t errlen, const char *call) {
    return bf_fail(err, errlen, "%s: %s", call, sqlite3_errmsg(s->db));
}

int store_step_done(store *s, sqlite3_stmt *st, const char *call, char *err, size_t errlen) {
    int rc = sqlite3_step(st);
    store_done(s, st);
    return rc == SQLITE_DONE ? 0 : store_sqlfail(s, err, errlen, call);
}

int store_exec(store *s, const char *sql, char *err, size_t errlen) {
    store_wait_over(s); /* a wait of an earlier statement has ended */
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        bf_fail(err, errlen, "sqlite3_exec(%.60s...): %s", sql, msg ? msg : sqlite3_errmsg(s->db));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

/* FNV-1a of the SQL text: the cache's first comparison */
static uint64_t sql_hash(const char *sql) {
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)sql; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return h;
}

int store_prepare(store *s, const char *sql, sqlite3_stmt **st, char *err, size_t errlen) {
    /* kept statements: preparing the same text on every call cost more than
     * running it for the short reads of the loop (a job's row, a count) */
    store_wait_over(s); /* a wait of an earlier statement has ended */
    uint64_t h = sql_hash(sql);
    int held = 0;
    for (int i = 0; i < s->n_stmts; i++)
        if (s->stmts[i].hash == h && strcmp(s->stmts[i].sql, sql) == 0) {
            if (s->stmts[i].busy) {
                held = 1;
                break;
            }
            s->stmts[i].busy = 1;
            *st = s->stmts[i].st;
            return 0;
        }
    if (sqlite3_prepare_v2(s->db, sql, -1, st, NULL) != SQLITE_OK)
        return bf_fail(err, errlen, "sqlite3_prepare_v2(%.60s...): %s", sql, sqlite3_errmsg(s->db));
    char *copy = held || s->n_stmts == STORE_STMT_CACHE ? NULL : strdup(sql);
    if (copy) {
        int i = s->n_stmts++;
        s->stmts[i].hash = h;
        s->stmts[i].sql = copy;
        s->stmts[i].st = *st;
        s->stmts[i].busy = 1;
    }
    return 0;
}

void store_done(store *s, sqlite3_stmt *st) {
    if (!st) return;
    for (int i = 0; i < s->n_stmts; i++)
        if (s->stmts[i].st == st) {
            sqlite3_reset(st);
            sqlite3_clear_bindings(st);
            s->stmts[i].busy = 0;
            return;
        }
    sqlite3_finalize(st);
}

void store_stmts_free(store *s) {
    for (int i = 0; i < s->n_stmts; i++) {
        sqlite3_finalize(s->stmts[i].st);
        free(s->stmts[i].sql);
    }
    s->n_stmts = 0;
}

int store_begin(store *s, char *err, size_t errlen) {
    return store_exec(s, "BEGIN IMMEDIATE", err, errlen);
}

int store_commit(store *s, char *err, size_t errlen) {
    return store_exec(s, "COMMIT", err, errlen);
}

void store_rollback(store *s) {
    /* after a failed statement SQLite may already have rolled back; then this
     * reports "no transaction is active", which is what we wanted anyway */
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    s->n_names = 0;  /* ids inserted in the rolled-back transaction are gone */
    s->n_supers = 0; /* and so are the marks of superseded points */
}

int store_event(store *s, int64_t job, int64_t trial, const char *kind, const char *msg, char *err,
                size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(
            s, "INSERT INTO events(time, job, trial, kind, message) VALUES (?1, ?2, ?3, ?4, ?5)",
            &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_double(st, 1, store_now());
    if (job > 0) sqlite3_bind_int64(st, 2, job);
    if (trial > 0) sqlite3_bind_int64(st, 3, trial);
    sqlite3_bind_text(st, 4, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, msg ? msg : "", -1, SQLITE_STATIC);
    int rc = sqlite3_step(st) == SQLITE_DONE
                 ? 0
                 : store_sqlfail(s, err, errlen, "sqlite3_step(INSERT INTO events)");
    store_done(s, st);
    return rc;
}

char *store_col_dup(sqlite3_stmt *st, int i) {
    const unsigned char *v = sqlite3_column_text(st, i);
    return v ? strdup((const char *)v) : NULL;
}

void store_col_text(sqlite3_stmt *st, int i, char *buf, size_t len) {
    const unsigned char *v = sqlite3_column_text(st, i);
    snprintf(buf, len, "%s", v ? (const char *)v : "");
}

void *store_grow(void *p, size_t *cap, size_t used, size_t elem, size_t first) {
    if (used < *cap) return p;
    size_t nc = *cap ? 2 * *cap : first;
    void *n = realloc(p, nc * elem);
    if (n) *cap = nc;
    return n;
}

int store_rows(store *s, sqlite3_stmt *st, size_t elem, size_t first, store_row_fn row, void *ud,
               store_release_fn release, void **out, size_t *n, const char *what, char *err,
               size_t errlen) {
    char *rows = NULL;
    size_t cnt = 0, cap = 0;
    int rc, oom = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        char *g = store_grow(rows, &cap, cnt, elem, first);
        if (!g) {
            oom = 1;
            break;
        }
        rows = g;
        memset(rows + cnt * elem, 0, elem);
        row(st, rows + cnt * elem, ud);
        cnt++;
    }
    if (oom || rc != SQLITE_DONE) {
        if (oom)
            bf_fail(err, errlen, "%s: out of memory", what);
        else
            bf_fail(err, errlen, "sqlite3_step(%s): %s", what, sqlite3_errmsg(s->db));
        if (release)
            release(rows, cnt);
        else
            free(rows);
        store_done(s, st);
        return -1;
    }
    store_done(s, st);
    *out = rows;
    *n = cnt;
    return 0;
}

static void read_id(sqlite3_stmt *st, void *row, void *ud) {
    (void)ud;
    *(int64_t *)row = sqlite3_column_int64(st, 0);
}

static void read_value(sqlite3_stmt *st, void *row, void *ud) {
    (void)ud;
    *(double *)row = sqlite3_column_double(st, 0);
}

int store_collect_column(store *s, sqlite3_stmt *st, int64_t **ids, double **vals, size_t *n,
                         const char *what, char *err, size_t errlen) {
    void *arr = NULL;
    if (store_rows(s, st, ids ? sizeof **ids : sizeof **vals, 16, ids ? read_id : read_value, NULL,
                   NULL, &arr, n, what, err, errlen) < 0)
        return -1;
    if (ids)
        *ids = arr;
    else
        *vals = arr;
    return 0;
}
