/* bench_adaptive — what adaptive sweeps buy, measured end to end with a real
 * bfd and real workers training BudgetFormer on WordNet glosses:
 *
 *   1. a 27-trial grid (3 learning rates x 3 budget ranges x 3 seeds) run in
 *      full, and the same grid with ASHA (rungs at R, R*eta, R*eta^2 below
 *      the last step): total training steps spent and the best val/acc each
 *      found (the goal: ASHA at most 40% of the steps, best within 0.5 point);
 *   2. random search and TPE on the same budget (the same number of trials,
 *      the same parameter specs, no early stopping): best val/acc.
 *
 *   bench_adaptive [--data DIR] [--steps N] [--min-steps R] [--eta E]
 *                  [--slots N] [--val N] [--only asha|search] [--keep] [--json]
 *
 * DIR holds wordnet/{train,val}.tsv (scripts/prepare_data.sh; default
 * $BF_DATA, else ./data). The validation split is cut to about --val lines
 * (default 1024, a stride through it) so evaluations, every R steps, stay
 * cheap. Steps spent are, per trial, the last step it logged, summed over
 * the job. It starts bfd
 * on a temporary BF_HOME with --slots trials at once (default 2), submits the
 * jobs and waits for them; the table goes to stdout, --json writes one JSON
 * object instead. --keep leaves the BF_HOME (its bf.db) for a look. */
#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "common/opts.h"

typedef struct job_result {
    const char *label, *method;
    long long id, trials, completed, stopped, failed, steps;
    double best, wall;
} job_result;

static char g_home[600], g_data[1024];

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Every k-th line of src into dst, k chosen so that about n lines are kept
 * (the split is sorted by class: a stride keeps every class). Returns the
 * lines kept, or -1. */
static int stride_lines(const char *src, const char *dst, int n) {
    FILE *in = fopen(src, "r");
    if (!in) return -1;
    char line[8192];
    long total = 0;
    while (fgets(line, sizeof line, in)) total++;
    rewind(in);
    FILE *out = fopen(dst, "w");
    if (!out) {
        fclose(in);
        return -1;
    }
    long k = total > n ? total / n : 1;
    int kept = 0;
    for (long i = 0; fgets(line, sizeof line, in); i++)
        if (i % k == 0) fputs(line, out), kept++;
    fclose(in);
    return fclose(out) == 0 ? kept : -1;
}

static const char *HEAD = "pipeline: budgetformer\ndevice: cpu\n"
                          "data: {train: %s/wordnet/train.tsv, val: %s/val.tsv}\n"
                          "model: {layers: 2, d_model: 32, heads: 4, seq_len: 32}\n"
                          "train: {steps: %d, batch: 32, warmup: 25, log_every: %d, eval_every: "
                          "%d, checkpoint_every: 1000000}\n"
                          "metric: {name: val/acc, goal: max}\n";

