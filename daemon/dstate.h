/* dstate — what bfd keeps in the store's database beyond the jobs module's
 * tables: the process of each running attempt (so a restarted bfd can find
 * and reattach to it), each job's working directory, and the read-only
 * queries bfd needs over the jobs tables (listing jobs, state counts, the
 * highest stored seq). Its own SQLite connection to the same WAL database.
 * All functions return 0 or -1 with a message naming the SQLite call. */
#ifndef DSTATE_H
#define DSTATE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct dstate dstate;

/* Opens path (already created and migrated by store_open) and creates the
 * bfd_runs and bfd_jobs tables when missing. Free with dstate_close. */
int dstate_open(const char *path, dstate **out, char *err, size_t errlen);
void dstate_close(dstate **d);

typedef struct dstate_run {
    int64_t trial;
    int attempt;
    char token[33];
    pid_t pid;
    char gpus[256]; /* "0,1" or "" */
    double started;
} dstate_run;

int dstate_run_put(dstate *d, const dstate_run *r, char *err, size_t errlen);
int dstate_run_del(dstate *d, int64_t trial, char *err, size_t errlen);
/* Every recorded run; *out malloc'd (free). */
int dstate_runs(dstate *d, dstate_run **out, size_t *n, char *err, size_t errlen);

int dstate_job_cwd_set(dstate *d, int64_t job, const char *cwd, char *err, size_t errlen);
/* cwd of the job into buf ("" when none recorded). */
int dstate_job_cwd(dstate *d, int64_t job, char *buf, size_t buflen, char *err, size_t errlen);

typedef struct dstate_job {
    int64_t id;
    char name[128], pipeline[64], metric[64], goal[8];
    double submitted;
    int priority, retries, ranks, gpus_per_rank;
    long long n_trials;
} dstate_job;

/* 0 found, 1 no such job, -1 error. */
int dstate_job_get(dstate *d, int64_t job, dstate_job *out, char *err, size_t errlen);
/* {"id", "name", "pipeline", "submitted", "priority", "trials", "metric",
 * "goal", "states": {...}}; NULL with err on failure. */
json_t *dstate_job_json(dstate *d, const dstate_job *j, char *err, size_t errlen);
/* {"PENDING": n, ...} of a job's trials (states with n > 0 only). */
json_t *dstate_job_states(dstate *d, int64_t job, char *err, size_t errlen);
/* Array of dstate_job_json of every job in submit order. */
json_t *dstate_jobs_json(dstate *d, char *err, size_t errlen);
/* Highest stored seq of a trial (0 when none). */
int dstate_max_seq(dstate *d, int64_t trial, int64_t *out, char *err, size_t errlen);
/* Counts for status. */
int dstate_counts(dstate *d, long long *jobs, long long *pending, long long *running, char *err,
                  size_t errlen);
/* Job of a trial; 0 found, 1 none, -1 error. */
int dstate_trial_job(dstate *d, int64_t trial, int64_t *job, char *err, size_t errlen);

/* Ids of the trials in state RUNNING; *out malloc'd (free). */
int dstate_running_trials(dstate *d, int64_t **out, size_t *n, char *err, size_t errlen);

#endif
