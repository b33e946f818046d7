/* prom.c — the Prometheus endpoint (see prom.h): renders the snapshot the
 * loop copies in, on libmicrohttpd's thread. That thread must never touch
 * the store, a ZeroMQ socket or the run table: only the snapshot, under its
 * mutex. */
#include "daemon/prom.h"
#include "common/errbuf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PROM_MAX_RUNS 4096 /* running attempts shown (more than any bfd holds) */
#define PROM_MAX_TRIAL_VALUES 8192

static const double BUCKETS[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                 0.05,   0.1,   0.25,   0.5,   1,    2.5};
#define N_BUCKETS (sizeof BUCKETS / sizeof BUCKETS[0])

typedef struct trial_values {
    int64_t trial;
    double loss, tokens_per_s;
} trial_values;

struct prom {
    struct MHD_Daemon *mhd;
    int fd;
    pthread_mutex_t mu;
    double started;
    /* the snapshot, under mu */
    prom_state st;
    prom_run *runs;
    long long points, values, batches;
    unsigned long long bucket[N_BUCKETS]; /* not cumulative: per bucket */
    double latency_sum;
    trial_values *tv;
    size_t n_tv;
    long long scrapes;
};

/* ------------------------------------------------------------------ render */

typedef struct out {
    char *p;
    size_t n, cap;
    int bad;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...) {
    if (o->bad) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(o->p + o->n, o->cap - o->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            o->bad = 1;
            return;
        }
        if (o->n + (size_t)k < o->cap) {
            o->n += (size_t)k;
            return;
        }
        size_t cap = o->cap * 2 + (size_t)k + 1;
        char *q = realloc(o->p, cap);
        if (!q) {
            o->bad = 1;
            return;
        }
        o->p = q;
        o->cap = cap;
    }
}

