/* nn_outproj.c — the output projection a sequential mixer shares with
 * attention (nn_outproj.h): dense or Hadamard; declare, plan, forward,
 * backward. */

#include "worker/nn/nn_outproj.h"

#include <stdio.h>

int nn_outproj_declare(nn_outproj *o, nn_params *np, const char *prefix, int C, int hadamard,
                       float std, char *err, size_t errlen) {
    o->C = C;
    o->hadamard = hadamard;
    o->alpha = o->beta = -1;
    o->lin.w = o->lin.b = -1;
    if (hadamard && !bk_fwht_valid(C)) {
        snprintf(err, errlen,
                 "%s: hadamard needs d_model = 2^n or 12*2^n (e.g. 64, 128, 256, 384, 512, 768, "
                 "1024), got %d",
                 prefix, C);
        return -1;
    }
    int rc;
    if (hadamard) {
        o->alpha = nn_param(np, prefix, "alpha", C, 0, 0, nn_ones());
        o->beta = nn_param(np, prefix, "beta", C, 0, 0, nn_zeros());
        rc = o->alpha < 0 || o->beta < 0;
    } else {
        rc = nn_linear_declare(&o->lin, np, prefix, C, C, 1, std);
    }
    if (rc) snprintf(err, errlen, "out of memory declaring %s", prefix);
    return rc ? -1 : 0;
}

void nn_outproj_plan(nn_outproj *o, bk_arena *A, size_t N) {
    o->pre = o->hadamard && !o->infer_only ? bk_arena_floats(A, N * o->C) : NULL;
}

void nn_outproj_forward(const nn_outproj *o, const nn_env *e, float *y, const float *x, int N,
                        int training) {
    if (o->hadamard)
        e->be->fwht_forward(y, training ? o->pre : NULL, x, nn_w(e, o->alpha), nn_w(e, o->beta), N,
                            o->C);
    else
        nn_linear_forward(&o->lin, e, y, x, N);
}

void nn_outproj_backward(const nn_outproj *o, const nn_env *e, float *dx, float *scratch,
                         const float *dy, const float *x, int N) {
    if (o->hadamard)
        e->be->fwht_backward(dx, nn_g(e, o->alpha), nn_g(e, o->beta), scratch, dy, x, o->pre,
                             nn_w(e, o->alpha), N, o->C);
    else {
        e->be->zero(dx, (size_t)N * o->C * sizeof(float));
        nn_linear_backward(&o->lin, e, dx, dy, x, N);
    }
}
