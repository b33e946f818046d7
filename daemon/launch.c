/* launch.c — how an attempt starts and is signalled: its folders, the
 * store's RUNNING (or stage launched) mark, its bfd_runs row (written before
 * the fork, so a bfd killed in between still knows the token), then either a
 * fork/exec of `bfworker run` (under mpirun for more than one rank) in a
 * process group of its own, or a Slurm batch job (daemon/slurm.h). It also
 * signals a group or a Slurm job, and tells a live worker from a reused pid.
 * It chooses no trial and no GPU (sched.c) and records no outcome (runs.c). */
#include "daemon/bfd_priv.h"
#include "common/errbuf.h"

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

/* Submits the attempt r (already RUNNING in the store and recorded in
 * bfd_runs) as a Slurm batch job: $BF_HOME/trials/ID/slurm.sh runs
 * `srun bfworker run ...`; Slurm picks the node, the CPUs and the GPUs.
 * The worker connects back to the worker endpoint (ipc:// works when the
 * compute node is this machine; other hosts need bfd --tcp, with CURVE). */
static int launch_slurm(bfd *d, run *r, const store_job *j, const char *out, const char *logp,
                        const char *cwd, const char *stage_root) {
    char err[1024], why[1300], script[1300], cidr[64];
    snprintf(script, sizeof script, "%s/slurm.sh", out);
    endpoint_cidr(d->tcp_wrk, cidr, sizeof cidr);
    slurm_batch b = {.trial = r->trial,
                     .attempt = r->attempt,
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
                     .token = r->token,
                     .out_dir = out,
                     .log_path = logp,
                     .cwd = cwd,
                     .stage_root = r->stage[0] ? stage_root : NULL,
                     .stage = r->stage[0] ? r->stage : NULL};
    char id[SLURM_JOB_ID_MAX];
    if (slurm_write_script(script, &b, err, sizeof err) ||
        slurm_submit(d->c->sbatch, script, id, err, sizeof err)) {
        snprintf(why, sizeof why, "not submitted to Slurm: %s", err);
        int64_t trial = r->trial;
        int rq;
        remove_run(d, r);
        if (store_trial_fail(d->st, trial, why, &rq, err, sizeof err)) bfd_log("%s", err);
        bfd_log("trial %lld: %s", (long long)trial, why);
        return -1;
    }
    memcpy(r->slurm_job, id, sizeof id);
    r->slurm_phase = SLURM_QUEUED;
    r->next_poll = now_s() + 0.5;
    dstate_run dr = {.trial = r->trial, .attempt = r->attempt, .pid = 0, .started = r->started};
    memcpy(dr.token, r->token, sizeof dr.token);
    memcpy(dr.slurm_job, id, sizeof id);
    if (dstate_run_put(d->ds, &dr, err, sizeof err)) bfd_log("%s", err);
    char msg[128];
    snprintf(msg, sizeof msg, "submitted to Slurm as job %s", id);
    bfd_log("trial %lld attempt %d: %s, %d rank%s", (long long)r->trial, r->attempt, msg, j->ranks,
            j->ranks == 1 ? "" : "s");
    publish_event(d, r->job, r->trial, "RUNNING", r->attempt, msg);
    return 0;
}

/* In the forked child: a process group of its own, stdout and stderr into
 * the trial's log, the signals and environment of one rank, then argv
 * executed in cwd. Never returns (exit 127 when chdir or exec fails). */
static void exec_worker(const char *const *argv, const char *logp, const char *cwd, const char *gl,
                        int threads_per_slot, const char *id, const char *attempt, int ranks) {
    setsid();
    int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0600);
    int nul = open("/dev/null", O_RDONLY);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    if (nul >= 0) dup2(nul, 0);
    for (int k = 3; k < 1024; k++) close(k);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    char threads[16];
    snprintf(threads, sizeof threads, "%d", threads_per_slot);
    setenv("OMP_NUM_THREADS", threads, 1);
    setenv("CUDA_VISIBLE_DEVICES", gl, 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    fprintf(stderr, "== bfd: trial %s attempt %s, %d rank%s, gpus [%s], cwd %s\n", id, attempt,
            ranks, ranks == 1 ? "" : "s", gl, cwd);
    if (chdir(cwd) != 0) {
        fprintf(stderr, "bfd: chdir %s: %s\n", cwd, strerror(errno));
        _exit(127);
    }
    execvp(argv[0], (char *const *)argv);
    fprintf(stderr, "bfd: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Starts the attempt r (already RUNNING in the store and recorded in
 * bfd_runs as dr) on this machine: `bfworker run ...` (under mpirun for
 * more than one rank) forked into a process group of its own; its pid goes
 * into r and bfd_runs. A failed fork fails the trial and forgets r. */
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
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        remove_run(d, find_run(d, trial));
        int rq;
        char why[256];
        snprintf(why, sizeof why, "fork: %s", strerror(e));
        store_trial_fail(d->st, trial, why, &rq, err, sizeof err);
        bfd_log("trial %lld: %s", (long long)trial, why);
        return -1;
    }
    if (pid == 0) exec_worker(argv, logp, cwd, gl, d->c->threads_per_slot, id, attempt, j->ranks);
    r = find_run(d, trial);
    r->pid = pid;
    dr->pid = pid;
    if (dstate_run_put(d->ds, dr, err, sizeof err)) bfd_log("%s", err);
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
    store_stage plan[STAGE_MAX];
    if (mark_launched(d, t, stage, stage_root, plan)) return -1;
    run *r = add_run(d);
    if (!r) {
        int rq;
        store_trial_fail(d->st, t->id, "bfd out of memory", &rq, err, sizeof err);
        return -1;
    }
    r->trial = t->id;
    r->job = t->job_id;
    r->attempt = t->attempts + 1;
    r->ranks = j->ranks;
    memcpy(r->token, token, sizeof token);
    memcpy(r->gpus, gpus, (size_t)ng * sizeof *gpus);
    r->n_gpus = ng;
    r->started = r->last_seen = r->last_progress = now_s();
    r->is_child = !is_slurm(d);
    if (stage >= 0) {
        snprintf(r->stage, sizeof r->stage, "%s", plan[stage].name);
        snprintf(r->stage_key, sizeof r->stage_key, "%s", plan[stage].key);
        snprintf(r->stage_dir, sizeof r->stage_dir, "%s", plan[stage].dir);
        r->stage_last = plan[stage].next[0] == '\0';
    }
    char gl[256];
    format_gpus(gpus, ng, gl, sizeof gl);
    /* recorded before the fork: a bfd killed in between still knows the token */
    dstate_run dr = {.trial = t->id, .attempt = r->attempt, .pid = 0, .started = r->started};
    memcpy(dr.token, token, sizeof token);
    snprintf(dr.gpus, sizeof dr.gpus, "%s", gl);
    if (dstate_run_put(d->ds, &dr, err, sizeof err)) bfd_log("%s", err);
    if (is_slurm(d)) return launch_slurm(d, r, j, out, logp, cwd, stage_root);
    return launch_local(d, r, j, out, logp, cwd, stage_root, gl, &dr);
}
