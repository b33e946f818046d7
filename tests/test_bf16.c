/* The bf16 casts (kernels/bk_bf16.h) against a plain reference, and the
 * CPU backend's gemm_bf16 against a double-precision product of the fp32
 * inputs within the bound bf16 rounding allows (derived below), on
 * whichever path this CPU takes (oneDNN's bf16 primitive, or the operands
 * rounded and the fp32 product: the test logs which), plus the linear
 * module's bf16 mode (the training wiring of train.precision: bf16).
 *
 * The bound. bf16 keeps 8 significant bits (7 stored), so rounding to
 * nearest moves a value by at most u_b = 2^-8 of itself. A product of two
 * rounded inputs is a'b' = ab(1 + d1)(1 + d2), |d| <= u_b, and is exact in
 * fp32 (8 + 8 significant bits <= 24): |a'b' - ab| <= (2 u_b + u_b^2)|ab|.
 * Its K terms are summed in fp32 in some order: whatever the order, each
 * term passes through at most K - 1 additions, so the sum is off by at
 * most gamma_{K-1} sum|a'b'| with gamma_n = n u / (1 - n u), u = 2^-24
 * (Higham, Accuracy and Stability, 4.2). alpha times it, beta C0 and
 * their sum add three more roundings: with S = sum|ab|,
 *   |C - C_exact| <= |alpha| (2 u_b + u_b^2) S
 *                    + gamma_{K+3} (|alpha| (1 + u_b)^2 S + |beta C0|).
 * The test computes C_exact in double from the fp32 inputs and S beside
 * it. Random inputs sit far inside this worst case, so the bound could
 * pass a product that does not round at all; the exact cases below pin
 * the rounding itself (a sum whose value is exact in fp32 only when each
 * input was rounded to nearest even). */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk.h"
#include "kernels/bk_bf16.h"
#include "kernels/bk_rng.h"
#include "tests/ref/ref_ops.h"
#include "worker/nn/nn_linear.h"

#define U_BF16 (1.0 / 256.0)
#define U_F32 (1.0 / 16777216.0)

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bk_bf16_round agrees with the reference, bit for bit (NaN: stays NaN). */
static void check_cast(float f) {
    float got = bk_bf16_round(f), want = ref_bf16_round(f);
    if (isnan(f)) {
        cr_assert(isnan(got), "bf16(NaN 0x%08x) is 0x%08x, not a NaN", bits(f), bits(got));
        return;
    }
    cr_assert_eq(bits(got), bits(want), "bf16(0x%08x = %g) = 0x%08x, reference 0x%08x", bits(f),
                 (double)f, bits(got), bits(want));
    cr_assert_eq(bits(got) & 0xffffu, 0u, "bf16 of 0x%08x has low bits set", bits(f));
}

