/* Global gradient norm (two-stage reduction in double, fixed order), AdamW,
 * and the Philox random streams (kernels/bk_rng.h, the same functions the
 * CPU backend calls, so values agree up to libm rounding of log/cos). */
#include <math.h>

#include "kernels/bk_rng.h"
#include "kernels/cuda/cuda_check.h"

#define NORM_BLOCKS 512

__global__ void sumsq_partial_kernel(double *partial, const float *g, size_t n) {
    __shared__ double sh[32];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)g[i] * g[i];
    s = bk_block_sum_d(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sumsq_finish_kernel(double *out, const double *partial, int blocks) {
    if (threadIdx.x != 0) return;
    double s = 0.0;
    for (int k = 0; k < blocks; k++) s += partial[k];
    out[0] = s;
}

/* Synchronises (the result is copied to the host). */
float bk_cuda_global_norm(const float *g, size_t n) {
    if (n == 0) return 0.0f;
    double *partial = (double *)bk_cuda_workspace((NORM_BLOCKS + 1) * sizeof(double));
    sumsq_partial_kernel<<<NORM_BLOCKS, BK_THREADS>>>(partial, g, n);
    CUDA_CHECK_LAUNCH();
    sumsq_finish_kernel<<<1, 32>>>(partial + NORM_BLOCKS, partial, NORM_BLOCKS);
    CUDA_CHECK_LAUNCH();
    double s = 0.0;
    bk_cuda_count_d2h(sizeof(float)); /* counted as the CPU backend counts it */
    CUDA_CHECK(cudaMemcpy(&s, partial + NORM_BLOCKS, sizeof s, cudaMemcpyDeviceToHost));
    return (float)sqrt(s);
}

/* m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2 (g already scaled);
 * p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p) */
__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, float lr,
                             float b1, float b2, float eps, float wd, float bc1, float bc2,
                             float grad_scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i] * grad_scale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mh = mi / bc1, vh = vi / bc2;
        p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
    }
}

void bk_cuda_adamw_update(float *p, const float *g, float *m, float *v, size_t n, const bk_adamw *h,
                          int t, float grad_scale) {
    if (n == 0) return;
    float bc1 = 1.0f - powf(h->beta1, (float)t);
    float bc2 = 1.0f - powf(h->beta2, (float)t);
    adamw_kernel<<<bk_blocks(n, BK_THREADS), BK_THREADS>>>(
        p, g, m, v, n, h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, bc1, bc2, grad_scale);
    CUDA_CHECK_LAUNCH();
}

__global__ void rng_uniform_kernel(float *out, size_t n, uint64_t seed, uint64_t stream,
                                   uint64_t offset) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bk_rng_uniform_at(seed, stream, offset + i);
}

__global__ void rng_normal_kernel(float *out, size_t n, uint64_t seed, uint64_t stream,
                                  uint64_t offset) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bk_rng_normal_at(seed, stream, offset + i);
}

void bk_cuda_rng_uniform(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t offset) {
    if (n == 0) return;
    rng_uniform_kernel<<<bk_blocks(n, BK_THREADS), BK_THREADS>>>(out, n, seed, stream, offset);
    CUDA_CHECK_LAUNCH();
}

void bk_cuda_rng_normal(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t offset) {
    if (n == 0) return;
    rng_normal_kernel<<<bk_blocks(n, BK_THREADS), BK_THREADS>>>(out, n, seed, stream, offset);
    CUDA_CHECK_LAUNCH();
}
