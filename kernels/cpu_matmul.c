/* Optimised CPU backend: matrix products through OpenBLAS (cblas_sgemm,
 * row-major). Contracts in kernels/bk.h. OpenBLAS threads each call itself,
 * so these functions call it from the serial region only. */
#include <cblas.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_ops.h"

#if defined(__AVX512F__)
#include <immintrin.h>

/* Skinny products C = alpha A op(B) + beta C with op(B) [K,N], N <= 128: B
 * [N,K] transposed (a small layer's weight [out, in]; bimamba's W_x has
 * N = 36, K = 128) or B [K,N] as it is (the backward's products with a
 * weight, e.g. bimamba's W_delta, N = 4). OpenBLAS packs A on every call,
 * which costs more than the product when N is this small (that W_x ran at
 * ~60 GFLOP/s, the N = 4 product at 13). Here B is packed once, K rows
 * of 64 floats per block of output columns (zero-padded, in L1/L2), and
 * each block of R rows of A is multiplied straight from A: one broadcast per
 * element, up to 4 FMAs with it, at most 24 accumulators in registers. k runs in order, so a row's
 * result depends on neither M nor the row's place in the batch. */
#define SKINNY_MAX_N 128
#define SKINNY_MAX_K 1024
#define SKINNY_BLOCK 64 /* output columns per block: 4 vectors */
#define SKINNY_MIN_M 32

static inline __attribute__((always_inline)) void
skinny_block(int NV, int R, int rows, int K, const float *a, int lda, const float *bp, float alpha,
             float beta, float *c, int ldc, __mmask16 last) {
    __m512 acc[8][4]; /* all set: the compiler keeps the R x NV it uses */
    for (int r = 0; r < 8; r++)
        for (int v = 0; v < 4; v++) acc[r][v] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        __m512 b[4];
        for (int v = 0; v < NV; v++) b[v] = _mm512_load_ps(bp + (size_t)k * SKINNY_BLOCK + v * 16);
        for (int r = 0; r < R; r++) {
            if (r >= rows) break;
            __m512 av = _mm512_set1_ps(a[(size_t)r * lda + k]);
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
        }
    }
    __m512 al = _mm512_set1_ps(alpha), be = _mm512_set1_ps(beta);
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < NV; v++) {
            __mmask16 m = v == NV - 1 ? last : (__mmask16)0xFFFF;
            float *o = c + (size_t)r * ldc + v * 16;
            __m512 y = _mm512_mul_ps(al, acc[r][v]);
            if (beta != 0.0f) /* C is not read when beta is 0 (it may hold anything) */
                y = _mm512_fmadd_ps(be, _mm512_maskz_loadu_ps(m, o), y);
            _mm512_mask_storeu_ps(o, m, y);
        }
}

/* One case of REGISTER_BLOCKS: a block of R rows by NV vectors. */
#define SKINNY_CASE(NV, R)                                                                         \
    case NV:                                                                                       \
        if (rows == R)                                                                             \
            skinny_block(NV, R, R, K, a, lda, b, alpha, beta, cc, ldc, m);                         \
        else                                                                                       \
            skinny_block(NV, R, rows, K, a, lda, b, alpha, beta, cc, ldc, m);                      \
        break;

/* The register blocks by the column vectors nv of a block: R rows of 8
 * when no block has 4 vectors (at most 24 accumulators), else 6 (24). */
