/* The sequence-mixer ops of the CPU backend (kernels/cpu_mixer.c): depthwise
 * conv1d, the Mamba-1 selective scan and the LSTM recurrence. Each op:
 *  - against values worked out by hand;
 *  - forward and backward against the naive sequential references in double
 *    of tests/ref/ref_mixers.h (written from the equations in kernels/bk.h),
 *    at sizes that cross chunk boundaries, partial channel tiles and the
 *    OpenMP thresholds;
 *  - finite-difference gradient checks (tests/ref/gradcheck.h) of every
 *    gradient, with a token mask, in both directions;
 *  - the mask contract: a masked run equals running each sample on its
 *    compacted active tokens (outputs and input gradients at the active
 *    places, zeros elsewhere, parameter gradients summed over the samples);
 *  - reverse = the forward direction on the reversed sequence. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk.h"
#include "tests/ref/gradcheck.h"
#include "tests/ref/ref_mixers.h"

/* ---- helpers (buffers freed by the suite's fini, tests/opcheck.h) ---- */

#define OPCHECK_MAX_BUFS 8192
#include "tests/opcheck.h"

TestSuite(mixer, .fini = release_all);

/* got - base against want (a gradient accumulated onto base) */
static void expect_added(const char *what, const float *got, const float *base, const double *want,
                         size_t n, double tol) {
    float *d = fbuf(n);
    for (size_t i = 0; i < n; i++) d[i] = got[i] - base[i];
    expect_near(what, d, want, n, tol);
}

static void expect_close_f(const char *what, const float *got, const float *want, size_t n,
                           double tol) {
    double *w = dbuf(n);
    for (size_t i = 0; i < n; i++) w[i] = want[i];
    expect_near(what, got, w, n, tol);
}

