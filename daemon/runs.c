/* runs.c — the run table (one entry per live attempt: find, add, remove,
 * the slots and GPUs it holds) and how an attempt's end is recorded: the
 * exit status, the worker's `done`, the outcome file or Slurm's job state
 * mapped to the trial's next state in the store (completed, stage done,
 * stopped, preempted, failed and retried), then published; the lines of
 * metrics.jsonl its worker could not deliver are stored first. Its timers end
 * attempts too: kill deadlines, heartbeat timeouts, Slurm polls, reattached
 * processes that went. It starts nothing (launch.c) and chooses nothing to
 * run (sched.c); it reads no socket. */
#include "daemon/bfd_priv.h"
#include "common/errbuf.h"
#include "common/input_path.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

run *find_run(bfd *d, int64_t trial) {
    for (size_t i = 0; i < d->n_runs; i++)
        if (d->runs[i].trial == trial) return &d->runs[i];
    return NULL;
}

run *add_run(bfd *d) {
    if (d->n_runs == d->cap_runs) {
        size_t cap = d->cap_runs ? 2 * d->cap_runs : 16;
        run *nr = realloc(d->runs, cap * sizeof *nr);
        if (!nr) return NULL;
        d->runs = nr;
        d->cap_runs = cap;
    }
    run *r = &d->runs[d->n_runs++];
    memset(r, 0, sizeof *r);
    r->done_state = -1;
    r->exit_code = -1;
    r->acked = -1;
    return r;
}

void remove_run(bfd *d, run *r) {
    char err[512];
    if (dstate_run_del(d->ds, r->trial, err, sizeof err)) bfd_log("%s", err);
    if (exp_tb_trial_end(d->tb, d->st, r->trial, now_s(), err, sizeof err))
        bfd_log("tensorboard, trial %lld: %s", (long long)r->trial, err);
    size_t i = (size_t)(r - d->runs);
    d->runs[i] = d->runs[--d->n_runs];
    d->dirty = 1;
}

int slots_used(bfd *d) {
    int n = 0;
    for (size_t i = 0; i < d->n_runs; i++) n += d->runs[i].ranks;
    return n;
}

int gpu_used(bfd *d, int g) {
    for (size_t i = 0; i < d->n_runs; i++)
        for (int k = 0; k < d->runs[i].n_gpus; k++)
            if (d->runs[i].gpus[k] == g) return 1;
    return 0;
}

/* Here, not in agents.c, which calls this file: a run going silent marks
 * its agent. */
void agent_unreachable(bfd *d, agent *a, const char *why) {
    if (a->unreachable) return;
    a->unreachable = 1;
    bfd_log("agent %s unreachable (%s): no launch goes to it until it is heard from again or "
            "lost after heartbeat_timeout %g s",
            a->name, why, d->c->heartbeat_timeout);
    d->dirty = 1;
}

void agent_suspect_of(bfd *d, const run *r, const char *why) {
    for (size_t i = 0; r->remote && r->agent_id && i < d->n_agents; i++)
        if (d->agents[i].id == r->agent_id) agent_unreachable(d, &d->agents[i], why);
}

int record_failure(bfd *d, run *r, const char *why) {
    char err[512];
    int requeued = 0;
    if (r->stop_reason[0]) /* early-stopped: whatever the exit, it is not retried */
        return record_state(d, r, TRIAL_STOPPED, r->stop_reason);
    if (store_trial_fail(d->st, r->trial, why, &requeued, err, sizeof err)) {
        bfd_log("trial %lld: %s", (long long)r->trial, err);
        return -1;
    }
    bfd_log("trial %lld attempt %d failed: %s%s", (long long)r->trial, r->attempt, why,
            requeued ? " (retrying)" : "");
    publish_event(d, r->job, r->trial, requeued ? "PENDING" : "FAILED", r->attempt, why);
    d->dirty = 1;
    return 0;
}

/* A config or data error (the worker's exit status 64): the next attempt
 * would read the same config and the same files, so it fails for good
 * whatever retries are left (an early-stopped trial is STOPPED instead). */
static int record_input_error(bfd *d, run *r, const char *why) {
    if (r->stop_reason[0]) return record_state(d, r, TRIAL_STOPPED, r->stop_reason);
    char msg[700];
    snprintf(msg, sizeof msg, "%s (a config or data error: not retried)", why);
    return record_state(d, r, TRIAL_FAILED, msg);
}

