/* CUDA: the sequence-mixer ops (depthwise conv1d, Mamba-1 selective scan,
 * LSTM recurrence), same contracts as kernels/bk.h and the same plans as the
 * CPU backend (kernels/cpu_mixer.c):
 *  - conv: one thread per (sample, token, channel) for out and dx (the
 *    window of each token found by walking back over the mask); dw/dbias
 *    through per-sample partials in scratch (token segments added in order
 *    in shared memory), added over samples in order.
 *  - scan: parallel over time inside each chunk as well as over (sample,
 *    channel): a block scan of the step h = a h + u over segments of the
 *    chunk, carried chunk to chunk (see scan_forward_kernel), the forward
 *    saving the state at every chunk end; the backward walks the chunks
 *    from the last, recomputes each chunk's states from the saved one and
 *    runs the state gradient's recurrence as the same kind of scan,
 *    backwards (scan_backward_kernel). dBm/dCm, sums over the group's
 *    channels, are reduced with warp shuffles and added in a fixed order
 *    with no atomics, so results are reproducible. Parameter gradients go
 *    through per-sample partials like the CPU's.
 *  - lstm: one block per (sample, stream), one thread per gate row; h and
 *    the gates of a step in shared memory.
 * Neither scan kernel has run on a GPU yet (tests/test_cuda_parity.c
 * checks both against the CPU's when one is present). */
#include <limits.h>
#include <math.h>

#include "kernels/cuda/cuda_check.h"

#define MIX_NMAX BK_SCAN_MAX_N
#define MIX_L BK_SCAN_CHUNK
#define MIX_KMAX BK_CONV_MAX_K

static __device__ __forceinline__ float mix_softplus(float u) {
    return u > 20.0f ? u : log1pf(expf(u));
}
static __device__ __forceinline__ float mix_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static __device__ __forceinline__ bool mix_masked(const float *mask, int b, int T, int t) {
    return mask && mask[(size_t)b * T + t] == 0.0f;
}
static inline unsigned round_warp(int n) { return (unsigned)((n + 31) / 32 * 32); }

/* ---- conv1d ----
 * Not a recurrence: token t's output reads x at t and at the K-1 nearest
 * earlier active tokens (in the direction of a.reverse), so every op is
 * parallel over (sample, token, channel), channels fastest (coalesced).
 * The window is found by walking back over the mask (at most K-1 active
 * tokens, plus the masked ones between them). Taps are indexed by the
 * unrolled m (compile-time) in registers; only global w is read at a runtime
 * tap index, so no kernel has a stack frame. */

static __device__ __forceinline__ int conv_pos(const bk_conv_args &a, int s) {
    return a.reverse ? a.T - 1 - s : s;
}

/* win[m], wt[m] (m < K-1): x and position of the (m+1)-th earlier active
 * token before processing step s (wt -1: none). */
static __device__ __forceinline__ void conv_window(const bk_conv_args &a, const float *x, int b,
                                                   int s, int c, float *win, int *wt) {
    int j = s;
#pragma unroll
    for (int m = 0; m < MIX_KMAX - 1; m++) {
        win[m] = 0.0f;
        wt[m] = -1;
        if (m < a.K - 1) {
            while (--j >= 0)
                if (!mix_masked(a.mask, b, a.T, conv_pos(a, j))) break;
            if (j >= 0) {
                wt[m] = conv_pos(a, j);
                win[m] = x[((size_t)b * a.T + wt[m]) * a.C + c];
            }
        }
    }
}

/* The pre-activation at (b, position t, c), given its window; the sum in
 * the order of the CPU's and the former kernel's: bias, tap K-1, then the
 * earlier tokens nearest first. */
static __device__ __forceinline__ float conv_pre_at(const bk_conv_args &a, const float *x,
                                                    const float *w, const float *bias, int b, int t,
                                                    int c, const float *win, const int *wt) {
    const float *wc = w + (size_t)c * a.K;
    float pre = (bias ? bias[c] : 0.0f) + wc[a.K - 1] * x[((size_t)b * a.T + t) * a.C + c];
#pragma unroll
    for (int m = 0; m < MIX_KMAX - 1; m++)
        if (wt[m] >= 0) pre += wc[a.K - 2 - m] * win[m];
    return pre;
}

/* d loss / d pre at processing step s (0 for a masked token). */
static __device__ float conv_gp(const bk_conv_args &a, const float *dout, const float *x,
                                const float *w, const float *bias, int b, int s, int c) {
    int t = conv_pos(a, s);
    if (mix_masked(a.mask, b, a.T, t)) return 0.0f;
    float gp = dout[((size_t)b * a.T + t) * a.C + c];
    if (a.silu) {
        float win[MIX_KMAX - 1];
        int wt[MIX_KMAX - 1];
        conv_window(a, x, b, s, c, win, wt);
        float pre = conv_pre_at(a, x, w, bias, b, t, c, win, wt), sg = mix_sigmoid(pre);
        gp *= sg * (1.0f + pre * (1.0f - sg));
    }
    return gp;
}

