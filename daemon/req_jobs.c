/* req_jobs.c — the requests that read jobs and trials: jobs (every job's
 * summary), job (one job, its trials and, for s2s, its stages), trial (one
 * trial, its config and stages), wait (is the job done, and well), best (the
 * top trials by the job's metric) and rungs (the early-stopping ladder).
 * They only read: nothing here changes a trial or a run. */
#include "daemon/req.h"

#include "common/errbuf.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define FAIL_LOG_LINES 15 /* of a failed trial's log, in `trial` */

static json_t *trial_summary(const store_trial *t) {
    json_error_t je;
    json_t *params = t->params_json ? json_loads(t->params_json, 0, &je) : NULL;
    json_t *latest = t->latest_json ? json_loads(t->latest_json, 0, &je) : NULL;
    json_t *o =
        json_pack("{s:I, s:I, s:I, s:s, s:i, s:s, s:o, s:o, s:o}", "id", (json_int_t)t->id, "job",
                  (json_int_t)t->job_id, "index", (json_int_t)t->index, "state",
                  store_state_name(t->state), "attempts", t->attempts, "hash", t->hash, "params",
                  params ? params : json_object(), "latest", latest ? latest : json_object(),
                  "best", isfinite(t->best) ? json_real(t->best) : json_null());
    /* an early stop's reason (decided, or already acted on) */
    if (o && t->stop_reason && (t->state == TRIAL_STOPPED || t->state == TRIAL_RUNNING))
        json_object_set_new(o, "reason", json_string(t->stop_reason));
    return o;
}

/* The stages of an s2s trial as a JSON array (NULL for other trials), and
 * in waiting (when the trial is PENDING behind another trial's run of its
 * next stage) why it waits; "" otherwise. */
static json_t *trial_stages_json(bfd *d, int64_t trial, trial_state state, char *waiting,
                                 size_t wlen) {
    char err[1024];
    store_stage plan[STAGE_MAX];
    int n = 0;
    if (wlen) waiting[0] = '\0';
    if (store_trial_stages(d->st, trial, plan, &n, err, sizeof err)) {
        bfd_log("trial %lld: %s", (long long)trial, err);
        return NULL;
    }
    if (n == 0) return NULL;
    json_t *arr = json_array();
    int first_open = -1;
    for (int i = 0; i < n; i++) {
        const store_stage *st = &plan[i];
        char folder[1300];
        snprintf(folder, sizeof folder, "%s/stages/%s", d->o->home, st->dir);
        json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s}", "name", st->name, "key", st->key,
                              "parent", st->parent, "state",
                              store_stage_state_name(st->known ? st->state : STAGE_PENDING),
                              "folder", folder);
        json_object_set_new(o, "trial", st->trial ? json_integer(st->trial) : json_null());
        json_object_set_new(o, "job", st->trial ? json_integer(st->job) : json_null());
        json_object_set_new(o, "shared", json_boolean(st->trial && st->trial != trial));
        json_object_set_new(o, "attempts", json_integer(st->attempts));
        json_object_set_new(o, "failures", json_integer(st->failures));
        if (st->started > 0) json_object_set_new(o, "started", json_real(st->started));
        if (st->ended > 0) json_object_set_new(o, "ended", json_real(st->ended));
        if (st->message[0]) json_object_set_new(o, "message", json_string(st->message));
        json_array_append_new(arr, o);
        if (first_open < 0 && !(st->known && st->state == STAGE_DONE)) first_open = i;
    }
    if (state == TRIAL_PENDING && first_open >= 0 && plan[first_open].known &&
        plan[first_open].state == STAGE_RUNNING && plan[first_open].trial != trial)
        snprintf(waiting, wlen, "waiting for stage %s %.8s\xe2\x80\xa6 of t%lld",
                 plan[first_open].name, plan[first_open].key, (long long)plan[first_open].trial);
    return arr;
}

/* The summaries of n trials, a new JSON array. */
static json_t *trial_summaries(const store_trial *ts, size_t n) {
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, trial_summary(&ts[i]));
    return arr;
}

#define JOBS_PAGE_MAX 1000  /* jobs per `jobs` reply */
#define TRIALS_PAGE_MAX 500 /* trials per `job` reply: the loop is held ~10 ms a page, not 100 */
#define TRIALS_PAGE_S 0.010 /* of work on a `job` page, then it ends (BF_JOB_PAGE_MS) */

/* A monotonic clock in seconds, for a page's work budget. */
static double page_clock_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* How long a `job` page may work, in seconds: TRIALS_PAGE_S,
 * or BF_JOB_PAGE_MS from bfd's environment (0: one trial a page, which
 * tests use to make every job span many pages). */
