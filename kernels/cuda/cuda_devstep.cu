/* CUDA ops that keep a training step on the device: Gumbel stream,
 * gradient norm into a device float, AdamW clipped from it, cross-entropy
 * statistics, the BudgetFormer head gate. Contracts in kernels/bk.h ("The
 * step on the device"); the reference it matches is the CPU backend's
 * kernels/cpu_devstep.c.
 *
 * This file is compiled with --fmad=false (kernels/CMakeLists.txt): every
 * a*b+c is rounded twice, as the CPU backend does (C in ISO mode does not
 * contract), so the float math matches the reference operation for
 * operation. What may still differ by an ulp is CUDA's expf/log against
 * libm's (s, p, the rank gate, the entropy); the Gumbel noise uses
 * bk_log_exact and is the same bits, so noise-driven ranks agree.
 *
 * Reductions run in a fixed order (one thread sums per-sample terms in
 * sample order; row statistics use one block with a fixed tree): the stats
 * buffer gets the same values run to run. */
#include <math.h>

#include "kernels/bk_rng.h"
#include "kernels/cuda/cuda_check.h"

#define GATE_MAX_H 256
#define NORM_BLOCKS 512
#define STATS_THREADS 256
#define GATE_TERMS 5 /* per sample: budget loss, entropy loss, s, k/H, k*head_cost */

/* ---- Gumbel ---- */

__global__ void rng_gumbel_kernel(float *out, size_t n, uint64_t seed, uint64_t stream,
                                  uint64_t offset) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bk_rng_gumbel_at(seed, stream, offset + i);
}

void bk_cuda_rng_gumbel(float *out, size_t n, uint64_t seed, uint64_t stream, uint64_t offset) {
    if (n == 0) return;
    rng_gumbel_kernel<<<bk_blocks(n, BK_THREADS), BK_THREADS>>>(out, n, seed, stream, offset);
    CUDA_CHECK_LAUNCH();
}

/* ---- gradient norm and AdamW ---- */

__global__ void norm_partial_kernel(double *partial, const float *g, size_t n) {
    __shared__ double sh[32];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)g[i] * g[i];
    s = bk_block_sum_d(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void norm_finish_kernel(float *norm, double *stats, const double *partial, int blocks) {
    if (threadIdx.x != 0) return;
    double s = 0.0;
    for (int k = 0; k < blocks; k++) s += partial[k];
    float nr = (float)sqrt(s);
    norm[0] = nr;
    if (stats) {
        if (isfinite(nr))
            stats[BK_STAT_GRAD_NORM_SUM] += nr;
        else
            stats[BK_STAT_NONFINITE_STEPS] += 1;
        stats[BK_STAT_NORM_COUNT] += 1;
    }
}

void bk_cuda_grad_norm(float *norm, double *stats, const float *g, size_t n) {
    double *partial = (double *)bk_cuda_workspace(NORM_BLOCKS * sizeof(double));
    norm_partial_kernel<<<NORM_BLOCKS, BK_THREADS>>>(partial, g, n);
    CUDA_CHECK_LAUNCH();
    norm_finish_kernel<<<1, 32>>>(norm, stats, partial, NORM_BLOCKS);
    CUDA_CHECK_LAUNCH();
}

/* The CPU backend's update (bias corrections as multiplied inverses
 * computed in double on the host), with the clip scale from norm[0]. */
__global__ void adamw_clipped_kernel(float *p, const float *g, float *m, float *v, size_t n,
                                     float lr, float b1, float b2, float eps, float wd,
                                     float inv_bc1, float inv_bc2, const float *norm, float clip) {
    float nr = norm[0];
    if (!isfinite(nr)) return;
    float scale = clip > 0 && nr > clip ? clip / nr : 1.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i] * scale;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    }
}

void bk_cuda_adamw_clipped(float *p, const float *g, float *m, float *v, size_t n,
                           const bk_adamw *h, int t, const float *norm, float clip) {
    if (n == 0) return;
    float inv_bc1 = (float)(1.0 / (1.0 - pow((double)h->beta1, (double)t)));
    float inv_bc2 = (float)(1.0 / (1.0 - pow((double)h->beta2, (double)t)));
    adamw_clipped_kernel<<<bk_blocks(n, BK_THREADS), BK_THREADS>>>(
        p, g, m, v, n, h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, inv_bc1, inv_bc2, norm,
        clip);
    CUDA_CHECK_LAUNCH();
}

/* ---- cross-entropy statistics ---- */

/* Row codes written by stage 1 */
#define ROW_IGNORED (-1)
#define ROW_BAD (-2)

/* (value, index) argmax candidate; index < 0 = none yet (only NaNs seen) */
struct argmax_pair {
    float v;
    int i;
};

