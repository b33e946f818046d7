/* Multi-head attention with cuBLAS strided-batched GEMMs per (sample, head)
 * and a masked softmax kernel (the shape of llm.c's cuBLAS attention path).
 *
 * Forward, per (b, h):  S = (Q K^T) / sqrt(HS)  -> att (in place)
 *                       att = masked softmax(S)  (hidden keys exactly 0)
 *                       out_h = gate[b,h] * att V
 * Backward, per (b, h): dV += (gate att)^T dout_h
 *                       U = dout_h V^T  (dL/d att before the gate)
 *                       dgate += sum(att ⊙ U)   (= sum dout ⊙ ungated out_h)
 *                       dS = gate * att ⊙ (U - rowsum(att ⊙ U))
 *                       dQ += dS K / sqrt(HS); dK += dS^T Q / sqrt(HS)
 * The S, U and dS matrices use att / scratch ([B,NH,T,T]), so no extra memory. */
#include <math.h>

#include "kernels/cuda/cuda_check.h"

#define WARPS 8

/* Row-major GEMM over a (b, h) grid whose operands sit at
 * base + b*sb + h*sh: one strided-batched call per value of the smaller
 * dimension, batched over the larger one. */
static void gemm_bh(int transa, int transb, int M, int N, int K, float alpha, const float *A,
                    int lda, long long sAb, long long sAh, const float *Bm, int ldb, long long sBb,
                    long long sBh, float beta, float *Cm, int ldc, long long sCb, long long sCh,
                    int nb, int nh) {
    if (nh >= nb) {
        for (int b = 0; b < nb; b++)
            bk_rm_gemm(transa, transb, M, N, K, alpha, A + b * sAb, lda, sAh, Bm + b * sBb, ldb,
                       sBh, beta, Cm + b * sCb, ldc, sCh, nh);
    } else {
        for (int h = 0; h < nh; h++)
            bk_rm_gemm(transa, transb, M, N, K, alpha, A + h * sAh, lda, sAb, Bm + h * sBh, ldb,
                       sBb, beta, Cm + h * sCh, ldc, sCb, nb);
    }
}

/* In-place masked softmax over rows of [items, T, T] (one warp per row).
 * Item i belongs to sample i / per_sample. Key j of query t is visible when
 * mask[b, j] != 0 and (not causal or j <= t); hidden entries become exactly
 * 0 and a row with no visible key becomes all 0. */
__global__ void masked_softmax_kernel(float *att, long long rows, int T, int per_sample,
                                      const float *mask, int causal) {
    long long row = (long long)blockIdx.x * WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    int t = (int)(row % T);
    long long item = row / T;
    const float *m = mask ? mask + (item / per_sample) * T : NULL;
    float *a = att + row * T;
    float mx = -INFINITY;
    for (int j = lane; j < T; j += 32) {
        int vis = (!causal || j <= t) && (!m || m[j] != 0.0f);
        if (vis) mx = fmaxf(mx, a[j]);
    }
    mx = bk_warp_max(mx);
    if (mx == -INFINITY) { /* no visible key (scores are finite, so only masking gives -inf) */
        for (int j = lane; j < T; j += 32) a[j] = 0.0f;
        return;
    }
    float s = 0.0f;
    for (int j = lane; j < T; j += 32) {
        int vis = (!causal || j <= t) && (!m || m[j] != 0.0f);
        float e = vis ? expf(a[j] - mx) : 0.0f;
        a[j] = e;
        s += e;
    }
    s = bk_warp_sum(s);
    float inv = 1.0f / s;
    for (int j = lane; j < T; j += 32) a[j] *= inv;
}

static void masked_softmax(float *att, long long items, int T, int per_sample, const float *mask,
                           int causal) {
    long long rows = items * T;
    if (rows <= 0) return;
    masked_softmax_kernel<<<(unsigned)((rows + WARPS - 1) / WARPS), WARPS * 32>>>(
        att, rows, T, per_sample, mask, causal);
    CUDA_CHECK_LAUNCH();
}

/* out[b, t, h*HS + i] *= gate[b, h] */
__global__ void gate_heads_kernel(float *out, const float *gate, int B, int T, int C, int NH) {
    size_t total = (size_t)B * T * C;
    int HS = C / NH;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / ((size_t)T * C);
        int h = (int)(i % C) / HS;
        out[i] *= gate[b * NH + h];
    }
}

