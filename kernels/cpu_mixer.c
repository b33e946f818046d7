/* Optimised CPU backend: the sequence-mixer ops of BiMamba and BiLSTM —
 * depthwise causal conv1d, the Mamba-1 selective scan, and the LSTM
 * recurrence. Contracts in kernels/bk.h; the plain sequential references in
 * double are in tests/ref/ref_mixers.h.
 *
 * Work split (results never depend on the thread count):
 *  - conv: lanes are channels, MLEN of them per vector. Forward: one task
 *    per (sample, block of steps), along rows. Backward: one task per vector of
 *    channels over all samples in order, so it owns its dw/dbias and its dx
 *    columns.
 *  - scan forward: one task per (sample, group), or per block of a group's
 *    tiles when samples are too few to keep every thread busy; time runs in
 *    chunks of BK_SCAN_CHUNK steps, each chunk for every tile of MLEN
 *    channels of the task in turn, so the chunk's rows come from memory once
 *    and the task's other tiles find them in cache. While a tile runs its N states
 *    live in vector registers, lanes = channels; between chunks they wait in
 *    a small per-thread buffer.
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
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/cpu_math.h"
#include "kernels/cpu_ops.h"

/* Parallelise once a call touches this many floats. */
#define MIX_PAR_MIN (1 << 14)
#define SCAN_L BK_SCAN_CHUNK
#define CONV_ROWS 64              /* steps of a conv forward task */
#define CONV_SLAB 512             /* channels of a conv forward row at a time */
#define LSTM_WT_MAX (4 * 64 * 64) /* floats of a transposed whh kept on the stack */

/* ---- vector helpers ---- */

static inline vfloat vsigmoid(vfloat x) { return 1.0f / (1.0f + bk_vexp(-x)); }

static inline float sigmoid1(float x) { return vsigmoid(vsplat(x))[0]; }

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

/* ---- the scan's vectors ----
 * The scan's lanes are channels: MLEN channels of one group per tile. With
 * AVX-512 a tile is 16 channels (one cache line of each row, and twice the
 * work per instruction); otherwise the VLEN of cpu_math.h. */
#if defined(__AVX512F__)
#define MLEN 16
#else
#define MLEN VLEN
#endif
typedef float mvec __attribute__((vector_size(MLEN * sizeof(float))));
typedef int32_t mint __attribute__((vector_size(MLEN * sizeof(int32_t))));

static inline mvec msplat(float x) { return (mvec){0} + x; }
static inline mvec mselect(mint m, mvec a, mvec b) {
    return (mvec)(((mint)a & m) | ((mint)b & ~m));
}

/* 2^t for t <= 0 (the decay exp(dt A), A < 0, taken as 2^(dt A log2 e)):
 * t = n + r with n = round(t), |r| <= 1/2, 2^r by a degree-5 polynomial
 * fitted for relative error on [-1/2, 1/2] with p(0) = 1 exactly (so a zero
 * step decays nothing; 9e-8 in exact arithmetic, 1.9e-7 in float), times
 * 2^n. 0 <= result <= 1. n is found by the 1.5 * 2^23 rounding trick (an
 * add and a subtract, cheaper than vrndscaleps' two uops). With AVX-512, 2^n
 * is vscalefps (t below -126 gives a subnormal or 0, the true value
 * rounded); otherwise n is added into the exponent bits, t clamped to -125
 * (~1e-38). */
static inline mvec exp2_poly(mvec r) {
    mvec p = r * 1.32647256e-3f + 9.67151309e-3f;
    p = p * r + 5.55073375e-2f;
    p = p * r + 2.40222421e-1f;
    p = p * r + 6.93146978e-1f;
    return p * r + 1.0f;
}
#if MLEN == 16
static inline mvec mexp2_neg(mvec t) {
    const mvec magic = msplat(12582912.0f);
    mvec n = (t + magic) - magic;
    return (mvec)_mm512_scalef_ps((__m512)exp2_poly(t - n), (__m512)n);
}
#else
static inline mvec mexp2_neg(mvec t) {
    t = mselect(t < -125.0f, msplat(-125.0f), t);
    const mvec magic = msplat(12582912.0f);
    mvec sh = t + magic;
    mint ni = (mint)sh - (mint)magic;
    mvec p = exp2_poly(t - (sh - magic));
    return (mvec)((mint)p + (ni << 23));
}
#endif

/* 1 / x for x in [1, 3] (the sigmoid's and softplus' denominators): with
 * AVX-512 the 14-bit estimate and one Newton step (relative error ~1e-8),
 * off the divider's slow port; otherwise a division. */
static inline mvec mrecip(mvec x) {
#if MLEN == 16
    mvec r = (mvec)_mm512_rcp14_ps((__m512)x);
    return r * (2.0f - x * r);
#else
    return 1.0f / x;
#endif
}

/* 1 / (1 + e^-x) with one reciprocal: e = e^-|x| in (0, 1], r = 1 / (1 + e);
 * r for x >= 0, e r below. */
