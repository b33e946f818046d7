/* CUDA: Mamba-2's SSD scan and its gated RMSNorm (contracts in kernels/bk.h
 * and kernels/bk_ops.def; the CPU backend's kernels/cpu_ssd.c runs the
 * chunked algorithm, this one the same recurrence token by token):
 *  - ssd: one block per (head, sample), thread j owning state column n = j
 *    (S[:, n], P values in the op's scratch); the sums over n (the output,
 *    dx) are warp shuffles whose per-warp partials thread p adds in warp
 *    order, the sums over p (dBm, dCm) are each thread's own. The forward saves the
 *    state entering each chunk of `chunk` active tokens, as the CPU's; the
 *    backward walks the chunks from the last, recomputes each chunk's
 *    per-token states into the backend's workspace
 *    ([B,H,chunk,P,N] floats) and runs dL/dS back. dBm, dCm (sums over the
 *    heads) and the parameter gradients go through per-(sample, head)
 *    partials added in order: results are reproducible.
 *  - rmsnorm_gated: one block per row; dw through bk_colsum_accumulate.
 * Not yet run on a GPU (tests/test_cuda_parity.c checks both against the
 * CPU's when one is present). */
#include <math.h>

#include "kernels/cuda/cuda_check.h"

static __device__ __forceinline__ float ssd_softplus(float u) {
    return u > 20.0f ? u : log1pf(expf(u));
}
static __device__ __forceinline__ float ssd_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static __device__ __forceinline__ bool ssd_active(const float *mask, int b, int T, int t) {
    return !mask || mask[(size_t)b * T + t] > 0.0f;
}
static inline int ssd_chunk(const bk_ssd_args *a) { return a->chunk > 0 ? a->chunk : BK_SSD_CHUNK; }
static inline unsigned ssd_threads(const bk_ssd_args *a) {
    int n = a->N > a->P ? a->N : a->P;
    return (unsigned)((n + 31) / 32 * 32);
}
/* Shared floats: per-warp partial sums [P, warps], x and dy of a token, one
 * float per thread. */
static inline size_t ssd_smem(const bk_ssd_args *a) {
    size_t warps = ssd_threads(a) / 32;
    return ((size_t)a->P * warps + 2 * (size_t)a->P + ssd_threads(a)) * sizeof(float);
}

static void ssd_require(const bk_ssd_args *a) {
    BK_CUDA_REQUIRE(a->P <= BK_SSD_MAX && a->N <= BK_SSD_MAX && ssd_chunk(a) <= BK_SSD_MAX,
                    "SSD head width, state size and chunk must be at most 1024");
    BK_CUDA_REQUIRE(ssd_smem(a) <= 48 * 1024,
                    "SSD head width x warps of max(head width, state) must be at most ~11k");
}

/* part[p * warps + warp] = the sum of v over the warp's 32 threads (every
 * thread of the block calls it with the same p). */
static __device__ __forceinline__ void ssd_warp_part(float *part, int p, float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) part[(size_t)p * (blockDim.x / 32) + threadIdx.x / 32] = v;
}

/* Thread p's row of part summed in warp order (after a __syncthreads). */
static __device__ __forceinline__ float ssd_part_sum(const float *part, int p) {
    float s = 0.0f;
    for (unsigned w = 0; w < blockDim.x / 32; w++) s += part[(size_t)p * (blockDim.x / 32) + w];
    return s;
}

/* The sum over threads of v (every thread passes its value), in thread
 * order, on every thread. red: one float per thread. */
static __device__ float ssd_block_sum(float *red, float v) {
    red[threadIdx.x] = v;
    __syncthreads();
    float s = 0.0f;
    for (unsigned k = 0; k < blockDim.x; k++) s += red[k];
    __syncthreads();
    return s;
}

