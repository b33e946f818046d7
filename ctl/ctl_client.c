/* ctl_client — bfctl's side of the control protocol (see ctl_client.h): the
 * connection, request/reply, the PUB subscription; then the helpers every
 * command shares to make a request and read its reply. */
#include "ctl/ctl_client.h"
#include "common/errbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "protocol/proto.h"

struct ctl_conn {
    void *ctx, *req, *sub;
    char ep[1200], pub_ep[1200];
    long long next_req;
    int timeout_ms;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int setup_socket(ctl_conn *c, void *s, const char *ep, char *err, size_t errlen) {
    int zero = 0;
    int64_t maxsz = PROTO_MAX_FRAME;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz);
    if (strncmp(ep, "tcp://", 6) == 0 && proto_curve_client(s, err, errlen)) return -1;
    if (zmq_connect(s, ep) != 0)
        return bf_fail(err, errlen, "zmq_connect(%s): %s", ep, zmq_strerror(zmq_errno()));
    (void)c;
    return 0;
}

/* 1 when a process listens on the unix socket at path (ZeroMQ's ipc://
 * transport), 0 when the file is a leftover (connection refused), -1 with
 * errno EACCES when this user may not connect. Anything else counts as
 * listening and is left to ZeroMQ to report. */
static int socket_listens(const char *path) {
    struct sockaddr_un a;
    if (strlen(path) >= sizeof a.sun_path) return 1;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) return 1;
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    int e = errno;
    close(fd);
    if (rc != 0 && (e == EACCES || e == EPERM)) {
        errno = e;
        return -1;
    }
    return rc == 0 || e != ECONNREFUSED;
}

/* BF_TIMEOUT: seconds to wait for each reply, a number in (0, 86400];
 * default 10. Anything else is refused rather than silently replaced. */
static int read_timeout(int *ms, char *err, size_t errlen) {
    const char *to = getenv("BF_TIMEOUT");
    *ms = 10000;
    if (!to) return 0;
    char *end;
    errno = 0;
    double t = strtod(to, &end);
    while (end && (*end == ' ' || *end == '\t')) end++;
    if (end == to || *end || errno || !(t > 0 && t <= 86400))
        return bf_fail(err, errlen,
                       "BF_TIMEOUT='%.64s' is not valid: give the seconds to wait for bfd's "
                       "replies, a number in (0, 86400] (default 10)",
                       to);
    *ms = t * 1000 < 1 ? 1 : (int)(t * 1000);
    return 0;
}

