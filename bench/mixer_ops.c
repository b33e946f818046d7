/* bench_mixer_ops: the sequence-mixer ops against the attention op they
 * replace, at ViT shapes.
 *
 *   bench_mixer_ops [--device auto|cpu|cuda] [--json] [--reps N] [--max-t T]
 *                   [--clock wall|cpu]
 *
 * Shapes: batch 8, T = 197, 577, 1025, 2049 tokens, d = 192 with 3 heads
 * (DeiT-Tiny) and d = 384 with 6 heads. For each shape:
 *  - scan: one direction of the BiMamba selective scan, D = 2d channels in
 *    `heads` groups, state N = 16, gated, B/C read from the [delta; B; C]
 *    rows of a block-diagonal W_x (delta rank R = ceil(d_h / 16)). GB/s is
 *    measured against the memory the op must touch once: forward reads x,
 *    delta, z, B, C and writes out and the chunk states; backward reads x,
 *    delta, z, dout, B, C, states and reads+writes dx, ddelta, dz, dB, dC.
 *  - conv1d: one direction's depthwise conv (width 4, SiLU fused) on D channels.
 *  - lstm: the BiLSTM recurrence, 2 * heads streams of hidden d_h / 2.
 *  - attention: the attention op alone (qkv given) at C = d, `heads` heads.
 *  - ratios: attention time over the BiMamba core (both directions' conv +
 *    scan: 2 * (conv + scan)), and over the BiLSTM recurrence. The
 *    projections around each mixer are GEMMs and are left out here.
 * Each number is the fastest of N timed repetitions after one warm-up, with
 * the backend's sync() around each. --clock cpu times the CPU backend by the
 * CPU time of the whole process (summed over its threads) instead of the
 * wall clock: on a machine shared with other work the wall clock mostly
 * measures the others, CPU time barely moves with the load (idle OpenMP
 * threads sleep, see bk_openmp_passive), and a ratio of two ops measured
 * the same way stays fair. Divide by the thread count for an unloaded
 * machine's wall time, if the op scales. The table goes to stdout; with --json
 * it goes to stderr and stdout gets one JSON record per line. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "common/opts.h"
#include "kernels/bk.h"
#include "kernels/bk_rng.h"

#define REPS_MAX 1000
#define BATCH 8
#define STATE 16
#define CONV_K 4

typedef struct {
    const bk_backend *be;
    int reps, json;
    int cpu_clock; /* 1: process CPU time instead of the wall clock */
    FILE *table;
} bench;

static double clock_now(const bench *b) { return b->cpu_clock ? bench_cpu_now() : bench_now(); }

/* Fastest of b->reps runs after one warm-up, in seconds. */
static double time_best(const bench *b, void (*fn)(void *), void *ctx) {
    fn(ctx);
    b->be->sync();
    double best = 1e30;
    for (int r = 0; r < b->reps; r++) {
        double t0 = clock_now(b);
        fn(ctx);
        b->be->sync();
        double t = clock_now(b) - t0;
        if (t < best) best = t;
    }
    return best;
}

/* Device buffer of n floats, uniform in [lo, hi); exits on failure (a
 * program's main path, not library code). */
