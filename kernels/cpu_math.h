/* Small math the CPU kernels share. glibc's expf is a scalar call that the
 * compiler cannot vectorise, and GELU through it was a fifth of a training
 * step; these use GCC's vector extension instead, so they run VLEN lanes at a
 * time on any x86-64 level. */
#ifndef BK_CPU_MATH_H
#define BK_CPU_MATH_H

#include <stdint.h>
#include <string.h>

#ifdef __AVX__
#define VLEN 8
#else
#define VLEN 4 /* SSE: 32-byte vectors would change the ABI of these helpers */
#endif
typedef float vfloat __attribute__((vector_size(VLEN * sizeof(float))));
typedef int32_t vint __attribute__((vector_size(VLEN * sizeof(int32_t))));

static inline vfloat vload(const float *p) {
    vfloat v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void vstore(float *p, vfloat v) { memcpy(p, &v, sizeof v); }

static inline vfloat vsplat(float x) { return (vfloat){0} + x; }

/* Lane-wise select: m ? a : b, for masks from vector comparisons. */
static inline vfloat vselect(vint m, vfloat a, vfloat b) {
    return (vfloat)(((vint)a & m) | ((vint)b & ~m));
}

static inline vfloat vclamp(vfloat x, float lo, float hi) {
    x = vselect(x < lo, vsplat(lo), x);
    return vselect(x > hi, vsplat(hi), x);
}

/* e^x for x in [-87, 87] (clamped): x = n ln2 + r, |r| <= ln2/2, e^r by a
 * degree-6 Taylor polynomial (relative error ~2e-7), 2^n put together in the
 * exponent bits. */
static inline vfloat bk_vexp(vfloat x) {
    x = vclamp(x, -87.0f, 87.0f);
    vfloat t = x * 1.44269504f;
    vfloat half = vselect(t < 0.0f, vsplat(-0.5f), vsplat(0.5f));
    vint ni = __builtin_convertvector(t + half, vint); /* round to nearest */
    vfloat n = __builtin_convertvector(ni, vfloat);
    vfloat r = x - n * 0.693145752f; /* ln2 split in two for accuracy */
    r = r - n * 1.42860677e-6f;
    vfloat p = r * (1.0f / 720.0f) + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return p * (vfloat)((ni + 127) << 23);
}

/* tanh(u) = 1 - 2/(e^{2u} + 1) with u clamped to [-10, 10], where tanh
 * rounds to exactly +-1 in float (so saturated GELU gradients are exact).
 * Absolute error ~2e-7; never NaN for finite u. */
static inline vfloat bk_vtanh(vfloat u) {
    return 1.0f - 2.0f / (bk_vexp(2.0f * vclamp(u, -10.0f, 10.0f)) + 1.0f);
}

/* One-lane versions for loop tails, through the same arithmetic. */
static inline float bk_tanh_fast(float u) {
    vfloat v = vsplat(u);
    return bk_vtanh(v)[0];
}

#endif
