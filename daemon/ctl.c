/* ctl.c — the table of bfctl requests (type name -> handler, each in the
 * ctl_*.c file of its family) and the preambles handlers share: reading the
 * job or trial a request names, replying not_found or internal when it
 * cannot. It handles no request itself and owns no socket. */
#include "daemon/ctl.h"

#include <string.h>

static const struct {
    const char *type;
    ctl_handler_fn fn;
} ctl_table[] = {
    {"submit", ctl_submit},   {"jobs", ctl_jobs},     {"job", ctl_job},     {"trial", ctl_trial},
    {"metrics", ctl_metrics}, {"cancel", ctl_cancel}, {"stop", ctl_stop},   {"wait", ctl_wait},
    {"best", ctl_best},       {"export", ctl_export}, {"logs", ctl_logs},   {"status", ctl_status},
    {"sync", ctl_sync},       {"resume", ctl_resume}, {"rungs", ctl_rungs},
};

ctl_handler_fn ctl_handler(const char *type) {
    for (size_t i = 0; i < sizeof ctl_table / sizeof ctl_table[0]; i++)
        if (strcmp(ctl_table[i].type, type) == 0) return ctl_table[i].fn;
    return NULL;
}

/* Reads a job for a request; replies not_found/internal itself on failure. */
int get_job(bfd *d, void *s, proto_msg *m, long long id, store_job *j) {
    char err[1024];
    int rc = store_job_get(d->st, id, j, err, sizeof err);
    if (rc == 1) reply_err(d, s, m, PROTO_E_NOT_FOUND, "%s: no job %lld", m->type, id);
    if (rc < 0) reply_err(d, s, m, PROTO_E_INTERNAL, "%s: %s", m->type, err);
    return rc;
}

/* Reads a job for a request with its summary (dstate_job_json) in *jo and its
 * trials in *ts, *n; both are the caller's to free (json_decref,
 * store_trials_free). Replies not_found/internal itself on failure and
 * returns nonzero. */
int get_job_with_trials(bfd *d, void *s, proto_msg *m, long long id, store_job *j, json_t **jo,
                        store_trial **ts, size_t *n) {
    char err[1024];
    *jo = NULL;
    *ts = NULL;
    *n = 0;
    int rc = get_job(d, s, m, id, j);
    if (rc) return rc;
    *jo = dstate_job_json(d->st, j, err, sizeof err);
    if (!*jo || store_job_trials(d->st, id, ts, n, err, sizeof err)) {
        json_decref(*jo);
        *jo = NULL;
        reply_err(d, s, m, PROTO_E_INTERNAL, "%s: %s", m->type, err);
        return -1;
    }
    return 0;
}

int get_trial(bfd *d, void *s, proto_msg *m, long long id, store_trial *t) {
    char err[1024];
    int64_t job;
    int rc = store_trial_job(d->st, id, &job, err, sizeof err);
    if (rc == 1) {
        reply_err(d, s, m, PROTO_E_NOT_FOUND, "%s: no trial %lld", m->type, id);
        return 1;
    }
    if (rc == 0 && store_get_trial(d->st, id, t, err, sizeof err)) rc = -1;
    if (rc < 0) reply_err(d, s, m, PROTO_E_INTERNAL, "%s: %s", m->type, err);
    return rc;
}