int record_state(bfd *d, run *r, trial_state to, const char *why) {
    char err[512];
    if (store_trial_transition(d->st, r->trial, to, why, err, sizeof err)) {
        bfd_log("trial %lld: %s", (long long)r->trial, err);
        return -1;
    }
    bfd_log("trial %lld attempt %d: %s (%s)", (long long)r->trial, r->attempt, store_state_name(to),
            why);
    publish_event(d, r->job, r->trial, store_state_name(to), r->attempt, why);
    d->dirty = 1;
    return 0;
}

/* The worker checkpointed on a SIGTERM bfd did not send (a node drain, a
 * Slurm preemption or time limit) and exited 75: back to PENDING, resumed
 * from the checkpoint, without using a retry. */
int record_preempted(bfd *d, run *r) {
    char err[512];
    const char *why = "preempted (exit status 75); resumes from checkpoint";
    if (store_trial_preempt(d->st, r->trial, why, err, sizeof err)) {
        bfd_log("trial %lld: %s", (long long)r->trial, err);
        return -1;
    }
    bfd_log("trial %lld attempt %d: %s", (long long)r->trial, r->attempt, why);
    publish_event(d, r->job, r->trial, "PENDING", r->attempt, why);
    d->dirty = 1;
    return 0;
}

/* Reads ROOT/DIR/stage.json, which the worker writes last (atomically) when
 * a stage is done: 0 when it names this stage and key, else -1 with why. */
static int stage_output_ok(bfd *d, const store_stage *st, char *why, size_t whylen) {
    char p[1400];
    snprintf(p, sizeof p, "%s/stages/%s/stage.json", d->o->home, st->dir);
    json_error_t je;
    json_t *o = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return bf_fail(why, whylen, "stage %s exited 0 but %s is unreadable: %s", st->name, p,
                       je.text);
    const char *name = json_string_value(json_object_get(o, "stage"));
    const char *key = json_string_value(json_object_get(o, "key"));
    int ok = name && key && !strcmp(name, st->name) && !strcmp(key, st->key);
    if (!ok)
        bf_fail(why, whylen, "stage %s exited 0 but %s names stage '%s' key '%s', not %s %s",
                st->name, p, name ? name : "?", key ? key : "?", st->name, st->key);
    json_decref(o);
    return ok ? 0 : -1;
}

/* The attempt ended with success. A whole trial completes; an s2s attempt
 * completes its stage (checked against the stage's stage.json), and the
 * trial with it when that was its last stage, else goes PENDING for its next
 * stage at once. */
int record_completed(bfd *d, run *r, const char *why) {
    char err[1024], msg[512];
    store_stage st;
    int rc = store_trial_running_stage(d->st, r->trial, &st, err, sizeof err);
    if (rc < 0) {
        bfd_log("trial %lld: %s", (long long)r->trial, err);
        return -1; /* a stage's end is not taken for the trial's: read again later */
    }
    if (rc != 0) return record_state(d, r, TRIAL_COMPLETED, why);
    if (stage_output_ok(d, &st, msg, sizeof msg)) return record_failure(d, r, msg);
    if (!st.next[0]) {
        snprintf(msg, sizeof msg, "%s; stage %s %s done, the last", why, st.name, st.key);
        return record_state(d, r, TRIAL_COMPLETED, msg);
    }
    snprintf(msg, sizeof msg, "stage %s %s done (%s); next: %s", st.name, st.key, why, st.next);
    if (store_trial_stage_done(d->st, r->trial, msg, err, sizeof err)) {
        bfd_log("trial %lld: %s", (long long)r->trial, err);
        return -1;
    }
    bfd_log("trial %lld attempt %d: %s", (long long)r->trial, r->attempt, msg);
    publish_event(d, r->job, r->trial, "PENDING", r->attempt, msg);
    d->dirty = 1;
    return 0;
}

#define RECOVER_CHUNK 512 /* lines parsed per store transaction */

/* Stores the parsed lines pts[0..n) (their names owned by the caller's
 * holders) as points of trial's attempt; 0, or -1 with the store's message. */
