/* ctl_client — bfctl's side of the control protocol (docs/protocol.md):
 * one DEALER to bfd's control socket, request/reply with a request id and a
 * receive timeout, plus a SUB to the PUB socket with the sync handshake.
 *
 * Endpoints: BF_ENDPOINT (e.g. tcp://host:7000, CURVE keys from
 * BF_CURVE_SERVER / BF_CURVE_KEY; PUB at port + 2), else
 * ipc://$BF_HOME/ctl.sock (BF_HOME default ~/.bf). Timeout: BF_TIMEOUT
 * seconds (default 10). */
#ifndef CTL_CLIENT_H
#define CTL_CLIENT_H

#include <jansson.h>
#include <stddef.h>

typedef struct ctl_conn ctl_conn;

/* Connects (checks that the ipc socket exists first, so a missing daemon
 * gives "bfd is not running ..."). Returns 0 or -1 with a message. */
int ctl_connect(ctl_conn **out, char *err, size_t errlen);
void ctl_close(ctl_conn **c);

/* Sends a request (body borrowed, NULL = {}) and waits for its reply.
 * Returns 0 with *reply (owned by the caller), 1 when bfd answered `error`
 * (err = "CODE: message", *reply = the error body), or -1 when there was no
 * answer (err says why). rtype (nullable, 33 bytes) gets the reply type. */
int ctl_call(ctl_conn *c, const char *type, json_t *body, json_t **reply, char *rtype, char *err,
             size_t errlen);
/* ctl_call for a command that gives up on any failure. Takes body (NULL
 * means building it failed: "out of memory"). Returns 0 with *reply (owned
 * by the caller), or -1 with *reply NULL after printing "bfctl: <why>" to
 * stderr (bfd's error, or why there was no answer). */
int ctl_call_or_say(ctl_conn *c, const char *type, json_t *body, json_t **reply);

/* Opens the SUB, subscribes to each topic and completes the sync
 * handshake. Returns 0 or -1 with a message. */
int ctl_subscribe(ctl_conn *c, const char *const *topics, int n, char *err, size_t errlen);
/* Next PUB message within timeout_ms: 0 with topic (65 bytes), type (33)
 * and *body (owned), 1 on timeout, -1 on error. */
int ctl_next_pub(ctl_conn *c, int timeout_ms, char *topic, char *type, json_t **body, char *err,
                 size_t errlen);

/* What the commands share (ctl_client.c); each says its own error as
 * "bfctl: ...". ctl_connect, or says why: 0 or -1. */
int ctl_connect_or_say(ctl_conn **c);
/* One request (body taken, NULL = {}); prints bfd's error and its `errors`
 * itself. Returns 0 with *reply, else 1. */
int ctl_request(ctl_conn *c, const char *type, json_t *body, json_t **reply);
/* A paged request (`jobs`, `job`): asks for the page after the reply's
 * "last" while it says "more", and returns the first reply with the arrays
 * `key` of every page joined into its own; "last" and "more" are dropped.
 * body is taken (not NULL). 0 with *reply, else 1 (said as ctl_request). */
int ctl_request_pages(ctl_conn *c, const char *type, json_t *body, const char *key, json_t **reply);
/* j indented, keys in order, on standard output. */
void ctl_print_json(json_t *j);
/* o's member k as an integer (0 when absent) or a string ("" when absent). */
long long ctl_jint(json_t *o, const char *k);
const char *ctl_jstr(json_t *o, const char *k);
/* Whether a trial in state will change no more (COMPLETED, FAILED, CANCELLED, STOPPED). */
int ctl_terminal_state(const char *state);
/* wait status of a job: 0 not done, 1 done ok, 2 done with failures, -1 error */
int ctl_job_done(ctl_conn *c, long long job);

#endif
