/* CPU backend: Mamba-2's SSD scan and its gated RMSNorm (the ops of a
 * BiMamba-2 direction; contracts in kernels/bk.h and kernels/bk_ops.def, the
 * sequential reference in double in tests/ref/ref_ssd.h).
 *
 * The scan runs as the Mamba-2 paper's chunked algorithm, so its cost is in
 * small matrix products rather than a token-by-token state update: each
 * sample's active tokens (in scan order) are gathered into chunks of Q; per
 * chunk Cm Bm^T [Q,Q] is formed once for all heads (one group), and per head
 * the intra-chunk output is ((Cm Bm^T) o L)(dt x), the state entering the
 * chunk adds diag(e^s) Cm S^T, and the state is passed on as
 * e^{s_last} S + (dt x)^T diag(e^{s_last - s}) Bm, with s the cumulative
 * dt A inside the chunk (every exponent <= 0, so nothing overflows).
 * The backward walks the chunks from the last, carrying dL/dS, from the
 * states the forward saved at chunk starts.
 *
 * Work split: one task per sample (every write of a task is in its own
 * rows); the parameter gradients go to per-sample partials in scratch and
 * are added over the samples in order, so results do not depend on the
 * thread count. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/cpu_ops.h"

/* Parallelise once a call touches this many floats. */
#define SSD_PAR_MIN (1 << 14)

static inline float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* A dot product the compiler vectorises (omp simd: the lanes' partial
 * sums, added in a fixed order per build). */
static inline float dotf(const float *a, const float *b, int n) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static inline void axpyf(float *y, float alpha, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += alpha * x[i];
}

/* The per-sample slices of the scratch (BK_SSD_SCRATCH's layout). */
typedef struct ssd_ws {
    float *S;                       /* [H,P,N] running state (forward) or dL/dS (backward) */
    float *Bc, *Cc, *dBc, *dCc;     /* [Q,N] */
    float *G, *dG;                  /* [Q,Q] */
    float *X, *Xd, *Y, *dXd;        /* [Q,P] */
    float *V;                       /* [N] */
    float *Wt, *dtv, *s, *dS, *sig; /* [Q] */
    float *pg;                      /* [3H]: d dt_bias, d A_log, d D of this sample */
    int *idx;                       /* [T] active positions in scan order */
} ssd_ws;

static int ssd_q(const bk_ssd_args *a) { return a->chunk > 0 ? a->chunk : BK_SSD_CHUNK; }

static ssd_ws ssd_slice(float *scratch, const bk_ssd_args *a, int b) {
    size_t Q = (size_t)ssd_q(a), H = (size_t)a->H, P = (size_t)a->P, N = (size_t)a->N;
    float *p = scratch + (size_t)b * (BK_SSD_SCRATCH(1, a->T, H, P, N, Q));
    ssd_ws w;
    w.S = p, p += H * P * N;
    w.Bc = p, p += Q * N;
    w.Cc = p, p += Q * N;
    w.dBc = p, p += Q * N;
    w.dCc = p, p += Q * N;
    w.G = p, p += Q * Q;
    w.dG = p, p += Q * Q;
    w.X = p, p += Q * P;
    w.Xd = p, p += Q * P;
    w.Y = p, p += Q * P;
    w.dXd = p, p += Q * P;
    w.V = p, p += N;
    w.Wt = p, p += Q;
    w.dtv = p, p += Q;
    w.s = p, p += Q;
    w.dS = p, p += Q;
    w.sig = p, p += Q;
    w.pg = p, p += 3 * H;
    w.idx = (int *)p; /* T ints in T floats' room */
    return w;
}

/* The active positions of sample b in scan order; returns their count. */
static int ssd_active(const bk_ssd_args *a, int b, int *idx) {
    int n = 0;
    for (int k = 0; k < a->T; k++) {
        int t = a->reverse ? a->T - 1 - k : k;
        if (!a->mask || a->mask[(size_t)b * a->T + t] > 0) idx[n++] = t;
    }
    return n;
}

