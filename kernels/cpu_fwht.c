/* CPU Walsh–Hadamard transform: the parameter-free output projection
 * y = alpha ⊙ (H_d x)/sqrt(d) + beta. d = 2^n uses Sylvester's H in natural
 * order (n butterfly stages, additions only); d = 12*2^n uses H_12 ⊗ H_{2^n}:
 * each of the 12 contiguous blocks of 2^n gets the fast transform, then the
 * 12x12 Paley matrix mixes the blocks. Rows are independent: OpenMP over rows. */
#include <math.h>
#include <string.h>

#include "kernels/bk_hadamard.h"
#include "kernels/cpu_ops.h"

/* Columns mixed per step of the 12x12 stage; 12 * 64 floats stay on the stack. */
#define FWHT_MIX_CHUNK 64

/* In-place unnormalised Sylvester transform of x[m], m a power of two. */
static void fwht_pow2(float *x, int m) {
    int h = 1;
    /* First two stages fused: radix-4 butterflies touch 4 neighbours. */
    if (m >= 4) {
        for (int i = 0; i < m; i += 4) {
            float a = x[i], b = x[i + 1], c = x[i + 2], d = x[i + 3];
            float s0 = a + b, d0 = a - b, s1 = c + d, d1 = c - d;
            x[i] = s0 + s1;
            x[i + 1] = d0 + d1;
            x[i + 2] = s0 - s1;
            x[i + 3] = d0 - d1;
        }
        h = 4;
    }
    for (; h < m; h *= 2) {
        for (int i = 0; i < m; i += 2 * h) {
            float *lo = x + i, *hi = x + i + h;
#pragma omp simd
            for (int j = 0; j < h; j++) {
                float a = lo[j], b = hi[j];
                lo[j] = a + b;
                hi[j] = a - b;
            }
        }
    }
}

/* In-place unnormalised H_d x (transpose = 0) or H_d^T x (transpose = 1). */
static void fwht_row(float *x, int d, int transpose) {
    if ((d & (d - 1)) == 0) {
        fwht_pow2(x, d);
        return;
    }
    int m = d / 12;
    for (int a = 0; a < 12; a++) fwht_pow2(x + (size_t)a * m, m);
    float tmp[12][FWHT_MIX_CHUNK];
    for (int b0 = 0; b0 < m; b0 += FWHT_MIX_CHUNK) {
        int nb = m - b0 < FWHT_MIX_CHUNK ? m - b0 : FWHT_MIX_CHUNK;
        for (int a = 0; a < 12; a++)
            memcpy(tmp[a], x + (size_t)a * m + b0, (size_t)nb * sizeof(float));
        for (int a = 0; a < 12; a++) {
            float *dst = x + (size_t)a * m + b0;
            for (int j = 0; j < nb; j++) dst[j] = 0.0f;
            for (int s = 0; s < 12; s++) {
                float sign = transpose ? bk_h12[s][a] : bk_h12[a][s];
                const float *src = tmp[s];
#pragma omp simd
                for (int j = 0; j < nb; j++) dst[j] += sign * src[j];
            }
        }
    }
}

void bk_cpu_fwht_forward(float *out, const float *inp, const float *alpha, const float *beta, int N,
                         int d) {
    const float norm = 1.0f / sqrtf((float)d);
    /* a few rows (one decode step) are cheaper than waking the thread team */
#pragma omp parallel for schedule(static) if ((size_t)N * d >= 16384)
    for (int n = 0; n < N; n++) {
        float *y = out + (size_t)n * d;
        const float *x = inp + (size_t)n * d;
        if (y != x) memcpy(y, x, (size_t)d * sizeof(float));
        fwht_row(y, d, 0);
        if (alpha && beta) {
#pragma omp simd
            for (int i = 0; i < d; i++) y[i] = alpha[i] * (y[i] * norm) + beta[i];
        } else if (alpha) {
#pragma omp simd
            for (int i = 0; i < d; i++) y[i] = alpha[i] * (y[i] * norm);
        } else if (beta) {
#pragma omp simd
            for (int i = 0; i < d; i++) y[i] = y[i] * norm + beta[i];
        } else {
#pragma omp simd
            for (int i = 0; i < d; i++) y[i] *= norm;
        }
    }
}

/* Column sums acc[i] += sum_n a[n,i] * (b ? b[n,i] : 1), parallel over column
 * chunks so the result does not depend on the thread count. */
static void column_dot_accumulate(float *acc, const float *a, const float *b, int N, int d) {
    enum { CHUNK = 256 };
    int nchunks = (d + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < nchunks; c++) {
        int i0 = c * CHUNK, i1 = i0 + CHUNK < d ? i0 + CHUNK : d;
        float s[CHUNK];
        for (int i = i0; i < i1; i++) s[i - i0] = 0.0f;
        for (int n = 0; n < N; n++) {
            const float *ar = a + (size_t)n * d;
            if (b) {
                const float *br = b + (size_t)n * d;
#pragma omp simd
                for (int i = i0; i < i1; i++) s[i - i0] += ar[i] * br[i];
            } else {
#pragma omp simd
                for (int i = i0; i < i1; i++) s[i - i0] += ar[i];
            }
        }
        for (int i = i0; i < i1; i++) acc[i] += s[i - i0];
    }
}

void bk_cpu_fwht_backward(float *dinp, float *dalpha, float *dbeta, float *scratch,
                          const float *dout, const float *inp, const float *alpha, int N, int d) {
    const float norm = 1.0f / sqrtf((float)d);
    if (dbeta) column_dot_accumulate(dbeta, dout, NULL, N, d);
    if (dalpha) {
        /* scratch = H inp / sqrt(d), the forward's pre-affine output */
        bk_cpu_fwht_forward(scratch, inp, NULL, NULL, N, d);
        column_dot_accumulate(dalpha, dout, scratch, N, d);
    }
    if (!dinp) return;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *g = scratch + (size_t)n * d;
        const float *dy = dout + (size_t)n * d;
        if (alpha) {
#pragma omp simd
            for (int i = 0; i < d; i++) g[i] = alpha[i] * dy[i];
        } else {
            memcpy(g, dy, (size_t)d * sizeof(float));
        }
        fwht_row(g, d, 1);
        float *dx = dinp + (size_t)n * d;
#pragma omp simd
        for (int i = 0; i < d; i++) dx[i] += g[i] * norm;
    }
}
