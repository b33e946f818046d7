/* bench_hash — what checksumming a checkpoint costs: bf's FNV-1a 64
 * (common/hash.h, the hash every checkpoint stores), two independent
 * FNV-1a streams interleaved in one loop (the same values, as a save could
 * hash the model and optimizer files), and zlib's crc32 (linked already),
 * over one buffer of --mb megabytes.
 *
 *   bench_hash [--mb N] [--reps N]
 *
 * Defaults: 500 MB, 3 repetitions. Each row gives the median wall time and
 * the median CPU time of the process (on a shared machine the CPU time is
 * the steadier figure), as GB/s of input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "bench/bench_util.h"
#include "common/hash.h"
#include "common/opts.h"

/* Two FNV-1a 64 streams over the halves of p, in one loop: each stream's
 * multiplies wait on each other, the two streams' do not. */
static void fnv1a64_two(uint64_t h[2], const unsigned char *a, const unsigned char *b, size_t n) {
    uint64_t x = h[0], y = h[1];
    for (size_t i = 0; i < n; i++) {
        x = (x ^ a[i]) * 1099511628211ull;
        y = (y ^ b[i]) * 1099511628211ull;
    }
    h[0] = x, h[1] = y;
}

/* The command line (hash_opts). */
typedef struct hash_cli {
    int mb, reps;
} hash_cli;

static const opt_spec hash_opts[] = {
    {"mb", 0, OPT_INT, 1, 1 << 16, OPT_AT(hash_cli, mb), "N", "megabytes hashed (500)"},
    {"reps", 0, OPT_INT, 1, 100, OPT_AT(hash_cli, reps), "N", "repetitions, the median kept (3)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int main(int argc, char **argv) {
    hash_cli cli = {.mb = 500, .reps = 3};
    int rest = argc;
    int prc = opts_parse("bench_hash",
                         "usage: bench_hash [options]\n"
                         "  FNV-1a 64, two FNV-1a streams and zlib's crc32 over one buffer\n",
                         hash_opts, argc, argv, 1, &cli, &rest);
    if (prc != OPTS_OK) return prc == OPTS_HELP ? 0 : 64;
    if (rest < argc) {
        fprintf(stderr, "bench_hash: unexpected argument '%s'\n", argv[rest]);
        return 64;
    }
    size_t n = (size_t)cli.mb * 1000000;
    int reps = cli.reps;
    unsigned char *p = malloc(n);
    if (!p) {
        fprintf(stderr, "bench_hash: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 2654435761u) >> 13);
    enum { FNV, FNV_TWO, CRC, N_ROWS };
    const char *what[N_ROWS] = {"FNV-1a 64 (fnv1a64)", "FNV-1a 64, two streams", "zlib crc32"};
    double *wall = malloc((size_t)reps * N_ROWS * sizeof *wall);
    double *cpu = malloc((size_t)reps * N_ROWS * sizeof *cpu);
    uint64_t check[N_ROWS] = {0};
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < N_ROWS; k++) {
            double w0 = bench_now(), c0 = bench_cpu_now();
            if (k == FNV) {
                check[k] = fnv1a64(FNV1A64_SEED, p, n);
            } else if (k == FNV_TWO) {
                uint64_t h[2] = {FNV1A64_SEED, FNV1A64_SEED};
                fnv1a64_two(h, p, p + n / 2, n / 2);
                check[k] = h[0] ^ h[1];
            } else {
                uLong c = crc32(0L, Z_NULL, 0);
                for (size_t o = 0; o < n; o += 1u << 30)
                    c = crc32(c, p + o, (uInt)(n - o < (1u << 30) ? n - o : 1u << 30));
                check[k] = c;
            }
            wall[k * reps + r] = bench_now() - w0;
            cpu[k * reps + r] = bench_cpu_now() - c0;
        }
    char model[256];
    bench_cpu_model(model, sizeof model);
    printf("bench_hash: %s; %.0f MB, median of %d\n", model, (double)n / 1e6, reps);
    printf("%-26s %9s %9s %9s %9s\n", "hash", "wall s", "GB/s", "cpu s", "GB/s");
    for (int k = 0; k < N_ROWS; k++) {
        double w = bench_median(wall + k * reps, reps), c = bench_median(cpu + k * reps, reps);
        printf("%-26s %9.3f %9.2f %9.3f %9.2f   (%016llx)\n", what[k], w, (double)n / w / 1e9, c,
               (double)n / c / 1e9, (unsigned long long)check[k]);
    }
    free(wall), free(cpu), free(p);
    return 0;
}
