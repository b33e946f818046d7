/* CPU reference: the sequence-mixer ops of BiMamba and BiLSTM — depthwise
 * causal conv1d, the Mamba-1 selective scan, and the LSTM recurrence.
 * Contracts in kernels/bk.h.
 *
 * Work split (results never depend on the thread count):
 *  - conv: one task per block of CONV_CB channels, all samples in order, so
 *    the block owns its dw/dbias and its dx columns.
 *  - scan forward: one task per (sample, tile of VLEN channels of a group);
 *    the tile's N states live in vector registers, lanes = channels.
 *  - scan backward: one task per (sample, group), because dBm/dCm sum over
 *    the group's channels. Time runs in chunks of BK_SCAN_CHUNK from the last
 *    to the first; for each chunk every tile restarts from the saved state,
 *    recomputes the chunk's states into a small buffer and walks it back.
 *    dBm/dCm are summed lane-wise over the tiles of the chunk and reduced
 *    across lanes once per (step, n). Parameter gradients go to per-sample
 *    partials in scratch and are added over samples in order at the end.
 *  - lstm: one task per (sample, stream); dwhh through per-sample partials. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

#include <math.h>
#include <string.h>

#include "kernels/cpu_math.h"
#include "kernels/cpu_ops.h"

/* Parallelise once a call touches this many floats. */
#define MIX_PAR_MIN (1 << 14)
#define CONV_CB 16 /* channels per conv task, a multiple of VLEN */
#define SCAN_L BK_SCAN_CHUNK

/* ---- vector helpers ---- */

static inline vfloat vsigmoid(vfloat x) { return 1.0f / (1.0f + bk_vexp(-x)); }

/* softplus(u) = max(u, 0) + log1p(e^-|u|). log1p(y) for y in (0, 1] is
 * 2 atanh(s), s = y / (2 + y) <= 1/3, by its series to s^15 (relative error
 * < 2e-9), so it stays accurate for tiny y. */
static inline vfloat vsoftplus(vfloat u) {
    vfloat au = vselect(u < 0.0f, -u, u);
    vfloat y = bk_vexp(-au);
    vfloat s = y / (2.0f + y), s2 = s * s;
    vfloat p = s2 * (1.0f / 15.0f) + 1.0f / 13.0f;
    p = p * s2 + 1.0f / 11.0f;
    p = p * s2 + 1.0f / 9.0f;
    p = p * s2 + 1.0f / 7.0f;
    p = p * s2 + 1.0f / 5.0f;
    p = p * s2 + 1.0f / 3.0f;
    p = p * s2 + 1.0f;
    return vselect(u > 0.0f, u, vsplat(0.0f)) + 2.0f * s * p;
}

static inline float sigmoid1(float x) { return vsigmoid(vsplat(x))[0]; }

/* Loads/stores of nl <= VLEN consecutive floats (a tile may be partial). */
static inline vfloat lanes_load(const float *p, int nl) {
    if (nl == VLEN) return vload(p);
    vfloat v = vsplat(0.0f);
    for (int l = 0; l < nl; l++) v[l] = p[l];
    return v;
}
static inline void lanes_store(float *p, vfloat v, int nl) {
    if (nl == VLEN) {
        vstore(p, v);
        return;
    }
    for (int l = 0; l < nl; l++) p[l] = v[l];
}
static inline void lanes_add(float *p, vfloat v, int nl) {
    if (nl == VLEN) {
        vstore(p, vload(p) + v);
        return;
    }
    for (int l = 0; l < nl; l++) p[l] += v[l];
}

static inline float vsum_lanes(vfloat v) {
#if VLEN == 8
    float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6], a3 = v[3] + v[7];
#else
    float a0 = v[0], a1 = v[1], a2 = v[2], a3 = v[3];
#endif
    return (a0 + a2) + (a1 + a3);
}