static double trials_page_s(void) {
    const char *v = getenv("BF_JOB_PAGE_MS");
    char *end;
    double ms = v && *v ? strtod(v, &end) : -1;
    return v && *v && !*end && ms >= 0 ? ms * 1e-3 : TRIALS_PAGE_S;
}

/* Array of job_json of a page of jobs (ids above after, at most limit) in
 * submit order; *last the last id in it. */
static json_t *jobs_json(store *st, long long after, int limit, long long *last, char *err,
                         size_t errlen) {
    store_job *jobs = NULL;
    size_t n = 0;
    if (store_jobs(st, after, limit, &jobs, &n, err, errlen)) return NULL;
    json_t *arr = json_array();
    if (!arr) bf_fail(err, errlen, "jobs_json: out of memory");
    *last = n ? jobs[n - 1].id : after;
    for (size_t i = 0; arr && i < n; i++) {
        json_t *o = job_json(&jobs[i], err, errlen);
        if (!o || json_array_append_new(arr, o)) {
            json_decref(arr);
            arr = NULL;
        }
    }
    free(jobs);
    return arr;
}

void req_jobs(bfd *d, void *s, proto_msg *m) {
    char ferr[512], err[1024];
    long long after, limit, last;
    FIELD(proto_get_int(m->body, "after", 0, 0, PROTO_MAX_INT, 0, &after, ferr, sizeof ferr));
    FIELD(proto_get_int(m->body, "limit", 0, 1, JOBS_PAGE_MAX, JOBS_PAGE_MAX, &limit, ferr,
                        sizeof ferr));
    /* one more than asked says whether another page follows */
    json_t *arr = jobs_json(d->st, after, (int)limit + 1, &last, err, sizeof err);
    if (!arr) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "jobs: %s", err);
        return;
    }
    int more = json_array_size(arr) > (size_t)limit;
    if (more) {
        json_array_remove(arr, (size_t)limit);
        last = json_integer_value(json_object_get(json_array_get(arr, (size_t)limit - 1), "id"));
    }
    json_t *b = json_pack("{s:o, s:I, s:b}", "jobs", arr, "last", (json_int_t)last, "more", more);
    reply(d, s, m, "jobs", b);
    json_decref(b);
}

void req_job(bfd *d, void *s, proto_msg *m) {
    char ferr[512];
    long long id, after, limit;
    double t0 = page_clock_s(), budget = trials_page_s(); /* the page's work, from here */
    FIELD(proto_get_int(m->body, "job", 1, 1, PROTO_MAX_INT, 0, &id, ferr, sizeof ferr));
    FIELD(proto_get_int(m->body, "after", 0, -1, PROTO_MAX_INT, -1, &after, ferr, sizeof ferr));
    FIELD(proto_get_int(m->body, "limit", 0, 1, TRIALS_PAGE_MAX, TRIALS_PAGE_MAX, &limit, ferr,
                        sizeof ferr));
    store_job j;
    json_t *b;
    store_trial *ts;
    size_t n;
    /* one more than asked says whether another page follows */
    if (get_job_with_trials(d, s, m, id, after, (int)limit + 1, &j, &b, &ts, &n)) return;
    /* the page ends at limit trials, or sooner once its work (the job's
     * row and the page's query, then per trial a failure's lookup, an s2s
     * trial's stages: a query or more each) passed the budget, so one page
     * never holds the loop long; a page has at least one trial, and bfctl
     * follows "last" whatever the page's size */
    size_t page = n > (size_t)limit ? (size_t)limit : n;
    json_t *arr = json_array();
    size_t i = 0;
    for (; i < page; i++) {
        if (i > 0 && page_clock_s() - t0 >= budget) break;
        json_t *row = trial_summary(&ts[i]);
        json_array_append_new(arr, row);
        if (ts[i].state == TRIAL_FAILED) { /* why it failed, in one line */
            char msg[1024], err[1024];
            int att = 0;
            if (store_trial_last_failure(d->st, ts[i].id, &att, msg, sizeof msg, err, sizeof err))
                bfd_log("trial %lld: %s", (long long)ts[i].id, err);
            else
                json_object_set_new(row, "failure",
                                    json_pack("{s:i, s:s}", "attempt", att, "message", msg));
        }
        if (!pipeline_stages(j.pipeline)) continue;
        /* a staged trial's attempts are one per stage it ran: say those and
         * its retries apart, so six stages do not read as six retries */
        store_stage plan[STAGE_MAX];
        int np = 0, runs = 0, retries = 0;
        char err[1024];
        if (store_trial_stages(d->st, ts[i].id, plan, &np, err, sizeof err) == 0) {
            for (int k = 0; k < np; k++)
                if (plan[k].known && plan[k].trial == ts[i].id) {
                    runs++;
                    retries += plan[k].attempts > 1 ? plan[k].attempts - 1 : 0;
                }
            json_object_set_new(row, "stage_runs", json_integer(runs));
            json_object_set_new(row, "retries", json_integer(retries));
        }
        char waiting[256];
        if (ts[i].state != TRIAL_PENDING) continue;
        json_decref(trial_stages_json(d, ts[i].id, ts[i].state, waiting, sizeof waiting));
        if (waiting[0]) json_object_set_new(row, "waiting", json_string(waiting));
    }
    int more = i < n;
    json_object_set_new(b, "last", json_integer(i ? (json_int_t)ts[i - 1].index : after));
    json_object_set_new(b, "more", json_boolean(more));
    json_object_set_new(b, "trials", arr);
    store_trials_free(ts, n);
    if (!strcmp(j.pipeline, "s2s")) {
        store_stage_counts sc;
        char err[1024];
        if (store_job_stage_counts(d->st, id, &sc, err, sizeof err)) {
            bfd_log("job %lld: %s", id, err);
        } else {
            json_t *bs = json_object();
            for (int k = 0; k < STAGE_N_STATES; k++)
                json_object_set_new(bs, store_stage_state_name((stage_state)k),
                                    json_integer(sc.by_state[k]));
            json_object_set_new(
                b, "stages",
                json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:o}", "uses", (json_int_t)sc.uses,
                          "distinct", (json_int_t)sc.distinct, "shared", (json_int_t)sc.shared,
                          "reused", (json_int_t)sc.reused, "from_other_jobs",
                          (json_int_t)sc.from_other_jobs, "run", (json_int_t)sc.run, "states", bs));
        }
    }
    json_object_set_new(b, "method", json_string(j.method));
    json_object_set_new(b, "to_propose",
                        json_integer(j.closed ? 0 : (json_int_t)(j.n_trials - j.n_proposed)));
    reply(d, s, m, "job", b);
    json_decref(b);
}

