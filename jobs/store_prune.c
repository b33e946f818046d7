/* store_prune.c — removing jobs from the store: the jobs `gc` may remove,
 * marking one for removal (hidden from every reader at once), and the
 * removal itself, a chunk of trials per call, each chunk one short
 * transaction (its points, latest values, attempts, decisions, events and
 * stage plans with it), so a 100,000-trial job never holds the write lock
 * for long. A shared stage still in the plan of a kept trial is kept (its
 * runner forgotten when that runner goes), except a last stage (eval) run
 * by a removed trial, whose points went with it; one nobody uses any more
 * goes; the folders of the stages that go are named to the caller. It removes no file itself. */
#include "jobs/store_priv.h"
#include "common/errbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int store_prune_mark(store *s, int64_t job, int keep_files, char *err, size_t errlen) {
    if (store_begin(s, err, errlen) < 0) return -1;
    sqlite3_stmt *st;
    if (store_prepare(s, "UPDATE jobs SET hidden = ?2 WHERE id = ?1", &st, err, errlen) < 0) {
        store_rollback(s);
        return -1;
    }
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int(st, 2, keep_files ? STORE_HIDDEN_REMOVE_KEEP : STORE_HIDDEN_REMOVE);
    if (store_step_done(s, st, "sqlite3_step(UPDATE jobs SET hidden)", err, errlen) < 0 ||
        store_commit(s, err, errlen) < 0) {
        store_rollback(s);
        return -1;
    }
    return 0;
}

int store_prune_abandoned(store *s, int *n, char *err, size_t errlen) {
    *n = 0;
    sqlite3_stmt *st;
    if (store_prepare(s, "UPDATE jobs SET hidden = 2 WHERE hidden = 1", &st, err, errlen) < 0)
        return -1;
    if (store_step_done(s, st, "sqlite3_step(UPDATE jobs SET hidden = 2)", err, errlen) < 0)
        return -1;
    *n = sqlite3_changes(s->db);
    return 0;
}

int store_prune_pending(store *s, int *any, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s, "SELECT EXISTS (SELECT 1 FROM jobs WHERE hidden >= 2)", &st, err, errlen) <
        0)
        return -1;
    int rc = sqlite3_step(st);
    *any = rc == SQLITE_ROW && sqlite3_column_int(st, 0);
    store_done(s, st);
    return rc == SQLITE_ROW ? 0 : store_sqlfail(s, err, errlen, "sqlite3_step(SELECT hidden)");
}

/* Runs sql with ?1 bound to the JSON array text ids (and ?2 to job), in the
 * caller's transaction. */
static int exec_ids(store *s, const char *sql, const char *ids, int64_t job, char *err,
                    size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s, sql, &st, err, errlen) < 0) return -1;
    if (ids) sqlite3_bind_text(st, 1, ids, -1, SQLITE_STATIC);
    if (job > 0) sqlite3_bind_int64(st, 2, job);
    return store_step_done(s, st, sql, err, errlen);
}

/* ids as a JSON array text "[1,2,3]" (malloc'd), for json_each. */
static char *ids_json(const int64_t *ids, size_t n) {
    char *buf = malloc(n * 21 + 3);
    if (!buf) return NULL;
    size_t at = 0;
    buf[at++] = '[';
    for (size_t i = 0; i < n; i++)
        at += (size_t)sprintf(buf + at, "%s%lld", i ? "," : "", (long long)ids[i]);
    buf[at++] = ']';
    buf[at] = '\0';
    return buf;
}

static void read_dir(sqlite3_stmt *st, void *row, void *ud) {
    (void)ud;
    store_col_text(st, 0, row, sizeof(store_stage_dir));
}

/* The trials of one chunk and what names them, in the caller's
 * transaction; the folders of stages nobody plans any more into out. */
