/* link.c — a worker's connection to bfd (link.h): the DEALER hello that
 * brings the trial's config, the thread that streams metrics.jsonl lines and
 * heartbeats, the attempt fence and the final state. */

#include "worker/link/link.h"
#include "common/errbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "protocol/proto.h"

#define ACK_TIMEOUT_S 2.0
#define DONE_WAIT_S 10.0 /* `done` is sent again every ACK_TIMEOUT_S until bfd's ok, this long */
#define BATCH_MAX PROTO_MAX_POINTS
#define BATCH_MAX_BYTES (4u << 20) /* keep a batch well under the body cap */
#define TICK_MS 10

struct link_t {
    void *ctx, *sock;
    void *mon; /* PAIR of the socket monitor while saying hello over tcp:// (else NULL) */
    int64_t trial;
    char token[PROTO_TOKEN_LEN + 1];
    int attempt;
    char *config;
    double heartbeat;
    /* shared with the thread */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    int finish; /* main asks the thread to flush and end */
    double finish_deadline;
    char done_state[16];
    int done_code;
    char done_msg[1024];
    int result; /* thread: 0 all acked, -1 not */
    char result_msg[256];
    volatile sig_atomic_t *stop;
    char path[4096];
    /* thread state */
    int fd;
    int64_t lines; /* complete lines seen */
    int64_t *offs; /* offs[i]: start of line i+1; offs[lines]: end of the last line */
    size_t cap_offs;
    int64_t acked;     /* highest seq bfd has stored */
    int64_t first_seq; /* the first line this attempt writes (earlier attempts' before it) */
    int inflight;
    double inflight_deadline;
    double last_hb;
    double last_fence; /* when trials/ID/attempt was last read */
    char fence[4200];  /* its path */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int send_msg(link_t *l, const char *type, json_t *body) {
    char err[256];
    json_object_set_new(body, "trial", json_integer(l->trial));
    json_object_set_new(body, "token", json_string(l->token));
    return proto_send(l->sock, NULL, NULL, type, body, ZMQ_DONTWAIT, err, sizeof err);
}

/* Reads one event off the monitor: its value (the ZAP status, e.g. 400)
 * when it is a failed authentication, else 0. */
static int monitor_auth_failed(void *mon) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    int status = 0;
    if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) == 6) {
        uint16_t ev;
        uint32_t val;
        memcpy(&ev, zmq_msg_data(&m), 2);
        memcpy(&val, (char *)zmq_msg_data(&m) + 2, 4);
        if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) status = val ? (int)val : 1;
    }
    /* the event's second frame: the endpoint */
    while (zmq_msg_more(&m)) {
        zmq_msg_close(&m);
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) < 0) break;
    }
    zmq_msg_close(&m);
    return status;
}

static void stop_monitor(link_t *l) {
    if (!l->mon) return;
    zmq_socket_monitor(l->sock, NULL, 0);
    zmq_close(l->mon);
    l->mon = NULL;
}

