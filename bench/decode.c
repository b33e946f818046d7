/* bench_decode: inference of the causal decoder with the KV cache, dense W_O
 * against the Hadamard output projection, in one run.
 *
 *   bench_decode [--device auto|cpu|cuda] [--json] [--reps N] [--steps D]
 *                [--layers L] [--d-model C] [--heads H] [--vocab V]
 *
 * Model (default): L = 4, d = 256, H = 4 (head size 64), vocabulary 8192 (the
 * lm pipeline's), seq_len 256, GPT-2 initialisation; timings do not depend on
 * the weights. For each context length n in {64, 256} and batch B in
 * {1, 8, 32}:
 *   prefill  — gen_prefill of B prompts of n tokens; tokens/s = B*n / time
 *              (fastest of N timed runs after a warm-up);
 *   decode   — prefill n - D tokens, then D single-token steps (greedy), each
 *              timed, pooled over N reps: per-step latency median and p90 (one
 *              step gives one token to every sequence), tokens/s = B / median;
 *   memory   — the KV cache the n tokens occupy (2 L n B d floats) and the
 *              generator's whole arena (cache at seq_len + scratch), plus the
 *              parameters; peak RSS of the process is printed at the end.
 * The table goes to stdout; with --json it goes to stderr and stdout gets one
 * JSON record per line. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "common/opts.h"
#include "kernels/bk.h"
#include "worker/pipelines/generate.h"
#include "worker/models/model.h"

#define REPS_MAX 100
#define STEPS_MAX 256

typedef struct {
    const bk_backend *be;
    int reps, steps, json;
    int layers, d_model, heads, vocab, seq_len;
    FILE *table;
} bench;

typedef struct {
    double prefill_tps, prefill_s;
    double decode_tps, lat_med, lat_p90;
    double cache_mib, arena_mib, params_mib;
} result;

static void die(const char *what, const char *err) {
    fprintf(stderr, "bench_decode: %s: %s\n", what, err);
    exit(1);
}

static void prompt_ids(int *ids, int B, int n, int V) {
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++)
            ids[(size_t)b * n + i] =
                5 + (int)((1103515245u * (unsigned)(b * 977 + i) + 12345u) % (unsigned)(V - 5));
}

/* Dense and hadamard at one (B, n), interleaved rep by rep so that load from
 * other processes falls on both alike: prefill time = fastest of reps;
 * decode latencies pooled over reps (D steps each), median and p90. */
static void run_pair(const bench *bc, model *ms[2], int B, int n, result r[2]) {
    const bk_backend *be = bc->be;
    char err[512];
    gen_state g[2];
    for (int k = 0; k < 2; k++)
        if (gen_create(&g[k], ms[k], B, err, sizeof err)) die("gen_create", err);
    int V = ms[0]->sh.vocab, D = bc->steps < n ? bc->steps : n - 1, P = n - D;
    int *ids = malloc((size_t)B * n * sizeof(int)), *pids = malloc((size_t)B * P * sizeof(int));
    float *logits = malloc((size_t)B * V * sizeof(float));
    int *next = malloc((size_t)B * sizeof(int));
    double *lat[2] = {malloc((size_t)bc->reps * D * sizeof(double)),
                      malloc((size_t)bc->reps * D * sizeof(double))};
    if (!ids || !pids || !logits || !next || !lat[0] || !lat[1]) die("malloc", "out of memory");
    prompt_ids(ids, B, n, V);
    prompt_ids(pids, B, P, V);
    gen_sampler greedy = {0};
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep <= bc->reps; rep++)
        for (int k = 0; k < 2; k++) {
            be->sync();
            double t0 = bench_now();
            if (gen_prefill(&g[k], ids, B, n, logits, err, sizeof err)) die("prefill", err);
            be->sync();
            double t = bench_now() - t0;
            if (rep > 0 && t < best[k]) best[k] = t; /* rep 0 is the warm-up */
            if (rep == 0) continue;
            if (gen_prefill(&g[k], pids, B, P, logits, err, sizeof err)) die("prefill", err);
            for (int s = 0; s < D; s++) {
                for (int b = 0; b < B; b++)
                    next[b] = gen_sample(logits + (size_t)b * V, V, &greedy, b, s, NULL);
                be->sync();
                t0 = bench_now();
                if (gen_decode(&g[k], next, logits, err, sizeof err)) die("decode", err);
                be->sync();
                lat[k][(size_t)(rep - 1) * D + s] = bench_now() - t0;
            }
        }
    double mib = 1024.0 * 1024.0;
    for (int k = 0; k < 2; k++) {
        int m = bc->reps * D;
        qsort(lat[k], (size_t)m, sizeof(double), bench_cmp_double);
        r[k].prefill_s = best[k];
        r[k].prefill_tps = (double)B * n / best[k];
        r[k].lat_med = m % 2 ? lat[k][m / 2] : 0.5 * (lat[k][m / 2 - 1] + lat[k][m / 2]);
        r[k].lat_p90 = lat[k][(int)(0.9 * (m - 1) + 0.5)];
        r[k].decode_tps = (double)B / r[k].lat_med;
        r[k].cache_mib = 2.0 * ms[k]->sh.layers * n * B * ms[k]->sh.d_model * sizeof(float) / mib;
        r[k].arena_mib = (double)g[k].A.size / mib;
        r[k].params_mib = (double)ms[k]->np.P.numel * sizeof(float) / mib;
        free(lat[k]);
        gen_destroy(&g[k]);
    }
    free(ids), free(pids), free(logits), free(next);
}