int ctl_connect(ctl_conn **out, char *err, size_t errlen) {
    *out = NULL;
    ctl_conn *c = calloc(1, sizeof *c);
    if (!c) return bf_fail(err, errlen, "out of memory");
    c->next_req = 1;
    if (read_timeout(&c->timeout_ms, err, errlen)) {
        free(c);
        return -1;
    }
    const char *ep = getenv("BF_ENDPOINT");
    if (ep && *ep) {
        snprintf(c->ep, sizeof c->ep, "%s", ep);
        const char *colon = strrchr(ep, ':');
        if (strncmp(ep, "tcp://", 6) == 0 && colon) {
            snprintf(c->pub_ep, sizeof c->pub_ep, "%.*s:%ld", (int)(colon - ep), ep,
                     atol(colon + 1) + 2);
        } else if (strncmp(ep, "ipc://", 6) == 0) {
            snprintf(c->pub_ep, sizeof c->pub_ep, "%s", ep);
            char *slash = strrchr(c->pub_ep, '/');
            if (slash)
                snprintf(slash + 1, sizeof c->pub_ep - (size_t)(slash + 1 - c->pub_ep), "pub.sock");
        }
    } else {
        const char *home = getenv("BF_HOME");
        char hb[1024];
        if (!home || !*home) {
            const char *h = getenv("HOME");
            snprintf(hb, sizeof hb, "%s/.bf", h ? h : ".");
            home = hb;
        }
        char path[1100];
        snprintf(path, sizeof path, "%s/ctl.sock", home);
        struct stat sb;
        int listens = 1, st_rc = stat(path, &sb), st_err = errno;
        if (st_rc != 0 && st_err != EACCES) {
            bf_fail(err, errlen, "bfd is not running (no socket at %s); start it with: bfd%s%s",
                    path, getenv("BF_HOME") ? " --home " : "", getenv("BF_HOME") ? home : "");
            free(c);
            return -1;
        }
        if (st_rc != 0 || (listens = socket_listens(path)) < 0) {
            bf_fail(err, errlen,
                    "permission denied on %s (uid %d): bfd's home is reachable only by the user "
                    "who runs it; run bfctl as that user, or set BF_HOME to your own bfd's home",
                    path, (int)getuid());
            free(c);
            return -1;
        }
        if (!listens) {
            bf_fail(err, errlen,
                    "bfd is not running (%s is left from an earlier bfd, nothing listens on it); "
                    "start it with: bfd%s%s",
                    path, getenv("BF_HOME") ? " --home " : "", getenv("BF_HOME") ? home : "");
            free(c);
            return -1;
        }
        snprintf(c->ep, sizeof c->ep, "ipc://%s", path);
        snprintf(c->pub_ep, sizeof c->pub_ep, "ipc://%s/pub.sock", home);
    }
    c->ctx = zmq_ctx_new();
    if (!c->ctx) {
        free(c);
        return bf_fail(err, errlen, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
    }
    c->req = zmq_socket(c->ctx, ZMQ_DEALER);
    if (!c->req || setup_socket(c, c->req, c->ep, err, errlen)) {
        if (!c->req) bf_fail(err, errlen, "zmq_socket: %s", zmq_strerror(zmq_errno()));
        ctl_close(&c);
        return -1;
    }
    *out = c;
    return 0;
}

void ctl_close(ctl_conn **cp) {
    if (!cp || !*cp) return;
    ctl_conn *c = *cp;
    if (c->req) zmq_close(c->req);
    if (c->sub) zmq_close(c->sub);
    if (c->ctx) zmq_ctx_term(c->ctx);
    free(c);
    *cp = NULL;
}

int ctl_call(ctl_conn *c, const char *type, json_t *body, json_t **reply, char *rtype, char *err,
             size_t errlen) {
    *reply = NULL;
    proto_msg route;
    memset(&route, 0, sizeof route);
    route.has_req = 1;
    route.req = c->next_req++;
    json_t *b = body ? json_incref(body) : json_object();
    char e2[512];
    int rc = proto_send(c->req, &route, NULL, type, b, 0, e2, sizeof e2);
    json_decref(b);
    if (rc) return bf_fail(err, errlen, "sending %s to bfd at %s: %s", type, c->ep, e2);
    double deadline = now_s() + c->timeout_ms / 1000.0;
    for (;;) {
        int left = (int)((deadline - now_s()) * 1000);
        if (left <= 0)
            return bf_fail(err, errlen,
                           "bfd is not responding at %s (no reply to %s within %.0f s; is it "
                           "running? BF_TIMEOUT sets the wait)",
                           c->ep, type, c->timeout_ms / 1000.0);
        zmq_pollitem_t it = {c->req, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, left) < 0) {
            if (zmq_errno() == EINTR) continue;
            return bf_fail(err, errlen, "zmq_poll: %s", zmq_strerror(zmq_errno()));
        }
        if (!(it.revents & ZMQ_POLLIN)) continue;
        proto_msg m;
        memset(&m, 0, sizeof m);
        proto_code code;
        rc = proto_recv(c->req, ZMQ_DONTWAIT, 0, &m, &code, e2, sizeof e2);
        if (rc < 0) return bf_fail(err, errlen, "%s", e2);
        if (rc == 1) continue;
        if (code != PROTO_OK) {
            proto_msg_clear(&m);
            return bf_fail(err, errlen, "bad reply from bfd: %s", e2);
        }
        if (!m.has_req || m.req != route.req) { /* a late reply to an earlier request */
            proto_msg_clear(&m);
            continue;
        }
        if (rtype) snprintf(rtype, PROTO_MAX_TYPE + 1, "%s", m.type);
        *reply = m.body;
        m.body = NULL;
        int is_err = strcmp(m.type, "error") == 0;
        proto_msg_clear(&m);
        if (is_err) {
            json_t *cd = json_object_get(*reply, "code"), *ms = json_object_get(*reply, "message");
            bf_fail(err, errlen, "%s: %s", json_is_string(cd) ? json_string_value(cd) : "error",
                    json_is_string(ms) ? json_string_value(ms) : "");
            return 1;
        }
        return 0;
    }
}

