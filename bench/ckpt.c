/* bench_ckpt — what a checkpoint costs: saving and loading the named set
 * (model.safetensors + optimizer.safetensors + state.json, fsynced) against
 * the older one-file checkpoint.bin, init.from of the weights, and the
 * FNV-1a checksum pass alone, for a parameter list shaped like a GPT-2 style
 * decoder (real tensor names, decayed matrices first in the buffer).
 *
 *   bench_ckpt [--layers L] [--d D] [--vocab V] [--seq T] [--reps N] [--dir DIR] [--json]
 *
 * Defaults: 4 layers, d 512, vocab 8192, seq 512, 3 repetitions, in a fresh
 * folder under /tmp (removed after). GPT-2 small is --layers 12 --d 768
 * --vocab 50257 --seq 1024 (124 M floats, 1.5 GB per save). Times are the
 * median of the repetitions; the table goes to stdout, --json writes one
 * JSON object instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "common/hash.h"
#include "common/opts.h"
#include "kernels/bk.h"
#include "worker/io/ckpt.h"
#include "worker/io/safetensors.h"

static void die(const char *what, const char *err) {
    fprintf(stderr, "bench_ckpt: %s: %s\n", what, err);
    exit(1);
}

/* The command line (ckpt_opts), with its defaults. */
typedef struct ckpt_args {
    int layers, d, vocab, seq, reps, json;
    const char *dir;
} ckpt_args;