/* Where a trial's checkpoints are: {"last": {"dir", "step"} or null (its
 * run folder's set, state.json's step; an older checkpoint.bin has step
 * null), "best": {"metric", "value", "step", "checkpoint"} or null (the step
 * of its best value of the job's metric; checkpoint: the run folder when
 * its one set was written at that step, else null: a run keeps its last
 * set only)}. */
static json_t *trial_checkpoints_json(bfd *d, const store_trial *t) {
    char dir[1300], p[1400], err[1024];
    snprintf(dir, sizeof dir, "%s/trials/%lld", d->o->home, (long long)t->id);
    json_t *last = json_null();
    long long last_step = -1;
    struct stat sb;
    snprintf(p, sizeof p, "%s/state.json", dir);
    if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size < (1 << 20)) {
        json_error_t je;
        json_t *state = json_load_file(p, 0, &je);
        json_t *step = json_object_get(state, "step");
        if (json_is_integer(step)) last_step = (long long)json_integer_value(step);
        json_decref(last);
        last = json_pack("{s:s, s:o}", "dir", dir, "step",
                         last_step >= 0 ? json_integer(last_step) : json_null());
        json_decref(state);
    } else {
        snprintf(p, sizeof p, "%s/checkpoint.bin", dir);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
            last = json_pack("{s:s, s:n}", "dir", dir, "step");
    }
    json_t *best = json_null();
    store_job j;
    store_series *sr = NULL;
    size_t ns = 0;
    if (store_job_get(d->st, t->job_id, &j, err, sizeof err) == 0 &&
        store_job_series(d->st, t->job_id, t->id, j.metric, &sr, &ns, err, sizeof err) == 0 &&
        ns == 1 && sr[0].n > 0) {
        int max = strcmp(j.goal, "max") == 0;
        size_t b = 0;
        for (size_t i = 1; i < sr[0].n; i++)
            if (max ? sr[0].values[i] > sr[0].values[b] : sr[0].values[i] < sr[0].values[b]) b = i;
        best = json_pack("{s:s, s:f, s:I, s:o}", "metric", j.metric, "value", sr[0].values[b],
                         "step", (json_int_t)sr[0].steps[b], "checkpoint",
                         last_step == sr[0].steps[b] ? json_string(dir) : json_null());
    }
    store_series_free(sr, ns);
    return json_pack("{s:o, s:o}", "last", last ? last : json_null(), "best",
                     best ? best : json_null());
}

