/* The basic ops of the CPU backend (kernels/cpu_*.c), called through the
 * bk_cpu() table: each against values computed by hand or in closed form,
 * each backward against finite differences (tests/ref/gradcheck.h), backward
 * accumulation (+=) and NULL gradients, and sizes large enough to take the
 * OpenMP paths against the scalar references of tests/ref/ref_ops.h and plain
 * double-precision loops written here. */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk.h"
#include "tests/ref/gradcheck.h"
#include "tests/ref/ref_ops.h"

/* ---- helpers (buffers freed by the suite's fini, tests/opcheck.h) ---- */

#include "tests/opcheck.h"

TestSuite(ops, .fini = release_all);

/* ---- elementwise ---- */

Test(ops, add_axpy_scale_by_hand, .init = init_cpu) {
    float a[3] = {1, 2, 3}, b[3] = {4, 5, -6.5f}, out[3];
    cpu->add(out, a, b, 3);
    expect_near("add", out, (double[]){5, 7, -3.5}, 3, 0);
    cpu->add(a, a, b, 3); /* out aliasing a */
    expect_near("add aliased", a, (double[]){5, 7, -3.5}, 3, 0);
    float y[2] = {1, 2}, x[2] = {3, 4};
    cpu->axpy(y, x, 2.0f, 2);
    expect_near("axpy", y, (double[]){7, 10}, 2, 0);
    cpu->scale(y, -0.5f, 2);
    expect_near("scale", y, (double[]){-3.5, -5}, 2, 0);
}

/* GELU forward and backward on both CPU paths (16-lane AVX-512 where built,
 * and the portable one): every element of [-12, 12] (both saturations, the
 * odd tail) near the double formula, the backward accumulating into dx. */
Test(ops, gelu_both_paths_match_formula, .init = init_cpu) {
    size_t n = (1 << 16) + 13;
    float *x = fbuf(n), *y = fbuf(n), *dy = fbuf(n), *d = fbuf(n);
    for (size_t i = 0; i < n; i++) {
        x[i] = -12.0f + 24.0f * (float)i / (float)(n - 1);
        dy[i] = i % 2 ? 1.0f : -2.0f;
    }
    for (int portable = 0; portable < 2; portable++) {
        for (size_t i = 0; i < n; i++) d[i] = 0.25f;
        bk_cpu_set_portable(portable);
        cpu->gelu_forward(y, x, n);
        cpu->gelu_backward(d, x, dy, n);
        bk_cpu_set_portable(0);
        double wf = 0, wb = 0;
        for (size_t i = 0; i < n; i++) {
            double want = ref_gelu(x[i]), g = ref_gelu_grad(x[i]);
            double got = ((double)d[i] - 0.25) / dy[i];
            wf = fmax(wf, fabs(y[i] - want));
            wb = fmax(wb, fabs(got - g));
            cr_assert(fabs(y[i] - want) <= 1e-6 * (1 + fabs(want)),
                      "portable %d: gelu(%.9g) = %.9g, want %.9g", portable, (double)x[i],
                      (double)y[i], want);
            cr_assert(fabs(got - g) <= 3e-6, "portable %d: gelu'(%.9g) = %.9g, want %.9g", portable,
                      (double)x[i], got, g);
        }
        cr_log_info("gelu, portable %d: worst error forward %.3g, gradient %.3g\n", portable, wf,
                    wb);
    }
}

Test(ops, elementwise_large_matches_scalar, .init = init_cpu) {
    size_t n = (1 << 17) + 3; /* past every threading threshold, odd tail */
    float *a = frand(n, -4, 4, 1), *b = frand(n, -4, 4, 2), *o = fbuf(n);
    cpu->add(o, a, b, n);
    for (size_t i = 0; i < n; i += 997) cr_assert(o[i] == a[i] + b[i], "add at %zu", i);
    float *y = fcopy(a, n);
    cpu->axpy(y, b, 0.25f, n);
    for (size_t i = 0; i < n; i += 997) cr_assert(y[i] == a[i] + 0.25f * b[i], "axpy at %zu", i);
    cpu->scale(y, 3.0f, n);
    cpu->gelu_forward(o, a, n);
    for (size_t i = 0; i < n; i += 101)
        cr_assert(fabs(o[i] - ref_gelu(a[i])) <= 1e-5, "gelu at %zu", i);
    cpu->silu_forward(o, a, n);
    for (size_t i = 0; i < n; i += 101)
        cr_assert(fabs(o[i] - a[i] * ref_sigmoid(a[i])) <= 1e-5, "silu at %zu", i);
    cpu->softplus_forward(o, a, n);
    for (size_t i = 0; i < n; i += 101)
        cr_assert(fabs(o[i] - ref_softplus(a[i])) <= 1e-5, "softplus at %zu", i);
}

Test(ops, gelu_by_hand, .init = init_cpu) {
    /* tanh form: gelu(1) = 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.841191990...,
     * gelu(-1) = gelu(1) - 1; far tails are x and 0. */
    float x[5] = {0, 1, -1, 10, -10}, out[5];
    cpu->gelu_forward(out, x, 5);
    expect_near("gelu", out, (double[]){0, 0.8411919906, -0.1588080094, 10, 0}, 5, 1e-6);
    /* gelu'(0) = 0.5; far tails 1 and 0, also where x^3 overflows. dout = 2,
     * prefill 1. */
    float d[5] = {1, 1, 1, 1, 1}, xs[5] = {0, 10, -10, 1e20f, -1e20f}, g[5] = {2, 2, 2, 2, 2};
    cpu->gelu_backward(d, xs, g, 5);
    expect_near("gelu'", d, (double[]){2, 3, 1, 3, 1}, 5, 1e-6);
    cpu->gelu_forward(out, xs + 3, 2);
    expect_near("gelu far", out, (double[]){1e20, 0}, 2, 1e-6);
}

Test(ops, silu_sigmoid_by_hand, .init = init_cpu) {
    /* sigmoid(ln 3) = 3/4, sigmoid(-ln 3) = 1/4 */
    float l3 = logf(3.0f);
    float x[4] = {0, l3, -l3, -100}, out[4];
    cpu->sigmoid_forward(out, x, 4);
    expect_near("sigmoid", out, (double[]){0.5, 0.75, 0.25, 0}, 4, 1e-6);
    cpu->silu_forward(out, x, 4);
    expect_near("silu", out, (double[]){0, 0.75 * log(3.0), -0.25 * log(3.0), 0}, 4, 1e-6);
    /* sigmoid' from the output: y (1-y) dout; dout = 4 */
    float y[2] = {0.75f, 0.5f}, dout[2] = {4, 4}, d[2] = {1, 1};
    cpu->sigmoid_backward(d, y, dout, 2);
    expect_near("sigmoid'", d, (double[]){1 + 0.75, 1 + 1.0}, 2, 1e-6);
    /* silu'(x) = s (1 + x (1 - s)): at 0 it is 1/2, at ln 3 3/4 (1 + ln3/4) */
    float xs[2] = {0, l3}, ds[2] = {0, 0}, ones[2] = {1, 1};
    cpu->silu_backward(ds, xs, ones, 2);
    expect_near("silu'", ds, (double[]){0.5, 0.75 * (1 + log(3.0) / 4)}, 2, 1e-6);
}

