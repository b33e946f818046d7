/* prom — bfd's Prometheus endpoint: GET /metrics in the text exposition
 * format (version 0.0.4), served by libmicrohttpd on a thread of its own.
 *
 * The HTTP thread reads only a snapshot that the event loop copies in under
 * a mutex (prom_set_state, prom_ingest, prom_trial_values); it never touches
 * the store or a ZeroMQ socket, so a slow or hostile scraper cannot delay
 * the loop by more than one short lock.
 *
 * Metric names are listed in docs/daemon.md. */
#ifndef PROM_H
#define PROM_H

#include <stddef.h>
#include <stdint.h>

#include "jobs/store.h"
#include "protocol/proto.h"

typedef struct prom prom;

/* One running attempt, as the snapshot shows it. */
typedef struct prom_run {
    int64_t trial, job;
    double heartbeat_age; /* s since the worker's last message */
    int slots, gpus;
} prom_run;

typedef struct prom_state {
    long long jobs;
    long long trials[TRIAL_N_STATES];
    int slots, slots_used, gpus, gpus_used;
    const prom_run *runs; /* copied */
    size_t n_runs;
} prom_state;

/* A snapshot with no listener yet (the dashboard's server renders it at its
 * own /metrics). Returns 0, or -1 when out of memory. */
int prom_new(double started, prom **out, char *err, size_t errlen);
/* Listens on addr ("IPV4:PORT") and serves /metrics from a thread, with no
 * token (bfd.yaml prometheus:). Returns 0, or -1 with a message naming the
 * address and the system's error. */
int prom_listen(prom *p, const char *addr, char *err, size_t errlen);
/* Stops the server thread, if any, and frees. NULL is fine. */
void prom_stop(prom **p);

/* Replaces the snapshot (the loop calls it after each round). */
void prom_set_state(prom *p, const prom_state *s);
/* One round of ingest: points and values stored from n_batches metrics
 * messages, and each message's latency (read to acknowledged) in seconds. */
void prom_ingest(prom *p, size_t n_batches, long long points, long long values, double latency);
/* Notes the latest train/loss and train/tokens_per_s among a trial's new
 * points. */
void prom_trial_points(prom *p, int64_t trial, const proto_point *pts, size_t n);

/* The page as the endpoint serves it (malloc'd, NUL-terminated; NULL when
 * out of memory): for tests and for the handler. */
char *prom_render(prom *p, size_t *len);

#endif
