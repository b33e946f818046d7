/* store_edit.c — edits of a submitted job that a running sweep takes up:
 * its max_parallel (jobs.parallel), values added to a grid axis (the new
 * trials appended) and pending trials dropped by a filter, each with an
 * EDIT event in one transaction, so a restarted bfd keeps the edit and the
 * history says who changed what. The grid an edit grows is the job's
 * trials: the values its earlier edits added are read back from them. */
#include "common/errbuf.h"
#include "jobs/store_priv.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int store_job_set_parallel(store *s, int64_t job, int parallel, int *was, char *err,
                           size_t errlen) {
    store_job j;
    int rc = store_job_get(s, job, &j, err, errlen);
    if (rc) return rc;
    *was = j.parallel;
    if (store_begin(s, err, errlen)) return -1;
    sqlite3_stmt *st;
    if (store_prepare(s, "UPDATE jobs SET parallel = ?1 WHERE id = ?2", &st, err, errlen) < 0) {
        store_rollback(s);
        return -1;
    }
    sqlite3_bind_int(st, 1, parallel);
    sqlite3_bind_int64(st, 2, job);
    char msg[128];
    snprintf(msg, sizeof msg, "max_parallel %d (was %d)", parallel, j.parallel);
    if (store_step_done(s, st, "UPDATE jobs SET parallel", err, errlen) ||
        store_event(s, job, 0, "EDIT", msg, err, errlen) || store_commit(s, err, errlen)) {
        store_rollback(s);
        return -1;
    }
    return 0;
}

/* The value of key in a trial's params JSON text as JSON text (malloc'd),
 * or NULL when the trial has none. */
