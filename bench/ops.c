/* bench_ops: throughput of the compute core's heavy ops on one backend.
 *
 *   bench_ops [--device auto|cpu|cuda] [--json] [--reps N] [--attention-tiled]
 *
 * Measures GEMM GFLOP/s, attention forward+backward GFLOP/s, the Walsh–Hadamard
 * transform's GB/s against the dense d x d projection it replaces, and the
 * BudgetFormer selected-heads attention layer against the all-heads layer.
 * Each number is the fastest of N timed repetitions after one warm-up, with
 * the backend's sync() around each. The table goes to stdout; with --json it
 * goes to stderr and stdout gets one JSON record per line. */
#include "bench/bench_util.h"
#include "common/opts.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/bk.h"
#include "kernels/bk_rng.h"

#define REPS_MAX 1000

typedef struct {
    const bk_backend *be;
    int reps;
    int json;
    int cpu_clock; /* --clock cpu: CPU seconds of all threads (CPU backend) */
    FILE *table;   /* where the human-readable table goes */
} bench;

/* Fastest of b->reps timed runs, in seconds: on a shared machine the minimum
 * is the number least disturbed by other processes. */
static double time_median(const bench *b, void (*fn)(void *), void *ctx) {
    double t[REPS_MAX];
    fn(ctx);
    b->be->sync();
    for (int r = 0; r < b->reps; r++) {
        double t0 = b->cpu_clock ? bench_cpu_now() : bench_now();
        fn(ctx);
        b->be->sync();
        t[r] = (b->cpu_clock ? bench_cpu_now() : bench_now()) - t0;
    }
    qsort(t, (size_t)b->reps, sizeof(double), bench_cmp_double);
    return t[0];
}

/* Device buffer of n floats filled with uniform [-1, 1) values; exits on failure
 * (this is a program's main path, not library code). */
