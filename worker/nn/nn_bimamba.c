/* nn_bimamba.c — the multi-head bidirectional Mamba mixer (nn_bimamba.h)
 * over bk's selective-scan ops: declare, plan, forward, backward, FLOPs. */

#include "worker/nn/nn_bimamba.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* One block-diagonal product: G items of a strided batched gemm, alpha 1. */
static void bgemm(const bk_backend *be, int ta, int tb, int M, int N, int K, const float *A,
                  int lda, long long sA, const float *Bm, int ldb, long long sB, float beta,
                  float *Cm, int ldc, long long sC, int G) {
    be->gemm(ta, tb, M, N, K, 1.0f, A, lda, sA, Bm, ldb, sB, beta, Cm, ldc, sC, G);
}

/* The same with alpha 1/2: W_out's products with ysum = y_fwd + y_bwd. */
static void bgemm_half(const bk_backend *be, int ta, int tb, int M, int N, int K, const float *A,
                       int lda, long long sA, const float *Bm, int ldb, long long sB, float beta,
                       float *Cm, int ldc, long long sC, int G) {
    be->gemm(ta, tb, M, N, K, 0.5f, A, lda, sA, Bm, ldb, sB, beta, Cm, ldc, sC, G);
}

int nn_bimamba_declare(nn_bimamba *m, nn_params *np, const char *prefix, const char *out_prefix,
                       int C, int heads, int hadamard, float std, float out_std, char *err,
                       size_t errlen) {
    memset(m, 0, sizeof *m);
    if (heads < 1 || C % heads) {
        snprintf(err, errlen, "%s: d_model %d is not divisible by %d heads", prefix, C, heads);
        return -1;
    }
    m->C = C;
    m->G = heads;
    m->dh = C / heads;
    m->D = NN_MAMBA_EXPAND * C;
    m->Dg = m->D / m->G;
    m->N = NN_MAMBA_STATE;
    m->R = (m->dh + 15) / 16;
    m->K = NN_MAMBA_CONV;
    if (m->Dg > 1024) {
        snprintf(err, errlen, "%s: head width %d too large for the scan (at most 512)", prefix,
                 m->dh);
        return -1;
    }
    int D = m->D, Dg = m->Dg, P = m->R + 2 * m->N;
    char p[BK_NAME_MAX];
    int rc = 0;
    snprintf(p, sizeof p, "%s.in", prefix);
    m->w_in = nn_param(np, p, "weight", 2 * D, m->dh, 1, nn_normal(std));
    rc |= m->w_in < 0;
    static const char *names[2] = {"fwd", "bwd"};
    for (int r = 0; r < 2; r++) {
        nn_mamba_dir *d = &m->dir[r];
        char q[BK_NAME_MAX];
        snprintf(q, sizeof q, "%s.%s.conv", prefix, names[r]);
        d->conv_w = nn_param(np, q, "weight", D, m->K, 1, nn_normal(1.0f / sqrtf(3.0f * m->K)));
        d->conv_b = nn_param(np, q, "bias", D, 0, 0, nn_zeros());
        snprintf(q, sizeof q, "%s.%s.x_proj", prefix, names[r]);
        d->x_proj = nn_param(np, q, "weight", m->G * P, Dg, 1, nn_normal(1.0f / sqrtf(3.0f * Dg)));
        snprintf(q, sizeof q, "%s.%s.dt_proj", prefix, names[r]);
        d->dt_w = nn_param(np, q, "weight", D, m->R, 1, nn_normal(1.0f / sqrtf(3.0f * m->R)));
        d->dt_b = nn_param(np, q, "bias", D, 0, 0, nn_dt_bias(1e-3f, 1e-1f));
        snprintf(q, sizeof q, "%s.%s", prefix, names[r]);
        d->A_log = nn_param(np, q, "A_log", D, m->N, 0, nn_log_arange());
        d->Dskip = nn_param(np, q, "D", D, 0, 0, nn_ones());
        rc |= d->conv_w < 0 || d->conv_b < 0 || d->x_proj < 0 || d->dt_w < 0 || d->dt_b < 0 ||
              d->A_log < 0 || d->Dskip < 0;
    }
    snprintf(p, sizeof p, "%s.out", prefix);
    m->w_out = nn_param(np, p, "weight", C, Dg, 1, nn_normal(std));
    rc |= m->w_out < 0;
    if (rc) {
        snprintf(err, errlen, "out of memory declaring %s", prefix);
        return -1;
    }
    return nn_outproj_declare(&m->out, np, out_prefix, C, hadamard, out_std, err, errlen);
}

