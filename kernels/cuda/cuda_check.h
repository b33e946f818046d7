/* Internal header of the CUDA backend (kernels/cuda/*.cu only): error-check
 * macros, launch helpers, the shared cuBLAS handle and workspace, row-major
 * GEMM wrappers and a deterministic column-sum.
 *
 * Error policy. Most bk ops return void, so a failed CUDA or cuBLAS call
 * inside an op cannot be reported to the caller: CUDA_CHECK / CUBLAS_CHECK
 * print "file:line: call failed: <library's message>" to stderr and abort()
 * (llm.c's cudaCheck). A failed kernel usually leaves the context unusable
 * anyway. The exceptions that return a status are bk_cuda() (NULL + reason)
 * and alloc (NULL).
 *
 * Streams. Every kernel, copy and cuBLAS call goes to the legacy default
 * stream, so ops are ordered and the shared workspace can be reused by the
 * next op without extra synchronisation. One host thread drives the backend
 * at a time (the workspace and handle are not locked). */
#ifndef BK_CUDA_CHECK_H
#define BK_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_ops.h"

static inline void bk_cuda_check_(cudaError_t e, const char *call, const char *file, int line) {
    if (e != cudaSuccess) {
        fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", file, line, call, cudaGetErrorString(e),
                cudaGetErrorName(e));
        abort();
    }
}

static inline void bk_cublas_check_(cublasStatus_t s, const char *call, const char *file,
                                    int line) {
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", file, line, call, cublasGetStatusString(s),
                cublasGetStatusName(s));
        abort();
    }
}

#define CUDA_CHECK(call) bk_cuda_check_((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) bk_cublas_check_((call), #call, __FILE__, __LINE__)
/* After every kernel launch: catches bad launch configurations at once. */
#define CUDA_CHECK_LAUNCH() bk_cuda_check_(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

/* Aborts with a message when an op is called outside its documented limits. */
#define BK_CUDA_REQUIRE(cond, msg)                                                                 \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, __func__, msg);                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define BK_THREADS 256

static inline unsigned bk_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 1048576) b = 1048576; /* kernels use grid-stride loops beyond this */
    return (unsigned)b;
}

/* The cuBLAS handle shared by all ops (cuda_blas.cu), created by bk_cuda()
 * through bk_cuda_blas_init. Math mode is exact fp32 unless BF_CUDA_TF32=1 is
 * set in the environment. */
cublasHandle_t bk_cuda_blas(void);

/* Creates the handle and sets its math mode; 0, or -1 with the reason
 * (nothing left created). A second call after success does nothing. */
int bk_cuda_blas_init(char *reason, size_t reason_len);

/* A device buffer of at least `bytes`, owned by the backend and reused by
 * every op (cuda_memory.cu). Grows on demand (cudaFree synchronises the
 * device first); never shrinks. The pointer is valid until the next call. */
void *bk_cuda_workspace(size_t bytes);

/* Counts one device-to-host copy of `bytes` (cuda_memory.cu; bk.h, d2h_count):
 * every cudaMemcpy to the host in the backend calls it. */
void bk_cuda_count_d2h(size_t bytes);

/* Row-major strided batched GEMM (the semantics of bk_backend.gemm). cuBLAS
 * is column-major: a row-major X with row stride ld is the column-major X^T,
 * so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T by swapping the
 * operands (and M with N). */
static inline void bk_rm_gemm(int transa, int transb, int M, int N, int K, float alpha,
                              const float *A, int lda, long long strideA, const float *B, int ldb,
                              long long strideB, float beta, float *C, int ldc, long long strideC,
                              int batch) {
    if (M <= 0 || N <= 0 || batch <= 0) return;
    cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasSgemmStridedBatched(bk_cuda_blas(), opb, opa, N, M, K, &alpha, B, ldb,
                                           strideB, A, lda, strideA, &beta, C, ldc, strideC,
                                           batch));
}

