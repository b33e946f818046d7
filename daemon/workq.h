/* workq — one thread that takes requests in order off bfd's event loop and
 * hands each back when done, waking the loop through a pipe (workq_fd is
 * readable while answers wait). What a request is and how it is processed
 * are the user's (submitq: sweeps stored; slurmq: Slurm commands): the
 * queue only links them, by the `next` pointer each request type carries
 * first (struct workq_item). The process function runs on the thread and
 * must not touch the loop's state. */
#ifndef WORKQ_H
#define WORKQ_H

#include <stddef.h>

/* The head every request type starts with. */
typedef struct workq_item {
    struct workq_item *next;
} workq_item;

typedef void (*workq_process_fn)(void *ctx, workq_item *it);
typedef void (*workq_free_fn)(workq_item *it);

typedef struct workq workq;

/* Starts the thread: process(ctx, item) for each pushed item, in order;
 * free_item drops those never processed (at workq_stop) or never popped. */
int workq_new(workq **self_p, const char *name, workq_process_fn process, void *ctx,
              workq_free_fn free_item, char *err, size_t errlen);
int workq_fd(const workq *q);
/* Queues it (taken) unless max already wait or the queue stopped: -1, not taken. */
int workq_push(workq *q, workq_item *it, size_t max);
/* The next processed item (the caller's now), or NULL. */
workq_item *workq_pop_done(workq *q);
/* Items queued or being processed. */
size_t workq_pending(const workq *q);
/* Lets the thread finish its item, drops (free_item) the ones not started,
 * joins it; processed items can still be popped until workq_destroy. */
void workq_stop(workq *q);
void workq_destroy(workq **self_p);

#endif