/* sigmoid over x[0..n) in place, and tanh */
static void sigmoid_inplace(float *x, int n) {
    int i = 0;
    for (; i + VLEN <= n; i += VLEN) vstore(x + i, vsigmoid(vload(x + i)));
    for (; i < n; i++) x[i] = sigmoid1(x[i]);
}
static void tanh_into(float *out, const float *x, int n) {
    int i = 0;
    for (; i + VLEN <= n; i += VLEN) vstore(out + i, bk_vtanh(vload(x + i)));
    for (; i < n; i++) out[i] = bk_tanh_fast(x[i]);
}

static inline int is_masked(const float *mask, int b, int T, int t) {
    return mask && mask[(size_t)b * T + t] == 0.0f;
}

/* ---- depthwise conv1d over the active tokens ---- */

/* The taps of a block: wt[k][c] = w[c0 + c, k] (zero past nc), so the inner
 * loops run over contiguous channels. */
static void conv_taps(float wt[BK_CONV_MAX_K][CONV_CB], const float *w, int c0, int nc, int K) {
    for (int k = 0; k < K; k++)
        for (int c = 0; c < CONV_CB; c++) wt[k][c] = c < nc ? w[(size_t)(c0 + c) * K + k] : 0.0f;
}

/* pre[c] = bias + sum of the taps over the window: prev[m] is the m-th most
 * recent earlier active token (tap K-2-m), t the current one (tap K-1). */
static void conv_pre(float pre[CONV_CB], const float *xb, const float wt[BK_CONV_MAX_K][CONV_CB],
                     const float *bias, int c0, int nc, int C, int K, int t, const int *prev,
                     int np) {
    const float *xt = xb + (size_t)t * C + c0;
    for (int c = 0; c < CONV_CB; c++)
        pre[c] = c < nc ? (bias ? bias[c0 + c] : 0.0f) + wt[K - 1][c] * xt[c] : 0.0f;
    for (int m = 0; m < np; m++) {
        const float *xp = xb + (size_t)prev[m] * C + c0;
        const float *wk = wt[K - 2 - m];
        for (int c = 0; c < nc; c++) pre[c] += wk[c] * xp[c];
    }
}

static void conv_push(int *prev, int *np, int K, int t) {
    if (K < 2) return;
    int n = *np < K - 1 ? *np + 1 : K - 1;
    for (int m = n - 1; m > 0; m--) prev[m] = prev[m - 1];
    prev[0] = t;
    *np = n;
}

void bk_cpu_conv1d_forward(float *out, const float *x, const float *w, const float *bias,
                           const bk_conv_args *a) {
    const int B = a->B, T = a->T, C = a->C, K = a->K;
    if (B <= 0 || T <= 0 || C <= 0) return;
    const int nb = (C + CONV_CB - 1) / CONV_CB;
    const long ntask = (long)B * nb;
#pragma omp parallel for schedule(static) if ((long long)B * T * C >= MIX_PAR_MIN)
    for (long task = 0; task < ntask; task++) {
        int b = (int)(task / nb), c0 = (int)(task % nb) * CONV_CB;
        int nc = C - c0 < CONV_CB ? C - c0 : CONV_CB;
        float wt[BK_CONV_MAX_K][CONV_CB], pre[CONV_CB];
        conv_taps(wt, w, c0, nc, K);
        const float *xb = x + (size_t)b * T * C;
        int prev[BK_CONV_MAX_K], np = 0;
        for (int s = 0; s < T; s++) {
            int t = a->reverse ? T - 1 - s : s;
            float *o = out + ((size_t)b * T + t) * C + c0;
            if (is_masked(a->mask, b, T, t)) {
                for (int c = 0; c < nc; c++) o[c] = 0.0f;
                continue;
            }
            conv_pre(pre, xb, wt, bias, c0, nc, C, K, t, prev, np);
            if (a->silu)
                for (int c = 0; c < CONV_CB; c += VLEN) {
                    vfloat v = vload(pre + c);
                    vstore(pre + c, v * vsigmoid(v));
                }
            for (int c = 0; c < nc; c++) o[c] = pre[c];
            conv_push(prev, &np, K, t);
        }
    }
}