__global__ void ssd_forward_kernel(float *out, float *states, float *Sbuf, bk_ssd_args a, int Q) {
    extern __shared__ float sm[];
    const int h = blockIdx.x, b = blockIdx.y, j = threadIdx.x, P = a.P, N = a.N, H = a.H;
    const int HP = H * P, nch = (a.T + Q - 1) / Q;
    float *part = sm, *xs = sm + (size_t)P * (blockDim.x / 32);
    float *S = Sbuf + ((size_t)b * H + h) * P * N; /* column j: S[p * N + j] */
    const float A = -expf(a.A_log[h]), Dh = a.Dskip ? a.Dskip[h] : 0.0f;
    if (j < N)
        for (int p = 0; p < P; p++) S[(size_t)p * N + j] = 0.0f;
    int k = 0; /* active tokens so far */
    for (int step = 0; step < a.T; step++) {
        int t = a.reverse ? a.T - 1 - step : step;
        size_t bt = (size_t)b * a.T + t;
        if (!ssd_active(a.mask, b, a.T, t)) {
            if (j < P) out[bt * HP + (size_t)h * P + j] = 0.0f;
            continue;
        }
        if (states && k % Q == 0 && j < N) {
            float *st = states + (((size_t)b * H + h) * nch + k / Q) * P * N;
            for (int p = 0; p < P; p++) st[(size_t)p * N + j] = S[(size_t)p * N + j];
        }
        k++;
        const float *row = a.x + bt * a.ld;
        if (j < P) xs[j] = row[(size_t)h * P + j];
        __syncthreads();
        float dt = ssd_softplus(a.dt[bt * H + h] + a.dt_bias[h]), dec = expf(dt * A);
        float bn = j < N ? a.Bm[bt * a.ld + j] : 0.0f, cn = j < N ? a.Cm[bt * a.ld + j] : 0.0f;
        for (int p = 0; p < P; p++) { /* every thread: the warp sums */
            float v = 0.0f;
            if (j < N) {
                float s = dec * S[(size_t)p * N + j] + dt * xs[p] * bn;
                S[(size_t)p * N + j] = s;
                v = s * cn;
            }
            ssd_warp_part(part, p, v);
        }
        __syncthreads();
        if (j < P) out[bt * HP + (size_t)h * P + j] = ssd_part_sum(part, j) + Dh * xs[j];
        __syncthreads();
    }
}

extern "C" void bk_cuda_ssd_forward(float *out, float *states, float *scratch,
                                    const bk_ssd_args *a) {
    if (a->B <= 0 || a->T <= 0 || a->H <= 0 || a->P <= 0 || a->N <= 0) return;
    ssd_require(a);
    dim3 grid((unsigned)a->H, (unsigned)a->B);
    ssd_forward_kernel<<<grid, ssd_threads(a), ssd_smem(a)>>>(out, states, scratch, *a,
                                                              ssd_chunk(a));
    CUDA_CHECK_LAUNCH();
}

/* part: [B,H,T,2N] dBm then dCm of this head per token; pg: [B,H,3] d
 * dt_bias, d A_log, d D; L: [B,H,P,N] dL/dS; Sw: [B,H,Q,P,N] the chunk's
 * states. */
