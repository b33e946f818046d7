/* submitq.c — the submit thread (see submitq.h): loads, validates,
 * expands and stores each submitted sweep on a store connection of its own,
 * in order, and wakes the loop through a pipe when one is done. It must not
 * touch the loop's state, sockets or store connection: requests go in and
 * results come out through the two locked queues only. */
#include "daemon/submitq.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs/store.h"

struct submitq {
    store *st; /* the thread's own connection */
    int slots, n_gpus, slurm;
    char home[1024];
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    submit_req *todo, *todo_tail, *done, *done_tail;
    size_t n_todo;
    int busy; /* the thread holds a request */
    int quit;
    int wake[2]; /* a byte per finished request: the loop polls wake[0] */
};

static void append(submit_req **head, submit_req **tail, submit_req *r) {
    r->next = NULL;
    if (*tail)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

static submit_req *take(submit_req **head, submit_req **tail) {
    submit_req *r = *head;
    if (r) {
        *head = r->next;
        if (!*head) *tail = NULL;
        r->next = NULL;
    }
    return r;
}

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

/* What the loop did in ctl_submit before, now here: load (every trial's
 * config checked), the resource check, the store's one transaction. */
static void process(submitq *q, submit_req *r) {
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

static void *run(void *arg) {
    submitq *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->todo && !q->quit) pthread_cond_wait(&q->cv, &q->mu);
        if (q->quit) break;
        submit_req *r = take(&q->todo, &q->todo_tail);
        q->n_todo--;
        q->busy = 1;
        pthread_mutex_unlock(&q->mu);
        process(q, r);
        pthread_mutex_lock(&q->mu);
        q->busy = 0;
        append(&q->done, &q->done_tail, r);
        char c = 'd';
        ssize_t w = write(q->wake[1], &c, 1); /* non-blocking: a full pipe is awake already */
        (void)w;
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
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
    q->wake[0] = q->wake[1] = -1;
    snprintf(q->home, sizeof q->home, "%s", home);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (pipe(q->wake) != 0) {
        snprintf(err, errlen, "submitq: pipe: %s", strerror(errno));
        submitq_destroy(&q);
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(q->wake[i], F_SETFL, O_NONBLOCK);
        fcntl(q->wake[i], F_SETFD, FD_CLOEXEC);
    }
    if (store_open(db_path, &q->st, err, errlen)) {
        submitq_destroy(&q);
        return -1;
    }
    int e = pthread_create(&q->thread, NULL, run, q);
    if (e) {
        snprintf(err, errlen, "submitq: pthread_create: %s", strerror(e));
        submitq_destroy(&q);
        return -1;
    }
    q->started = 1;
    *out = q;
    return 0;
}

int submitq_fd(const submitq *q) { return q->wake[0]; }

int submitq_push(submitq *q, submit_req *r) {
    pthread_mutex_lock(&q->mu);
    int full = q->n_todo >= SUBMITQ_MAX_QUEUED || q->quit;
    if (!full) {
        append(&q->todo, &q->todo_tail, r);
        q->n_todo++;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return full ? -1 : 0;
}

submit_req *submitq_pop_done(submitq *q) {
    char buf[64];
    while (read(q->wake[0], buf, sizeof buf) > 0) {
    }
    pthread_mutex_lock(&q->mu);
    submit_req *r = take(&q->done, &q->done_tail);
    pthread_mutex_unlock(&q->mu);
    return r;
}

size_t submitq_pending(const submitq *q) {
    submitq *m = (submitq *)q; /* the lock is not part of the value */
    pthread_mutex_lock(&m->mu);
    size_t n = m->n_todo + (size_t)m->busy;
    pthread_mutex_unlock(&m->mu);
    return n;
}

void submitq_stop(submitq *q) {
    if (!q || !q->started) return;
    pthread_mutex_lock(&q->mu);
    q->quit = 1;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    q->started = 0;
    submit_req *r;
    while ((r = take(&q->todo, &q->todo_tail))) submit_req_free(&r);
    q->n_todo = 0;
}

void submitq_destroy(submitq **self_p) {
    if (!self_p || !*self_p) return;
    submitq *q = *self_p;
    submitq_stop(q);
    submit_req *r;
    while ((r = take(&q->done, &q->done_tail))) submit_req_free(&r);
    if (q->st) store_close(&q->st);
    for (int i = 0; i < 2; i++)
        if (q->wake[i] >= 0) close(q->wake[i]);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
    *self_p = NULL;
}
