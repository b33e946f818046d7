/* recover.c — what a restarted bfd makes of the attempts the store says
 * are RUNNING: one whose worker still lives (its pid with its token, or its
 * Slurm job still queued or running) is reattached to the run table, and
 * judged for the early stops it reached meanwhile; one that ended while bfd
 * was down is recorded from the outcome file it left, or failed. It runs
 * once, before the loop serves anyone; it launches nothing. */
#include "daemon/bfd_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Puts the live attempt of row (trial id of job; ss: how Slurm sees it)
 * back into the run table and judges the early stops it reached while bfd
 * was down. -1 when out of memory. */
static int reattach(bfd *d, int64_t id, int64_t job, const dstate_run *row, const slurm_status *ss,
                    char *err, size_t errlen) {
    store_job j;
    run *r = add_run(d);
    if (!r) return -1;
    r->trial = id;
    r->job = job;
    r->attempt = row->attempt;
    r->ranks = store_job_get(d->st, job, &j, err, errlen) == 0 ? j.ranks : 1;
    memcpy(r->token, row->token, sizeof r->token);
    r->pid = row->pid;
    parse_gpus(row->gpus, r->gpus, &r->n_gpus);
    r->started = row->started;
    r->last_seen = r->last_alive_check = r->last_progress = now_s();
    r->is_child = 0;
    r->hello_seen = 1; /* it ran before the restart: it reconnects within heartbeat_timeout */
    store_stage rs;
    if (store_trial_running_stage(d->st, r->trial, &rs, err, errlen) == 0) {
        snprintf(r->stage, sizeof r->stage, "%s", rs.name);
        snprintf(r->stage_key, sizeof r->stage_key, "%s", rs.key);
        snprintf(r->stage_dir, sizeof r->stage_dir, "%s", rs.dir);
        r->stage_last = rs.next[0] == '\0';
    }
    if (row->agent[0]) {
        /* its agent claims it with its next heartbeat (agents.c) */
        r->remote = 1;
        snprintf(r->agent, sizeof r->agent, "%s", row->agent);
        bfd_log("trial %lld attempt %d: on agent %s; reattaching", (long long)r->trial, r->attempt,
                r->agent);
    } else if (row->slurm_job[0]) {
        memcpy(r->slurm_job, row->slurm_job, sizeof r->slurm_job);
        r->slurm_phase = ss->phase;
        r->next_poll = now_s() + d->c->slurm_poll;
        bfd_log("trial %lld attempt %d: Slurm job %s still %s; reattaching", (long long)r->trial,
                r->attempt, r->slurm_job, ss->state);
    } else {
        bfd_log("trial %lld attempt %d: worker pid %d still running; reattaching",
                (long long)r->trial, r->attempt, (int)r->pid);
    }
    /* a stop decided before the restart is sent again (not decided
     * again); rungs reached while bfd was down are judged now */
    judge_run(d, r);
    return 0;
}

/* Records the attempt of trial id (row NULL: none recorded) that ended
 * while bfd was down: from the outcome file it left, else as failed. */
static void record_gone(bfd *d, int64_t id, int64_t job, const dstate_run *row,
                        const slurm_status *ss, char *err, size_t errlen) {
    run tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.trial = id;
    tmp.job = job;
    tmp.attempt = row ? row->attempt : 0;
    char why[256], reason[sizeof tmp.stop_reason];
    if (adaptive_judge(d->ad, d->st, job, id, reason, sizeof reason, err, errlen) == 1)
        snprintf(tmp.stop_reason, sizeof tmp.stop_reason, "%s", reason);
    if (row && row->slurm_job[0])
        snprintf(why, sizeof why, "Slurm job %s ended (%s) while bfd was down", row->slurm_job,
                 ss->state);
    else
        snprintf(why, sizeof why, "worker gone while bfd was down");
    /* an attempt that ended while bfd was down left its outcome, and its
     * points past the last acked one in metrics.jsonl */
    int oc = row ? read_outcome(d, id, row->attempt) : -1;
    if (row) recover_lines(d, id, row->attempt);
    if (oc == 0 && !tmp.stop_reason[0])
        record_completed(d, &tmp, "completed while bfd was down");
    else if (oc == 1 && !tmp.stop_reason[0])
        record_preempted(d, &tmp);
    else
        record_failure(d, &tmp, oc == 2 ? "the worker reported failure while bfd was down" : why);
}

/* After a restart: RUNNING trials whose worker still lives are reattached
 * (they reconnect and resend); the others failed while bfd was down. */
int reconcile(bfd *d, char *err, size_t errlen) {
    dstate_run *rows = NULL;
    size_t nr = 0;
    int64_t *ids = NULL;
    size_t ni = 0;
    if (dstate_runs(d->ds, &rows, &nr, err, errlen) ||
        store_running_trials(d->st, &ids, &ni, err, errlen)) {
        free(rows);
        return -1;
    }
    for (size_t i = 0; i < ni; i++) {
        dstate_run *row = NULL;
        for (size_t k = 0; k < nr; k++)
            if (rows[k].trial == ids[i]) row = &rows[k];
        int64_t job = 0;
        if (store_trial_job(d->st, ids[i], &job, err, errlen) < 0) {
            free(rows);
            free(ids);
            return -1;
        }
        slurm_status ss = {.phase = SLURM_UNKNOWN};
        int slurm_alive = 0;
        if (row && row->slurm_job[0]) {
            /* a controller that does not answer now is not proof the job is
             * gone: reattach, and the poll decides later */
            if (slurm_query(d->c->scontrol, row->slurm_job, &ss, err, errlen)) {
                bfd_log("trial %lld: %s; reattaching to Slurm job %s anyway", (long long)ids[i],
                        err, row->slurm_job);
                ss.phase = SLURM_RUNNING;
            }
            slurm_alive = ss.phase == SLURM_QUEUED || ss.phase == SLURM_RUNNING;
        }
        /* a remote attempt cannot be seen from here: reattached, it is
         * claimed by its agent or ends at the heartbeat timeout */
        int remote = row && row->agent[0];
        if (row && (slurm_alive || remote ||
                    (!row->slurm_job[0] && process_alive(row->pid, row->token)))) {
            if (reattach(d, ids[i], job, row, &ss, err, errlen)) break;
        } else {
            record_gone(d, ids[i], job, row, &ss, err, errlen);
        }
    }
    for (size_t k = 0; k < nr; k++)
        if (!find_run(d, rows[k].trial)) dstate_run_del(d->ds, rows[k].trial, err, errlen);
    free(rows);
    free(ids);
    return 0;
}
