/* Plain double-precision references the optimised backends are tested
 * against; slow, obvious, no SIMD, no BLAS. This file: the sequence-mixer ops
 * of kernels/cpu_mixer.c (depthwise causal conv1d, the Mamba-1 selective
 * scan, the LSTM recurrence), forward and backward, written sequentially from
 * the equations in kernels/bk.h over the list of a sample's active tokens,
 * keeping every state. The case structs hold one op's arguments and inputs;
 * the tests fill them. */
#ifndef BF_REF_MIXERS_H
#define BF_REF_MIXERS_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/bk.h"
#include "tests/ref/ref_ops.h"

/* Zeroed scratch; a reference has no way to go on without it. */
static inline void *ref_zalloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "ref: out of memory (%zu bytes)\n", bytes);
        abort();
    }
    return p;
}

/* Token t of sample b is active (no mask: every token is). */
static inline int ref_active(const float *mask, int b, int T, int t) {
    return !mask || mask[(size_t)b * T + t] != 0.0f;
}

/* Positions of the active tokens of sample b in scan order; returns the count. */
static inline int ref_scan_order(const float *mask, int b, int T, int reverse, int *pos) {
    int n = 0;
    for (int s = 0; s < T; s++) {
        int t = reverse ? T - 1 - s : s;
        if (ref_active(mask, b, T, t)) pos[n++] = t;
    }
    return n;
}

/* ======================= conv1d ======================= */

typedef struct {
    bk_conv_args a;
    float *x, *w, *bias, *out;
} conv_case;

/* Reference forward and backward in double, from the definition over the
 * list of active positions. gx, gw, gb nullable (then no backward); the
 * gradients are added to what they hold. */
static inline void ref_conv1d(const conv_case *c, const float *dout, double *out, double *gx,
                              double *gw, double *gb) {
    const int B = c->a.B, T = c->a.T, C = c->a.C, K = c->a.K;
    int *pos = ref_zalloc((size_t)T * sizeof(int));
    for (int b = 0; b < B; b++) {
        int n = ref_scan_order(c->a.mask, b, T, c->a.reverse, pos);
        for (int t = 0; t < T; t++)
            if (!ref_active(c->a.mask, b, T, t))
                for (int ch = 0; ch < C; ch++) out[((size_t)b * T + t) * C + ch] = 0;
        for (int ch = 0; ch < C; ch++)
            for (int j = 0; j < n; j++) {
                double pre = c->bias ? c->bias[ch] : 0;
                for (int k = 0; k < K; k++) {
                    int i = j - (K - 1) + k;
                    if (i >= 0)
                        pre += (double)c->w[ch * K + k] * c->x[((size_t)b * T + pos[i]) * C + ch];
                }
                size_t o = ((size_t)b * T + pos[j]) * C + ch;
                out[o] = c->a.silu ? pre * ref_sigmoid(pre) : pre;
                if (!gx) continue;
                double s = ref_sigmoid(pre);
                double gp = dout[o] * (c->a.silu ? s * (1 + pre * (1 - s)) : 1.0);
                gb[ch] += gp;
                for (int k = 0; k < K; k++) {
                    int i = j - (K - 1) + k;
                    if (i < 0) continue;
                    size_t xi = ((size_t)b * T + pos[i]) * C + ch;
                    gw[ch * K + k] += gp * c->x[xi];
                    gx[xi] += gp * c->w[ch * K + k];
                }
            }
    }
    free(pos);
}

/* ======================= selective scan ======================= */

#define SCAN_R 2 /* delta-rank columns in front of B and C in the xdbl rows */

/* Bm and Cm are views into xdbl[B,T,G,R+2N] as a block-diagonal W_x would
 * produce them (SCAN_R delta-rank columns first), so bc_stride is exercised;
 * nx = B*T*D, nbc = B*T*G*(SCAN_R+2N). */
typedef struct {
    bk_scan_args a;
    float *x, *delta, *bias, *Alog, *xdbl, *Dp, *z, *out, *states;
    size_t nx, nbc;
} scan_case;

/* The reference's output and gradients, each zeroed by ref_scan_alloc. */
typedef struct {
    double *out, *dx, *ddelta, *dbias, *dAlog, *dxdbl, *dD, *dz;
} ref_scan_out;

