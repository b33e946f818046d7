/* Walsh–Hadamard op (kernels/cpu_fwht.c, kernels/hadamard.c): the matrix is a
 * Hadamard matrix, the fast transform equals the explicit matrix product, the
 * normalised transform is orthogonal, the backward is the exact transpose, and
 * gradients match finite differences. */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk.h"
#include "tests/ref/gradcheck.h"

static const bk_backend *be;
static void setup(void) { be = bk_cpu(); }

TestSuite(fwht, .init = setup);

/* Dense unnormalised H_d as int8, from bk_hadamard_entry. Caller frees. */
static signed char *dense_h(int d) {
    signed char *h = malloc((size_t)d * d);
    cr_assert_not_null(h);
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) h[(size_t)i * d + j] = (signed char)bk_hadamard_entry(d, i, j);
    return h;
}

Test(fwht, valid_widths) {
    const int good[] = {1, 2, 4, 12, 24, 48, 256, 768, 1024, 1536, 3072};
    const int bad[] = {0, -1, -12, 3, 5, 6, 36, 100, 144, 1000, 1023, 1025};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        cr_expect(bk_fwht_valid(good[i]), "d=%d should be valid", good[i]);
    /* 6 would be 12 * 2^-1: widths are 12 * 2^n with n >= 0 only. */
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect(!bk_fwht_valid(bad[i]), "d=%d should be invalid", bad[i]);
}

Test(fwht, entries_form_hadamard_matrices) {
    const int ds[] = {1, 2, 8, 12, 24, 64, 768, 1024};
    for (size_t k = 0; k < sizeof ds / sizeof *ds; k++) {
        int d = ds[k];
        signed char *h = dense_h(d);
        int bad_entries = 0, bad_products = 0;
        for (size_t i = 0; i < (size_t)d * d; i++) bad_entries += h[i] != 1 && h[i] != -1;
        for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) {
                const signed char *a = h + (size_t)i * d, *b = h + (size_t)j * d;
                int s = 0;
                for (int l = 0; l < d; l++) s += a[l] * b[l];
                bad_products += s != (i == j ? d : 0);
            }
        cr_expect_eq(bad_entries, 0, "d=%d: entries not +-1", d);
        cr_expect_eq(bad_products, 0, "d=%d: H H^T != d I at %d places", d, bad_products);
        free(h);
    }
    /* Sylvester is symmetric, the Paley factor is not: the backward must transpose. */
    cr_expect_eq(bk_hadamard_entry(8, 3, 5), bk_hadamard_entry(8, 5, 3));
    int asym = 0;
    for (int i = 0; i < 12; i++)
        for (int j = 0; j < 12; j++)
            asym += bk_hadamard_entry(12, i, j) != bk_hadamard_entry(12, j, i);
    cr_expect_gt(asym, 0, "H_12 should not be symmetric");
}

Test(fwht, forward_matches_explicit_product) {
    const int ds[] = {1, 8, 12, 64, 768, 1024};
    const int N = 3;
    for (size_t k = 0; k < sizeof ds / sizeof *ds; k++) {
        int d = ds[k];
        float *x = malloc(sizeof(float) * N * d), *y = malloc(sizeof(float) * N * d);
        float *alpha = malloc(sizeof(float) * d), *beta = malloc(sizeof(float) * d);
        gc_fill(x, (size_t)N * d, -1, 1, 11 + k);
        gc_fill(alpha, d, 0.5f, 1.5f, 21 + k);
        gc_fill(beta, d, -0.5f, 0.5f, 31 + k);
        signed char *h = dense_h(d);
        for (int affine = 0; affine < 2; affine++) {
            be->fwht_forward(y, NULL, x, affine ? alpha : NULL, affine ? beta : NULL, N, d);
            double worst = 0;
            for (int n = 0; n < N; n++)
                for (int i = 0; i < d; i++) {
                    double s = 0;
                    for (int j = 0; j < d; j++) s += h[(size_t)i * d + j] * (double)x[n * d + j];
                    s /= sqrt((double)d);
                    if (affine) s = alpha[i] * s + beta[i];
                    worst = fmax(worst, fabs(s - y[n * d + i]));
                }
            cr_expect_lt(worst, 2e-5, "d=%d affine=%d: max error %g", d, affine, worst);
        }
        /* In place (out aliases inp) gives the same result. */
        float *z = malloc(sizeof(float) * N * d);
        memcpy(z, x, sizeof(float) * N * d);
        be->fwht_forward(z, NULL, z, alpha, beta, N, d);
        be->fwht_forward(y, NULL, x, alpha, beta, N, d);
        cr_expect_eq(memcmp(z, y, sizeof(float) * N * d), 0, "d=%d: in-place differs", d);
        free(z);
        free(h);
        free(x);
        free(y);
        free(alpha);
        free(beta);
    }
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - b[i]));
    return w;
}

