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
#include "common/opts.h"

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

/* The command line: the options into an opts, --ranks as its text. */
typedef struct scaling_cli {
    opts o;
    const char *ranks;
    int force;
} scaling_cli;

#define SC(f) OPT_AT(scaling_cli, f)
static const opt_spec scaling_opts[] = {
    {"ranks", 0, OPT_STR, 0, 0, SC(ranks), "R,R,...",
     "rank counts, each in [1, 64], at most 8 (1,2)"},
    {"device", 0, OPT_STR, 0, 0, SC(o.device), "cpu|cuda|auto", "the backend (cpu)"},
    {"steps", 0, OPT_INT, 12, 1000000, SC(o.steps), "N", "training steps per row (120)"},
    {"batch", 0, OPT_INT, 1, 1 << 16, SC(o.batch), "B", "the global batch (32)"},
    {"layers", 0, OPT_INT, 1, 64, SC(o.layers), "L", "blocks (2)"},
    {"d-model", 0, OPT_INT, 8, 1 << 14, SC(o.d_model), "D", "model width (128)"},
    {"heads", 0, OPT_INT, 1, 256, SC(o.heads), "H", "attention heads (4)"},
    {"seq-len", 0, OPT_INT, 2, 1 << 16, SC(o.seq_len), "T", "tokens per sample (32)"},
    {"threads", 0, OPT_INT, 1, 1024, SC(o.threads), "N",
     "OMP threads per rank (default: the cores divided by R)"},
    {"data-train", 0, OPT_STR, 0, 0, SC(o.train), "TSV", "training data (tests/data)"},
    {"data-val", 0, OPT_STR, 0, 0, SC(o.val), "TSV", "validation data (tests/data)"},
    {"force-allreduce", 0, OPT_FLAG, 0, 0, SC(force), NULL,
     "the gradient all-reduce also with one rank (default on CUDA)"},
    {"json", 0, OPT_FLAG, 0, 0, SC(o.json), NULL,
     "one JSON record per line on stdout, the table on stderr"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

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
    scaling_cli cli = {.o = {.ranks = {1, 2},
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
                             .val = BF_SOURCE_DIR "/tests/data/glosses_val.tsv"}};
    int rest = argc;
    int prc = opts_parse("bench_scaling",
                         "usage: bench_scaling [options]\n"
                         "  data-parallel scaling of bfworker train: step time, samples/s and the\n"
                         "  gradient all-reduce's share for each rank count, at one global batch\n",
                         scaling_opts, argc, argv, 1, &cli, &rest);
    if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : 64;
    if (rest < argc) {
        fprintf(stderr, "bench_scaling: unexpected argument '%s'\n", argv[rest]);
        return 64;
    }
    opts o = cli.o;
    int force = cli.force ? 1 : -1;
    /* --ranks: a comma-separated list of rank counts */
    for (const char *p = cli.ranks; p;) {
        char *end;
        long r = strtol(p, &end, 10);
        if (p == cli.ranks) o.n_ranks = 0;
        if (end == p || (*end && *end != ',') || r < 1 || r > 64 || o.n_ranks == 8) {
            fprintf(stderr,
                    "bench_scaling: --ranks takes up to 8 rank counts in [1, 64] separated by "
                    "commas, got '%s'\n",
                    cli.ranks);
            return 64;
        }
        o.ranks[o.n_ranks++] = (int)r;
        p = *end ? end + 1 : NULL;
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