/* A buffer of NaNs: what an overwriting op must not read. */
static float *fnan(size_t n) {
    float *x = fbuf(n);
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

/* A mask with isolated holes, a run of holes, and (sample 1) a masked first
 * and last token; every sample keeps at least one active token. */
static float *make_mask(int B, int T) {
    float *m = fbuf((size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int off = (b * 7 + t * 3) % 5 == 0 || (t >= T / 3 && t < T / 3 + 3);
            if (b == 1 && (t == 0 || t == T - 1)) off = 1;
            if (t == T / 2) off = 0;
            m[(size_t)b * T + t] = off ? 0.0f : 1.0f;
        }
    return m;
}

/* ======================= conv1d ======================= */

static conv_case conv_make(int B, int T, int C, int K, int reverse, int silu, int masked,
                           uint64_t seed) {
    conv_case c = {.a = {B, T, C, K, reverse, silu, masked ? make_mask(B, T) : NULL}};
    c.x = frand((size_t)B * T * C, -1, 1, seed);
    c.w = frand((size_t)C * K, -1, 1, seed + 1);
    c.bias = frand((size_t)C, -0.5f, 0.5f, seed + 2);
    c.out = fbuf((size_t)B * T * C);
    return c;
}

Test(mixer, conv_by_hand, .init = init_cpu) {
    /* K = 2, w = (1, 2): out_t = 2 x_t + x_prev */
    float x[3] = {1, 2, 3}, w[2] = {1, 2}, out[3];
    bk_conv_args a = {1, 3, 1, 2, 0, 0, NULL};
    cpu->conv1d_forward(out, x, w, NULL, &a);
    expect_near("causal", out, (double[]){2, 5, 8}, 3, 0);
    a.reverse = 1; /* out_t = 2 x_t + x_next */
    cpu->conv1d_forward(out, x, w, NULL, &a);
    expect_near("anti-causal", out, (double[]){4, 7, 6}, 3, 0);
    float mask[3] = {1, 0, 1}; /* the middle token is skipped: token 2's window is token 0 */
    a.reverse = 0;
    a.mask = mask;
    float bias[1] = {0.5f};
    cpu->conv1d_forward(out, x, w, bias, &a);
    expect_near("masked", out, (double[]){2.5, 0, 7.5}, 3, 0);
    /* backward of the masked case, dout = (1, 1, 1): dx0 = 2 + 1, dx1 = 0, dx2 = 2;
     * dw = (x0, x0 + x2) = (1, 4); db = 2 (two active outputs) */
    float dout[3] = {1, 1, 1}, dx[3] = {0}, dw[2] = {0}, db[1] = {0};
    cpu->conv1d_backward(dx, dw, db, NULL, dout, x, w, bias, &a);
    expect_near("masked dx", dx, (double[]){3, 0, 2}, 3, 0);
    expect_near("masked dw", dw, (double[]){1, 4}, 2, 0);
    expect_near("masked db", db, (double[]){2}, 1, 0);
}

static void conv_check_ref(int B, int T, int C, int K, int reverse, int silu, int masked) {
    conv_case c = conv_make(B, T, C, K, reverse, silu, masked, 100 + K + 7 * reverse);
    size_t n = (size_t)B * T * C;
    double *ro = dbuf(n), *gx = dbuf(n), *gw = dbuf((size_t)C * K), *gb = dbuf((size_t)C);
    float *dout = frand(n, -1, 1, 5);
    ref_conv1d(&c, dout, ro, gx, gw, gb);
    cpu->conv1d_forward(c.out, c.x, c.w, c.bias, &c.a);
    expect_near("conv forward vs reference", c.out, ro, n, 1e-5);
    float *px = frand(n, -1, 1, 6), *pw = frand((size_t)C * K, -1, 1, 7),
          *pb = frand((size_t)C, -1, 1, 8);
    float *dx = fcopy(px, n), *dw = fcopy(pw, (size_t)C * K), *db = fcopy(pb, (size_t)C);
    cpu->conv1d_backward(dx, dw, db, NULL, dout, c.x, c.w, c.bias, &c.a);
    expect_added("conv dx vs reference", dx, px, gx, n, 1e-5);
    expect_added("conv dw vs reference", dw, pw, gw, (size_t)C * K, 1e-4);
    expect_added("conv db vs reference", db, pb, gb, (size_t)C, 1e-4);
    /* NULL gradients: each alone gives the same numbers */
    float *dx2 = fcopy(px, n), *dw2 = fcopy(pw, (size_t)C * K);
    cpu->conv1d_backward(dx2, NULL, NULL, NULL, dout, c.x, c.w, c.bias, &c.a);
    cpu->conv1d_backward(NULL, dw2, NULL, NULL, dout, c.x, c.w, c.bias, &c.a);
    expect_close_f("conv dx alone", dx2, dx, n, 0);
    expect_close_f("conv dw alone", dw2, dw, (size_t)C * K, 0);
    /* dx_overwrite: the bits of adding onto zeros, whatever dx held */
    float *dx0 = fbuf(n), *dxw = fnan(n);
    cpu->conv1d_backward(dx0, NULL, NULL, NULL, dout, c.x, c.w, c.bias, &c.a);
    bk_conv_args ow = c.a;
    ow.dx_overwrite = 1;
    cpu->conv1d_backward(dxw, NULL, NULL, NULL, dout, c.x, c.w, c.bias, &ow);
    expect_same("conv dx overwritten", dxw, dx0, n);
}

Test(mixer, conv_matches_reference, .init = init_cpu) {
    /* 8 * 300 * 40 floats takes the threaded path; 40 channels = 2.5 blocks */
    for (int reverse = 0; reverse < 2; reverse++) {
        conv_check_ref(8, 300, 40, 4, reverse, 1, 1);
        conv_check_ref(3, 50, 7, 3, reverse, 0, 0);
    }
    conv_check_ref(2, 20, 5, 1, 0, 1, 1); /* K = 1: pointwise */
    conv_check_ref(2, 20, 5, BK_CONV_MAX_K, 1, 1, 1);
    /* 600 channels: a row in two slabs of at most 512; 150 steps: blocks of
     * 64 that find their window by walking back, masked and not */
    conv_check_ref(2, 150, 600, 4, 1, 1, 1);
    conv_check_ref(2, 150, 600, 4, 0, 1, 0);
}

typedef struct {
    conv_case *c;
} conv_ctx;
static void conv_eval(void *p) {
    conv_case *c = ((conv_ctx *)p)->c;
    cpu->conv1d_forward(c->out, c->x, c->w, c->bias, &c->a);
}

Test(mixer, conv_gradcheck, .init = init_cpu) {
    for (int reverse = 0; reverse < 2; reverse++)
        for (int silu = 0; silu < 2; silu++) {
            conv_case c = conv_make(2, 9, 20, 4, reverse, silu, 1, 30 + reverse + 2 * silu);
            size_t n = (size_t)2 * 9 * 20, nw = 20 * 4;
            float *R = frand(n, -1, 1, 40), *px = frand(n, -1, 1, 41), *pw = frand(nw, -1, 1, 42),
                  *pb = frand(20, -1, 1, 43);
            float *dx = fcopy(px, n), *dw = fcopy(pw, nw), *db = fcopy(pb, 20);
            conv_ctx ctx = {&c};
            conv_eval(&ctx);
            cpu->conv1d_backward(dx, dw, db, NULL, R, c.x, c.w, c.bias, &c.a);
            gc_op op = {conv_eval, &ctx, c.out, n, R};
            check_grad("conv dx", &op, c.x, n, dx, px);
            check_grad("conv dw", &op, c.w, nw, dw, pw);
            check_grad("conv dbias", &op, c.bias, 20, db, pb);
        }
}

/* Sample b's active tokens gathered into [1, n, C] (pos from ref_scan_order in
 * forward order). */
static float *gather_rows(const float *src, int b, int T, int W, const int *pos, int n) {
    float *d = fbuf((size_t)(n ? n : 1) * W);
    for (int j = 0; j < n; j++)
        memcpy(d + (size_t)j * W, src + ((size_t)b * T + pos[j]) * W, (size_t)W * sizeof(float));
    return d;
}

/* Checks full[B,T,W] against the compacted results: row pos[j] of sample b
 * equals comp[j], every masked row is 0. */
static void expect_scattered(const char *what, const float *full, int b, int T, int W,
                             const float *mask, const float *comp, const int *pos, int n,
                             double tol) {
    int j = 0;
    for (int t = 0; t < T; t++) {
        const float *row = full + ((size_t)b * T + t) * W;
        if (j < n && pos[j] == t) {
            expect_close_f(what, row, comp + (size_t)j * W, (size_t)W, tol);
            j++;
        } else {
            cr_assert(!ref_active(mask, b, T, t), "%s: active token %d not in the list", what, t);
            for (int i = 0; i < W; i++)
                cr_assert(row[i] == 0.0f, "%s: masked token %d of sample %d has %g at %d", what, t,
                          b, (double)row[i], i);
        }
    }
}

Test(mixer, conv_masked_equals_compacted, .init = init_cpu) {
    const int B = 3, T = 40, C = 24, K = 4;
    for (int reverse = 0; reverse < 2; reverse++) {
        conv_case c = conv_make(B, T, C, K, reverse, 1, 1, 60 + reverse);
        size_t n = (size_t)B * T * C;
        float *dout = frand(n, -1, 1, 61), *dx = fbuf(n), *dw = fbuf((size_t)C * K),
              *db = fbuf((size_t)C);
        cpu->conv1d_forward(c.out, c.x, c.w, c.bias, &c.a);
        cpu->conv1d_backward(dx, dw, db, NULL, dout, c.x, c.w, c.bias, &c.a);
        float *sw = fbuf((size_t)C * K), *sb = fbuf((size_t)C);
        int pos[40];
        for (int b = 0; b < B; b++) {
            int na = ref_scan_order(c.a.mask, b, T, 0, pos);
            float *cx = gather_rows(c.x, b, T, C, pos, na),
                  *cg = gather_rows(dout, b, T, C, pos, na);
            float *co = fbuf((size_t)na * C), *cdx = fbuf((size_t)na * C);
            bk_conv_args a1 = {1, na, C, K, reverse, 1, NULL};
            cpu->conv1d_forward(co, cx, c.w, c.bias, &a1);
            cpu->conv1d_backward(cdx, sw, sb, NULL, cg, cx, c.w, c.bias, &a1);
            expect_scattered("conv masked out", c.out, b, T, C, c.a.mask, co, pos, na, 0);
            expect_scattered("conv masked dx", dx, b, T, C, c.a.mask, cdx, pos, na, 0);
        }
        expect_close_f("conv masked dw", dw, sw, (size_t)C * K, 1e-5);
        expect_close_f("conv masked db", db, sb, (size_t)C, 1e-5);
    }
}

/* ======================= selective scan ======================= */

/* The inputs of a scan_case (tests/ref/ref_mixers.h), seeded. */
static scan_case scan_make(int B, int T, int D, int G, int N, int reverse, int masked, int gated,
                           uint64_t seed) {
    scan_case c = {.a = {.B = B, .T = T, .D = D, .G = G, .N = N, .reverse = reverse}};
    c.nx = (size_t)B * T * D;
    c.nbc = (size_t)B * T * G * (SCAN_R + 2 * N);
    c.x = frand(c.nx, -1, 1, seed);
    c.delta = frand(c.nx, -2.5f, 0.5f, seed + 1);
    c.bias = frand((size_t)D, -1, 0.5f, seed + 2);
    c.Alog = fbuf((size_t)D * N);
    for (int d = 0; d < D; d++) /* the design's init, log(1..N), jittered */
        for (int n = 0; n < N; n++)
            c.Alog[d * N + n] =
                (float)log(1.0 + n) + 0.2f * bk_rng_uniform_at(seed + 3, 1, d * N + n);
    c.xdbl = frand(c.nbc, -1, 1, seed + 4);
    c.Dp = frand((size_t)D, 0.5f, 1.5f, seed + 5);
    c.z = gated ? frand(c.nx, -2, 2, seed + 6) : NULL;
    c.out = fbuf(c.nx);
    c.states = fbuf((size_t)B * D * ((T + BK_SCAN_CHUNK - 1) / BK_SCAN_CHUNK) * N);
    c.a.bc_stride = SCAN_R + 2 * N;
    c.a.x = c.x;
    c.a.delta = c.delta;
    c.a.delta_bias = c.bias;
    c.a.A_log = c.Alog;
    c.a.Bm = c.xdbl + SCAN_R;
    c.a.Cm = c.xdbl + SCAN_R + N;
    c.a.Dskip = c.Dp;
    c.a.z = c.z;
    c.a.mask = masked ? make_mask(B, T) : NULL;
    return c;
}

Test(mixer, scan_by_hand, .init = init_cpu) {
    /* N = 1, A_log = 0 (A = -1), dt = softplus(log(e - 1)) = 1, B = C = 1, x = 1:
     * h1 = 1, h2 = e^-1 + 1; D = 0.5 adds x/2; no gate */
    float x[2] = {1, 1}, delta[2], Alog[1] = {0}, Bm[2] = {1, 1}, Cm[2] = {1, 1}, Dp[1] = {0.5f};
    delta[0] = delta[1] = (float)log(exp(1.0) - 1.0);
    float out[2], states[1];
    bk_scan_args a = {.B = 1,
                      .T = 2,
                      .D = 1,
                      .G = 1,
                      .N = 1,
                      .x = x,
                      .delta = delta,
                      .A_log = Alog,
                      .Bm = Bm,
                      .Cm = Cm,
                      .Dskip = Dp};
    cpu->scan_forward(out, states, &a);
    double e1 = exp(-1.0);
    expect_near("scan", out, (double[]){1.5, e1 + 1.5}, 2, 2e-6);
    expect_near("scan final state", states, (double[]){e1 + 1}, 1, 2e-6);
    a.reverse = 1; /* same inputs both ways: the same numbers, swapped */
    cpu->scan_forward(out, states, &a);
    expect_near("scan reverse", out, (double[]){e1 + 1.5, 1.5}, 2, 2e-6);
    float mask[2] = {0, 1};
    a.mask = mask;
    a.reverse = 0;
    cpu->scan_forward(out, states, &a);
    expect_near("scan masked", out, (double[]){0, 1.5}, 2, 2e-6);
}

static void scan_check_ref(int B, int T, int D, int G, int N, int reverse, int masked, int gated,
                           uint64_t seed) {
    scan_case c = scan_make(B, T, D, G, N, reverse, masked, gated, seed);
    float *dout = frand(c.nx, -1, 1, seed + 50);
    ref_scan_out r = ref_scan_alloc(&c);
    ref_scan(&c, dout, &r);
    cpu->scan_forward(c.out, c.states, &c.a);
    expect_near("scan forward vs reference", c.out, r.out, c.nx, 1e-4);
    float *px = frand(c.nx, -1, 1, 1), *pd = frand(c.nx, -1, 1, 2), *pz = frand(c.nx, -1, 1, 3);
    float *pb = frand((size_t)D, -1, 1, 4), *pA = frand((size_t)D * N, -1, 1, 5),
          *pbc = frand(c.nbc, -1, 1, 6), *pD = frand((size_t)D, -1, 1, 7);
    float *dxdbl = fcopy(pbc, c.nbc);
    bk_scan_grads g = {
        fcopy(px, c.nx), fcopy(pd, c.nx),    fcopy(pb, (size_t)D), fcopy(pA, (size_t)D * N),
        dxdbl + SCAN_R,  dxdbl + SCAN_R + N, fcopy(pD, (size_t)D), gated ? fcopy(pz, c.nx) : NULL};
    float *scratch = fbuf((size_t)B * D * (2 * N + 2));
    cpu->scan_backward(&g, scratch, dout, c.states, &c.a);
    expect_added("scan dx", g.dx, px, r.dx, c.nx, 1e-4);
    expect_added("scan ddelta", g.ddelta, pd, r.ddelta, c.nx, 1e-4);
    expect_added("scan ddelta_bias", g.ddelta_bias, pb, r.dbias, (size_t)D, 1e-3);
    expect_added("scan dA_log", g.dA_log, pA, r.dAlog, (size_t)D * N, 1e-3);
    expect_added("scan dB, dC (delta-rank columns untouched)", dxdbl, pbc, r.dxdbl, c.nbc, 1e-4);
    expect_added("scan dD", g.dDskip, pD, r.dD, (size_t)D, 1e-3);
    if (gated) expect_added("scan dz", g.dz, pz, r.dz, c.nx, 1e-4);
    /* each gradient alone equals its part of the full call */
    float *dx2 = fcopy(px, c.nx), *dA2 = fcopy(pA, (size_t)D * N);
    bk_scan_grads g1 = {.dx = dx2}, g2 = {.dA_log = dA2}, g0 = {0};
    cpu->scan_backward(&g1, scratch, dout, c.states, &c.a);
    cpu->scan_backward(&g2, scratch, dout, c.states, &c.a);
    cpu->scan_backward(&g0, scratch, dout, c.states, &c.a);
    expect_close_f("scan dx alone", dx2, g.dx, c.nx, 0);
    expect_close_f("scan dA_log alone", dA2, g.dA_log, (size_t)D * N, 0);
    /* overwrite, dz_overwrite: the bits of adding onto zeros, whatever the
     * buffers held; the delta-rank columns of xdbl stay as they were */
    const size_t S = SCAN_R + 2 * N;
    float *bc0 = fcopy(pbc, c.nbc), *bcw = fcopy(pbc, c.nbc);
    for (size_t row = 0; row < c.nbc / S; row++)
        for (size_t n = SCAN_R; n < S; n++) {
            bc0[row * S + n] = 0.0f;
            bcw[row * S + n] = NAN;
        }
    bk_scan_grads z0 = {.dx = fbuf(c.nx),
                        .ddelta = fbuf(c.nx),
                        .dBm = bc0 + SCAN_R,
                        .dCm = bc0 + SCAN_R + N,
                        .dz = gated ? fbuf(c.nx) : NULL};
    bk_scan_grads zw = {.dx = fnan(c.nx),
                        .ddelta = fnan(c.nx),
                        .dBm = bcw + SCAN_R,
                        .dCm = bcw + SCAN_R + N,
                        .dz = gated ? fnan(c.nx) : NULL,
                        .overwrite = 1,
                        .dz_overwrite = 1};
    cpu->scan_backward(&z0, scratch, dout, c.states, &c.a);
    cpu->scan_backward(&zw, scratch, dout, c.states, &c.a);
    expect_same("scan dx overwritten", zw.dx, z0.dx, c.nx);
    expect_same("scan ddelta overwritten", zw.ddelta, z0.ddelta, c.nx);
    expect_same("scan dB, dC overwritten", bcw, bc0, c.nbc);
    if (gated) expect_same("scan dz overwritten", zw.dz, z0.dz, c.nx);
    ref_scan_free(&r);
}

Test(mixer, scan_matches_reference, .init = init_cpu) {
    /* T = 200: four chunks, the last partial; D/G = 16: two full tiles */
    for (int reverse = 0; reverse < 2; reverse++) {
        scan_check_ref(3, 200, 48, 3, 16, reverse, 1, 1, 200 + reverse);
        scan_check_ref(2, 70, 10, 2, 5, reverse, 0, 0, 210 + reverse); /* partial tiles, N = 5 */
    }
    scan_check_ref(2, 64, 8, 1, 16, 0, 1, 1, 220);   /* exactly one chunk */
    scan_check_ref(2, 100, 48, 2, 16, 1, 1, 1, 240); /* 24 channels per group */
    scan_check_ref(1, 1, 3, 3, 1, 1, 0, 1, 230);     /* one token, one channel per group */
}

/* The forward-only options: delta computed inside from the delta-rank
 * columns (delta_w, dlow) equals the scan of the same delta computed
 * outside; accumulate adds out onto y before the gate at active tokens,
 * masked ones keep out. */
static void scan_check_fused(int B, int T, int D, int G, int N, int reverse, uint64_t seed) {
    scan_case c = scan_make(B, T, D, G, N, reverse, 1, 1, seed);
    const int Dg = D / G, S = SCAN_R + 2 * N;
    float *w = frand((size_t)D * SCAN_R, -1, 1, seed + 60);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int d = 0; d < D; d++) {
                const float *dl = c.xdbl + (((size_t)b * T + t) * G + d / Dg) * S;
                double v = 0;
                for (int r = 0; r < SCAN_R; r++) v += (double)w[d * SCAN_R + r] * dl[r];
                c.delta[((size_t)b * T + t) * D + d] = (float)v;
            }
    cpu->scan_forward(c.out, NULL, &c.a);
    bk_scan_args f = c.a;
    f.delta = NULL; /* not read */
    f.delta_w = w;
    f.dlow = c.xdbl;
    f.R = SCAN_R;
    float *fused = fbuf(c.nx);
    cpu->scan_forward(fused, NULL, &f);
    expect_close_f("scan with delta_w vs delta given", fused, c.out, c.nx, 1e-5);
    /* accumulate: (base + ungated y) * SiLU(z) at active tokens, base elsewhere */
    f.z = NULL;
    float *ungated = fbuf(c.nx);
    cpu->scan_forward(ungated, NULL, &f);
    float *base = frand(c.nx, -1, 1, seed + 61), *acc = fcopy(base, c.nx);
    double *want = dbuf(c.nx);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int d = 0; d < D; d++) {
                size_t i = ((size_t)b * T + t) * D + d;
                double zi = c.z[i], y = (double)base[i] + ungated[i];
                want[i] = ref_active(c.a.mask, b, T, t) ? y * zi * ref_sigmoid(zi) : base[i];
            }
    f.z = c.z;
    f.accumulate = 1;
    cpu->scan_forward(acc, NULL, &f);
    expect_near("scan accumulate before the gate", acc, want, c.nx, 1e-5);
    for (size_t i = 0; i < c.nx; i++)
        if (!ref_active(c.a.mask, (int)(i / D / T), T, (int)(i / D % T)))
            cr_assert_eq(acc[i], base[i], "scan accumulate: masked [%zu] changed", i);
}