void bk_cuda_attention_forward(float *out, float *att, const float *qkv, const bk_attn_args *a) {
    int B = a->B, T = a->T, C = a->C, NH = a->NH, HS = C / NH;
    if (B <= 0 || T <= 0 || C <= 0) return;
    long long C3 = 3LL * C, sQb = (long long)T * C3, sAh = (long long)T * T, sAb = NH * sAh;
    float scale = 1.0f / sqrtf((float)HS);
    gemm_bh(0, 1, T, T, HS, scale, qkv, (int)C3, sQb, HS, qkv + C, (int)C3, sQb, HS, 0.0f, att, T,
            sAb, sAh, B, NH);
    masked_softmax(att, (long long)B * NH, T, NH, a->mask, a->causal);
    gemm_bh(0, 0, T, HS, T, 1.0f, att, T, sAb, sAh, qkv + 2 * C, (int)C3, sQb, HS, 0.0f, out, C,
            (long long)T * C, HS, B, NH);
    if (a->gate) {
        size_t total = (size_t)B * T * C;
        gate_heads_kernel<<<bk_blocks(total, BK_THREADS), BK_THREADS>>>(out, a->gate, B, T, C, NH);
        CUDA_CHECK_LAUNCH();
    }
}

/* dst = gate[item] * att, elementwise over [B*NH, T, T] */
__global__ void gate_att_kernel(float *dst, const float *att, const float *gate, size_t per_item,
                                size_t total) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = att[i] * gate[i / per_item];
}

/* One block per (b, h); a warp per query row. In place, u (= dout_h V^T)
 * becomes dS = g * att ⊙ (u - rowsum(att ⊙ u)); dgate[bh] += sum of the row
 * sums, reduced in a fixed order (deterministic). */
__global__ void attention_softmax_backward_kernel(float *u, float *dgate, const float *att,
                                                  const float *gate, int T) {
    __shared__ float warp_total[WARPS];
    size_t item = blockIdx.x;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float g = gate ? gate[item] : 1.0f;
    float acc = 0.0f;
    for (int t = w; t < T; t += WARPS) {
        const float *p = att + (item * T + t) * T;
        float *d = u + (item * T + t) * T;
        float s = 0.0f;
        for (int j = lane; j < T; j += 32) s += p[j] * d[j];
        s = bk_warp_sum(s);
        acc += s;
        for (int j = lane; j < T; j += 32) d[j] = g * p[j] * (d[j] - s);
    }
    if (lane == 0) warp_total[w] = acc;
    __syncthreads();
    if (threadIdx.x == 0 && dgate) {
        float tot = 0.0f;
        for (int k = 0; k < WARPS; k++) tot += warp_total[k];
        dgate[item] += tot;
    }
}

void bk_cuda_attention_backward(float *dqkv, float *dgate, float *scratch, const float *dout,
                                const float *qkv, const float *att, const bk_attn_args *a) {
    int B = a->B, T = a->T, C = a->C, NH = a->NH, HS = C / NH;
    if (B <= 0 || T <= 0 || C <= 0) return;
    long long C3 = 3LL * C, sQb = (long long)T * C3, sAh = (long long)T * T, sAb = NH * sAh;
    long long sOb = (long long)T * C;
    float scale = 1.0f / sqrtf((float)HS);
    const float *gate = a->gate;
    size_t total = (size_t)B * NH * T * T;

    /* dV += (g att)^T dout_h */
    const float *P = att;
    if (gate) {
        gate_att_kernel<<<bk_blocks(total, BK_THREADS), BK_THREADS>>>(scratch, att, gate,
                                                                      (size_t)T * T, total);
        CUDA_CHECK_LAUNCH();
        P = scratch;
    }
    gemm_bh(1, 0, T, HS, T, 1.0f, P, T, sAb, sAh, dout, C, sOb, HS, 1.0f, dqkv + 2 * C, (int)C3,
            sQb, HS, B, NH);

    /* U = dout_h V^T, then dS in place */
    gemm_bh(0, 1, T, T, HS, 1.0f, dout, C, sOb, HS, qkv + 2 * C, (int)C3, sQb, HS, 0.0f, scratch, T,
            sAb, sAh, B, NH);
    attention_softmax_backward_kernel<<<(unsigned)(B * NH), WARPS * 32>>>(
        scratch, gate ? dgate : NULL, att, gate, T);
    CUDA_CHECK_LAUNCH();

    /* dQ += scale dS K; dK += scale dS^T Q */
    gemm_bh(0, 0, T, HS, T, scale, scratch, T, sAb, sAh, qkv + C, (int)C3, sQb, HS, 1.0f, dqkv,
            (int)C3, sQb, HS, B, NH);
    gemm_bh(1, 0, T, HS, T, scale, scratch, T, sAb, sAh, qkv, (int)C3, sQb, HS, 1.0f, dqkv + C,
            (int)C3, sQb, HS, B, NH);
}

