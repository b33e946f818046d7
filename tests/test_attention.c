/* Attention ops (kernels/cpu_attention.c): hand-computed values, masks and
 * causality, the double-precision reference (tests/ref/ref_attention.h),
 * finite-difference gradients for q, k, v and the head gates, and the
 * BudgetFormer selected-heads inference path against the gated full
 * computation. */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk.h"
#include "tests/ref/gradcheck.h"
#include "tests/ref/ref_attention.h"

static const bk_backend *be;
static void setup(void) { be = bk_cpu(); }

TestSuite(attention, .init = setup);

static float *fvec(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    cr_assert_not_null(p);
    return p;
}

/* ---- hand-computed values ---- */

/* One head, HS = 4 (scale 1/2), T = 2. k0 = 0, k1 = e0. q0 = 0 gives equal
 * scores, so o0 = (v0 + v1)/2; q1 = 2 ln3 e0 gives scores (0, ln3), so
 * p1 = (1/4, 3/4). */
static void fill_hand_case(float qkv[2 * 12]) {
    memset(qkv, 0, sizeof(float) * 24);
    float *r0 = qkv, *r1 = qkv + 12;
    r1[0] = 2.0f * logf(3.0f); /* q1 */
    r1[4] = 1.0f;              /* k1 */
    for (int j = 0; j < 4; j++) {
        r0[8 + j] = 2.0f + j; /* v0 = (2, 3, 4, 5) */
        r1[8 + j] = 6.0f - j; /* v1 = (6, 5, 4, 3) */
    }
}

Test(attention, hand_computed_values) {
    float qkv[24], out[8], att[4];
    bk_attn_args a = {.B = 1, .T = 2, .C = 4, .NH = 1};
    fill_hand_case(qkv);
    be->attention_forward(out, att, qkv, &a);
    const float want_att[4] = {0.5f, 0.5f, 0.25f, 0.75f};
    const float want_out[8] = {4, 4, 4, 4, 5, 4.5f, 4, 3.5f};
    for (int i = 0; i < 4; i++)
        cr_expect_float_eq(att[i], want_att[i], 1e-6, "att[%d]=%g", i, att[i]);
    for (int i = 0; i < 8; i++)
        cr_expect_float_eq(out[i], want_out[i], 1e-5, "out[%d]=%g", i, out[i]);

    /* Causal: query 0 sees only key 0. */
    a.causal = 1;
    be->attention_forward(out, att, qkv, &a);
    const float want_causal[8] = {2, 3, 4, 5, 5, 4.5f, 4, 3.5f};
    cr_expect_eq(att[1], 0.0f);
    for (int i = 0; i < 8; i++)
        cr_expect_float_eq(out[i], want_causal[i], 1e-5, "causal out[%d]", i);

    /* Key mask removes key 1: every query sees v0 only; gate 0.5 halves it. */
    float mask[2] = {1, 0}, gate[1] = {0.5f};
    a.causal = 0;
    a.mask = mask;
    a.gate = gate;
    be->attention_forward(out, att, qkv, &a);
    const float want_masked[8] = {1, 1.5f, 2, 2.5f, 1, 1.5f, 2, 2.5f};
    cr_expect(att[1] == 0.0f && att[3] == 0.0f && att[0] == 1.0f && att[2] == 1.0f);
    for (int i = 0; i < 8; i++)
        cr_expect_float_eq(out[i], want_masked[i], 1e-5, "masked out[%d]", i);
}

/* Sample 0: keys 1 and 3 removed; sample 1: only key 0 kept (so causal rows
 * all see it); sample 2 (when B > 2): every key removed. */
static void fill_mask(float *mask, int B, int T) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            mask[b * T + t] = b == 0 ? (t != 1 && t != 3) : b == 1 ? (t == 0) : 0.0f;
}

