/* CPU reference: matrix products through OpenBLAS (cblas_sgemm, row-major).
 * Contracts in kernels/bk.h. OpenBLAS threads each call itself, so these
 * functions call it from the serial region only. */
#include <cblas.h>
#include <string.h>

#include "kernels/cpu_ops.h"

/* out[N,OC] = inp[N,IC] @ w[OC,IC]^T + bias[OC] (bias nullable). The bias is
 * written first and the product added to it (beta = 1), saving a pass. */
void bk_cpu_linear_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                           int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (bias) {
#pragma omp parallel for schedule(static) if ((long long)N * OC >= (1 << 16))
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    } else if (IC <= 0) {
        memset(out, 0, (size_t)N * OC * sizeof(float));
    }
    if (IC <= 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC,
                bias ? 1.0f : 0.0f, out, OC);
}

/* Output columns per task in the bias gradient: whole cache lines per task. */
#define DBIAS_CHUNK 64

/* dinp[N,IC] += dout[N,OC] @ w[OC,IC]; dw[OC,IC] += dout^T @ inp;
 * dbias[OC] += sum_n dout[n,:]. All three nullable. */
void bk_cpu_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (dinp && IC > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, w, IC,
                    1.0f, dinp, IC);
    if (dw && IC > 0)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC,
                    1.0f, dw, IC);
    if (dbias) {
        /* Split over output columns, rows summed in order: deterministic. */
        int nchunks = (OC + DBIAS_CHUNK - 1) / DBIAS_CHUNK;
#pragma omp parallel for schedule(static) if ((long long)N * OC >= (1 << 16) && nchunks > 1)
        for (int k = 0; k < nchunks; k++) {
            int o0 = k * DBIAS_CHUNK, o1 = o0 + DBIAS_CHUNK < OC ? o0 + DBIAS_CHUNK : OC;
            for (int n = 0; n < N; n++) {
                const float *d = dout + (size_t)n * OC;
#pragma omp simd
                for (int o = o0; o < o1; o++) dbias[o] += d[o];
            }
        }
    }
}

/* C_i = alpha op(A_i) op(B_i) + beta C_i for each batch item, one sgemm each.
 * Batch items are not run in parallel: the OpenBLAS here is the pthreads
 * build, which threads inside each call and must not be called from many
 * OpenMP threads at once. */
void bk_cpu_gemm(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                 long long strideA, const float *Bm, int ldb, long long strideB, float beta,
                 float *Cm, int ldc, long long strideC, int batch) {
    if (M <= 0 || N <= 0 || batch <= 0) return;
    enum CBLAS_TRANSPOSE ta = transa ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = transb ? CblasTrans : CblasNoTrans;
    for (int i = 0; i < batch; i++)
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A + (long long)i * strideA, lda,
                    Bm + (long long)i * strideB, ldb, beta, Cm + (long long)i * strideC, ldc);
}
