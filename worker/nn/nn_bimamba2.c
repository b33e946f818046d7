/* nn_bimamba2.c — the bidirectional Mamba-2 mixer (nn_bimamba2.h) over bk's
 * linear, conv1d, SSD and gated-RMSNorm ops: declare, plan, forward,
 * backward, FLOPs. The grouped 1x1 fusion is two strided batched GEMMs over
 * the heads (one per direction's half of each head's columns). */

#include "worker/nn/nn_bimamba2.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int nn_bimamba2_declare(nn_bimamba2 *m, nn_params *np, const char *prefix, const char *out_prefix,
                        int C, int heads, int d_state, int hadamard, float out_std, char *err,
                        size_t errlen) {
    memset(m, 0, sizeof *m);
    int N = d_state > 0 ? d_state : NN_MAMBA2_STATE;
    if (heads < 1 || C % heads || C / heads > BK_SSD_MAX || N > BK_SSD_MAX) {
        snprintf(err, errlen,
                 "%s: bimamba2 needs d_model %d divisible by %d heads, a head width and a state "
                 "size (%d) of at most %d",
                 prefix, C, heads, N, BK_SSD_MAX);
        return -1;
    }
    m->C = C;
    m->H = heads;
    m->dh = C / heads;
    m->N = N;
    m->K = NN_MAMBA2_CONV;
    int H = heads, rc = 0, W = C + 2 * N;
    static const char *names[2] = {"fwd", "bwd"};
    for (int r = 0; r < 2; r++) {
        nn_mamba2_dir *d = &m->dir[r];
        char q[BK_NAME_MAX];
        snprintf(q, sizeof q, "%s.%s.in_proj", prefix, names[r]);
        d->w_in =
            nn_param(np, q, "weight", 2 * C + 2 * N + H, C, 1, nn_normal(1.0f / sqrtf(3.0f * C)));
        snprintf(q, sizeof q, "%s.%s.conv1d", prefix, names[r]);
        d->conv_w = nn_param(np, q, "weight", W, m->K, 1, nn_normal(1.0f / sqrtf(3.0f * m->K)));
        d->conv_b = nn_param(np, q, "bias", W, 0, 0, nn_zeros());
        snprintf(q, sizeof q, "%s.%s", prefix, names[r]);
        d->dt_bias = nn_param(np, q, "dt_bias", H, 0, 0, nn_dt_bias(1e-3f, 1e-1f));
        d->A_log = nn_param(np, q, "A_log", H, 0, 0, nn_log_arange());
        d->Dskip = nn_param(np, q, "D", H, 0, 0, nn_ones());
        snprintf(q, sizeof q, "%s.%s.norm", prefix, names[r]);
        d->norm_w = nn_param(np, q, "weight", C, 0, 0, nn_ones());
        rc |= d->w_in < 0 || d->conv_w < 0 || d->conv_b < 0 || d->dt_bias < 0 || d->A_log < 0 ||
              d->Dskip < 0 || d->norm_w < 0;
    }
    char p[BK_NAME_MAX];
    snprintf(p, sizeof p, "%s.fuse", prefix);
    m->w_fuse = nn_param(np, p, "weight", C, 2 * m->dh, 1, nn_normal(1.0f / sqrtf(6.0f * m->dh)));
    if (rc || m->w_fuse < 0) {
        snprintf(err, errlen, "out of memory declaring %s", prefix);
        return -1;
    }
    return nn_outproj_declare(&m->out, np, out_prefix, C, hadamard, out_std, err, errlen);
}

static int n_chunks(int T) { return (T + BK_SSD_CHUNK - 1) / BK_SSD_CHUNK; }

int nn_bimamba2_plan(nn_bimamba2 *m, bk_arena *A, int B, int T) {
    size_t BT = (size_t)B * T, C = (size_t)m->C, W = C + 2 * (size_t)m->N;
    m->B = B;
    m->T = T;
    for (int r = 0; r < 2; r++) {
        nn_mamba2_dir *d = &m->dir[r];
        d->z = bk_arena_floats(A, BT * C);
        d->xbcp = bk_arena_floats(A, BT * W);
        d->xbc = bk_arena_floats(A, BT * W);
        d->dt = bk_arena_floats(A, BT * m->H);
        d->y = bk_arena_floats(A, BT * C);
        d->yn = bk_arena_floats(A, BT * C);
        d->rstd = bk_arena_floats(A, BT);
        d->states = bk_arena_floats(A, (size_t)B * m->H * n_chunks(T) * m->dh * m->N);
    }
    m->inner = bk_arena_floats(A, BT * C);
    nn_outproj_plan(&m->out, A, BT);
    return 0;
}