/* out[b,t,c], one thread per element (grid-stride: bk_blocks caps the grid) */
__global__ void conv_forward_kernel(float *out, const float *x, const float *w, const float *bias,
                                    bk_conv_args a) {
    const size_t n = (size_t)a.B * a.T * a.C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % a.C), t = (int)(i / a.C % a.T), b = (int)(i / ((size_t)a.C * a.T));
        if (mix_masked(a.mask, b, a.T, t)) {
            out[i] = 0.0f;
            continue;
        }
        const int s = a.reverse ? a.T - 1 - t : t;
        float win[MIX_KMAX - 1];
        int wt[MIX_KMAX - 1];
        conv_window(a, x, b, s, c, win, wt);
        float pre = conv_pre_at(a, x, w, bias, b, t, c, win, wt);
        out[i] = a.silu ? pre * mix_sigmoid(pre) : pre;
    }
}

/* dx[b,t,c] += w[K-1] gp(t) + sum_m w[K-2-m] gp(m-th later active token):
 * a gather (each thread writes only its own element), no atomics. With
 * a.dx_overwrite, dx = (that sum) + 0 and 0 at masked tokens. */
__global__ void conv_backward_dx_kernel(float *dx, const float *dout, const float *x,
                                        const float *w, const float *bias, bk_conv_args a) {
    const size_t n = (size_t)a.B * a.T * a.C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % a.C), t = (int)(i / a.C % a.T), b = (int)(i / ((size_t)a.C * a.T));
        if (mix_masked(a.mask, b, a.T, t)) { /* a skipped token receives no gradient */
            if (a.dx_overwrite) dx[i] = 0.0f;
            continue;
        }
        const int s = a.reverse ? a.T - 1 - t : t;
        const float *wc = w + (size_t)c * a.K;
        float acc = wc[a.K - 1] * conv_gp(a, dout, x, w, bias, b, s, c);
        int j = s;
#pragma unroll
        for (int m = 0; m < MIX_KMAX - 1; m++) {
            if (m < a.K - 1) {
                while (++j < a.T)
                    if (!mix_masked(a.mask, b, a.T, conv_pos(a, j))) break;
                if (j < a.T) acc += wc[a.K - 2 - m] * conv_gp(a, dout, x, w, bias, b, j, c);
            }
        }
        dx[i] = a.dx_overwrite ? acc + 0.0f : dx[i] + acc;
    }
}

/* part[b,c,k] = sum_t gp(t) x(tap k of t), part[b,c,K] = sum_t gp(t): one
 * block per (sample, 32 channels), CONV_SEGS token segments per channel
 * summed in registers, then the segments added in order in shared memory
 * (reproducible). */
#define CONV_SEGS 8
__global__ void conv_backward_part_kernel(float *part, const float *dout, const float *x,
                                          const float *w, const float *bias, bk_conv_args a) {
    __shared__ float sh[CONV_SEGS][MIX_KMAX + 1][32];
    const int lane = threadIdx.x, seg = threadIdx.y, b = blockIdx.y;
    const int c = blockIdx.x * 32 + lane;
    float dwm[MIX_KMAX - 1], dwl = 0.0f, db = 0.0f;
#pragma unroll
    for (int m = 0; m < MIX_KMAX - 1; m++) dwm[m] = 0.0f;
    if (c < a.C)
        for (int s = seg; s < a.T; s += CONV_SEGS) {
            int t = conv_pos(a, s);
            if (mix_masked(a.mask, b, a.T, t)) continue;
            float win[MIX_KMAX - 1];
            int wt[MIX_KMAX - 1];
            conv_window(a, x, b, s, c, win, wt);
            size_t i = ((size_t)b * a.T + t) * a.C + c;
            float gp = dout[i];
            if (a.silu) {
                float pre = conv_pre_at(a, x, w, bias, b, t, c, win, wt), sg = mix_sigmoid(pre);
                gp *= sg * (1.0f + pre * (1.0f - sg));
            }
            db += gp;
            dwl += gp * x[i];
#pragma unroll
            for (int m = 0; m < MIX_KMAX - 1; m++)
                if (wt[m] >= 0) dwm[m] += gp * win[m];
        }
        /* slot k of sh: tap k; taps K-2-m come from dwm[m], K-1 from dwl, K the bias */
#pragma unroll
    for (int m = 0; m < MIX_KMAX - 1; m++) sh[seg][m][lane] = dwm[m];
    sh[seg][MIX_KMAX - 1][lane] = dwl;
    sh[seg][MIX_KMAX][lane] = db;
    __syncthreads();
    if (c >= a.C) return;
    /* the 8 + 1 slots over the segments: thread (lane, seg) sums slot seg (and seg 0 slot 8) */
    for (int q = seg; q <= MIX_KMAX; q += CONV_SEGS) {
        float v = 0.0f;
        for (int g = 0; g < CONV_SEGS; g++) v += sh[g][q][lane];
        int k = q == MIX_KMAX ? a.K : q == MIX_KMAX - 1 ? a.K - 1 : a.K - 2 - q;
        if (q < MIX_KMAX - 1 && q >= a.K - 1) continue; /* no such tap */
        part[((size_t)b * a.C + c) * (a.K + 1) + k] = v;
    }
}