Test(attention, matches_reference_with_masks_causal_gates) {
    const int B = 3, T = 9, C = 24, NH = 4;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = fvec(nqkv), *out = fvec(nout), *att = fvec(natt), *mask = fvec(B * T);
    float *gate = fvec(B * NH);
    double *rout = malloc(sizeof(double) * nout), *ratt = malloc(sizeof(double) * natt);
    gc_fill(qkv, nqkv, -2, 2, 1);
    gc_fill(gate, B * NH, 0.2f, 1.5f, 2);
    fill_mask(mask, B, T);
    for (int variant = 0; variant < 8; variant++) {
        bk_attn_args a = {.B = B,
                          .T = T,
                          .C = C,
                          .NH = NH,
                          .causal = variant & 1,
                          .mask = variant & 2 ? mask : NULL,
                          .gate = variant & 4 ? gate : NULL};
        be->attention_forward(out, att, qkv, &a);
        ref_attention(rout, ratt, qkv, &a);
        double eo = 0, ea = 0;
        for (size_t i = 0; i < nout; i++) eo = fmax(eo, fabs(out[i] - rout[i]));
        for (size_t i = 0; i < natt; i++) ea = fmax(ea, fabs(att[i] - ratt[i]));
        cr_expect_lt(eo, 1e-5, "variant %d: out error %g", variant, eo);
        cr_expect_lt(ea, 1e-6, "variant %d: att error %g", variant, ea);
    }
    free(qkv);
    free(out);
    free(att);
    free(mask);
    free(gate);
    free(rout);
    free(ratt);
}

Test(attention, masked_keys_get_exactly_zero_and_empty_rows_output_zero) {
    const int B = 3, T = 6, C = 16, NH = 2;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = fvec(nqkv), *out = fvec(nout), *att = fvec(natt), *mask = fvec(B * T);
    gc_fill(qkv, nqkv, -30, 30, 3); /* large scores: exp underflow must not matter */
    fill_mask(mask, B, T);
    for (int causal = 0; causal < 2; causal++) {
        bk_attn_args a = {.B = B, .T = T, .C = C, .NH = NH, .causal = causal, .mask = mask};
        for (size_t i = 0; i < natt; i++) att[i] = NAN;
        for (size_t i = 0; i < nout; i++) out[i] = NAN;
        be->attention_forward(out, att, qkv, &a);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < T; t++) {
                    const float *p = att + (((size_t)b * NH + h) * T + t) * T;
                    double sum = 0;
                    int any = 0;
                    for (int u = 0; u < T; u++) {
                        int vis = mask[b * T + u] != 0 && (!causal || u <= t);
                        any |= vis;
                        if (!vis)
                            cr_expect(p[u] == 0.0f, "b%d h%d t%d u%d: hidden key has p=%g", b, h, t,
                                      u, p[u]);
                        sum += p[u];
                    }
                    if (any) {
                        cr_expect_float_eq(sum, 1.0, 1e-5, "b%d h%d t%d: row sums to %g", b, h, t,
                                           sum);
                    } else {
                        cr_expect(sum == 0.0, "b%d t%d: row with no key has mass %g", b, t, sum);
                        for (int j = 0; j < C / NH; j++)
                            cr_expect(out[((size_t)b * T + t) * C + h * (C / NH) + j] == 0.0f);
                    }
                }
        /* Sample 1 sees only key 0: every output row is v_0 exactly. */
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                cr_expect_float_eq(out[((size_t)T + t) * C + c], qkv[(size_t)T * 3 * C + 2 * C + c],
                                   1e-6);
    }
    free(qkv);
    free(out);
    free(att);
    free(mask);
}

/* ---- finite-difference gradients ---- */

typedef struct {
    float *out, *att, *qkv;
    bk_attn_args a;
} attn_case;

static void attn_eval(void *ctx) {
    attn_case *c = ctx;
    bk_cpu()->attention_forward(c->out, c->att, c->qkv, &c->a);
}

