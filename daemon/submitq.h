/* submitq — submitted sweeps parsed, checked, expanded and stored off bfd's
 * event loop. A 100,000-trial grid costs seconds of CPU and SQLite (load
 * and validation of every trial, then one insert per trial in one
 * transaction); on the loop, bfd answered nobody meanwhile and heartbeats
 * went unread. Here one thread, with a store connection of its own, takes
 * the submits in order; the loop hands them over (submitq_push), goes on
 * serving, and replies when a result is ready (submitq_fd is readable,
 * submitq_pop_done). A submit is still acknowledged only after its commit.
 *
 * While the thread's transaction runs, a write of the loop's (metric
 * points, trial states) waits for it (SQLite's busy timeout); reads
 * (status, jobs, tail) do not, under WAL. */
#ifndef SUBMITQ_H
#define SUBMITQ_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/workq.h"
#include "jobs/sweep.h"
#include "protocol/proto.h"

#define SUBMITQ_MAX_QUEUED 64 /* submits waiting beyond this are refused (busy) */

typedef enum {
    SUBMIT_STORED = 0,  /* job, name, n_trials set */
    SUBMIT_INVALID = 1, /* the sweep does not load: errs */
    SUBMIT_REFUSED = 2, /* loads, but this bfd cannot run it: err */
    SUBMIT_FAILED = -1, /* the store failed: err */
} submit_status;

typedef struct submit_req {
    workq_item item;         /* first: the queue's link */
    proto_msg msg;           /* the client's routing (ident, req); body NULL */
    char *text, *file, *cwd; /* owned; cwd may be NULL */
    /* the result, set by the thread */
    submit_status status;
    int64_t job;
    long long n_trials;
    char name[256];
    sweep_errors errs;
    char err[2048];
} submit_req;

typedef struct submitq submitq;

/* Starts the thread over the store at db_path. slots, n_gpus, slurm: what
 * this bfd can run (a trial needing more is SUBMIT_REFUSED). Returns 0, or
 * -1 with a message. */
int submitq_new(submitq **out, const char *db_path, int slots, int n_gpus, int slurm,
                const char *home, char *err, size_t errlen);
/* A file descriptor that is readable while results wait (for zmq_poll). */
int submitq_fd(const submitq *q);
/* Queues r (taking ownership). Returns 0, or -1 when SUBMITQ_MAX_QUEUED wait
 * already (r is not taken then). */
int submitq_push(submitq *q, submit_req *r);
/* The next finished submit (owned by the caller: submit_req_free), or NULL. */
submit_req *submitq_pop_done(submitq *q);
/* Submits queued or running. */
size_t submitq_pending(const submitq *q);
/* Lets the thread finish the submit it is storing, drops those not started
 * (never stored, never acknowledged) and joins it; finished ones can still
 * be popped. Then submitq_destroy. */
void submitq_stop(submitq *q);
void submitq_destroy(submitq **self_p);

/* A request with copies of the strings (cwd nullable) and msg's routing. */
submit_req *submit_req_new(const proto_msg *msg, const char *text, const char *file,
                           const char *cwd);
void submit_req_free(submit_req **self_p);

#endif