int link_open(link_t **out, const link_opts *o, char *err, size_t errlen) {
    int rc_refused = -1;
    *out = NULL;
    if (strlen(o->token) != PROTO_TOKEN_LEN)
        return bf_fail(err, errlen, "--token must be %d hex digits", PROTO_TOKEN_LEN);
    link_t *l = calloc(1, sizeof *l);
    if (!l) return bf_fail(err, errlen, "out of memory");
    l->fd = -1;
    l->trial = o->trial;
    l->attempt = o->attempt;
    l->heartbeat = 1.0;
    memcpy(l->token, o->token, PROTO_TOKEN_LEN + 1);
    pthread_mutex_init(&l->mu, NULL);
    l->ctx = zmq_ctx_new();
    if (!l->ctx) {
        bf_fail(err, errlen, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
        goto bad;
    }
    l->sock = zmq_socket(l->ctx, ZMQ_DEALER);
    if (!l->sock) {
        bf_fail(err, errlen, "zmq_socket(DEALER): %s", zmq_strerror(zmq_errno()));
        goto bad;
    }
    int zero = 0, one = 1, ivl = 100, ivl_max = 1000;
    int64_t maxsz = PROTO_MAX_FRAME;
    if (zmq_setsockopt(l->sock, ZMQ_LINGER, &zero, sizeof zero) ||
        zmq_setsockopt(l->sock, ZMQ_IMMEDIATE, &one, sizeof one) ||
        zmq_setsockopt(l->sock, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl) ||
        zmq_setsockopt(l->sock, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max) ||
        zmq_setsockopt(l->sock, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz)) {
        bf_fail(err, errlen, "zmq_setsockopt: %s", zmq_strerror(zmq_errno()));
        goto bad;
    }
    if (strncmp(o->endpoint, "tcp://", 6) == 0) {
        if (proto_curve_client(l->sock, err, errlen)) goto bad;
        /* a CURVE key bfd's ZAP handler refuses shows only as a handshake
         * event: watch for it, so the worker says so rather than time out */
        char mep[64];
        snprintf(mep, sizeof mep, "inproc://bf-link-monitor-%p", (void *)l);
        if (zmq_socket_monitor(l->sock, mep, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0 ||
            !(l->mon = zmq_socket(l->ctx, ZMQ_PAIR)) || zmq_connect(l->mon, mep) != 0) {
            bf_fail(err, errlen, "zmq_socket_monitor: %s", zmq_strerror(zmq_errno()));
            goto bad;
        }
    }
    if (zmq_connect(l->sock, o->endpoint) != 0) {
        bf_fail(err, errlen, "zmq_connect(%s): %s", o->endpoint, zmq_strerror(zmq_errno()));
        goto bad;
    }
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    double t0 = now_s(), last_send = -1e9;
    for (;;) {
        double t = now_s();
        if (t - t0 > o->hello_timeout) {
            bf_fail(err, errlen, "no answer from bfd at %s within %.0f s", o->endpoint,
                    o->hello_timeout);
            goto bad;
        }
        if (t - last_send >= ACK_TIMEOUT_S) {
            json_t *b = json_pack("{s:i, s:i, s:s}", "attempt", o->attempt, "pid", (int)getpid(),
                                  "host", host);
            if (send_msg(l, "hello", b) == 0) last_send = t;
            json_decref(b);
        }
        zmq_pollitem_t it[2] = {{l->sock, 0, ZMQ_POLLIN, 0}, {l->mon, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(it, l->mon ? 2 : 1, 100) < 0 && zmq_errno() != EINTR) {
            bf_fail(err, errlen, "zmq_poll: %s", zmq_strerror(zmq_errno()));
            goto bad;
        }
        int status = l->mon && (it[1].revents & ZMQ_POLLIN) ? monitor_auth_failed(l->mon) : 0;
        if (status) {
            const char *kp = getenv("BF_CURVE_KEY");
            bf_fail(err, errlen,
                    "bfd at %s refused this worker's CURVE key (BF_CURVE_KEY=%s, ZAP status "
                    "%d): its public key is not in bfd's curve/clients/ (bfd keygen --client "
                    "NAME there, or copy NAME.pub into it)",
                    o->endpoint, kp ? kp : "", status);
            rc_refused = -2;
            goto bad;
        }
        if (!(it[0].revents & ZMQ_POLLIN)) continue;
        proto_msg m;
        memset(&m, 0, sizeof m);
        proto_code code;
        char e2[512];
        int rc = proto_recv(l->sock, ZMQ_DONTWAIT, 0, &m, &code, e2, sizeof e2);
        if (rc != 0 || code != PROTO_OK) {
            proto_msg_clear(&m);
            continue;
        }
        if (strcmp(m.type, "error") == 0) {
            json_t *c = json_object_get(m.body, "code"), *msg = json_object_get(m.body, "message");
            bf_fail(err, errlen, "bfd refused hello: %s: %s",
                    json_is_string(c) ? json_string_value(c) : "?",
                    json_is_string(msg) ? json_string_value(msg) : "");
            proto_msg_clear(&m);
            goto bad;
        }
        if (strcmp(m.type, "config") != 0) {
            proto_msg_clear(&m);
            continue;
        }
        const char *cfg;
        long long acked, attempt;
        double hb;
        if (proto_get_str(m.body, "config", 1, PROTO_MAX_TEXT, &cfg, e2, sizeof e2) ||
            proto_get_int(m.body, "acked", 1, 0, PROTO_MAX_INT, 0, &acked, e2, sizeof e2) ||
            proto_get_int(m.body, "attempt", 0, 1, PROTO_MAX_INT, o->attempt, &attempt, e2,
                          sizeof e2) ||
            proto_get_num(m.body, "heartbeat", 0, 1.0, &hb, e2, sizeof e2)) {
            bf_fail(err, errlen, "bad config reply from bfd: %s", e2);
            proto_msg_clear(&m);
            goto bad;
        }
        l->config = strdup(cfg);
        l->acked = acked;
        l->attempt = (int)attempt;
        l->heartbeat = hb >= 0.05 && hb <= 3600 ? hb : 1.0;
        proto_msg_clear(&m);
        if (!l->config) {
            bf_fail(err, errlen, "out of memory");
            goto bad;
        }
        break;
    }
    stop_monitor(l);
    *out = l;
    return 0;
bad:
    link_destroy(&l);
    return rc_refused;
}

const char *link_config(const link_t *l) { return l->config; }

/* Records the complete lines appended to the file since the last call. */
static void scan_file(link_t *l) {
    if (l->fd < 0) {
        l->fd = open(l->path, O_RDONLY | O_CLOEXEC);
        if (l->fd < 0) return;
    }
    int64_t pos = l->lines ? l->offs[l->lines] : 0;
    if (l->cap_offs == 0) {
        l->cap_offs = 1024;
        l->offs = calloc(l->cap_offs, sizeof *l->offs);
        if (!l->offs) {
            l->cap_offs = 0;
            return;
        }
    }
    char buf[65536];
    for (;;) {
        ssize_t n = pread(l->fd, buf, sizeof buf, pos);
        if (n <= 0) return;
        int any = 0;
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] != '\n') continue;
            if ((size_t)l->lines + 2 > l->cap_offs) {
                int64_t *no = realloc(l->offs, 2 * l->cap_offs * sizeof *no);
                if (!no) return;
                l->offs = no;
                l->cap_offs *= 2;
            }
            l->offs[++l->lines] = pos + i + 1;
            any = 1;
        }
        /* a partial line stays for the next scan */
        if (!any) return;
        pos = l->offs[l->lines];
    }
}

