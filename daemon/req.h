/* req.h — bfd's bfctl requests: the handler table the loop dispatches
 * through (req.c), the handlers by family (one req_*.c file each) and the
 * preambles they share. A handler validates its request's fields, replies
 * exactly once (a reply or an error) on socket s, and never blocks the loop:
 * what grows with the sweep (submit) goes to the submit thread. */
#ifndef REQ_H
#define REQ_H

#include "daemon/bfd_priv.h"

/* Handles request m that arrived on socket s (the control ROUTER). */
typedef void (*req_handler_fn)(bfd *d, void *s, proto_msg *m);

/* The handler of request type, or NULL when bfd knows no such type. */
req_handler_fn req_handler(const char *type);

/* Reads job id for request m: 0, or nonzero after replying not_found (1) or
 * internal (-1) itself. */
int get_job(bfd *d, void *s, proto_msg *m, long long id, store_job *j);
/* get_job, plus the job's summary in *jo and a page of its trials (index
 * above after, at most limit; <= 0: all) in *ts, *n (the caller's to free:
 * json_decref, store_trials_free); nonzero after a reply. */
int get_job_with_trials(bfd *d, void *s, proto_msg *m, long long id, long long after, int limit,
                        store_job *j, json_t **jo, store_trial **ts, size_t *n);
/* Reads trial id into *t (free with store_trial_free): 0, or nonzero after
 * replying not_found (1) or internal (-1) itself. */
int get_trial(bfd *d, void *s, proto_msg *m, long long id, store_trial *t);
/* The job of trial id into *job: 0, or nonzero after replying not_found (1)
 * or internal (-1) itself. */
int get_trial_job(bfd *d, void *s, proto_msg *m, long long id, int64_t *job);
/* Reads the request's "job" field and that job: 0, or nonzero after
 * replying (a bad field, not_found or internal). */
int get_job_field(bfd *d, void *s, proto_msg *m, long long *id, store_job *j);

/* {"id", "name", "pipeline", "submitted", "priority", "retries", "ranks",
 * "gpus_per_rank", "n_trials", "metric", "goal", "objectives": [{"name",
 * "goal"}], "states": {...}} of job j;
 * NULL with err on failure. */
json_t *job_json(const store_job *j, char *err, size_t errlen);
/* {"PENDING": n, ...} of a job's trials (states with n > 0 only); NULL with
 * err on failure. */
json_t *job_states_json(store *st, int64_t job, char *err, size_t errlen);

/* req_submit.c: a sweep handed to the submit thread; finish_submits replies
 * to those it has stored (or refused), in the order they came. */
void req_submit(bfd *d, void *s, proto_msg *m);
void finish_submits(bfd *d);

/* req_jobs.c: what the store says of jobs and trials. */
void req_jobs(bfd *d, void *s, proto_msg *m);
void req_job(bfd *d, void *s, proto_msg *m);
void req_trial(bfd *d, void *s, proto_msg *m);
void req_wait(bfd *d, void *s, proto_msg *m);
void req_best(bfd *d, void *s, proto_msg *m);
void req_rungs(bfd *d, void *s, proto_msg *m);

/* req_control.c: requests that change what runs. */
void req_cancel(bfd *d, void *s, proto_msg *m);
void req_stop(bfd *d, void *s, proto_msg *m);
void req_resume(bfd *d, void *s, proto_msg *m);
/* Moves a chunk of the pending trials of cancelled jobs to CANCELLED, one
 * short transaction a loop round; clears d->cancelling when none is left.
 * bfd sets d->cancelling at its start, so a cancel cut short by a restart
 * is finished (the store says what is left). */
void cancel_tick(bfd *d);

/* req_edit.c: edits of a running sweep (its max_parallel). */
void req_edit(bfd *d, void *s, proto_msg *m);

/* req_metrics.c: a trial's metric points, a job's export. */
void req_metrics(bfd *d, void *s, proto_msg *m);
void req_export(bfd *d, void *s, proto_msg *m);

/* req_logs.c: a chunk of a trial's log file. */
void req_logs(bfd *d, void *s, proto_msg *m);
/* The last `lines` lines of the trial's log (at most its last 8 KiB), valid
 * UTF-8, as a new JSON string; NULL when there is no log file. */
json_t *log_tail_json(bfd *d, long long id, int lines);

/* req_prune.c: rm (one job), gc (finished jobs by age and state); the
 * removal itself runs a chunk per loop round (prune_tick). prune_start, at
 * bfd's start, marks the submits a crash cut short and resumes removals. */
void req_rm(bfd *d, void *s, proto_msg *m);
void req_gc(bfd *d, void *s, proto_msg *m);
void prune_tick(bfd *d);
int prune_start(bfd *d, char *err, size_t errlen);

/* req_status.c: the daemon's state; sync, a marker through the PUB socket. */
void req_status(bfd *d, void *s, proto_msg *m);
void req_sync(bfd *d, void *s, proto_msg *m);

#endif
