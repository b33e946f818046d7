/* store — the durable job queue in SQLite (WAL): jobs, trials, attempts,
 * metrics and events, with a versioned schema migrated on open.
 *
 * Trial states: PENDING -> RUNNING -> COMPLETED | FAILED | CANCELLED | STOPPED;
 * PENDING -> CANCELLED; STOPPED -> PENDING (resume, a manual promotion past
 * an early stop); FAILED -> PENDING while retries are left (a trial may
 * fail 1 + job.retries times); RUNNING -> PENDING when the attempt was
 * preempted (it checkpointed on SIGTERM and exited 75), or when it ran one
 * shared stage of an s2s trial to the end (store_trial_stage_done): the
 * attempt is counted, the retries are not. Every other transition is
 * refused with an error.
 *
 * All functions return 0 on success or -1 with a message in err (which names
 * the SQLite call and carries SQLite's own text). A store handle is used by
 * one thread at a time. */
#ifndef STORE_H
#define STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/pipeline_decl.h"
#include "jobs/sweep.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STORE_SCHEMA_VERSION 11

typedef enum {
    TRIAL_PENDING = 0,
    TRIAL_RUNNING,
    TRIAL_COMPLETED,
    TRIAL_FAILED,
    TRIAL_CANCELLED,
    TRIAL_STOPPED,
    TRIAL_N_STATES
} trial_state;

const char *store_state_name(trial_state s);
/* Parses "PENDING" etc.; returns 0 or -1. */
int store_state_parse(const char *name, trial_state *out);
/* 1 if from -> to is a legal edge of the state machine (retries not counted). */
int store_transition_legal(trial_state from, trial_state to);

typedef struct store store;

/* Opens (creating if needed) the database at path, sets WAL and a busy
 * timeout, and migrates the schema to STORE_SCHEMA_VERSION. A database from a
 * newer build is refused. Free with store_close. */
int store_open(const char *path, store **out, char *err, size_t errlen);
void store_close(store **s);
/* s never checkpoints the WAL itself (SQLite does it on the connection
 * whose commit passes 1,000 pages: bfd's loop, when it is the one): a
 * store_checkpointer does it off that thread. */
void store_defer_checkpoints(store *s);

/* A thread with a connection of its own to the store at path that
 * checkpoints its WAL (PASSIVE: it never waits for, nor blocks, a writer)
 * every `every_s` seconds. Stop with store_checkpointer_stop (nulls it). */
typedef struct store_checkpointer store_checkpointer;
int store_checkpointer_start(const char *path, double every_s, store_checkpointer **out, char *err,
                             size_t errlen);
void store_checkpointer_stop(store_checkpointer **c);
/* For migration tests: creates a database at path holding the schema of
 * `version` (< STORE_SCHEMA_VERSION), as an older build would have left it. */
int store_create_at_version(const char *path, int version, char *err, size_t errlen);
int store_schema_version(store *s);

/* Expands the spec and writes the job and all its trials (PENDING) in
 * transactions of a few hundred trials each, the job hidden from every
 * reader (jobs, a job, scheduling, counts) until the last one commits: a
 * reader sees the whole job or none of it. A submit that fails half way
 * marks the job for removal (store_prune_step); one killed half way leaves
 * it hidden, for store_prune_abandoned at the next start. `source` is the
 * sweep file's text, kept for reference (may be NULL). */
int store_submit(store *s, const sweep_spec *spec, const char *source, int64_t *job_id, char *err,
                 size_t errlen);

typedef struct store_trial {
    int64_t id, job_id;
    long long index;
    trial_state state;
    int attempts;    /* times started */
    int preemptions; /* attempts that ended preempted (RUNNING -> PENDING) */
    int retries;     /* of its job */
    int priority;    /* of its job */
    char hash[17];
    char *params_json;    /* owned; {"key": value, ...} */
    char *config;         /* owned; canonical config text (store_get_trial only) */
    char *latest_json;    /* owned; {"metric": {"step": S, "value": V}, ...}, "{}" when none
                           * (store_job_trials, store_best_trials) */
    double best;          /* best value of the job's metric, NAN when none */
    char *stop_reason;    /* owned; the early-stop decision that stopped it, NULL when none */
    char *point_json;     /* owned; tpe: the sampler's coordinates [x0, x1, ...], NULL otherwise */
    int64_t source_trial; /* the trial its job was cloned from (bfctl clone), 0 when none */
} store_trial;

