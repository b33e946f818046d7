/* launch.c — how an attempt starts and is signalled: its folders, its
 * bfd_runs row (written first, so a bfd killed after it still knows the
 * token; an attempt that cannot be recorded does not start), the store's
 * RUNNING (or stage launched) mark, then either a
 * fork/exec of `bfworker run` (under mpirun for more than one rank) in a
 * process group of its own, a Slurm batch job (daemon/slurm.h), or a
 * `launch` to a remote agent (agents.c). It also
 * signals a group or a Slurm job, and tells a live worker from a reused pid.
 * It chooses no trial and no GPU (sched.c) and records no outcome (runs.c). */
#include "daemon/bfd_priv.h"
#include "common/errbuf.h"
#include "common/spawn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int is_slurm(const bfd *d) { return strcmp(d->c->launcher, "slurm") == 0; }

int make_dir(const char *path, mode_t mode, char *err, size_t errlen) {
    if (mkdir(path, mode) != 0 && errno != EEXIST)
        return bf_fail(err, errlen, "mkdir %s: %s", path, strerror(errno));
    return 0;
}

static void format_gpus(const int *g, int n, char *buf, size_t len) {
    size_t w = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && w + 8 < len; i++)
        w += (size_t)snprintf(buf + w, len - w, "%s%d", i ? "," : "", g[i]);
}

void parse_gpus(const char *s, int *g, int *n) {
    *n = 0;
    while (*s && *n < BFD_MAX_GPUS) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) break;
        g[(*n)++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
}

/* The subnet (CIDR, e.g. 198.18.0.0/24) of the interface that holds the
 * address of bfd's TCP endpoint tcp://HOST:PORT, into buf; "" when HOST is
 * a wildcard, a name or on no interface of this host. The ranks of a trial
 * on several hosts use it for MPI's TCP: the network bfd is reached on is
 * the one the nodes share, whatever its interfaces are named there. */
static void endpoint_cidr(const char *ep, char *buf, size_t len) {
    buf[0] = '\0';
    char host[128];
    if (strncmp(ep, "tcp://", 6) != 0) return;
    const char *h = ep + 6, *colon = strrchr(h, ':');
    if (!colon || (size_t)(colon - h) >= sizeof host) return;
    snprintf(host, sizeof host, "%.*s", (int)(colon - h), h);
    struct in_addr a;
    if (inet_pton(AF_INET, host, &a) != 1 || a.s_addr == htonl(INADDR_ANY)) return;
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0) return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || !i->ifa_netmask || i->ifa_addr->sa_family != AF_INET) continue;
        struct in_addr ia = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        struct in_addr m = ((struct sockaddr_in *)i->ifa_netmask)->sin_addr;
        if (ia.s_addr != a.s_addr) continue;
        struct in_addr net = {.s_addr = ia.s_addr & m.s_addr};
        int bits = __builtin_popcount(ntohl(m.s_addr));
        char ns[INET_ADDRSTRLEN];
        if (inet_ntop(AF_INET, &net, ns, sizeof ns)) snprintf(buf, len, "%s/%d", ns, bits);
        break;
    }
    freeifaddrs(ifs);
}

/* Queues the attempt r (already RUNNING in the store and recorded in
 * bfd_runs) for its job's next Slurm job array: sent when the array is
 * full, when a trial of another job is launched, or at the end of the
 * scheduling pass (slurm_flush). */
static int queue_slurm(bfd *d, run *r, const store_job *j) {
    if (d->n_arr && d->arr_job.id != j->id) {
        int64_t trial = r->trial;
        slurm_flush(d);
        /* the flush may remove runs (cancelled, or not submitted), and a
         * removal moves the last run, r, into the freed slot */
        r = find_run(d, trial);
    }
    if (d->n_arr == d->cap_arr) {
        size_t cap = d->cap_arr ? 2 * d->cap_arr : 64;
        int64_t *na = realloc(d->arr_trials, cap * sizeof *na);
        if (!na) {
            char err[512];
            int64_t trial = r->trial;
            int rq;
            remove_run(d, r);
            if (store_trial_fail(d->st, trial, "bfd out of memory", &rq, err, sizeof err))
                bfd_log("%s", err);
            return -1;
        }
        d->arr_trials = na;
        d->cap_arr = cap;
    }
    d->arr_trials[d->n_arr++] = r->trial;
    d->arr_job = *j;
    r->slurm_wait = 1;
    if ((int)d->n_arr >= d->max_array) slurm_flush(d);
    return 0;
}