static void head(out *o, const char *name, const char *type, const char *help) {
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Prometheus floats: NaN and the infinities spelled its way. */
static void num(char *buf, size_t len, double x) {
    if (isnan(x))
        snprintf(buf, len, "NaN");
    else if (isinf(x))
        snprintf(buf, len, x > 0 ? "+Inf" : "-Inf");
    else
        for (int prec = 6; prec <= 17; prec++) { /* the shortest text that reads back as x */
            snprintf(buf, len, "%.*g", prec, x);
            if (strtod(buf, NULL) == x) break;
        }
}

static const trial_values *values_of(const prom *p, int64_t trial) {
    for (size_t i = 0; i < p->n_tv; i++)
        if (p->tv[i].trial == trial) return &p->tv[i];
    return NULL;
}

char *prom_render(prom *p, size_t *len) {
    out o = {.p = malloc(8192), .cap = 8192};
    if (!o.p) return NULL;
    o.p[0] = '\0';
    pthread_mutex_lock(&p->mu);
    p->scrapes++;
    const prom_state *s = &p->st;
    char b[64];
    head(&o, "bf_daemon_start_time_seconds", "gauge", "Unix time bfd started.");
    num(b, sizeof b, p->started);
    put(&o, "bf_daemon_start_time_seconds %s\n", b);
    head(&o, "bf_jobs", "gauge", "Jobs in the store.");
    put(&o, "bf_jobs %lld\n", s->jobs);
    head(&o, "bf_trials", "gauge", "Trials in the store by state.");
    for (int k = 0; k < TRIAL_N_STATES; k++)
        put(&o, "bf_trials{state=\"%s\"} %lld\n", store_state_name((trial_state)k), s->trials[k]);
    head(&o, "bf_queue_length", "gauge", "Trials waiting to run (PENDING).");
    put(&o, "bf_queue_length %lld\n", s->trials[TRIAL_PENDING]);
    head(&o, "bf_slots", "gauge", "CPU slots bfd hands out (bfd.yaml slots).");
    put(&o, "bf_slots %d\n", s->slots);
    head(&o, "bf_slots_used", "gauge", "Slots held by running attempts.");
    put(&o, "bf_slots_used %d\n", s->slots_used);
    head(&o, "bf_gpus", "gauge", "GPUs bfd hands out.");
    put(&o, "bf_gpus %d\n", s->gpus);
    head(&o, "bf_gpus_used", "gauge", "GPUs held by running attempts.");
    put(&o, "bf_gpus_used %d\n", s->gpus_used);
    head(&o, "bf_running_trials", "gauge", "Attempts bfd is running or watching.");
    put(&o, "bf_running_trials %zu\n", s->n_runs);
    head(&o, "bf_metric_points_ingested_total", "counter",
         "Metric points (one step's values) received from workers.");
    put(&o, "bf_metric_points_ingested_total %lld\n", p->points);
    head(&o, "bf_metric_values_ingested_total", "counter",
         "Metric values (name, value pairs) received from workers.");
    put(&o, "bf_metric_values_ingested_total %lld\n", p->values);
    head(&o, "bf_ingest_latency_seconds", "histogram",
         "Seconds from reading a worker's metrics message to its points stored and acknowledged.");
    unsigned long long cum = 0;
    for (size_t i = 0; i < N_BUCKETS; i++) {
        cum += p->bucket[i];
        num(b, sizeof b, BUCKETS[i]);
        put(&o, "bf_ingest_latency_seconds_bucket{le=\"%s\"} %llu\n", b, cum);
    }
    put(&o, "bf_ingest_latency_seconds_bucket{le=\"+Inf\"} %lld\n", p->batches);
    num(b, sizeof b, p->latency_sum);
    put(&o, "bf_ingest_latency_seconds_sum %s\n", b);
    put(&o, "bf_ingest_latency_seconds_count %lld\n", p->batches);
    head(&o, "bf_trial_heartbeat_age_seconds", "gauge",
         "Seconds since a running trial's worker last sent a message.");
    for (size_t i = 0; i < s->n_runs; i++) {
        num(b, sizeof b, s->runs[i].heartbeat_age);
        put(&o, "bf_trial_heartbeat_age_seconds{trial=\"%lld\",job=\"%lld\"} %s\n",
            (long long)s->runs[i].trial, (long long)s->runs[i].job, b);
    }
    const char *names[2] = {"bf_trial_train_loss", "bf_trial_tokens_per_second"};
    const char *helps[2] = {"Latest train/loss of a running trial.",
                            "Latest train/tokens_per_s of a running trial."};
    for (int m = 0; m < 2; m++) {
        head(&o, names[m], "gauge", helps[m]);
        for (size_t i = 0; i < s->n_runs; i++) {
            const trial_values *tv = values_of(p, s->runs[i].trial);
            double x = !tv ? NAN : m == 0 ? tv->loss : tv->tokens_per_s;
            if (isnan(x)) continue;
            num(b, sizeof b, x);
            put(&o, "%s{trial=\"%lld\",job=\"%lld\"} %s\n", names[m], (long long)s->runs[i].trial,
                (long long)s->runs[i].job, b);
        }
    }
    head(&o, "bf_scrapes_total", "counter", "Pages served by this endpoint.");
    put(&o, "bf_scrapes_total %lld\n", p->scrapes);
    pthread_mutex_unlock(&p->mu);
    if (o.bad) {
        free(o.p);
        return NULL;
    }
    if (len) *len = o.n;
    return o.p;
}

/* ------------------------------------------------------------------ server */

static enum MHD_Result answer(struct MHD_Response *r, struct MHD_Connection *c, unsigned code,
                              const char *type) {
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **req) {
    (void)version;
    (void)upload;
    prom *p = cls;
    static int first;
    if (*req == NULL) { /* headers only so far; answer on the next call */
        *req = &first;
        return MHD_YES;
    }
    if (*upload_size) { /* no request bodies here */
        *upload_size = 0;
        return MHD_YES;
    }
    static const char plain[] = "text/plain; charset=utf-8";
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        static const char msg[] = "only GET /metrics\n";
        struct MHD_Response *r =
            MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
        if (r) MHD_add_response_header(r, "Allow", "GET, HEAD");
        return answer(r, c, MHD_HTTP_METHOD_NOT_ALLOWED, plain);
    }
    if (strcmp(url, "/metrics") == 0) {
        size_t n;
        char *page = prom_render(p, &n);
        if (!page) {
            static const char msg[] = "out of memory\n";
            return answer(MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg,
                                                          MHD_RESPMEM_PERSISTENT),
                          c, MHD_HTTP_INTERNAL_SERVER_ERROR, plain);
        }
        return answer(MHD_create_response_from_buffer(n, page, MHD_RESPMEM_MUST_FREE), c,
                      MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8");
    }
    if (strcmp(url, "/") == 0) {
        static const char msg[] = "bfd: metrics at /metrics\n";
        return answer(
            MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT), c,
            MHD_HTTP_OK, plain);
    }
    static const char msg[] = "not found: bfd serves /metrics\n";
    return answer(
        MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT), c,
        MHD_HTTP_NOT_FOUND, plain);
}

int prom_new(double started, prom **out, char *err, size_t errlen) {
    prom *p = calloc(1, sizeof *p);
    if (!p) return bf_fail(err, errlen, "out of memory");
    p->started = started;
    p->fd = -1;
    pthread_mutex_init(&p->mu, NULL);
    *out = p;
    return 0;
}

