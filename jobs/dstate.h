/* dstate — what bfd keeps in the store's database beyond the jobs module's
 * tables: the process of each running attempt (so a restarted bfd can find
 * and reattach to it) and each job's working directory. Its own SQLite
 * connection to the same WAL database, for its own two tables only: every
 * read of the jobs tables goes through the store_ functions (jobs/store.h
 * owns that schema).
 * All functions return 0 or -1 with a message naming the SQLite call. */
#ifndef DSTATE_H
#define DSTATE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct dstate dstate;

/* Opens path, already created and migrated by store_open (whose migrations
 * make the bfd_runs and bfd_jobs tables: one schema, one user_version). Free
 * with dstate_close. */
int dstate_open(const char *path, dstate **out, char *err, size_t errlen);
void dstate_close(dstate **d);

typedef struct dstate_run {
    int64_t trial;
    int attempt;
    char token[33];
    pid_t pid;
    char gpus[256]; /* "0,1" or "" */
    double started;
    char slurm_job[32]; /* Slurm job id of the attempt ("" with the local launcher) */
    char agent[64];     /* launcher: remote: the agent that runs it ("" otherwise) */
} dstate_run;

int dstate_run_put(dstate *d, const dstate_run *r, char *err, size_t errlen);
/* dstate_run_put of r[0..n-1] in one transaction (one sync for a job array). */
int dstate_runs_put(dstate *d, const dstate_run *r, size_t n, char *err, size_t errlen);
int dstate_run_del(dstate *d, int64_t trial, char *err, size_t errlen);
/* Every recorded run; *out malloc'd (free). */
int dstate_runs(dstate *d, dstate_run **out, size_t *n, char *err, size_t errlen);

int dstate_job_cwd_set(dstate *d, int64_t job, const char *cwd, char *err, size_t errlen);
/* cwd of the job into buf ("" when none recorded). */
int dstate_job_cwd(dstate *d, int64_t job, char *buf, size_t buflen, char *err, size_t errlen);

#endif
