/* proto.c — the bf wire format (proto.h, docs/protocol.md): message frames
 * sent and received over ZeroMQ, error codes, typed JSON field readers,
 * metric points, tokens and CURVE keys. */

#include "protocol/proto.h"
#include "common/errbuf.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <zmq.h>

static const char *const code_names[PROTO_N_CODES] = {
    "ok",        "bad_frames",    "bad_version", "unknown_type", "too_large", "bad_json",
    "bad_field", "invalid_sweep", "not_found",   "bad_state",    "bad_token", "internal"};

const char *proto_code_name(proto_code c) {
    return (unsigned)c < PROTO_N_CODES ? code_names[c] : "";
}

void proto_msg_clear(proto_msg *m) {
    if (m->body) json_decref(m->body);
    memset(m, 0, sizeof *m);
}

int proto_type_ok(const char *s, size_t len) {
    if (len < 1 || len > PROTO_MAX_TYPE) return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return 0;
    }
    return 1;
}

int proto_name_ok(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) {
        unsigned char c = (unsigned char)s[n];
        if (c <= ' ' || c >= 127 || c == '"' || c == '\\') return 0;
        if (n >= PROTO_MAX_NAME) return 0;
    }
    return n >= 1;
}

/* ------------------------------------------------------------------ receive */

static int equals(const proto_frame *f, const char *s) {
    size_t n = strlen(s);
    return f->len == n && memcmp(f->data, s, n) == 0;
}

/* Best effort: the req of a body we could not otherwise use, so the error
 * reply still carries it. */
static void peek_req(const proto_frame *f, proto_msg *m) {
    if (f->len > PROTO_MAX_BODY) return;
    json_error_t je;
    json_t *b = json_loadb(f->data, f->len, 0, &je);
    if (!b) return;
    json_t *r = json_object_get(b, "req");
    if (json_is_integer(r) && json_integer_value(r) >= 0 &&
        json_integer_value(r) <= PROTO_MAX_INT) {
        m->has_req = 1;
        m->req = json_integer_value(r);
    }
    json_decref(b);
}

void proto_decode(const proto_frame *fr, int kept, int total, int mode, proto_msg *m,
                  proto_code *code, char *err, size_t errlen) {
    proto_msg_clear(m);
    *code = PROTO_OK;
    if (kept > total) kept = total;
    int i = 0;
    if ((mode & PROTO_RECV_ROUTED) && i < kept) {
        size_t n = fr[i].len;
        if (n > 0 && n < PROTO_MAX_IDENT) {
            memcpy(m->ident, fr[i].data, n);
            m->ident_len = n;
        }
        i++;
    }
    if ((mode & PROTO_RECV_TOPIC) && i < kept) {
        size_t n = fr[i].len;
        if (n > PROTO_MAX_TOPIC) n = PROTO_MAX_TOPIC;
        memcpy(m->topic, fr[i].data, n);
        m->topic[n] = '\0';
        i++;
    }
    if (i < kept && fr[i].len == 0) {
        m->delim = 1;
        i++;
    }
    int rest = total - i;
    if (rest != PROTO_MAX_FRAMES || kept - i != PROTO_MAX_FRAMES) {
        *code = PROTO_E_FRAMES;
        bf_fail(err, errlen, "expected %d frames (\"bf\", version, type, body), got %d",
                PROTO_MAX_FRAMES, rest);
        return;
    }
    /* the body is parsed once, below; only a message refused before that
     * parses it here, for the req its error reply carries */
    if (!equals(&fr[i], PROTO_NAME)) {
        peek_req(&fr[i + 3], m);
        *code = PROTO_E_FRAMES;
        bf_fail(err, errlen, "first frame must be the protocol name \"%s\"", PROTO_NAME);
        return;
    }
    if (!equals(&fr[i + 1], "1")) {
        char v[17];
        size_t n = fr[i + 1].len;
        if (n > 16) n = 16;
        for (size_t k = 0; k < n; k++) {
            char c = ((const char *)fr[i + 1].data)[k];
            v[k] = (c >= 32 && c < 127) ? c : '?';
        }
        v[n] = '\0';
        peek_req(&fr[i + 3], m);
        *code = PROTO_E_VERSION;
        bf_fail(err, errlen, "protocol version '%s' not supported; this side speaks %d", v,
                PROTO_VERSION);
        return;
    }
    size_t tl = fr[i + 2].len;
    if (!proto_type_ok(fr[i + 2].data, tl)) {
        peek_req(&fr[i + 3], m);
        *code = PROTO_E_FRAMES;
        bf_fail(err, errlen, "message type must be 1-%d characters of a-z, 0-9, _", PROTO_MAX_TYPE);
        return;
    }
    memcpy(m->type, fr[i + 2].data, tl);
    m->type[tl] = '\0';
    size_t bl = fr[i + 3].len;
    if (bl > PROTO_MAX_BODY) {
        *code = PROTO_E_TOO_LARGE;
        bf_fail(err, errlen, "%s: body of %zu bytes is over the limit of %u", m->type, bl,
                PROTO_MAX_BODY);
        return;
    }
    json_error_t je;
    m->body = json_loadb(fr[i + 3].data, bl, JSON_REJECT_DUPLICATES, &je);
    if (!m->body || !json_is_object(m->body)) {
        *code = PROTO_E_JSON;
        if (m->body) {
            bf_fail(err, errlen, "%s: body must be a JSON object", m->type);
            json_decref(m->body);
            m->body = NULL;
        } else {
            bf_fail(err, errlen, "%s: body is not JSON: line %d column %d: %s", m->type, je.line,
                    je.column, je.text);
            peek_req(&fr[i + 3], m); /* a repeated key: a lenient parse may find the req */
        }
        return;
    }
    json_t *r = json_object_get(m->body, "req");
    if (r) {
        if (!json_is_integer(r) || json_integer_value(r) < 0 ||
            json_integer_value(r) > PROTO_MAX_INT) {
            *code = PROTO_E_FIELD;
            m->has_req = 0;
            bf_fail(err, errlen, "%s: 'req' must be an integer in [0, 2^53]", m->type);
            return;
        }
        m->has_req = 1;
        m->req = json_integer_value(r);
    }
}

