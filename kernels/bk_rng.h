/* Philox4x32-10 counter-based RNG (Salmon et al., SC'11), shared by the CPU
 * and CUDA backends so both produce the same stream. A value depends only on
 * (seed, stream, index): reproducible per rank and step with no state to save. */
#ifndef BK_RNG_H
#define BK_RNG_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define BK_HOSTDEV __host__ __device__ __forceinline__
#else
#define BK_HOSTDEV static inline
#endif

BK_HOSTDEV void bk_philox4x32(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4]) {
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Four 32-bit words for block `block` of (seed, stream). */
BK_HOSTDEV void bk_philox_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream,
                       (uint32_t)(stream >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    bk_philox4x32(ctr, key, out);
}

/* Maps 32 random bits to a float in (0, 1): never exactly 0 or 1, so log()
 * of it is finite (Gumbel noise needs that). Uses the top 23 bits k and
 * returns (k + 0.5) / 2^23: k + 0.5 < 2^23 is exact in a float, so every
 * value is the centre of its bin and the largest is 1 - 2^-24. (With 24 bits,
 * k + 0.5 >= 2^23 rounds to an integer and 0xffffffff mapped to exactly 1.) */
BK_HOSTDEV float bk_u32_to_unit(uint32_t x) {
    return ((float)(x >> 9) + 0.5f) * (1.0f / 8388608.0f);
}

/* Uniform (0,1) value number `index` of (seed, stream). */
BK_HOSTDEV float bk_rng_uniform_at(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t w[4];
    bk_philox_block(seed, stream, index >> 2, w);
    return bk_u32_to_unit(w[index & 3]);
}

/* One standard normal from two random words (Box–Muller, cosine branch).
 * Backends that generate whole blocks call this so they match _at exactly. */
BK_HOSTDEV float bk_box_muller(uint32_t a, uint32_t b) {
    float u1 = bk_u32_to_unit(a), u2 = bk_u32_to_unit(b);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}

/* The sub-stream normals draw from, so they are independent of the uniforms
 * of the same (seed, stream). */
#define BK_RNG_NORMAL_STREAM(stream) ((stream) ^ 0x8000000000000000ull)

/* Standard normal value number `index`: Box–Muller on words 2h, 2h+1
 * (h = index & 1) of block index/2 of the normal sub-stream. */
BK_HOSTDEV float bk_rng_normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t w[4];
    bk_philox_block(seed, BK_RNG_NORMAL_STREAM(stream), index >> 1, w);
    int half = (int)(index & 1);
    return bk_box_muller(w[2 * half], w[2 * half + 1]);
}

/* log(x) for a positive finite x (any positive float, as a double), built
 * only from operations IEEE 754 rounds exactly once (+, -, *, /, fma), with
 * no a*b+c left for a compiler to contract: the CPU and the CUDA backends
 * return the same bits, which libm logf and CUDA's logf do not (they differ
 * by an ulp on some inputs). x = 2^e m, m in [sqrt(1/2), sqrt 2],
 * log m = 2 atanh(f) with f = (m-1)/(m+1), |f| <= 0.1716, summed to the f^25
 * term (truncation < 1e-19); ln 2 split in a high part with zero low bits (e
 * ln2_hi exact) and the rest. Relative error below 3e-16 (measured); rounded
 * to float it is the correctly rounded logf on every input the Gumbel stream
 * draws (checked exhaustively against long double: tests/test_devstep.c). */
BK_HOSTDEV double bk_log_exact(double x) {
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int e = (int)((bits >> 52) & 0x7ff) - 1023;
    bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
    double m;
    memcpy(&m, &bits, sizeof m);
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e++;
    }
    double f = (m - 1.0) / (m + 1.0), f2 = f * f;
    double q = 1.0 / 25;
    q = fma(q, f2, 1.0 / 23);
    q = fma(q, f2, 1.0 / 21);
    q = fma(q, f2, 1.0 / 19);
    q = fma(q, f2, 1.0 / 17);
    q = fma(q, f2, 1.0 / 15);
    q = fma(q, f2, 1.0 / 13);
    q = fma(q, f2, 1.0 / 11);
    q = fma(q, f2, 1.0 / 9);
    q = fma(q, f2, 1.0 / 7);
    q = fma(q, f2, 1.0 / 5);
    q = fma(q, f2, 1.0 / 3);
    double lm = fma((2.0 * f) * f2, q, 2.0 * f);
    double de = (double)e;
    return fma(de, 6.93147180369123816490e-01, fma(de, 1.90821492927058770002e-10, lm));
}

/* Gumbel(0,1) value number `index`: -log(-log(u)), each log rounded to
 * float (bk_log_exact, so both backends draw the same bits). */
BK_HOSTDEV float bk_rng_gumbel_at(uint64_t seed, uint64_t stream, uint64_t index) {
    float t = (float)-bk_log_exact((double)bk_rng_uniform_at(seed, stream, index));
    return (float)-bk_log_exact((double)t);
}

#endif