int nn_bimamba_plan(nn_bimamba *m, bk_arena *A, int B, int T) {
    size_t BT = (size_t)B * T, P = (size_t)m->R + 2 * m->N;
    size_t nch = ((size_t)T + BK_SCAN_CHUNK - 1) / BK_SCAN_CHUNK;
    m->B = B;
    m->T = T;
    m->x = bk_arena_floats(A, BT * m->D);
    m->z = bk_arena_floats(A, BT * m->D);
    for (int r = 0; r < 2; r++) {
        nn_mamba_dir *d = &m->dir[r];
        d->xc = bk_arena_floats(A, BT * m->D);
        d->xdbl = bk_arena_floats(A, BT * m->G * P);
        d->dpre = bk_arena_floats(A, BT * m->D);
        d->states = bk_arena_floats(A, (size_t)B * m->D * nch * m->N);
    }
    m->ysum = bk_arena_floats(A, BT * m->D);
    m->inner = bk_arena_floats(A, BT * m->C);
    nn_outproj_plan(&m->out, A, BT);
    return 0;
}

void nn_bimamba_scratch(const nn_bimamba *m, nn_scratch *s) {
    size_t BT = (size_t)m->B * m->T, P = (size_t)m->R + 2 * m->N;
    size_t need = 2 * BT * m->C + 5 * BT * m->D + BT * m->G * P;
    need += (size_t)m->B * m->D * (2 * m->N + 2) + (size_t)m->B * m->D * (m->K + 1);
    nn_scratch_need(s, need);
}

static bk_conv_args conv_args(const nn_bimamba *m, const nn_call *c, int r) {
    return (bk_conv_args){
        .B = c->B, .T = c->T, .C = m->D, .K = m->K, .reverse = r, .silu = 1, .mask = c->mask};
}

static bk_scan_args scan_args(const nn_bimamba *m, const nn_env *e, const nn_call *c, int r) {
    const nn_mamba_dir *d = &m->dir[r];
    return (bk_scan_args){.B = c->B,
                          .T = c->T,
                          .D = m->D,
                          .G = m->G,
                          .N = m->N,
                          .reverse = r,
                          .bc_stride = m->R + 2 * m->N,
                          .x = d->xc,
                          .delta = d->dpre,
                          .delta_bias = nn_w(e, d->dt_b),
                          .A_log = nn_w(e, d->A_log),
                          .Bm = d->xdbl + m->R,
                          .Cm = d->xdbl + m->R + m->N,
                          .Dskip = nn_w(e, d->Dskip),
                          .z = m->z,
                          .mask = c->mask};
}

double nn_bimamba_flops(const nn_bimamba *m, int n) {
    double D = m->D, P = m->R + 2.0 * m->N;
    /* W_in; per direction conv, W_x, W_Δ and the scan (about 9 per state);
     * W_out (every projection block-diagonal) */
    double per = 4.0 * D * m->dh +
                 2.0 * (2.0 * D * m->K + 2.0 * P * m->Dg * m->G + 2.0 * D * m->R + 9.0 * D * m->N) +
                 2.0 * D * m->dh;
    double out = m->out.hadamard ? m->C * (log2((double)m->C) + 2) : 2.0 * m->C * m->C;
    return n * (per + out);
}

/* With m->prof: the seconds since *t0 go to stage k (after a sync). */
static void stage_done(const nn_bimamba *m, const bk_backend *be, int k, double *t0) {
    if (!m->prof) return;
    be->sync();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    if (k >= 0) m->prof[k] += t - *t0;
    *t0 = t;
}

