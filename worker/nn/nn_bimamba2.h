/* nn_bimamba2 — the bidirectional Mamba-2 mixer of the S2S authors' release
 * (distill.mixer: bimamba2; docs/design.md#bimamba-2-mixer): two Mamba-2
 * (SSD) blocks, one per direction, with expansion 1, head width d_h (the
 * teacher's heads H = C / d_h), one group (B and C shared by the heads),
 * state N (distill.d_state), conv width 4, a gated RMSNorm and no output
 * projection of their own; the directions are fused per head by a grouped
 * 1x1 convolution, then the replaced attention's W_O. Per direction r
 * ("P.fwd.*" left to right, "P.bwd.*" right to left):
 *   [z; xBC; dt] = u W_in^T     "in_proj.weight" [2C+2N+H, C]: rows [0,C) z,
 *                               [C,2C) x, [2C,2C+N) B, [2C+N,2C+2N) C, then dt
 *   xBC  = SiLU(conv(xBC))      "conv1d.weight" [C+2N, 4], "conv1d.bias" [C+2N]
 *                               (anti-causal for bwd)
 *   y_r  = SSD(x, dt + dt_bias, A = -exp(A_log), B, C, D)   "dt_bias", "A_log",
 *                               "D" [H] (kernels/bk.h, bk_ssd_args)
 *   yn_r = RMSNorm(y_r SiLU(z)) w   "norm.weight" [C] (one group: over all C)
 *   inner_h = W_fuse[h] [yn_fwd,h; yn_bwd,h]   "P.fuse.weight" [C, 2d_h]: head
 *                               h's rows h*d_h.., columns fwd then bwd
 *   y    = OutProj(inner)       "blocks.L.attn.out.*" (nn_outproj)
 * Init (Mamba-2's): A_log = log(1..H), D = 1, norm 1, dt_bias =
 * softplus^-1(dt) with dt log-uniform in [1e-3, 1e-1], conv bias 0, the
 * other weights PyTorch's default variance (uniform ±1/sqrt(fan_in), as a
 * normal). Under a token mask masked tokens leave every state (conv window,
 * SSD state) unchanged and give inner 0. */
#ifndef NN_BIMAMBA2_H
#define NN_BIMAMBA2_H

#include "worker/nn/nn_outproj.h"

#define NN_MAMBA2_CONV 4
#define NN_MAMBA2_STATE 128 /* distill.d_state's default, as the authors' */

typedef struct nn_mamba2_dir {
    int w_in, conv_w, conv_b, dt_bias, A_log, Dskip, norm_w;
    /* z [BT,C], xbcp [BT,C+2N] (before the conv), xbc [BT,C+2N], dt [BT,H],
     * y [BT,C], yn [BT,C], rstd [BT], states [B,H,nch,d_h,N] */
    float *z, *xbcp, *xbc, *dt, *y, *yn, *rstd, *states;
} nn_mamba2_dir;

typedef struct nn_bimamba2 {
    int C, H, dh, N, K;
    nn_mamba2_dir dir[2];
    int w_fuse;
    nn_outproj out;
    int B, T; /* planned capacity */
    float *inner;
} nn_bimamba2;

/* prefix "blocks.L.mamba2", out_prefix "blocks.L.attn.out"; d_state 0 =
 * NN_MAMBA2_STATE. Returns 0 or -1 with a message (heads not dividing C,
 * too wide a head or state, Hadamard width, out of memory). */
int nn_bimamba2_declare(nn_bimamba2 *m, nn_params *np, const char *prefix, const char *out_prefix,
                        int C, int heads, int d_state, int hadamard, float out_std, char *err,
                        size_t errlen);
int nn_bimamba2_plan(nn_bimamba2 *m, bk_arena *A, int B, int T);
void nn_bimamba2_scratch(const nn_bimamba2 *m, nn_scratch *s);
/* y[B,T,C] = BiMamba-2(u[B,T,C]) through the output projection; saves its
 * activations (inner: the output before the projection). */
void nn_bimamba2_forward(nn_bimamba2 *m, const nn_env *e, nn_scratch *s, const nn_call *c, float *y,
                         const float *u);
/* du[B,T,C] += ; dinner (nullable) an extra gradient at inner. */
void nn_bimamba2_backward(nn_bimamba2 *m, const nn_env *e, nn_scratch *s, const nn_call *c,
                          float *du, const float *dy, const float *dinner, const float *u);
double nn_bimamba2_flops(const nn_bimamba2 *m, int n);

#endif
