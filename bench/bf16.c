/* bench_bf16: the bf16 products (train.precision: bf16) against the fp32
 * ones at DeiT-Tiny's linear-layer shapes (B32 T197 = 6304 rows, d 192).
 *
 *   bench_bf16 [--device auto|cpu|cuda] [--json] [--reps N] [--clock wall|cpu]
 *
 * Per shape C[M,N] = A[M,K] B[N,K]^T (a linear layer's forward): bf's fp32
 * path (linear_forward), OpenBLAS's cblas_sgemm called directly (CPU), and
 * gemm_bf16, on whichever path the backend has (bf16_available says which:
 * oneDNN or cuBLASLt bf16, or the operands rounded and the fp32 product).
 * With oneDNN compiled in it also says whether oneDNN makes a bf16 x bf16
 * -> f32 matmul primitive for the shape on this CPU (its status when not:
 * "unimplemented" below AVX-512). The variants run interleaved, rep by rep,
 * and each keeps its fastest rep. The table goes to stdout; with --json it
 * goes to stderr and stdout gets one JSON record per line. */
#include "bench/bench_util.h"
#include "common/opts.h"
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/bk.h"
#include "kernels/bk_rng.h"

#ifdef BK_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#define REPS_MAX 1000

/* The command line (bf16_opts). */
typedef struct bf16_cli {
    const char *device;
    int json, reps, clock; /* clock: 0 wall, 1 cpu */
} bf16_cli;

#define OP(f) OPT_AT(bf16_cli, f)
static const opt_spec bf16_opts[] = {
    {"device", 0, OPT_STR, 0, 0, OP(device), "auto|cpu|cuda", "the backend (auto)"},
    {"json", 0, OPT_FLAG, 0, 0, OP(json), NULL, "one JSON record per line, the table on stderr"},
    {"reps", 0, OPT_INT, 1, REPS_MAX, OP(reps), "N", "repetitions, the best kept (5)"},
    {"clock", 0, OPT_CHOICE, 0, 0, OP(clock), "wall|cpu",
     "cpu: CPU seconds of all threads instead of wall seconds, CPU backend only (wall)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

/* What oneDNN says to a bf16 x bf16 -> f32 matmul primitive of this shape
 * (B [N,K] read transposed, as a linear layer's weight): "created (IMPL)"
 * or its status. */
static void dnnl_probe(int M, int N, int K, char *out, size_t len) {
#ifdef BK_HAVE_DNNL
    static dnnl_engine_t eng;
    if (!eng && dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) {
        snprintf(out, len, "no engine");
        return;
    }
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t da = {M, K}, db = {K, N}, dc = {M, N};
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s = dnnl_memory_desc_init_by_tag(&a, 2, da, dnnl_bf16, dnnl_ab);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&b, 2, db, dnnl_bf16, dnnl_ba);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_tag(&c, 2, dc, dnnl_f32, dnnl_ab);
    if (s == dnnl_success) s = dnnl_matmul_desc_init(&md, &a, &b, NULL, &c);
    if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL);
    const char *impl = "?";
    if (s == dnnl_success) {
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
        snprintf(out, len, "created (%s)", impl);
        dnnl_primitive_desc_destroy(pd);
    } else {
        snprintf(out, len, "%s", s == dnnl_unimplemented ? "unimplemented" : "failed");
    }
#else
    (void)M, (void)N, (void)K;
    snprintf(out, len, "not built");
#endif
}

