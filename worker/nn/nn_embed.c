/* nn_embed.c — token embedding plus learned positions (nn_embed.h):
 * declare, forward, backward (scatter-add into E and P), and rows at given
 * positions for decoding. */

#include "worker/nn/nn_embed.h"

int nn_embed_declare(nn_embed *m, nn_params *np, int V, int T, int C, float std) {
    m->V = V;
    m->T = T;
    m->C = C;
    m->tok = nn_param(np, "tok_emb", "weight", V, C, 1, nn_normal(std));
    m->pos = nn_param(np, "pos_emb", "weight", T, C, 1, nn_normal(std));
    return m->tok < 0 || m->pos < 0 ? -1 : 0;
}

void nn_embed_forward(const nn_embed *m, const nn_env *e, float *x, const int *ids, int B, int T) {
    e->be->embedding_forward(x, ids, nn_w(e, m->tok), B * T, m->C);
    e->be->posadd_forward(x, x, nn_w(e, m->pos), B, T, m->C);
}

void nn_embed_backward(const nn_embed *m, const nn_env *e, const float *dx, const int *ids, int B,
                       int T) {
    float *dpos = nn_g(e, m->pos), *dtok = nn_g(e, m->tok);
    if (dpos) e->be->posadd_backward(NULL, dpos, dx, B, T, m->C);
    if (dtok) e->be->embedding_backward(dtok, dx, ids, B * T, m->C);
}

void nn_embed_rows(const nn_embed *m, const nn_env *e, float *x, const int *ids, const int *posids,
                   int N, float *tmp) {
    e->be->embedding_forward(x, ids, nn_w(e, m->tok), N, m->C);
    e->be->embedding_forward(tmp, posids, nn_w(e, m->pos), N, m->C);
    e->be->add(x, x, tmp, (size_t)N * m->C);
}
