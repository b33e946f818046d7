/* front.c — `bfctl results`' rows over several objectives (see front.h):
 * the trials of jobs, or their seed groups, ranked on their means by
 * jobs/pareto.c; jobs compared have their rows matched by the swept keys
 * they all share. Pure: JSON in, JSON out. */
#include "jobs/front.h"
#include "common/errbuf.h"
#include "jobs/pareto.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEED_KEY "train.seed"
/* Swept values come from YAML text with at most 15 significant digits. */
#define PARAMS_PRECISION JSON_REAL_PRECISION(15)

/* One row of the table: a trial, or (grouped) the trials of a job that
 * differ only in train.seed. Values are over its COMPLETED trials that
 * have every objective. */
typedef struct frow {
    int job;          /* index into the jobs compared */
    json_t *first;    /* its first trial (borrowed from the job) */
    json_t *trials;   /* ids of its trials (owned) */
    json_t *params;   /* its swept values (owned; without train.seed when grouped) */
    char match[1024]; /* the values of the keys every job sweeps: what matches rows */
    int n;            /* trials that give its values */
    int states[8];    /* its trials by state: COMPLETED, then the others */
    double mean[PARETO_MAX_OBJECTIVES], sd[PARETO_MAX_OBJECTIVES];
    int rank;
    double crowd;
} frow;

typedef struct ftable {
    int m; /* objectives */
    char names[PARETO_MAX_OBJECTIVES][64];
    int maximize[PARETO_MAX_OBJECTIVES];
    int njobs;
    const long long *job_ids;
    json_t *const *jobs; /* borrowed */
    frow *rows;
    size_t n, cap;
    json_t *by_key; /* grouped: "JOB key" -> row index */
    int grouped;
} ftable;

static const char *jstr(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* params as "k=v k=v" text, skipping `skip` (NULL: none) and, when only is
 * set, every key not in it. */
static void params_key(json_t *params, const char *skip, json_t *only, char *buf, size_t len) {
    size_t w = 0;
    buf[0] = '\0';
    const char *k;
    json_t *v;
    json_object_foreach(params, k, v) {
        if ((skip && !strcmp(k, skip)) || (only && !json_object_get(only, k))) continue;
        char *vt = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | PARAMS_PRECISION);
        if (w < len)
            w += (size_t)snprintf(buf + w, len - w, "%s%s=%s", w ? " " : "", k, vt ? vt : "?");
        free(vt);
    }
}

void front_params_text(json_t *params, char *buf, size_t len) {
    params_key(params, NULL, NULL, buf, len);
}

/* The latest value of metric name in trial t, NAN when it has none. */
static double latest(json_t *t, const char *name) {
    json_t *v = json_object_get(json_object_get(json_object_get(t, "latest"), name), "value");
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *const STATE_ORDER[] = {"COMPLETED", "RUNNING", "PENDING",
                                          "STOPPED",   "FAILED",  "CANCELLED"};

/* The row of trial (of job j): its own, or (grouped) its seed group's. */
static frow *row_for(ftable *t, int job, json_t *trial, json_t *shared) {
    json_t *params = json_object_get(trial, "params");
    char key[1100];
    int w = snprintf(key, sizeof key, "%d ", job);
    params_key(params, t->grouped ? SEED_KEY : NULL, NULL, key + w, sizeof key - (size_t)w);
    json_t *at = t->grouped ? json_object_get(t->by_key, key) : NULL;
    if (at) return &t->rows[json_integer_value(at)];
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        frow *nr = realloc(t->rows, cap * sizeof *nr);
        if (!nr) return NULL;
        t->rows = nr, t->cap = cap;
    }
    if (t->grouped && json_object_set_new(t->by_key, key, json_integer((json_int_t)t->n)))
        return NULL;
    frow *r = &t->rows[t->n++];
    memset(r, 0, sizeof *r);
    r->job = job;
    r->first = trial;
    r->trials = json_array();
    r->params = json_deep_copy(params);
    if (t->grouped) json_object_del(r->params, SEED_KEY);
    if (t->njobs > 1)
        params_key(params, t->grouped ? SEED_KEY : NULL, shared, r->match, sizeof r->match);
    return r;
}

/* Adds every trial of job j to the rows; sums into mean and sd (finished
 * by finish_rows). */
static int add_trials(ftable *t, int j, json_t *shared) {
    size_t i;
    json_t *tr;
    json_array_foreach(json_object_get(t->jobs[j], "trials"), i, tr) {
        frow *r = row_for(t, j, tr, shared);
        if (!r || !r->trials || !r->params) return -1;
        json_array_append_new(r->trials,
                              json_integer(json_integer_value(json_object_get(tr, "id"))));
        const char *st = jstr(tr, "state");
        for (int s = 0; s < 6; s++)
            if (!strcmp(st, STATE_ORDER[s])) r->states[s]++;
        if (strcmp(st, "COMPLETED")) continue;
        double v[PARETO_MAX_OBJECTIVES];
        int all = 1;
        for (int k = 0; k < t->m; k++) all &= isfinite(v[k] = latest(tr, t->names[k]));
        if (!all) continue;
        r->n++;
        for (int k = 0; k < t->m; k++) r->mean[k] += v[k], r->sd[k] += v[k] * v[k];
    }
    return 0;
}