/* dw[c,k] += sum_b part[b,c,k], dbias[c] += sum_b part[b,c,K] */
__global__ void conv_param_reduce_kernel(float *dw, float *dbias, const float *part, int B, int C,
                                         int K) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < (size_t)C * (K + 1);
         e += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(e / (K + 1)), k = (int)(e % (K + 1));
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += part[((size_t)b * C + c) * (K + 1) + k];
        if (k < K) {
            if (dw) dw[(size_t)c * K + k] += s;
        } else if (dbias) {
            dbias[c] += s;
        }
    }
}

extern "C" void bk_cuda_conv1d_forward(float *out, const float *x, const float *w,
                                       const float *bias, const bk_conv_args *a) {
    if (a->B <= 0 || a->T <= 0 || a->C <= 0) return;
    BK_CUDA_REQUIRE(a->K >= 1 && a->K <= BK_CONV_MAX_K, "conv width K must be in [1, 8]");
    size_t n = (size_t)a->B * a->T * a->C;
    conv_forward_kernel<<<bk_blocks(n, BK_THREADS), BK_THREADS>>>(out, x, w, bias, *a);
    CUDA_CHECK_LAUNCH();
}

extern "C" void bk_cuda_conv1d_backward(float *dx, float *dw, float *dbias, float *scratch,
                                        const float *dout, const float *x, const float *w,
                                        const float *bias, const bk_conv_args *a) {
    if (a->B <= 0 || a->T <= 0 || a->C <= 0 || (!dx && !dw && !dbias)) return;
    BK_CUDA_REQUIRE(a->K >= 1 && a->K <= BK_CONV_MAX_K, "conv width K must be in [1, 8]");
    float *part = (dw || dbias) ? scratch : NULL;
    if (dx) {
        size_t n = (size_t)a->B * a->T * a->C;
        conv_backward_dx_kernel<<<bk_blocks(n, BK_THREADS), BK_THREADS>>>(dx, dout, x, w, bias, *a);
        CUDA_CHECK_LAUNCH();
    }
    if (!part) return;
    BK_CUDA_REQUIRE(a->B <= 65535, "conv backward: batch above 65535 (the grid's y)");
    dim3 grid((unsigned)((a->C + 31) / 32), (unsigned)a->B), block(32, CONV_SEGS);
    conv_backward_part_kernel<<<grid, block>>>(part, dout, x, w, bias, *a);
    CUDA_CHECK_LAUNCH();
    size_t np = (size_t)a->C * (a->K + 1);
    conv_param_reduce_kernel<<<bk_blocks(np, BK_THREADS), BK_THREADS>>>(dw, dbias, part, a->B, a->C,
                                                                        a->K);
    CUDA_CHECK_LAUNCH();
}

/* ---- selective scan ---- */

struct scan_dev { /* bk_scan_args by value, plus derived sizes */
    bk_scan_args a;
    int Dg, bcs, nch;
};

static scan_dev scan_dev_make(const bk_scan_args *a) {
    scan_dev s;
    s.a = *a;
    s.Dg = a->D / a->G;
    s.bcs = a->bc_stride ? a->bc_stride : a->N;
    s.nch = (a->T + MIX_L - 1) / MIX_L;
    return s;
}

static void scan_require(const bk_scan_args *a) {
    BK_CUDA_REQUIRE(a->G >= 1 && a->D % a->G == 0, "G must divide D");
    BK_CUDA_REQUIRE(a->D / a->G <= 1024, "at most 1024 channels per group");
    BK_CUDA_REQUIRE(a->N >= 1 && a->N <= BK_SCAN_MAX_N, "state size N must be in [1, 16]");
    BK_CUDA_REQUIRE(!a->delta_w || (a->dlow && a->R >= 1 && a->R <= BK_SCAN_MAX_R),
                    "delta_w needs dlow and R in [1, 32]");
    long long bcs = a->bc_stride ? a->bc_stride : a->N;
    BK_CUDA_REQUIRE((long long)a->T * a->G * bcs < INT_MAX,
                    "one sample's Bm/Cm rows must hold fewer than 2^31 floats");
}

/* The forward, parallel over time as well as channels. A block is a tile of
 * 32 channels of one group (the lanes, so each load of a token row is one
 * coalesced line; the tokens' Bm/Cm rows are the same for the whole warp)
 * by SCAN_W warps. Time goes chunk by chunk (BK_SCAN_CHUNK steps, the
 * chunks whose end states the backward restarts from); a chunk is cut into
 * SCAN_W segments of SCAN_I consecutive steps, one per warp. Per state n
 * the step is h = a h + u (a = exp(dt A_n), u = dt x B_n; a masked or
 * missing step is a = 1, u = 0), and steps compose: (a2, u2) after (a1, u1)
 * is (a2 a1, a2 u1 + u2). Each thread composes its segment into (a, u), the
 * segments meet in shared memory, each thread applies those before its own
 * to the chunk's carried state and walks its segment from there for the
 * outputs; applying all of them gives the chunk's end state: the next
 * carry, saved for the backward. Two block syncs per chunk; the exps are
 * computed twice (composing, walking) rather than held in registers. */
