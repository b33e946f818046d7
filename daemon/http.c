/* http.c — the dashboard server (see http.h): the token, the listener,
 * routing, the pages, the forwarding of actions and live questions to the
 * loop as bfctl requests, and the Server-Sent Events of a job. Store reads
 * are http_api.c's. Nothing here touches the loop's store handle, run table
 * or sockets. */
#include "daemon/http.h"
#include "common/errbuf.h"
#include "common/input_path.h"
#include "daemon/http_api.h"
#include "daemon/http_assets.h"
#include "jobs/sweep.h"
#include "protocol/proto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define TOKEN_HEX 48           /* 24 random bytes */
#define MAX_UPLOAD 65536       /* bytes of a request body read (and ignored) */
#define LOOP_TIMEOUT_MS 10000  /* wait for the loop's reply to a forwarded request */
#define SSE_BUF (1u << 20)     /* one poll's text at most */
#define SSE_POLL_NS 250000000L /* between two looks at the store */
#define SSE_KEEPALIVE_POLLS 40 /* a comment after this many empty looks (10 s) */
#define COOKIE "bf_token"

struct http {
    struct MHD_Daemon *mhd;
    int fd;
    char token[TOKEN_HEX + 1];
    char home[1024], url_path[1100], url[300];
    prom *prom; /* borrowed */
    sqlite3 *db;
    pthread_mutex_t db_mu; /* one request's reads at a time on db */
    void *zctx, *dealer;
    pthread_mutex_t loop_mu; /* one forwarded request at a time on dealer */
    long long next_req;
    volatile int stopping;
    int tls;                  /* serving HTTPS */
    char *tls_cert, *tls_key; /* the PEM text handed to libmicrohttpd (kept while it runs) */
    atomic_int starting;      /* MHD_start_daemon runs: its messages go to mhd_err */
    char mhd_err[512];        /* libmicrohttpd's last message while starting */
};

/* ------------------------------------------------------------------ token */

/* home/http.token, read, or made (0600) on the first start. */
static int load_token(http *h, char *err, size_t errlen) {
    char p[1100];
    snprintf(p, sizeof p, "%s/http.token", h->home);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        struct stat sb;
        ssize_t n = read(fd, h->token, TOKEN_HEX);
        int open_to_others = fstat(fd, &sb) == 0 && (sb.st_mode & 077);
        close(fd);
        h->token[n > 0 ? n : 0] = '\0';
        if (n != TOKEN_HEX || strspn(h->token, "0123456789abcdef") != TOKEN_HEX)
            return bf_fail(err, errlen,
                           "http: %s is not a token of %d hex digits (remove it: bfd makes a new "
                           "one)",
                           p, TOKEN_HEX);
        if (open_to_others && chmod(p, 0600) != 0)
            return bf_fail(err, errlen, "http: %s is open to others and chmod 0600 failed: %s", p,
                           strerror(errno));
        return 0;
    }
    unsigned char raw[TOKEN_HEX / 2];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return bf_fail(err, errlen, "http: getrandom: %s", strerror(errno));
    for (size_t i = 0; i < sizeof raw; i++) snprintf(h->token + 2 * i, 3, "%02x", raw[i]);
    fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return bf_fail(err, errlen, "http: cannot create %s: %s", p, strerror(errno));
    char line[TOKEN_HEX + 2];
    int n = snprintf(line, sizeof line, "%s\n", h->token);
    int ok = write(fd, line, (size_t)n) == n;
    close(fd);
    return ok ? 0 : bf_fail(err, errlen, "http: short write to %s", p);
}

/* Whether s is the token, in time that does not depend on where it differs. */
static int token_ok(const http *h, const char *s) {
    if (!s || strlen(s) != TOKEN_HEX) return 0;
    unsigned char diff = 0;
    for (int i = 0; i < TOKEN_HEX; i++) diff |= (unsigned char)(s[i] ^ h->token[i]);
    return diff == 0;
}

enum { AUTH_NONE, AUTH_COOKIE, AUTH_QUERY, AUTH_HEADER };