Test(fwht, normalised_transform_is_orthogonal) {
    const int ds[] = {2, 16, 12, 256, 768, 1024, 1536};
    const int N = 4;
    for (size_t k = 0; k < sizeof ds / sizeof *ds; k++) {
        int d = ds[k];
        size_t n = (size_t)N * d;
        float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
        float *z = calloc(n, sizeof(float)), *scratch = malloc(sizeof(float) * n);
        gc_fill(x, n, -1, 1, 40 + k);
        be->fwht_forward(y, NULL, x, NULL, NULL, N, d);
        /* H^T H / d = I for every width: the backward with alpha = 1 applies H^T/sqrt(d). */
        be->fwht_backward(z, NULL, NULL, scratch, y, x, NULL, NULL, N, d);
        cr_expect_lt(max_abs_diff(z, x, n), 1e-5, "d=%d: H^T H x != d x", d);
        /* Applying H twice is the identity only when H is symmetric (2^n). */
        be->fwht_forward(z, NULL, y, NULL, NULL, N, d);
        double err = max_abs_diff(z, x, n);
        if ((d & (d - 1)) == 0)
            cr_expect_lt(err, 1e-5, "d=%d: H H x != d x", d);
        else
            cr_expect_gt(err, 0.1, "d=%d: H H x == x, H_12 factor should not be symmetric", d);
        free(x);
        free(y);
        free(z);
        free(scratch);
    }
}

Test(fwht, backward_is_transpose) {
    /* 2048: the backward streams wide rows out (a 64-byte aligned dx) */
    const int ds[] = {12, 24, 64, 768, 1024, 2048};
    const int N = 3;
    for (size_t k = 0; k < sizeof ds / sizeof *ds; k++) {
        int d = ds[k];
        size_t n = (size_t)N * d;
        float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
        float *hx = malloc(sizeof(float) * n), *scratch = malloc(sizeof(float) * n);
        /* aligned_alloc's size: a multiple of the alignment (C11) */
        float *dx = aligned_alloc(64, (sizeof(float) * n + 63) / 64 * 64);
        float *alpha = malloc(sizeof(float) * d);
        gc_fill(x, n, -1, 1, 50 + k);
        gc_fill(y, n, -1, 1, 60 + k);
        gc_fill(alpha, d, 0.5f, 1.5f, 70 + k);
        /* <alpha ⊙ Hx/sqrt(d), y> = <x, H^T(alpha ⊙ y)/sqrt(d)>; dx starts at
         * 1e6 to check it is overwritten, not added to */
        be->fwht_forward(hx, NULL, x, alpha, NULL, N, d);
        for (size_t i = 0; i < n; i++) dx[i] = 1e6f;
        be->fwht_backward(dx, NULL, NULL, scratch, y, x, NULL, alpha, N, d);
        double lhs = gc_dot(hx, y, n), rhs = 0;
        for (size_t i = 0; i < n; i++) rhs += (double)x[i] * dx[i];
        cr_expect_lt(fabs(lhs - rhs), 1e-3 * (1 + fabs(lhs)), "d=%d: <Hx,y>=%g, <x,H^T y>=%g", d,
                     lhs, rhs);
        free(x);
        free(y);
        free(hx);
        free(scratch);
        free(dx);
        free(alpha);
    }
}

/* Finite differences: L = <R, fwht_forward(inp; alpha, beta)>. */
typedef struct {
    float *out, *inp, *alpha, *beta;
    int N, d;
} fwht_case;

static void fwht_eval(void *ctx) {
    fwht_case *c = ctx;
    bk_cpu()->fwht_forward(c->out, NULL, c->inp, c->alpha, c->beta, c->N, c->d);
}