static int store_lines(bfd *d, int64_t trial, int attempt, const proto_point *pts, size_t n,
                       char *err, size_t errlen) {
    size_t k = 0, total = 0;
    for (size_t i = 0; i < n; i++) total += (size_t)pts[i].n;
    if (!total) return 0;
    store_metric *sm = malloc(total * sizeof *sm);
    if (!sm) return snprintf(err, errlen, "out of memory"), -1;
    for (size_t i = 0; i < n; i++)
        for (int v = 0; v < pts[i].n; v++)
            if (!pts[i].is_null[v])
                sm[k++] = (store_metric){.seq = pts[i].seq,
                                         .step = pts[i].step,
                                         .name = pts[i].name[v],
                                         .value = pts[i].value[v],
                                         .time = pts[i].time,
                                         .attempt = attempt};
    int rc = k ? store_metrics_insert(d->st, trial, sm, k, err, errlen) : 0;
    free(sm);
    return rc;
}

int recover_lines(bfd *d, int64_t trial, int attempt) {
    char p[1300], why[256], err[1024];
    snprintf(p, sizeof p, "%s/trials/%lld/metrics.jsonl", d->o->home, (long long)trial);
    FILE *f = input_path_open(p, why, sizeof why);
    if (!f) {
        if (errno != ENOENT) bfd_log("trial %lld: %s: %s", (long long)trial, p, why);
        return errno == ENOENT ? 0 : -1;
    }
    int64_t acked;
    if (store_max_seq(d->st, trial, &acked, err, sizeof err)) {
        fclose(f);
        bfd_log("trial %lld: %s", (long long)trial, err);
        return -1;
    }
    proto_point pts[RECOVER_CHUNK];
    json_t *holders[RECOVER_CHUNK];
    size_t n = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t seq = 0, stored = 0;
    int rc = 0;
    /* a last line without its newline is partial: never counted as a seq */
    while (rc == 0 && (len = getline(&line, &cap, f)) > 0 && line[len - 1] == '\n') {
        if (++seq <= acked) continue;
        holders[n] = NULL;
        if (proto_parse_jsonl_line(line, (size_t)len, seq, &pts[n], &holders[n]) == 0) n++;
        if (n == RECOVER_CHUNK) {
            rc = store_lines(d, trial, attempt, pts, n, err, sizeof err);
            stored += (int64_t)n;
            while (n) json_decref(holders[--n]);
        }
    }
    if (rc == 0 && n) rc = store_lines(d, trial, attempt, pts, n, err, sizeof err);
    stored += (int64_t)n;
    while (n) json_decref(holders[--n]);
    free(line);
    fclose(f);
    if (rc) {
        bfd_log("trial %lld: storing the lines of %s past seq %lld: %s", (long long)trial, p,
                (long long)acked, err);
        return -1;
    }
    if (stored)
        bfd_log("trial %lld attempt %d: %lld metric line%s the worker had not delivered stored "
                "from %s",
                (long long)trial, attempt, (long long)stored, stored == 1 ? "" : "s", p);
    return 0;
}

/* Maps the attempt's end, exit status code (-1: none known), to the
 * trial's state (fail_why when it failed): 0, or -1 when the store refused. */
static int record_end(bfd *d, run *r, int code, const char *fail_why) {
    recover_lines(d, r->trial, r->attempt); /* what the worker could not deliver */
    if (code == 0) return record_completed(d, r, "exit status 0");
    if (code == 75 && (r->stop_requested || r->stop_reason[0]))
        return record_state(d, r, TRIAL_STOPPED,
                            r->stop_reason[0] ? r->stop_reason
                                              : "stopped on request (checkpoint written)");
    if (code == 75) return record_preempted(d, r);
    if (code == PROTO_EXIT_INPUT) return record_input_error(d, r, fail_why);
    return record_failure(d, r, fail_why);
}

#define RECORD_RETRY_S 5.0 /* an end the store refused is recorded again this often */

/* r's end could not be stored: kept to record again (code, why). */
static void keep_unrecorded(run *r, int code, const char *why) {
    r->unrecorded = 1;
    r->end_code = code;
    snprintf(r->end_why, sizeof r->end_why, "%s", why);
    r->record_at = now_s() + RECORD_RETRY_S;
    bfd_log("trial %lld attempt %d: its end (%s) could not be stored; bfd keeps it and tries "
            "again every %.0f s (the trial shows RUNNING in the store until then)",
            (long long)r->trial, r->attempt, why, RECORD_RETRY_S);
}

