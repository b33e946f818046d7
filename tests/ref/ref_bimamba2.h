/* ref_bimamba2.h — a plain double-precision reference of the bidirectional
 * Mamba-2 mixer (worker/nn/nn_bimamba2.h) up to its inner output (before the
 * output projection): token by token, no chunks, no BLAS, written from the
 * layout in the header, for test_mixer_modules. */
#ifndef REF_BIMAMBA2_H
#define REF_BIMAMBA2_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One direction's weights as nn_bimamba2 names them ("P.fwd.in_proj.weight", ...). */
typedef struct ref_mamba2_dir_w {
    const float *in_w, *conv_w, *conv_b, *dt_bias, *A_log, *D, *norm_w;
} ref_mamba2_dir_w;

static inline double ref_m2_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* inner[B,T,C] = the mixer's output before W_O for u[B,T,C]; mask[B,T]
 * nullable (masked tokens are skipped by the conv and the scan and give 0).
 * fuse_w [C, 2 d_h]. */
static inline void ref_bimamba2(const ref_mamba2_dir_w w[2], const float *fuse_w, const float *u,
                                const float *mask, int B, int T, int C, int H, int N,
                                double *inner) {
    const int dh = C / H, W = C + 2 * N, R = 2 * C + 2 * N + H, K = 4;
    double *proj = calloc((size_t)T * R, sizeof *proj), *xbc = calloc((size_t)T * W, sizeof *xbc);
    double *yn = calloc((size_t)2 * T * C, sizeof *yn), *S = calloc((size_t)dh * N, sizeof *S);
    int *pos = calloc((size_t)T, sizeof *pos);
    for (int b = 0; b < B; b++) {
        for (int r = 0; r < 2; r++) {
            const ref_mamba2_dir_w *d = &w[r];
            int n = 0;
            for (int k = 0; k < T; k++) {
                int t = r ? T - 1 - k : k;
                if (!mask || mask[b * T + t] > 0) pos[n++] = t;
            }
            for (int t = 0; t < T; t++)
                for (int o = 0; o < R; o++) {
                    double a = 0;
                    for (int i = 0; i < C; i++)
                        a += (double)d->in_w[(size_t)o * C + i] * u[((size_t)b * T + t) * C + i];
                    proj[(size_t)t * R + o] = a;
                }
            /* the conv over the active tokens in scan order, tap K-1 the current one */
            for (int k = 0; k < n; k++)
                for (int c = 0; c < W; c++) {
                    double a = d->conv_b[c];
                    for (int j = 0; j < K; j++) {
                        int src = k - (K - 1) + j;
                        if (src >= 0)
                            a += (double)d->conv_w[c * K + j] * proj[pos[src] * R + C + c];
                    }
                    xbc[(size_t)pos[k] * W + c] = a * ref_m2_sigmoid(a);
                }
            double *y = yn + (size_t)r * T * C;
            memset(y, 0, (size_t)T * C * sizeof *y);
            for (int h = 0; h < H; h++) {
                double A = -exp((double)d->A_log[h]);
                memset(S, 0, (size_t)dh * N * sizeof *S);
                for (int k = 0; k < n; k++) {
                    int t = pos[k];
                    const double *x = xbc + (size_t)t * W, *Bm = x + C, *Cm = x + C + N;
                    double pre = proj[(size_t)t * R + 2 * C + 2 * N + h] + d->dt_bias[h];
                    double dt = pre > 20 ? pre : log1p(exp(pre)), dec = exp(dt * A);
                    for (int p = 0; p < dh; p++) {
                        double v = d->D[h] * x[h * dh + p];
                        for (int m = 0; m < N; m++) {
                            S[p * N + m] = dec * S[p * N + m] + dt * x[h * dh + p] * Bm[m];
                            v += S[p * N + m] * Cm[m];
                        }
                        y[(size_t)t * C + h * dh + p] = v;
                    }
                }
            }
            /* gated RMSNorm over all C: RMSNorm(y SiLU(z)) w */
            for (int k = 0; k < n; k++) {
                int t = pos[k];
                double ss = 0;
                for (int c = 0; c < C; c++) {
                    double z = proj[(size_t)t * R + c];
                    y[(size_t)t * C + c] *= z * ref_m2_sigmoid(z);
                    ss += y[(size_t)t * C + c] * y[(size_t)t * C + c];
                }
                double rs = 1.0 / sqrt(ss / C + 1e-5);
                for (int c = 0; c < C; c++) y[(size_t)t * C + c] *= rs * d->norm_w[c];
            }
        }
        for (int t = 0; t < T; t++)
            for (int o = 0; o < C; o++) {
                int h = o / dh;
                double a = 0;
                for (int i = 0; i < dh; i++)
                    a += (double)fuse_w[o * 2 * dh + i] * yn[(size_t)t * C + h * dh + i] +
                         (double)fuse_w[o * 2 * dh + dh + i] * yn[(size_t)(T + t) * C + h * dh + i];
                inner[((size_t)b * T + t) * C + o] = mask && !(mask[b * T + t] > 0) ? 0 : a;
            }
    }
    free(proj), free(xbc), free(yn), free(S), free(pos);
}

#endif