Test(fwht, gradients_match_finite_differences) {
    const int ds[] = {16, 24};
    const int N = 3;
    for (size_t k = 0; k < sizeof ds / sizeof *ds; k++) {
        int d = ds[k];
        size_t n = (size_t)N * d;
        fwht_case c = {malloc(sizeof(float) * n),
                       malloc(sizeof(float) * n),
                       malloc(sizeof(float) * d),
                       malloc(sizeof(float) * d),
                       N,
                       d};
        float *R = malloc(sizeof(float) * n), *scratch = malloc(sizeof(float) * n);
        float *dinp = calloc(n, sizeof(float)), *dalpha = calloc(d, sizeof(float));
        float *dbeta = calloc(d, sizeof(float));
        double *num = malloc(sizeof(double) * n);
        gc_fill(c.inp, n, -1, 1, 80 + k);
        gc_fill(c.alpha, d, 0.5f, 1.5f, 90 + k);
        gc_fill(c.beta, d, -0.5f, 0.5f, 100 + k);
        gc_fill(R, n, -1, 1, 110 + k);
        be->fwht_backward(dinp, dalpha, dbeta, scratch, R, c.inp, NULL, c.alpha, N, d);
        gc_numeric(c.inp, n, R, c.out, n, fwht_eval, &c, num);
        cr_expect_leq(gc_compare("fwht dinp", dinp, num, n), 1.0, "d=%d dinp", d);
        gc_numeric(c.alpha, d, R, c.out, n, fwht_eval, &c, num);
        cr_expect_leq(gc_compare("fwht dalpha", dalpha, num, d), 1.0, "d=%d dalpha", d);
        gc_numeric(c.beta, d, R, c.out, n, fwht_eval, &c, num);
        cr_expect_leq(gc_compare("fwht dbeta", dbeta, num, d), 1.0, "d=%d dbeta", d);
        /* dbeta is the plain column sum of dout. */
        for (int i = 0; i < d; i++)
            cr_expect_float_eq(dbeta[i], R[i] + R[d + i] + R[2 * d + i], 1e-5);
        free(c.out);
        free(c.inp);
        free(c.alpha);
        free(c.beta);
        free(R);
        free(scratch);
        free(dinp);
        free(dalpha);
        free(dbeta);
        free(num);
    }
}

/* The backward over many rows (blocks of rows, threads) on both CPU paths
 * (AVX-512 butterflies where built, and the portable ones): dx, dalpha and
 * dbeta match sums in double, and are the same bits with one thread as with
 * two (the blocks' partials are added in block order). */
Test(fwht, backward_many_rows_matches_double_and_threads) {
    const int ds[] = {128, 768};
    const int N = 301; /* a last block cut short */
    for (int portable = 0; portable < 2; portable++)
        for (size_t k = 0; k < sizeof ds / sizeof *ds; k++) {
            int d = ds[k];
            size_t n = (size_t)N * d;
            float *x = malloc(sizeof(float) * n), *dy = malloc(sizeof(float) * n);
            float *scratch = malloc(sizeof(float) * n), *dx = calloc(n, sizeof(float));
            float *dx1 = calloc(n, sizeof(float)), *alpha = malloc(sizeof(float) * d);
            float *da = calloc((size_t)d, sizeof(float)), *db = calloc((size_t)d, sizeof(float));
            float *da1 = calloc((size_t)d, sizeof(float)), *db1 = calloc((size_t)d, sizeof(float));
            gc_fill(x, n, -1, 1, 80 + k);
            gc_fill(dy, n, -1, 1, 90 + k);
            gc_fill(alpha, d, 0.5f, 1.5f, 100 + k);
            bk_cpu_set_portable(portable);
            be->fwht_backward(dx, da, db, scratch, dy, x, NULL, alpha, N, d);
            int threads = omp_get_max_threads();
            cr_assert(threads >= 2, "needs 2 threads (OMP_NUM_THREADS), has %d", threads);
            omp_set_num_threads(1);
            be->fwht_backward(dx1, da1, db1, scratch, dy, x, NULL, alpha, N, d);
            omp_set_num_threads(threads);
            bk_cpu_set_portable(0);
            cr_assert(memcmp(dx, dx1, n * sizeof(float)) == 0 &&
                          memcmp(da, da1, (size_t)d * sizeof(float)) == 0 &&
                          memcmp(db, db1, (size_t)d * sizeof(float)) == 0,
                      "portable %d d=%d: one thread gives other bits", portable, d);
            double s = 1.0 / sqrt((double)d);
            for (int i = 0; i < d; i++) {
                double wa = 0, wb = 0;
                for (int r = 0; r < N; r++) {
                    double hx = 0;
                    for (int j = 0; j < d; j++)
                        hx += bk_hadamard_entry(d, i, j) * (double)x[(size_t)r * d + j];
                    wa += dy[(size_t)r * d + i] * hx * s;
                    wb += dy[(size_t)r * d + i];
                }
                cr_assert(fabs(da[i] - wa) <= 1e-3 * (1 + fabs(wa)) &&
                              fabs(db[i] - wb) <= 1e-4 * (1 + fabs(wb)),
                          "portable %d d=%d channel %d: dalpha %g (want %g), dbeta %g (want %g)",
                          portable, d, i, (double)da[i], wa, (double)db[i], wb);
            }
            for (int r = 0; r < N; r += 37)
                for (int j = 0; j < d; j++) {
                    double w = 0;
                    for (int i = 0; i < d; i++)
                        w += bk_hadamard_entry(d, i, j) * (double)alpha[i] * dy[(size_t)r * d + i];
                    w *= s;
                    cr_assert(fabs(dx[(size_t)r * d + j] - w) <= 1e-4 * (1 + fabs(w)),
                              "portable %d d=%d dx[%d,%d] %g, want %g", portable, d, r, j,
                              (double)dx[(size_t)r * d + j], w);
                }
            free(x), free(dy), free(scratch), free(dx), free(dx1), free(alpha);
            free(da), free(db), free(da1), free(db1);
        }
}

