/* Cross-entropy (one block per row) and masked MSE (two-stage reduction in
 * double, fixed order: deterministic). */
#include <math.h>

#include "kernels/cuda/cuda_check.h"

#define CE_THREADS 256

__global__ void crossentropy_forward_kernel(float *losses, float *probs, const float *logits,
                                            const int *targets, int V) {
    __shared__ float sh[32];
    size_t n = blockIdx.x;
    const float *x = logits + n * V;
    float *p = probs + n * V;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, x[i]);
    mx = bk_block_max(mx, sh);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(x[i] - mx);
    s = bk_block_sum(s, sh);
    float inv = 1.0f / s;
    for (int i = threadIdx.x; i < V; i += blockDim.x) p[i] = expf(x[i] - mx) * inv;
    if (threadIdx.x == 0) {
        int t = targets[n];
        /* -log softmax = log(sum) - (x_t - max): exact even when p_t underflows */
        losses[n] = t < 0 || t >= V ? 0.0f : logf(s) - (x[t] - mx);
    }
}

void bk_cuda_crossentropy_forward(float *losses, float *probs, const float *logits,
                                  const int *targets, int N, int V) {
    if (N <= 0 || V <= 0) return;
    crossentropy_forward_kernel<<<(unsigned)N, CE_THREADS>>>(losses, probs, logits, targets, V);
    CUDA_CHECK_LAUNCH();
}

__global__ void crossentropy_backward_kernel(float *dlogits, const float *probs, const int *targets,
                                             const float *dlosses, int N, int V) {
    size_t total = (size_t)N * V;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / V;
        int v = (int)(i % V), t = targets[n];
        if (t < 0 || t >= V) continue;
        dlogits[i] += (probs[i] - (v == t ? 1.0f : 0.0f)) * dlosses[n];
    }
}

void bk_cuda_crossentropy_backward(float *dlogits, const float *probs, const int *targets,
                                   const float *dlosses, int N, int V) {
    size_t total = (size_t)N * V;
    if (!total) return;
    crossentropy_backward_kernel<<<bk_blocks(total, BK_THREADS), BK_THREADS>>>(
        dlogits, probs, targets, dlosses, N, V);
    CUDA_CHECK_LAUNCH();
}

/* ---- MSE ---- */
#define MSE_BLOCKS 256

/* partial[2*blk] = sum mask*(a-b)^2, partial[2*blk+1] = sum mask (over rows of this block's stride)
 */
__global__ void mse_partial_kernel(double *partial, const float *a, const float *b,
                                   const float *mask, int N, int C) {
    __shared__ double sh[32];
    double num = 0.0, den = 0.0;
    size_t total = (size_t)N * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float m = mask ? mask[i / C] : 1.0f;
        float d = a ? a[i] - b[i] : 0.0f;
        num += (double)m * d * d;
    }
    for (size_t n = (size_t)blockIdx.x * blockDim.x + threadIdx.x; n < (size_t)N;
         n += (size_t)gridDim.x * blockDim.x)
        den += mask ? mask[n] : 1.0f;
    num = bk_block_sum_d(num, sh);
    den = bk_block_sum_d(den, sh);
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = num;
        partial[2 * blockIdx.x + 1] = den;
    }
}

/* One block: out[0] = num / max(1, C*den) (loss) or, with want_scale,
 * out[0] = 2 / max(1, C*den) (the backward's factor before dloss). */
__global__ void mse_finish_kernel(float *out, const double *partial, int blocks, int C,
                                  int want_scale) {
    if (threadIdx.x != 0) return;
    double num = 0.0, den = 0.0;
    for (int k = 0; k < blocks; k++) {
        num += partial[2 * k];
        den += partial[2 * k + 1];
    }
    double denom = fmax(1.0, (double)C * den);
    out[0] = want_scale ? (float)(2.0 / denom) : (float)(num / denom);
}

