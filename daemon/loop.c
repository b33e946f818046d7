/* loop.c — bfd's event loop. One thread, one zmq_poll over: the control
 * ROUTER, the worker ROUTER, a self-pipe written by the SIGCHLD/SIGTERM/
 * SIGINT handlers, the submit thread's done pipe and, with --tcp, the ZAP
 * authenticator (a REP on inproc that libzmq consults for each new
 * connection, checking CURVE keys against curve/clients/). It opens and
 * closes everything, sets each round's budget (messages, points), keeps the
 * clock and the log, and calls the timers, the exporters and the scheduler.
 * It knows no request type and no message body: a request goes to its
 * handler through req.c's table, a worker message to workers.c; a bad one
 * gets an error reply and the loop goes on. */
#include "daemon/bfd_priv.h"
#include "common/errbuf.h"
#include "daemon/req.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static volatile sig_atomic_t g_sigfd = -1;

static void on_signal(int sig) {
    int saved = errno;
    char c = sig == SIGCHLD ? 'c' : 't';
    if (g_sigfd >= 0) {
        ssize_t w = write(g_sigfd, &c, 1);
        (void)w;
    }
    errno = saved;
}

/* Receives one message from sock; answers protocol errors itself. Returns
 * 1 with a usable message, 0 after an error reply, -1 when nothing is
 * pending. */
static int recv_msg(bfd *d, void *sock, proto_msg *m) {
    char err[1024];
    proto_code code;
    int rc = proto_recv(sock, ZMQ_DONTWAIT, PROTO_RECV_ROUTED, m, &code, err, sizeof err);
    if (rc == 1) return -1;
    if (rc < 0) {
        bfd_log("%s", err);
        return -1;
    }
    if (code != PROTO_OK) {
        if (m->ident_len) reply_err(d, sock, m, code, "%s", err);
        return 0;
    }
    return 1;
}

/* At most 64 requests a round, and none begun after CTL_ROUND_S of them:
 * the rest wait for the next round, after the workers' messages (64 `job`
 * pages of a 100,000-trial job, 50-110 ms each, held a round for 370 ms
 * under bench_daemon --load). Each is given to its handler (an unknown
 * type gets PROTO_E_TYPE). */
static void handle_ctl(bfd *d) {
    double t_start = now_s();
    for (int k = 0; k < 64 && now_s() - t_start < CTL_ROUND_S; k++) {
        proto_msg m;
        memset(&m, 0, sizeof m);
        int rc = recv_msg(d, d->ctl, &m);
        if (rc < 0) {
            proto_msg_clear(&m);
            return;
        }
        if (rc == 1) {
            req_handler_fn fn = req_handler(m.type);
            double t0 = d->trace_ms > 0 ? now_s() : 0;
            if (fn)
                fn(d, d->ctl, &m);
            else if (!strncmp(m.type, "agent_", 6))
                /* an agent given the control endpoint (the --tcp port) */
                reply_err(d, d->ctl, &m, PROTO_E_TYPE,
                          "%s on bfd's control endpoint: agents connect to its worker endpoint, "
                          "%s",
                          m.type, d->tcp_wrk[0] ? d->tcp_wrk : d->ep_wrk);
            else
                reply_err(d, d->ctl, &m, PROTO_E_TYPE,
                          "unknown message type '%s' on the control socket (see docs/protocol.md)",
                          m.type);
            if (d->trace_ms > 0 && (now_s() - t0) * 1e3 > d->trace_ms)
                bfd_log("slow request: %s took %.0f ms", m.type, (now_s() - t0) * 1e3);
        }
        proto_msg_clear(&m);
    }
}

/* At most ROUND_MAX_MSGS worker messages, ROUND_MAX_POINTS values or
 * ROUND_MAX_BYTES of copied points a round (each message is taken whole, so
 * a round ends at most one batch past a bound); the round's metric points
 * are stored together (flush_batches). */
static void handle_workers(bfd *d) {
    round_count rc = {0};
    double t0 = now_s();
    for (int k = 0;
         k < ROUND_MAX_MSGS && rc.values < ROUND_MAX_POINTS && rc.bytes < ROUND_MAX_BYTES; k++) {
        proto_msg m;
        memset(&m, 0, sizeof m);
        int r = recv_msg(d, d->wrk, &m);
        if (r < 0) {
            proto_msg_clear(&m);
            break;
        }
        if (r == 1) handle_worker_msg(d, &m, &rc);
        proto_msg_clear(&m);
    }
    flush_batches(d);
    prom_ingest(d->prom, rc.batches, (long long)rc.points, (long long)rc.values, now_s() - t0);
}