/* r's process is gone: forgotten, or, while its end is unrecorded, kept
 * holding nothing (no slot, GPU, pid, Slurm job or agent), so the slots are
 * free and nothing signals or polls it; its token stays refused. */
static void run_gone(bfd *d, run *r) {
    if (!r->unrecorded) {
        remove_run(d, r);
        return;
    }
    if (!r->exited) d->dirty = 1; /* its slots are free */
    r->exited = r->ending = 1;
    r->ranks = r->n_gpus = 0;
    r->pid = 0;
    r->is_child = r->remote = r->agent_id = 0;
    r->slurm_job[0] = '\0';
    r->slurm_wait = 0;
    r->kill_at = 0;
}

void end_run(bfd *d, run *r, int code, const char *why) {
    if (!r->ending && record_end(d, r, code, why)) keep_unrecorded(r, code, why);
    run_gone(d, r);
}

/* An exited run whose end the store refused: recorded again now. When the
 * trial is no longer RUNNING (cancelled, or recorded by a restarted bfd's
 * reconcile) there is nothing left to record. */
static void record_again(bfd *d, run *r) {
    char err[512];
    store_trial t;
    r->record_at = now_s() + RECORD_RETRY_S;
    if (store_get_trial(d->st, r->trial, &t, err, sizeof err)) {
        bfd_log("trial %lld: %s", (long long)r->trial, err);
        return;
    }
    int running = t.state == TRIAL_RUNNING;
    store_trial_free(&t);
    if (running && record_end(d, r, r->end_code, r->end_why)) return;
    bfd_log("trial %lld attempt %d: its end %s", (long long)r->trial, r->attempt,
            running ? "is stored now" : "needs no record: the trial is no longer RUNNING");
    remove_run(d, r);
}

/* The outcome the worker of trial's attempt left in its folder
 * (PROTO_OUTCOME_FILE): 0 completed, 1 preempted, 2 failed, -1 none (or
 * another attempt's). */
int read_outcome(const bfd *d, int64_t trial, int attempt) {
    char p[1300], state[32];
    snprintf(p, sizeof p, "%s/trials/%lld/" PROTO_OUTCOME_FILE, d->o->home, (long long)trial);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    int a = 0, code = -1;
    int n = fscanf(f, "%d %31s %d", &a, state, &code);
    fclose(f);
    if (n != 3 || a != attempt) return -1;
    return !strcmp(state, "completed")   ? 0
           : !strcmp(state, "preempted") ? 1
           : !strcmp(state, "failed")    ? 2
                                         : -1;
}

/* The attempt's process is gone: map how it ended to the trial's state.
 * have_status: it exited with status code (-1 none) or was killed by signal
 * sig (nonzero), as waitpid or the remote agent says; without it, `done` or
 * the outcome file tells. on: where it ran, for the message ("" here). */
static void run_ended(bfd *d, run *r, int have_status, int code, int sig, const char *on) {
    char why[600];
    /* not our child (reattached): `done`, or else the outcome file, says */
    if (!have_status && r->done_state < 0) r->done_state = read_outcome(d, r->trial, r->attempt);
    if (!have_status)
        code = r->done_state == 0                                       ? 0
               : r->done_state == 1                                     ? 75
               : r->done_state == 2 && r->exit_code == PROTO_EXIT_INPUT ? PROTO_EXIT_INPUT
                                                                        : -1;
    if (have_status && sig)
        snprintf(why, sizeof why, "killed by signal %d%s", sig, on);
    else if (have_status)
        snprintf(why, sizeof why, "exit status %d%s", code, on);
    else if (r->done_state == 2)
        snprintf(why, sizeof why, "the worker reported failure");
    else
        snprintf(why, sizeof why, "worker process gone without reporting done");
    /* the worker's own reason, as it said in `done`: what a dependant of a
     * failed shared stage is told */
    if (r->done_state == 2 && r->done_msg[0]) {
        size_t k = strlen(why);
        snprintf(why + k, sizeof why - k, ": %s", r->done_msg);
    }
    end_run(d, r, code, why);
}

/* A child's end as waitpid reported it. */
static void child_ended(bfd *d, run *r, int status) {
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    run_ended(d, r, 1, WIFEXITED(status) ? WEXITSTATUS(status) : -1, sig, "");
}

