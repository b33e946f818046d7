/* Normalised Walsh–Hadamard transform per row, d = 2^n (Sylvester, natural
 * order) or d = 12 * 2^n (H_12 ⊗ H_{2^n}, index a*2^n + b; H_12 from
 * kernels/bk_hadamard.h, not symmetric, so the backward uses its transpose).
 *
 * One block per row. Rows of d <= FWHT_SMEM_MAX floats (48 KiB) are
 * transformed in shared memory; wider rows in place in a global-memory row
 * (the output row: out in the forward, dinp in the backward) with the
 * same block-synchronised stages, which is slower but has no size limit. */
#include <math.h>

#include "kernels/bk_hadamard.h"
#include "kernels/cuda/cuda_check.h"

#define FWHT_SMEM_MAX 12288
#define FWHT_THREADS 256

/* H_12 (or its transpose) passed by value: kernel parameters live in
 * constant memory, so no symbol to initialise. */
struct h12_matrix {
    signed char v[12][12];
};

static h12_matrix h12_host(int transpose) {
    h12_matrix m;
    for (int i = 0; i < 12; i++)
        for (int j = 0; j < 12; j++) m.v[i][j] = transpose ? bk_h12[j][i] : bk_h12[i][j];
    return m;
}

/* P = 2^n, blocks = 1 or 12 with d = blocks * P; or 0 when d is not valid. */
static int fwht_split(int d, int *P) {
    int m = (d % 3 == 0) ? 12 : 1;
    if (d < 1 || d % m) return 0;
    int p = d / m;
    if (p & (p - 1)) return 0;
    *P = p;
    return m;
}

/* Unnormalised transform of buf[0, m*P) in place, block-cooperative. */
__device__ void fwht_block(float *buf, int P, int m, const h12_matrix &H) {
    int half = P / 2, pairs = m * half;
    for (int h = 1; h < P; h *= 2) {
        for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
            int a = p / half, q = p % half;
            int lo = a * P + (q / h) * 2 * h + (q % h);
            float x = buf[lo], y = buf[lo + h];
            buf[lo] = x + y;
            buf[lo + h] = x - y;
        }
        __syncthreads();
    }
    if (m == 12) {
        for (int b = threadIdx.x; b < P; b += blockDim.x) {
            float v[12], w[12];
            for (int a = 0; a < 12; a++) v[a] = buf[a * P + b];
            for (int a = 0; a < 12; a++) {
                float s = 0.0f;
                for (int k = 0; k < 12; k++) s += H.v[a][k] > 0 ? v[k] : -v[k];
                w[a] = s;
            }
            for (int a = 0; a < 12; a++) buf[a * P + b] = w[a];
        }
        __syncthreads();
    }
}

/* out = alpha ⊙ H(in)/sqrt(d) + beta for row blockIdx.x, and pre = H(in)/sqrt(d)
 * when pre is given. `in` may alias out. work: NULL = shared memory, else a
 * global row buffer of N*d floats. */
__global__ void fwht_forward_kernel(float *out, float *pre, const float *in, const float *alpha,
                                    const float *beta, float *work, int d, int P, int m, float norm,
                                    h12_matrix H) {
    extern __shared__ float smem[];
    size_t row = (size_t)blockIdx.x * d;
    float *buf = work ? work + row : smem;
    for (int i = threadIdx.x; i < d; i += blockDim.x) buf[i] = in[row + i];
    __syncthreads();
    fwht_block(buf, P, m, H);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float y = buf[i] * norm;
        if (pre) pre[row + i] = y;
        if (alpha) y *= alpha[i];
        if (beta) y += beta[i];
        out[row + i] = y;
    }
}

/* dinp = H^T(alpha ⊙ dout)/sqrt(d) (H passed here is already H^T). */
__global__ void fwht_backward_kernel(float *dinp, const float *dout, const float *alpha,
                                     float *work, int d, int P, int m, float norm, h12_matrix Ht) {
    extern __shared__ float smem[];
    size_t row = (size_t)blockIdx.x * d;
    float *buf = work ? work + row : smem;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        buf[i] = alpha ? alpha[i] * dout[row + i] : dout[row + i];
    __syncthreads();
    fwht_block(buf, P, m, Ht);
    for (int i = threadIdx.x; i < d; i += blockDim.x) dinp[row + i] = buf[i] * norm;
}

static void fwht_apply(float *out, float *pre, const float *inp, const float *alpha,
                       const float *beta, float *global_work, int N, int d, int P, int m,
                       int transpose) {
    float norm = 1.0f / sqrtf((float)d);
    int smem = d <= FWHT_SMEM_MAX;
    float *work = smem ? NULL : global_work;
    size_t shared = smem ? (size_t)d * sizeof(float) : 0;
    fwht_forward_kernel<<<(unsigned)N, FWHT_THREADS, shared>>>(out, pre, inp, alpha, beta, work, d,
                                                               P, m, norm, h12_host(transpose));
    CUDA_CHECK_LAUNCH();
}

void bk_cuda_fwht_forward(float *out, float *pre, const float *inp, const float *alpha,
                          const float *beta, int N, int d) {
    int P = 0, m = fwht_split(d, &P);
    BK_CUDA_REQUIRE(m, "d must be 2^n or 12*2^n");
    if (N <= 0) return;
    /* wide rows: the output row itself is the work buffer (loaded from inp
     * first; each element is read and written by the same thread, so an
     * aliased inp is fine) */
    fwht_apply(out, pre, inp, alpha, beta, out, N, d, P, m, 0);
}

void bk_cuda_fwht_backward(float *dinp, float *dalpha, float *dbeta, float *scratch,
                           const float *dout, const float *inp, const float *pre,
                           const float *alpha, int N, int d) {
    int P = 0, m = fwht_split(d, &P);
    BK_CUDA_REQUIRE(m, "d must be 2^n or 12*2^n");
    if (N <= 0) return;
    float norm = 1.0f / sqrtf((float)d);
    if (dinp) { /* overwritten: wide rows are transformed in place in dinp's own row */
        int smem = d <= FWHT_SMEM_MAX;
        size_t shared = smem ? (size_t)d * sizeof(float) : 0;
        fwht_backward_kernel<<<(unsigned)N, FWHT_THREADS, shared>>>(
            dinp, dout, alpha, smem ? NULL : dinp, d, P, m, norm, h12_host(1));
        CUDA_CHECK_LAUNCH();
    }
    if (dalpha) {
        /* dalpha += sum_n dout ⊙ pre, pre the forward's H(inp)/sqrt(d) or
         * transformed again into scratch */
        if (!pre) fwht_apply(scratch, NULL, inp, NULL, NULL, scratch, N, d, P, m, 0);
        bk_col_product f = {dout, pre ? pre : scratch, d};
        bk_colsum_accumulate(dalpha, f, N, d);
    }
    if (dbeta) {
        bk_col_plain f = {dout, d};
        bk_colsum_accumulate(dbeta, f, N, d);
    }
}