void req_trial(bfd *d, void *s, proto_msg *m) {
    char ferr[512];
    long long id;
    FIELD(proto_get_int(m->body, "trial", 1, 1, PROTO_MAX_INT, 0, &id, ferr, sizeof ferr));
    store_trial t;
    if (get_trial(d, s, m, id, &t)) return;
    json_error_t je;
    json_t *params = t.params_json ? json_loads(t.params_json, 0, &je) : NULL;
    char logp[1300];
    snprintf(logp, sizeof logp, "%s/logs/%lld.log", d->o->home, id);
    json_t *b =
        json_pack("{s:I, s:I, s:I, s:s, s:i, s:s, s:o, s:s, s:s}", "id", (json_int_t)t.id, "job",
                  (json_int_t)t.job_id, "index", (json_int_t)t.index, "state",
                  store_state_name(t.state), "attempts", t.attempts, "hash", t.hash, "params",
                  params ? params : json_object(), "config", t.config ? t.config : "", "log", logp);
    if (t.stop_reason) json_object_set_new(b, "reason", json_string(t.stop_reason));
    if (t.source_trial) json_object_set_new(b, "source", json_integer(t.source_trial));
    json_object_set_new(b, "checkpoints", trial_checkpoints_json(d, &t));
    /* why a failed trial failed: its last failed attempt's end (exit status
     * or signal, the worker's reason) and the last lines of its log */
    if (t.state == TRIAL_FAILED) {
        char err[1024], msg[1024];
        int att = 0;
        if (store_trial_last_failure(d->st, t.id, &att, msg, sizeof msg, err, sizeof err))
            bfd_log("trial %lld: %s", id, err);
        json_t *f = json_object();
        json_object_set_new(f, "attempt", json_integer(att));
        json_object_set_new(f, "message", json_string(msg));
        json_t *tail = log_tail_json(d, id, FAIL_LOG_LINES);
        json_object_set_new(f, "log_tail", tail ? tail : json_null());
        json_object_set_new(b, "failure", f);
    }
    char waiting[256];
    json_t *stages = trial_stages_json(d, t.id, t.state, waiting, sizeof waiting);
    if (stages) json_object_set_new(b, "stages", stages);
    if (waiting[0]) json_object_set_new(b, "waiting", json_string(waiting));
    store_trial_free(&t);
    reply(d, s, m, "trial", b);
    json_decref(b);
}

void req_rungs(bfd *d, void *s, proto_msg *m) {
    char err[1024];
    long long id;
    store_job j;
    if (get_job_field(d, s, m, &id, &j)) return;
    json_t *b = adaptive_rungs_json(d->ad, d->st, id, err, sizeof err);
    if (!b) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "rungs: %s", err);
        return;
    }
    reply(d, s, m, "rungs", b);
    json_decref(b);
}

void req_wait(bfd *d, void *s, proto_msg *m) {
    char err[1024];
    long long id;
    store_job j;
    if (get_job_field(d, s, m, &id, &j)) return;
    json_t *states = job_states_json(d->st, id, err, sizeof err);
    if (!states) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "wait: %s", err);
        return;
    }
    json_int_t active = json_integer_value(json_object_get(states, "PENDING")) +
                        json_integer_value(json_object_get(states, "RUNNING"));
    json_int_t good = json_integer_value(json_object_get(states, "COMPLETED")) +
                      json_integer_value(json_object_get(states, "STOPPED"));
    int done = active == 0 && (j.closed || j.n_proposed >= j.n_trials); /* tpe: all proposed */
    int ok = done && good == (json_int_t)j.n_trials;
    json_t *b = json_pack("{s:I, s:b, s:b, s:o}", "job", (json_int_t)id, "done", done, "ok", ok,
                          "states", states);
    reply(d, s, m, "wait", b);
    json_decref(b);
}

void req_best(bfd *d, void *s, proto_msg *m) {
    char ferr[512], err[1024];
    long long id, k;
    FIELD(proto_get_int(m->body, "job", 1, 1, PROTO_MAX_INT, 0, &id, ferr, sizeof ferr));
    FIELD(proto_get_int(m->body, "n", 0, 1, 1000, 5, &k, ferr, sizeof ferr));
    store_job j;
    if (get_job(d, s, m, id, &j)) return;
    store_trial *ts = NULL;
    size_t n = 0;
    if (store_best_trials(d->st, id, (int)k, &ts, &n, err, sizeof err)) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "best: %s", err);
        return;
    }
    json_t *arr = trial_summaries(ts, n);
    store_trials_free(ts, n);
    json_t *b = json_pack("{s:I, s:s, s:s, s:o}", "job", (json_int_t)id, "metric", j.metric, "goal",
                          j.goal, "trials", arr);
    reply(d, s, m, "best", b);
    json_decref(b);
}
