/* cmd_serve — `bfworker serve`: the agent of bfd's remote launcher on a
 * host without Slurm.
 *   bfworker serve --connect ENDPOINT [--slots N] [--name NAME] [--mpirun PATH]
 *                  [--grace S] [--quiet]
 * It connects to bfd's worker endpoint (tcp:// with the CURVE keys of
 * BF_CURVE_SERVER and BF_CURVE_KEY, as `bfworker run` does), says
 * agent_hello, and heartbeats the attempts it runs. On `launch` it starts
 * `bfworker run` for that attempt (under mpirun for more than one rank) in
 * a session of its own, with the log, folders and stage bfd named: they are
 * paths on the filesystem bfd and its agents share. On `kill` it signals
 * that attempt's process group; when one ends it says agent_exit until bfd
 * acknowledges it. The attempts die with the agent (PR_SET_PDEATHSIG), so
 * an agent killed is a host lost: bfd retries its attempts elsewhere.
 * SIGTERM or SIGINT: the attempts get SIGTERM (they checkpoint and exit 75,
 * which bfd takes as preempted), --grace seconds later SIGKILL; the agent
 * says their exits and ends. Protocol: docs/protocol.md, "Agents". */
#include "worker/cmd/cmd.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/spawn.h"
#include "protocol/proto.h"

#define SERVE_MAX 256      /* attempts one agent runs at once */
#define EXIT_RESEND_S 2.0  /* an unacknowledged agent_exit is said again */
#define HELLO_RESEND_S 2.0 /* hello until bfd answers */
#define SILENT_WARN_S 10.0 /* no answer to hello: say what may be wrong */
#define DEFAULT_GRACE_S 30.0

/* What `bfworker serve` is told (cmd_serve_opts). */
typedef struct serve_args {
    const char *endpoint, *name, *mpirun;
    int slots, grace, quiet;
} serve_args;

