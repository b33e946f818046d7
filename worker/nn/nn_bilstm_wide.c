/* nn_bilstm_wide.c — the wide multi-head bidirectional LSTM mixer
 * (nn_bilstm_wide.h) over bk's GEMM and LSTM ops: declare, plan, forward,
 * backward, FLOPs. The per-head projections are strided batched GEMMs over
 * the heads; their biases broadcast as a rank-1 product with a ones column. */

#include "worker/nn/nn_bilstm_wide.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int nn_bilstm_wide_declare(nn_bilstm_wide *l, nn_params *np, const char *prefix,
                           const char *out_prefix, int C, int heads, int hadamard, float out_std,
                           char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    if (heads < 1 || C % heads || C / heads > BK_LSTM_MAX_H) {
        snprintf(err, errlen,
                 "%s: bilstm_wide needs d_model %d divisible by %d heads into a head width of at "
                 "most %d",
                 prefix, C, heads, BK_LSTM_MAX_H);
        return -1;
    }
    l->C = C;
    l->H = heads;
    l->dh = C / heads;
    l->S = 2 * heads;
    int dh = l->dh, rc = 0;
    float std = 1.0f / sqrtf(3.0f * dh);
    char p[BK_NAME_MAX];
    snprintf(p, sizeof p, "%s.pre", prefix);
    rc |= nn_linear_declare(&l->pre, np, p, C, C, 1, 1.0f / sqrtf(3.0f * C));
    snprintf(p, sizeof p, "%s.ih", prefix);
    l->w_ih = nn_param(np, p, "weight", heads * 8 * dh, dh, 1, nn_normal(std));
    l->b_ih = nn_param(np, p, "bias", 8 * C, 0, 0, nn_zeros());
    snprintf(p, sizeof p, "%s.hh", prefix);
    l->w_hh = nn_param(np, p, "weight", l->S * 4 * dh, dh, 1, nn_normal(std));
    snprintf(p, sizeof p, "%s.head", prefix);
    l->w_head = nn_param(np, p, "weight", C, 2 * dh, 1, nn_normal(1.0f / sqrtf(6.0f * dh)));
    l->b_head = nn_param(np, p, "bias", C, 0, 0, nn_zeros());
    if (rc || l->w_ih < 0 || l->b_ih < 0 || l->w_hh < 0 || l->w_head < 0 || l->b_head < 0) {
        snprintf(err, errlen, "out of memory declaring %s", prefix);
        return -1;
    }
    return nn_outproj_declare(&l->out, np, out_prefix, C, hadamard, out_std, err, errlen);
}

int nn_bilstm_wide_plan(nn_bilstm_wide *l, bk_arena *A, int B, int T) {
    size_t BT = (size_t)B * T, C = (size_t)l->C;
    l->B = B;
    l->T = T;
    l->p = bk_arena_floats(A, BT * C);
    l->gx = bk_arena_floats(A, BT * 8 * C);
    l->saved = bk_arena_floats(A, BT * l->S * 6 * l->dh);
    l->hs = bk_arena_floats(A, BT * 2 * C);
    l->inner = bk_arena_floats(A, BT * C);
    l->ones = bk_arena_floats(A, BT);
    nn_outproj_plan(&l->out, A, BT);
    return 0;
}

void nn_bilstm_wide_scratch(const nn_bilstm_wide *l, nn_scratch *s) {
    size_t BT = (size_t)l->B * l->T, C = (size_t)l->C;
    nn_scratch_need(s, BT * (3 * C + 2 * C + 8 * C) + (size_t)l->B * 8 * C * l->dh);
}

static bk_lstm_args lstm_args(const nn_bilstm_wide *l, const nn_call *c) {
    return (bk_lstm_args){.B = c->B, .T = c->T, .S = l->S, .H = l->dh, .bidir = 1, .mask = c->mask};
}

double nn_bilstm_wide_flops(const nn_bilstm_wide *l, int n) {
    double C = l->C, dh = l->dh;
    double out = l->out.hadamard ? C * (log2(C) + 2) : 2.0 * C * C;
    /* pre, ih, hh, the gates, head, out */
    return n *
           (2.0 * C * C + 16.0 * C * dh + 16.0 * C * dh + 10.0 * l->S * dh + 4.0 * C * dh + out);
}

/* out[BT,N] = ones[BT] x bias[N] (beta 0) or += (beta 1). */
static void bias_rows(const bk_backend *be, float *out, const float *ones, const float *bias,
                      int BT, int N, float beta) {
    be->gemm(0, 0, BT, N, 1, 1.0f, ones, 1, 0, bias, N, 0, beta, out, N, 0, 1);
}

/* dbias[N] += sum over BT rows of d[BT,N] (nothing when frozen). */
static void bias_grad(const bk_backend *be, float *dbias, const float *ones, const float *d, int BT,
                      int N) {
    if (dbias) be->gemm(1, 0, 1, N, BT, 1.0f, ones, 1, 0, d, N, 0, 1.0f, dbias, N, 0, 1);
}