void nn_bimamba_forward(nn_bimamba *m, const nn_env *e, nn_scratch *s, const nn_call *c, float *y,
                        const float *u) {
    (void)s;
    const bk_backend *be = e->be;
    int BT = c->B * c->T, G = m->G, dh = m->dh, D = m->D, Dg = m->Dg, R = m->R;
    int P = R + 2 * m->N, C = m->C;
    double t0 = 0;
    stage_done(m, be, -1, &t0);
    const float *win = nn_w(e, m->w_in);
    bgemm(be, 0, 1, BT, Dg, dh, u, C, dh, win, dh, (long long)Dg * dh, 0.0f, m->x, D, Dg, G);
    bgemm(be, 0, 1, BT, Dg, dh, u, C, dh, win + (size_t)D * dh, dh, (long long)Dg * dh, 0.0f, m->z,
          D, Dg, G);
    stage_done(m, be, NN_MAMBA_IN, &t0);
    for (int r = 0; r < 2; r++) {
        nn_mamba_dir *d = &m->dir[r];
        bk_conv_args ca = conv_args(m, c, r);
        be->conv1d_forward(d->xc, m->x, nn_w(e, d->conv_w), nn_w(e, d->conv_b), &ca);
        stage_done(m, be, NN_MAMBA_CONV_ST, &t0);
        bgemm(be, 0, 1, BT, P, Dg, d->xc, D, Dg, nn_w(e, d->x_proj), Dg, (long long)P * Dg, 0.0f,
              d->xdbl, G * P, P, G);
        bk_scan_args sa = scan_args(m, e, c, r);
        if (c->training) { /* the backward reads W_delta delta as a tensor */
            bgemm(be, 0, 1, BT, Dg, R, d->xdbl, G * P, P, nn_w(e, d->dt_w), R, (long long)Dg * R,
                  0.0f, d->dpre, D, Dg, G);
        } else { /* inference: the scan applies W_delta itself */
            sa.delta_w = nn_w(e, d->dt_w);
            sa.dlow = d->xdbl;
            sa.R = R;
        }
        stage_done(m, be, NN_MAMBA_XPROJ, &t0);
        /* ysum = (y_fwd + y_bwd) SiLU(z): the forward direction writes its
         * ungated y, the backward one adds itself on and applies the gate */
        if (r == 0) sa.z = NULL;
        sa.accumulate = r;
        be->scan_forward(m->ysum, c->training ? d->states : NULL, &sa);
        stage_done(m, be, NN_MAMBA_SCAN, &t0);
    }
    bgemm_half(be, 0, 1, BT, dh, Dg, m->ysum, D, Dg, nn_w(e, m->w_out), Dg, (long long)dh * Dg,
               0.0f, m->inner, C, dh, G);
    nn_outproj_forward(&m->out, e, y, m->inner, BT, c->training);
    stage_done(m, be, NN_MAMBA_OUT, &t0);
    if (c->training || !c->st) return;
    for (int b = 0; b < c->B; b++) c->st->attn_flops += nn_bimamba_flops(m, nn_active_tokens(c, b));
}

