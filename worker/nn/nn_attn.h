/* nn_attn — multi-head self-attention, the mixer every model starts with:
 *   qkv = u Wqkv^T + bqkv; per head softmax(q k^T / sqrt(d_h) + key mask
 *   [+ causal]) v; output projection dense (W_O, "P.out.weight/bias") or
 *   Hadamard (alpha ⊙ H c / sqrt(d) + beta, "P.out.alpha/beta").
 * With the BudgetFormer budget (docs/design.md#budgetformer): a budget MLP
 * ("P.budget.fc", "P.budget.out": d -> d/4 -> 1) and a head scorer
 * ("P.scorer": d -> H) over the masked mean of u; in training every head's
 * output is weighted by the soft gate w; at inference only the k best heads
 * are computed at all (no Q/K/V rows, scores or W_O columns for the others).
 * Decoding: the same projections and output projection against a KV cache.
 *
 * In training the gate is computed on the device (bk gate_forward /
 * gate_backward): a training step copies nothing to the host. Inference
 * copies each sample's s and head scores to the host, to group the samples
 * by k and pick their heads. */
#ifndef NN_ATTN_H
#define NN_ATTN_H

#include "worker/nn/nn_outproj.h"

typedef struct nn_attn_cfg {
    int C, NH;
    int causal;   /* 1: query t sees keys <= t */
    int hadamard; /* 1: Hadamard output projection */
    int budget;   /* 1: BudgetFormer head budget */
    /* 1: inference only: the maps [B,NH,T,T] are taken from the scratch in
     * each forward (a->att is NULL) rather than kept per layer for a
     * backward or a reader after the forward */
    int scratch_maps;
    /* the backend's attention_tiled_min_t: from this T on, attention keeps
     * no maps (a->att NULL) but a->lse [B,NH,T]; 0 = never */
    int tiled_min_t;
} nn_attn_cfg;

typedef struct nn_attn {
    nn_attn_cfg cf;
    nn_linear qkv;
    nn_outproj out; /* W_O, dense or Hadamard, as the mixers that replace attention have it */
    nn_linear bfc, bout, scorer;
    int B, T; /* planned capacity */
    /* activations [B,T,3C], [B,NH,T,T], [B,T,C] gated head outputs (before
     * the output projection: the "inner" tap) */
    float *qkv_act, *att, *atty;
    float *lse;                            /* [B,NH,T] instead of att when T >= cf.tiled_min_t */
    float *xbar, *bh, *bg, *bf, *z, *gate; /* budget: [B,C], [B,C/4] x2, [B], [B,H] x2 */
    float *gsave;                          /* training gate's save (BK_GATE_SAVE_FLOATS) */
    /* inference: the last forward's s, f [B], scores z [B,H], k [B] and the
     * selected heads [B,H] on the host */
    float *h_s, *h_f, *h_z;
    int *h_k, *h_heads;
} nn_attn;

/* Declares P.qkv and P.out (dense) or P.out.alpha/beta (hadamard). The
 * budget tensors are declared apart (nn_attn_declare_budget) so a block can
 * keep the declaration order that fixes each tensor's init stream. std is the
 * init std; out_std that of W_O. Returns 0 or -1 with a message. */
int nn_attn_declare(nn_attn *a, nn_params *np, const char *prefix, const nn_attn_cfg *cf, float std,
                    float out_std, char *err, size_t errlen);
/* P.budget.fc, P.budget.out and P.scorer (nothing without the budget). */
int nn_attn_declare_budget(nn_attn *a, nn_params *np, const char *prefix, float std);
/* Sets the init rule of the budget output bias: logit(s0), s0 the middle of
 * [s_min, s_max] clamped to [0.02, 0.98], so s starts mid-range. */
void nn_attn_budget_init(nn_attn *a, nn_params *np, float s_min, float s_max);
/* Activations for B rows of T tokens, and the host gate state. Returns 0 or
 * -1 (host out of memory) on the real pass. */
int nn_attn_plan(nn_attn *a, bk_arena *A, int B, int T);
void nn_attn_scratch(const nn_attn *a, nn_scratch *s);
void nn_attn_free(nn_attn *a);

/* y[B,T,C] = attention(u[B,T,C]) through the output projection. Training:
 * the soft gate (budget), everything saved; inference with the budget: only
 * the selected heads. Adds budget losses, s, heads used and FLOPs into
 * c->st. */
void nn_attn_forward(nn_attn *a, const nn_env *e, nn_scratch *s, const nn_call *c, float *y,
                     const float *u);
/* du[B,T,C] += d y/du . dy. dinner (nullable, [B,T,C]) is an extra gradient
 * at the head outputs before the output projection (a tap). */
void nn_attn_backward(nn_attn *a, const nn_env *e, nn_scratch *s, const nn_call *c, float *du,
                      const float *dy, const float *dinner, const float *u);

/* The heads the last inference forward ran for sample b, best first, into
 * heads[H]; returns k. */
int nn_attn_selected_heads(const nn_attn *a, int b, int *heads);

/* Attention FLOPs of one sample with k of H heads over n tokens. */
double nn_attn_flops(const nn_attn_cfg *cf, int k, int n);

/* Decoding with a KV cache. Rows are position-major [n][batch][C]; kc, vc
 * are this layer's caches [T][batch][C] holding positions [0, pos);
 * the new tokens' K and V are written at [pos, pos + n). q, y: [n*batch, C]
 * scratch; scores: batch*NH*T floats. y_out[n*batch, C] = the projected
 * output. Only dense-gate-free attention (no budget) decodes. */
void nn_attn_decode(const nn_attn *a, const nn_env *e, float *y_out, const float *u, float *kc,
                    float *vc, int batch, int pos, int n, float *q, float *y, float *scores);

#endif
