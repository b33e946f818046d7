/* LayerNorm and row softmax: one warp per row (rows are at most a few
 * thousand wide here), two-pass mean/variance like the CPU backend. */
#include <math.h>

#include "kernels/cuda/cuda_check.h"

#define ROWS_PER_BLOCK 8 /* warps per block */

static inline unsigned row_blocks(int N) {
    return (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
}

__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                         const float *w, const float *b, int N, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int i = lane; i < C; i += 32) s += x[i];
    float m = bk_warp_sum(s) / C;
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = x[i] - m;
        v += d * d;
    }
    v = bk_warp_sum(v) / C;
    float r = 1.0f / sqrtf(v + 1e-5f);
    float *o = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        float n = (x[i] - m) * r;
        o[i] = n * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = r;
    }
}

void bk_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C) {
    if (N <= 0 || C <= 0) return;
    layernorm_forward_kernel<<<row_blocks(N), ROWS_PER_BLOCK * 32>>>(out, mean, rstd, inp, w, b, N,
                                                                     C);
    CUDA_CHECK_LAUNCH();
}

/* dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * w */
__global__ void layernorm_backward_kernel(float *dinp, const float *dout, const float *inp,
                                          const float *w, const float *mean, const float *rstd,
                                          int N, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *g = dout + (size_t)row * C;
    float m = mean[row], r = rstd[row];
    float s1 = 0.0f, s2 = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float dn = g[i] * (w ? w[i] : 1.0f);
        s1 += dn;
        s2 += dn * (x[i] - m) * r;
    }
    s1 = bk_warp_sum(s1) / C;
    s2 = bk_warp_sum(s2) / C;
    float *dx = dinp + (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        float dn = g[i] * (w ? w[i] : 1.0f);
        float xh = (x[i] - m) * r;
        dx[i] += r * (dn - s1 - xh * s2);
    }
}

struct ln_dw_term { /* dout[n,c] * xhat[n,c] */
    const float *dout, *inp, *mean, *rstd;
    int C;
    __device__ float operator()(int n, int c) const {
        size_t i = (size_t)n * C + c;
        return dout[i] * (inp[i] - mean[n]) * rstd[n];
    }
};

void bk_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    if (dinp) {
        layernorm_backward_kernel<<<row_blocks(N), ROWS_PER_BLOCK * 32>>>(dinp, dout, inp, w, mean,
                                                                          rstd, N, C);
        CUDA_CHECK_LAUNCH();
    }
    if (dw) {
        ln_dw_term f = {dout, inp, mean, rstd, C};
        bk_colsum_accumulate(dw, f, N, C);
    }
    if (db) {
        bk_col_plain f = {dout, C};
        bk_colsum_accumulate(db, f, N, C);
    }
}

__global__ void softmax_forward_kernel(float *out, const float *inp, int N, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float *o = out + (size_t)row * C;
    float mx = -INFINITY;
    for (int i = lane; i < C; i += 32) mx = fmaxf(mx, x[i]);
    mx = bk_warp_max(mx);
    float s = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float e = expf(x[i] - mx);
        o[i] = e;
        s += e;
    }
    s = bk_warp_sum(s);
    float inv = 1.0f / s;
    for (int i = lane; i < C; i += 32) o[i] *= inv;
}

/* dinp += out * (dout - sum(out * dout)) */
__global__ void softmax_backward_kernel(float *dinp, const float *out, const float *dout, int N,
                                        int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *y = out + (size_t)row * C, *g = dout + (size_t)row * C;
    float s = 0.0f;
    for (int i = lane; i < C; i += 32) s += y[i] * g[i];
    s = bk_warp_sum(s);
    float *dx = dinp + (size_t)row * C;
    for (int i = lane; i < C; i += 32) dx[i] += y[i] * (g[i] - s);
}

void bk_cuda_softmax_forward(float *out, const float *inp, int N, int C) {
    if (N <= 0 || C <= 0) return;
    softmax_forward_kernel<<<row_blocks(N), ROWS_PER_BLOCK * 32>>>(out, inp, N, C);
    CUDA_CHECK_LAUNCH();
}

void bk_cuda_softmax_backward(float *dinp, const float *out, const float *dout, int N, int C) {
    if (N <= 0 || C <= 0) return;
    softmax_backward_kernel<<<row_blocks(N), ROWS_PER_BLOCK * 32>>>(dinp, out, dout, N, C);
    CUDA_CHECK_LAUNCH();
}