#define SE(f) OPT_AT(serve_args, f)
const opt_spec cmd_serve_opts[] = {
    {"connect", 0, OPT_STR, 0, 0, SE(endpoint), "ENDPOINT",
     "bfd's worker endpoint: tcp://HOST:PORT (CURVE: BF_CURVE_SERVER, BF_CURVE_KEY) or "
     "ipc://BF_HOME/worker.sock on bfd's host (required)"},
    {"slots", 0, OPT_INT, 1, SERVE_MAX, SE(slots), "N",
     "ranks it runs at once (default: this host's online CPUs)"},
    {"name", 0, OPT_STR, 0, 0, SE(name), "NAME",
     "how bfd names it (default: the host name); one agent per name"},
    {"mpirun", 0, OPT_STR, 0, 0, SE(mpirun), "PATH",
     "for attempts of more than one rank (default: mpirun)"},
    {"grace", 0, OPT_INT, 0, 3600, SE(grace), "S",
     "on SIGTERM: seconds the attempts have to checkpoint (default 30)"},
    {"quiet", 0, OPT_FLAG, 0, 0, SE(quiet), NULL, "no log lines"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

static volatile sig_atomic_t g_quit;
static void on_quit(int sig) {
    (void)sig;
    g_quit = 1;
}

typedef struct child {
    long long trial;
    int attempt;
    pid_t pid; /* 0: ended, its exit waiting for bfd's ack */
    int code, sig;
    double exit_sent; /* when agent_exit was last said (0: not yet) */
} child;

typedef struct agent_state {
    void *ctx, *sock;
    const char *endpoint, *mpirun;
    char name[PROTO_MAX_NAME + 1];
    int slots, quiet, welcomed;
    double heartbeat, last_hb, hello_at, started;
    char self[PATH_MAX];
    child kids[SERVE_MAX];
    int n_kids;
    char last_error[512];
} agent_state;

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void say(const agent_state *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const agent_state *a, const char *fmt, ...) {
    if (a->quiet) return;
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
    fprintf(stderr, "%s bfworker serve %s: ", when, a->name);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* name, pid and slots, which every message but agent_exit carries in full
 * (a restarted bfd learns the agent from any of them), with body's fields. */
static int send_agent(agent_state *a, const char *type, json_t *body) {
    char err[256];
    json_object_set_new(body, "name", json_string(a->name));
    json_object_set_new(body, "pid", json_integer(getpid()));
    json_object_set_new(body, "slots", json_integer(a->slots));
    int rc = proto_send(a->sock, NULL, NULL, type, body, ZMQ_DONTWAIT, err, sizeof err);
    json_decref(body);
    return rc;
}

static void send_heartbeat(agent_state *a, const char *type) {
    json_t *list = json_array();
    for (int i = 0; i < a->n_kids; i++)
        if (a->kids[i].pid > 0)
            json_array_append_new(list,
                                  json_pack("{s:I, s:i}", "trial", (json_int_t)a->kids[i].trial,
                                            "attempt", a->kids[i].attempt));
    send_agent(a, type, json_pack("{s:o}", "running", list));
}

static void send_exit(agent_state *a, child *k) {
    json_t *b = json_pack("{s:I, s:i, s:i, s:i}", "trial", (json_int_t)k->trial, "attempt",
                          k->attempt, "code", k->code, "signal", k->sig);
    if (send_agent(a, "agent_exit", b) == 0) k->exit_sent = mono_s();
}

static child *find_kid(agent_state *a, long long trial, int attempt) {
    for (int i = 0; i < a->n_kids; i++)
        if (a->kids[i].trial == trial && a->kids[i].attempt == attempt) return &a->kids[i];
    return NULL;
}

/* A string field of a launch, at most max bytes; NULL when absent or bad. */
static const char *str_field(json_t *b, const char *key, size_t max) {
    const char *s = json_string_value(json_object_get(b, key));
    return s && strlen(s) <= max ? s : NULL;
}

/* An attempt that could not start is said as ended with exit status 1. */
static void launch_failed(agent_state *a, long long trial, int attempt, const char *why) {
    say(a, "trial %lld attempt %d: not started: %s", trial, attempt, why);
    if (a->n_kids == SERVE_MAX) return;
    child *k = &a->kids[a->n_kids++];
    memset(k, 0, sizeof *k);
    k->trial = trial;
    k->attempt = attempt;
    k->code = 1;
    send_exit(a, k);
}

/* launch: `bfworker run` for the attempt bfd names, in its own session. */
static void do_launch(agent_state *a, json_t *b) {
    json_t *jt = json_object_get(b, "trial"), *ja = json_object_get(b, "attempt");
    const char *token = str_field(b, "token", PROTO_TOKEN_LEN), *out = str_field(b, "out", 1100),
               *logp = str_field(b, "log", 1100), *cwd = str_field(b, "cwd", 1100),
               *stage_root = str_field(b, "stage_root", 1100), *stage = str_field(b, "stage", 15);
    json_t *jr = json_object_get(b, "ranks"), *jth = json_object_get(b, "threads");
    if (!json_is_integer(jt) || !json_is_integer(ja) || json_integer_value(jt) < 1 ||
        json_integer_value(ja) < 1 || json_integer_value(ja) > INT_MAX) {
        say(a, "launch without a valid trial and attempt: ignored");
        return;
    }
    long long trial = json_integer_value(jt);
    int attempt = (int)json_integer_value(ja);
    long long ranks = json_is_integer(jr) ? json_integer_value(jr) : 1;
    long long threads = json_is_integer(jth) ? json_integer_value(jth) : 1;
    if (find_kid(a, trial, attempt)) return; /* said twice: it runs already */
    if (!token || !out || !logp || !cwd || ranks < 1 || ranks > 4096 || threads < 1 ||
        threads > 4096 || (stage && !stage_root)) {
        launch_failed(a, trial, attempt, "the launch lacks token, out, log, cwd or a valid ranks");
        return;
    }
    if (a->n_kids == SERVE_MAX) {
        launch_failed(a, trial, attempt, "this agent runs its maximum of attempts already");
        return;
    }
    char id[32], np[16], att[16];
    snprintf(id, sizeof id, "%lld", trial);
    snprintf(np, sizeof np, "%lld", ranks);
    snprintf(att, sizeof att, "%d", attempt);
    const char *argv[32];
    int n = 0;
    if (ranks > 1) {
        argv[n++] = a->mpirun;
        argv[n++] = "--oversubscribe";
        argv[n++] = "-np";
        argv[n++] = np;
    }
    const char *tail[] = {a->self,   "run", "--trial", id,  "--connect", a->endpoint,
                          "--token", token, "--out",   out, "--attempt", att};
    for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++) argv[n++] = tail[i];
    if (stage) {
        argv[n++] = "--stage-root";
        argv[n++] = stage_root;
        argv[n++] = "--stage";
        argv[n++] = stage;
    }
    argv[n] = NULL;
    char banner[1400], threads_env[32], err[1600];
    snprintf(banner, sizeof banner,
             "== bfworker serve %s: trial %s attempt %s, %lld rank%s, cwd %s", a->name, id, att,
             ranks, ranks == 1 ? "" : "s", cwd);
    snprintf(threads_env, sizeof threads_env, "OMP_NUM_THREADS=%lld", threads);
    const char *env[] = {threads_env, NULL};
    /* the attempt dies with its agent: a killed agent is a lost host */
    bf_spawn_req req = {.argv = argv,
                        .logp = logp,
                        .cwd = cwd,
                        .env = env,
                        .banner = banner,
                        .new_session = 1,
                        .die_with_parent = 1};
    pid_t pid = bf_spawn(&req, err, sizeof err);
    if (pid < 0) {
        launch_failed(a, trial, attempt, err);
        return;
    }
    child *k = &a->kids[a->n_kids++];
    memset(k, 0, sizeof *k);
    k->trial = trial;
    k->attempt = attempt;
    k->pid = pid;
    say(a, "trial %lld attempt %d: started, pid %d, %lld rank%s", trial, attempt, (int)pid, ranks,
        ranks == 1 ? "" : "s");
    send_heartbeat(a, "agent_heartbeat"); /* bfd sees it running at once */
}

static void do_kill(agent_state *a, json_t *b) {
    json_t *jt = json_object_get(b, "trial"), *ja = json_object_get(b, "attempt"),
           *js = json_object_get(b, "signal");
    if (!json_is_integer(jt) || !json_is_integer(ja) || !json_is_integer(js)) return;
    long long sig = json_integer_value(js);
    if (sig != SIGTERM && sig != SIGKILL && sig != SIGINT) return;
    child *k = find_kid(a, json_integer_value(jt), (int)json_integer_value(ja));
    if (!k || k->pid <= 0) return;
    say(a, "trial %lld attempt %d: signal %lld from bfd", k->trial, k->attempt, sig);
    kill(-k->pid, (int)sig);
}

static void do_ack(agent_state *a, json_t *b) {
    json_t *jt = json_object_get(b, "trial"), *ja = json_object_get(b, "attempt");
    if (!json_is_integer(jt) || !json_is_integer(ja)) return;
    child *k = find_kid(a, json_integer_value(jt), (int)json_integer_value(ja));
    if (!k || k->pid > 0) return;
    *k = a->kids[--a->n_kids];
}

static void handle(agent_state *a, proto_msg *m) {
    if (!strcmp(m->type, "agent_ok")) {
        json_t *hb = json_object_get(m->body, "heartbeat");
        if (json_is_number(hb) && json_number_value(hb) >= 0.05)
            a->heartbeat = json_number_value(hb);
        if (!a->welcomed)
            say(a, "connected to bfd at %s: %d slot%s, heartbeat every %g s", a->endpoint, a->slots,
                a->slots == 1 ? "" : "s", a->heartbeat);
        a->welcomed = 1;
        a->last_error[0] = '\0';
    } else if (!strcmp(m->type, "launch")) {
        do_launch(a, m->body);
    } else if (!strcmp(m->type, "kill")) {
        do_kill(a, m->body);
    } else if (!strcmp(m->type, "agent_ack")) {
        do_ack(a, m->body);
    } else if (!strcmp(m->type, "error")) {
        const char *msg = json_string_value(json_object_get(m->body, "message"));
        /* refused (a name in use, a bfd with another launcher): said once,
         * hello again later, as the cause may pass */
        if (msg && strcmp(msg, a->last_error)) say(a, "bfd refused: %s", msg);
        snprintf(a->last_error, sizeof a->last_error, "%s", msg ? msg : "");
        a->welcomed = 0;
    }
}

/* Children that ended: their exit is said (and said again until acked). */
static void reap(agent_state *a) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        for (int i = 0; i < a->n_kids; i++)
            if (a->kids[i].pid == pid) {
                child *k = &a->kids[i];
                k->pid = 0;
                k->code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
                k->sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
                say(a, "trial %lld attempt %d: ended, %s %d", k->trial, k->attempt,
                    k->sig ? "signal" : "exit status", k->sig ? k->sig : k->code);
                send_exit(a, k);
            }
    double t = mono_s();
    for (int i = 0; i < a->n_kids; i++)
        if (a->kids[i].pid == 0 && t - a->kids[i].exit_sent > EXIT_RESEND_S)
            send_exit(a, &a->kids[i]);
}

static int live_kids(const agent_state *a) {
    int n = 0;
    for (int i = 0; i < a->n_kids; i++) n += a->kids[i].pid > 0;
    return n;
}

/* One poll round of at most ms: messages, ended children, heartbeat. */
static void round_once(agent_state *a, int ms) {
    zmq_pollitem_t it = {a->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, ms) > 0)
        for (int k = 0; k < 64; k++) {
            proto_msg m;
            proto_code code;
            char err[256];
            memset(&m, 0, sizeof m);
            int rc = proto_recv(a->sock, ZMQ_DONTWAIT, 0, &m, &code, err, sizeof err);
            if (rc == 0 && code == PROTO_OK) handle(a, &m);
            proto_msg_clear(&m);
            if (rc != 0) break;
        }
    reap(a);
    double t = mono_s();
    if (!a->welcomed && t - a->hello_at >= HELLO_RESEND_S) {
        if (a->hello_at > 0 && t - a->started >= SILENT_WARN_S && !a->last_error[0]) {
            say(a,
                "no answer from bfd at %s after %.0f s (is bfd running there with launcher: "
                "remote? over tcp://, is this host's CURVE key in bfd's curve/clients/?)",
                a->endpoint, t - a->started);
            a->started = t; /* said again after as long */
        }
        send_heartbeat(a, "agent_hello");
        a->hello_at = t;
    } else if (a->welcomed && t - a->last_hb >= a->heartbeat) {
        send_heartbeat(a, "agent_heartbeat");
        a->last_hb = t;
    }
}