/* One pass in the forward's order: at each active token the pre-activation
 * is recomputed, gpre = dout * act'(pre), and gpre is spread back onto the
 * window: dx[tap token] += w[tap] gpre, dw[tap] += gpre x[tap token]. */
void bk_cpu_conv1d_backward(float *dx, float *dw, float *dbias, float *scratch, const float *dout,
                            const float *x, const float *w, const float *bias,
                            const bk_conv_args *a) {
    (void)scratch; /* the CPU needs none: a task owns its channels over all samples */
    const int B = a->B, T = a->T, C = a->C, K = a->K;
    if (B <= 0 || T <= 0 || C <= 0 || (!dx && !dw && !dbias)) return;
    const int nb = (C + CONV_CB - 1) / CONV_CB;
#pragma omp parallel for schedule(static) if ((long long)B * T * C >= MIX_PAR_MIN)
    for (int blk = 0; blk < nb; blk++) {
        int c0 = blk * CONV_CB, nc = C - c0 < CONV_CB ? C - c0 : CONV_CB;
        float wt[BK_CONV_MAX_K][CONV_CB], pre[CONV_CB], gp[CONV_CB];
        float dwl[BK_CONV_MAX_K][CONV_CB], dbl[CONV_CB];
        conv_taps(wt, w, c0, nc, K);
        memset(dwl, 0, sizeof dwl);
        memset(dbl, 0, sizeof dbl);
        for (int b = 0; b < B; b++) {
            const float *xb = x + (size_t)b * T * C;
            int prev[BK_CONV_MAX_K], np = 0;
            for (int s = 0; s < T; s++) {
                int t = a->reverse ? T - 1 - s : s;
                if (is_masked(a->mask, b, T, t)) continue;
                const float *g = dout + ((size_t)b * T + t) * C + c0;
                conv_pre(pre, xb, wt, bias, c0, nc, C, K, t, prev, np);
                for (int c = 0; c < CONV_CB; c++) gp[c] = c < nc ? g[c] : 0.0f;
                if (a->silu)
                    for (int c = 0; c < CONV_CB; c += VLEN) {
                        vfloat v = vload(pre + c), sg = vsigmoid(v);
                        vstore(gp + c, vload(gp + c) * sg * (1.0f + v * (1.0f - sg)));
                    }
                const float *xt = xb + (size_t)t * C + c0;
                for (int c = 0; c < nc; c++) {
                    dbl[c] += gp[c];
                    dwl[K - 1][c] += gp[c] * xt[c];
                }
                if (dx) {
                    float *dxt = dx + ((size_t)b * T + t) * C + c0;
                    for (int c = 0; c < nc; c++) dxt[c] += wt[K - 1][c] * gp[c];
                }
                for (int m = 0; m < np; m++) {
                    const float *xp = xb + (size_t)prev[m] * C + c0;
                    int k = K - 2 - m;
                    for (int c = 0; c < nc; c++) dwl[k][c] += gp[c] * xp[c];
                    if (dx) {
                        float *dxp = dx + ((size_t)b * T + prev[m]) * C + c0;
                        for (int c = 0; c < nc; c++) dxp[c] += wt[k][c] * gp[c];
                    }
                }
                conv_push(prev, &np, K, t);
            }
        }
        for (int c = 0; c < nc; c++) {
            if (dbias) dbias[c0 + c] += dbl[c];
            if (dw)
                for (int k = 0; k < K; k++) dw[(size_t)(c0 + c) * K + k] += dwl[k][c];
        }
    }
}

/* ---- selective scan ---- */

/* What one tile (VLEN consecutive channels of group g of sample b) needs. */
typedef struct {
    const bk_scan_args *a;
    int b, g, c0, nl, bcs, nch;
    vfloat A[BK_SCAN_MAX_N], Dv, biasv;
} scan_tile;

