/* adaptive.c — early stops and tpe proposals for bfd (see adaptive.h):
 * every judgement reads only the store and every decision is committed
 * there before bfd acts on it. It signals no process and sends no message
 * (workers.c does, with what it decides). */
#include "daemon/adaptive.h"
#include "common/errbuf.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/sched_stop.h"
#include "jobs/sched_tpe.h"

/* What bfd knows of one job, read once: jobs do not change after submit. */
typedef struct job_entry {
    int64_t job;
    sched_stop stop;
    int is_tpe;
    sweep_spec *spec; /* tpe: the sweep, parsed again from its stored text */
    sched_tpe_space space;
    int broken; /* its early_stop or sweep could not be read: logged once, then ignored */
    int m;      /* objectives: several make asha and hyperband MO-ASHA */
    sweep_objective obj[SWEEP_MAX_OBJECTIVES];
} job_entry;

/* The last step the median rule or threshold judged of a trial (not
 * durable: after a restart a trial's whole history is judged once, which
 * is how points stored while bfd was down are caught up). */
typedef struct judged {
    int64_t trial, step;
} judged;

struct adaptive {
    job_entry *jobs;
    size_t n, cap;
    judged *judged;
    size_t n_judged, cap_judged;
};

static judged *judged_of(adaptive *a, int64_t trial) {
    for (size_t i = 0; i < a->n_judged; i++)
        if (a->judged[i].trial == trial) return &a->judged[i];
    if (a->n_judged == a->cap_judged) {
        size_t cap = a->cap_judged ? 2 * a->cap_judged : 64;
        judged *nj = realloc(a->judged, cap * sizeof *nj);
        if (!nj) return NULL;
        a->judged = nj;
        a->cap_judged = cap;
    }
    a->judged[a->n_judged] = (judged){trial, -1};
    return &a->judged[a->n_judged++];
}

int adaptive_new(adaptive **out, char *err, size_t errlen) {
    *out = calloc(1, sizeof **out);
    return *out ? 0 : bf_fail(err, errlen, "adaptive_new: out of memory");
}

void adaptive_destroy(adaptive **ap) {
    if (!ap || !*ap) return;
    adaptive *a = *ap;
    for (size_t i = 0; i < a->n; i++) sweep_spec_destroy(&a->jobs[i].spec);
    free(a->jobs);
    free(a->judged);
    free(a);
    *ap = NULL;
}

static job_entry *entry(adaptive *a, store *st, int64_t job, char *err, size_t errlen) {
    for (size_t i = 0; i < a->n; i++)
        if (a->jobs[i].job == job) return &a->jobs[i];
    store_job j;
    int rc = store_job_get(st, job, &j, err, errlen);
    if (rc) {
        if (rc > 0) bf_fail(err, errlen, "no job %lld", (long long)job);
        return NULL;
    }
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 16;
        job_entry *nj = realloc(a->jobs, cap * sizeof *nj);
        if (!nj) {
            bf_fail(err, errlen, "adaptive: out of memory");
            return NULL;
        }
        a->jobs = nj;
        a->cap = cap;
    }
    job_entry *e = &a->jobs[a->n++];
    memset(e, 0, sizeof *e);
    e->job = job;
    if (sched_stop_parse(j.early_stop, strcmp(j.goal, "max") == 0, &e->stop, err, errlen)) {
        e->broken = 1;
        e->stop.method = SWEEP_STOP_NONE;
    }
    if (!e->stop.metric[0]) snprintf(e->stop.metric, sizeof e->stop.metric, "%s", j.metric);
    e->is_tpe = strcmp(j.method, "tpe") == 0;
    if (store_job_objectives(st, job, e->obj, &e->m, err, errlen)) {
        a->n--;
        return NULL;
    }
    return e;
}

/* The tpe sweep of e, parsed on first use. */
static int load_spec(job_entry *e, store *st, char *err, size_t errlen) {
    if (e->spec) return 0;
    char *text = NULL, file[CFG_PATH_MAX];
    if (store_job_source(st, e->job, &text, file, sizeof file, err, errlen)) return -1;
    if (!text)
        return bf_fail(err, errlen, "job %lld: its sweep text was not kept", (long long)e->job);
    sweep_errors se = {0};
    int rc = sweep_load_string(text, strlen(text), file, &e->spec, &se);
    free(text);
    if (rc) {
        bf_fail(err, errlen, "job %lld: its sweep no longer loads: %s", (long long)e->job,
                se.n ? se.msgs[0] : "unknown error");
        sweep_errors_free(&se);
        return -1;
    }
    if (sched_tpe_space_from(e->spec, &e->space, err, errlen)) {
        sweep_spec_destroy(&e->spec);
        return -1;
    }
    return 0;
}

