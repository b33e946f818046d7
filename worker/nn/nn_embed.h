/* nn_embed — token embedding plus learned positions: x[b,t] = E[id] + P[t]
 * ("tok_emb.weight" [V,C], "pos_emb.weight" [T,C]; both N(0, 0.02)). The
 * decoder's output head reuses E (tied), so E's gradient gets both uses. */
#ifndef NN_EMBED_H
#define NN_EMBED_H

#include "worker/nn/nn.h"

typedef struct nn_embed {
    int tok, pos;
    int V, T, C;
} nn_embed;

int nn_embed_declare(nn_embed *m, nn_params *np, int V, int T, int C, float std);
/* x[B,T,C] = E[ids] + P; ids device [B*T] */
void nn_embed_forward(const nn_embed *m, const nn_env *e, float *x, const int *ids, int B, int T);
/* dE, dP += from dx[B,T,C] (frozen tensors skipped) */
void nn_embed_backward(const nn_embed *m, const nn_env *e, const float *dx, const int *ids, int B,
                       int T);
/* Rows at arbitrary positions: x[N,C] = E[ids] + P[posids]; tmp [N,C]. */
void nn_embed_rows(const nn_embed *m, const nn_env *e, float *x, const int *ids, const int *posids,
                   int N, float *tmp);

#endif