void store_trial_free(store_trial *t);            /* frees the owned strings */
void store_trials_free(store_trial *t, size_t n); /* frees the strings and the array */

int store_get_trial(store *s, int64_t trial_id, store_trial *out, char *err, size_t errlen);

/* Moves a trial to `to`, checking the edge against its current state inside
 * one transaction; records an attempt (start/end) and an event with message.
 * FAILED -> PENDING is refused when no retries are left. */
int store_trial_transition(store *s, int64_t trial_id, trial_state to, const char *message,
                           char *err, size_t errlen);
/* RUNNING -> PENDING for an attempt that was preempted (checkpointed and
 * exited 75 without a stop request): ends the attempt with outcome
 * PREEMPTED, counts it in preemptions (not against the retries) and writes a
 * "preempt" event with message. Refused unless the trial is RUNNING. (A
 * RUNNING -> PENDING store_trial_transition is the same edge.) */
int store_trial_preempt(store *s, int64_t trial_id, const char *message, char *err, size_t errlen);
/* RUNNING -> FAILED, then -> PENDING if retries are left (*requeued = 1);
 * retries are measured against attempts - preemptions. */
int store_trial_fail(store *s, int64_t trial_id, const char *message, int *requeued, char *err,
                     size_t errlen);
/* Cancels a job in one short transaction: closes it (from then on no trial
 * of it starts: store_next_runnable skips it) and moves its RUNNING trials
 * to CANCELLED; its PENDING trials are left for store_cancel_step, so a
 * 100,000-trial job does not hold the write lock for seconds. *n_cancelled
 * counts the running and pending trials the cancel ends. */
int store_job_cancel(store *s, int64_t job_id, int *n_cancelled, char *err, size_t errlen);
/* Moves up to max_trials PENDING trials of a closed job (the oldest such
 * job) to CANCELLED in one short transaction. *job is that job (0 when no
 * closed job has a pending trial), *n_cancelled how many moved, *more
 * nonzero when pending trials of closed jobs are left. The work left is
 * read from the store, so it survives a restart. */
int store_cancel_step(store *s, int max_trials, int64_t *job, int *n_cancelled, int *more,
                      char *err, size_t errlen);

typedef struct store_metric {
    int64_t seq;  /* per-trial sequence number from the worker */
    int64_t step; /* training step */
    const char *name;
    double value;
    double time; /* unix seconds */
    int attempt; /* the trial's attempt that logged it (0: not known) */
} store_metric;

/* Inserts n points for one trial in one transaction. A point whose (trial,
 * seq, name) is already stored is skipped, so resends never duplicate. The
 * points of attempt A > 1 supersede, per metric name, those of earlier
 * attempts at or after A's first step of that name (a retry that resumed
 * before its predecessor's last logged step re-logs them): those are kept,
 * marked superseded, and left out of the current curve (the latest and
 * best values, series, history readers that ask for it). */
int store_metrics_insert(store *s, int64_t trial_id, const store_metric *pts, size_t n, char *err,
                         size_t errlen);

/* Same for points of many trials (trial_ids[i] is point i's trial), in one
 * transaction: how a daemon batches what several workers sent. */
int store_metrics_insert_many(store *s, const int64_t *trial_ids, const store_metric *pts, size_t n,
                              char *err, size_t errlen);

/* Up to `limit` PENDING trials of open (not cancelled) jobs, by job priority (high first), then job
 * submit order, then trial index. *out is malloc'd (store_trials_free). */
int store_next_runnable(store *s, int limit, store_trial **out, size_t *n, char *err,
                        size_t errlen);
