/* nn — what every module shares: the named parameter list with its init
 * rules and frozen flags, the environment a call runs in, the per-call
 * context (batch, tokens, mask, knobs, stats) and transient scratch.
 *
 * The module interface, one for all (nn_linear, nn_layernorm, nn_mlp,
 * nn_attn, nn_block, nn_embed; the mixer slot adds a table of function
 * pointers, nn_mixer_ops, because a block holds any mixer):
 *   NAME_declare(self, np, prefix, shape...)   named parameters, e.g.
 *                                              "blocks.3.attn.qkv.weight"
 *   NAME_plan(self, arena, B, T)               activations for a (batch,
 *                                              tokens) shape; run once to
 *                                              count, once to hand out
 *   NAME_forward(self, env, call, out, in)     saves what backward needs
 *   NAME_backward(self, env, call, din, dout, in)  din +=; parameter
 *                                              gradients +=, skipped for
 *                                              frozen tensors
 *   NAME_flops(self, tokens)                   forward FLOPs
 * Init is declared with each tensor (nn_init), not guessed from its name.
 * Shapes are written above each function as [rows, width]. */
#ifndef NN_H
#define NN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/bk.h"
#include "kernels/bk_tensor.h"

/* How a tensor starts. NORMAL: N(0, value^2) from the Philox stream
 * (seed, tensor index, element), so a tensor's values depend only on the
 * seed and its place in the declaration order. The Mamba rules
 * (docs/design.md#mamba-selective-scan-and-the-bidirectional-mixer): LOG_ARANGE: element j of a
 * [rows, n] tensor is log(1 + j mod n) (A_log); DT_BIAS: softplus^-1(dt), dt log-uniform in [value,
 * value2] from the same Philox stream (b_delta). */
typedef enum {
    NN_INIT_ZEROS,
    NN_INIT_ONES,
    NN_INIT_NORMAL,
    NN_INIT_CONST,
    NN_INIT_LOG_ARANGE,
    NN_INIT_DT_BIAS
} nn_init_kind;
typedef struct nn_init {
    nn_init_kind kind;
    float value, value2;
} nn_init;

static inline nn_init nn_zeros(void) { return (nn_init){NN_INIT_ZEROS, 0, 0}; }
static inline nn_init nn_ones(void) { return (nn_init){NN_INIT_ONES, 1, 0}; }
static inline nn_init nn_normal(float std) { return (nn_init){NN_INIT_NORMAL, std, 0}; }
static inline nn_init nn_const(float v) { return (nn_init){NN_INIT_CONST, v, 0}; }
static inline nn_init nn_log_arange(void) { return (nn_init){NN_INIT_LOG_ARANGE, 0, 0}; }
static inline nn_init nn_dt_bias(float dt_min, float dt_max) {
    return (nn_init){NN_INIT_DT_BIAS, dt_min, dt_max};
}

/* The parameters of one model: a bk_params (one buffer, decayed tensors
 * first) plus, per tensor, its init rule and whether it is frozen. A frozen
 * tensor gets no gradient (modules pass NULL to the ops), no AdamW update, no
 * weight decay and no moment drift. */
typedef struct nn_params {
    bk_params P;
    nn_init *init;
    unsigned char *frozen;
    int cap;
} nn_params;

void nn_params_init(nn_params *np);
void nn_params_free(nn_params *np);
/* Declares tensor "prefix.name" ([d0] when d1 == 0, else [d0, d1]); returns
 * its index or -1 (out of memory, name too long, bad shape). */
int nn_param(nn_params *np, const char *prefix, const char *name, int d0, int d1, int decay,
             nn_init init);
/* Writes every tensor's initial values (by its rule) into the device buffer.
 * Returns 0 or -1 with a message (out of memory: never silently zero). */
int nn_params_init_weights(nn_params *np, uint64_t seed, char *err, size_t errlen);
/* Freezes (frozen = 1) or unfreezes every tensor whose name starts with
 * prefix ("" = all). Returns how many matched. */
int nn_params_freeze(nn_params *np, const char *prefix, int frozen);
/* Trainable floats (those AdamW updates). */
size_t nn_params_trainable(const nn_params *np);
/* Calls fn once per run of consecutive trainable tensors in the buffer,
 * with the run's offset, length and whether weight decay applies: with no
 * frozen tensor that is two runs, [0, n_decay) and the rest. */
