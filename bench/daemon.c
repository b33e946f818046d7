/* bench_daemon — bfd's metrics hub under load: metric points per second
 * stored (acknowledged, so committed to SQLite) and published on PUB with
 * many workers sending at once, and the latency from a worker sending a point
 * to a live subscriber (what `bfctl tail -f` does) receiving it.
 *
 *   bench_daemon [--senders N] [--points N] [--batch N] [--values N]
 *                [--lat-points N] [--lat-rate HZ] [--bfd PATH] [--keep] [--json]
 *
 * It starts a real bfd on a temporary BF_HOME and submits a job of N trials.
 * bfd launches each trial as usual, through the `bfworker` of its config
 * file (bfd.yaml); here that is a small script that records its command line
 * (trial id, endpoint, per-attempt token) and sleeps, so the bench's sender threads can
 * play the trials' rank 0 over the real worker protocol: `hello`, then
 * `metrics` batches of consecutive seqs, each waiting for its `ack`, as
 * worker/link.c does. A subscriber thread syncs its SUB socket
 * (docs/protocol.md, "Live data without gaps") and counts every published
 * point; a point's `time` is the wall clock when its batch was built, so
 * receive time minus `time` is the send-to-subscriber latency.
 *
 * Phase 1 (throughput): every sender sends --points points in batches of
 * --batch as fast as the acks come. Reported: points/s acknowledged (stored)
 * and points/s received by the subscriber (published), and the latency of
 * those points (under full load). Phase 2 (latency): one sender sends
 * --lat-points one-point batches at --lat-rate per second; median and p99.
 * At the end the stored rows are counted in the database itself.
 *
 * --load runs the other bench instead, the daemon of a busy lab (issue 41):
 * --senders workers stream --rate points a second each for --duration
 * seconds while a --sweep-trials sweep is submitted and whole bfctl
 * processes (daemon status, ls, show of the big job) run in a loop; it
 * prints points sent, stored, lost and duplicated, the bfctl calls answered
 * with their p50/p99/max, and bfd's RSS early and at the end. The defaults
 * (16 workers, 60 s) run in about a minute on a small machine; the issue's
 * goal is --senders 1000 --rate 10 --duration 600.
 *
 * The table goes to stdout; --json writes one JSON object instead (the
 * throughput run only). Options are read by an opts table (common/opts.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "bench/bench_util.h"
#include "common/opts.h"
#include "jobs/sweep.h"
#include "protocol/proto.h"

#define MAX_SENDERS 256       /* the throughput run: a thread each */
#define MAX_LOAD_WORKERS 2000 /* --load: workers shared by --threads threads */
#define CALL_TIMEOUT_MS 10000

typedef struct opts {
    int senders, batch, values, lat_points, json, keep, load, threads;
    long long points, sweep_trials;
    double lat_rate, rate, duration, rss_at;
    const char *bfd;
    const char *bfd_yaml; /* more bfd.yaml lines (e.g. "tensorboard: false") */
} opts;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void kill_fake_workers(const char *dir);

static pid_t g_bfd = -1;
static char g_dir[256];

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_daemon: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    if (g_bfd > 0) {
        kill(g_bfd, SIGKILL);
        waitpid(g_bfd, NULL, 0);
    }
    if (g_dir[0]) {
        char launches[300];
        snprintf(launches, sizeof launches, "%s/launches", g_dir);
        kill_fake_workers(launches); /* they would sleep on, orphaned */
    }
    if (g_dir[0]) fprintf(stderr, "bench_daemon: files kept in %s (bfd.log)\n", g_dir);
    exit(1);
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void write_file(const char *path, const char *text, mode_t mode) {
    FILE *f = fopen(path, "w");
    if (!f) die("cannot write %s: %s", path, strerror(errno));
    if (fputs(text, f) == EOF || fclose(f) != 0) die("cannot write %s: %s", path, strerror(errno));
    if (chmod(path, mode) != 0) die("chmod %s: %s", path, strerror(errno));
}

/* ------------------------------------------------------------- control */

typedef struct ctl {
    void *sock;
    long long req;
} ctl;

/* One request on the control socket; returns the reply body (caller
 * decrefs) and its type in rtype. An `error` reply or no reply is fatal. */
static json_t *ctl_call(ctl *c, const char *type, json_t *body, char rtype[PROTO_MAX_TYPE + 1]) {
    char err[512];
    proto_msg route = {0};
    route.has_req = 1;
    route.req = ++c->req;
    if (!body) body = json_object();
    if (!body) die("out of memory");
    if (proto_send(c->sock, &route, NULL, type, body, 0, err, sizeof err) != 0)
        die("%s: %s", type, err);
    json_decref(body);
    for (;;) {
        proto_msg m = {0};
        proto_code code;
        int rc = proto_recv(c->sock, 0, 0, &m, &code, err, sizeof err);
        if (rc == 1) die("%s: no reply from bfd within %d ms", type, CALL_TIMEOUT_MS);
        if (rc < 0) die("%s: %s", type, err);
        if (code != PROTO_OK) die("%s: unreadable reply: %s", type, err);
        if (!m.has_req || m.req != c->req) { /* a late reply to an earlier request */
            proto_msg_clear(&m);
            continue;
        }
        if (strcmp(m.type, "error") == 0) {
            json_t *msg = json_object_get(m.body, "message");
            die("%s: bfd answered error %s: %s", type,
                json_string_value(json_object_get(m.body, "code")),
                json_is_string(msg) ? json_string_value(msg) : "?");
        }
        snprintf(rtype, PROTO_MAX_TYPE + 1, "%s", m.type);
        json_t *b = m.body;
        m.body = NULL;
        proto_msg_clear(&m);
        return b;
    }
}

static void *new_socket(void *zctx, int type, const char *endpoint, int rcvtimeo_ms) {
    void *s = zmq_socket(zctx, type);
    if (!s) die("zmq_socket: %s", zmq_strerror(zmq_errno()));
    int linger = 0, hwm = 0;
    if (zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_setsockopt(s, ZMQ_RCVTIMEO, &rcvtimeo_ms, sizeof rcvtimeo_ms) != 0 ||
        zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm) != 0 ||
        zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm) != 0)
        die("zmq_setsockopt: %s", zmq_strerror(zmq_errno()));
    if (zmq_connect(s, endpoint) != 0)
        die("zmq_connect(%s): %s", endpoint, zmq_strerror(zmq_errno()));
    return s;
}

/* ------------------------------------------------------------- senders */