#define SCAN_W 8
#define SCAN_I (MIX_L / SCAN_W)
static_assert(MIX_L % SCAN_W == 0, "a chunk splits into SCAN_W equal segments");

__global__ void __launch_bounds__(32 * SCAN_W)
    scan_forward_kernel(float *out, float *states, scan_dev p) {
    const bk_scan_args &a = p.a;
    const int tiles = (p.Dg + 31) / 32, g = blockIdx.x / tiles, b = blockIdx.y;
    const int lane = threadIdx.x, w = threadIdx.y, cl = (blockIdx.x % tiles) * 32 + lane;
    const bool valid = cl < p.Dg; /* invalid lanes still reach every sync */
    const int c = g * p.Dg + (valid ? cl : 0), T = a.T, D = a.D, G = a.G, N = a.N;
    __shared__ float sa[MIX_NMAX][SCAN_W][32], su[MIX_NMAX][SCAN_W][32];
    float A[MIX_NMAX], carry[MIX_NMAX];
#pragma unroll
    for (int n = 0; n < MIX_NMAX; n++) {
        A[n] = valid && n < N ? -expf(a.A_log[(size_t)c * N + n]) : 0.0f;
        carry[n] = 0.0f;
    }
    const float Dv = valid && a.Dskip ? a.Dskip[c] : 0.0f;
    const float bias = valid && a.delta_bias ? a.delta_bias[c] : 0.0f;
    /* this sample's Bm/Cm/dlow rows; offsets within a sample fit 32 bits */
    const size_t bbase = (size_t)b * T * G * p.bcs;
    const float *Bm = a.Bm + bbase, *Cm = a.Cm + bbase;
    for (int s0 = 0; s0 < T; s0 += MIX_L) {
        float dt[SCAN_I], dtx[SCAN_I], y[SCAN_I];
        unsigned bc[SCAN_I];
        bool on[SCAN_I];
#pragma unroll
        for (int i = 0; i < SCAN_I; i++) {
            const int s = s0 + w * SCAN_I + i, t = a.reverse ? T - 1 - s : s;
            on[i] = valid && s < T && !mix_masked(a.mask, b, T, t);
            dt[i] = dtx[i] = y[i] = 0.0f;
            bc[i] = 0;
            if (!on[i]) continue;
            const size_t row = ((size_t)b * T + t) * D + c;
            bc[i] = (unsigned)((t * G + g) * p.bcs);
            float pre;
            if (a.delta_w) { /* W_delta dlow inside, in r order */
                const float *dl = a.dlow + bbase + bc[i];
                pre = a.delta_w[(size_t)c * a.R] * __ldg(dl);
                for (int r = 1; r < a.R; r++) pre += a.delta_w[(size_t)c * a.R + r] * __ldg(dl + r);
            } else {
                pre = a.delta[row];
            }
            const float x = a.x[row];
            dt[i] = mix_softplus(pre + bias);
            dtx[i] = dt[i] * x;
            y[i] = Dv * x;
        }
#pragma unroll
        for (int n = 0; n < MIX_NMAX; n++)
            if (n < N) { /* this segment composed */
                float pa = 1.0f, pu = 0.0f;
#pragma unroll
                for (int i = 0; i < SCAN_I; i++)
                    if (on[i]) {
                        float e = expf(dt[i] * A[n]);
                        pa *= e;
                        pu = e * pu + dtx[i] * __ldg(Bm + bc[i] + n);
                    }
                sa[n][w][lane] = pa;
                su[n][w][lane] = pu;
            }
        __syncthreads();
#pragma unroll
        for (int n = 0; n < MIX_NMAX; n++)
            if (n < N) {
                float run = carry[n], h = 0.0f;
#pragma unroll
                for (int wi = 0; wi < SCAN_W; wi++) {
                    if (wi == w) h = run; /* the state before this segment */
                    run = sa[n][wi][lane] * run + su[n][wi][lane];
                }
                carry[n] = run;
#pragma unroll
                for (int i = 0; i < SCAN_I; i++)
                    if (on[i]) {
                        h = expf(dt[i] * A[n]) * h + dtx[i] * __ldg(Bm + bc[i] + n);
                        y[i] += __ldg(Cm + bc[i] + n) * h;
                    }
            }
        if (states && valid && w == 0) { /* the state after the chunk's last step */
            float *sp = states + (((size_t)b * D + c) * p.nch + s0 / MIX_L) * N;
#pragma unroll
            for (int n = 0; n < MIX_NMAX; n++)
                if (n < N) sp[n] = carry[n];
        }
#pragma unroll
        for (int i = 0; i < SCAN_I; i++) {
            const int s = s0 + w * SCAN_I + i, t = a.reverse ? T - 1 - s : s;
            if (!valid || s >= T) continue;
            const size_t row = ((size_t)b * T + t) * D + c;
            if (!on[i]) { /* masked: out 0, or left as it is when accumulating */
                if (!a.accumulate) out[row] = 0.0f;
                continue;
            }
            float v = y[i];
            if (a.accumulate) v += out[row]; /* before the gate */
            if (a.z) {
                float z = a.z[row];
                v *= z * mix_sigmoid(z);
            }
            out[row] = v;
        }
        __syncthreads(); /* sa/su are rewritten by the next chunk */
    }
}

