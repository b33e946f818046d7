/* sched.c — which trials start now and where: PENDING trials by priority
 * then submit order onto free slots and free GPUs (a trial that does not fit
 * is passed over for later ones that do; one that can never fit fails), the
 * shared-stage step of an s2s trial (run a stage, wait for another trial's
 * run of it, reuse it, or fail with it), and tpe's proposals before each
 * pass. It starts nothing itself (launch.c) and reads no socket. */
#include "daemon/bfd_priv.h"

#include <stdio.h>
#include <string.h>

#define SCHED_PASS_S 0.015 /* launching stops after this share of a pass: the loop answers */

/* The live attempt (also one being stopped) that runs stage key, or NULL. */
static run *stage_runner(bfd *d, const char *key) {
    for (size_t i = 0; i < d->n_runs; i++)
        if (d->runs[i].stage_key[0] && !strcmp(d->runs[i].stage_key, key)) return &d->runs[i];
    return NULL;
}

/* The shared-stage step of scheduling an s2s trial t (PENDING): 0 with
 * *stage = the stage it runs now, or 1 when it does not start now (it waits
 * for a stage another trial runs; it failed with a stage; it completed
 * because every stage was done already). */
static int schedule_stage(bfd *d, const store_trial *t, int *stage) {
    char err[1024], reason[512];
    stage_next next;
    int idx, first;
    if (store_stage_next(d->st, t->id, &next, &idx, reason, sizeof reason, &first, err,
                         sizeof err)) {
        bfd_log("trial %lld: %s", (long long)t->id, err);
        return 1;
    }
    switch (next) {
    case STAGE_NEXT_NONE:
        return 0; /* planless (submitted before stages existed): the whole pipeline */
    case STAGE_NEXT_WAIT:
        if (first) {
            bfd_log("trial %lld: %s", (long long)t->id, reason);
            publish_event(d, t->job_id, t->id, "PENDING", t->attempts, reason);
        }
        return 1;
    case STAGE_NEXT_FAILED:
        if (store_trial_stage_failed(d->st, t->id, reason, err, sizeof err)) {
            bfd_log("trial %lld: %s", (long long)t->id, err);
            return 1;
        }
        bfd_log("trial %lld: FAILED (%s)", (long long)t->id, reason);
        publish_event(d, t->job_id, t->id, "FAILED", t->attempts + 1, reason);
        return 1;
    case STAGE_NEXT_REUSED: {
        const char *why = "every stage was done already (reused); metrics of its eval stage copied";
        if (store_trial_stages_reused(d->st, t->id, why, err, sizeof err)) {
            bfd_log("trial %lld: %s", (long long)t->id, err);
            return 1;
        }
        bfd_log("trial %lld: COMPLETED (%s)", (long long)t->id, why);
        publish_event(d, t->job_id, t->id, "COMPLETED", t->attempts + 1, why);
        d->dirty = 1;
        return 1;
    }
    case STAGE_NEXT_RUN:
        break;
    }
    /* a stage released by an attempt whose process has not gone yet (being
     * stopped or cancelled) is not started a second time beside it */
    store_stage plan[STAGE_MAX];
    int n = 0;
    if (store_trial_stages(d->st, t->id, plan, &n, err, sizeof err) || idx >= n) {
        bfd_log("trial %lld: %s", (long long)t->id, idx >= n ? "stage plan incomplete" : err);
        return 1;
    }
    if (stage_runner(d, plan[idx].key)) return 1;
    *stage = idx;
    return 0;
}

/* Attempts of job in the run table (also those being stopped). */
static int job_runs(const bfd *d, int64_t job) {
    int n = 0;
    for (size_t i = 0; i < d->n_runs; i++) n += d->runs[i].job == job;
    return n;
}

/* One pass of schedule; 1 when it stopped with trials left that may start
 * now (its time share spent, or a full page of them launched). */
