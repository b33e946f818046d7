/* bench_store — the SQLite job store under load: metric points inserted per
 * second (batched transactions, per batch size) and the latency of the
 * queries the daemon and bfctl make, with 10,000 trials and (by default) 10
 * million metric points in the database.
 *
 *   bench_store [--trials N] [--points N] [--batch N] [--concurrent N] [--reps N]
 *               [--db PATH] [--keep] [--json]
 *
 * Metrics are written as a sweep produces them: `concurrent` trials run at a
 * time and their points arrive interleaved, `batch` points per transaction.
 *
 * The table goes to stdout; --json writes one JSON object instead. */
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/opts.h"
#include "jobs/store.h"
#include "jobs/sweep.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *err) {
    fprintf(stderr, "bench_store: %s: %s\n", what, err);
    exit(1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct lat {
    const char *name;
    double p50_ms, p99_ms, mean_ms;
    long rows;
} lat;

/* Submits a grid of n trials (train.seed 1..a x train.warmup 1..b). */
static int64_t submit_grid(store *s, const char *name, int n, char *err, size_t errlen) {
    int a = n >= 100 ? 100 : n, b = (n + a - 1) / a;
    size_t cap = 64 + 8 * (size_t)(a + b) + 256;
    char *text = malloc(cap);
    size_t w = (size_t)snprintf(
        text, cap, "name: %s\nsweep:\n  parameters:\n    train.seed: {values: [", name);
    for (int i = 1; i <= a; i++)
        w += (size_t)snprintf(text + w, cap - w, "%s%d", i > 1 ? ", " : "", i);
    w += (size_t)snprintf(text + w, cap - w, "]}\n    train.warmup: {values: [");
    for (int i = 1; i <= b; i++)
        w += (size_t)snprintf(text + w, cap - w, "%s%d", i > 1 ? ", " : "", i);
    snprintf(text + w, cap - w, "]}\nmetric: {name: val/acc, goal: max}\n");
    sweep_spec *sp = NULL;
    sweep_errors e = {0};
    if (sweep_load_string(text, strlen(text), "bench.yaml", &sp, &e) < 0)
        die("sweep_load_string", e.n ? e.msgs[0] : "?");
    int64_t job = 0;
    if (store_submit(s, sp, NULL, &job, err, errlen) < 0) die("store_submit", err);
    sweep_spec_destroy(&sp);
    free(text);
    return job;
}

static const char *const NAMES[] = {"train/loss", "train/lr", "val/acc", "val/loss"};

/* Inserts `points` points spread evenly over trials ids[0..n), as a daemon
 * receives them from n running workers: round-robin, one sequence number
 * (4 metric names) per trial per round, `batch` points per transaction.
 * seqs[t] counts trial t's points so far. Returns seconds. */
static double fill(store *s, const int64_t *ids, int n, long long points, int batch,
                   long long *seqs, char *err, size_t errlen) {
    store_metric *pts = malloc((size_t)batch * sizeof *pts);
    int64_t *tid = malloc((size_t)batch * sizeof *tid);
    long long done = 0;
    int m = 0;
    double t0 = now_s();
    while (done < points) {
        for (int t = 0; t < n && done < points; t++) {
            for (int k4 = 0; k4 < 4 && done < points; k4++, done++) {
                long long k = seqs[t]++;
                tid[m] = ids[t];
                pts[m].seq = k / 4 + 1;
                pts[m].step = (k / 4 + 1) * 10;
                pts[m].name = NAMES[k % 4];
                pts[m].value =
                    (k % 4 == 2) ? 0.5 + 0.4 * sin((double)(k + t)) : 1.0 / (double)(k + 1);
                pts[m].time = 1.7e9 + (double)k;
                if (++m == batch) {
                    if (store_metrics_insert_many(s, tid, pts, (size_t)m, err, errlen) < 0)
                        die("store_metrics_insert_many", err);
                    m = 0;
                }
            }
        }
    }
    if (m && store_metrics_insert_many(s, tid, pts, (size_t)m, err, errlen) < 0)
        die("store_metrics_insert_many", err);
    double dt = now_s() - t0;
    free(pts);
    free(tid);
    return dt;
}

typedef int (*query_fn)(store *s, void *ud, long *rows, char *err, size_t errlen);

static lat measure(const char *name, store *s, query_fn fn, void *ud, int reps) {
    double *t = malloc((size_t)reps * sizeof *t);
    char err[512];
    long rows = 0;
    double sum = 0;
    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        if (fn(s, ud, &rows, err, sizeof err) < 0) die(name, err);
        t[i] = (now_s() - t0) * 1e3;
        sum += t[i];
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    lat l = {name, t[reps / 2], t[(int)(0.99 * (reps - 1))], sum / reps, rows};
    free(t);
    return l;
}

typedef struct qctx {
    int64_t big_job, small_job, trial;
    long long last_seq;
    int64_t *running;
    int next_running, n_running;
} qctx;

static int q_next(store *s, void *ud, long *rows, char *err, size_t errlen) {
    (void)ud;
    store_trial *t;
    size_t n;
    if (store_next_runnable(s, 16, &t, &n, err, errlen) < 0) return -1;
    store_trials_free(t, n);
    *rows = (long)n;
    return 0;
}
static int q_job_big(store *s, void *ud, long *rows, char *err, size_t errlen) {
    store_trial *t;
    size_t n;
    if (store_job_trials(s, ((qctx *)ud)->big_job, &t, &n, err, errlen) < 0) return -1;
    store_trials_free(t, n);
    *rows = (long)n;
    return 0;
}
static int q_job_small(store *s, void *ud, long *rows, char *err, size_t errlen) {
    store_trial *t;
    size_t n;
    if (store_job_trials(s, ((qctx *)ud)->small_job, &t, &n, err, errlen) < 0) return -1;
    store_trials_free(t, n);
    *rows = (long)n;
    return 0;
}
static int q_best(store *s, void *ud, long *rows, char *err, size_t errlen) {
    store_trial *t;
    size_t n;
    if (store_best_trials(s, ((qctx *)ud)->big_job, 10, &t, &n, err, errlen) < 0) return -1;
    store_trials_free(t, n);
    *rows = (long)n;
    return 0;
}
static int q_tail(store *s, void *ud, long *rows, char *err, size_t errlen) {
    qctx *q = ud;
    store_point *p;
    size_t n;
    if (store_metric_history(s, q->trial, q->last_seq - 25, 100, &p, &n, err, errlen) < 0)
        return -1;
    free(p);
    *rows = (long)n;
    return 0;
}
static int q_history(store *s, void *ud, long *rows, char *err, size_t errlen) {
    store_point *p;
    size_t n;
    if (store_metric_history(s, ((qctx *)ud)->trial, 0, 1 << 30, &p, &n, err, errlen) < 0)
        return -1;
    free(p);
    *rows = (long)n;
    return 0;
}
static int q_get(store *s, void *ud, long *rows, char *err, size_t errlen) {
    store_trial t;
    if (store_get_trial(s, ((qctx *)ud)->trial, &t, err, errlen) < 0) return -1;
    store_trial_free(&t);
    *rows = 1;
    return 0;
}
static int q_transition(store *s, void *ud, long *rows, char *err, size_t errlen) {
    qctx *q = ud;
    if (q->next_running >= q->n_running) return 0;
    *rows = 1;
    return store_trial_transition(s, q->running[q->next_running++], TRIAL_RUNNING, "bench", err,
                                  errlen);
}

static void machine(char *cpu, size_t n) {
    snprintf(cpu, n, "unknown");
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (!fp) return;
    char line[512];
    while (fgets(line, sizeof line, fp))
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c += 2;
                c[strcspn(c, "\n")] = '\0';
                snprintf(cpu, n, "%s", c);
            }
            break;
        }
    fclose(fp);
}

