/* A-ViT token halting on the device: the formulas of kernels/bk_halt_math.h,
 * shared with kernels/cpu_halt.c. The per-token work runs over a grid; the
 * sums (a layer's psum, keep and remainders; the alignment's means) are
 * reduced in a fixed order, so a run is reproducible: each block reduces its
 * tokens in a tree into a partial of the workspace, then one block adds the
 * partials in block order. halt_loss is one warp, a lane per layer. */
#include <math.h>

#include "kernels/bk_halt_math.h"
#include "kernels/cuda/cuda_check.h"

#define HALT_THREADS 256
#define HALT_MAX_BLOCKS 1024
#define HALT_SUMS 4 /* doubles a block reduces at most */

__global__ void rowscale_kernel(float *out, const float *inp, const float *s, int N, int C) {
    size_t n = (size_t)N * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = inp[i] * s[i / C];
}

extern "C" void bk_cuda_rowscale(float *out, const float *inp, const float *s, int N, int C) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    rowscale_kernel<<<bk_blocks(n, BK_THREADS), BK_THREADS>>>(out, inp, s, N, C);
    CUDA_CHECK_LAUNCH();
}

static unsigned halt_blocks(size_t n) {
    unsigned b = bk_blocks(n, HALT_THREADS);
    return b > HALT_MAX_BLOCKS ? HALT_MAX_BLOCKS : b;
}

/* Tree-reduces K doubles v[K] of every thread of the block (fixed order)
 * into part[blockIdx.x * K + j]. */
template <int K> __device__ void block_sums(const double *v, double *part) {
    __shared__ double sh[K][HALT_THREADS];
    for (int j = 0; j < K; j++) sh[j][threadIdx.x] = v[j];
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            for (int j = 0; j < K; j++) sh[j][threadIdx.x] += sh[j][threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        for (int j = 0; j < K; j++) part[(size_t)blockIdx.x * K + j] = sh[j][0];
}

/* One thread: the partials of `blocks` blocks, in block order. */
template <int K> __device__ void total_sums(const double *part, int blocks, double *out) {
    for (int j = 0; j < K; j++) out[j] = 0;
    for (int b = 0; b < blocks; b++)
        for (int j = 0; j < K; j++) out[j] += part[(size_t)b * K + j];
}

__global__ void halt_forward_kernel(float *h, float *next, float *cum, float *rem, int *at,
                                    double *part, const float *t, const float *mask,
                                    bk_halt_args a) {
    double v[3] = {0, 0, 0}; /* psum, keep, remainders */
    size_t n = (size_t)a.B * a.T;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (!(mask[i] > 0)) {
            h[i] = i % a.T ? bk_halt_inactive_score(t[i * a.C], &a) : 0.0f;
            v[0] += h[i];
            next[i] = 0;
            continue;
        }
        if (i % a.T == 0) { /* the class token runs every layer */
            h[i] = 0;
            next[i] = 1;
            continue;
        }
        bk_halt_step st = bk_halt_token(t[i * a.C], cum + i, rem + i, at + i, &a);
        h[i] = st.h;
        next[i] = st.halts ? 0.0f : 1.0f;
        v[0] += st.p;
        v[1] += 1;
        v[2] += st.rem;
    }
    block_sums<3>(v, part);
}

__global__ void halt_forward_total(double *hstats, const double *part, int blocks, int l, int L) {
    double s[3];
    total_sums<3>(part, blocks, s);
    hstats[l] += s[0];
    hstats[L + l] += s[1];
    hstats[2 * L] += s[2];
}

extern "C" void bk_cuda_halt_forward(float *h, float *next, float *cum, float *rem, int *at,
                                     double *hstats, const float *t, const float *mask,
                                     const bk_halt_args *a) {
    size_t n = (size_t)a->B * a->T;
    if (n == 0) return;
    unsigned blocks = halt_blocks(n);
    double *part = (double *)bk_cuda_workspace((size_t)blocks * 3 * sizeof(double));
    halt_forward_kernel<<<blocks, HALT_THREADS>>>(h, next, cum, rem, at, part, t, mask, *a);
    CUDA_CHECK_LAUNCH();
    if (!hstats) return;
    halt_forward_total<<<1, 1>>>(hstats, part, (int)blocks, a->layer, a->layers);
    CUDA_CHECK_LAUNCH();
}

/* One warp: lane l handles layers l, l + 32, ...; the sums over layers are
 * shuffled down in a fixed order. */
__device__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return __shfl_sync(0xffffffffu, v, 0);
}