typedef struct sender {
    int idx;
    void *zctx;
    const char *endpoint;
    int64_t trial;
    char token[PROTO_TOKEN_LEN + 1];
    long points; /* phase 1 */
    int batch, values;
    pthread_barrier_t *start;
    /* results */
    double t_done; /* monotonic, last ack */
    int64_t acked;
    char err[512];
} sender;

/* Sends body text as "bf" | "1" | type | body. */
static int send_raw(void *s, const char *type, const char *body, size_t len, char *err,
                    size_t errlen) {
    if (zmq_send(s, "bf", 2, ZMQ_SNDMORE) < 0 || zmq_send(s, "1", 1, ZMQ_SNDMORE) < 0 ||
        zmq_send(s, type, strlen(type), ZMQ_SNDMORE) < 0 || zmq_send(s, body, len, 0) < 0) {
        snprintf(err, errlen, "zmq_send(%s): %s", type, zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}

/* Waits for the reply of type want; fills *seq from an `ack` (or
 * *acked from a `config`). Returns 0 or -1 with a message. */
static int recv_reply(void *s, const char *want, int64_t *seq, char *err, size_t errlen) {
    proto_msg m = {0};
    proto_code code;
    char perr[512];
    int rc = proto_recv(s, 0, 0, &m, &code, perr, sizeof perr);
    if (rc == 1) {
        snprintf(err, errlen, "no %s from bfd within %d ms", want, CALL_TIMEOUT_MS);
        return -1;
    }
    if (rc < 0 || code != PROTO_OK) {
        snprintf(err, errlen, "%s", perr);
        proto_msg_clear(&m);
        return -1;
    }
    int ret = 0;
    if (strcmp(m.type, want) != 0) {
        char *txt = json_dumps(m.body, JSON_COMPACT);
        snprintf(err, errlen, "got %s %s, want %s", m.type, txt ? txt : "?", want);
        free(txt);
        ret = -1;
    } else {
        long long v;
        const char *key = strcmp(want, "ack") == 0 ? "seq" : "acked";
        if (proto_get_int(m.body, key, 1, 0, PROTO_MAX_INT, 0, &v, perr, sizeof perr) != 0) {
            snprintf(err, errlen, "%s: %.400s", want, perr);
            ret = -1;
        } else {
            *seq = v;
        }
    }
    proto_msg_clear(&m);
    return ret;
}

/* Appends points seq first..first+n-1 to buf as a metrics body. */
static size_t build_batch(char *buf, size_t cap, const sender *s, int64_t first, int n) {
    double t = wall_now();
    size_t w = (size_t)snprintf(buf, cap, "{\"trial\":%lld,\"token\":\"%s\",\"points\":[",
                                (long long)s->trial, s->token);
    for (int i = 0; i < n && w < cap; i++) {
        int64_t seq = first + i;
        w += (size_t)snprintf(buf + w, cap - w,
                              "%s{\"seq\":%lld,\"step\":%lld,\"time\":%.6f,\"values\":{",
                              i ? "," : "", (long long)seq, (long long)seq, t);
        for (int v = 0; v < s->values && w < cap; v++)
            w += (size_t)snprintf(buf + w, cap - w, "%s\"bench/v%d\":%.4f", v ? "," : "", v,
                                  (double)(seq % 1000) * 1e-3 + v);
        if (w < cap) w += (size_t)snprintf(buf + w, cap - w, "}}");
    }
    if (w < cap) w += (size_t)snprintf(buf + w, cap - w, "]}");
    return w;
}

static size_t batch_cap(int batch, int values) {
    return 128 + (size_t)batch * (96 + 32 * (size_t)values);
}

/* Sends points seq from..to (inclusive) in batches, each after the previous
 * ack; pace > 0 spaces batches by that many seconds. Returns 0 or -1. */
static int send_points(void *sock, sender *s, int64_t from, int64_t to, int batch, double pace) {
    size_t cap = batch_cap(batch, s->values);
    char *buf = malloc(cap);
    if (!buf) {
        snprintf(s->err, sizeof s->err, "out of memory");
        return -1;
    }
    double next = bench_now();
    int64_t seq = from;
    while (seq <= to) {
        if (pace > 0) {
            sleep_s(next - bench_now());
            next += pace;
        }
        int n = (int)(to - seq + 1 < batch ? to - seq + 1 : batch);
        size_t len = build_batch(buf, cap, s, seq, n);
        if (len >= cap) {
            snprintf(s->err, sizeof s->err, "batch buffer too small");
            free(buf);
            return -1;
        }
        int64_t ack = 0;
        if (send_raw(sock, "metrics", buf, len, s->err, sizeof s->err) != 0 ||
            recv_reply(sock, "ack", &ack, s->err, sizeof s->err) != 0) {
            free(buf);
            return -1;
        }
        if (ack != seq + n - 1) {
            snprintf(s->err, sizeof s->err, "trial %lld: ack %lld after sending seq %lld..%lld",
                     (long long)s->trial, (long long)ack, (long long)seq, (long long)(seq + n - 1));
            free(buf);
            return -1;
        }
        s->acked = ack;
        seq += n;
    }
    free(buf);
    return 0;
}

/* hello, as rank 0 does; returns the daemon's acked seq. */
static int sender_hello(void *sock, sender *s) {
    char body[512], host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    int len = snprintf(body, sizeof body,
                       "{\"trial\":%lld,\"token\":\"%s\",\"attempt\":1,\"pid\":%d,\"host\":\"%s\"}",
                       (long long)s->trial, s->token, (int)getpid(), host);
    int64_t acked = 0;
    if (send_raw(sock, "hello", body, (size_t)len, s->err, sizeof s->err) != 0 ||
        recv_reply(sock, "config", &acked, s->err, sizeof s->err) != 0)
        return -1;
    s->acked = acked;
    return 0;
}

static void *sender_main(void *arg) {
    sender *s = arg;
    void *sock = new_socket(s->zctx, ZMQ_DEALER, s->endpoint, CALL_TIMEOUT_MS);
    int ok = sender_hello(sock, s) == 0;
    pthread_barrier_wait(s->start);
    if (ok && send_points(sock, s, s->acked + 1, s->acked + s->points, s->batch, 0) == 0)
        s->t_done = bench_now();
    zmq_close(sock);
    return NULL;
}

/* ------------------------------------------------------------ subscriber */

typedef struct subscriber {
    void *sock;
    atomic_int stop;
    atomic_long got_load, got_lat; /* points received per phase */
    atomic_long dups, bad;
    int64_t lat_trial, load_points; /* a point of lat_trial with seq > load_points is phase 2 */
    int64_t trial_lo, trial_hi;     /* the bench's trials: ids in [lo, hi] */
    int64_t *last_seq;              /* per trial (index id - lo) */
    double t_load_done;             /* monotonic, when the last phase-1 point arrived */
    long expect_load;
    double *lat_load, *lat_idle;
    size_t n_load, n_idle, cap_load, cap_idle;
    char err[512];
} subscriber;

static void push(double **a, size_t *n, size_t *cap, double v) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 65536;
        double *p = realloc(*a, c * sizeof *p);
        if (!p) return;
        *a = p, *cap = c;
    }
    (*a)[(*n)++] = v;
}