Test(ops, softplus_by_hand_and_stable, .init = init_cpu) {
    float l3 = logf(3.0f);
    float x[5] = {0, l3, 100, 1000, -20}, out[5];
    cpu->softplus_forward(out, x, 5);
    /* softplus(ln 3) = ln 4; no overflow at 1000; tiny but exact at -20 */
    expect_near("softplus", out, (double[]){log(2.0), log(4.0), 100, 1000, 0}, 5, 1e-6);
    cr_assert(fabs(out[4] - 2.0611536e-9) <= 1e-14, "softplus(-20) = %g", (double)out[4]);
    float xn = -100, on;
    cpu->softplus_forward(&on, &xn, 1);
    cr_assert(on >= 0 && on < 1e-40f, "softplus(-100) = %g", (double)on);
    /* softplus' = sigmoid */
    float d[3] = {0, 0, 0}, xs[3] = {0, l3, 1000}, g[3] = {1, 2, 1};
    cpu->softplus_backward(d, xs, g, 3);
    expect_near("softplus'", d, (double[]){0.5, 1.5, 1}, 3, 1e-6);
}

typedef struct {
    void (*fwd)(float *, const float *, size_t);
    float *out, *x;
    size_t n;
} act_ctx;
static void act_eval(void *c) {
    act_ctx *a = c;
    a->fwd(a->out, a->x, a->n);
}

Test(ops, activation_gradchecks, .init = init_cpu) {
    size_t n = 64;
    const char *names[4] = {"gelu", "silu", "sigmoid", "softplus"};
    void (*fwd[4])(float *, const float *, size_t) = {cpu->gelu_forward, cpu->silu_forward,
                                                      cpu->sigmoid_forward, cpu->softplus_forward};
    for (int k = 0; k < 4; k++) {
        float *x = frand(n, -4, 4, 10 + k), *out = fbuf(n), *R = frand(n, -1, 1, 20 + k);
        float *pre = frand(n, -1, 1, 30 + k), *dx = fcopy(pre, n);
        act_ctx c = {fwd[k], out, x, n};
        act_eval(&c);
        if (k == 0) cpu->gelu_backward(dx, x, R, n);
        if (k == 1) cpu->silu_backward(dx, x, R, n);
        if (k == 2) cpu->sigmoid_backward(dx, out, R, n);
        if (k == 3) cpu->softplus_backward(dx, x, R, n);
        gc_op op = {act_eval, &c, out, n, R};
        check_grad(names[k], &op, x, n, dx, pre);
    }
}

/* ---- embeddings ---- */

Test(ops, embedding_by_hand, .init = init_cpu) {
    float table[6] = {1, 2, 3, 4, 5, 6}; /* V=3, C=2 */
    int idx[3] = {2, 0, 2};
    float out[6];
    cpu->embedding_forward(out, idx, table, 3, 2);
    expect_near("embedding", out, (double[]){5, 6, 1, 2, 5, 6}, 6, 0);
    float dout[6] = {1, 2, 3, 4, 10, 20}, dt[6] = {1, 1, 1, 1, 1, 1};
    cpu->embedding_backward(dt, dout, idx, 3, 2);
    /* row 2 gets rows 0 and 2 of dout; row 1 is untouched */
    expect_near("dtable", dt, (double[]){4, 5, 1, 1, 12, 23}, 6, 0);
}

typedef struct {
    float *out, *table;
    int *idx;
    int N, C;
} emb_ctx;
static void emb_eval(void *c) {
    emb_ctx *e = c;
    cpu->embedding_forward(e->out, e->idx, e->table, e->N, e->C);
}

Test(ops, embedding_gradcheck, .init = init_cpu) {
    int V = 4, N = 6, C = 5;
    int idx[6] = {3, 1, 3, 0, 3, 1};
    float *table = frand((size_t)V * C, -1, 1, 1), *out = fbuf((size_t)N * C);
    float *R = frand((size_t)N * C, -1, 1, 2), *pre = frand((size_t)V * C, -1, 1, 3);
    float *dt = fcopy(pre, (size_t)V * C);
    emb_ctx c = {out, table, idx, N, C};
    cpu->embedding_backward(dt, R, idx, N, C);
    gc_op op = {emb_eval, &c, out, (size_t)N * C, R};
    check_grad("embedding dtable", &op, table, (size_t)V * C, dt, pre);
}

Test(ops, embedding_backward_large_is_exact_and_deterministic, .init = init_cpu) {
    /* Many rows hitting few table rows, C spanning several channel chunks:
     * the threaded backward must equal a serial loop bit for bit. */
    int V = 5, N = 3000, C = 300;
    int *idx = take((size_t)N * sizeof(int));
    for (int n = 0; n < N; n++) idx[n] = (n * 7 + n / 3) % V;
    float *dout = frand((size_t)N * C, -1, 1, 4), *pre = frand((size_t)V * C, -1, 1, 5);
    float *dt = fcopy(pre, (size_t)V * C), *ref = fcopy(pre, (size_t)V * C);
    cpu->embedding_backward(dt, dout, idx, N, C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) ref[(size_t)idx[n] * C + c] += dout[(size_t)n * C + c];
    expect_same("dtable", dt, ref, (size_t)V * C);
    float *out = fbuf((size_t)N * C);
    cpu->embedding_forward(out, idx, dout, N, C); /* any [V..,C] table works */
    for (int n = 0; n < N; n += 37)
        expect_same("embedding row", out + (size_t)n * C, dout + (size_t)idx[n] * C, (size_t)C);
}