const char *adaptive_stop_metric(adaptive *a, store *st, int64_t job) {
    char err[512];
    job_entry *e = entry(a, st, job, err, sizeof err);
    return e && e->stop.method != SWEEP_STOP_NONE ? e->stop.metric : NULL;
}

/* --------------------------------------------------------- early stopping */

static void fill_decision(store_decision *d, const job_entry *e, int64_t trial, const char *method,
                          int rung, int64_t rung_step, int64_t step, double value,
                          const sched_verdict *v) {
    memset(d, 0, sizeof *d);
    d->job = e->job;
    d->trial = trial;
    snprintf(d->method, sizeof d->method, "%s", method);
    d->rung = rung;
    d->rung_step = rung_step;
    d->step = step;
    d->value = value;
    d->cutoff = v->cutoff;
    d->n = v->n;
    d->stop = v->stop;
    snprintf(d->reason, sizeof d->reason, "%s", v->reason);
}

/* The first point at or after step of each of the m series: its values
 * into val[m] and the largest of their steps into *at. 0 when some series
 * has not reached step yet. */
static int point_at(const store_series *sr, int m, long long step, double *val, int64_t *at) {
    *at = 0;
    for (int k = 0; k < m; k++) {
        size_t i = 0;
        while (i < sr[k].n && sr[k].steps[i] < step) i++;
        if (i == sr[k].n) return 0;
        val[k] = sr[k].values[i];
        if (sr[k].steps[i] > *at) *at = sr[k].steps[i];
    }
    return 1;
}

/* ASHA under policy c (the job's, or a hyperband bracket's, whose
 * decisions go under `method`): every rung the trial has reached and that
 * has no decision yet, lowest first; stops at the first stop. `prefix` goes
 * before the reason (the bracket), "" for plain ASHA. sr: the trial's
 * series of each of e->m objectives (one: ASHA on the stop metric;
 * several: MO-ASHA, sched_mo_asha_judge). */
static int judge_asha(job_entry *e, const sched_stop *c, const char *method, const char *prefix,
                      store *st, int64_t trial, const store_series *sr, char *reason, size_t len,
                      char *err, size_t errlen) {
    store_decision *ds = NULL;
    size_t nd = 0;
    if (store_decisions(st, 0, trial, &ds, &nd, err, errlen)) return -1;
    int nr = sched_asha_n_rungs(c), out = 0, m = e->m > 1 ? e->m : 1;
    for (int k = 1; k <= nr && out == 0; k++) {
        long long rstep = sched_asha_rung_step(c, k);
        int decided = 0;
        for (size_t i = 0; i < nd; i++)
            if (!strcmp(ds[i].method, method) && ds[i].rung_step == rstep) decided = 1;
        if (decided) continue;
        double val[SWEEP_MAX_OBJECTIVES];
        int64_t at;
        if (!point_at(sr, m, rstep, val, &at)) break; /* not there yet */
        double *others = NULL;
        size_t no = 0;
        int rc = m > 1 ? store_rung_points(st, e->job, method, k, m, &others, &no, err, errlen)
                       : store_rung_values(st, e->job, method, k, &others, &no, err, errlen);
        if (rc) {
            out = -1;
            break;
        }
        sched_verdict v;
        if (m > 1)
            sched_mo_asha_judge(c, e->obj, m, k, at, val, others, no, &v);
        else
            sched_asha_judge(c, k, at, val[0], others, no, &v);
        free(others);
        if (prefix[0]) {
            char r[sizeof v.reason];
            memcpy(r, v.reason, sizeof r);
            size_t pl = strlen(prefix);
            if (pl >= sizeof v.reason) pl = sizeof v.reason - 1;
            memcpy(v.reason, prefix, pl);
            memcpy(v.reason + pl, r, sizeof v.reason - pl - 1);
            v.reason[sizeof v.reason - 1] = 0;
        }
        store_decision d;
        fill_decision(&d, e, trial, method, k, rstep, at, val[0], &v);
        if (m > 1) {
            d.n_point = m;
            memcpy(d.point, val, (size_t)m * sizeof *val);
        }
        int added;
        if (store_decision_add(st, &d, &added, err, errlen)) {
            out = -1;
            break;
        }
        if (v.stop) {
            snprintf(reason, len, "%s", v.reason);
            out = 1;
        }
    }
    free(ds);
    return out;
}