/* How the request proved it knows the token (AUTH_NONE: it did not). */
static int auth_of(const http *h, struct MHD_Connection *c) {
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (a && !strncmp(a, "Bearer ", 7) && token_ok(h, a + 7)) return AUTH_HEADER;
    if (token_ok(h, MHD_lookup_connection_value(c, MHD_COOKIE_KIND, COOKIE))) return AUTH_COOKIE;
    if (token_ok(h, MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token")))
        return AUTH_QUERY;
    return AUTH_NONE;
}

/* Whether a POST comes from a page of this server: its Origin (else its
 * Referer) names the Host it was sent to. A client that sent the token in
 * an Authorization header and neither (curl, a notebook) is no page. */
static int same_origin(struct MHD_Connection *c, int auth, int tls) {
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    const char *ref = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Referer");
    if (!host) return 0;
    char want[300];
    int n = snprintf(want, sizeof want, "%s://%s", tls ? "https" : "http", host);
    if (n <= 0 || (size_t)n >= sizeof want) return 0;
    if (origin) return !strcmp(origin, want);
    if (ref) return !strncmp(ref, want, (size_t)n) && (ref[n] == '/' || !ref[n]);
    return auth == AUTH_HEADER;
}

/* ---------------------------------------------------------------- answers */

static enum MHD_Result send_buf(struct MHD_Connection *c, unsigned code, const char *type,
                                void *data, size_t len, enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, data, mode);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "same-origin");
    if (code == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"bfd\"");
    enum MHD_Result rc = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return rc;
}

/* {"error": msg} with status code. */
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned code, const char *msg) {
    json_t *o = json_pack("{s:s, s:i}", "error", msg, "status", (int)code);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text) return MHD_NO;
    return send_buf(c, code, "application/json", text, strlen(text), MHD_RESPMEM_MUST_FREE);
}

/* j (taken) as the body; next, when not empty, as the cursor of the next
 * page (X-Next-After and a Link header). */
static enum MHD_Result send_json(struct MHD_Connection *c, unsigned code, json_t *j,
                                 const char *next, const char *url) {
    char *text = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(j);
    if (!text) return send_error(c, 500, "out of memory");
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (next && next[0]) {
        char link[600];
        MHD_add_response_header(r, "X-Next-After", next);
        snprintf(link, sizeof link, "<%s?after=%s>; rel=\"next\"", url, next);
        MHD_add_response_header(r, "Link", link);
    }
    enum MHD_Result rc = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return rc;
}

/* ------------------------------------------------------- the loop's socket */

/* Sends a bfctl request to the loop and waits for its reply: the reply's
 * HTTP status (200, or from bfd's error code) with its body in *reply. */
static unsigned loop_call(http *h, const char *type, json_t *body, json_t **reply) {
    *reply = NULL;
    char err[512];
    pthread_mutex_lock(&h->loop_mu);
    proto_msg route;
    memset(&route, 0, sizeof route);
    route.has_req = 1;
    route.req = ++h->next_req;
    unsigned code = 503;
    if (proto_send(h->dealer, &route, NULL, type, body, 0, err, sizeof err)) {
        *reply = json_pack("{s:s}", "error", err);
        goto done;
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        long left = LOOP_TIMEOUT_MS -
                    (long)((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0 || h->stopping) {
            *reply = json_pack("{s:s}", "error", "bfd's loop did not answer in time");
            goto done;
        }
        zmq_pollitem_t it = {h->dealer, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, left < 250 ? left : 250) <= 0) continue;
        proto_msg m;
        memset(&m, 0, sizeof m);
        proto_code pc;
        int rc = proto_recv(h->dealer, ZMQ_DONTWAIT, 0, &m, &pc, err, sizeof err);
        if (rc != 0 || pc != PROTO_OK || !m.has_req || m.req != route.req) {
            proto_msg_clear(&m);
            continue;
        }
        *reply = m.body;
        m.body = NULL;
        json_object_del(*reply, "req"); /* the protocol's, not the page's */
        code = 200;
        if (!strcmp(m.type, "error")) {
            const char *ec = json_string_value(json_object_get(*reply, "code"));
            code = !ec                        ? 500
                   : !strcmp(ec, "not_found") ? 404
                   : !strcmp(ec, "bad_state") ? 409
                   : !strcmp(ec, "bad_field") ? 400
                   : !strcmp(ec, "bad_token") ? 403
                                              : 500;
            json_t *msg = json_object_get(*reply, "message");
            if (msg) json_object_set(*reply, "error", msg);
        }
        proto_msg_clear(&m);
        break;
    }
done:
    pthread_mutex_unlock(&h->loop_mu);
    return code;
}