static float *dev_random(const bk_backend *be, size_t n, uint64_t seed) {
    float *host = malloc(n * sizeof(float));
    float *dev = be->alloc(n * sizeof(float));
    if (!host || !dev) {
        fprintf(stderr, "bench_ops: out of memory allocating %zu floats\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) host[i] = 2.0f * bk_rng_uniform_at(seed, 1, i) - 1.0f;
    be->to_device(dev, host, n * sizeof(float));
    free(host);
    return dev;
}

static void *dev_zero(const bk_backend *be, size_t bytes) {
    void *p = be->alloc(bytes);
    if (!p) {
        fprintf(stderr, "bench_ops: out of memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

/* ---- machine ---- */

/* ---- GEMM ---- */

typedef struct {
    const bk_backend *be;
    int M, N, K;
    float *A, *B, *C;
} gemm_case;

static void run_gemm(void *ctx) {
    gemm_case *g = ctx;
    /* C[M,N] = A[M,K] @ B[N,K]^T, the layout of a linear layer */
    g->be->gemm(0, 1, g->M, g->N, g->K, 1.0f, g->A, g->K, 0, g->B, g->K, 0, 0.0f, g->C, g->N, 0, 1);
}

static void bench_gemm(const bench *b) {
    const int shapes[][3] = {
        {4096, 128, 128}, {4096, 512, 128}, {4096, 128, 512}, {4096, 768, 768}};
    fprintf(b->table, "\nGEMM  C[M,N] = A[M,K] B[N,K]^T\n%8s %6s %6s %10s %10s\n", "M", "N", "K",
            "ms", "GFLOP/s");
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        gemm_case g = {b->be, shapes[i][0], shapes[i][1], shapes[i][2], NULL, NULL, NULL};
        g.A = dev_random(b->be, (size_t)g.M * g.K, 1);
        g.B = dev_random(b->be, (size_t)g.N * g.K, 2);
        g.C = dev_zero(b->be, (size_t)g.M * g.N * sizeof(float));
        double t = time_median(b, run_gemm, &g);
        double gflops = 2.0 * g.M * g.N * g.K / t * 1e-9;
        fprintf(b->table, "%8d %6d %6d %10.3f %10.1f\n", g.M, g.N, g.K, t * 1e3, gflops);
        if (b->json)
            printf("{\"op\": \"gemm\", \"M\": %d, \"N\": %d, \"K\": %d, \"ms\": %.4f, \"gflops\": "
                   "%.2f}\n",
                   g.M, g.N, g.K, t * 1e3, gflops);
        b->be->release(g.A);
        b->be->release(g.B);
        b->be->release(g.C);
    }
}

/* ---- attention ---- */

typedef struct {
    const bk_backend *be;
    bk_attn_args a;
    float *qkv, *out, *att, *dout, *dqkv, *scratch;
} attn_case;

static void run_attn_fwd(void *ctx) {
    attn_case *c = ctx;
    c->be->attention_forward(c->out, c->att, c->qkv, &c->a);
}

static void run_attn_bwd(void *ctx) {
    attn_case *c = ctx;
    c->be->attention_backward(c->dqkv, NULL, c->scratch, c->dout, c->qkv, c->att, &c->a);
}

static void bench_attention(const bench *b) {
    const int cfg[][4] = {{64, 64, 128, 8}, {8, 256, 256, 8}};
    fprintf(b->table,
            "\nAttention (no mask; causal as marked)\n%4s %5s %5s %4s %6s %9s %9s %9s %9s\n", "B",
            "T", "C", "NH", "causal", "fwd ms", "fwd GF/s", "bwd ms", "bwd GF/s");
    for (size_t i = 0; i < sizeof cfg / sizeof *cfg; i++)
        for (int causal = 0; causal < 2; causal++) {
            attn_case c = {.be = b->be,
                           .a = {.B = cfg[i][0],
                                 .T = cfg[i][1],
                                 .C = cfg[i][2],
                                 .NH = cfg[i][3],
                                 .causal = causal}};
            const int B = c.a.B, T = c.a.T, C = c.a.C, NH = c.a.NH;
            size_t ntt = (size_t)B * NH * T * T;
            c.qkv = dev_random(b->be, (size_t)B * T * 3 * C, 3);
            c.dout = dev_random(b->be, (size_t)B * T * C, 4);
            c.out = dev_zero(b->be, (size_t)B * T * C * sizeof(float));
            c.dqkv = dev_zero(b->be, (size_t)B * T * 3 * C * sizeof(float));
            c.att = dev_zero(b->be, ntt * sizeof(float));
            c.scratch = dev_zero(b->be, ntt * sizeof(float));
            double tf = time_median(b, run_attn_fwd, &c);
            double tb = time_median(b, run_attn_bwd, &c);
            /* Dense count (causal does about half): forward QK^T and PV, backward
             * dP, dV, dQ, dK; 2 * T * T * HS FLOPs each per (b, h). */
            double unit = 2.0 * B * NH * (double)T * T * (C / NH);
            double gf = 2 * unit / tf * 1e-9, gb = 4 * unit / tb * 1e-9;
            fprintf(b->table, "%4d %5d %5d %4d %6d %9.3f %9.1f %9.3f %9.1f\n", B, T, C, NH, causal,
                    tf * 1e3, gf, tb * 1e3, gb);
            if (b->json)
                printf("{\"op\": \"attention\", \"B\": %d, \"T\": %d, \"C\": %d, \"NH\": %d, "
                       "\"causal\": %d, \"fwd_ms\": %.4f, \"fwd_gflops\": %.2f, \"bwd_ms\": %.4f, "
                       "\"bwd_gflops\": %.2f}\n",
                       B, T, C, NH, causal, tf * 1e3, gf, tb * 1e3, gb);
            b->be->release(c.qkv);
            b->be->release(c.dout);
            b->be->release(c.out);
            b->be->release(c.dqkv);
            b->be->release(c.att);
            b->be->release(c.scratch);
        }
}

/* ---- Walsh–Hadamard vs the dense projection ---- */

/* One call of fn, seconds. */
static double time_once(const bench *b, void (*fn)(void *), void *ctx) {
    double t0 = bench_now();
    fn(ctx);
    b->be->sync();
    return bench_now() - t0;
}

static double median_of(double *x, int n) {
    qsort(x, (size_t)n, sizeof(double), bench_cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* The tiled attention (att NULL: no [T, T] map) against the maps, at ViT
 * lengths with DeiT-Tiny's heads (d 192, 3 heads of 64) and a halting-style
 * key mask: b->reps rounds, each timing maps then tiled, forward and
 * backward; medians of the times and of the per-round ratios (maps / tiled,
 * > 1: tiled faster). */
static void bench_attention_tiled(const bench *b) {
    if (b->be->device != BK_CPU) { /* only the CPU backend has the tiled kernels */
        fprintf(b->table, "\nTiled attention: backend %s has none\n", b->be->name);
        return;
    }
    const int cfg[][2] = {{8, 197}, {4, 384}, {4, 577}, {2, 1025}, {1, 2049}};
    const int C = 192, NH = 3;
    fprintf(b->table,
            "\nAttention, maps vs tiled (C %d, NH %d, masked keys; medians of %d rounds; "
            "the backend tiles from T %d, 0 = never)\n%4s %5s %10s %10s %7s %10s %10s %7s\n",
            C, NH, b->reps, b->be->attention_tiled_min_t, "B", "T", "fwd maps", "fwd tiled",
            "ratio", "bwd maps", "bwd tiled", "ratio");
    for (size_t i = 0; i < sizeof cfg / sizeof *cfg; i++) {
        const int B = cfg[i][0], T = cfg[i][1];
        size_t ntt = (size_t)B * NH * T * T;
        float *hmask = malloc((size_t)B * T * sizeof(float));
        if (!hmask) {
            fprintf(stderr, "bench_ops: out of memory\n");
            exit(1);
        }
        for (int t = 0; t < B * T; t++) hmask[t] = t % 7 != 3; /* a seventh of the keys halted */
        float *mask = dev_zero(b->be, (size_t)B * T * sizeof(float));
        b->be->to_device(mask, hmask, (size_t)B * T * sizeof(float));
        free(hmask);
        attn_case m = {.be = b->be, .a = {.B = B, .T = T, .C = C, .NH = NH, .mask = mask}};
        m.qkv = dev_random(b->be, (size_t)B * T * 3 * C, 3);
        m.dout = dev_random(b->be, (size_t)B * T * C, 4);
        m.out = dev_zero(b->be, (size_t)B * T * C * sizeof(float));
        m.dqkv = dev_zero(b->be, (size_t)B * T * 3 * C * sizeof(float));
        m.att = dev_zero(b->be, ntt * sizeof(float));
        m.scratch = dev_zero(b->be, ntt * sizeof(float));
        attn_case t = m;
        t.att = t.scratch = NULL;
        t.a.lse = dev_zero(b->be, (size_t)B * NH * T * sizeof(float));
        double fm[REPS_MAX], ft[REPS_MAX], bm[REPS_MAX], bt[REPS_MAX], rf[REPS_MAX], rb[REPS_MAX];
        run_attn_fwd(&m), run_attn_bwd(&m), run_attn_fwd(&t), run_attn_bwd(&t); /* warm */
        for (int r = 0; r < b->reps; r++) {
            fm[r] = time_once(b, run_attn_fwd, &m);
            bm[r] = time_once(b, run_attn_bwd, &m);
            ft[r] = time_once(b, run_attn_fwd, &t);
            bt[r] = time_once(b, run_attn_bwd, &t);
            rf[r] = fm[r] / ft[r], rb[r] = bm[r] / bt[r];
        }
        double mf = median_of(fm, b->reps), tf = median_of(ft, b->reps);
        double mb = median_of(bm, b->reps), tb = median_of(bt, b->reps);
        double xf = median_of(rf, b->reps), xb = median_of(rb, b->reps);
        fprintf(b->table, "%4d %5d %10.3f %10.3f %7.2f %10.3f %10.3f %7.2f\n", B, T, mf * 1e3,
                tf * 1e3, xf, mb * 1e3, tb * 1e3, xb);
        if (b->json)
            printf("{\"op\": \"attention_tiled\", \"B\": %d, \"T\": %d, \"C\": %d, \"NH\": %d, "
                   "\"fwd_maps_ms\": %.4f, \"fwd_tiled_ms\": %.4f, \"fwd_ratio\": %.3f, "
                   "\"bwd_maps_ms\": %.4f, \"bwd_tiled_ms\": %.4f, \"bwd_ratio\": %.3f}\n",
                   B, T, C, NH, mf * 1e3, tf * 1e3, xf, mb * 1e3, tb * 1e3, xb);
        b->be->release(m.qkv), b->be->release(m.dout), b->be->release(m.out);
        b->be->release(m.dqkv), b->be->release(m.att), b->be->release(m.scratch);
        b->be->release(t.a.lse), b->be->release(mask);
    }
}

typedef struct {
    const bk_backend *be;
    int N, d;
    float *x, *y, *alpha, *beta, *dy, *dx, *dalpha, *dbeta, *scratch, *w;
    float *pre; /* the training forward's kept H x / sqrt(d); NULL: inference, recompute */
} fwht_case;

static void run_fwht_fwd(void *ctx) {
    fwht_case *c = ctx;
    c->be->fwht_forward(c->y, c->pre, c->x, c->alpha, c->beta, c->N, c->d);
}

static void run_fwht_bwd(void *ctx) {
    fwht_case *c = ctx;
    c->be->fwht_backward(c->dx, c->dalpha, c->dbeta, c->scratch, c->dy, c->x, c->pre, c->alpha,
                         c->N, c->d);
}

static void run_dense(void *ctx) {
    fwht_case *c = ctx;
    c->be->linear_forward(c->y, c->x, c->w, c->beta, c->N, c->d, c->d);
}

static void bench_fwht(const bench *b) {
    const int ds[] = {192, 256, 512, 768, 1024, 2048};
    const int N = 4096;
    fprintf(b->table,
            "\nWalsh-Hadamard, rows=%d. fwd: inference (reads x, writes y); train fwd: also keeps "
            "pre = Hx/sqrt(d)\nfor the backward, which then reads dy and pre and writes dx; "
            "bwd no pre: transforms x again.\nstep: train fwd + bwd against fwd + bwd no pre (the "
            "training step before pre was kept).\n%6s %8s %9s %8s %8s %8s %8s %8s %9s %11s %9s\n",
            N, "d", "fwd ms", "train fwd", "bwd ms", "bwd/fwd", "no-pre", "/fwd", "step x",
            "dense ms", "dense GF/s", "dense/fwd");
    for (size_t i = 0; i < sizeof ds / sizeof *ds; i++) {
        fwht_case c = {.be = b->be, .N = N, .d = ds[i]};
        const int d = c.d;
        size_t n = (size_t)N * d;
        c.x = dev_random(b->be, n, 5);
        c.dy = dev_random(b->be, n, 6);
        c.alpha = dev_random(b->be, (size_t)d, 7);
        c.beta = dev_random(b->be, (size_t)d, 8);
        c.w = dev_random(b->be, (size_t)d * d, 9);
        c.y = dev_zero(b->be, n * sizeof(float));
        c.dx = dev_zero(b->be, n * sizeof(float));
        c.scratch = dev_zero(b->be, n * sizeof(float));
        c.dalpha = dev_zero(b->be, (size_t)d * sizeof(float));
        c.dbeta = dev_zero(b->be, (size_t)d * sizeof(float));
        float *pre = dev_zero(b->be, n * sizeof(float));
        double tf = time_median(b, run_fwht_fwd, &c); /* inference: pre NULL */
        double tb0 = time_median(b, run_fwht_bwd, &c);
        c.pre = pre;
        double tft = time_median(b, run_fwht_fwd, &c), tb = time_median(b, run_fwht_bwd, &c);
        c.pre = NULL;
        double tg = time_median(b, run_dense, &c);
        double gfd = 2.0 * N * (double)d * d / tg * 1e-9, ratio = tg / tf;
        double step = (tf + tb0) / (tft + tb);
        fprintf(b->table, "%6d %8.3f %9.3f %8.3f %8.2f %8.3f %8.2f %8.2f %9.3f %11.1f %9.1f\n", d,
                tf * 1e3, tft * 1e3, tb * 1e3, tb / tft, tb0 * 1e3, tb0 / tf, step, tg * 1e3, gfd,
                ratio);
        if (b->json)
            printf("{\"op\": \"fwht\", \"d\": %d, \"rows\": %d, \"fwd_ms\": %.4f, "
                   "\"train_fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"bwd_vs_train_fwd\": %.3f, "
                   "\"bwd_no_pre_ms\": %.4f, \"bwd_no_pre_vs_fwd\": %.3f, \"step_speedup\": %.3f, "
                   "\"gemm_ms\": %.4f, \"gemm_gflops\": %.2f, \"fwht_vs_gemm_ratio\": %.2f}\n",
                   d, N, tf * 1e3, tft * 1e3, tb * 1e3, tb / tft, tb0 * 1e3, tb0 / tf, step,
                   tg * 1e3, gfd, ratio);
        float *bufs[] = {c.x,  c.dy,      c.alpha,  c.beta,  c.w, c.y,
                         c.dx, c.scratch, c.dalpha, c.dbeta, pre};
        for (size_t k = 0; k < sizeof bufs / sizeof *bufs; k++) b->be->release(bufs[k]);
    }
}

/* ---- selected heads (BudgetFormer inference) ---- */

typedef struct {
    const bk_backend *be;
    bk_attn_args a;
    int K;
    float *x, *wqkv, *bqkv, *wo, *bo, *qkv, *c, *att, *y, *scratch;
    int *heads;
} layer_case;

/* The all-heads attention layer: QKV projection, attention, output projection. */
static void run_layer_all(void *ctx) {
    layer_case *l = ctx;
    const int N = l->a.B * l->a.T, C = l->a.C;
    l->be->linear_forward(l->qkv, l->x, l->wqkv, l->bqkv, N, C, 3 * C);
    l->be->attention_forward(l->c, l->att, l->qkv, &l->a);
    l->be->linear_forward(l->y, l->c, l->wo, l->bo, N, C, C);
}

/* The same layer computing only the K selected heads of each sample. */
static void run_layer_selected(void *ctx) {
    layer_case *l = ctx;
    l->be->attention_selected_forward(l->c, l->scratch, l->x, l->wqkv, l->bqkv, l->heads, l->K,
                                      &l->a);
    l->be->linear_selected_forward(l->y, l->c, l->wo, l->bo, l->heads, l->K, l->a.B, l->a.T, l->a.C,
                                   l->a.NH, l->a.C);
}

static void bench_selected(const bench *b) {
    const int cfg[][4] = {{64, 64, 128, 8}, {8, 256, 256, 8}};
    const double fracs[] = {1.0, 0.5, 0.25, 0.125};
    fprintf(b->table,
            "\nSelected-heads attention layer (QKV proj + attention + out proj) vs all heads\n"
            "%4s %5s %5s %4s %4s %6s %10s %10s %7s\n",
            "B", "T", "C", "NH", "K", "K/NH", "all ms", "sel ms", "ratio");
    for (size_t i = 0; i < sizeof cfg / sizeof *cfg; i++) {
        layer_case l = {.be = b->be,
                        .a = {.B = cfg[i][0], .T = cfg[i][1], .C = cfg[i][2], .NH = cfg[i][3]}};
        const int B = l.a.B, T = l.a.T, C = l.a.C, NH = l.a.NH, HS = C / NH;
        l.x = dev_random(b->be, (size_t)B * T * C, 10);
        l.wqkv = dev_random(b->be, (size_t)3 * C * C, 11);
        l.bqkv = dev_random(b->be, (size_t)3 * C, 12);
        l.wo = dev_random(b->be, (size_t)C * C, 13);
        l.bo = dev_random(b->be, (size_t)C, 14);
        l.qkv = dev_zero(b->be, (size_t)B * T * 3 * C * sizeof(float));
        l.c = dev_zero(b->be, (size_t)B * T * C * sizeof(float));
        l.y = dev_zero(b->be, (size_t)B * T * C * sizeof(float));
        l.att = dev_zero(b->be, (size_t)B * NH * T * T * sizeof(float));
        l.scratch = dev_zero(b->be, (size_t)B * NH * T * (3 * HS + T) * sizeof(float));
        l.heads = dev_zero(b->be, (size_t)B * NH * sizeof(int));
        double t_all = time_median(b, run_layer_all, &l);
        int *hh = malloc((size_t)B * NH * sizeof(int));
        if (!hh) exit(1);
        for (size_t f = 0; f < sizeof fracs / sizeof *fracs; f++) {
            l.K = (int)(fracs[f] * NH + 0.5);
            if (l.K < 1) l.K = 1;
            for (int s = 0; s < B; s++) /* distinct heads, different per sample */
                for (int k = 0; k < l.K; k++) hh[s * l.K + k] = (s + 3 * k) % NH;
            if (l.K > 1 && NH % 3 == 0) /* (s + 3k) % NH repeats when 3 divides NH */
                for (int s = 0; s < B; s++)
                    for (int k = 0; k < l.K; k++) hh[s * l.K + k] = (s + k) % NH;
            b->be->to_device(l.heads, hh, (size_t)B * l.K * sizeof(int));
            double t_sel = time_median(b, run_layer_selected, &l);
            double ratio = t_sel / t_all;
            fprintf(b->table, "%4d %5d %5d %4d %4d %6.3f %10.3f %10.3f %7.3f\n", B, T, C, NH, l.K,
                    (double)l.K / NH, t_all * 1e3, t_sel * 1e3, ratio);
            if (b->json)
                printf("{\"op\": \"selected_heads\", \"B\": %d, \"T\": %d, \"C\": %d, \"NH\": %d, "
                       "\"K\": %d, \"all_ms\": %.4f, \"selected_ms\": %.4f, \"ratio\": %.3f}\n",
                       B, T, C, NH, l.K, t_all * 1e3, t_sel * 1e3, ratio);
        }
        free(hh);
        void *bufs[] = {l.x, l.wqkv, l.bqkv, l.wo,      l.bo,   l.qkv,
                        l.c, l.y,    l.att,  l.scratch, l.heads};
        for (size_t k = 0; k < sizeof bufs / sizeof *bufs; k++) b->be->release(bufs[k]);
    }
}

/* The command line (ops_opts). */
typedef struct ops_cli {
    const char *device;
    int json, reps, clock, only_tiled, only_fwht; /* clock: 0 wall, 1 cpu */
} ops_cli;

#define OP(f) OPT_AT(ops_cli, f)
static const opt_spec ops_opts[] = {
    {"device", 0, OPT_STR, 0, 0, OP(device), "auto|cpu|cuda", "the backend (auto)"},
    {"json", 0, OPT_FLAG, 0, 0, OP(json), NULL, "one JSON record per line, the table on stderr"},
    {"reps", 0, OPT_INT, 1, REPS_MAX, OP(reps), "N", "repetitions, the best kept (10)"},
    {"attention-tiled", 0, OPT_FLAG, 0, 0, OP(only_tiled), NULL,
     "only the maps vs tiled attention table"},
    {"fwht", 0, OPT_FLAG, 0, 0, OP(only_fwht), NULL, "only the Walsh-Hadamard table"},
    {"clock", 0, OPT_CHOICE, 0, 0, OP(clock), "wall|cpu",
     "cpu: CPU seconds of all threads instead of wall seconds, CPU backend only (wall)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int main(int argc, char **argv) {
    bk_openmp_passive(argv);
    ops_cli cli = {.device = "auto", .reps = 10};
    int rest = argc;
    int prc = opts_parse("bench_ops", "usage: bench_ops [options]\n  the ops, one table each\n",
                         ops_opts, argc, argv, 1, &cli, &rest);
    if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : 64;
    if (rest < argc) {
        fprintf(stderr, "bench_ops: unexpected argument '%s'\n", argv[rest]);
        return 64;
    }
    const char *device = cli.device;
    bench b = {.reps = cli.reps, .json = cli.json, .cpu_clock = cli.clock, .table = stdout};
    int only_tiled = cli.only_tiled, only_fwht = cli.only_fwht;
    char err[256];
    if (bk_select(device, &b.be, err, sizeof err)) {
        fprintf(stderr, "bench_ops: %s\n", err);
        return 2;
    }
    if (b.cpu_clock && strcmp(b.be->name, "cpu") != 0) {
        fprintf(stderr, "bench_ops: --clock cpu needs the CPU backend (got %s; --device cpu)\n",
                b.be->name);
        return 2;
    }
    if (b.json) b.table = stderr;
    char model[256];
    bench_cpu_model(model, sizeof model);
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = omp_get_max_threads();
    fprintf(b.table,
            "bench_ops: backend %s | nproc %ld | cpu %s | omp threads %d | reps %d (best of) | "
            "clock %s\n",
            b.be->name, nproc, model, threads, b.reps, b.cpu_clock ? "cpu" : "wall");
    if (b.json) {
        printf("{\"op\": \"machine\", \"backend\": ");
        bench_json_string(stdout, b.be->name);
        printf(", \"nproc\": %ld, \"cpu\": ", nproc);
        bench_json_string(stdout, model);
        printf(", \"omp_threads\": %d, \"reps\": %d}\n", threads, b.reps);
    }
    if (only_tiled || only_fwht) {
        if (only_tiled) bench_attention_tiled(&b);
        if (only_fwht) bench_fwht(&b);
        fflush(stdout);
        return 0;
    }
    bench_gemm(&b);
    bench_attention(&b);
    bench_attention_tiled(&b);
    bench_fwht(&b);
    bench_selected(&b);
    fflush(stdout);
    return 0;
}