/* The forward's kept pre (H x / sqrt(d), what the training forward stores for
 * its backward) is the plain normalised transform, the output is the same
 * bits with or without it (also written over x itself), and the backward
 * reading pre gives the same bits as the backward transforming x again. Both
 * CPU paths, widths 2^n and 12 * 2^n, a last block of rows cut short. */
Test(fwht, kept_pre_gives_the_same_bits) {
    const int ds[] = {64, 192, 256, 768};
    const int N = 67;
    for (int portable = 0; portable < 2; portable++)
        for (size_t k = 0; k < sizeof ds / sizeof *ds; k++) {
            int d = ds[k];
            size_t n = (size_t)N * d, bytes = n * sizeof(float), db_ = (size_t)d * sizeof(float);
            float *x = malloc(bytes), *dy = malloc(bytes), *y = malloc(bytes), *y1 = malloc(bytes);
            float *pre = malloc(bytes), *plain = malloc(bytes), *xin = malloc(bytes);
            float *scratch = malloc(bytes), *dx = calloc(n, sizeof(float));
            float *dx1 = calloc(n, sizeof(float)), *alpha = malloc(db_), *beta = malloc(db_);
            float *da = calloc((size_t)d, sizeof(float)), *dbt = calloc((size_t)d, sizeof(float));
            float *da1 = calloc((size_t)d, sizeof(float)), *db1 = calloc((size_t)d, sizeof(float));
            gc_fill(x, n, -1, 1, 110 + k);
            gc_fill(dy, n, -1, 1, 120 + k);
            gc_fill(alpha, d, 0.5f, 1.5f, 130 + k);
            gc_fill(beta, d, -0.5f, 0.5f, 140 + k);
            bk_cpu_set_portable(portable);
            be->fwht_forward(y, NULL, x, alpha, beta, N, d);
            be->fwht_forward(y1, pre, x, alpha, beta, N, d);
            be->fwht_forward(plain, NULL, x, NULL, NULL, N, d);
            memcpy(xin, x, bytes);
            be->fwht_forward(y1, xin, xin, alpha, beta, N, d); /* pre over its own input */
            be->fwht_backward(dx, da, dbt, scratch, dy, x, NULL, alpha, N, d);
            be->fwht_backward(dx1, da1, db1, scratch, dy, NULL, pre, alpha, N, d);
            bk_cpu_set_portable(0);
            cr_assert(memcmp(y, y1, bytes) == 0, "portable %d d=%d: output differs with pre",
                      portable, d);
            cr_assert(memcmp(pre, plain, bytes) == 0 && memcmp(xin, plain, bytes) == 0,
                      "portable %d d=%d: pre is not the normalised transform", portable, d);
            cr_assert(memcmp(dx, dx1, bytes) == 0 && memcmp(da, da1, db_) == 0 &&
                          memcmp(dbt, db1, db_) == 0,
                      "portable %d d=%d: the backward from pre gives other bits", portable, d);
            float *bufs[] = {x,  dy,  y,     y1,   pre, plain, xin, scratch,
                             dx, dx1, alpha, beta, da,  dbt,   da1, db1};
            for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
        }
}