static inline mvec msigmoid(mvec x) {
    mvec ax = mselect(x < 0.0f, -x, x);
    mvec e = mexp2_neg(ax * -1.44269504f), r = mrecip(1.0f + e);
    return mselect(x < 0.0f, e * r, r);
}

/* softplus(u) = max(u, 0) + log1p(e^-|u|). log1p(y) for y in (0, 1] is
 * 2 atanh(s), s = y / (2 + y) <= 1/3, by its series to s^15 (relative error
 * < 2e-9), so it stays accurate for tiny y. */
static inline mvec msoftplus(mvec u) {
    mvec au = mselect(u < 0.0f, -u, u);
    mvec y = mexp2_neg(au * -1.44269504f);
    mvec s = y * mrecip(2.0f + y), s2 = s * s;
    mvec p = s2 * (1.0f / 15.0f) + 1.0f / 13.0f;
    p = p * s2 + 1.0f / 11.0f;
    p = p * s2 + 1.0f / 9.0f;
    p = p * s2 + 1.0f / 7.0f;
    p = p * s2 + 1.0f / 5.0f;
    p = p * s2 + 1.0f / 3.0f;
    p = p * s2 + 1.0f;
    return mselect(u > 0.0f, u, msplat(0.0f)) + 2.0f * s * p;
}

/* Loads/stores of nl <= MLEN consecutive floats (a tile may be partial).
 * With AVX-512 one masked instruction each: no branch and no call (a
 * partial copy loop became a memcpy call, and a call in a loop makes the
 * compiler keep every vector in memory around it). */
#if MLEN == 16
static inline __mmask16 lanes_mask(int nl) {
    return nl >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nl) - 1);
}
static inline mvec lanes_load(const float *p, int nl) {
    return (mvec)_mm512_maskz_loadu_ps(lanes_mask(nl), p);
}
static inline void lanes_store(float *p, mvec v, int nl) {
    _mm512_mask_storeu_ps(p, lanes_mask(nl), (__m512)v);
}
#else
static inline mvec lanes_load(const float *p, int nl) {
    mvec v = msplat(0.0f);
    if (nl == MLEN) {
        memcpy(&v, p, sizeof v);
        return v;
    }
    for (int l = 0; l < nl; l++) v[l] = p[l];
    return v;
}
static inline void lanes_store(float *p, mvec v, int nl) {
    if (nl == MLEN) {
        memcpy(p, &v, sizeof v);
        return;
    }
    for (int l = 0; l < nl; l++) p[l] = v[l];
}
#endif
static inline void lanes_add(float *p, mvec v, int nl) {
    lanes_store(p, lanes_load(p, nl) + v, nl);
}
/* p += v, or (overwrite) p = v + 0: the bits of an add onto a zeroed
 * buffer (a -0 comes out +0), so dropping the zeroing pass changes none. */
static inline void lanes_put(float *p, mvec v, int nl, int overwrite) {
    if (overwrite)
        lanes_store(p, v + 0.0f, nl);
    else
        lanes_add(p, v, nl);
}
static inline void put1(float *p, float v, int overwrite) { *p = overwrite ? v + 0.0f : *p + v; }

/* sum of the lanes, as a tree */
static inline float msum(mvec v) {
    float a[MLEN];
    memcpy(a, &v, sizeof a);
    for (int w = MLEN / 2; w > 0; w /= 2)
        for (int l = 0; l < w; l++) a[l] += a[l + w];
    return a[0];
}

/* ---- depthwise conv1d over the active tokens ---- */

/* The taps of a block of nl <= MLEN channels from c0, one vector per tap
 * (lanes past nl 0). */
static void conv_taps(mvec *wt, const float *w, int c0, int nl, int K) {
    for (int k = 0; k < K; k++) {
        mvec v = msplat(0.0f);
        for (int l = 0; l < nl; l++) v[l] = w[(size_t)(c0 + l) * K + k];
        wt[k] = v;
    }
}

/* bias + the taps over the window: prev[m] is the m-th most recent earlier
 * active token (tap K-2-m), t the current one (tap K-1). */
static inline mvec conv_pre(const float *xb, const mvec *wt, mvec b0, int c0, int nl, int C, int K,
                            int t, const int *prev, int np) {
    mvec pre = b0 + wt[K - 1] * lanes_load(xb + (size_t)t * C + c0, nl);
    for (int m = 0; m < np; m++)
        pre += wt[K - 2 - m] * lanes_load(xb + (size_t)prev[m] * C + c0, nl);
    return pre;
}

static void conv_push(int *prev, int *np, int K, int t) {
    if (K < 2) return;
    int n = *np < K - 1 ? *np + 1 : K - 1;
    for (int m = n - 1; m > 0; m--) prev[m] = prev[m - 1];
    prev[0] = t;
    *np = n;
}