Test(ops, posadd_by_hand, .init = init_cpu) {
    /* B=2, T=2, C=2 */
    float inp[8] = {1, 2, 3, 4, 5, 6, 7, 8}, pos[4] = {10, 20, 30, 40}, out[8];
    cpu->posadd_forward(out, inp, pos, 2, 2, 2);
    expect_near("posadd", out, (double[]){11, 22, 33, 44, 15, 26, 37, 48}, 8, 0);
    cpu->posadd_forward(inp, inp, pos, 2, 2, 2); /* in place */
    expect_near("posadd in place", inp, (double[]){11, 22, 33, 44, 15, 26, 37, 48}, 8, 0);
    float dout[8] = {1, 2, 3, 4, 5, 6, 7, 8}, dinp[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    float dpos[4] = {100, 100, 100, 100};
    cpu->posadd_backward(dinp, dpos, dout, 2, 2, 2);
    expect_near("dinp", dinp, (double[]){2, 3, 4, 5, 6, 7, 8, 9}, 8, 0);
    expect_near("dpos", dpos, (double[]){106, 108, 110, 112}, 4, 0);
    cpu->posadd_backward(NULL, dpos, dout, 2, 2, 2); /* dinp nullable */
    expect_near("dpos again", dpos, (double[]){112, 116, 120, 124}, 4, 0);
}

typedef struct {
    float *out, *inp, *pos;
    int B, T, C;
} pos_ctx;
static void pos_eval(void *c) {
    pos_ctx *p = c;
    cpu->posadd_forward(p->out, p->inp, p->pos, p->B, p->T, p->C);
}

Test(ops, posadd_gradcheck_and_large, .init = init_cpu) {
    int B = 3, T = 4, C = 5;
    size_t n = (size_t)B * T * C, tc = (size_t)T * C;
    float *inp = frand(n, -1, 1, 1), *pos = frand(tc, -1, 1, 2), *out = fbuf(n);
    float *R = frand(n, -1, 1, 3), *pi = frand(n, -1, 1, 4), *pp = frand(tc, -1, 1, 5);
    float *di = fcopy(pi, n), *dp = fcopy(pp, tc);
    cpu->posadd_backward(di, dp, R, B, T, C);
    pos_ctx c = {out, inp, pos, B, T, C};
    gc_op op = {pos_eval, &c, out, n, R};
    check_grad("posadd dinp", &op, inp, n, di, pi);
    check_grad("posadd dpos", &op, pos, tc, dp, pp);

    /* threaded path against a serial double sum */
    B = 8, T = 64, C = 96;
    n = (size_t)B * T * C, tc = (size_t)T * C;
    float *dout = frand(n, -1, 1, 6), *dpos = fbuf(tc);
    cpu->posadd_backward(NULL, dpos, dout, B, T, C);
    double *want = take(tc * sizeof(double));
    for (int b = 0; b < B; b++)
        for (size_t i = 0; i < tc; i++) want[i] += dout[b * tc + i];
    expect_near("dpos large", dpos, want, tc, 1e-6);
}

/* ---- matrix products ---- */

Test(ops, linear_by_hand, .init = init_cpu) {
    /* inp[2,2], w[3,2] = rows (1,0), (0,1), (1,1), bias (0.5, -1, 2) */
    float inp[4] = {1, 2, 3, 4}, w[6] = {1, 0, 0, 1, 1, 1}, bias[3] = {0.5f, -1, 2}, out[6];
    cpu->linear_forward(out, inp, w, bias, 2, 2, 3);
    expect_near("linear", out, (double[]){1.5, 1, 5, 3.5, 3, 9}, 6, 0);
    for (int i = 0; i < 6; i++) out[i] = NAN; /* the forward overwrites, even without bias */
    cpu->linear_forward(out, inp, w, NULL, 2, 2, 3);
    expect_near("linear no bias", out, (double[]){1, 2, 3, 3, 4, 7}, 6, 0);
    /* dout = ones: dinp = ones @ w = (2, 2) per row; dw = ones^T @ inp = (4, 6)
     * per row; dbias = (2, 2, 2). Prefilled with 1. */
    float dout[6] = {1, 1, 1, 1, 1, 1};
    float dinp[4] = {1, 1, 1, 1}, dw[6] = {1, 1, 1, 1, 1, 1}, db[3] = {1, 1, 1};
    cpu->linear_backward(dinp, dw, db, dout, inp, w, 2, 2, 3);
    expect_near("dinp", dinp, (double[]){3, 3, 3, 3}, 4, 0);
    expect_near("dw", dw, (double[]){5, 7, 5, 7, 5, 7}, 6, 0);
    expect_near("dbias", db, (double[]){3, 3, 3}, 3, 0);
}

typedef struct {
    float *out, *inp, *w, *b;
    int N, IC, OC;
} lin_ctx;
static void lin_eval(void *c) {
    lin_ctx *l = c;
    cpu->linear_forward(l->out, l->inp, l->w, l->b, l->N, l->IC, l->OC);
}

static void linear_gradcheck(int with_bias) {
    int N = 5, IC = 7, OC = 6;
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = frand(ni, -1, 1, 1), *w = frand(nw, -1, 1, 2);
    float *b = with_bias ? frand((size_t)OC, -1, 1, 3) : NULL;
    float *out = fbuf(no), *R = frand(no, -1, 1, 4);
    float *pi = frand(ni, -1, 1, 5), *pw = frand(nw, -1, 1, 6), *pb = frand((size_t)OC, -1, 1, 7);
    float *di = fcopy(pi, ni), *dw = fcopy(pw, nw), *db = fcopy(pb, (size_t)OC);
    cpu->linear_backward(di, dw, with_bias ? db : NULL, R, inp, w, N, IC, OC);
    lin_ctx c = {out, inp, w, b, N, IC, OC};
    gc_op op = {lin_eval, &c, out, no, R};
    check_grad("linear dinp", &op, inp, ni, di, pi);
    check_grad("linear dw", &op, w, nw, dw, pw);
    if (with_bias)
        check_grad("linear dbias", &op, b, (size_t)OC, db, pb);
    else
        expect_same("dbias untouched", db, pb, (size_t)OC);

    /* each gradient alone (the others NULL) gives the same numbers */
    float *di2 = fcopy(pi, ni), *dw2 = fcopy(pw, nw), *db2 = fcopy(pb, (size_t)OC);
    cpu->linear_backward(di2, NULL, NULL, R, inp, w, N, IC, OC);
    cpu->linear_backward(NULL, dw2, NULL, R, inp, w, N, IC, OC);
    if (with_bias) cpu->linear_backward(NULL, NULL, db2, R, inp, w, N, IC, OC);
    cpu->linear_backward(NULL, NULL, NULL, R, inp, w, N, IC, OC);
    expect_same("dinp alone", di2, di, ni);
    expect_same("dw alone", dw2, dw, nw);
    expect_same("dbias alone", db2, db, (size_t)OC);
}

Test(ops, linear_gradcheck_bias, .init = init_cpu) { linear_gradcheck(1); }
Test(ops, linear_gradcheck_no_bias, .init = init_cpu) { linear_gradcheck(0); }

Test(ops, linear_large_matches_naive, .init = init_cpu) {
    int N = 300, IC = 48, OC = 260; /* N*OC over the dbias threading threshold */
    float *inp = frand((size_t)N * IC, -1, 1, 1), *w = frand((size_t)OC * IC, -1, 1, 2);
    float *b = frand((size_t)OC, -1, 1, 3), *out = fbuf((size_t)N * OC);
    float *dout = frand((size_t)N * OC, -1, 1, 4), *db = fbuf((size_t)OC);
    cpu->linear_forward(out, inp, w, b, N, IC, OC);
    cpu->linear_backward(NULL, NULL, db, dout, inp, w, N, IC, OC);
    for (int n = 0; n < N; n += 13)
        for (int o = 0; o < OC; o += 7) {
            double s = b[o];
            for (int i = 0; i < IC; i++) s += (double)inp[n * IC + i] * w[o * IC + i];
            cr_assert(fabs(out[n * OC + o] - s) <= 1e-4, "out[%d,%d] %g vs %g", n, o,
                      (double)out[n * OC + o], s);
        }
    for (int o = 0; o < OC; o++) {
        double s = 0;
        for (int n = 0; n < N; n++) s += dout[n * OC + o];
        cr_assert(fabs(db[o] - s) <= 1e-4, "dbias[%d] %g vs %g", o, (double)db[o], s);
    }
}

Test(ops, gemm_by_hand, .init = init_cpu) {
    /* A = [[1,2],[3,4]], B = [[5,6],[7,8]] */
    float A[4] = {1, 2, 3, 4}, B[4] = {5, 6, 7, 8}, C[4];
    cpu->gemm(0, 0, 2, 2, 2, 1.0f, A, 2, 0, B, 2, 0, 0.0f, C, 2, 0, 1);
    expect_near("AB", C, (double[]){19, 22, 43, 50}, 4, 0);
    cpu->gemm(1, 0, 2, 2, 2, 1.0f, A, 2, 0, B, 2, 0, 0.0f, C, 2, 0, 1);
    expect_near("A^T B", C, (double[]){26, 30, 38, 44}, 4, 0);
    cpu->gemm(0, 1, 2, 2, 2, 1.0f, A, 2, 0, B, 2, 0, 0.0f, C, 2, 0, 1);
    expect_near("A B^T", C, (double[]){17, 23, 39, 53}, 4, 0);
    /* alpha and beta: C = 2 A^T B^T + 1 * (A^T B^T) = 3 A^T B^T; A^T B^T = (BA)^T */
    cpu->gemm(1, 1, 2, 2, 2, 1.0f, A, 2, 0, B, 2, 0, 0.0f, C, 2, 0, 1);
    expect_near("A^T B^T", C, (double[]){23, 31, 34, 46}, 4, 0);
    cpu->gemm(1, 1, 2, 2, 2, 2.0f, A, 2, 0, B, 2, 0, 1.0f, C, 2, 0, 1);
    expect_near("3 A^T B^T", C, (double[]){69, 93, 102, 138}, 4, 0);
}

Test(ops, gemm_strided_batched_matches_naive, .init = init_cpu) {
    /* Padded leading dimensions and gaps between batch items, every op(A),
     * op(B) combination, beta != 0. */
    int M = 5, N = 7, K = 6, batch = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
            int lda = acols + 2, ldb = bcols + 3, ldc = N + 1;
            long long sA = (long long)arows * lda + 5, sB = (long long)brows * ldb + 1,
                      sC = (long long)M * ldc + 4;
            float *A = frand((size_t)(sA * batch), -1, 1, 1 + ta),
                  *Bm = frand((size_t)(sB * batch), -1, 1, 3 + tb);
            float *C = frand((size_t)(sC * batch), -1, 1, 5), *C0 = fcopy(C, (size_t)(sC * batch));
            cpu->gemm(ta, tb, M, N, K, 0.5f, A, lda, sA, Bm, ldb, sB, -2.0f, C, ldc, sC, batch);
            for (int i = 0; i < batch; i++)
                for (int r = 0; r < M; r++)
                    for (int c = 0; c < ldc; c++) {
                        size_t ci = (size_t)(i * sC + r * ldc + c);
                        if (c >= N) { /* padding is not written */
                            cr_assert(C[ci] == C0[ci], "padding written at %zu", ci);
                            continue;
                        }
                        double s = 0;
                        for (int k = 0; k < K; k++) {
                            double a = ta ? A[i * sA + k * lda + r] : A[i * sA + r * lda + k];
                            double b = tb ? Bm[i * sB + c * ldb + k] : Bm[i * sB + k * ldb + c];
                            s += a * b;
                        }
                        double want = 0.5 * s - 2.0 * C0[ci];
                        cr_assert(fabs(C[ci] - want) <= 1e-5,
                                  "ta %d tb %d item %d (%d,%d): %g vs %g", ta, tb, i, r, c,
                                  (double)C[ci], want);
                    }
        }
}