Test(bf16, casts_hand_worked) {
    /* spacing at 1 is 2^-7: 1 + 2^-8 is a tie (to the even 1), 1 + 3 2^-8
     * a tie between 1 + 2^-7 (odd) and 1 + 2^-6 (even) */
    cr_assert_eq(bk_bf16_round(1.0f + 0x1p-8f), 1.0f);
    cr_assert_eq(bk_bf16_round(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
    cr_assert_eq(bk_bf16_round(1.0f + 0x1p-8f + 0x1p-10f), 1.0f + 0x1p-7f);
    cr_assert_eq(bk_bf16_round(-(1.0f + 0x1p-8f + 0x1p-10f)), -(1.0f + 0x1p-7f));
    cr_assert_eq(bk_bf16_from_f32(1.0f), 0x3f80);
    cr_assert_eq(bk_f32_from_bf16(0xc000), -2.0f);
    /* bf16's largest finite, (2 - 2^-7) 2^127, and what rounds past it */
    cr_assert_eq(bits(bk_bf16_round(from_bits(0x7f7f0000u))), 0x7f7f0000u);
    cr_assert(isinf(bk_bf16_round(FLT_MAX)), "FLT_MAX rounds to infinity in bf16");
    cr_assert_eq(bits(bk_bf16_round(-0.0f)), 0x80000000u);
    /* a signalling NaN whose payload is only in the low bits stays a NaN */
    cr_assert(isnan(bk_bf16_round(from_bits(0x7f800001u))));
    cr_assert(isinf(bk_bf16_round(INFINITY)) && bk_bf16_round(INFINITY) > 0);
}

Test(bf16, casts_against_reference) {
    /* every exponent with chosen low halves (ties, just above and below
     * them, the extremes), then a million random bit patterns */
    const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
    for (uint32_t hi = 0; hi < 0x10000u; hi++)
        for (size_t k = 0; k < sizeof lows / sizeof lows[0]; k++)
            check_cast(from_bits(hi << 16 | lows[k]));
    for (uint64_t i = 0; i < 1000000; i++)
        check_cast(from_bits((uint32_t)(bk_rng_uniform_at(7, 3, i) * 4294967296.0)));
}

/* C = alpha op(A) op(B) + beta C0 on the CPU backend's gemm_bf16 against
 * the double product of the unrounded inputs, within the bound above. */
static void check_gemm_bf16(int ta, int tb, int M, int N, int K, int pad, int batch, float alpha,
                            float beta) {
    const bk_backend *be = bk_cpu();
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    long long sA = (long long)(ta ? K : M) * lda, sB = (long long)(tb ? N : K) * ldb,
              sC = (long long)M * ldc;
    float *A = malloc((size_t)(sA * batch) * sizeof(float));
    float *Bm = malloc((size_t)(sB * batch) * sizeof(float));
    float *C = malloc((size_t)(sC * batch) * sizeof(float));
    float *C0 = malloc((size_t)(sC * batch) * sizeof(float));
    cr_assert(A && Bm && C && C0);
    for (long long i = 0; i < sA * batch; i++) A[i] = 2.0f * bk_rng_uniform_at(11, 1, i) - 1.0f;
    for (long long i = 0; i < sB * batch; i++) Bm[i] = 2.0f * bk_rng_uniform_at(11, 2, i) - 1.0f;
    for (long long i = 0; i < sC * batch; i++) C0[i] = C[i] = bk_rng_uniform_at(11, 3, i) - 0.5f;
    be->gemm_bf16(ta, tb, M, N, K, alpha, A, lda, sA, Bm, ldb, sB, beta, C, ldc, sC, batch);
    double gK = (K + 3) * U_F32 / (1 - (K + 3) * U_F32);
    double worst = 0;
    for (int b = 0; b < batch; b++)
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double s = 0, sa = 0;
                for (int k = 0; k < K; k++) {
                    double a = A[b * sA + (ta ? (long long)k * lda + m : (long long)m * lda + k)];
                    double x = Bm[b * sB + (tb ? (long long)n * ldb + k : (long long)k * ldb + n)];
                    s += a * x;
                    sa += fabs(a * x);
                }
                long long at = b * sC + (long long)m * ldc + n;
                double want = alpha * s + (beta != 0.0f ? beta * (double)C0[at] : 0.0);
                double bound = fabs(alpha) * (2 * U_BF16 + U_BF16 * U_BF16) * sa +
                               gK * (fabs(alpha) * (1 + U_BF16) * (1 + U_BF16) * sa +
                                     fabs(beta * (double)C0[at]));
                double d = fabs(C[at] - want);
                cr_assert(d <= bound,
                          "gemm_bf16 ta=%d tb=%d %dx%dx%d batch %d: C[%d][%d][%d] = %.9g, exact "
                          "%.9g, off by %.3g > bound %.3g",
                          ta, tb, M, N, K, batch, b, m, n, (double)C[at], want, d, bound);
                if (bound > 0 && d / bound > worst) worst = d / bound;
            }
    /* the padding between rows is never written */
    for (int b = 0; b < batch; b++)
        for (int m = 0; m < M; m++)
            for (int n = N; n < ldc; n++) {
                long long at = b * sC + (long long)m * ldc + n;
                cr_assert_eq(bits(C[at]), bits(C0[at]), "gemm_bf16 wrote C's padding");
            }
    cr_log_info("gemm_bf16 ta=%d tb=%d %dx%dx%d: worst error %.2f of the bound\n", ta, tb, M, N, K,
                worst);
    free(A);
    free(Bm);
    free(C);
    free(C0);
}

Test(bf16, gemm_within_the_rounding_bound) {
    char why[384] = "";
    int native = bk_cpu()->bf16_available(why, sizeof why);
    cr_assert(native || why[0], "bf16_available gave 0 without saying why");
    cr_log_info("gemm_bf16 runs %s%s\n",
                native ? "oneDNN's bf16 primitive" : "rounded fp32: ", native ? "" : why);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_gemm_bf16(ta, tb, 37, 29, 300, 0, 1, 1.0f, 0.0f);
            check_gemm_bf16(ta, tb, 19, 23, 70, 3, 3, 0.7f, 0.3f); /* padded, batched */
        }
    check_gemm_bf16(0, 1, 64, 96, 1000, 0, 1, 1.0f, 1.0f); /* the += of a backward */
}