static void check_gradients(int causal, int use_mask, int use_gate, uint64_t seed) {
    const int B = 3, T = 5, C = 8, NH = 2;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *mask = fvec(B * T), *gate = fvec(B * NH), *R = fvec(nout), *dqkv = fvec(nqkv);
    float *dgate = fvec(B * NH), *scratch = fvec(natt);
    double *num = malloc(sizeof(double) * nqkv);
    attn_case c = {fvec(nout),
                   fvec(natt),
                   fvec(nqkv),
                   {.B = B,
                    .T = T,
                    .C = C,
                    .NH = NH,
                    .causal = causal,
                    .mask = use_mask ? mask : NULL,
                    .gate = use_gate ? gate : NULL}};
    gc_fill(c.qkv, nqkv, -1.5f, 1.5f, seed);
    gc_fill(gate, B * NH, 0.3f, 1.7f, seed + 1);
    gc_fill(R, nout, -1, 1, seed + 2);
    /* Sample 0 loses keys 1 and 3; sample 2 loses key 0, so with causal its
     * query 0 sees nothing. */
    for (int i = 0; i < B * T; i++) mask[i] = 1;
    mask[1] = mask[3] = 0;
    mask[2 * T] = 0;
    attn_eval(&c);
    /* Backward accumulates: start both gradients at 0.5. */
    for (size_t i = 0; i < nqkv; i++) dqkv[i] = 0.5f;
    for (int i = 0; i < B * NH; i++) dgate[i] = 0.5f;
    be->attention_backward(dqkv, dgate, scratch, R, c.qkv, c.att, &c.a);
    for (size_t i = 0; i < nqkv; i++) dqkv[i] -= 0.5f;
    for (int i = 0; i < B * NH; i++) dgate[i] -= 0.5f;
    gc_numeric(c.qkv, nqkv, R, c.out, nout, attn_eval, &c, num);
    const char *what[3] = {"dq", "dk", "dv"};
    for (int part = 0; part < 3; part++) { /* check q, k and v separately so a failure says which */
        float an[(size_t)3 * 5 * 8];
        double nu[(size_t)3 * 5 * 8];
        size_t m = 0;
        for (int bt = 0; bt < B * T; bt++)
            for (int j = 0; j < C; j++, m++) {
                an[m] = dqkv[(size_t)bt * 3 * C + part * C + j];
                nu[m] = num[(size_t)bt * 3 * C + part * C + j];
            }
        cr_expect_leq(gc_compare(what[part], an, nu, m), 1.0, "%s: causal=%d mask=%d gate=%d",
                      what[part], causal, use_mask, use_gate);
    }
    if (use_gate) {
        gc_numeric(gate, B * NH, R, c.out, nout, attn_eval, &c, num);
        cr_expect_leq(gc_compare("dgate", dgate, num, B * NH), 1.0, "dgate: causal=%d mask=%d",
                      causal, use_mask);
    } else {
        for (int i = 0; i < B * NH; i++) cr_expect(dgate[i] == 0.0f, "dgate written without gate");
    }
    if (causal && use_mask) { /* sample 2, query 0 has no visible key: no gradient to its q */
        for (int j = 0; j < C; j++) cr_expect(dqkv[(size_t)2 * T * 3 * C + j] == 0.0f);
    }
    free(mask);
    free(gate);
    free(R);
    free(dqkv);
    free(dgate);
    free(scratch);
    free(num);
    free(c.out);
    free(c.att);
    free(c.qkv);
}

Test(attention, gradients_plain) { check_gradients(0, 0, 0, 100); }
Test(attention, gradients_key_mask) { check_gradients(0, 1, 0, 200); }
Test(attention, gradients_causal) { check_gradients(1, 0, 0, 300); }
Test(attention, gradients_gates) { check_gradients(0, 0, 1, 400); }
Test(attention, gradients_all_combined) { check_gradients(1, 1, 1, 500); }

/* ---- selected heads (BudgetFormer inference) ---- */