#define CLONE_SETS_MAX 32      /* ?set= of one clone */
#define CLONE_SET_LEN_MAX 1024 /* bytes of one ?set= */

/* The ?set= arguments of a request, in order. */
typedef struct clone_sets {
    const char *v[CLONE_SETS_MAX];
    int n, bad; /* bad: too many, or one too long */
} clone_sets;

static enum MHD_Result take_set(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value) {
    (void)kind;
    clone_sets *cs = cls;
    if (strcmp(key, "set")) return MHD_YES;
    if (cs->n == CLONE_SETS_MAX || !value || strlen(value) > CLONE_SET_LEN_MAX)
        cs->bad = 1;
    else
        cs->v[cs->n++] = value;
    return MHD_YES;
}

/* POST trials/T/clone?set=KEY=VALUE...: what `bfctl clone tT --set ...`
 * does, through the same requests (trial, job, then submit) and the same
 * sweep text (jobs/sweep_sets.c). Answers bfd's submit reply. */
static enum MHD_Result clone_action(http *h, struct MHD_Connection *c, long long id) {
    clone_sets cs = {.n = 0};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, take_set, &cs);
    if (cs.bad)
        return send_error(c, 400, "clone: at most 32 ?set=KEY=VALUE, each at most 1024 bytes");
    json_t *tr = NULL, *job = NULL, *reply = NULL, *body;
    body = json_pack("{s:I}", "trial", (json_int_t)id);
    unsigned code = loop_call(h, "trial", body, &tr);
    json_decref(body);
    if (code == 200) {
        body = json_pack("{s:O}", "job", json_object_get(tr, "job"));
        code = loop_call(h, "job", body, &job);
        json_decref(body);
    }
    if (code != 200) {
        json_decref(tr);
        return send_json(c, code, job ? job : tr ? tr : json_object(), NULL, NULL);
    }
    char err[1024], from[64];
    char *text = sweep_clone_text(tr, job, id, cs.v, cs.n, "the dashboard", err, sizeof err);
    json_decref(tr);
    json_decref(job);
    if (!text) return send_error(c, 400, err);
    snprintf(from, sizeof from, "t%lld (clone)", id);
    body = json_pack("{s:s, s:s}", "sweep", text, "file", from);
    free(text);
    if (!body) return send_error(c, 400, "clone: a value is not valid UTF-8");
    code = loop_call(h, "submit", body, &reply);
    json_decref(body);
    return send_json(c, code, reply ? reply : json_object(), NULL, NULL);
}

/* POST /api/v1/...: cancel, stop, resume, edit, clone, as bfctl sends them. */
static enum MHD_Result post_action(http *h, struct MHD_Connection *c, const char *path) {
    long long id;
    int k = 0;
    char what[32] = "";
    const char *type = NULL;
    json_t *body = NULL;
    if (sscanf(path, "jobs/%lld/%n", &id, &k) == 1 && k > 0 && id > 0) {
        snprintf(what, sizeof what, "%s", path + k);
        if (!strcmp(what, "cancel")) {
            type = "cancel";
            body = json_pack("{s:I}", "job", (json_int_t)id);
        } else if (!strcmp(what, "edit")) {
            const char *mp = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "max_parallel");
            const char *add = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "add");
            const char *drop =
                MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "drop_pending");
            char *end = NULL;
            long long n = mp ? strtoll(mp, &end, 10) : -1;
            if (!!mp + !!add + !!drop != 1 || (mp && (*end || n < 0 || n > 100000)))
                return send_error(c, 400,
                                  "edit: give one of ?max_parallel=N (N in [0, 100000]), "
                                  "?add=KEY=V1,V2 or ?drop_pending=KEY=VALUE");
            type = "edit";
            body = json_pack("{s:I}", "job", (json_int_t)id);
            if (mp) json_object_set_new(body, "max_parallel", json_integer(n));
            if (add) json_object_set_new(body, "add", json_string(add));
            if (drop) json_object_set_new(body, "drop_pending", json_string(drop));
        }
    } else if (sscanf(path, "trials/%lld/%n", &id, &k) == 1 && k > 0 && id > 0) {
        snprintf(what, sizeof what, "%s", path + k);
        if (!strcmp(what, "clone")) return clone_action(h, c, id);
        if (!strcmp(what, "cancel") || !strcmp(what, "stop") || !strcmp(what, "resume")) {
            type = !strcmp(what, "cancel") ? "cancel" : !strcmp(what, "stop") ? "stop" : "resume";
            body = json_pack("{s:I}", "trial", (json_int_t)id);
        }
    }
    if (!type)
        return send_error(
            c, 404,
            "no such action: POST jobs/ID/cancel, jobs/ID/edit?max_parallel=N (or add, "
            "drop_pending), "
            "trials/ID/cancel, trials/ID/stop, trials/ID/resume or trials/ID/clone?set=KEY=VALUE");
    json_t *reply;
    unsigned code = loop_call(h, type, body, &reply);
    json_decref(body);
    return send_json(c, code, reply ? reply : json_object(), NULL, NULL);
}