static void scan_tile_init(scan_tile *st, const bk_scan_args *a, int b, int g, int cl) {
    const int Dg = a->D / a->G, N = a->N;
    st->a = a;
    st->b = b;
    st->g = g;
    st->c0 = g * Dg + cl;
    st->nl = Dg - cl < VLEN ? Dg - cl : VLEN;
    st->bcs = a->bc_stride ? a->bc_stride : N;
    st->nch = (a->T + SCAN_L - 1) / SCAN_L;
    for (int n = 0; n < N; n++) {
        vfloat v = vsplat(0.0f);
        for (int l = 0; l < st->nl; l++) v[l] = -expf(a->A_log[(size_t)(st->c0 + l) * N + n]);
        st->A[n] = v;
    }
    st->Dv = a->Dskip ? lanes_load(a->Dskip + st->c0, st->nl) : vsplat(0.0f);
    st->biasv = a->delta_bias ? lanes_load(a->delta_bias + st->c0, st->nl) : vsplat(0.0f);
}

/* Forward of one tile over all T steps. Inlined with N = 16 as a constant
 * for the common case, so the state loop unrolls into registers. */
static inline __attribute__((always_inline)) void scan_tile_forward(const scan_tile *st, float *out,
                                                                    float *states, const int N) {
    const bk_scan_args *a = st->a;
    const int T = a->T, D = a->D, G = a->G, b = st->b, nl = st->nl;
    vfloat h[BK_SCAN_MAX_N];
    for (int n = 0; n < N; n++) h[n] = vsplat(0.0f);
    for (int s = 0; s < T; s++) {
        int t = a->reverse ? T - 1 - s : s;
        size_t row = ((size_t)b * T + t) * D + st->c0;
        if (is_masked(a->mask, b, T, t)) {
            lanes_store(out + row, vsplat(0.0f), nl);
        } else {
            vfloat xv = lanes_load(a->x + row, nl);
            vfloat dt = vsoftplus(lanes_load(a->delta + row, nl) + st->biasv), dtx = dt * xv;
            size_t bc = (((size_t)b * T + t) * G + st->g) * st->bcs;
            const float *Bp = a->Bm + bc, *Cp = a->Cm + bc;
            vfloat y = st->Dv * xv;
            for (int n = 0; n < N; n++) {
                h[n] = bk_vexp(dt * st->A[n]) * h[n] + dtx * Bp[n];
                y += h[n] * Cp[n];
            }
            if (a->z) {
                vfloat zv = lanes_load(a->z + row, nl);
                y *= zv * vsigmoid(zv);
            }
            lanes_store(out + row, y, nl);
        }
        if (states && (s % SCAN_L == SCAN_L - 1 || s == T - 1)) {
            float *sp = states + ((size_t)b * D + st->c0) * st->nch * N + (size_t)(s / SCAN_L) * N;
            for (int l = 0; l < nl; l++)
                for (int n = 0; n < N; n++) sp[(size_t)l * st->nch * N + n] = h[n][l];
        }
    }
}

void bk_cpu_scan_forward(float *out, float *states, const bk_scan_args *a) {
    const int B = a->B, T = a->T, D = a->D, G = a->G;
    if (B <= 0 || T <= 0 || D <= 0) return;
    const int Dg = D / G, tpg = (Dg + VLEN - 1) / VLEN;
    const long ntask = (long)B * G * tpg;
#pragma omp parallel for schedule(static) if ((long long)B * T * D >= MIX_PAR_MIN / 4)
    for (long task = 0; task < ntask; task++) {
        int tile = (int)(task % tpg), g = (int)(task / tpg % G), b = (int)(task / tpg / G);
        scan_tile st;
        scan_tile_init(&st, a, b, g, tile * VLEN);
        if (a->N == BK_SCAN_MAX_N)
            scan_tile_forward(&st, out, states, BK_SCAN_MAX_N);
        else
            scan_tile_forward(&st, out, states, a->N);
    }
}

/* Per-thread buffers of one chunk of one tile, and of the chunk's dBm/dCm
 * summed over the tiles lane-wise. */
