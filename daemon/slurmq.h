/* slurmq — bfd's Slurm commands off its event loop. sbatch, scontrol and
 * scancel each take from a few ms to hundreds (seen: `scontrol show job` of
 * a 1,000-task array 350 ms while slurmctld was busy); run on the loop, they
 * held every status request, heartbeat and metric point behind them. Here
 * one thread runs them in order (slurm.c's synchronous calls, each with its
 * hard timeout); the loop pushes a request (slurmq_push), goes on serving,
 * and acts on the answer when slurmq_fd is readable (slurmq_pop_done).
 *
 * The thread knows nothing of bfd's state: a request carries the command's
 * values in and its answer out, plus a tag and a payload that are the
 * caller's. With this thread running, the loop must not reap children with
 * waitpid(-1): slurm_run waits for its own child by pid. */
#ifndef SLURMQ_H
#define SLURMQ_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/slurm.h"
#include "daemon/workq.h"

#define SLURMQ_MAX_QUEUED 4096 /* requests waiting beyond this are refused */

typedef enum {
    SLURMQ_SUBMIT = 0, /* sbatch --parsable arg (a script): id */
    SLURMQ_QUERY = 1,  /* arg an array id: st[0..n-1]; arg a plain job id (n 0): one */
    SLURMQ_CANCEL = 2, /* arg a job or task id (n 0), or an array (n 1): scancel (term) */
} slurmq_kind;

typedef struct slurmq_req {
    workq_item item; /* first: the queue's link */
    slurmq_kind kind;
    char arg[1300];
    int n;    /* QUERY: the array's task count (0: a plain job); CANCEL: 1 for an array */
    int term; /* CANCEL: --signal=TERM */
    /* the caller's: not read by the thread */
    int64_t tag;
    void *data; /* malloc'd or NULL: freed with the request */
    /* the answer, set by the thread */
    int rc; /* 0, or -1 with err */
    char id[SLURM_JOB_ID_MAX];
    slurm_status one; /* QUERY of a plain job */
    slurm_status *st; /* QUERY of an array: n entries (owned) */
    char err[1024];
    double ms; /* how long the command took */
} slurmq_req;

typedef struct slurmq slurmq;

/* Starts the thread with the commands' programs (copied). 0, or -1 with err. */
int slurmq_new(slurmq **self_p, const char *sbatch, const char *scontrol, const char *scancel,
               char *err, size_t errlen);

/* Readable when an answer waits (a byte per answer). */
int slurmq_fd(const slurmq *q);

/* Queues r (ownership passes to the queue; it comes back from
 * slurmq_pop_done). -1 (r still the caller's) when SLURMQ_MAX_QUEUED wait. */
int slurmq_push(slurmq *q, slurmq_req *r);

/* The next answered request (the caller frees it: slurmq_req_free), or NULL. */
slurmq_req *slurmq_pop_done(slurmq *q);

/* A zeroed request of kind for arg (NULL when out of memory). */
slurmq_req *slurmq_req_new(slurmq_kind kind, const char *arg);

/* Requests pushed and not yet popped (waiting, running or answered). */
size_t slurmq_pending(const slurmq *q);

void slurmq_req_free(slurmq_req **self_p);

/* Waits for the request the thread runs, drops (frees) those not started,
 * and ends the thread. Answers not popped stay poppable until slurmq_destroy. */
void slurmq_stop(slurmq *q);
void slurmq_destroy(slurmq **self_p);

#endif
