/* Elementwise ops, embeddings, positional add and masked mean pooling.
 * Formulas follow the CPU backend (kernels/cpu_*.c) term by term; only
 * libm-vs-CUDA rounding of expf/tanhf/log1pf differs (a few ulp). */
#include <math.h>

#include "kernels/cuda/cuda_check.h"

#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)
#define LAUNCH1D(kernel, n, ...)                                                                   \
    do {                                                                                           \
        if ((n) > 0) {                                                                             \
            kernel<<<bk_blocks((n), BK_THREADS), BK_THREADS>>>(__VA_ARGS__);                       \
            CUDA_CHECK_LAUNCH();                                                                   \
        }                                                                                          \
    } while (0)

__global__ void add_kernel(float *out, const float *a, const float *b, size_t n) {
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
__global__ void axpy_kernel(float *y, const float *x, float alpha, size_t n) {
    GRID_STRIDE(i, n) y[i] += alpha * x[i];
}
__global__ void scale_kernel(float *x, float alpha, size_t n) { GRID_STRIDE(i, n) x[i] *= alpha; }

void bk_cuda_add(float *out, const float *a, const float *b, size_t n) {
    LAUNCH1D(add_kernel, n, out, a, b, n);
}
void bk_cuda_axpy(float *y, const float *x, float alpha, size_t n) {
    LAUNCH1D(axpy_kernel, n, y, x, alpha, n);
}
void bk_cuda_scale(float *x, float alpha, size_t n) { LAUNCH1D(scale_kernel, n, x, alpha, n); }

/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
#define GELU_K 0.7978845608028654f
__global__ void gelu_forward_kernel(float *out, const float *inp, size_t n) {
    GRID_STRIDE(i, n) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    }
}
__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
    GRID_STRIDE(i, n) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float grad =
            0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += grad * dout[i];
    }
}
void bk_cuda_gelu_forward(float *out, const float *inp, size_t n) {
    LAUNCH1D(gelu_forward_kernel, n, out, inp, n);
}
void bk_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    LAUNCH1D(gelu_backward_kernel, n, dinp, inp, dout, n);
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void silu_forward_kernel(float *out, const float *inp, size_t n) {
    GRID_STRIDE(i, n) {
        float x = inp[i];
        out[i] = x * sigmoidf_(x);
    }
}
__global__ void silu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
    GRID_STRIDE(i, n) {
        float x = inp[i], s = sigmoidf_(x);
        dinp[i] += dout[i] * s * (1.0f + x * (1.0f - s));
    }
}
void bk_cuda_silu_forward(float *out, const float *inp, size_t n) {
    LAUNCH1D(silu_forward_kernel, n, out, inp, n);
}
void bk_cuda_silu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    LAUNCH1D(silu_backward_kernel, n, dinp, inp, dout, n);
}

__global__ void sigmoid_forward_kernel(float *out, const float *inp, size_t n) {
    GRID_STRIDE(i, n) out[i] = sigmoidf_(inp[i]);
}
__global__ void sigmoid_backward_kernel(float *dinp, const float *out, const float *dout,
                                        size_t n) {
    GRID_STRIDE(i, n) {
        float s = out[i];
        dinp[i] += dout[i] * s * (1.0f - s);
    }
}
void bk_cuda_sigmoid_forward(float *out, const float *inp, size_t n) {
    LAUNCH1D(sigmoid_forward_kernel, n, out, inp, n);
}
void bk_cuda_sigmoid_backward(float *dinp, const float *out, const float *dout, size_t n) {
    LAUNCH1D(sigmoid_backward_kernel, n, dinp, out, dout, n);
}

/* softplus = max(x, 0) + log1p(exp(-|x|)): no overflow for large |x| */
__global__ void softplus_forward_kernel(float *out, const float *inp, size_t n) {
    GRID_STRIDE(i, n) {
        float x = inp[i];
        out[i] = fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
    }
}
__global__ void softplus_backward_kernel(float *dinp, const float *inp, const float *dout,
                                         size_t n) {
    GRID_STRIDE(i, n) dinp[i] += dout[i] * sigmoidf_(inp[i]);
}
void bk_cuda_softplus_forward(float *out, const float *inp, size_t n) {
    LAUNCH1D(softplus_forward_kernel, n, out, inp, n);
}
void bk_cuda_softplus_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    LAUNCH1D(softplus_backward_kernel, n, dinp, inp, dout, n);
}

