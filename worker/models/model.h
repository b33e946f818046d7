/* model — the transformer used by the budgetformer and lm pipelines: token +
 * learned position embeddings, L pre-LN blocks, then either masked mean
 * pooling and a linear classifier (encoder) or a tied output embedding
 * (causal decoder). Each block's attention may carry the BudgetFormer head
 * budget (design.md, "BudgetFormer") and may use the Hadamard output
 * projection instead of a dense W_O.
 *
 * All parameters live in one bk_params buffer, activations in one arena sized
 * for a batch capacity; every op goes through the bk_backend table, so the
 * same model runs on CPU and CUDA. The per-sample head gate (B x H numbers
 * per layer) is computed on the host: it is tiny, and ranks and top-k are
 * clearer there. */
#ifndef MODEL_H
#define MODEL_H

#include <stdint.h>

#include "kernels/bk.h"
#include "kernels/bk_tensor.h"

typedef struct model_shape {
    int layers, d_model, heads, seq_len, vocab;
    int n_classes; /* encoder: classifier width; 0 = causal LM with tied embedding */
    int hadamard;  /* 1: Hadamard output projection, 0: dense W_O */
    int budget;    /* 1: BudgetFormer head budget in every attention layer */
} model_shape;

/* Training-time knobs that change with progress (set before each step). */
typedef struct model_knobs {
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
} model_knobs;

/* What the last forward measured. */
typedef struct model_stats {
    double loss, loss_task, loss_budget, loss_entropy;
    double mean_s;     /* mean predicted budget fraction s */
    double heads_used; /* mean k/H over samples and layers (k = clamp(floor(sH),1,H)) */
    double correct;    /* encoder: correct predictions in the batch */
    double counted;    /* samples (encoder) or target tokens (lm) counted in the loss */
    double attn_flops; /* attention FLOPs actually spent (inference) or that the rule would spend */
    double attn_seconds; /* wall time of the attention sublayers (LN1 to residual add), when
                            m->time_attention is set (adds a device sync per layer) */
} model_stats;

typedef struct layer_ids layer_ids;
typedef struct layer_acts layer_acts;

typedef struct model {
    model_shape sh;
    const bk_backend *be;
    bk_params P;
    int wte, wpe, lnfw, lnfb, wc, bc;
    layer_ids *lp;

    int B; /* batch capacity the arena was sized for */
    bk_arena A;
    layer_acts *la;
    float *resid_out, *lnf, *lnf_mean, *lnf_rstd, *pooled, *logits, *probs, *losses, *scratch_proj;
    int *ids, *targets;
    float *mask;
    /* backward scratch */
    float *dres, *dln, *dqkv, *datty, *dfch, *dfchg, *datt, *dpooled, *dlogits, *dlosses, *dlnf;
    float *dxbar, *dbh, *dbg, *dbf, *dz, *dgate, *fwht_scratch;
    /* inference scratch (selected heads) */
    float *sel_scratch, *sel_x, *sel_out, *sel_proj, *sel_mask;
    int *sel_heads;
    /* host-side gate state, per layer: [L][B] and [L][B][H] */
    float *h_s, *h_f, *h_z, *h_zn, *h_p, *h_m, *h_gate;
    int *h_rank, *h_k;
    float *h_ds, *h_dz, *h_dgate, *h_df;
    float *h_mask;   /* [B,T] host copy of the last mask */
    int *h_targets;  /* [B] or [B,T] host copy of the last targets */
    float *h_logits; /* [rows,V'] host copy of the last logits */
    float *h_losses; /* [rows] host copy of the last per-row task losses */
    int *h_heads;    /* [B,H] per-sample selected heads for inference */

    model_knobs kn;
    model_stats st;
    int batch; /* rows in the current forward (<= B) */
    int time_attention;
} model;

/* Builds the parameter layout for shape sh on backend be (parameters zeroed;
 * call model_init_weights). Returns 0, or -1 with a message (bad shape,
 * invalid Hadamard width, out of memory). */
int model_create(model *m, const model_shape *sh, const bk_backend *be, int batch_capacity,
                 char *err, size_t errlen);
void model_destroy(model *m);

/* GPT-2 style initialisation from seed: N(0, 0.02) weights, residual
 * projections scaled by 1/sqrt(2L), LayerNorm w = 1, b = 0, Hadamard alpha = 1,
 * beta = 0, budget output bias so that s starts mid-range. */
void model_init_weights(model *m, uint64_t seed);

/* Forward over a batch of `batch` rows (<= capacity). ids [batch,T] token ids
 * (host), mask [batch,T] (host, 1 = token, NULL = all), targets (host):
 * encoder: [batch] class ids; lm: [batch,T] next-token ids, -1 = ignore.
 * training = 1 uses the noisy soft gate and saves what backward needs;
 * training = 0 uses the hard top-k rule and computes only the selected heads.
 * Fills m->st. Returns 0 or -1 with a message (ids out of range, ...). */
int model_forward(model *m, const int *ids, const float *mask, const int *targets, int batch,
                  int training, char *err, size_t errlen);

/* Backward of the last training forward: zeroes and fills the gradient buffer
 * m->P.grad with d(total loss)/d(parameters). */
void model_backward(model *m);

/* The heads the last inference forward ran for sample b at layer l: writes
 * their ids, best first, into heads[H] and returns k = clamp(floor(s H), 1, H). */
int model_selected_heads(const model *m, int l, int b, int *heads);

/* Parameter count of each part (for `bfworker params`). */
size_t model_count(const model *m, const char *prefix);

/* Attention FLOPs of one sample at one layer with k of H heads over n tokens. */
double model_attn_flops(const model_shape *sh, int k, int n);

#endif