/* Reductions A^T B over many rows with a small output (M, N <= 128, K >=
 * 512: weight gradients) take the CPU's own chunked kernel: the AVX-512 one
 * where it is built, the portable one on other CPUs (and under
 * bk_cpu_set_portable, so both are run here). Either way they match the
 * naive product, with strides, alpha, beta, a last chunk cut short and NaN
 * in C under beta 0; and the result is the same bits with one thread as with
 * two (the split of K is fixed, never the thread count's). */
Test(ops, gemm_tall_reductions_match_naive, .init = init_cpu) {
    static const int Ms[] = {1, 36, 128}, Ns[] = {4, 17, 64, 128};
    for (int portable = 0; portable < 2; portable++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
            for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
                for (int zero_beta = 0; zero_beta < 2; zero_beta++) {
                    int M = Ms[mi], N = Ns[ni], K = 700, batch = 2;
                    int lda = M + 3, ldb = N + 1, ldc = N + 2;
                    long long sA = (long long)K * lda + 7, sB = (long long)K * ldb + 2,
                              sC = (long long)M * ldc + 5;
                    float *A = frand((size_t)(sA * batch), -1, 1, 31),
                          *Bm = frand((size_t)(sB * batch), -1, 1, 32);
                    float *C = frand((size_t)(sC * batch), -1, 1, 33);
                    for (long long i = 0; zero_beta && i < sC * batch; i++) C[i] = NAN;
                    float *C0 = fcopy(C, (size_t)(sC * batch)),
                          *C1 = fcopy(C, (size_t)(sC * batch));
                    float beta = zero_beta ? 0.0f : 0.5f;
                    bk_cpu_set_portable(portable);
                    cpu->gemm(1, 0, M, N, K, -1.5f, A, lda, sA, Bm, ldb, sB, beta, C, ldc, sC,
                              batch);
                    for (int i = 0; i < batch; i++)
                        for (int r = 0; r < M; r++)
                            for (int c = 0; c < N; c++) {
                                size_t ci = (size_t)(i * sC + r * ldc + c);
                                double acc = 0;
                                for (int k = 0; k < K; k++)
                                    acc +=
                                        (double)A[i * sA + k * lda + r] * Bm[i * sB + k * ldb + c];
                                double want = -1.5 * acc + (zero_beta ? 0.0 : 0.5 * C0[ci]);
                                cr_assert(fabs(C[ci] - want) <= 1e-4 * (1 + fabs(want)),
                                          "portable %d M %d N %d beta %g item %d (%d,%d): %g vs %g",
                                          portable, M, N, (double)beta, i, r, c, (double)C[ci],
                                          want);
                            }
                    int threads = omp_get_max_threads();
                    cr_assert(threads >= 2, "this check needs 2 threads (OMP_NUM_THREADS), has %d",
                              threads);
                    omp_set_num_threads(1);
                    cpu->gemm(1, 0, M, N, K, -1.5f, A, lda, sA, Bm, ldb, sB, beta, C1, ldc, sC,
                              batch);
                    omp_set_num_threads(threads);
                    bk_cpu_set_portable(0);
                    cr_assert(memcmp(C1, C, (size_t)(sC * batch) * sizeof(float)) == 0,
                              "portable %d M %d N %d: one thread gives other bits", portable, M, N);
                    release_all();
                }
}

/* Skinny products A B^T and A B (N <= 128, K <= 1024, M >= 32) take the
 * CPU's own kernel on AVX-512 machines and sgemm elsewhere: either way they
 * match the naive product, with strides, alpha and beta; beta 0 never reads
 * C (NaN there stays out of the result); with the CPU's own kernel a row's
 * result does not depend on M. */
Test(ops, gemm_skinny_products_match_naive, .init = init_cpu) {
    static const int Ns[] = {1, 15, 16, 17, 36, 48, 49, 64, 65, 100, 128, 129};
    static const int Ks[] = {1, 7, 128};
    for (int tb = 0; tb < 2; tb++) /* B [K,N] (A B), then [N,K] (A B^T) */
        for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
            for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
                for (int zero_beta = 0; zero_beta < 2; zero_beta++) {
                    int M = 45, N = Ns[ni], K = Ks[ki], batch = 3;
                    int lda = K + 3, ldb = tb ? K + 1 : N + 1, ldc = N + 2;
                    long long sA = (long long)M * lda + 7, sB = (long long)(tb ? N : K) * ldb + 2,
                              sC = (long long)M * ldc + 5;
                    float *A = frand((size_t)(sA * batch), -1, 1, 11),
                          *Bm = frand((size_t)(sB * batch), -1, 1, 12);
                    float *C = frand((size_t)(sC * batch), -1, 1, 13);
                    for (long long i = 0; zero_beta && i < sC * batch; i++) C[i] = NAN;
                    float *C0 = fcopy(C, (size_t)(sC * batch));
                    float beta = zero_beta ? 0.0f : -2.0f;
                    cpu->gemm(0, tb, M, N, K, 0.5f, A, lda, sA, Bm, ldb, sB, beta, C, ldc, sC,
                              batch);
                    for (int i = 0; i < batch; i++)
                        for (int r = 0; r < M; r++)
                            for (int c = 0; c < ldc; c++) {
                                size_t ci = (size_t)(i * sC + r * ldc + c);
                                if (c >= N) {
                                    cr_assert(memcmp(&C[ci], &C0[ci], sizeof(float)) == 0,
                                              "N %d K %d: padding written at %zu", N, K, ci);
                                    continue;
                                }
                                double acc = 0;
                                for (int k = 0; k < K; k++)
                                    acc += (double)A[i * sA + r * lda + k] *
                                           Bm[i * sB + (tb ? c * ldb + k : k * ldb + c)];
                                double want = 0.5 * acc + (zero_beta ? 0.0 : -2.0 * C0[ci]);
                                cr_assert(fabs(C[ci] - want) <= 1e-5 * (1 + fabs(want)),
                                          "transb %d N %d K %d beta %g item %d (%d,%d): %g vs %g",
                                          tb, N, K, (double)beta, i, r, c, (double)C[ci], want);
                            }
#if defined(__AVX512F__)
                    /* the first 33 rows alone: the same bits (the CPU's own kernel;
                     * sgemm's blocking depends on M) */
                    if (N > 128) {
                        release_all();
                        continue;
                    }
                    float *C2 = fcopy(C0, (size_t)(sC * batch));
                    cpu->gemm(0, tb, 33, N, K, 0.5f, A, lda, sA, Bm, ldb, sB, beta, C2, ldc, sC,
                              batch);
                    for (int i = 0; i < batch; i++)
                        for (int r = 0; r < 33; r++)
                            cr_assert(memcmp(C2 + i * sC + r * ldc, C + i * sC + r * ldc,
                                             (size_t)N * sizeof(float)) == 0,
                                      "N %d K %d: row %d of item %d differs with M 33", N, K, r, i);
#endif
                    release_all(); /* the buffer table holds a few cases at a time */
                }
    /* a layer with few outputs (a classifier head): bias, then the product */
    int Nr = 70, IC = 40, OC = 10;
    float *inp = frand((size_t)Nr * IC, -1, 1, 21), *w = frand((size_t)OC * IC, -1, 1, 22);
    float *b = frand((size_t)OC, -1, 1, 23), *out = fbuf((size_t)Nr * OC);
    cpu->linear_forward(out, inp, w, b, Nr, IC, OC);
    for (int n = 0; n < Nr; n++)
        for (int o = 0; o < OC; o++) {
            double acc = b[o];
            for (int i = 0; i < IC; i++) acc += (double)inp[n * IC + i] * w[o * IC + i];
            cr_assert(fabs(out[n * OC + o] - acc) <= 1e-5 * (1 + fabs(acc)), "linear (%d,%d)", n,
                      o);
        }
}

/* ---- normalisation ---- */

Test(ops, layernorm_by_hand, .init = init_cpu) {
    /* row (1,2,3,4): mean 2.5, variance 1.25; row (5,5,5,5): variance 0 */
    float inp[8] = {1, 2, 3, 4, 5, 5, 5, 5}, w[4] = {1, 1, 2, 2}, b[4] = {0, 1, 0, -1};
    float out[8], mean[2], rstd[2];
    cpu->layernorm_forward(out, mean, rstd, inp, w, b, 2, 4);
    double r = 1.0 / sqrt(1.25 + 1e-5), r2 = 1.0 / sqrt(1e-5);
    expect_near("mean", mean, (double[]){2.5, 5}, 2, 1e-7);
    expect_near("rstd", rstd, (double[]){r, r2}, 2, 1e-5);
    expect_near("ln", out, (double[]){-1.5 * r, -0.5 * r + 1, 1.0 * r, 3.0 * r - 1, 0, 1, 0, -1}, 8,
                1e-5);
    /* Backward, row 0, dout = e_0 and w = 1 pattern above:
     * g = w*dout = (1,0,0,0); mean g = 1/4; xhat = r(-1.5,-.5,.5,1.5);
     * mean(g xhat) = -1.5 r / 4; dx = r (g - 1/4 - xhat * mean(g xhat)). */
    float dout[8] = {1, 0, 0, 0, 0, 0, 0, 0}, dinp[8] = {0}, dw[4] = {1, 1, 1, 1}, db[4] = {0};
    cpu->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, 2, 4);
    double xh[4] = {-1.5 * r, -0.5 * r, 0.5 * r, 1.5 * r}, mgx = -1.5 * r / 4, want[4];
    for (int c = 0; c < 4; c++) want[c] = r * ((c == 0) - 0.25 - xh[c] * mgx);
    expect_near("ln dinp", dinp, want, 4, 1e-5);
    expect_near("ln dw", dw, (double[]){1 - 1.5 * r, 1, 1, 1}, 4, 1e-5);
    expect_near("ln db", db, (double[]){1, 0, 0, 0}, 4, 0);
}

