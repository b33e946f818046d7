/* Matrix products through cuBLAS (row-major wrappers in cuda_check.h):
 * gemm, linear forward/backward, and the output projection restricted to
 * selected heads. */
#include "kernels/cuda/cuda_check.h"

void bk_cuda_gemm(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                  long long strideA, const float *Bm, int ldb, long long strideB, float beta,
                  float *Cm, int ldc, long long strideC, int batch) {
    bk_rm_gemm(transa, transb, M, N, K, alpha, A, lda, strideA, Bm, ldb, strideB, beta, Cm, ldc,
               strideC, batch);
}

/* out[n, o] = bias[o] for every row (bias NULL: 0) */
__global__ void rows_fill_bias_kernel(float *out, const float *bias, size_t rows, int OC) {
    size_t total = rows * OC;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias ? bias[i % OC] : 0.0f;
}

/* out[N,OC] = inp[N,IC] @ w[OC,IC]^T + bias: the bias is written first and
 * the product accumulated onto it (beta = 1). */
void bk_cuda_linear_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                            int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (bias) {
        size_t total = (size_t)N * OC;
        rows_fill_bias_kernel<<<bk_blocks(total, BK_THREADS), BK_THREADS>>>(out, bias, (size_t)N,
                                                                            OC);
        CUDA_CHECK_LAUNCH();
    }
    bk_rm_gemm(0, 1, N, OC, IC, 1.0f, inp, IC, 0, w, IC, 0, bias ? 1.0f : 0.0f, out, OC, 0, 1);
}

void bk_cuda_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                             const float *inp, const float *w, int N, int IC, int OC) {
    if (N <= 0) return;
    if (dinp) bk_rm_gemm(0, 0, N, IC, OC, 1.0f, dout, OC, 0, w, IC, 0, 1.0f, dinp, IC, 0, 1);
    if (dw) bk_rm_gemm(1, 0, OC, IC, N, 1.0f, dout, OC, 0, inp, IC, 0, 1.0f, dw, IC, 0, 1);
    if (dbias) {
        bk_col_plain f = {dout, OC};
        bk_colsum_accumulate(dbias, f, N, OC);
    }
}

/* Pointer arrays for linear_selected_forward, item (k, b) at k*B + b:
 * A = c[b, :, h*HS], B = wo[:, h*HS], C = y[b]. */
__global__ void selected_proj_ptrs_kernel(const float **A, const float **Bp, float **Cp,
                                          const float *c, const float *wo, float *y,
                                          const int *heads, int K, int B, int T, int C, int HS,
                                          int OC) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= K * B) return;
    int k = i / B, b = i % B;
    int h = heads[b * K + k];
    A[i] = c + (size_t)b * T * C + (size_t)h * HS;
    Bp[i] = wo + (size_t)h * HS;
    Cp[i] = y + (size_t)b * T * OC;
}

/* y[b] = bo + sum_k c[b][:, h_k cols] @ wo[:, h_k cols]^T. One batched GEMM
 * per slot k (batched over samples, so no two items write the same y). The
 * pointer arrays live in the backend workspace. */
void bk_cuda_linear_selected_forward(float *y, const float *c, const float *wo, const float *bo,
                                     const int *heads, int K, int B, int T, int C, int NH, int OC) {
    if (B <= 0 || T <= 0 || OC <= 0) return;
    size_t total = (size_t)B * T * OC;
    rows_fill_bias_kernel<<<bk_blocks(total, BK_THREADS), BK_THREADS>>>(y, bo, (size_t)B * T, OC);
    CUDA_CHECK_LAUNCH();
    if (K <= 0) return;
    int HS = C / NH;
    size_t items = (size_t)K * B;
    void **ws = (void **)bk_cuda_workspace(3 * items * sizeof(void *));
    const float **A = (const float **)ws;
    const float **Bp = (const float **)(ws + items);
    float **Cp = (float **)(ws + 2 * items);
    selected_proj_ptrs_kernel<<<bk_blocks(items, BK_THREADS), BK_THREADS>>>(
        A, Bp, Cp, c, wo, y, heads, K, B, T, C, HS, OC);
    CUDA_CHECK_LAUNCH();
    for (int k = 0; k < K; k++)
        bk_rm_gemm_ptrs(0, 1, T, OC, HS, 1.0f, A + (size_t)k * B, C, Bp + (size_t)k * B, C, 1.0f,
                        Cp + (size_t)k * B, OC, B);
}