__global__ void halt_loss_kernel(double *stats, float *dldp, const double *hstats,
                                 bk_halt_loss_args a) {
    int L = a.layers, lane = threadIdx.x;
    double S = 0, Z = 0, keep = 0;
    for (int l = lane; l < L; l += 32) {
        S += hstats[l];
        keep += hstats[L + l];
        Z += bk_halt_prior(l, &a);
    }
    S = warp_sum(S), Z = warp_sum(Z), keep = warp_sum(keep);
    double kl = 0, pfree = 0, tiny = 1e-12, Sq = S > tiny ? S : tiny;
    for (int l = lane; l < L; l += 32) {
        int free_;
        double pi = bk_halt_prior(l, &a) / Z, q = bk_halt_q(hstats[l], S, &free_, &a);
        kl += pi > 0 ? pi * log(pi / q) : 0;
        pfree += free_ ? pi : 0;
    }
    kl = warp_sum(kl), pfree = warp_sum(pfree);
    for (int l = lane; l < L; l += 32) {
        int free_;
        double pi = bk_halt_prior(l, &a) / Z, s = hstats[l] > tiny ? hstats[l] : tiny;
        bk_halt_q(hstats[l], S, &free_, &a);
        dldp[l] = (float)(a.prior_weight * ((free_ ? -pi / s : 0) + pfree / Sq));
    }
    if (lane == 0 && stats) {
        double n = a.tokens > 0 ? a.tokens : 1;
        stats[a.slot_ponder] += a.ponder_weight * (keep + hstats[2 * L]) / n;
        stats[a.slot_prior] += a.prior_weight * kl;
        stats[a.slot_keep] += keep / (n * L);
    }
}

extern "C" void bk_cuda_halt_loss(double *stats, float *dldp, const double *hstats,
                                  const bk_halt_loss_args *a) {
    halt_loss_kernel<<<1, 32>>>(stats, dldp, hstats, *a);
    CUDA_CHECK_LAUNCH();
}

__global__ void halt_backward_kernel(float *dt, const float *h, const int *at, const float *dldp,
                                     float pgrad, bk_halt_args a) {
    size_t n = (size_t)a.B * a.T;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (i % a.T == 0) continue;
        float hv = h[i], g = bk_halt_grad(at[i], dldp, pgrad, &a);
        if (g != 0.0f) dt[i * a.C] += a.gamma * hv * (1.0f - hv) * g;
    }
}

extern "C" void bk_cuda_halt_backward(float *dt, const float *h, const int *at, const float *dldp,
                                      float pgrad, const bk_halt_args *a) {
    size_t n = (size_t)a->B * a->T;
    if (n == 0) return;
    halt_backward_kernel<<<bk_blocks(n, BK_THREADS), BK_THREADS>>>(dt, h, at, dldp, pgrad, *a);
    CUDA_CHECK_LAUNCH();
}

/* The ACT output: one warp per token row, lanes over channels. */
__global__ void halt_act_forward_kernel(float *out, const float *x, const float *h, const int *at,
                                        const float *rem, bk_halt_args a) {
    size_t n = (size_t)a.B * a.T, warps = (size_t)gridDim.x * blockDim.x / 32;
    int lane = threadIdx.x % 32;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; i < n; i += warps) {
        float w = bk_halt_act_weight((int)(i % a.T), at[i], h[i], rem[i], &a);
        if (w == 0.0f) continue;
        for (int c = lane; c < a.C; c += 32) out[i * a.C + c] += w * x[i * a.C + c];
    }
}

extern "C" void bk_cuda_halt_act_forward(float *out, const float *x, const float *h, const int *at,
                                         const float *rem, const bk_halt_args *a) {
    size_t n = (size_t)a->B * a->T;
    if (n == 0) return;
    halt_act_forward_kernel<<<bk_blocks(n * 32, BK_THREADS), BK_THREADS>>>(out, x, h, at, rem, *a);
    CUDA_CHECK_LAUNCH();
}

__global__ void halt_act_backward_kernel(float *dx, const float *dout, const float *x,
                                         const float *xlast, const float *h, const int *at,
                                         const float *rem, bk_halt_args a) {
    size_t n = (size_t)a.B * a.T, warps = (size_t)gridDim.x * blockDim.x / 32;
    int lane = threadIdx.x % 32;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; i < n; i += warps) {
        int k = (int)(i % a.T), moves = k > 0 && at[i] > a.layer;
        float w = bk_halt_act_weight(k, at[i], h[i], rem[i], &a);
        const float *g = dout + i * a.C;
        double dot = 0;
        for (int c = lane; c < a.C; c += 32) {
            if (moves) dot += (double)g[c] * (x[i * a.C + c] - xlast[i * a.C + c]);
            if (w != 0.0f) dx[i * a.C + c] += w * g[c];
        }
        if (!moves) continue;
        dot = warp_sum(dot);
        __syncwarp();
        if (lane == 0) dx[i * a.C] += (float)(a.gamma * h[i] * (1.0f - h[i]) * dot);
    }
}