/* Median rule and threshold: every point of the trial not judged yet (in
 * step order; normally just the newest), until one says stop. */
static int judge_points(adaptive *a, job_entry *e, store *st, int64_t trial, const store_series *sr,
                        char *reason, size_t len, char *err, size_t errlen) {
    judged *jd = judged_of(a, trial);
    int64_t after = jd ? jd->step : -1;
    if (sr->steps[sr->n - 1] < e->stop.min_steps || sr->steps[sr->n - 1] <= after) return 0;
    store_series *all = NULL;
    size_t na = 0;
    double *avg = NULL;
    int median = e->stop.method == SWEEP_STOP_MEDIAN;
    if (median) {
        if (store_job_series(st, e->job, 0, e->stop.metric, &all, &na, err, errlen)) return -1;
        avg = malloc((na ? na : 1) * sizeof *avg);
        if (!avg) {
            store_series_free(all, na);
            return bf_fail(err, errlen, "median rule: out of memory");
        }
    }
    int out = 0;
    double best = sr->values[0];
    for (size_t p = 0; p < sr->n && out == 0; p++) {
        if (p > 0 && sched_better(&e->stop, sr->values[p], best)) best = sr->values[p];
        int64_t step = sr->steps[p];
        if (step < e->stop.min_steps || step <= after ||
            (p + 1 < sr->n && sr->steps[p + 1] == step))
            continue; /* judged before, too early, or not the last point at this step */
        sched_verdict v;
        const char *method = median ? "median" : "threshold";
        if (median) {
            size_t k = 0;
            for (size_t i = 0; i < na; i++)
                if (all[i].trial != trial &&
                    sched_running_mean(all[i].steps, all[i].values, all[i].n, step, &avg[k]))
                    k++;
            sched_median_judge(&e->stop, step, best, avg, k, &v);
        } else {
            sched_threshold_judge(&e->stop, step, best, &v);
        }
        if (!v.stop) continue;
        store_decision d;
        fill_decision(&d, e, trial, method, 0, step, step, best, &v);
        int added;
        if (store_decision_add(st, &d, &added, err, errlen)) {
            out = -1;
            break;
        }
        snprintf(reason, len, "%s", v.reason);
        out = 1;
    }
    if (jd && out == 0) jd->step = sr->steps[sr->n - 1];
    free(avg);
    store_series_free(all, na);
    return out;
}

int adaptive_judge(adaptive *a, store *st, int64_t job, int64_t trial, char *reason, size_t len,
                   char *err, size_t errlen) {
    job_entry *e = entry(a, st, job, err, errlen);
    if (!e) return -1;
    if (e->stop.method == SWEEP_STOP_NONE) return 0;
    store_trial t;
    if (store_get_trial(st, trial, &t, err, errlen)) return -1;
    int running = t.state == TRIAL_RUNNING;
    if (t.stop_reason) {
        /* decided before (a restart came between the decision and the stop) */
        snprintf(reason, len, "%s", t.stop_reason);
        store_trial_free(&t);
        return running;
    }
    long long index = t.index;
    store_trial_free(&t);
    if (!running) return 0;
    store_series *sr = NULL;
    size_t ns = 0;
    if (store_job_series(st, job, trial, e->stop.metric, &sr, &ns, err, errlen)) return -1;
    int rc = 0;
    int mo =
        e->m > 1 && (e->stop.method == SWEEP_STOP_ASHA || e->stop.method == SWEEP_STOP_HYPERBAND);
    /* the series to judge are there: the stop metric's, or (MO-ASHA) every
     * objective's, read once the first has points */
    int ready = !mo && ns == 1 && sr[0].n > 0;
    if (mo && ns == 1 && sr[0].n > 0) {
        /* MO-ASHA: the series of every objective, in order */
        store_series_free(sr, ns);
        sr = calloc((size_t)e->m, sizeof *sr);
        if (!sr) return bf_fail(err, errlen, "mo-asha: out of memory");
        ns = 0;
        for (int k = 0; k < e->m; k++) {
            store_series *one = NULL;
            size_t n1 = 0;
            if (store_job_series(st, job, trial, e->obj[k].name, &one, &n1, err, errlen)) {
                store_series_free(sr, ns);
                return -1;
            }
            if (n1 == 1)
                sr[k] = one[0], free(one);
            else
                store_series_free(one, n1);
            ns++;
        }
        ready = 1;
    }
    if (ready) {
        if (e->stop.method == SWEEP_STOP_ASHA) {
            rc = judge_asha(e, &e->stop, "asha", "", st, trial, &sr[0], reason, len, err, errlen);
        } else if (e->stop.method == SWEEP_STOP_HYPERBAND) {
            sched_stop b;
            long long round = 0;
            int s = sched_hyperband_bracket_of(&e->stop, index, &round, &b);
            char method[40], prefix[80];
            /* round 0's bracket is hb-s<s>; a later round's is judged apart, hb-s<s>r<round> */
            if (round == 0) {
                snprintf(method, sizeof method, "hb-s%d", s < 0 ? 0 : s);
                snprintf(prefix, sizeof prefix, "hyperband bracket s=%d: ", s < 0 ? 0 : s);
            } else {
                snprintf(method, sizeof method, "hb-s%dr%lld", s < 0 ? 0 : s, round % 100000);
                snprintf(prefix, sizeof prefix, "hyperband round %lld bracket s=%d: ", round,
                         s < 0 ? 0 : s);
            }
            rc = s < 0 ? 0
                       : judge_asha(e, &b, method, prefix, st, trial, &sr[0], reason, len, err,
                                    errlen);
        } else {
            rc = judge_points(a, e, st, trial, &sr[0], reason, len, err, errlen);
        }
    }
    store_series_free(sr, ns);
    return rc;
}