void nn_bimamba_backward(nn_bimamba *m, const nn_env *e, nn_scratch *s, const nn_call *c, float *du,
                         const float *dy, const float *dinner, const float *u) {
    const bk_backend *be = e->be;
    int B = c->B, BT = c->B * c->T, G = m->G, dh = m->dh, D = m->D, Dg = m->Dg, R = m->R;
    int P = R + 2 * m->N, C = m->C;
    size_t nD = (size_t)BT * D, nP = (size_t)BT * G * P;
    nn_scratch_begin(s);
    float *din = nn_scratch_floats(s, (size_t)BT * C), *oscr = nn_scratch_floats(s, (size_t)BT * C);
    float *dys = nn_scratch_floats(s, nD), *dx = nn_scratch_floats(s, nD);
    float *dz = nn_scratch_floats(s, nD), *dxc = nn_scratch_floats(s, nD);
    float *ddpre = nn_scratch_floats(s, nD), *dxdbl = nn_scratch_floats(s, nP);
    float *sscr = nn_scratch_floats(s, (size_t)B * D * (2 * m->N + 2));
    float *cscr = nn_scratch_floats(s, (size_t)B * D * (m->K + 1));
    nn_outproj_backward(&m->out, e, din, oscr, dy, m->inner, BT);
    if (dinner) be->add(din, din, dinner, (size_t)BT * C);
    /* inner = W_out ysum / 2, ysum = y_fwd + y_bwd */
    const float *wout = nn_w(e, m->w_out);
    /* dys = W_out^T din / 2: the half in the product's alpha (exact, a power
     * of two), not in a pass of its own over B x T x D */
    bgemm_half(be, 0, 0, BT, Dg, dh, din, C, dh, wout, Dg, (long long)dh * Dg, 0.0f, dys, D, Dg, G);
    float *gout = nn_g(e, m->w_out);
    if (gout)
        bgemm_half(be, 1, 0, dh, Dg, BT, din, C, dh, m->ysum, D, Dg, 1.0f, gout, Dg,
                   (long long)dh * Dg, G);
    /* No zeroing passes over the [B,T,D] buffers: the first writer of each
     * assigns. dz and dx: the forward direction's scan and conv write them,
     * the backward direction's add on; dxc, ddpre and dBm/dCm of dxdbl:
     * each direction's scan writes them anew; dxdbl's delta columns: the
     * W_delta product with beta 0. */
    for (int r = 0; r < 2; r++) {
        nn_mamba_dir *d = &m->dir[r];
        bk_scan_args sa = scan_args(m, e, c, r);
        bk_scan_grads sg = {.dx = dxc,
                            .ddelta = ddpre,
                            .ddelta_bias = nn_g(e, d->dt_b),
                            .dA_log = nn_g(e, d->A_log),
                            .dBm = dxdbl + R,
                            .dCm = dxdbl + R + m->N,
                            .dDskip = nn_g(e, d->Dskip),
                            .dz = dz,
                            .overwrite = 1,
                            .dz_overwrite = r == 0};
        be->scan_backward(&sg, sscr, dys, d->states, &sa);
        /* dpre = W_Δ δ */
        bgemm(be, 0, 0, BT, R, Dg, ddpre, D, Dg, nn_w(e, d->dt_w), R, (long long)Dg * R, 0.0f,
              dxdbl, G * P, P, G);
        float *gdt = nn_g(e, d->dt_w);
        if (gdt)
            bgemm(be, 1, 0, Dg, R, BT, ddpre, D, Dg, d->xdbl, G * P, P, 1.0f, gdt, R,
                  (long long)Dg * R, G);
        /* [δ; B; C] = W_x xc */
        bgemm(be, 0, 0, BT, Dg, P, dxdbl, G * P, P, nn_w(e, d->x_proj), Dg, (long long)P * Dg, 1.0f,
              dxc, D, Dg, G);
        float *gx = nn_g(e, d->x_proj);
        if (gx)
            bgemm(be, 1, 0, P, Dg, BT, dxdbl, G * P, P, d->xc, D, Dg, 1.0f, gx, Dg,
                  (long long)P * Dg, G);
        bk_conv_args ca = conv_args(m, c, r);
        ca.dx_overwrite = r == 0;
        be->conv1d_backward(dx, nn_g(e, d->conv_w), nn_g(e, d->conv_b), cscr, dxc, m->x,
                            nn_w(e, d->conv_w), nn_w(e, d->conv_b), &ca);
    }
    /* x, z = W_in u */
    const float *win = nn_w(e, m->w_in);
    size_t half = (size_t)D * dh;
    bgemm(be, 0, 0, BT, dh, Dg, dx, D, Dg, win, dh, (long long)Dg * dh, 1.0f, du, C, dh, G);
    bgemm(be, 0, 0, BT, dh, Dg, dz, D, Dg, win + half, dh, (long long)Dg * dh, 1.0f, du, C, dh, G);
    float *gin = nn_g(e, m->w_in);
    if (gin) {
        bgemm(be, 1, 0, Dg, dh, BT, dx, D, Dg, u, C, dh, 1.0f, gin, dh, (long long)Dg * dh, G);
        bgemm(be, 1, 0, Dg, dh, BT, dz, D, Dg, u, C, dh, 1.0f, gin + half, dh, (long long)Dg * dh,
              G);
    }
}