/* The backward, parallel over time inside each chunk like the forward. A
 * block owns one (sample, group): it takes the group's channels 32 at a
 * time (lanes) and walks the chunks from the last; inside a chunk the
 * SCAN_W warps take the same segments as the forward. Per state n:
 *  1. the chunk's states again, from the saved state before it: segment
 *     aggregates, composed onto that state in shared memory, then each
 *     thread walks its segment (hs[i] = the state after step i);
 *  2. the state gradient from later steps, K (dh of the sequential walk:
 *     G_s = K_s + dys_s C_s, K_{s-1} = e_s G_s), is the same kind of step
 *     run backwards, K <- e K + e dys C: segment aggregates composed from
 *     the last segment onto the carry from the next chunk;
 *  3. each thread walks its segment backwards with its K, as the
 *     sequential walk does.
 * dBm/dCm of a step sum over the group's channels: a warp sum over the
 * lanes, added to the step's row by the warp's lane 0, tile after tile in
 * the same thread, so the order is fixed and nothing races (no atomics). */
__global__ void __launch_bounds__(32 * SCAN_W)
    scan_backward_kernel(bk_scan_grads gr, float *part, const float *dout, const float *states,
                         scan_dev p) {
    const bk_scan_args &a = p.a;
    const int g = blockIdx.x, b = blockIdx.y, lane = threadIdx.x, w = threadIdx.y;
    const int T = a.T, D = a.D, G = a.G, N = a.N, tiles = (p.Dg + 31) / 32;
    __shared__ float sa[SCAN_W][32], su[SCAN_W][32], ra[SCAN_W][32], ru[SCAN_W][32];
    __shared__ float pr[MIX_NMAX + 2][SCAN_W][32]; /* per-channel sums of each warp */
    const size_t bbase = (size_t)b * T * G * p.bcs;
    const float *Bm = a.Bm + bbase, *Cm = a.Cm + bbase;
    float *dBm = gr.dBm ? gr.dBm + bbase : NULL, *dCm = gr.dCm ? gr.dCm + bbase : NULL;
    for (int tile = 0; tile < tiles; tile++) {
        const int cl = tile * 32 + lane;
        const bool valid = cl < p.Dg; /* invalid lanes still reach every sync and warp sum */
        const int c = g * p.Dg + (valid ? cl : 0);
        float A[MIX_NMAX], K[MIX_NMAX], dA[MIX_NMAX];
#pragma unroll
        for (int n = 0; n < MIX_NMAX; n++) {
            A[n] = valid && n < N ? -expf(a.A_log[(size_t)c * N + n]) : 0.0f;
            K[n] = dA[n] = 0.0f;
        }
        const float Dv = valid && a.Dskip ? a.Dskip[c] : 0.0f;
        const float bias = valid && a.delta_bias ? a.delta_bias[c] : 0.0f;
        float dD = 0.0f, dbias = 0.0f;
        for (int k = p.nch - 1; k >= 0; k--) {
            const int s0 = k * MIX_L;
            float dt[SCAN_I], xv[SCAN_I], dys[SCAN_I], ys[SCAN_I], ddt[SCAN_I], dxv[SCAN_I];
            unsigned bc[SCAN_I];
            bool on[SCAN_I];
#pragma unroll
            for (int i = 0; i < SCAN_I; i++) {
                const int s = s0 + w * SCAN_I + i, t = a.reverse ? T - 1 - s : s;
                on[i] = valid && s < T && !mix_masked(a.mask, b, T, t);
                dt[i] = xv[i] = dys[i] = ys[i] = ddt[i] = dxv[i] = 0.0f;
                bc[i] = 0;
                if (!on[i]) continue;
                const size_t row = ((size_t)b * T + t) * D + c;
                bc[i] = (unsigned)((t * G + g) * p.bcs);
                xv[i] = a.x[row];
                dt[i] = mix_softplus(a.delta[row] + bias);
                float gy = dout[row];
                dys[i] = gy;
                if (a.z) {
                    float z = a.z[row];
                    dys[i] = gy * z * mix_sigmoid(z);
                }
                ys[i] = Dv * xv[i];
                dD += dys[i] * xv[i];
                dxv[i] = dys[i] * Dv;
            }
#pragma unroll
            for (int n = 0; n < MIX_NMAX; n++) {
                if (n >= N) continue; /* uniform over the block */
                /* 1. this chunk's states */
                float pa = 1.0f, pu = 0.0f;
#pragma unroll
                for (int i = 0; i < SCAN_I; i++)
                    if (on[i]) {
                        float e = expf(dt[i] * A[n]);
                        pa *= e;
                        pu = e * pu + dt[i] * xv[i] * __ldg(Bm + bc[i] + n);
                    }
                sa[w][lane] = pa;
                su[w][lane] = pu;
                __syncthreads();
                float h =
                    valid && k > 0 ? states[(((size_t)b * D + c) * p.nch + (k - 1)) * N + n] : 0.0f;
                for (int wi = 0; wi < w; wi++) h = sa[wi][lane] * h + su[wi][lane];
                const float hstart = h;
                float hs[SCAN_I];
#pragma unroll
                for (int i = 0; i < SCAN_I; i++) {
                    if (on[i]) {
                        h = expf(dt[i] * A[n]) * h + dt[i] * xv[i] * __ldg(Bm + bc[i] + n);
                        ys[i] += __ldg(Cm + bc[i] + n) * h;
                    }
                    hs[i] = h;
                }
                /* 2. the state gradient entering each segment from its end */
                pa = 1.0f, pu = 0.0f;
#pragma unroll
                for (int i = SCAN_I - 1; i >= 0; i--)
                    if (on[i]) {
                        float e = expf(dt[i] * A[n]);
                        pa *= e;
                        pu = e * pu + e * dys[i] * __ldg(Cm + bc[i] + n);
                    }
                ra[w][lane] = pa;
                ru[w][lane] = pu;
                __syncthreads();
                float run = K[n], kw = 0.0f;
                for (int wi = SCAN_W - 1; wi >= 0; wi--) {
                    if (wi == w) kw = run;
                    run = ra[wi][lane] * run + ru[wi][lane];
                }
                K[n] = run; /* into the chunk before */
                            /* 3. walk back */
#pragma unroll
                for (int i = SCAN_I - 1; i >= 0; i--) {
                    float cB = 0.0f, cC = 0.0f;
                    if (on[i]) {
                        float Bn = __ldg(Bm + bc[i] + n), Cn = __ldg(Cm + bc[i] + n);
                        float hp = i > 0 ? hs[i - 1] : hstart;
                        float e = expf(dt[i] * A[n]), gs = kw + dys[i] * Cn; /* G_s */
                        cC = dys[i] * hs[i];
                        cB = gs * dt[i] * xv[i];
                        float q = gs * hp * e;
                        ddt[i] += q * A[n] + gs * Bn * xv[i];
                        dA[n] += q * dt[i];
                        dxv[i] += gs * dt[i] * Bn;
                        kw = gs * e;
                    }
                    /* the step's rows exist whenever the step does */
                    const int s = s0 + w * SCAN_I + i;
                    if (s >= T || (!dBm && !dCm)) continue; /* uniform over the warp */
                    const int t = a.reverse ? T - 1 - s : s;
                    const unsigned r = (unsigned)((t * G + g) * p.bcs);
                    float vb = bk_warp_sum(cB), vc = bk_warp_sum(cC);
                    const bool skip = mix_masked(a.mask, b, T, t);
                    if (lane == 0 && gr.overwrite && tile == 0) { /* the row's first writer */
                        if (dBm) dBm[r + n] = skip ? 0.0f : vb + 0.0f;
                        if (dCm) dCm[r + n] = skip ? 0.0f : vc + 0.0f;
                    } else if (lane == 0 && !skip) {
                        if (dBm) dBm[r + n] += vb;
                        if (dCm) dCm[r + n] += vc;
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < SCAN_I; i++) {
                const int s = s0 + w * SCAN_I + i, t = a.reverse ? T - 1 - s : s;
                if (!valid || s >= T) continue;
                const size_t row = ((size_t)b * T + t) * D + c;
                if (!on[i]) { /* masked: no gradient; written 0 when overwriting */
                    if (gr.dz_overwrite && a.z && gr.dz) gr.dz[row] = 0.0f;
                    if (gr.overwrite && gr.dx) gr.dx[row] = 0.0f;
                    if (gr.overwrite && gr.ddelta) gr.ddelta[row] = 0.0f;
                    continue;
                }
                /* overwrite: v + 0, the bits of an add onto a zeroed buffer */
                if (a.z && gr.dz) {
                    float z = a.z[row], sz = mix_sigmoid(z);
                    float v = dout[row] * ys[i] * sz * (1.0f + z * (1.0f - sz));
                    gr.dz[row] = gr.dz_overwrite ? v + 0.0f : gr.dz[row] + v;
                }
                float du = ddt[i] * mix_sigmoid(a.delta[row] + bias);
                dbias += du;
                if (gr.dx) gr.dx[row] = gr.overwrite ? dxv[i] + 0.0f : gr.dx[row] + dxv[i];
                if (gr.ddelta) gr.ddelta[row] = gr.overwrite ? du + 0.0f : gr.ddelta[row] + du;
            }
        }
        /* the tile's per-channel sums: each warp has its segments' share;
         * added in warp order */
#pragma unroll
        for (int n = 0; n < MIX_NMAX; n++)
            if (n < N) pr[n][w][lane] = dA[n];
        pr[MIX_NMAX][w][lane] = dD;
        pr[MIX_NMAX + 1][w][lane] = dbias;
        __syncthreads();
        if (w == 0 && valid && part) {
            float *pp = part + ((size_t)b * D + c) * (2 * N + 2);
            for (int n = 0; n < N; n++) {
                float v = 0.0f;
                for (int wi = 0; wi < SCAN_W; wi++) v += pr[n][wi][lane];
                pp[n] = v;
            }
            float vd = 0.0f, vb = 0.0f;
            for (int wi = 0; wi < SCAN_W; wi++) {
                vd += pr[MIX_NMAX][wi][lane];
                vb += pr[MIX_NMAX + 1][wi][lane];
            }
            pp[N] = vd;
            pp[N + 1] = vb;
        }
        __syncthreads(); /* pr is the next tile's */
    }
}

/* dA_log[c,n] += A_n sum_b part[b,c,n] (A = -exp(A_log)); dD, ddelta_bias likewise */
__global__ void scan_param_reduce_kernel(bk_scan_grads gr, const float *part, const float *A_log,
                                         int B, int D, int N) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < (size_t)D * (N + 2);
         e += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(e / (N + 2)), k = (int)(e % (N + 2));
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += part[((size_t)b * D + c) * (2 * N + 2) + k];
        if (k < N) {
            if (gr.dA_log) gr.dA_log[(size_t)c * N + k] += s * -expf(A_log[(size_t)c * N + k]);
        } else if (k == N) {
            if (gr.dDskip) gr.dDskip[c] += s;
        } else if (gr.ddelta_bias) {
            gr.ddelta_bias[c] += s;
        }
    }
}