/* Every trial of a job with the latest value of each metric and its best
 * value of the job's metric. */
int store_job_trials(store *s, int64_t job_id, store_trial **out, size_t *n, char *err,
                     size_t errlen);
/* The params JSON text of a job's trials of index above `after` (-1: from
 * the first), at most limit, by index: *params is malloc'd, each string
 * too (free each, then the array); *last is the last index read (after
 * when none). What the TensorBoard experiment of a big job reads a page
 * at a time. */
int store_job_params_page(store *s, int64_t job_id, long long after, int limit, char ***params,
                          size_t *n, long long *last, char *err, size_t errlen);
/* A page of them: trials of index above `after` (-1: from the first), at
 * most limit, by index; what a reader of a 100,000-trial job pages through. */
int store_job_trials_page(store *s, int64_t job_id, long long after, int limit, store_trial **out,
                          size_t *n, char *err, size_t errlen);
/* Up to `limit` trials of a job that have the job's metric, best first by
 * the job's goal (min or max over each trial's points). */
int store_best_trials(store *s, int64_t job_id, int limit, store_trial **out, size_t *n, char *err,
                      size_t errlen);

typedef struct store_point {
    int64_t seq, step;
    char name[64];
    double value, time;
    int attempt;    /* 0: logged before points carried their attempt */
    int superseded; /* a later attempt logged this step again */
} store_point;

/* Points of a trial with seq > after_seq, in (seq, name) order, at most
 * `limit`: a tail that resumes from the last seq it saw misses nothing and
 * repeats nothing. Superseded points are among them, marked (a reader of
 * the current curve skips them). *out is malloc'd (free). */
int store_metric_history(store *s, int64_t trial_id, int64_t after_seq, int limit,
                         store_point **out, size_t *n, char *err, size_t errlen);

typedef struct store_job {
    int64_t id;
    char name[128], pipeline[64], metric[64], goal[8]; /* goal: "min" or "max" */
    double submitted;                                  /* unix seconds */
    int priority, retries, ranks, gpus_per_rank, cpus_per_rank;
    int nodes;                        /* hosts the ranks span (Slurm --nodes), 0 = not given */
    long long time_limit_s;           /* per attempt, 0 = none */
    long long n_trials;               /* in all; a tpe job proposes them one by one */
    long long n_proposed;             /* trials in the store so far */
    char method[16];                  /* grid, random or tpe */
    int parallel;                     /* tpe: trials pending or running at once */
    int closed;                       /* cancelled: no more proposals */
    char early_stop[512];             /* JSON (jobs/sched_stop.h: sched_stop_parse) */
    long long counts[TRIAL_N_STATES]; /* its trials in each state */
    int n_objectives;                 /* its `metric:` entries (1 for one metric) */
    sweep_objective objectives[SWEEP_MAX_OBJECTIVES];
} store_job;

/* The objectives of a job (its `metric:` entries, in order; a job stored
 * before objectives were kept has its one metric) into out, *n of them (at
 * least 1). -1 with err when there is no such job. */
int store_job_objectives(store *s, int64_t job, sweep_objective out[SWEEP_MAX_OBJECTIVES], int *n,
                         char *err, size_t errlen);

/* One job's row: 0 found, 1 no such job (or one hidden), -1 error. */
int store_job_get(store *s, int64_t job_id, store_job *out, char *err, size_t errlen);
/* Sets a job's max_parallel (jobs.parallel: tpe's trials pending or running
 * at once; for grid and random, trials running at once, 0 no cap) with an
 * EDIT event, in one transaction; *was the value before. 0, 1 no such job,
 * or -1 with err. */
int store_job_set_parallel(store *s, int64_t job, int parallel, int *was, char *err, size_t errlen);
/* A page of jobs in submit order: ids above `after`, at most limit (<= 0:
 * all), in one query; *out malloc'd (free), NULL when none. */
int store_jobs(store *s, int64_t after, int limit, store_job **out, size_t *n, char *err,
               size_t errlen);
