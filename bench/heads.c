/* bench_heads — inference wall time of the attention sublayers and of the
 * whole model when only k of H heads run (k/H = 1, 0.5, 0.25, 0.125), on the
 * same inputs in one run, as ratios to all heads. Two references for "all
 * heads": the selected-heads path with k = H, and the plain model without a
 * budget (the baseline a user would otherwise run).
 *
 *   bench_heads [--device auto|cpu|cuda] [--reps N] [--B n --T n --d n --H n --L n] [--json]
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/bk.h"
#include "bench/bench_util.h"
#include "common/opts.h"
#include "kernels/bk_rng.h"
#include "worker/models/model.h"

typedef struct {
    int B, T, d, H, L, reps, json;
    const char *device;
} opts;

typedef struct {
    double attn, total; /* median seconds */
} timing;

static timing time_model(model *m, const opts *o, const int *ids, const int *labels, int force_k) {
    double *ta = malloc((size_t)o->reps * sizeof(double)),
           *tt = malloc((size_t)o->reps * sizeof(double));
    char err[256];
    m->kn.force_k = force_k;
    m->time_attention = 1;
    for (int r = -1; r < o->reps; r++) {
        double t0 = bench_now();
        if (model_forward(m, ids, NULL, labels, o->B, 0, err, sizeof err)) {
            fprintf(stderr, "bench_heads: %s\n", err);
            exit(1);
        }
        m->be->sync();
        if (r >= 0) {
            tt[r] = bench_now() - t0;
            ta[r] = m->st.attn_seconds;
        }
    }
    timing t = {bench_median(ta, o->reps), bench_median(tt, o->reps)};
    free(ta);
    free(tt);
    return t;
}

static void build(model *m, const opts *o, const bk_backend *be, int budget) {
    model_shape sh = {.layers = o->L,
                      .d_model = o->d,
                      .heads = o->H,
                      .seq_len = o->T,
                      .vocab = 8192,
                      .n_classes = 26,
                      .budget = budget};
    char err[256];
    if (model_create(m, &sh, be, o->B, err, sizeof err)) {
        fprintf(stderr, "bench_heads: %s\n", err);
        exit(1);
    }
    if (model_init_weights(m, 1, err, sizeof err)) {
        fprintf(stderr, "bench_heads: %s\n", err);
        exit(1);
    }
}

#define HA(f) OPT_AT(opts, f)
static const opt_spec heads_opts[] = {
    {"device", 0, OPT_STR, 0, 0, HA(device), "auto|cpu|cuda", "the backend (auto)"},
    {"reps", 0, OPT_INT, 1, 2147483647, HA(reps), "N", "repetitions (15)"},
    {"B", 0, OPT_INT, 1, 2147483647, HA(B), "n", "batch (64)"},
    {"T", 0, OPT_INT, 1, 2147483647, HA(T), "n", "tokens (64)"},
    {"d", 0, OPT_INT, 1, 2147483647, HA(d), "n", "model width (128)"},
    {"H", 0, OPT_INT, 1, 2147483647, HA(H), "n", "heads (8)"},
    {"L", 0, OPT_INT, 1, 2147483647, HA(L), "n", "layers (4)"},
    {"json", 0, OPT_FLAG, 0, 0, HA(json), NULL, "one JSON object"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int main(int argc, char **argv) {
    bk_openmp_passive(argv);
    opts o = {.B = 64, .T = 64, .d = 128, .H = 8, .L = 4, .reps = 15, .device = "auto"};
    int rest = argc;
    int prc = opts_parse("bench_heads",
                         "usage: bench_heads [options]\n"
                         "Inference time of the attention sublayers and the whole model with k "
                         "of H heads.\n",
                         heads_opts, argc, argv, 1, &o, &rest);
    if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : 64;
    if (rest < argc) {
        fprintf(stderr, "bench_heads: unexpected argument '%s' (see --help)\n", argv[rest]);
        return 64;
    }
    if (o.H < 8 || o.H % 8) {
        fprintf(stderr, "bench_heads: --H must be a multiple of 8 (k/H down to 0.125)\n");
        return 64;
    }
    const bk_backend *be;
    char err[256];
    if (bk_select(o.device, &be, err, sizeof err)) {
        fprintf(stderr, "bench_heads: %s\n", err);
        return 1;
    }
    int *ids = malloc((size_t)o.B * o.T * sizeof(int)), *labels = malloc((size_t)o.B * sizeof(int));
    for (int i = 0; i < o.B * o.T; i++)
        ids[i] = (int)(bk_rng_uniform_at(3, 0, (uint64_t)i) * 8192) % 8192;
    for (int i = 0; i < o.B; i++) labels[i] = i % 26;
    model base, bud;
    build(&base, &o, be, 0);
    build(&bud, &o, be, 1);
    timing tb = time_model(&base, &o, ids, labels, 0);
    const double fr[4] = {1, 0.5, 0.25, 0.125};
    timing tk[4];
    for (int i = 0; i < 4; i++) tk[i] = time_model(&bud, &o, ids, labels, (int)(fr[i] * o.H));
    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    FILE *t = o.json ? stderr : stdout;
    fprintf(t,
            "bench_heads: backend %s | cpu %s | nproc %ld | threads %d | B=%d T=%d d=%d H=%d L=%d "
            "| median of %d\n",
            be->name, cpu, sysconf(_SC_NPROCESSORS_ONLN), omp_get_max_threads(), o.B, o.T, o.d, o.H,
            o.L, o.reps);
    fprintf(t, "%-26s %10s %10s %12s %12s %12s %12s\n", "heads", "attn ms", "model ms", "attn/k=H",
            "model/k=H", "attn/plain", "model/plain");
    fprintf(t, "%-26s %10.2f %10.2f %12s %12s %12.3f %12.3f\n", "plain model (all heads)",
            tb.attn * 1e3, tb.total * 1e3, "", "", 1.0, 1.0);
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "selected k/H=%.3f (k=%d)", fr[i], (int)(fr[i] * o.H));
        fprintf(t, "%-26s %10.2f %10.2f %12.3f %12.3f %12.3f %12.3f\n", name, tk[i].attn * 1e3,
                tk[i].total * 1e3, tk[i].attn / tk[0].attn, tk[i].total / tk[0].total,
                tk[i].attn / tb.attn, tk[i].total / tb.total);
        if (o.json)
            printf("{\"bench\": \"heads\", \"backend\": \"%s\", \"B\": %d, \"T\": %d, \"d\": %d, "
                   "\"H\": %d, "
                   "\"L\": %d, \"k_over_H\": %.3f, \"attn_ms\": %.4f, \"model_ms\": %.4f, "
                   "\"attn_ratio_to_k_eq_H\": %.4f, \"model_ratio_to_k_eq_H\": %.4f, "
                   "\"attn_ratio_to_plain\": %.4f, \"model_ratio_to_plain\": %.4f}\n",
                   be->name, o.B, o.T, o.d, o.H, o.L, fr[i], tk[i].attn * 1e3, tk[i].total * 1e3,
                   tk[i].attn / tk[0].attn, tk[i].total / tk[0].total, tk[i].attn / tb.attn,
                   tk[i].total / tb.total);
    }
    model_destroy(&base);
    model_destroy(&bud);
    free(ids);
    free(labels);
    return 0;
}
