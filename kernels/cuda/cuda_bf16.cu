/* cuda_bf16 — the CUDA backend's bf16 products (gemm_bf16, bf16_available;
 * contracts in kernels/bk_ops.def): both operands cast to bf16 (nearest
 * even, __float2bfloat16_rn) into the shared workspace, then one cuBLASLt
 * matmul with bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F) and an
 * fp32 C, the masters never touched. Row-major as bk_rm_gemm: cuBLASLt is
 * column-major, so C^T = op(B)^T op(A)^T with the operands swapped. */
#include <cublasLt.h>
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_check.h"

/* cuBLASLt's own workspace, beside the bf16 operands: what NVIDIA's
 * samples give Hopper's kernels (32 MiB). */
#define LT_WORKSPACE ((size_t)32 << 20)

static cublasLtHandle_t lt_handle;
static int lt_ready;

/* The cuBLASLt handle, made on first use (ops run on one host thread). */
static cublasLtHandle_t lt(void) {
    if (!lt_ready) {
        CUBLAS_CHECK(cublasLtCreate(&lt_handle));
        lt_ready = 1;
    }
    return lt_handle;
}

/* dst[r, c] = bf16(src[r * ld + c]) for rows x cols, dst dense */
__global__ void cast_rows_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t rows, int cols,
                                      long long ld) {
    size_t total = rows * (size_t)cols;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / cols, c = i % cols;
        dst[i] = __float2bfloat16_rn(src[(long long)r * ld + (long long)c]);
    }
}

/* Casts `batch` items of rows x cols (row stride ld, items stride apart)
 * into dense bf16. */
static void cast_items(__nv_bfloat16 *dst, const float *src, int rows, int cols, long long ld,
                       long long stride, int batch) {
    size_t n = (size_t)rows * cols;
    for (int i = 0; i < batch; i++) {
        cast_rows_bf16_kernel<<<bk_blocks(n, BK_THREADS), BK_THREADS>>>(
            dst + (size_t)i * n, src + (long long)i * stride, (size_t)rows, cols, ld);
        CUDA_CHECK_LAUNCH();
    }
}

/* A column-major layout of `rows` x `cols` (ld) of type t, batched. */
static cublasLtMatrixLayout_t layout(cudaDataType_t t, int rows, int cols, long long ld, int batch,
                                     long long stride) {
    cublasLtMatrixLayout_t l;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, (int64_t)ld));
    if (batch > 1) {
        int32_t b = batch;
        int64_t s = stride;
        CUBLAS_CHECK(
            cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
            l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s));
    }
    return l;
}

void bk_cuda_gemm_bf16(int transa, int transb, int M, int N, int K, float alpha, const float *A,
                       int lda, long long strideA, const float *Bm, int ldb, long long strideB,
                       float beta, float *Cm, int ldc, long long strideC, int batch) {
    if (M <= 0 || N <= 0 || batch <= 0) return;
    if (K <= 0) { /* no products: C = beta C, as gemm */
        bk_rm_gemm(transa, transb, M, N, K, alpha, A, lda, strideA, Bm, ldb, strideB, beta, Cm, ldc,
                   strideC, batch);
        return;
    }
    /* the operands as stored, row-major: A item [ra, ca], B item [rb, cb] */
    const int ra = transa ? K : M, ca = transa ? M : K, rb = transb ? N : K, cb = transb ? K : N;
    const size_t na = (size_t)ra * ca, nb = (size_t)rb * cb;
    size_t ops = ((size_t)batch * (na + nb) * sizeof(__nv_bfloat16) + 255) & ~(size_t)255;
    char *ws = (char *)bk_cuda_workspace(ops + LT_WORKSPACE);
    __nv_bfloat16 *a = (__nv_bfloat16 *)ws, *b = a + (size_t)batch * na;
    cast_items(a, A, ra, ca, lda, strideA, batch);
    cast_items(b, Bm, rb, cb, ldb, strideB, batch);

    /* column-major: row-major X [r, c] is X^T [c, r] with ld c */
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = transb ? CUBLAS_OP_T : CUBLAS_OP_N; /* Lt's A is our B */
    cublasOperation_t opb = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    cublasLtMatrixLayout_t la = layout(CUDA_R_16BF, cb, rb, cb, batch, (long long)nb);
    cublasLtMatrixLayout_t lb = layout(CUDA_R_16BF, ca, ra, ca, batch, (long long)na);
    cublasLtMatrixLayout_t lc = layout(CUDA_R_32F, N, M, ldc, batch, strideC);
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t wsb = LT_WORKSPACE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    CUBLAS_CHECK(
        cublasLtMatmulAlgoGetHeuristic(lt(), desc, la, lb, lc, lc, pref, 1, &heur, &found));
    BK_CUDA_REQUIRE(found > 0, "cuBLASLt has no bf16 algorithm for this product");
    CUBLAS_CHECK(cublasLtMatmul(lt(), desc, &alpha, b, la, a, lb, &beta, Cm, lc, Cm, lc, &heur.algo,
                                ws + ops, LT_WORKSPACE, 0));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lc));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
}

int bk_cuda_bf16_available(char *why, size_t whylen) {
    int dev = 0, major = 0, minor = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major >= 8) return 1;
    if (why && whylen)
        snprintf(why, whylen,
                 "GPU %d has compute capability %d.%d; cuBLASLt's bf16 products need 8.0 "
                 "(Ampere) or later",
                 dev, major, minor);
    return 0;
}