static inline ref_scan_out ref_scan_alloc(const scan_case *c) {
    const size_t D = (size_t)c->a.D, N = (size_t)c->a.N, d = sizeof(double);
    ref_scan_out r = {ref_zalloc(c->nx * d), ref_zalloc(c->nx * d), ref_zalloc(c->nx * d),
                      ref_zalloc(D * d),     ref_zalloc(D * N * d), ref_zalloc(c->nbc * d),
                      ref_zalloc(D * d),     ref_zalloc(c->nx * d)};
    return r;
}

static inline void ref_scan_free(ref_scan_out *r) {
    free(r->out);
    free(r->dx);
    free(r->ddelta);
    free(r->dbias);
    free(r->dAlog);
    free(r->dxdbl);
    free(r->dD);
    free(r->dz);
}

/* The scan and its gradients in double, one channel at a time, keeping
 * every state (the plain way the op avoids). dout nullable (then no
 * backward); the gradients are added to what r holds. */
static inline void ref_scan(const scan_case *c, const float *dout, ref_scan_out *r) {
    const bk_scan_args *a = &c->a;
    const int B = a->B, T = a->T, D = a->D, G = a->G, N = a->N, Dg = D / G, S = a->bc_stride;
    int *pos = ref_zalloc((size_t)T * sizeof(int));
    double *hs = ref_zalloc((size_t)(T + 1) * N * sizeof(double));
    double *dh = ref_zalloc((size_t)N * sizeof(double));
    for (int b = 0; b < B; b++) {
        int na = ref_scan_order(a->mask, b, T, a->reverse, pos);
        for (int d = 0; d < D; d++) {
            int g = d / Dg;
            double A[BK_SCAN_MAX_N];
            for (int n = 0; n < N; n++) A[n] = -exp((double)a->A_log[d * N + n]);
            for (int n = 0; n < N; n++) hs[n] = 0;
            for (int t = 0; t < T; t++) r->out[((size_t)b * T + t) * D + d] = 0;
            for (int j = 0; j < na; j++) {
                size_t i = ((size_t)b * T + pos[j]) * D + d;
                const float *Bp = a->Bm + (((size_t)b * T + pos[j]) * G + g) * S;
                const float *Cp = a->Cm + (((size_t)b * T + pos[j]) * G + g) * S;
                double dt = ref_softplus((double)a->delta[i] + a->delta_bias[d]),
                       y = a->Dskip[d] * (double)a->x[i];
                for (int n = 0; n < N; n++) {
                    hs[(j + 1) * N + n] = exp(dt * A[n]) * hs[j * N + n] + dt * Bp[n] * a->x[i];
                    y += Cp[n] * hs[(j + 1) * N + n];
                }
                r->out[i] = a->z ? y * a->z[i] * ref_sigmoid(a->z[i]) : y;
            }
            if (!dout) continue;
            for (int n = 0; n < N; n++) dh[n] = 0;
            for (int j = na - 1; j >= 0; j--) {
                size_t i = ((size_t)b * T + pos[j]) * D + d;
                size_t bc = (((size_t)b * T + pos[j]) * G + g) * S;
                const float *Bp = a->Bm + bc, *Cp = a->Cm + bc;
                double u = (double)a->delta[i] + a->delta_bias[d], dt = ref_softplus(u);
                double x = a->x[i], gy = dout[i], dys = gy;
                if (a->z) {
                    double ys = a->Dskip[d] * x, z = a->z[i], s = ref_sigmoid(z);
                    for (int n = 0; n < N; n++) ys += Cp[n] * hs[(j + 1) * N + n];
                    dys = gy * z * s;
                    r->dz[i] += gy * ys * s * (1 + z * (1 - s));
                }
                r->dD[d] += dys * x;
                r->dx[i] += dys * a->Dskip[d];
                double ddt = 0;
                for (int n = 0; n < N; n++) {
                    double e = exp(dt * A[n]), dhn = dh[n] + dys * Cp[n];
                    r->dxdbl[bc + SCAN_R + N + n] += dys * hs[(j + 1) * N + n];
                    r->dxdbl[bc + SCAN_R + n] += dhn * dt * x;
                    double q = dhn * hs[j * N + n] * e;
                    ddt += q * A[n] + dhn * Bp[n] * x;
                    r->dAlog[d * N + n] += q * dt * A[n];
                    r->dx[i] += dhn * dt * Bp[n];
                    dh[n] = dhn * e;
                }
                r->ddelta[i] += ddt * ref_sigmoid(u);
                r->dbias[d] += ddt * ref_sigmoid(u);
            }
        }
    }
    free(pos);
    free(hs);
    free(dh);
}

