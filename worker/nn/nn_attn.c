/* nn_attn.c — multi-head self-attention (nn_attn.h) over bk's attention ops:
 * declare, plan, forward, backward, the head budget, and decode with a KV
 * cache. */

#include "worker/nn/nn_attn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nn_attn_declare(nn_attn *a, nn_params *np, const char *prefix, const nn_attn_cfg *cf, float std,
                    float out_std, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    a->cf = *cf;
    a->bfc.w = a->bfc.b = a->bout.w = a->bout.b = a->scorer.w = a->scorer.b = -1;
    if (cf->NH < 1 || cf->C % cf->NH) {
        snprintf(err, errlen, "attention: d_model %d is not divisible by %d heads", cf->C, cf->NH);
        return -1;
    }
    char p[BK_NAME_MAX];
    snprintf(p, sizeof p, "%s.qkv", prefix);
    if (nn_linear_declare(&a->qkv, np, p, cf->C, 3 * cf->C, 1, std)) {
        snprintf(err, errlen, "out of memory declaring %s", prefix);
        return -1;
    }
    snprintf(p, sizeof p, "%s.out", prefix);
    if (nn_outproj_declare(&a->out, np, p, cf->C, cf->hadamard, out_std, err, errlen)) return -1;
    a->out.infer_only = cf->scratch_maps; /* an inference-only model keeps nothing for a backward */
    return 0;
}

void nn_attn_budget_init(nn_attn *a, nn_params *np, float s_min, float s_max) {
    if (!a->cf.budget || a->bout.b < 0) return;
    float s0 = 0.5f * (s_min + s_max);
    if (s0 < 0.02f) s0 = 0.02f;
    if (s0 > 0.98f) s0 = 0.98f;
    np->init[a->bout.b] = nn_const(logf(s0 / (1.0f - s0)));
}

int nn_attn_declare_budget(nn_attn *a, nn_params *np, const char *prefix, float std) {
    if (!a->cf.budget) return 0;
    int C = a->cf.C;
    char p[BK_NAME_MAX];
    snprintf(p, sizeof p, "%s.budget.fc", prefix);
    int rc = nn_linear_declare(&a->bfc, np, p, C, C / 4, 1, std);
    snprintf(p, sizeof p, "%s.budget.out", prefix);
    rc = rc || nn_linear_declare(&a->bout, np, p, C / 4, 1, 1, std);
    if (!rc) nn_attn_budget_init(a, np, 0, 1);
    snprintf(p, sizeof p, "%s.scorer", prefix);
    rc = rc || nn_linear_declare(&a->scorer, np, p, C, a->cf.NH, 1, std);
    return rc ? -1 : 0;
}

int nn_attn_plan(nn_attn *a, bk_arena *A, int B, int T) {
    int C = a->cf.C, NH = a->cf.NH;
    size_t BT = (size_t)B * T;
    a->B = B;
    a->T = T;
    a->qkv_act = bk_arena_floats(A, BT * 3 * C);
    int tiled = a->cf.tiled_min_t > 0 && T >= a->cf.tiled_min_t;
    a->lse = tiled ? bk_arena_floats(A, (size_t)B * NH * T) : NULL;
    a->att = a->cf.scratch_maps || tiled ? NULL : bk_arena_floats(A, (size_t)B * NH * T * T);
    a->atty = bk_arena_floats(A, BT * C);
    nn_outproj_plan(&a->out, A, BT);
    if (!a->cf.budget) return 0;
    a->xbar = bk_arena_floats(A, (size_t)B * C);
    a->bh = bk_arena_floats(A, (size_t)B * (C / 4));
    a->bg = bk_arena_floats(A, (size_t)B * (C / 4));
    a->bf = bk_arena_floats(A, (size_t)B);
    a->z = bk_arena_floats(A, (size_t)B * NH);
    a->gate = bk_arena_floats(A, (size_t)B * NH);
    a->gsave = bk_arena_floats(A, BK_GATE_SAVE_FLOATS(B, NH));
    if (!A->base || a->h_s) return 0; /* planning pass, or already allocated */
    size_t BH = (size_t)B * NH;
    a->h_s = calloc((size_t)B, sizeof(float));
    a->h_f = calloc((size_t)B, sizeof(float));
    a->h_z = calloc(BH, sizeof(float));
    a->h_heads = calloc(BH, sizeof(int));
    a->h_k = calloc((size_t)B, sizeof(int));
    return a->h_s && a->h_f && a->h_z && a->h_heads && a->h_k ? 0 : -1;
}