/* Fails the trial of r (forgotten) for why. */
static void fail_unsubmitted(bfd *d, run *r, const char *why) {
    char err[1024];
    int64_t trial = r->trial;
    int rq;
    remove_run(d, r);
    if (store_trial_fail(d->st, trial, why, &rq, err, sizeof err)) bfd_log("%s", err);
    bfd_log("trial %lld: %s", (long long)trial, why);
}

/* An array on its way through sbatch: the tasks' trials and attempts, in
 * task order (the payload of its slurmq request). */
typedef struct submission {
    int64_t job;
    int ranks, n;
    int done; /* tasks applied so far (array_submitted works through them in slices) */
    struct {
        int64_t trial;
        int attempt;
    } t[];
} submission;

/* r's attempt did not start, or was stopped at once (why): forgotten and
 * its trial PENDING again without counting a failure. */
static void unlaunch(bfd *d, run *r, const char *why) {
    char err[1024];
    int64_t trial = r->trial, job = r->job;
    int attempt = r->attempt;
    remove_run(d, r);
    if (store_trial_preempt(d->st, trial, why, err, sizeof err)) bfd_log("%s", err);
    bfd_log("trial %lld attempt %d: %s", (long long)trial, attempt, why);
    publish_event(d, job, trial, "PENDING", attempt, why);
}

/* One sbatch --array for the runs of trials ids[0..n-1] (all of job j, all
 * waiting): the manifest and script under $BF_HOME/slurm, named after the
 * first task's trial and attempt (unique, so a restarted bfd never rewrites
 * the manifest of an array still queued). */
