/* ref_bilstm_wide.h — a plain double-precision reference of the wide
 * multi-head BiLSTM mixer (worker/nn/nn_bilstm_wide.h) up to its inner
 * output (before the output projection): token by token, no BLAS, written
 * from the layout in the header, for test_mixer_modules. */
#ifndef REF_BILSTM_WIDE_H
#define REF_BILSTM_WIDE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The weights as nn_bilstm_wide names them ("P.pre.weight", ...). */
typedef struct ref_bilstm_wide_w {
    const float *pre_w, *pre_b, *ih_w, *ih_b, *hh_w, *head_w, *head_b;
} ref_bilstm_wide_w;

static inline double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* inner[B,T,C] = the mixer's output before W_O for u[B,T,C]; mask[B,T]
 * nullable (masked tokens are skipped by the recurrences and give 0). */
static inline void ref_bilstm_wide(const ref_bilstm_wide_w *w, const float *u, const float *mask,
                                   int B, int T, int C, int H, double *inner) {
    int dh = C / H;
    double *p = calloc((size_t)T * C, sizeof *p), *hs = calloc((size_t)T * 2 * C, sizeof *hs);
    double *hp = calloc((size_t)dh, sizeof *hp), *cp = calloc((size_t)dh, sizeof *cp);
    double *pre = calloc((size_t)4 * dh, sizeof *pre);
    for (int b = 0; b < B; b++) {
        memset(hs, 0, (size_t)T * 2 * C * sizeof *hs);
        for (int t = 0; t < T; t++)
            for (int o = 0; o < C; o++) {
                double a = w->pre_b[o];
                for (int i = 0; i < C; i++)
                    a += (double)w->pre_w[o * C + i] * u[((size_t)b * T + t) * C + i];
                p[t * C + o] = a;
            }
        for (int s = 0; s < 2 * H; s++) {
            int h = s / 2, rev = s % 2;
            memset(hp, 0, dh * sizeof *hp);
            memset(cp, 0, dh * sizeof *cp);
            for (int k = 0; k < T; k++) {
                int t = rev ? T - 1 - k : k;
                if (mask && !(mask[b * T + t] > 0)) continue;
                for (int r = 0; r < 4 * dh; r++) {
                    double a = w->ih_b[s * 4 * dh + r];
                    for (int i = 0; i < dh; i++)
                        a += (double)w->ih_w[((size_t)s * 4 * dh + r) * dh + i] *
                             p[t * C + h * dh + i];
                    for (int i = 0; i < dh; i++)
                        a += (double)w->hh_w[((size_t)s * 4 * dh + r) * dh + i] * hp[i];
                    pre[r] = a;
                }
                for (int j = 0; j < dh; j++) {
                    double ig = ref_sigmoid(pre[j]), fg = ref_sigmoid(pre[dh + j]);
                    double gg = tanh(pre[2 * dh + j]), og = ref_sigmoid(pre[3 * dh + j]);
                    cp[j] = fg * cp[j] + ig * gg;
                    hp[j] = og * tanh(cp[j]);
                    hs[t * 2 * C + s * dh + j] = hp[j];
                }
            }
        }
        for (int t = 0; t < T; t++)
            for (int o = 0; o < C; o++) {
                int h = o / dh;
                double a = w->head_b[o];
                for (int i = 0; i < 2 * dh; i++)
                    a += (double)w->head_w[o * 2 * dh + i] * hs[t * 2 * C + 2 * h * dh + i];
                inner[((size_t)b * T + t) * C + o] = mask && !(mask[b * T + t] > 0) ? 0 : a;
            }
    }
    free(p), free(hs), free(hp), free(cp), free(pre);
}

#endif
