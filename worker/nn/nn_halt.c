/* nn_halt.c — A-ViT adaptive token halting (nn_halt.h): halting scores per
 * layer, the ponder and distribution losses with their backward, the halted
 * output, retention and the prior's schedule. */

#include "worker/nn/nn_halt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int nn_halt_plan(nn_halt *h, bk_arena *A, int L, int B, int T, int C) {
    size_t BT = (size_t)B * T;
    h->L = L;
    h->B = B;
    h->T = T;
    if (!h->mask) {
        h->mask = calloc((size_t)L + 1, sizeof *h->mask);
        h->h = calloc((size_t)L, sizeof *h->h);
        h->h_mask = calloc((size_t)L + 1, sizeof *h->h_mask);
        h->h_ones = malloc(BT * sizeof(float));
        h->ones = calloc((size_t)L + 1, sizeof *h->ones);
        if (!h->mask || !h->h || !h->h_mask || !h->h_ones || !h->ones) return -1;
        for (int l = 0; l <= L; l++)
            if (!(h->h_mask[l] = malloc(BT * sizeof(float)))) return -1;
        for (size_t i = 0; i < BT; i++) h->h_ones[i] = 1.0f;
    }
    for (int l = 0; l <= L; l++) h->mask[l] = bk_arena_floats(A, BT);
    for (int l = 0; l < L; l++) h->h[l] = bk_arena_floats(A, BT);
    h->cum = bk_arena_floats(A, BT);
    h->rem = bk_arena_floats(A, BT);
    h->at = bk_arena_ints(A, BT);
    h->hstats = (double *)bk_arena_floats(A, 2 * BK_HALT_STATS(L));
    h->dldp = bk_arena_floats(A, (size_t)L);
    h->out = bk_arena_floats(A, BT * C);
    h->dout = bk_arena_floats(A, BT * C);
    return 0;
}

void nn_halt_free(nn_halt *h) {
    for (int l = 0; h->h_mask && l <= h->L; l++) free(h->h_mask[l]);
    free(h->mask), free(h->h), free(h->h_mask), free(h->h_ones), free(h->ones);
    h->mask = NULL, h->h = NULL, h->h_mask = NULL, h->h_ones = NULL, h->ones = NULL;
}

void nn_halt_begin(nn_halt *h, const nn_env *e, int B) {
    const bk_backend *be = e->be;
    size_t BT = (size_t)B * h->T;
    /* constants made on the device, not uploaded per step: 1.0f and -1 */
    be->fill32(h->mask[0], 0x3f800000u, BT);
    be->fill32(h->rem, 0x3f800000u, BT);
    be->fill32(h->at, 0xffffffffu, BT);
    be->zero(h->cum, BT * sizeof(float));
    be->zero(h->hstats, BK_HALT_STATS(h->L) * sizeof(double));
    memcpy(h->h_mask[0], h->h_ones, BT * sizeof(float));
    h->ones[0] = 1;
    for (int l = 1; l <= h->L; l++) h->ones[l] = 0;
}

float nn_halt_gate_centre(const nn_halt_cfg *cf) { return cf->centre + cf->gate; }

static bk_halt_args halt_args(const nn_halt *h, int l, int B, int C) {
    return (bk_halt_args){.B = B,
                          .T = h->T,
                          .C = C,
                          .layer = l,
                          .layers = h->L,
                          .gamma = h->cf.gamma,
                          .centre = nn_halt_gate_centre(&h->cf),
                          .eps = h->cf.eps,
                          .prior = h->cf.prior};
}

void nn_halt_layer(nn_halt *h, const nn_env *e, int l, const float *out, int B, int C,
                   int training) {
    bk_halt_args a = halt_args(h, l, B, C);
    e->be->halt_forward(h->h[l], h->mask[l + 1], h->cum, h->rem, h->at, h->hstats, out, h->mask[l],
                        &a);
    h->ones[l + 1] = 0;
    if (training) return;
    size_t n = (size_t)B * h->T;
    e->be->to_host(h->h_mask[l + 1], h->mask[l + 1], n * sizeof(float));
    /* the host copy is here anyway: whether the next layer freezes nothing */
    size_t i = 0;
    while (i < n && h->h_mask[l + 1][i] == 1.0f) i++;
    h->ones[l + 1] = i == n;
}

