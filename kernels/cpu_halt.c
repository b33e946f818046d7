/* A-ViT token halting (docs/design.md#a-vit-halting): the gate of one layer, the
 * ponder and depth-prior losses, the ACT output and the S2S alignment, and
 * their gradients to the block outputs. The formulas are bk_halt_math.h's,
 * which the CUDA ops (cuda/cuda_halt.cu) share. Every sum runs in one fixed
 * order (sample, then token), so a run is reproducible. */
#include <math.h>
#include <string.h>

#include "kernels/bk_halt_math.h"
#include "kernels/cpu_ops.h"

void bk_cpu_rowscale(float *out, const float *inp, const float *s, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float v = s[n];
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        for (int c = 0; c < C; c++) y[c] = x[c] * v;
    }
}

void bk_cpu_halt_forward(float *h, float *next, float *cum, float *rem, int *at, double *hstats,
                         const float *t, const float *mask, const bk_halt_args *a) {
    int L = a->layers, l = a->layer;
    double psum = 0, keep = 0, rsum = 0;
    for (int b = 0; b < a->B; b++)
        for (int k = 0; k < a->T; k++) {
            size_t i = (size_t)b * a->T + k;
            if (!(mask[i] > 0)) {
                h[i] = k > 0 ? bk_halt_inactive_score(t[i * a->C], a) : 0.0f;
                psum += h[i];
                next[i] = 0;
                continue;
            }
            if (k == 0) { /* the class token runs every layer */
                h[i] = 0;
                next[i] = 1;
                continue;
            }
            bk_halt_step st = bk_halt_token(t[i * a->C], cum + i, rem + i, at + i, a);
            h[i] = st.h;
            next[i] = st.halts ? 0.0f : 1.0f;
            keep += 1;
            psum += st.p;
            rsum += st.rem;
        }
    if (hstats) {
        hstats[l] += psum;
        hstats[L + l] += keep;
        hstats[2 * L] += rsum;
    }
}

void bk_cpu_halt_loss(double *stats, float *dldp, const double *hstats,
                      const bk_halt_loss_args *a) {
    int L = a->layers;
    double S = 0, Z = 0, keep = 0, kl = 0, pfree = 0;
    for (int l = 0; l < L; l++) {
        S += hstats[l];
        keep += hstats[L + l];
        Z += bk_halt_prior(l, a);
    }
    double n = a->tokens > 0 ? a->tokens : 1, tiny = 1e-12, Sq = S > tiny ? S : tiny;
    for (int l = 0; l < L; l++) {
        int free_;
        double pi = bk_halt_prior(l, a) / Z, q = bk_halt_q(hstats[l], S, &free_, a);
        kl += pi > 0 ? pi * log(pi / q) : 0;
        pfree += free_ ? pi : 0;
    }
    for (int l = 0; l < L; l++) {
        /* d KL / d psum_l = -pi_l / psum_l (q_l free) + (sum of the free pi) / S */
        int free_;
        double pi = bk_halt_prior(l, a) / Z, s = hstats[l] > tiny ? hstats[l] : tiny;
        bk_halt_q(hstats[l], S, &free_, a);
        dldp[l] = (float)(a->prior_weight * ((free_ ? -pi / s : 0) + pfree / Sq));
    }
    if (stats) {
        stats[a->slot_ponder] += a->ponder_weight * (keep + hstats[2 * L]) / n;
        stats[a->slot_prior] += a->prior_weight * kl;
        stats[a->slot_keep] += keep / (n * L);
    }
}

void bk_cpu_halt_backward(float *dt, const float *h, const int *at, const float *dldp, float pgrad,
                          const bk_halt_args *a) {
    for (int b = 0; b < a->B; b++)
        for (int k = 1; k < a->T; k++) {
            size_t i = (size_t)b * a->T + k;
            float hv = h[i], g = bk_halt_grad(at[i], dldp, pgrad, a);
            if (g != 0.0f) dt[i * a->C] += a->gamma * hv * (1.0f - hv) * g;
        }
}

void bk_cpu_halt_act_forward(float *out, const float *x, const float *h, const int *at,
                             const float *rem, const bk_halt_args *a) {
    size_t n = (size_t)a->B * a->T;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float w = bk_halt_act_weight((int)(i % a->T), at[i], h[i], rem[i], a);
        if (w == 0.0f) continue;
        const float *xr = x + i * a->C;
        float *o = out + i * a->C;
        for (int c = 0; c < a->C; c++) o[c] += w * xr[c];
    }
}

void bk_cpu_halt_act_backward(float *dx, const float *dout, const float *x, const float *xlast,
                              const float *h, const int *at, const float *rem,
                              const bk_halt_args *a) {
    size_t n = (size_t)a->B * a->T;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        int k = (int)(i % a->T);
        float w = bk_halt_act_weight(k, at[i], h[i], rem[i], a);
        const float *g = dout + i * a->C, *xr = x + i * a->C, *xl = xlast + i * a->C;
        float *d = dx + i * a->C;
        double dot = 0;
        int moves = k > 0 && at[i] > a->layer;
        for (int c = 0; c < a->C; c++) {
            if (moves) dot += (double)g[c] * (xr[c] - xl[c]);
            d[c] += w * g[c];
        }
        if (moves) d[0] += (float)(a->gamma * h[i] * (1.0f - h[i]) * dot);
    }
}

void bk_cpu_halt_align(float *dt, double *stats, int slot, const float *t, const float *ht,
                       const float *tcum, const float *mask, float weight, const bk_halt_args *a) {
    double n = 0, ms = 0, mt = 0, kl = 0, N = (double)a->B * (a->T - 1);
    for (int b = 0; b < a->B; b++)
        for (int k = 1; k < a->T; k++) {
            size_t i = (size_t)b * a->T + k;
            if (!(mask[i] > 0)) continue;
            double hs = bk_halt_gate(t[i * a->C], a), p = bk_halt_clamp_t(ht[i]);
            kl += bk_halt_bkl(p, bk_halt_clamp_s(hs));
            ms += a->mean_h ? hs : bk_halt_soft_keep(tcum[i], hs, a);
            mt += a->mean_h ? ht[i] : bk_halt_soft_keep(tcum[i], ht[i], a);
            n += 1;
        }
    if (n == 0) return;
    double den = a->mean_h ? n : N, d = (ms - mt) / den;
    if (stats) stats[slot] += weight * (kl / n + 5 * d * d);
    for (int b = 0; b < a->B; b++)
        for (int k = 1; k < a->T; k++) {
            size_t i = (size_t)b * a->T + k;
            if (!(mask[i] > 0)) continue;
            double hs = bk_halt_gate(t[i * a->C], a), p = bk_halt_clamp_t(ht[i]);
            /* d BKL / d t0 = gamma (hs - p); d keep_s / d hs = -gamma ks (1 - ks) / N
             * (mean_h: d mean hs / d hs = 1 / n); d hs / d t0 = gamma hs (1 - hs) */
            double dk = 1.0 / den;
            if (!a->mean_h) {
                double ks = bk_halt_soft_keep(tcum[i], hs, a);
                dk = -a->gamma * ks * (1 - ks) / N;
            }
            double g = (hs - p) / n + 10 * d * dk * hs * (1 - hs);
            dt[i * a->C] += (float)(weight * a->gamma * g);
        }
}