/* ------------------------------------------------------ ZAP (CURVE keys) */

static void handle_zap(bfd *d) {
    zmq_msg_t f[8];
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t tmp;
        zmq_msg_t *p = n < 8 ? &f[n] : &tmp;
        zmq_msg_init(p);
        if (zmq_msg_recv(p, d->zap, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(p);
            for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
            return;
        }
        more = zmq_msg_more(p);
        if (p == &tmp)
            zmq_msg_close(p);
        else
            n++;
    }
    /* version, request id, domain, address, identity, mechanism, credentials */
    const char *status = "400", *text = "denied";
    if (n >= 6) {
        size_t ml = zmq_msg_size(&f[5]);
        const char *mech = zmq_msg_data(&f[5]);
        if (ml == 4 && memcmp(mech, "NULL", 4) == 0) {
            status = "200"; /* ipc: the 0700 home folder is the check */
            text = "OK";
        } else if (ml == 5 && memcmp(mech, "CURVE", 5) == 0 && n >= 7 &&
                   zmq_msg_size(&f[6]) == 32) {
            char z85[41];
            zmq_z85_encode(z85, zmq_msg_data(&f[6]), 32);
            for (int i = 0; i < d->n_client_keys; i++)
                if (strcmp(z85, d->client_keys[i]) == 0) {
                    status = "200";
                    text = "OK";
                }
            if (status[0] != '2')
                bfd_log("CURVE client key %s refused (not in curve/clients/)", z85);
        }
    }
    zmq_send(d->zap, "1.0", 3, ZMQ_SNDMORE);
    if (n >= 2)
        zmq_send(d->zap, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
    else
        zmq_send(d->zap, "", 0, ZMQ_SNDMORE);
    zmq_send(d->zap, status, 3, ZMQ_SNDMORE);
    zmq_send(d->zap, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(d->zap, "", 0, ZMQ_SNDMORE);
    zmq_send(d->zap, "", 0, 0);
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
}

static int load_client_keys(bfd *d, char *err, size_t errlen) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/curve/clients", d->o->home);
    DIR *dd = opendir(dir);
    if (!dd) return 0;
    struct dirent *e;
    while ((e = readdir(dd)) && d->n_client_keys < MAX_CLIENT_KEYS) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".pub") != 0) continue;
        char p[1500];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (proto_read_key(p, d->client_keys[d->n_client_keys], err, errlen)) {
            closedir(dd);
            return -1;
        }
        d->n_client_keys++;
    }
    closedir(dd);
    return 0;
}

/* ------------------------------------------------------------------- setup */

static void *new_socket(bfd *d, int type, char *err, size_t errlen) {
    void *s = zmq_socket(d->ctx, type);
    if (!s) {
        bf_fail(err, errlen, "zmq_socket: %s", zmq_strerror(zmq_errno()));
        return NULL;
    }
    int zero = 0, one = 1;
    int64_t maxsz = PROTO_MAX_FRAME;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz) ||
        (type == ZMQ_ROUTER && zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one))) {
        bf_fail(err, errlen, "zmq_setsockopt: %s", zmq_strerror(zmq_errno()));
        zmq_close(s);
        return NULL;
    }
    return s;
}

static int bind_ep(void *s, const char *ep, char *err, size_t errlen) {
    if (zmq_bind(s, ep) != 0)
        return bf_fail(err, errlen, "zmq_bind(%s): %s", ep, zmq_strerror(zmq_errno()));
    return 0;
}