/* Gathers the chunk's Bm, Cm rows and forms G = Cm Bm^T (j <= i only). */
static void ssd_chunk_bc(const bk_ssd_args *a, const ssd_ws *w, int b, int c0, int q) {
    int N = a->N;
    for (int i = 0; i < q; i++) {
        size_t row = ((size_t)b * a->T + w->idx[c0 + i]) * a->ld;
        memcpy(w->Bc + (size_t)i * N, a->Bm + row, N * sizeof(float));
        memcpy(w->Cc + (size_t)i * N, a->Cm + row, N * sizeof(float));
    }
    for (int i = 0; i < q; i++)
        for (int j = 0; j <= i; j++)
            w->G[i * q + j] = dotf(w->Cc + (size_t)i * N, w->Bc + (size_t)j * N, N);
}

/* Head h's chunk inputs: dt (after softplus), the cumulative s, x and dt x. */
static void ssd_chunk_head(const bk_ssd_args *a, const ssd_ws *w, int b, int c0, int q, int h,
                           float A) {
    int P = a->P;
    float run = 0;
    for (int i = 0; i < q; i++) {
        size_t bt = (size_t)b * a->T + w->idx[c0 + i];
        float pre = a->dt[bt * a->H + h] + a->dt_bias[h];
        float d = softplusf(pre);
        w->dtv[i] = d;
        w->sig[i] = sigmoidf(pre);
        run += d * A;
        w->s[i] = run;
        const float *x = a->x + bt * a->ld + (size_t)h * P;
        memcpy(w->X + (size_t)i * P, x, P * sizeof(float));
        for (int p = 0; p < P; p++) w->Xd[(size_t)i * P + p] = d * x[p];
    }
}

static void ssd_forward_sample(float *out, float *states, const bk_ssd_args *a, const ssd_ws *w,
                               int b) {
    const int H = a->H, P = a->P, N = a->N, Q = ssd_q(a), HP = H * P, T = a->T;
    for (int t = 0; t < T; t++)
        if (a->mask && !(a->mask[(size_t)b * T + t] > 0))
            memset(out + ((size_t)b * T + t) * HP, 0, HP * sizeof(float));
    int n = ssd_active(a, b, w->idx);
    memset(w->S, 0, (size_t)H * P * N * sizeof(float));
    int nch = (T + Q - 1) / Q;
    for (int c0 = 0, ci = 0; c0 < n; c0 += Q, ci++) {
        int q = n - c0 < Q ? n - c0 : Q;
        ssd_chunk_bc(a, w, b, c0, q);
        for (int h = 0; h < H; h++) {
            float A = -expf(a->A_log[h]), Dh = a->Dskip ? a->Dskip[h] : 0.0f;
            float *S = w->S + (size_t)h * P * N;
            if (states)
                memcpy(states + (((size_t)b * H + h) * nch + ci) * P * N, S,
                       (size_t)P * N * sizeof(float));
            ssd_chunk_head(a, w, b, c0, q, h, A);
            for (int i = 0; i < q; i++) {
                float *y = w->Y + (size_t)i * P, ei = expf(w->s[i]);
                for (int p = 0; p < P; p++)
                    y[p] = ei * dotf(w->Cc + (size_t)i * N, S + (size_t)p * N, N) +
                           Dh * w->X[(size_t)i * P + p];
                for (int j = 0; j <= i; j++)
                    axpyf(y, w->G[i * q + j] * expf(w->s[i] - w->s[j]), w->Xd + (size_t)j * P, P);
                size_t bt = (size_t)b * T + w->idx[c0 + i];
                memcpy(out + bt * HP + (size_t)h * P, y, P * sizeof(float));
            }
            float sl = w->s[q - 1], el = expf(sl);
            for (int j = 0; j < q; j++) w->Wt[j] = expf(sl - w->s[j]);
            for (int p = 0; p < P; p++) {
                float *Sp = S + (size_t)p * N;
                for (int k = 0; k < N; k++) Sp[k] *= el;
                for (int j = 0; j < q; j++)
                    axpyf(Sp, w->Wt[j] * w->Xd[(size_t)j * P + p], w->Bc + (size_t)j * N, N);
            }
        }
    }
}

