/* slurmq.c — the Slurm command thread (see slurmq.h) on a workq: each
 * request runs slurm.c's call for its kind, timed. */
#include "daemon/slurmq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/workq.h"

struct slurmq {
    char sbatch[1024], scontrol[1024], scancel[1024];
    workq *q;
};

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void process(void *ctx, workq_item *it) {
    slurmq *q = ctx;
    slurmq_req *r = (slurmq_req *)it;
    double t0 = mono_s();
    switch (r->kind) {
    case SLURMQ_SUBMIT:
        r->rc = slurm_submit(q->sbatch, r->arg, r->id, r->err, sizeof r->err);
        break;
    case SLURMQ_QUERY:
        if (r->n > 0) {
            r->st = calloc((size_t)r->n, sizeof *r->st);
            r->rc = r->st
                        ? slurm_query_array(q->scontrol, r->arg, r->st, r->n, r->err, sizeof r->err)
                        : -1;
            if (!r->st) snprintf(r->err, sizeof r->err, "slurmq: out of memory");
        } else {
            r->rc = slurm_query(q->scontrol, r->arg, &r->one, r->err, sizeof r->err);
        }
        break;
    case SLURMQ_CANCEL:
        r->rc = r->n ? slurm_cancel_array(q->scancel, r->arg, r->term, r->err, sizeof r->err)
                     : slurm_cancel(q->scancel, r->arg, r->term, r->err, sizeof r->err);
        break;
    }
    r->ms = (mono_s() - t0) * 1e3;
}

static void free_item(workq_item *it) {
    slurmq_req *r = (slurmq_req *)it;
    slurmq_req_free(&r);
}

int slurmq_new(slurmq **self_p, const char *sbatch, const char *scontrol, const char *scancel,
               char *err, size_t errlen) {
    *self_p = NULL;
    slurmq *q = calloc(1, sizeof *q);
    if (!q) {
        snprintf(err, errlen, "slurmq: out of memory");
        return -1;
    }
    snprintf(q->sbatch, sizeof q->sbatch, "%s", sbatch);
    snprintf(q->scontrol, sizeof q->scontrol, "%s", scontrol);
    snprintf(q->scancel, sizeof q->scancel, "%s", scancel);
    if (workq_new(&q->q, "slurmq", process, q, free_item, err, errlen)) {
        free(q);
        return -1;
    }
    *self_p = q;
    return 0;
}

int slurmq_fd(const slurmq *q) { return workq_fd(q->q); }

int slurmq_push(slurmq *q, slurmq_req *r) { return workq_push(q->q, &r->item, SLURMQ_MAX_QUEUED); }

slurmq_req *slurmq_pop_done(slurmq *q) { return (slurmq_req *)workq_pop_done(q->q); }

size_t slurmq_pending(const slurmq *q) { return workq_pending(q->q); }

slurmq_req *slurmq_req_new(slurmq_kind kind, const char *arg) {
    slurmq_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->kind = kind;
    snprintf(r->arg, sizeof r->arg, "%s", arg);
    return r;
}

void slurmq_req_free(slurmq_req **self_p) {
    if (!self_p || !*self_p) return;
    free((*self_p)->st);
    free((*self_p)->data);
    free(*self_p);
    *self_p = NULL;
}

void slurmq_stop(slurmq *q) {
    if (q && q->q) workq_stop(q->q);
}

void slurmq_destroy(slurmq **self_p) {
    if (!self_p || !*self_p) return;
    workq_destroy(&(*self_p)->q);
    free(*self_p);
    *self_p = NULL;
}