static long long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : 0;
}

/* The command line (store_opts). */
typedef struct store_cli {
    int trials, batch, reps, json, keep, concurrent;
    long long points;
    const char *db;
} store_cli;

#define ST(f) OPT_AT(store_cli, f)
static const opt_spec store_opts[] = {
    {"trials", 0, OPT_INT, 100, 100000000, ST(trials), "N", "trials (10000)"},
    {"points", 0, OPT_LONG, 100, 1e12, ST(points), "N", "metric points, at least --trials (1e7)"},
    {"batch", 0, OPT_INT, 1, 100000000, ST(batch), "N", "points per transaction (1000)"},
    {"concurrent", 0, OPT_INT, 1, 1000000, ST(concurrent), "N", "trials running at a time (16)"},
    {"reps", 0, OPT_INT, 1, 1000000, ST(reps), "N", "repetitions of each query (50)"},
    {"db", 0, OPT_STR, 0, 0, ST(db), "PATH", "the database (default: a temporary one)"},
    {"keep", 0, OPT_FLAG, 0, 0, ST(keep), NULL, "leave the database"},
    {"json", 0, OPT_FLAG, 0, 0, ST(json), NULL, "one JSON object instead of the table"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int main(int argc, char **argv) {
    store_cli cli = {
        .trials = 10000, .batch = 1000, .reps = 50, .concurrent = 16, .points = 10000000};
    int rest = argc;
    int prc = opts_parse("bench_store",
                         "usage: bench_store [options]\n"
                         "  the SQLite job store under load: metric points inserted per second "
                         "and\n  the latency of the queries the daemon and bfctl make\n",
                         store_opts, argc, argv, 1, &cli, &rest);
    if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : 64;
    if (rest < argc) {
        fprintf(stderr, "bench_store: unexpected argument '%s'\n", argv[rest]);
        return 64;
    }
    int trials = cli.trials, batch = cli.batch, reps = cli.reps, json = cli.json, keep = cli.keep,
        concurrent = cli.concurrent;
    long long points = cli.points;
    const char *db = cli.db;
    if (points < trials) {
        fprintf(stderr, "bench_store: --points %lld is below --trials %d\n", points, trials);
        return 64;
    }
    char dir[] = "/tmp/bench_store_XXXXXX", path[512];
    if (!db) {
        if (!mkdtemp(dir)) die("mkdtemp", "failed");
        snprintf(path, sizeof path, "%s/store.db", dir);
        db = path;
    }
    char err[512];
    store *s = NULL;
    if (store_open(db, &s, err, sizeof err) < 0) die("store_open", err);

    /* jobs: the big one (metrics spread over all its trials) and a small one */
    double t0 = now_s();
    int64_t big = submit_grid(s, "big", trials, err, sizeof err);
    double submit_s = now_s() - t0;
    int64_t small = submit_grid(s, "small", 100, err, sizeof err);
    store_trial *rows;
    size_t nb, ns;
    if (store_job_trials(s, big, &rows, &nb, err, sizeof err) < 0) die("store_job_trials", err);
    int64_t *ids = malloc(nb * sizeof *ids);
    for (size_t i = 0; i < nb; i++) ids[i] = rows[i].id;
    store_trials_free(rows, nb);
    if (store_job_trials(s, small, &rows, &ns, err, sizeof err) < 0) die("store_job_trials", err);
    int64_t *sids = malloc(ns * sizeof *sids);
    for (size_t i = 0; i < ns; i++) sids[i] = rows[i].id;
    store_trials_free(rows, ns);
    long long *seqs = calloc(nb, sizeof *seqs), *sseqs = calloc(ns, sizeof *sseqs);

    /* insert rate by batch size, on the small job (each its own trials) */
    int batches[] = {1, 10, 100, 1000, 10000};
    long long bpoints[] = {2000, 20000, 100000, 200000, 200000};
    double rate[5];
    for (int b = 0; b < 5; b++) {
        int64_t one[20];
        for (int i = 0; i < 20; i++) one[i] = sids[b * 20 + i];
        double dt = fill(s, one, 20, bpoints[b], batches[b], sseqs + b * 20, err, sizeof err);
        rate[b] = (double)bpoints[b] / dt;
    }
    /* the main fill: trials run `concurrent` at a time, as a sweep does, each
     * wave streaming all its trials' points */
    double fill_s = 0;
    long long per = points / (long long)nb, extra = points % (long long)nb;
    for (int w = 0; w < (int)nb; w += concurrent) {
        int k = (int)nb - w < concurrent ? (int)nb - w : concurrent;
        long long wp = per * k + (w == 0 ? extra : 0);
        fill_s += fill(s, ids + w, k, wp, batch, seqs + w, err, sizeof err);
    }
    double fill_rate = (double)points / fill_s;

    qctx q = {big, small, ids[nb / 2], seqs[nb / 2] / 4, ids, 0, 0};
    /* trials that the transition bench may start: reps of them */
    q.n_running = reps < (int)nb ? reps : (int)nb;
    lat l[8];
    int nl = 0;
    l[nl++] = measure("next_runnable(16)", s, q_next, &q, reps);
    l[nl++] = measure("job_trials(10000-trial job)", s, q_job_big, &q, reps < 10 ? reps : 10);
    l[nl++] = measure("job_trials(100-trial job)", s, q_job_small, &q, reps);
    l[nl++] = measure("best_trials(10)", s, q_best, &q, reps < 10 ? reps : 10);
    l[nl++] = measure("metric_history(tail, 100 seqs)", s, q_tail, &q, reps);
    l[nl++] = measure("metric_history(whole trial)", s, q_history, &q, reps);
    l[nl++] = measure("get_trial", s, q_get, &q, reps);
    l[nl++] = measure("transition PENDING->RUNNING", s, q_transition, &q, q.n_running);
    store_close(&s);
    long long size = file_size(db);
    char wal[600];
    snprintf(wal, sizeof wal, "%s-wal", db);
    long long wal_size = file_size(wal);

    char cpu[256];
    machine(cpu, sizeof cpu);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (json) {
        json_t *o = json_pack("{s:s, s:{s:s, s:i, s:s}, s:{s:i, s:I, s:i, s:i}}", "bench", "store",
                              "machine", "cpu", cpu, "cores", (int)cores, "sqlite",
                              sqlite3_libversion(), "config", "trials", trials, "points",
                              (json_int_t)points, "batch", batch, "reps", reps);
        json_object_set_new(json_object_get(o, "config"), "concurrent", json_integer(concurrent));
        json_t *ins = json_array();
        for (int b = 0; b < 5; b++)
            json_array_append_new(ins, json_pack("{s:i, s:I, s:f}", "batch", batches[b], "points",
                                                 (json_int_t)bpoints[b], "points_per_s", rate[b]));
        json_object_set_new(o, "insert_by_batch", ins);
        json_object_set_new(o, "fill",
                            json_pack("{s:I, s:i, s:f, s:f}", "points", (json_int_t)points, "batch",
                                      batch, "seconds", fill_s, "points_per_s", fill_rate));
        json_object_set_new(o, "submit",
                            json_pack("{s:i, s:f}", "trials", trials, "seconds", submit_s));
        json_t *qs = json_array();
        for (int i = 0; i < nl; i++)
            json_array_append_new(qs, json_pack("{s:s, s:f, s:f, s:f, s:i}", "query", l[i].name,
                                                "p50_ms", l[i].p50_ms, "p99_ms", l[i].p99_ms,
                                                "mean_ms", l[i].mean_ms, "rows", (int)l[i].rows));
        json_object_set_new(o, "queries", qs);
        json_object_set_new(o, "db_bytes", json_integer(size + wal_size));
        char *txt = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("%s\n", txt);
        free(txt);
        json_decref(o);
    } else {
        printf("bench_store: %s, %ld cores, SQLite %s, WAL, synchronous=FULL\n", cpu, cores,
               sqlite3_libversion());
        printf("database: %d + 100 trials, %lld + %lld metric points, %.1f MiB on disk\n\n", trials,
               points, bpoints[0] + bpoints[1] + bpoints[2] + bpoints[3] + bpoints[4],
               (size + wal_size) / 1048576.0);
        printf("submit of %d trials (one transaction): %.3f s (%.0f trials/s)\n\n", trials,
               submit_s, trials / submit_s);
        printf("%-34s %12s %14s\n", "metric insert", "points", "points/s");
        for (int b = 0; b < 5; b++) {
            char label[64];
            snprintf(label, sizeof label, "batch of %d per transaction", batches[b]);
            printf("%-34s %12lld %14.0f\n", label, bpoints[b], rate[b]);
        }
        char label[64];
        snprintf(label, sizeof label, "fill, batch %d, %d running", batch, concurrent);
        printf("%-34s %12lld %14.0f  (%.1f s)\n\n", label, points, fill_rate, fill_s);
        printf("%-34s %10s %10s %10s %8s\n", "query", "p50 ms", "p99 ms", "mean ms", "rows");
        for (int i = 0; i < nl; i++)
            printf("%-34s %10.3f %10.3f %10.3f %8ld\n", l[i].name, l[i].p50_ms, l[i].p99_ms,
                   l[i].mean_ms, l[i].rows);
    }
    free(ids);
    free(sids);
    free(seqs);
    free(sseqs);
    if (!keep && db == path) {
        unlink(path);
        snprintf(wal, sizeof wal, "%s-wal", path);
        unlink(wal);
        snprintf(wal, sizeof wal, "%s-shm", path);
        unlink(wal);
        rmdir(dir);
    }
    return 0;
}