typedef struct {
    float *out, *mean, *rstd, *inp, *w, *b;
    int N, C;
} ln_ctx;
static void ln_eval(void *c) {
    ln_ctx *l = c;
    cpu->layernorm_forward(l->out, l->mean, l->rstd, l->inp, l->w, l->b, l->N, l->C);
}

Test(ops, layernorm_gradcheck, .init = init_cpu) {
    int N = 4, C = 8;
    size_t n = (size_t)N * C;
    float *inp = frand(n, -2, 2, 1), *w = frand((size_t)C, 0.5f, 1.5f, 2),
          *b = frand((size_t)C, -1, 1, 3);
    float *out = fbuf(n), *mean = fbuf((size_t)N), *rstd = fbuf((size_t)N), *R = frand(n, -1, 1, 4);
    float *pi = frand(n, -1, 1, 5), *pw = frand((size_t)C, -1, 1, 6),
          *pb = frand((size_t)C, -1, 1, 7);
    float *di = fcopy(pi, n), *dw = fcopy(pw, (size_t)C), *db = fcopy(pb, (size_t)C);
    ln_ctx c = {out, mean, rstd, inp, w, b, N, C};
    ln_eval(&c);
    cpu->layernorm_backward(di, dw, db, R, inp, w, mean, rstd, N, C);
    gc_op op = {ln_eval, &c, out, n, R};
    check_grad("layernorm dinp", &op, inp, n, di, pi);
    check_grad("layernorm dw", &op, w, (size_t)C, dw, pw);
    check_grad("layernorm db", &op, b, (size_t)C, db, pb);
    /* NULL gradients: each alone equals its part of the full call */
    float *di2 = fcopy(pi, n), *dw2 = fcopy(pw, (size_t)C), *db2 = fcopy(pb, (size_t)C);
    cpu->layernorm_backward(di2, NULL, NULL, R, inp, w, mean, rstd, N, C);
    cpu->layernorm_backward(NULL, dw2, NULL, R, inp, w, mean, rstd, N, C);
    cpu->layernorm_backward(NULL, NULL, db2, R, inp, w, mean, rstd, N, C);
    cpu->layernorm_backward(NULL, NULL, NULL, R, inp, w, mean, rstd, N, C);
    expect_same("ln dinp alone", di2, di, n);
    expect_same("ln dw alone", dw2, dw, (size_t)C);
    expect_same("ln db alone", db2, db, (size_t)C);
}