/* The sweep job was submitted with (*out: sweep_spec_destroy), a grid's
 * axes holding the values earlier edits added (read back from its trials,
 * in trial order). -1 with err when the job kept no text or it no longer
 * loads. */
int store_job_sweep(store *s, int64_t job, sweep_spec **out, char *err, size_t errlen);
/* Appends the n values (YAML flow text) to grid axis `axis` of spec (the
 * job's, from store_job_sweep) and inserts the trials only they make
 * (PENDING, indexed after the job's last), grows n_trials and adds an EDIT
 * event, in one transaction; *added the new trials. Refused: a value on the
 * axis already or bad for the key's schema, a cancelled job, a new trial
 * that fails the checks across keys. */
int store_job_add_values(store *s, int64_t job, sweep_spec *spec, int axis,
                         char values[][SWEEP_VALUE_MAX], int n, long long *added, char *err,
                         size_t errlen);
/* Cancels job's PENDING trials whose swept key has the value canon
 * (canonical text, sweep_value_canon), each with the reason "dropped by
 * edit: KEY=VALUE", and adds an EDIT event, in one transaction; *dropped
 * their count (0 is no error). */
int store_job_drop_pending(store *s, int64_t job, const sweep_spec *spec, const char *key,
                           const char *canon, int *dropped, char *err, size_t errlen);
/* counts[state] = trials of the job in that state. */
int store_job_state_counts(store *s, int64_t job_id, long long counts[TRIAL_N_STATES], char *err,
                           size_t errlen);
/* Job of a trial: 0 found, 1 no such trial, -1 error. */
int store_trial_job(store *s, int64_t trial_id, int64_t *job_id, char *err, size_t errlen);
/* The trial's last attempt that ended FAILED: its number in *attempt (0
 * when none failed) and its message (the exit status or signal, and the
 * worker's own reason when it gave one). */
int store_trial_last_failure(store *s, int64_t trial_id, int *attempt, char *message, size_t mlen,
                             char *err, size_t errlen);
/* Highest stored metric seq of a trial (0 when none): where a worker's
 * resend is acknowledged from. */
int store_max_seq(store *s, int64_t trial_id, int64_t *out, char *err, size_t errlen);
/* Ids of the RUNNING trials in id order (what a restarted daemon reconciles);
 * *out malloc'd (free), NULL when none. */
int store_running_trials(store *s, int64_t **out, size_t *n, char *err, size_t errlen);
/* All jobs, and trials PENDING and RUNNING over all jobs, in one read. */
int store_counts(store *s, long long *jobs, long long *pending, long long *running, char *err,
                 size_t errlen);
/* All jobs, and the trials of all jobs in each state, in one read. */
int store_state_counts(store *s, long long *jobs, long long counts[TRIAL_N_STATES], char *err,
                       size_t errlen);

/* Counts, for tests and `bfctl`: trials of a job (all states when state < 0). */
int store_count_trials(store *s, int64_t job_id, int state, long long *count, char *err,
                       size_t errlen);
int store_count_jobs(store *s, long long *count, char *err, size_t errlen);

/* ------------------------------------------------------- adaptive sweeps */

/* One early-stopping decision (jobs/sched_stop.h made it). */
typedef struct store_decision {
    int64_t id, job, trial;
    char method[16];      /* asha, hb-s<s> (hyperband bracket s), median, threshold */
    int rung;             /* asha, hb-s<s>: 1-based rung; 0 for the others */
    int64_t rung_step;    /* asha: the rung's step; the others: the step judged */
    int64_t step;         /* step of the point judged */
    double value, cutoff; /* cutoff NAN when none */
    int n, stop;
    char reason[320];
    double time;
    int n_point;                        /* MO-ASHA: objectives in point; 0 otherwise */
    double point[SWEEP_MAX_OBJECTIVES]; /* the trial's value of each at the rung */
} store_decision;

