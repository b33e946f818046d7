/* nn_halt — A-ViT adaptive token halting over a model's blocks (docs/design.md#a-vit-halting,
 * "A-ViT"). No parameters of its own: after block l the halting score of
 * token k is h = sigmoid(gamma * t[k, 0] - g) from channel 0 of the block's
 * output; the cumulative score decides when the token halts (at 1 - eps;
 * the last layer halts all, the class token never), the remainder, the
 * ponder cost and the weighted output follow ACT, and q_l (the batch mean of
 * the halting score at layer l, normalised over layers and clamped to
 * [0.01, 0.99], as A-ViT's eq. 10 and NVlabs' code; avit.prior: nvlabs
 * counts a halted token's score as NVlabs' zeroed row gives it, spend what
 * each token spends there) is pulled towards a Gaussian prior over depth
 * centred where the target retention puts it.
 *
 * Layer l runs under mask[l] (mask[0]: every token; mask[l + 1]: the tokens
 * still running after layer l). The blocks take these as their own masks.
 * Everything stays on the device in training; at inference the masks are
 * copied to the host (h_mask) for the token dropping. */
#ifndef NN_HALT_H
#define NN_HALT_H
#include "worker/nn/nn.h"

typedef struct nn_halt_cfg {
    float gamma, centre, eps;          /* gate scale, gate centre g, halting threshold */
    float ponder_weight, prior_weight; /* alpha_p, alpha_d */
    float retention;                   /* target r (sets the prior's centre) */
    float sigma;                       /* prior std in layers */
    float shift;                       /* layers added to the centre (the pipeline's
                                          retention control; 0 = none) */
    float integral;                    /* that control's integral term, in layers */
    float error;                       /* and the retention error it last read */
    float gate;                        /* added to the gate centre g by that control's gate
                                          actuator when the prior stalls (0 = none; kept
                                          with the checkpoint: halt.gate) */
    float streak;                      /* stalled windows since the retention was last
                                          within the tolerance: the gate's step doubles
                                          with each (kept with the checkpoint) */
    int prior;                         /* avit.prior: a BK_PRIOR_ value (kernels/bk.h) */
    int freeze; /* avit.output: 0 = act (the ACT weighted output), 1 = freeze (x[L]) */
} nn_halt_cfg;

typedef struct nn_halt {
    nn_halt_cfg cf;
    int L, B, T;
    float **mask; /* [L + 1] device [B,T] */
    float **h;    /* [L] device [B,T]: the sigmoid of each layer */
    float *cum, *rem;
    int *at;
    double *hstats; /* BK_HALT_STATS(L) doubles */
    float *dldp;    /* [L] */
    float **h_mask; /* [L + 1] host [B,T]: inference copies */
    int *ones;      /* [L + 1] mask[l] known all ones (mask[0]; at inference from
                       h_mask), 0 = not known: lets a block skip its freezing */
    float *h_ones;
    float *out, *dout; /* device [B,T,C]: the ACT output and its gradient */
} nn_halt;

/* The gate centre the halting test uses: g plus the retention control's
 * gate actuator (cf->gate). */
float nn_halt_gate_centre(const nn_halt_cfg *cf);

/* Device arrays from the arena for L layers and (B, T, C); host copies
 * malloc'd. Returns 0 or -1 (host out of memory). */
int nn_halt_plan(nn_halt *h, bk_arena *A, int L, int B, int T, int C);
void nn_halt_free(nn_halt *h);
/* Starts a forward of B rows: every token active, nothing halted. */
void nn_halt_begin(nn_halt *h, const nn_env *e, int B);
/* After block l: out[B,T,C] is its output. Fills mask[l + 1] (and at
 * inference its host copy). */
void nn_halt_layer(nn_halt *h, const nn_env *e, int l, const float *out, int B, int C,
                   int training);
/* After the last layer: the ponder and prior losses and the keep fraction
 * into stats (slots), and the gradient table for the backward. */
void nn_halt_loss(nn_halt *h, const nn_env *e, double *stats, int B, int slot_ponder,
                  int slot_prior, int slot_keep);
/* Backward at layer l: adds the halting gradient to dout[B,T,C] (the
 * gradient of block l's output) before the block's own backward. */
void nn_halt_backward(nn_halt *h, const nn_env *e, int l, float *dout, int B, int C);
/* The ACT output (docs/design.md#a-vit-halting): after the last layer, h->out[B,T,C] =
 * sum_{l < N_k} h_k^l t_k^l + R_k t_k^{N_k} from the layers' outputs x[1..L]
 * (the class token: its last layer's output). Returns h->out, or x[L] itself
 * with cf.freeze. */
const float *nn_halt_output(nn_halt *h, const nn_env *e, float *const *x, int B, int C);
/* Its backward at layer l (before nn_halt_backward): dx += the share of
 * d loss / d out (h->dout) that reaches x[l + 1], with the gradient of the
 * weights h. Nothing with cf.freeze (then d loss / d x[L] is h->dout itself,
 * given by the caller). */
void nn_halt_output_backward(nn_halt *h, const nn_env *e, int l, float *dx, float *const *x, int B,
                             int C);
/* The prior centre (in layers 0..L-1) whose Gaussian, read as the depth at
 * which tokens halt, keeps the fraction r of tokens per layer on average:
 * sum_l pi_l(centre) (l + 1) / L = r, by bisection. */
float nn_halt_centre(float r, int L, float sigma);
/* avit.prior's names (paper, nvlabs, spend) and the BK_PRIOR_ values; an
 * unknown name is paper (the config's enum has refused it before). */
int nn_halt_prior_of(const char *name);
const char *nn_halt_prior_name(int prior);
/* Mean fraction of patch tokens active per layer in the last inference
 * forward, from the host masks, for sample b (b < 0: over the batch). */
double nn_halt_retention(const nn_halt *h, int B, int b);
#endif