/* ------------------------------------------------------------- proposals */

typedef struct add_ctx {
    store *st;
    int64_t job;
    const char *point;
    int64_t id;
    char *err;
    size_t errlen;
} add_ctx;

static int add_proposed(void *ud, const sweep_trial *t) {
    add_ctx *c = ud;
    return store_add_trial(c->st, c->job, t, c->point, &c->id, c->err, c->errlen);
}

/* Observations of a job for the sampler: finished trials (COMPLETED, or
 * STOPPED with their last values) that have a point and a value of each
 * of the m metrics. xs[n * dims], ys[n * m] malloc'd. */
static int observations(job_entry *e, store *st, const sweep_objective *obj, int m, double **xs,
                        double **ys, size_t *n, char *err, size_t errlen) {
    store_trial *ts = NULL;
    size_t nt = 0;
    *xs = *ys = NULL;
    *n = 0;
    if (store_job_trials(st, e->job, &ts, &nt, err, errlen)) return -1;
    int dims = e->space.n;
    *xs = malloc((nt ? nt : 1) * (size_t)(dims ? dims : 1) * sizeof **xs);
    *ys = malloc((nt ? nt : 1) * (size_t)m * sizeof **ys);
    if (!*xs || !*ys) {
        store_trials_free(ts, nt);
        free(*xs), free(*ys);
        *xs = *ys = NULL;
        return bf_fail(err, errlen, "tpe: out of memory");
    }
    for (size_t i = 0; i < nt; i++) {
        if ((ts[i].state != TRIAL_COMPLETED && ts[i].state != TRIAL_STOPPED) || !ts[i].point_json)
            continue;
        json_error_t je;
        json_t *pt = json_loads(ts[i].point_json, 0, &je);
        json_t *lat = ts[i].latest_json ? json_loads(ts[i].latest_json, 0, &je) : NULL;
        int all = json_is_array(pt) && (int)json_array_size(pt) == dims;
        for (int k = 0; all && k < m; k++) {
            json_t *val = json_object_get(json_object_get(lat, obj[k].name), "value");
            all = json_is_number(val);
            if (all) (*ys)[*n * (size_t)m + (size_t)k] = json_number_value(val);
        }
        if (all) {
            for (int d = 0; d < dims; d++)
                (*xs)[*n * (size_t)dims + (size_t)d] = json_number_value(json_array_get(pt, d));
            (*n)++;
        }
        json_decref(pt);
        json_decref(lat);
    }
    store_trials_free(ts, nt);
    return 0;
}

