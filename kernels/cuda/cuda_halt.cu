/* A-ViT token halting on the device: the same formulas as kernels/cpu_halt.c.
 * halt_forward runs as one block so its sums have one fixed order (a few
 * thousand tokens per layer: the gate is not where the time goes). */
#include <math.h>

#include "kernels/cuda/cuda_check.h"

#define HALT_THREADS 256

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

__global__ void halt_forward_kernel(float *h, float *next, float *cum, float *rem, int *at,
                                    double *hstats, const float *t, const float *mask,
                                    bk_halt_args a) {
    __shared__ double sp[HALT_THREADS], sk[HALT_THREADS], sr[HALT_THREADS];
    int L = a.layers, l = a.layer, last = l == L - 1;
    double psum = 0, keep = 0, rsum = 0;
    size_t n = (size_t)a.B * a.T;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
        int k = (int)(i % a.T);
        if (!(mask[i] > 0)) {
            h[i] = 0;
            next[i] = 0;
            continue;
        }
        if (k == 0) {
            h[i] = 0;
            next[i] = 1;
            continue;
        }
        float hv = last ? 1.0f : 1.0f / (1.0f + expf(-(a.gamma * t[i * a.C] - a.centre)));
        h[i] = hv;
        keep += 1;
        cum[i] += hv;
        if (cum[i] >= 1.0f - a.eps) {
            at[i] = l;
            next[i] = 0;
            psum += rem[i];
            rsum += rem[i];
        } else {
            rem[i] -= hv;
            next[i] = 1;
            psum += hv;
        }
    }
    sp[threadIdx.x] = psum;
    sk[threadIdx.x] = keep;
    sr[threadIdx.x] = rsum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            sp[threadIdx.x] += sp[threadIdx.x + s];
            sk[threadIdx.x] += sk[threadIdx.x + s];
            sr[threadIdx.x] += sr[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0 && hstats) {
        hstats[l] += sp[0];
        hstats[L + l] += sk[0];
        hstats[2 * L] += sr[0];
    }
}

extern "C" void bk_cuda_halt_forward(float *h, float *next, float *cum, float *rem, int *at,
                                     double *hstats, const float *t, const float *mask,
                                     const bk_halt_args *a) {
    halt_forward_kernel<<<1, HALT_THREADS>>>(h, next, cum, rem, at, hstats, t, mask, *a);
    CUDA_CHECK_LAUNCH();
}

__global__ void halt_loss_kernel(double *stats, float *dldp, const double *hstats,
                                 bk_halt_loss_args a) {
    int L = a.layers;
    double S = 0, Z = 0, keep = 0, kl = 0;
    for (int l = 0; l < L; l++) {
        S += hstats[l];
        keep += hstats[L + l];
        double d = (l - a.centre_depth) / a.sigma;
        Z += exp(-0.5 * d * d);
    }
    double n = a.tokens > 0 ? a.tokens : 1, tiny = 1e-12;
    for (int l = 0; l < L; l++) {
        double d = (l - a.centre_depth) / a.sigma, pi = exp(-0.5 * d * d) / Z;
        double s = hstats[l] > tiny ? hstats[l] : tiny, Sq = S > tiny ? S : tiny;
        kl += pi > 0 ? pi * log(pi / (s / Sq)) : 0;
        dldp[l] = (float)(a.prior_weight * (-pi / s + 1.0 / Sq));
    }
    if (stats) {
        stats[a.slot_ponder] += a.ponder_weight * (keep + hstats[2 * L]) / n;
        stats[a.slot_prior] += a.prior_weight * kl;
        stats[a.slot_keep] += keep / (n * L);
    }
}

extern "C" void bk_cuda_halt_loss(double *stats, float *dldp, const double *hstats,
                                  const bk_halt_loss_args *a) {
    halt_loss_kernel<<<1, 1>>>(stats, dldp, hstats, *a);
    CUDA_CHECK_LAUNCH();
}

__global__ void halt_backward_kernel(float *dt, const float *h, const int *at, const float *dldp,
                                     float pgrad, bk_halt_args a) {
    size_t n = (size_t)a.B * a.T;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (i % a.T == 0 || at[i] <= a.layer) continue;
        float hv = h[i], g = dldp[a.layer] - dldp[at[i]] + pgrad;
        dt[i * a.C] += a.gamma * hv * (1.0f - hv) * g;
    }
}

extern "C" void bk_cuda_halt_backward(float *dt, const float *h, const int *at, const float *dldp,
                                      float pgrad, const bk_halt_args *a) {
    size_t n = (size_t)a->B * a->T;
    if (n == 0) return;
    halt_backward_kernel<<<bk_blocks(n, BK_THREADS), BK_THREADS>>>(dt, h, at, dldp, pgrad, *a);
    CUDA_CHECK_LAUNCH();
}

/* One block: the means first, then the gradient (fixed summation order). */
__global__ void halt_align_kernel(float *dt, double *stats, int slot, const float *t,
                                  const float *ht, const float *mask, float weight,
                                  bk_halt_args a) {
    __shared__ double sn[HALT_THREADS], ss[HALT_THREADS], st[HALT_THREADS], sk[HALT_THREADS];
    double n = 0, ms = 0, mt = 0, kl = 0;
    size_t N = (size_t)a.B * a.T;
    for (size_t i = threadIdx.x; i < N; i += blockDim.x) {
        if (i % a.T == 0 || !(mask[i] > 0)) continue;
        double hs = 1.0f / (1.0f + expf(-(a.gamma * t[i * a.C] - a.centre))), p = ht[i];
        p = p < 1e-6 ? 1e-6 : p > 1 - 1e-6 ? 1 - 1e-6 : p;
        double q = hs < 1e-12 ? 1e-12 : hs > 1 - 1e-12 ? 1 - 1e-12 : hs;
        kl += p * log(p / q) + (1 - p) * log((1 - p) / (1 - q));
        ms += hs;
        mt += ht[i];
        n += 1;
    }
    sn[threadIdx.x] = n, ss[threadIdx.x] = ms, st[threadIdx.x] = mt, sk[threadIdx.x] = kl;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            sn[threadIdx.x] += sn[threadIdx.x + s];
            ss[threadIdx.x] += ss[threadIdx.x + s];
            st[threadIdx.x] += st[threadIdx.x + s];
            sk[threadIdx.x] += sk[threadIdx.x + s];
        }
        __syncthreads();
    }
    n = sn[0];
    if (n == 0) return;
    ms = ss[0] / n, mt = st[0] / n;
    if (threadIdx.x == 0 && stats) stats[slot] += weight * (sk[0] / n + 5 * (ms - mt) * (ms - mt));
    for (size_t i = threadIdx.x; i < N; i += blockDim.x) {
        if (i % a.T == 0 || !(mask[i] > 0)) continue;
        double hs = 1.0f / (1.0f + expf(-(a.gamma * t[i * a.C] - a.centre))), p = ht[i];
        p = p < 1e-6 ? 1e-6 : p > 1 - 1e-6 ? 1 - 1e-6 : p;
        double g = (hs - p) / n + 10 * (ms - mt) * hs * (1 - hs) / n;
        dt[i * a.C] += (float)(weight * a.gamma * g);
    }
}

extern "C" void bk_cuda_halt_align(float *dt, double *stats, int slot, const float *t,
                                   const float *ht, const float *mask, float weight,
                                   const bk_halt_args *a) {
    halt_align_kernel<<<1, HALT_THREADS>>>(dt, stats, slot, t, ht, mask, weight, *a);
    CUDA_CHECK_LAUNCH();
}
