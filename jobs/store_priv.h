/* store_priv — what the files of the store share and nothing outside jobs/
 * may include: the store handle and the statement helpers (store_sql.c),
 * and the few functions one file of the store lends another.
 *
 * The files, from the bottom up (each calls only the ones above it):
 *   store_sql.c       statement helpers, transactions, the event log
 *   store.c           open/close, the schema and its migrations, state names
 *   store_objectives.c  a job's objectives (its `metric:` list) as text
 *   store_points.c    metric points: insert, history, series, copies
 *   store_adaptive.c  early-stopping decisions and ASHA rungs
 *   store_trials.c    trials: reads and the state machine (every edge)
 *   store_stages.c    the shared stages of s2s trials: plans, claims, waits
 *   store_prune.c     removing jobs: marks, chunked deletes, gc candidates
 *   store_jobs.c      jobs: submit, proposals, reads, cancel, counts
 *
 * Every function returns 0 on success or -1 with a message in err (which
 * names the SQLite call and carries SQLite's own text), as store.h says; the
 * ones marked "in the caller's transaction" neither begin nor end one. */
#ifndef STORE_PRIV_H
#define STORE_PRIV_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs/store.h"

#define STORE_NAME_CACHE 256
#define STORE_SUPER_CACHE 256
#define STORE_STMT_CACHE 128

/* The handle: the connection, the statements prepared once at open (the hot
 * paths: metric inserts and the plan rows of a submit), a cache of metric
 * name ids (emptied by store_rollback, as the ids may be gone), and the
 * statements store_prepare kept by their SQL text (finalized by
 * store_close; busy while a caller holds one, so a nested call of the same
 * SQL gets a statement of its own). */
struct store {
    sqlite3 *db;
    sqlite3_stmt *ins_metric, *upd_latest, *get_name, *ins_name, *trial_exists, *ins_plan;
    struct {
        char name[64];
        int64_t id;
    } names[STORE_NAME_CACHE];
    int n_names;
    /* (trial, attempt, metric name id): the earlier attempts' points of that
     * name are superseded from step `from` on (store_points.c), so a later
     * batch of the same attempt needs no UPDATE; emptied by store_rollback */
    struct {
        int64_t trial, name, from;
        int attempt;
    } supers[STORE_SUPER_CACHE];
    int n_supers, next_super;
    struct {
        uint64_t hash;
        char *sql;
        sqlite3_stmt *st;
        int busy;
    } stmts[STORE_STMT_CACHE];
    int n_stmts;
    /* this connection waits in store_busy for the write lock (counted in
     * the process's writers waiting until the wait ends: store_wait_over) */
    int waiting;
    double busy_since;     /* monotonic, when the wait began */
    const char *full_path; /* BF_TEST_STORE_FULL (tests only), NULL when unset */
};

/* ------------------------------------------------ store_sql.c: statements */

/* The busy handler of every connection (sqlite3_busy_handler, ud the
 * store): waits for the lock in 1 ms steps, at most 10 s, counted as a
 * writer waiting while it does (store_others_wait). */
int store_busy(void *ud, int count);
/* This connection's wait for the lock is over (it got it or gave up):
 * no longer counted. Called by its next statement and its commit hook. */
void store_wait_over(store *s);
/* 1 when another connection of this process waits for the write lock that
 * s holds: a long writer commits and lets it in (store_give_way). */
int store_others_wait(const store *s);
/* Commits s's transaction, waits (at most 100 ms) until no other
 * connection of this process waits for the lock, and begins the next one:
 * a long writer's way of letting the loop's short ones in. 0, or 1 when
 * one still counts as waiting after the 100 ms (a count left by a wait
 * whose connection has not run a statement since), -1 on error. */
int store_give_way(store *s, char *err, size_t errlen);

double store_now(void); /* unix seconds */
/* Fills err with "CALL: sqlite's message"; returns -1. */
int store_sqlfail(store *s, char *err, size_t errlen, const char *call);
/* Steps a statement that returns no row and gives it back (store_done): 0,
 * or -1 with "CALL: sqlite's message". */
int store_step_done(store *s, sqlite3_stmt *st, const char *call, char *err, size_t errlen);
/* Runs SQL text (one or more statements, no parameters). */
int store_exec(store *s, const char *sql, char *err, size_t errlen);
/* A statement of sql into *st, the one kept from an earlier call when it is
 * free (reset, its bindings cleared), else newly prepared and kept while
 * the cache has room. The caller gives it back with store_done, never
 * sqlite3_finalize. */
int store_prepare(store *s, const char *sql, sqlite3_stmt **st, char *err, size_t errlen);
/* Gives back a statement of store_prepare: a kept one is reset for the next
 * call, another finalized. NULL is a no-op. */
void store_done(store *s, sqlite3_stmt *st);
/* Finalizes every kept statement (store_close). */
void store_stmts_free(store *s);
/* BEGIN IMMEDIATE / COMMIT. A caller that fails between them calls
 * store_rollback, which also forgets the cached metric name ids. */