#define CK_AT(f) OPT_AT(ckpt_args, f)
static const opt_spec ckpt_opts[] = {
    {"layers", 0, OPT_INT, 1, 96, CK_AT(layers), "L", "decoder blocks (4)"},
    {"d", 0, OPT_INT, 8, 8192, CK_AT(d), "D", "model width (512)"},
    {"vocab", 0, OPT_INT, 2, 1 << 20, CK_AT(vocab), "V", "vocabulary (8192)"},
    {"seq", 0, OPT_INT, 1, 1 << 16, CK_AT(seq), "T", "positions (512)"},
    {"reps", 0, OPT_INT, 1, 100, CK_AT(reps), "N", "repetitions, the median is shown (3)"},
    {"dir", 0, OPT_STR, 0, 0, CK_AT(dir), "DIR", "where to write (a fresh folder in /tmp)"},
    {"json", 0, OPT_FLAG, 0, 0, CK_AT(json), NULL, "one JSON object instead of the table"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

static void add(bk_params *P, const char *name, int a, int b, int decay) {
    int shape[2] = {a, b};
    if (bk_params_add(P, name, b ? 2 : 1, shape, decay) < 0) die("bk_params_add", name);
}

/* A decoder's parameter list: embeddings, per block ln1, qkv, proj, ln2,
 * mlp up and down (weights and biases), final norm. */
static void build(bk_params *P, int L, int d, int V, int T) {
    bk_params_init(P);
    add(P, "wte.weight", V, d, 1);
    add(P, "wpe.weight", T, d, 1);
    char n[BK_NAME_MAX];
    for (int l = 0; l < L; l++) {
        const struct {
            const char *part;
            int a, b, decay;
        } parts[] = {{"ln1.weight", d, 0, 0},          {"ln1.bias", d, 0, 0},
                     {"attn.qkv.weight", d, 3 * d, 1}, {"attn.qkv.bias", 3 * d, 0, 0},
                     {"attn.proj.weight", d, d, 1},    {"attn.proj.bias", d, 0, 0},
                     {"ln2.weight", d, 0, 0},          {"ln2.bias", d, 0, 0},
                     {"mlp.up.weight", d, 4 * d, 1},   {"mlp.up.bias", 4 * d, 0, 0},
                     {"mlp.down.weight", 4 * d, d, 1}, {"mlp.down.bias", d, 0, 0}};
        for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
            snprintf(n, sizeof n, "blocks.%d.%s", l, parts[k].part);
            add(P, n, parts[k].a, parts[k].b, parts[k].decay);
        }
    }
    add(P, "lnf.weight", d, 0, 0);
    add(P, "lnf.bias", d, 0, 0);
    char err[256];
    if (bk_params_alloc(P, bk_cpu(), err, sizeof err)) die("bk_params_alloc", err);
}

typedef struct row {
    const char *what;
    double s, bytes;
} row;

int main(int argc, char **argv) {
    ckpt_args a = {.layers = 4, .d = 512, .vocab = 8192, .seq = 512, .reps = 3};
    int rest = argc;
    int prc = opts_parse("bench_ckpt",
                         "usage: bench_ckpt [options]\n"
                         "  GPT-2 small: --layers 12 --d 768 --vocab 50257 --seq 1024\n",
                         ckpt_opts, argc, argv, 1, &a, &rest);
    if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : 64;
    if (rest < argc) {
        fprintf(stderr, "bench_ckpt: unexpected argument '%s'\n", argv[rest]);
        return 64;
    }
    int L = a.layers, d = a.d, V = a.vocab, T = a.seq, reps = a.reps, json = a.json;
    const char *dir_arg = a.dir;
    char dir[512];
    if (dir_arg)
        snprintf(dir, sizeof dir, "%s", dir_arg);
    else {
        snprintf(dir, sizeof dir, "/tmp/bench-ckpt-XXXXXX");
        if (!mkdtemp(dir)) die("mkdtemp", dir);
    }
    bk_params P;
    build(&P, L, d, V, T);
    size_t n = P.numel, nb = n * sizeof(float);
    float *p = malloc(nb), *m = malloc(nb), *v = malloc(nb);
    float *p2 = malloc(nb), *m2 = malloc(nb), *v2 = malloc(nb);
    if (!p || !m || !v || !p2 || !m2 || !v2) die("malloc", "out of memory");
    for (size_t i = 0; i < n; i++) {
        p[i] = (float)(i % 1000) * 1e-3f;
        m[i] = (float)(i % 777) * 1e-5f;
        v[i] = (float)(i % 555) * 1e-7f;
    }
    char cfg[] = "model.layers: 4\n", err[2048];
    enum { SAVE, LOAD, LOAD_W, INIT, OLD_SAVE, OLD_LOAD, HASH, N_ROWS };
    row rows[N_ROWS] = {{"save set (3 files, fsync)", 0, 3.0 * (double)nb},
                        {"load set (params, m, v)", 0, 3.0 * (double)nb},
                        {"load set weights only", 0, (double)nb},
                        {"init.from (by name)", 0, (double)nb},
                        {"save checkpoint.bin (old)", 0, 3.0 * (double)nb},
                        {"load checkpoint.bin (old)", 0, 3.0 * (double)nb},
                        {"FNV-1a of params, m, v", 0, 3.0 * (double)nb}};
    double *t = malloc((size_t)reps * N_ROWS * sizeof(double));
    for (int r = 0; r < reps; r++) {
        ckpt_meta meta = {.step = (uint64_t)r + 1, .seed = 1, .data_step = 1, .cfg_text = cfg};
        double t0 = bench_now();
        if (ckpt_save(dir, &P, p, m, v, &meta, err, sizeof err)) die("ckpt_save", err);
        t[SAVE * reps + r] = bench_now() - t0;
        ckpt_meta got;
        t0 = bench_now();
        if (ckpt_load(dir, &P, p2, m2, v2, &got, err, sizeof err)) die("ckpt_load", err);
        t[LOAD * reps + r] = bench_now() - t0;
        ckpt_meta_free(&got);
        if (memcmp(p, p2, nb) || memcmp(v, v2, nb)) die("ckpt_load", "read back differs");
        t0 = bench_now();
        if (ckpt_load(dir, &P, p2, NULL, NULL, &got, err, sizeof err)) die("ckpt_load", err);
        t[LOAD_W * reps + r] = bench_now() - t0;
        ckpt_meta_free(&got);
        ckpt_init_report rep;
        char text[256];
        t0 = bench_now();
        if (ckpt_init_from(dir, &P, p2, &rep, text, sizeof text, err, sizeof err))
            die("ckpt_init_from", err);
        t[INIT * reps + r] = bench_now() - t0;
        char odir[600];
        snprintf(odir, sizeof odir, "%s/old", dir);
        mkdir(odir, 0755);
        ckpt_state s = {.step = 1,
                        .seed = 1,
                        .data_step = 1,
                        .n_params = n,
                        .params = p,
                        .m = m,
                        .v = v,
                        .cfg_text = cfg};
        t0 = bench_now();
        if (ckpt_write(odir, &s, err, sizeof err)) die("ckpt_write", err);
        t[OLD_SAVE * reps + r] = bench_now() - t0;
        ckpt_state s2;
        t0 = bench_now();
        if (ckpt_read(odir, &s2, err, sizeof err)) die("ckpt_read", err);
        t[OLD_LOAD * reps + r] = bench_now() - t0;
        ckpt_free(&s2);
        t0 = bench_now();
        volatile uint64_t h = fnv1a64(fnv1a64(fnv1a64(FNV1A64_SEED, p, nb), m, nb), v, nb);
        (void)h;
        t[HASH * reps + r] = bench_now() - t0;
    }
    for (int k = 0; k < N_ROWS; k++) rows[k].s = bench_median(t + k * reps, reps);
    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    if (json) {
        printf("{\"bench\": \"ckpt\", \"cpu\": ");
        bench_json_string(stdout, cpu);
        printf(", \"layers\": %d, \"d\": %d, \"vocab\": %d, \"seq\": %d, \"tensors\": %d, "
               "\"floats\": %zu, \"reps\": %d, \"rows\": [",
               L, d, V, T, P.n, n, reps);
        for (int k = 0; k < N_ROWS; k++)
            printf("%s{\"what\": \"%s\", \"s\": %.4f, \"mb_per_s\": %.1f}", k ? ", " : "",
                   rows[k].what, rows[k].s, rows[k].bytes / rows[k].s / 1e6);
        printf("]}\n");
    } else {
        printf("bench_ckpt: %s; %d layers, d %d, vocab %d, seq %d: %d tensors, %zu floats "
               "(%.1f MB per buffer); median of %d\n",
               cpu, L, d, V, T, P.n, n, (double)nb / 1e6, reps);
        printf("%-28s %10s %10s\n", "operation", "seconds", "MB/s");
        for (int k = 0; k < N_ROWS; k++)
            printf("%-28s %10.3f %10.1f\n", rows[k].what, rows[k].s,
                   rows[k].bytes / rows[k].s / 1e6);
    }
    if (!dir_arg) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd)) fprintf(stderr, "bench_ckpt: could not remove %s\n", dir);
    }
    free(t), free(p), free(m), free(v), free(p2), free(m2), free(v2);
    bk_params_free(&P);
    return 0;
}