int proto_recv(void *sock, int flags, int mode, proto_msg *m, proto_code *code, char *err,
               size_t errlen) {
    proto_msg_clear(m);
    *code = PROTO_OK;
    zmq_msg_t fr[PROTO_DECODE_FRAMES];
    int kept = 0, total = 0, more = 1;
    while (more) {
        zmq_msg_t tmp;
        zmq_msg_t *f = kept < PROTO_DECODE_FRAMES ? &fr[kept] : &tmp;
        zmq_msg_init(f);
        if (zmq_msg_recv(f, sock, total == 0 ? flags : 0) < 0) {
            int e = zmq_errno();
            zmq_msg_close(f);
            for (int i = 0; i < kept; i++) zmq_msg_close(&fr[i]);
            if (total == 0 && e == EAGAIN) return 1;
            return bf_fail(err, errlen, "zmq_msg_recv: %s", zmq_strerror(e));
        }
        more = zmq_msg_more(f);
        total++;
        if (f == &tmp)
            zmq_msg_close(f);
        else
            kept++;
    }
    proto_frame pf[PROTO_DECODE_FRAMES];
    for (int k = 0; k < kept; k++)
        pf[k] = (proto_frame){zmq_msg_data(&fr[k]), zmq_msg_size(&fr[k])};
    proto_decode(pf, kept, total, mode, m, code, err, errlen);
    for (int k = 0; k < kept; k++) zmq_msg_close(&fr[k]);
    return 0;
}

/* --------------------------------------------------------------------- send */

static int send_frame(void *sock, const void *data, size_t len, int more, int flags, int first,
                      char *err, size_t errlen) {
    /* Once the first frame is queued the others go without blocking (ZeroMQ
     * queues multipart messages atomically). */
    int f = (more ? ZMQ_SNDMORE : 0) | (first ? flags : 0);
    if (zmq_send(sock, data, len, f) < 0) {
        int e = zmq_errno();
        if (first && e == EAGAIN) return 1;
        return bf_fail(err, errlen, "zmq_send: %s", zmq_strerror(e));
    }
    return 0;
}