/* Row-major batched GEMM over arrays of device pointers (one item per entry). */
static inline void bk_rm_gemm_ptrs(int transa, int transb, int M, int N, int K, float alpha,
                                   const float *const *A, int lda, const float *const *B, int ldb,
                                   float beta, float *const *C, int ldc, int batch) {
    if (M <= 0 || N <= 0 || batch <= 0) return;
    cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasSgemmBatched(bk_cuda_blas(), opb, opa, N, M, K, &alpha, B, ldb, A, lda,
                                    &beta, C, ldc, batch));
}

/* ---- deterministic column sums: dst[c] += sum_n f(n, c) ----
 * Stage 1: a grid of (column tiles of 32) x (row splits) blocks writes one
 * partial per (split, column) to the workspace; stage 2 adds the partials in
 * split order. The summation order depends only on (N, C): results are
 * reproducible run to run. F is a functor with `__device__ float operator()(int n, int c) const`.
 */
#define BK_COLSUM_ROWS 8

template <class F>
__global__ void bk_colsum_partial_kernel(float *partial, F f, int N, int C, int rows_per_split) {
    __shared__ float sh[BK_COLSUM_ROWS][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * rows_per_split;
    int r1 = min(N, r0 + rows_per_split);
    float s = 0.0f;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += BK_COLSUM_ROWS) s += f(r, c);
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.0f;
        for (int k = 0; k < BK_COLSUM_ROWS; k++) t += sh[k][threadIdx.x];
        partial[(size_t)blockIdx.y * C + c] = t;
    }
}

/* a template so each .cu that uses it instantiates its own copy (no
 * cross-file kernel symbols without separable compilation) */
template <int Unused = 0>
__global__ void bk_colsum_finish_kernel(float *dst, const float *partial, int splits, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int k = 0; k < splits; k++) s += partial[(size_t)k * C + c];
    dst[c] += s;
}

template <class F> void bk_colsum_accumulate(float *dst, F f, int N, int C) {
    if (!dst || N <= 0 || C <= 0) return;
    int rows_per_split = 256;
    int splits = (N + rows_per_split - 1) / rows_per_split;
    if (splits > 1024) {
        splits = 1024;
        rows_per_split = (N + splits - 1) / splits;
        splits = (N + rows_per_split - 1) / rows_per_split;
    }
    float *partial = (float *)bk_cuda_workspace((size_t)splits * C * sizeof(float));
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)splits);
    dim3 block(32, BK_COLSUM_ROWS);
    bk_colsum_partial_kernel<F><<<grid, block>>>(partial, f, N, C, rows_per_split);
    CUDA_CHECK_LAUNCH();
    bk_colsum_finish_kernel<0>
        <<<bk_blocks((size_t)C, BK_THREADS), BK_THREADS>>>(dst, partial, splits, C);
    CUDA_CHECK_LAUNCH();
}

/* Functors for bk_colsum_accumulate. */
struct bk_col_plain { /* f = x[n, c] */
    const float *x;
    __device__ float operator()(int n, int c) const { return x[(size_t)n * colstride + c]; }
    int colstride;
};
struct bk_col_product { /* f = x[n, c] * y[n, c] */
    const float *x, *y;
    int colstride;
    __device__ float operator()(int n, int c) const {
        size_t i = (size_t)n * colstride + c;
        return x[i] * y[i];
    }
};

/* ---- block and warp reductions ---- */
__device__ __forceinline__ float bk_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float bk_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ double bk_warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result. `sh` is shared scratch of 32 floats. */
__device__ __forceinline__ float bk_block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = bk_warp_sum(v);
    __syncthreads(); /* sh may still be read by a previous reduction */
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return bk_warp_sum(v);
}
__device__ __forceinline__ float bk_block_max(float v, float *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = bk_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return bk_warp_max(v);
}
__device__ __forceinline__ double bk_block_sum_d(double v, double *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = bk_warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    return bk_warp_sum_d(v);
}

#endif
