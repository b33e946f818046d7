/* nn_bimamba — the multi-head bidirectional Mamba mixer (Vim v2 style,
 * docs/design.md#mamba-selective-scan-and-the-bidirectional-mixer).
 * Channels in G = heads groups of d_h; inner width D = 2C (expansion 2), so
 * a group has Dg = 2 d_h inner channels; state N = 16, delta rank
 * R = ceil(d_h / 16), conv width 4. Every projection is block-diagonal over
 * the groups (one strided batched gemm per projection):
 *   x, z  = W_in u            "P.in.weight"  [2D, d_h]: rows [0,D) x, [D,2D) z;
 *                             group g owns rows g*Dg.. of each half
 *   per direction r (fwd, bwd; "P.fwd.*", "P.bwd.*"):
 *     xc  = SiLU(conv(x))     "conv.weight" [D, 4], "conv.bias" [D]
 *                             (anti-causal for bwd: the reversed sequence)
 *     [δ; B; C] = W_x xc      "x_proj.weight" [G*(R+2N), Dg]
 *     Δ   = softplus(W_Δ δ + b_Δ)  "dt_proj.weight" [D, R], "dt_proj.bias" [D]
 *     y_r = scan(xc, Δ, A = -exp(A_log), B, C, D, z)  "A_log" [D, N], "D" [D]
 *   inner = W_out (y_fwd + y_bwd) / 2     "P.out.weight" [C, Dg]: group g's
 *                                         rows g*d_h.. ([d_h, Dg] each)
 *   y     = OutProj(inner)   the replaced attention's own output projection,
 *                            "blocks.L.attn.out.*" (nn_outproj)
 * The bwd direction runs right to left in place (the ops' reverse flag), so
 * "reverse(y_bwd)" needs no copy; it adds itself onto y_fwd in one buffer
 * (the scan's accumulate), and the 1/2 rides on W_out's GEMM. At inference
 * the scan applies W_delta itself (no delta tensor); training keeps delta
 * for the backward. Init: A_log = log(1..N), D = 1,
 * b_Δ = softplus^-1(dt) with dt log-uniform in [1e-3, 1e-1], W_Δ with the
 * Mamba std R^-1/2 (as a normal of the same variance), other weights the
 * variance of PyTorch's default (uniform ±1/sqrt(fan_in)). Under a token mask
 * masked tokens leave every state unchanged and give inner 0. */
#ifndef NN_BIMAMBA_H
#define NN_BIMAMBA_H

#include "worker/nn/nn_outproj.h"

#define NN_MAMBA_EXPAND 2
#define NN_MAMBA_STATE 16
#define NN_MAMBA_CONV 4

typedef struct nn_mamba_dir {
    int conv_w, conv_b, x_proj, dt_w, dt_b, A_log, Dskip;
    float *xc, *xdbl, *dpre, *states; /* activations (dpre in training only) */
} nn_mamba_dir;

typedef struct nn_bimamba {
    int C, G, dh, D, Dg, N, R, K;
    int w_in, w_out;
    nn_mamba_dir dir[2];
    nn_outproj out;
    int B, T; /* planned capacity */
    float *x, *z, *ysum, *inner;
    /* NULL, or NN_MAMBA_STAGES doubles: forward then syncs the backend after
     * each stage and adds its seconds there (bench_mixers' breakdown) */
    double *prof;
} nn_bimamba;

/* The forward's stages, in order, as prof counts them. */
enum {
    NN_MAMBA_IN,
    NN_MAMBA_CONV_ST,
    NN_MAMBA_XPROJ,
    NN_MAMBA_SCAN,
    NN_MAMBA_OUT,
    NN_MAMBA_STAGES
};

/* prefix "blocks.L.mamba", out_prefix "blocks.L.attn.out". Returns 0 or -1
 * with a message (heads not dividing C, Hadamard width, out of memory). */
int nn_bimamba_declare(nn_bimamba *m, nn_params *np, const char *prefix, const char *out_prefix,
                       int C, int heads, int hadamard, float std, float out_std, char *err,
                       size_t errlen);
int nn_bimamba_plan(nn_bimamba *m, bk_arena *A, int B, int T);
void nn_bimamba_scratch(const nn_bimamba *m, nn_scratch *s);
/* y[B,T,C] = BiMamba(u[B,T,C]) through the output projection; saves its
 * activations (inner: the output before the projection). */
void nn_bimamba_forward(nn_bimamba *m, const nn_env *e, nn_scratch *s, const nn_call *c, float *y,
                        const float *u);
/* du[B,T,C] += ; dinner (nullable) an extra gradient at inner. */
void nn_bimamba_backward(nn_bimamba *m, const nn_env *e, nn_scratch *s, const nn_call *c, float *du,
                         const float *dy, const float *dinner, const float *u);
double nn_bimamba_flops(const nn_bimamba *m, int n);

#endif