int proto_send(void *sock, const proto_msg *route, const char *topic, const char *type,
               json_t *body, int flags, char *err, size_t errlen) {
    json_t *own = NULL;
    if (!body) body = own = json_object();
    if (!body) return bf_fail(err, errlen, "out of memory");
    if (route && route->has_req) json_object_set_new(body, "req", json_integer(route->req));
    char *txt = json_dumps(body, JSON_COMPACT);
    if (own) json_decref(own);
    if (!txt) return bf_fail(err, errlen, "json_dumps: out of memory or invalid JSON");
    int first = 1, rc = 0;
    if (route && route->ident_len) {
        rc = send_frame(sock, route->ident, route->ident_len, 1, flags, first, err, errlen);
        first = 0;
    }
    if (!rc && topic) {
        rc = send_frame(sock, topic, strlen(topic), 1, flags, first, err, errlen);
        first = 0;
    }
    if (!rc && route && route->delim) {
        rc = send_frame(sock, "", 0, 1, flags, first, err, errlen);
        first = 0;
    }
    char ver[8];
    snprintf(ver, sizeof ver, "%d", PROTO_VERSION);
    if (!rc) rc = send_frame(sock, PROTO_NAME, strlen(PROTO_NAME), 1, flags, first, err, errlen);
    if (!rc) rc = send_frame(sock, ver, strlen(ver), 1, flags, 0, err, errlen);
    if (!rc) rc = send_frame(sock, type, strlen(type), 1, flags, 0, err, errlen);
    if (!rc) rc = send_frame(sock, txt, strlen(txt), 0, flags, 0, err, errlen);
    free(txt);
    return rc;
}

int proto_send_error(void *sock, const proto_msg *route, proto_code code, const char *message,
                     int flags, char *err, size_t errlen) {
    json_t *b = json_object();
    if (!b) return bf_fail(err, errlen, "out of memory");
    json_object_set_new(b, "code", json_string(proto_code_name(code)));
    /* the message may quote bytes from outside: keep it valid UTF-8 */
    json_t *msg = json_string(message);
    if (!msg) msg = json_string("(message not valid UTF-8)");
    json_object_set_new(b, "message", msg);
    int rc = proto_send(sock, route, NULL, "error", b, flags, err, errlen);
    json_decref(b);
    return rc;
}

/* ------------------------------------------------------------------- fields */

