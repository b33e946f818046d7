/* A-ViT token halting (design.md, "A-ViT"): the gate of one layer, the
 * ponder and depth-prior losses, and their gradient to the block output's
 * channel 0. Every sum runs in one fixed order (sample, then token), so a
 * run is reproducible; the CUDA ops (cuda/cuda_halt.cu) follow the same
 * formulas. */
#include <math.h>
#include <string.h>

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

static float gate(float t0, const bk_halt_args *a) {
    return 1.0f / (1.0f + expf(-(a->gamma * t0 - a->centre)));
}

void bk_cpu_halt_forward(float *h, float *next, float *cum, float *rem, int *at, double *hstats,
                         const float *t, const float *mask, const bk_halt_args *a) {
    int L = a->layers, l = a->layer, last = l == L - 1;
    double psum = 0, keep = 0, rsum = 0;
    for (int b = 0; b < a->B; b++)
        for (int k = 0; k < a->T; k++) {
            size_t i = (size_t)b * a->T + k;
            if (!(mask[i] > 0)) {
                h[i] = 0;
                next[i] = 0;
                continue;
            }
            if (k == 0) { /* the class token runs every layer */
                h[i] = 0;
                next[i] = 1;
                continue;
            }
            float hv = last ? 1.0f : gate(t[i * a->C], a);
            h[i] = hv;
            keep += 1;
            cum[i] += hv;
            if (cum[i] >= 1.0f - a->eps) {
                at[i] = l;
                next[i] = 0;
                psum += rem[i];
                rsum += rem[i];
            } else {
                rem[i] -= hv;
                next[i] = 1;
                psum += hv;
            }
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
    double S = 0, Z = 0, keep = 0, kl = 0;
    for (int l = 0; l < L; l++) {
        S += hstats[l];
        keep += hstats[L + l];
        double d = (l - a->centre_depth) / a->sigma;
        Z += exp(-0.5 * d * d);
    }
    double n = a->tokens > 0 ? a->tokens : 1, tiny = 1e-12;
    for (int l = 0; l < L; l++) {
        double d = (l - a->centre_depth) / a->sigma, pi = exp(-0.5 * d * d) / Z;
        double s = hstats[l] > tiny ? hstats[l] : tiny, Sq = S > tiny ? S : tiny;
        kl += pi > 0 ? pi * log(pi / (s / Sq)) : 0;
        /* d KL / d psum_l = -pi_l / psum_l + 1 / S; a token adds p to psum_l */
        dldp[l] = (float)(a->prior_weight * (-pi / s + 1.0 / Sq));
    }
    if (stats) {
        stats[a->slot_ponder] += a->ponder_weight * (keep + hstats[2 * L]) / n;
        stats[a->slot_prior] += a->prior_weight * kl;
        stats[a->slot_keep] += keep / (n * L);
    }
}

void bk_cpu_halt_backward(float *dt, const float *h, const int *at, const float *dldp, float pgrad,
                          const bk_halt_args *a) {
    int l = a->layer;
    for (int b = 0; b < a->B; b++)
        for (int k = 1; k < a->T; k++) {
            size_t i = (size_t)b * a->T + k;
            if (at[i] <= l) continue;
            float hv = h[i], g = dldp[l] - dldp[at[i]] + pgrad;
            dt[i * a->C] += a->gamma * hv * (1.0f - hv) * g;
        }
}

void bk_cpu_halt_align(float *dt, double *stats, int slot, const float *t, const float *ht,
                       const float *mask, float weight, const bk_halt_args *a) {
    double n = 0, ms = 0, mt = 0, kl = 0;
    for (int b = 0; b < a->B; b++)
        for (int k = 1; k < a->T; k++) {
            size_t i = (size_t)b * a->T + k;
            if (!(mask[i] > 0)) continue;
            double hs = gate(t[i * a->C], a), p = ht[i];
            p = p < 1e-6 ? 1e-6 : p > 1 - 1e-6 ? 1 - 1e-6 : p;
            double q = hs < 1e-12 ? 1e-12 : hs > 1 - 1e-12 ? 1 - 1e-12 : hs;
            kl += p * log(p / q) + (1 - p) * log((1 - p) / (1 - q));
            ms += hs;
            mt += ht[i];
            n += 1;
        }
    if (n == 0) return;
    ms /= n, mt /= n;
    if (stats) stats[slot] += weight * (kl / n + 5 * (ms - mt) * (ms - mt));
    for (int b = 0; b < a->B; b++)
        for (int k = 1; k < a->T; k++) {
            size_t i = (size_t)b * a->T + k;
            if (!(mask[i] > 0)) continue;
            double hs = gate(t[i * a->C], a), p = ht[i];
            p = p < 1e-6 ? 1e-6 : p > 1 - 1e-6 ? 1 - 1e-6 : p;
            /* d BKL / d t0 = gamma (hs - p); d mean hs / d t0 = gamma hs (1 - hs) / n */
            double g = (hs - p) / n + 10 * (ms - mt) * hs * (1 - hs) / n;
            dt[i * a->C] += (float)(weight * a->gamma * g);
        }
}
