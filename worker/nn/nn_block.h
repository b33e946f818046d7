/* nn_block — one pre-LN transformer block with a mixer slot:
 *   mid = x + Mix(LN1(x));  out = mid + MLP(LN2(mid))
 * ("P.ln1", "P.<mixer>", "P.ln2", "P.mlp"). The mixer is any module with the
 * nn_mixer_ops table (attention today; the sequential mixers of S2S slot in
 * the same way). Each block may carry its own token mask (A-ViT halting
 * gives every layer its own); without one it uses the model's.
 *
 * Taps: a block saves the outputs an auxiliary loss may want (nn_block_tap)
 * and takes an extra gradient at any of them for the next backward
 * (nn_block_tap_grad), e.g. a distillation loss on the mixer's output before
 * its output projection. */
#ifndef NN_BLOCK_H
#define NN_BLOCK_H

#include "worker/nn/nn_attn.h"
#include "worker/nn/nn_mlp.h"
#include "worker/nn/nn_norm.h"

/* The mixer slot's interface. self is the mixer's own struct. */
typedef struct nn_mixer_ops {
    const char *kind; /* "attention", ... */
    /* activations for (B, T); 0 or -1 (host out of memory) */
    int (*plan)(void *self, bk_arena *A, int B, int T);
    void (*scratch)(const void *self, nn_scratch *s);
    /* y[B,T,C] = Mix(u[B,T,C]) including its output projection */
    void (*forward)(void *self, const nn_env *e, nn_scratch *s, const nn_call *c, float *y,
                    const float *u);
    /* du += ; dinner (nullable): extra gradient before the output projection */
    void (*backward)(void *self, const nn_env *e, nn_scratch *s, const nn_call *c, float *du,
                     const float *dy, const float *dinner, const float *u);
    /* the saved output before the output projection [B,T,C] */
    const float *(*inner)(const void *self);
    void (*destroy)(void *self);
} nn_mixer_ops;

typedef struct nn_mixer {
    const nn_mixer_ops *ops;
    void *self;
} nn_mixer;

typedef enum {
    NN_TAP_MIXER_INNER, /* mixer output before its output projection */
    NN_TAP_MIXER,       /* mixer output after the projection (before the residual add) */
    NN_TAP_OUT,         /* block output */
    NN_TAP_COUNT
} nn_tap;

/* How a block is built. */
typedef struct nn_block_cfg {
    int C, hidden; /* width, MLP hidden (4C) */
    /* "attention" (NULL too), "bimamba", "bimamba2", "bilstm" or "bilstm_wide"
     * (nn_bimamba.h, nn_bimamba2.h, nn_bilstm.h, nn_bilstm_wide.h: attn's NH,
     * hadamard; not causal) */
    const char *mixer;
    int d_state;          /* bimamba2's SSD state size (0 = NN_MAMBA2_STATE) */
    nn_attn_cfg attn;     /* when mixer is attention */
    float std, resid_std; /* init std of weights, and of residual projections */
} nn_block_cfg;

/* Shared backward workspace of a model's blocks: two [B,T,C] buffers. */
typedef struct nn_block_ws {
    float *dln, *dmix;
} nn_block_ws;

typedef struct nn_block {
    int C;
    int B, T; /* planned capacity */
    nn_layernorm ln1, ln2;
    nn_mixer mix;
    nn_mlp mlp;
    /* activations: LN1/LN2 of the rows, mid (after the mixer residual) and
     * the mixer's projected output, each [B,T,C] */
    nn_ln_acts a1, a2;
    float *mid, *mix_out;
    const float *x_in, *x_out; /* the last forward's input and output (owned by the model) */
    /* own mask (device [B,T] and host copy); NULL = the call's. mask_ones:
     * the mask is known to be all ones (every row running; set by whoever
     * sets mask, from how it was made, never by reading the device), so
     * the row-freezing passes are skipped; 0 = not known. */
    const float *mask, *h_mask;
    int mask_ones;
    const float *tap_grad[NN_TAP_COUNT];
} nn_block;

/* Declares the block under prefix ("blocks.3"). The parameter order (LN1,
 * mixer, LN2, MLP, then the mixer's extras such as the budget network) fixes
 * each tensor's init stream. Returns 0 or -1 with a message. */
int nn_block_declare(nn_block *b, nn_params *np, const char *prefix, const nn_block_cfg *cf,
                     char *err, size_t errlen);
int nn_block_plan(nn_block *b, bk_arena *A, int B, int T);
void nn_block_ws_plan(nn_block_ws *w, bk_arena *A, size_t rows, int C);
void nn_block_scratch(const nn_block *b, nn_scratch *s);
void nn_block_destroy(nn_block *b);

/* out[B,T,C] = block(x[B,T,C]); saves what backward needs. c->mask is
 * replaced by the block's own mask when it has one. */
void nn_block_forward(nn_block *b, const nn_env *e, nn_scratch *s, const nn_call *c, float *out,
                      const float *x);
/* dx[B,T,C]: on entry d(out), on return d(x) (in place, as the residual
 * stream flows); adds the tap gradients that are set. */
void nn_block_backward(nn_block *b, const nn_env *e, nn_scratch *s, const nn_block_ws *w,
                       const nn_call *c, float *dx);

/* The caller's buffers for decoding rows: ln [R,C], mean, rstd [R], q, y,
 * proj [R,C], fch, fchg [R,hidden], scores [batch*NH*T] (R = rows at once). */
typedef struct nn_decode_ws {
    float *ln, *mean, *rstd, *q, *y, *proj, *fch, *fchg, *scores;
} nn_decode_ws;

/* Decoding rows (position-major, see nn_attn_decode): x[n*batch, C] in
 * place, against this layer's KV cache kc, vc. */
void nn_block_decode(nn_block *b, const nn_env *e, const nn_decode_ws *w, float *x, float *kc,
                     float *vc, int batch, int pos, int n);

/* The attention module of the mixer slot, or NULL for another mixer. */
nn_attn *nn_block_attn(const nn_block *b);
const float *nn_block_tap(const nn_block *b, nn_tap t);
/* Sets (dgrad [B,T,C]) or clears (NULL) the extra gradient at tap t. */
void nn_block_tap_grad(nn_block *b, nn_tap t, const float *dgrad);

#endif