/* The forward runs along rows: a task is one sample's block of CONV_ROWS
 * steps (in scan order), and a row's channels go in vectors, CONV_SLAB at a
 * time, so x and out are read and written as contiguous runs (a walk down
 * one vector of channels, one 64-byte line per 1.5 KB row, was ~10% slower
 * at 2049 tokens). prev holds the K-1 most recent earlier active tokens; a
 * block finds those before its first step by walking back. wt: the slab's
 * taps transposed, [K][CONV_SLAB]. */
static void conv_forward_block(float *out, const float *x, const float *w, const float *bias,
                               const bk_conv_args *a, int b, int s0, int s1) {
    const int T = a->T, C = a->C, K = a->K;
    const float *xb = x + (size_t)b * T * C;
    float wt[BK_CONV_MAX_K * CONV_SLAB];
    for (int cs = 0; cs < C; cs += CONV_SLAB) {
        const int nc = C - cs < CONV_SLAB ? C - cs : CONV_SLAB;
        for (int k = 0; k < K; k++)
            for (int c = 0; c < nc; c++) wt[k * CONV_SLAB + c] = w[(size_t)(cs + c) * K + k];
        int prev[BK_CONV_MAX_K], np = 0;
        for (int s = s0 - 1; s >= 0 && np < K - 1; s--) {
            int t = a->reverse ? T - 1 - s : s;
            if (!is_masked(a->mask, b, T, t)) prev[np++] = t;
        }
        for (int s = s0; s < s1; s++) {
            int t = a->reverse ? T - 1 - s : s;
            float *o = out + ((size_t)b * T + t) * C + cs;
            if (is_masked(a->mask, b, T, t)) {
                memset(o, 0, (size_t)nc * sizeof(float));
                continue;
            }
            int c0 = 0;
            if (K == 4 && np == 3 && bias && a->silu) {
                /* the common case unrolled, the same sums in the same order
                 * (the loop below ran it at ~3x the cycles a vector) */
                const float *x0 = xb + (size_t)t * C + cs, *x1 = xb + (size_t)prev[0] * C + cs;
                const float *x2 = xb + (size_t)prev[1] * C + cs,
                            *x3 = xb + (size_t)prev[2] * C + cs;
                const float *bi = bias + cs;
#pragma GCC unroll 2
                for (; c0 + MLEN <= nc; c0 += MLEN) {
                    mvec pre = lanes_load(bi + c0, MLEN);
                    pre += lanes_load(wt + 3 * CONV_SLAB + c0, MLEN) * lanes_load(x0 + c0, MLEN);
                    pre += lanes_load(wt + 2 * CONV_SLAB + c0, MLEN) * lanes_load(x1 + c0, MLEN);
                    pre += lanes_load(wt + 1 * CONV_SLAB + c0, MLEN) * lanes_load(x2 + c0, MLEN);
                    pre += lanes_load(wt + c0, MLEN) * lanes_load(x3 + c0, MLEN);
                    lanes_store(o + c0, pre * msigmoid(pre), MLEN);
                }
            }
            for (; c0 < nc; c0 += MLEN) {
                int nl = nc - c0 < MLEN ? nc - c0 : MLEN;
                mvec pre = bias ? lanes_load(bias + cs + c0, nl) : msplat(0.0f);
                pre += lanes_load(wt + (K - 1) * CONV_SLAB + c0, nl) *
                       lanes_load(xb + (size_t)t * C + cs + c0, nl);
                for (int m = 0; m < np; m++)
                    pre += lanes_load(wt + (K - 2 - m) * CONV_SLAB + c0, nl) *
                           lanes_load(xb + (size_t)prev[m] * C + cs + c0, nl);
                lanes_store(o + c0, a->silu ? pre * msigmoid(pre) : pre, nl);
            }
            conv_push(prev, &np, K, t);
        }
    }
}

void bk_cpu_conv1d_forward(float *out, const float *x, const float *w, const float *bias,
                           const bk_conv_args *a) {
    const int B = a->B, T = a->T, C = a->C;
    if (B <= 0 || T <= 0 || C <= 0) return;
    const int nblk = (T + CONV_ROWS - 1) / CONV_ROWS;
    const long ntask = (long)B * nblk;
#pragma omp parallel for schedule(static) if ((long long)B * T * C >= MIX_PAR_MIN)
    for (long task = 0; task < ntask; task++) {
        int b = (int)(task / nblk), s0 = (int)(task % nblk) * CONV_ROWS;
        conv_forward_block(out, x, w, bias, a, b, s0, s0 + CONV_ROWS < T ? s0 + CONV_ROWS : T);
    }
}

/* One pass in the forward's order: at each active token the pre-activation
 * is recomputed, gpre = dout * act'(pre), and gpre is spread back onto the
 * window: dx[tap token] += w[tap] gpre, dw[tap] += gpre x[tap token]. A
 * token's own tap is the first write to its dx (the later tokens' taps
 * follow), which is where dx_overwrite assigns. */
