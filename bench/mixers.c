/* bench_mixers: one mixer sublayer as a model runs it (LayerNorm, the mixer,
 * its output projection: nn_block's LN1 and mixer slot), attention against
 * bimamba, bilstm, bilstm_wide and bimamba2, at ViT shapes.
 *
 *   bench_mixers [--device auto|cpu|cuda] [--json] [--reps N] [--max-t T]
 *                [--t T] [--d D] [--mixer NAME] [--mode infer|train]
 *
 * Shapes: batch 8, T = 197, 577, 1025, 2049 tokens (up to --max-t), d = 192
 * with 3 heads (DeiT-Tiny) and d = 384 with 6 heads, dense W_O. Modes:
 * "infer" (forward, inference) and "train" (training forward + backward,
 * parameter gradients included). Each number is the fastest of N timed
 * repetitions (default 3) after one warm-up, with the backend's sync()
 * around each. --t, --d, --mixer and --mode keep only the matching rows
 * (attention still runs, for the speedup column). The table goes to stdout; with --json it goes to
 * stderr and stdout gets one record per line:
 *   {"mixer": "bimamba", "T": 577, "d": 192, "heads": 3, "mode": "infer",
 *    "ms": ..., "speedup_vs_attention": ...}
 * After each bimamba inference row, its forward by stage (synced after each,
 * so the stages add up to a little more than the row): W_in, both
 * directions' conv, both W_x (W_delta runs inside the scan at inference),
 * both scans with their GB/s against the memory the scans must touch once
 * (read x, z and the delta/B/C rows, write out; the second direction reads
 * out and adds onto it), and W_out with the output projection; in JSON a
 * record with "stages_ms" and "scan_gb_s". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "common/opts.h"
#include "kernels/bk_rng.h"
#include "worker/nn/nn_bimamba.h"
#include "worker/nn/nn_block.h"

#define BATCH 8

typedef struct sub {
    nn_params np;
    nn_env env;
    nn_block b;
    bk_arena A;
    nn_scratch S;
    float *x, *y, *dy, *dx;
    int B, T, C;
} sub;

static int sub_make(sub *s, const bk_backend *be, const char *mixer, int C, int H, int T, char *err,
                    size_t errlen) {
    memset(s, 0, sizeof *s);
    s->B = BATCH, s->T = T, s->C = C;
    nn_params_init(&s->np);
    s->env = (nn_env){be, &s->np, 0};
    nn_block_cfg cf = {.C = C,
                       .hidden = 4 * C,
                       .mixer = mixer,
                       .attn = {.C = C, .NH = H},
                       .std = 0.02f,
                       .resid_std = 0.02f};
    if (nn_block_declare(&s->b, &s->np, "blocks.0", &cf, err, errlen)) return -1;
    if (bk_params_alloc(&s->np.P, be, err, errlen)) return -1;
    if (nn_params_init_weights(&s->np, 1, err, errlen)) return -1;
    size_t n = (size_t)BATCH * T * C;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0) bk_arena_plan(&s->A);
        nn_block_plan(&s->b, &s->A, BATCH, T);
        s->x = bk_arena_floats(&s->A, n);
        s->y = bk_arena_floats(&s->A, n);
        s->dy = bk_arena_floats(&s->A, n);
        s->dx = bk_arena_floats(&s->A, n);
        if (pass == 0 && bk_arena_reserve(&s->A, be, err, errlen)) return -1;
        if (pass == 0) bk_arena_reset(&s->A);
    }
    nn_block_scratch(&s->b, &s->S);
    if (nn_scratch_reserve(&s->S, be, err, errlen)) return -1;
    be->rng_normal(s->x, n, 3, 0, 0);
    be->rng_normal(s->dy, n, 3, 1, 0);
    return 0;
}

static void sub_free(sub *s) {
    nn_block_destroy(&s->b);
    nn_scratch_free(&s->S);
    bk_arena_free(&s->A);
    nn_params_free(&s->np);
}

/* LN1 + mixer (+ backward of both when train) */
static void sub_run(sub *s, int train) {
    const bk_backend *be = s->env.be;
    nn_knobs kn = {.tau = 1};
    nn_stats st = {0};
    nn_call c = {.B = s->B, .T = s->T, .training = train, .layers = 1, .kn = &kn, .st = &st};
    int N = s->B * s->T;
    nn_block *b = &s->b;
    nn_layernorm_forward(&b->ln1, &s->env, &b->a1, s->x, N);
    b->mix.ops->forward(b->mix.self, &s->env, &s->S, &c, s->y, b->a1.out);
    if (!train) return;
    size_t NC = (size_t)N * s->C;
    be->zero(s->dx, NC * sizeof(float));
    /* dy goes to the mixer; its du lands in y (reused), then through LN1 */
    be->zero(s->y, NC * sizeof(float));
    b->mix.ops->backward(b->mix.self, &s->env, &s->S, &c, s->y, s->dy, NULL, b->a1.out);
    nn_layernorm_backward(&b->ln1, &s->env, &b->a1, s->dx, s->y, s->x, N);
}