extern "C" void bk_cuda_scan_forward(float *out, float *states, const bk_scan_args *a) {
    if (a->B <= 0 || a->T <= 0 || a->D <= 0) return;
    scan_require(a);
    scan_dev p = scan_dev_make(a);
    dim3 grid((unsigned)(a->G * ((p.Dg + 31) / 32)), (unsigned)a->B), block(32, SCAN_W);
    scan_forward_kernel<<<grid, block>>>(out, states, p);
    CUDA_CHECK_LAUNCH();
}

extern "C" void bk_cuda_scan_backward(const bk_scan_grads *g, float *scratch, const float *dout,
                                      const float *states, const bk_scan_args *a) {
    if (a->B <= 0 || a->T <= 0 || a->D <= 0) return;
    scan_require(a);
    BK_CUDA_REQUIRE(!a->delta_w && !a->accumulate, "delta_w and accumulate are forward-only");
    scan_dev p = scan_dev_make(a);
    int params = g->dA_log || g->dDskip || g->ddelta_bias;
    dim3 grid((unsigned)a->G, (unsigned)a->B), block(32, SCAN_W);
    scan_backward_kernel<<<grid, block>>>(*g, params ? scratch : NULL, dout, states, p);
    CUDA_CHECK_LAUNCH();
    if (!params) return;
    size_t n = (size_t)a->D * (a->N + 2);
    scan_param_reduce_kernel<<<bk_blocks(n, BK_THREADS), BK_THREADS>>>(*g, scratch, a->A_log, a->B,
                                                                       a->D, a->N);
    CUDA_CHECK_LAUNCH();
}