static size_t ssd_scratch(const nn_bimamba2 *m) {
    return BK_SSD_SCRATCH(m->B, m->T, m->H, m->dh, m->N, BK_SSD_CHUNK);
}

void nn_bimamba2_scratch(const nn_bimamba2 *m, nn_scratch *s) {
    size_t BT = (size_t)m->B * m->T, C = (size_t)m->C, W = C + 2 * (size_t)m->N;
    nn_scratch_need(s,
                    BT * (5 * C + 2 * W + m->H) + (size_t)m->B * W * (m->K + 1) + ssd_scratch(m));
}

static bk_conv_args conv_args(const nn_bimamba2 *m, const nn_call *c, int r) {
    return (bk_conv_args){.B = c->B,
                          .T = c->T,
                          .C = m->C + 2 * m->N,
                          .K = m->K,
                          .reverse = r,
                          .silu = 1,
                          .mask = c->mask};
}

static bk_ssd_args ssd_args(const nn_bimamba2 *m, const nn_env *e, const nn_call *c, int r) {
    const nn_mamba2_dir *d = &m->dir[r];
    return (bk_ssd_args){.B = c->B,
                         .T = c->T,
                         .H = m->H,
                         .P = m->dh,
                         .N = m->N,
                         .reverse = r,
                         .ld = m->C + 2 * m->N,
                         .x = d->xbc,
                         .Bm = d->xbc + m->C,
                         .Cm = d->xbc + m->C + m->N,
                         .dt = d->dt,
                         .dt_bias = nn_w(e, d->dt_bias),
                         .A_log = nn_w(e, d->A_log),
                         .Dskip = nn_w(e, d->Dskip),
                         .mask = c->mask};
}

double nn_bimamba2_flops(const nn_bimamba2 *m, int n) {
    double C = m->C, N = m->N, H = m->H, W = C + 2 * N;
    /* per direction: in_proj, conv, the SSD (state update and read-out, 4
     * per state entry), the gated norm; then the fusion and W_O */
    double per = 2.0 * (2.0 * C * (2 * C + 2 * N + H) + 2.0 * W * m->K + 4.0 * C * N + 8.0 * C);
    double out = m->out.hadamard ? C * (log2(C) + 2) : 2.0 * C * C;
    return n * (per + 4.0 * C * m->dh + out);
}

void nn_bimamba2_forward(nn_bimamba2 *m, const nn_env *e, nn_scratch *s, const nn_call *c, float *y,
                         const float *u) {
    const bk_backend *be = e->be;
    int BT = c->B * c->T, C = m->C, N = m->N, H = m->H, dh = m->dh, W = C + 2 * N;
    nn_scratch_begin(s);
    float *sscr = nn_scratch_floats(s, ssd_scratch(m));
    for (int r = 0; r < 2; r++) {
        nn_mamba2_dir *d = &m->dir[r];
        const float *win = nn_w(e, d->w_in);
        be->linear_forward(d->z, u, win, NULL, BT, C, C);
        be->linear_forward(d->xbcp, u, win + (size_t)C * C, NULL, BT, C, W);
        be->linear_forward(d->dt, u, win + (size_t)(2 * C + 2 * N) * C, NULL, BT, C, H);
        bk_conv_args ca = conv_args(m, c, r);
        be->conv1d_forward(d->xbc, d->xbcp, nn_w(e, d->conv_w), nn_w(e, d->conv_b), &ca);
        bk_ssd_args sa = ssd_args(m, e, c, r);
        be->ssd_forward(d->y, c->training ? d->states : NULL, sscr, &sa);
        be->rmsnorm_gated_forward(d->yn, d->rstd, d->y, d->z, nn_w(e, d->norm_w), BT, C);
    }
    /* inner_h = W_fuse[h][:, :d_h] yn_fwd,h + W_fuse[h][:, d_h:] yn_bwd,h */
    const float *wf = nn_w(e, m->w_fuse);
    for (int r = 0; r < 2; r++)
        be->gemm(0, 1, BT, dh, dh, 1.0f, m->dir[r].yn, C, dh, wf + (size_t)r * dh, 2 * dh,
                 2LL * dh * dh, r ? 1.0f : 0.0f, m->inner, C, dh, H);
    if (c->mask) be->rowscale(m->inner, m->inner, c->mask, BT, C);
    nn_outproj_forward(&m->out, e, y, m->inner, BT, c->training);
    if (c->training || !c->st) return;
    for (int b = 0; b < c->B; b++)
        c->st->attn_flops += nn_bimamba2_flops(m, nn_active_tokens(c, b));
}