__global__ void ssd_backward_kernel(bk_ssd_grads g, float *part, float *pg, float *L, float *Sw,
                                    const float *dout, const float *states, bk_ssd_args a, int Q) {
    extern __shared__ float sm[];
    const int h = blockIdx.x, b = blockIdx.y, j = threadIdx.x, P = a.P, N = a.N, H = a.H;
    const int HP = H * P, nch = (a.T + Q - 1) / Q, T = a.T;
    float *wpart = sm, *xs = sm + (size_t)P * (blockDim.x / 32), *dys = xs + P, *red = dys + P;
    size_t bh = (size_t)b * H + h;
    float *Lb = L + bh * P * N, *Sb = Sw + bh * (size_t)Q * P * N;
    float *pp = part + bh * T * 2 * N;
    const float A = -expf(a.A_log[h]), Dh = a.Dskip ? a.Dskip[h] : 0.0f;
    if (j < N)
        for (int p = 0; p < P; p++) Lb[(size_t)p * N + j] = 0.0f;
    int n_act = 0;
    for (int t = 0; t < T; t++) {
        if (ssd_active(a.mask, b, T, t)) {
            n_act++;
            continue;
        }
        size_t bt = (size_t)b * T + t;
        for (int c = j; c < 2 * N; c += blockDim.x) pp[(size_t)t * 2 * N + c] = 0.0f;
        if (j < P) g.dx[bt * a.ld + h * P + j] = 0.0f;
        if (j == 0) g.ddt[bt * H + h] = 0.0f;
    }
    float gbias = 0.0f, gA = 0.0f, gD = 0.0f;
    for (int ci = (n_act + Q - 1) / Q - 1; ci >= 0; ci--) {
        int c0 = ci * Q, q = n_act - c0 < Q ? n_act - c0 : Q;
        /* the chunk's tokens, in scan order: the first is the (c0+1)-th active */
        int first = -1, seen = 0;
        for (int step = 0; step < T && first < 0; step++) {
            int t = a.reverse ? T - 1 - step : step;
            if (ssd_active(a.mask, b, T, t) && seen++ == c0) first = step;
        }
        /* recompute S_i for i < q into Sb */
        const float *st = states + (bh * nch + ci) * P * N;
        int i = 0;
        for (int step = first; i < q; step++) {
            int t = a.reverse ? T - 1 - step : step;
            if (!ssd_active(a.mask, b, T, t)) continue;
            size_t bt = (size_t)b * T + t;
            float dt = ssd_softplus(a.dt[bt * H + h] + a.dt_bias[h]), dec = expf(dt * A);
            if (j < N) {
                float bn = a.Bm[bt * a.ld + j];
                const float *prev = i ? Sb + (size_t)(i - 1) * P * N : st;
                for (int p = 0; p < P; p++)
                    Sb[((size_t)i * P + p) * N + j] =
                        dec * prev[(size_t)p * N + j] + dt * a.x[bt * a.ld + h * P + p] * bn;
            }
            i++;
        }
        /* walk it back: i = q-1 .. 0 */
        int step = first;
        for (int c = 0; c < q - 1;) { /* step of the last token of the chunk */
            step++;
            int t = a.reverse ? T - 1 - step : step;
            c += ssd_active(a.mask, b, T, t);
        }
        for (i = q - 1; i >= 0; i--) {
            int t = a.reverse ? T - 1 - step : step;
            size_t bt = (size_t)b * T + t;
            float pre = a.dt[bt * H + h] + a.dt_bias[h];
            float dt = ssd_softplus(pre), dec = expf(dt * A);
            if (j < P) {
                xs[j] = a.x[bt * a.ld + h * P + j];
                dys[j] = dout[bt * HP + (size_t)h * P + j];
            }
            __syncthreads();
            const float *Si = Sb + (size_t)i * P * N;
            const float *Sp = i ? Sb + (size_t)(i - 1) * P * N : st;
            float dC = 0.0f, dB = 0.0f, z = 0.0f;
            float bn = j < N ? a.Bm[bt * a.ld + j] : 0.0f, cn = j < N ? a.Cm[bt * a.ld + j] : 0.0f;
            for (int p = 0; p < P; p++) { /* every thread: the warp sums */
                float v = 0.0f;
                if (j < N) {
                    float l = Lb[(size_t)p * N + j] + dys[p] * cn;
                    Lb[(size_t)p * N + j] = l;
                    dC += Si[(size_t)p * N + j] * dys[p];
                    dB += xs[p] * l;
                    z += l * Sp[(size_t)p * N + j];
                    v = l * bn;
                }
                ssd_warp_part(wpart, p, v);
            }
            if (j < N) {
                pp[(size_t)t * 2 * N + j] = dt * dB;
                pp[(size_t)t * 2 * N + N + j] = dC;
            }
            __syncthreads();
            float lb = 0.0f; /* (L B)_p for p = j */
            if (j < P) {
                lb = ssd_part_sum(wpart, j);
                g.dx[bt * a.ld + h * P + j] = dt * lb + Dh * dys[j];
            }
            float Z = ssd_block_sum(red, z);
            float xlb = ssd_block_sum(red, j < P ? xs[j] * lb : 0.0f);
            float xdy = ssd_block_sum(red, j < P ? xs[j] * dys[j] : 0.0f);
            float ddt = xlb + A * dec * Z, dpre = ddt * ssd_sigmoid(pre);
            if (j == 0) g.ddt[bt * H + h] = dpre;
            gbias += dpre;
            gA += dt * dec * Z;
            gD += xdy;
            if (j < N)
                for (int p = 0; p < P; p++) Lb[(size_t)p * N + j] *= dec;
            __syncthreads();
            /* the previous active token */
            if (i > 0) do {
                    step--;
                    t = a.reverse ? T - 1 - step : step;
                } while (!ssd_active(a.mask, b, T, t));
        }
    }
    if (j == 0) {
        pg[bh * 3] = gbias;
        pg[bh * 3 + 1] = gA * A; /* dA/dA_log = A */
        pg[bh * 3 + 2] = gD;
    }
}