/* ---- inference with K selected heads per sample ----
 * scratch = qkvs [B*K, T, 3*HS] then S [B*K, T, T]. Pointer arrays for the
 * two GEMMs whose operand addresses depend on the head ids live in the
 * backend workspace. Projection item (b, k, j), j = q/k/v:
 *   qkvs[bk][:, j*HS:(j+1)*HS] = x[b] @ wqkv[j*C + h*HS : +HS, :]^T
 * PV item (b, k): out[b][:, h*HS:(h+1)*HS] = S[bk] @ v[bk]. */
__global__ void selected_attention_ptrs_kernel(const float **pa, const float **pb, float **pc,
                                               const float **va, const float **vb, float **vc,
                                               const float *x, const float *wqkv, float *qkvs,
                                               float *S, float *out, const int *heads, int BK,
                                               int K, int T, int C, int HS) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= BK) return;
    int b = i / K, h = heads[i];
    float *q = qkvs + (size_t)i * T * 3 * HS;
    for (int j = 0; j < 3; j++) {
        pa[3 * i + j] = x + (size_t)b * T * C;
        pb[3 * i + j] = wqkv + ((size_t)j * C + (size_t)h * HS) * C;
        pc[3 * i + j] = q + j * HS;
    }
    va[i] = S + (size_t)i * T * T;
    vb[i] = q + 2 * HS;
    vc[i] = out + (size_t)b * T * C + (size_t)h * HS;
}

/* qkvs[bk, t, j*HS + i] += bqkv[j*C + h*HS + i] */
__global__ void selected_bias_kernel(float *qkvs, const float *bqkv, const int *heads, int BK,
                                     int T, int C, int HS) {
    size_t row = (size_t)3 * HS, total = (size_t)BK * T * row;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t bk = i / ((size_t)T * row);
        int col = (int)(i % row), j = col / HS, e = col % HS;
        qkvs[i] += bqkv[(size_t)j * C + (size_t)heads[bk] * HS + e];
    }
}

void bk_cuda_attention_selected_forward(float *out, float *scratch, const float *x,
                                        const float *wqkv, const float *bqkv, const int *heads,
                                        int K, const bk_attn_args *a) {
    int B = a->B, T = a->T, C = a->C, NH = a->NH, HS = C / NH;
    if (B <= 0 || T <= 0 || C <= 0) return;
    CUDA_CHECK(cudaMemsetAsync(out, 0, (size_t)B * T * C * sizeof(float), 0));
    if (K <= 0) return;
    int BK = B * K;
    float *qkvs = scratch, *S = scratch + (size_t)BK * T * 3 * HS;
    void **ws = (void **)bk_cuda_workspace((size_t)12 * BK * sizeof(void *));
    const float **pa = (const float **)ws, **pb = (const float **)(ws + 3 * BK);
    float **pc = (float **)(ws + 6 * BK);
    const float **va = (const float **)(ws + 9 * BK), **vb = (const float **)(ws + 10 * BK);
    float **vc = (float **)(ws + 11 * BK);
    selected_attention_ptrs_kernel<<<bk_blocks((size_t)BK, BK_THREADS), BK_THREADS>>>(
        pa, pb, pc, va, vb, vc, x, wqkv, qkvs, S, out, heads, BK, K, T, C, HS);
    CUDA_CHECK_LAUNCH();

    bk_rm_gemm_ptrs(0, 1, T, HS, C, 1.0f, pa, C, pb, C, 0.0f, pc, 3 * HS, 3 * BK);
    if (bqkv) {
        size_t total = (size_t)BK * T * 3 * HS;
        selected_bias_kernel<<<bk_blocks(total, BK_THREADS), BK_THREADS>>>(qkvs, bqkv, heads, BK, T,
                                                                           C, HS);
        CUDA_CHECK_LAUNCH();
    }
    long long sq = (long long)T * 3 * HS;
    bk_rm_gemm(0, 1, T, T, HS, 1.0f / sqrtf((float)HS), qkvs, 3 * HS, sq, qkvs + HS, 3 * HS, sq,
               0.0f, S, T, (long long)T * T, BK);
    masked_softmax(S, BK, T, K, a->mask, a->causal);
    bk_rm_gemm_ptrs(0, 0, T, HS, T, 1.0f, va, T, vb, 3 * HS, 0.0f, vc, C, BK);
}