static void *subscriber_main(void *arg) {
    subscriber *u = arg;
    char err[512];
    while (!atomic_load(&u->stop)) {
        proto_msg m = {0};
        proto_code code;
        int rc = proto_recv(u->sock, 0, PROTO_RECV_TOPIC, &m, &code, err, sizeof err);
        if (rc == 1) continue; /* receive timeout: look at stop */
        if (rc < 0) {
            snprintf(u->err, sizeof u->err, "%s", err);
            break;
        }
        double now = wall_now();
        if (code != PROTO_OK || strcmp(m.type, "metrics") != 0 ||
            strncmp(m.topic, "trial/", 6) != 0) {
            if (code != PROTO_OK) atomic_fetch_add(&u->bad, 1);
            proto_msg_clear(&m);
            continue;
        }
        long long trial;
        json_t *pts = json_object_get(m.body, "points");
        if (proto_get_int(m.body, "trial", 1, 1, PROTO_MAX_INT, 0, &trial, err, sizeof err) != 0 ||
            !json_is_array(pts) || trial < u->trial_lo || trial > u->trial_hi) {
            proto_msg_clear(&m);
            continue;
        }
        size_t i;
        json_t *p;
        long nload = 0, nlat = 0;
        json_array_foreach(pts, i, p) {
            json_int_t seq = json_integer_value(json_object_get(p, "seq"));
            double t = json_number_value(json_object_get(p, "time"));
            int64_t *last = &u->last_seq[trial - u->trial_lo];
            if (seq <= *last) {
                atomic_fetch_add(&u->dups, 1);
                continue;
            }
            *last = seq;
            if (trial == u->lat_trial && seq > u->load_points) {
                push(&u->lat_idle, &u->n_idle, &u->cap_idle, now - t);
                nlat++;
            } else {
                push(&u->lat_load, &u->n_load, &u->cap_load, now - t);
                nload++;
            }
        }
        if (nload && atomic_fetch_add(&u->got_load, nload) + nload == u->expect_load)
            u->t_load_done = bench_now();
        if (nlat) atomic_fetch_add(&u->got_lat, nlat);
        proto_msg_clear(&m);
    }
    return NULL;
}

/* ---------------------------------------------------------- bfd, launch */

static pid_t spawn_bfd(const char *bfd, const char *home, const char *log) {
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        setenv("BF_HOME", home, 1);
        execl(bfd, bfd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Reads the launch records the fake worker wrote (one argument a line) and
 * fills trial ids and tokens; returns how many are complete. */
static int read_launches(const char *dir, sender *s, int max) {
    DIR *d = opendir(dir);
    if (!d) die("opendir %s: %s", dir, strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        if (strncmp(e->d_name, "launch.", 7) != 0 || strstr(e->d_name, ".tmp")) continue;
        char path[600], line[1100], prev[1100] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        int64_t trial = 0;
        char token[PROTO_TOKEN_LEN + 1] = "";
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\n")] = '\0';
            if (strcmp(prev, "--trial") == 0) trial = strtoll(line, NULL, 10);
            if (strcmp(prev, "--token") == 0 && strlen(line) == PROTO_TOKEN_LEN)
                memcpy(token, line, PROTO_TOKEN_LEN + 1); /* length checked just above */
            snprintf(prev, sizeof prev, "%s", line);
        }
        fclose(f);
        if (trial > 0 && token[0]) {
            s[n].trial = trial;
            snprintf(s[n].token, sizeof s[n].token, "%s", token);
            n++;
        }
    }
    closedir(d);
    return n;
}

/* SIGKILL to every fake worker that recorded a launch (launch.PID). */
static void kill_fake_workers(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *end;
        long pid = strncmp(e->d_name, "launch.", 7) ? 0 : strtol(e->d_name + 7, &end, 10);
        if (pid > 1 && !*end) kill((pid_t)pid, SIGKILL);
    }
    if (d) closedir(d);
}

static int cmp_sender(const void *a, const void *b) {
    const sender *x = a, *y = b;
    return (x->trial > y->trial) - (x->trial < y->trial);
}

/* Percentile q (0..1) of sorted a[0..n), in ms. */
static double pct_ms(const double *a, size_t n, double q) {
    if (!n) return NAN;
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return 1e3 * a[i];
}

/* JSON has no NaN: a measurement that could not be made is -1. */
static double fin(double x) { return isfinite(x) ? x : -1.0; }

/* CPU seconds (user + system) a process has used, from /proc; NAN if unknown.
 * Measured per phase, it tells what bfd costs per point apart from the
 * bench's own threads on the same cores. */