void run_exited(bfd *d, run *r, int code, int sig) {
    char on[PROTO_MAX_NAME + 16];
    snprintf(on, sizeof on, " on agent %s", r->agent);
    run_ended(d, r, 1, code, sig, on);
}

/* The Slurm job of r left the queue. The worker's `done` is the primary
 * signal; without it, Slurm's JobState and the batch script's exit status
 * (srun's, hence the worker's: 75 = preempted) decide. */
static void slurm_job_ended(bfd *d, run *r, const slurm_status *st) {
    if (r->done_state >= 0) {
        run_ended(d, r, 0, -1, 0, "");
        return;
    }
    char why[256];
    int code = -1;
    if ((!strcmp(st->state, "COMPLETED") || !strcmp(st->state, "FAILED")) && st->signal == 0)
        code = st->exit_code;
    if (st->phase == SLURM_UNKNOWN)
        snprintf(why, sizeof why, "Slurm job %s is gone without the worker reporting done",
                 r->slurm_job);
    else
        snprintf(why, sizeof why, "Slurm job %s ended %s (exit code %d:%d)", r->slurm_job,
                 st->state, st->exit_code, st->signal);
    end_run(d, r, code, why);
}

void reap_children(bfd *d) {
    if (d->slq) {
        /* the Slurm thread's commands are children too, each waited for by
         * its own pid: only the runs' own children are reaped here */
        for (size_t i = 0; i < d->n_runs;) {
            run *r = &d->runs[i];
            int status;
            if (r->is_child && r->pid > 0 && waitpid(r->pid, &status, WNOHANG) == r->pid) {
                child_ended(d, r, status);
                continue; /* r was replaced by the last run */
            }
            i++;
        }
        return;
    }
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) break;
        for (size_t i = 0; i < d->n_runs; i++)
            if (d->runs[i].pid == pid && d->runs[i].is_child) {
                child_ended(d, &d->runs[i], status);
                break;
            }
    }
}

/* A Slurm attempt failed for its silence (heartbeat or progress timeout)
 * has been scancelled; its node may be cut off or dead, and Slurm may take
 * its SlurmdTimeout (minutes) to say the job ended. bfd forgets the run now,
 * so the retry starts at once elsewhere: the old attempt's late messages
 * and reconnects name a token no run holds and are refused, and its worker
 * ends itself when it sees the newer attempt in trials/ID/attempt (link.c).
 * Returns 1 when r was removed (or, its end unrecorded, left holding nothing). */
static int forget_silent_slurm_job(bfd *d, run *r) {
    if (!r->slurm_job[0]) return 0;
    bfd_log("trial %lld attempt %d: Slurm job %s cancelled and forgotten (its late messages "
            "are refused)",
            (long long)r->trial, r->attempt, r->slurm_job);
    run_gone(d, r);
    return 1;
}

/* The same for a remote attempt: its agent was asked to kill it (it may be
 * cut off too), and the retry starts now on another agent. */
static int forget_silent_remote(bfd *d, run *r) {
    if (!r->remote) return 0;
    bfd_log("trial %lld attempt %d: forgotten (agent %s asked to kill it; its late messages are "
            "refused)",
            (long long)r->trial, r->attempt, r->agent[0] ? r->agent : "none");
    run_gone(d, r);
    return 1;
}

/* Whether an scontrol query of id (an array or a plain job) is in flight. */
static int poll_inflight(const bfd *d, const char *id) {
    for (size_t i = 0; i < d->n_polls; i++)
        if (!strcmp(d->polls[i], id)) return 1;
    return 0;
}

static void poll_done(bfd *d, const char *id) {
    for (size_t i = 0; i < d->n_polls; i++)
        if (!strcmp(d->polls[i], id)) {
            memcpy(d->polls[i], d->polls[--d->n_polls], sizeof d->polls[i]);
            return;
        }
}

/* Asks the Slurm thread how the job of r stands. An array's answer is one
 * `scontrol show job ARRAY` shared by all its tasks (a 1,000-task array is
 * one command, not 1,000), and one query per array is in flight at most. */
