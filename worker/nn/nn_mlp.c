/* nn_mlp.c — the block's MLP, y = W2 GELU(W1 u + b1) + b2 (nn_mlp.h): two
 * nn_linear around a GELU; declare, plan, forward, backward. */

#include "worker/nn/nn_mlp.h"

#include <stdio.h>

int nn_mlp_declare(nn_mlp *m, nn_params *np, const char *prefix, int C, int hidden, float std,
                   float proj_std) {
    char p[BK_NAME_MAX];
    snprintf(p, sizeof p, "%s.fc", prefix);
    if (nn_linear_declare(&m->fc, np, p, C, hidden, 1, std)) return -1;
    snprintf(p, sizeof p, "%s.proj", prefix);
    return nn_linear_declare(&m->proj, np, p, hidden, C, 1, proj_std);
}

void nn_mlp_plan(nn_mlp *m, bk_arena *A, size_t rows) {
    m->fch = bk_arena_floats(A, rows * m->fc.out);
    m->fchg = bk_arena_floats(A, rows * m->fc.out);
}

size_t nn_mlp_scratch(const nn_mlp *m, size_t rows) { return 2 * rows * m->fc.out; }

void nn_mlp_forward_rows(const nn_mlp *m, const nn_env *e, float *y, const float *u, int N,
                         float *fch, float *fchg) {
    nn_linear_forward(&m->fc, e, fch, u, N);
    e->be->gelu_forward(fchg, fch, (size_t)N * m->fc.out);
    nn_linear_forward(&m->proj, e, y, fchg, N);
}

void nn_mlp_forward(nn_mlp *m, const nn_env *e, float *y, const float *u, int N) {
    nn_mlp_forward_rows(m, e, y, u, N, m->fch, m->fchg);
}

void nn_mlp_backward(nn_mlp *m, const nn_env *e, nn_scratch *s, float *du, const float *dy,
                     const float *u, int N) {
    const bk_backend *be = e->be;
    size_t n = (size_t)N * m->fc.out;
    nn_scratch_begin(s);
    float *dfchg = nn_scratch_floats(s, n), *dfch = nn_scratch_floats(s, n);
    be->zero(dfchg, n * sizeof(float));
    nn_linear_backward(&m->proj, e, dfchg, dy, m->fchg, N);
    be->zero(dfch, n * sizeof(float));
    be->gelu_backward(dfch, m->fch, dfchg, n);
    nn_linear_backward(&m->fc, e, du, dfch, u, N);
}