static void print_json(const bench *bc, const char *proj, int B, int n, const result *r) {
    printf("{\"bench\": \"decode\", \"backend\": ");
    bench_json_string(stdout, bc->be->name);
    printf(", \"out_proj\": \"%s\", \"layers\": %d, \"d_model\": %d, \"heads\": %d, \"vocab\": %d, "
           "\"batch\": %d, \"context\": %d, \"decode_steps\": %d, \"prefill_tokens_per_s\": %.1f, "
           "\"prefill_s\": %.6f, \"decode_tokens_per_s\": %.1f, \"latency_median_ms\": %.4f, "
           "\"latency_p90_ms\": %.4f, \"kv_cache_mib\": %.3f, \"arena_mib\": %.3f, "
           "\"params_mib\": %.3f}\n",
           proj, bc->layers, bc->d_model, bc->heads, bc->vocab, B, n,
           bc->steps < n ? bc->steps : n - 1, r->prefill_tps, r->prefill_s, r->decode_tps,
           1e3 * r->lat_med, 1e3 * r->lat_p90, r->cache_mib, r->arena_mib, r->params_mib);
}

/* The command line: the bench's shape and the device (decode_opts). */
typedef struct decode_cli {
    bench bc;
    const char *device;
} decode_cli;

#define DA(f) OPT_AT(decode_cli, f)
static const opt_spec decode_opts[] = {
    {"device", 0, OPT_STR, 0, 0, DA(device), "auto|cpu|cuda", "the backend (auto)"},
    {"json", 0, OPT_FLAG, 0, 0, DA(bc.json), NULL, "JSON lines on stdout, the table on stderr"},
    {"reps", 0, OPT_INT, 1, REPS_MAX, DA(bc.reps), "N", "repetitions (2)"},
    {"steps", 0, OPT_INT, 1, STEPS_MAX, DA(bc.steps), "D", "decode steps (32)"},
    {"layers", 0, OPT_INT, 1, 64, DA(bc.layers), "L", "blocks (4)"},
    {"d-model", 0, OPT_INT, 4, 8192, DA(bc.d_model), "C", "model width (256)"},
    {"heads", 0, OPT_INT, 1, 256, DA(bc.heads), "H", "attention heads (4)"},
    {"vocab", 0, OPT_INT, 16, 1 << 20, DA(bc.vocab), "V", "vocabulary (8192)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int main(int argc, char **argv) {
    bk_openmp_passive(argv);
    decode_cli cli = {.bc = {.reps = 2,
                             .steps = 32,
                             .layers = 4,
                             .d_model = 256,
                             .heads = 4,
                             .vocab = 8192,
                             .seq_len = 256,
                             .table = stdout},
                      .device = "auto"};
    int rest = argc;
    int prc = opts_parse("bench_decode", "usage: bench_decode [options]\n", decode_opts, argc, argv,
                         1, &cli, &rest);
    if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : 2;
    if (rest < argc) {
        fprintf(stderr, "bench_decode: unexpected argument '%s'\n", argv[rest]);
        return 2;
    }
    bench bc = cli.bc;
    const char *device = cli.device;
    char err[512];
    if (bk_select(device, &bc.be, err, sizeof err)) die("device", err);
    if (bc.json) bc.table = stderr;

    model md, mh;
    model_shape sh = {.layers = bc.layers,
                      .d_model = bc.d_model,
                      .heads = bc.heads,
                      .seq_len = bc.seq_len,
                      .vocab = bc.vocab};
    if (model_create(&md, &sh, bc.be, 1, err, sizeof err)) die("dense model", err);
    sh.hadamard = 1;
    if (model_create(&mh, &sh, bc.be, 1, err, sizeof err)) die("hadamard model", err);
    if (model_init_weights(&md, 1, err, sizeof err)) die("init", err);
    if (model_init_weights(&mh, 1, err, sizeof err)) die("init", err);

    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(bc.table,
            "bench_decode: backend %s | nproc %ld | cpu %s | omp threads %d\n"
            "model: L=%d d=%d H=%d vocab=%d seq_len=%d | params dense %zu, hadamard %zu\n"
            "prefill: fastest of %d after a warm-up | decode: %d steps after a prefill of n-%d, x "
            "reps\n",
            bc.be->name, nproc, cpu, omp_get_max_threads(), bc.layers, bc.d_model, bc.heads,
            bc.vocab, bc.seq_len, md.np.P.numel, mh.np.P.numel, bc.reps, bc.steps, bc.steps);
    if (bc.json) {
        printf("{\"bench\": \"machine\", \"backend\": ");
        bench_json_string(stdout, bc.be->name);
        printf(", \"nproc\": %ld, \"cpu\": ", nproc);
        bench_json_string(stdout, cpu);
        printf(", \"omp_threads\": %d, \"params_dense\": %zu, \"params_hadamard\": %zu}\n",
               omp_get_max_threads(), md.np.P.numel, mh.np.P.numel);
    }
    fprintf(bc.table, "\n%4s %3s %-8s %12s %12s %9s %9s %9s %9s\n", "ctx", "B", "out_proj",
            "prefill t/s", "decode t/s", "lat med", "lat p90", "KV MiB", "arena MiB");
    fprintf(bc.table, "%4s %3s %-8s %12s %12s %9s %9s %9s %9s\n", "", "", "", "", "", "ms", "ms",
            "", "");
    const int ctxs[] = {64, 256}, batches[] = {1, 8, 32};
    for (size_t ci = 0; ci < 2; ci++)
        for (size_t bi = 0; bi < 3; bi++) {
            int n = ctxs[ci], B = batches[bi];
            if (n > bc.seq_len) continue;
            result rr[2];
            model *ms[2] = {&md, &mh};
            run_pair(&bc, ms, B, n, rr);
            const result *rd = &rr[0], *rh = &rr[1];
            const result *rs[2] = {rd, rh};
            const char *names[2] = {"dense", "hadamard"};
            for (int k = 0; k < 2; k++) {
                fprintf(bc.table, "%4d %3d %-8s %12.0f %12.1f %9.3f %9.3f %9.2f %9.2f\n", n, B,
                        names[k], rs[k]->prefill_tps, rs[k]->decode_tps, 1e3 * rs[k]->lat_med,
                        1e3 * rs[k]->lat_p90, rs[k]->cache_mib, rs[k]->arena_mib);
                if (bc.json) print_json(&bc, names[k], B, n, rs[k]);
            }
            fprintf(bc.table, "%4d %3d %-8s %12.3f %12.3f %9.3f %9.3f %9.2f %9.2f\n", n, B, "h/d",
                    rh->prefill_tps / rd->prefill_tps, rh->decode_tps / rd->decode_tps,
                    rh->lat_med / rd->lat_med, rh->lat_p90 / rd->lat_p90,
                    rh->cache_mib / rd->cache_mib, rh->arena_mib / rd->arena_mib);
            if (bc.json)
                printf("{\"bench\": \"decode_ratio\", \"batch\": %d, \"context\": %d, "
                       "\"prefill_tps_ratio\": %.4f, \"decode_tps_ratio\": %.4f, "
                       "\"latency_median_ratio\": %.4f, \"latency_p90_ratio\": %.4f}\n",
                       B, n, rh->prefill_tps / rd->prefill_tps, rh->decode_tps / rd->decode_tps,
                       rh->lat_med / rd->lat_med, rh->lat_p90 / rd->lat_p90);
            fflush(stdout);
        }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    fprintf(bc.table, "\nparameters: dense %.2f MiB, hadamard %.2f MiB | peak RSS %.1f MiB\n",
            (double)md.np.P.numel * 4 / 1048576.0, (double)mh.np.P.numel * 4 / 1048576.0,
            (double)ru.ru_maxrss / 1024.0);
    if (bc.json)
        printf("{\"bench\": \"rss\", \"peak_rss_mib\": %.1f}\n", (double)ru.ru_maxrss / 1024.0);
    model_destroy(&md);
    model_destroy(&mh);
    return 0;
}