Test(mixer, scan_fused_delta_and_accumulate, .init = init_cpu) {
    for (int reverse = 0; reverse < 2; reverse++) scan_check_fused(2, 70, 48, 3, 16, reverse, 300);
    scan_check_fused(2, 30, 10, 2, 5, 0, 310); /* partial tiles, N = 5 */
}

typedef struct {
    scan_case *c;
} scan_ctx;
static void scan_eval(void *p) {
    scan_case *c = ((scan_ctx *)p)->c;
    cpu->scan_forward(c->out, c->states, &c->a);
}

static void scan_gradcheck(int B, int T, int D, int G, int N, int reverse, uint64_t seed) {
    scan_case c = scan_make(B, T, D, G, N, reverse, 1, 1, seed);
    scan_ctx ctx = {&c};
    float *R = frand(c.nx, -1, 1, seed + 9);
    float *px = frand(c.nx, -1, 1, 1), *pd = frand(c.nx, -1, 1, 2), *pz = frand(c.nx, -1, 1, 3);
    float *pb = frand((size_t)D, -1, 1, 4), *pA = frand((size_t)D * N, -1, 1, 5),
          *pbc = frand(c.nbc, -1, 1, 6), *pD = frand((size_t)D, -1, 1, 7);
    float *dxdbl = fcopy(pbc, c.nbc);
    bk_scan_grads g = {fcopy(px, c.nx),          fcopy(pd, c.nx), fcopy(pb, (size_t)D),
                       fcopy(pA, (size_t)D * N), dxdbl + SCAN_R,  dxdbl + SCAN_R + N,
                       fcopy(pD, (size_t)D),     fcopy(pz, c.nx)};
    float *scratch = fbuf((size_t)B * D * (2 * N + 2));
    scan_eval(&ctx);
    cpu->scan_backward(&g, scratch, R, c.states, &c.a);
    gc_op op = {scan_eval, &ctx, c.out, c.nx, R};
    check_grad("scan dx", &op, c.x, c.nx, g.dx, px);
    check_grad("scan ddelta", &op, c.delta, c.nx, g.ddelta, pd);
    check_grad("scan dz", &op, c.z, c.nx, g.dz, pz);
    check_grad("scan ddelta_bias", &op, c.bias, (size_t)D, g.ddelta_bias, pb);
    check_grad("scan dA_log", &op, c.Alog, (size_t)D * N, g.dA_log, pA);
    check_grad("scan dB dC", &op, c.xdbl, c.nbc, dxdbl, pbc);
    check_grad("scan dD", &op, c.Dp, (size_t)D, g.dDskip, pD);
}