static float *dev_fill(const bk_backend *be, size_t n, float lo, float hi, uint64_t seed) {
    float *host = malloc((n ? n : 1) * sizeof(float));
    float *dev = be->alloc((n ? n : 1) * sizeof(float));
    if (!host || !dev) {
        fprintf(stderr, "bench_mixer_ops: out of memory allocating %zu floats\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) host[i] = lo + (hi - lo) * bk_rng_uniform_at(seed, 1, i);
    be->to_device(dev, host, n * sizeof(float));
    free(host);
    return dev;
}

typedef struct {
    const bk_backend *be;
    bk_scan_args sa;
    bk_scan_grads sg;
    bk_conv_args ca;
    bk_lstm_args la;
    bk_attn_args aa;
    float *out, *states, *dout, *scratch;                      /* scan */
    float *cx, *cw, *cb, *cout, *cdx, *cdw, *cdb, *cscratch;   /* conv */
    float *gx, *whh, *lout, *saved, *ldout, *dgx, *dwhh, *lsc; /* lstm */
    float *qkv, *aout, *att, *adout, *dqkv, *ascratch;         /* attention */
} mix_case;

static void run_scan_fwd(void *p) {
    mix_case *c = p;
    c->be->scan_forward(c->out, c->states, &c->sa);
}
static void run_scan_bwd(void *p) {
    mix_case *c = p;
    c->be->scan_backward(&c->sg, c->scratch, c->dout, c->states, &c->sa);
}
static void run_conv_fwd(void *p) {
    mix_case *c = p;
    c->be->conv1d_forward(c->cout, c->cx, c->cw, c->cb, &c->ca);
}
static void run_conv_bwd(void *p) {
    mix_case *c = p;
    c->be->conv1d_backward(c->cdx, c->cdw, c->cdb, c->cscratch, c->dout, c->cx, c->cw, c->cb,
                           &c->ca);
}
static void run_lstm_fwd(void *p) {
    mix_case *c = p;
    c->be->lstm_forward(c->lout, c->saved, c->gx, c->whh, &c->la);
}
static void run_lstm_bwd(void *p) {
    mix_case *c = p;
    c->be->lstm_backward(c->dgx, c->dwhh, c->lsc, c->ldout, c->saved, c->whh, &c->la);
}
static void run_attn_fwd(void *p) {
    mix_case *c = p;
    c->be->attention_forward(c->aout, c->att, c->qkv, &c->aa);
}
static void run_attn_bwd(void *p) {
    mix_case *c = p;
    c->be->attention_backward(c->dqkv, NULL, c->ascratch, c->adout, c->qkv, c->att, &c->aa);
}

static void bench_shape(const bench *b, int T, int d, int heads) {
    const bk_backend *be = b->be;
    const int B = BATCH, D = 2 * d, G = heads, N = STATE, dh = d / heads;
    const int R = (dh + 15) / 16, S = R + 2 * N, nch = (T + BK_SCAN_CHUNK - 1) / BK_SCAN_CHUNK;
    const size_t nx = (size_t)B * T * D, nbc = (size_t)B * T * G * S;
    mix_case c = {.be = be};

    /* scan, with the [delta; B; C] rows a block-diagonal W_x would write */
    float *x = dev_fill(be, nx, -1, 1, 1), *delta = dev_fill(be, nx, -4, 0, 2);
    float *z = dev_fill(be, nx, -2, 2, 3), *xdbl = dev_fill(be, nbc, -1, 1, 4);
    float *bias = dev_fill(be, (size_t)D, -4, -2, 5),
          *Alog = dev_fill(be, (size_t)D * N, 0, 2.7f, 6);
    float *Dp = dev_fill(be, (size_t)D, 1, 1, 7);
    c.out = dev_fill(be, nx, 0, 0, 8);
    c.states = dev_fill(be, (size_t)B * D * nch * N, 0, 0, 9);
    c.dout = dev_fill(be, nx, -1, 1, 10);
    c.scratch = dev_fill(be, (size_t)B * D * (2 * N + 2), 0, 0, 11);
    float *gbuf = dev_fill(be, 3 * nx, 0, 0, 12), *gbc = dev_fill(be, nbc, 0, 0, 13);
    float *gpar = dev_fill(be, (size_t)D * (N + 2), 0, 0, 14);
    c.sa = (bk_scan_args){.B = B,
                          .T = T,
                          .D = D,
                          .G = G,
                          .N = N,
                          .bc_stride = S,
                          .x = x,
                          .delta = delta,
                          .delta_bias = bias,
                          .A_log = Alog,
                          .Bm = xdbl + R,
                          .Cm = xdbl + R + N,
                          .Dskip = Dp,
                          .z = z};
    c.sg = (bk_scan_grads){.dx = gbuf,
                           .ddelta = gbuf + nx,
                           .ddelta_bias = gpar + (size_t)D * N,
                           .dA_log = gpar,
                           .dBm = gbc + R,
                           .dCm = gbc + R + N,
                           .dDskip = gpar + (size_t)D * N + D,
                           .dz = gbuf + 2 * nx};
    double tsf = time_best(b, run_scan_fwd, &c), tsb = time_best(b, run_scan_bwd, &c);
    double st = (double)B * D * nch * N;
    double bf = 4.0 * (4.0 * nx + 2.0 * B * T * G * N + st);
    double bb = 4.0 * (10.0 * nx + 6.0 * B * T * G * N + st);

    /* conv on the same channels */
    c.ca = (bk_conv_args){.B = B, .T = T, .C = D, .K = CONV_K, .silu = 1};
    c.cx = x;
    c.cw = dev_fill(be, (size_t)D * CONV_K, -0.5f, 0.5f, 15);
    c.cb = dev_fill(be, (size_t)D, -0.1f, 0.1f, 16);
    c.cout = c.out;
    c.cdx = gbuf;
    c.cdw = dev_fill(be, (size_t)D * CONV_K, 0, 0, 17);
    c.cdb = gpar;
    c.cscratch = dev_fill(be, (size_t)B * D * (CONV_K + 1), 0, 0, 18);
    double tcf = time_best(b, run_conv_fwd, &c), tcb = time_best(b, run_conv_bwd, &c);

    /* BiLSTM recurrence: 2 * heads streams of d_h / 2 */
    const int Sl = 2 * heads, Hl = dh / 2;
    const size_t ng = (size_t)B * T * Sl * 4 * Hl, nlo = (size_t)B * T * Sl * Hl;
    const size_t nw = (size_t)Sl * 4 * Hl * Hl;
    c.la = (bk_lstm_args){B, T, Sl, Hl, 1, NULL};
    c.gx = dev_fill(be, ng, -1, 1, 19);
    c.whh = dev_fill(be, nw, -0.2f, 0.2f, 20);
    c.lout = dev_fill(be, nlo, 0, 0, 21);
    c.saved = dev_fill(be, 6 * nlo, 0, 0, 22);
    c.ldout = dev_fill(be, nlo, -1, 1, 23);
    c.dgx = dev_fill(be, ng, 0, 0, 24);
    c.dwhh = dev_fill(be, nw, 0, 0, 25);
    c.lsc = dev_fill(be, (size_t)B * nw, 0, 0, 26);
    double tlf = time_best(b, run_lstm_fwd, &c), tlb = time_best(b, run_lstm_bwd, &c);

    /* attention at C = d */
    c.aa = (bk_attn_args){.B = B, .T = T, .C = d, .NH = heads};
    const size_t ntt = (size_t)B * heads * T * T;
    c.qkv = dev_fill(be, (size_t)B * T * 3 * d, -1, 1, 27);
    c.aout = dev_fill(be, (size_t)B * T * d, 0, 0, 28);
    c.att = dev_fill(be, ntt, 0, 0, 29);
    c.adout = dev_fill(be, (size_t)B * T * d, -1, 1, 30);
    c.dqkv = dev_fill(be, (size_t)B * T * 3 * d, 0, 0, 31);
    c.ascratch = dev_fill(be, ntt, 0, 0, 32);
    double taf = time_best(b, run_attn_fwd, &c), tab = time_best(b, run_attn_bwd, &c);

    double coref = 2 * (tcf + tsf), coreb = 2 * (tcb + tsb);
    fprintf(b->table,
            "%5d %4d %2d | %8.2f %6.1f %8.2f %6.1f | %7.2f %7.2f | %8.2f %8.2f | %9.2f %9.2f | "
            "%6.2f %6.2f | %6.2f %6.2f\n",
            T, d, heads, tsf * 1e3, bf / tsf * 1e-9, tsb * 1e3, bb / tsb * 1e-9, tcf * 1e3,
            tcb * 1e3, tlf * 1e3, tlb * 1e3, taf * 1e3, tab * 1e3, taf / coref, tab / coreb,
            taf / tlf, tab / tlb);
    if (b->json) {
        printf("{\"op\": \"scan\", \"B\": %d, \"T\": %d, \"d\": %d, \"heads\": %d, \"D\": %d, "
               "\"N\": %d, \"fwd_ms\": %.4f, \"fwd_gbps\": %.2f, \"bwd_ms\": %.4f, \"bwd_gbps\": "
               "%.2f}\n",
               B, T, d, heads, D, N, tsf * 1e3, bf / tsf * 1e-9, tsb * 1e3, bb / tsb * 1e-9);
        printf("{\"op\": \"conv1d\", \"B\": %d, \"T\": %d, \"d\": %d, \"heads\": %d, \"C\": %d, "
               "\"K\": %d, \"fwd_ms\": %.4f, \"bwd_ms\": %.4f}\n",
               B, T, d, heads, D, CONV_K, tcf * 1e3, tcb * 1e3);
        printf("{\"op\": \"lstm\", \"B\": %d, \"T\": %d, \"d\": %d, \"heads\": %d, \"streams\": "
               "%d, \"H\": %d, \"fwd_ms\": %.4f, \"bwd_ms\": %.4f}\n",
               B, T, d, heads, Sl, Hl, tlf * 1e3, tlb * 1e3);
        printf("{\"op\": \"attention\", \"B\": %d, \"T\": %d, \"d\": %d, \"heads\": %d, "
               "\"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"over_bimamba_core_fwd\": %.3f, "
               "\"over_bimamba_core_bwd\": %.3f, \"over_bilstm_fwd\": %.3f, \"over_bilstm_bwd\": "
               "%.3f}\n",
               B, T, d, heads, taf * 1e3, tab * 1e3, taf / coref, tab / coreb, taf / tlf,
               tab / tlb);
    }
    fflush(stdout);
    float *all[] = {x,        delta,      z,         xdbl,   bias,   Alog,    Dp,      c.out,
                    c.states, c.dout,     c.scratch, gbuf,   gbc,    gpar,    c.cw,    c.cb,
                    c.cdw,    c.cscratch, c.gx,      c.whh,  c.lout, c.saved, c.ldout, c.dgx,
                    c.dwhh,   c.lsc,      c.qkv,     c.aout, c.att,  c.adout, c.dqkv,  c.ascratch};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->release(all[i]);
}

/* The command line (mixer_ops_opts), with its defaults. */
typedef struct mixer_ops_cli {
    const char *device, *clock;
    int reps, max_t, json;
} mixer_ops_cli;

#define MA(f) OPT_AT(mixer_ops_cli, f)
static const opt_spec mixer_ops_opts[] = {
    {"device", 0, OPT_STR, 0, 0, MA(device), "auto|cpu|cuda", "the backend (auto)"},
    {"json", 0, OPT_FLAG, 0, 0, MA(json), NULL, "JSON lines on stdout, the table on stderr"},
    {"reps", 0, OPT_INT, 1, REPS_MAX, MA(reps), "N", "timed repetitions per op, best kept (3)"},
    {"max-t", 0, OPT_INT, 1, 1 << 20, MA(max_t), "T",
     "skip shapes with more than T tokens (default: all, up to 2049)"},
    {"clock", 0, OPT_STR, 0, 0, MA(clock), "C",
     "wall (default) or cpu: CPU time of the process, summed over threads (CPU backend only; "
     "steadier on a loaded machine)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int main(int argc, char **argv) {
    bk_openmp_passive(argv);
    mixer_ops_cli cli = {.device = "auto", .clock = "wall", .reps = 3, .max_t = 1 << 20};
    int rest = argc;
    int prc = opts_parse("bench_mixer_ops", "usage: bench_mixer_ops [options]\n", mixer_ops_opts,
                         argc, argv, 1, &cli, &rest);
    if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : 2;
    if (rest < argc) {
        fprintf(stderr, "bench_mixer_ops: unexpected argument '%s'\n", argv[rest]);
        return 2;
    }
    if (strcmp(cli.clock, "wall") && strcmp(cli.clock, "cpu")) {
        fprintf(stderr, "bench_mixer_ops: --clock '%s' is not wall or cpu\n", cli.clock);
        return 2;
    }
    const char *device = cli.device;
    bench b = {.reps = cli.reps,
               .json = cli.json,
               .cpu_clock = !strcmp(cli.clock, "cpu"),
               .table = stdout};
    long max_t = cli.max_t;
    char err[256];
    if (bk_select(device, &b.be, err, sizeof err)) {
        fprintf(stderr, "bench_mixer_ops: %s\n", err);
        return 2;
    }
    if (b.cpu_clock && b.be->device != BK_CPU) {
        fprintf(stderr, "bench_mixer_ops: --clock cpu needs the CPU backend (got %s)\n",
                b.be->name);
        return 2;
    }
    if (b.json) b.table = stderr;
    char model[256];
    bench_cpu_model(model, sizeof model);
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = omp_get_max_threads();
    fprintf(b.table,
            "bench_mixer_ops: backend %s | nproc %ld | cpu %s | omp threads %d | reps %d (best "
            "of) | clock %s | batch %d, state %d, conv width %d\n",
            b.be->name, nproc, model, threads, b.reps,
            b.cpu_clock ? "cpu (summed over threads)" : "wall", BATCH, STATE, CONV_K);
    if (b.json) {
        printf("{\"op\": \"machine\", \"backend\": ");
        bench_json_string(stdout, b.be->name);
        printf(", \"nproc\": %ld, \"cpu\": ", nproc);
        bench_json_string(stdout, model);
        printf(", \"omp_threads\": %d, \"reps\": %d, \"clock\": \"%s\"}\n", threads, b.reps,
               b.cpu_clock ? "cpu" : "wall");
    }
    fprintf(b.table,
            "\n%5s %4s %2s | %8s %6s %8s %6s | %7s %7s | %8s %8s | %9s %9s | %13s | %13s\n"
            "%5s %4s %2s | %8s %6s %8s %6s | %7s %7s | %8s %8s | %9s %9s | %6s %6s | %6s %6s\n",
            "", "", "", "scan", "", "", "", "conv1d", "", "lstm", "", "attention", "",
            "attn/bimamba", "attn/bilstm", "T", "d", "H", "fwd ms", "GB/s", "bwd ms", "GB/s",
            "fwd ms", "bwd ms", "fwd ms", "bwd ms", "fwd ms", "bwd ms", "fwd", "bwd", "fwd", "bwd");
    const int Ts[] = {197, 577, 1025, 2049};
    const int ds[][2] = {{192, 3}, {384, 6}};
    for (size_t j = 0; j < sizeof ds / sizeof *ds; j++)
        for (size_t i = 0; i < sizeof Ts / sizeof *Ts; i++)
            if (Ts[i] <= max_t) bench_shape(&b, Ts[i], ds[j][0], ds[j][1]);
    fprintf(b.table, "\nattn/bimamba: attention op time over 2 x (conv1d + scan), the BiMamba "
                     "core of both directions; attn/bilstm: over the BiLSTM recurrence.\n");
    return 0;
}
