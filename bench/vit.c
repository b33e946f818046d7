/* bench_vit: inference images/s of a ViT, dense against A-ViT with halted
 * tokens masked (the computation training uses, and all NVlabs' A-ViT code
 * does) and dropped (each layer computes only the tokens still running:
 * models/model.c forward_dropped), at retention r = 1, 0.7, 0.5, 0.3.
 *
 *   bench_vit [--device auto|cpu|cuda] [--json] [--reps N] [--batch B]
 *             [--layers L] [--d D] [--heads H]
 *
 * Shapes: 28 x 28 images (Fashion-MNIST's) cut into patch 4 (49 + 1 = 50
 * tokens) and patch 2 (196 + 1 = 197, DeiT's count); DeiT-Tiny by default
 * (12 layers, d 192, 3 heads), batch 32. The weights are a fresh init, the
 * images random bytes; for each r the gate centre is set (by bisection on
 * the benchmark batch) so that the masked inference reaches that retention,
 * so the halting pattern is the model's own (not a fixed fraction per
 * layer), and the dropped run halts the same tokens. Each number is the
 * fastest of N timed forwards (default 5) after one warm-up. The table goes
 * to stdout; with --json it goes to stderr and stdout gets one record per
 * line: {"tokens": 197, "r": 0.5, "mode": "dropped", "images_per_s": ...,
 * "retention": ..., "speedup_vs_dense": ...}. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "common/opts.h"
#include "kernels/bk_rng.h"
#include "worker/models/model.h"

typedef struct opts {
    const bk_backend *be;
    int json, reps, B, L, D, H;
} opts;

static void die(const char *what, const char *err) {
    fprintf(stderr, "bench_vit: %s: %s\n", what, err);
    exit(1);
}

static double time_forward(model *m, const int *img, const int *labels, const opts *o) {
    char err[512];
    double best = INFINITY;
    for (int r = 0; r <= o->reps; r++) {
        o->be->sync();
        double t0 = bench_now();
        if (model_forward(m, img, NULL, labels, o->B, 0, err, sizeof err)) die("forward", err);
        o->be->sync();
        double t = bench_now() - t0;
        if (r > 0 && t < best) best = t; /* r = 0 warms up */
    }
    return o->B / best;
}

/* Sets the gate centre so the masked inference keeps about r of the tokens. */
static double tune(model *m, const int *img, const int *labels, const opts *o, double r) {
    char err[512];
    m->drop = 0;
    double lo = -50, hi = 50, got = 1;
    for (int i = 0; i < 40; i++) {
        m->halt.cf.centre = (float)(0.5 * (lo + hi));
        if (model_forward(m, img, NULL, labels, o->B, 0, err, sizeof err)) die("tune", err);
        got = m->st.retention;
        if (fabs(got - r) < 0.01) break;
        if (got > r) /* too many kept: halt sooner with a lower centre */
            hi = m->halt.cf.centre;
        else
            lo = m->halt.cf.centre;
    }
    return got;
}

static void record(const opts *o, int T, double r, const char *mode, double ips, double ret,
                   double dense) {
    FILE *table = o->json ? stderr : stdout;
    fprintf(table, "%6d %5.2f %-8s %12.1f %9.3f %8.2fx\n", T, r, mode, ips, ret, ips / dense);
    if (o->json)
        printf("{\"tokens\": %d, \"r\": %.2f, \"mode\": \"%s\", \"images_per_s\": %.3f, "
               "\"retention\": %.4f, \"speedup_vs_dense\": %.4f, \"layers\": %d, \"d\": %d, "
               "\"heads\": %d, \"batch\": %d}\n",
               T, r, mode, ips, ret, ips / dense, o->L, o->D, o->H, o->B);
}

