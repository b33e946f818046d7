/* req_control.c — the requests that change what runs: cancel (a job's
 * trials or one trial: CANCELLED in the store, then SIGTERM to the live
 * attempts and SIGKILL after the grace; a job is closed at once and its
 * pending trials move to CANCELLED a chunk per loop round, cancel_tick, so
 * a 100,000-trial job never stalls the loop), stop (a running trial checkpoints
 * and exits; it can be resumed) and resume (a STOPPED trial goes PENDING
 * and continues from its checkpoint). The state changes go through the
 * store first; the run table's processes are signalled after. */
#include "daemon/req.h"

#include <signal.h>
#include <stdio.h>

#define CANCEL_TRIALS_PER_ROUND 200 /* pending trials moved to CANCELLED per loop round */

/* The state, job and attempts of trial id: 0, or nonzero after a reply. */
static int get_trial_state(bfd *d, void *s, proto_msg *m, long long id, trial_state *st,
                           int64_t *job, int *attempts) {
    store_trial t;
    if (get_trial(d, s, m, id, &t)) return 1;
    *st = t.state;
    *job = t.job_id;
    *attempts = t.attempts;
    store_trial_free(&t);
    return 0;
}

/* Ends a running attempt on request (cancel): SIGTERM now, SIGKILL later. */
static void terminate_run(bfd *d, run *r) {
    r->ending = 1;
    kill_group(d, r, SIGTERM);
    r->kill_at = now_s() + d->c->kill_grace;
}

void req_cancel(bfd *d, void *s, proto_msg *m) {
    char ferr[512], err[1024];
    long long job = 0, trial = 0;
    FIELD(proto_get_int(m->body, "job", 0, 1, PROTO_MAX_INT, 0, &job, ferr, sizeof ferr));
    FIELD(proto_get_int(m->body, "trial", 0, 1, PROTO_MAX_INT, 0, &trial, ferr, sizeof ferr));
    if ((job != 0) == (trial != 0)) {
        reply_err(d, s, m, PROTO_E_FIELD, "cancel: give exactly one of 'job' and 'trial'");
        return;
    }
    int n = 0;
    if (job) {
        store_job j;
        if (get_job(d, s, m, job, &j)) return;
        if (store_job_cancel(d->st, job, &n, err, sizeof err)) {
            reply_err(d, s, m, PROTO_E_INTERNAL, "cancel: %s", err);
            return;
        }
        for (size_t i = 0; i < d->n_runs; i++)
            if (d->runs[i].job == job && !d->runs[i].ending) {
                d->runs[i].array_cancel = 1; /* its Slurm arrays go with one scancel each */
                terminate_run(d, &d->runs[i]);
            }
        publish_event(d, job, 0, "CANCELLED", 0, "job cancelled");
        d->cancelling = 1; /* its pending trials: a chunk per round */
    } else {
        trial_state st;
        int64_t tj;
        int att;
        if (get_trial_state(d, s, m, trial, &st, &tj, &att)) return;
        if (st != TRIAL_PENDING && st != TRIAL_RUNNING) {
            reply_err(d, s, m, PROTO_E_STATE, "cancel: trial %lld is %s", trial,
                      store_state_name(st));
            return;
        }
        if (store_trial_transition(d->st, trial, TRIAL_CANCELLED, "cancelled", err, sizeof err)) {
            reply_err(d, s, m, PROTO_E_INTERNAL, "cancel: %s", err);
            return;
        }
        run *r = find_run(d, trial);
        if (r && !r->ending) terminate_run(d, r);
        publish_event(d, tj, trial, "CANCELLED", att, "cancelled");
        n = 1;
    }
    bfd_log("cancel %s %lld: %d trial%s", job ? "job" : "trial", job ? job : trial, n,
            n == 1 ? "" : "s");
    json_t *b = json_pack("{s:i}", "cancelled", n);
    reply(d, s, m, "cancelled", b);
    json_decref(b);
    d->dirty = 1;
}

void cancel_tick(bfd *d) {
    char err[1024];
    int64_t job;
    int n, more;
    if (store_cancel_step(d->st, CANCEL_TRIALS_PER_ROUND, &job, &n, &more, err, sizeof err)) {
        bfd_log("cancelling pending trials: %s", err);
        return; /* tried again next round */
    }
    if (job && !more) bfd_log("job %lld: every pending trial cancelled", (long long)job);
    d->cancelling = more;
}

void req_stop(bfd *d, void *s, proto_msg *m) {
    char ferr[512];
    long long id;
    FIELD(proto_get_int(m->body, "trial", 1, 1, PROTO_MAX_INT, 0, &id, ferr, sizeof ferr));
    run *r = find_run(d, id);
    if (!r || r->ending) {
        store_trial t;
        if (get_trial(d, s, m, id, &t)) return;
        reply_err(d, s, m, PROTO_E_STATE, "stop: trial %lld is %s, not running", id,
                  store_state_name(t.state));
        store_trial_free(&t);
        return;
    }
    r->stop_requested = 1;
    send_stop(d, r, "stop requested");
    json_t *b = json_pack("{s:I}", "trial", (json_int_t)id);
    reply(d, s, m, "stopping", b);
    json_decref(b);
}

/* resume: a STOPPED trial goes back to PENDING and continues from its
 * checkpoint (a manual promotion past an early stop). */
void req_resume(bfd *d, void *s, proto_msg *m) {
    char ferr[512], err[1024];
    long long id;
    FIELD(proto_get_int(m->body, "trial", 1, 1, PROTO_MAX_INT, 0, &id, ferr, sizeof ferr));
    trial_state st;
    int64_t job;
    int att;
    if (get_trial_state(d, s, m, id, &st, &job, &att)) return;
    if (st != TRIAL_STOPPED) {
        reply_err(d, s, m, PROTO_E_STATE, "resume: trial %lld is %s; only a STOPPED trial resumes",
                  id, store_state_name(st));
        return;
    }
    /* a cancelled job starts no trial again: a resumed one would wait for ever */
    store_job j;
    if (get_job(d, s, m, job, &j)) return;
    if (j.closed) {
        reply_err(d, s, m, PROTO_E_STATE,
                  "resume: trial %lld belongs to job %lld, which is cancelled; clone it instead "
                  "(bfctl clone t%lld)",
                  id, (long long)job, id);
        return;
    }
    const char *why = "resumed by request (continues from its checkpoint)";
    if (store_trial_resume(d->st, id, why, err, sizeof err)) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "resume: %s", err);
        return;
    }
    bfd_log("trial %lld: %s", id, why);
    publish_event(d, job, id, "PENDING", att, why);
    json_t *b = json_pack("{s:I}", "trial", (json_int_t)id);
    reply(d, s, m, "resumed", b);
    json_decref(b);
    d->dirty = 1;
}