/* ======================= LSTM ======================= */

/* ng = B*T*S*4H gate pre-activations, no = B*T*S*H outputs, nw = S*4H*H. */
typedef struct {
    bk_lstm_args a;
    float *gx, *whh, *out, *saved;
    size_t ng, no, nw;
} lstm_case;

/* torch.nn.LSTM's equations in double, with every state kept; backward by
 * plain BPTT. dout nullable (then no backward, and ggx, gw unused); the
 * gradients are added to what ggx and gw hold. */
static inline void ref_lstm(const lstm_case *c, const float *dout, double *out, double *ggx,
                            double *gw) {
    const int B = c->a.B, T = c->a.T, S = c->a.S, H = c->a.H;
    const size_t d = sizeof(double);
    int *pos = ref_zalloc((size_t)T * sizeof(int));
    double *hs = ref_zalloc((size_t)(T + 1) * H * d), *cs = ref_zalloc((size_t)(T + 1) * H * d);
    double *gt = ref_zalloc((size_t)T * 4 * H * d), *dh = ref_zalloc((size_t)H * d),
           *dc = ref_zalloc((size_t)H * d), *dp = ref_zalloc((size_t)4 * H * d);
    for (int b = 0; b < B; b++)
        for (int s = 0; s < S; s++) {
            int rev = c->a.bidir && (s & 1);
            int na = ref_scan_order(c->a.mask, b, T, rev, pos);
            const float *W = c->whh + (size_t)s * 4 * H * H;
            for (int t = 0; t < T; t++)
                for (int j = 0; j < H; j++) out[(((size_t)b * T + t) * S + s) * H + j] = 0;
            for (int j = 0; j < H; j++) hs[j] = cs[j] = 0;
            for (int k = 0; k < na; k++) {
                size_t r = ((size_t)b * T + pos[k]) * S + s;
                double *g = gt + (size_t)k * 4 * H;
                for (int q = 0; q < 4 * H; q++) {
                    double v = c->gx[r * 4 * H + q];
                    for (int j = 0; j < H; j++) v += W[q * H + j] * hs[k * H + j];
                    g[q] = q >= 2 * H && q < 3 * H ? tanh(v) : ref_sigmoid(v);
                }
                for (int j = 0; j < H; j++) {
                    cs[(k + 1) * H + j] = g[H + j] * cs[k * H + j] + g[j] * g[2 * H + j];
                    hs[(k + 1) * H + j] = g[3 * H + j] * tanh(cs[(k + 1) * H + j]);
                    out[r * H + j] = hs[(k + 1) * H + j];
                }
            }
            if (!dout) continue;
            for (int j = 0; j < H; j++) dh[j] = dc[j] = 0;
            for (int k = na - 1; k >= 0; k--) {
                size_t r = ((size_t)b * T + pos[k]) * S + s;
                const double *g = gt + (size_t)k * 4 * H;
                for (int j = 0; j < H; j++) {
                    double tc = tanh(cs[(k + 1) * H + j]), dhj = dh[j] + dout[r * H + j];
                    double dcj = dc[j] + dhj * g[3 * H + j] * (1 - tc * tc);
                    dp[j] = dcj * g[2 * H + j] * g[j] * (1 - g[j]);
                    dp[H + j] = dcj * cs[k * H + j] * g[H + j] * (1 - g[H + j]);
                    dp[2 * H + j] = dcj * g[j] * (1 - g[2 * H + j] * g[2 * H + j]);
                    dp[3 * H + j] = dhj * tc * g[3 * H + j] * (1 - g[3 * H + j]);
                    dc[j] = dcj * g[H + j];
                }
                for (int q = 0; q < 4 * H; q++) {
                    ggx[r * 4 * H + q] += dp[q];
                    for (int j = 0; j < H; j++)
                        gw[(size_t)s * 4 * H * H + q * H + j] += dp[q] * hs[k * H + j];
                }
                for (int j = 0; j < H; j++) {
                    dh[j] = 0;
                    for (int q = 0; q < 4 * H; q++) dh[j] += W[q * H + j] * dp[q];
                }
            }
        }
    free(pos);
    free(hs);
    free(cs);
    free(gt);
    free(dh);
    free(dc);
    free(dp);
}

#endif
