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
    const float *b = l->b >= 0 ? nn_w(e, l->b) : NULL;
    if (!e->bf16) {
        e->be->linear_forward(y, x, nn_w(e, l->w), b, N, l->in, l->out);
        return;
    }
    /* bf16: the bias rows first (linear_forward over no inputs), the
     * product added onto them */
    if (b) e->be->linear_forward(y, x, nn_w(e, l->w), b, N, 0, l->out);
    e->be->gemm_bf16(0, 1, N, l->out, l->in, 1.0f, x, l->in, 0, nn_w(e, l->w), l->in, 0,
                     b ? 1.0f : 0.0f, y, l->out, 0, 1);
}

void nn_linear_backward(const nn_linear *l, const nn_env *e, float *dx, const float *dy,
                        const float *x, int N) {
    float *dw = nn_g(e, l->w), *db = nn_g(e, l->b);
    if (!e->bf16) {
        e->be->linear_backward(dx, dw, db, dy, x, nn_w(e, l->w), N, l->in, l->out);
        return;
    }
    /* bf16: dx += dy w and dw += dy^T x in bf16 products, db in fp32 */
    if (dx)
        e->be->gemm_bf16(0, 0, N, l->in, l->out, 1.0f, dy, l->out, 0, nn_w(e, l->w), l->in, 0, 1.0f,
                         dx, l->in, 0, 1);
    if (dw)
        e->be->gemm_bf16(1, 0, l->out, l->in, N, 1.0f, dy, l->out, 0, x, l->in, 0, 1.0f, dw, l->in,
                         0, 1);
    if (db) e->be->linear_backward(NULL, NULL, db, dy, x, nn_w(e, l->w), N, l->in, l->out);
}