Test(bf16, gemm_rounds_each_input_to_nearest_even) {
    /* A = 1 + 2^-8 + 2^-10 rounds to 1 + 2^-7 (truncation: 1; no rounding:
     * itself), B = 1 + 2^-8 is a tie and rounds to the even 1 (away: 1 +
     * 2^-7): each row's sum over K = 64 is 64 (1 + 2^-7) = 64.5 exactly,
     * every partial sum exact in fp32. fp32 products would give 64.3125
     * plus B's share, truncation 64. */
    const int M = 8, N = 5, K = 64;
    float A[8 * 64], Bm[5 * 64], C[8 * 5];
    for (int i = 0; i < M * K; i++) A[i] = 1.0f + 0x1p-8f + 0x1p-10f;
    for (int i = 0; i < N * K; i++) Bm[i] = 1.0f + 0x1p-8f;
    bk_cpu()->gemm_bf16(0, 1, M, N, K, 1.0f, A, K, 0, Bm, K, 0, 0.0f, C, N, 0, 1);
    for (int i = 0; i < M * N; i++) cr_assert_eq(C[i], 64.5f, "C[%d] = %.9g, want 64.5", i, C[i]);
}

Test(bf16, linear_module_bf16_mode) {
    /* nn_linear with env.bf16: forward y = x w^T + b, backward dx += dy w,
     * dw += dy^T x, db += sum dy, against the same products run by
     * gemm_bf16 directly and the fp32 bias ops (the module adds no
     * arithmetic of its own: the same bits) */
    const bk_backend *be = bk_cpu();
    const int N = 33, IN = 24, OUT = 40;
    nn_params np;
    nn_params_init(&np);
    nn_linear l;
    cr_assert_eq(nn_linear_declare(&l, &np, "fc", IN, OUT, 1, 0.5f), 0);
    char err[256];
    cr_assert_eq(bk_params_alloc(&np.P, be, err, sizeof err), 0, "%s", err);
    float *w = np.P.t[l.w].data, *bias = np.P.t[l.b].data;
    for (int i = 0; i < OUT * IN; i++) w[i] = bk_rng_uniform_at(5, 1, i) - 0.5f;
    for (int i = 0; i < OUT; i++) bias[i] = bk_rng_uniform_at(5, 2, i) - 0.5f;
    float x[33 * 24], dy[33 * 40], y[33 * 40], yr[33 * 40], dx[33 * 24], dxr[33 * 24];
    float dwr[40 * 24], dbr[40];
    for (int i = 0; i < N * IN; i++) dx[i] = dxr[i] = x[i] = bk_rng_uniform_at(5, 3, i) - 0.5f;
    for (int i = 0; i < N * OUT; i++) dy[i] = bk_rng_uniform_at(5, 4, i) - 0.5f;
    float *dw = bk_params_grad(&np.P, l.w), *db = bk_params_grad(&np.P, l.b);
    for (int i = 0; i < OUT * IN; i++) dw[i] = dwr[i] = 0.25f;
    for (int i = 0; i < OUT; i++) db[i] = dbr[i] = -0.5f;
    nn_env e = {be, &np, 1};
    nn_linear_forward(&l, &e, y, x, N);
    nn_linear_backward(&l, &e, dx, dy, x, N);
    for (int n = 0; n < N; n++) memcpy(yr + n * OUT, bias, OUT * sizeof(float));
    be->gemm_bf16(0, 1, N, OUT, IN, 1.0f, x, IN, 0, w, IN, 0, 1.0f, yr, OUT, 0, 1);
    be->gemm_bf16(0, 0, N, IN, OUT, 1.0f, dy, OUT, 0, w, IN, 0, 1.0f, dxr, IN, 0, 1);
    be->gemm_bf16(1, 0, OUT, IN, N, 1.0f, dy, OUT, 0, x, IN, 0, 1.0f, dwr, IN, 0, 1);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OUT; o++) dbr[o] += dy[n * OUT + o];
    cr_assert_eq(memcmp(y, yr, sizeof y), 0, "bf16 forward differs from its products");
    cr_assert_eq(memcmp(dx, dxr, sizeof dx), 0, "bf16 dx differs from its product");
    cr_assert_eq(memcmp(dw, dwr, sizeof dwr), 0, "bf16 dw differs from its product");
    for (int o = 0; o < OUT; o++)
        cr_assert(fabsf(db[o] - dbr[o]) <= 1e-5f, "db[%d] = %g, want %g", o, db[o], dbr[o]);
    /* and it is the bf16 product, not the fp32 one: x is not bf16-exact */
    float yf[33 * 40];
    be->linear_forward(yf, x, w, bias, N, IN, OUT);
    cr_assert_neq(memcmp(y, yf, sizeof y), 0, "bf16 mode gave the fp32 product's bits");
    nn_params_free(&np);
}