static void submit_array(bfd *d, const store_job *j, const int64_t *ids, int n) {
    char err[1024], why[1300], cwd[1100], dir[1200], script[1300], manifest[1300], cidr[64];
    slurm_array_task *tasks = calloc((size_t)n, sizeof *tasks);
    submission *sub = NULL;
    int m = 0;
    if (!tasks) {
        for (int i = 0; i < n; i++) {
            run *r = find_run(d, ids[i]);
            if (r) fail_unsubmitted(d, r, "not submitted to Slurm: bfd out of memory");
        }
        goto done;
    }
    for (int i = 0; i < n; i++) {
        run *r = find_run(d, ids[i]);
        /* one cancelled before it went out (its outcome recorded) is
         * removed at the end: tasks[] points into the run table */
        if (!r || !r->slurm_wait || r->ending) continue;
        tasks[m].trial = r->trial;
        tasks[m].attempt = r->attempt;
        tasks[m].token = r->token;
        tasks[m].stage = r->stage;
        m++;
    }
    if (m == 0) goto done;
    snprintf(dir, sizeof dir, "%s/slurm", d->o->home);
    snprintf(script, sizeof script, "%s/j%lld-t%lld-a%d.sh", dir, (long long)j->id, tasks[0].trial,
             tasks[0].attempt);
    snprintf(manifest, sizeof manifest, "%s/j%lld-t%lld-a%d.tasks", dir, (long long)j->id,
             tasks[0].trial, tasks[0].attempt);
    if (dstate_job_cwd(d->ds, j->id, cwd, sizeof cwd, err, sizeof err)) bfd_log("%s", err);
    if (!cwd[0]) snprintf(cwd, sizeof cwd, "%s", d->o->home);
    endpoint_cidr(d->tcp_wrk, cidr, sizeof cidr);
    slurm_array a = {.job = j->id,
                     .ranks = j->ranks,
                     .nodes = j->nodes,
                     .cpus_per_rank = j->cpus_per_rank > 0 ? j->cpus_per_rank : 1,
                     .gpus_per_rank = j->gpus_per_rank,
                     .time_limit_s = j->time_limit_s,
                     .threads = d->c->threads_per_slot,
                     .partition = d->c->slurm_partition,
                     .srun = d->c->srun,
                     .mpi = d->c->slurm_mpi,
                     .mpi_cidr = cidr,
                     .bfworker = d->c->bfworker,
                     .endpoint = d->tcp_wrk[0] ? d->tcp_wrk : d->ep_wrk,
                     .home = d->o->home,
                     .cwd = cwd};
    int bad = make_dir(dir, 0700, err, sizeof err) ||
              slurm_write_array(script, manifest, &a, tasks, m, err, sizeof err);
    /* sbatch runs on the Slurm thread; the runs wait (slurm_wait) for its answer */
    sub = bad ? NULL : malloc(sizeof *sub + (size_t)m * sizeof sub->t[0]);
    slurmq_req *q = sub ? slurmq_req_new(SLURMQ_SUBMIT, script) : NULL;
    if (!bad && !q) snprintf(err, sizeof err, "bfd out of memory");
    if (q) {
        sub->job = j->id;
        sub->ranks = j->ranks;
        sub->n = m;
        sub->done = 0;
        for (int i = 0; i < m; i++) {
            sub->t[i].trial = tasks[i].trial;
            sub->t[i].attempt = tasks[i].attempt;
        }
        q->data = sub;
        sub = NULL;
        if (slurmq_push(d->slq, q)) {
            snprintf(err, sizeof err, "the Slurm command queue is full (%d waiting)",
                     SLURMQ_MAX_QUEUED);
            slurmq_req_free(&q); /* frees its data */
        } else {
            d->n_sbatch++;
        }
    }
    if (bad || !q) {
        snprintf(why, sizeof why, "not submitted to Slurm: %s", err);
        for (int i = 0; i < m; i++) {
            run *r = find_run(d, tasks[i].trial);
            if (r) fail_unsubmitted(d, r, why);
        }
    }
done:
    for (int i = 0; i < n; i++) {
        run *r = find_run(d, ids[i]);
        if (r && r->slurm_wait && r->ending) remove_run(d, r);
    }
    free(sub);
    free(tasks);
}

/* The task of r (r->slurm_job, given by sbatch) whose Slurm id could not
 * be recorded for crash recovery (err): a restarted bfd would take the
 * attempt for gone and start another beside it, so the task is cancelled
 * and the trial pending again, not counted as a failure. */
static void unsubmit(bfd *d, run *r, const char *err) {
    char why[1300];
    snprintf(why, sizeof why,
             "Slurm job %s cancelled at once and pending again (not counted as a failure): its "
             "id could not be recorded for crash recovery: %s",
             r->slurm_job, err);
    slurm_cancel_async(d, r->slurm_job, 0, 0, r->trial);
    unlaunch(d, r, why);
}

/* sbatch answered the array of q (its data a submission): each task's run
 * takes its Slurm id ARRAY_K, recorded in bfd_runs before the attempt is
 * announced (one that cannot be recorded is cancelled: unsubmit), or, when
 * sbatch failed, fails. A run cancelled while sbatch ran (ending, or gone)
 * has its task cancelled.
 * A thousand tasks (their logs, events and one store write) take tens of
 * ms, so they are applied for at most budget_s per call, in slices of 64:
 * returns 1 while tasks remain (the loop calls again without waiting; the
 * runs not yet applied keep waiting for their id, slurm_wait), else 0. */