/* Records a decision in one transaction: its row (one per trial, method and
 * rung_step: *added = 0 and nothing written when it is already there) and an
 * "early_stop" event; a stop also becomes the trial's stop reason. Committed
 * before bfd sends the stop, so a restart neither loses nor repeats it. */
int store_decision_add(store *s, const store_decision *d, int *added, char *err, size_t errlen);
/* Decisions of a job (trial <= 0) or of one trial (job <= 0), in the order
 * they were made; *out malloc'd (free). */
int store_decisions(store *s, int64_t job, int64_t trial, store_decision **out, size_t *n,
                    char *err, size_t errlen);
/* Values recorded at ASHA rung `rung` of a job by decisions of `method`
 * ("asha", or a hyperband bracket's "hb-s<s>"), in the order they came. */
int store_rung_values(store *s, int64_t job, const char *method, int rung, double **vals, size_t *n,
                      char *err, size_t errlen);
/* The points (m objective values each, row-major into *vals, *n rows)
 * recorded at MO-ASHA rung `rung` of a job by decisions of `method`, in the
 * order they came; decisions without a point of m values are left out. */
int store_rung_points(store *s, int64_t job, const char *method, int rung, int m, double **vals,
                      size_t *n, char *err, size_t errlen);
/* STOPPED -> PENDING, clearing the stop reason, with a "resume" event. */
int store_trial_resume(store *s, int64_t trial_id, const char *message, char *err, size_t errlen);

/* One metric's points of one trial, steps ascending. */
typedef struct store_series {
    int64_t trial;
    size_t n;
    int64_t *steps;
    double *values;
} store_series;
/* The series of metric `name` of every trial of a job that has one (trial
 * > 0: of that trial only). *out malloc'd: store_series_free. */
int store_job_series(store *s, int64_t job, int64_t trial, const char *name, store_series **out,
                     size_t *n, char *err, size_t errlen);
void store_series_free(store_series *v, size_t n);

/* Ids of the tpe jobs that still have trials to propose (not cancelled). */
int store_proposing_jobs(store *s, int64_t **out, size_t *n, char *err, size_t errlen);
/* The sweep text a job was submitted with (malloc'd into *text, NULL when
 * none was kept) and its file name. */
int store_job_source(store *s, int64_t job, char **text, char *file, size_t filelen, char *err,
                     size_t errlen);
/* Adds one proposed trial (PENDING) to a tpe job with its sampler point
 * (JSON array text), and a "propose" event, in one transaction. Refused
 * when the job already has n_trials trials or is closed. */
int store_add_trial(store *s, int64_t job, const sweep_trial *t, const char *point_json,
                    int64_t *trial_id, char *err, size_t errlen);

/* ------------------------------------------------------------ removing jobs
 *
 * A job to remove is hidden at once (store_prune_mark: no reader sees it)
 * and then deleted a chunk of trials per store_prune_step, each chunk one
 * short transaction: its trials with their points, latest values, attempts,
 * decisions, events and stage plans; the last step the job's own events,
 * decisions and row. A stage still planned by a kept trial stays (its
 * runner, when removed, is forgotten: the stage stays done), except a last
 * stage (eval) run by a removed trial: a trial reusing it would copy its
 * runner's eval points, which are gone, so it goes and is run again. One
 * nobody plans goes. The folders of stages that go are named to the caller. jobs.hidden: 0 seen,
 * 1 a submit still writing (left by a crash: store_prune_abandoned), 2 to
 * remove with its files, 3 to remove keeping the trial and stage folders. */

enum { STORE_HIDDEN_SUBMIT = 1, STORE_HIDDEN_REMOVE = 2, STORE_HIDDEN_REMOVE_KEEP = 3 };

/* Marks job for removal (keep_files: its folders stay) in one transaction. */
int store_prune_mark(store *s, int64_t job, int keep_files, char *err, size_t errlen);
/* Marks for removal every job a submit left half written (a crash during
 * it); *n counts them. For bfd's start, before any submit runs. */
int store_prune_abandoned(store *s, int *n, char *err, size_t errlen);
/* *any = 1 when a job marked for removal is left. */
int store_prune_pending(store *s, int *any, char *err, size_t errlen);

