/* Plain double-precision references the optimised backends are tested
 * against; slow, obvious, no SIMD, no BLAS. This file: the scalar activations
 * of the basic ops (kernels/cpu_elementwise.c) and the mixers, straight from
 * their formulas, and bf16 rounding (kernels/bk_bf16.h) from its definition. */
#ifndef BF_REF_OPS_H
#define BF_REF_OPS_H

#include <math.h>

static inline double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* log(1 + e^x), taken as x past 30 where the two agree in double. */
static inline double ref_softplus(double x) { return x > 30 ? x : log1p(exp(x)); }

/* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static inline double ref_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* d gelu / dx of the tanh form above. */
static inline double ref_gelu_grad(double x) {
    double s = sqrt(2.0 / M_PI), u = s * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

/* The bf16 nearest f (8 significant bits, bf16's exponent range, ties to
 * even) by arithmetic rather than bk_bf16.h's bit trick: f's quantum at 8
 * significant bits, never below bf16's subnormal step 2^-133, rounded with
 * nearbyint (ties to even in the default rounding mode) in double; past
 * bf16's largest finite value, infinity. NaN, infinities and zeros pass. */
static inline float ref_bf16_round(float f) {
    if (isnan(f) || isinf(f) || f == 0.0f) return f;
    int e;
    frexp((double)f, &e); /* |f| = m 2^e, m in [0.5, 1) */
    int q = e - 8 < -133 ? -133 : e - 8;
    double r = ldexp(nearbyint(ldexp((double)f, -q)), q);
    if (fabs(r) >= ldexp(1.0, 128)) return copysignf(INFINITY, f);
    return (float)r;
}

#endif