void nn_attn_scratch(const nn_attn *a, nn_scratch *s) {
    int C = a->cf.C, NH = a->cf.NH, HS = C / NH, B = a->B, T = a->T;
    size_t BT = (size_t)B * T;
    /* backward: dqkv, datty, datt (none when tiled), fwht scratch, and the
     * budget's small ones */
    size_t maps = a->lse ? 0 : (size_t)B * NH * T * T;
    size_t bwd = BT * 3 * C + BT * C + maps + BT * C;
    nn_scratch_need(s, maps); /* scratch_maps: the forward's maps */
    if (a->cf.budget) bwd += 3 * (size_t)B * NH + (size_t)B * C + 2 * (size_t)B * (C / 4) + B;
    nn_scratch_need(s, bwd);
    if (a->cf.budget) /* inference with selected heads */
        nn_scratch_need(s, (size_t)B * NH * T * (3 * HS + T) + 3 * BT * C + BT + (size_t)B * NH);
}

void nn_attn_free(nn_attn *a) {
    free(a->h_s), free(a->h_f), free(a->h_z), free(a->h_heads), free(a->h_k);
    a->h_s = a->h_f = a->h_z = NULL;
    a->h_heads = a->h_k = NULL;
}

double nn_attn_flops(const nn_attn_cfg *cf, int k, int n) {
    double C = cf->C, HS = (double)cf->C / cf->NH;
    double proj = 2.0 * n * C * 3.0 * HS * k;           /* Q, K, V rows of the used heads */
    double scores = 2.0 * 2.0 * (double)n * n * HS * k; /* QK^T and PV */
    double out;
    if (cf->hadamard) {
        int lg = 0;
        while ((1 << (lg + 1)) <= cf->C) lg++;
        out = (double)n * C * (lg + 2); /* butterflies + scale + shift */
    } else {
        out = 2.0 * n * HS * k * C; /* only the used heads' columns of W_O */
    }
    return proj + scores + out;
}

/* ---- the host-side head gate (docs/design.md#budgetformer) ---- */

static float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Ranks (1 = best) of H scores; ties go to the lower index. */
static void rank_heads(const float *zn, int H, int *rank) {
    for (int i = 0; i < H; i++) {
        int r = 1;
        for (int j = 0; j < H; j++)
            if (zn[j] > zn[i] || (zn[j] == zn[i] && j < i)) r++;
        rank[i] = r;
    }
}

static int budget_k(float s, int H, int force_k) {
    if (force_k > 0) return force_k < H ? force_k : H;
    int k = (int)floorf(s * (float)H);
    return k < 1 ? 1 : (k > H ? H : k);
}

/* Budget network and scorer on the device: f[B] = a->bf, z[B,H] = a->z. */
static void budget_forward(nn_attn *a, const nn_env *e, const nn_call *c, const float *u) {
    const bk_backend *be = e->be;
    int B = c->B;
    be->meanpool_forward(a->xbar, u, c->mask, B, c->T, a->cf.C);
    nn_linear_forward(&a->bfc, e, a->bh, a->xbar, B);
    be->gelu_forward(a->bg, a->bh, (size_t)B * a->bfc.out);
    nn_linear_forward(&a->bout, e, a->bf, a->bg, B);
    nn_linear_forward(&a->scorer, e, a->z, a->xbar, B);
}

