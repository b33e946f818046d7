/* workq.c — the request thread (see workq.h): two locked lists (to do,
 * done), a condition for the thread and a non-blocking pipe for the loop. */
#include "daemon/workq.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct workq {
    char name[32];
    workq_process_fn process;
    void *ctx;
    workq_free_fn free_item;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    workq_item *todo, *todo_tail, *done, *done_tail;
    size_t n_todo;
    int busy; /* the thread holds an item */
    int quit;
    int wake[2]; /* a byte per processed item: the loop polls wake[0] */
};

static void append(workq_item **head, workq_item **tail, workq_item *it) {
    it->next = NULL;
    if (*tail)
        (*tail)->next = it;
    else
        *head = it;
    *tail = it;
}

static workq_item *take(workq_item **head, workq_item **tail) {
    workq_item *it = *head;
    if (it) {
        *head = it->next;
        if (!*head) *tail = NULL;
        it->next = NULL;
    }
    return it;
}

static void *run(void *arg) {
    workq *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->todo && !q->quit) pthread_cond_wait(&q->cv, &q->mu);
        if (q->quit) break;
        workq_item *it = take(&q->todo, &q->todo_tail);
        q->n_todo--;
        q->busy = 1;
        pthread_mutex_unlock(&q->mu);
        q->process(q->ctx, it);
        pthread_mutex_lock(&q->mu);
        q->busy = 0;
        append(&q->done, &q->done_tail, it);
        char c = 'd';
        ssize_t w = write(q->wake[1], &c, 1); /* non-blocking: a full pipe is awake already */
        (void)w;
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

int workq_new(workq **self_p, const char *name, workq_process_fn process, void *ctx,
              workq_free_fn free_item, char *err, size_t errlen) {
    *self_p = NULL;
    workq *q = calloc(1, sizeof *q);
    if (!q) {
        snprintf(err, errlen, "%s: out of memory", name);
        return -1;
    }
    snprintf(q->name, sizeof q->name, "%s", name);
    q->process = process;
    q->ctx = ctx;
    q->free_item = free_item;
    q->wake[0] = q->wake[1] = -1;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    if (pipe(q->wake) != 0) {
        snprintf(err, errlen, "%s: pipe: %s", name, strerror(errno));
        workq_destroy(&q);
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(q->wake[i], F_SETFL, O_NONBLOCK);
        fcntl(q->wake[i], F_SETFD, FD_CLOEXEC);
    }
    int e = pthread_create(&q->thread, NULL, run, q);
    if (e) {
        snprintf(err, errlen, "%s: pthread_create: %s", name, strerror(e));
        workq_destroy(&q);
        return -1;
    }
    q->started = 1;
    *self_p = q;
    return 0;
}

int workq_fd(const workq *q) { return q->wake[0]; }

int workq_push(workq *q, workq_item *it, size_t max) {
    pthread_mutex_lock(&q->mu);
    int full = q->n_todo >= max || q->quit;
    if (!full) {
        append(&q->todo, &q->todo_tail, it);
        q->n_todo++;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return full ? -1 : 0;
}

workq_item *workq_pop_done(workq *q) {
    char buf[64];
    while (read(q->wake[0], buf, sizeof buf) > 0) {
    }
    pthread_mutex_lock(&q->mu);
    workq_item *it = take(&q->done, &q->done_tail);
    pthread_mutex_unlock(&q->mu);
    return it;
}

size_t workq_pending(const workq *q) {
    workq *m = (workq *)q; /* the lock is not part of the value */
    pthread_mutex_lock(&m->mu);
    size_t n = m->n_todo + (size_t)m->busy;
    pthread_mutex_unlock(&m->mu);
    return n;
}

void workq_stop(workq *q) {
    if (!q || !q->started) return;
    pthread_mutex_lock(&q->mu);
    q->quit = 1;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    q->started = 0;
    workq_item *it;
    while ((it = take(&q->todo, &q->todo_tail))) q->free_item(it);
    q->n_todo = 0;
}

void workq_destroy(workq **self_p) {
    if (!self_p || !*self_p) return;
    workq *q = *self_p;
    workq_stop(q);
    workq_item *it;
    while ((it = take(&q->done, &q->done_tail))) q->free_item(it);
    for (int i = 0; i < 2; i++)
        if (q->wake[i] >= 0) close(q->wake[i]);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
    *self_p = NULL;
}
