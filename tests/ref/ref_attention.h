/* Plain double-precision references the optimised backends are tested
 * against; slow, obvious, no SIMD, no BLAS. This file: multi-head attention
 * (kernels/cpu_attention.c) with key mask, causality and head gates, and the
 * QKV projection in front of it. */
#ifndef BF_REF_ATTENTION_H
#define BF_REF_ATTENTION_H

#include <math.h>
#include <stddef.h>

#include "kernels/bk.h"

/* out[B*T, C] and the attention maps att[B, NH, T, T] in double from
 * qkv[B*T, 3C] (q, k, v side by side), as bk.h's attention_forward defines
 * them: a row with no visible key has all-zero weights and output. */
static inline void ref_attention(double *out, double *att, const float *qkv,
                                 const bk_attn_args *a) {
    int B = a->B, T = a->T, C = a->C, NH = a->NH, HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double *p = att + (((size_t)b * NH + h) * T + t) * T;
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * HS;
                double mx = -INFINITY;
                for (int u = 0; u < T; u++) {
                    int vis = (!a->causal || u <= t) && (!a->mask || a->mask[b * T + u] != 0);
                    double s = -INFINITY;
                    if (vis) {
                        const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * HS;
                        s = 0;
                        for (int j = 0; j < HS; j++) s += (double)q[j] * k[j];
                        s *= scale;
                    }
                    p[u] = s;
                    mx = fmax(mx, s);
                }
                double sum = 0;
                for (int u = 0; u < T; u++) {
                    p[u] = mx == -INFINITY || p[u] == -INFINITY ? 0 : exp(p[u] - mx);
                    sum += p[u];
                }
                double g = a->gate ? a->gate[b * NH + h] : 1.0;
                for (int j = 0; j < HS; j++) out[((size_t)b * T + t) * C + h * HS + j] = 0;
                for (int u = 0; u < T; u++) {
                    if (sum > 0) p[u] /= sum;
                    const float *v = qkv + ((size_t)b * T + u) * 3 * C + 2 * C + h * HS;
                    for (int j = 0; j < HS; j++)
                        out[((size_t)b * T + t) * C + h * HS + j] += g * p[u] * v[j];
                }
            }
}

/* qkv[B*T, 3C] = x[B*T, C] @ wqkv^T + bqkv (bias nullable), plain loops,
 * summed in double and rounded once to float. */
static inline void ref_qkv(float *qkv, const float *x, const float *w, const float *bias, int BT,
                           int C) {
    for (int n = 0; n < BT; n++)
        for (int o = 0; o < 3 * C; o++) {
            double s = bias ? bias[o] : 0;
            for (int i = 0; i < C; i++) s += (double)x[(size_t)n * C + i] * w[(size_t)o * C + i];
            qkv[(size_t)n * 3 * C + o] = (float)s;
        }
}

#endif