int prom_listen(prom *p, const char *addr, char *err, size_t errlen) {
    char host[64];
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof host)
        return bf_fail(err, errlen, "prometheus: '%s' is not ADDRESS:PORT", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    long port = strtol(colon + 1, NULL, 10);
    sa.sin_port = htons((uint16_t)port);
    if (port < 1 || port > 65535 || inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return bf_fail(err, errlen, "prometheus: '%s' is not IPV4:PORT", addr);
    /* our own listening socket: a taken port is reported with the system's words */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 32) != 0) {
        int rc = bf_fail(err, errlen, "prometheus: cannot listen on %s: %s", addr, strerror(errno));
        if (fd >= 0) close(fd);
        return rc;
    }
    p->fd = fd;
    p->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, on_request, p,
                              MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)64, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                              MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536, MHD_OPTION_END);
    if (!p->mhd) return bf_fail(err, errlen, "prometheus: MHD_start_daemon on %s failed", addr);
    return 0;
}

void prom_stop(prom **pp) {
    prom *p = *pp;
    if (!p) return;
    *pp = NULL;
    if (p->mhd) MHD_stop_daemon(p->mhd);
    if (p->fd >= 0) close(p->fd);
    pthread_mutex_destroy(&p->mu);
    free(p->runs);
    free(p->tv);
    free(p);
}

/* ---------------------------------------------------------------- updates */

void prom_set_state(prom *p, const prom_state *s) {
    if (!p) return;
    size_t n = s->n_runs < PROM_MAX_RUNS ? s->n_runs : PROM_MAX_RUNS;
    prom_run *copy = n ? malloc(n * sizeof *copy) : NULL;
    if (n && !copy) return; /* keep the old snapshot */
    if (n) memcpy(copy, s->runs, n * sizeof *copy);
    pthread_mutex_lock(&p->mu);
    free(p->runs);
    p->runs = copy;
    p->st = *s;
    p->st.runs = copy;
    p->st.n_runs = n;
    /* forget the values of trials no longer running */
    size_t k = 0;
    for (size_t i = 0; i < p->n_tv; i++) {
        int live = 0;
        for (size_t r = 0; r < n && !live; r++) live = copy[r].trial == p->tv[i].trial;
        if (live) p->tv[k++] = p->tv[i];
    }
    p->n_tv = k;
    pthread_mutex_unlock(&p->mu);
}

void prom_ingest(prom *p, size_t n_batches, long long points, long long values, double latency) {
    if (!p || n_batches == 0) return;
    size_t b = 0;
    while (b < N_BUCKETS && latency > BUCKETS[b]) b++;
    pthread_mutex_lock(&p->mu);
    p->points += points;
    p->values += values;
    p->batches += (long long)n_batches;
    if (b < N_BUCKETS) p->bucket[b] += n_batches;
    p->latency_sum += latency * (double)n_batches;
    pthread_mutex_unlock(&p->mu);
}

static void trial_values_set(prom *p, int64_t trial, double loss, double tokens_per_s) {
    if (isnan(loss) && isnan(tokens_per_s)) return;
    pthread_mutex_lock(&p->mu);
    trial_values *tv = NULL;
    for (size_t i = 0; i < p->n_tv && !tv; i++)
        if (p->tv[i].trial == trial) tv = &p->tv[i];
    if (!tv && p->n_tv < PROM_MAX_TRIAL_VALUES) {
        trial_values *q = realloc(p->tv, (p->n_tv + 1) * sizeof *q);
        if (q) {
            p->tv = q;
            tv = &p->tv[p->n_tv++];
            *tv = (trial_values){.trial = trial, .loss = NAN, .tokens_per_s = NAN};
        }
    }
    if (tv) {
        if (!isnan(loss)) tv->loss = loss;
        if (!isnan(tokens_per_s)) tv->tokens_per_s = tokens_per_s;
    }
    pthread_mutex_unlock(&p->mu);
}

void prom_trial_points(prom *p, int64_t trial, const proto_point *pts, size_t n) {
    if (!p) return;
    double loss = NAN, tps = NAN;
    for (size_t i = 0; i < n; i++)
        for (int v = 0; v < pts[i].n; v++) {
            if (pts[i].is_null[v]) continue;
            if (strcmp(pts[i].name[v], "train/loss") == 0) loss = pts[i].value[v];
            if (strcmp(pts[i].name[v], "train/tokens_per_s") == 0) tps = pts[i].value[v];
        }
    trial_values_set(p, trial, loss, tps);
}