void bk_cpu_ssd_forward(float *out, float *states, float *scratch, const bk_ssd_args *a) {
    const int B = a->B;
#pragma omp parallel for schedule(dynamic, 1) if ((long long)B * a->T * a->H * a->P >= SSD_PAR_MIN)
    for (int b = 0; b < B; b++) {
        ssd_ws w = ssd_slice(scratch, a, b);
        ssd_forward_sample(out, states, a, &w, b);
    }
}

/* Zeroes sample b's per-token gradients at its masked tokens. */
static void ssd_zero_masked(const bk_ssd_grads *g, const bk_ssd_args *a, int b) {
    if (!a->mask) return;
    for (int t = 0; t < a->T; t++) {
        size_t bt = (size_t)b * a->T + t;
        if (a->mask[bt] > 0) continue;
        memset(g->dx + bt * a->ld, 0, (size_t)a->H * a->P * sizeof(float));
        memset(g->dBm + bt * a->ld, 0, (size_t)a->N * sizeof(float));
        memset(g->dCm + bt * a->ld, 0, (size_t)a->N * sizeof(float));
        memset(g->ddt + bt * a->H, 0, (size_t)a->H * sizeof(float));
    }
}

/* One head of one chunk, backward: adds into dG, dBc, dCc and the sample's
 * parameter partials, writes the head's dx and ddt rows, and moves L
 * (dL/dS at the chunk's end) to dL/dS at its start. */