static int array_submitted(bfd *d, slurmq_req *q, double budget_s) {
    submission *sub = q->data;
    char why[1300], err[1024];
    if (q->rc) {
        snprintf(why, sizeof why, "not submitted to Slurm: %s", q->err);
        for (int i = 0; i < sub->n; i++) {
            run *r = find_run(d, sub->t[i].trial);
            if (r && r->slurm_wait && r->attempt == sub->t[i].attempt) fail_unsubmitted(d, r, why);
        }
        return 0;
    }
    if (sub->done == 0)
        bfd_log("job %lld: %d trial%s submitted as Slurm job array %s (%.0f ms)",
                (long long)sub->job, sub->n, sub->n == 1 ? "" : "s", q->id, q->ms);
    dstate_run *rows = calloc((size_t)(sub->n - sub->done), sizeof *rows);
    size_t n_rows = 0;
    double t = now_s();
    int i = sub->done;
    for (; i < sub->n; i++) {
        if (i > sub->done && (i - sub->done) % 64 == 0 && now_s() - t > budget_s) break;
        run *r = find_run(d, sub->t[i].trial);
        char task[64];
        snprintf(task, sizeof task, "%s_%d", q->id, i); /* ids are < 32 digits: it fits */
        if (!r || !r->slurm_wait || r->attempt != sub->t[i].attempt || r->ending) {
            /* cancelled while sbatch ran: its outcome is recorded; the task goes */
            slurm_cancel_async(d, task, 0, 0, sub->t[i].trial);
            if (r && r->slurm_wait && r->attempt == sub->t[i].attempt) remove_run(d, r);
            continue;
        }
        snprintf(r->slurm_job, sizeof r->slurm_job, "%.*s", (int)sizeof r->slurm_job - 1, task);
        r->slurm_wait = 0;
        r->slurm_phase = SLURM_QUEUED;
        r->next_poll = t + 0.5;
        r->last_seen = r->last_progress = t;
        if (!rows) {
            unsubmit(d, r, "bfd out of memory");
            continue;
        }
        rows[n_rows] =
            (dstate_run){.trial = r->trial, .attempt = r->attempt, .started = r->started};
        memcpy(rows[n_rows].token, r->token, sizeof rows[n_rows].token);
        memcpy(rows[n_rows].slurm_job, r->slurm_job, sizeof rows[n_rows].slurm_job);
        n_rows++;
    }
    int unrecorded = n_rows && dstate_runs_put(d->ds, rows, n_rows, err, sizeof err);
    for (size_t k = 0; k < n_rows; k++) {
        run *r = find_run(d, rows[k].trial);
        if (!r) continue;
        if (unrecorded) {
            unsubmit(d, r, err); /* removes r: found again by trial next time round */
            continue;
        }
        char msg[128];
        snprintf(msg, sizeof msg, "submitted to Slurm as job %s", r->slurm_job);
        bfd_log("trial %lld attempt %d: %s, %d rank%s", (long long)r->trial, r->attempt, msg,
                sub->ranks, sub->ranks == 1 ? "" : "s");
        publish_event(d, r->job, r->trial, "RUNNING", r->attempt, msg);
    }
    free(rows);
    sub->done = i;
    return i < sub->n;
}

#define SLURM_APPLY_S 0.015 /* ended runs recorded per round, at most this long */

void finish_slurm(bfd *d) {
    if (!d->slq) return;
    if (d->backlog) {
        int more = d->backlog->kind == SLURMQ_SUBMIT ? array_submitted(d, d->backlog, SLURM_APPLY_S)
                                                     : slurm_answered(d, d->backlog, SLURM_APPLY_S);
        if (more) return;
        slurmq_req_free(&d->backlog);
    }
    slurmq_req *q;
    while ((q = slurmq_pop_done(d->slq))) {
        switch (q->kind) {
        case SLURMQ_SUBMIT:
            if (array_submitted(d, q, SLURM_APPLY_S)) {
                d->backlog = q;
                return;
            }
            break;
        case SLURMQ_QUERY:
            if (slurm_answered(d, q, SLURM_APPLY_S)) {
                d->backlog = q; /* the loop polls without waiting until it is done */
                return;
            }
            break;
        case SLURMQ_CANCEL:
            if (q->rc) bfd_log("trial %lld: %s", (long long)q->tag, q->err);
            break;
        }
        slurmq_req_free(&q);
    }
}

void slurm_backlog_finish(bfd *d) {
    if (d->backlog && d->backlog->kind == SLURMQ_SUBMIT) array_submitted(d, d->backlog, 1e9);
}

