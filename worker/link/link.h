/* link — a worker's connection to bfd (docs/protocol.md, "Worker socket").
 *
 * link_open connects a DEALER, says hello and receives the trial's resolved
 * config. link_start then runs a thread (its own ZeroMQ socket use from then
 * on) that follows DIR/metrics.jsonl and sends its lines as points, seq =
 * line number, one batch in flight, resent from the last acked seq after 2 s
 * without an ack (a lost message, a bfd restart); it sends heartbeats and
 * sets *stop when bfd says `stop` (or refuses the token). link_finish sends
 * what is left, waits for its ack (bounded), sends `done` and joins.
 *
 * Functions return 0 or -1 with a message; nothing here prints, and one
 * thing exits: the thread ends the process (PROTO_EXIT_STALE, one line on
 * stderr) when the trial folder's PROTO_ATTEMPT_FILE names a newer attempt
 * than this one, so a worker bfd has failed over writes nothing more. */
#ifndef LINK_H
#define LINK_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

typedef struct link_t link_t;

typedef struct link_opts {
    const char
        *endpoint; /* ipc://... or tcp://... (CURVE keys from BF_CURVE_SERVER/BF_CURVE_KEY) */
    int64_t trial;
    const char *token; /* 32 hex digits */
    int attempt;
    double hello_timeout; /* seconds to keep retrying hello (bfd may be restarting) */
} link_opts;

/* Connects and fetches the config. *out owns a copy of the config text
 * (link_config). Returns 0, or -1 with a message (bad token, timeout), or
 * -2 when bfd refused this worker's CURVE key (its ZAP handler: the key is
 * not in curve/clients/), which another attempt would meet too. */
int link_open(link_t **out, const link_opts *o, char *err, size_t errlen);

/* The resolved config text from bfd's `config` reply. */
const char *link_config(const link_t *l);

/* Starts the thread that streams metrics_path and listens for `stop`
 * (which sets *stop = 1). Returns 0 or -1 with a message. */
int link_start(link_t *l, const char *metrics_path, volatile sig_atomic_t *stop, char *err,
               size_t errlen);

/* Flushes the remaining lines (waiting at most flush_timeout seconds for
 * their acks), sends done {state, exit_code, message} and stops the thread.
 * Returns 0 when every line was acked, -1 (with a message) otherwise. */
int link_finish(link_t *l, const char *state, int exit_code, const char *message,
                double flush_timeout, char *err, size_t errlen);

/* Closes the socket and frees everything; nulls *l. Safe on NULL. */
void link_destroy(link_t **l);

#endif