static int open_socket(agent_state *a, char *err, size_t errlen) {
    a->ctx = zmq_ctx_new();
    a->sock = a->ctx ? zmq_socket(a->ctx, ZMQ_DEALER) : NULL;
    if (!a->sock) return bf_fail(err, errlen, "zmq_socket(DEALER): %s", zmq_strerror(zmq_errno()));
    int zero = 0, one = 1, ivl = 100, ivl_max = 2000;
    int64_t maxsz = PROTO_MAX_FRAME;
    if (zmq_setsockopt(a->sock, ZMQ_LINGER, &zero, sizeof zero) ||
        zmq_setsockopt(a->sock, ZMQ_IMMEDIATE, &one, sizeof one) ||
        zmq_setsockopt(a->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl) ||
        zmq_setsockopt(a->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max) ||
        zmq_setsockopt(a->sock, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz))
        return bf_fail(err, errlen, "zmq_setsockopt: %s", zmq_strerror(zmq_errno()));
    if (!strncmp(a->endpoint, "tcp://", 6) && proto_curve_client(a->sock, err, errlen)) return -1;
    if (zmq_connect(a->sock, a->endpoint) != 0)
        return bf_fail(err, errlen, "zmq_connect(%s): %s", a->endpoint, zmq_strerror(zmq_errno()));
    return 0;
}