static double cpu_seconds(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return NAN;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ut, st;
    if (!p ||
        sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return NAN;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* ------------------------------------------------------------- load mode
 *
 * --load: a day of a lab compressed. --senders workers stream --rate points
 * a second each for --duration seconds (each batch waits for its ack, as
 * worker/link.c does), while a --sweep-trials sweep is submitted (at 2 s)
 * and whole `bfctl daemon status`, `bfctl ls` and `bfctl show JOB` processes
 * run one after the other in a loop (show: the big job once it is stored,
 * every page of it). Printed: points sent, stored, lost and duplicated,
 * requests answered and their latency per command, and bfd's RSS at
 * --rss-at seconds and at the end. */

typedef struct load_ctx {
    sender *s;
    int n, threads, values;
    double rate, t0, t_end;
    atomic_long sent, batches;
    char err[512];
} load_ctx;

typedef struct load_thread {
    load_ctx *c;
    int t;
} load_thread;

/* One thread's share of the workers (index = t mod threads): each sends the
 * points due by now at the rate, one batch, waiting for its ack. */
static void *load_main(void *arg) {
    load_thread *lt = arg;
    load_ctx *c = lt->c;
    int mine = 0;
    for (int i = lt->t; i < c->n; i += c->threads) mine++;
    void **socks = calloc((size_t)mine, sizeof *socks);
    int64_t *sent = calloc((size_t)mine, sizeof *sent);
    if (!socks || !sent) die("out of memory");
    int k = 0;
    for (int i = lt->t; i < c->n; i += c->threads, k++) {
        socks[k] = new_socket(c->s[i].zctx, ZMQ_DEALER, c->s[i].endpoint, CALL_TIMEOUT_MS);
        if (sender_hello(socks[k], &c->s[i]) != 0) die("hello: %s", c->s[i].err);
    }
    while (bench_now() < c->t_end) {
        int busy = 0;
        double due_t = bench_now() - c->t0;
        k = 0;
        for (int i = lt->t; i < c->n; i += c->threads, k++) {
            int64_t due = (int64_t)(due_t * c->rate) - sent[k];
            if (due <= 0) continue;
            if (due > PROTO_MAX_POINTS) due = PROTO_MAX_POINTS;
            sender *s = &c->s[i];
            if (send_points(socks[k], s, s->acked + 1, s->acked + due, (int)due, 0) != 0)
                die("worker %d (trial %lld): %s", i, (long long)s->trial, s->err);
            sent[k] += due;
            atomic_fetch_add(&c->sent, (long)due);
            atomic_fetch_add(&c->batches, 1);
            busy = 1;
        }
        if (!busy) sleep_s(0.005);
    }
    for (k = 0; k < mine; k++) zmq_close(socks[k]);
    free(socks);
    free(sent);
    return NULL;
}

typedef struct ctl_loop {
    const char *bfctl, *home;
    atomic_llong *big; /* the big job's id once stored (0 before): show it, else the stream job */
    long long stream_job;
    atomic_int stop;
    double *lat[3];
    size_t n[3], cap[3];
    long failed[3];
} ctl_loop;

static const char *const ctl_cmds[3] = {"daemon status", "ls", "show"};

/* Runs `bfctl ARGS` (output to /dev/null) and returns its exit status. */
static int run_bfctl(const char *bfctl, const char *home, const char *args) {
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "BF_HOME='%s' '%s' %s >/dev/null 2>&1", home, bfctl, args);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Whole bfctl processes in a loop: status, ls, show JOB; each timed. */
static void *ctl_loop_main(void *arg) {
    ctl_loop *l = arg;
    while (!atomic_load(&l->stop)) {
        for (int k = 0; k < 3 && !atomic_load(&l->stop); k++) {
            char args[64];
            long long job = l->big ? atomic_load(l->big) : 0;
            if (k == 2)
                snprintf(args, sizeof args, "show %lld --json", job ? job : l->stream_job);
            else
                snprintf(args, sizeof args, "%s", ctl_cmds[k]);
            double t = bench_now();
            int rc = run_bfctl(l->bfctl, l->home, args);
            t = bench_now() - t;
            if (rc != 0)
                l->failed[k]++;
            else
                push(&l->lat[k], &l->n[k], &l->cap[k], t);
        }
        sleep_s(0.05);
    }
    return NULL;
}

typedef struct submit_big {
    void *zctx;
    const char *ep, *dir;
    long trials;
    double delay, took;
    atomic_llong job;
} submit_big;

/* Submits a grid of `trials` trials (train.seed x train.lr, 10 rates) on its
 * own control socket after `delay` seconds; records its id and the time the
 * reply took. */
static void *submit_main(void *arg) {
    submit_big *b = arg;
    sleep_s(b->delay);
    long seeds = b->trials / 10;
    size_t cap = 512 + 12 * (size_t)seeds;
    char *text = malloc(cap);
    if (!text) die("out of memory");
    size_t w = (size_t)snprintf(text, cap,
                                "name: bench-big\npipeline: budgetformer\ndevice: cpu\n"
                                "data: {set: wordnet}\nsweep:\n  parameters:\n"
                                "    train.lr: {values: [1e-4, 2e-4, 3e-4, 4e-4, 5e-4, 6e-4, "
                                "7e-4, 8e-4, 9e-4, 1e-3]}\n    train.seed: {values: [");
    for (long i = 0; i < seeds; i++)
        w += (size_t)snprintf(text + w, cap - w, "%s%ld", i ? ", " : "", i + 1);
    snprintf(text + w, cap - w, "]}\nmetric: {name: train/loss, goal: min}\n");
    ctl c = {new_socket(b->zctx, ZMQ_DEALER, b->ep, 600000), 0};
    char rtype[PROTO_MAX_TYPE + 1];
    double t = bench_now();
    json_t *rep = ctl_call(
        &c, "submit",
        json_pack("{s:s, s:s, s:s}", "sweep", text, "file", "bench-big.yaml", "cwd", b->dir),
        rtype);
    b->took = bench_now() - t;
    atomic_store(&b->job, json_integer_value(json_object_get(rep, "job")));
    json_decref(rep);
    free(text);
    zmq_close(c.sock);
    return NULL;
}

/* bfd's resident set in KiB (VmRSS), -1 when unknown. */
static long rss_kib(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

/* Stored rows of a job's trials in bfd's database (-1 when unreadable). */
static long long stored_rows(const char *home, long long job) {
    char db[700];
    snprintf(db, sizeof db, "%s/bf.db", home);
    sqlite3 *h = NULL;
    sqlite3_stmt *st = NULL;
    long long rows = -1;
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_busy_timeout(h, 5000) == SQLITE_OK &&
        sqlite3_prepare_v2(h,
                           "SELECT count(*) FROM metrics WHERE trial IN "
                           "(SELECT id FROM trials WHERE job = ?)",
                           -1, &st, NULL) == SQLITE_OK &&
        sqlite3_bind_int64(st, 1, job) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        rows = sqlite3_column_int64(st, 0);
    else
        fprintf(stderr, "bench_daemon: could not count stored rows in %s: %s\n", db,
                h ? sqlite3_errmsg(h) : "sqlite3_open_v2 failed");
    sqlite3_finalize(st);
    sqlite3_close(h);
    return rows;
}

/* The load mode after the common start (bfd up, the workers' trials
 * launched, the subscriber synced and running); returns the exit status. */
static int run_load(const opts *o, void *zctx, subscriber *u, pthread_t sub_th, sender *s,
                    long long job, const char *home, const char *ep_wk, const char *ep_ctl) {
    char bfctl[1100];
    snprintf(bfctl, sizeof bfctl, "%.1000s", o->bfd); /* bfctl beside bfd */
    char *slash = strrchr(bfctl, '/');
    snprintf(slash ? slash + 1 : bfctl, sizeof bfctl - (slash ? (size_t)(slash + 1 - bfctl) : 0),
             "bfctl");
    load_ctx lc = {
        .s = s, .n = o->senders, .threads = o->threads, .values = o->values, .rate = o->rate};
    for (int i = 0; i < o->senders; i++)
        s[i].zctx = zctx, s[i].endpoint = ep_wk, s[i].values = o->values;
    lc.t0 = bench_now();
    lc.t_end = lc.t0 + o->duration;
    pthread_t *th = calloc((size_t)o->threads, sizeof *th);
    load_thread *lt = calloc((size_t)o->threads, sizeof *lt);
    if (!th || !lt) die("out of memory");
    for (int t = 0; t < o->threads; t++) {
        lt[t] = (load_thread){&lc, t};
        if (pthread_create(&th[t], NULL, load_main, &lt[t]) != 0) die("pthread_create failed");
    }
    submit_big sb = {
        .zctx = zctx, .ep = ep_ctl, .dir = g_dir, .trials = o->sweep_trials, .delay = 2};
    ctl_loop cl = {.bfctl = bfctl, .home = home, .stream_job = job, .big = &sb.job};
    pthread_t ctl_th, sub_big;
    if (pthread_create(&ctl_th, NULL, ctl_loop_main, &cl) != 0 ||
        (o->sweep_trials > 0 && pthread_create(&sub_big, NULL, submit_main, &sb) != 0))
        die("pthread_create failed");
    double rss_at = o->rss_at < o->duration ? o->rss_at : o->duration / 2;
    sleep_s(lc.t0 + rss_at - bench_now());
    long rss_first = rss_kib(g_bfd);
    for (int t = 0; t < o->threads; t++) pthread_join(th[t], NULL);
    if (o->sweep_trials > 0) pthread_join(sub_big, NULL); /* a submit longer than the run counts */
    atomic_store(&cl.stop, 1);
    pthread_join(ctl_th, NULL);
    long rss_end = rss_kib(g_bfd);
    double wall = bench_now() - lc.t0;
    long sent = atomic_load(&lc.sent);
    double idle_since = bench_now();
    long last = -1;
    while (atomic_load(&u->got_load) < sent) { /* the published tail, 5 s at most idle */
        long g = atomic_load(&u->got_load);
        if (g != last) last = g, idle_since = bench_now();
        if (bench_now() - idle_since > 5) break;
        sleep_s(0.01);
    }
    atomic_store(&u->stop, 1);
    pthread_join(sub_th, NULL);
    long long rows = stored_rows(home, job);
    long long want = (long long)sent * o->values;
    /* no cancel: cancelling 100,000 trials holds bfd's loop longer than a
     * request's timeout; the fake workers are killed by pid after bfd stops */
    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    printf("bench_daemon --load: %s, %ld cores, SQLite %s\n", cpu, sysconf(_SC_NPROCESSORS_ONLN),
           sqlite3_libversion());
    printf("config: %d workers x %.1f points/s x %.0f s (%d value%s a point, %d sender threads); "
           "a %lld-trial sweep submitted at 2 s (stored in %.2f s)\n\n",
           o->senders, o->rate, o->duration, o->values, o->values == 1 ? "" : "s", o->threads,
           o->sweep_trials, sb.took);
    printf("%-36s %12ld  (%.0f/s over %.1f s, %ld batches)\n", "points sent (acked)", sent,
           (double)sent / wall, wall, atomic_load(&lc.batches));
    printf("%-36s %12lld  (rows %lld of %lld)\n", "points stored", rows / o->values, rows, want);
    printf("%-36s %12lld\n", "points lost", want - rows > 0 ? (want - rows) / o->values : 0);
    printf("%-36s %12ld  (published twice)\n", "points duplicated", atomic_load(&u->dups));
    printf("%-36s %12ld  (of %ld sent)\n", "points published", atomic_load(&u->got_load), sent);
    printf("\n%-22s %9s %7s %10s %10s %10s\n", "bfctl (whole process)", "answered", "failed",
           "p50 ms", "p99 ms", "max ms");
    int bad = rows != want || atomic_load(&u->dups) != 0;
    for (int k = 0; k < 3; k++) {
        qsort(cl.lat[k], cl.n[k], sizeof(double), bench_cmp_double);
        printf("%-22s %9zu %7ld %10.1f %10.1f %10.1f\n",
               k == 2 ? (o->sweep_trials > 0 ? "show BIG --json" : "show JOB --json") : ctl_cmds[k],
               cl.n[k], cl.failed[k], pct_ms(cl.lat[k], cl.n[k], 0.5),
               pct_ms(cl.lat[k], cl.n[k], 0.99), cl.n[k] ? 1e3 * cl.lat[k][cl.n[k] - 1] : NAN);
        bad |= cl.failed[k] != 0;
        free(cl.lat[k]);
    }
    printf("\n%-36s %9ld KiB (at %.0f s)\n", "bfd RSS early", rss_first, rss_at);
    printf("%-36s %9ld KiB (%+.1f%%)\n", "bfd RSS at the end", rss_end,
           rss_first > 0 ? 100.0 * (double)(rss_end - rss_first) / (double)rss_first : NAN);
    free(th);
    free(lt);
    return bad;
}

static const opt_spec bench_opts[] = {
    {"senders", 0, OPT_INT, 1, MAX_LOAD_WORKERS, OPT_AT(opts, senders), "N",
     "concurrent workers (16; --load: up to 2000)"},
    {"points", 0, OPT_LONG, 1, 1e9, OPT_AT(opts, points), "N", "per sender (25000)"},
    {"batch", 0, OPT_INT, 1, PROTO_MAX_POINTS, OPT_AT(opts, batch), "N",
     "points per metrics message (500)"},
    {"values", 0, OPT_INT, 1, PROTO_MAX_VALUES, OPT_AT(opts, values), "N", "values per point (1)"},
    {"lat-points", 0, OPT_INT, 0, 1e7, OPT_AT(opts, lat_points), "N",
     "phase-2 points, one per message (2000)"},
    {"lat-rate", 0, OPT_DOUBLE, 1e-3, 1e6, OPT_AT(opts, lat_rate), "HZ",
     "phase-2 messages a second (500)"},
    {"load", 0, OPT_FLAG, 0, 0, OPT_AT(opts, load), NULL,
     "the load run instead: workers streaming at --rate for --duration while a "
     "--sweep-trials sweep is submitted and bfctl status, ls and show run in a loop"},
    {"rate", 0, OPT_DOUBLE, 0.01, 1e5, OPT_AT(opts, rate), "HZ",
     "--load: points a second per worker (10)"},
    {"duration", 0, OPT_DOUBLE, 1, 86400, OPT_AT(opts, duration), "S",
     "--load: seconds of streaming (60)"},
    {"sweep-trials", 0, OPT_LONG, 0, SWEEP_MAX_TRIALS, OPT_AT(opts, sweep_trials), "N",
     "--load: trials of the sweep submitted at 2 s, a multiple of 10; 0: none (100000)"},
    {"rss-at", 0, OPT_DOUBLE, 1, 86400, OPT_AT(opts, rss_at), "S",
     "--load: when bfd's first RSS is read (60; half the duration when shorter)"},
    {"threads", 0, OPT_INT, 1, 256, OPT_AT(opts, threads), "N",
     "--load: sender threads sharing the workers (4)"},
    {"bfd", 0, OPT_STR, 0, 0, OPT_AT(opts, bfd), "PATH", "the bfd to run (bfctl is beside it)"},
    {"bfd-yaml", 0, OPT_STR, 0, 0, OPT_AT(opts, bfd_yaml), "LINES",
     "more bfd.yaml lines, e.g. 'tensorboard: false' or 'prometheus: 9464'"},
    {"keep", 0, OPT_FLAG, 0, 0, OPT_AT(opts, keep), NULL, "keep the temporary folder"},
    {"json", 0, OPT_FLAG, 0, 0, OPT_AT(opts, json), NULL, "one JSON object instead of the table"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int main(int argc, char **argv) {
    opts o = {.senders = 16,
              .batch = 500,
              .values = 1,
              .lat_points = 2000,
              .points = 25000,
              .lat_rate = 500,
              .rate = 10,
              .duration = 60,
              .sweep_trials = 100000,
              .rss_at = 60,
              .threads = 4,
              .bfd = BF_BIN_DIR "/bfd",
              .bfd_yaml = ""};
    int rest;
    int prc = opts_parse("bench_daemon",
                         "usage: bench_daemon [options]\n"
                         "  the issue-41 goal: --load --senders 1000 --rate 10 --duration 600\n",
                         bench_opts, argc, argv, 1, &o, &rest);
    if (prc == OPTS_HELP) return 0;
    if (prc != OPTS_OK) return 2;
    if (rest < argc) {
        fprintf(stderr, "bench_daemon: unexpected argument '%s'\n", argv[rest]);
        return 2;
    }
    if ((!o.load && o.senders > MAX_SENDERS) || o.sweep_trials % 10) {
        fprintf(stderr,
                "bench_daemon: --senders at most %d without --load; --sweep-trials a "
                "multiple of 10\n",
                MAX_SENDERS);
        return 2;
    }

    /* a private BF_HOME, a fake bfworker, a config that uses it */
    snprintf(g_dir, sizeof g_dir, "/tmp/bf-bench-daemon-XXXXXX");
    if (!mkdtemp(g_dir)) die("mkdtemp: %s", strerror(errno));
    char home[320], launches[320], path[700], text[2048];
    snprintf(home, sizeof home, "%s/home", g_dir);
    snprintf(launches, sizeof launches, "%s/launches", g_dir);
    if (mkdir(home, 0700) != 0 || mkdir(launches, 0700) != 0) die("mkdir: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/fake_worker", g_dir);
    snprintf(text, sizeof text,
             "#!/bin/sh\n"
             "# bench_daemon's stand-in for bfworker: records the command line bfd built\n"
             "# (trial, endpoint, token), then waits to be cancelled.\n"
             "f='%s/launch.'$$\n"
             "printf '%%s\\n' \"$@\" > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"\n"
             "exec sleep 100000\n",
             launches);
    write_file(path, text, 0700);
    char cfg[800];
    snprintf(cfg, sizeof cfg, "%s/bfd.yaml", home);
    snprintf(
        text, sizeof text,
        "slots: %d\nheartbeat_timeout: 3600\nthreads_per_slot: 1\nbfworker: %s/fake_worker\n%s\n",
        o.senders, g_dir, o.bfd_yaml);
    write_file(cfg, text, 0600);

    char log[400];
    snprintf(log, sizeof log, "%s/bfd.log", g_dir);
    g_bfd = spawn_bfd(o.bfd, home, log);
    char ep_ctl[400], ep_wk[400], ep_pub[400], sock[400];
    snprintf(ep_ctl, sizeof ep_ctl, "ipc://%s/ctl.sock", home);
    snprintf(ep_wk, sizeof ep_wk, "ipc://%s/worker.sock", home);
    snprintf(ep_pub, sizeof ep_pub, "ipc://%s/pub.sock", home);
    snprintf(sock, sizeof sock, "%s/ctl.sock", home);
    for (int i = 0;; i++) {
        struct stat sb;
        if (stat(sock, &sb) == 0) break;
        if (waitpid(g_bfd, NULL, WNOHANG) == g_bfd) {
            g_bfd = -1;
            die("bfd (%s) exited at start", o.bfd);
        }
        if (i > 200) die("bfd did not create %s within 10 s", sock);
        sleep_s(0.05);
    }

    void *zctx = zmq_ctx_new();
    if (!zctx) die("zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    ctl c = {new_socket(zctx, ZMQ_DEALER, ep_ctl, CALL_TIMEOUT_MS), 0};
    char rtype[PROTO_MAX_TYPE + 1];

    /* the job: one trial per sender */
    size_t cap = 512 + 12 * (size_t)o.senders;
    char *sweep = malloc(cap);
    if (!sweep) die("out of memory");
    size_t w = (size_t)snprintf(sweep, cap,
                                "name: bench-daemon\npipeline: budgetformer\ndevice: cpu\n"
                                "data: {set: wordnet}\nsweep:\n  parameters:\n"
                                "    train.seed: {values: [");
    for (int i = 0; i < o.senders; i++)
        w += (size_t)snprintf(sweep + w, cap - w, "%s%d", i ? ", " : "", i + 1);
    /* the metric must be one the pipeline writes (submit checks); the bench's
     * own points are named bench/vK */
    snprintf(sweep + w, cap - w, "]}\nmetric: {name: train/loss, goal: min}\n");
    json_t *body =
        json_pack("{s:s, s:s, s:s}", "sweep", sweep, "file", "bench-daemon.yaml", "cwd", g_dir);
    if (!body) die("json_pack failed");
    free(sweep);
    json_t *rep = ctl_call(&c, "submit", body, rtype);
    long long job = json_integer_value(json_object_get(rep, "job"));
    json_decref(rep);
    if (job < 1) die("submit: no job id in the reply");

    /* wait until bfd has launched every trial */
    sender *s = calloc((size_t)o.senders, sizeof *s);
    if (!s) die("out of memory");
    double t_launch = bench_now();
    int n = 0;
    while ((n = read_launches(launches, s, o.senders)) < o.senders) {
        if (bench_now() - t_launch > 60 + 0.2 * o.senders)
            die("bfd launched %d of %d trials in time (slots in %s?)", n, o.senders, cfg);
        sleep_s(0.05);
    }
    t_launch = bench_now() - t_launch;
    qsort(s, (size_t)o.senders, sizeof *s, cmp_sender);

    /* the subscriber, synced before anything is sent */
    subscriber u = {0};
    u.sock = new_socket(zctx, ZMQ_SUB, ep_pub, 200);
    u.trial_lo = s[0].trial;
    u.trial_hi = s[o.senders - 1].trial;
    u.last_seq = calloc((size_t)(u.trial_hi - u.trial_lo + 1), sizeof *u.last_seq);
    if (!u.last_seq) die("out of memory");
    u.lat_trial = s[0].trial;
    u.load_points = o.points;
    u.expect_load = o.points * o.senders;
    char sync_topic[64];
    char tok[PROTO_TOKEN_LEN + 1], perr[256];
    if (proto_random_token(tok, perr, sizeof perr) != 0) die("%s", perr);
    snprintf(sync_topic, sizeof sync_topic, "sync/%s", tok);
    if (zmq_setsockopt(u.sock, ZMQ_SUBSCRIBE, "trial/", 6) != 0 ||
        zmq_setsockopt(u.sock, ZMQ_SUBSCRIBE, sync_topic, strlen(sync_topic)) != 0)
        die("zmq_setsockopt(ZMQ_SUBSCRIBE): %s", zmq_strerror(zmq_errno()));
    int synced = 0;
    for (int i = 0; i < 100 && !synced; i++) {
        json_decref(ctl_call(&c, "sync", json_pack("{s:s}", "topic", sync_topic), rtype));
        zmq_pollitem_t it = {u.sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 100) < 0) die("zmq_poll: %s", zmq_strerror(zmq_errno()));
        while (it.revents & ZMQ_POLLIN) {
            proto_msg m = {0};
            proto_code code;
            int rc =
                proto_recv(u.sock, ZMQ_DONTWAIT, PROTO_RECV_TOPIC, &m, &code, perr, sizeof perr);
            if (rc < 0) die("sync: %s", perr);
            if (rc == 1) break;
            if (code == PROTO_OK && strcmp(m.topic, sync_topic) == 0) synced = 1;
            proto_msg_clear(&m);
        }
    }
    if (!synced) die("the sync message never arrived on %s", ep_pub);

    pthread_t sub_th, th[MAX_SENDERS];
    if (o.load) u.expect_load = -1; /* no end of a phase 1 to time */
    if (pthread_create(&sub_th, NULL, subscriber_main, &u) != 0) die("pthread_create failed");
    if (o.load) {
        int bad = run_load(&o, zctx, &u, sub_th, s, job, home, ep_wk, ep_ctl);
        zmq_close(c.sock);
        zmq_close(u.sock);
        zmq_ctx_term(zctx);
        kill(g_bfd, SIGTERM);
        for (int i = 0; i < 300 && waitpid(g_bfd, NULL, WNOHANG) == 0; i++) sleep_s(0.05);
        if (waitpid(g_bfd, NULL, WNOHANG) == 0) {
            kill(g_bfd, SIGKILL);
            waitpid(g_bfd, NULL, 0);
        }
        g_bfd = -1;
        kill_fake_workers(launches);
        if (!o.keep) {
            snprintf(text, sizeof text, "rm -rf '%s'", g_dir);
            if (system(text) != 0) fprintf(stderr, "bench_daemon: could not remove %s\n", g_dir);
        } else {
            fprintf(stderr, "bench_daemon: kept %s\n", g_dir);
        }
        free(s);
        free(u.last_seq);
        free(u.lat_load);
        free(u.lat_idle);
        return bad;
    }

    /* phase 1: every sender at once */
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)o.senders + 1);
    for (int i = 0; i < o.senders; i++) {
        s[i].idx = i, s[i].zctx = zctx, s[i].endpoint = ep_wk, s[i].points = o.points;
        s[i].batch = o.batch, s[i].values = o.values, s[i].start = &start;
        if (pthread_create(&th[i], NULL, sender_main, &s[i]) != 0) die("pthread_create failed");
    }
    double cpu0 = cpu_seconds(g_bfd), self0 = cpu_seconds(getpid());
    pthread_barrier_wait(&start);
    double t0 = bench_now();
    for (int i = 0; i < o.senders; i++) pthread_join(th[i], NULL);
    double t_stored = 0;
    for (int i = 0; i < o.senders; i++) {
        if (s[i].err[0]) die("sender %d (trial %lld): %s", i, (long long)s[i].trial, s[i].err);
        if (s[i].t_done > t_stored) t_stored = s[i].t_done;
    }
    t_stored -= t0;
    long total = o.points * o.senders;
    double idle_since = bench_now();
    long last = -1;
    while (atomic_load(&u.got_load) < total) { /* published: wait for the tail, 5 s at most idle */
        long g = atomic_load(&u.got_load);
        if (g != last) last = g, idle_since = bench_now();
        if (bench_now() - idle_since > 5) break;
        sleep_s(0.001);
    }
    long got_load = atomic_load(&u.got_load);
    double bfd_cpu = cpu_seconds(g_bfd) - cpu0, self_cpu = cpu_seconds(getpid()) - self0;
    double t_pub = got_load == total ? u.t_load_done - t0 : NAN;

    /* phase 2: one sender, one-point batches, paced */
    if (o.lat_points > 0) {
        void *ws = new_socket(zctx, ZMQ_DEALER, ep_wk, CALL_TIMEOUT_MS);
        if (send_points(ws, &s[0], s[0].acked + 1, s[0].acked + o.lat_points, 1,
                        1.0 / o.lat_rate) != 0)
            die("latency sender: %s", s[0].err);
        zmq_close(ws);
        double t = bench_now();
        while (atomic_load(&u.got_lat) < o.lat_points && bench_now() - t < 5) sleep_s(0.001);
    }
    atomic_store(&u.stop, 1);
    pthread_join(sub_th, NULL);
    if (u.err[0]) die("subscriber: %s", u.err);

    /* stored exactly once: count the rows in bfd's database */
    long long rows = stored_rows(home, job);
    long long want_rows = ((long long)total + o.lat_points) * o.values;

    /* stop: cancel the fake workers, then bfd */
    json_decref(ctl_call(&c, "cancel", json_pack("{s:I}", "job", (json_int_t)job), rtype));
    zmq_close(c.sock);
    zmq_close(u.sock);
    zmq_ctx_term(zctx);
    kill(g_bfd, SIGTERM);
    int bst = 0;
    for (int i = 0; i < 300 && waitpid(g_bfd, &bst, WNOHANG) == 0; i++) sleep_s(0.05);
    if (waitpid(g_bfd, &bst, WNOHANG) == 0) {
        kill(g_bfd, SIGKILL);
        waitpid(g_bfd, &bst, 0);
    }
    g_bfd = -1;

    qsort(u.lat_load, u.n_load, sizeof(double), bench_cmp_double);
    qsort(u.lat_idle, u.n_idle, sizeof(double), bench_cmp_double);
    double stored_rate = (double)total / t_stored;
    double pub_rate = (double)got_load / (isnan(t_pub) ? t_stored : t_pub);
    double both_rate = isnan(t_pub) ? NAN : (double)total / fmax(t_stored, t_pub);
    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    int maj, min, pat;
    zmq_version(&maj, &min, &pat);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    char zv[16];
    snprintf(zv, sizeof zv, "%d.%d.%d", maj, min, pat);
    double lat_load50 = pct_ms(u.lat_load, u.n_load, 0.5),
           lat_load99 = pct_ms(u.lat_load, u.n_load, 0.99);
    double lat50 = pct_ms(u.lat_idle, u.n_idle, 0.5), lat99 = pct_ms(u.lat_idle, u.n_idle, 0.99);
    double lat_max = u.n_idle ? 1e3 * u.lat_idle[u.n_idle - 1] : NAN;
    double lat_load_max = u.n_load ? 1e3 * u.lat_load[u.n_load - 1] : NAN;
    if (o.json) {
        json_t *j = json_pack(
            "{s:s, s:{s:s, s:i, s:s, s:s}, s:{s:i, s:I, s:i, s:i, s:i, s:f},"
            " s:{s:I, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:f, s:f, s:f},"
            " s:{s:i, s:I, s:f, s:f, s:f}, s:{s:I, s:I}, s:b}",
            "bench", "daemon", "machine", "cpu", cpu, "cores", (int)ncpu, "zmq", zv, "sqlite",
            sqlite3_libversion(), "config", "senders", o.senders, "points_per_sender",
            (json_int_t)o.points, "batch", o.batch, "values", o.values, "lat_points", o.lat_points,
            "lat_rate", o.lat_rate, "throughput", "points", (json_int_t)total, "stored_s", t_stored,
            "stored_per_s", stored_rate, "published_s", fin(t_pub), "published_per_s", pub_rate,
            "stored_and_published_per_s", fin(both_rate), "published", (json_int_t)got_load,
            "duplicates", (json_int_t)atomic_load(&u.dups), "latency_median_ms", fin(lat_load50),
            "latency_p99_ms", fin(lat_load99), "latency_max_ms", fin(lat_load_max), "latency",
            "points", o.lat_points, "received", (json_int_t)atomic_load(&u.got_lat), "median_ms",
            fin(lat50), "p99_ms", fin(lat99), "max_ms", fin(lat_max), "store", "rows",
            (json_int_t)rows, "expected_rows", (json_int_t)want_rows, "bfd_clean_exit",
            WIFEXITED(bst) && WEXITSTATUS(bst) == 0);
        if (j)
            json_object_set_new(json_object_get(j, "config"), "bfd_yaml", json_string(o.bfd_yaml));
        if (j)
            json_object_set_new(json_object_get(j, "throughput"), "bfd_cpu_s",
                                json_real(fin(bfd_cpu)));
        if (j)
            json_object_set_new(json_object_get(j, "throughput"), "points_per_bfd_cpu_s",
                                json_real(fin((double)total / bfd_cpu)));
        if (j)
            json_object_set_new(json_object_get(j, "throughput"), "bench_cpu_s",
                                json_real(fin(self_cpu)));
        if (!j) die("json_pack failed");
        char *txt = json_dumps(j, JSON_PRESERVE_ORDER | JSON_INDENT(2));
        if (!txt) die("json_dumps failed");
        printf("%s\n", txt);
        free(txt);
        json_decref(j);
    } else {
        printf("bench_daemon: %s, %ld cores, libzmq %d.%d.%d, SQLite %s\n", cpu, ncpu, maj, min,
               pat, sqlite3_libversion());
        printf("config: %d senders x %lld points, batches of %d, %d value%s a point; "
               "launch of %d trials took %.2f s\n\n",
               o.senders, o.points, o.batch, o.values, o.values == 1 ? "" : "s", o.senders,
               t_launch);
        printf("%-44s %14s\n", "throughput (phase 1)", "");
        printf("%-44s %14ld\n", "points sent", total);
        printf("%-44s %14.0f  (%.2f s)\n", "stored (acked) points/s", stored_rate, t_stored);
        printf("%-44s %14.0f  (%ld of %ld received)\n", "published (received by SUB) points/s",
               pub_rate, got_load, total);
        printf("%-44s %14.0f\n", "stored and published points/s", both_rate);
        printf("%-44s %14.2f  (%.0f points per bfd CPU second)\n", "bfd CPU seconds in phase 1",
               bfd_cpu, (double)total / bfd_cpu);
        printf("%-44s %14.2f  (senders and subscriber, same cores)\n",
               "bench CPU seconds in phase 1", self_cpu);
        printf("%-44s %11.2f ms / %.2f ms\n", "latency under this load, median / p99", lat_load50,
               lat_load99);
        printf("\n%-44s\n", "latency (phase 2, 1-point batches)");
        printf("%-44s %14d  at %.0f/s\n", "points", o.lat_points, o.lat_rate);
        printf("%-44s %11.2f ms\n", "median send -> SUB", lat50);
        printf("%-44s %11.2f ms\n", "p99 send -> SUB", lat99);
        printf("%-44s %11.2f ms\n", "max", lat_max);
        printf("\n%-44s %14lld  (expected %lld)\n", "metric rows in the database", rows, want_rows);
        printf("%-44s %14ld\n", "duplicates published", atomic_load(&u.dups));
    }
    int bad = rows != want_rows || got_load != total || atomic_load(&u.dups) != 0;
    if (bad) fprintf(stderr, "bench_daemon: lost or duplicated points (see above)\n");
    if (!o.keep) {
        snprintf(text, sizeof text, "rm -rf '%s'", g_dir);
        if (system(text) != 0) fprintf(stderr, "bench_daemon: could not remove %s\n", g_dir);
    } else {
        fprintf(stderr, "bench_daemon: kept %s\n", g_dir);
    }
    free(s);
    free(u.last_seq);
    free(u.lat_load);
    free(u.lat_idle);
    return bad;
}