void slurm_flush(bfd *d) {
    if (!d->n_arr) return;
    /* taken first: a failure below may remove runs and schedule again */
    int64_t *ids = d->arr_trials;
    size_t n = d->n_arr;
    d->arr_trials = NULL;
    d->n_arr = d->cap_arr = 0;
    store_job j = d->arr_job;
    int chunk = d->max_array > 0 ? d->max_array : 1001;
    for (size_t k = 0; k < n; k += (size_t)chunk)
        submit_array(d, &j, ids + k, (int)(n - k < (size_t)chunk ? n - k : (size_t)chunk));
    free(ids);
}

/* Starts the attempt r (already RUNNING in the store and recorded in
 * bfd_runs as dr) on this machine: `bfworker run ...` (under mpirun for
 * more than one rank) forked into a process group of its own; its pid goes
 * into r and bfd_runs. A failed start (fork, or an exec that the child
 * reports failed) fails the trial and forgets r. */
static int launch_local(bfd *d, run *r, const store_job *j, const char *out, const char *logp,
                        const char *cwd, const char *stage_root, const char *gl, dstate_run *dr) {
    char err[1024], id[32], np[16], attempt[16];
    int64_t trial = r->trial;
    snprintf(id, sizeof id, "%lld", (long long)trial);
    snprintf(np, sizeof np, "%d", j->ranks);
    snprintf(attempt, sizeof attempt, "%d", r->attempt);
    /* R = 1 runs bfworker directly (no MPI runtime needed); R > 1 under mpirun */
    const char *argv[32];
    int a = 0;
    if (j->ranks > 1) {
        argv[a++] = d->c->mpirun;
        argv[a++] = "--oversubscribe";
        argv[a++] = "-np";
        argv[a++] = np;
    }
    argv[a++] = d->c->bfworker;
    argv[a++] = "run";
    argv[a++] = "--trial";
    argv[a++] = id;
    argv[a++] = "--connect";
    argv[a++] = d->ep_wrk;
    argv[a++] = "--token";
    argv[a++] = r->token;
    argv[a++] = "--out";
    argv[a++] = out;
    argv[a++] = "--attempt";
    argv[a++] = attempt;
    if (r->stage[0]) {
        argv[a++] = "--stage-root";
        argv[a++] = stage_root;
        argv[a++] = "--stage";
        argv[a++] = r->stage;
    }
    argv[a] = NULL;
    char gpus_env[300], threads_env[32], banner[1400];
    snprintf(gpus_env, sizeof gpus_env, "CUDA_VISIBLE_DEVICES=%s", gl);
    snprintf(threads_env, sizeof threads_env, "OMP_NUM_THREADS=%d", d->c->threads_per_slot);
    snprintf(banner, sizeof banner, "== bfd: trial %s attempt %s, %d rank%s, gpus [%s], cwd %s", id,
             attempt, j->ranks, j->ranks == 1 ? "" : "s", gl, cwd);
    const char *env[] = {gpus_env, threads_env, NULL};
    bf_spawn_req req = {
        .argv = argv, .logp = logp, .cwd = cwd, .env = env, .banner = banner, .new_session = 1};
    pid_t pid = bf_spawn(&req, err, sizeof err);
    if (pid < 0) {
        remove_run(d, r);
        int rq;
        char why[1100];
        snprintf(why, sizeof why, "not started: %s", err);
        if (store_trial_fail(d->st, trial, why, &rq, err, sizeof err)) bfd_log("%s", err);
        bfd_log("trial %lld: %s", (long long)trial, why);
        return -1;
    }
    r->pid = pid;
    dr->pid = pid;
    if (dstate_run_put(d->ds, dr, err, sizeof err)) {
        /* a restarted bfd could not find this worker: it does not run (its
         * group, and the child itself in case it has not made one yet) */
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        char why[1200];
        snprintf(why, sizeof why,
                 "stopped at once and pending again (not counted as a failure): its pid could "
                 "not be recorded for crash recovery: %s",
                 err);
        unlaunch(d, r, why);
        return -2;
    }
    char msg[128];
    if (r->stage[0])
        snprintf(msg, sizeof msg, "started stage %s %s, pid %d", r->stage, r->stage_key, (int)pid);
    else
        snprintf(msg, sizeof msg, "started, pid %d", (int)pid);
    bfd_log("trial %lld attempt %d: %s, %d rank%s, gpus [%s]", (long long)trial, r->attempt, msg,
            j->ranks, j->ranks == 1 ? "" : "s", gl);
    publish_event(d, r->job, r->trial, "RUNNING", r->attempt, msg);
    return 0;
}