static void check_selected(int B, int T, int C, int NH, int K, const int *heads, int causal,
                           int use_mask, int use_bias, uint64_t seed) {
    int HS = C / NH;
    size_t nx = (size_t)B * T * C;
    float *x = fvec(nx), *w = fvec((size_t)3 * C * C), *bias = fvec(3 * C);
    float *qkv = fvec(nx * 3), *ref = fvec(nx), *att = fvec((size_t)B * NH * T * T);
    float *out = fvec(nx), *gate = fvec(B * NH), *mask = fvec(B * T);
    float *scratch = fvec((size_t)B * K * T * (3 * HS + T));
    gc_fill(x, nx, -1, 1, seed);
    gc_fill(w, (size_t)3 * C * C, -0.5f, 0.5f, seed + 1);
    gc_fill(bias, 3 * C, -0.5f, 0.5f, seed + 2);
    fill_mask(mask, B, T);
    for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++) gate[b * NH + heads[b * K + k]] = 1.0f;
    ref_qkv(qkv, x, w, use_bias ? bias : NULL, B * T, C);
    bk_attn_args a = {.B = B,
                      .T = T,
                      .C = C,
                      .NH = NH,
                      .causal = causal,
                      .mask = use_mask ? mask : NULL,
                      .gate = gate};
    be->attention_forward(ref, att, qkv, &a);
    for (size_t i = 0; i < nx; i++) out[i] = NAN; /* unselected columns must be written as 0 */
    a.gate = NULL;
    /* B == 1: the unselected heads' rows of wqkv must never be read. */
    if (B == 1)
        for (int h = 0; h < NH; h++) {
            if (gate[h] != 0) continue;
            for (int part = 0; part < 3; part++)
                for (size_t i = 0; i < (size_t)HS * C; i++)
                    w[((size_t)part * C + h * HS) * C + i] = NAN;
        }
    be->attention_selected_forward(out, scratch, x, w, use_bias ? bias : NULL, heads, K, &a);
    double err = 0;
    int nonzero_unselected = 0;
    for (int bt = 0; bt < B * T; bt++)
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)bt * C + c;
            err = fmax(err, isnan(out[i]) ? INFINITY : fabs(out[i] - ref[i]));
            nonzero_unselected += gate[(bt / T) * NH + c / HS] == 0 && out[i] != 0.0f;
        }
    cr_expect_lt(err, 2e-5,
                 "selected vs gated full: error %g (B%d T%d C%d NH%d K%d causal%d mask%d)", err, B,
                 T, C, NH, K, causal, use_mask);
    cr_expect_eq(nonzero_unselected, 0, "unselected head columns not zero");
    free(x);
    free(w);
    free(bias);
    free(qkv);
    free(ref);
    free(att);
    free(out);
    free(gate);
    free(mask);
    free(scratch);
}

Test(attention, selected_heads_equal_gated_full) {
    const int heads2[] = {1, 3, 0, 2, 3, 0};
    check_selected(3, 7, 32, 4, 2, heads2, 0, 0, 1, 10);
    check_selected(3, 7, 32, 4, 2, heads2, 1, 1, 1, 20);
    check_selected(3, 9, 24, 4, 2, heads2, 0, 1, 0, 30); /* HS = 6, not a multiple of the lanes */
    const int heads1[] = {2, 0, 3};
    check_selected(3, 5, 32, 4, 1, heads1, 1, 0, 1, 40);
    const int all[] = {3, 1, 0, 2, 0, 1, 2, 3};
    check_selected(2, 6, 32, 4, 4, all, 0, 1, 1, 50);
    const int one[] = {2, 5};
    check_selected(1, 8, 48, 6, 2, one, 1, 0, 1, 60); /* unselected wqkv rows are NaN */
}

/* y = c @ wo^T + bo with c's unselected columns zero, by plain loops. */
static void check_linear_selected(int B, int T, int C, int NH, int OC, int K, const int *heads,
                                  uint64_t seed) {
    int HS = C / NH;
    size_t nc = (size_t)B * T * C, ny = (size_t)B * T * OC;
    float *c = fvec(nc), *wo = fvec((size_t)OC * C), *bo = fvec(OC), *y = fvec(ny);
    double *ref = malloc(sizeof(double) * ny);
    gc_fill(c, nc, -1, 1, seed);
    gc_fill(wo, (size_t)OC * C, -1, 1, seed + 1);
    gc_fill(bo, OC, -1, 1, seed + 2);
    for (int b = 0; b < B; b++)
        for (int col = 0; col < C; col++) {
            int sel = 0;
            for (int k = 0; k < K; k++) sel |= heads[b * K + k] == col / HS;
            if (!sel)
                for (int t = 0; t < T; t++) c[((size_t)b * T + t) * C + col] = 0;
        }
    for (int n = 0; n < B * T; n++)
        for (int o = 0; o < OC; o++) {
            double s = bo[o];
            for (int i = 0; i < C; i++) s += (double)c[(size_t)n * C + i] * wo[(size_t)o * C + i];
            ref[(size_t)n * OC + o] = s;
        }
    if (B == 1) /* only the selected columns of W_O may be read */
        for (int o = 0; o < OC; o++)
            for (int col = 0; col < C; col++) {
                int sel = 0;
                for (int k = 0; k < K; k++) sel |= heads[k] == col / HS;
                if (!sel) wo[(size_t)o * C + col] = NAN;
            }
    be->linear_selected_forward(y, c, wo, bo, heads, K, B, T, C, NH, OC);
    double err = 0;
    for (size_t i = 0; i < ny; i++) err = fmax(err, isnan(y[i]) ? INFINITY : fabs(y[i] - ref[i]));
    cr_expect_lt(err, 1e-4, "linear_selected error %g (B%d C%d NH%d OC%d K%d)", err, B, C, NH, OC,
                 K);
    be->linear_selected_forward(y, c, wo, NULL, heads, K, B, T, C, NH, OC);
    err = 0;
    for (size_t i = 0; i < ny; i++) err = fmax(err, fabs(y[i] - (ref[i] - bo[i % OC])));
    cr_expect_lt(err, 1e-4, "linear_selected without bias: error %g", err);
    free(c);
    free(wo);
    free(bo);
    free(y);
    free(ref);
}

