/* bench_train — training throughput (tokens/s of full steps: forward,
 * backward, global-norm clip, AdamW) of the encoder classifier at
 * B=64, T=64, d=128, H=8, L=4, vocab 8192, 26 classes, with the head budget
 * off and on; and, in the same run, PyTorch eager on the same shapes and
 * threads (../shared/peers/torch_ref.py) when /usr/bin/python3 has torch.
 * --vit: the blocks of DeiT-Tiny instead (B=32, T=197, d=192, H=3, L=12, 10
 * classes; the token embedding stands in for the patch embedding).
 * --rounds R: R interleaved rounds of all four runs (the machine is shared:
 * load moves both sides of a round alike); the ratios are reported per
 * round, with their best and median.
 *
 *   bench_train [--device auto|cpu|cuda] [--steps N] [--B n --T n --d n --H n --L n --V n]
 *               [--vit] [--rounds R] [--clock wall|cpu] [--peer PATH|none] [--json]
 *
 * --clock cpu: CPU seconds (all threads) per step instead of wall seconds,
 * bf's from its process clock, the peer's from two runs of different length
 * (getrusage of the children). On a machine whose cores other work shares,
 * wall time mostly measures that work; CPU time is what each side spends.
 * Only fair with the passive wait policy (spinning threads burn CPU time):
 * the ratios below are against the passive peer.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kernels/bk.h"
#include "bench/bench_util.h"
#include "common/opts.h"
#include "kernels/bk_rng.h"
#include "worker/models/model.h"

typedef struct {
    int B, T, d, H, L, V, C, steps, rounds;
    const char *device, *peer;
    int json;
    int cpu_clock; /* --clock cpu: CPU seconds of all threads per step, both sides */
} opts;

/* Seconds on the clock the options chose: the wall clock, or this process's
 * CPU time (all its threads). */
static double clock_now(const opts *o) { return o->cpu_clock ? bench_cpu_now() : bench_now(); }