void bk_cpu_conv1d_backward(float *dx, float *dw, float *dbias, float *scratch, const float *dout,
                            const float *x, const float *w, const float *bias,
                            const bk_conv_args *a) {
    (void)scratch; /* the CPU needs none: a task owns its channels over all samples */
    const int B = a->B, T = a->T, C = a->C, K = a->K, ow = a->dx_overwrite;
    if (B <= 0 || T <= 0 || C <= 0 || (!dx && !dw && !dbias)) return;
    const int nb = (C + MLEN - 1) / MLEN;
#pragma omp parallel for schedule(static) if ((long long)B * T * C >= MIX_PAR_MIN)
    for (int blk = 0; blk < nb; blk++) {
        int c0 = blk * MLEN, nl = C - c0 < MLEN ? C - c0 : MLEN;
        mvec wt[BK_CONV_MAX_K], dwl[BK_CONV_MAX_K], dbl = msplat(0.0f);
        conv_taps(wt, w, c0, nl, K);
        for (int k = 0; k < K; k++) dwl[k] = msplat(0.0f);
        mvec b0 = bias ? lanes_load(bias + c0, nl) : msplat(0.0f);
        for (int b = 0; b < B; b++) {
            const float *xb = x + (size_t)b * T * C;
            int prev[BK_CONV_MAX_K], np = 0;
            for (int s = 0; s < T; s++) {
                int t = a->reverse ? T - 1 - s : s;
                size_t row = ((size_t)b * T + t) * C + c0;
                if (is_masked(a->mask, b, T, t)) {
                    if (dx && ow) lanes_store(dx + row, msplat(0.0f), nl);
                    continue;
                }
                mvec pre = conv_pre(xb, wt, b0, c0, nl, C, K, t, prev, np);
                mvec gp = lanes_load(dout + row, nl);
                if (a->silu) {
                    mvec sg = msigmoid(pre);
                    gp *= sg * (1.0f + pre * (1.0f - sg));
                }
                dbl += gp;
                dwl[K - 1] += gp * lanes_load(x + row, nl);
                if (dx) lanes_put(dx + row, wt[K - 1] * gp, nl, ow);
                for (int m = 0; m < np; m++) {
                    size_t pr = ((size_t)b * T + prev[m]) * C + c0;
                    dwl[K - 2 - m] += gp * lanes_load(x + pr, nl);
                    if (dx) lanes_add(dx + pr, wt[K - 2 - m] * gp, nl);
                }
                conv_push(prev, &np, K, t);
            }
        }
        for (int l = 0; l < nl; l++) {
            if (dbias) dbias[c0 + l] += dbl[l];
            if (dw)
                for (int k = 0; k < K; k++) dw[(size_t)(c0 + l) * K + k] += dwl[k][l];
        }
    }
}

/* ---- selective scan ---- */

/* What one tile (MLEN consecutive channels of group g of sample b) needs. */
typedef struct {
    const bk_scan_args *a;
    int b, g, c0, nl, bcs, nch;
    mvec A[BK_SCAN_MAX_N];  /* A_n = -exp(A_log) */
    mvec A2[BK_SCAN_MAX_N]; /* A_n log2(e): exp(dt A_n) = 2^(dt A2_n) */
    mvec Dv, biasv;
    mvec Wd[BK_SCAN_MAX_R]; /* delta_w's columns (forward with delta_w) */
} scan_tile;

static void scan_tile_init(scan_tile *st, const bk_scan_args *a, int b, int g, int cl) {
    const int Dg = a->D / a->G, N = a->N;
    st->a = a;
    st->b = b;
    st->g = g;
    st->c0 = g * Dg + cl;
    st->nl = Dg - cl < MLEN ? Dg - cl : MLEN;
    st->bcs = a->bc_stride ? a->bc_stride : N;
    st->nch = (a->T + SCAN_L - 1) / SCAN_L;
    for (int n = 0; n < N; n++) {
        mvec v = msplat(0.0f);
        for (int l = 0; l < st->nl; l++) v[l] = -expf(a->A_log[(size_t)(st->c0 + l) * N + n]);
        st->A[n] = v;
        st->A2[n] = v * 1.44269504f;
    }
    st->Dv = a->Dskip ? lanes_load(a->Dskip + st->c0, st->nl) : msplat(0.0f);
    st->biasv = a->delta_bias ? lanes_load(a->delta_bias + st->c0, st->nl) : msplat(0.0f);
    for (int r = 0; a->delta_w && r < a->R; r++) {
        mvec v = msplat(0.0f);
        for (int l = 0; l < st->nl; l++) v[l] = a->delta_w[(size_t)(st->c0 + l) * a->R + r];
        st->Wd[r] = v;
    }
}