static void send_batch(link_t *l) {
    int64_t first = l->acked + 1, last = l->lines;
    if (first > last) return;
    if (last - first + 1 > BATCH_MAX) last = first + BATCH_MAX - 1;
    json_t *arr = json_array();
    size_t bytes = 0;
    for (int64_t s = first; s <= last; s++) {
        int64_t a = l->offs[s - 1], b = l->offs[s];
        size_t len = (size_t)(b - a);
        if (bytes + len > BATCH_MAX_BYTES && s > first) break;
        char small[8192];
        char *line = len <= sizeof small ? small : malloc(len);
        proto_point p;
        json_t *holder = NULL;
        int ok = line && pread(l->fd, line, len, a) == (ssize_t)len &&
                 proto_parse_jsonl_line(line, len, s, &p, &holder) == 0;
        if (!ok) { /* unreadable line: an empty point keeps the numbering */
            memset(&p, 0, offsetof(proto_point, name));
            p.seq = s;
        }
        json_array_append_new(arr, proto_point_json(&p, 1));
        json_decref(holder);
        if (line != small) free(line);
        bytes += len;
    }
    json_t *body = json_pack("{s:o, s:I}", "points", arr, "first_seq", (json_int_t)l->first_seq);
    if (send_msg(l, "metrics", body) == 0) {
        l->inflight = 1;
        l->inflight_deadline = now_s() + ACK_TIMEOUT_S;
    }
    json_decref(body);
}

static void handle_incoming(link_t *l) {
    for (;;) {
        proto_msg m;
        memset(&m, 0, sizeof m);
        proto_code code;
        char err[256];
        int rc = proto_recv(l->sock, ZMQ_DONTWAIT, 0, &m, &code, err, sizeof err);
        if (rc != 0) {
            proto_msg_clear(&m);
            return;
        }
        if (code == PROTO_OK) {
            if (strcmp(m.type, "ack") == 0) {
                long long seq;
                if (proto_get_int(m.body, "seq", 1, 0, PROTO_MAX_INT, 0, &seq, err, sizeof err) ==
                    0) {
                    l->acked = seq; /* may go down: bfd asks for a resend from there */
                    l->inflight = 0;
                }
            } else if (strcmp(m.type, "stop") == 0) {
                if (l->stop) *l->stop = 1;
            } else if (strcmp(m.type, "error") == 0) {
                json_t *c = json_object_get(m.body, "code");
                if (json_is_string(c) && strcmp(json_string_value(c), "bad_token") == 0) {
                    /* superseded or cancelled: checkpoint and end */
                    if (l->stop) *l->stop = 1;
                }
                l->inflight = 0;
            }
        }
        proto_msg_clear(&m);
    }
}

/* The fence (PROTO_ATTEMPT_FILE beside metrics.jsonl, written by bfd when
 * it starts an attempt): when it names a newer attempt than this one, bfd
 * has failed this one over (it could not hear it: a partition, a node it
 * took for dead) and another worker owns the trial's folder now. This
 * process ends at once, writing nothing more: no metrics line, no
 * checkpoint over the newer attempt's. */
static void check_fence(link_t *l) {
    FILE *f = fopen(l->fence, "r");
    if (!f) return;
    int a = 0;
    int n = fscanf(f, "%d", &a);
    fclose(f);
    if (n == 1 && a > l->attempt) {
        fprintf(stderr,
                "bfworker run: trial %lld attempt %d is stale: bfd started attempt %d (%s); "
                "exiting without writing\n",
                (long long)l->trial, l->attempt, a, l->fence);
        _exit(PROTO_EXIT_STALE);
    }
}