static void ssd_backward_head(const bk_ssd_grads *g, const float *dout, const float *S0,
                              const bk_ssd_args *a, const ssd_ws *w, int b, int c0, int q, int h) {
    const int H = a->H, P = a->P, N = a->N, HP = H * P;
    float A = -expf(a->A_log[h]), Dh = a->Dskip ? a->Dskip[h] : 0.0f;
    float *L = w->S + (size_t)h * P * N;
    ssd_chunk_head(a, w, b, c0, q, h, A);
    float *dY = w->Y;
    for (int i = 0; i < q; i++) {
        size_t bt = (size_t)b * a->T + w->idx[c0 + i];
        memcpy(dY + (size_t)i * P, dout + bt * HP + (size_t)h * P, P * sizeof(float));
    }
    memset(w->dXd, 0, (size_t)q * P * sizeof(float));
    memset(w->dS, 0, (size_t)q * sizeof(float));
    /* the intra-chunk form: Y = (G o W) Xd */
    for (int i = 0; i < q; i++) {
        const float *dyi = dY + (size_t)i * P;
        for (int j = 0; j <= i; j++) {
            float wij = expf(w->s[i] - w->s[j]), gij = w->G[i * q + j];
            float dm = dotf(dyi, w->Xd + (size_t)j * P, P);
            w->dG[i * q + j] += dm * wij;
            axpyf(w->dXd + (size_t)j * P, gij * wij, dyi, P);
            float dsw = dm * wij * gij;
            w->dS[i] += dsw;
            w->dS[j] -= dsw;
        }
    }
    /* the state entering the chunk: Y += diag(e^s) Cc S0^T */
    for (int i = 0; i < q; i++) {
        float ei = expf(w->s[i]), acc = 0;
        const float *dyi = dY + (size_t)i * P, *ci = w->Cc + (size_t)i * N;
        float *dci = w->dCc + (size_t)i * N;
        for (int p = 0; p < P; p++) {
            const float *Sp = S0 + (size_t)p * N;
            acc += dyi[p] * dotf(ci, Sp, N);
            axpyf(dci, ei * dyi[p], Sp, N);
        }
        w->dS[i] += ei * acc;
    }
    /* the state leaving it: S1 = e^{sl} S0 + Xd^T diag(e^{sl - s}) Bc */
    float sl = w->s[q - 1], el = expf(sl);
    for (int j = 0; j < q; j++) {
        float fj = expf(sl - w->s[j]);
        float *vj = w->V; /* (Xd L)_j */
        memset(vj, 0, N * sizeof(float));
        const float *xdj = w->Xd + (size_t)j * P, *bj = w->Bc + (size_t)j * N;
        float *dxdj = w->dXd + (size_t)j * P;
        for (int p = 0; p < P; p++) {
            const float *Lp = L + (size_t)p * N;
            axpyf(vj, xdj[p], Lp, N);
            dxdj[p] += fj * dotf(bj, Lp, N);
        }
        axpyf(w->dBc + (size_t)j * N, fj, vj, N);
        float ej = fj * dotf(vj, bj, N);
        w->dS[q - 1] += ej;
        w->dS[j] -= ej;
    }
    w->dS[q - 1] += el * dotf(L, S0, P * N);
    /* dL/dS0 = e^{sl} L + sum_i e^{s_i} dY_i^T Cc_i */
    for (int p = 0; p < P; p++) {
        float *Lp = L + (size_t)p * N;
        for (int k = 0; k < N; k++) Lp[k] *= el;
        for (int i = 0; i < q; i++)
            axpyf(Lp, expf(w->s[i]) * dY[(size_t)i * P + p], w->Cc + (size_t)i * N, N);
    }
    /* s is the running sum of dt A: da_k = sum_{i >= k} dS_i */
    float da = 0, dA = 0, dD = 0, dbias = 0;
    for (int k = q - 1; k >= 0; k--) {
        da += w->dS[k];
        const float *xk = w->X + (size_t)k * P, *dyk = dY + (size_t)k * P;
        const float *dxdk = w->dXd + (size_t)k * P;
        float ddt = dotf(dxdk, xk, P) + A * da;
        dA += w->dtv[k] * da;
        float dpre = ddt * w->sig[k];
        size_t bt = (size_t)b * a->T + w->idx[c0 + k];
        g->ddt[bt * H + h] = dpre;
        dbias += dpre;
        dD += dotf(dyk, xk, P);
        float *dx = g->dx + bt * a->ld + (size_t)h * P;
        for (int p = 0; p < P; p++) dx[p] = w->dtv[k] * dxdk[p] + Dh * dyk[p];
    }
    w->pg[h] += dbias;
    w->pg[H + h] += dA * A; /* dA/dA_log = A */
    w->pg[2 * H + h] += dD;
}

static void ssd_backward_sample(const bk_ssd_grads *g, const float *dout, const float *states,
                                const bk_ssd_args *a, const ssd_ws *w, int b) {
    const int H = a->H, P = a->P, N = a->N, Q = ssd_q(a), T = a->T;
    ssd_zero_masked(g, a, b);
    int n = ssd_active(a, b, w->idx);
    memset(w->S, 0, (size_t)H * P * N * sizeof(float));
    memset(w->pg, 0, 3 * (size_t)H * sizeof(float));
    int nch = (T + Q - 1) / Q;
    for (int ci = (n + Q - 1) / Q - 1; ci >= 0; ci--) {
        int c0 = ci * Q, q = n - c0 < Q ? n - c0 : Q;
        ssd_chunk_bc(a, w, b, c0, q);
        memset(w->dG, 0, (size_t)q * q * sizeof(float));
        memset(w->dBc, 0, (size_t)q * N * sizeof(float));
        memset(w->dCc, 0, (size_t)q * N * sizeof(float));
        for (int h = 0; h < H; h++)
            ssd_backward_head(g, dout, states + (((size_t)b * H + h) * nch + ci) * P * N, a, w, b,
                              c0, q, h);
        /* G = Cc Bc^T: dCc += dG Bc, dBc += dG^T Cc */
        for (int i = 0; i < q; i++)
            for (int j = 0; j <= i; j++) {
                float d = w->dG[i * q + j];
                axpyf(w->dCc + (size_t)i * N, d, w->Bc + (size_t)j * N, N);
                axpyf(w->dBc + (size_t)j * N, d, w->Cc + (size_t)i * N, N);
            }
        for (int i = 0; i < q; i++) {
            size_t row = ((size_t)b * T + w->idx[c0 + i]) * a->ld;
            memcpy(g->dBm + row, w->dBc + (size_t)i * N, N * sizeof(float));
            memcpy(g->dCm + row, w->dCc + (size_t)i * N, N * sizeof(float));
        }
    }
}