static int setup_tcp(bfd *d, char *err, size_t errlen) {
    char host[256];
    snprintf(host, sizeof host, "%s", d->o->tcp);
    char *colon = strrchr(host, ':');
    char *end;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || *end || port < 1 || port > 65533)
        return bf_fail(err, errlen, "--tcp must be HOST:PORT with PORT in [1, 65533], got '%s'",
                       d->o->tcp);
    *colon = '\0';
    char kpath[1200], secret[41];
    snprintf(kpath, sizeof kpath, "%s/curve/server.key", d->o->home);
    if (proto_read_key(kpath, secret, err, errlen))
        return bf_fail(err, errlen,
                       "refusing to bind TCP without CURVE: no server key at %s (run: bfd keygen "
                       "--home %s)",
                       kpath, d->o->home);
    if (load_client_keys(d, err, errlen)) return -1;
    if (d->n_client_keys == 0)
        bfd_log("warning: no client keys in %s/curve/clients: every TCP client will be refused",
                d->o->home);
    d->zap = zmq_socket(d->ctx, ZMQ_REP);
    if (!d->zap || zmq_bind(d->zap, "inproc://zeromq.zap.01") != 0)
        return bf_fail(err, errlen, "ZAP handler: zmq_bind(inproc://zeromq.zap.01): %s",
                       zmq_strerror(zmq_errno()));
    void *socks[3] = {d->ctl, d->wrk, d->pub};
    char *eps[3] = {d->tcp_ctl, d->tcp_wrk, d->tcp_pub};
    for (int i = 0; i < 3; i++) {
        int one = 1;
        snprintf(eps[i], sizeof d->tcp_ctl, "tcp://%s:%ld", host, port + i);
        /* options apply to endpoints bound after them: the ipc binds stay NULL */
        if (zmq_setsockopt(socks[i], ZMQ_CURVE_SERVER, &one, sizeof one) ||
            zmq_setsockopt(socks[i], ZMQ_CURVE_SECRETKEY, secret, 40) ||
            zmq_setsockopt(socks[i], ZMQ_ZAP_DOMAIN, "bf", 2))
            return bf_fail(err, errlen, "zmq_setsockopt(CURVE_SERVER): %s",
                           zmq_strerror(zmq_errno()));
        if (bind_ep(socks[i], eps[i], err, errlen)) return -1;
    }
    bfd_log("TCP with CURVE: control %s, workers %s, pub %s (%d client key%s)", d->tcp_ctl,
            d->tcp_wrk, d->tcp_pub, d->n_client_keys, d->n_client_keys == 1 ? "" : "s");
    return 0;
}

/* The Prometheus snapshot, at most four times a second. */
static void prom_update(bfd *d) {
    double t = now_s();
    if (!d->prom || t - d->prom_at < 0.25) return;
    d->prom_at = t;
    prom_state s = {.slots = d->c->slots, .slots_used = slots_used(d), .gpus = d->c->n_gpus};
    char err[512];
    if (store_state_counts(d->st, &s.jobs, s.trials, err, sizeof err)) {
        bfd_log("prometheus: %s", err);
        return;
    }
    for (int g = 0; g < d->c->n_gpus; g++) s.gpus_used += gpu_used(d, d->c->gpus[g]);
    prom_run *rs = d->n_runs ? malloc(d->n_runs * sizeof *rs) : NULL;
    for (size_t i = 0; rs && i < d->n_runs; i++)
        rs[i] = (prom_run){.trial = d->runs[i].trial,
                           .job = d->runs[i].job,
                           .heartbeat_age = t - d->runs[i].last_seen,
                           .slots = d->runs[i].ranks,
                           .gpus = d->runs[i].n_gpus};
    s.runs = rs;
    s.n_runs = rs ? d->n_runs : 0;
    prom_set_state(d->prom, &s);
    free(rs);
}

static int setup_home_dirs(const char *home, char *err, size_t errlen) {
    const char *subs[] = {"", "/logs", "/trials"};
    for (int i = 0; i < 3; i++) {
        char p[1200];
        snprintf(p, sizeof p, "%s%s", home, subs[i]);
        if (make_dir(p, 0700, err, errlen)) return -1;
    }
    return 0;
}

/* The home folders, the store and its checkpointer, the early-stop state,
 * the submit thread, the daemon's own tables and the TensorBoard exporter. */
static int open_state(bfd *d, char *err, size_t errlen) {
    const bfd_opts *o = d->o;
    const bfd_config *c = d->c;
    char db[1200], tb[1200];
    snprintf(db, sizeof db, "%s/bf.db", o->home);
    snprintf(tb, sizeof tb, "%s/tensorboard", o->home);
    if (setup_home_dirs(o->home, err, errlen) || store_open(db, &d->st, err, errlen) ||
        store_checkpointer_start(db, 1.0, &d->ckpt, err, errlen) ||
        adaptive_new(&d->ad, err, errlen) ||
        submitq_new(&d->sq, db, is_remote(d) ? 1 << 20 : c->slots, c->n_gpus,
                    is_slurm(d) || is_remote(d), o->home, err, errlen) ||
        dstate_open(db, &d->ds, err, errlen) ||
        exp_tb_open(tb, c->tensorboard, &d->tb, err, errlen))
        return -1;
    /* the WAL is checkpointed by the checkpointer's thread, never in a
     * commit of the loop (writing the pages back and syncing the file) */
    store_defer_checkpoints(d->st);
    if (is_slurm(d)) {
        /* trials ready at once go out as job arrays of at most this many */
        char serr[1024];
        d->max_array = 1001; /* Slurm's default MaxArraySize */
        if (slurm_max_array_size(c->scontrol, &d->max_array, serr, sizeof serr))
            bfd_log("%s; job arrays of at most %d tasks", serr, d->max_array);
        if (slurmq_new(&d->slq, c->sbatch, c->scontrol, c->scancel, err, errlen)) return -1;
    }
    return 0;
}