int ctl_subscribe(ctl_conn *c, const char *const *topics, int n, char *err, size_t errlen) {
    if (!c->pub_ep[0]) return bf_fail(err, errlen, "no PUB endpoint known for %s", c->ep);
    c->sub = zmq_socket(c->ctx, ZMQ_SUB);
    if (!c->sub) return bf_fail(err, errlen, "zmq_socket(SUB): %s", zmq_strerror(zmq_errno()));
    if (setup_socket(c, c->sub, c->pub_ep, err, errlen)) return -1;
    char sync[64], tok[PROTO_TOKEN_LEN + 1];
    if (proto_random_token(tok, err, errlen)) return -1;
    snprintf(sync, sizeof sync, "sync/%.16s", tok);
    for (int i = 0; i <= n; i++) {
        const char *t = i < n ? topics[i] : sync;
        if (zmq_setsockopt(c->sub, ZMQ_SUBSCRIBE, t, strlen(t)) != 0)
            return bf_fail(err, errlen, "zmq_setsockopt(SUBSCRIBE %s): %s", t,
                           zmq_strerror(zmq_errno()));
    }
    /* ask for the sync message until it arrives: then the subscriptions are in place */
    double deadline = now_s() + c->timeout_ms / 1000.0;
    while (now_s() < deadline) {
        json_t *reply;
        json_t *b = json_pack("{s:s}", "topic", sync);
        int rc = ctl_call(c, "sync", b, &reply, NULL, err, errlen);
        json_decref(b);
        json_decref(reply);
        if (rc) return -1;
        double until = now_s() + 0.1;
        while (now_s() < until) {
            char topic[PROTO_MAX_TOPIC + 1], type[PROTO_MAX_TYPE + 1];
            json_t *body;
            int r = ctl_next_pub(c, 20, topic, type, &body, err, errlen);
            if (r < 0) return -1;
            if (r == 0) {
                json_decref(body);
                if (strcmp(topic, sync) == 0) return 0;
            }
        }
    }
    return bf_fail(err, errlen, "no sync message from bfd's PUB socket at %s", c->pub_ep);
}

int ctl_next_pub(ctl_conn *c, int timeout_ms, char *topic, char *type, json_t **body, char *err,
                 size_t errlen) {
    *body = NULL;
    zmq_pollitem_t it = {c->sub, 0, ZMQ_POLLIN, 0};
    int p = zmq_poll(&it, 1, timeout_ms);
    if (p < 0) {
        if (zmq_errno() == EINTR) return 1;
        return bf_fail(err, errlen, "zmq_poll: %s", zmq_strerror(zmq_errno()));
    }
    if (p == 0) return 1;
    proto_msg m;
    memset(&m, 0, sizeof m);
    proto_code code;
    int rc = proto_recv(c->sub, ZMQ_DONTWAIT, PROTO_RECV_TOPIC, &m, &code, err, errlen);
    if (rc) {
        proto_msg_clear(&m);
        return rc;
    }
    if (code != PROTO_OK) {
        proto_msg_clear(&m);
        return 1;
    }
    snprintf(topic, PROTO_MAX_TOPIC + 1, "%s", m.topic);
    snprintf(type, PROTO_MAX_TYPE + 1, "%s", m.type);
    *body = m.body;
    m.body = NULL;
    proto_msg_clear(&m);
    return 0;
}

