/* Optimised CPU backend: LayerNorm, row softmax and masked mean pooling.
 * Contracts in kernels/bk.h. Rows are independent, so OpenMP splits rows; sums
 * over rows (parameter gradients) split the channels instead and add rows in
 * order, so results never depend on the thread count. */
#include <math.h>

#include "kernels/cpu_ops.h"

#define LN_EPS 1e-5f
/* Parallelise once a call touches this many floats. */
#define NORM_PAR_MIN (1 << 14)
/* Channels per task when reducing over rows. */
#define NORM_CHUNK 64

/* out[N,C] = (inp - mean) * rstd * w + b, per row; saves mean[N], rstd[N].
 * Two passes over the row (mean, then centred variance): exact enough in fp32
 * even when |mean| >> std. */
void bk_cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C) {
#pragma omp parallel for schedule(static) if ((long long)N * C >= NORM_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c];
        float m = s / (float)C;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        float r = 1.0f / sqrtf(v / (float)C + LN_EPS);
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
        mean[n] = m;
        rstd[n] = r;
    }
}

/* With xhat = (x - mean) * rstd and g = w * dout:
 *   dinp += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))
 *   dw += sum_n dout * xhat,  db += sum_n dout.
 * dinp, dw, db nullable. */
void bk_cpu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C) {
    int par = (long long)N * C >= NORM_PAR_MIN;
    if (dinp) {
#pragma omp parallel for schedule(static) if (par)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            float m = mean[n], r = rstd[n];
            float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
            for (int c = 0; c < C; c++) {
                float g = w[c] * d[c];
                sg += g;
                sgx += g * (x[c] - m) * r;
            }
            sg /= (float)C;
            sgx /= (float)C;
#pragma omp simd
            for (int c = 0; c < C; c++) dx[c] += r * (w[c] * d[c] - sg - (x[c] - m) * r * sgx);
        }
    }
    if (!dw && !db) return;
    int nchunks = (C + NORM_CHUNK - 1) / NORM_CHUNK;
#pragma omp parallel for schedule(static) if (par && nchunks > 1)
    for (int k = 0; k < nchunks; k++) {
        int c0 = k * NORM_CHUNK, c1 = c0 + NORM_CHUNK < C ? c0 + NORM_CHUNK : C;
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
            float m = mean[n], r = rstd[n];
            if (dw) {
#pragma omp simd
                for (int c = c0; c < c1; c++) dw[c] += d[c] * (x[c] - m) * r;
            }
            if (db) {
#pragma omp simd
                for (int c = c0; c < c1; c++) db[c] += d[c];
            }
        }
    }
}

/* out[N,C] = softmax over each row, max-subtracted so exp never overflows.
 * A row that is all -inf (fully masked) gives zeros rather than NaN. */
void bk_cpu_softmax_forward(float *out, const float *inp, int N, int C) {
#pragma omp parallel for schedule(static) if ((long long)N * C >= NORM_PAR_MIN / 4)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float mx = -INFINITY;
        for (int c = 0; c < C; c++) mx = fmaxf(mx, x[c]);
        if (mx == -INFINITY) { /* every logit masked out: no mass anywhere, not NaN */
            for (int c = 0; c < C; c++) o[c] = 0.0f;
            continue;
        }
        float s = 0.0f;
        for (int c = 0; c < C; c++) {
            o[c] = expf(x[c] - mx);
            s += o[c];
        }
        float inv = 1.0f / s;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] *= inv;
    }
}

/* dinp += out * (dout - <dout, out>) per row */
void bk_cpu_softmax_backward(float *dinp, const float *out, const float *dout, int N, int C) {
#pragma omp parallel for schedule(static) if ((long long)N * C >= NORM_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *y = out + (size_t)n * C, *d = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < C; c++) dot += y[c] * d[c];
#pragma omp simd
        for (int c = 0; c < C; c++) dx[c] += y[c] * (d[c] - dot);
    }
}

/* Weight of token t of sample b in the masked mean: mask / sum(mask), or 0
 * for every token of a sample with no active token. */
static float pool_count(const float *mask, int b, int T) {
    if (!mask) return (float)T;
    float s = 0.0f;
    for (int t = 0; t < T; t++) s += mask[(size_t)b * T + t];
    return s;
}

/* out[B,C] = sum_t mask[b,t] inp[b,t,:] / sum_t mask[b,t]; 0 when no token
 * is active. Rows of inp are streamed in order, so the C-wide accumulator
 * stays in cache. */
void bk_cpu_meanpool_forward(float *out, const float *inp, const float *mask, int B, int T, int C) {
#pragma omp parallel for schedule(static) if ((long long)B * T * C >= NORM_PAR_MIN)
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * C;
        for (int c = 0; c < C; c++) o[c] = 0.0f;
        float cnt = pool_count(mask, b, T);
        if (cnt <= 0.0f) continue;
        float inv = 1.0f / cnt;
        for (int t = 0; t < T; t++) {
            float wt = mask ? mask[(size_t)b * T + t] * inv : inv;
            if (wt == 0.0f) continue;
            const float *x = inp + ((size_t)b * T + t) * C;
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] += wt * x[c];
        }
    }
}

/* dinp[b,t,:] += dout[b,:] * mask[b,t] / sum_t mask[b,t] */
void bk_cpu_meanpool_backward(float *dinp, const float *dout, const float *mask, int B, int T,
                              int C) {
#pragma omp parallel for schedule(static) if ((long long)B * T * C >= NORM_PAR_MIN)
    for (int b = 0; b < B; b++) {
        float cnt = pool_count(mask, b, T);
        if (cnt <= 0.0f) continue;
        float inv = 1.0f / cnt;
        const float *d = dout + (size_t)b * C;
        for (int t = 0; t < T; t++) {
            float wt = mask ? mask[(size_t)b * T + t] * inv : inv;
            if (wt == 0.0f) continue;
            float *dx = dinp + ((size_t)b * T + t) * C;
#pragma omp simd
            for (int c = 0; c < C; c++) dx[c] += wt * d[c];
        }
    }
}