/* Inference: s and z on the host, to group samples by k. */
static void budget_to_host(nn_attn *a, const nn_env *e, const nn_call *c) {
    const bk_backend *be = e->be;
    int B = c->B, NH = a->cf.NH;
    be->to_host(a->h_f, a->bf, (size_t)B * sizeof(float));
    be->to_host(a->h_z, a->z, (size_t)B * NH * sizeof(float));
    for (int b = 0; b < B; b++) {
        a->h_s[b] = sigmoidf_(a->h_f[b]);
        c->st->mean_s += a->h_s[b];
    }
}

/* The device gate's arguments for this call. */
static bk_gate_args gate_args(const nn_attn *a, const nn_call *c) {
    const nn_knobs *kn = c->kn;
    return (bk_gate_args){.B = c->B,
                          .H = a->cf.NH,
                          .tau = kn->tau,
                          .sigma = kn->sigma,
                          .tau_r = kn->tau_r,
                          .s_min = kn->s_min,
                          .s_max = kn->s_max,
                          .lambda_budget = kn->lambda_budget,
                          .lambda_entropy = kn->lambda_entropy,
                          .progress = kn->progress,
                          .norm = 1.0 / ((double)c->B * c->layers),
                          .seed = kn->seed,
                          .step = kn->step,
                          .row_offset = kn->row_offset,
                          .layer = c->layer,
                          .exact_gradient = kn->exact_gradient,
                          .head_cost = NULL};
}

int nn_attn_selected_heads(const nn_attn *a, int b, int *heads) {
    int H = a->cf.NH;
    const float *z = a->h_z + (size_t)b * H;
    int rank[256];
    rank_heads(z, H, rank);
    int k = a->h_k[b], n = 0;
    for (int r = 1; r <= k; r++)
        for (int i = 0; i < H; i++)
            if (rank[i] == r) heads[n++] = i;
    return k;
}

static void attn_args(const nn_attn *a, const nn_call *c, bk_attn_args *g, int B,
                      const float *gate) {
    g->B = B;
    g->T = c->T;
    g->C = a->cf.C;
    g->NH = a->cf.NH;
    g->causal = a->cf.causal;
    g->mask = c->mask;
    g->gate = gate;
    g->lse = NULL;
}

/* Inference with only the selected heads: samples grouped by k so that each
 * group is one op call. Writes the output projection into y. */
static void attention_selected(nn_attn *a, const nn_env *e, nn_scratch *s, const nn_call *c,
                               float *y, const float *u) {
    const bk_backend *be = e->be;
    int B = c->B, C = a->cf.C, NH = a->cf.NH, T = c->T, HS = C / NH;
    size_t TC = (size_t)T * C, BT = (size_t)B * T;
    nn_scratch_begin(s);
    float *sel_scratch = nn_scratch_floats(s, (size_t)B * NH * T * (3 * HS + T));
    float *sel_x = nn_scratch_floats(s, BT * C), *sel_out = nn_scratch_floats(s, BT * C);
    float *sel_proj = nn_scratch_floats(s, BT * C), *sel_mask = nn_scratch_floats(s, BT);
    int *sel_heads = nn_scratch_ints(s, (size_t)B * NH);
    for (int b = 0; b < B; b++) a->h_k[b] = budget_k(a->h_s[b], NH, c->kn->force_k);
    for (int k = 1; k <= NH; k++) {
        int nb = 0;
        for (int b = 0; b < B; b++) nb += a->h_k[b] == k;
        if (!nb) continue;
        /* every sample runs k heads: no gather or scatter, the op reads and
         * writes the batch in place */
        int whole = nb == B;
        nb = 0;
        for (int b = 0; b < B; b++) {
            if (a->h_k[b] != k) continue;
            nn_attn_selected_heads(a, b, a->h_heads + (size_t)nb * k);
            if (!whole) {
                be->copy(sel_x + nb * TC, u + b * TC, TC * sizeof(float));
                if (c->mask)
                    be->copy(sel_mask + (size_t)nb * T, c->mask + (size_t)b * T,
                             (size_t)T * sizeof(float));
            }
            nb++;
        }
        be->to_device(sel_heads, a->h_heads, (size_t)nb * k * sizeof(int));
        bk_attn_args g;
        attn_args(a, c, &g, nb, NULL);
        if (!whole && c->mask) g.mask = sel_mask;
        float *out_proj = whole ? y : sel_proj;
        be->attention_selected_forward(sel_out, sel_scratch, whole ? u : sel_x, nn_w(e, a->qkv.w),
                                       nn_w(e, a->qkv.b), sel_heads, k, &g);
        if (a->out.hadamard) /* parameter-free mixing: no head's columns to skip */
            nn_outproj_forward(&a->out, e, out_proj, sel_out, nb * T, 0);
        else
            be->linear_selected_forward(out_proj, sel_out, nn_w(e, a->out.lin.w),
                                        nn_w(e, a->out.lin.b), sel_heads, k, nb, T, C, NH, C);
        if (whole) continue;
        nb = 0;
        for (int b = 0; b < B; b++) {
            if (a->h_k[b] != k) continue;
            be->copy(y + b * TC, sel_proj + nb * TC, TC * sizeof(float));
            nb++;
        }
    }
}

