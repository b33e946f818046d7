/* Plain double-precision references the optimised backends are tested
 * against; slow, obvious, no SIMD, no BLAS. This file: finite-difference
 * gradient checking, shared by the op tests.
 *
 * Each check builds the scalar L = sum_i out[i] * R[i] for a fixed random R,
 * so dL/dout = R is what the backward receives. The numerical gradient of L
 * with respect to one input element is the central difference
 * (L(x+h) - L(x-h)) / 2h with h = 1e-2 scaled by max(1, |x|), accumulated in
 * double. An element passes when
 *     |analytic - numeric| <= GC_ATOL + GC_RTOL * max(|analytic|, |numeric|)
 * with GC_ATOL = 2e-3 and GC_RTOL = 2e-2 (float32 ops, central differences:
 * truncation O(h^2) and rounding O(eps_f32 / h) both sit well under these). */
#ifndef BF_GRADCHECK_H
#define BF_GRADCHECK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/bk_rng.h"

#define GC_ATOL 2e-3
#define GC_RTOL 2e-2
#define GC_H 1e-2

/* Fills x[n] with uniform values in [lo, hi), reproducible from seed. */
static inline void gc_fill(float *x, size_t n, float lo, float hi, uint64_t seed) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * bk_rng_uniform_at(seed, 7, i);
}

static inline double gc_dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* Largest violation ratio |a-n| / (atol + rtol*max(|a|,|n|)); <= 1 passes.
 * Prints the worst element when it fails, so a failing test says where. */
static inline double gc_compare(const char *what, const float *analytic, const double *numeric,
                                size_t n) {
    double worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double a = analytic[i], d = numeric[i];
        double r = fabs(a - d) / (GC_ATOL + GC_RTOL * fmax(fabs(a), fabs(d)));
        if (r > worst) {
            worst = r;
            wi = i;
        }
    }
    if (worst > 1)
        fprintf(stderr, "gradcheck %s: element %zu analytic %.6g numeric %.6g\n", what, wi,
                (double)analytic[wi], numeric[wi]);
    return worst;
}

/* Numerical gradient of L = <R, f(x)> with respect to x[0..n), where f is a
 * closure: eval(ctx) recomputes the forward into out (length m) from the
 * current contents of x. Writes num[n]. */
static inline void gc_numeric(float *x, size_t n, const float *R, float *out, size_t m,
                              void (*eval)(void *ctx), void *ctx, double *num) {
    for (size_t i = 0; i < n; i++) {
        float x0 = x[i];
        float h = (float)(GC_H * fmax(1.0, fabs(x0)));
        x[i] = x0 + h;
        eval(ctx);
        double lp = gc_dot(R, out, m);
        x[i] = x0 - h;
        eval(ctx);
        double lm = gc_dot(R, out, m);
        x[i] = x0;
        num[i] = (lp - lm) / (2.0 * h);
    }
    eval(ctx);
}

#endif