static double patch_tokens(const nn_halt *h, int B) { return (double)B * (h->T - 1); }

void nn_halt_loss(nn_halt *h, const nn_env *e, double *stats, int B, int slot_ponder,
                  int slot_prior, int slot_keep) {
    bk_halt_loss_args a = {.layers = h->L,
                           .tokens = patch_tokens(h, B),
                           .centre_depth =
                               nn_halt_centre(h->cf.retention, h->L, h->cf.sigma) + h->cf.shift,
                           .sigma = h->cf.sigma,
                           .ponder_weight = h->cf.ponder_weight,
                           .prior_weight = h->cf.prior_weight,
                           .slot_ponder = slot_ponder,
                           .slot_prior = slot_prior,
                           .slot_keep = slot_keep,
                           .prior = h->cf.prior};
    e->be->halt_loss(stats, h->dldp, h->hstats, &a);
}

void nn_halt_backward(nn_halt *h, const nn_env *e, int l, float *dout, int B, int C) {
    bk_halt_args a = halt_args(h, l, B, C);
    float pgrad = (float)(-h->cf.ponder_weight / patch_tokens(h, B));
    e->be->halt_backward(dout, h->h[l], h->at, h->dldp, pgrad, &a);
}

const float *nn_halt_output(nn_halt *h, const nn_env *e, float *const *x, int B, int C) {
    if (h->cf.freeze) return x[h->L];
    e->be->zero(h->out, (size_t)B * h->T * C * sizeof(float));
    for (int l = 0; l < h->L; l++) {
        bk_halt_args a = halt_args(h, l, B, C);
        e->be->halt_act_forward(h->out, x[l + 1], h->h[l], h->at, h->rem, &a);
    }
    return h->out;
}

void nn_halt_output_backward(nn_halt *h, const nn_env *e, int l, float *dx, float *const *x, int B,
                             int C) {
    if (h->cf.freeze) return;
    bk_halt_args a = halt_args(h, l, B, C);
    e->be->halt_act_backward(dx, h->dout, x[l + 1], x[h->L], h->h[l], h->at, h->rem, &a);
}

double nn_halt_retention(const nn_halt *h, int B, int b) {
    double keep = 0;
    int b0 = b < 0 ? 0 : b, b1 = b < 0 ? B : b + 1;
    for (int l = 0; l < h->L; l++)
        for (int s = b0; s < b1; s++)
            for (int k = 1; k < h->T; k++) keep += h->h_mask[l][(size_t)s * h->T + k] > 0;
    return keep / ((double)(b1 - b0) * (h->T - 1) * h->L);
}

static double implied_retention(double mu, int L, double sigma) {
    double z = 0, r = 0;
    for (int l = 0; l < L; l++) {
        double d = (l - mu) / sigma, p = exp(-0.5 * d * d);
        z += p;
        r += p * (l + 1);
    }
    return r / (z * L);
}

float nn_halt_centre(float r, int L, float sigma) {
    double lo = -2.0 * L, hi = 3.0 * L;
    for (int i = 0; i < 60; i++) {
        double mid = 0.5 * (lo + hi);
        if (implied_retention(mid, L, sigma) < r)
            lo = mid;
        else
            hi = mid;
    }
    return (float)(0.5 * (lo + hi));
}

int nn_halt_prior_of(const char *name) {
    if (strcmp(name, "spend") == 0) return BK_PRIOR_SPEND;
    if (strcmp(name, "nvlabs") == 0) return BK_PRIOR_NVLABS;
    return BK_PRIOR_PAPER;
}

const char *nn_halt_prior_name(int prior) {
    return prior == BK_PRIOR_SPEND ? "spend" : prior == BK_PRIOR_NVLABS ? "nvlabs" : "paper";
}