typedef struct {
    vfloat h[SCAN_L][BK_SCAN_MAX_N]; /* state after each step */
    vfloat e[SCAN_L][BK_SCAN_MAX_N]; /* exp(dt A) of each step */
    vfloat dt[SCAN_L];
    vfloat dB[SCAN_L][BK_SCAN_MAX_N], dC[SCAN_L][BK_SCAN_MAX_N];
} scan_chunk_buf;

/* Backward of one tile over the steps [s0, s1) of chunk k. part holds the
 * tile's lanes' running sums, per channel 2N+2 floats: dA (w.r.t. A) [N],
 * dD, dbias, and the carried dh [N] (the gradient w.r.t. the state before
 * step s1). */
static inline __attribute__((always_inline)) void
scan_tile_backward_chunk(const scan_tile *st, const bk_scan_grads *gr, const float *dout,
                         const float *states, float *part, scan_chunk_buf *cb, int k, const int N) {
    const bk_scan_args *a = st->a;
    const int T = a->T, D = a->D, G = a->G, b = st->b, nl = st->nl, P = 2 * N + 2;
    const int s0 = k * SCAN_L, s1 = s0 + SCAN_L < T ? s0 + SCAN_L : T;
    vfloat h0[BK_SCAN_MAX_N], hc[BK_SCAN_MAX_N], dh[BK_SCAN_MAX_N], dA[BK_SCAN_MAX_N];
    for (int n = 0; n < N; n++) {
        vfloat v = vsplat(0.0f), d = vsplat(0.0f), q = vsplat(0.0f);
        for (int l = 0; l < nl; l++) {
            if (k > 0)
                v[l] = states[((size_t)b * D + st->c0 + l) * st->nch * N + (size_t)(k - 1) * N + n];
            d[l] = part[(size_t)l * P + N + 2 + n];
            q[l] = part[(size_t)l * P + n];
        }
        h0[n] = hc[n] = v;
        dh[n] = d;
        dA[n] = q;
    }
    /* recompute the chunk */
    for (int s = s0; s < s1; s++) {
        int t = a->reverse ? T - 1 - s : s, i = s - s0;
        if (!is_masked(a->mask, b, T, t)) {
            size_t row = ((size_t)b * T + t) * D + st->c0;
            vfloat xv = lanes_load(a->x + row, nl);
            vfloat dt = vsoftplus(lanes_load(a->delta + row, nl) + st->biasv), dtx = dt * xv;
            const float *Bp = a->Bm + (((size_t)b * T + t) * G + st->g) * st->bcs;
            cb->dt[i] = dt;
            for (int n = 0; n < N; n++) {
                vfloat e = bk_vexp(dt * st->A[n]);
                hc[n] = e * hc[n] + dtx * Bp[n];
                cb->e[i][n] = e;
            }
        }
        for (int n = 0; n < N; n++) cb->h[i][n] = hc[n];
    }
    /* walk it back */
    vfloat dD = vsplat(0.0f), dbias = vsplat(0.0f);
    for (int l = 0; l < nl; l++) {
        dD[l] = part[(size_t)l * P + N];
        dbias[l] = part[(size_t)l * P + N + 1];
    }
    for (int s = s1 - 1; s >= s0; s--) {
        int t = a->reverse ? T - 1 - s : s, i = s - s0;
        if (is_masked(a->mask, b, T, t)) continue;
        size_t row = ((size_t)b * T + t) * D + st->c0;
        size_t bc = (((size_t)b * T + t) * G + st->g) * st->bcs;
        const float *Bp = a->Bm + bc, *Cp = a->Cm + bc;
        const vfloat *hp = i > 0 ? cb->h[i - 1] : h0, *ht = cb->h[i], *et = cb->e[i];
        vfloat xv = lanes_load(a->x + row, nl), gv = lanes_load(dout + row, nl);
        vfloat u = lanes_load(a->delta + row, nl) + st->biasv, dt = cb->dt[i], dtx = dt * xv;
        vfloat dys = gv;
        if (a->z) {
            vfloat ys = st->Dv * xv;
            for (int n = 0; n < N; n++) ys += ht[n] * Cp[n];
            vfloat zv = lanes_load(a->z + row, nl), sz = vsigmoid(zv);
            dys = gv * zv * sz;
            if (gr->dz) lanes_add(gr->dz + row, gv * ys * sz * (1.0f + zv * (1.0f - sz)), nl);
        }
        dD += dys * xv;
        vfloat dxv = dys * st->Dv, ddt = vsplat(0.0f);
        for (int n = 0; n < N; n++) {
            vfloat dhn = dh[n] + dys * Cp[n];
            cb->dC[i][n] += dys * ht[n];
            cb->dB[i][n] += dhn * dtx;
            vfloat q = dhn * hp[n] * et[n]; /* dL / d(dt A_n) */
            ddt += q * st->A[n] + dhn * Bp[n] * xv;
            dA[n] += q * dt;
            dxv += dhn * dt * Bp[n];
            dh[n] = dhn * et[n];
        }
        vfloat du = ddt * vsigmoid(u);
        dbias += du;
        if (gr->dx) lanes_add(gr->dx + row, dxv, nl);
        if (gr->ddelta) lanes_add(gr->ddelta + row, du, nl);
    }
    for (int l = 0; l < nl; l++) {
        for (int n = 0; n < N; n++) {
            part[(size_t)l * P + n] = dA[n][l];
            part[(size_t)l * P + N + 2 + n] = dh[n][l];
        }
        part[(size_t)l * P + N] = dD[l];
        part[(size_t)l * P + N + 1] = dbias[l];
    }
}

