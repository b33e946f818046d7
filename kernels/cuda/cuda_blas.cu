/* cuda_blas — the one cuBLAS handle every CUDA op shares, and its math
 * mode. It owns no op and no backend table (cuda_backend.cu). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_check.h"

static cublasHandle_t blas_handle;
static int blas_ready;

cublasHandle_t bk_cuda_blas(void) {
    if (!blas_ready) { /* ops are only reachable through bk_cuda(), which creates it */
        CUBLAS_CHECK(cublasCreate(&blas_handle));
        blas_ready = 1;
    }
    return blas_handle;
}

int bk_cuda_blas_init(char *reason, size_t reason_len) {
    if (blas_ready) return 0;
    cublasStatus_t s = cublasCreate(&blas_handle);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(reason, reason_len, "cublasCreate failed: %s (%s)", cublasGetStatusString(s),
                 cublasGetStatusName(s));
        return -1;
    }
    /* Exact fp32 by default so results match the CPU backend;
     * BF_CUDA_TF32=1 opts in to TF32 tensor cores for GEMMs. */
    const char *tf32 = getenv("BF_CUDA_TF32");
    cublasMath_t mode =
        (tf32 && strcmp(tf32, "1") == 0) ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    s = cublasSetMathMode(blas_handle, mode);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(reason, reason_len, "cublasSetMathMode failed: %s", cublasGetStatusString(s));
        cublasDestroy(blas_handle);
        return -1;
    }
    blas_ready = 1;
    return 0;
}