/* dBm, dCm rows: the heads' partials added in head order (masked rows 0). */
__global__ void ssd_bc_reduce_kernel(bk_ssd_grads g, const float *part, bk_ssd_args a) {
    size_t total = (size_t)a.B * a.T * 2 * a.N;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t bt = e / (2 * a.N);
        int c = (int)(e % (2 * a.N));
        size_t b = bt / a.T, t = bt % a.T;
        float s = 0.0f;
        for (int h = 0; h < a.H; h++) s += part[(((size_t)b * a.H + h) * a.T + t) * 2 * a.N + c];
        if (c < a.N)
            g.dBm[bt * a.ld + c] = s;
        else
            g.dCm[bt * a.ld + c - a.N] = s;
    }
}

/* The parameter gradients: partials added over samples in order. */
__global__ void ssd_param_reduce_kernel(bk_ssd_grads g, const float *pg, int B, int H) {
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= H) return;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f;
    for (int b = 0; b < B; b++) {
        const float *q = pg + ((size_t)b * H + h) * 3;
        s0 += q[0], s1 += q[1], s2 += q[2];
    }
    if (g.ddt_bias) g.ddt_bias[h] += s0;
    if (g.dA_log) g.dA_log[h] += s1;
    if (g.dDskip) g.dDskip[h] += s2;
}

extern "C" void bk_cuda_ssd_backward(const bk_ssd_grads *g, float *scratch, const float *dout,
                                     const float *states, const bk_ssd_args *a) {
    (void)scratch;
    if (a->B <= 0 || a->T <= 0 || a->H <= 0 || a->P <= 0 || a->N <= 0) return;
    ssd_require(a);
    int Q = ssd_chunk(a);
    size_t BH = (size_t)a->B * a->H, PN = (size_t)a->P * a->N;
    size_t n_part = BH * a->T * 2 * a->N, n_pg = BH * 3, n_L = BH * PN, n_S = BH * Q * PN;
    float *ws = (float *)bk_cuda_workspace((n_part + n_pg + n_L + n_S) * sizeof(float));
    float *part = ws, *pg = part + n_part, *L = pg + n_pg, *Sw = L + n_L;
    dim3 grid((unsigned)a->H, (unsigned)a->B);
    ssd_backward_kernel<<<grid, ssd_threads(a), ssd_smem(a)>>>(*g, part, pg, L, Sw, dout, states,
                                                               *a, Q);
    CUDA_CHECK_LAUNCH();
    size_t total = (size_t)a->B * a->T * 2 * a->N;
    ssd_bc_reduce_kernel<<<bk_blocks(total, BK_THREADS), BK_THREADS>>>(*g, part, *a);
    CUDA_CHECK_LAUNCH();
    ssd_param_reduce_kernel<<<1, (unsigned)((a->H + 31) / 32 * 32)>>>(*g, pg, a->B, a->H);
    CUDA_CHECK_LAUNCH();
}

