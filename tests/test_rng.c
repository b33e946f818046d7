/* Philox4x32-10 (kernels/bk_rng.h) and the CPU backend's rng_uniform /
 * rng_normal: Random123 known-answer vectors, the (seed, stream, index)
 * packing, exact agreement with the per-index functions the CUDA backend
 * uses, offsets, streams, and the moments of the distributions. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk.h"
#include "kernels/bk_rng.h"

/* Known-answer vectors of philox4x32-10 from Random123's kat_vectors. */
Test(rng, philox4x32_10_known_answers) {
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                       {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                       {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    static const uint32_t key[3][2] = {
        {0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int k = 0; k < 3; k++) {
        uint32_t out[4];
        bk_philox4x32(ctr[k], key[k], out);
        for (int j = 0; j < 4; j++)
            cr_assert(out[j] == want[k][j], "vector %d word %d: 0x%08x, want 0x%08x", k, j, out[j],
                      want[k][j]);
    }
}

/* block -> counter words 0,1 (low first), stream -> words 2,3, seed -> key. */
Test(rng, block_packing) {
    uint64_t seed = ((uint64_t)0x299f31d0u << 32) | 0xa4093822u;
    uint64_t stream = ((uint64_t)0x03707344u << 32) | 0x13198a2eu;
    uint64_t block = ((uint64_t)0x85a308d3u << 32) | 0x243f6a88u;
    uint32_t out[4];
    bk_philox_block(seed, stream, block, out);
    cr_assert(out[0] == 0xd16cfe09u && out[1] == 0x94fdccebu && out[2] == 0x5001e420u &&
                  out[3] == 0x24126ea1u,
              "bk_philox_block packs (seed, stream, block) differently: %08x %08x %08x %08x",
              out[0], out[1], out[2], out[3]);
    bk_philox_block(0, 0, 0, out);
    cr_assert(out[0] == 0x6627e8d5u, "block 0 of seed 0 stream 0");
    /* uniform number 4*b + j is word j of block b */
    cr_assert(bk_rng_uniform_at(0, 0, 2) == bk_u32_to_unit(0xbc57ac4cu), "uniform index 2");
}

Test(rng, unit_interval_is_open) {
    float lo = bk_u32_to_unit(0), hi = bk_u32_to_unit(0xffffffffu);
    cr_assert(lo > 0.0f && lo == ldexpf(1.0f, -24), "smallest %.9g", (double)lo);
    cr_assert(hi < 1.0f && hi == 1.0f - ldexpf(1.0f, -24), "largest %.9g", (double)hi);
    cr_assert(isfinite(-logf(-logf(hi))) && isfinite(-logf(-logf(lo))), "Gumbel of the extremes");
    cr_assert(bk_u32_to_unit(0x80000000u) == 0.5f + ldexpf(1.0f, -24), "middle");
}

/* The backend's block loops give exactly the per-index values (which the
 * CUDA kernels compute), at unaligned offsets and through the threaded path. */
Test(rng, backend_matches_per_index_functions) {
    size_t sizes[3] = {1, 37, 70001};
    uint64_t offsets[3] = {0, 3, 1ull << 40};
    for (int s = 0; s < 3; s++)
        for (int o = 0; o < 3; o++) {
            size_t n = sizes[s];
            float *u = malloc(n * sizeof(float)), *z = malloc(n * sizeof(float));
            cr_assert(u && z);
            bk_cpu()->rng_uniform(u, n, 1234, 5, offsets[o] + (uint64_t)s);
            bk_cpu()->rng_normal(z, n, 1234, 5, offsets[o] + (uint64_t)s);
            for (size_t i = 0; i < n; i++) {
                uint64_t idx = offsets[o] + (uint64_t)s + i;
                cr_assert(u[i] == bk_rng_uniform_at(1234, 5, idx), "uniform n=%zu off=%llu i=%zu",
                          n, (unsigned long long)(offsets[o] + s), i);
                float zz = bk_rng_normal_at(1234, 5, idx);
                cr_assert(memcmp(&z[i], &zz, sizeof zz) == 0, "normal n=%zu i=%zu", n, i);
            }
            free(u);
            free(z);
        }
}

Test(rng, reproducible_and_offsets_shift) {
    const bk_backend *cpu = bk_cpu();
    float a[15], b[15], c[10];
    cpu->rng_uniform(a, 15, 42, 7, 0);
    cpu->rng_uniform(b, 15, 42, 7, 0);
    cr_assert(memcmp(a, b, sizeof a) == 0, "same seed/stream/offset gave different numbers");
    cpu->rng_uniform(c, 10, 42, 7, 5);
    cr_assert(memcmp(c, a + 5, 5 * sizeof(float)) == 0,
              "uniform(n=10, off=5)[0..5) != uniform(15)[5..10)");
    cr_assert(memcmp(c, a + 5, 10 * sizeof(float)) == 0,
              "uniform(n=10, off=5) != uniform(15)[5..15)");
    cpu->rng_normal(a, 15, 42, 7, 0);
    cpu->rng_normal(c, 10, 42, 7, 5);
    cr_assert(memcmp(c, a + 5, 10 * sizeof(float)) == 0, "normal offsets do not shift");
    /* the values are not all alike (a constant generator would pass the above) */
    int distinct = 0;
    for (int i = 1; i < 15; i++) distinct += a[i] != a[0];
    cr_assert(distinct == 14, "normals repeat");
}

Test(rng, streams_and_seeds_differ) {
    const bk_backend *cpu = bk_cpu();
    enum { N = 256 };
    float base[N], other[N];
    cpu->rng_uniform(base, N, 42, 0, 0);
    uint64_t streams[3] = {1, 1ull << 32, 1ull << 63};
    for (int k = 0; k < 3; k++) {
        cpu->rng_uniform(other, N, 42, streams[k], 0);
        int same = 0;
        for (int i = 0; i < N; i++) same += other[i] == base[i];
        cr_assert(same < 4, "stream %llu shares %d of %d values with stream 0",
                  (unsigned long long)streams[k], same, N);
    }
    uint64_t seeds[2] = {43, 42ull << 32};
    for (int k = 0; k < 2; k++) {
        cpu->rng_uniform(other, N, seeds[k], 0, 0);
        int same = 0;
        for (int i = 0; i < N; i++) same += other[i] == base[i];
        cr_assert(same < 4, "seed %llu shares %d values with seed 42", (unsigned long long)seeds[k],
                  same);
    }
}

static void moments(const float *x, size_t n, double *mean, double *var) {
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (size_t i = 0; i < n; i++) s2 += (x[i] - *mean) * (x[i] - *mean);
    *var = s2 / (n - 1);
}

/* n = 1e5: the standard error of the mean is 1/sqrt(n) = 0.0032 for normals
 * and 0.29/sqrt(n) = 0.0009 for uniforms; of the variance sqrt(2/n) = 0.0045
 * and 0.0003. The bounds are about 6 standard errors. */
Test(rng, moments_of_1e5_draws) {
    size_t n = 100000;
    float *x = malloc(n * sizeof(float));
    cr_assert(x);
    double mean, var;
    bk_cpu()->rng_normal(x, n, 2024, 3, 11);
    moments(x, n, &mean, &var);
    cr_assert(fabs(mean) < 0.02 && fabs(var - 1.0) < 0.03, "normal mean %g var %g", mean, var);
    size_t tail = 0;
    for (size_t i = 0; i < n; i++) tail += fabsf(x[i]) > 1.959964f;
    cr_assert(fabs((double)tail / n - 0.05) < 0.005, "P(|z| > 1.96) = %g", (double)tail / n);
    bk_cpu()->rng_uniform(x, n, 2024, 3, 11);
    moments(x, n, &mean, &var);
    cr_assert(fabs(mean - 0.5) < 0.006 && fabs(var - 1.0 / 12) < 0.002, "uniform mean %g var %g",
              mean, var);
    for (size_t i = 0; i < n; i++)
        cr_assert(x[i] > 0.0f && x[i] < 1.0f, "uniform %zu = %g", i, (double)x[i]);
    free(x);
}
