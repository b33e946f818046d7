/* bench_scaling — data-parallel scaling of `bfworker train`: step time,
 * samples/s and the gradient all-reduce's share for 1, 2, ... ranks.
 *
 *   bench_scaling [--ranks 1,2] [--device cpu|cuda|auto] [--steps N] [--batch B]
 *                 [--layers L --d-model D --heads H --seq-len T] [--threads N]
 *                 [--data-train TSV --data-val TSV] [--json]
 *
 * Not itself an MPI program: for each rank count R it spawns
 * `mpirun --oversubscribe -np R bfworker train` (R = 1: bfworker alone) on a
 * generated config with the same global batch B, and reads the run's
 * metrics.jsonl: train/tokens_per_s (whole steps) and train/allreduce_s (the
 * statistics + gradient all-reduce of a step, measured inside bfworker). The
 * first logged window is warm-up and is left out. With one rank and
 * --force-allreduce (default on CUDA) the gradient all-reduce still runs
 * (BF_ALLREDUCE_ALWAYS=1), so NCCL's cost on one GPU shows. OMP threads per
 * rank default to the cores divided by R, so every row uses the same cores.
 * The table goes to stdout; with --json it goes to stderr and stdout gets one
 * JSON record per line. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/bk.h"
#include "bench/bench_util.h"

typedef struct {
    int ranks[8], n_ranks;
    const char *device;
    int steps, batch, layers, d_model, heads, seq_len, threads, json, force_allreduce;
    const char *train, *val;
} opts;

typedef struct {
    double step_s, samples_s, allreduce_s, wall_s;
    int windows, rc;
} result;

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: bench_scaling [--ranks 1,2] [--device cpu|cuda|auto] [--steps N] [--batch B]\n"
        "                     [--layers L] [--d-model D] [--heads H] [--seq-len T] [--threads N]\n"
        "                     [--data-train TSV] [--data-val TSV] [--force-allreduce] [--json]\n");
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *e;
    long v = strtol(s, &e, 10);
    if (e == s || *e || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* Runs one configuration; fills r. */
static int run_one(const opts *o, int R, const char *dir, result *r) {
    memset(r, 0, sizeof *r);
    char cfg[600], out[600], log[600];
    snprintf(cfg, sizeof cfg, "%s/r%d.yaml", dir, R);
    snprintf(out, sizeof out, "%s/r%d", dir, R);
    snprintf(log, sizeof log, "%s/r%d.log", dir, R);
    FILE *f = fopen(cfg, "w");
    if (!f) return -1;
    int log_every = o->steps / 6 > 0 ? o->steps / 6 : 1;
    fprintf(f,
            "pipeline: budgetformer\ndevice: %s\n"
            "data: {train: %s, val: %s}\n"
            "model: {layers: %d, d_model: %d, heads: %d, seq_len: %d, vocab: 300}\n"
            "budget: {enabled: false}\n"
            "train: {steps: %d, batch: %d, lr: 1.0e-3, warmup: 2, seed: 1, eval_every: 0,\n"
            "        checkpoint_every: 0, log_every: %d}\n",
            o->device, o->train, o->val, o->layers, o->d_model, o->heads, o->seq_len, o->steps,
            o->batch, log_every);
    fclose(f);
    char threads[16], np[16];
    int t = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN) / R;
    snprintf(threads, sizeof threads, "%d", t < 1 ? 1 : t);
    snprintf(np, sizeof np, "%d", R);
    char *argv[24];
    int n = 0;
    if (R > 1) {
        argv[n++] = "mpirun";
        argv[n++] = "--oversubscribe";
        argv[n++] = "--bind-to";
        argv[n++] = "none";
        argv[n++] = "-np";
        argv[n++] = np;
    }
    argv[n++] = BF_BIN_DIR "/bfworker";
    argv[n++] = "train";
    argv[n++] = cfg;
    argv[n++] = "--out";
    argv[n++] = out;
    argv[n++] = "--quiet";
    argv[n] = NULL;
    double t0 = bench_now();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        setenv("OMP_NUM_THREADS", threads, 1);
        setenv("OPENBLAS_NUM_THREADS", threads, 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
        if (o->force_allreduce) setenv("BF_ALLREDUCE_ALWAYS", "1", 1);
        execvp(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    r->wall_s = bench_now() - t0;
    r->rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (r->rc) {
        fprintf(stderr, "bench_scaling: %d rank(s) failed with status %d; see %s\n", R, r->rc, log);
        return -1;
    }
    char mpath[700];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", out);
    f = fopen(mpath, "r");
    if (!f) return -1;
    char line[8192];
    double tps_sum = 0, ar_sum = 0;
    int k = 0, nar = 0;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"train/tokens_per_s\": ");
        if (!p) continue;
        if (k++ == 0) continue; /* warm-up window */
        tps_sum += strtod(p + 22, NULL);
        const char *a = strstr(line, "\"train/allreduce_s\": ");
        if (a) {
            ar_sum += strtod(a + 21, NULL);
            nar++;
        }
    }
    fclose(f);
    r->windows = k - 1;
    if (r->windows <= 0) return -1;
    double tps = tps_sum / r->windows;
    r->step_s = (double)o->batch * o->seq_len / tps;
    r->samples_s = tps / o->seq_len;
    r->allreduce_s = nar ? ar_sum / nar : 0;
    return 0;
}

