/* The ops of a BiMamba-2 direction on the CPU backend (kernels/cpu_ssd.c):
 * Mamba-2's chunked SSD scan and the gated RMSNorm. Each:
 *  - against values worked out by hand;
 *  - forward and backward against the token-by-token references in double
 *    of tests/ref/ref_ssd.h, with chunks small enough that several pass a
 *    state on (and the default chunk over 150 tokens), masked and not, in
 *    both directions, rows wider than the scan's columns (ld);
 *  - finite differences (tests/ref/gradcheck.h) of every gradient;
 *  - the overwrite contract: the per-token gradients do not depend on what
 *    the buffers held. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk.h"
#include "tests/ref/gradcheck.h"
#include "tests/ref/ref_ssd.h"

#define OPCHECK_MAX_BUFS 4096
#include "tests/opcheck.h"

TestSuite(ssd, .fini = release_all);

/* A mask with holes, a run of holes, a masked first and last token in
 * sample 1, and (sample 2, when there is one) no active token at all. */
static float *make_mask(int B, int T) {
    float *m = fbuf((size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int off = (b * 7 + t * 3) % 5 == 0 || (t >= T / 3 && t < T / 3 + 3);
            if (b == 1 && (t == 0 || t == T - 1)) off = 1;
            if (b == 2) off = 1;
            m[(size_t)b * T + t] = off ? 0.0f : 1.0f;
        }
    return m;
}

/* One scan's inputs: x, Bm, Cm in rows of ld = H*P + 2N + 3 (three unused
 * columns that must stay untouched), dt before softplus, the parameters. */
typedef struct ssd_case {
    bk_ssd_args a;
    float *xbc, *dt, *bias, *Alog, *D, *out, *states, *scratch;
    size_t nrow, nout;
} ssd_case;

static ssd_case ssd_make(int B, int T, int H, int P, int N, int Q, int reverse, int masked,
                         uint64_t seed) {
    ssd_case c;
    memset(&c, 0, sizeof c);
    int ld = H * P + 2 * N + 3;
    c.nrow = (size_t)B * T * ld;
    c.nout = (size_t)B * T * H * P;
    c.xbc = frand(c.nrow, -1, 1, seed);
    c.dt = frand((size_t)B * T * H, -2.5f, 0.5f, seed + 1);
    c.bias = frand((size_t)H, -1, 0.5f, seed + 2);
    c.Alog = frand((size_t)H, 0, 2.5f, seed + 3); /* A in [-12, -1], Mamba-2's range */
    c.D = frand((size_t)H, 0.5f, 1.5f, seed + 4);
    c.out = fbuf(c.nout);
    int q = Q > 0 ? Q : BK_SSD_CHUNK;
    c.states = fbuf((size_t)B * H * ((T + q - 1) / q) * P * N);
    c.scratch = fbuf(BK_SSD_SCRATCH(B, T, H, P, N, q));
    c.a = (bk_ssd_args){.B = B,
                        .T = T,
                        .H = H,
                        .P = P,
                        .N = N,
                        .chunk = Q,
                        .reverse = reverse,
                        .ld = ld,
                        .x = c.xbc,
                        .Bm = c.xbc + H * P,
                        .Cm = c.xbc + H * P + N,
                        .dt = c.dt,
                        .dt_bias = c.bias,
                        .A_log = c.Alog,
                        .Dskip = c.D,
                        .mask = masked ? make_mask(B, T) : NULL};
    return c;
}

Test(ssd, by_hand, .init = init_cpu) {
    /* H = P = N = 1, A_log = 0 (A = -1), dt = softplus(log(e - 1)) = 1,
     * x = B = C = 1, D = 0.5: S1 = 1, y1 = 1.5; S2 = e^-1 + 1, y2 = e^-1 + 1.5 */
    float xbc[6] = {1, 1, 1, 1, 1, 1}, dt[2], bias[1] = {0}, Alog[1] = {0}, D[1] = {0.5f};
    dt[0] = dt[1] = logf(expf(1.0f) - 1.0f);
    float out[2], states[2], scratch[BK_SSD_SCRATCH(1, 2, 1, 1, 1, 2)];
    for (int q = 1; q <= 2; q++) {
        bk_ssd_args a = {.B = 1,
                         .T = 2,
                         .H = 1,
                         .P = 1,
                         .N = 1,
                         .chunk = q,
                         .ld = 3,
                         .x = xbc,
                         .Bm = xbc + 1,
                         .Cm = xbc + 2,
                         .dt = dt,
                         .dt_bias = bias,
                         .A_log = Alog,
                         .Dskip = D};
        cpu->ssd_forward(out, states, scratch, &a);
        expect_near("ssd by hand", out, (double[]){1.5, exp(-1.0) + 1.5}, 2, 1e-6);
        /* reverse: the same two tokens from the right */
        a.reverse = 1;
        cpu->ssd_forward(out, states, scratch, &a);
        expect_near("ssd by hand, reverse", out, (double[]){exp(-1.0) + 1.5, 1.5}, 2, 1e-6);
        /* the first token masked: the second is the first of its sequence */
        a.reverse = 0;
        a.mask = (float[]){0, 1};
        cpu->ssd_forward(out, states, scratch, &a);
        expect_near("ssd by hand, masked", out, (double[]){0, 1.5}, 2, 1e-6);
    }
}

/* Forward and backward against the reference. The tolerance 1e-4 relative
 * (to max(1, |want|)): float32 sums over at most chunk x P + N terms of
 * size O(1) (a few hundred), eps_f32 x 300 ~ 4e-5. */
static void ssd_check_ref(int B, int T, int H, int P, int N, int Q, int reverse, int masked,
                          uint64_t seed) {
    ssd_case c = ssd_make(B, T, H, P, N, Q, reverse, masked, seed);
    float *dout = frand(c.nout, -1, 1, seed + 50);
    double *want = dbuf(c.nout);
    ref_ssd_grads r = {dbuf(c.nrow),    dbuf(c.nrow),    dbuf(c.nrow),   dbuf((size_t)B * T * H),
                       dbuf((size_t)H), dbuf((size_t)H), dbuf((size_t)H)};
    ref_ssd(&c.a, want, dout, &r);
    cpu->ssd_forward(c.out, c.states, c.scratch, &c.a);
    expect_near("ssd forward vs reference", c.out, want, c.nout, 1e-4);
    /* per-token gradients into buffers of NaN (written, never read), the
     * parameter ones onto a prefill (accumulated) */
    float *dxbc = fbuf(c.nrow), *ddt = fbuf((size_t)B * T * H);
    for (size_t i = 0; i < c.nrow; i++) dxbc[i] = NAN;
    for (size_t i = 0; i < (size_t)B * T * H; i++) ddt[i] = NAN;
    float *pre = frand(3 * (size_t)H, -1, 1, seed + 51), *par = fbuf(3 * (size_t)H);
    memcpy(par, pre, 3 * H * sizeof(float));
    bk_ssd_grads g = {dxbc, dxbc + H * P, dxbc + H * P + N, ddt, par, par + H, par + 2 * H};
    cpu->ssd_backward(&g, c.scratch, dout, c.states, &c.a);
    int ld = c.a.ld;
    for (size_t row = 0; row < (size_t)B * T; row++)
        for (int k = 0; k < ld; k++) {
            size_t i = row * ld + k;
            if (k >= H * P + 2 * N) {
                cr_assert(isnan(dxbc[i]), "ssd: column %d past the scan's was written", k);
                continue;
            }
            /* the reference's dBm, dCm rows start at column 0 */
            double want_i = k < H * P       ? r.dx[i]
                            : k < H * P + N ? r.dBm[i - H * P]
                                            : r.dCm[i - H * P - N];
            double lim = 1e-4 * fmax(1.0, fabs(want_i));
            cr_assert(fabs(dxbc[i] - want_i) <= lim, "ssd d(x|B|C) row %zu col %d: %.9g vs %.9g",
                      row, k, (double)dxbc[i], want_i);
        }
    expect_near("ssd ddt", ddt, r.ddt, (size_t)B * T * H, 1e-4);
    double *wp = dbuf(3 * (size_t)H);
    float *gp = fbuf(3 * (size_t)H);
    for (int h = 0; h < H; h++) {
        wp[h] = r.ddt_bias[h], wp[H + h] = r.dA_log[h], wp[2 * H + h] = r.dD[h];
    }
    for (int i = 0; i < 3 * H; i++) gp[i] = par[i] - pre[i];
    /* parameter sums run over B x T tokens as well: 1e-3 */
    expect_near("ssd d(dt_bias | A_log | D)", gp, wp, 3 * (size_t)H, 1e-3);
}

Test(ssd, matches_reference, .init = init_cpu) {
    for (int reverse = 0; reverse < 2; reverse++)
        for (int masked = 0; masked < 2; masked++) {
            ssd_check_ref(3, 23, 2, 4, 5, 4, reverse, masked, 100 + reverse * 2 + masked);
            ssd_check_ref(2, 9, 3, 2, 3, 1, reverse, masked, 110 + reverse * 2 + masked);
        }
    ssd_check_ref(3, 150, 2, 8, 16, 0, 1, 1,
                  120);                          /* the default chunk: 3 chunks, the last partial */
    ssd_check_ref(2, 64, 1, 8, 8, 0, 0, 0, 121); /* exactly one chunk */
    ssd_check_ref(1, 1, 1, 3, 2, 0, 0, 0, 122);  /* one token */
}

/* The chunk length changes only the order of float sums, not the result. */
Test(ssd, chunk_length_is_invisible, .init = init_cpu) {
    ssd_case c = ssd_make(2, 40, 2, 4, 6, 64, 0, 1, 130);
    float *one = fbuf(c.nout);
    cpu->ssd_forward(one, NULL, c.scratch, &c.a);
    for (int q = 1; q <= 17; q += 4) {
        ssd_case d = ssd_make(2, 40, 2, 4, 6, q, 0, 1, 130);
        cpu->ssd_forward(d.out, d.states, d.scratch, &d.a);
        double *w = dbuf(c.nout);
        for (size_t i = 0; i < c.nout; i++) w[i] = one[i];
        expect_near("ssd chunk vs no chunk", d.out, w, c.nout, 1e-5);
    }
}

typedef struct {
    ssd_case *c;
} ssd_ctx;
static void ssd_eval(void *p) {
    ssd_case *c = ((ssd_ctx *)p)->c;
    cpu->ssd_forward(c->out, c->states, c->scratch, &c->a);
}

/* L = <R, out> against central differences, for every input. */
static void ssd_gradcheck(int B, int T, int H, int P, int N, int Q, int reverse, uint64_t seed) {
    ssd_case c = ssd_make(B, T, H, P, N, Q, reverse, 1, seed);
    ssd_ctx ctx = {&c};
    float *R = frand(c.nout, -1, 1, seed + 9);
    float *dxbc = fbuf(c.nrow), *ddt = fbuf((size_t)B * T * H), *par = fbuf(3 * (size_t)H);
    bk_ssd_grads g = {dxbc, dxbc + H * P, dxbc + H * P + N, ddt, par, par + H, par + 2 * H};
    ssd_eval(&ctx);
    cpu->ssd_backward(&g, c.scratch, R, c.states, &c.a);
    struct {
        const char *what;
        float *x, *g;
        size_t n;
    } in[] = {{"x, B, C", c.xbc, dxbc, c.nrow},
              {"dt", c.dt, ddt, (size_t)B * T * H},
              {"dt_bias", c.bias, par, (size_t)H},
              {"A_log", c.Alog, par + H, (size_t)H},
              {"D", c.D, par + 2 * H, (size_t)H}};
    for (size_t k = 0; k < sizeof in / sizeof *in; k++) {
        double *num = dbuf(in[k].n);
        gc_numeric(in[k].x, in[k].n, R, c.out, c.nout, ssd_eval, &ctx, num);
        double worst = gc_compare(in[k].what, in[k].g, num, in[k].n);
        cr_assert(worst <= 1.0, "ssd d%s: gradient check failed (worst ratio %.3g)", in[k].what,
                  worst);
    }
}

Test(ssd, gradcheck, .init = init_cpu) {
    ssd_gradcheck(3, 11, 2, 3, 4, 3, 0, 200); /* chunks of 3 pass states on */
    ssd_gradcheck(3, 11, 2, 3, 4, 4, 1, 210);
    ssd_gradcheck(2, 7, 1, 2, 3, 0, 1, 220); /* one chunk */
}

/* ---- gated RMSNorm ---- */

Test(ssd, rmsnorm_gated_by_hand, .init = init_cpu) {
    /* z large: SiLU(z) ~ z; y = (1, 1), z = (30, 30): g = 30 each, rms 30 */
    float y[2] = {1, 1}, z[2] = {30, 30}, w[2] = {2, 3}, out[2], rstd[1];
    cpu->rmsnorm_gated_forward(out, rstd, y, z, w, 1, 2);
    expect_near("rmsnorm_gated by hand", out, (double[]){2, 3}, 2, 1e-5);
}

static void rms_check(int Nr, int C, uint64_t seed) {
    size_t n = (size_t)Nr * C;
    float *y = frand(n, -1, 1, seed), *z = frand(n, -3, 3, seed + 1);
    float *w = frand((size_t)C, 0.5f, 1.5f, seed + 2), *dout = frand(n, -1, 1, seed + 3);
    for (int c = 0; c < C; c++) y[c] = 0; /* a row of zeros (a masked token): out 0 */
    double *want = dbuf(n), *wdy = dbuf(n), *wdz = dbuf(n), *wdw = dbuf((size_t)C);
    ref_rmsnorm_gated(y, z, w, Nr, C, want, dout, wdy, wdz, wdw);
    float *out = fbuf(n), *rstd = fbuf((size_t)Nr), *dy = fbuf(n), *dz = fbuf(n);
    float *dw = frand((size_t)C, -1, 1, seed + 4), *dw0 = fbuf((size_t)C);
    memcpy(dw0, dw, C * sizeof(float));
    cpu->rmsnorm_gated_forward(out, rstd, y, z, w, Nr, C);
    expect_near("rmsnorm_gated forward", out, want, n, 1e-5);
    for (size_t i = 0; i < n; i++) dy[i] = dz[i] = NAN;
    cpu->rmsnorm_gated_backward(dy, dz, dw, dout, y, z, w, rstd, Nr, C);
    expect_near("rmsnorm_gated dy", dy, wdy, n, 1e-4);
    expect_near("rmsnorm_gated dz", dz, wdz, n, 1e-4);
    for (int c = 0; c < C; c++) dw[c] -= dw0[c];
    expect_near("rmsnorm_gated dw", dw, wdw, (size_t)C, 1e-4);
}

Test(ssd, rmsnorm_gated_matches_reference, .init = init_cpu) {
    rms_check(5, 12, 300);
    rms_check(40, 192, 310);
}

typedef struct {
    float *out, *y, *z, *w;
    int Nr, C;
} rms_ctx;
static void rms_eval(void *p) {
    rms_ctx *r = p;
    cpu->rmsnorm_gated_forward(r->out, NULL, r->y, r->z, r->w, r->Nr, r->C);
}

Test(ssd, rmsnorm_gated_gradcheck, .init = init_cpu) {
    int Nr = 4, C = 6;
    size_t n = (size_t)Nr * C;
    rms_ctx r = {
        fbuf(n), frand(n, -1, 1, 400), frand(n, -3, 3, 401), frand((size_t)C, 0.5f, 1.5f, 402), Nr,
        C};
    float *R = frand(n, -1, 1, 403), *rstd = fbuf((size_t)Nr);
    float *dy = fbuf(n), *dz = fbuf(n), *dw = fbuf((size_t)C);
    cpu->rmsnorm_gated_forward(r.out, rstd, r.y, r.z, r.w, Nr, C);
    cpu->rmsnorm_gated_backward(dy, dz, dw, R, r.y, r.z, r.w, rstd, Nr, C);
    struct {
        const char *what;
        float *x, *g;
        size_t n;
    } in[] = {{"y", r.y, dy, n}, {"z", r.z, dz, n}, {"w", r.w, dw, (size_t)C}};
    for (int k = 0; k < 3; k++) {
        double *num = dbuf(in[k].n);
        gc_numeric(in[k].x, in[k].n, R, r.out, n, rms_eval, &r, num);
        double worst = gc_compare(in[k].what, in[k].g, num, in[k].n);
        cr_assert(worst <= 1.0, "rmsnorm_gated d%s: gradient check failed (worst %.3g)", in[k].what,
                  worst);
    }
}