/* Forward of one tile over the steps [s0, s1). Inlined with N = 16 as a
 * constant for the common case, so the state loop unrolls into registers.
 * The steps go in pieces of at most SCAN_L: first every step's dt, dt x
 * and gate (softplus and sigmoid, long chains of their own, but no step
 * waits on another's), then the states. Computing them inside the state loop
 * left each step's 16 state updates waiting on its softplus, and the core
 * ran them at ~16 cycles a vector instead of ~7. */
static inline __attribute__((always_inline)) void scan_tile_forward(const scan_tile *st, float *out,
                                                                    float *states, mvec *hio,
                                                                    int s0, int s1, const int N) {
    const bk_scan_args *a = st->a;
    const int T = a->T, nl = st->nl, R = a->R, rev = a->reverse, acc = a->accumulate;
    /* everything the steps touch, as locals: row t of a [B,T,D] tensor is
     * xo + t * D floats on, of a [B,T,G,*] one bo + t * BS */
    const ptrdiff_t D = a->D, BS = (ptrdiff_t)a->G * st->bcs;
    const size_t xo = (size_t)st->b * T * D + st->c0;
    const size_t bo = ((size_t)st->b * T * a->G + st->g) * st->bcs;
    const float *x = a->x + xo, *z = a->z ? a->z + xo : NULL;
    const float *delta = a->delta_w ? NULL : a->delta + xo;
    const float *Bm = a->Bm + bo, *Cm = a->Cm + bo, *dlow = a->delta_w ? a->dlow + bo : NULL;
    const float *mask = a->mask ? a->mask + (size_t)st->b * T : NULL;
    float *o = out + xo;
    const mvec biasv = st->biasv, Dv = st->Dv;
    mvec h[BK_SCAN_MAX_N], dtb[SCAN_L], dtxb[SCAN_L], gateb[SCAN_L];
    for (int n = 0; n < N; n++) h[n] = hio[n];
    for (int p0 = s0; p0 < s1; p0 += SCAN_L) {
        const int p1 = p0 + SCAN_L < s1 ? p0 + SCAN_L : s1;
        for (int s = p0; s < p1; s++) {
            const ptrdiff_t t = rev ? T - 1 - s : s;
            if (s + SCAN_L < T) { /* this tile's lines of the next chunk, into cache */
                const ptrdiff_t tn = rev ? t - SCAN_L : t + SCAN_L;
                __builtin_prefetch(x + tn * D, 0, 2);
                __builtin_prefetch(o + tn * D, 1, 2);
                if (z) __builtin_prefetch(z + tn * D, 0, 2);
                if (delta) __builtin_prefetch(delta + tn * D, 0, 2);
                __builtin_prefetch(Bm + tn * BS, 0, 2);
                __builtin_prefetch(Bm + tn * BS + 16, 0, 2);
                if (dlow) __builtin_prefetch(dlow + tn * BS, 0, 2);
            }
            if (mask && mask[t] == 0.0f) continue;
            mvec pre;
            if (dlow) { /* W_delta dlow, in r order, then the bias (as a GEMM then +) */
                const float *dl = dlow + t * BS;
                pre = st->Wd[0] * dl[0];
                for (int r = 1; r < R; r++) pre += st->Wd[r] * dl[r];
            } else {
                pre = lanes_load(delta + t * D, nl);
            }
            mvec dt = msoftplus(pre + biasv);
            dtb[s - p0] = dt;
            dtxb[s - p0] = dt * lanes_load(x + t * D, nl);
            if (z) {
                mvec zv = lanes_load(z + t * D, nl);
                gateb[s - p0] = zv * msigmoid(zv);
            }
        }
        for (int s = p0; s < p1; s++) {
            const ptrdiff_t t = rev ? T - 1 - s : s;
            float *orow = o + t * D;
            if (mask && mask[t] == 0.0f) {
                if (!acc) lanes_store(orow, msplat(0.0f), nl);
                continue;
            }
            const float *Bp = Bm + t * BS, *Cp = Cm + t * BS;
            const mvec dt = dtb[s - p0], dtx = dtxb[s - p0];
            /* four partial sums: one chain of 16 dependent FMAs would set the pace */
            mvec y0 = Dv * lanes_load(x + t * D, nl), y1 = msplat(0.0f);
            mvec y2 = msplat(0.0f), y3 = msplat(0.0f);
            int n = 0;
#pragma GCC unroll 4
            for (; n + 4 <= N; n += 4) {
                h[n] = mexp2_neg(dt * st->A2[n]) * h[n] + dtx * Bp[n];
                h[n + 1] = mexp2_neg(dt * st->A2[n + 1]) * h[n + 1] + dtx * Bp[n + 1];
                h[n + 2] = mexp2_neg(dt * st->A2[n + 2]) * h[n + 2] + dtx * Bp[n + 2];
                h[n + 3] = mexp2_neg(dt * st->A2[n + 3]) * h[n + 3] + dtx * Bp[n + 3];
                y0 += h[n] * Cp[n];
                y1 += h[n + 1] * Cp[n + 1];
                y2 += h[n + 2] * Cp[n + 2];
                y3 += h[n + 3] * Cp[n + 3];
            }
            for (; n < N; n++) {
                h[n] = mexp2_neg(dt * st->A2[n]) * h[n] + dtx * Bp[n];
                y0 += h[n] * Cp[n];
            }
            mvec y = (y0 + y1) + (y2 + y3);
            if (acc) y += lanes_load(orow, nl); /* before the gate */
            if (z) y *= gateb[s - p0];
            lanes_store(orow, y, nl);
        }
        /* the state after each chunk (pieces start on chunk boundaries) */
        const int last = p1 - 1;
        if (states && (last % SCAN_L == SCAN_L - 1 || last == T - 1)) {
            float *sp = states + ((size_t)st->b * a->D + st->c0) * st->nch * N +
                        (size_t)(last / SCAN_L) * N;
            for (int l = 0; l < nl; l++)
                for (int n = 0; n < N; n++) sp[(size_t)l * st->nch * N + n] = h[n][l];
        }
    }
    for (int n = 0; n < N; n++) hio[n] = h[n];
}