/* ---- gated RMSNorm ---- */

#define RMS_THREADS 256
#define RMS_EPS 1e-5f

/* The sum of v over the block's RMS_THREADS threads, in a fixed order. */
static __device__ float rms_block_sum(float *red, float v) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = RMS_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

__global__ void rmsnorm_gated_forward_kernel(float *out, float *rstd, const float *y,
                                             const float *z, const float *w, int C) {
    __shared__ float red[RMS_THREADS];
    size_t n = blockIdx.x;
    const float *yr = y + n * C, *zr = z + n * C;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += RMS_THREADS) {
        float gc = yr[c] * zr[c] * ssd_sigmoid(zr[c]);
        ss += gc * gc;
    }
    float r = rsqrtf(rms_block_sum(red, ss) / (float)C + RMS_EPS);
    if (rstd && threadIdx.x == 0) rstd[n] = r;
    for (int c = threadIdx.x; c < C; c += RMS_THREADS)
        out[n * C + c] = yr[c] * zr[c] * ssd_sigmoid(zr[c]) * r * w[c];
}

__global__ void rmsnorm_gated_backward_kernel(float *dy, float *dz, const float *dout,
                                              const float *y, const float *z, const float *w,
                                              const float *rstd, int C) {
    __shared__ float red[RMS_THREADS];
    size_t n = blockIdx.x;
    const float *yr = y + n * C, *zr = z + n * C, *dr = dout + n * C;
    float r = rstd[n], dot = 0.0f;
    for (int c = threadIdx.x; c < C; c += RMS_THREADS)
        dot += w[c] * dr[c] * yr[c] * zr[c] * ssd_sigmoid(zr[c]);
    float k = r * r * r * rms_block_sum(red, dot) / (float)C;
    for (int c = threadIdx.x; c < C; c += RMS_THREADS) {
        float sg = ssd_sigmoid(zr[c]), silu = zr[c] * sg;
        float dg = r * w[c] * dr[c] - yr[c] * silu * k;
        dy[n * C + c] = dg * silu;
        dz[n * C + c] = dg * yr[c] * sg * (1.0f + zr[c] * (1.0f - sg));
    }
}

/* f = dout * y SiLU(z) * rstd: dw's terms */
struct rms_col_dw {
    const float *dout, *y, *z, *rstd;
    int C;
    __device__ float operator()(int n, int c) const {
        size_t i = (size_t)n * C + c;
        return dout[i] * y[i] * z[i] * ssd_sigmoid(z[i]) * rstd[n];
    }
};

extern "C" void bk_cuda_rmsnorm_gated_forward(float *out, float *rstd, const float *y,
                                              const float *z, const float *w, int N, int C) {
    if (N <= 0 || C <= 0) return;
    rmsnorm_gated_forward_kernel<<<(unsigned)N, RMS_THREADS>>>(out, rstd, y, z, w, C);
    CUDA_CHECK_LAUNCH();
}

extern "C" void bk_cuda_rmsnorm_gated_backward(float *dy, float *dz, float *dw, const float *dout,
                                               const float *y, const float *z, const float *w,
                                               const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    rmsnorm_gated_backward_kernel<<<(unsigned)N, RMS_THREADS>>>(dy, dz, dout, y, z, w, rstd, C);
    CUDA_CHECK_LAUNCH();
    bk_colsum_accumulate(dw, rms_col_dw{dout, y, z, rstd, C}, N, C);
}