/* ---- LSTM ---- */

static __device__ __forceinline__ size_t lstm_row(const bk_lstm_args &a, int b, int t, int s) {
    return ((size_t)b * a.T + t) * a.S + s;
}

__global__ void lstm_forward_kernel(float *out, float *saved, const float *gx, const float *whh,
                                    bk_lstm_args a) {
    extern __shared__ float sm[]; /* h[H], gates[4H] */
    const int s = blockIdx.x, b = blockIdx.y, r = threadIdx.x, H = a.H, T = a.T;
    float *hs = sm, *gs = sm + H;
    const int rev = a.bidir && (s & 1);
    const float *W = whh + (size_t)s * 4 * H * H;
    float c = 0.0f;
    if (r < H) hs[r] = 0.0f;
    __syncthreads();
    for (int step = 0; step < T; step++) {
        int t = rev ? T - 1 - step : step;
        size_t row = lstm_row(a, b, t, s);
        float *sv = saved ? saved + row * 6 * H : NULL;
        if (mix_masked(a.mask, b, T, t)) { /* uniform over the block */
            if (r < H) {
                out[row * H + r] = 0.0f;
                if (sv) {
                    sv[4 * H + r] = c;
                    sv[5 * H + r] = hs[r];
                }
            }
            if (sv && r < 4 * H) sv[r] = 0.0f;
            continue;
        }
        if (r < 4 * H) {
            const float *wr = W + (size_t)r * H;
            float pre = gx[row * 4 * H + r];
            for (int j = 0; j < H; j++) pre += __ldg(wr + j) * hs[j];
            float v = r >= 2 * H && r < 3 * H ? tanhf(pre) : mix_sigmoid(pre);
            gs[r] = v;
            if (sv) sv[r] = v;
        }
        __syncthreads();
        if (r < H) {
            c = gs[H + r] * c + gs[r] * gs[2 * H + r];
            float h = gs[3 * H + r] * tanhf(c);
            hs[r] = h;
            out[row * H + r] = h;
            if (sv) {
                sv[4 * H + r] = c;
                sv[5 * H + r] = h;
            }
        }
        __syncthreads();
    }
}