/* launcher: remote: the attempt r (RUNNING, recorded with its agent a)
 * goes to a, the agent with the most free slots (launch picked it). A launch
 * that cannot be sent (the agent's connection is gone: killed, cut off, not
 * yet found lost) never started: the trial goes back to PENDING without
 * counting a failure, and the agent takes no launch until it is heard from
 * again, so a dead agent cannot burn a sweep's retries. */
static int launch_remote(bfd *d, run *r, agent *a, const char *out, const char *logp,
                         const char *cwd, const char *stage_root) {
    char err[512], why[700];
    if (agent_launch(d, a, r, out, logp, cwd, stage_root, err, sizeof err)) {
        snprintf(why, sizeof why,
                 "not launched: agent %s unreachable (%s); pending again, not counted as a "
                 "failure",
                 a->name, err);
        unlaunch(d, r, why);
        return -1;
    }
    r->remote = 1;
    r->agent_id = a->id;
    snprintf(r->agent, sizeof r->agent, "%s", a->name);
    char msg[200];
    if (r->stage[0])
        snprintf(msg, sizeof msg, "started stage %s %s on agent %s", r->stage, r->stage_key,
                 a->name);
    else
        snprintf(msg, sizeof msg, "started on agent %s", a->name);
    bfd_log("trial %lld attempt %d: %s, %d rank%s", (long long)r->trial, r->attempt, msg, r->ranks,
            r->ranks == 1 ? "" : "s");
    publish_event(d, r->job, r->trial, "RUNNING", r->attempt, msg);
    return 0;
}

/* Marks trial t launched in the store: RUNNING, or with stage >= 0 that
 * stage of its plan (read into plan[]) launched, after making stage_root.
 * -1 after logging why. */
static int mark_launched(bfd *d, const store_trial *t, int stage, const char *stage_root,
                         store_stage plan[STAGE_MAX]) {
    char err[1024];
    int n_plan = 0;
    if (stage >= 0) {
        char why[300];
        if (store_trial_stages(d->st, t->id, plan, &n_plan, err, sizeof err) || stage >= n_plan ||
            make_dir(stage_root, 0700, err, sizeof err)) {
            bfd_log("trial %lld: %s", (long long)t->id, stage >= n_plan ? "no such stage" : err);
            return -1;
        }
        snprintf(why, sizeof why, "launched for stage %s %s", plan[stage].name, plan[stage].key);
        if (store_stage_launch(d->st, t->id, stage, why, err, sizeof err)) {
            bfd_log("trial %lld: %s", (long long)t->id, err);
            return -1;
        }
    } else if (store_trial_transition(d->st, t->id, TRIAL_RUNNING, "launched", err, sizeof err)) {
        bfd_log("trial %lld: %s", (long long)t->id, err);
        return -1;
    }
    return 0;
}

/* Writes out/PROTO_ATTEMPT_FILE = attempt (through a temporary and a
 * rename): an older attempt's worker still running somewhere (a node bfd
 * can no longer reach) sees it and ends itself. */
