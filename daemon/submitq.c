/* submitq.c — the submit thread (see submitq.h): loads, validates,
 * expands and stores each submitted sweep on a store connection of its own,
 * in order, and wakes the loop through a pipe when one is done. It must not
 * touch the loop's state, sockets or store connection: requests go in and
 * results come out through the two locked queues only. */
#include "daemon/submitq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/store.h"

struct submitq {
    store *st; /* the thread's own connection */
    int slots, n_gpus, slurm;
    char home[1024];
    workq *q;
};

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

submit_req *submit_req_new(const proto_msg *msg, const char *text, const char *file,
                           const char *cwd) {
    submit_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->msg = *msg;
    r->msg.body = NULL;
    r->text = strdup(text);
    r->file = strdup(file);
    r->cwd = dup_or_null(cwd);
    if (!r->text || !r->file || (cwd && !r->cwd)) submit_req_free(&r);
    return r;
}

void submit_req_free(submit_req **self_p) {
    if (!self_p || !*self_p) return;
    submit_req *r = *self_p;
    free(r->text);
    free(r->file);
    free(r->cwd);
    sweep_errors_free(&r->errs);
    free(r);
    *self_p = NULL;
}

/* What the loop did in req_submit before, now here: load (every trial's
 * config checked), the resource check, the store's one transaction. */
static void process(void *ctx, workq_item *it) {
    submitq *q = ctx;
    submit_req *r = (submit_req *)it;
    sweep_spec *spec = NULL;
    if (sweep_load_string(r->text, strlen(r->text), r->file, &spec, &r->errs)) {
        r->status = SUBMIT_INVALID;
        return;
    }
    int ranks = spec->resources.ranks > 0 ? spec->resources.ranks : 1;
    int need_g = q->slurm ? 0 : ranks * spec->resources.gpus_per_rank;
    if (ranks > q->slots || need_g > q->n_gpus) {
        snprintf(r->err, sizeof r->err,
                 "submit: each trial needs %d slots and %d GPUs; this bfd has %d slots and %d "
                 "GPUs (%s/bfd.yaml)",
                 ranks, need_g, q->slots, q->n_gpus, q->home);
        r->status = SUBMIT_REFUSED;
    } else if (store_submit(q->st, spec, r->text, &r->job, r->err, sizeof r->err)) {
        r->status = SUBMIT_FAILED;
    } else {
        r->status = SUBMIT_STORED;
        r->n_trials = spec->is_sweep ? spec->n_trials : 1;
        snprintf(r->name, sizeof r->name, "%s", spec->name);
    }
    sweep_spec_destroy(&spec);
}

static void free_item(workq_item *it) {
    submit_req *r = (submit_req *)it;
    submit_req_free(&r);
}

int submitq_new(submitq **out, const char *db_path, int slots, int n_gpus, int slurm,
                const char *home, char *err, size_t errlen) {
    *out = NULL;
    submitq *q = calloc(1, sizeof *q);
    if (!q) {
        snprintf(err, errlen, "submitq: out of memory");
        return -1;
    }
    q->slots = slots;
    q->n_gpus = n_gpus;
    q->slurm = slurm;
    snprintf(q->home, sizeof q->home, "%s", home);
    if (store_open(db_path, &q->st, err, errlen) ||
        workq_new(&q->q, "submitq", process, q, free_item, err, errlen)) {
        submitq_destroy(&q);
        return -1;
    }
    *out = q;
    return 0;
}

int submitq_fd(const submitq *q) { return workq_fd(q->q); }

int submitq_push(submitq *q, submit_req *r) {
    return workq_push(q->q, &r->item, SUBMITQ_MAX_QUEUED);
}

submit_req *submitq_pop_done(submitq *q) { return (submit_req *)workq_pop_done(q->q); }

size_t submitq_pending(const submitq *q) { return workq_pending(q->q); }

void submitq_stop(submitq *q) {
    if (q && q->q) workq_stop(q->q);
}

void submitq_destroy(submitq **self_p) {
    if (!self_p || !*self_p) return;
    submitq *q = *self_p;
    workq_destroy(&q->q); /* the thread first: it uses the store */
    if (q->st) store_close(&q->st);
    free(q);
    *self_p = NULL;
}