static int propose_job(adaptive *a, store *st, int64_t job, char *err, size_t errlen) {
    job_entry *e = entry(a, st, job, err, errlen);
    if (!e) return -1;
    if (e->broken == 2) return 0;
    if (load_spec(e, st, err, errlen)) {
        e->broken = 2; /* said once; the job gets no more trials */
        return -1;
    }
    store_job j;
    if (store_job_get(st, job, &j, err, errlen)) return -1;
    long long counts[TRIAL_N_STATES];
    if (store_job_state_counts(st, job, counts, err, errlen)) return -1;
    long long active = counts[TRIAL_PENDING] + counts[TRIAL_RUNNING];
    int parallel = j.parallel > 0 ? j.parallel : 1;
    if (active >= parallel || j.n_proposed >= j.n_trials) return 0;
    /* several objectives: MOTPE (sched_tpe_propose_mo) */
    sweep_objective obj[SWEEP_MAX_OBJECTIVES];
    int m, maxi[SWEEP_MAX_OBJECTIVES];
    if (store_job_objectives(st, job, obj, &m, err, errlen)) return -1;
    for (int k = 0; k < m; k++) maxi[k] = obj[k].maximize;
    double *xs, *ys;
    size_t n;
    if (observations(e, st, obj, m, &xs, &ys, &n, err, errlen)) return -1;
    sched_tpe_opts o = {.seed = e->spec->seed,
                        .startup = e->spec->startup_trials,
                        .n_candidates = 24,
                        .maximize = strcmp(j.goal, "max") == 0};
    int added = 0;
    while (active < parallel && j.n_proposed < j.n_trials) {
        double x[SWEEP_MAX_PARAMS];
        int prc = m > 1 ? sched_tpe_propose_mo(&e->space, xs, ys, m, maxi, n, j.n_proposed, &o, x)
                        : sched_tpe_propose(&e->space, xs, ys, n, j.n_proposed, &o, x);
        if (prc < 0) {
            added = bf_fail(err, errlen, "tpe: proposal failed (out of memory)");
            break;
        }
        char point[SWEEP_MAX_PARAMS * 26 + 4];
        size_t w = 0;
        point[w++] = '[';
        for (int d = 0; d < e->space.n; d++)
            w += (size_t)snprintf(point + w, sizeof point - w, "%s%.17g", d ? ", " : "", x[d]);
        snprintf(point + w, sizeof point - w, "]");
        add_ctx c = {st, job, point, 0, err, errlen};
        if (sweep_trial_at(e->spec, j.n_proposed, x, add_proposed, &c, err, errlen)) {
            added = -1;
            break;
        }
        active++;
        j.n_proposed++;
        added++;
    }
    free(xs);
    free(ys);
    return added;
}

int adaptive_propose(adaptive *a, store *st, char *err, size_t errlen) {
    int64_t *ids = NULL;
    size_t n = 0;
    if (store_proposing_jobs(st, &ids, &n, err, errlen)) return -1;
    int total = 0, rc = 0;
    for (size_t i = 0; i < n; i++) {
        int k = propose_job(a, st, ids[i], err, errlen);
        if (k < 0) {
            rc = -1;
            continue;
        }
        total += k;
    }
    free(ids);
    return rc < 0 ? -1 : total;
}

/* ------------------------------------------------------------- rung table */

/* The objective values of an MO-ASHA decision, or NULL when it has none. */
static json_t *point_json(const store_decision *d) {
    if (d->n_point <= 0) return NULL;
    json_t *a = json_array();
    for (int k = 0; k < d->n_point; k++) json_array_append_new(a, json_real(d->point[k]));
    return a;
}

static json_t *decision_json(const store_decision *d) {
    json_t *o = json_pack("{s:I, s:I, s:s, s:i, s:I, s:I, s:f, s:o, s:i, s:b, s:s, s:f}", "id",
                          (json_int_t)d->id, "trial", (json_int_t)d->trial, "method", d->method,
                          "rung", d->rung, "rung_step", (json_int_t)d->rung_step, "step",
                          (json_int_t)d->step, "value", d->value, "cutoff",
                          isfinite(d->cutoff) ? json_real(d->cutoff) : json_null(), "n", d->n,
                          "stop", d->stop, "reason", d->reason, "time", d->time);
    json_t *p = point_json(d);
    if (o && p) json_object_set_new(o, "point", p);
    return o;
}