static void scan_group_backward(const bk_scan_args *a, const bk_scan_grads *gr, float *scratch,
                                const float *dout, const float *states, int b, int g,
                                scan_chunk_buf *cb) {
    const int T = a->T, D = a->D, G = a->G, N = a->N, Dg = D / G, P = 2 * N + 2;
    const int tpg = (Dg + VLEN - 1) / VLEN, nch = (T + SCAN_L - 1) / SCAN_L;
    const int bcs = a->bc_stride ? a->bc_stride : N;
    float *part = scratch + ((size_t)b * D + (size_t)g * Dg) * P;
    memset(part, 0, (size_t)Dg * P * sizeof(float));
    for (int k = nch - 1; k >= 0; k--) {
        memset(cb->dB, 0, sizeof cb->dB);
        memset(cb->dC, 0, sizeof cb->dC);
        for (int tile = 0; tile < tpg; tile++) {
            scan_tile st;
            scan_tile_init(&st, a, b, g, tile * VLEN);
            float *tp = part + (size_t)tile * VLEN * P;
            if (N == BK_SCAN_MAX_N)
                scan_tile_backward_chunk(&st, gr, dout, states, tp, cb, k, BK_SCAN_MAX_N);
            else
                scan_tile_backward_chunk(&st, gr, dout, states, tp, cb, k, N);
        }
        const int s0 = k * SCAN_L, s1 = s0 + SCAN_L < T ? s0 + SCAN_L : T;
        for (int s = s0; s < s1; s++) {
            int t = a->reverse ? T - 1 - s : s;
            if (is_masked(a->mask, b, T, t)) continue;
            size_t bc = (((size_t)b * T + t) * G + g) * bcs;
            for (int n = 0; n < N; n++) {
                if (gr->dBm) gr->dBm[bc + n] += vsum_lanes(cb->dB[s - s0][n]);
                if (gr->dCm) gr->dCm[bc + n] += vsum_lanes(cb->dC[s - s0][n]);
            }
        }
    }
}

void bk_cpu_scan_backward(const bk_scan_grads *gr, float *scratch, const float *dout,
                          const float *states, const bk_scan_args *a) {
    const int B = a->B, T = a->T, D = a->D, G = a->G, N = a->N, P = 2 * N + 2;
    if (B <= 0 || T <= 0 || D <= 0) return;
    const long ntask = (long)B * G;
#pragma omp parallel if ((long long)B * T * D >= MIX_PAR_MIN / 4 && ntask > 1)
    {
        scan_chunk_buf cb; /* ~130 KB of this thread's stack */
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < ntask; task++)
            scan_group_backward(a, gr, scratch, dout, states, (int)(task / G), (int)(task % G),
                                &cb);
    }
    /* parameter gradients: add the per-sample partials in sample order */
    if (!gr->dA_log && !gr->dDskip && !gr->ddelta_bias) return;
