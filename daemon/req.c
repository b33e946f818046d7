/* req.c — what the bfctl request handlers share: reading the job or trial a
 * request names (replying not_found or internal when it cannot) and a job's
 * JSON summary. The table of requests is req_table.c. It handles no request
 * itself and owns no socket. */
#include "daemon/req.h"

#include "common/errbuf.h"

#include <string.h>

json_t *job_states_json(store *st, int64_t job, char *err, size_t errlen) {
    long long counts[TRIAL_N_STATES];
    if (store_job_state_counts(st, job, counts, err, errlen)) return NULL;
    json_t *o = json_object();
    for (int i = 0; o && i < TRIAL_N_STATES; i++)
        if (counts[i] > 0 &&
            json_object_set_new(o, store_state_name((trial_state)i), json_integer(counts[i]))) {
            json_decref(o);
            o = NULL;
        }
    if (!o) bf_fail(err, errlen, "job_states_json: out of memory");
    return o;
}

json_t *job_json(const store_job *j, char *err, size_t errlen) {
    json_t *states = json_object();
    for (int i = 0; states && i < TRIAL_N_STATES; i++)
        if (j->counts[i] > 0 && json_object_set_new(states, store_state_name((trial_state)i),
                                                    json_integer(j->counts[i]))) {
            json_decref(states);
            states = NULL;
        }
    if (!states) return bf_fail(err, errlen, "job_json: out of memory"), NULL;
    json_t *o =
        json_pack("{s:I, s:s, s:s, s:f, s:i, s:i, s:i, s:i, s:I, s:s, s:s, s:o}", "id",
                  (json_int_t)j->id, "name", j->name, "pipeline", j->pipeline, "submitted",
                  j->submitted, "priority", j->priority, "retries", j->retries, "ranks", j->ranks,
                  "gpus_per_rank", j->gpus_per_rank, "n_trials", (json_int_t)j->n_trials, "metric",
                  j->metric, "goal", j->goal, "states", states);
    if (!o) return bf_fail(err, errlen, "json_pack(job): out of memory or invalid text"), NULL;
    /* its objectives, [{"name", "goal"}] (one: the metric above) */
    json_t *arr = json_array();
    for (int i = 0; i < j->n_objectives; i++)
        json_array_append_new(arr, json_pack("{s:s, s:s}", "name", j->objectives[i].name, "goal",
                                             j->objectives[i].maximize ? "max" : "min"));
    json_object_set_new(o, "objectives", arr);
    /* how many of its trials failed for good (what `ls` marks) */
    json_t *f = json_object_get(states, "FAILED");
    json_object_set_new(o, "failed", json_integer(f ? json_integer_value(f) : 0));
    return o;
}

/* Reads a job for a request; replies not_found/internal itself on failure. */
int get_job(bfd *d, void *s, proto_msg *m, long long id, store_job *j) {
    char err[1024];
    int rc = store_job_get(d->st, id, j, err, sizeof err);
    if (rc == 1) reply_err(d, s, m, PROTO_E_NOT_FOUND, "%s: no job %lld", m->type, id);
    if (rc < 0) reply_err(d, s, m, PROTO_E_INTERNAL, "%s: %s", m->type, err);
    return rc;
}

/* Reads a job for a request with its summary (job_json) in *jo and a page
 * of its trials (index above after, at most limit; <= 0: all) in *ts, *n;
 * both are the caller's to free (json_decref, store_trials_free). Replies
 * not_found/internal itself on failure and returns nonzero. */
int get_job_with_trials(bfd *d, void *s, proto_msg *m, long long id, long long after, int limit,
                        store_job *j, json_t **jo, store_trial **ts, size_t *n) {
    char err[1024];
    *jo = NULL;
    *ts = NULL;
    *n = 0;
    int rc = get_job(d, s, m, id, j);
    if (rc) return rc;
    *jo = job_json(j, err, sizeof err);
    if (!*jo || store_job_trials_page(d->st, id, after, limit, ts, n, err, sizeof err)) {
        json_decref(*jo);
        *jo = NULL;
        reply_err(d, s, m, PROTO_E_INTERNAL, "%s: %s", m->type, err);
        return -1;
    }
    return 0;
}

int get_trial_job(bfd *d, void *s, proto_msg *m, long long id, int64_t *job) {
    char err[1024];
    int rc = store_trial_job(d->st, id, job, err, sizeof err);
    if (rc == 1) reply_err(d, s, m, PROTO_E_NOT_FOUND, "%s: no trial %lld", m->type, id);
    if (rc < 0) reply_err(d, s, m, PROTO_E_INTERNAL, "%s: %s", m->type, err);
    return rc;
}

int get_trial(bfd *d, void *s, proto_msg *m, long long id, store_trial *t) {
    char err[1024];
    int64_t job;
    int rc = get_trial_job(d, s, m, id, &job);
    if (rc) return rc;
    if (store_get_trial(d->st, id, t, err, sizeof err)) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "%s: %s", m->type, err);
        return -1;
    }
    return 0;
}

int get_job_field(bfd *d, void *s, proto_msg *m, long long *id, store_job *j) {
    char ferr[512];
    if (proto_get_int(m->body, "job", 1, 1, PROTO_MAX_INT, 0, id, ferr, sizeof ferr)) {
        reply_err(d, s, m, PROTO_E_FIELD, "%s: %s", m->type, ferr);
        return -1;
    }
    return get_job(d, s, m, *id, j);
}