/* Device buffer of n floats, uniform in [-1, 1); exits on failure. */
static float *dev_random(const bk_backend *be, size_t n, uint64_t seed, float **host_out) {
    float *host = malloc(n * sizeof(float));
    float *dev = be->alloc(n * sizeof(float));
    if (!host || !dev) {
        fprintf(stderr, "bench_bf16: out of memory allocating %zu floats\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) host[i] = 2.0f * bk_rng_uniform_at(seed, 1, i) - 1.0f;
    be->to_device(dev, host, n * sizeof(float));
    *host_out = host;
    return dev;
}

/* Seconds of one call of variant v (0 bf fp32, 1 cblas_sgemm, 2 gemm_bf16),
 * on the wall clock or (cpu_clock) the process's CPU clock. */
static double time_variant(const bk_backend *be, int v, int M, int N, int K, const float *A,
                           const float *B, float *C, const float *hA, const float *hB, float *hC,
                           int cpu_clock) {
    double t0 = cpu_clock ? bench_cpu_now() : bench_now();
    if (v == 0)
        be->linear_forward(C, A, B, NULL, M, K, N);
    else if (v == 1)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, hA, K, hB, K, 0.0f, hC,
                    N);
    else
        be->gemm_bf16(0, 1, M, N, K, 1.0f, A, K, 0, B, K, 0, 0.0f, C, N, 0, 1);
    be->sync();
    return (cpu_clock ? bench_cpu_now() : bench_now()) - t0;
}

int main(int argc, char **argv) {
    bk_openmp_passive(argv);
    bf16_cli cli = {.device = "auto", .reps = 5};
    int rest = argc;
    int prc = opts_parse("bench_bf16",
                         "usage: bench_bf16 [options]\n  bf16 products against fp32 at DeiT-Tiny's "
                         "shapes\n",
                         bf16_opts, argc, argv, 1, &cli, &rest);
    if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : 64;
    if (rest < argc) {
        fprintf(stderr, "bench_bf16: unexpected argument '%s'\n", argv[rest]);
        return 64;
    }
    const bk_backend *be;
    char err[256], why[384] = "";
    if (bk_select(cli.device, &be, err, sizeof err)) {
        fprintf(stderr, "bench_bf16: %s\n", err);
        return 2;
    }
    FILE *table = cli.json ? stderr : stdout;
    int native = be->bf16_available(why, sizeof why);
    int cpu = strcmp(be->name, "cpu") == 0;
    if (cli.clock && !cpu) {
        fprintf(stderr, "bench_bf16: --clock cpu needs the CPU backend (got %s; --device cpu)\n",
                be->name);
        return 2;
    }
    char model[256];
    bench_cpu_model(model, sizeof model);
    fprintf(table,
            "bench_bf16: backend %s | cpu %s | omp threads %d | reps %d (best of) | clock %s\n",
            be->name, model, omp_get_max_threads(), cli.reps, cli.clock ? "cpu" : "wall");
    fprintf(table, "gemm_bf16: %s%s\n",
            native ? "native bf16" : "operands rounded, fp32 product: ", native ? "" : why);
    if (cli.json) {
        printf("{\"op\": \"machine\", \"backend\": ");
        bench_json_string(stdout, be->name);
        printf(", \"cpu\": ");
        bench_json_string(stdout, model);
        printf(", \"omp_threads\": %d, \"bf16_native\": %d, \"why\": ", omp_get_max_threads(),
               native);
        bench_json_string(stdout, why);
        printf("}\n");
    }
    /* M, N, K: the QKV projection, MLP fc2 (d_ff -> d), MLP fc1 (d -> d_ff) */
    const int shapes[][3] = {{6304, 576, 192}, {6304, 192, 768}, {6304, 768, 192}};
    fprintf(table, "\n%6s %5s %5s %10s %10s %10s %8s  %s\n", "M", "N", "K", "fp32", "sgemm", "bf16",
            "bf16/fp32", "oneDNN bf16 primitive");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *hA, *hB, *hC = malloc((size_t)M * N * sizeof(float));
        float *A = dev_random(be, (size_t)M * K, 1, &hA),
              *B = dev_random(be, (size_t)N * K, 2, &hB);
        float *C = be->alloc((size_t)M * N * sizeof(float));
        if (!hC || !C) {
            fprintf(stderr, "bench_bf16: out of memory\n");
            return 1;
        }
        double best[3] = {1e30, 1e30, 1e30};
        for (int r = 0; r <= cli.reps; r++) /* rep 0 warms up */
            for (int v = 0; v < 3; v++) {
                if (v == 1 && !cpu) continue;
                double t = time_variant(be, v, M, N, K, A, B, C, hA, hB, hC, cli.clock);
                if (r > 0 && t < best[v]) best[v] = t;
            }
        double fl = 2.0 * M * N * K * 1e-9;
        char probe[128];
        dnnl_probe(M, N, K, probe, sizeof probe);
        fprintf(table, "%6d %5d %5d %10.1f %10.1f %10.1f %8.2f  %s\n", M, N, K, fl / best[0],
                cpu ? fl / best[1] : 0.0, fl / best[2], best[0] / best[2], probe);
        if (cli.json) {
            printf(
                "{\"op\": \"gemm_bf16\", \"M\": %d, \"N\": %d, \"K\": %d, \"fp32_gflops\": %.2f, "
                "\"sgemm_gflops\": %.2f, \"bf16_gflops\": %.2f, \"dnnl_primitive\": ",
                M, N, K, fl / best[0], cpu ? fl / best[1] : 0.0, fl / best[2]);
            bench_json_string(stdout, probe);
            printf("}\n");
        }
        be->release(A);
        be->release(B);
        be->release(C);
        free(hA);
        free(hB);
        free(hC);
    }
    fprintf(table, "(GFLOP/s; bf16/fp32 > 1: the bf16 product is faster)\n");
    fflush(stdout);
    return 0;
}