Test(ops, layernorm_large_matches_double, .init = init_cpu) {
    int N = 96, C = 384; /* threaded rows and channel chunks */
    size_t n = (size_t)N * C;
    float *inp = frand(n, -3, 5, 1), *w = frand((size_t)C, 0.5f, 1.5f, 2),
          *b = frand((size_t)C, -1, 1, 3);
    float *out = fbuf(n), *mean = fbuf((size_t)N), *rstd = fbuf((size_t)N),
          *dout = frand(n, -1, 1, 4);
    float *di = fbuf(n), *dw = fbuf((size_t)C), *db = fbuf((size_t)C);
    cpu->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    cpu->layernorm_backward(di, dw, db, dout, inp, w, mean, rstd, N, C);
    double *wdi = take(n * sizeof(double)), *wdw = take(C * sizeof(double)),
           *wdb = take(C * sizeof(double));
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * C, *d = dout + (size_t)r * C;
        double m = 0, v = 0, sg = 0, sgx = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        double rs = 1.0 / sqrt(v / C + 1e-5);
        for (int c = 0; c < C; c++) {
            double xh = (x[c] - m) * rs;
            cr_assert(fabs(out[(size_t)r * C + c] - (xh * w[c] + b[c])) <= 1e-5, "ln out %d,%d", r,
                      c);
            sg += w[c] * d[c];
            sgx += w[c] * d[c] * xh;
            wdw[c] += d[c] * xh;
            wdb[c] += d[c];
        }
        for (int c = 0; c < C; c++)
            wdi[(size_t)r * C + c] = rs * (w[c] * d[c] - sg / C - (x[c] - m) * rs * sgx / C);
    }
    expect_near("ln dinp large", di, wdi, n, 1e-4);
    expect_near("ln dw large", dw, wdw, (size_t)C, 1e-4);
    expect_near("ln db large", db, wdb, (size_t)C, 1e-4);
}

Test(ops, softmax_by_hand, .init = init_cpu) {
    /* softmax(0, ln 2, ln 3) = (1, 2, 3)/6, also shifted by 1000 (stability) */
    float x[6] = {0, logf(2), logf(3), 1000, 1000 + logf(2), 1000 + logf(3)}, y[6];
    cpu->softmax_forward(y, x, 2, 3);
    expect_near("softmax", y, (double[]){1. / 6, 2. / 6, 3. / 6, 1. / 6, 2. / 6, 3. / 6}, 6, 1e-4);
    /* dout = e_0: dinp = y (e_0 - y_0) = (1/6 * 5/6, -2/6 * 1/6, -3/6 * 1/6) */
    float yh[3] = {1.f / 6, 2.f / 6, 3.f / 6}, d[3] = {1, 0, 0}, dx[3] = {1, 1, 1};
    cpu->softmax_backward(dx, yh, d, 1, 3);
    expect_near("softmax'", dx, (double[]){1 + 5. / 36, 1 - 2. / 36, 1 - 3. / 36}, 3, 1e-6);
    /* a fully masked row gives zeros, not NaN */
    float xm[2] = {-INFINITY, -INFINITY}, ym[2];
    cpu->softmax_forward(ym, xm, 1, 2);
    expect_near("masked row", ym, (double[]){0, 0}, 2, 0);
}

typedef struct {
    float *out, *inp;
    int N, C;
} sm_ctx;
static void sm_eval(void *c) {
    sm_ctx *s = c;
    cpu->softmax_forward(s->out, s->inp, s->N, s->C);
}

