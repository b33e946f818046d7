/* procs — an attempt's processes once started: whether one still lives
 * (and is ours, not a reused pid), and signalling its process group, its
 * Slurm job, or its remote agent to signal it. It starts nothing (launch.c)
 * and records no outcome (runs.c). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "daemon/bfd_priv.h"
#include "daemon/slurm.h"

/* 1 when pid lives and its command line holds token (not a reused pid, not a zombie). */
int process_alive(pid_t pid, const char *token) {
    if (pid <= 0 || kill(pid, 0) != 0) return 0;
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == '\0') buf[i] = ' ';
    buf[n] = '\0';
    return strstr(buf, token) != NULL;
}

void slurm_cancel_async(bfd *d, const char *id, int array, int term, long long trial) {
    slurmq_req *q = d->slq ? slurmq_req_new(SLURMQ_CANCEL, id) : NULL;
    if (q) {
        q->n = array;
        q->term = term;
        q->tag = trial;
    }
    if (q && slurmq_push(d->slq, q) == 0) return;
    slurmq_req_free(&q);
    /* no Slurm thread, or its queue is full or stopped (bfd is stopping):
     * cancel here and now */
    char err[1024];
    int rc = array ? slurm_cancel_array(d->c->scancel, id, term, err, sizeof err)
                   : slurm_cancel(d->c->scancel, id, term, err, sizeof err);
    if (rc) bfd_log("trial %lld: %s", trial, err);
}

int agent_signal(bfd *d, const agent *a, int64_t trial, int attempt, int sig) {
    char err[256];
    proto_msg route;
    memset(&route, 0, sizeof route);
    memcpy(route.ident, a->ident, a->ident_len);
    route.ident_len = a->ident_len;
    json_t *b =
        json_pack("{s:I, s:i, s:i}", "trial", (json_int_t)trial, "attempt", attempt, "signal", sig);
    int rc = b ? proto_send(d->wrk, &route, NULL, "kill", b, ZMQ_DONTWAIT, err, sizeof err) : -1;
    if (rc)
        bfd_log("trial %lld: kill to agent %s: %s", (long long)trial, a->name,
                b ? err : "out of memory");
    json_decref(b);
    return rc;
}

/* Signals an attempt: its process group (local, or through its agent with
 * launcher: remote), or its Slurm job: SIGTERM
 * becomes `scancel --signal=TERM` (the worker checkpoints and exits 75),
 * anything else a plain `scancel` (on the Slurm thread). A job Slurm has
 * not started yet is simply cancelled. */
void kill_group(bfd *d, run *r, int sig) {
    if (r->remote) {
        /* its agent signals the group on its host; none holds it (bfd
         * restarted, the agent lost): the heartbeat timeout and the attempt
         * fence end it */
        for (size_t i = 0; i < d->n_agents; i++)
            if (r->agent_id && d->agents[i].id == r->agent_id)
                agent_signal(d, &d->agents[i], r->trial, r->attempt, sig);
        return;
    }
    if (r->slurm_wait) return; /* not submitted yet: slurm_flush drops it */
    char array[SLURM_JOB_ID_MAX];
    int task;
    if (r->array_cancel && slurm_array_task_of(r->slurm_job, array, &task) == 0) {
        /* the whole job is cancelled: one scancel for its array, not one per task */
        double t = now_s();
        r->next_poll = t + 0.5;
        if (!strcmp(d->cancel_memo, array) && d->cancel_memo_sig == sig &&
            t - d->cancel_memo_at < 1.0)
            return;
        slurm_cancel_async(d, array, 1, sig == SIGTERM, r->trial);
        snprintf(d->cancel_memo, sizeof d->cancel_memo, "%s", array);
        d->cancel_memo_sig = sig;
        d->cancel_memo_at = t;
        return;
    }
    if (r->slurm_job[0]) {
        int term = sig == SIGTERM && r->slurm_phase == SLURM_RUNNING;
        slurm_cancel_async(d, r->slurm_job, 0, term, r->trial);
        r->next_poll = now_s() + 0.5;
        return;
    }
    if (r->pid > 0 && kill(-r->pid, sig) != 0 && errno != ESRCH)
        bfd_log("kill(-%d, %d): %s", (int)r->pid, sig, strerror(errno));
}
