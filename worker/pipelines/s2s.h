/* s2s — the model side of the S2S stages (docs/design.md#s2s-pipeline); the
 * stages themselves (folders, order, reuse) are worker/host/s2s_chain.c.
 *
 * distill (stage 1): the student is the teacher (A-ViT, or the dense ViT
 * with distill.teacher dense) with sequential mixers in the replaced
 * layers. Before each training step the teacher
 * (frozen, a second model) runs the same batch; the student then trains
 * under the teacher's per-layer masks (model.ext_mask), and every replaced
 * layer's mixer output before W_O is pulled to the teacher attention's
 * output before W_O by a masked MSE (lambda_mse; active tokens of that
 * layer), on top of the task cross-entropy. Only the mixers train unless
 * unfreeze. lambda_halt weighs the halting alignment of every layer but the
 * last (kernels' halt_align: binary KL of the teacher's halting scores
 * against the student's over the active patch tokens, plus 5 (difference of
 * their smooth keep fractions)^2, or with distill.halt_align mean_h of their
 * mean scores), and the task cross-entropy with label smoothing
 * label_smoothing (distill.label_smoothing).
 * A dense teacher (no halting) gives no masks (every token), no halting
 * alignment and no train/loss_halt.
 * Metrics: train/loss_mse (the sum over replaced layers) and
 * train/loss_halt, means over the window's steps; val/loss_mse, the same
 * MSE on the validation split, before the first step and at every
 * validation.
 *
 * eval: accuracy, retention and images/s of a trained model on the test
 * split, the trained models timed on those images in turns
 * (s2s_split_speeds), and the speed of the model's shape at other token
 * counts (fresh weights, halting tuned to a given retention) and of its
 * mixer sublayer alone. */
#ifndef PIPE_S2S_H
#define PIPE_S2S_H

#include "worker/pipelines/pipe.h"

typedef struct s2s_distill {
    model teacher; /* built and loaded by the caller (s2s_distill_spec) */
    int layers[MODEL_MAX_LAYERS], n;
    float lambda_mse;
    float *mse;   /* device [n]: per-layer losses of the last step */
    float *acc;   /* device [1]: their sum over the window's steps (in hloss's buffer) */
    float **grad; /* device [n][B*T*C]: tap gradients */
    float lambda_halt;
    float **hgrad; /* device [L-1][B*T*C]: halting-alignment gradients at block outputs */
    double *hloss; /* device [2]: halting-alignment loss summed over the window; acc */
    float *tcum;   /* device [B*T]: the teacher's cumulative score before a layer */
    int mean_h; /* distill.halt_align: 0 = keep (docs/design.md#distillation-loss), 1 = mean_h (the
                   former) */
    double steps; /* steps in the window */
    char *trainable[2 * MODEL_MAX_LAYERS + 1];
    const bk_backend *be;
    /* device [L], nullable (bfworker dump sets it; freed with ctx): each
     * layer's alignment loss of the last step, in place of hloss's sum */
    double *hlayer;
} s2s_distill;

/* The distill spec over a loaded teacher (its shape: sh, weights from the
 * caller): fills sp (pipe_vit's loss and logging plus the hooks) and ctx
 * (owns its buffers; s2s_distill_free). layers: the replaced ones. Returns
 * 0 or -1 with a message. */
int s2s_distill_spec(s2s_distill *ctx, pipe_spec *sp, const int *layers, int n, float lambda_mse,
                     float lambda_halt, float label_smoothing, int unfreeze, int mixer_kind,
                     char *err, size_t errlen);
void s2s_distill_free(s2s_distill *ctx);

/* Speed of n model shapes at T tokens (patch side p, square images of
 * sqrt(T - 1) patches a side), fresh weights, each avit shape's halting
 * tuned to keep its retention[k]: ips[k] = images/s of inference over
 * batch B, the fastest of reps forwards, the models timed in turns (one
 * forward each per round) so that the machine's slow moments hit them
 * alike; ret[k] = the retention reached (1 without halting). n <= 4.
 * Returns 0 or -1 with a message. */
#define S2S_SPEED_MAX 4
int s2s_speeds(const model_shape *shapes, const double *retention, int n, const bk_backend *be,
               int T, int B, int reps, double *ips, double *ret, char *err, size_t errlen);

/* Speed of n trained models (their weights and halting, inference with
 * halted tokens dropped) on the images of d's test split (split 1; 0 =
 * validation), in the batches pipe_evaluate reads (the models' B, which must
 * be the same), the first batches holding at least max_images (all of a
 * smaller split): a warm-up round, then reps rounds of one forward of each
 * model on each batch in turns; ips[k] = images over the sum of each batch's
 * fastest forward; ret[k] = model k's retention over those images (1
 * without halting; on the whole split, pipe_evaluate's test/retention);
 * *images = how many were timed. n <= S2S_SPEED_MAX, reps >= 1. Returns 0
 * or -1 with a message. */
int s2s_split_speeds(model *const *m, int n, const bf_config *c, const data_sets *d, int split,
                     int max_images, int reps, double *ips, double *ret, double *images, char *err,
                     size_t errlen);

/* ms of one mixer sublayer (LN1 + mixer + output projection: nn_block's
 * mixer half) at (B, T) and the shape's width and heads, inference: the
 * attention sublayer's and the `mixer` kind's, timed in turns, the fastest
 * of reps each. Returns 0 or -1 with a message. */
int s2s_mixer_ms(const model_shape *shape, const bk_backend *be, int mixer, int T, int B, int reps,
                 double *attention_ms, double *mixer_ms, char *err, size_t errlen);

/* ms of one bare token-mixing module as the S2S authors time it (no LN, no
 * MLP, no halting): attention (qkv, softmax, W_O) for kind
 * MODEL_MIXER_ATTENTION, else mixer `kind` (its directions, their fusion
 * and W_O); N tokens, width C with C/64 heads (at least 1; the shape's
 * other fields), batch B, inference with fresh weights: warmup forwards,
 * then the mean of reps. N >= 2. Returns 0 or -1 with a message. */
int s2s_module_ms(const model_shape *shape, const bk_backend *be, int kind, int N, int C, int B,
                  int warmup, int reps, double *ms, char *err, size_t errlen);

#endif