int store_begin(store *s, char *err, size_t errlen);
int store_commit(store *s, char *err, size_t errlen);
void store_rollback(store *s);
/* Appends an event (job, trial <= 0: none; msg NULL: ""), in the caller's
 * transaction. */
int store_event(store *s, int64_t job, int64_t trial, const char *kind, const char *msg, char *err,
                size_t errlen);

/* Column i as a malloc'd string (NULL when NULL), or copied into buf ("" when
 * NULL, cut to fit). */
char *store_col_dup(sqlite3_stmt *st, int i);
void store_col_text(sqlite3_stmt *st, int i, char *buf, size_t len);

/* Room for element `used` of a growing array p of elem-byte elements whose
 * capacity is *cap (doubled, from `first`): returns the array, moved or not,
 * or NULL when out of memory (p is then unchanged and still the caller's). */
void *store_grow(void *p, size_t *cap, size_t used, size_t elem, size_t first);

typedef void (*store_row_fn)(sqlite3_stmt *st, void *row, void *ud);
typedef void (*store_release_fn)(void *rows, size_t n);
/* Every row of st into a new array of elem-byte elements (room for `first`,
 * then doubled), each zeroed and then filled by row(st, element, ud). st is
 * given back. Returns 0 with *out (malloc'd, the caller's; NULL when there is
 * no row) and *n, or -1 with "WHAT: out of memory" or "sqlite3_step(WHAT):
 * sqlite's message", after release(rows, count) (free when NULL) disposed of
 * what was read. */
int store_rows(store *s, sqlite3_stmt *st, size_t elem, size_t first, store_row_fn row, void *ud,
               store_release_fn release, void **out, size_t *n, const char *what, char *err,
               size_t errlen);
/* Column 0 of every row of st into a new array: int64 into *ids, or double
 * into *vals (the other NULL); *n elements. st is given back. Returns 0, or -1
 * with a message naming `what` (the query, or the caller when out of memory). */
int store_collect_column(store *s, sqlite3_stmt *st, int64_t **ids, double **vals, size_t *n,
                         const char *what, char *err, size_t errlen);

/* ------------------------------------------ store.c: the names of states */

/* The stage state a stages.state text names (STAGE_PENDING when none). */
stage_state store_stage_state_of(const unsigned char *text);
/* "avit 3f2a91c0…": a stage as messages name it. */
void store_stage_label(char *buf, size_t n, const char *name, const char *key);

/* ------------------------------------ store_objectives.c: objectives */

/* The objectives of spec as the JSON array text jobs.objectives holds, into
 * buf; -1 when it does not fit. */
int store_objectives_text(const sweep_spec *spec, char *buf, size_t len);
/* Reads that text back into out[*n]: 0, or -1 when it is not such a list
 * (*n then 0). */
int store_objectives_parse(const char *text, sweep_objective out[SWEEP_MAX_OBJECTIVES], int *n);

/* ---------------------------------------------- store_points.c: points */

/* Copies the points of `from` whose names are under "eval/" to `to`, after
 * to's own sequence numbers, and updates to's latest values; in the
 * caller's transaction. */
int store_copy_eval_points(store *s, int64_t from, int64_t to, char *err, size_t errlen);

/* ------------------------------------------------ store_jobs.c: trials */

#define STORE_INSERT_TRIAL                                                                         \
    "INSERT INTO trials(job, idx, state, attempts, hash, params, config, updated, point)"          \
    " VALUES (?1, ?2, 'PENDING', 0, ?3, ?4, ?5, ?6, ?7)"

/* One PENDING trial t of job through st (prepared from STORE_INSERT_TRIAL;
 * the caller gives it back), with its sampler point (NULL: none) and its
 * stage plan, in the caller's transaction; *id its row. */
int store_insert_trial(store *s, sqlite3_stmt *st, int64_t job, const sweep_trial *t,
                       double updated, const char *point_json, int64_t *id, char *err,
                       size_t errlen);

/* ------------------------------------ store_trials.c: the state machine */

/* Moves trial to `to` in the caller's transaction: the edge checked against
 * its state (store_transition_legal) and, for FAILED -> PENDING, the job's
 * retries; the attempt row started or ended, the stage its attempt runs
 * moved along, and a "state" (or "preempt") event. stage_done: a RUNNING ->
 * PENDING that finished the attempt's stage (store_trial_stage_done), not a
 * preemption. The only writer of trials.state. */
int store_transition(store *s, int64_t trial, trial_state to, const char *message, int stage_done,
                     char *err, size_t errlen);

/* ------------------------------------------ store_stages.c: the stages */

/* Writes the stage plan of trial (config c) when it is an s2s trial; nothing
 * for other pipelines. In the caller's transaction. */
int store_put_plan(store *s, int64_t trial, const bf_config *c, char *err, size_t errlen);

#endif