/* Writes home/NAME.yaml: HEAD, then body. */
static const char *write_sweep(const char *name, int steps, int every, const char *body) {
    static char path[800];
    char text[4096];
    int n = snprintf(text, sizeof text, HEAD, g_data, g_home, steps, every, every);
    snprintf(text + n, sizeof text - (size_t)n, "name: %s\n%s", name, body);
    snprintf(path, sizeof path, "%s/%s.yaml", g_home, name);
    if (write_file(path, text)) {
        fprintf(stderr, "bench_adaptive: cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    return path;
}

static long long submit(const char *path) {
    char cmd[1600], out[64] = "";
    snprintf(cmd, sizeof cmd, "BF_HOME=%s %s/bfctl submit %s", g_home, BF_BIN_DIR, path);
    FILE *p = popen(cmd, "r");
    if (!p || !fgets(out, sizeof out, p)) {
        fprintf(stderr, "bench_adaptive: submit %s failed\n", path);
        exit(1);
    }
    pclose(p);
    return atoll(out);
}

static sqlite3_int64 q_int(sqlite3 *db, const char *sql, long long a) {
    sqlite3_stmt *st;
    sqlite3_int64 v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return -1;
    sqlite3_bind_int64(st, 1, a);
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static double q_real(sqlite3 *db, const char *sql, long long a) {
    sqlite3_stmt *st;
    double v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return -1;
    sqlite3_bind_int64(st, 1, a);
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void measure(sqlite3 *db, job_result *r) {
    long long j = r->id;
    r->trials = q_int(db, "SELECT COUNT(*) FROM trials WHERE job = ?1", j);
    r->completed =
        q_int(db, "SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'COMPLETED'", j);
    r->stopped = q_int(db, "SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'STOPPED'", j);
    r->failed = q_int(db, "SELECT COUNT(*) FROM trials WHERE job = ?1 AND state = 'FAILED'", j);
    r->steps = q_int(db,
                     "SELECT COALESCE(SUM(s), 0) FROM (SELECT MAX(l.step) AS s FROM metric_latest l"
                     " JOIN trials t ON t.id = l.trial WHERE t.job = ?1 GROUP BY l.trial)",
                     j);
    r->best = q_real(db,
                     "SELECT MAX(l.vmax) FROM metric_latest l JOIN trials t ON t.id = l.trial JOIN"
                     " metric_names n ON n.id = l.name WHERE t.job = ?1 AND n.name = 'val/acc'",
                     j);
    r->wall = q_real(db,
                     "SELECT MAX(a.ended) - MIN(a.started) FROM attempts a JOIN trials t ON"
                     " t.id = a.trial WHERE t.job = ?1",
                     j);
}

/* The command line (adaptive_opts). */
typedef struct adaptive_cli {
    int steps, min_steps, slots, val, json, keep, only; /* only: 0 asha, 1 search, -1 both */
    double eta;
    const char *data;
} adaptive_cli;

#define AD(f) OPT_AT(adaptive_cli, f)
static const opt_spec adaptive_opts[] = {
    {"data", 0, OPT_STR, 0, 0, AD(data), "DIR",
     "holds wordnet/{train,val}.tsv (default $BF_DATA, else ./data)"},
    {"steps", 0, OPT_INT, 2, 10000000, AD(steps), "N", "training steps of a full trial (675)"},
    {"min-steps", 0, OPT_INT, 1, 10000000, AD(min_steps), "R",
     "ASHA's first rung, below --steps (25)"},
    {"eta", 0, OPT_DOUBLE, 1.5, 1000, AD(eta), "E", "ASHA's reduction factor (3)"},
    {"slots", 0, OPT_INT, 1, 1024, AD(slots), "N", "trials bfd runs at once (2)"},
    {"val", 0, OPT_INT, 1, 1000000000, AD(val), "N", "validation lines kept (1024)"},
    {"only", 0, OPT_CHOICE, 0, 0, AD(only), "asha|search", "run one of the two parts"},
    {"keep", 0, OPT_FLAG, 0, 0, AD(keep), NULL, "leave the BF_HOME (its bf.db) for a look"},
    {"json", 0, OPT_FLAG, 0, 0, AD(json), NULL, "one JSON object instead of the table"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int main(int argc, char **argv) {
    adaptive_cli o = {.steps = 675,
                      .min_steps = 25,
                      .slots = 2,
                      .val = 1024,
                      .only = -1,
                      .eta = 3,
                      .data = getenv("BF_DATA")};
    int rest = argc;
    int prc = opts_parse("bench_adaptive",
                         "usage: bench_adaptive [options]\n"
                         "  a 27-trial BudgetFormer grid with and without ASHA, and random search "
                         "vs\n  TPE on the same budget, through a real bfd (see the comment in\n"
                         "  bench/adaptive.c)\n",
                         adaptive_opts, argc, argv, 1, &o, &rest);
    if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : 64;
    if (rest < argc) {
        fprintf(stderr, "bench_adaptive: unexpected argument '%s'\n", argv[rest]);
        return 64;
    }
    if (o.min_steps >= o.steps) {
        fprintf(stderr, "bench_adaptive: --min-steps %d must be below --steps %d\n", o.min_steps,
                o.steps);
        return 64;
    }
    int steps = o.steps, min_steps = o.min_steps, slots = o.slots, val = o.val, json = o.json,
        keep = o.keep;
    double eta = o.eta;
    const char *only = o.only == 0 ? "asha" : o.only == 1 ? "search" : "", *data = o.data;
    snprintf(g_data, sizeof g_data, "%s", data ? data : "data");
    char src[1200];
    snprintf(src, sizeof src, "%s/wordnet/val.tsv", g_data);
    if (access(src, R_OK) != 0) {
        fprintf(stderr, "bench_adaptive: no %s (run scripts/prepare_data.sh, or --data DIR)\n",
                src);
        return 1;
    }
    char tmpl[] = "/tmp/bench-adaptive-XXXXXX";
    if (!mkdtemp(tmpl)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(g_home, sizeof g_home, "%s", tmpl);
    char p[900], text[512];
    snprintf(p, sizeof p, "%s/val.tsv", g_home);
    if ((val = stride_lines(src, p, val)) < 1) {
        fprintf(stderr, "bench_adaptive: cannot cut %s into %s\n", src, p);
        return 1;
    }
    snprintf(p, sizeof p, "%s/bfd.yaml", g_home);
    snprintf(text, sizeof text, "slots: %d\nthreads_per_slot: 1\nheartbeat_timeout: 120\n", slots);
    write_file(p, text);
    /* bfd on the temporary home */
    snprintf(p, sizeof p, "%s/bfd.log", g_home);
    pid_t bfd = fork();
    if (bfd == 0) {
        int fd = fileno(fopen(p, "w"));
        dup2(fd, 1);
        dup2(fd, 2);
        execl(BF_BIN_DIR "/bfd", "bfd", "--home", g_home, (char *)NULL);
        _exit(127);
    }
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "BF_HOME=%s %s/bfctl daemon status >/dev/null 2>&1", g_home,
             BF_BIN_DIR);
    double t0 = bench_now();
    while (system(cmd) != 0) {
        if (bench_now() - t0 > 20) {
            fprintf(stderr, "bench_adaptive: bfd did not start (see %s/bfd.log)\n", g_home);
            kill(bfd, SIGTERM);
            return 1;
        }
        usleep(100000);
    }
    const char *grid = "sweep:\n  parameters:\n"
                       "    train.lr: {values: [1.0e-4, 1.0e-3, 3.0e-3]}\n"
                       "    budget.range: {values: [[0.1, 0.3], [0.3, 0.6], [0.6, 1.0]]}\n"
                       "    train.seed: {values: [1, 2, 3]}\n";
    char asha[1024], search[1024], rnd[1200], tpe[1200];
    snprintf(asha, sizeof asha,
             "%searly_stop: {method: asha, min_steps: %d, reduction_factor: %g}\n", grid, min_steps,
             eta);
    snprintf(search, sizeof search,
             "  seed: 7\n  parameters:\n"
             "    train.lr: {min: 3.0e-5, max: 1.0e-2, distribution: log_uniform}\n"
             "    train.weight_decay: {min: 0.0, max: 0.1}\n"
             "    budget.range: {values: [[0.1, 0.3], [0.3, 0.6], [0.6, 1.0]]}\n");
    snprintf(rnd, sizeof rnd, "sweep:\n  method: random\n  trials: 27\n%s", search);
    snprintf(tpe, sizeof tpe,
             "sweep:\n  method: tpe\n  trials: 27\n  parallel: %d\n  startup_trials: 8\n%s", slots,
             search);
    job_result res[4];
    int nj = 0;
    if (strcmp(only, "search")) {
        res[nj++] = (job_result){.label = "grid, full",
                                 .method = "grid",
                                 .id = submit(write_sweep("grid", steps, min_steps, grid))};
        res[nj++] = (job_result){.label = "grid, asha",
                                 .method = "grid+asha",
                                 .id = submit(write_sweep("asha", steps, min_steps, asha))};
    }
    if (strcmp(only, "asha")) {
        res[nj++] = (job_result){.label = "random search",
                                 .method = "random",
                                 .id = submit(write_sweep("random", steps, min_steps, rnd))};
        res[nj++] = (job_result){.label = "tpe",
                                 .method = "tpe",
                                 .id = submit(write_sweep("tpe", steps, min_steps, tpe))};
    }
    for (int i = 0; i < nj; i++) {
        snprintf(cmd, sizeof cmd, "BF_HOME=%s %s/bfctl wait %lld >&2", g_home, BF_BIN_DIR,
                 res[i].id);
        if (system(cmd) != 0) fprintf(stderr, "bench_adaptive: job %lld had failures\n", res[i].id);
    }
    kill(bfd, SIGTERM);
    waitpid(bfd, NULL, 0);
    snprintf(p, sizeof p, "%s/bf.db", g_home);
    sqlite3 *db;
    if (sqlite3_open_v2(p, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        fprintf(stderr, "bench_adaptive: cannot open %s\n", p);
        return 1;
    }
    for (int i = 0; i < nj; i++) measure(db, &res[i]);
    sqlite3_close(db);
    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    long long full = nj >= 2 && strcmp(only, "search") ? res[0].steps : 0;
    if (json) {
        printf("{\"bench\": \"adaptive\", \"cpu\": ");
        bench_json_string(stdout, cpu);
        printf(", \"slots\": %d, \"steps\": %d, \"min_steps\": %d, \"eta\": %g, \"val\": %d, "
               "\"jobs\": [",
               slots, steps, min_steps, eta, val);
        for (int i = 0; i < nj; i++)
            printf("%s{\"label\": \"%s\", \"method\": \"%s\", \"trials\": %lld, \"completed\": "
                   "%lld, \"stopped\": %lld, \"failed\": %lld, \"steps\": %lld, \"best_val_acc\": "
                   "%.6f, \"wall_s\": %.1f}",
                   i ? ", " : "", res[i].label, res[i].method, res[i].trials, res[i].completed,
                   res[i].stopped, res[i].failed, res[i].steps, res[i].best, res[i].wall);
        printf("]}\n");
    } else {
        printf("bench_adaptive: BudgetFormer (2 x 32, seq 32, batch 32) on WordNet glosses, %d "
               "steps a trial, val/acc on %d val lines every %d steps; %d slot%s; %s\n",
               steps, val, min_steps, slots, slots == 1 ? "" : "s", cpu);
        printf("%-14s %7s %6s %6s %9s %8s %9s %8s\n", "JOB", "TRIALS", "DONE", "STOP", "STEPS",
               "OF GRID", "BEST ACC", "WALL s");
        for (int i = 0; i < nj; i++) {
            char frac[16] = "-";
            if (full > 0 && i < 2)
                snprintf(frac, sizeof frac, "%.1f%%", 100.0 * res[i].steps / full);
            printf("%-14s %7lld %6lld %6lld %9lld %8s %9.4f %8.1f\n", res[i].label, res[i].trials,
                   res[i].completed, res[i].stopped, res[i].steps, frac, res[i].best, res[i].wall);
        }
    }
    if (!keep) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_home);
        if (system(cmd) != 0) fprintf(stderr, "bench_adaptive: could not remove %s\n", g_home);
    } else {
        fprintf(stderr, "bench_adaptive: kept %s\n", g_home);
    }
    return 0;
}