typedef char store_stage_dir[32]; /* "NAME-KEY", a folder under the stage root */

/* What one store_prune_step removed: the job (0 when none was marked), its
 * name (for its TensorBoard folder), whether its folders stay, the trials
 * deleted (their folders and logs are the caller's to remove), the folders
 * of stages nobody plans any more, and job_done when the job's row went
 * (its last step). Free with store_pruned_free. */
typedef struct store_pruned {
    int64_t job;
    char name[128];
    int keep_files, job_done;
    int64_t *trials;
    size_t n_trials;
    store_stage_dir *stage_dirs;
    size_t n_stage_dirs;
} store_pruned;

/* Removes up to max_trials trials of the first job marked for removal, or
 * its row when none is left, in one transaction. */
int store_prune_step(store *s, int max_trials, store_pruned *out, char *err, size_t errlen);
void store_pruned_free(store_pruned *p);
/* Gives up to `pages` free pages of the file back to the file system
 * (PRAGMA incremental_vacuum; 0: all); *left the free pages that remain. */
int store_shrink(store *s, int pages, long long *left, char *err, size_t errlen);

/* A finished job `gc` may remove. */
typedef struct store_gc_job {
    int64_t job;
    char name[128];
    char state[16]; /* completed, failed or cancelled */
    double last;    /* unix seconds of its last change */
    long long trials, points;
} store_gc_job;
enum { STORE_GC_COMPLETED = 1, STORE_GC_FAILED = 2, STORE_GC_CANCELLED = 4 };
/* The finished jobs (no trial pending or running, none left to propose)
 * whose last change is before `before` and whose state is in the mask
 * `states` (STORE_GC_*), by id; *out malloc'd (free). */
int store_gc_candidates(store *s, double before, unsigned states, store_gc_job **out, size_t *n,
                        char *err, size_t errlen);

/* ---------------------------------------------------------- shared stages
 *
 * A trial of a pipeline with stages (s2s: six) is a chain of them
 * (common/stage_graph.h, declared in common/pipeline_decl.c). Each stage
 * key is one row of the stage table, shared by every trial (of any job)
 * whose plan holds that key; the plan of each s2s trial is written at submit.
 * Stage states: pending (nobody runs it now; any trial that needs it may
 * claim it) -> running (one trial's attempt runs it) -> done | failed |
 * pending. The stage follows its runner's attempt inside the same
 * transaction as the trial's own transition: the attempt ends COMPLETED or
 * by store_trial_stage_done -> done; FAILED -> failed once the stage has
 * failed 1 + retries times (retries of the runner's job), else pending;
 * preempted, stopped or cancelled -> pending. So a restart of bfd (whatever
 * moment it was killed at) neither runs a stage twice nor loses one. */

typedef enum {
    STAGE_PENDING = 0,
    STAGE_RUNNING,
    STAGE_DONE,
    STAGE_FAILED,
    STAGE_N_STATES
} stage_state;

const char *store_stage_state_name(stage_state s); /* "pending", ... */

/* One stage of a trial's plan, with the shared row of its key. */
typedef struct store_stage {
    int idx;       /* 0 .. n-1 in the graph (s2s: 0 teacher .. 5 eval) */
    char name[16]; /* "teacher", ... */
    char key[17];  /* stage_graph_plan's key */
    char parent[17];
    char dir[32];  /* folder name "NAME-KEY" under the stage root */
    char next[16]; /* the next stage's name; "" for the last stage */
    int known;     /* 0: no trial has claimed the key yet (the fields below are 0) */
    stage_state state;
    int64_t trial;                  /* the trial that runs it, ran it, or last tried (0: none) */
    int64_t job;                    /* that trial's job */
    int attempts;                   /* times started */
    int failures;                   /* attempts that failed */
    double created, started, ended; /* unix seconds; 0 when not yet */
    char message[256];              /* how the last attempt ended */
} store_stage;