#pragma omp parallel for schedule(static) if ((long long)B * D * N >= MIX_PAR_MIN)
    for (int c = 0; c < D; c++) {
        float sA[BK_SCAN_MAX_N] = {0}, sD = 0.0f, sb = 0.0f;
        for (int b = 0; b < B; b++) {
            const float *p = scratch + ((size_t)b * D + c) * P;
            for (int n = 0; n < N; n++) sA[n] += p[n];
            sD += p[N];
            sb += p[N + 1];
        }
        /* dA_log = dA * dA/dA_log = dA * A, with A = -exp(A_log) */
        if (gr->dA_log)
            for (int n = 0; n < N; n++)
                gr->dA_log[(size_t)c * N + n] += sA[n] * -expf(a->A_log[(size_t)c * N + n]);
        if (gr->dDskip) gr->dDskip[c] += sD;
        if (gr->ddelta_bias) gr->ddelta_bias[c] += sb;
    }
}

/* ---- LSTM recurrence ---- */

static inline size_t lstm_row(const bk_lstm_args *a, int b, int t, int s) {
    return ((size_t)b * a->T + t) * a->S + s;
}

void bk_cpu_lstm_forward(float *out, float *saved, const float *gx, const float *whh,
                         const bk_lstm_args *a) {
    const int B = a->B, T = a->T, S = a->S, H = a->H;
    if (B <= 0 || T <= 0 || S <= 0 || H <= 0) return;
    const long ntask = (long)B * S;
#pragma omp parallel for schedule(static) if ((long long)B * T * S * H * H >= MIX_PAR_MIN)
    for (long task = 0; task < ntask; task++) {
        int b = (int)(task / S), s = (int)(task % S);
        int rev = a->bidir && (s & 1);
        const float *W = whh + (size_t)s * 4 * H * H;
        float h[BK_LSTM_MAX_H], c[BK_LSTM_MAX_H], tc[BK_LSTM_MAX_H], g[4 * BK_LSTM_MAX_H];
        memset(h, 0, (size_t)H * sizeof(float));
        memset(c, 0, (size_t)H * sizeof(float));
        for (int step = 0; step < T; step++) {
            int t = rev ? T - 1 - step : step;
            size_t r = lstm_row(a, b, t, s);
            float *o = out + r * H, *sv = saved ? saved + r * 6 * H : NULL;
            if (is_masked(a->mask, b, T, t)) {
                memset(o, 0, (size_t)H * sizeof(float));
                if (sv) {
                    memset(sv, 0, (size_t)4 * H * sizeof(float));
                    memcpy(sv + 4 * H, c, (size_t)H * sizeof(float));
                    memcpy(sv + 5 * H, h, (size_t)H * sizeof(float));
                }
                continue;
            }
            const float *x = gx + r * 4 * H;
            for (int q = 0; q < 4 * H; q++) {
                const float *wr = W + (size_t)q * H;
                float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
                for (int j = 0; j < H; j++) acc += wr[j] * h[j];
                g[q] = x[q] + acc;
            }
            sigmoid_inplace(g, 2 * H);
            tanh_into(g + 2 * H, g + 2 * H, H);
            sigmoid_inplace(g + 3 * H, H);
            for (int j = 0; j < H; j++) c[j] = g[H + j] * c[j] + g[j] * g[2 * H + j];
            tanh_into(tc, c, H);
            for (int j = 0; j < H; j++) h[j] = g[3 * H + j] * tc[j];
            memcpy(o, h, (size_t)H * sizeof(float));
            if (sv) {
                memcpy(sv, g, (size_t)4 * H * sizeof(float));
                memcpy(sv + 4 * H, c, (size_t)H * sizeof(float));
                memcpy(sv + 5 * H, h, (size_t)H * sizeof(float));
            }
        }
    }
}