static void ask_slurm(bfd *d, const run *r) {
    char array[SLURM_JOB_ID_MAX];
    int task, n = 0;
    const char *id = r->slurm_job;
    if (!d->slq) return; /* a Slurm run recovered under launcher local: recover.c decides */
    int is_array = slurm_array_task_of(r->slurm_job, array, &task) == 0;
    if (is_array) id = array;
    if (poll_inflight(d, id)) return;
    if (is_array) {
        /* the tasks of this array bfd holds: the highest index bounds the answer */
        for (size_t i = 0; i < d->n_runs; i++) {
            char a2[SLURM_JOB_ID_MAX];
            int t2;
            if (slurm_array_task_of(d->runs[i].slurm_job, a2, &t2) == 0 && !strcmp(a2, array) &&
                t2 + 1 > n)
                n = t2 + 1;
        }
    }
    if (d->n_polls == d->cap_polls) {
        size_t cap = d->cap_polls ? 2 * d->cap_polls : 8;
        char(*np)[SLURM_JOB_ID_MAX] = realloc(d->polls, cap * sizeof *np);
        if (!np) {
            bfd_log("trial %lld: bfd out of memory", (long long)r->trial);
            return;
        }
        d->polls = np;
        d->cap_polls = cap;
    }
    slurmq_req *q = slurmq_req_new(SLURMQ_QUERY, id);
    if (q) q->n = n;
    if (!q || slurmq_push(d->slq, q)) {
        bfd_log("trial %lld: Slurm command queue full: job %s not polled now", (long long)r->trial,
                id);
        slurmq_req_free(&q);
        return;
    }
    snprintf(d->polls[d->n_polls++], SLURM_JOB_ID_MAX, "%s", id);
}

/* The job of r stands as ss: 1 when r was removed (its job ended). */
static int apply_slurm_status(bfd *d, run *r, const slurm_status *ss) {
    if (ss->phase == SLURM_ENDED || ss->phase == SLURM_UNKNOWN) {
        slurm_job_ended(d, r, ss);
        return 1;
    }
    /* a job waiting in Slurm's queue sends no heartbeats */
    if (ss->phase == SLURM_QUEUED) r->last_seen = r->last_progress = now_s();
    /* the batch script ended 0 and Slurm finishes the step (a lossy network
     * delays its completion message): not silence, whatever the heartbeats */
    r->completing_0 = !strcmp(ss->state, "COMPLETING") && ss->exit_code == 0 && ss->signal == 0;
    if (ss->phase == SLURM_RUNNING && r->slurm_phase != SLURM_RUNNING)
        bfd_log("trial %lld attempt %d: Slurm job %s is running", (long long)r->trial, r->attempt,
                r->slurm_job);
    r->slurm_phase = (int)ss->phase;
    return 0;
}

int slurm_answered(bfd *d, const slurmq_req *q, double budget_s) {
    if (q->rc) {
        poll_done(d, q->arg);
        bfd_log("slurm: %s", q->err);
        return 0;
    }
    double t0 = now_s();
    for (size_t i = 0; i < d->n_runs;) {
        run *r = &d->runs[i];
        const slurm_status *ss = NULL;
        char array[SLURM_JOB_ID_MAX];
        int task;
        if (q->n == 0) {
            if (r->slurm_job[0] && !strcmp(r->slurm_job, q->arg)) ss = &q->one;
        } else if (slurm_array_task_of(r->slurm_job, array, &task) == 0 && !strcmp(array, q->arg) &&
                   task < q->n) {
            ss = &q->st[task];
        }
        if (ss) {
            /* an ended job's outcome is a few commits: a cancelled 1,000-task
             * array is recorded over several rounds, the loop serving between */
            if ((ss->phase == SLURM_ENDED || ss->phase == SLURM_UNKNOWN) && now_s() - t0 > budget_s)
                return 1;
            /* every task of the array is answered: none asks again before its time */
            r->next_poll = now_s() + d->c->slurm_poll;
            if (apply_slurm_status(d, r, ss)) continue; /* r was replaced by the last run */
        }
        i++;
    }
    poll_done(d, q->arg);
    return 0;
}

/* r went silent: when its worker left its outcome file (it stored every
 * point and sent `done`, which was lost), the attempt ended so: recorded,
 * its processes killed (they are ending anyway). Returns 1 when so. */
