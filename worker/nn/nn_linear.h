/* nn_linear — y[N,out] = x[N,in] @ W[out,in]^T + b[out] ("P.weight",
 * "P.bias"). Weights in PyTorch's [out, in] layout, so a safetensors file
 * loads into torch.nn.Linear as it is. */
#ifndef NN_LINEAR_H
#define NN_LINEAR_H

#include "worker/nn/nn.h"

typedef struct nn_linear {
    int w, b; /* parameter ids; b = -1 without a bias */
    int in, out;
} nn_linear;

/* Declares prefix.weight [out, in] (N(0, std), weight decay) and, when bias,
 * prefix.bias [out] (zeros). Returns 0 or -1 (out of memory). */
int nn_linear_declare(nn_linear *l, nn_params *np, const char *prefix, int in, int out, int bias,
                      float std);
/* y[N,out] = x[N,in] W^T + b */
void nn_linear_forward(const nn_linear *l, const nn_env *e, float *y, const float *x, int N);
/* dx[N,in] += dy W (dx nullable); dW += dy^T x, db += sum dy (skipped when frozen) */
void nn_linear_backward(const nn_linear *l, const nn_env *e, float *dx, const float *dy,
                        const float *x, int N);

#endif
