/* store_points.c — the metric points of trials: inserting what workers
 * send (resends skipped, NaN refused), the latest and best value of each
 * metric kept on insert (metric_latest), the names' ids, and the reads of
 * points: a trial's history from a seq, a job's series of one metric, the
 * highest seq. It never changes a trial's state and writes no event: a point
 * is a fact about a trial, not a move of it. */
#include "jobs/store_priv.h"
#include "common/errbuf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int name_id(store *s, const char *name, int64_t *id, char *err, size_t errlen) {
    for (int i = 0; i < s->n_names; i++)
        if (strcmp(s->names[i].name, name) == 0) {
            *id = s->names[i].id;
            return 0;
        }
    if (strlen(name) >= sizeof s->names[0].name || !*name)
        return bf_fail(err, errlen, "metric name '%.80s' is empty or longer than %zu characters",
                       name, sizeof s->names[0].name - 1);
    sqlite3_reset(s->get_name);
    sqlite3_bind_text(s->get_name, 1, name, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s->get_name);
    if (rc == SQLITE_ROW) {
        *id = sqlite3_column_int64(s->get_name, 0);
    } else if (rc == SQLITE_DONE) {
        sqlite3_reset(s->ins_name);
        sqlite3_bind_text(s->ins_name, 1, name, -1, SQLITE_STATIC);
        if (sqlite3_step(s->ins_name) != SQLITE_DONE)
            return store_sqlfail(s, err, errlen, "sqlite3_step(INSERT INTO metric_names)");
        *id = sqlite3_last_insert_rowid(s->db);
    } else {
        return store_sqlfail(s, err, errlen, "sqlite3_step(SELECT FROM metric_names)");
    }
    sqlite3_reset(s->get_name);
    if (s->n_names < STORE_NAME_CACHE) {
        snprintf(s->names[s->n_names].name, sizeof s->names[0].name, "%s", name);
        s->names[s->n_names++].id = *id;
    }
    return 0;
}

static int check_trial(store *s, int64_t trial_id, char *err, size_t errlen) {
    sqlite3_reset(s->trial_exists);
    sqlite3_bind_int64(s->trial_exists, 1, trial_id);
    int rc = sqlite3_step(s->trial_exists);
    sqlite3_reset(s->trial_exists);
    if (rc == SQLITE_ROW) return 0;
    if (rc == SQLITE_DONE)
        return bf_fail(err, errlen, "metrics for unknown trial %lld", (long long)trial_id);
    return store_sqlfail(s, err, errlen, "sqlite3_step(SELECT trial)");
}

/* Points i of trial trial_ids[i] (or trial_id for all when trial_ids is NULL). */
static int insert_points(store *s, int64_t trial_id, const int64_t *trial_ids,
                         const store_metric *pts, size_t n, char *err, size_t errlen) {
    if (store_begin(s, err, errlen) < 0) return -1;
    int64_t checked = 0;
    for (size_t i = 0; i < n; i++) {
        if (trial_ids) trial_id = trial_ids[i];
        if (trial_id != checked) {
            if (check_trial(s, trial_id, err, errlen) < 0) goto fail;
            checked = trial_id;
        }
        int64_t nid = 0;
        if (isnan(pts[i].value)) {
            /* SQLite would store NaN as NULL; a NaN loss is reported as an
             * error, not silently dropped (+-inf is stored as it is) */
            bf_fail(err, errlen, "metric %s at seq %lld is NaN; not stored", pts[i].name,
                    (long long)pts[i].seq);
            goto fail;
        }
        if (name_id(s, pts[i].name, &nid, err, errlen) < 0) goto fail;
        sqlite3_stmt *st = s->ins_metric;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, trial_id);
        sqlite3_bind_int64(st, 2, pts[i].seq);
        sqlite3_bind_int64(st, 3, nid);
        sqlite3_bind_int64(st, 4, pts[i].step);
        sqlite3_bind_double(st, 5, pts[i].value);
        sqlite3_bind_double(st, 6, pts[i].time);
        if (sqlite3_step(st) != SQLITE_DONE) {
            store_sqlfail(s, err, errlen, "sqlite3_step(INSERT INTO metrics)");
            goto fail;
        }
        if (sqlite3_changes(s->db) == 0) continue; /* a resend: already stored */
        st = s->upd_latest;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, trial_id);
        sqlite3_bind_int64(st, 2, nid);
        sqlite3_bind_int64(st, 3, pts[i].seq);
        sqlite3_bind_int64(st, 4, pts[i].step);
        sqlite3_bind_double(st, 5, pts[i].value);
        sqlite3_bind_double(st, 6, pts[i].time);
        if (sqlite3_step(st) != SQLITE_DONE) {
            store_sqlfail(s, err, errlen, "sqlite3_step(UPSERT metric_latest)");
            goto fail;
        }
    }
    sqlite3_reset(s->ins_metric);
    sqlite3_reset(s->upd_latest);
    if (store_commit(s, err, errlen) < 0) goto fail;
    return 0;
