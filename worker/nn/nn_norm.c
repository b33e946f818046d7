/* nn_norm.c — LayerNorm over the last dimension (nn_norm.h): declare, plan
 * the activations it keeps, forward, backward over bk's layernorm ops. */

#include "worker/nn/nn_norm.h"

int nn_layernorm_declare(nn_layernorm *n, nn_params *np, const char *prefix, int C) {
    n->C = C;
    n->w = nn_param(np, prefix, "weight", C, 0, 0, nn_ones());
    n->b = nn_param(np, prefix, "bias", C, 0, 0, nn_zeros());
    return n->w < 0 || n->b < 0 ? -1 : 0;
}

void nn_ln_acts_plan(nn_ln_acts *a, bk_arena *A, size_t rows, int C) {
    a->out = bk_arena_floats(A, rows * C);
    a->mean = bk_arena_floats(A, rows);
    a->rstd = bk_arena_floats(A, rows);
}

void nn_layernorm_forward(const nn_layernorm *n, const nn_env *e, nn_ln_acts *a, const float *x,
                          int N) {
    e->be->layernorm_forward(a->out, a->mean, a->rstd, x, nn_w(e, n->w), nn_w(e, n->b), N, n->C);
}

void nn_layernorm_backward(const nn_layernorm *n, const nn_env *e, const nn_ln_acts *a, float *dx,
                           const float *dout, const float *x, int N) {
    e->be->layernorm_backward(dx, nn_g(e, n->w), nn_g(e, n->b), dout, x, nn_w(e, n->w), a->mean,
                              a->rstd, N, n->C);
}