static double best_ms(sub *s, int train, int reps) {
    const bk_backend *be = s->env.be;
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        be->sync();
        double t0 = bench_now();
        sub_run(s, train);
        be->sync();
        double t = bench_now() - t0;
        if (r > 0 && t < best) best = t; /* r = 0 warms up */
    }
    return best * 1e3;
}

/* bimamba's forward by stage (nn_bimamba.prof): each stage's fastest of
 * reps, in ms, into ms[NN_MAMBA_STAGES]. */
static void mamba_stages(sub *s, int reps, double *ms) {
    nn_bimamba *m = s->b.mix.self;
    double t[NN_MAMBA_STAGES];
    for (int k = 0; k < NN_MAMBA_STAGES; k++) ms[k] = 1e30;
    m->prof = t;
    for (int r = 0; r <= reps; r++) {
        memset(t, 0, sizeof t);
        sub_run(s, 0);
        for (int k = 0; k < NN_MAMBA_STAGES; k++)
            if (r > 0 && t[k] * 1e3 < ms[k]) ms[k] = t[k] * 1e3;
    }
    m->prof = NULL;
}

/* Bytes the two directions' scans must touch at inference, once each: read
 * x, z, and the rows of delta (rank R), B and C; write out, which the second
 * direction reads and adds onto. */
static double scan_bytes(const sub *s) {
    const nn_bimamba *m = s->b.mix.self;
    double BT = (double)s->B * s->T, row = (double)m->G * (m->R + 2 * m->N);
    return 4.0 * (2.0 * (2.0 * BT * m->D + BT * row) + 3.0 * BT * m->D);
}

/* The command line (mixers_opts); only_*: 0 or -1 for every row. */
typedef struct mixers_cli {
    const char *device;
    int json, reps, max_t, only_t, only_d, only_mixer, only_mode;
} mixers_cli;