Test(mixer, scan_gradcheck, .init = init_cpu) {
    /* T = 70 crosses a chunk boundary; D/G = 5 is a partial tile */
    scan_gradcheck(2, 70, 10, 2, 3, 0, 300);
    scan_gradcheck(2, 70, 10, 2, 3, 1, 310);
    scan_gradcheck(1, 20, 4, 1, 16, 1, 320); /* the unrolled N = 16 path */
}

Test(mixer, scan_masked_equals_compacted, .init = init_cpu) {
    const int B = 3, T = 150, D = 16, G = 2, N = 16, S = SCAN_R + 2 * N;
    for (int reverse = 0; reverse < 2; reverse++) {
        scan_case c = scan_make(B, T, D, G, N, reverse, 1, 1, 400 + reverse);
        float *dout = frand(c.nx, -1, 1, 401);
        bk_scan_grads g = {fbuf(c.nx), fbuf(c.nx), fbuf(D), fbuf((size_t)D * N),
                           NULL,       NULL,       fbuf(D), fbuf(c.nx)};
        float *dxdbl = fbuf(c.nbc);
        g.dBm = dxdbl + SCAN_R;
        g.dCm = dxdbl + SCAN_R + N;
        float *scratch = fbuf((size_t)B * D * (2 * N + 2));
        cpu->scan_forward(c.out, c.states, &c.a);
        cpu->scan_backward(&g, scratch, dout, c.states, &c.a);
        float *sb = fbuf(D), *sA = fbuf((size_t)D * N), *sD = fbuf(D);
        int pos[150];
        for (int b = 0; b < B; b++) {
            int na = ref_scan_order(c.a.mask, b, T, 0, pos);
            bk_scan_args a1 = c.a;
            a1.B = 1;
            a1.T = na;
            a1.mask = NULL;
            a1.x = gather_rows(c.x, b, T, D, pos, na);
            a1.delta = gather_rows(c.delta, b, T, D, pos, na);
            a1.z = gather_rows(c.z, b, T, D, pos, na);
            float *cbc = gather_rows(c.xdbl, b, T, G * S, pos, na);
            a1.Bm = cbc + SCAN_R;
            a1.Cm = cbc + SCAN_R + N;
            float *cg = gather_rows(dout, b, T, D, pos, na), *co = fbuf((size_t)na * D);
            float *cst = fbuf((size_t)D * ((na + BK_SCAN_CHUNK - 1) / BK_SCAN_CHUNK) * N);
            bk_scan_grads g1 = {fbuf((size_t)na * D), fbuf((size_t)na * D), sb, sA, NULL, NULL, sD,
                                fbuf((size_t)na * D)};
            float *cdbc = fbuf((size_t)na * G * S);
            g1.dBm = cdbc + SCAN_R;
            g1.dCm = cdbc + SCAN_R + N;
            cpu->scan_forward(co, cst, &a1);
            cpu->scan_backward(&g1, scratch, cg, cst, &a1);
            expect_scattered("scan masked out", c.out, b, T, D, c.a.mask, co, pos, na, 1e-6);
            expect_scattered("scan masked dx", g.dx, b, T, D, c.a.mask, g1.dx, pos, na, 1e-6);
            expect_scattered("scan masked ddelta", g.ddelta, b, T, D, c.a.mask, g1.ddelta, pos, na,
                             1e-6);
            expect_scattered("scan masked dz", g.dz, b, T, D, c.a.mask, g1.dz, pos, na, 1e-6);
            expect_scattered("scan masked dB dC", dxdbl, b, T, G * S, c.a.mask, cdbc, pos, na,
                             1e-6);
        }
        expect_close_f("scan masked ddelta_bias", g.ddelta_bias, sb, D, 1e-5);
        expect_close_f("scan masked dA_log", g.dA_log, sA, (size_t)D * N, 1e-5);
        expect_close_f("scan masked dD", g.dDskip, sD, D, 1e-5);
    }
}