Test(attention, linear_selected_equals_full_linear_on_zeroed_columns) {
    const int heads2[] = {1, 3, 0, 2, 3, 0};
    check_linear_selected(3, 5, 32, 4, 10, 2, heads2, 70);
    check_linear_selected(3, 5, 24, 4, 32, 2, heads2, 80); /* HS = 6 */
    const int one[] = {4};
    check_linear_selected(1, 6, 64, 8, 64, 1, one, 90);
}

/* ---- the tiled path (no [T, T] map) against the maps ---- */

/* Largest |x - y| over n, relative to the largest |y| (at least 1e-30). */
static double rel_err(const float *x, const float *y, size_t n) {
    double e = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)x[i] - y[i]));
        m = fmax(m, fabs((double)y[i]));
    }
    return e / m;
}

/* Key masks of long sequences: 0 none, 1 padded (sample b's last 100 + 37 b
 * keys removed), 2 halted (about a third of the keys removed at random, key
 * 0 kept), 3 as halted with the last sample's keys all removed. */
static void fill_long_mask(float *mask, int B, int T, int kind) {
    uint64_t x = 88172645463325252ull;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            float m = 1.0f;
            if (kind == 1) m = t < T - 100 - 37 * b;
            if (kind >= 2) m = t == 0 || x % 3 != 0;
            if (kind == 3 && b == B - 1) m = 0.0f;
            mask[(size_t)b * T + t] = m;
        }
}

/* Forward and backward, tiled (att NULL) and with maps, on the same input:
 * out, dqkv and dgate agree within float rounding of sums over T keys. */
