/* nn_bilstm_wide — the wide multi-head bidirectional LSTM mixer of the S2S
 * authors' release (distill.mixer: bilstm_wide; docs/design.md#wide-bilstm-mixer). Unlike
 * nn_bilstm (hidden d_h/2 over the full input, no head projection), each
 * head reads only its own d_h channels of a dense pre-projection and runs a
 * forward and a backward LSTM of hidden d_h; a per-head projection folds the
 * two directions back to d_h. Streams 2h (left to right) and 2h+1 (right to
 * left) of head h:
 *   p     = u W_pre^T + b_pre        "P.pre.weight" [C, C], "P.pre.bias" [C]
 *   gx_h  = p_h W_ih[h]^T + b_ih[h]  "P.ih.weight" [H*8d_h, d_h]: head h owns
 *                                    rows h*8d_h.., the forward stream's 4d_h
 *                                    gates (i, f, g, o) then the backward's;
 *                                    "P.ih.bias" [8C] (b_ih + b_hh of torch)
 *   hs    = lstm(gx, W_hh)           "P.hh.weight" [2H*4d_h, d_h]; hs [B,T,2C]
 *                                    per head forward then backward
 *   inner_h = hs_h W_head[h]^T + b_head[h]  "P.head.weight" [C, 2d_h] (head
 *                                    h's rows h*d_h..), "P.head.bias" [C]
 *   y     = OutProj(inner)           "blocks.L.attn.out.*" (nn_outproj)
 * Init: PyTorch's variance (uniform ±1/sqrt(fan) as a normal), biases 0.
 * Under a token mask masked tokens leave h, c unchanged and give inner 0
 * (the head projection's bias included). */
#ifndef NN_BILSTM_WIDE_H
#define NN_BILSTM_WIDE_H

#include "worker/nn/nn_outproj.h"

typedef struct nn_bilstm_wide {
    int C, H, dh, S; /* width, heads, head width (= hidden per direction), streams (2H) */
    nn_linear pre;
    int w_ih, b_ih, w_hh, w_head, b_head;
    nn_outproj out;
    int B, T; /* planned capacity */
    /* p [B,T,C], gx [B,T,8C], saved [B,T,S,6d_h], hs [B,T,2C], inner [B,T,C],
     * ones [B*T] (the bias broadcasts as rank-1 products) */
    float *p, *gx, *saved, *hs, *inner, *ones;
} nn_bilstm_wide;

/* prefix "blocks.L.lstm_wide", out_prefix "blocks.L.attn.out". Returns 0 or
 * -1 with a message (heads not dividing C, too wide a head, Hadamard width,
 * memory). */
int nn_bilstm_wide_declare(nn_bilstm_wide *l, nn_params *np, const char *prefix,
                           const char *out_prefix, int C, int heads, int hadamard, float out_std,
                           char *err, size_t errlen);
int nn_bilstm_wide_plan(nn_bilstm_wide *l, bk_arena *A, int B, int T);
void nn_bilstm_wide_scratch(const nn_bilstm_wide *l, nn_scratch *s);
/* y[B,T,C] = BiLSTM-wide(u[B,T,C]) through the output projection. */
void nn_bilstm_wide_forward(nn_bilstm_wide *l, const nn_env *e, nn_scratch *s, const nn_call *c,
                            float *y, const float *u);
/* du[B,T,C] += ; dinner (nullable) an extra gradient at inner. */
void nn_bilstm_wide_backward(nn_bilstm_wide *l, const nn_env *e, nn_scratch *s, const nn_call *c,
                             float *du, const float *dy, const float *dinner, const float *u);
double nn_bilstm_wide_flops(const nn_bilstm_wide *l, int n);

#endif