/* CPU seconds used by waited-for children so far. */
static double children_cpu(void) {
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

/* Median seconds per training step of a model with the given budget flag. */
static double time_steps(const opts *o, const bk_backend *be, int budget, size_t *params) {
    model m;
    model_shape sh = {.layers = o->L,
                      .d_model = o->d,
                      .heads = o->H,
                      .seq_len = o->T,
                      .vocab = o->V,
                      .n_classes = o->C,
                      .hadamard = 0,
                      .budget = budget};
    char err[512];
    if (model_create(&m, &sh, be, o->B, err, sizeof err)) {
        fprintf(stderr, "bench_train: %s\n", err);
        exit(1);
    }
    m.kn.s_min = 0.3f, m.kn.s_max = 0.6f;
    m.kn.sigma = 1.0f;
    if (model_init_weights(&m, 1, err, sizeof err)) {
        fprintf(stderr, "bench_train: %s\n", err);
        exit(1);
    }
    *params = m.np.P.numel;
    int *ids = malloc((size_t)o->B * o->T * sizeof(int));
    int *labels = malloc((size_t)o->B * sizeof(int));
    for (int i = 0; i < o->B * o->T; i++)
        ids[i] = (int)(bk_rng_uniform_at(2, 0, (uint64_t)i) * o->V) % o->V;
    for (int i = 0; i < o->B; i++)
        labels[i] = (int)(bk_rng_uniform_at(2, 1, (uint64_t)i) * o->C) % o->C;
    float *mom = be->alloc(m.np.P.numel * sizeof(float)),
          *var = be->alloc(m.np.P.numel * sizeof(float)), *norm = be->alloc(sizeof(float));
    m.stats_per_forward = 0; /* as the training loop: statistics stay on the device */
    bk_adamw h = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
    double *t = malloc((size_t)o->steps * sizeof(double));
    for (int s = -3; s < o->steps; s++) { /* 3 warm-up steps, as the peer does */
        double t0 = clock_now(o);
        m.kn.step = (uint64_t)(s + 3);
        if (model_forward(&m, ids, NULL, labels, o->B, 1, err, sizeof err)) {
            fprintf(stderr, "bench_train: %s\n", err);
            exit(1);
        }
        model_backward(&m);
        be->grad_norm(norm, m.dstats, m.np.P.grad, m.np.P.numel);
        be->adamw_clipped(m.np.P.data, m.np.P.grad, mom, var, m.np.P.numel, &h, s + 4, norm, 1.0f);
        be->sync();
        if (s >= 0) t[s] = clock_now(o) - t0;
    }
    double med = bench_median(t, o->steps);
    free(t);
    free(ids);
    free(labels);
    be->release(mom);
    be->release(var);
    be->release(norm);
    model_destroy(&m);
    return med;
}

/* Seconds per step of the step's matrix products alone, through the same
 * backend calls the step makes (linear_forward / linear_backward without the
 * bias, gemm for attention's four products per head), with nothing between
 * them: per layer the QKV, output, MLP-in and MLP-out linears forward (one
 * product each) and backward (two), attention's scores and weighted values
 * forward and its four backward products. No implementation that multiplies
 * with this GEMM can train a step in less, so PyTorch's step time over it is
 * the largest ratio any such implementation could reach against PyTorch.
 * *gflop: the products' GFLOP per step. */
static double time_products(const opts *o, const bk_backend *be, double *gflop) {
    int B = o->B, T = o->T, d = o->d, H = o->H, L = o->L, N = B * T, dh = d / H;
    const int lin[4][2] = {{d, 3 * d}, {d, d}, {d, 4 * d}, {4 * d, d}}; /* in, out */
    size_t act = (size_t)N * 4 * d, tt = (size_t)B * H * T * T;
    float *x = be->alloc(act * sizeof(float)), *y = be->alloc(act * sizeof(float));
    float *dx = be->alloc(act * sizeof(float)), *w = be->alloc((size_t)4 * d * d * sizeof(float));
    float *dw = be->alloc((size_t)4 * d * d * sizeof(float));
    float *att = be->alloc(tt * sizeof(float)), *datt = be->alloc(tt * sizeof(float));
    if (!x || !y || !dx || !w || !dw || !att || !datt) {
        fprintf(stderr, "bench_train: out of memory for the products' buffers\n");
        exit(1);
    }
    double f = 0;
    for (int k = 0; k < 4; k++) f += 3 * 2.0 * N * lin[k][0] * lin[k][1];
    f += 6 * 2.0 * B * H * (double)T * T * dh;
    *gflop = f * L / 1e9;
    int ld = 3 * d; /* q, k, v of a token side by side in one row, as the QKV linear writes */
    long long sq = dh, stt = (long long)T * T;
    double *t = malloc((size_t)o->steps * sizeof(double));
    for (int s = -1; s < o->steps; s++) {
        double t0 = clock_now(o);
        for (int l = 0; l < L; l++) {
            for (int k = 0; k < 4; k++) be->linear_forward(y, x, w, NULL, N, lin[k][0], lin[k][1]);
            for (int b = 0; b < B; b++) {
                const float *q = x + (size_t)b * T * ld, *kk = q + d, *v = q + 2 * d;
                float *a = att + (size_t)b * H * T * T, *out = y + (size_t)b * T * d;
                be->gemm(0, 1, T, T, dh, 0.125f, q, ld, sq, kk, ld, sq, 0, a, T, stt, H);
                be->gemm(0, 0, T, dh, T, 1, a, T, stt, v, ld, sq, 0, out, d, sq, H);
            }
        }
        for (int l = 0; l < L; l++) {
            for (int k = 0; k < 4; k++)
                be->linear_backward(dx, dw, NULL, y, x, w, N, lin[k][0], lin[k][1]);
            for (int b = 0; b < B; b++) {
                const float *q = x + (size_t)b * T * ld, *kk = q + d, *v = q + 2 * d;
                const float *dout = y + (size_t)b * T * d, *a = att + (size_t)b * H * T * T;
                float *da = datt + (size_t)b * H * T * T, *dq = dx + (size_t)b * T * ld;
                be->gemm(0, 1, T, T, dh, 1, dout, d, sq, v, ld, sq, 0, da, T, stt, H);
                be->gemm(0, 0, T, dh, T, 1, da, T, stt, kk, ld, sq, 1, dq, ld, sq, H);
                be->gemm(1, 0, T, dh, T, 1, da, T, stt, q, ld, sq, 1, dq + d, ld, sq, H);
                be->gemm(1, 0, T, dh, T, 1, a, T, stt, dout, d, sq, 1, dq + 2 * d, ld, sq, H);
            }
        }
        be->sync();
        if (s >= 0) t[s] = clock_now(o) - t0;
    }
    double med = bench_median(t, o->steps);
    free(t);
    float *bufs[] = {x, y, dx, w, dw, att, datt};
    for (int i = 0; i < 7; i++) be->release(bufs[i]);
    return med;
}

/* Runs the PyTorch peer with the same shapes and threads; returns its step
 * time in seconds, or 0 when it cannot run (no python3/torch). policy NULL:
 * the peer's own default OpenMP wait policy (as a user would run it; the
 * passive policy bf set for itself is taken away), else that policy. */
static double run_peer_steps(const opts *o, int steps, int threads, const char *policy,
                             char *version, size_t vlen) {
    if (!o->peer || strcmp(o->peer, "none") == 0 || access(o->peer, R_OK) != 0) return 0;
    if (access("/usr/bin/python3", X_OK) != 0) return 0;
    char cmd[1024], env[64] = "";
    if (policy)
        snprintf(env, sizeof env, "env OMP_WAIT_POLICY=%s ", policy);
    else if (getenv("BK_OMP_PASSIVE_SET"))
        snprintf(env, sizeof env, "env -u OMP_WAIT_POLICY ");
    snprintf(
        cmd, sizeof cmd,
        "%s/usr/bin/python3 %s encoder --steps %d --threads %d --B %d --T %d --d %d --H %d --L %d "
        "--V %d --C %d 2>/dev/null",
        env, o->peer, steps, threads, o->B, o->T, o->d, o->H, o->L, o->V, o->C);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    char line[2048] = {0};
    double step_ms = 0;
    while (fgets(line, sizeof line, p)) {
        char *s = strstr(line, "\"step_ms\": ");
        if (s) step_ms = atof(s + 11);
        char *v = strstr(line, "\"version\": \"");
        if (v) {
            v += 12;
            size_t n = strcspn(v, "\"");
            snprintf(version, vlen, "%.*s", (int)n, v);
        }
    }
    pclose(p);
    return step_ms / 1e3;
}

/* The peer's step time: its own wall-clock figure, or with --clock cpu its
 * CPU seconds per step, from two runs that differ only in their step count
 * (so interpreter start, imports and warm-up cancel out). */
static double run_peer(const opts *o, int threads, const char *policy, char *version, size_t vlen) {
    if (!o->cpu_clock) return run_peer_steps(o, o->steps, threads, policy, version, vlen);
    double c0 = children_cpu();
    if (run_peer_steps(o, 1, threads, policy, version, vlen) <= 0) return 0;
    double c1 = children_cpu();
    if (run_peer_steps(o, 1 + o->steps, threads, policy, version, vlen) <= 0) return 0;
    double c2 = children_cpu();
    double per = ((c2 - c1) - (c1 - c0)) / o->steps;
    return per > 0 ? per : 0;
}

/* The command line: the options into an opts, and --vit. */
typedef struct train_cli {
    opts o;
    int vit;
} train_cli;

#define TC(f) OPT_AT(train_cli, f)
static const opt_spec train_opts[] = {
    {"device", 0, OPT_STR, 0, 0, TC(o.device), "auto|cpu|cuda", "the backend (auto)"},
    {"steps", 0, OPT_INT, 1, 1 << 30, TC(o.steps), "N", "timed steps (20)"},
    {"B", 0, OPT_INT, 1, 1 << 20, TC(o.B), "n", "batch (64)"},
    {"T", 0, OPT_INT, 1, 1 << 20, TC(o.T), "n", "tokens per sample (64)"},
    {"d", 0, OPT_INT, 1, 1 << 16, TC(o.d), "n", "model width (128)"},
    {"H", 0, OPT_INT, 1, 1024, TC(o.H), "n", "attention heads (8)"},
    {"L", 0, OPT_INT, 1, 1024, TC(o.L), "n", "blocks (4)"},
    {"V", 0, OPT_INT, 1, 1 << 24, TC(o.V), "n", "vocabulary (8192)"},
    {"C", 0, OPT_INT, 1, 1 << 20, TC(o.C), "n", "classes (26)"},
    {"vit", 0, OPT_FLAG, 0, 0, TC(vit), NULL,
     "DeiT-Tiny's blocks (B 32, T 197, d 192, H 3, L 12, 10 classes; the other options given "
     "override)"},
    {"rounds", 0, OPT_INT, 1, 1000, TC(o.rounds), "R",
     "R interleaved rounds, ratios per round, best and median (1)"},
    {"peer", 0, OPT_STR, 0, 0, TC(o.peer), "PATH|none", "the PyTorch peer script, or none"},
    {"clock", 0, OPT_CHOICE, 0, 0, TC(o.cpu_clock), "wall|cpu",
     "cpu: CPU seconds per step (all threads), both sides (wall)"},
    {"json", 0, OPT_FLAG, 0, 0, TC(o.json), NULL, "one JSON record per line"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int main(int argc, char **argv) {
    bk_openmp_passive(argv);
    train_cli cli = {.o = {.B = 64,
                           .T = 64,
                           .d = 128,
                           .H = 8,
                           .L = 4,
                           .V = 8192,
                           .C = 26,
                           .steps = 20,
                           .rounds = 1,
                           .device = "auto",
                           .peer = BF_SOURCE_DIR "/../shared/peers/torch_ref.py"}};
    static const char *usage =
        "usage: bench_train [options]\n"
        "  training tokens/s of the encoder classifier, budget off and on, and the PyTorch\n"
        "  eager peer on the same shapes and OpenMP thread count (OMP_NUM_THREADS)\n";
    /* --vit sets the shape the other options then change: read the line
     * once for it, then again over its defaults */
    train_cli first = cli;
    int rest = argc;
    int prc = opts_parse("bench_train", usage, train_opts, argc, argv, 1, &first, &rest);
    if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : 64;
    if (rest < argc) {
        fprintf(stderr, "bench_train: unexpected argument '%s'\n", argv[rest]);
        return 64;
    }
    if (first.vit) {
        cli.o.B = 32, cli.o.T = 197, cli.o.d = 192, cli.o.H = 3, cli.o.L = 12, cli.o.C = 10;
        opts_parse("bench_train", usage, train_opts, argc, argv, 1, &cli, &rest);
    } else {
        cli = first;
    }
    opts o = cli.o;
    const bk_backend *be;
    char err[256];
    if (bk_select(o.device, &be, err, sizeof err)) {
        fprintf(stderr, "bench_train: %s\n", err);
        return 1;
    }
    int threads = omp_get_max_threads();
    char cpu[256], version[64] = "";
    bench_cpu_model(cpu, sizeof cpu);
    if (o.rounds > 50) {
        fprintf(stderr, "bench_train: --rounds must be at most 50\n");
        return 64;
    }
    size_t params_off = 0, params_on = 0;
    double off_r[50], on_r[50], peer_r[50], peerp_r[50], ratio_r[50], ratio_on_r[50], prod_r[50];
    double gflop = 0;
    double tok = (double)o.B * o.T;
    FILE *t = o.json ? stderr : stdout;
    for (int r = 0; r < o.rounds; r++) {
        off_r[r] = time_steps(&o, be, 0, &params_off);
        on_r[r] = time_steps(&o, be, 1, &params_on);
        prod_r[r] = time_products(&o, be, &gflop);
        /* the peer twice: with its own defaults (how a user runs it), and with the
         * passive OpenMP policy bf runs with, so neither side gets a head start */
        peer_r[r] = be->device == BK_CPU ? run_peer(&o, threads, NULL, version, sizeof version) : 0;
        peerp_r[r] =
            be->device == BK_CPU ? run_peer(&o, threads, "passive", version, sizeof version) : 0;
        ratio_r[r] = peerp_r[r] / off_r[r];
        ratio_on_r[r] = peerp_r[r] / on_r[r];
        if (o.rounds > 1)
            fprintf(t,
                    "round %d: bf %.2f / %.2f ms (budget off / on), pytorch %.2f ms (defaults), "
                    "%.2f ms (passive): bf/pytorch passive %.2fx / %.2fx\n",
                    r + 1, off_r[r] * 1e3, on_r[r] * 1e3, peer_r[r] * 1e3, peerp_r[r] * 1e3,
                    ratio_r[r], ratio_on_r[r]);
    }
    /* the table: each run's median over rounds */
    double off = bench_median(off_r, o.rounds), on = bench_median(on_r, o.rounds);
    double peer = bench_median(peer_r, o.rounds), peer_p = bench_median(peerp_r, o.rounds);
    double prod = bench_median(prod_r, o.rounds);
    const char *policy = getenv("OMP_WAIT_POLICY");
    fprintf(t,
            "bench_train: backend %s | cpu %s | nproc %ld | threads %d | OMP_WAIT_POLICY %s | B=%d "
            "T=%d d=%d H=%d L=%d V=%d classes=%d | %d steps (median) x %d rounds | clock %s\n",
            be->name, cpu, sysconf(_SC_NPROCESSORS_ONLN), threads, policy ? policy : "default", o.B,
            o.T, o.d, o.H, o.L, o.V, o.C, o.steps, o.rounds, o.cpu_clock ? "cpu" : "wall");
    fprintf(t, "%-38s %10s %10s %10s\n", "run", "params", o.cpu_clock ? "cpu ms" : "step ms",
            o.cpu_clock ? "tok/cpu-s" : "tokens/s");
    fprintf(t, "%-38s %10zu %10.2f %10.0f\n", "bf, budget off", params_off, off * 1e3, tok / off);
    fprintf(t, "%-38s %10zu %10.2f %10.0f\n", "bf, budget on", params_on, on * 1e3, tok / on);
    fprintf(t, "%-38s %10s %10.2f %10.0f\n", "the step's matrix products alone", "", prod * 1e3,
            tok / prod);
    fprintf(t,
            "products: %.1f GFLOP per step at %.1f GFLOP/%s; bf's step spends %.0f%% of its time "
            "outside them (budget off)\n",
            gflop, gflop / prod, o.cpu_clock ? "cpu-s" : "s", 100 * (1 - prod / off));
    double ratio_best = 0, ratio_med = 0;
    if (peer > 0 && peer_p > 0) {
        fprintf(t, "%-38s %10s %10.2f %10.0f\n", "pytorch eager, its defaults", version, peer * 1e3,
                tok / peer);
        fprintf(t, "%-38s %10s %10.2f %10.0f\n", "pytorch eager, OMP_WAIT_POLICY=passive", version,
                peer_p * 1e3, tok / peer_p);
        fprintf(t,
                "ratio bf/pytorch tokens/s: vs its defaults %.2fx (budget off) %.2fx (on); "
                "vs passive %.2fx / %.2fx\n",
                peer / off, peer / on, peer_p / off, peer_p / on);
        fprintf(
            t,
            "ceiling: a step of the products alone would be %.2fx pytorch (passive), %.2fx (its "
            "defaults); %.2fx needs bf's step at %.2f ms\n",
            peer_p / prod, peer / prod, 2.0, peer_p / 2 * 1e3);
        ratio_med = bench_median(ratio_r, o.rounds);
        ratio_best = ratio_r[o.rounds - 1];
        if (o.rounds > 1)
            fprintf(t,
                    "per-round ratio bf (budget off) / pytorch passive: best %.2fx, median %.2fx, "
                    "worst %.2fx\n",
                    ratio_best, ratio_med, ratio_r[0]);
    } else {
        int ran = o.peer && strcmp(o.peer, "none") != 0 && access(o.peer, R_OK) == 0 &&
                  access("/usr/bin/python3", X_OK) == 0 && version[0];
        if (!ran)
            fprintf(t, "pytorch peer not run (needs /usr/bin/python3 with torch and %s)\n", o.peer);
        else if (o.cpu_clock)
            fprintf(t,
                    "pytorch peer %s ran but gave no CPU figure: its run of 1 + %d steps took no "
                    "more CPU than its run of 1 (noise larger than %d steps: raise --steps)\n",
                    version, o.steps, o.steps);
        else
            fprintf(t, "pytorch peer %s ran but reported no step time\n", version);
    }
    if (o.json) {
        printf("{\"bench\": \"train\", \"backend\": \"%s\", \"cpu\": ", be->name);
        bench_json_string(stdout, cpu);
        printf(
            ", \"threads\": %d, \"B\": %d, \"T\": %d, \"d\": %d, \"H\": %d, \"L\": %d, \"V\": %d, "
            "\"steps\": %d, \"budget_off_tokens_per_s\": %.1f, \"budget_on_tokens_per_s\": %.1f, "
            "\"pytorch_tokens_per_s\": %.1f, \"pytorch_passive_tokens_per_s\": %.1f, "
            "\"ratio_off\": %.3f, \"ratio_on\": %.3f, \"ratio_off_vs_passive\": %.3f, "
            "\"rounds\": %d, \"clock\": \"%s\", \"ratio_off_vs_passive_best\": %.3f, "
            "\"ratio_off_vs_passive_median\": %.3f, \"products_ms\": %.3f, \"products_gflop\": "
            "%.3f, \"ceiling_vs_passive\": %.3f}\n",
            threads, o.B, o.T, o.d, o.H, o.L, o.V, o.steps, tok / off, tok / on,
            peer > 0 ? tok / peer : 0.0, peer_p > 0 ? tok / peer_p : 0.0,
            peer > 0 ? peer / off : 0.0, peer > 0 ? peer / on : 0.0,
            peer_p > 0 ? peer_p / off : 0.0, o.rounds, o.cpu_clock ? "cpu" : "wall", ratio_best,
            ratio_med, prod * 1e3, gflop, peer_p > 0 ? peer_p / prod : 0.0);
    }
    return 0;
}