static void check_tiled(int B, int T, int C, int NH, int causal, int mask_kind, int use_gate) {
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = fvec(nqkv), *dout = fvec(nout), *mask = fvec((size_t)B * T);
    float *gate = fvec((size_t)B * NH), *att = fvec(natt), *scratch = fvec(natt);
    float *out_m = fvec(nout), *out_t = fvec(nout), *lse = fvec((size_t)B * NH * T);
    float *dq_m = fvec(nqkv), *dq_t = fvec(nqkv), *dg_m = fvec((size_t)B * NH);
    float *dg_t = fvec((size_t)B * NH);
    gc_fill(qkv, nqkv, -2, 2, 11);
    gc_fill(dout, nout, -1, 1, 12);
    gc_fill(gate, (size_t)B * NH, 0.2f, 1.5f, 13);
    gate[1] = 0.0f; /* a closed head still has a gate gradient */
    fill_long_mask(mask, B, T, mask_kind);
    bk_attn_args a = {.B = B,
                      .T = T,
                      .C = C,
                      .NH = NH,
                      .causal = causal,
                      .mask = mask_kind ? mask : NULL,
                      .gate = use_gate ? gate : NULL};
    be->attention_forward(out_m, att, qkv, &a);
    be->attention_backward(dq_m, dg_m, scratch, dout, qkv, att, &a);
    a.lse = lse;
    for (size_t i = 0; i < nout; i++) out_t[i] = NAN;
    be->attention_forward(out_t, NULL, qkv, &a);
    be->attention_backward(dq_t, dg_t, NULL, dout, qkv, NULL, &a);
#define TILED_WHAT "B%d T%d C%d NH%d causal %d mask %d gate %d: %s error %g"
    double e = rel_err(out_t, out_m, nout);
    cr_expect_lt(e, 2e-6, TILED_WHAT, B, T, C, NH, causal, mask_kind, use_gate, "out", e);
    e = rel_err(dq_t, dq_m, nqkv);
    cr_expect_lt(e, 1e-5, TILED_WHAT, B, T, C, NH, causal, mask_kind, use_gate, "dqkv", e);
    e = rel_err(dg_t, dg_m, (size_t)B * NH);
    cr_expect_lt(e, 1e-5, TILED_WHAT, B, T, C, NH, causal, mask_kind, use_gate, "dgate", e);
    if (!use_gate)
        for (int i = 0; i < B * NH; i++) cr_expect(dg_t[i] == 0.0f, "dgate written without gate");
    if (mask_kind == 3) /* a sample that sees no key: output and gradients exactly 0 */
        for (size_t i = (size_t)(B - 1) * T * C; i < nout; i++)
            cr_expect(out_t[i] == 0.0f, "empty sample: out[%zu] = %g", i, out_t[i]);
    free(qkv), free(dout), free(mask), free(gate), free(att), free(scratch);
    free(out_m), free(out_t), free(lse), free(dq_m), free(dq_t), free(dg_m), free(dg_t);
}

Test(attention, tiled_matches_maps_at_577_tokens_with_masks_causal_gates) {
    for (int mk = 0; mk < 4; mk++)
        for (int causal = 0; causal < 2; causal++) check_tiled(2, 577, 128, 2, causal, mk, 1);
    check_tiled(2, 577, 192, 3, 0, 2, 0);
}

Test(attention, tiled_matches_maps_at_tile_edges) {
    const int Ts[] = {1, 63, 64, 65, 127, 128, 129, 200};
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++)
        for (int causal = 0; causal < 2; causal++) {
            check_tiled(3, Ts[i], 24, 3, causal, Ts[i] > 140 ? 1 : 3, 1);
            check_tiled(2, Ts[i], 40, 2, causal, 0, 0); /* HS 20: no whole vectors */
        }
}

/* The tiled path's bits do not depend on the number of threads. */
Test(attention, tiled_one_thread_gives_the_same_bits_as_two) {
    const int B = 2, T = 300, C = 64, NH = 2;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    float *qkv = fvec(nqkv), *dout = fvec(nout), *mask = fvec((size_t)B * T), *gate = fvec(B * NH);
    float *out[2], *dq[2], *dg[2], *lse = fvec((size_t)B * NH * T);
    gc_fill(qkv, nqkv, -2, 2, 21);
    gc_fill(dout, nout, -1, 1, 22);
    gc_fill(gate, (size_t)B * NH, 0.2f, 1.5f, 23);
    fill_long_mask(mask, B, T, 2);
    int threads = omp_get_max_threads();
    for (int r = 0; r < 2; r++) {
        out[r] = fvec(nout), dq[r] = fvec(nqkv), dg[r] = fvec(B * NH);
        omp_set_num_threads(r == 0 ? 1 : 2);
        bk_attn_args a = {B, T, C, NH, 0, mask, gate, lse};
        be->attention_forward(out[r], NULL, qkv, &a);
        be->attention_backward(dq[r], dg[r], NULL, dout, qkv, NULL, &a);
    }
    omp_set_num_threads(threads);
    cr_expect(memcmp(out[0], out[1], nout * sizeof(float)) == 0, "out differs");
    cr_expect(memcmp(dq[0], dq[1], nqkv * sizeof(float)) == 0, "dqkv differs");
    cr_expect(memcmp(dg[0], dg[1], (size_t)B * NH * sizeof(float)) == 0, "dgate differs");
    for (int r = 0; r < 2; r++) free(out[r]), free(dq[r]), free(dg[r]);
    free(qkv), free(dout), free(mask), free(gate), free(lse);
}