static int delete_trials(store *s, const char *ids, store_pruned *out, char *err, size_t errlen) {
#define IN_IDS " IN (SELECT value FROM json_each(?1))"
    /* the keys these trials plan: those nobody else plans go below */
    if (store_exec(s,
                   "CREATE TEMP TABLE IF NOT EXISTS prune_keys(key TEXT PRIMARY KEY) WITHOUT ROWID;"
                   "DELETE FROM temp.prune_keys",
                   err, errlen) < 0)
        return -1;
    /* a kept last stage (eval) run by a removed trial goes too, folder and
     * all: a trial that reuses it copies its runner's points, which are
     * removed, so it must run again (a folder left would be reused as done) */
    const char *last_run = " FROM stages WHERE trial" IN_IDS " AND key IN (SELECT key FROM"
                           " trial_stages ts WHERE NOT EXISTS (SELECT 1 FROM trial_stages n"
                           " WHERE n.trial = ts.trial AND n.idx = ts.idx + 1))";
    char q[512];
    sqlite3_stmt *st;
    snprintf(q, sizeof q, "SELECT dir%s", last_run);
    if (store_prepare(s, q, &st, err, errlen) < 0) return -1;
    sqlite3_bind_text(st, 1, ids, -1, SQLITE_STATIC);
    void *last_dirs = NULL;
    size_t n_last = 0;
    if (store_rows(s, st, sizeof(store_stage_dir), 8, read_dir, NULL, NULL, &last_dirs, &n_last,
                   "SELECT last stages run", err, errlen) < 0)
        return -1;
    snprintf(q, sizeof q, "DELETE%s", last_run);
    if (exec_ids(s, q, ids, 0, err, errlen) < 0) {
        free(last_dirs);
        return -1;
    }
    static const char *const sql[] = {
        "INSERT OR IGNORE INTO temp.prune_keys SELECT key FROM trial_stages WHERE trial" IN_IDS,
        "DELETE FROM trial_stages WHERE trial" IN_IDS,
        /* a kept stage whose runner goes: done stays done for the trials of
         * other jobs that plan it */
        "UPDATE stages SET trial = NULL WHERE trial" IN_IDS,
        "DELETE FROM metrics WHERE trial" IN_IDS,
        "DELETE FROM metric_latest WHERE trial" IN_IDS,
        "DELETE FROM attempts WHERE trial" IN_IDS,
        "DELETE FROM decisions WHERE trial" IN_IDS,
        "DELETE FROM events WHERE trial" IN_IDS,
        "DELETE FROM trials WHERE id" IN_IDS,
    };
#undef IN_IDS
    for (size_t i = 0; i < sizeof sql / sizeof *sql; i++)
        if (exec_ids(s, sql[i], ids, 0, err, errlen) < 0) {
            free(last_dirs);
            return -1;
        }
    const char *unused = " FROM stages WHERE key IN (SELECT key FROM temp.prune_keys) AND NOT"
                         " EXISTS (SELECT 1 FROM trial_stages ts WHERE ts.key = stages.key)";
    snprintf(q, sizeof q, "SELECT dir%s", unused);
    void *dirs = NULL;
    size_t n = 0;
    if (store_prepare(s, q, &st, err, errlen) < 0 ||
        store_rows(s, st, sizeof(store_stage_dir), 8, read_dir, NULL, NULL, &dirs, &n,
                   "SELECT unused stages", err, errlen) < 0) {
        free(last_dirs);
        return -1;
    }
    /* both lists into out */
    store_stage_dir *all = n_last + n ? malloc((n_last + n) * sizeof *all) : NULL;
    if (n_last + n && !all) {
        free(last_dirs);
        free(dirs);
        return bf_fail(err, errlen, "store_prune_step: out of memory");
    }
    if (n_last) memcpy(all, last_dirs, n_last * sizeof *all);
    if (n) memcpy(all + n_last, dirs, n * sizeof *all);
    free(last_dirs);
    free(dirs);
    out->stage_dirs = all;
    out->n_stage_dirs = n_last + n;
    snprintf(q, sizeof q, "DELETE%s", unused);
    return exec_ids(s, q, NULL, 0, err, errlen);
}

int store_prune_step(store *s, int max_trials, store_pruned *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (store_begin(s, err, errlen) < 0) return -1;
    sqlite3_stmt *st;
    if (store_prepare(s, "SELECT id, name, hidden FROM jobs WHERE hidden >= 2 ORDER BY id LIMIT 1",
                      &st, err, errlen) < 0)
        goto fail;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        out->job = sqlite3_column_int64(st, 0);
        store_col_text(st, 1, out->name, sizeof out->name);
        out->keep_files = sqlite3_column_int(st, 2) == STORE_HIDDEN_REMOVE_KEEP;
    }
    store_done(s, st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        store_sqlfail(s, err, errlen, "sqlite3_step(SELECT jobs to remove)");
        goto fail;
    }
    if (!out->job) return store_commit(s, err, errlen);
    if (store_prepare(s, "SELECT id FROM trials WHERE job = ?1 ORDER BY id LIMIT ?2", &st, err,
                      errlen) < 0)
        goto fail;
    sqlite3_bind_int64(st, 1, out->job);
    sqlite3_bind_int(st, 2, max_trials > 0 ? max_trials : 1);
    if (store_collect_column(s, st, &out->trials, NULL, &out->n_trials,
                             "store_prune_step: SELECT trials", err, errlen) < 0)
        goto fail;
    if (out->n_trials) {
        char *ids = ids_json(out->trials, out->n_trials);
        if (!ids) {
            bf_fail(err, errlen, "store_prune_step: out of memory");
            goto fail;
        }
        rc = delete_trials(s, ids, out, err, errlen);
        free(ids);
        if (rc < 0) goto fail;
    } else {
        /* the last call: what names the job itself, then its row */
        static const char *const sql[] = {"DELETE FROM events WHERE job = ?2",
                                          "DELETE FROM decisions WHERE job = ?2",
                                          "DELETE FROM jobs WHERE id = ?2"};
        for (size_t i = 0; i < sizeof sql / sizeof *sql; i++)
            if (exec_ids(s, sql[i], NULL, out->job, err, errlen) < 0) goto fail;
        out->job_done = 1;
    }
    if (store_commit(s, err, errlen) < 0) goto fail;
    return 0;
