/* proto — the bf wire format over ZeroMQ (docs/protocol.md is the reference):
 * every message is the frames "bf" | version | type | JSON body, optionally
 * after an empty delimiter (REQ peers), with a routing-id frame in front on a
 * ROUTER and a topic frame in front on PUB/SUB.
 *
 * Receiving validates the envelope and parses the body; the field helpers
 * validate each field (type, range, length) before use. Every function
 * returns a status and writes a message into the caller's buffer; nothing
 * here exits or prints. */
#ifndef PROTO_H
#define PROTO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PROTO_NAME "bf"
#define PROTO_VERSION 1
#define PROTO_MAX_FRAME (16u << 20) /* ZMQ_MAXMSGSIZE: larger frames drop the connection */
#define PROTO_MAX_BODY (8u << 20)   /* larger bodies get error too_large */
#define PROTO_MAX_FRAMES 4          /* after an optional empty delimiter */
#define PROTO_MAX_TYPE 32
#define PROTO_MAX_STR 4096
#define PROTO_MAX_TEXT (1u << 20) /* sweep and config text */
#define PROTO_MAX_PATH 1024
#define PROTO_TOKEN_LEN 32
#define PROTO_MAX_POINTS 4096
#define PROTO_MAX_VALUES 64
#define PROTO_MAX_NAME 63
#define PROTO_MAX_TOPIC 64
#define PROTO_MAX_INT 9007199254740992LL /* 2^53: exact in a double, so any JSON reader agrees */
#define PROTO_MAX_IDENT 256              /* ZeroMQ routing ids are at most 255 bytes */

typedef enum {
    PROTO_OK = 0,
    PROTO_E_FRAMES,
    PROTO_E_VERSION,
    PROTO_E_TYPE,
    PROTO_E_TOO_LARGE,
    PROTO_E_JSON,
    PROTO_E_FIELD,
    PROTO_E_INVALID_SWEEP,
    PROTO_E_NOT_FOUND,
    PROTO_E_STATE,
    PROTO_E_TOKEN,
    PROTO_E_INTERNAL,
    PROTO_N_CODES
} proto_code;

/* "bad_frames", "bad_version", ... as on the wire; "" past the end. */
const char *proto_code_name(proto_code c);

/* One received message. `body` is owned (json_decref via proto_msg_clear). */
typedef struct proto_msg {
    unsigned char ident[PROTO_MAX_IDENT]; /* ROUTER routing id */
    size_t ident_len;                     /* 0: none read */
    int delim;                            /* the message began with an empty frame */
    char topic[PROTO_MAX_TOPIC + 1];      /* SUB: the topic frame */
    char type[PROTO_MAX_TYPE + 1];
    json_t *body;
    int has_req;
    long long req;
} proto_msg;

void proto_msg_clear(proto_msg *m);

enum { PROTO_RECV_ROUTED = 1, PROTO_RECV_TOPIC = 2 };

/* Receives one whole multipart message from sock (zmq flags: 0 or
 * ZMQ_DONTWAIT; a socket ZMQ_RCVTIMEO applies). `mode` says which leading
 * frames to expect (PROTO_RECV_ROUTED: a routing id; PROTO_RECV_TOPIC: a
 * topic). Returns:
 *    0  a message was read; *code is PROTO_OK (m filled) or the protocol
 *       error that makes it unusable (err says why; m->ident, m->delim and
 *       m->req are filled as far as they could be read, so the caller can
 *       reply with proto_send_error);
 *    1  no message (EAGAIN: nothing pending or the receive timed out);
 *   -1  the socket failed (err names zmq_msg_recv and carries zmq's text).
 * The frames of a bad message are always drained. */
int proto_recv(void *sock, int flags, int mode, proto_msg *m, proto_code *code, char *err,
               size_t errlen);

/* The file rank 0 of `bfworker run` leaves in its --out folder once every
 * metrics line is acked and `done` is sent: "ATTEMPT STATE EXIT_CODE\n"
 * (STATE completed | preempted | failed), written atomically. A bfd that
 * finds the worker gone after a restart takes the outcome from it. */
#define PROTO_OUTCOME_FILE "outcome"

/* The fence bfd writes into the trial's folder (shared by every node)
 * before it starts an attempt: "ATTEMPT\n", written atomically. A worker
 * that reads a higher attempt there than its own is stale (bfd failed it
 * over, e.g. its node was cut off) and exits at once with PROTO_EXIT_STALE,
 * writing nothing more: no metrics line, no checkpoint over the newer
 * attempt's. */
#define PROTO_ATTEMPT_FILE "attempt"
#define PROTO_EXIT_STALE 76

/* The exit status (and `done` exit_code) of a worker whose config or data is
 * wrong (EX_USAGE): another attempt would fail the same way, so bfd does not
 * retry it. Any other failure status is a runtime failure, retried. */
#define PROTO_EXIT_INPUT 64

/* One received frame, as proto_decode reads it. */
typedef struct proto_frame {
    const void *data;
    size_t len;
} proto_frame;

/* Frames proto_recv keeps and decodes; a message with more is drained and
 * refused (bad_frames). */
#define PROTO_DECODE_FRAMES 8

/* The decoder proto_recv uses, on frames already received: fr[0..kept) of
 * a message of `total` frames (kept <= PROTO_DECODE_FRAMES). Fills m and
 * *code exactly as proto_recv does (m is cleared first; the caller owns
 * m->body after). No I/O; the unit the protocol fuzzer drives. */