json_t *adaptive_rungs_json(adaptive *a, store *st, int64_t job, char *err, size_t errlen) {
    job_entry *e = entry(a, st, job, err, errlen);
    if (!e) return NULL;
    store_job j;
    if (store_job_get(st, job, &j, err, errlen)) return NULL;
    store_decision *ds = NULL;
    size_t nd = 0;
    if (store_decisions(st, job, 0, &ds, &nd, err, errlen)) return NULL;
    const sched_stop *c = &e->stop;
    json_t *b = json_pack("{s:I, s:s, s:s, s:s, s:I}", "job", (json_int_t)job, "method",
                          sweep_stop_name(c->method), "metric", c->metric, "goal", j.goal,
                          "min_steps", (json_int_t)c->min_steps);
    if (e->m > 1) { /* MO-ASHA judges every objective; a decision's point has their values */
        json_t *objs = json_array();
        for (int k = 0; k < e->m; k++)
            json_array_append_new(objs, json_pack("{s:s, s:s}", "name", e->obj[k].name, "goal",
                                                  e->obj[k].maximize ? "max" : "min"));
        json_object_set_new(b, "objectives", objs);
    }
    json_t *rungs = json_array(), *all = json_array();
    if (c->method == SWEEP_STOP_ASHA || c->method == SWEEP_STOP_HYPERBAND) {
        json_object_set_new(b, "reduction_factor", json_real(c->eta));
        json_object_set_new(b, "max_steps", json_integer(c->max_steps));
    }
    if (c->method == SWEEP_STOP_MEDIAN)
        json_object_set_new(b, "min_trials", json_integer(c->min_trials));
    if (c->method == SWEEP_STOP_HYPERBAND) {
        /* the bracket table; each bracket's decisions are under "hb-s<s>" */
        sched_hb_bracket hb[SCHED_MAX_RUNGS];
        int nb = sched_hyperband_brackets(c->max_steps, c->min_steps, c->eta, hb, SCHED_MAX_RUNGS);
        json_t *brs = json_array();
        for (int i = 0; i < nb; i++) {
            json_t *rs = json_array();
            for (int k = 0; k < hb[i].n_rungs; k++)
                json_array_append_new(rs, json_integer(hb[i].rungs[k]));
            json_array_append_new(brs, json_pack("{s:i, s:I, s:f, s:o}", "s", hb[i].s, "n",
                                                 (json_int_t)hb[i].n, "r", hb[i].r, "rungs", rs));
        }
        json_object_set_new(b, "brackets", brs);
    }
    int nr = c->method == SWEEP_STOP_ASHA ? sched_asha_n_rungs(c) : 0;
    for (int k = 1; k <= nr; k++) {
        json_t *trials = json_array();
        double *vals = malloc((nd ? nd : 1) * sizeof *vals);
        size_t nv = 0;
        for (size_t i = 0; i < nd; i++) {
            if (strcmp(ds[i].method, "asha") || ds[i].rung != k) continue;
            if (vals) vals[nv++] = ds[i].value;
            json_t *row = json_pack("{s:I, s:I, s:f, s:b, s:s}", "trial", (json_int_t)ds[i].trial,
                                    "step", (json_int_t)ds[i].step, "value", ds[i].value, "stop",
                                    ds[i].stop, "reason", ds[i].reason);
            json_t *p = point_json(&ds[i]);
            if (row && p) json_object_set_new(row, "point", p);
            json_array_append_new(trials, row);
        }
        json_t *cut = json_null();
        int keep = 0;
        if (nv > 0 && e->m > 1) {
            /* MO-ASHA: no one value cuts; the top floor(n / eta) continue */
            keep = (int)floor((double)nv / c->eta);
            if (keep < 1) keep = 1;
        } else if (nv > 0) {
            /* the cutoff now: judge the worst value present against the rest */
            sched_verdict v;
            sched_asha_judge(c, k, 0, vals[0], vals + 1, nv - 1, &v);
            cut = json_real(v.cutoff);
            keep = v.keep;
        }
        free(vals);
        json_array_append_new(rungs, json_pack("{s:i, s:I, s:i, s:i, s:o, s:o}", "rung", k, "step",
                                               (json_int_t)sched_asha_rung_step(c, k), "n", (int)nv,
                                               "keep", keep, "cutoff", cut, "trials", trials));
    }
    for (size_t i = 0; i < nd; i++) json_array_append_new(all, decision_json(&ds[i]));
    free(ds);
    json_object_set_new(b, "rungs", rungs);
    json_object_set_new(b, "decisions", all);
    return b;
}
