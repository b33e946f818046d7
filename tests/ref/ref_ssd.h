/* ref_ssd.h — plain double-precision references of Mamba-2's SSD scan and
 * gated RMSNorm (kernels/bk.h: bk_ssd_args; kernels/bk_ops.def:
 * rmsnorm_gated_*), written from the recurrences in bk.h, token by token
 * (no chunks), forward and backward, for test_ssd_ops and
 * test_mixer_modules. */
#ifndef REF_SSD_H
#define REF_SSD_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk.h"

/* The gradients of the SSD scan in double, laid out as bk_ssd_grads' (dx,
 * dBm, dCm in rows of ld, ddt [B,T,H], the rest [H]); every entry assigned. */
typedef struct ref_ssd_grads {
    double *dx, *dBm, *dCm, *ddt, *ddt_bias, *dA_log, *dD;
} ref_ssd_grads;

static inline double ref_ssd_softplus(double x) { return x > 20 ? x : log1p(exp(x)); }
static inline double ref_ssd_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline int ref_ssd_on(const bk_ssd_args *a, int b, int t) {
    return !a->mask || a->mask[(size_t)b * a->T + t] > 0;
}

/* out[B,T,H*P] (double) = the scan of a; with dout and g (both non-NULL)
 * also its gradients. */
static inline void ref_ssd(const bk_ssd_args *a, double *out, const float *dout,
                           const ref_ssd_grads *g) {
    const int B = a->B, T = a->T, H = a->H, P = a->P, N = a->N, HP = H * P;
    size_t rows = (size_t)B * T;
    memset(out, 0, rows * HP * sizeof(double));
    if (g) {
        memset(g->dx, 0, rows * a->ld * sizeof(double));
        memset(g->dBm, 0, rows * a->ld * sizeof(double));
        memset(g->dCm, 0, rows * a->ld * sizeof(double));
        memset(g->ddt, 0, rows * H * sizeof(double));
        memset(g->ddt_bias, 0, H * sizeof(double));
        memset(g->dA_log, 0, H * sizeof(double));
        memset(g->dD, 0, H * sizeof(double));
    }
    double *S = calloc((size_t)(T + 1) * P * N, sizeof *S), *L = calloc((size_t)P * N, sizeof *L);
    int *pos = calloc((size_t)T, sizeof *pos);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            double A = -exp((double)a->A_log[h]), Dh = a->Dskip ? a->Dskip[h] : 0;
            int n = 0;
            for (int k = 0; k < T; k++) {
                int t = a->reverse ? T - 1 - k : k;
                if (ref_ssd_on(a, b, t)) pos[n++] = t;
            }
            memset(S, 0, (size_t)P * N * sizeof *S); /* S_0 = 0; S_k at S + k P N */
            for (int k = 1; k <= n; k++) {
                size_t bt = (size_t)b * T + pos[k - 1];
                const float *x = a->x + bt * a->ld + (size_t)h * P;
                const float *Bm = a->Bm + bt * a->ld, *Cm = a->Cm + bt * a->ld;
                double dt = ref_ssd_softplus((double)a->dt[bt * H + h] + a->dt_bias[h]);
                double dec = exp(dt * A);
                double *Sk = S + (size_t)k * P * N, *Sp = Sk - (size_t)P * N;
                for (int p = 0; p < P; p++) {
                    double y = Dh * x[p];
                    for (int m = 0; m < N; m++) {
                        Sk[p * N + m] = dec * Sp[p * N + m] + dt * x[p] * Bm[m];
                        y += Sk[p * N + m] * Cm[m];
                    }
                    out[bt * HP + (size_t)h * P + p] = y;
                }
            }
            if (!g) continue;
            memset(L, 0, (size_t)P * N * sizeof *L);
            for (int k = n; k >= 1; k--) {
                size_t bt = (size_t)b * T + pos[k - 1];
                const float *x = a->x + bt * a->ld + (size_t)h * P;
                const float *Bm = a->Bm + bt * a->ld, *Cm = a->Cm + bt * a->ld;
                const float *dy = dout + bt * HP + (size_t)h * P;
                double pre = (double)a->dt[bt * H + h] + a->dt_bias[h];
                double dt = ref_ssd_softplus(pre), dec = exp(dt * A);
                double *Sk = S + (size_t)k * P * N, *Sp = Sk - (size_t)P * N;
                double Z = 0, xlb = 0;
                for (int p = 0; p < P; p++)
                    for (int m = 0; m < N; m++) L[p * N + m] += dy[p] * (double)Cm[m];
                for (int m = 0; m < N; m++) {
                    double dC = 0, dB = 0;
                    for (int p = 0; p < P; p++) {
                        dC += Sk[p * N + m] * dy[p];
                        dB += x[p] * L[p * N + m];
                        Z += L[p * N + m] * Sp[p * N + m];
                    }
                    g->dCm[bt * a->ld + m] += dC;
                    g->dBm[bt * a->ld + m] += dt * dB;
                }
                for (int p = 0; p < P; p++) {
                    double lb = 0;
                    for (int m = 0; m < N; m++) lb += L[p * N + m] * Bm[m];
                    g->dx[bt * a->ld + (size_t)h * P + p] = dt * lb + Dh * dy[p];
                    xlb += x[p] * lb;
                    g->dD[h] += (double)dy[p] * x[p];
                }
                double ddt = xlb + A * dec * Z, dpre = ddt * ref_ssd_sigmoid(pre);
                g->ddt[bt * H + h] = dpre;
                g->ddt_bias[h] += dpre;
                g->dA_log[h] += dt * dec * Z * A;
                for (int i = 0; i < P * N; i++) L[i] *= dec;
            }
        }
    free(S), free(L), free(pos);
}

/* out[N,C] = y SiLU(z) / sqrt(mean (y SiLU(z))^2 + 1e-5) * w; with dout:
 * dy, dz [N,C] and dw [C] (each assigned). */
static inline void ref_rmsnorm_gated(const float *y, const float *z, const float *w, int Nr, int C,
                                     double *out, const float *dout, double *dy, double *dz,
                                     double *dw) {
    if (dout) memset(dw, 0, C * sizeof(double));
    for (int n = 0; n < Nr; n++) {
        double ss = 0;
        for (int c = 0; c < C; c++) {
            double zc = z[n * C + c], gc = y[n * C + c] * zc * ref_ssd_sigmoid(zc);
            ss += gc * gc;
        }
        double r = 1.0 / sqrt(ss / C + 1e-5), dot = 0;
        for (int c = 0; c < C; c++) {
            double zc = z[n * C + c], gc = y[n * C + c] * zc * ref_ssd_sigmoid(zc);
            out[n * C + c] = gc * r * w[c];
            if (dout) {
                dot += (double)w[c] * dout[n * C + c] * gc;
                dw[c] += (double)dout[n * C + c] * gc * r;
            }
        }
        if (!dout) continue;
        for (int c = 0; c < C; c++) {
            double zc = z[n * C + c], sg = ref_ssd_sigmoid(zc), silu = zc * sg;
            double gc = y[n * C + c] * silu;
            double dg = r * w[c] * dout[n * C + c] - gc * r * r * r * dot / C;
            dy[n * C + c] = dg * silu;
            dz[n * C + c] = dg * y[n * C + c] * sg * (1 + zc * (1 - sg));
        }
    }
}

#endif