void proto_decode(const proto_frame *fr, int kept, int total, int mode, proto_msg *m,
                  proto_code *code, char *err, size_t errlen);

/* Sends "bf" | "1" | type | body. route (nullable): when it has a routing id
 * that frame goes first, and an empty delimiter when route->delim. topic
 * (nullable): a leading topic frame (PUB). body is borrowed; NULL sends {}.
 * When route->has_req the body gets "req" (body is modified). flags: 0 or
 * ZMQ_DONTWAIT. Returns 0, 1 when the send would block (EAGAIN; nothing
 * sent), or -1 with zmq's text (EHOSTUNREACH: the peer is gone). */
int proto_send(void *sock, const proto_msg *route, const char *topic, const char *type,
               json_t *body, int flags, char *err, size_t errlen);

/* An `error` reply {"code", "message", "req"?} to route. Returns as proto_send. */
int proto_send_error(void *sock, const proto_msg *route, proto_code code, const char *message,
                     int flags, char *err, size_t errlen);

/* 1 if s is a valid type: 1-32 characters of [a-z0-9_]. */
int proto_type_ok(const char *s, size_t len);
/* 1 if s is a valid metric name: 1-63 bytes, printable ASCII, no space, '"' or '\'. */
int proto_name_ok(const char *s);

/* ---- field helpers: each returns 0, or -1 with "'key' must be ..." in err.
 * A missing optional field leaves *out at the default given. ---- */

int proto_get_int(json_t *body, const char *key, int required, long long min, long long max,
                  long long def, long long *out, char *err, size_t errlen);
/* A finite JSON number (integer or real). */
int proto_get_num(json_t *body, const char *key, int required, double def, double *out, char *err,
                  size_t errlen);
/* A string without NUL bytes of at most maxlen bytes (min 1 when required).
 * *out is borrowed from body. A missing optional string gives NULL. */
int proto_get_str(json_t *body, const char *key, int required, size_t maxlen, const char **out,
                  char *err, size_t errlen);
/* A token: exactly 32 characters [0-9a-f]. */
int proto_get_token(json_t *body, const char *key, char out[PROTO_TOKEN_LEN + 1], char *err,
                    size_t errlen);

/* One point (a line of metrics.jsonl). Names are borrowed from the JSON they
 * were parsed from. */
typedef struct proto_point {
    int64_t seq, step;
    double time;
    int n;
    const char *name[PROTO_MAX_VALUES];
    double value[PROTO_MAX_VALUES];
    unsigned char is_null[PROTO_MAX_VALUES];
} proto_point;

/* One point of a proto_points: its values are val[first .. first + nv). */
typedef struct proto_pt {
    int64_t seq, step;
    double time;
    uint32_t first, nv;
} proto_pt;

/* One value of a proto_points: its name at names + name. */
typedef struct proto_val {
    uint32_t name;
    double value;
} proto_val;

/* The points of a metrics body, copied out of it: what a daemon keeps of a
 * batch until it stores it, so the body (up to 8 MiB of JSON, several times
 * that once parsed) goes at once. Null values are left out (nothing stores
 * or shows them); a point's names share one buffer, a name repeated at the
 * same place in consecutive points once. */
typedef struct proto_points {
    size_t n;       /* points */
    proto_pt *pt;   /* n of them */
    proto_val *val; /* every value of every point */
    size_t n_val;
    char *names;  /* NUL-terminated names, one after another */
    size_t bytes; /* heap bytes the set holds */
} proto_points;

/* Validates body["points"] (1..max points, seq rising by 1, each point's
 * fields as docs/protocol.md says) and copies them into *out, which owns
 * its memory (proto_points_free); nothing in it points into body. Returns 0,
 * or -1 with a message naming the point (*out then empty). */
int proto_points_parse(json_t *body, size_t max, proto_points *out, char *err, size_t errlen);
/* Frees what ps holds and empties it. */
void proto_points_free(proto_points *ps);
/* Point i of ps as a new JSON object {"seq", "step", "time", "values"}; NULL
 * when out of memory. */
json_t *proto_points_json(const proto_points *ps, size_t i);

/* A new JSON object for p; nulls included when with_null, else left out.
 * NULL when out of memory. */
json_t *proto_point_json(const proto_point *p, int with_null);

/* Parses one metrics.jsonl line {"step": N, "time": T, name: value|null, ...}
 * into p with the given seq (names point into *holder, which the caller
 * json_decref's). Returns 0, or -1 for a line that is not such an object. */
int proto_parse_jsonl_line(const char *line, size_t len, int64_t seq, proto_point *p,
                           json_t **holder);

/* A hex token of 32 characters from the kernel's random source. Returns 0
 * or -1 with a message. */
int proto_random_token(char out[PROTO_TOKEN_LEN + 1], char *err, size_t errlen);

/* Z85 CURVE key files: reads the first 40 characters of path into out[41].
 * Returns 0 or -1 with a message. */
int proto_read_key(const char *path, char out[41], char *err, size_t errlen);
/* Sets CURVE client options on sock from the files named by BF_CURVE_SERVER
 * (server public key) and BF_CURVE_KEY (client secret key; its public key
 * is derived). Returns 0 or -1 with a message. */
int proto_curve_client(void *sock, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