/* One tile over steps [s0, s1), its state in hio. */
static void scan_tile_run(const scan_tile *st, float *out, float *states, mvec *hio, int s0,
                          int s1) {
    if (st->a->N == BK_SCAN_MAX_N)
        scan_tile_forward(st, out, states, hio, s0, s1, BK_SCAN_MAX_N);
    else
        scan_tile_forward(st, out, states, hio, s0, s1, st->a->N);
}

void bk_cpu_scan_forward(float *out, float *states, const bk_scan_args *a) {
    const int B = a->B, T = a->T, D = a->D, G = a->G;
    if (B <= 0 || T <= 0 || D <= 0) return;
    const int Dg = D / G, tpg = (Dg + MLEN - 1) / MLEN;
    /* A task is a block of tiles of one group: the whole group when there
     * are samples enough for about four tasks a thread, else the group's
     * tiles in a few blocks (a tile's result does not depend on its block). */
    const long want = 4L * omp_get_max_threads();
    int nblk = 1;
    while (nblk < tpg && (long)B * G * nblk < want) nblk++;
    const int tpb = (tpg + nblk - 1) / nblk;
    nblk = (tpg + tpb - 1) / tpb;
    const long ntask = (long)B * G * nblk;
#pragma omp parallel if ((long long)B * T * D >= MIX_PAR_MIN / 4)
    {
        /* this thread's tiles of one block and their states (a few KB each) */
        scan_tile *tiles = aligned_alloc(sizeof(mvec), (size_t)tpb * sizeof *tiles);
        mvec *hs = aligned_alloc(sizeof(mvec), (size_t)tpb * BK_SCAN_MAX_N * sizeof *hs);
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < ntask; task++) {
            int blk = (int)(task % nblk), g = (int)(task / nblk % G), b = (int)(task / nblk / G);
            int t0 = blk * tpb, nt = tpg - t0 < tpb ? tpg - t0 : tpb;
            if (!tiles || !hs) { /* no memory: each tile alone over all steps */
                for (int tile = 0; tile < nt; tile++) {
                    scan_tile st;
                    mvec h[BK_SCAN_MAX_N] = {0};
                    scan_tile_init(&st, a, b, g, (t0 + tile) * MLEN);
                    scan_tile_run(&st, out, states, h, 0, T);
                }
                continue;
            }
            for (int tile = 0; tile < nt; tile++) {
                scan_tile_init(&tiles[tile], a, b, g, (t0 + tile) * MLEN);
                for (int n = 0; n < BK_SCAN_MAX_N; n++) hs[tile * BK_SCAN_MAX_N + n] = msplat(0.0f);
            }
            /* a chunk of steps for every tile of the block in turn: the
             * chunk's Bm/Cm rows come from memory once and stay in cache for
             * the block's other tiles */
            for (int s0 = 0; s0 < T; s0 += SCAN_L) {
                int s1 = s0 + SCAN_L < T ? s0 + SCAN_L : T;
                for (int tile = 0; tile < nt; tile++)
                    scan_tile_run(&tiles[tile], out, states, hs + tile * BK_SCAN_MAX_N, s0, s1);
            }
        }
        free(tiles);
        free(hs);
    }
}

/* Per-thread buffers of one chunk of one tile, and of the chunk's dBm/dCm
 * summed over the tiles lane-wise. */
