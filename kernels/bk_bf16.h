/* bk_bf16 — bfloat16 as bf stores it: the upper 16 bits of an IEEE fp32
 * (1 sign, 8 exponent, 7 stored mantissa bits), and the two casts every
 * bf16 path shares (the CPU products, their tests, export --dtype bf16).
 * Plain C, header only, no SIMD: the loops that use it vectorise them. */
#ifndef BK_BF16_H
#define BK_BF16_H

#include <stdint.h>
#include <string.h>

/* The bf16 nearest to f, ties to even (IEEE's default rounding, what
 * oneDNN, cuBLAS's __float2bfloat16_rn and PyTorch give). A NaN stays a
 * NaN (quieted: its top mantissa bit set, so rounding cannot carry it into
 * an infinity); a finite value past bf16's largest rounds to infinity. */
static inline uint16_t bk_bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The fp32 of a bf16 (exact: every bf16 is an fp32). */
static inline float bk_f32_from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f rounded to bf16 and back: the fp32 a bf16 product reads for f. */
static inline float bk_bf16_round(float f) { return bk_f32_from_bf16(bk_bf16_from_f32(f)); }

#endif
