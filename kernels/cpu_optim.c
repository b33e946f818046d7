/* Optimised CPU backend: global gradient norm and the AdamW step. Contracts
 * in kernels/bk.h. Both stream over every parameter once per step, so they
 * are memory bound and threaded over fixed blocks. */
#include <math.h>

#include "kernels/cpu_ops.h"

/* The squared norm is summed in this many fixed blocks, each in double, and
 * the blocks added in order: the same bits whatever the thread count. */
#define NORM_BLOCKS 256
#define OPTIM_PAR_MIN ((size_t)1 << 15)

/* sum of g[i]^2 in double, four independent accumulators so the loop is not
 * one long dependency chain (and vectorises), combined in a fixed order. */
static double sumsq(const float *g, size_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)g[i] * g[i];
        s1 += (double)g[i + 1] * g[i + 1];
        s2 += (double)g[i + 2] * g[i + 2];
        s3 += (double)g[i + 3] * g[i + 3];
    }
    for (; i < n; i++) s0 += (double)g[i] * g[i];
    return (s0 + s1) + (s2 + s3);
}

/* sqrt(sum g^2), accumulated in double. Counted as a 4-byte device-to-host
 * copy, which it is on the GPU. */
float bk_cpu_global_norm(const float *g, size_t n) {
    bk_cpu_count_d2h(sizeof(float));
    return bk_cpu_norm_value(g, n);
}

float bk_cpu_norm_value(const float *g, size_t n) {
    if (n < OPTIM_PAR_MIN) return (float)sqrt(sumsq(g, n));
    double part[NORM_BLOCKS];
    size_t per = (n + NORM_BLOCKS - 1) / NORM_BLOCKS;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < NORM_BLOCKS; k++) {
        size_t i0 = (size_t)k * per;
        size_t i1 = i0 + per < n ? i0 + per : n;
        part[k] = i0 < i1 ? sumsq(g + i0, i1 - i0) : 0.0;
    }
    double s = 0;
    for (int k = 0; k < NORM_BLOCKS; k++) s += part[k];
    return (float)sqrt(s);
}

/* One AdamW step t >= 1 with decoupled weight decay:
 *   g' = grad_scale g;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
 *   p -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd p)
 * The bias corrections are computed once, in double. */
void bk_cpu_adamw_update(float *p, const float *g, float *m, float *v, size_t n, const bk_adamw *h,
                         int t, float grad_scale) {
    float b1 = h->beta1, b2 = h->beta2, lr = h->lr, eps = h->eps, wd = h->weight_decay;
    float inv_bc1 = (float)(1.0 / (1.0 - pow((double)b1, (double)t)));
    float inv_bc2 = (float)(1.0 / (1.0 - pow((double)b2, (double)t)));
#pragma omp parallel for simd schedule(static) if (n >= OPTIM_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    }
}