void nn_bilstm_wide_forward(nn_bilstm_wide *l, const nn_env *e, nn_scratch *s, const nn_call *c,
                            float *y, const float *u) {
    (void)s;
    const bk_backend *be = e->be;
    int BT = c->B * c->T, C = l->C, dh = l->dh, H = l->H;
    be->fill32(l->ones, 0x3f800000u, (size_t)BT);
    nn_linear_forward(&l->pre, e, l->p, u, BT);
    bias_rows(be, l->gx, l->ones, nn_w(e, l->b_ih), BT, 8 * C, 0.0f);
    be->gemm(0, 1, BT, 8 * dh, dh, 1.0f, l->p, C, dh, nn_w(e, l->w_ih), dh, 8LL * dh * dh, 1.0f,
             l->gx, 8 * C, 8 * dh, H);
    bk_lstm_args la = lstm_args(l, c);
    /* the saved gates and states are only read by a backward */
    be->lstm_forward(l->hs, c->training ? l->saved : NULL, l->gx, nn_w(e, l->w_hh), &la);
    bias_rows(be, l->inner, l->ones, nn_w(e, l->b_head), BT, C, 0.0f);
    be->gemm(0, 1, BT, dh, 2 * dh, 1.0f, l->hs, 2 * C, 2 * dh, nn_w(e, l->w_head), 2 * dh,
             2LL * dh * dh, 1.0f, l->inner, C, dh, H);
    if (c->mask) be->rowscale(l->inner, l->inner, c->mask, BT, C);
    nn_outproj_forward(&l->out, e, y, l->inner, BT, c->training);
    if (c->training || !c->st) return;
    for (int b = 0; b < c->B; b++)
        c->st->attn_flops += nn_bilstm_wide_flops(l, nn_active_tokens(c, b));
}

void nn_bilstm_wide_backward(nn_bilstm_wide *l, const nn_env *e, nn_scratch *s, const nn_call *c,
                             float *du, const float *dy, const float *dinner, const float *u) {
    const bk_backend *be = e->be;
    int BT = c->B * c->T, C = l->C, dh = l->dh, H = l->H;
    size_t nC = (size_t)BT * C;
    nn_scratch_begin(s);
    float *din = nn_scratch_floats(s, nC), *oscr = nn_scratch_floats(s, nC);
    float *dp = nn_scratch_floats(s, nC), *dhs = nn_scratch_floats(s, 2 * nC);
    float *dgx = nn_scratch_floats(s, 8 * nC);
    float *lscr = nn_scratch_floats(s, (size_t)c->B * 8 * C * dh);
    nn_outproj_backward(&l->out, e, din, oscr, dy, l->inner, BT);
    if (dinner) be->add(din, din, dinner, nC);
    if (c->mask) be->rowscale(din, din, c->mask, BT, C);
    /* the head projection: dhs = din_h W_head[h]; dW_head[h] += din_h^T hs_h */
    const float *whead = nn_w(e, l->w_head);
    float *gwhead = nn_g(e, l->w_head);
    be->gemm(0, 0, BT, 2 * dh, dh, 1.0f, din, C, dh, whead, 2 * dh, 2LL * dh * dh, 0.0f, dhs, 2 * C,
             2 * dh, H);
    if (gwhead)
        be->gemm(1, 0, dh, 2 * dh, BT, 1.0f, din, C, dh, l->hs, 2 * C, 2 * dh, 1.0f, gwhead, 2 * dh,
                 2LL * dh * dh, H);
    bias_grad(be, nn_g(e, l->b_head), l->ones, din, BT, C);
    be->zero(dgx, 8 * nC * sizeof(float));
    bk_lstm_args la = lstm_args(l, c);
    be->lstm_backward(dgx, nn_g(e, l->w_hh), lscr, dhs, l->saved, nn_w(e, l->w_hh), &la);
    /* the per-head input projection: dp_h = dgx_h W_ih[h]; dW_ih[h] += dgx_h^T p_h */
    float *gwih = nn_g(e, l->w_ih);
    be->gemm(0, 0, BT, dh, 8 * dh, 1.0f, dgx, 8 * C, 8 * dh, nn_w(e, l->w_ih), dh, 8LL * dh * dh,
             0.0f, dp, C, dh, H);
    if (gwih)
        be->gemm(1, 0, 8 * dh, dh, BT, 1.0f, dgx, 8 * C, 8 * dh, l->p, C, dh, 1.0f, gwih, dh,
                 8LL * dh * dh, H);
    bias_grad(be, nn_g(e, l->b_ih), l->ones, dgx, BT, 8 * C);
    nn_linear_backward(&l->pre, e, du, dp, u, BT);
}