Test(ops, softmax_gradcheck_and_large, .init = init_cpu) {
    int N = 4, C = 9;
    size_t n = (size_t)N * C;
    float *x = frand(n, -3, 3, 1), *y = fbuf(n), *R = frand(n, -1, 1, 2), *pre = frand(n, -1, 1, 3);
    float *dx = fcopy(pre, n);
    sm_ctx c = {y, x, N, C};
    sm_eval(&c);
    cpu->softmax_backward(dx, y, R, N, C);
    gc_op op = {sm_eval, &c, y, n, R};
    check_grad("softmax", &op, x, n, dx, pre);

    N = 64, C = 500;
    n = (size_t)N * C;
    float *xl = frand(n, -10, 10, 4), *yl = fbuf(n);
    cpu->softmax_forward(yl, xl, N, C);
    for (int r = 0; r < N; r++) {
        double mx = -1e30, s = 0;
        for (int k = 0; k < C; k++) mx = fmax(mx, xl[(size_t)r * C + k]);
        for (int k = 0; k < C; k++) s += exp(xl[(size_t)r * C + k] - mx);
        for (int k = 0; k < C; k += 11) {
            double want = exp(xl[(size_t)r * C + k] - mx) / s;
            cr_assert(fabs(yl[(size_t)r * C + k] - want) <= 1e-6 + 1e-5 * want, "softmax %d,%d", r,
                      k);
        }
    }
}

/* ---- pooling and losses ---- */

Test(ops, meanpool_by_hand, .init = init_cpu) {
    /* B=2, T=3, C=2; sample 0 keeps tokens 0 and 2, sample 1 has none */
    float inp[12] = {1, 2, 100, 200, 5, 8, 1, 1, 1, 1, 1, 1}, mask[6] = {1, 0, 1, 0, 0, 0}, out[4];
    cpu->meanpool_forward(out, inp, mask, 2, 3, 2);
    expect_near("meanpool masked", out, (double[]){3, 5, 0, 0}, 4, 0);
    cpu->meanpool_forward(out, inp, NULL, 2, 3, 2);
    expect_near("meanpool", out, (double[]){106. / 3, 210. / 3, 1, 1}, 4, 1e-6);
    float dout[4] = {2, 4, 6, 8}, dinp[12];
    for (int i = 0; i < 12; i++) dinp[i] = 1;
    cpu->meanpool_backward(dinp, dout, mask, 2, 3, 2);
    expect_near("meanpool' masked", dinp, (double[]){2, 3, 1, 1, 2, 3, 1, 1, 1, 1, 1, 1}, 12, 0);
    cpu->meanpool_backward(dinp, dout, NULL, 2, 3, 2);
    expect_near("meanpool'", dinp,
                (double[]){2 + 2. / 3, 3 + 4. / 3, 1 + 2. / 3, 1 + 4. / 3, 2 + 2. / 3, 3 + 4. / 3,
                           3, 1 + 8. / 3, 3, 1 + 8. / 3, 3, 1 + 8. / 3},
                12, 1e-6);
}

typedef struct {
    float *out, *inp, *mask;
    int B, T, C;
} mp_ctx;
static void mp_eval(void *c) {
    mp_ctx *m = c;
    cpu->meanpool_forward(m->out, m->inp, m->mask, m->B, m->T, m->C);
}

Test(ops, meanpool_gradcheck_and_large, .init = init_cpu) {
    int B = 3, T = 5, C = 4;
    size_t n = (size_t)B * T * C;
    float mask[15] = {1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1};
    for (int k = 0; k < 2; k++) {
        float *m = k ? NULL : mask;
        float *x = frand(n, -1, 1, 1), *out = fbuf((size_t)B * C),
              *R = frand((size_t)B * C, -1, 1, 2);
        float *pre = frand(n, -1, 1, 3), *dx = fcopy(pre, n);
        mp_ctx c = {out, x, m, B, T, C};
        cpu->meanpool_backward(dx, R, m, B, T, C);
        gc_op op = {mp_eval, &c, out, (size_t)B * C, R};
        check_grad(k ? "meanpool" : "meanpool masked", &op, x, n, dx, pre);
    }
    B = 4, T = 64, C = 128;
    n = (size_t)B * T * C;
    float *x = frand(n, -1, 1, 4), *ml = frand((size_t)B * T, 0, 1, 5), *out = fbuf((size_t)B * C);
    for (int i = 0; i < B * T; i++) ml[i] = ml[i] < 0.3f ? 0.0f : 1.0f;
    cpu->meanpool_forward(out, x, ml, B, T, C);
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            double s = 0, cnt = 0;
            for (int t = 0; t < T; t++) {
                s += ml[b * T + t] * x[((size_t)b * T + t) * C + c];
                cnt += ml[b * T + t];
            }
            cr_assert(fabs(out[b * C + c] - s / cnt) <= 1e-5, "meanpool %d,%d", b, c);
        }
}

Test(ops, crossentropy_by_hand, .init = init_cpu) {
    /* logits (0, ln 2, ln 3): p = (1,2,3)/6; target 2 -> ln 2; target 0 -> ln 6;
     * ignored row -> 0; (1000, 0) target 1 -> 1000 (no overflow, no inf) */
    float l2 = logf(2), l3 = logf(3);
    float lg[9] = {0, l2, l3, 0, l2, l3, 0, l2, l3};
    int tg[3] = {2, 0, -1};
    float losses[3], probs[9];
    cpu->crossentropy_forward(losses, probs, lg, tg, 3, 3);
    expect_near("ce", losses, (double[]){log(2.0), log(6.0), 0}, 3, 1e-6);
    expect_near("ce probs", probs,
                (double[]){1. / 6, 2. / 6, 3. / 6, 1. / 6, 2. / 6, 3. / 6, 1. / 6, 2. / 6, 3. / 6},
                9, 1e-6);
    float big[2] = {1000, 0}, bl, bp[2];
    int bt = 1;
    cpu->crossentropy_forward(&bl, bp, big, &bt, 1, 2);
    cr_assert(fabs(bl - 1000) <= 1e-3, "ce at large logits: %g", (double)bl);
    /* dlogits += (p - onehot) * dloss, dloss = (2, 3, 5); the ignored row
     * keeps its prefill of 1 */
    float dl[3] = {2, 3, 5}, d[9];
    for (int i = 0; i < 9; i++) d[i] = 1;
    cpu->crossentropy_backward(d, probs, tg, dl, 3, 3);
    expect_near("ce'", d,
                (double[]){1 + 2. / 6, 1 + 4. / 6, 1 + 2 * (3. / 6 - 1), 1 + 3 * (1. / 6 - 1),
                           1 + 1, 1 + 1.5, 1, 1, 1},
                9, 1e-6);
}

typedef struct {
    float *losses, *probs, *logits;
    int *tg;
    int N, V;
} ce_ctx;
static void ce_eval(void *c) {
    ce_ctx *e = c;
    cpu->crossentropy_forward(e->losses, e->probs, e->logits, e->tg, e->N, e->V);
}