/* Sums to mean and sample std (NAN for one value), then ranks the rows. */
static int finish_rows(ftable *t) {
    double *v = malloc((t->n ? t->n : 1) * (size_t)t->m * sizeof *v);
    int *rank = malloc((t->n ? t->n : 1) * sizeof *rank);
    double *crowd = malloc((t->n ? t->n : 1) * sizeof *crowd);
    int rc = v && rank && crowd ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < t->n; i++) {
        frow *r = &t->rows[i];
        for (int k = 0; k < t->m; k++) {
            double s = r->mean[k], s2 = r->sd[k];
            r->mean[k] = r->n ? s / r->n : NAN;
            r->sd[k] = r->n > 1 ? sqrt(fmax(0, (s2 - s * s / r->n) / (r->n - 1))) : NAN;
            v[i * (size_t)t->m + (size_t)k] = r->mean[k];
        }
    }
    if (rc == 0 && (pareto_rank(v, t->n, t->m, t->maximize, rank) < 0 ||
                    pareto_crowding(v, t->n, t->m, rank, crowd) < 0))
        rc = -1;
    for (size_t i = 0; rc == 0 && i < t->n; i++)
        t->rows[i].rank = rank[i], t->rows[i].crowd = crowd[i];
    free(v), free(rank), free(crowd);
    return rc;
}

/* Rows best first: rank (unranked last), then crowding (larger first), then
 * job and first trial; compared jobs: matched rows together first (one
 * job's rows all match ""). */
static int cmp_rows(const void *pa, const void *pb) {
    const frow *a = pa, *b = pb;
    int c = strcmp(a->match, b->match);
    if (c) return c;
    int ra = a->rank ? a->rank : 1 << 30, rb = b->rank ? b->rank : 1 << 30;
    if (ra != rb) return ra < rb ? -1 : 1;
    if (a->crowd != b->crowd && !(isnan(a->crowd) && isnan(b->crowd)))
        return isnan(b->crowd) || a->crowd > b->crowd ? -1 : 1;
    if (a->job != b->job) return a->job < b->job ? -1 : 1;
    long long ia = json_integer_value(json_array_get(a->trials, 0)),
              ib = json_integer_value(json_array_get(b->trials, 0));
    return ia < ib ? -1 : ia > ib;
}

static void ftable_free(ftable *t) {
    for (size_t i = 0; i < t->n; i++)
        json_decref(t->rows[i].trials), json_decref(t->rows[i].params);
    free(t->rows);
    json_decref(t->by_key);
}

/* The objectives of job j into t (the first job) or checked against t's
 * (the others). Returns 0, or -1 with err saying why not. */
static int take_objectives(ftable *t, int j, char *err, size_t errlen) {
    json_t *objs = json_object_get(t->jobs[j], "objectives");
    size_t m = json_array_size(objs);
    if (m == 0) { /* a bfd from before objectives: the one metric */
        objs = json_pack("[{s:s, s:s}]", "name", jstr(t->jobs[j], "metric"), "goal",
                         jstr(t->jobs[j], "goal"));
        m = 1;
    } else {
        json_incref(objs);
    }
    int rc = 0;
    if (m > PARETO_MAX_OBJECTIVES) m = PARETO_MAX_OBJECTIVES;
    if (j == 0) t->m = (int)m;
    if (j > 0 && (int)m != t->m) rc = 1;
    for (size_t k = 0; k < m && rc == 0; k++) {
        json_t *o = json_array_get(objs, k);
        int max = !strcmp(jstr(o, "goal"), "max");
        if (j == 0) {
            snprintf(t->names[k], sizeof t->names[k], "%s", jstr(o, "name"));
            t->maximize[k] = max;
        } else if (strcmp(t->names[k], jstr(o, "name")) || t->maximize[k] != max) {
            rc = 1;
        }
    }
    json_decref(objs);
    if (rc)
        return bf_fail(err, errlen,
                       "job %lld's objectives differ from job %lld's; compare jobs judged by "
                       "the same metric list (docs/sweeps.md)",
                       t->job_ids[j], t->job_ids[0]);
    return 0;
}

/* The swept keys of every job compared (a new object used as a set). */
static json_t *shared_keys(ftable *t) {
    json_t *shared = NULL;
    for (int j = 0; j < t->njobs; j++) {
        json_t *keys = json_object();
        size_t i;
        json_t *tr;
        json_array_foreach(json_object_get(t->jobs[j], "trials"), i, tr) {
            const char *k;
            json_t *v;
            json_object_foreach(json_object_get(tr, "params"), k, v)
                json_object_set_new(keys, k, json_true());
        }
        if (!shared) {
            shared = keys;
            continue;
        }
        const char *k;
        json_t *v;
        void *tmp;
        json_object_foreach_safe(shared, tmp, k, v) if (!json_object_get(keys, k))
            json_object_del(shared, k);
        json_decref(keys);
    }
    return shared;
}