/* ---- embeddings ---- */
__global__ void embedding_forward_kernel(float *out, const int *idx, const float *table, int N,
                                         int C) {
    size_t total = (size_t)N * C;
    GRID_STRIDE(i, total) {
        size_t n = i / C, c = i % C;
        out[i] = table[(size_t)idx[n] * C + c];
    }
}
/* atomicAdd: rows that share a token id are summed in a nondeterministic
 * order, so dtable can differ in the last bits from run to run (only where
 * a token repeats within the batch). */
__global__ void embedding_backward_kernel(float *dtable, const float *dout, const int *idx, int N,
                                          int C) {
    size_t total = (size_t)N * C;
    GRID_STRIDE(i, total) {
        size_t n = i / C, c = i % C;
        atomicAdd(&dtable[(size_t)idx[n] * C + c], dout[i]);
    }
}
void bk_cuda_embedding_forward(float *out, const int *idx, const float *table, int N, int C) {
    LAUNCH1D(embedding_forward_kernel, (size_t)N * C, out, idx, table, N, C);
}
void bk_cuda_embedding_backward(float *dtable, const float *dout, const int *idx, int N, int C) {
    LAUNCH1D(embedding_backward_kernel, (size_t)N * C, dtable, dout, idx, N, C);
}

__global__ void posadd_forward_kernel(float *out, const float *inp, const float *pos, int B, int T,
                                      int C) {
    size_t total = (size_t)B * T * C, tc = (size_t)T * C;
    GRID_STRIDE(i, total) out[i] = inp[i] + pos[i % tc];
}
/* one thread per (t, c): sums over b in order (deterministic) */
__global__ void posadd_backward_kernel(float *dinp, float *dpos, const float *dout, int B, int T,
                                       int C) {
    size_t tc = (size_t)T * C;
    GRID_STRIDE(i, tc) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) {
            float g = dout[(size_t)b * tc + i];
            if (dinp) dinp[(size_t)b * tc + i] += g;
            s += g;
        }
        if (dpos) dpos[i] += s;
    }
}
void bk_cuda_posadd_forward(float *out, const float *inp, const float *pos, int B, int T, int C) {
    LAUNCH1D(posadd_forward_kernel, (size_t)B * T * C, out, inp, pos, B, T, C);
}
void bk_cuda_posadd_backward(float *dinp, float *dpos, const float *dout, int B, int T, int C) {
    if (!dinp && !dpos) return;
    LAUNCH1D(posadd_backward_kernel, (size_t)T * C, dinp, dpos, dout, B, T, C);
}

/* ---- masked mean pooling ----
 * The weight of a token is its mask value (1 or 0); a sample whose mask sums
 * to 0 pools to 0 and gets no gradient. */
__global__ void meanpool_forward_kernel(float *out, const float *inp, const float *mask, int B,
                                        int T, int C) {
    size_t total = (size_t)B * C;
    GRID_STRIDE(i, total) {
        size_t b = i / C, c = i % C;
        float s = 0.0f, cnt = 0.0f;
        for (int t = 0; t < T; t++) {
            float m = mask ? mask[b * T + t] : 1.0f;
            if (m != 0.0f) {
                s += m * inp[(b * T + t) * C + c];
                cnt += m;
            }
        }
        out[i] = cnt > 0.0f ? s / cnt : 0.0f;
    }
}
__global__ void meanpool_count_kernel(float *cnt, const float *mask, int B, int T) {
    GRID_STRIDE(b, (size_t)B) {
        float s = 0.0f;
        for (int t = 0; t < T; t++) s += mask ? mask[b * T + t] : 1.0f;
        cnt[b] = s;
    }
}
__global__ void meanpool_backward_kernel(float *dinp, const float *dout, const float *mask,
                                         const float *cnt, int B, int T, int C) {
    size_t total = (size_t)B * T * C;
    GRID_STRIDE(i, total) {
        size_t c = i % C, bt = i / C, b = bt / T;
        float m = mask ? mask[bt] : 1.0f;
        if (m != 0.0f && cnt[b] > 0.0f) dinp[i] += dout[b * C + c] * m / cnt[b];
    }
}
void bk_cuda_meanpool_forward(float *out, const float *inp, const float *mask, int B, int T,
                              int C) {
    LAUNCH1D(meanpool_forward_kernel, (size_t)B * C, out, inp, mask, B, T, C);
}
void bk_cuda_meanpool_backward(float *dinp, const float *dout, const float *mask, int B, int T,
                               int C) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    float *cnt = (float *)bk_cuda_workspace((size_t)B * sizeof(float));
    LAUNCH1D(meanpool_count_kernel, (size_t)B, cnt, mask, B, T);
    LAUNCH1D(meanpool_backward_kernel, (size_t)B * T * C, dinp, dout, mask, cnt, B, T, C);
}