/* ------------------------------------------------------------------- SSE */

typedef struct sse {
    http *h;
    http_stream *s;
    char *buf;
    size_t len, off;
    int idle, started;
} sse;

static ssize_t sse_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    sse *e = cls;
    while (e->off == e->len) {
        if (e->h->stopping) return MHD_CONTENT_READER_END_OF_STREAM;
        e->off = e->len = 0;
        if (!e->started) {
            e->started = 1;
            e->len = (size_t)snprintf(e->buf, SSE_BUF, "retry: 2000\n: bfd stream\n\n");
            break;
        }
        char err[512];
        pthread_mutex_lock(&e->h->db_mu);
        long n = http_stream_poll(e->s, e->h->db, e->buf, SSE_BUF, err, sizeof err);
        pthread_mutex_unlock(&e->h->db_mu);
        if (n < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (n > 0) {
            e->len = (size_t)n;
            e->idle = 0;
            break;
        }
        if (++e->idle >= SSE_KEEPALIVE_POLLS) {
            e->idle = 0;
            e->len = (size_t)snprintf(e->buf, SSE_BUF, ": keepalive\n\n");
            break;
        }
        struct timespec ts = {0, SSE_POLL_NS};
        nanosleep(&ts, NULL);
    }
    size_t k = e->len - e->off < max ? e->len - e->off : max;
    memcpy(out, e->buf + e->off, k);
    e->off += k;
    return (ssize_t)k;
}

static void sse_free(void *cls) {
    sse *e = cls;
    http_stream_free(&e->s);
    free(e->buf);
    free(e);
}

/* GET /api/v1/jobs/J/stream?metric=NAME */
static enum MHD_Result get_stream(http *h, struct MHD_Connection *c, long long job) {
    const char *metric = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "metric");
    if (metric && strlen(metric) > 63) return send_error(c, 400, "?metric is at most 63 bytes");
    /* EventSource sends the id of the last record it read when it reconnects */
    const char *last_id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID");
    if (last_id && strlen(last_id) > 8192)
        return send_error(c, 400, "Last-Event-ID is at most 8192 bytes");
    sse *e = calloc(1, sizeof *e);
    char err[512] = "out of memory";
    if (e) e->buf = malloc(SSE_BUF);
    if (e && e->buf) {
        e->h = h;
        pthread_mutex_lock(&h->db_mu);
        e->s = http_stream_new(h->db, job, metric, last_id, err, sizeof err);
        pthread_mutex_unlock(&h->db_mu);
    }
    if (!e || !e->buf || !e->s) {
        if (e) sse_free(e);
        return send_error(c, 500, err);
    }
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32768, sse_read, e, sse_free);
    if (!r) {
        sse_free(e);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return rc;
}

/* ------------------------------------------------------------ trial files */

#define REL_MAX 512 /* bytes of a file's name below a trial's folder */

/* Whether rel names something below a folder without leaving it: relative,
 * no empty component, none starting with '.' (so no "." or ".."), at most
 * REL_MAX bytes. */
static int rel_ok(const char *rel) {
    size_t n = strlen(rel);
    if (!n || n > REL_MAX || rel[0] == '/' || rel[n - 1] == '/') return 0;
    for (const char *c = rel; *c; c++)
        if ((c == rel || c[-1] == '/') && (*c == '.' || *c == '/')) return 0;
    return 1;
}