/* reverse = the forward scan of the time-reversed sequence, read back reversed */
Test(mixer, scan_reverse_is_flipped_forward, .init = init_cpu) {
    const int B = 2, T = 90, D = 8, G = 1, N = 16, S = SCAN_R + 2 * N;
    scan_case c = scan_make(B, T, D, G, N, 1, 1, 1, 500);
    cpu->scan_forward(c.out, c.states, &c.a);
    scan_case f = c;
    f.a.reverse = 0;
    float *x = fbuf(c.nx), *dl = fbuf(c.nx), *z = fbuf(c.nx), *bc = fbuf(c.nbc), *m = fbuf(B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t src = (size_t)b * T + t, dst = (size_t)b * T + (T - 1 - t);
            memcpy(x + dst * D, c.x + src * D, D * sizeof(float));
            memcpy(dl + dst * D, c.delta + src * D, D * sizeof(float));
            memcpy(z + dst * D, c.z + src * D, D * sizeof(float));
            memcpy(bc + dst * G * S, c.xdbl + src * G * S, (size_t)G * S * sizeof(float));
            m[dst] = c.a.mask[src];
        }
    f.a.x = x;
    f.a.delta = dl;
    f.a.z = z;
    f.a.Bm = bc + SCAN_R;
    f.a.Cm = bc + SCAN_R + N;
    f.a.mask = m;
    float *fo = fbuf(c.nx), *fs = fbuf((size_t)B * D * 2 * N);
    cpu->scan_forward(fo, fs, &f.a);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            expect_close_f("reverse vs flipped", c.out + ((size_t)b * T + t) * D,
                           fo + ((size_t)b * T + T - 1 - t) * D, D, 0);
    expect_close_f("reverse chunk states vs flipped", c.states, fs, (size_t)B * D * 2 * N, 0);
}