static void mse_reduce(float *out, const float *a, const float *b, const float *mask, int N, int C,
                       int want_scale) {
    double *partial = (double *)bk_cuda_workspace((size_t)2 * MSE_BLOCKS * sizeof(double) + 64);
    mse_partial_kernel<<<MSE_BLOCKS, BK_THREADS>>>(partial, want_scale ? NULL : a, b, mask, N, C);
    CUDA_CHECK_LAUNCH();
    mse_finish_kernel<<<1, 32>>>(out, partial, MSE_BLOCKS, C, want_scale);
    CUDA_CHECK_LAUNCH();
}

void bk_cuda_mse_forward(float *loss, const float *a, const float *b, const float *mask, int N,
                         int C) {
    if (N <= 0 || C <= 0) {
        CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(float), 0));
        return;
    }
    mse_reduce(loss, a, b, mask, N, C, 0);
}

/* da += dloss * 2 m (a-b) / max(1, C sum m); db gets the negative */
__global__ void mse_backward_kernel(float *da, float *db, const float *a, const float *b,
                                    const float *mask, const float *scale, float dloss, int N,
                                    int C) {
    size_t total = (size_t)N * C;
    float k = scale[0] * dloss;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float m = mask ? mask[i / C] : 1.0f;
        float g = k * m * (a[i] - b[i]);
        if (da) da[i] += g;
        if (db) db[i] -= g;
    }
}

void bk_cuda_mse_backward(float *da, float *db, const float *a, const float *b, const float *mask,
                          float dloss, int N, int C) {
    if ((!da && !db) || N <= 0 || C <= 0) return;
    /* the scale float sits after the partials in the workspace */
    double *ws = (double *)bk_cuda_workspace((size_t)2 * MSE_BLOCKS * sizeof(double) + 64);
    float *scale = (float *)(ws + 2 * MSE_BLOCKS);
    mse_reduce(scale, a, b, mask, N, C, 1);
    size_t total = (size_t)N * C;
    mse_backward_kernel<<<bk_blocks(total, BK_THREADS), BK_THREADS>>>(da, db, a, b, mask, scale,
                                                                      dloss, N, C);
    CUDA_CHECK_LAUNCH();
}

/* ---- label smoothing (one block per row; the same formulas as cpu_loss.c) ---- */
__global__ void label_smooth_forward_kernel(float *losses, const float *logits, const int *targets,
                                            int V, float eps) {
    __shared__ float sh[32];
    size_t n = blockIdx.x;
    int t = targets[n];
    if (t < 0 || t >= V) return;
    const float *x = logits + n * V;
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += x[i];
    s = bk_block_sum(s, sh);
    if (threadIdx.x == 0) {
        double lse = (double)losses[n] + x[t];
        losses[n] = (float)((1.0 - eps) * losses[n] + eps * (lse - (double)s / V));
    }
}

extern "C" void bk_cuda_label_smooth_forward(float *losses, const float *logits, const int *targets,
                                             int N, int V, float eps) {
    if (N <= 0 || V <= 0) return;
    label_smooth_forward_kernel<<<(unsigned)N, CE_THREADS>>>(losses, logits, targets, V, eps);
    CUDA_CHECK_LAUNCH();
}

__global__ void label_smooth_backward_kernel(float *dlogits, const int *targets,
                                             const float *dlosses, int N, int V, float eps) {
    size_t total = (size_t)N * V;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / V;
        int v = (int)(i % V), t = targets[n];
        if (t < 0 || t >= V) continue;
        dlogits[i] += eps * dlosses[n] * ((v == t ? 1.0f : 0.0f) - 1.0f / V);
    }
}

extern "C" void bk_cuda_label_smooth_backward(float *dlogits, const int *targets,
                                              const float *dlosses, int N, int V, float eps) {
    size_t total = (size_t)N * V;
    if (!total) return;
    label_smooth_backward_kernel<<<bk_blocks(total, BK_THREADS), BK_THREADS>>>(dlogits, targets,
                                                                               dlosses, N, V, eps);
    CUDA_CHECK_LAUNCH();
}
