/* nn_linear.c — the linear module: y = x W^T + b over bk's matmul ops;
 * declare, forward, backward (nn_linear.h). */

#include "worker/nn/nn_linear.h"

int nn_linear_declare(nn_linear *l, nn_params *np, const char *prefix, int in, int out, int bias,
                      float std) {
    l->in = in;
    l->out = out;
    l->w = nn_param(np, prefix, "weight", out, in, 1, nn_normal(std));
    l->b = bias ? nn_param(np, prefix, "bias", out, 0, 0, nn_zeros()) : -1;
    return l->w < 0 || (bias && l->b < 0) ? -1 : 0;
}

void nn_linear_forward(const nn_linear *l, const nn_env *e, float *y, const float *x, int N) {
    e->be->linear_forward(y, x, nn_w(e, l->w), l->b >= 0 ? nn_w(e, l->b) : NULL, N, l->in, l->out);
}

void nn_linear_backward(const nn_linear *l, const nn_env *e, float *dx, const float *dy,
                        const float *x, int N) {
    e->be->linear_backward(dx, nn_g(e, l->w), nn_g(e, l->b), dy, x, nn_w(e, l->w), N, l->in,
                           l->out);
}
