/* reply.c — what bfd sends: the reply to a request on a ROUTER socket (one
 * that cannot be sent, because its client has gone, is counted and logged
 * as a summary), events and metric points on the PUB socket, and the
 * escaping of outside text for log lines. It decides nothing: callers say
 * what to send and to whom; it neither reads the store nor touches a run. */
#include "daemon/bfd_priv.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

/* Counts a reply that could not be sent (the client has gone, mostly); the
 * first is logged at once, the rest by log_unsent as a count. */
static void note_unsent(bfd *d, const char *type, const char *err) {
    if (d->unsent++ == 0 && d->unsent_logged == 0) {
        bfd_log("reply %s not sent: %s (further ones are counted and logged every %.0f s)", type,
                err, UNSENT_LOG_EVERY);
        d->unsent_logged = 1;
    }
    if (!d->unsent_since) d->unsent_since = now_s();
    snprintf(d->unsent_err, sizeof d->unsent_err, "%s", err);
}

/* Logs how many replies went unsent since the last summary (called by the
 * loop; at most one line per UNSENT_LOG_EVERY seconds). */
void log_unsent(bfd *d, int force) {
    long long n = d->unsent - d->unsent_logged;
    if (n <= 0 || (!force && now_s() - d->unsent_since < UNSENT_LOG_EVERY)) return;
    bfd_log("%lld repl%s not sent in the last %.0f s (clients gone before their reply; last: %s)",
            n, n == 1 ? "y" : "ies", now_s() - d->unsent_since, d->unsent_err);
    d->unsent_logged = d->unsent;
    d->unsent_since = 0;
}

void reply(bfd *d, void *sock, proto_msg *m, const char *type, json_t *body) {
    char err[256];
    if (proto_send(sock, m, NULL, type, body, ZMQ_DONTWAIT, err, sizeof err))
        note_unsent(d, type, err);
}

void reply_err(bfd *d, void *sock, proto_msg *m, proto_code code, const char *fmt, ...) {
    char msg[2048], err[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (proto_send_error(sock, m, code, msg, ZMQ_DONTWAIT, err, sizeof err))
        note_unsent(d, "error", err);
}

/* Copies s into out with control characters, backslashes and bytes that
 * are not printable ASCII written as \n, \t, \\ or \xNN, so a value from
 * outside cannot forge log lines or send terminal escapes. */
const char *log_escape(const char *s, char *out, size_t outlen) {
    size_t w = 0;
    for (; *s && w + 5 < outlen; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '\n')
            w += (size_t)snprintf(out + w, outlen - w, "\\n");
        else if (ch == '\t')
            w += (size_t)snprintf(out + w, outlen - w, "\\t");
        else if (ch == '\\')
            w += (size_t)snprintf(out + w, outlen - w, "\\\\");
        else if (ch < 0x20 || ch >= 0x7f)
            w += (size_t)snprintf(out + w, outlen - w, "\\x%02x", ch);
        else
            out[w++] = (char)ch;
    }
    out[w < outlen ? w : outlen - 1] = '\0';
    if (*s && outlen > 4) memcpy(out + (w < outlen - 4 ? w : outlen - 4), "...", 4);
    return out;
}

void publish(bfd *d, const char *topic, const char *type, json_t *body) {
    char err[256];
    if (proto_send(d->pub, NULL, topic, type, body, ZMQ_DONTWAIT, err, sizeof err))
        bfd_log("publish %s not sent: %s", topic, err);
}

void publish_event(bfd *d, int64_t job, int64_t trial, const char *state, int attempt,
                   const char *message) {
    char topic[64];
    snprintf(topic, sizeof topic, "job/%lld", (long long)job);
    json_t *b = json_pack("{s:I, s:I, s:s, s:i, s:f, s:s}", "job", (json_int_t)job, "trial",
                          (json_int_t)trial, "state", state, "attempt", attempt, "time", now_s(),
                          "message", message ? message : "");
    if (!b) return;
    publish(d, topic, "event", b);
    json_decref(b);
}
