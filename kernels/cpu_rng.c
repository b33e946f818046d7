/* CPU backend: Philox random numbers. Element i of a call is value number
 * offset + i of (seed, stream), computed with the inline functions of
 * kernels/bk_rng.h that the CUDA backend uses too, so both give the same
 * numbers. One Philox block yields 4 uniforms or 2 normals; the loops run
 * over blocks and keep the words that fall inside [offset, offset + n). */
#include "kernels/bk_rng.h"
#include "kernels/cpu_ops.h"

#define RNG_PAR_MIN ((uint64_t)1 << 14)

void bk_cpu_rng_uniform(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t offset) {
    if (n == 0) return;
    uint64_t first = offset >> 2, last = (offset + n - 1) >> 2;
    long long nblocks = (long long)(last - first + 1);
#pragma omp parallel for schedule(static) if (n >= RNG_PAR_MIN)
    for (long long k = 0; k < nblocks; k++) {
        uint64_t blk = first + (uint64_t)k;
        uint32_t w[4];
        bk_philox_block(seed, stream, blk, w);
        for (int j = 0; j < 4; j++) {
            uint64_t idx = blk * 4 + (uint64_t)j;
            if (idx >= offset && idx - offset < n) out[idx - offset] = bk_u32_to_unit(w[j]);
        }
    }
}

void bk_cpu_rng_normal(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t offset) {
    if (n == 0) return;
    uint64_t first = offset >> 1, last = (offset + n - 1) >> 1;
    long long nblocks = (long long)(last - first + 1);
#pragma omp parallel for schedule(static) if (n >= RNG_PAR_MIN)
    for (long long k = 0; k < nblocks; k++) {
        uint64_t blk = first + (uint64_t)k;
        uint32_t w[4];
        bk_philox_block(seed, BK_RNG_NORMAL_STREAM(stream), blk, w);
        for (int j = 0; j < 2; j++) {
            uint64_t idx = blk * 2 + (uint64_t)j;
            if (idx >= offset && idx - offset < n)
                out[idx - offset] = bk_box_muller(w[2 * j], w[2 * j + 1]);
        }
    }
}