void nn_attn_forward(nn_attn *a, const nn_env *e, nn_scratch *s, const nn_call *c, float *y,
                     const float *u) {
    const bk_backend *be = e->be;
    int B = c->B, NH = a->cf.NH;
    size_t BT = (size_t)B * c->T;
    if (a->cf.budget) budget_forward(a, e, c, u);
    if (a->cf.budget && !c->training) {
        budget_to_host(a, e, c);
        attention_selected(a, e, s, c, y, u);
    } else {
        const float *gate = NULL;
        if (a->cf.budget) {
            bk_gate_args ga = gate_args(a, c);
            be->gate_forward(a->gate, NULL, a->gsave, c->dstats, a->bf, a->z, &ga);
            gate = a->gate;
        }
        nn_linear_forward(&a->qkv, e, a->qkv_act, u, (int)BT);
        bk_attn_args g;
        attn_args(a, c, &g, B, gate);
        float *att = a->att;
        g.lse = a->lse;
        if (!att && !a->lse) { /* scratch_maps (inference only) */
            nn_scratch_begin(s);
            att = nn_scratch_floats(s, (size_t)B * NH * c->T * c->T);
        }
        be->attention_forward(a->atty, att, a->qkv_act, &g);
        nn_outproj_forward(&a->out, e, y, a->atty, (int)BT, c->training);
    }
    /* heads used and attention FLOPs by the inference rule (with the budget
     * in training, the gate op adds them into the device stats) */
    if (a->cf.budget && c->training) return;
    for (int b = 0; b < B; b++) {
        int k = a->cf.budget ? a->h_k[b] : NH;
        c->st->heads_used += (double)k / NH;
        c->st->attn_flops += nn_attn_flops(&a->cf, k, nn_active_tokens(c, b));
    }
}