fail:
    store_rollback(s);
    store_pruned_free(out);
    return -1;
}

void store_pruned_free(store_pruned *p) {
    free(p->trials);
    free(p->stage_dirs);
    p->trials = NULL;
    p->stage_dirs = NULL;
    p->n_trials = p->n_stage_dirs = 0;
}

int store_shrink(store *s, int pages, long long *left, char *err, size_t errlen) {
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA incremental_vacuum(%d)", pages > 0 ? pages : 0);
    /* the pragma frees pages as it is stepped: run it to the end */
    sqlite3_stmt *st;
    if (store_prepare(s, sql, &st, err, errlen) < 0) return -1;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    }
    store_done(s, st);
    if (rc != SQLITE_DONE) return store_sqlfail(s, err, errlen, "sqlite3_step(incremental_vacuum)");
    if (store_prepare(s, "PRAGMA freelist_count", &st, err, errlen) < 0) return -1;
    rc = sqlite3_step(st);
    *left = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    store_done(s, st);
    return rc == SQLITE_ROW ? 0 : store_sqlfail(s, err, errlen, "sqlite3_step(freelist_count)");
}

/* One candidate row of store_gc_candidates. */
static void read_candidate(sqlite3_stmt *st, void *row, void *ud) {
    (void)ud;
    store_gc_job *g = row;
    g->job = sqlite3_column_int64(st, 0);
    store_col_text(st, 1, g->name, sizeof g->name);
    store_col_text(st, 2, g->state, sizeof g->state);
    g->last = sqlite3_column_double(st, 3);
    g->trials = sqlite3_column_int64(st, 4);
    g->points = sqlite3_column_int64(st, 5);
}

int store_gc_candidates(store *s, double before, unsigned states, store_gc_job **out, size_t *n,
                        char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    /* a job is finished when no trial is pending or running and (tpe) no
     * trial is left to propose; it is cancelled when closed, failed when a
     * trial failed for good, completed otherwise; its last activity is its
     * trials' last change (its submit when it has none) */
    if (store_prepare(
            s,
            "SELECT * FROM (SELECT id, name,"
            "  CASE WHEN closed THEN 'cancelled'"
            "   WHEN EXISTS (SELECT 1 FROM trials WHERE state = 'FAILED' AND job = jobs.id)"
            "   THEN 'failed' ELSE 'completed' END AS st,"
            "  COALESCE((SELECT MAX(updated) FROM trials WHERE job = jobs.id), submitted) AS last,"
            "  (SELECT COUNT(*) FROM trials WHERE job = jobs.id) AS n,"
            "  (SELECT COUNT(*) FROM metrics WHERE trial IN"
            "   (SELECT id FROM trials WHERE job = jobs.id)) AS points"
            " FROM jobs WHERE hidden = 0"
            "  AND NOT EXISTS (SELECT 1 FROM trials WHERE state IN ('PENDING', 'RUNNING')"
            "   AND job = jobs.id)"
            "  AND (closed OR (SELECT COUNT(*) FROM trials WHERE job = jobs.id) >= n_trials))"
            " WHERE last < ?1 AND ((?2 & 1 AND st = 'completed') OR (?2 & 2 AND st = 'failed')"
            "  OR (?2 & 4 AND st = 'cancelled')) ORDER BY id",
            &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_double(st, 1, before);
    sqlite3_bind_int(st, 2, (int)states);
    void *rows = NULL;
    if (store_rows(s, st, sizeof **out, 16, read_candidate, NULL, NULL, &rows, n,
                   "SELECT gc candidates", err, errlen) < 0)
        return -1;
    *out = rows;
    return 0;
}