__device__ __forceinline__ argmax_pair argmax_better(argmax_pair a, argmax_pair b) {
    if (b.i < 0) return a;
    if (a.i < 0) return b;
    return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

/* One block per row: code[n] = 1 when the argmax (ties to the lowest index,
 * NaN never a maximum, all NaN -> index 0) is the target, 0 when not,
 * ROW_IGNORED / ROW_BAD for target -1 / outside [-1, V). */
__global__ void ce_rows_kernel(int *code, const float *logits, const int *targets, int V) {
    __shared__ argmax_pair sh[32];
    size_t n = blockIdx.x;
    int t = targets[n];
    if (t < 0 || t >= V) { /* the same for every thread of the block */
        if (threadIdx.x == 0) code[n] = t == -1 ? ROW_IGNORED : ROW_BAD;
        return;
    }
    const float *x = logits + n * V;
    argmax_pair best = {0.0f, -1};
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float xj = x[j];
        if (isnan(xj)) continue;
        if (best.i < 0 || xj > best.v) best = {xj, j};
    }
    for (int o = 16; o > 0; o >>= 1) {
        argmax_pair other = {__shfl_down_sync(0xffffffffu, best.v, o),
                             __shfl_down_sync(0xffffffffu, best.i, o)};
        best = argmax_better(best, other);
    }
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) sh[wid] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        argmax_pair b = sh[0];
        for (int w = 1; w < nw; w++) b = argmax_better(b, sh[w]);
        int arg = b.i < 0 ? 0 : b.i;
        code[n] = arg == t ? 1 : 0;
    }
}

/* One block: sums over rows in a fixed assignment and tree, added by
 * thread 0. */
__global__ void ce_sum_kernel(double *stats, const int *code, const float *losses, int N) {
    __shared__ double sh[32];
    double sum = 0, counted = 0, correct = 0, bad = 0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) {
        int c = code[n];
        if (c == ROW_BAD) bad += 1;
        if (c < 0) continue;
        sum += losses[n];
        counted += 1;
        correct += c;
    }
    sum = bk_block_sum_d(sum, sh);
    counted = bk_block_sum_d(counted, sh);
    correct = bk_block_sum_d(correct, sh);
    bad = bk_block_sum_d(bad, sh);
    if (threadIdx.x == 0) {
        stats[BK_STAT_LOSS_SUM] += sum;
        stats[BK_STAT_COUNTED] += counted;
        stats[BK_STAT_CORRECT] += correct;
        stats[BK_STAT_BAD_TARGETS] += bad;
    }
}

void bk_cuda_crossentropy_stats(double *stats, const float *logits, const float *losses,
                                const int *targets, int N, int V) {
    if (N <= 0) return;
    int *code = (int *)bk_cuda_workspace((size_t)N * sizeof(int));
    ce_rows_kernel<<<(unsigned)N, STATS_THREADS>>>(code, logits, targets, V);
    CUDA_CHECK_LAUNCH();
    ce_sum_kernel<<<1, STATS_THREADS>>>(stats, code, losses, N);
    CUDA_CHECK_LAUNCH();
}

__global__ void ce_dlosses_kernel(float *dlosses, const int *targets, float value, int N, int V) {
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < N; r += gridDim.x * blockDim.x)
        dlosses[r] = targets[r] >= 0 && targets[r] < V ? value : 0.0f;
}

void bk_cuda_crossentropy_dlosses(float *dlosses, const int *targets, float value, int N, int V) {
    if (N <= 0) return;
    ce_dlosses_kernel<<<bk_blocks((size_t)N, BK_THREADS), BK_THREADS>>>(dlosses, targets, value, N,
                                                                        V);
    CUDA_CHECK_LAUNCH();
}

/* ---- the BudgetFormer head gate ---- */