typedef struct {
    mvec h[SCAN_L][BK_SCAN_MAX_N]; /* state after each step */
    mvec e[SCAN_L][BK_SCAN_MAX_N]; /* exp(dt A) of each step */
    mvec dt[SCAN_L];
    mvec dB[SCAN_L][BK_SCAN_MAX_N], dC[SCAN_L][BK_SCAN_MAX_N];
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
    mvec h0[BK_SCAN_MAX_N], hc[BK_SCAN_MAX_N], dh[BK_SCAN_MAX_N], dA[BK_SCAN_MAX_N];
    for (int n = 0; n < N; n++) {
        mvec v = msplat(0.0f), d = msplat(0.0f), q = msplat(0.0f);
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
    /* recompute the chunk: every step's dt first (as in the forward, so the
     * state updates do not wait on each step's softplus), then the states */
    for (int s = s0; s < s1; s++) {
        int t = a->reverse ? T - 1 - s : s;
        if (!is_masked(a->mask, b, T, t))
            cb->dt[s - s0] =
                msoftplus(lanes_load(a->delta + ((size_t)b * T + t) * D + st->c0, nl) + st->biasv);
    }
    for (int s = s0; s < s1; s++) {
        int t = a->reverse ? T - 1 - s : s, i = s - s0;
        if (!is_masked(a->mask, b, T, t)) {
            size_t row = ((size_t)b * T + t) * D + st->c0;
            mvec dt = cb->dt[i], dtx = dt * lanes_load(a->x + row, nl);
            const float *Bp = a->Bm + (((size_t)b * T + t) * G + st->g) * st->bcs;
#pragma GCC unroll 16
            for (int n = 0; n < N; n++) {
                mvec e = mexp2_neg(dt * st->A2[n]);
                hc[n] = e * hc[n] + dtx * Bp[n];
                cb->e[i][n] = e;
            }
        }
        for (int n = 0; n < N; n++) cb->h[i][n] = hc[n];
    }
    /* walk it back */
    mvec dD = msplat(0.0f), dbias = msplat(0.0f);
    for (int l = 0; l < nl; l++) {
        dD[l] = part[(size_t)l * P + N];
        dbias[l] = part[(size_t)l * P + N + 1];
    }
    const int ow = gr->overwrite, ozw = gr->dz_overwrite;
    for (int s = s1 - 1; s >= s0; s--) {
        int t = a->reverse ? T - 1 - s : s, i = s - s0;
        size_t row = ((size_t)b * T + t) * D + st->c0;
        if (is_masked(a->mask, b, T, t)) {
            /* no gradient reaches a skipped token: 0 when writing */
            if (ozw && a->z && gr->dz) lanes_store(gr->dz + row, msplat(0.0f), nl);
            if (ow) {
                if (gr->dx) lanes_store(gr->dx + row, msplat(0.0f), nl);
                if (gr->ddelta) lanes_store(gr->ddelta + row, msplat(0.0f), nl);
            }
            continue;
        }
        size_t bc = (((size_t)b * T + t) * G + st->g) * st->bcs;
        const float *Bp = a->Bm + bc, *Cp = a->Cm + bc;
        const mvec *hp = i > 0 ? cb->h[i - 1] : h0, *ht = cb->h[i], *et = cb->e[i];
        mvec xv = lanes_load(a->x + row, nl), gv = lanes_load(dout + row, nl);
        mvec u = lanes_load(a->delta + row, nl) + st->biasv, dt = cb->dt[i], dtx = dt * xv;
        mvec dys = gv;
        if (a->z) {
            mvec ys = st->Dv * xv;
            for (int n = 0; n < N; n++) ys += ht[n] * Cp[n];
            mvec zv = lanes_load(a->z + row, nl), sz = msigmoid(zv);
            dys = gv * zv * sz;
            if (gr->dz) lanes_put(gr->dz + row, gv * ys * sz * (1.0f + zv * (1.0f - sz)), nl, ozw);
        }
        dD += dys * xv;
        /* ddt and dxv summed in two interleaved halves (shorter FMA chains) */
        mvec dxa = dys * st->Dv, dxb = msplat(0.0f), dta = msplat(0.0f), dtb = msplat(0.0f);
#pragma GCC unroll 16
        for (int n = 0; n < N; n++) {
            mvec dhn = dh[n] + dys * Cp[n];
            cb->dC[i][n] += dys * ht[n];
            cb->dB[i][n] += dhn * dtx;
            mvec q = dhn * hp[n] * et[n]; /* dL / d(dt A_n) */
            mvec tq = q * st->A[n] + dhn * Bp[n] * xv, tx = dhn * dt * Bp[n];
            if (n & 1) {
                dtb += tq;
                dxb += tx;
            } else {
                dta += tq;
                dxa += tx;
            }
            dA[n] += q * dt;
            dh[n] = dhn * et[n];
        }
        mvec ddt = dta + dtb, dxv = dxa + dxb;
        mvec du = ddt * msigmoid(u);
        dbias += du;
        if (gr->dx) lanes_put(gr->dx + row, dxv, nl, ow);
        if (gr->ddelta) lanes_put(gr->ddelta + row, du, nl, ow);
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
    const int tpg = (Dg + MLEN - 1) / MLEN, nch = (T + SCAN_L - 1) / SCAN_L;
    const int bcs = a->bc_stride ? a->bc_stride : N;
    float *part = scratch + ((size_t)b * D + (size_t)g * Dg) * P;
    memset(part, 0, (size_t)Dg * P * sizeof(float));
    for (int k = nch - 1; k >= 0; k--) {
        memset(cb->dB, 0, sizeof cb->dB);
        memset(cb->dC, 0, sizeof cb->dC);
        for (int tile = 0; tile < tpg; tile++) {
            scan_tile st;
            scan_tile_init(&st, a, b, g, tile * MLEN);
            float *tp = part + (size_t)tile * MLEN * P;
            if (N == BK_SCAN_MAX_N)
                scan_tile_backward_chunk(&st, gr, dout, states, tp, cb, k, BK_SCAN_MAX_N);
            else
                scan_tile_backward_chunk(&st, gr, dout, states, tp, cb, k, N);
        }
        const int s0 = k * SCAN_L, s1 = s0 + SCAN_L < T ? s0 + SCAN_L : T;
        /* each (b, t, g) row of dBm/dCm is written here once, by this task */
        for (int s = s0; s < s1; s++) {
            int t = a->reverse ? T - 1 - s : s;
            size_t bc = (((size_t)b * T + t) * G + g) * bcs;
            if (is_masked(a->mask, b, T, t)) {
                for (int n = 0; gr->overwrite && n < N; n++) {
                    if (gr->dBm) gr->dBm[bc + n] = 0.0f;
                    if (gr->dCm) gr->dCm[bc + n] = 0.0f;
                }
                continue;
            }
            for (int n = 0; n < N; n++) {
                if (gr->dBm) put1(gr->dBm + bc + n, msum(cb->dB[s - s0][n]), gr->overwrite);
                if (gr->dCm) put1(gr->dCm + bc + n, msum(cb->dC[s - s0][n]), gr->overwrite);
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

/* y[0:M] = x[0:M] (NULL: 0) + sum_j v[j] A[j, 0:M], A's rows M floats apart
 * (y must not alias A or v). Eight vectors of outputs stay in registers over
 * all j; a last narrow block splits j four ways instead, so no chain of
 * dependent FMAs is longer than J/4. */
static void rows_axpy(float *y, const float *x, const float *A, const float *v, int J, int M) {
    int q = 0;
    for (; q + 8 * MLEN <= M; q += 8 * MLEN) {
        mvec acc[8];
        for (int k = 0; k < 8; k++) acc[k] = x ? lanes_load(x + q + k * MLEN, MLEN) : msplat(0.0f);
        for (int j = 0; j < J; j++) {
            mvec vj = msplat(v[j]);
            const float *r = A + (size_t)j * M + q;
            for (int k = 0; k < 8; k++) acc[k] += vj * lanes_load(r + k * MLEN, MLEN);
        }
        for (int k = 0; k < 8; k++) lanes_store(y + q + k * MLEN, acc[k], MLEN);
    }
    for (; q + MLEN <= M; q += MLEN) {
        mvec a0 = x ? lanes_load(x + q, MLEN) : msplat(0.0f), a1 = msplat(0.0f), a2 = a1, a3 = a1;
        int j = 0;
        for (; j + 4 <= J; j += 4) {
            const float *r = A + (size_t)j * M + q;
            a0 += msplat(v[j]) * lanes_load(r, MLEN);
            a1 += msplat(v[j + 1]) * lanes_load(r + M, MLEN);
            a2 += msplat(v[j + 2]) * lanes_load(r + 2 * (size_t)M, MLEN);
            a3 += msplat(v[j + 3]) * lanes_load(r + 3 * (size_t)M, MLEN);
        }
        for (; j < J; j++) a0 += msplat(v[j]) * lanes_load(A + (size_t)j * M + q, MLEN);
        lanes_store(y + q, (a0 + a1) + (a2 + a3), MLEN);
    }
    for (; q < M; q++) {
        float acc = x ? x[q] : 0.0f;
        for (int j = 0; j < J; j++) acc += v[j] * A[(size_t)j * M + q];
        y[q] = acc;
    }
}

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
        /* whh[s] transposed, when small enough for the stack (d_h <= 128) */
        float wbuf[LSTM_WT_MAX];
        float *wt = (size_t)4 * H * H <= LSTM_WT_MAX ? wbuf : NULL;
        if (wt)
            for (int q = 0; q < 4 * H; q++)
                for (int j = 0; j < H; j++) wt[(size_t)j * 4 * H + q] = W[(size_t)q * H + j];
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
            if (wt) { /* g = x + sum_j h[j] WT[j, :]: contiguous rows, no horizontal sums */
                rows_axpy(g, x, wt, h, H, 4 * H);
            } else {
                for (int q = 0; q < 4 * H; q++) {
                    const float *wr = W + (size_t)q * H;
                    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
                    for (int j = 0; j < H; j++) acc += wr[j] * h[j];
                    g[q] = x[q] + acc;
                }
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
            rows_axpy(dh, NULL, W, dp, 4 * H, H); /* dh = whh^T dp */
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