int proto_get_int(json_t *body, const char *key, int required, long long min, long long max,
                  long long def, long long *out, char *err, size_t errlen) {
    json_t *v = json_object_get(body, key);
    if (!v) {
        if (required) return bf_fail(err, errlen, "'%s' is required (an integer)", key);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return bf_fail(err, errlen, "'%s' must be an integer in [%lld, %lld]", key, min, max);
    *out = json_integer_value(v);
    return 0;
}

int proto_get_num(json_t *body, const char *key, int required, double def, double *out, char *err,
                  size_t errlen) {
    json_t *v = json_object_get(body, key);
    if (!v) {
        if (required) return bf_fail(err, errlen, "'%s' is required (a number)", key);
        *out = def;
        return 0;
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return bf_fail(err, errlen, "'%s' must be a finite number", key);
    *out = json_number_value(v);
    return 0;
}

int proto_get_str(json_t *body, const char *key, int required, size_t maxlen, const char **out,
                  char *err, size_t errlen) {
    json_t *v = json_object_get(body, key);
    *out = NULL;
    if (!v) {
        if (required) return bf_fail(err, errlen, "'%s' is required (a string)", key);
        return 0;
    }
    size_t n = json_is_string(v) ? json_string_length(v) : 0;
    if (!json_is_string(v) || n > maxlen || (required && n == 0) ||
        strlen(json_string_value(v)) != n)
        return bf_fail(err, errlen, "'%s' must be a string of %s%zu bytes without NUL", key,
                       required ? "1 to " : "at most ", maxlen);
    *out = json_string_value(v);
    return 0;
}

int proto_get_token(json_t *body, const char *key, char out[PROTO_TOKEN_LEN + 1], char *err,
                    size_t errlen) {
    json_t *v = json_object_get(body, key);
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    int ok = s && json_string_length(v) == PROTO_TOKEN_LEN;
    for (int i = 0; ok && i < PROTO_TOKEN_LEN; i++)
        ok = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
    if (!ok) return bf_fail(err, errlen, "'%s' must be %d characters 0-9a-f", key, PROTO_TOKEN_LEN);
    memcpy(out, s, PROTO_TOKEN_LEN + 1);
    return 0;
}

/* Validates one point object into p (names borrowed from obj). Returns 0 or
 * -1 with a message. */
static int parse_point(json_t *obj, proto_point *p, char *err, size_t errlen) {
    if (!json_is_object(obj)) return bf_fail(err, errlen, "a point must be an object");
    long long seq = 0, step = 0;
    if (proto_get_int(obj, "seq", 1, 1, PROTO_MAX_INT, 0, &seq, err, errlen) ||
        proto_get_int(obj, "step", 1, 0, PROTO_MAX_INT, 0, &step, err, errlen) ||
        proto_get_num(obj, "time", 1, 0, &p->time, err, errlen))
        return -1;
    p->seq = seq;
    p->step = step;
    json_t *vals = json_object_get(obj, "values");
    if (!json_is_object(vals))
        return bf_fail(err, errlen, "point %lld: 'values' must be an object", seq);
    if (json_object_size(vals) > PROTO_MAX_VALUES)
        return bf_fail(err, errlen, "point %lld: at most %d values", seq, PROTO_MAX_VALUES);
    p->n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(vals, k, v) {
        if (!proto_name_ok(k))
            return bf_fail(err, errlen,
                           "point %lld: metric name must be 1-%d printable ASCII bytes without "
                           "space, '\"' or '\\'",
                           seq, PROTO_MAX_NAME);
        if (json_is_null(v)) {
            p->is_null[p->n] = 1;
            p->value[p->n] = NAN;
        } else if (json_is_number(v) && isfinite(json_number_value(v))) {
            p->is_null[p->n] = 0;
            p->value[p->n] = json_number_value(v);
        } else {
            return bf_fail(err, errlen, "point %lld: value of '%s' must be a finite number or null",
                           seq, k);
        }
        p->name[p->n++] = k;
    }
    return 0;
}

/* Appends name (with its NUL) to ps->names (capacity *cap); its offset into
 * *off. 0, or -1 when out of memory. */
static int add_name(proto_points *ps, size_t *len, size_t *cap, const char *name, uint32_t *off) {
    size_t k = strlen(name) + 1;
    if (*len + k > *cap) {
        size_t c = *cap ? 2 * *cap : 256;
        while (c < *len + k) c *= 2;
        char *grown = realloc(ps->names, c);
        if (!grown) return -1;
        ps->names = grown;
        *cap = c;
    }
    memcpy(ps->names + *len, name, k);
    *off = (uint32_t)*len;
    *len += k;
    return 0;
}

int proto_points_parse(json_t *body, size_t max, proto_points *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    json_t *arr = json_object_get(body, "points");
    if (!json_is_array(arr) || json_array_size(arr) < 1 || json_array_size(arr) > max)
        return bf_fail(err, errlen, "'points' must be an array of 1 to %zu points", max);
    size_t cnt = json_array_size(arr), n_val = 0;
    for (size_t i = 0; i < cnt; i++) {
        json_t *vals = json_object_get(json_array_get(arr, i), "values");
        n_val += json_is_object(vals) ? json_object_size(vals) : 0;
    }
    out->pt = malloc(cnt * sizeof *out->pt);
    out->val = n_val ? malloc(n_val * sizeof *out->val) : NULL;
    if (!out->pt || (n_val && !out->val)) {
        proto_points_free(out);
        return bf_fail(err, errlen, "out of memory");
    }
    size_t len = 0, cap = 0;
    proto_point p, prev = {.n = 0};
    uint32_t prev_off[PROTO_MAX_VALUES];
    for (size_t i = 0; i < cnt; i++) {
        char e2[256];
        if (parse_point(json_array_get(arr, i), &p, e2, sizeof e2)) {
            proto_points_free(out);
            return bf_fail(err, errlen, "'points'[%zu]: %s", i, e2);
        }
        if (i > 0 && p.seq != out->pt[i - 1].seq + 1) {
            long long got = (long long)p.seq, before = (long long)out->pt[i - 1].seq;
            proto_points_free(out);
            return bf_fail(err, errlen,
                           "'points': seq must rise by 1 within a batch (%lld after %lld)", got,
                           before);
        }
        proto_pt *pt = &out->pt[i];
        *pt =
            (proto_pt){.seq = p.seq, .step = p.step, .time = p.time, .first = (uint32_t)out->n_val};
        uint32_t offs[PROTO_MAX_VALUES];
        for (int v = 0; v < p.n; v++) {
            /* lines of one run name their values alike, in the same order */
            if (v < prev.n && !strcmp(p.name[v], prev.name[v])) {
                offs[v] = prev_off[v];
            } else if (add_name(out, &len, &cap, p.name[v], &offs[v])) {
                proto_points_free(out);
                return bf_fail(err, errlen, "out of memory");
            }
            if (p.is_null[v]) continue;
            out->val[out->n_val++] = (proto_val){.name = offs[v], .value = p.value[v]};
            pt->nv++;
        }
        prev = p;
        memcpy(prev_off, offs, (size_t)p.n * sizeof *offs);
        out->n = i + 1;
    }
    out->bytes = cnt * sizeof *out->pt + n_val * sizeof *out->val + cap;
    return 0;
}

void proto_points_free(proto_points *ps) {
    free(ps->pt);
    free(ps->val);
    free(ps->names);
    memset(ps, 0, sizeof *ps);
}

json_t *proto_points_json(const proto_points *ps, size_t i) {
    const proto_pt *pt = &ps->pt[i];
    json_t *vals = json_object();
    json_t *o = json_object();
    if (!vals || !o) {
        json_decref(vals);
        json_decref(o);
        return NULL;
    }
    for (uint32_t k = pt->first; k < pt->first + pt->nv; k++)
        json_object_set_new(vals, ps->names + ps->val[k].name, json_real(ps->val[k].value));
    json_object_set_new(o, "seq", json_integer(pt->seq));
    json_object_set_new(o, "step", json_integer(pt->step));
    json_object_set_new(o, "time", json_real(pt->time));
    json_object_set_new(o, "values", vals);
    return o;
}

json_t *proto_point_json(const proto_point *p, int with_null) {
    json_t *vals = json_object();
    json_t *o = json_object();
    if (!vals || !o) {
        json_decref(vals);
        json_decref(o);
        return NULL;
    }
    for (int i = 0; i < p->n; i++) {
        if (p->is_null[i]) {
            if (with_null) json_object_set_new(vals, p->name[i], json_null());
        } else {
            json_object_set_new(vals, p->name[i], json_real(p->value[i]));
        }
    }
    json_object_set_new(o, "seq", json_integer(p->seq));
    json_object_set_new(o, "step", json_integer(p->step));
    json_object_set_new(o, "time", json_real(p->time));
    json_object_set_new(o, "values", vals);
    return o;
}

int proto_parse_jsonl_line(const char *line, size_t len, int64_t seq, proto_point *p,
                           json_t **holder) {
    memset(p, 0, offsetof(proto_point, name));
    p->seq = seq;
    p->n = 0;
    *holder = NULL;
    json_error_t je;
    json_t *o = json_loadb(line, len, 0, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        return -1;
    }
    *holder = o;
    json_t *st = json_object_get(o, "step"), *tm = json_object_get(o, "time");
    if (!json_is_integer(st) || json_integer_value(st) < 0 || !json_is_number(tm) ||
        !isfinite(json_number_value(tm)))
        return -1;
    p->step = json_integer_value(st);
    p->time = json_number_value(tm);
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (strcmp(k, "step") == 0 || strcmp(k, "time") == 0) continue;
        if (p->n == PROTO_MAX_VALUES || !proto_name_ok(k)) continue;
        if (json_is_number(v) && isfinite(json_number_value(v))) {
            p->value[p->n] = json_number_value(v);
            p->is_null[p->n] = 0;
        } else {
            p->value[p->n] = NAN;
            p->is_null[p->n] = 1;
        }
        p->name[p->n++] = k;
    }
    return 0;
}

/* -------------------------------------------------------------- tokens, keys */

int proto_random_token(char out[PROTO_TOKEN_LEN + 1], char *err, size_t errlen) {
    unsigned char b[PROTO_TOKEN_LEN / 2];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t r = getrandom(b + got, sizeof b - got, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            return bf_fail(err, errlen, "getrandom: %s", strerror(errno));
        }
        got += (size_t)r;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof b; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[PROTO_TOKEN_LEN] = '\0';
    return 0;
}

int proto_read_key(const char *path, char out[41], char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) return bf_fail(err, errlen, "cannot open key file %s: %s", path, strerror(errno));
    char buf[64] = "";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = 0;
    if (n != 40)
        return bf_fail(err, errlen, "key file %s must hold one 40-character Z85 key", path);
    memcpy(out, buf, 41);
    return 0;
}

int proto_curve_client(void *sock, char *err, size_t errlen) {
    const char *spath = getenv("BF_CURVE_SERVER"), *kpath = getenv("BF_CURVE_KEY");
    if (!spath || !kpath)
        return bf_fail(err, errlen,
                       "a tcp:// endpoint needs CURVE keys: set BF_CURVE_SERVER (the server's "
                       ".pub file) and BF_CURVE_KEY (this client's .key file; see bfd keygen)");
    char server[41], secret[41], pub[41];
    if (proto_read_key(spath, server, err, errlen) || proto_read_key(kpath, secret, err, errlen))
        return -1;
    if (zmq_curve_public(pub, secret) != 0)
        return bf_fail(err, errlen, "zmq_curve_public(%s): %s", kpath, zmq_strerror(zmq_errno()));
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server, 40) ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, 40) ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, secret, 40))
        return bf_fail(err, errlen, "zmq_setsockopt(CURVE): %s", zmq_strerror(zmq_errno()));
    return 0;
}