/* ======================= LSTM ======================= */

static lstm_case lstm_make(int B, int T, int S, int H, int bidir, int masked, uint64_t seed) {
    lstm_case c = {.a = {B, T, S, H, bidir, masked ? make_mask(B, T) : NULL}};
    c.ng = (size_t)B * T * S * 4 * H;
    c.no = (size_t)B * T * S * H;
    c.nw = (size_t)S * 4 * H * H;
    c.gx = frand(c.ng, -1.5f, 1.5f, seed);
    c.whh = frand(c.nw, -0.6f, 0.6f, seed + 1);
    c.out = fbuf(c.no);
    c.saved = fbuf(c.no * 6);
    return c;
}

Test(mixer, lstm_by_hand, .init = init_cpu) {
    /* H = 1, whh = 0, gates (i, f, g, o) preactivations (0, 0, atanh(0.5), 0):
     * i = f = o = 1/2, g = 1/2; c1 = 1/4, h1 = tanh(1/4)/2;
     * step 2 the same inputs: c2 = c1/2 + 1/4 = 3/8, h2 = tanh(3/8)/2 */
    float gx[8], whh[4] = {0}, out[2], saved[12];
    for (int t = 0; t < 2; t++) {
        gx[t * 4 + 0] = gx[t * 4 + 1] = gx[t * 4 + 3] = 0;
        gx[t * 4 + 2] = (float)atanh(0.5);
    }
    bk_lstm_args a = {1, 2, 1, 1, 0, NULL};
    cpu->lstm_forward(out, saved, gx, whh, &a);
    expect_near("lstm h", out, (double[]){tanh(0.25) / 2, tanh(0.375) / 2}, 2, 1e-6);
    expect_near("lstm saved c", (float[]){saved[4], saved[10]}, (double[]){0.25, 0.375}, 2, 1e-6);
}