void nn_attn_backward(nn_attn *a, const nn_env *e, nn_scratch *s, const nn_call *c, float *du,
                      const float *dy, const float *dinner, const float *u) {
    const bk_backend *be = e->be;
    int B = c->B, T = c->T, C = a->cf.C, NH = a->cf.NH;
    size_t BT = (size_t)B * T;
    nn_scratch_begin(s);
    float *datty = nn_scratch_floats(s, BT * C), *dqkv = nn_scratch_floats(s, BT * 3 * C);
    float *datt = a->lse ? NULL : nn_scratch_floats(s, (size_t)B * NH * T * T);
    float *out_scratch = nn_scratch_floats(s, BT * C);
    nn_outproj_backward(&a->out, e, datty, out_scratch, dy, a->atty, (int)BT);
    if (dinner) be->add(datty, datty, dinner, BT * C);
    be->zero(dqkv, BT * 3 * C * sizeof(float));
    bk_attn_args g;
    attn_args(a, c, &g, B, a->cf.budget ? a->gate : NULL);
    g.lse = a->lse;
    float *dgate = NULL;
    if (a->cf.budget) {
        dgate = nn_scratch_floats(s, (size_t)B * NH);
        be->zero(dgate, (size_t)B * NH * sizeof(float));
    }
    be->attention_backward(dqkv, dgate, datt, datty, a->qkv_act, a->att, &g);
    nn_linear_backward(&a->qkv, e, du, dqkv, u, (int)BT);
    if (!a->cf.budget) return;
    float *dz = nn_scratch_floats(s, (size_t)B * NH), *dbf = nn_scratch_floats(s, (size_t)B);
    float *dxbar = nn_scratch_floats(s, (size_t)B * C);
    float *dbg = nn_scratch_floats(s, (size_t)B * (C / 4));
    float *dbh = nn_scratch_floats(s, (size_t)B * (C / 4));
    bk_gate_args ga = gate_args(a, c);
    be->zero(dz, (size_t)B * NH * sizeof(float));
    be->zero(dbf, (size_t)B * sizeof(float));
    be->gate_backward(dbf, dz, dgate, a->gsave, &ga);
    be->zero(dxbar, (size_t)B * C * sizeof(float));
    nn_linear_backward(&a->scorer, e, dxbar, dz, a->xbar, B);
    be->zero(dbg, (size_t)B * (C / 4) * sizeof(float));
    nn_linear_backward(&a->bout, e, dbg, dbf, a->bg, B);
    be->zero(dbh, (size_t)B * (C / 4) * sizeof(float));
    be->gelu_backward(dbh, a->bh, dbg, (size_t)B * (C / 4));
    nn_linear_backward(&a->bfc, e, dxbar, dbh, a->xbar, B);
    be->meanpool_backward(du, dxbar, c->mask, B, T, C);
}

void nn_attn_decode(const nn_attn *a, const nn_env *e, float *y_out, const float *u, float *kc,
                    float *vc, int batch, int pos, int n, float *q, float *y, float *scores) {
    const bk_backend *be = e->be;
    int C = a->cf.C, NH = a->cf.NH, HS = C / NH, rows = n * batch;
    size_t pos_stride = (size_t)batch * C; /* one position of every sequence */
    float scale = 1.0f / sqrtf((float)HS);
    const float *wqkv = nn_w(e, a->qkv.w), *bqkv = nn_w(e, a->qkv.b);
    /* q, and k and v straight into the cache at positions [pos, pos+n) */
    be->linear_forward(q, u, wqkv, bqkv, rows, C, C);
    be->linear_forward(kc + pos * pos_stride, u, wqkv + (size_t)C * C, bqkv + C, rows, C, C);
    be->linear_forward(vc + pos * pos_stride, u, wqkv + 2 * (size_t)C * C, bqkv + 2 * C, rows, C,
                       C);
    /* query position t = pos + i sees keys [0, t]: item b*NH + h of each
     * batched gemm is head h of sequence b, at column offset (b*NH+h)*HS of a
     * row of q, of the cache and of y. */
    for (int i = 0; i < n; i++) {
        int nk = pos + i + 1;
        be->gemm(0, 1, 1, nk, HS, scale, q + i * pos_stride, HS, HS, kc, batch * C, HS, 0.0f,
                 scores, nk, nk, batch * NH);
        be->softmax_forward(scores, scores, batch * NH, nk);
        be->gemm(0, 0, 1, HS, nk, 1.0f, scores, nk, nk, vc, batch * C, HS, 0.0f, y + i * pos_stride,
                 HS, HS, batch * NH);
    }
    nn_outproj_forward(&a->out, e, y_out, y, rows, 0);
}