static int schedule_pass(bfd *d) {
    char err[1024];
    int free_slots = is_remote(d) ? agents_free_slots(d) : d->c->slots - slots_used(d);
    if (free_slots <= 0) return 0;
    store_trial *ts = NULL;
    size_t n = 0;
    if (store_next_runnable(d->st, 256, &ts, &n, err, sizeof err)) {
        bfd_log("%s", err);
        return 0;
    }
    double t0 = now_s();
    int launched = 0, more = 0;
    for (size_t i = 0; i < n && free_slots > 0; i++) {
        /* each launch is a few SQLite commits: a long sweep is started over
         * several passes, the loop serving requests between them */
        if (launched && now_s() - t0 > SCHED_PASS_S) {
            more = 1;
            break;
        }
        store_job j;
        if (store_job_get(d->st, ts[i].job_id, &j, err, sizeof err) != 0) continue;
        int stage = -1;
        if (!strcmp(j.pipeline, "s2s") && schedule_stage(d, &ts[i], &stage)) continue;
        /* with Slurm the cluster owns the GPUs: bfd only caps how many ranks it
         * has submitted at once (slots); remote agents own theirs and their slots */
        int remote = is_remote(d);
        int need_g = is_slurm(d) || remote ? 0 : j.ranks * j.gpus_per_rank;
        int multi_host = !is_slurm(d) && j.nodes > 1;
        if ((!remote && j.ranks > d->c->slots) || need_g > d->c->n_gpus || multi_host) {
            /* can never run here: fail it for good rather than wait forever */
            char why[256];
            if (multi_host)
                snprintf(why, sizeof why,
                         "resources.nodes is %d, but launcher %s runs every rank on one host "
                         "(use launcher: slurm, or nodes: 1)",
                         j.nodes, d->c->launcher);
            else
                snprintf(why, sizeof why,
                         "needs %d slots and %d GPUs; bfd has %d slots and %d GPUs", j.ranks,
                         need_g, d->c->slots, d->c->n_gpus);
            if (!store_trial_transition(d->st, ts[i].id, TRIAL_RUNNING, why, err, sizeof err))
                store_trial_transition(d->st, ts[i].id, TRIAL_FAILED, why, err, sizeof err);
            publish_event(d, ts[i].job_id, ts[i].id, "FAILED", ts[i].attempts + 1, why);
            continue;
        }
        /* a grid or random job's max_parallel (bfctl edit): at most that many
         * of its trials at once (tpe's holds back its proposals instead) */
        if (j.parallel > 0 && strcmp(j.method, "tpe") && job_runs(d, j.id) >= j.parallel) continue;
        if (j.ranks > free_slots || (remote && !agent_pick(d, j.ranks))) continue;
        int gpus[BFD_MAX_GPUS], ng = 0;
        for (int g = 0; g < d->c->n_gpus && ng < need_g; g++)
            if (!gpu_used(d, d->c->gpus[g])) gpus[ng++] = d->c->gpus[g];
        if (ng < need_g) continue;
        if (launch(d, &ts[i], &j, gpus, ng, stage) == 0) {
            free_slots -= j.ranks;
            launched++;
        }
    }
    if (launched && n == 256 && free_slots > 0) more = 1;
    store_trials_free(ts, n);
    return more;
}

/* Places PENDING trials on free slots, by priority then submit order;
 * a trial that does not fit is passed over for later ones that do. With
 * Slurm, the attempts started go out as job arrays once the trials ready
 * now are all launched (or an array is full). */
void schedule(bfd *d) {
    d->dirty = 0;
    d->last_sched = now_s();
    char err[1024];
    if (adaptive_propose(d->ad, d->st, err, sizeof err) < 0) bfd_log("tpe: %s", err);
    if (schedule_pass(d))
        d->dirty = 1; /* the next round passes again at once (loop.c polls without waiting) */
    else
        slurm_flush(d);
}