#define REGISTER_BLOCKS(CASE)                                                                      \
    if (R == 8) {                                                                                  \
        switch (nv) {                                                                              \
            CASE(1, 8)                                                                             \
            CASE(2, 8)                                                                             \
            CASE(3, 8)                                                                             \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    } else {                                                                                       \
        switch (nv) {                                                                              \
            CASE(1, 6)                                                                             \
            CASE(2, 6)                                                                             \
            CASE(3, 6)                                                                             \
            CASE(4, 6)                                                                             \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    }

/* Returns 0, or -1 (out of memory: the caller falls back to sgemm). B is
 * packed per item in column blocks of SKINNY_BLOCK, K rows each, zero-padded. */
static int skinny_gemm(int M, int N, int K, float alpha, const float *A, int lda, long long sA,
                       int transb, const float *Bm, int ldb, long long sB, float beta, float *C,
                       int ldc, long long sC, int batch) {
    const int NB = (N + SKINNY_BLOCK - 1) / SKINNY_BLOCK, R = N > 48 ? 6 : 8;
    const size_t per_block = (size_t)K * SKINNY_BLOCK;
    float *bp = bk_cpu_workspace_take((size_t)batch * NB * per_block * sizeof(float));
    if (!bp) return -1;
    for (int i = 0; i < batch; i++)
        for (int cb = 0; cb < NB; cb++)
            for (int k = 0; k < K; k++)
                for (int j = 0; j < SKINNY_BLOCK; j++) {
                    int n = cb * SKINNY_BLOCK + j;
                    bp[((size_t)i * NB + cb) * per_block + (size_t)k * SKINNY_BLOCK + j] =
                        n >= N   ? 0.0f
                        : transb ? Bm[(long long)i * sB + (long long)n * ldb + k]
                                 : Bm[(long long)i * sB + (long long)k * ldb + n];
                }
    const __mmask16 tail = N % 16 ? (__mmask16)((1u << (N % 16)) - 1) : (__mmask16)0xFFFF;
    const long long blocks = (M + R - 1) / R, tasks = blocks * batch;
#pragma omp parallel for schedule(static) if (tasks > 1 && (double)M * N * K * batch >= 1e5)
    for (long long t = 0; t < tasks; t++) {
        const int i = (int)(t / blocks), r0 = (int)(t % blocks) * R;
        const int rows = M - r0 < R ? M - r0 : R;
        const float *a = A + (long long)i * sA + (long long)r0 * lda;
        float *c = C + (long long)i * sC + (long long)r0 * ldc;
        for (int cb = 0; cb < NB; cb++) {
            const int n0 = cb * SKINNY_BLOCK;
            const int nv = ((N - n0 < SKINNY_BLOCK ? N - n0 : SKINNY_BLOCK) + 15) / 16;
            const float *b = bp + ((size_t)i * NB + cb) * per_block;
            float *cc = c + n0;
            const __mmask16 m = cb == NB - 1 ? tail : (__mmask16)0xFFFF;
            REGISTER_BLOCKS(SKINNY_CASE)
        }
    }
    bk_cpu_workspace_give(bp);
    return 0;
}

static int skinny_fits(int transa, int M, int N, int K) {
    return !transa && N <= SKINNY_MAX_N && K >= 1 && K <= SKINNY_MAX_K && M >= SKINNY_MIN_M;
}

/* Reductions over many rows, C = alpha A^T B + beta C with A [K,M], B [K,N],
 * M, N <= 128 and K large: the weight gradients of small layers (bimamba's
 * W_delta: M 128, N 4; W_x: M 36, N 128; K = the batch's tokens). sgemm
 * packs both operands for an output this small (the N = 4 one ran at ~12
 * GFLOP/s). Here K runs in fixed chunks of TN_CHUNK rows, each chunk's
 * product into its own partial [M,N] (a block of R output rows by up to 4
 * vectors of columns in registers, one broadcast of A per row and output
 * row, B's row loaded as it is), and the partials are added in chunk order:
 * the result depends on neither the thread count nor the batch. */
#define TN_CHUNK 256
#define TN_MAX 128

static inline __attribute__((always_inline)) void tn_block(int NV, int R, int rows, int k0, int k1,
                                                           const float *A, int lda, const float *B,
                                                           int ldb, int m0, int n0, __mmask16 last,
                                                           float *P, int N) {
    __m512 acc[8][4];
    for (int r = 0; r < 8; r++)
        for (int v = 0; v < 4; v++) acc[r][v] = _mm512_setzero_ps();
    for (int k = k0; k < k1; k++) {
        __m512 b[4];
        const float *bk = B + (size_t)k * ldb + n0;
        for (int v = 0; v < NV; v++)
            b[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? last : (__mmask16)0xFFFF, bk + v * 16);
        const float *ak = A + (size_t)k * lda + m0;
        for (int r = 0; r < R; r++) {
            if (r >= rows) break;
            __m512 av = _mm512_set1_ps(ak[r]);
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < NV; v++)
            _mm512_mask_storeu_ps(P + (size_t)(m0 + r) * N + n0 + v * 16,
                                  v == NV - 1 ? last : (__mmask16)0xFFFF, acc[r][v]);
}

#define TN_CASE(NV, R)                                                                             \
    case NV:                                                                                       \
        if (rows == R)                                                                             \
            tn_block(NV, R, R, k0, k1, a, lda, b, ldb, m0, n0, m, P, N);                           \
        else                                                                                       \
            tn_block(NV, R, rows, k0, k1, a, lda, b, ldb, m0, n0, m, P, N);                        \
        break;

static int tn_fits(int transa, int transb, int M, int N, int K) {
    return transa && !transb && M <= TN_MAX && N <= TN_MAX && K >= 2 * TN_CHUNK;
}

/* Returns 0, or -1 (out of memory: the caller falls back to sgemm). */
static int tn_gemm(int M, int N, int K, float alpha, const float *A, int lda, long long sA,
                   const float *Bm, int ldb, long long sB, float beta, float *C, int ldc,
                   long long sC, int batch) {
    const int nch = (K + TN_CHUNK - 1) / TN_CHUNK, R = N > 48 ? 6 : 8;
    const size_t MN = (size_t)M * N;
    float *part = bk_cpu_workspace_take((size_t)batch * nch * MN * sizeof(float));
    if (!part) return -1;
    const __mmask16 tail = N % 16 ? (__mmask16)((1u << (N % 16)) - 1) : (__mmask16)0xFFFF;
    const long long tasks = (long long)batch * nch;
#pragma omp parallel for schedule(static) if (tasks > 1)
    for (long long t = 0; t < tasks; t++) {
        const int i = (int)(t / nch), c = (int)(t % nch);
        const int k0 = c * TN_CHUNK, k1 = k0 + TN_CHUNK < K ? k0 + TN_CHUNK : K;
        const float *a = A + (long long)i * sA, *b = Bm + (long long)i * sB;
        float *P = part + (size_t)t * MN;
        for (int m0 = 0; m0 < M; m0 += R) {
            const int rows = M - m0 < R ? M - m0 : R;
            for (int n0 = 0; n0 < N; n0 += SKINNY_BLOCK) {
                const int nv = ((N - n0 < SKINNY_BLOCK ? N - n0 : SKINNY_BLOCK) + 15) / 16;
                const __mmask16 m = n0 + SKINNY_BLOCK >= N ? tail : (__mmask16)0xFFFF;
                REGISTER_BLOCKS(TN_CASE)
            }
        }
    }
    /* the partials in chunk order, then alpha and beta (C not read when beta is 0) */
#pragma omp parallel for schedule(static) if ((long long)batch * M * N * nch >= (1 << 16))
    for (long long t = 0; t < (long long)batch * M; t++) {
        const int i = (int)(t / M), r = (int)(t % M);
        const float *p = part + (size_t)i * nch * MN + (size_t)r * N;
        float *o = C + (long long)i * sC + (long long)r * ldc;
        for (int n = 0; n < N; n++) {
            float acc = p[n];
            for (int c = 1; c < nch; c++) acc += p[(size_t)c * MN + n];
            o[n] = alpha * acc + (beta != 0.0f ? beta * o[n] : 0.0f);
        }
    }
    bk_cpu_workspace_give(part);
    return 0;
}
#endif

/* Whether the AVX-512 kernels above are used (where compiled): off forces
 * every product through the portable code, as on a CPU without AVX-512, so
 * both paths are tested on one machine (bk_cpu_set_portable in bk.h). */
static _Atomic int use_portable;

void bk_cpu_set_portable(int on) { use_portable = on != 0; }
int bk_cpu_portable(void) { return use_portable; }

/* The tall reductions of tn_gemm without AVX-512: the same fixed split of K
 * into TN_PCHUNK-row chunks, each chunk's A^T B into its own partial [M,N]
 * (k in order), the partials added in chunk order. sgemm splits K by its
 * thread count, so without this one thread and two gave other bits. */
#define TN_PCHUNK 256
#define TN_PMAX 128

static int tn_portable_fits(int transa, int transb, int M, int N, int K) {
    return transa && !transb && M <= TN_PMAX && N <= TN_PMAX && K >= 2 * TN_PCHUNK;
}

/* Returns 0, or -1 (out of memory: the caller falls back to sgemm). */
static int tn_gemm_portable(int M, int N, int K, float alpha, const float *A, int lda, long long sA,
                            const float *Bm, int ldb, long long sB, float beta, float *C, int ldc,
                            long long sC, int batch) {
    const int nch = (K + TN_PCHUNK - 1) / TN_PCHUNK;
    const size_t MN = (size_t)M * N;
    float *part = bk_cpu_workspace_take((size_t)batch * nch * MN * sizeof(float));
    if (!part) return -1;
    const long long tasks = (long long)batch * nch;
#pragma omp parallel for schedule(static) if (tasks > 1)
    for (long long t = 0; t < tasks; t++) {
        const int i = (int)(t / nch), c = (int)(t % nch);
        const int k0 = c * TN_PCHUNK, k1 = k0 + TN_PCHUNK < K ? k0 + TN_PCHUNK : K;
        const float *a = A + (long long)i * sA, *b = Bm + (long long)i * sB;
        float *P = part + (size_t)t * MN;
        memset(P, 0, MN * sizeof(float));
        for (int k = k0; k < k1; k++) {
            const float *ak = a + (size_t)k * lda, *bk = b + (size_t)k * ldb;
            for (int m = 0; m < M; m++) {
                const float am = ak[m];
                float *pm = P + (size_t)m * N;
#pragma omp simd
                for (int n = 0; n < N; n++) pm[n] += am * bk[n];
            }
        }
    }
#pragma omp parallel for schedule(static) if ((long long)batch * M * N * nch >= (1 << 16))
    for (long long t = 0; t < (long long)batch * M; t++) {
        const int i = (int)(t / M), r = (int)(t % M);
        const float *p = part + (size_t)i * nch * MN + (size_t)r * N;
        float *o = C + (long long)i * sC + (long long)r * ldc;
        for (int n = 0; n < N; n++) {
            float acc = p[n];
            for (int c = 1; c < nch; c++) acc += p[(size_t)c * MN + n];
            o[n] = alpha * acc + (beta != 0.0f ? beta * o[n] : 0.0f);
        }
    }
    bk_cpu_workspace_give(part);
    return 0;
}

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
#if defined(__AVX512F__)
    if (!use_portable && skinny_fits(0, N, OC, IC) &&
        skinny_gemm(N, OC, IC, 1.0f, inp, IC, 0, 1, w, IC, 0, bias ? 1.0f : 0.0f, out, OC, 0, 1) ==
            0)
        return;
#endif
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

/* C_i = alpha op(A_i) op(B_i) + beta C_i for each batch item, one sgemm each
 * (skinny A B^T products: skinny_gemm, all items at once).
 * Batch items are not run in parallel: the OpenBLAS here is the pthreads
 * build, which threads inside each call and must not be called from many
 * OpenMP threads at once. */
void bk_cpu_gemm(int transa, int transb, int M, int N, int K, float alpha, const float *A, int lda,
                 long long strideA, const float *Bm, int ldb, long long strideB, float beta,
                 float *Cm, int ldc, long long strideC, int batch) {
    if (M <= 0 || N <= 0 || batch <= 0) return;
#if defined(__AVX512F__)
    if (!use_portable && skinny_fits(transa, M, N, K) &&
        skinny_gemm(M, N, K, alpha, A, lda, strideA, transb, Bm, ldb, strideB, beta, Cm, ldc,
                    strideC, batch) == 0)
        return;
    if (!use_portable && tn_fits(transa, transb, M, N, K) &&
        tn_gemm(M, N, K, alpha, A, lda, strideA, Bm, ldb, strideB, beta, Cm, ldc, strideC, batch) ==
            0)
        return;
#endif
    if (tn_portable_fits(transa, transb, M, N, K) &&
        tn_gemm_portable(M, N, K, alpha, A, lda, strideA, Bm, ldb, strideB, beta, Cm, ldc, strideC,
                         batch) == 0)
        return;
    enum CBLAS_TRANSPOSE ta = transa ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = transb ? CblasTrans : CblasNoTrans;
    for (int i = 0; i < batch; i++)
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A + (long long)i * strideA, lda,
                    Bm + (long long)i * strideB, ldb, beta, Cm + (long long)i * strideC, ldc);
}