static void lstm_check_ref(int B, int T, int S, int H, int bidir, int masked, uint64_t seed) {
    lstm_case c = lstm_make(B, T, S, H, bidir, masked, seed);
    float *dout = frand(c.no, -1, 1, seed + 9);
    double *ro = dbuf(c.no), *rg = dbuf(c.ng), *rw = dbuf(c.nw);
    ref_lstm(&c, dout, ro, rg, rw);
    cpu->lstm_forward(c.out, c.saved, c.gx, c.whh, &c.a);
    expect_near("lstm forward vs reference", c.out, ro, c.no, 1e-5);
    float *pg = frand(c.ng, -1, 1, 1), *pw = frand(c.nw, -1, 1, 2);
    float *dgx = fcopy(pg, c.ng), *dw = fcopy(pw, c.nw);
    float *scratch = fbuf((size_t)B * c.nw);
    cpu->lstm_backward(dgx, dw, scratch, dout, c.saved, c.whh, &c.a);
    expect_added("lstm dgx vs reference", dgx, pg, rg, c.ng, 1e-4);
    expect_added("lstm dwhh vs reference", dw, pw, rw, c.nw, 1e-4);
    float *dgx2 = fcopy(pg, c.ng), *dw2 = fcopy(pw, c.nw), *out2 = fbuf(c.no);
    cpu->lstm_backward(dgx2, NULL, scratch, dout, c.saved, c.whh, &c.a);
    cpu->lstm_backward(NULL, dw2, scratch, dout, c.saved, c.whh, &c.a);
    expect_close_f("lstm dgx alone", dgx2, dgx, c.ng, 0);
    expect_close_f("lstm dwhh alone", dw2, dw, c.nw, 0);
    cpu->lstm_forward(out2, NULL, c.gx, c.whh, &c.a); /* inference: nothing saved */
    expect_close_f("lstm forward without saved", out2, c.out, c.no, 0);
}

