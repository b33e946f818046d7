/* nn_layernorm — LayerNorm over the last dimension, eps 1e-5 ("P.weight" =
 * 1, "P.bias" = 0 at init). Its activations (output, mean, rstd) are planned
 * by whoever owns the rows. */
#ifndef NN_NORM_H
#define NN_NORM_H

#include "worker/nn/nn.h"

typedef struct nn_layernorm {
    int w, b, C;
} nn_layernorm;

/* What one use of a LayerNorm saves: out [N,C], mean [N], rstd [N]. */
typedef struct nn_ln_acts {
    float *out, *mean, *rstd;
} nn_ln_acts;

int nn_layernorm_declare(nn_layernorm *n, nn_params *np, const char *prefix, int C);
void nn_ln_acts_plan(nn_ln_acts *a, bk_arena *A, size_t rows, int C);
/* a->out[N,C] = LN(x) */
void nn_layernorm_forward(const nn_layernorm *n, const nn_env *e, nn_ln_acts *a, const float *x,
                          int N);
/* dx[N,C] += d LN / dx . dout; dw, db += (skipped when frozen) */
void nn_layernorm_backward(const nn_layernorm *n, const nn_env *e, const nn_ln_acts *a, float *dx,
                           const float *dout, const float *x, int N);

#endif