Test(ops, crossentropy_gradcheck_and_large, .init = init_cpu) {
    int N = 5, V = 7;
    int tg[5] = {3, -1, 0, 6, 2};
    size_t n = (size_t)N * V;
    float *x = frand(n, -3, 3, 1), *probs = fbuf(n), *losses = fbuf((size_t)N);
    float *R = frand((size_t)N, 0.5f, 2, 2), *pre = frand(n, -1, 1, 3), *dx = fcopy(pre, n);
    ce_ctx c = {losses, probs, x, tg, N, V};
    ce_eval(&c);
    cpu->crossentropy_backward(dx, probs, tg, R, N, V);
    gc_op op = {ce_eval, &c, losses, (size_t)N, R};
    check_grad("crossentropy", &op, x, n, dx, pre);

    N = 40, V = 1000;
    n = (size_t)N * V;
    int *tl = take((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) tl[i] = (i * 37) % V;
    float *xl = frand(n, -8, 8, 4), *pl = fbuf(n), *ll = fbuf((size_t)N);
    cpu->crossentropy_forward(ll, pl, xl, tl, N, V);
    for (int r = 0; r < N; r++) {
        double mx = -1e30, s = 0;
        for (int k = 0; k < V; k++) mx = fmax(mx, xl[(size_t)r * V + k]);
        for (int k = 0; k < V; k++) s += exp(xl[(size_t)r * V + k] - mx);
        double want = log(s) + mx - xl[(size_t)r * V + tl[r]];
        cr_assert(fabs(ll[r] - want) <= 1e-4, "ce row %d: %g vs %g", r, (double)ll[r], want);
    }
}

Test(ops, mse_by_hand, .init = init_cpu) {
    /* a = rows (1,2), (3,4), (5,6), b = 0, mask (1,0,1):
     * (1 + 4 + 25 + 36) / (2 * 2) = 16.5; no mask: 91 / 6; mask 0: 0 */
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0}, mask[3] = {1, 0, 1}, zero[3] = {0}, loss;
    cpu->mse_forward(&loss, a, b, mask, 3, 2);
    cr_assert(fabs(loss - 16.5) <= 1e-6, "masked mse %g", (double)loss);
    cpu->mse_forward(&loss, a, b, NULL, 3, 2);
    cr_assert(fabs(loss - 91.0 / 6) <= 1e-5, "mse %g", (double)loss);
    cpu->mse_forward(&loss, a, b, zero, 3, 2);
    cr_assert(loss == 0.0f, "all masked mse %g", (double)loss);
    /* da += dloss * 2 mask (a-b) / 4 with dloss 2: (1,2), 0, (5,6) on a prefill of 1;
     * db gets the negatives */
    float da[6] = {1, 1, 1, 1, 1, 1}, db[6] = {1, 1, 1, 1, 1, 1};
    cpu->mse_backward(da, db, a, b, mask, 2.0f, 3, 2);
    expect_near("mse da", da, (double[]){2, 3, 1, 1, 6, 7}, 6, 1e-6);
    expect_near("mse db", db, (double[]){0, -1, 1, 1, -4, -5}, 6, 1e-6);
    cpu->mse_backward(NULL, db, a, b, mask, 2.0f, 3, 2);
    cpu->mse_backward(da, NULL, a, b, mask, 2.0f, 3, 2);
    cpu->mse_backward(NULL, NULL, a, b, mask, 2.0f, 3, 2);
    expect_near("mse da again", da, (double[]){3, 5, 1, 1, 11, 13}, 6, 1e-6);
    expect_near("mse db again", db, (double[]){-1, -3, 1, 1, -9, -11}, 6, 1e-6);
}

typedef struct {
    float *loss, *a, *b, *mask;
    int N, C;
} mse_ctx;
static void mse_eval(void *c) {
    mse_ctx *m = c;
    cpu->mse_forward(m->loss, m->a, m->b, m->mask, m->N, m->C);
}

Test(ops, mse_gradcheck_and_large, .init = init_cpu) {
    int N = 4, C = 5;
    size_t n = (size_t)N * C;
    float mask[4] = {1, 0, 1, 1};
    for (int k = 0; k < 2; k++) {
        float *m = k ? NULL : mask;
        float *a = frand(n, -1, 1, 1), *b = frand(n, -1, 1, 2), loss, R = 1.7f;
        float *pa = frand(n, -1, 1, 3), *pb = frand(n, -1, 1, 4), *da = fcopy(pa, n),
              *db = fcopy(pb, n);
        mse_ctx c = {&loss, a, b, m, N, C};
        cpu->mse_backward(da, db, a, b, m, R, N, C);
        gc_op op = {mse_eval, &c, &loss, 1, &R};
        check_grad(k ? "mse da" : "masked mse da", &op, a, n, da, pa);
        check_grad(k ? "mse db" : "masked mse db", &op, b, n, db, pb);
    }
    N = 500, C = 96;
    n = (size_t)N * C;
    float *a = frand(n, -1, 1, 5), *b = frand(n, -1, 1, 6), *ml = frand((size_t)N, 0, 1, 7), loss;
    double s = 0, cnt = 0;
    for (int i = 0; i < N; i++) {
        ml[i] = ml[i] < 0.5f ? 0.0f : 1.0f;
        cnt += ml[i];
        for (int c = 0; c < C; c++)
            s += ml[i] * ((double)a[i * C + c] - b[i * C + c]) * (a[i * C + c] - b[i * C + c]);
    }
    cpu->mse_forward(&loss, a, b, ml, N, C);
    cr_assert(fabs(loss - s / (C * cnt)) <= 1e-5, "large mse %g vs %g", (double)loss,
              s / (C * cnt));
}

Test(ops, global_norm, .init = init_cpu) {
    float g[2] = {3, 4};
    cr_assert(fabs(cpu->global_norm(g, 2) - 5.0f) <= 1e-6, "norm(3,4)");
    cr_assert(cpu->global_norm(g, 0) == 0.0f, "empty norm");
    size_t n = 1000003; /* threaded path, odd tail */
    float *x = fbuf(n);
    for (size_t i = 0; i < n; i++) x[i] = (i % 2) ? 1.0f : -1.0f;
    cr_assert(fabs(cpu->global_norm(x, n) - sqrt((double)n)) <= 1e-3, "norm of +-1: %g",
              (double)cpu->global_norm(x, n));
    /* one huge element first, then many small: a float sum would stop growing
     * at 1e8 (its spacing there is 8) and miss the 1e4 the small ones add */
    for (size_t i = 0; i < n; i++) x[i] = 0.1f;
    x[0] = 1e4f;
    double want = sqrt(1e8 + (double)(n - 1) * ((double)0.1f * 0.1f));
    cr_assert(fabs(cpu->global_norm(x, n) - want) <= 1e-6 * want, "norm %g vs %g",
              (double)cpu->global_norm(x, n), want);
}