__device__ __forceinline__ float sigmoid_dev(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Plane pointers of the save buffer (bk.h, BK_GATE_SAVE_FLOATS). */
struct gate_planes {
    float *s, *ds, *k, *zn, *p, *m, *rank, *dp;
};

__device__ __forceinline__ gate_planes planes_of(float *save, int B, int H) {
    size_t BH = (size_t)B * H;
    gate_planes g;
    g.s = save;
    g.ds = save + B;
    g.k = save + 2 * (size_t)B;
    g.zn = save + 4 * (size_t)B;
    g.p = g.zn + BH;
    g.m = g.p + BH;
    g.rank = g.m + BH;
    g.dp = g.rank + BH;
    return g;
}

__device__ __forceinline__ int budget_k_dev(float s, int H, int force_k) {
    if (force_k > 0) return force_k < H ? force_k : H;
    int k = (int)floorf(s * (float)H);
    return k < 1 ? 1 : (k > H ? H : k);
}

/* Rank (1 = best) of score i among H in shared memory; ties to the lower index. */
__device__ __forceinline__ int rank_dev(const float *zn, int H, int i) {
    float zi = zn[i];
    int r = 1;
    for (int j = 0; j < H; j++)
        if (zn[j] > zi || (zn[j] == zi && j < i)) r++;
    return r;
}

/* One block per sample, one thread per head. The sums the reference does in
 * head order (softmax denominator, entropy) are done by thread 0 in head
 * order, from values the head threads computed. */
__global__ void gate_forward_kernel(float *gate, int *kout, float *save, double *terms,
                                    const float *f, const float *z, bk_gate_args a) {
    __shared__ float zn_s[GATE_MAX_H], e_s[GATE_MAX_H];
    __shared__ double ent_s[GATE_MAX_H];
    __shared__ float s_sh, mx_sh;
    __shared__ double sum_sh;
    int b = blockIdx.x, i = threadIdx.x, B = a.B, H = a.H;
    size_t o = (size_t)b * H;
    gate_planes sv = planes_of(save, B, H);
    uint64_t stream = (a.step << 8) | (uint64_t)a.layer;
    if (i < H) {
        float noise = a.sigma > 0
                          ? a.sigma * bk_rng_gumbel_at(a.seed, stream,
                                                       (a.row_offset + (uint64_t)b) * (uint64_t)H +
                                                           (uint64_t)i)
                          : 0.0f;
        float zn = z[o + i] + noise;
        zn_s[i] = zn;
        sv.zn[o + i] = zn;
    }
    __syncthreads();
    if (i == 0) {
        s_sh = sigmoid_dev(f[b]);
        float mx = -INFINITY;
        for (int j = 0; j < H; j++)
            if (zn_s[j] / a.tau > mx) mx = zn_s[j] / a.tau;
        mx_sh = mx;
    }
    __syncthreads();
    if (i < H) e_s[i] = expf(zn_s[i] / a.tau - mx_sh);
    __syncthreads();
    if (i == 0) {
        double sum = 0;
        for (int j = 0; j < H; j++) sum += e_s[j];
        sum_sh = sum;
    }
    __syncthreads();
    float s = s_sh;
    double norm = a.norm;
    float ent_w = a.lambda_entropy * (2.0f * a.progress - 1.0f);
    if (i < H) {
        float p = (float)(e_s[i] / sum_sh);
        int r = rank_dev(zn_s, H, i);
        float g = r == 1 ? 1.0f : sigmoid_dev((s * H - (float)r) / a.tau_r);
        gate[o + i] = g;
        sv.p[o + i] = p;
        sv.m[o + i] = g;
        sv.rank[o + i] = (float)r;
        /* log of a double, as C's log(p[i]) promotes (C++ would pick logf) */
        double lp = p > 0 ? log((double)p) : 0.0;
        ent_s[i] = p > 0 ? (double)p * lp : 0.0;
        sv.dp[o + i] = (float)(-ent_w * norm * (p > 0 ? lp + 1.0 : 0.0));
    }
    __syncthreads();
    if (i == 0) {
        double ent = 0;
        for (int j = 0; j < H; j++) ent -= ent_s[j];
        float lo = fmaxf(0.0f, a.s_min - s), hi = fmaxf(0.0f, s - a.s_max);
        int k = budget_k_dev(s, H, 0);
        double *t = terms + (size_t)b * GATE_TERMS;
        t[0] = a.lambda_budget * norm * (lo * lo + hi * hi);
        t[1] = ent_w * norm * ent;
        t[2] = s;
        t[3] = (double)k / H;
        t[4] = a.head_cost ? k * a.head_cost[b] : 0.0;
        sv.ds[b] = (float)(a.lambda_budget * norm * (-2.0 * lo + 2.0 * hi));
        sv.s[b] = s;
        sv.k[b] = (float)k;
        if (kout) kout[b] = k;
    }
}

/* One thread adds the per-sample terms in sample order, as the reference. */
__global__ void gate_stats_kernel(double *stats, const double *terms, int B, int with_losses,
                                  int with_cost) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    for (int b = 0; b < B; b++) {
        const double *t = terms + (size_t)b * GATE_TERMS;
        if (with_losses) {
            stats[BK_STAT_BUDGET_LOSS] += t[0];
            stats[BK_STAT_ENTROPY_LOSS] += t[1];
        }
        stats[BK_STAT_S_SUM] += t[2];
        stats[BK_STAT_HEADS_SUM] += t[3];
        stats[BK_STAT_GATE_ROWS] += 1;
        if (with_cost) stats[BK_STAT_ATTN_FLOPS] += t[4];
    }
}

