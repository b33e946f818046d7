/* Optimised CPU backend: cross-entropy and masked MSE. Contracts in
 * kernels/bk.h. */
#include <math.h>

#include "kernels/cpu_ops.h"

#define LOSS_PAR_MIN (1 << 14)
/* The MSE sum is split into this many fixed row blocks, each summed in
 * double, and the blocks added in order: the result is the same whatever the
 * thread count. */
#define MSE_BLOCKS 64

/* losses[n] = logsumexp(logits[n,:]) - logits[n, target] (more accurate than
 * -log(prob) when the target's probability underflows); probs[N,V] saved.
 * target < 0 or >= V: loss 0 (probs still written; crossentropy_stats counts
 * a target outside [-1, V) as bad). */
void bk_cpu_crossentropy_forward(float *losses, float *probs, const float *logits,
                                 const int *targets, int N, int V) {
#pragma omp parallel for schedule(static) if ((long long)N * V >= LOSS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        float mx = -INFINITY;
        for (int v = 0; v < V; v++) mx = fmaxf(mx, x[v]);
        float s = 0.0f;
        for (int v = 0; v < V; v++) {
            p[v] = expf(x[v] - mx);
            s += p[v];
        }
        float inv = 1.0f / s;
#pragma omp simd
        for (int v = 0; v < V; v++) p[v] *= inv;
        int t = targets[n];
        losses[n] = t < 0 || t >= V ? 0.0f : logf(s) + mx - x[t];
    }
}

/* dlogits[n,:] += (probs[n,:] - onehot(target)) * dlosses[n]; nothing for
 * ignored rows (target < 0 or >= V). */
void bk_cpu_crossentropy_backward(float *dlogits, const float *probs, const int *targets,
                                  const float *dlosses, int N, int V) {
#pragma omp parallel for schedule(static) if ((long long)N * V >= LOSS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        int t = targets[n];
        if (t < 0 || t >= V) continue;
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        float g = dlosses[n];
#pragma omp simd
        for (int v = 0; v < V; v++) d[v] += p[v] * g;
        d[t] -= g;
    }
}

/* Denominator of the masked MSE: max(1, C * sum_n mask[n]). */
static double mse_denom(const float *mask, int N, int C) {
    double m = 0;
    if (mask)
        for (int n = 0; n < N; n++) m += mask[n];
    else
        m = N;
    double d = (double)C * m;
    return d > 1.0 ? d : 1.0;
}

/* loss[0] = sum_n mask[n] sum_c (a-b)^2 / max(1, C sum_n mask[n]) */
void bk_cpu_mse_forward(float *loss, const float *a, const float *b, const float *mask, int N,
                        int C) {
    double part[MSE_BLOCKS] = {0};
    int rows_per = (N + MSE_BLOCKS - 1) / MSE_BLOCKS;
#pragma omp parallel for schedule(static) if ((long long)N * C >= LOSS_PAR_MIN)
    for (int k = 0; k < MSE_BLOCKS; k++) {
        int n0 = k * rows_per, n1 = n0 + rows_per < N ? n0 + rows_per : N;
        double acc = 0;
        for (int n = n0; n < n1; n++) {
            float mk = mask ? mask[n] : 1.0f;
            if (mk == 0.0f) continue;
            const float *x = a + (size_t)n * C, *y = b + (size_t)n * C;
            float row = 0.0f;
            for (int c = 0; c < C; c++) row += (x[c] - y[c]) * (x[c] - y[c]);
            acc += (double)mk * row;
        }
        part[k] = acc;
    }
    double s = 0;
    for (int k = 0; k < MSE_BLOCKS; k++) s += part[k];
    loss[0] = (float)(s / mse_denom(mask, N, C));
}

/* da += dloss * 2 mask[n] (a-b) / denom; db gets the negative. Both nullable. */
void bk_cpu_mse_backward(float *da, float *db, const float *a, const float *b, const float *mask,
                         float dloss, int N, int C) {
    if (!da && !db) return;
    float k2 = (float)(2.0 * dloss / mse_denom(mask, N, C));
#pragma omp parallel for schedule(static) if ((long long)N * C >= LOSS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float g = mask ? k2 * mask[n] : k2;
        if (g == 0.0f) continue;
        const float *x = a + (size_t)n * C, *y = b + (size_t)n * C;
        if (da) {
            float *d = da + (size_t)n * C;
#pragma omp simd
            for (int c = 0; c < C; c++) d[c] += g * (x[c] - y[c]);
        }
        if (db) {
            float *d = db + (size_t)n * C;
#pragma omp simd
            for (int c = 0; c < C; c++) d[c] -= g * (x[c] - y[c]);
        }
    }
}

void bk_cpu_label_smooth_forward(float *losses, const float *logits, const int *targets, int N,
                                 int V, float eps) {
    for (int n = 0; n < N; n++) {
        int t = targets[n];
        if (t < 0 || t >= V) continue;
        const float *x = logits + (size_t)n * V;
        double mean = 0;
        for (int v = 0; v < V; v++) mean += x[v];
        mean /= V;
        double lse = (double)losses[n] + x[t];
        losses[n] = (float)((1.0 - eps) * losses[n] + eps * (lse - mean));
    }
}

void bk_cpu_label_smooth_backward(float *dlogits, const int *targets, const float *dlosses, int N,
                                  int V, float eps) {
    for (int n = 0; n < N; n++) {
        int t = targets[n];
        if (t < 0 || t >= V) continue;
        float *d = dlogits + (size_t)n * V, g = eps * dlosses[n];
        for (int v = 0; v < V; v++) d[v] += g * ((v == t ? 1.0f : 0.0f) - 1.0f / V);
    }
}