/* GET /api/v1/trials/T/file?path=REL: a file of the trial's folder (a
 * checkpoint, its config, metrics.jsonl) as a download. Only a regular file
 * whose real path is below the folder's, opened without following a last
 * symbolic link. */
static enum MHD_Result get_trial_file(http *h, struct MHD_Connection *c, long long trial) {
    const char *rel = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "path");
    if (!rel || !rel_ok(rel))
        return send_error(c, 400,
                          "?path= must name a file below the trial's folder: relative, no '.' "
                          "or '..' component, at most 512 bytes");
    char dir[1200], p[1800], real_dir[PATH_MAX], real_p[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/trials/%lld", h->home, trial);
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    size_t k;
    if (!realpath(dir, real_dir) || !realpath(p, real_p) || (k = strlen(real_dir)) == 0 ||
        strncmp(real_p, real_dir, k) || real_p[k] != '/')
        return send_error(c, 404, "no such file in the trial's folder");
    int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        if (fd >= 0) close(fd);
        return send_error(c, 404, "no such file in the trial's folder");
    }
    struct MHD_Response *r = MHD_create_response_from_fd((uint64_t)sb.st_size, fd);
    if (!r) {
        close(fd);
        return MHD_NO;
    }
    const char *base = strrchr(rel, '/');
    char disp[REL_MAX + 64];
    snprintf(disp, sizeof disp, "attachment; filename=\"t%lld-%s\"", trial, base ? base + 1 : rel);
    for (char *q = disp + 22; *q; q++) /* a name the header's quotes hold */
        if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20) *q = '_';
    disp[strlen(disp) - 1] = '"';
    MHD_add_response_header(r, "Content-Type", "application/octet-stream");
    MHD_add_response_header(r, "Content-Disposition", disp);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return rc;
}

/* ----------------------------------------------------------------- routes */

static const char *conn_arg(void *cls, const char *key) {
    return MHD_lookup_connection_value(cls, MHD_GET_ARGUMENT_KIND, key);
}

/* GET /api/v1/PATH */
static enum MHD_Result get_api(http *h, struct MHD_Connection *c, const char *url,
                               const char *path) {
    long long id;
    int k = 0;
    json_t *out = NULL;
    if (!strcmp(path, "cluster")) {
        unsigned code = loop_call(h, "status", NULL, &out);
        return send_json(c, code, out ? out : json_object(), NULL, NULL);
    }
    if (sscanf(path, "jobs/%lld/stream%n", &id, &k) == 1 && k > 0 && !path[k])
        return get_stream(h, c, id);
    if (sscanf(path, "trials/%lld/file%n", &id, &k) == 1 && k > 0 && !path[k] && id > 0)
        return get_trial_file(h, c, id);
    if (sscanf(path, "trials/%lld/log%n", &id, &k) == 1 && k > 0 && !path[k]) {
        const char *off = conn_arg(c, "offset");
        long long o = off ? atoll(off) : 0;
        json_t *b =
            json_pack("{s:I, s:I}", "trial", (json_int_t)id, "offset", (json_int_t)(o > 0 ? o : 0));
        unsigned code = loop_call(h, "logs", b, &out);
        json_decref(b);
        return send_json(c, code, out ? out : json_object(), NULL, NULL);
    }
    char next[32], err[1024];
    pthread_mutex_lock(&h->db_mu);
    unsigned code =
        http_api_get(h->db, h->home, path, conn_arg, c, &out, next, sizeof next, err, sizeof err);
    pthread_mutex_unlock(&h->db_mu);
    if (code != 200) return send_error(c, code, err);
    return send_json(c, 200, out, next, url);
}

static const http_asset *asset(const char *name) {
    for (size_t i = 0; i < http_n_assets; i++)
        if (!strcmp(http_assets[i].name, name)) return &http_assets[i];
    return NULL;
}