/* The plan of a trial with the shared row of each stage: *n = its graph's
 * stages (s2s: 6), or 0 for a trial of a pipeline without stages. */
int store_trial_stages(store *s, int64_t trial, store_stage out[STAGE_MAX], int *n, char *err,
                       size_t errlen);

/* What a PENDING s2s trial does next (store_stage_next). */
typedef enum {
    STAGE_NEXT_NONE = 0, /* not an s2s trial: launch it as usual */
    STAGE_NEXT_RUN,      /* run stage *idx itself (nobody runs it; done ones are reused) */
    STAGE_NEXT_WAIT,     /* stage *idx is being run by another trial: stay PENDING */
    STAGE_NEXT_FAILED,   /* stage *idx failed for good: the trial fails with it */
    STAGE_NEXT_REUSED    /* every stage is done already: the trial completes without a run */
} stage_next;

/* Walks the plan of trial (PENDING) and says what it does next; *idx is the
 * first stage not done. WAIT and FAILED fill reason ("waiting for stage avit
 * 3f2a… of t2", "stage avit 3f2a… failed (run by t2): ..."). A stage left
 * running by a trial that is not RUNNING (bfd died between the two writes
 * of a launch in an older build, or the row is stale) counts as not run. A
 * failed stage is claimable again by a trial of a job submitted after it
 * failed (a new submission retries it); for trials submitted before, it
 * fails them. *first_wait is 1 when this is the first time the trial waits
 * for that stage (a "stage" event is then written: bfd publishes it once). */
int store_stage_next(store *s, int64_t trial, stage_next *next, int *idx, char *reason,
                     size_t reasonlen, int *first_wait, char *err, size_t errlen);

/* PENDING -> RUNNING for one attempt that runs stage idx of the trial's plan,
 * and the stage -> running with this trial as its runner, in one
 * transaction. Refused when another RUNNING trial runs the stage, or the
 * stage is done. */
int store_stage_launch(store *s, int64_t trial, int idx, const char *message, char *err,
                       size_t errlen);

/* The stage the RUNNING trial's attempt runs: 0 found (*out filled), 1 none. */
int store_trial_running_stage(store *s, int64_t trial, store_stage *out, char *err, size_t errlen);

/* The attempt ran its stage to the end (the worker wrote stage.json): the
 * stage -> done and the trial RUNNING -> PENDING for its next stage, with
 * the attempt's outcome STAGE_DONE and no retry used, in one transaction.
 * (For the last stage, eval, the trial goes COMPLETED instead through
 * store_trial_transition, which marks the stage done too.) */
int store_trial_stage_done(store *s, int64_t trial, const char *message, char *err, size_t errlen);

/* PENDING -> FAILED of a trial whose stage failed for good under another
 * trial (store_stage_next said FAILED); the attempt recorded says so. */
int store_trial_stage_failed(store *s, int64_t trial, const char *message, char *err,
                             size_t errlen);

/* PENDING -> COMPLETED of a trial whose every stage is done (REUSED): its eval
 * stage's points (metric names under "eval/") are copied from the trial that
 * ran that stage, under new sequence numbers after the trial's own, so the
 * trial has its final metric. One transaction. */
int store_trial_stages_reused(store *s, int64_t trial, const char *message, char *err,
                              size_t errlen);

/* How a job's trials share stages: uses = trials x stages of its s2s trials;
 * distinct = distinct keys among them; shared = keys used by two or more of
 * its trials; reused = uses served by a run of another trial (of this job or
 * another, the stage done or running); from_other_jobs = distinct keys whose
 * run belongs to a trial of another job; run = stages its own trials ran
 * (done). All 0 for a job that is not s2s. */
typedef struct store_stage_counts {
    long long uses, distinct, shared, reused, from_other_jobs, run;
    long long by_state[STAGE_N_STATES]; /* distinct keys in each state (never claimed: pending) */
} store_stage_counts;
int store_job_stage_counts(store *s, int64_t job, store_stage_counts *out, char *err,
                           size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