static int ended_by_outcome(bfd *d, run *r) {
    int oc = read_outcome(d, r->trial, r->attempt);
    if (oc < 0) return 0;
    static const char *const said[] = {"completed", "preempted", "failed"};
    char why[200];
    snprintf(why, sizeof why, "the worker went silent after leaving its outcome (%s)", said[oc]);
    bfd_log("trial %lld attempt %d: %s; judged by it", (long long)r->trial, r->attempt, why);
    r->done_state = oc;
    int code = oc == 0 ? 0 : oc == 1 ? 75 : -1;
    if (oc == 0) recover_lines(d, r->trial, r->attempt);
    if (oc == 0 ? record_completed(d, r, why) : record_end(d, r, code, why))
        keep_unrecorded(r, code, why);
    r->ending = 1;
    kill_group(d, r, SIGKILL);
    return 1;
}

/* Heartbeats, kill deadlines, reattached processes. */
void check_timers(bfd *d) {
    double t = now_s();
    for (size_t i = 0; i < d->n_runs;) {
        run *r = &d->runs[i];
        if (r->exited) {
            if (t >= r->record_at) record_again(d, r);
            i++; /* when removed, the last run took its place: seen next round */
            continue;
        }
        if (r->ending && r->kill_at > 0 && t >= r->kill_at) {
            kill_group(d, r, SIGKILL);
            r->kill_at = 0;
        }
        /* before its hello a worker may still be starting (srun's step
         * launch, MPI, CUDA): startup_timeout, from its start */
        double limit = r->hello_seen ? d->c->heartbeat_timeout : d->c->startup_timeout;
        if (!r->ending && r->completing_0 && !r->completing_said && t - r->last_seen > limit) {
            r->completing_said = 1;
            bfd_log("trial %lld attempt %d: no message from the worker for %.0f s, but Slurm job "
                    "%s is COMPLETING with exit code 0:0; waiting for its final state",
                    (long long)r->trial, r->attempt, t - r->last_seen, r->slurm_job);
        }
        if (!r->ending && !r->completing_0 && t - r->last_seen > limit && ended_by_outcome(d, r)) {
            if (forget_silent_slurm_job(d, r) || forget_silent_remote(d, r)) continue;
        }
        if (!r->ending && !r->completing_0 && t - r->last_seen > limit) {
            char why[160];
            if (r->hello_seen)
                snprintf(why, sizeof why,
                         "no message from the worker for %.0f s (heartbeat timeout)",
                         t - r->last_seen);
            else
                snprintf(why, sizeof why,
                         "no hello from the worker %.0f s after its start (startup_timeout %g s)",
                         t - r->last_seen, d->c->startup_timeout);
            if (r->remote) {
                char w2[200];
                snprintf(w2, sizeof w2, "the worker of trial %lld attempt %d went silent",
                         (long long)r->trial, r->attempt);
                agent_suspect_of(d, r, w2);
            }
            if (record_failure(d, r, why)) keep_unrecorded(r, -1, why);
            r->ending = 1;
            kill_group(d, r, SIGKILL);
            if (forget_silent_slurm_job(d, r) || forget_silent_remote(d, r))
                continue; /* r was replaced by the last run, or exited */
        }
        /* heartbeats prove the process lives, not that it trains: a worker
         * stuck in open() of a FIFO, or in a loop, heartbeats forever */
        if (!r->ending && d->c->progress_timeout > 0 &&
            t - r->last_progress > d->c->progress_timeout) {
            char why[160];
            snprintf(why, sizeof why,
                     "no new metric point from the worker for %.0f s (progress_timeout %g s)",
                     t - r->last_progress, d->c->progress_timeout);
            if (record_failure(d, r, why)) keep_unrecorded(r, -1, why);
            r->ending = 1;
            kill_group(d, r, SIGKILL);
            if (forget_silent_slurm_job(d, r) || forget_silent_remote(d, r)) continue;
        }
        if (r->slurm_job[0] && t >= r->next_poll) {
            r->next_poll = t + d->c->slurm_poll;
            ask_slurm(d, r); /* answered in slurm_answered */
        }
        if (!r->is_child && !r->remote && !r->slurm_job[0] && !r->slurm_wait &&
            t - r->last_alive_check >= 1.0) {
            r->last_alive_check = t;
            if (!process_alive(r->pid, r->token)) {
                run_ended(d, r, 0, -1, 0, "");
                continue; /* r was replaced by the last run */
            }
        }
        i++;
    }
}