void bk_cpu_lstm_backward(float *dgx, float *dwhh, float *scratch, const float *dout,
                          const float *saved, const float *whh, const bk_lstm_args *a) {
    const int B = a->B, T = a->T, S = a->S, H = a->H;
    if (B <= 0 || T <= 0 || S <= 0 || H <= 0 || (!dgx && !dwhh)) return;
    const long ntask = (long)B * S;
    const size_t WW = (size_t)4 * H * H;
#pragma omp parallel for schedule(static) if ((long long)B * T * S * H * H >= MIX_PAR_MIN)
    for (long task = 0; task < ntask; task++) {
        int b = (int)(task / S), s = (int)(task % S);
        int rev = a->bidir && (s & 1);
        const float *W = whh + (size_t)s * WW;
        float *part = dwhh ? scratch + (size_t)task * WW : NULL;
        if (part) memset(part, 0, WW * sizeof(float));
        float dh[BK_LSTM_MAX_H], dc[BK_LSTM_MAX_H], tc[BK_LSTM_MAX_H], dp[4 * BK_LSTM_MAX_H];
        memset(dh, 0, (size_t)H * sizeof(float));
        memset(dc, 0, (size_t)H * sizeof(float));
        for (int step = T - 1; step >= 0; step--) {
            int t = rev ? T - 1 - step : step;
            if (is_masked(a->mask, b, T, t)) continue; /* dh, dc pass through */
            size_t r = lstm_row(a, b, t, s);
            const float *sv = saved + r * 6 * H, *go = dout + r * H;
            const float *svp = step > 0 ? saved + lstm_row(a, b, rev ? t + 1 : t - 1, s) * 6 * H
                                        : NULL; /* the state before this step */
            const float *gi = sv, *gf = sv + H, *gg = sv + 2 * H, *gO = sv + 3 * H;
            tanh_into(tc, sv + 4 * H, H);
            for (int j = 0; j < H; j++) {
                float dhj = dh[j] + go[j];
                float dcj = dc[j] + dhj * gO[j] * (1.0f - tc[j] * tc[j]);
                float cp = svp ? svp[4 * H + j] : 0.0f;
                dp[j] = dcj * gg[j] * gi[j] * (1.0f - gi[j]);
                dp[H + j] = dcj * cp * gf[j] * (1.0f - gf[j]);
                dp[2 * H + j] = dcj * gi[j] * (1.0f - gg[j] * gg[j]);
                dp[3 * H + j] = dhj * tc[j] * gO[j] * (1.0f - gO[j]);
                dc[j] = dcj * gf[j];
            }
            if (dgx) {
                float *d = dgx + r * 4 * H;
                for (int q = 0; q < 4 * H; q++) d[q] += dp[q];
            }
            if (part && svp) {
                const float *hp = svp + 5 * H;
                for (int q = 0; q < 4 * H; q++) {
                    float *pr = part + (size_t)q * H;
                    float d = dp[q];
#pragma omp simd
                    for (int j = 0; j < H; j++) pr[j] += d * hp[j];
                }
            }
            memset(dh, 0, (size_t)H * sizeof(float));
            for (int q = 0; q < 4 * H; q++) {
                const float *wr = W + (size_t)q * H;
                float d = dp[q];
#pragma omp simd
                for (int j = 0; j < H; j++) dh[j] += wr[j] * d;
            }
        }
    }
    if (!dwhh) return;
    const size_t total = (size_t)S * WW;
#pragma omp parallel for schedule(static) if (total * B >= MIX_PAR_MIN)
    for (size_t e = 0; e < total; e++) {
        size_t s = e / WW, i = e % WW;
        float acc = 0.0f;
        for (int b = 0; b < B; b++) acc += scratch[((size_t)b * S + s) * WW + i];
        dwhh[e] += acc;
    }
}
