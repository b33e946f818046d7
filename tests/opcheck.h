/* opcheck — what the CPU op tests (test_ops_basic, test_mixer_ops,
 * test_ssd_ops) share: a table of test buffers that the suite's fini frees
 * (so the sanitizer build's leak checker stays quiet), the CPU backend, the
 * elementwise comparisons and the finite-difference check of a backward.
 * Header-only (static): every tests/test_*.c is a program of its own. A test
 * may define OPCHECK_MAX_BUFS before including it to hold more buffers.
 * Failures are Criterion assertions, so these are for test code only. */
#ifndef BF_TESTS_OPCHECK_H
#define BF_TESTS_OPCHECK_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk.h"
#include "tests/ref/gradcheck.h"

#ifndef OPCHECK_MAX_BUFS
#define OPCHECK_MAX_BUFS 256
#endif
static void *bufs[OPCHECK_MAX_BUFS];
static int nbufs;

/* A zeroed buffer of bytes, held in the table until release_all. */
static inline void *take(size_t bytes) {
    cr_assert(nbufs < OPCHECK_MAX_BUFS, "test buffer table full");
    void *p = calloc(1, bytes ? bytes : 1);
    cr_assert(p, "out of memory");
    bufs[nbufs++] = p;
    return p;
}
/* n zeroed floats. */
static inline float *fbuf(size_t n) { return take(n * sizeof(float)); }
/* n zeroed doubles. */
static inline double *dbuf(size_t n) { return take(n * sizeof(double)); }
/* n floats uniform in [lo, hi), reproducible from seed. */
static inline float *frand(size_t n, float lo, float hi, uint64_t seed) {
    float *x = fbuf(n);
    gc_fill(x, n, lo, hi, seed);
    return x;
}
/* A copy of x[n]. */
static inline float *fcopy(const float *x, size_t n) {
    float *y = fbuf(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}
/* Frees every buffer taken so far (the suite's fini, or mid-test). */
static inline void release_all(void) {
    while (nbufs > 0) free(bufs[--nbufs]);
}

static const bk_backend *cpu;
/* A suite's init: the CPU backend into cpu. */
static inline void init_cpu(void) { cpu = bk_cpu(); }

/* Asserts |got[i] - want[i]| <= tol * max(1, |want[i]|) for every i (NaN
 * fails); names the first element that does not. */
static inline void expect_near(const char *what, const float *got, const double *want, size_t n,
                               double tol) {
    for (size_t i = 0; i < n; i++) {
        double lim = tol * fmax(1.0, fabs(want[i]));
        cr_assert(fabs(got[i] - want[i]) <= lim, "%s[%zu]: got %.9g, want %.9g (tol %.3g)", what, i,
                  (double)got[i], want[i], lim);
    }
}

/* Asserts got equals want bit for bit (an overwriting op against adding onto
 * zeros: -0 vs +0 or a NaN left behind would both show here). */
static inline void expect_same(const char *what, const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        cr_assert(!memcmp(got + i, want + i, sizeof(float)), "%s[%zu]: got %a, want %a", what, i,
                  (double)got[i], (double)want[i]);
}

/* The forward of an op as a closure for gc_numeric: eval recomputes out[m]
 * from the current inputs; L = <R, out>. */
typedef struct {
    void (*eval)(void *ctx);
    void *ctx;
    float *out;
    size_t m;
    const float *R;
} gc_op;

/* grad[n] must hold prefill[n] plus what the backward (called with dout = R)
 * added. Checks that the added part matches the numerical gradient of L with
 * respect to x[n] — which also fails when the backward overwrote instead of
 * accumulating, as the prefill is nonzero. */
static inline void check_grad(const char *what, const gc_op *op, float *x, size_t n,
                              const float *grad, const float *prefill) {
    double *num = dbuf(n);
    float *an = fbuf(n);
    gc_numeric(x, n, op->R, op->out, op->m, op->eval, op->ctx, num);
    for (size_t i = 0; i < n; i++) an[i] = grad[i] - prefill[i];
    double worst = gc_compare(what, an, num, n);
    cr_assert(worst <= 1.0, "%s: gradient check failed (worst ratio %.3g > 1)", what, worst);
}

#endif