static void *link_thread(void *arg) {
    link_t *l = arg;
    int finishing = 0, done_sent = 0;
    double done_deadline = 0, last_done = 0;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        int fin = l->finish;
        double fin_deadline = l->finish_deadline;
        pthread_mutex_unlock(&l->mu);
        double t = now_s();
        if (t - l->last_fence >= 0.25) {
            l->last_fence = t;
            check_fence(l);
        }
        scan_file(l);
        if (fin && !finishing) finishing = 1;
        if (l->inflight && t > l->inflight_deadline) l->inflight = 0; /* resend from acked+1 */
        if (!l->inflight && !done_sent) send_batch(l);
        if (t - l->last_hb >= l->heartbeat) {
            json_t *b = json_object();
            if (send_msg(l, "heartbeat", b) == 0) l->last_hb = t;
            json_decref(b);
        }
        if (finishing && !done_sent && (l->acked >= l->lines || t > fin_deadline)) {
            l->result = l->acked >= l->lines ? 0 : -1;
            if (l->result)
                snprintf(l->result_msg, sizeof l->result_msg,
                         "%lld of %lld metric lines not acknowledged by bfd",
                         (long long)(l->lines - l->acked), (long long)l->lines);
            done_sent = 1;
            done_deadline = t + DONE_WAIT_S;
            last_done = -1e9;
        }
        /* `done` again until bfd says ok: a lossy network, or bfd busy or
         * restarting, loses a message; linger 0 drops what is unsent at close */
        if (done_sent && t - last_done >= ACK_TIMEOUT_S) {
            json_t *b = json_pack("{s:s, s:i, s:s}", "state", l->done_state, "exit_code",
                                  l->done_code, "message", l->done_msg);
            if (send_msg(l, "done", b) == 0) last_done = t;
            json_decref(b);
        }
        if (done_sent && t > done_deadline) break;
        zmq_pollitem_t it = {l->sock, 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(&it, 1, TICK_MS);
        if (rc < 0 && zmq_errno() != EINTR) break;
        if (it.revents & ZMQ_POLLIN) {
            /* done's reply ends the wait early */
            proto_msg m;
            memset(&m, 0, sizeof m);
            proto_code code;
            char err[256];
            if (done_sent) {
                int r2 = proto_recv(l->sock, ZMQ_DONTWAIT, 0, &m, &code, err, sizeof err);
                int ok = r2 == 0 && code == PROTO_OK && strcmp(m.type, "ok") == 0;
                proto_msg_clear(&m);
                if (ok) break;
            } else {
                handle_incoming(l);
            }
        }
    }
    return NULL;
}

int link_start(link_t *l, const char *metrics_path, volatile sig_atomic_t *stop, char *err,
               size_t errlen) {
    snprintf(l->path, sizeof l->path, "%s", metrics_path);
    const char *slash = strrchr(metrics_path, '/');
    int dlen = slash ? (int)(slash - metrics_path) : 1;
    snprintf(l->fence, sizeof l->fence, "%.*s/" PROTO_ATTEMPT_FILE, dlen,
             slash ? metrics_path : ".");
    l->last_fence = -1e9;
    l->stop = stop;
    l->last_hb = -1e9;
    /* the lines already there are earlier attempts' (a partial last one is
     * not counted, and metrics_open cuts it): bfd stores them as such */
    scan_file(l);
    l->first_seq = l->lines + 1;
    if (pthread_create(&l->thread, NULL, link_thread, l) != 0)
        return bf_fail(err, errlen, "pthread_create: %s", strerror(errno));
    l->thread_started = 1;
    return 0;
}

int link_finish(link_t *l, const char *state, int exit_code, const char *message,
                double flush_timeout, char *err, size_t errlen) {
    if (!l->thread_started) return 0;
    pthread_mutex_lock(&l->mu);
    snprintf(l->done_state, sizeof l->done_state, "%s", state);
    l->done_code = exit_code;
    snprintf(l->done_msg, sizeof l->done_msg, "%s", message ? message : "");
    l->finish_deadline = now_s() + flush_timeout;
    l->finish = 1;
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    l->thread_started = 0;
    if (l->result) return bf_fail(err, errlen, "%s", l->result_msg);
    return 0;
}

void link_destroy(link_t **lp) {
    if (!lp || !*lp) return;
    link_t *l = *lp;
    if (l->thread_started) {
        char err[64];
        link_finish(l, "failed", 1, "worker ended", 0, err, sizeof err);
    }
    if (l->sock) stop_monitor(l);
    if (l->sock) zmq_close(l->sock);
    if (l->ctx) zmq_ctx_term(l->ctx);
    if (l->fd >= 0) close(l->fd);
    free(l->offs);
    free(l->config);
    pthread_mutex_destroy(&l->mu);
    free(l);
    *lp = NULL;
}