/* ------------------------------------------- what the commands share */

int ctl_connect_or_say(ctl_conn **c) {
    char err[2048];
    if (ctl_connect(c, err, sizeof err)) {
        fprintf(stderr, "bfctl: %s\n", err);
        return -1;
    }
    return 0;
}

/* One request; prints bfd's error itself. Returns 0 with *reply, else 1. */
int ctl_request(ctl_conn *c, const char *type, json_t *body, json_t **reply) {
    char err[4096];
    int rc = ctl_call(c, type, body, reply, NULL, err, sizeof err);
    json_decref(body);
    if (rc == 0) return 0;
    fprintf(stderr, "bfctl: %s\n", err);
    if (rc == 1) {
        json_t *errs = json_object_get(*reply, "errors");
        size_t i;
        json_t *e;
        json_array_foreach(errs, i, e) if (json_is_string(e))
            fprintf(stderr, "%s\n", json_string_value(e));
    }
    json_decref(*reply);
    *reply = NULL;
    return 1;
}

void ctl_print_json(json_t *j) {
    char *t = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (t) printf("%s\n", t);
    free(t);
}

long long ctl_jint(json_t *o, const char *k) {
    return (long long)json_integer_value(json_object_get(o, k));
}
const char *ctl_jstr(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

int ctl_terminal_state(const char *state) {
    return !strcmp(state, "COMPLETED") || !strcmp(state, "FAILED") || !strcmp(state, "CANCELLED") ||
           !strcmp(state, "STOPPED");
}

/* wait status of a job: 0 not done, 1 done ok, 2 done with failures, -1 error */
int ctl_job_done(ctl_conn *c, long long job) {
    json_t *r;
    if (ctl_request(c, "wait", json_pack("{s:I}", "job", (json_int_t)job), &r)) return -1;
    int done = json_is_true(json_object_get(r, "done"));
    int ok = json_is_true(json_object_get(r, "ok"));
    json_decref(r);
    return done ? (ok ? 1 : 2) : 0;
}

/* One request, bfd's error printed as "bfctl: ..." (no per-field list, as
 * ctl_request gives); a NULL body is an allocation failure. Returns 0 with
 * *reply, else -1 with *reply NULL. */
int ctl_call_or_say(ctl_conn *c, const char *type, json_t *body, json_t **reply) {
    char err[4096];
    if (!body) {
        fprintf(stderr, "bfctl: out of memory\n");
        return -1;
    }
    int rc = ctl_call(c, type, body, reply, NULL, err, sizeof err);
    json_decref(body);
    if (rc == 0) return 0;
    if (rc == 1) json_decref(*reply);
    *reply = NULL;
    fprintf(stderr, "bfctl: %s\n", err);
    return -1;
}

int ctl_request_pages(ctl_conn *c, const char *type, json_t *body, const char *key,
                      json_t **reply) {
    *reply = NULL;
    json_t *all = NULL;
    for (;;) {
        json_t *r;
        if (ctl_request(c, type, json_deep_copy(body), &r)) {
            json_decref(all);
            json_decref(body);
            return 1;
        }
        int more = json_is_true(json_object_get(r, "more"));
        json_t *last = json_object_get(r, "last");
        if (more && !json_is_integer(last)) more = 0; /* an older bfd: one page */
        if (more) json_object_set(body, "after", last);
        if (!all) {
            all = r;
        } else {
            json_array_extend(json_object_get(all, key), json_object_get(r, key));
            json_decref(r);
        }
        if (!more) break;
    }
    json_object_del(all, "last");
    json_object_del(all, "more");
    json_decref(body);
    *reply = all;
    return 0;
}