static int write_fence(const char *out, int attempt, char *err, size_t errlen) {
    char p[1300], tmp[1310];
    snprintf(p, sizeof p, "%s/" PROTO_ATTEMPT_FILE, out);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    FILE *f = fopen(tmp, "w");
    if (!f) return bf_fail(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    int bad = fprintf(f, "%d\n", attempt) < 0;
    if (fclose(f) != 0 || bad || rename(tmp, p) != 0)
        return bf_fail(err, errlen, "cannot write %s: %s", p, strerror(errno));
    return 0;
}

/* Starts one attempt of trial t (PENDING) on the given GPUs; stage >= 0:
 * an attempt that runs only that stage of the trial's s2s plan. */
int launch(bfd *d, const store_trial *t, const store_job *j, const int *gpus, int ng, int stage) {
    char err[1024], token[PROTO_TOKEN_LEN + 1];
    if (proto_random_token(token, err, sizeof err)) {
        bfd_log("trial %lld: %s", (long long)t->id, err);
        return -1;
    }
    char out[1200], logs[1200], logp[1300], cwd[1100];
    snprintf(out, sizeof out, "%s/trials/%lld", d->o->home, (long long)t->id);
    snprintf(logs, sizeof logs, "%s/logs", d->o->home);
    snprintf(logp, sizeof logp, "%s/%lld.log", logs, (long long)t->id);
    if (make_dir(logs, 0700, err, sizeof err) || make_dir(out, 0700, err, sizeof err)) {
        bfd_log("trial %lld: %s", (long long)t->id, err);
        return -1;
    }
    if (write_fence(out, t->attempts + 1, err, sizeof err)) {
        bfd_log("trial %lld: %s", (long long)t->id, err);
        return -1;
    }
    if (dstate_job_cwd(d->ds, t->job_id, cwd, sizeof cwd, err, sizeof err)) {
        bfd_log("%s", err);
        return -1;
    }
    if (!cwd[0]) snprintf(cwd, sizeof cwd, "%s", d->o->home);
    char stage_root[1200];
    snprintf(stage_root, sizeof stage_root, "%s/stages", d->o->home);
    char gl[256];
    format_gpus(gpus, ng, gl, sizeof gl);
    agent *a = NULL;
    if (is_remote(d) && !(a = agent_pick(d, j->ranks))) {
        bfd_log("trial %lld: not launched: no agent has %d free slot%s", (long long)t->id, j->ranks,
                j->ranks == 1 ? "" : "s");
        return -1;
    }
    /* the crash-recovery record comes first, before the trial is RUNNING and
     * anything starts: a bfd killed after it still knows the token (and the
     * agent); one that cannot be written leaves the trial PENDING, since a
     * restarted bfd could not find the attempt */
    dstate_run dr = {.trial = t->id, .attempt = t->attempts + 1, .pid = 0, .started = now_s()};
    memcpy(dr.token, token, sizeof token);
    snprintf(dr.gpus, sizeof dr.gpus, "%s", gl);
    if (a) snprintf(dr.agent, sizeof dr.agent, "%s", a->name);
    if (dstate_run_put(d->ds, &dr, err, sizeof err)) {
        bfd_log("trial %lld: not launched, pending still: its crash-recovery record could not "
                "be written: %s",
                (long long)t->id, err);
        return -2;
    }
    store_stage plan[STAGE_MAX];
    if (mark_launched(d, t, stage, stage_root, plan)) {
        if (dstate_run_del(d->ds, t->id, err, sizeof err)) bfd_log("%s", err);
        return -1;
    }
    run *r = add_run(d);
    if (!r) {
        int rq;
        store_trial_fail(d->st, t->id, "bfd out of memory", &rq, err, sizeof err);
        return -1;
    }
    r->trial = t->id;
    r->job = t->job_id;
    r->attempt = dr.attempt;
    r->ranks = j->ranks;
    memcpy(r->token, token, sizeof token);
    memcpy(r->gpus, gpus, (size_t)ng * sizeof *gpus);
    r->n_gpus = ng;
    r->started = r->last_seen = r->last_progress = dr.started;
    r->is_child = !is_slurm(d) && !is_remote(d);
    if (stage >= 0) {
        snprintf(r->stage, sizeof r->stage, "%s", plan[stage].name);
        snprintf(r->stage_key, sizeof r->stage_key, "%s", plan[stage].key);
        snprintf(r->stage_dir, sizeof r->stage_dir, "%s", plan[stage].dir);
        r->stage_last = plan[stage].next[0] == '\0';
    }
    if (is_slurm(d)) return queue_slurm(d, r, j);
    if (a) return launch_remote(d, r, a, out, logp, cwd, stage_root);
    return launch_local(d, r, j, out, logp, cwd, stage_root, gl, &dr);
}