/* Per request: how much of its body was read (and ignored). */
typedef struct req_ctx {
    size_t uploaded;
} req_ctx;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **reqp) {
    (void)version;
    (void)upload;
    http *h = cls;
    if (!*reqp) { /* headers only so far */
        *reqp = calloc(1, sizeof(req_ctx));
        return *reqp ? MHD_YES : MHD_NO;
    }
    req_ctx *rq = *reqp;
    if (*upload_size) { /* actions take no body: read and drop it */
        rq->uploaded += *upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->uploaded > MAX_UPLOAD) return send_error(c, 413, "request body too large");
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!get && !post) return send_error(c, 405, "bfd's dashboard takes GET and POST");
    int auth = auth_of(h, c);
    if (auth == AUTH_NONE)
        return send_error(c, 401,
                          "this bfd's dashboard needs its token: `bfctl dashboard` prints the URL "
                          "with it; API clients send Authorization: Bearer TOKEN "
                          "($BF_HOME/http.token)");
    const char *api = !strncmp(url, "/api/v1/", 8) ? url + 8 : NULL;
    if (post) {
        if (!api) return send_error(c, 405, "POST only to /api/v1/ actions");
        if (!same_origin(c, auth, h->tls))
            return send_error(c, 403,
                              "cross-origin POST refused: actions come from the dashboard's own "
                              "pages (Origin or Referer naming this Host) or with an "
                              "Authorization header");
        return post_action(h, c, api);
    }
    if (api) return get_api(h, c, url, api);
    if (!strcmp(url, "/metrics")) {
        size_t n;
        char *page = h->prom ? prom_render(h->prom, &n) : NULL;
        if (!page) return send_error(c, 500, "out of memory");
        return send_buf(c, 200, "text/plain; version=0.0.4; charset=utf-8", page, n,
                        MHD_RESPMEM_MUST_FREE);
    }
    if (!strcmp(url, "/favicon.ico")) /* none: say so without an error in the console */
        return send_buf(c, MHD_HTTP_NO_CONTENT, "text/plain", NULL, 0, MHD_RESPMEM_PERSISTENT);
    const http_asset *a = NULL;
    if (!strcmp(url, "/"))
        a = asset("index.html");
    else if (!strncmp(url, "/static/", 8))
        a = asset(url + 8);
    if (!a) return send_error(c, 404, "not found: the dashboard is at /, its API at /api/v1/");
    if (auth == AUTH_QUERY) {
        /* the token leaves the address bar for a cookie scripts cannot read */
        char cookie[160];
        snprintf(cookie, sizeof cookie, COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict%s", h->token,
                 h->tls ? "; Secure" : "");
        struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Set-Cookie", cookie);
        MHD_add_response_header(r, "Location", url);
        MHD_add_response_header(r, "Cache-Control", "no-store");
        enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_SEE_OTHER, r);
        MHD_destroy_response(r);
        return rc;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", a->type);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "same-origin");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                            "img-src 'self' data:; frame-ancestors 'none'");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return rc;
}

static void on_done(void *cls, struct MHD_Connection *c, void **reqp,
                    enum MHD_RequestTerminationCode why) {
    (void)cls;
    (void)c;
    (void)why;
    free(*reqp);
    *reqp = NULL;
}

/* --------------------------------------------------------------- lifetime */

/* addr as an IPv4 address and port into sa, one other than loopback only
 * with TLS or insecure: 0, or -1 with err. */