static void run_shape(const opts *o, int patch) {
    model_shape sh = {.layers = o->L,
                      .d_model = o->D,
                      .heads = o->H,
                      .seq_len = (28 / patch) * (28 / patch) + 1,
                      .vocab = 256,
                      .n_classes = 10,
                      .patch = patch,
                      .image_h = 28,
                      .image_w = 28};
    char err[512];
    model dense, av;
    if (model_create(&dense, &sh, o->be, o->B, err, sizeof err)) die("dense model", err);
    if (model_init_weights(&dense, 1, err, sizeof err)) die("init", err);
    sh.avit = 1;
    if (model_create(&av, &sh, o->be, o->B, err, sizeof err)) die("A-ViT model", err);
    /* the same tensors in the same layout: copy the weights */
    o->be->copy(av.np.P.data, dense.np.P.data, dense.np.P.numel * sizeof(float));
    int *img = malloc((size_t)o->B * 28 * 28 * sizeof(int)), labels[4096];
    for (int i = 0; i < o->B * 28 * 28; i++)
        img[i] = (int)(256 * bk_rng_uniform_at(7, 3, (uint64_t)i)) & 255;
    for (int b = 0; b < o->B; b++) labels[b] = b % 10;
    double ips_dense = time_forward(&dense, img, labels, o);
    record(o, sh.seq_len, 1.0, "dense", ips_dense, 1.0, ips_dense);
    static const double rs[] = {1.0, 0.7, 0.5, 0.3};
    for (size_t k = 0; k < sizeof rs / sizeof *rs; k++) {
        double ret =
            rs[k] >= 1.0 ? (av.halt.cf.centre = 1e4f, 1.0) : tune(&av, img, labels, o, rs[k]);
        av.drop = 0;
        double ips = time_forward(&av, img, labels, o);
        record(o, sh.seq_len, rs[k], "masked", ips, av.st.retention, ips_dense);
        av.drop = 1;
        ips = time_forward(&av, img, labels, o);
        record(o, sh.seq_len, rs[k], "dropped", ips, av.st.retention, ips_dense);
        (void)ret;
    }
    free(img);
    model_destroy(&av);
    model_destroy(&dense);
}

/* The command line: the bench's opts and the device (vit_opts). */
typedef struct vit_cli {
    opts o;
    const char *device;
} vit_cli;

#define VA(f) OPT_AT(vit_cli, f)
static const opt_spec vit_opts[] = {
    {"device", 0, OPT_STR, 0, 0, VA(device), "auto|cpu|cuda", "the backend (cpu)"},
    {"json", 0, OPT_FLAG, 0, 0, VA(o.json), NULL, "one JSON object per row"},
    {"reps", 0, OPT_INT, 1, 1000, VA(o.reps), "N", "repetitions, the fastest kept (5)"},
    {"batch", 0, OPT_INT, 1, 4096, VA(o.B), "B", "images per batch (32)"},
    {"layers", 0, OPT_INT, 2, 64, VA(o.L), "L", "blocks (12)"},
    {"d", 0, OPT_INT, 8, 4096, VA(o.D), "D", "model width (192)"},
    {"heads", 0, OPT_INT, 1, 64, VA(o.H), "H", "attention heads (3)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int main(int argc, char **argv) {
    bk_openmp_passive(argv);
    vit_cli cli = {.o = {.reps = 5, .B = 32, .L = 12, .D = 192, .H = 3}, .device = "cpu"};
    int rest = argc;
    int prc = opts_parse("bench_vit",
                         "usage: bench_vit [options]\n"
                         "  dense ViT vs A-ViT masked vs A-ViT dropped at r = 1, 0.7, 0.5, 0.3,\n"
                         "  50 and 197 tokens (defaults: DeiT-Tiny, batch 32, fastest of 5)\n",
                         vit_opts, argc, argv, 1, &cli, &rest);
    if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : 64;
    if (rest < argc) {
        fprintf(stderr, "bench_vit: unexpected argument '%s'\n", argv[rest]);
        return 64;
    }
    opts o = cli.o;
    const char *device = cli.device;
    if (o.D % o.H) {
        fprintf(stderr, "bench_vit: --d %d is not divisible by --heads %d\n", o.D, o.H);
        return 64;
    }
    char err[512];
    if (bk_select(device, &o.be, err, sizeof err)) die("device", err);
    FILE *table = o.json ? stderr : stdout;
    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    fprintf(table, "bench_vit on %s (%s): %d layers, d %d, %d heads, batch %d, fastest of %d\n",
            o.be->name, cpu, o.L, o.D, o.H, o.B, o.reps);
    fprintf(table, "%6s %5s %-8s %12s %9s %9s\n", "tokens", "r", "mode", "images/s", "retention",
            "vs dense");
    run_shape(&o, 4);
    run_shape(&o, 2);
    return 0;
}