void nn_params_runs(const nn_params *np, void (*fn)(void *ctx, size_t off, size_t n, int decay),
                    void *ctx);

/* What a module's calls run against. */
typedef struct nn_env {
    const bk_backend *be;
    nn_params *np;
    int bf16; /* 1: nn_linear's products run gemm_bf16 (train.precision bf16 on a
                 backend with bf16 products; set by the training loop) */
} nn_env;

static inline float *nn_w(const nn_env *e, int id) { return e->np->P.t[id].data; }
/* The gradient of tensor id, or NULL when it is frozen or absent (id < 0). */
static inline float *nn_g(const nn_env *e, int id) {
    if (id < 0 || e->np->frozen[id]) return NULL;
    return bk_params_grad(&e->np->P, id);
}

/* Training-time knobs that change with progress (set before each step). */
typedef struct nn_knobs {
    float tau;          /* temperature of the score softmax */
    float sigma;        /* Gumbel noise scale */
    float tau_r;        /* rank-gate temperature */
    float s_min, s_max; /* budget range */
    float lambda_budget, lambda_entropy;
    float progress; /* t / T_total in [0,1] */
    uint64_t seed;  /* noise stream: (seed, step, layer) */
    uint64_t step;
    uint64_t row_offset; /* global index of local row 0 (data-parallel rank * local
                            batch), so every rank draws the noise one rank would */
    int force_k;         /* inference: run exactly this many heads per sample (the
                            best by z) instead of the budget rule; 0 = rule */
    int exact_gradient;  /* 1: drop the straight-through term (dw/dp = m), so the
                            backward is the exact gradient of the forward; only
                            finite-difference tests want this */
} nn_knobs;

/* What a forward measured (modules add into it). */
typedef struct nn_stats {
    double loss, loss_task, loss_budget, loss_entropy;
    double loss_ponder, loss_prior; /* A-ViT */
    double retention;               /* A-ViT: mean fraction of patch tokens active per layer */
    double mean_s;                  /* mean predicted budget fraction s */
    double heads_used; /* mean k/H over samples and layers (k = clamp(floor(sH),1,H)) */
    double correct;    /* encoder: correct predictions in the batch */
    double counted;    /* samples (encoder) or target tokens (lm) counted in the loss */
    double attn_flops; /* attention FLOPs actually spent (inference) or that the rule would spend */
    double attn_seconds;  /* wall time of the mixer sublayers (LN1 to residual add), when
                             timed (adds a device sync per layer) */
    double mixer_seconds; /* of those, the bare mixer modules alone (attention: qkv, softmax,
                             W_O; a mixer: its directions, fusion and W_O; no LN, no
                             residual), when timed */
} nn_stats;

/* One forward or backward call of a module. */
typedef struct nn_call {
    int B, T;            /* rows and tokens of this call (B <= planned capacity) */
    int training;        /* 1: soft gate, save for backward; 0: inference rules */
    int layer;           /* block index (noise streams, loss normalisation) */
    int layers;          /* blocks in the model */
    const float *mask;   /* device [B,T], 1 = active token; NULL = all */
    const float *h_mask; /* host copy of mask (NULL = all) */
    const nn_knobs *kn;  /* budget knobs */
    nn_stats *st;        /* where modules add what they measured */
    double *dstats;      /* device stats buffer (BK_STAT_SLOTS; training): ops add into it */
    int time_mixer;      /* 1: time the mixer sublayer into st->attn_seconds (and the bare
                            module into st->mixer_seconds) */
} nn_call;

/* Transient scratch shared by the modules of one model: each module says
 * the most it needs at once (nn_scratch_need while planning) and takes its
 * floats from the start again in every call (nn_scratch_begin +
 * nn_scratch_floats). Nothing in it lives beyond one call. */
typedef struct nn_scratch {
    bk_arena a;
    size_t need; /* bytes, max over users */
} nn_scratch;

void nn_scratch_need(nn_scratch *s, size_t floats);
int nn_scratch_reserve(nn_scratch *s, const bk_backend *be, char *err, size_t errlen);
void nn_scratch_begin(nn_scratch *s);
float *nn_scratch_floats(nn_scratch *s, size_t n);
int *nn_scratch_ints(nn_scratch *s, size_t n);
void nn_scratch_free(nn_scratch *s);

/* Rows of [B,T] that a mask marks active, for sample b (h_mask NULL = T). */
int nn_active_tokens(const nn_call *c, int b);

#endif
