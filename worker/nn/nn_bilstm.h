/* nn_bilstm — the multi-head bidirectional LSTM mixer (docs/design.md#bilstm-mixer): per head
 * a forward and a backward LSTM of hidden d_h/2 over the head's input, the
 * full u (each head its own weights, as each attention head has its own
 * Q/K/V rows). Streams 2h (left to right) and 2h+1 (right to left):
 *   gx    = u W_ih^T + b         "P.ih.weight" [2H*4*d_h/2, C] (stream s
 *                                owns rows s*4Hh.., gates i, f, g, o),
 *                                "P.ih.bias" (b_ih + b_hh of torch)
 *   inner = lstm(gx, W_hh)       "P.hh.weight" [2H*4Hh, Hh]; inner [B,T,C] is
 *                                per head forward then backward, heads
 *                                concatenated
 *   y     = OutProj(inner)       "blocks.L.attn.out.*" (nn_outproj)
 * Init: PyTorch's variance (uniform ±1/sqrt(Hh) as a normal), biases 0.
 * Under a token mask masked tokens leave h, c unchanged and give inner 0. */
#ifndef NN_BILSTM_H
#define NN_BILSTM_H

#include "worker/nn/nn_outproj.h"

typedef struct nn_bilstm {
    int C, H, Hh, S; /* width, heads, hidden per direction, streams (2H) */
    nn_linear ih;
    int w_hh;
    nn_outproj out;
    int B, T;                  /* planned capacity */
    float *gx, *saved, *inner; /* [B,T,4C], [B,T,S,6Hh], [B,T,C] */
} nn_bilstm;

/* prefix "blocks.L.lstm", out_prefix "blocks.L.attn.out". Returns 0 or -1
 * with a message (odd or too large head width, Hadamard width, memory). */
int nn_bilstm_declare(nn_bilstm *l, nn_params *np, const char *prefix, const char *out_prefix,
                      int C, int heads, int hadamard, float out_std, char *err, size_t errlen);
int nn_bilstm_plan(nn_bilstm *l, bk_arena *A, int B, int T);
void nn_bilstm_scratch(const nn_bilstm *l, nn_scratch *s);
/* y[B,T,C] = BiLSTM(u[B,T,C]) through the output projection. */
void nn_bilstm_forward(nn_bilstm *l, const nn_env *e, nn_scratch *s, const nn_call *c, float *y,
                       const float *u);
/* du[B,T,C] += ; dinner (nullable) an extra gradient at inner. */
void nn_bilstm_backward(nn_bilstm *l, const nn_env *e, nn_scratch *s, const nn_call *c, float *du,
                        const float *dy, const float *dinner, const float *u);
double nn_bilstm_flops(const nn_bilstm *l, int n);

#endif
