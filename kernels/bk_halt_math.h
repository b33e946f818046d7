/* The A-ViT halting formulas shared by the CPU ops (cpu_halt.c) and the CUDA
 * ops (cuda/cuda_halt.cu), so that both compute them from one text: the gate,
 * one token's step of ACT, the clamps of the distillation alignment, the
 * smooth keep test and the prior's terms. Plain functions of scalars; under
 * nvcc they are host and device functions. */
#ifndef BK_HALT_MATH_H
#define BK_HALT_MATH_H
#include <math.h>

#include "kernels/bk.h"

#ifdef __CUDACC__
#define BK_HD __host__ __device__
#else
#define BK_HD
#endif

/* h = sigmoid(gamma t0 - centre) */
static inline BK_HD float bk_halt_gate(float t0, const bk_halt_args *a) {
    return 1.0f / (1.0f + expf(-(a->gamma * t0 - a->centre)));
}

/* What one active patch token adds to a layer's sums (halt_forward). */
typedef struct bk_halt_step {
    float h;    /* the score kept for the backward (the gate's, the last layer's too) */
    int halts;  /* cum reached 1 - eps at this layer */
    double p;   /* its share of psum */
    double rem; /* the remainder it halts with (0 while running) */
} bk_halt_step;

/* One ACT step of an active patch token at layer a->layer: updates *cum,
 * *rem and *at in place. */
static inline BK_HD bk_halt_step bk_halt_token(float t0, float *cum, float *rem, int *at,
                                               const bk_halt_args *a) {
    bk_halt_step s;
    int last = a->layer == a->layers - 1;
    float g = bk_halt_gate(t0, a), hv = last ? 1.0f : g;
    s.h = g;
    *cum += hv;
    s.halts = *cum >= 1.0f - a->eps;
    if (s.halts) {
        *at = a->layer;
        s.rem = *rem;
        s.p = a->prior == BK_PRIOR_SPEND ? *rem : g;
    } else {
        *rem -= hv;
        s.rem = 0;
        s.p = a->prior == BK_PRIOR_SPEND ? hv : g;
    }
    return s;
}

/* The halting gradient's factor g of one patch token at this layer
 * (halt_backward); the token takes gamma h (1 - h) g. */
static inline BK_HD float bk_halt_grad(int at, const float *dldp, float pgrad,
                                       const bk_halt_args *a) {
    int l = a->layer;
    if (a->prior == BK_PRIOR_SPEND) return at > l ? dldp[l] - dldp[at] + pgrad : 0.0f;
    /* nvlabs: a token halted before this layer scores a constant (its row
     * was zeroed) */
    if (a->prior == BK_PRIOR_NVLABS && at < l) return 0.0f;
    /* paper: every patch token's score is in q_l, halted ones too (their
     * rows stay as they were when they halted) */
    return dldp[l] + (at > l ? pgrad : 0.0f);
}

/* The prior's share of a patch token that halted before this layer (or is
 * masked). NVlabs' code averages h over every token, halted or not, but
 * zeroes a halted token's row, so nvlabs counts the gate of a zero row,
 * sigmoid(-centre), a constant; paper reads the gate's score on the row as
 * it stands (frozen where the token halted), so q keeps a gradient when a
 * layer has no active token; the spend prior reads nothing of it. */
static inline BK_HD float bk_halt_inactive_score(float t0, const bk_halt_args *a) {
    if (a->prior == BK_PRIOR_SPEND) return 0.0f;
    return bk_halt_gate(a->prior == BK_PRIOR_NVLABS ? 0.0f : t0, a);
}

/* The ACT output weight of a token at this layer (halt_act_forward). */
static inline BK_HD float bk_halt_act_weight(int k, int at, float h, float rem,
                                             const bk_halt_args *a) {
    if (k == 0) return a->layer == a->layers - 1 ? 1.0f : 0.0f;
    return at == a->layer ? rem : at > a->layer ? h : 0.0f;
}

/* The distillation alignment's clamps of the teacher's and the student's score. */
static inline BK_HD double bk_halt_clamp_t(double p) {
    return p < 1e-6 ? 1e-6 : p > 1 - 1e-6 ? 1 - 1e-6 : p;
}
static inline BK_HD double bk_halt_clamp_s(double q) {
    return q < 1e-12 ? 1e-12 : q > 1 - 1e-12 ? 1 - 1e-12 : q;
}
/* binary KL(p || q) */
static inline BK_HD double bk_halt_bkl(double p, double q) {
    return p * log(p / q) + (1 - p) * log((1 - p) / (1 - q));
}
/* The smooth halting test: a token with cumulative score c before this layer
 * and score h here runs on with sigmoid(gamma (1 - eps - c - h)). */
static inline BK_HD double bk_halt_soft_keep(double c, double h, const bk_halt_args *a) {
    return 1.0 / (1.0 + exp(-(double)a->gamma * (1.0 - a->eps - c - h)));
}

/* The prior pi_l before normalisation: exp(-(l - centre)^2 / 2 sigma^2). */
static inline BK_HD double bk_halt_prior(int l, const bk_halt_loss_args *a) {
    double d = (l - a->centre_depth) / a->sigma;
    return exp(-0.5 * d * d);
}

/* q_l from psum_l and the total S (paper: clamped to [0.01, 0.99]); *free
 * says whether it passes a gradient. */
static inline BK_HD double bk_halt_q(double s, double S, int *free_, const bk_halt_loss_args *a) {
    double tiny = 1e-12, Sq = S > tiny ? S : tiny, sl = s > tiny ? s : tiny, q = sl / Sq;
    *free_ = 1;
    if (a->prior != BK_PRIOR_SPEND && q < 0.01) q = 0.01, *free_ = 0;
    if (a->prior != BK_PRIOR_SPEND && q > 0.99) q = 0.99, *free_ = 0;
    return q;
}
#endif