void nn_bimamba2_backward(nn_bimamba2 *m, const nn_env *e, nn_scratch *s, const nn_call *c,
                          float *du, const float *dy, const float *dinner, const float *u) {
    const bk_backend *be = e->be;
    int BT = c->B * c->T, C = m->C, N = m->N, H = m->H, dh = m->dh, W = C + 2 * N;
    size_t nC = (size_t)BT * C, nW = (size_t)BT * W;
    nn_scratch_begin(s);
    float *din = nn_scratch_floats(s, nC), *oscr = nn_scratch_floats(s, nC);
    float *dyn = nn_scratch_floats(s, nC), *dys = nn_scratch_floats(s, nC);
    float *dz = nn_scratch_floats(s, nC), *dxbc = nn_scratch_floats(s, nW);
    float *dxbcp = nn_scratch_floats(s, nW), *ddt = nn_scratch_floats(s, (size_t)BT * H);
    float *cscr = nn_scratch_floats(s, (size_t)c->B * W * (m->K + 1));
    float *sscr = nn_scratch_floats(s, ssd_scratch(m));
    nn_outproj_backward(&m->out, e, din, oscr, dy, m->inner, BT);
    if (dinner) be->add(din, din, dinner, nC);
    if (c->mask) be->rowscale(din, din, c->mask, BT, C);
    const float *wf = nn_w(e, m->w_fuse);
    float *gwf = nn_g(e, m->w_fuse);
    for (int r = 0; r < 2; r++) {
        nn_mamba2_dir *d = &m->dir[r];
        /* the fusion: dyn_h = din_h W_fuse[h][:, r half]; dW_fuse[h] += din_h^T yn_h */
        be->gemm(0, 0, BT, dh, dh, 1.0f, din, C, dh, wf + (size_t)r * dh, 2 * dh, 2LL * dh * dh,
                 0.0f, dyn, C, dh, H);
        if (gwf)
            be->gemm(1, 0, dh, dh, BT, 1.0f, din, C, dh, d->yn, C, dh, 1.0f, gwf + (size_t)r * dh,
                     2 * dh, 2LL * dh * dh, H);
        be->rmsnorm_gated_backward(dys, dz, nn_g(e, d->norm_w), dyn, d->y, d->z, nn_w(e, d->norm_w),
                                   d->rstd, BT, C);
        bk_ssd_args sa = ssd_args(m, e, c, r);
        bk_ssd_grads sg = {.dx = dxbc,
                           .dBm = dxbc + C,
                           .dCm = dxbc + C + N,
                           .ddt = ddt,
                           .ddt_bias = nn_g(e, d->dt_bias),
                           .dA_log = nn_g(e, d->A_log),
                           .dDskip = nn_g(e, d->Dskip)};
        be->ssd_backward(&sg, sscr, dys, d->states, &sa);
        bk_conv_args ca = conv_args(m, c, r);
        ca.dx_overwrite = 1;
        be->conv1d_backward(dxbcp, nn_g(e, d->conv_w), nn_g(e, d->conv_b), cscr, dxbc, d->xbcp,
                            nn_w(e, d->conv_w), nn_w(e, d->conv_b), &ca);
        /* [z; xBC; dt] = u W_in^T, three row blocks of one tensor */
        const float *win = nn_w(e, d->w_in);
        float *gin = nn_g(e, d->w_in);
        size_t oxbc = (size_t)C * C, odt = (size_t)(2 * C + 2 * N) * C;
        be->linear_backward(du, gin, NULL, dz, u, win, BT, C, C);
        be->linear_backward(du, gin ? gin + oxbc : NULL, NULL, dxbcp, u, win + oxbc, BT, C, W);
        be->linear_backward(du, gin ? gin + odt : NULL, NULL, ddt, u, win + odt, BT, C, H);
    }
}