static unsigned gate_threads(int H) { return (unsigned)((H + 31) / 32 * 32); }

void bk_cuda_gate_forward(float *gate, int *k, float *save, double *stats, const float *f,
                          const float *z, const bk_gate_args *a) {
    BK_CUDA_REQUIRE(a->H >= 1 && a->H <= GATE_MAX_H, "gate needs 1 <= H <= 256");
    if (a->B <= 0) return;
    double *terms = (double *)bk_cuda_workspace((size_t)a->B * GATE_TERMS * sizeof(double));
    gate_forward_kernel<<<(unsigned)a->B, gate_threads(a->H)>>>(gate, k, save, terms, f, z, *a);
    CUDA_CHECK_LAUNCH();
    if (stats) {
        gate_stats_kernel<<<1, 32>>>(stats, terms, a->B, 1, a->head_cost != NULL);
        CUDA_CHECK_LAUNCH();
    }
}

__global__ void gate_backward_kernel(float *df, float *dz, const float *dgate, const float *save,
                                     bk_gate_args a) {
    __shared__ float t_s[GATE_MAX_H];
    __shared__ double pr_s[GATE_MAX_H];
    __shared__ double dot_sh;
    int b = blockIdx.x, i = threadIdx.x, B = a.B, H = a.H;
    size_t o = (size_t)b * H;
    gate_planes sv = planes_of((float *)save, B, H);
    float dp = 0.0f, p = 0.0f;
    if (i < H) {
        float g = sv.m[o + i], dw = dgate[o + i];
        p = sv.p[o + i];
        dp = sv.dp[o + i];
        if (!a.exact_gradient) dp += dw * g; /* straight-through: dw/dp = m */
        t_s[i] = dw * g * (1.0f - g) * (float)H / a.tau_r;
        pr_s[i] = (double)p * dp;
    }
    __syncthreads();
    if (i == 0) {
        float ds = sv.ds[b];
        double dot = 0;
        for (int j = 0; j < H; j++) {
            if (sv.rank[o + j] != 1.0f) ds += t_s[j];
            dot += pr_s[j];
        }
        dot_sh = dot;
        float s = sv.s[b];
        df[b] += ds * s * (1.0f - s);
    }
    __syncthreads();
    if (i < H) dz[o + i] += (float)(p * (dp - dot_sh) / a.tau);
}

void bk_cuda_gate_backward(float *df, float *dz, const float *dgate, const float *save,
                           const bk_gate_args *a) {
    BK_CUDA_REQUIRE(a->H >= 1 && a->H <= GATE_MAX_H, "gate needs 1 <= H <= 256");
    if (a->B <= 0) return;
    gate_backward_kernel<<<(unsigned)a->B, gate_threads(a->H)>>>(df, dz, dgate, save, *a);
    CUDA_CHECK_LAUNCH();
}

__global__ void gate_infer_kernel(float *s, int *k, int *heads, double *terms, const float *f,
                                  const float *z, const double *head_cost, int H, int force_k) {
    __shared__ float z_s[GATE_MAX_H];
    int b = blockIdx.x, i = threadIdx.x;
    size_t o = (size_t)b * H;
    if (i < H) z_s[i] = z[o + i];
    __syncthreads();
    if (i < H) heads[o + rank_dev(z_s, H, i) - 1] = i;
    if (i == 0) {
        float sb = sigmoid_dev(f[b]);
        int kb = budget_k_dev(sb, H, force_k);
        s[b] = sb;
        k[b] = kb;
        double *t = terms + (size_t)b * GATE_TERMS;
        t[0] = t[1] = 0.0;
        t[2] = sb;
        t[3] = (double)kb / H;
        t[4] = head_cost ? kb * head_cost[b] : 0.0;
    }
}

void bk_cuda_gate_infer(float *s, int *k, int *heads, double *stats, const float *f, const float *z,
                        const double *head_cost, int B, int H, int force_k) {
    BK_CUDA_REQUIRE(H >= 1 && H <= GATE_MAX_H, "gate needs 1 <= H <= 256");
    if (B <= 0) return;
    double *terms = (double *)bk_cuda_workspace((size_t)B * GATE_TERMS * sizeof(double));
    gate_infer_kernel<<<(unsigned)B, gate_threads(H)>>>(s, k, heads, terms, f, z, head_cost, H,
                                                        force_k);
    CUDA_CHECK_LAUNCH();
    if (stats) {
        gate_stats_kernel<<<1, 32>>>(stats, terms, B, 0, head_cost != NULL);
        CUDA_CHECK_LAUNCH();
    }
}