#define MX(f) OPT_AT(mixers_cli, f)
static const opt_spec mixers_opts[] = {
    {"device", 0, OPT_STR, 0, 0, MX(device), "auto|cpu|cuda", "the backend (cpu)"},
    {"json", 0, OPT_FLAG, 0, 0, MX(json), NULL, "one JSON record per row, the table on stderr"},
    {"reps", 0, OPT_INT, 1, 1000, MX(reps), "N", "repetitions, the fastest kept (3)"},
    {"max-t", 0, OPT_INT, 1, 1 << 20, MX(max_t), "T", "no row longer than T tokens (2049)"},
    {"t", 0, OPT_INT, 1, 1 << 20, MX(only_t), "T", "only the rows of T tokens"},
    {"d", 0, OPT_INT, 1, 1 << 16, MX(only_d), "D", "only the rows of width D"},
    {"mixer", 0, OPT_CHOICE, 0, 0, MX(only_mixer), "attention|bimamba|bilstm|bilstm_wide|bimamba2",
     "only this mixer (attention always runs, for the speedup)"},
    {"mode", 0, OPT_CHOICE, 0, 0, MX(only_mode), "infer|train",
     "only the forward (infer) or forward + backward (train) rows"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int main(int argc, char **argv) {
    bk_openmp_passive(argv);
    mixers_cli cli = {.device = "cpu", .reps = 3, .max_t = 2049, .only_mixer = -1, .only_mode = -1};
    int rest = argc;
    int prc = opts_parse("bench_mixers",
                         "usage: bench_mixers [options]\n"
                         "  one mixer sublayer (LN + mixer + output projection), attention vs\n"
                         "  bimamba vs bilstm, batch 8, T = 197..2049, d = 192/3 heads and 384/6\n"
                         "  heads; infer = forward, train = forward + backward\n",
                         mixers_opts, argc, argv, 1, &cli, &rest);
    if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : 64;
    if (rest < argc) {
        fprintf(stderr, "bench_mixers: unexpected argument '%s'\n", argv[rest]);
        return 64;
    }
    const char *device = cli.device;
    int json = cli.json, reps = cli.reps, max_t = cli.max_t, only_t = cli.only_t,
        only_d = cli.only_d;
    const bk_backend *be;
    char err[512];
    if (bk_select(device, &be, err, sizeof err)) {
        fprintf(stderr, "bench_mixers: %s\n", err);
        return 64;
    }
    FILE *table = json ? stderr : stdout;
    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    fprintf(table, "bench_mixers on %s (%s), batch %d, fastest of %d\n", be->name, cpu, BATCH,
            reps);
    fprintf(table, "%-11s %5s %4s %5s %-5s %10s %8s\n", "mixer", "T", "d", "heads", "mode", "ms",
            "speedup");
    static const int Ts[] = {197, 577, 1025, 2049};
    static const int Ds[][2] = {{192, 3}, {384, 6}};
    static const char *mixers[] = {"attention", "bimamba", "bilstm", "bilstm_wide",
                                   "bimamba2"}; /* --mixer's order */
    for (int di = 0; di < 2; di++)
        for (int ti = 0; ti < 4; ti++) {
            int T = Ts[ti], C = Ds[di][0], H = Ds[di][1];
            if (T > max_t || (only_t && T != only_t) || (only_d && C != only_d)) continue;
            for (int train = 0; train < 2; train++) {
                if (cli.only_mode >= 0 && train != cli.only_mode) continue;
                double att = 0;
                for (int mi = 0; mi < 5; mi++) {
                    if (mi > 0 && cli.only_mixer >= 0 && mi != cli.only_mixer) continue;
                    sub s;
                    if (sub_make(&s, be, mixers[mi], C, H, T, err, sizeof err)) {
                        fprintf(stderr, "bench_mixers: %s\n", err);
                        sub_free(&s);
                        return 1;
                    }
                    double ms = best_ms(&s, train, reps);
                    double st[NN_MAMBA_STAGES];
                    int staged = mi == 1 && !train;
                    if (staged) mamba_stages(&s, reps, st);
                    double gbs = staged && st[NN_MAMBA_SCAN] > 0
                                     ? scan_bytes(&s) / (st[NN_MAMBA_SCAN] * 1e-3) / 1e9
                                     : 0;
                    sub_free(&s);
                    if (mi == 0) att = ms;
                    const char *mode = train ? "train" : "infer";
                    fprintf(table, "%-11s %5d %4d %5d %-5s %10.2f %7.2fx\n", mixers[mi], T, C, H,
                            mode, ms, att / ms);
                    if (json)
                        printf("{\"mixer\": \"%s\", \"T\": %d, \"d\": %d, \"heads\": %d, \"mode\": "
                               "\"%s\", \"ms\": %.4f, \"speedup_vs_attention\": %.4f}\n",
                               mixers[mi], T, C, H, mode, ms, att / ms);
                    if (staged) {
                        fprintf(table,
                                "  bimamba stages (ms, synced): W_in %.2f | conv %.2f | W_x "
                                "%.2f | scan %.2f (%.1f GB/s) | W_out+out %.2f\n",
                                st[0], st[1], st[2], st[3], gbs, st[4]);
                        if (json)
                            printf("{\"mixer\": \"bimamba\", \"T\": %d, \"d\": %d, \"heads\": "
                                   "%d, \"mode\": \"infer\", \"stages_ms\": {\"w_in\": %.4f, "
                                   "\"conv\": %.4f, \"w_x\": %.4f, \"scan\": %.4f, "
                                   "\"w_out_out\": %.4f}, \"scan_gb_s\": %.3f}\n",
                                   T, C, H, st[0], st[1], st[2], st[3], st[4], gbs);
                    }
                    fflush(stdout);
                }
            }
        }
    return 0;
}