static int parse_addr(const char *addr, int tls, int insecure, struct sockaddr_in *sa, char *err,
                      size_t errlen) {
    char host[64];
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof host)
        return bf_fail(err, errlen, "http: '%s' is not ADDRESS:PORT", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    long port = strtol(colon + 1, NULL, 10);
    sa->sin_port = htons((uint16_t)port);
    if (port < 1 || port > 65535 || inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return bf_fail(err, errlen, "http: '%s' is not IPV4:PORT", addr);
    int loopback = (ntohl(sa->sin_addr.s_addr) >> 24) == 127;
    if (!loopback && !tls && !insecure)
        return bf_fail(err, errlen,
                       "http: refusing to serve the dashboard on %s without TLS: its token and "
                       "every page would cross the network in clear. Give bfd.yaml "
                       "http_tls_cert and http_tls_key (PEM files), bind 127.0.0.1 and tunnel "
                       "(ssh -L 8265:127.0.0.1:8265 HOST), or put a TLS proxy in front and set "
                       "http_insecure: true",
                       addr);
    return 0;
}

/* The whole of a PEM file (what: "http_tls_cert", "http_tls_key") as a
 * new string in *out, checked to hold a block that begins "-----BEGIN "
 * and whose label ends in label ("CERTIFICATE", "PRIVATE KEY"): 0, or -1
 * with err naming the file and what is wrong with it. */
static int read_pem(const char *what, const char *path, const char *label, char **out, char *err,
                    size_t errlen) {
    *out = NULL;
    char why[300];
    int fd = input_path_open_fd(path, why, sizeof why);
    if (fd < 0) return bf_fail(err, errlen, "http: %s %s: %s", what, path, why);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return bf_fail(err, errlen, "http: %s %s: fstat: %s", what, path, strerror(e));
    }
    const char *bad = sb.st_size == 0                 ? "is empty"
                      : sb.st_size > HTTP_TLS_PEM_MAX ? "is larger than 65536 bytes"
                      : !strcmp(label, "PRIVATE KEY") && (sb.st_mode & 07) ? "is open to others"
                                                                           : NULL;
    if (bad) {
        close(fd);
        return bf_fail(err, errlen, "http: %s %s %s%s", what, path, bad,
                       !strcmp(bad, "is open to others")
                           ? " (anyone on the machine could read the key): chmod o-rwx it"
                           : ": give a PEM file");
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    ssize_t n = buf ? read(fd, buf, (size_t)sb.st_size) : -1;
    close(fd);
    if (n != (ssize_t)sb.st_size) {
        free(buf);
        return bf_fail(err, errlen, "http: %s %s: short read", what, path);
    }
    buf[n] = '\0';
    /* a block "-----BEGIN ...LABEL-----" (an encrypted key says ENCRYPTED) */
    const char *b = strstr(buf, "-----BEGIN "), *e = b ? strstr(b, "-----\n") : NULL;
    if (!e && b) e = strstr(b, "-----\r\n");
    size_t ll = strlen(label);
    int ok = b && e && (size_t)(e - b) >= 11 + ll && !strncmp(e - ll, label, ll) &&
             (size_t)(e - b) < 80 && strlen(buf) == (size_t)n;
    int encrypted = ok && strstr(b, "ENCRYPTED") && strstr(b, "ENCRYPTED") < e;
    if (!ok || encrypted) {
        free(buf);
        return bf_fail(err, errlen,
                       encrypted ? "http: %s %s is an encrypted key: bfd asks for no passphrase; "
                                   "give it unencrypted (openssl pkey -in KEY -out KEY2), mode 0600"
                                 : "http: %s %s is not PEM text with a '-----BEGIN ...%s-----' "
                                   "block",
                       what, path, label);
    }
    *out = buf;
    return 0;
}

/* libmicrohttpd's messages: kept while it starts (why a certificate or key
 * was refused), dropped afterwards (a client that gave up a handshake). */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    http *h = cls;
    if (!h->starting) return;
    vsnprintf(h->mhd_err, sizeof h->mhd_err, fmt, ap);
    h->mhd_err[strcspn(h->mhd_err, "\r\n")] = '\0';
}

/* Reads l's certificate and key into h (both or neither; TLS asked of a
 * libmicrohttpd built without it is refused): 0, or -1 with err. */
static int load_tls(http *h, const http_listen *l, char *err, size_t errlen) {
    int has_cert = l->tls_cert && l->tls_cert[0], has_key = l->tls_key && l->tls_key[0];
    if (!has_cert && !has_key) return 0;
    if (!has_cert || !has_key)
        return bf_fail(err, errlen,
                       "http: give both http_tls_cert and http_tls_key in bfd.yaml (PEM files of "
                       "a certificate and its private key), or neither; only %s is set",
                       has_cert ? "http_tls_cert" : "http_tls_key");
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return bf_fail(err, errlen,
                       "http: this libmicrohttpd (%s) was built without TLS (GnuTLS), so bfd "
                       "cannot serve HTTPS: install a libmicrohttpd with TLS, or drop "
                       "http_tls_cert and http_tls_key and bind 127.0.0.1",
                       MHD_get_version());
    if (read_pem("http_tls_cert", l->tls_cert, "CERTIFICATE", &h->tls_cert, err, errlen) ||
        read_pem("http_tls_key", l->tls_key, "PRIVATE KEY", &h->tls_key, err, errlen))
        return -1;
    h->tls = 1;
    return 0;
}