/* SIGCHLD, SIGTERM and SIGINT write to the self-pipe the loop polls;
 * SIGPIPE is ignored. */
static int catch_signals(bfd *d, char *err, size_t errlen) {
    if (pipe(d->sigpipe) != 0) return bf_fail(err, errlen, "pipe: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
        fcntl(d->sigpipe[i], F_SETFL, O_NONBLOCK);
        fcntl(d->sigpipe[i], F_SETFD, FD_CLOEXEC);
    }
    g_sigfd = d->sigpipe[1];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

/* The control and worker ROUTERs and the PUB socket on ipc:// in the home
 * folder, and with --tcp on TCP too (CURVE, with the ZAP handler). */
static int open_sockets(bfd *d, char *err, size_t errlen) {
    const bfd_opts *o = d->o;
    d->ctx = zmq_ctx_new();
    if (!d->ctx) return bf_fail(err, errlen, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    snprintf(d->ep_ctl, sizeof d->ep_ctl, "ipc://%s/ctl.sock", o->home);
    snprintf(d->ep_wrk, sizeof d->ep_wrk, "ipc://%s/worker.sock", o->home);
    snprintf(d->ep_pub, sizeof d->ep_pub, "ipc://%s/pub.sock", o->home);
    if (!(d->ctl = new_socket(d, ZMQ_ROUTER, err, errlen)) ||
        !(d->wrk = new_socket(d, ZMQ_ROUTER, err, errlen)) ||
        !(d->pub = new_socket(d, ZMQ_PUB, err, errlen)))
        return -1;
    int hwm = 100000;
    zmq_setsockopt(d->pub, ZMQ_SNDHWM, &hwm, sizeof hwm);
    if (bind_ep(d->ctl, d->ep_ctl, err, errlen) || bind_ep(d->wrk, d->ep_wrk, err, errlen) ||
        bind_ep(d->pub, d->ep_pub, err, errlen))
        return -1;
    if (o->tcp[0] && setup_tcp(d, err, errlen)) return -1;
    return 0;
}

/* The phases of a round that BF_LOOP_TRACE times (loop_trace). */
enum {
    PH_SIG,
    PH_REAP,
    PH_WRK,
    PH_CTL,
    PH_SUBMIT,
    PH_SLURM,
    PH_TIMERS,
    PH_TB,
    PH_PROM,
    PH_SCHED,
    PH_PRUNE,
    PH_N
};
static const char *const phase_names[PH_N] = {"signals", "reap",  "workers", "requests",
                                              "submits", "slurm", "timers",  "tensorboard",
                                              "prom",    "sched", "prune"};

/* Monotonic seconds: phases are timed on it (the wall clock may step). */
static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* BF_LOOP_TRACE=MS (a debugging aid): a round whose work (the poll's wait
 * left out) took more than MS milliseconds is logged with the time of each
 * phase, so a pause of the loop names its cause. 0 when unset. */
static double loop_trace_ms(void) {
    const char *v = getenv("BF_LOOP_TRACE");
    char *end;
    double ms = v && *v ? strtod(v, &end) : 0;
    return v && *v && !*end && ms > 0 ? ms : 0;
}

/* Logs the round's phases (seconds in ph) when their sum passes limit_ms. */
static void loop_trace(const double ph[PH_N], double limit_ms) {
    double total = 0;
    for (int i = 0; i < PH_N; i++) total += ph[i];
    if (limit_ms <= 0 || total * 1e3 <= limit_ms) return;
    char line[512];
    size_t w = 0;
    for (int i = 0; i < PH_N && w < sizeof line; i++)
        if (ph[i] * 1e3 >= 1)
            w += (size_t)snprintf(line + w, sizeof line - w, " %s %.0f", phase_names[i],
                                  ph[i] * 1e3);
    bfd_log("slow round: %.0f ms:%s", total * 1e3, line);
}

/* One round: a poll of at most 200 ms, then signals, exited children,
 * worker messages, requests, finished submits and ZAP, then the timers,
 * the exporters and (when something changed, or every 5 s) a scheduling
 * pass. -1 with a message when zmq_poll fails. */
static int run_round(bfd *d, char *err, size_t errlen) {
    zmq_pollitem_t items[6] = {
        {d->ctl, 0, ZMQ_POLLIN, 0},
        {d->wrk, 0, ZMQ_POLLIN, 0},
        {NULL, d->sigpipe[0], ZMQ_POLLIN, 0},
        {NULL, submitq_fd(d->sq), ZMQ_POLLIN, 0},
        {NULL, d->slq ? slurmq_fd(d->slq) : -1, ZMQ_POLLIN, 0},
        {d->zap, 0, ZMQ_POLLIN, 0},
    };
    int n_items = d->zap ? 6 : 5;
    /* dirty: a scheduling pass stopped with more to start: no wait */
    int p =
        zmq_poll(items, n_items,
                 d->dirty || d->backlog || d->pruning || d->shrinking || d->cancelling ? 0 : 200);
    if (p < 0 && zmq_errno() != EINTR)
        return bf_fail(err, errlen, "zmq_poll: %s", zmq_strerror(zmq_errno()));
    double ph[PH_N] = {0}, t = d->trace_ms > 0 ? mono_s() : 0;
/* the time since the last mark goes to phase i (only while tracing) */
#define MARK(i)                                                                                    \
    do {                                                                                           \
        if (d->trace_ms > 0) {                                                                     \
            double t1 = mono_s();                                                                  \
            ph[i] += t1 - t;                                                                       \
            t = t1;                                                                                \
        }                                                                                          \
    } while (0)
    if (items[2].revents & ZMQ_POLLIN) {
        char buf[64];
        ssize_t k;
        while ((k = read(d->sigpipe[0], buf, sizeof buf)) > 0)
            for (ssize_t i = 0; i < k; i++)
                if (buf[i] == 't') d->quit = 1;
    }
    MARK(PH_SIG);
    reap_children(d); /* also on timeouts: a SIGCHLD may race the poll */
    MARK(PH_REAP);
    if (items[1].revents & ZMQ_POLLIN) handle_workers(d);
    MARK(PH_WRK);
    if (items[0].revents & ZMQ_POLLIN) handle_ctl(d);
    MARK(PH_CTL);
    if (items[3].revents & ZMQ_POLLIN) finish_submits(d);
    MARK(PH_SUBMIT);
    if ((items[4].revents & ZMQ_POLLIN) || d->backlog) finish_slurm(d);
    if (d->zap && (items[5].revents & ZMQ_POLLIN)) handle_zap(d);
    MARK(PH_SLURM);
    check_timers(d);
    agents_check(d);
    log_unsent(d, 0);
    MARK(PH_TIMERS);
    char terr[1024];
    if (exp_tb_tick(d->tb, d->st, now_s(), terr, sizeof terr)) bfd_log("tensorboard: %s", terr);
    MARK(PH_TB);
    prom_update(d);
    MARK(PH_PROM);
    if (d->dirty || now_s() - d->last_sched > 5) schedule(d);
    MARK(PH_SCHED);
    if (d->pruning || d->shrinking) prune_tick(d);
    if (d->cancelling) cancel_tick(d);
    MARK(PH_PRUNE);
#undef MARK
    loop_trace(ph, d->trace_ms);
    return 0;
}

/* Frees what open_state, catch_signals and open_sockets made (any of them
 * may have stopped half way) and d itself. Running workers are left alone. */
static void close_daemon(bfd *d) {
    g_sigfd = -1;
    for (size_t b = 0; b < d->n_batches; b++) {
        proto_points_free(&d->batches[b].pts);
        proto_msg_clear(&d->batches[b].msg);
    }
    submitq_destroy(&d->sq);
    slurm_backlog_finish(d);
    slurmq_req_free(&d->backlog);
    slurmq_destroy(&d->slq);
    if (d->ctl) zmq_close(d->ctl);
    if (d->wrk) zmq_close(d->wrk);
    if (d->pub) zmq_close(d->pub);
    if (d->zap) zmq_close(d->zap);
    if (d->ctx) zmq_ctx_term(d->ctx);
    if (d->sigpipe[0] >= 0) close(d->sigpipe[0]);
    if (d->sigpipe[1] >= 0) close(d->sigpipe[1]);
    http_stop(&d->http); /* before the snapshot it renders */
    prom_stop(&d->prom);
    exp_tb_close(&d->tb, d->st);
    dstate_close(&d->ds);
    store_close(&d->st);
    store_checkpointer_stop(&d->ckpt);
    adaptive_destroy(&d->ad);
    free(d->runs);
    free(d->arr_trials);
    free(d->polls);
    free(d->agents);
    free(d);
}

/* The Prometheus snapshot, its own tokenless listener when bfd.yaml names
 * one, and the dashboard (which also serves the snapshot at /metrics). A
 * dashboard that cannot start on its default address only warns: a second
 * bfd on the machine (another BF_HOME) finds the port taken. */
static int start_exporters(bfd *d, char *err, size_t errlen) {
    const bfd_config *c = d->c;
    /* an http.url left by a bfd killed before it could remove it names a
     * port that may now be another bfd's (whose token differs): this bfd
     * holds the folder's lock, so the file is stale until http_start writes
     * this one's */
    char url_path[1100];
    snprintf(url_path, sizeof url_path, "%s/http.url", d->o->home);
    if (unlink(url_path) != 0 && errno != ENOENT)
        bfd_log("warning: cannot remove a stale %s: %s", url_path, strerror(errno));
    if (!c->prometheus[0] && !c->http[0]) return 0;
    if (prom_new(d->started, &d->prom, err, errlen)) return -1;
    if (c->prometheus[0]) {
        if (prom_listen(d->prom, c->prometheus, err, errlen)) return -1;
        bfd_log("prometheus: http://%s/metrics", c->prometheus);
    }
    if (!c->http[0]) return 0;
    char herr[1024];
    http_listen hl = {c->http, c->http_insecure, c->http_tls_cert, c->http_tls_key};
    if (http_start(&hl, d->o->home, d->ep_ctl, d->prom, &d->http, herr, sizeof herr)) {
        http_stop(&d->http);
        /* TLS asked for and not served: never a warning */
        if (!c->http_default || c->http_tls_cert[0] || c->http_tls_key[0])
            return bf_fail(err, errlen, "%s", herr);
        bfd_log("warning: %s; the dashboard is off (set http: in bfd.yaml or --http)", herr);
        return 0;
    }
    bfd_log("dashboard: %s (bfctl dashboard prints it with its token)", http_url(d->http));
    return 0;
}

int bfd_run(const bfd_opts *o, const bfd_config *c, char *err, size_t errlen) {
    bfd *d = calloc(1, sizeof *d);
    if (!d) return bf_fail(err, errlen, "out of memory");
    bfd_log_quiet(o->quiet);
    d->o = o;
    d->c = c;
    d->sigpipe[0] = d->sigpipe[1] = -1;
    d->started = now_s();
    d->trace_ms = loop_trace_ms();
    if (open_state(d, err, errlen) || catch_signals(d, err, errlen) ||
        open_sockets(d, err, errlen) || reconcile(d, err, errlen) || prune_start(d, err, errlen)) {
        close_daemon(d);
        return -1;
    }
    d->cancelling = 1; /* a cancel a restart cut short: cancel_tick finds what is left */
    char terr[1024];
    if (exp_tb_recover(d->tb, d->st, now_s(), terr, sizeof terr)) bfd_log("tensorboard: %s", terr);
    if (start_exporters(d, err, errlen)) {
        close_daemon(d);
        return -1;
    }
    bfd_log("serving %s (pid %d): %d slot%s, %d GPU%s, launcher %s, heartbeat timeout %.0f s",
            o->home, (int)getpid(), c->slots, c->slots == 1 ? "" : "s", c->n_gpus,
            c->n_gpus == 1 ? "" : "s", c->launcher, c->heartbeat_timeout);
    d->dirty = 1;
    while (!d->quit)
        if (run_round(d, err, errlen)) {
            close_daemon(d);
            return -1;
        }
    /* a submit being stored is finished and acknowledged; queued ones were
     * never stored and get no reply (the client's request times out) */
    submitq_stop(d->sq);
    finish_submits(d);
    /* the Slurm command running is waited for and its answer recorded (an
     * array sbatch accepted gets its ids stored); queued ones are dropped */
    slurmq_stop(d->slq);
    finish_slurm(d);
    log_unsent(d, 1);
    bfd_log("stopping; %zu running trial%s keep running and reattach when bfd starts again",
            d->n_runs, d->n_runs == 1 ? "" : "s");
    close_daemon(d);
    return 0;
}
