/* nn_mlp — y = W2 GELU(W1 u + b1) + b2, hidden 4d ("P.fc", "P.proj"). */
#ifndef NN_MLP_H
#define NN_MLP_H

#include "worker/nn/nn_linear.h"

typedef struct nn_mlp {
    nn_linear fc, proj;
    float *fch, *fchg; /* [rows, hidden] pre- and post-GELU (saved for backward) */
} nn_mlp;

/* Init std of fc's weight std, of proj's proj_std (GPT-2 scales residual
 * projections by 1/sqrt(2L)). */
int nn_mlp_declare(nn_mlp *m, nn_params *np, const char *prefix, int C, int hidden, float std,
                   float proj_std);
void nn_mlp_plan(nn_mlp *m, bk_arena *A, size_t rows);
/* The backward's transient need (floats) from the model's scratch. */
size_t nn_mlp_scratch(const nn_mlp *m, size_t rows);
/* y[N,C] = mlp(u[N,C]) */
void nn_mlp_forward(nn_mlp *m, const nn_env *e, float *y, const float *u, int N);
/* The same into caller buffers fch, fchg [N, hidden] (decoding, whose rows
 * are not the planned shape); saves nothing. */
void nn_mlp_forward_rows(const nn_mlp *m, const nn_env *e, float *y, const float *u, int N,
                         float *fch, float *fchg);
/* du[N,C] += d mlp/du . dy; parameter gradients += */
void nn_mlp_backward(nn_mlp *m, const nn_env *e, nn_scratch *s, float *du, const float *dy,
                     const float *u, int N);

#endif
