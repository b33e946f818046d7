/* nn_bilstm.c — the multi-head bidirectional LSTM mixer (nn_bilstm.h) over
 * bk's LSTM ops: declare, plan, forward, backward, FLOPs. */

#include "worker/nn/nn_bilstm.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int nn_bilstm_declare(nn_bilstm *l, nn_params *np, const char *prefix, const char *out_prefix,
                      int C, int heads, int hadamard, float out_std, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    if (heads < 1 || C % heads || (C / heads) % 2 || C / heads / 2 > BK_LSTM_MAX_H) {
        snprintf(err, errlen,
                 "%s: bilstm needs d_model %d divisible by %d heads into an even head width of at "
                 "most %d",
                 prefix, C, heads, 2 * BK_LSTM_MAX_H);
        return -1;
    }
    l->C = C;
    l->H = heads;
    l->Hh = C / heads / 2;
    l->S = 2 * heads;
    float std = 1.0f / sqrtf(3.0f * l->Hh);
    char p[BK_NAME_MAX];
    snprintf(p, sizeof p, "%s.ih", prefix);
    int rc = nn_linear_declare(&l->ih, np, p, C, l->S * 4 * l->Hh, 1, std);
    snprintf(p, sizeof p, "%s.hh", prefix);
    l->w_hh = nn_param(np, p, "weight", l->S * 4 * l->Hh, l->Hh, 1, nn_normal(std));
    if (rc || l->w_hh < 0) {
        snprintf(err, errlen, "out of memory declaring %s", prefix);
        return -1;
    }
    return nn_outproj_declare(&l->out, np, out_prefix, C, hadamard, out_std, err, errlen);
}

int nn_bilstm_plan(nn_bilstm *l, bk_arena *A, int B, int T) {
    size_t BT = (size_t)B * T;
    l->B = B;
    l->T = T;
    l->gx = bk_arena_floats(A, BT * l->S * 4 * l->Hh);
    l->saved = bk_arena_floats(A, BT * l->S * 6 * l->Hh);
    l->inner = bk_arena_floats(A, BT * l->C);
    nn_outproj_plan(&l->out, A, BT);
    return 0;
}

void nn_bilstm_scratch(const nn_bilstm *l, nn_scratch *s) {
    size_t BT = (size_t)l->B * l->T, G4 = (size_t)l->S * 4 * l->Hh;
    nn_scratch_need(s, 2 * BT * l->C + BT * G4 + (size_t)l->B * G4 * l->Hh);
}

static bk_lstm_args lstm_args(const nn_bilstm *l, const nn_call *c) {
    return (bk_lstm_args){.B = c->B, .T = c->T, .S = l->S, .H = l->Hh, .bidir = 1, .mask = c->mask};
}

double nn_bilstm_flops(const nn_bilstm *l, int n) {
    double G4 = (double)l->S * 4 * l->Hh;
    double out = l->out.hadamard ? l->C * (log2((double)l->C) + 2) : 2.0 * l->C * l->C;
    return n * (2.0 * l->C * G4 + 2.0 * G4 * l->Hh + 10.0 * l->S * l->Hh + out);
}

void nn_bilstm_forward(nn_bilstm *l, const nn_env *e, nn_scratch *s, const nn_call *c, float *y,
                       const float *u) {
    (void)s;
    int BT = c->B * c->T;
    nn_linear_forward(&l->ih, e, l->gx, u, BT);
    bk_lstm_args la = lstm_args(l, c);
    /* the saved gates and states are only read by a backward */
    e->be->lstm_forward(l->inner, c->training ? l->saved : NULL, l->gx, nn_w(e, l->w_hh), &la);
    nn_outproj_forward(&l->out, e, y, l->inner, BT, c->training);
    if (c->training || !c->st) return;
    for (int b = 0; b < c->B; b++) c->st->attn_flops += nn_bilstm_flops(l, nn_active_tokens(c, b));
}

void nn_bilstm_backward(nn_bilstm *l, const nn_env *e, nn_scratch *s, const nn_call *c, float *du,
                        const float *dy, const float *dinner, const float *u) {
    const bk_backend *be = e->be;
    int BT = c->B * c->T;
    size_t G4 = (size_t)l->S * 4 * l->Hh, nC = (size_t)BT * l->C;
    nn_scratch_begin(s);
    float *din = nn_scratch_floats(s, nC), *oscr = nn_scratch_floats(s, nC);
    float *dgx = nn_scratch_floats(s, (size_t)BT * G4);
    float *lscr = nn_scratch_floats(s, (size_t)c->B * G4 * l->Hh);
    nn_outproj_backward(&l->out, e, din, oscr, dy, l->inner, BT);
    if (dinner) be->add(din, din, dinner, nC);
    be->zero(dgx, (size_t)BT * G4 * sizeof(float));
    bk_lstm_args la = lstm_args(l, c);
    be->lstm_backward(dgx, nn_g(e, l->w_hh), lscr, din, l->saved, nn_w(e, l->w_hh), &la);
    nn_linear_backward(&l->ih, e, du, dgx, u, BT);
}