fail:
    sqlite3_reset(s->ins_metric);
    sqlite3_reset(s->upd_latest);
    store_rollback(s);
    return -1;
}

int store_metrics_insert(store *s, int64_t trial_id, const store_metric *pts, size_t n, char *err,
                         size_t errlen) {
    return insert_points(s, trial_id, NULL, pts, n, err, errlen);
}

int store_metrics_insert_many(store *s, const int64_t *trial_ids, const store_metric *pts, size_t n,
                              char *err, size_t errlen) {
    return insert_points(s, 0, trial_ids, pts, n, err, errlen);
}

static void read_point(sqlite3_stmt *st, void *row, void *ud) {
    (void)ud;
    store_point *p = row;
    p->seq = sqlite3_column_int64(st, 0);
    p->step = sqlite3_column_int64(st, 1);
    store_col_text(st, 2, p->name, sizeof p->name);
    p->value = sqlite3_column_double(st, 3);
    p->time = sqlite3_column_double(st, 4);
}

int store_metric_history(store *s, int64_t trial_id, int64_t after_seq, int limit,
                         store_point **out, size_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    /* `limit` whole sequence numbers: a seq is never split across two calls */
    if (store_prepare(
            s,
            "SELECT m.seq, m.step, n.name, m.value, m.time FROM metrics m"
            " JOIN metric_names n ON n.id = m.name"
            " WHERE m.trial = ?1 AND m.seq > ?2 AND m.seq <= COALESCE("
            "  (SELECT seq FROM (SELECT DISTINCT seq FROM metrics WHERE trial = ?1 AND seq > ?2"
            "   ORDER BY seq LIMIT 1 OFFSET ?3 - 1)), 9223372036854775807)"
            " ORDER BY m.seq, n.name",
            &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, trial_id);
    sqlite3_bind_int64(st, 2, after_seq);
    sqlite3_bind_int(st, 3, limit > 0 ? limit : 1);
    void *pts = NULL;
    if (store_rows(s, st, sizeof **out, 64, read_point, NULL, NULL, &pts, n,
                   "SELECT metric history", err, errlen) < 0)
        return -1;
    *out = pts;
    return 0;
}

int store_max_seq(store *s, int64_t trial_id, int64_t *out, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s, "SELECT COALESCE(MAX(seq), 0) FROM metrics WHERE trial = ?1", &st, err,
                      errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, trial_id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *out = sqlite3_column_int64(st, 0);
    else
        store_sqlfail(s, err, errlen, "sqlite3_step(SELECT MAX(seq))");
    store_done(s, st);
    return rc == SQLITE_ROW ? 0 : -1;
}

void store_series_free(store_series *v, size_t n) {
    if (!v) return;
    for (size_t i = 0; i < n; i++) {
        free(v[i].steps);
        free(v[i].values);
    }
    free(v);
}

int store_job_series(store *s, int64_t job, int64_t trial, const char *name, store_series **out,
                     size_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    if (store_prepare(
            s,
            "SELECT m.trial, m.step, m.value FROM metrics m JOIN trials t ON t.id = m.trial"
            " WHERE t.job = ?1 AND (?2 <= 0 OR m.trial = ?2) AND m.name ="
            " (SELECT id FROM metric_names WHERE name = ?3) ORDER BY m.trial, m.step, m.seq",
            &st, err, errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, trial);
    sqlite3_bind_text(st, 3, name, -1, SQLITE_STATIC);
    store_series *v = NULL;
    size_t cnt = 0, cap = 0, pcap = 0;
    int rc, oom = 0;
    while (!oom && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t t = sqlite3_column_int64(st, 0);
        if (cnt == 0 || v[cnt - 1].trial != t) {
            store_series *nv = store_grow(v, &cap, cnt, sizeof *v, 16);
            if (!nv) {
                oom = 1;
                break;
            }
            v = nv;
            memset(&v[cnt], 0, sizeof v[cnt]);
            v[cnt++].trial = t;
            pcap = 0;
        }
        store_series *c = &v[cnt - 1];
        if (c->n == pcap) {
            pcap = pcap ? 2 * pcap : 64;
            int64_t *ns = realloc(c->steps, pcap * sizeof *ns);
            if (ns) c->steps = ns;
            double *nvals = ns ? realloc(c->values, pcap * sizeof *nvals) : NULL;
            if (!ns || !nvals) {
                oom = 1;
                break;
            }
            c->values = nvals;
        }
        c->steps[c->n] = sqlite3_column_int64(st, 1);
        c->values[c->n++] = sqlite3_column_double(st, 2);
    }
    store_done(s, st);
    if (oom || rc != SQLITE_DONE) {
        store_series_free(v, cnt);
        if (oom) return bf_fail(err, errlen, "store_job_series: out of memory");
        return bf_fail(err, errlen, "sqlite3_step(SELECT series): %s", sqlite3_errmsg(s->db));
    }
    *out = v;
    *n = cnt;
    return 0;
}

int store_copy_eval_points(store *s, int64_t from, int64_t to, char *err, size_t errlen) {
    static const char *const sql[] = {
        "INSERT OR IGNORE INTO metrics(trial, seq, name, step, value, time)"
        " SELECT ?2, m.seq - (SELECT MIN(seq) FROM metrics WHERE trial = ?1 AND name IN"
        "   (SELECT id FROM metric_names WHERE name LIKE 'eval/%'))"
        "   + 1 + (SELECT COALESCE(MAX(seq), 0) FROM metrics WHERE trial = ?2),"
        "  m.name, m.step, m.value, m.time"
        " FROM metrics m WHERE m.trial = ?1 AND m.name IN"
        "  (SELECT id FROM metric_names WHERE name LIKE 'eval/%')",
        "INSERT OR REPLACE INTO metric_latest(trial, name, seq, step, value, time, vmin, vmax)"
        " SELECT ?2, m.name, m.seq, m.step, m.value, m.time, a.vmin, a.vmax"
        " FROM (SELECT name, MAX(seq) AS mseq, MIN(value) AS vmin, MAX(value) AS vmax"
        "       FROM metrics WHERE trial = ?2 AND name IN"
        "        (SELECT id FROM metric_names WHERE name LIKE 'eval/%') GROUP BY name) a"
        " JOIN metrics m ON m.trial = ?2 AND m.name = a.name AND m.seq = a.mseq"};
    for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++) {
        sqlite3_stmt *st;
        if (store_prepare(s, sql[i], &st, err, errlen) < 0) return -1;
        sqlite3_bind_int64(st, 1, from);
        sqlite3_bind_int64(st, 2, to);
        if (store_step_done(s, st, "sqlite3_step(copy eval points)", err, errlen) < 0) return -1;
    }
    return 0;
}