__global__ void lstm_backward_kernel(float *dgx, float *part, const float *dout, const float *saved,
                                     const float *whh, bk_lstm_args a) {
    extern __shared__ float sm[]; /* dpre[4H] */
    const int s = blockIdx.x, b = blockIdx.y, r = threadIdx.x, H = a.H, T = a.T;
    const int rev = a.bidir && (s & 1);
    const float *W = whh + (size_t)s * 4 * H * H;
    float *pr = part && r < 4 * H ? part + (((size_t)b * a.S + s) * 4 * H + r) * H : NULL;
    if (pr)
        for (int j = 0; j < H; j++) pr[j] = 0.0f;
    float dh = 0.0f, dc = 0.0f;
    for (int step = T - 1; step >= 0; step--) {
        int t = rev ? T - 1 - step : step;
        if (mix_masked(a.mask, b, T, t)) continue; /* uniform over the block */
        size_t row = lstm_row(a, b, t, s);
        const float *sv = saved + row * 6 * H;
        const float *svp = step > 0 ? saved + lstm_row(a, b, rev ? t + 1 : t - 1, s) * 6 * H : NULL;
        if (r < H) {
            float gi = sv[r], gf = sv[H + r], gg = sv[2 * H + r], go = sv[3 * H + r];
            float tc = tanhf(sv[4 * H + r]), cp = svp ? svp[4 * H + r] : 0.0f;
            float dhj = dh + dout[row * H + r];
            float dcj = dc + dhj * go * (1.0f - tc * tc);
            sm[r] = dcj * gg * gi * (1.0f - gi);
            sm[H + r] = dcj * cp * gf * (1.0f - gf);
            sm[2 * H + r] = dcj * gi * (1.0f - gg * gg);
            sm[3 * H + r] = dhj * tc * go * (1.0f - go);
            dc = dcj * gf;
        }
        __syncthreads();
        if (r < 4 * H) {
            float d = sm[r];
            if (dgx) dgx[row * 4 * H + r] += d;
            if (pr && svp)
                for (int j = 0; j < H; j++) pr[j] += d * svp[5 * H + j];
        }
        if (r < H) {
            float acc = 0.0f;
            for (int q = 0; q < 4 * H; q++) acc += __ldg(W + (size_t)q * H + r) * sm[q];
            dh = acc;
        }
        __syncthreads();
    }
}

/* dwhh[e] += sum_b part[b, e] over the S*4H*H weights */
__global__ void lstm_param_reduce_kernel(float *dwhh, const float *part, int B, size_t total) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += part[(size_t)b * total + e];
        dwhh[e] += s;
    }
}

extern "C" void bk_cuda_lstm_forward(float *out, float *saved, const float *gx, const float *whh,
                                     const bk_lstm_args *a) {
    if (a->B <= 0 || a->T <= 0 || a->S <= 0 || a->H <= 0) return;
    BK_CUDA_REQUIRE(a->H <= BK_LSTM_MAX_H, "LSTM hidden size must be at most 256");
    dim3 grid((unsigned)a->S, (unsigned)a->B);
    size_t smem = (size_t)5 * a->H * sizeof(float);
    lstm_forward_kernel<<<grid, round_warp(4 * a->H), smem>>>(out, saved, gx, whh, *a);
    CUDA_CHECK_LAUNCH();
}

extern "C" void bk_cuda_lstm_backward(float *dgx, float *dwhh, float *scratch, const float *dout,
                                      const float *saved, const float *whh, const bk_lstm_args *a) {
    if (a->B <= 0 || a->T <= 0 || a->S <= 0 || a->H <= 0 || (!dgx && !dwhh)) return;
    BK_CUDA_REQUIRE(a->H <= BK_LSTM_MAX_H, "LSTM hidden size must be at most 256");
    dim3 grid((unsigned)a->S, (unsigned)a->B);
    size_t smem = (size_t)4 * a->H * sizeof(float);
    float *part = dwhh ? scratch : NULL;
    lstm_backward_kernel<<<grid, round_warp(4 * a->H), smem>>>(dgx, part, dout, saved, whh, *a);
    CUDA_CHECK_LAUNCH();
    if (!dwhh) return;
    size_t total = (size_t)a->S * 4 * a->H * a->H;
    lstm_param_reduce_kernel<<<bk_blocks(total, BK_THREADS), BK_THREADS>>>(dwhh, part, a->B, total);
    CUDA_CHECK_LAUNCH();
}