void bk_cpu_ssd_backward(const bk_ssd_grads *g, float *scratch, const float *dout,
                         const float *states, const bk_ssd_args *a) {
    const int B = a->B, H = a->H;
#pragma omp parallel for schedule(dynamic, 1) if ((long long)B * a->T * a->H * a->P >= SSD_PAR_MIN)
    for (int b = 0; b < B; b++) {
        ssd_ws w = ssd_slice(scratch, a, b);
        ssd_backward_sample(g, dout, states, a, &w, b);
    }
    for (int b = 0; b < B; b++) {
        const float *pg = ssd_slice(scratch, a, b).pg;
        for (int h = 0; h < H; h++) {
            if (g->ddt_bias) g->ddt_bias[h] += pg[h];
            if (g->dA_log) g->dA_log[h] += pg[H + h];
            if (g->dDskip) g->dDskip[h] += pg[2 * H + h];
        }
    }
}

#define RMS_EPS 1e-5f

void bk_cpu_rmsnorm_gated_forward(float *out, float *rstd, const float *y, const float *z,
                                  const float *w, int N, int C) {
#pragma omp parallel for schedule(static) if ((long long)N * C >= SSD_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *yr = y + (size_t)n * C, *zr = z + (size_t)n * C;
        float *o = out + (size_t)n * C, ss = 0;
        for (int c = 0; c < C; c++) {
            float gc = yr[c] * zr[c] * sigmoidf(zr[c]);
            o[c] = gc;
            ss += gc * gc;
        }
        float r = 1.0f / sqrtf(ss / (float)C + RMS_EPS);
        if (rstd) rstd[n] = r;
        for (int c = 0; c < C; c++) o[c] *= r * w[c];
    }
}

void bk_cpu_rmsnorm_gated_backward(float *dy, float *dz, float *dw, const float *dout,
                                   const float *y, const float *z, const float *w,
                                   const float *rstd, int N, int C) {
#pragma omp parallel for schedule(static) if ((long long)N * C >= SSD_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *yr = y + (size_t)n * C, *zr = z + (size_t)n * C, *dr = dout + (size_t)n * C;
        float r = rstd[n], dot = 0;
        for (int c = 0; c < C; c++) dot += w[c] * dr[c] * yr[c] * zr[c] * sigmoidf(zr[c]);
        float k = r * r * r * dot / (float)C;
        for (int c = 0; c < C; c++) {
            float sg = sigmoidf(zr[c]), silu = zr[c] * sg;
            float gc = yr[c] * silu, dg = r * w[c] * dr[c] - gc * k;
            dy[(size_t)n * C + c] = dg * silu;
            dz[(size_t)n * C + c] = dg * yr[c] * sg * (1.0f + zr[c] * (1.0f - sg));
        }
    }
    if (!dw) return;
    for (int n = 0; n < N; n++) {
        const float *yr = y + (size_t)n * C, *zr = z + (size_t)n * C, *dr = dout + (size_t)n * C;
        for (int c = 0; c < C; c++) dw[c] += dr[c] * yr[c] * zr[c] * sigmoidf(zr[c]) * rstd[n];
    }
}