extern "C" void bk_cuda_halt_act_backward(float *dx, const float *dout, const float *x,
                                          const float *xlast, const float *h, const int *at,
                                          const float *rem, const bk_halt_args *a) {
    size_t n = (size_t)a->B * a->T;
    if (n == 0) return;
    halt_act_backward_kernel<<<bk_blocks(n * 32, BK_THREADS), BK_THREADS>>>(dx, dout, x, xlast, h,
                                                                            at, rem, *a);
    CUDA_CHECK_LAUNCH();
}

/* The alignment in three steps: per-block partials of (n, sum of the
 * student's term, the teacher's, the binary KL); one thread turns their
 * totals into the loss and the coefficients coef = {n, den, d}; then the
 * gradient over the grid. */
__device__ void align_terms(size_t i, const float *t, const float *ht, const float *tcum,
                            const bk_halt_args *a, double *hs, double *p, double *ks, double *kt) {
    *hs = bk_halt_gate(t[i * a->C], a);
    *p = bk_halt_clamp_t(ht[i]);
    *ks = a->mean_h ? *hs : bk_halt_soft_keep(tcum[i], *hs, a);
    *kt = a->mean_h ? ht[i] : bk_halt_soft_keep(tcum[i], ht[i], a);
}

__global__ void halt_align_sums(double *part, const float *t, const float *ht, const float *tcum,
                                const float *mask, bk_halt_args a) {
    double v[HALT_SUMS] = {0, 0, 0, 0}; /* n, student, teacher, kl */
    size_t N = (size_t)a.B * a.T;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N;
         i += (size_t)gridDim.x * blockDim.x) {
        if (i % a.T == 0 || !(mask[i] > 0)) continue;
        double hs, p, ks, kt;
        align_terms(i, t, ht, tcum, &a, &hs, &p, &ks, &kt);
        v[0] += 1;
        v[1] += ks;
        v[2] += kt;
        v[3] += bk_halt_bkl(p, bk_halt_clamp_s(hs));
    }
    block_sums<HALT_SUMS>(v, part);
}

__global__ void halt_align_total(double *coef, double *stats, int slot, const double *part,
                                 int blocks, float weight, bk_halt_args a) {
    double s[HALT_SUMS];
    total_sums<HALT_SUMS>(part, blocks, s);
    double n = s[0], den = a.mean_h ? n : (double)a.B * (a.T - 1),
           d = n > 0 ? (s[1] - s[2]) / den : 0;
    coef[0] = n, coef[1] = den, coef[2] = d;
    if (n > 0 && stats) stats[slot] += weight * (s[3] / n + 5 * d * d);
}

__global__ void halt_align_grad(float *dt, const double *coef, const float *t, const float *ht,
                                const float *tcum, const float *mask, float weight,
                                bk_halt_args a) {
    double n = coef[0], den = coef[1], d = coef[2];
    if (n == 0) return;
    size_t N = (size_t)a.B * a.T;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < N;
         i += (size_t)gridDim.x * blockDim.x) {
        if (i % a.T == 0 || !(mask[i] > 0)) continue;
        double hs, p, ks, kt;
        align_terms(i, t, ht, tcum, &a, &hs, &p, &ks, &kt);
        double dk = a.mean_h ? 1.0 / den : -a.gamma * ks * (1 - ks) / den;
        double g = (hs - p) / n + 10 * d * dk * hs * (1 - hs);
        dt[i * a.C] += (float)(weight * a.gamma * g);
    }
}

extern "C" void bk_cuda_halt_align(float *dt, double *stats, int slot, const float *t,
                                   const float *ht, const float *tcum, const float *mask,
                                   float weight, const bk_halt_args *a) {
    size_t N = (size_t)a->B * a->T;
    if (N == 0) return;
    unsigned blocks = halt_blocks(N);
    double *part = (double *)bk_cuda_workspace(((size_t)blocks * HALT_SUMS + 3) * sizeof(double));
    double *coef = part + (size_t)blocks * HALT_SUMS;
    halt_align_sums<<<blocks, HALT_THREADS>>>(part, t, ht, tcum, mask, *a);
    CUDA_CHECK_LAUNCH();
    halt_align_total<<<1, 1>>>(coef, stats, slot, part, (int)blocks, weight, *a);
    CUDA_CHECK_LAUNCH();
    halt_align_grad<<<bk_blocks(N, BK_THREADS), BK_THREADS>>>(dt, coef, t, ht, tcum, mask, weight,
                                                              *a);
    CUDA_CHECK_LAUNCH();
}