int main(int argc, char **argv) {
    bk_openmp_passive(argv);
    opts o = {.ranks = {1, 2},
              .n_ranks = 2,
              .device = "cpu",
              .steps = 120,
              .batch = 32,
              .layers = 2,
              .d_model = 128,
              .heads = 4,
              .seq_len = 32,
              .threads = 0,
              .train = BF_SOURCE_DIR "/tests/data/glosses_train.tsv",
              .val = BF_SOURCE_DIR "/tests/data/glosses_val.tsv"};
    int force = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (strcmp(a, "--json") == 0) {
            o.json = 1;
            continue;
        } else if (strcmp(a, "--force-allreduce") == 0) {
            force = 1;
            continue;
        } else if (strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            usage(stderr);
            return 64;
        }
        i++;
        if (strcmp(a, "--ranks") == 0) {
            o.n_ranks = 0;
            char buf[128];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t && !bad; t = strtok(NULL, ","))
                bad = o.n_ranks == 8 || parse_int(t, 1, 64, &o.ranks[o.n_ranks++]);
            bad |= o.n_ranks == 0;
        } else if (strcmp(a, "--device") == 0)
            o.device = v;
        else if (strcmp(a, "--steps") == 0)
            bad = parse_int(v, 12, 1000000, &o.steps);
        else if (strcmp(a, "--batch") == 0)
            bad = parse_int(v, 1, 1 << 16, &o.batch);
        else if (strcmp(a, "--layers") == 0)
            bad = parse_int(v, 1, 64, &o.layers);
        else if (strcmp(a, "--d-model") == 0)
            bad = parse_int(v, 8, 1 << 14, &o.d_model);
        else if (strcmp(a, "--heads") == 0)
            bad = parse_int(v, 1, 256, &o.heads);
        else if (strcmp(a, "--seq-len") == 0)
            bad = parse_int(v, 2, 1 << 16, &o.seq_len);
        else if (strcmp(a, "--threads") == 0)
            bad = parse_int(v, 1, 1024, &o.threads);
        else if (strcmp(a, "--data-train") == 0)
            o.train = v;
        else if (strcmp(a, "--data-val") == 0)
            o.val = v;
        else
            bad = 1;
        if (bad) {
            fprintf(stderr, "bench_scaling: bad option %s %s\n", a, v);
            usage(stderr);
            return 64;
        }
    }
    o.force_allreduce = force == 1 || (force == -1 && strcmp(o.device, "cuda") == 0);
    for (int i = 0; i < o.n_ranks; i++)
        if (o.batch % o.ranks[i]) {
            fprintf(stderr, "bench_scaling: --batch %d is not divisible by %d ranks\n", o.batch,
                    o.ranks[i]);
            return 64;
        }
    char dir[] = "/tmp/bench-scaling-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    FILE *table = o.json ? stderr : stdout;
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(table,
            "machine: %s, %d cores; device %s; global batch %d, seq_len %d, %d layers, d_model %d, "
            "%d heads; %d steps\n",
            cpu, cores, o.device, o.batch, o.seq_len, o.layers, o.d_model, o.heads, o.steps);
    if (o.json) {
        printf("{\"bench\": \"scaling\", \"record\": \"machine\", \"cpu\": ");
        bench_json_string(stdout, cpu);
        printf(", \"cores\": %d, \"device\": ", cores);
        bench_json_string(stdout, o.device);
        printf(", \"batch\": %d, \"seq_len\": %d, \"layers\": %d, \"d_model\": %d, \"heads\": %d, "
               "\"steps\": %d, \"launcher\": \"mpirun --oversubscribe --bind-to none\"}\n",
               o.batch, o.seq_len, o.layers, o.d_model, o.heads, o.steps);
    }
    fprintf(table, "%6s %8s %10s %11s %10s %14s %10s %8s\n", "ranks", "threads", "step_ms",
            "samples/s", "speedup", "allreduce_ms", "comm_%", "wall_s");
    double base = 0;
    int failed = 0;
    for (int i = 0; i < o.n_ranks; i++) {
        int R = o.ranks[i];
        result r;
        if (run_one(&o, R, dir, &r)) {
            failed = 1;
            continue;
        }
        if (base == 0) base = r.samples_s / 1.0;
        int t = o.threads > 0 ? o.threads : cores / R;
        fprintf(table, "%6d %8d %10.3f %11.1f %9.2fx %14.4f %9.1f%% %8.2f\n", R, t < 1 ? 1 : t,
                1e3 * r.step_s, r.samples_s, r.samples_s / base, 1e3 * r.allreduce_s,
                100.0 * r.allreduce_s / r.step_s, r.wall_s);
        if (o.json)
            printf("{\"bench\": \"scaling\", \"ranks\": %d, \"threads_per_rank\": %d, \"step_s\": "
                   "%.6g, "
                   "\"samples_per_s\": %.6g, \"allreduce_s\": %.6g, \"allreduce_fraction\": %.4g, "
                   "\"windows\": %d, \"wall_s\": %.3f}\n",
                   R, t < 1 ? 1 : t, r.step_s, r.samples_s, r.allreduce_s, r.allreduce_s / r.step_s,
                   r.windows, r.wall_s);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (!failed && system(cmd)) fprintf(stderr, "bench_scaling: could not remove %s\n", dir);
    return failed ? 1 : 0;
}