Test(mixer, lstm_matches_reference, .init = init_cpu) {
    lstm_check_ref(4, 60, 6, 32, 1, 1, 600); /* 3 heads of d_h = 64, both directions */
    lstm_check_ref(2, 17, 3, 5, 0, 0, 610);  /* one direction, odd sizes */
    lstm_check_ref(2, 9, 2, 80, 1, 1, 620);  /* whh too big to transpose on the stack */
}

typedef struct {
    lstm_case *c;
} lstm_ctx;
static void lstm_eval(void *p) {
    lstm_case *c = ((lstm_ctx *)p)->c;
    cpu->lstm_forward(c->out, c->saved, c->gx, c->whh, &c->a);
}

Test(mixer, lstm_gradcheck, .init = init_cpu) {
    lstm_case c = lstm_make(2, 8, 4, 3, 1, 1, 700);
    lstm_ctx ctx = {&c};
    float *R = frand(c.no, -1, 1, 701), *pg = frand(c.ng, -1, 1, 702),
          *pw = frand(c.nw, -1, 1, 703);
    float *dgx = fcopy(pg, c.ng), *dw = fcopy(pw, c.nw), *scratch = fbuf(2 * c.nw);
    lstm_eval(&ctx);
    cpu->lstm_backward(dgx, dw, scratch, R, c.saved, c.whh, &c.a);
    gc_op op = {lstm_eval, &ctx, c.out, c.no, R};
    check_grad("lstm dgx", &op, c.gx, c.ng, dgx, pg);
    check_grad("lstm dwhh", &op, c.whh, c.nw, dw, pw);
}

Test(mixer, lstm_masked_equals_compacted, .init = init_cpu) {
    const int B = 3, T = 30, S = 4, H = 8, W = S * H;
    lstm_case c = lstm_make(B, T, S, H, 1, 1, 800);
    float *dout = frand(c.no, -1, 1, 801), *dgx = fbuf(c.ng), *dw = fbuf(c.nw);
    float *scratch = fbuf((size_t)B * c.nw), *sw = fbuf(c.nw);
    cpu->lstm_forward(c.out, c.saved, c.gx, c.whh, &c.a);
    cpu->lstm_backward(dgx, dw, scratch, dout, c.saved, c.whh, &c.a);
    int pos[30];
    for (int b = 0; b < B; b++) {
        int na = ref_scan_order(c.a.mask, b, T, 0, pos);
        float *cg = gather_rows(c.gx, b, T, 4 * W, pos, na),
              *cd = gather_rows(dout, b, T, W, pos, na);
        float *co = fbuf((size_t)na * W), *cs = fbuf((size_t)na * W * 6),
              *cdg = fbuf((size_t)na * 4 * W);
        bk_lstm_args a1 = {1, na, S, H, 1, NULL};
        cpu->lstm_forward(co, cs, cg, c.whh, &a1);
        cpu->lstm_backward(cdg, sw, scratch, cd, cs, c.whh, &a1);
        expect_scattered("lstm masked out", c.out, b, T, W, c.a.mask, co, pos, na, 0);
        expect_scattered("lstm masked dgx", dgx, b, T, 4 * W, c.a.mask, cdg, pos, na, 0);
    }
    expect_close_f("lstm masked dwhh", dw, sw, c.nw, 1e-5);
}