int http_start(const http_listen *l, const char *home, const char *ctl_ep, prom *pr, http **out,
               char *err, size_t errlen) {
    *out = NULL;
    const char *addr = l->addr;
    http *h = calloc(1, sizeof *h);
    if (!h) return bf_fail(err, errlen, "out of memory");
    h->fd = -1;
    h->prom = pr;
    snprintf(h->home, sizeof h->home, "%s", home);
    pthread_mutex_init(&h->db_mu, NULL);
    pthread_mutex_init(&h->loop_mu, NULL);
    *out = h;
    struct sockaddr_in sa;
    if (load_tls(h, l, err, errlen) || parse_addr(addr, h->tls, l->insecure, &sa, err, errlen) ||
        load_token(h, err, errlen))
        return -1;
    char db[1100];
    snprintf(db, sizeof db, "%s/bf.db", home);
    if (sqlite3_open_v2(db, &h->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, NULL) !=
        SQLITE_OK)
        return bf_fail(err, errlen, "http: sqlite3_open_v2(%s, read-only): %s", db,
                       h->db ? sqlite3_errmsg(h->db) : "out of memory");
    sqlite3_busy_timeout(h->db, 2000);
    h->zctx = zmq_ctx_new();
    h->dealer = h->zctx ? zmq_socket(h->zctx, ZMQ_DEALER) : NULL;
    int zero = 0;
    if (!h->dealer || zmq_setsockopt(h->dealer, ZMQ_LINGER, &zero, sizeof zero) ||
        zmq_connect(h->dealer, ctl_ep))
        return bf_fail(err, errlen, "http: zmq_connect(%s): %s", ctl_ep, zmq_strerror(zmq_errno()));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 64) != 0) {
        int rc = bf_fail(err, errlen, "http: cannot listen on %s: %s", addr, strerror(errno));
        if (fd >= 0) close(fd);
        return rc;
    }
    h->fd = fd;
    /* the TLS options last: without TLS the list ends before them */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG | (h->tls ? MHD_USE_TLS : 0);
    h->starting = 1;
    h->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET, fd,
                              MHD_OPTION_NOTIFY_COMPLETED, on_done, h, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)64, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
                              MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536,
                              MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
                              h->tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, h->tls_cert,
                              MHD_OPTION_HTTPS_MEM_KEY, h->tls_key, MHD_OPTION_END);
    h->starting = 0;
    if (!h->mhd && h->tls)
        return bf_fail(err, errlen,
                       "http: cannot serve HTTPS on %s with http_tls_cert %s and http_tls_key %s "
                       "(is the key the certificate's?): libmicrohttpd: %s",
                       addr, l->tls_cert, l->tls_key,
                       h->mhd_err[0] ? h->mhd_err : "no reason given");
    if (!h->mhd)
        return bf_fail(err, errlen, "http: MHD_start_daemon on %s failed%s%s", addr,
                       h->mhd_err[0] ? ": " : "", h->mhd_err);
    snprintf(h->url, sizeof h->url, "%s://%s/", h->tls ? "https" : "http", addr);
    snprintf(h->url_path, sizeof h->url_path, "%s/http.url", home);
    int ufd = open(h->url_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (ufd >= 0) {
        char line[320];
        int n = snprintf(line, sizeof line, "%s\n", h->url);
        if (write(ufd, line, (size_t)n) != n) h->url_path[0] = '\0';
        close(ufd);
    }
    return 0;
}

const char *http_url(const http *h) { return h ? h->url : ""; }

void http_stop(http **hp) {
    http *h = *hp;
    if (!h) return;
    *hp = NULL;
    h->stopping = 1; /* streams end at their next look (250 ms) */
    if (h->mhd) MHD_stop_daemon(h->mhd);
    if (h->fd >= 0) close(h->fd);
    if (h->url_path[0] && h->mhd) unlink(h->url_path);
    if (h->dealer) zmq_close(h->dealer);
    if (h->zctx) zmq_ctx_term(h->zctx);
    sqlite3_close(h->db);
    pthread_mutex_destroy(&h->db_mu);
    pthread_mutex_destroy(&h->loop_mu);
    free(h->tls_cert);
    if (h->tls_key) explicit_bzero(h->tls_key, strlen(h->tls_key));
    free(h->tls_key);
    free(h);
}