static char *param_text(const char *params, const char *key) {
    json_t *o = json_loads(params ? params : "{}", 0, NULL);
    json_t *v = json_object_get(o, key);
    char *text = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

/* Appends to each listed axis of grid spec the values job's trials hold
 * that its file did not list: what earlier edits added, in trial order. */
static int replay_added(store *s, int64_t job, sweep_spec *spec, char *err, size_t errlen) {
    sqlite3_stmt *st;
    if (store_prepare(s, "SELECT params FROM trials WHERE job = ?1 ORDER BY idx", &st, err,
                      errlen) < 0)
        return -1;
    sqlite3_bind_int64(st, 1, job);
    json_t *seen = json_object(); /* "p:JSON" of the values met, to parse each once */
    int rc = 0, step;
    while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
        const char *params = (const char *)sqlite3_column_text(st, 0);
        for (int p = 0; p < spec->n_params && rc == 0; p++) {
            if (spec->params[p].dist != SWEEP_DIST_VALUES) continue;
            char *v = param_text(params, spec->params[p].key);
            if (!v) continue;
            char key[SWEEP_VALUE_MAX + 16];
            snprintf(key, sizeof key, "%d:%.*s", p, SWEEP_VALUE_MAX, v);
            if (!json_object_get(seen, key)) {
                json_object_set_new(seen, key, json_true());
                rc = sweep_add_value(spec, p, v, err, errlen) < 0 ? -1 : 0;
            }
            free(v);
        }
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = store_sqlfail(s, err, errlen, "sqlite3_step(SELECT trials.params)");
    store_done(s, st);
    json_decref(seen);
    return rc;
}

int store_job_sweep(store *s, int64_t job, sweep_spec **out, char *err, size_t errlen) {
    *out = NULL;
    char *text, file[CFG_PATH_MAX];
    if (store_job_source(s, job, &text, file, sizeof file, err, errlen)) return -1;
    if (!text) return bf_fail(err, errlen, "job %lld kept no sweep text", (long long)job);
    sweep_errors errs = {0};
    int rc = sweep_load_string(text, strlen(text), file, out, &errs);
    free(text);
    if (rc) {
        bf_fail(err, errlen, "job %lld: its sweep no longer loads: %s", (long long)job,
                errs.n ? errs.msgs[0] : "?");
        sweep_errors_free(&errs);
        return -1;
    }
    if ((*out)->is_sweep && (*out)->method == SWEEP_GRID &&
        replay_added(s, job, *out, err, errlen)) {
        sweep_spec_destroy(out);
        return -1;
    }
    return 0;
}

typedef struct add_ctx {
    store *s;
    sqlite3_stmt *ins;
    int64_t job;
    double t;
    const char *key;
    char *err;
    size_t errlen;
} add_ctx;

/* Checks one new trial across keys and inserts it. */
static int add_trial(void *ud, const sweep_trial *t) {
    add_ctx *c = ud;
    char why[512];
    if (cfg_validate(t->config, why, sizeof why))
        return bf_fail(c->err, c->errlen, "the new trial with %s: %s", t->params_json, why);
    int64_t id;
    return store_insert_trial(c->s, c->ins, c->job, t, c->t, NULL, &id, c->err, c->errlen);
}

int store_job_add_values(store *s, int64_t job, sweep_spec *spec, int axis,
                         char values[][SWEEP_VALUE_MAX], int n, long long *added, char *err,
                         size_t errlen) {
    *added = 0;
    sweep_param *p = &spec->params[axis];
    int first_new = p->n_values;
    for (int i = 0; i < n; i++) {
        int rc = sweep_add_value(spec, axis, values[i], err, errlen);
        if (rc < 0) return -1;
        if (rc > 0)
            return bf_fail(err, errlen, "%s: value %s is on the axis already", p->key, values[i]);
    }
    store_job j;
    if (store_job_get(s, job, &j, err, errlen)) return -1;
    if (j.closed) return bf_fail(err, errlen, "job %lld is cancelled", (long long)job);
    if (store_begin(s, err, errlen) < 0) return -1;
    sqlite3_stmt *st = NULL;
    long long first_index = 0;
    add_ctx c = {s, NULL, job, store_now(), p->key, err, errlen};
    if (store_prepare(s, "SELECT COALESCE(MAX(idx) + 1, 0) FROM trials WHERE job = ?1", &st, err,
                      errlen) < 0)
        goto fail;
    sqlite3_bind_int64(st, 1, job);
    if (sqlite3_step(st) != SQLITE_ROW) {
        store_sqlfail(s, err, errlen, "sqlite3_step(SELECT MAX(idx))");
        goto fail;
    }
    first_index = sqlite3_column_int64(st, 0);
    store_done(s, st);
    st = NULL;
    if (store_prepare(s, STORE_INSERT_TRIAL, &c.ins, err, errlen) < 0 ||
        sweep_expand_added(spec, axis, first_new, first_index, add_trial, &c, err, errlen))
        goto fail;
    long long n_new = spec->n_trials / p->n_values * (p->n_values - first_new);
    if (store_prepare(s, "UPDATE jobs SET n_trials = n_trials + ?1 WHERE id = ?2", &st, err,
                      errlen) < 0)
        goto fail;
    sqlite3_bind_int64(st, 1, n_new);
    sqlite3_bind_int64(st, 2, job);
    int rc = store_step_done(s, st, "UPDATE jobs SET n_trials", err, errlen);
    st = NULL;
    if (rc) goto fail;
    char msg[1024];
    size_t w = (size_t)snprintf(msg, sizeof msg, "add %s:", p->key);
    for (int i = first_new; i < p->n_values && w < sizeof msg; i++)
        w += (size_t)snprintf(msg + w, sizeof msg - w, "%s %s", i > first_new ? "," : "",
                              p->value_text[i]);
    if (w < sizeof msg)
        snprintf(msg + w, sizeof msg - w, " (%lld new trials from index %lld)", n_new, first_index);
    if (store_event(s, job, 0, "EDIT", msg, err, errlen) || store_commit(s, err, errlen)) goto fail;
    store_done(s, c.ins);
    *added = n_new;
    return 0;
fail:
    store_done(s, st);
    store_done(s, c.ins);
    store_rollback(s);
    return -1;
}

int store_job_drop_pending(store *s, int64_t job, const sweep_spec *spec, const char *key,
                           const char *canon, int *dropped, char *err, size_t errlen) {
    *dropped = 0;
    if (store_begin(s, err, errlen) < 0) return -1;
    sqlite3_stmt *st;
    if (store_prepare(s,
                      "SELECT id, params FROM trials WHERE job = ?1 AND state = 'PENDING'"
                      " ORDER BY idx",
                      &st, err, errlen) < 0) {
        store_rollback(s);
        return -1;
    }
    sqlite3_bind_int64(st, 1, job);
    int64_t *ids = NULL;
    size_t n = 0, cap = 0;
    json_t *canon_of = json_object(); /* JSON text of a value -> its canonical text */
    int rc = 0, step;
    while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
        char *v = param_text((const char *)sqlite3_column_text(st, 1), key);
        if (!v) continue;
        const char *c = json_string_value(json_object_get(canon_of, v));
        if (!c) {
            char text[1024], why[512];
            if (sweep_value_canon(spec, key, v, text, sizeof text, why, sizeof why)) text[0] = 0;
            json_object_set_new(canon_of, v, json_string(text));
            c = json_string_value(json_object_get(canon_of, v));
        }
        free(v);
        if (!c || strcmp(c, canon)) continue;
        int64_t *g = store_grow(ids, &cap, n, sizeof *ids, 64);
        if (!g) {
            rc = bf_fail(err, errlen, "store_job_drop_pending: out of memory");
            break;
        }
        ids = g;
        ids[n++] = sqlite3_column_int64(st, 0);
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = store_sqlfail(s, err, errlen, "sqlite3_step(SELECT pending trials)");
    store_done(s, st);
    json_decref(canon_of);
    char msg[512];
    snprintf(msg, sizeof msg, "dropped by edit: %s=%s", key, canon);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = store_transition(s, ids[i], TRIAL_CANCELLED, msg, 0, err, errlen);
    free(ids);
    if (rc == 0) {
        snprintf(msg, sizeof msg, "drop pending %s=%s (%zu trials)", key, canon, n);
        rc = store_event(s, job, 0, "EDIT", msg, err, errlen);
    }
    if (rc || store_commit(s, err, errlen)) {
        store_rollback(s);
        return -1;
    }
    *dropped = (int)n;
    return 0;
}