/* SIGTERM to every attempt, SIGKILL after grace; their exits said (for at
 * most a few seconds more when bfd does not answer). */
static void drain(agent_state *a, double grace) {
    say(a, "stopping: %d attempt%s get SIGTERM (%.0f s to checkpoint)", live_kids(a),
        live_kids(a) == 1 ? "" : "s", grace);
    for (int i = 0; i < a->n_kids; i++)
        if (a->kids[i].pid > 0) kill(-a->kids[i].pid, SIGTERM);
    double t0 = mono_s();
    int killed = 0;
    while (live_kids(a) > 0) {
        if (!killed && mono_s() - t0 > grace) {
            for (int i = 0; i < a->n_kids; i++)
                if (a->kids[i].pid > 0) kill(-a->kids[i].pid, SIGKILL);
            killed = 1;
        }
        round_once(a, 100);
    }
    double t1 = mono_s();
    while (a->n_kids > 0 && mono_s() - t1 < 5.0) round_once(a, 100);
}

int cmd_serve(int argc, char **argv) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    serve_args o = {
        .mpirun = "mpirun", .slots = ncpu > 0 ? (int)ncpu : 1, .grace = (int)DEFAULT_GRACE_S};
    int prc = cmd_parse(argc, argv,
                        "the agent of bfd's launcher: remote on this host: starts the attempts bfd "
                        "hands it. BF_HOME must be the same shared folder, at the same path, on "
                        "bfd's host and here.",
                        &o, NULL);
    if (prc >= 0) return prc;
    static agent_state a;
    memset(&a, 0, sizeof a);
    a.endpoint = o.endpoint;
    a.mpirun = o.mpirun;
    a.quiet = o.quiet;
    a.slots = o.slots;
    int grace = o.grace;
    if (!a.endpoint || (strncmp(a.endpoint, "tcp://", 6) && strncmp(a.endpoint, "ipc://", 6))) {
        return cmd_usage_error("--connect tcp://HOST:PORT or ipc://PATH is required");
    }
    if (o.name) {
        if (!proto_name_ok(o.name)) {
            fprintf(stderr,
                    "bfworker serve: --name must be 1-%d printable characters without space, "
                    "'\"' or '\\', got '%s'\n",
                    PROTO_MAX_NAME, o.name);
            return CMD_USAGE;
        }
        snprintf(a.name, sizeof a.name, "%s", o.name);
    } else if (gethostname(a.name, sizeof a.name) != 0 || !proto_name_ok(a.name)) {
        fprintf(stderr, "bfworker serve: this host's name is not usable; give --name\n");
        return CMD_USAGE;
    }
    ssize_t n = readlink("/proc/self/exe", a.self, sizeof a.self - 1);
    if (n <= 0) {
        fprintf(stderr, "bfworker serve: readlink /proc/self/exe: %s\n", strerror(errno));
        return CMD_FAIL;
    }
    a.self[n] = '\0';
    a.heartbeat = 1.0;
    a.started = mono_s();
    char err[1024];
    if (open_socket(&a, err, sizeof err)) {
        fprintf(stderr, "bfworker serve: %s\n", err);
        if (a.sock) zmq_close(a.sock);
        if (a.ctx) zmq_ctx_term(a.ctx);
        return CMD_FAIL;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_quit;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    say(&a, "serving bfd at %s with %d slot%s", a.endpoint, a.slots, a.slots == 1 ? "" : "s");
    while (!g_quit) round_once(&a, 100);
    drain(&a, grace);
    zmq_close(a.sock);
    zmq_ctx_term(a.ctx);
    say(&a, "stopped");
    return CMD_OK;
}
