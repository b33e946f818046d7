/* nn_outproj — the output projection a sequential mixer shares with the
 * attention it replaces: dense W_O ("P.weight", "P.bias") or Hadamard
 * (alpha ⊙ H c / sqrt(d) + beta, "P.alpha", "P.beta"). The mixers declare it
 * under "blocks.L.attn.out", attention's own names, so a student loads the
 * teacher's W_O by name (init.from). */
#ifndef NN_OUTPROJ_H
#define NN_OUTPROJ_H

#include "worker/nn/nn_linear.h"

typedef struct nn_outproj {
    int C, hadamard;
    nn_linear lin;   /* dense */
    int alpha, beta; /* hadamard (-1 when dense) */
    float *pre;      /* hadamard: [N,C] H x / sqrt(C) of the training forward, for its backward */
    int infer_only;  /* set by the owner before planning: no backward follows, so no pre */
} nn_outproj;

/* Returns 0 or -1 with a message (Hadamard width, out of memory). */
int nn_outproj_declare(nn_outproj *o, nn_params *np, const char *prefix, int C, int hadamard,
                       float std, char *err, size_t errlen);
/* The activation the Hadamard form keeps for its backward (N rows), in A;
 * none when infer_only. */
void nn_outproj_plan(nn_outproj *o, bk_arena *A, size_t N);
/* y[N,C] = OutProj(x[N,C]); training: keep what the backward reads. */
void nn_outproj_forward(const nn_outproj *o, const nn_env *e, float *y, const float *x, int N,
                        int training);
/* dx[N,C] = (overwritten: the Hadamard transform writes it, the dense form
 * zeroes it first); parameter gradients += (skipped when frozen). scratch:
 * N*C floats. */
void nn_outproj_backward(const nn_outproj *o, const nn_env *e, float *dx, float *scratch,
                         const float *dy, const float *x, int N);

#endif