/* The hypervolume of the ranked rows up to a reference point just past
 * their worst values (pareto_reference), into ref; NAN when none. */
static double front_hv(const ftable *t, double *ref) {
    double *v = malloc((t->n ? t->n : 1) * (size_t)t->m * sizeof *v);
    if (!v) return NAN;
    for (size_t i = 0; i < t->n; i++)
        for (int k = 0; k < t->m; k++) v[i * (size_t)t->m + (size_t)k] = t->rows[i].mean[k];
    double hv = pareto_reference(v, t->n, t->m, t->maximize, ref) == 0
                    ? pareto_hypervolume(v, t->n, t->m, t->maximize, ref)
                    : NAN;
    free(v);
    return hv;
}

static json_t *num(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static json_t *row_json(const ftable *t, const frow *r) {
    json_t *o = json_object(), *objs = json_object();
    json_object_set_new(o, "job", json_integer(t->job_ids[r->job]));
    if (!t->grouped) {
        json_t *f = r->first;
        json_object_set_new(o, "id", json_integer(json_integer_value(json_object_get(f, "id"))));
        json_object_set_new(o, "index",
                            json_integer(json_integer_value(json_object_get(f, "index"))));
        json_object_set_new(o, "state", json_string(jstr(f, "state")));
        for (int k = 0; k < t->m; k++) json_object_set_new(objs, t->names[k], num(r->mean[k]));
    } else {
        json_object_set_new(o, "trials", json_incref(r->trials));
        json_object_set_new(o, "n", json_integer(r->n));
        json_t *states = json_object();
        for (int s = 0; s < 6; s++)
            if (r->states[s])
                json_object_set_new(states, STATE_ORDER[s], json_integer(r->states[s]));
        json_object_set_new(o, "states", states);
        for (int k = 0; k < t->m; k++)
            json_object_set_new(
                objs, t->names[k],
                json_pack("{s:o, s:o}", "mean", num(r->mean[k]), "std", num(r->sd[k])));
    }
    json_object_set_new(o, "params", json_incref(r->params));
    if (t->njobs > 1) json_object_set_new(o, "match", json_string(r->match));
    json_object_set_new(o, "objectives", objs);
    json_object_set_new(o, "rank", r->rank ? json_integer(r->rank) : json_null());
    /* JSON has no infinity: a front's end is "inf" */
    json_object_set_new(o, "crowding", isinf(r->crowd) ? json_string("inf") : num(r->crowd));
    json_object_set_new(o, "pareto", json_boolean(r->rank == 1));
    return o;
}

/* The result object of the ranked table t. */
static json_t *table_json(const ftable *t, int front_only) {
    json_t *jobs = json_array(), *objs = json_array(), *rows = json_array(), *refj = json_array();
    for (int j = 0; j < t->njobs; j++) json_array_append_new(jobs, json_integer(t->job_ids[j]));
    for (int k = 0; k < t->m; k++)
        json_array_append_new(objs, json_pack("{s:s, s:s}", "name", t->names[k], "goal",
                                              t->maximize[k] ? "max" : "min"));
    for (size_t i = 0; i < t->n; i++)
        if (!front_only || t->rows[i].rank == 1)
            json_array_append_new(rows, row_json(t, &t->rows[i]));
    double ref[PARETO_MAX_OBJECTIVES];
    double hv = front_hv(t, ref);
    for (int k = 0; isfinite(hv) && k < t->m; k++) json_array_append_new(refj, json_real(ref[k]));
    return json_pack("{s:o, s:o, s:b, s:o, s:o, s:o}", "jobs", jobs, "objectives", objs,
                     "grouped_by_seed", t->grouped, "hypervolume", num(hv), "reference", refj,
                     t->grouped ? "groups" : "trials", rows);
}

json_t *front_table(json_t *const *jobs, const long long *job_ids, int njobs, int grouped,
                    int front_only, char *err, size_t errlen) {
    ftable t;
    memset(&t, 0, sizeof t);
    t.njobs = njobs > FRONT_MAX_JOBS ? FRONT_MAX_JOBS : njobs;
    t.jobs = jobs;
    t.job_ids = job_ids;
    t.grouped = grouped;
    t.by_key = json_object();
    json_t *out = NULL;
    int rc = t.by_key ? 0 : -1;
    for (int j = 0; j < t.njobs && rc == 0; j++)
        if (take_objectives(&t, j, err, errlen)) {
            ftable_free(&t);
            return NULL;
        }
    json_t *shared = rc == 0 ? shared_keys(&t) : NULL;
    for (int j = 0; j < t.njobs && rc == 0; j++) rc = add_trials(&t, j, shared);
    json_decref(shared);
    if (rc == 0) rc = finish_rows(&t);
    if (rc == 0) {
        qsort(t.rows, t.n, sizeof *t.rows, cmp_rows);
        out = table_json(&t, front_only);
    }
    ftable_free(&t);
    if (!out) bf_fail(err, errlen, "out of memory");
    return out;
}
