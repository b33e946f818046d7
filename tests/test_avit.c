/* A-ViT halting (nn/nn_halt.h, kernels/cpu_halt.c, the vit model with
 * sh.avit): the gate follows ACT on a hand-made case; the prior centre
 * solves for the retention asked; the whole model's gradients with the
 * ponder and prior losses match finite differences; halted rows are frozen
 * in training; and inference that drops halted tokens physically equals the
 * masked computation (every layer's rows and the logits, within 1e-5). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk_rng.h"
#include "worker/models/model.h"
#include "worker/pipelines/pipe.h"

/* One sample, class token + 3 patches, C = 2, 3 layers, with the prior's
 * form prior (BK_PRIOR_); the scores of every layer read the same t. With
 * the gate centre 0 a zeroed row (nvlabs) scores sigmoid(0) = 1/2. */
static void gate_follows_act(int prior) {
    int spend = prior == BK_PRIOR_SPEND, nvlabs = prior == BK_PRIOR_NVLABS;
    const bk_backend *be = bk_cpu();
    float t[4 * 2] = {5, 0, 0.35f, 0, 0.2f, 0, -1, 0}; /* channel 0: scores of layer 0 */
    float mask[4] = {1, 1, 1, 1}, next[4], h[4], cum[4] = {0}, rem[4] = {1, 1, 1, 1};
    int at[4] = {-1, -1, -1, -1};
    double hs[BK_HALT_STATS(3)] = {0};
    bk_halt_args a = {.B = 1,
                      .T = 4,
                      .C = 2,
                      .layer = 0,
                      .layers = 3,
                      .gamma = 10,
                      .centre = 0,
                      .eps = 0.01f,
                      .prior = prior};
    be->halt_forward(h, next, cum, rem, at, hs, t, mask, &a);
    float h1 = 1 / (1 + expf(-3.5f)), h2 = 1 / (1 + expf(-2.0f)), h3 = 1 / (1 + expf(10.0f));
    cr_expect_float_eq(h[0], 0, 0, "the class token never scores");
    cr_expect_float_eq(h[1], h1, 1e-6);
    cr_expect_eq(next[0], 1);
    cr_expect_eq(next[1], 1);
    cr_expect_float_eq(rem[1], 1 - h1, 1e-6);
    cr_expect_float_eq(hs[0], h1 + h2 + h3, 1e-6);
    cr_expect_float_eq(hs[3], 3, 0, "three patch tokens active in layer 0");
    /* layer 1: tokens 1 and 2 score high again and halt with their remainders */
    memcpy(mask, next, sizeof mask);
    a.layer = 1;
    be->halt_forward(h, next, cum, rem, at, hs, t, mask, &a);
    cr_expect_eq(at[1], 1, "token 1 halts at layer 1 (cum %g)", cum[1]);
    cr_expect_eq(at[2], 1, "token 2 halts at layer 1 (cum %g)", cum[2]);
    cr_expect_eq(at[3], -1);
    cr_expect_eq(next[1], 0);
    cr_expect_eq(next[3], 1);
    cr_expect_float_eq(rem[1], 1 - h1, 1e-6, "a halted token keeps its remainder");
    if (spend)
        cr_expect_float_eq(hs[1], (1 - h1) + (1 - h2) + h3, 1e-6, "layer 1 spends the remainders");
    else
        cr_expect_float_eq(hs[1], h1 + h2 + h3, 1e-6, "paper: q reads the scores");
    cr_expect_float_eq(hs[6], (1 - h1) + (1 - h2), 1e-6);
    /* layer 2 (the last): everyone still running halts */
    memcpy(mask, next, sizeof mask);
    a.layer = 2;
    be->halt_forward(h, next, cum, rem, at, hs, t, mask, &a);
    cr_expect_eq(at[3], 2);
    cr_expect_eq(next[0], 1, "the class token runs to the end");
    cr_expect_float_eq(hs[5], 1, 0, "one patch token at the last layer");
    if (spend)
        cr_expect_float_eq(hs[2], 1 - 2 * h3, 1e-6);
    else if (nvlabs)
        cr_expect_float_eq(hs[2], 0.5 + 0.5 + h3, 1e-6,
                           "nvlabs: the halted tokens' rows are zeroed, each scores sigmoid(-g)");
    else
        cr_expect_float_eq(hs[2], h1 + h2 + h3, 1e-6,
                           "paper: the last layer's gate score of every patch token, the "
                           "halted ones' too, as NVlabs");
    cr_expect_float_eq(h[1],
                       spend    ? 0
                       : nvlabs ? 0.5f
                                : h1,
                       1e-6,
                       "a halted token's score: its frozen row's (paper), a zero row's (nvlabs)");
    cr_expect_float_eq(h[3], h3, 1e-6, "h keeps the gate's score at the last layer");
    /* ponder = (keep + remainders) / tokens */
    double st[BK_STAT_SLOTS] = {0};
    float dldp[3];
    bk_halt_loss_args la = {.layers = 3,
                            .tokens = 3,
                            .centre_depth = 1,
                            .sigma = 1,
                            .ponder_weight = 1,
                            .prior_weight = 0,
                            .slot_ponder = 20,
                            .slot_prior = 21,
                            .slot_keep = 22,
                            .prior = prior};
    be->halt_loss(st, dldp, hs, &la);
    double rsum = (1 - h1) + (1 - h2) + (1 - 2 * h3);
    cr_expect_float_eq(st[20], (3 + 3 + 1 + rsum) / 3, 1e-5, "ponder %g", st[20]);
    cr_expect_float_eq(st[22], 7.0 / 9, 1e-9, "keep fraction");
}

Test(avit, the_gate_follows_act) { gate_follows_act(BK_PRIOR_PAPER); }
Test(avit, the_spend_prior_follows_act) { gate_follows_act(BK_PRIOR_SPEND); }
Test(avit, the_nvlabs_prior_follows_act) { gate_follows_act(BK_PRIOR_NVLABS); }

/* The prior's gradient at a layer a token has already left: paper sends it
 * to the frozen row's channel 0 (the score it halted with is in q_l);
 * nvlabs sends none (a zeroed row's score is a constant); a token halting
 * at this layer or running on takes it in both. */
Test(avit, a_halted_token_s_prior_gradient_by_form) {
    const bk_backend *be = bk_cpu();
    enum { T = 4, C = 2, L = 3 };
    float h[T] = {0, 0.7f, 0.6f, 0.2f}, dldp[L] = {0.25f, -0.5f, 0.125f};
    int at[T] = {-1, 0, 1, 2}; /* token 1 halted at layer 0, token 2 halts here, 3 runs on */
    for (int prior = 0; prior < 3; prior++) {
        float dt[T * C] = {0};
        bk_halt_args a = {.B = 1,
                          .T = T,
                          .C = C,
                          .layer = 1,
                          .layers = L,
                          .gamma = 10,
                          .eps = 0.01f,
                          .prior = prior};
        be->halt_backward(dt, h, at, dldp, 0, &a);
        float want1 = prior == BK_PRIOR_PAPER ? 10 * 0.7f * 0.3f * dldp[1] : 0.0f;
        cr_expect_float_eq(dt[1 * C], want1, 1e-6, "prior %d: halted token 1 takes %g, want %g",
                           prior, (double)dt[1 * C], (double)want1);
        if (prior != BK_PRIOR_SPEND) {
            cr_expect_float_eq(dt[2 * C], 10 * 0.6f * 0.4f * dldp[1], 1e-6, "prior %d", prior);
            cr_expect_float_eq(dt[3 * C], 10 * 0.2f * 0.8f * dldp[1], 1e-6, "prior %d", prior);
        }
        cr_expect_float_eq(dt[0], 0, 0, "the class token takes nothing");
    }
}

/* The prior loss against its definition (A-ViT eq. 10, NVlabs' code): q_l =
 * psum_l / sum psum clamped to [0.01, 0.99], KL(pi || q); its gradient dldp
 * against finite differences of psum, a clamped layer passing none. */
Test(avit, the_paper_prior_is_the_clamped_kl_and_its_gradient) {
    const bk_backend *be = bk_cpu();
    enum { L = 5 };
    double hs[BK_HALT_STATS(L)] = {4.0, 3.0, 2.0, 1.0, 0.005, 5, 5, 4, 3, 1, 0.7};
    bk_halt_loss_args la = {.layers = L,
                            .tokens = 5,
                            .centre_depth = 2.5f,
                            .sigma = 1,
                            .ponder_weight = 0,
                            .prior_weight = 0.3f,
                            .slot_ponder = 20,
                            .slot_prior = 21,
                            .slot_keep = 22};
    double st[BK_STAT_SLOTS] = {0}, S = 0, Z = 0, want = 0;
    float dldp[L];
    be->halt_loss(st, dldp, hs, &la);
    for (int l = 0; l < L; l++) S += hs[l], Z += exp(-0.5 * (l - 2.5) * (l - 2.5));
    for (int l = 0; l < L; l++) {
        double pi = exp(-0.5 * (l - 2.5) * (l - 2.5)) / Z, q = fmin(fmax(hs[l] / S, 0.01), 0.99);
        want += pi * log(pi / q);
    }
    want *= (double)0.3f;
    cr_expect_float_eq(st[21], want, 1e-12, "prior %g, want %g", st[21], want);
    for (int l = 0; l < L; l++) {
        double h = 1e-5, x0 = hs[l], lp[BK_STAT_SLOTS] = {0}, lm[BK_STAT_SLOTS] = {0};
        float scratch[L];
        hs[l] = x0 + h;
        be->halt_loss(lp, scratch, hs, &la);
        hs[l] = x0 - h;
        be->halt_loss(lm, scratch, hs, &la);
        hs[l] = x0;
        double num = (lp[21] - lm[21]) / (2 * h);
        cr_expect_float_eq(dldp[l], num, 1e-5 + 1e-3 * fabs(num), "layer %d: %g vs %g", l,
                           (double)dldp[l], num);
    }
    cr_expect_eq(fmin(fmax(hs[4] / S, 0.01), 0.99), 0.01, "layer 4 is clamped");
}

/* The ACT output and its backward against finite differences: the loss
 * <R, out> over every row, out = sum_l w^l x[l+1] with the weights h (and
 * through R the halting layer's) from the block outputs' channel 0. The
 * halting decisions of the perturbed runs must not change (else skipped). */
Test(avit, the_act_output_and_its_gradient) {
    const bk_backend *be = bk_cpu();
    enum { B = 2, T = 7, C = 3, L = 4 };
    size_t BT = B * T;
    float x[L][B * T * C], R[B * T * C];
    for (int l = 0; l < L; l++)
        for (size_t i = 0; i < BT * C; i++)
            x[l][i] = 0.3f * bk_rng_normal_at(11, (uint64_t)l, (uint64_t)i);
    for (size_t i = 0; i < BT * C; i++) R[i] = bk_rng_normal_at(12, 0, (uint64_t)i);
    /* the loss of the halting run over outputs x (halted rows frozen as the blocks do) */
    float h[L][B * T], rem[B * T], mask[L + 1][B * T], cum[B * T], out[B * T * C], xs[L][B * T * C];
    int at[B * T], at0[B * T];
    double hs[BK_HALT_STATS(L)];
#define RUN()                                                                                      \
    do {                                                                                           \
        memset(cum, 0, sizeof cum);                                                                \
        memset(out, 0, sizeof out);                                                                \
        memset(hs, 0, sizeof hs);                                                                  \
        for (size_t i = 0; i < BT; i++) rem[i] = 1, at[i] = -1, mask[0][i] = 1;                    \
        for (int l = 0; l < L; l++) {                                                              \
            for (size_t i = 0; i < BT * C; i++)                                                    \
                xs[l][i] = mask[l][i / C] > 0 ? x[l][i] : (l ? xs[l - 1][i] : x[0][i]);            \
            bk_halt_args a = {B, T, C, l, L, 4, 0.2f, 0.01f, 0, 0};                                \
            be->halt_forward(h[l], mask[l + 1], cum, rem, at, hs, xs[l], mask[l], &a);             \
        }                                                                                          \
        for (int l = 0; l < L; l++) {                                                              \
            bk_halt_args a = {B, T, C, l, L, 4, 0.2f, 0.01f, 0, 0};                                \
            be->halt_act_forward(out, xs[l], h[l], at, rem, &a);                                   \
        }                                                                                          \
    } while (0)
    RUN();
    memcpy(at0, at, sizeof at);
    int mid = 0;
    for (size_t i = 0; i < BT; i++) mid += i % T && at[i] > 0 && at[i] < L - 1;
    cr_assert_gt(mid, 2, "tokens halt mid-depth");
    for (size_t i = 0; i < BT; i++)
        if (i % T == 0)
            cr_expect_eq(memcmp(out + i * C, xs[L - 1] + i * C, C * sizeof(float)), 0,
                         "the class token's output is its last layer's");
    float dx[L][B * T * C];
    memset(dx, 0, sizeof dx);
    for (int l = L - 1; l >= 0; l--) {
        bk_halt_args a = {B, T, C, l, L, 4, 0.2f, 0.01f, 0, 0};
        be->halt_act_backward(dx[l], R, xs[l], xs[L - 1], h[l], at, rem, &a);
        /* a frozen row passes its gradient down unchanged */
        if (l > 0)
            for (size_t i = 0; i < BT * C; i++)
                if (!(mask[l][i / C] > 0)) dx[l - 1][i] += dx[l][i], dx[l][i] = 0;
    }
    int checked = 0, skipped = 0;
    for (int l = 0; l < L; l++)
        for (size_t i = 0; i < BT * C; i += 2) {
            float x0 = x[l][i], e = 1e-3f;
            double lp = 0, lm = 0;
            x[l][i] = x0 + e;
            RUN();
            int same = memcmp(at, at0, sizeof at) == 0;
            for (size_t j = 0; j < BT * C; j++) lp += (double)R[j] * out[j];
            x[l][i] = x0 - e;
            RUN();
            same = same && memcmp(at, at0, sizeof at) == 0;
            for (size_t j = 0; j < BT * C; j++) lm += (double)R[j] * out[j];
            x[l][i] = x0;
            if (!same) {
                skipped++;
                continue;
            }
            double num = (lp - lm) / (2 * e);
            cr_expect_float_eq(dx[l][i], num, 2e-3 + 1e-2 * fabs(num),
                               "layer %d element %zu (channel %zu): %g vs %g", l, i, i % C,
                               (double)dx[l][i], num);
            checked++;
        }
#undef RUN
    cr_assert_gt(checked, 60, "checked %d, skipped %d", checked, skipped);
}

Test(avit, the_prior_centre_gives_the_retention) {
    /* every token runs layer 0, so r must exceed 1 / L */
    for (int L = 4; L <= 12; L += 4)
        for (float r = 0.3f; r < 0.95f; r += 0.2f) {
            float c = nn_halt_centre(r, L, 1);
            double z = 0, got = 0;
            for (int l = 0; l < L; l++) {
                double p = exp(-0.5 * (l - c) * (l - c));
                z += p;
                got += p * (l + 1);
            }
            cr_expect_float_eq(got / (z * L), r, 1e-4, "L %d r %g: centre %g", L, r, c);
        }
    cr_expect_lt(nn_halt_centre(0.3f, 12, 1), nn_halt_centre(0.7f, 12, 1));
}

/* 8 x 8 images, patch 2: 16 patches + the class token, 4 layers; weights
 * perturbed so that tokens halt at different depths. */
static int pixels[3 * 64];

static model_shape small_shape(int mixers, int infer_only) {
    model_shape sh = {.layers = 4,
                      .d_model = 16,
                      .heads = 2,
                      .seq_len = 17,
                      .vocab = 256,
                      .n_classes = 3,
                      .patch = 2,
                      .image_h = 8,
                      .image_w = 8,
                      .avit = 1,
                      .infer_only = infer_only};
    if (mixers) { /* the S2S student's shape: sequential mixers in the deep layers */
        sh.mixer[2] = MODEL_MIXER_BIMAMBA;
        sh.mixer[3] = MODEL_MIXER_BILSTM;
    }
    return sh;
}

static void make_opts(model *m, float centre, int mixers, int infer_only) {
    model_shape sh = small_shape(mixers, infer_only);
    char err[256];
    cr_assert_eq(model_create(m, &sh, bk_cpu(), 3, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_init_weights(m, 3, err, sizeof err), 0, "%s", err);
    for (size_t i = 0; i < m->np.P.numel; i++) m->np.P.data[i] += 0.3f * bk_rng_normal_at(9, 1, i);
    m->halt.cf.centre = centre;
    m->halt.cf.ponder_weight = 0.05f;
    m->halt.cf.prior_weight = 0.5f;
    m->halt.cf.retention = 0.6f;
    for (int i = 0; i < 3 * 64; i++) pixels[i] = (i * 37 + 11) % 256;
}

static void make_mixers(model *m, float centre, int mixers) { make_opts(m, centre, mixers, 0); }
static void make(model *m, float centre) { make_mixers(m, centre, 0); }

static double loss_at(model *m, const int *targets) {
    char err[256];
    cr_assert_eq(model_forward(m, pixels, NULL, targets, 3, 1, err, sizeof err), 0, "%s", err);
    return m->st.loss;
}

/* The halting depth of every token of the last forward. */
static void depths(const model *m, int *out) { memcpy(out, m->halt.at, 3 * 17 * sizeof(int)); }

Test(avit, gradients_with_the_halting_losses_match_finite_differences) {
    model m;
    make(&m, 0.5f);
    int targets[3] = {0, 2, 1}, d0[51], d1[51];
    loss_at(&m, targets);
    cr_assert_gt(m.st.loss_ponder, 0);
    cr_assert_gt(m.st.loss_prior, 0);
    cr_assert(m.st.retention > 0.3 && m.st.retention < 0.95, "retention %g: want some halting",
              m.st.retention);
    depths(&m, d0);
    model_backward(&m);
    float *g = malloc(m.np.P.numel * sizeof(float));
    memcpy(g, m.np.P.grad, m.np.P.numel * sizeof(float));
    int checked = 0, skipped = 0;
    for (int t = 0; t < m.np.P.n; t++) {
        const bk_tensor *tt = &m.np.P.t[t];
        for (int j = 0; j < 4 && (size_t)j < tt->numel; j++) {
            size_t i = tt->offset + (size_t)((j * 7919u) % tt->numel);
            float x0 = m.np.P.data[i], h = 1e-3f;
            m.np.P.data[i] = x0 + h;
            double lp = loss_at(&m, targets);
            depths(&m, d1);
            int same = memcmp(d0, d1, sizeof d0) == 0;
            m.np.P.data[i] = x0 - h;
            double lm = loss_at(&m, targets);
            depths(&m, d1);
            same = same && memcmp(d0, d1, sizeof d0) == 0;
            m.np.P.data[i] = x0;
            if (!same) { /* a token crossed its threshold: the loss jumps there */
                skipped++;
                continue;
            }
            double num = (lp - lm) / (2.0 * h), ana = g[i];
            cr_expect_leq(fabs(num - ana), 2e-3 + 3e-2 * fmax(fabs(num), fabs(ana)),
                          "%s[%zu]: analytic %g numeric %g", tt->name, i - tt->offset, ana, num);
            checked++;
        }
    }
    cr_assert_gt(checked, 40, "checked %d, skipped %d", checked, skipped);
    free(g);
    model_destroy(&m);
}

Test(avit, halted_rows_are_frozen_in_training) {
    model m;
    make(&m, 0.5f);
    int targets[3] = {0, 2, 1}, frozen = 0;
    loss_at(&m, targets);
    for (int l = 1; l < 4; l++)
        for (int r = 0; r < 51; r++) {
            if (m.halt.mask[l][r] > 0) continue;
            frozen++;
            cr_expect_eq(memcmp(m.x[l + 1] + r * 16, m.x[l] + r * 16, 16 * sizeof(float)), 0,
                         "layer %d row %d changed after halting", l, r);
        }
    cr_assert_gt(frozen, 10);
    model_destroy(&m);
}

static void dropping_equals_masking(int mixers) {
    model m;
    make_mixers(&m, 0.5f, mixers);
    int targets[3] = {0, 2, 1};
    char err[256];
    size_t rows = 3 * 17 * 16;
    float *x[5], logits[9];
    m.drop = 0;
    cr_assert_eq(model_forward(&m, pixels, NULL, targets, 3, 0, err, sizeof err), 0, "%s", err);
    double ret = m.st.retention;
    cr_assert(ret > 0.3 && ret < 0.95, "retention %g", ret);
    for (int l = 0; l <= 4; l++) {
        x[l] = malloc(rows * sizeof(float));
        memcpy(x[l], m.x[l], rows * sizeof(float));
    }
    memcpy(logits, m.h_logits, sizeof logits);
    m.drop = 1;
    cr_assert_eq(model_forward(&m, pixels, NULL, targets, 3, 0, err, sizeof err), 0, "%s", err);
    cr_expect_float_eq(m.st.retention, ret, 1e-12, "the same tokens halt");
    double worst = 0;
    for (int l = 1; l <= 4; l++)
        for (size_t i = 0; i < rows; i++) worst = fmax(worst, fabs(m.x[l][i] - x[l][i]));
    for (int i = 0; i < 9; i++) worst = fmax(worst, fabs(m.h_logits[i] - logits[i]));
    cr_expect_leq(worst, 1e-5, "dropped vs masked: worst difference %g", worst);
    for (int l = 0; l <= 4; l++) free(x[l]);
    model_destroy(&m);
}

#define CENTRE_LATE 30.0f
/* nn_halt's ones: mask[0] is all ones by construction; at inference each
 * later mask's flag says what its host copy holds; in training (no host
 * copy) only mask[0] is known. */
Test(avit, the_all_ones_flags_follow_the_masks) {
    model m;
    make(&m, 0.5f);
    int targets[3] = {0, 2, 1}, some = 0, none = 0;
    char err[256];
    m.drop = 0;
    for (int k = 0; k < 2; k++) {
        m.halt.cf.centre = k ? 0.5f : CENTRE_LATE; /* all running / halting from layer 1 */
        cr_assert_eq(model_forward(&m, pixels, NULL, targets, 3, 0, err, sizeof err), 0, "%s", err);
        cr_expect_eq(m.halt.ones[0], 1);
        for (int l = 1; l <= 4; l++) {
            int ones = 1;
            for (int r = 0; r < 51; r++) ones = ones && m.halt.h_mask[l][r] == 1.0f;
            cr_expect_eq(m.halt.ones[l], ones, "centre %g, layer %d", m.halt.cf.centre, l);
            some += ones, none += !ones;
        }
    }
    cr_expect(some > 0 && none > 0, "want both kinds of layer (%d all ones, %d not)", some, none);
    loss_at(&m, targets);
    cr_expect_eq(m.halt.ones[0], 1);
    for (int l = 1; l <= 4; l++) cr_expect_eq(m.halt.ones[l], 0, "training, layer %d", l);
    model_destroy(&m);
}

Test(avit, dropping_halted_tokens_equals_masking_them) { dropping_equals_masking(0); }

/* The same with bimamba and bilstm in the deep layers (the S2S student): the
 * sequential mixers run on each sample's compacted active tokens. */
Test(avit, dropping_equals_masking_with_sequential_mixers) { dropping_equals_masking(1); }

/* A model built for inference only (model_shape.infer_only: every attention
 * layer's maps in the shared scratch) computes bit for bit what the full one
 * does, dropping halted tokens or masking them; it plans one layer's maps
 * fewer per layer, and refuses a training forward. */
Test(avit, inference_only_models_match_and_hold_no_maps) {
    model full, inf;
    make_opts(&full, 0.5f, 1, 0);
    make_opts(&inf, 0.5f, 1, 1);
    int targets[3] = {0, 2, 1};
    char err[256];
    for (int drop = 0; drop < 2; drop++) {
        full.drop = inf.drop = drop;
        cr_assert_eq(model_forward(&full, pixels, NULL, targets, 3, 0, err, sizeof err), 0, "%s",
                     err);
        cr_assert_eq(model_forward(&inf, pixels, NULL, targets, 3, 0, err, sizeof err), 0, "%s",
                     err);
        cr_expect_eq(memcmp(full.h_logits, inf.h_logits, 9 * sizeof(float)), 0,
                     "drop %d: logits differ", drop);
        for (int l = 1; l <= 4; l++)
            cr_expect_eq(memcmp(full.x[l], inf.x[l], 3 * 17 * 16 * sizeof(float)), 0,
                         "drop %d: layer %d's output differs", drop, l);
    }
    model_mem a, b;
    model pa, pb;
    model_shape sh = full.sh;
    cr_assert_eq(model_plan(&pa, &sh, 3, &a, err, sizeof err), 0, "%s", err);
    sh.infer_only = 1;
    cr_assert_eq(model_plan(&pb, &sh, 3, &b, err, sizeof err), 0, "%s", err);
    /* layers 0 and 1 are attention (2 and 3 the sequential mixers): 3 x 2 heads x 17 x 17 each */
    size_t maps = 2 * (size_t)3 * 2 * 17 * 17 * sizeof(float);
    cr_expect_leq(b.act_bytes + maps, a.act_bytes, "activations %zu vs %zu (maps %zu)", b.act_bytes,
                  a.act_bytes, maps);
    cr_expect_eq(model_forward(&inf, pixels, NULL, targets, 3, 1, err, sizeof err), -1);
    cr_expect(strstr(err, "inference only") != NULL, "%s", err);
    model_destroy(&pa);
    model_destroy(&pb);
    model_destroy(&full);
    model_destroy(&inf);
}

/* A Hadamard output projection keeps pre = H x / sqrt(d) for its backward in
 * every layer, attention's and the sequential mixers' alike; an inference-
 * only model keeps none (4 layers x 3 x 17 x 16 floats fewer, besides the
 * maps), and computes the same bits. */
Test(avit, inference_only_hadamard_models_keep_no_pre) {
    model_mem a, b;
    model pa, pb;
    char err[256];
    model_shape sh = small_shape(1, 0);
    sh.hadamard = 1;
    cr_assert_eq(model_plan(&pa, &sh, 3, &a, err, sizeof err), 0, "%s", err);
    model_shape dense = sh;
    dense.hadamard = 0;
    model_mem c;
    model pc;
    cr_assert_eq(model_plan(&pc, &dense, 3, &c, err, sizeof err), 0, "%s", err);
    size_t pre = 4 * (size_t)3 * 17 * 16 * sizeof(float);
    cr_expect_geq(a.act_bytes, c.act_bytes + pre, "hadamard %zu vs dense %zu activations",
                  a.act_bytes, c.act_bytes);
    sh.infer_only = 1;
    cr_assert_eq(model_plan(&pb, &sh, 3, &b, err, sizeof err), 0, "%s", err);
    size_t maps = 2 * (size_t)3 * 2 * 17 * 17 * sizeof(float);
    cr_expect_leq(b.act_bytes + maps + pre, a.act_bytes, "activations %zu vs %zu (maps %zu)",
                  b.act_bytes, a.act_bytes, maps);
    model_destroy(&pa);
    model_destroy(&pb);
    model_destroy(&pc);
    /* the same outputs with and without the kept pre */
    model full, inf;
    model_shape fs = sh;
    fs.infer_only = 0;
    cr_assert_eq(model_create(&full, &fs, bk_cpu(), 3, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_create(&inf, &sh, bk_cpu(), 3, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_init_weights(&full, 3, err, sizeof err), 0, "%s", err);
    for (size_t i = 0; i < full.np.P.numel; i++)
        full.np.P.data[i] += 0.3f * bk_rng_normal_at(9, 1, i);
    memcpy(inf.np.P.data, full.np.P.data, full.np.P.numel * sizeof(float));
    for (int i = 0; i < 3 * 64; i++) pixels[i] = (i * 37 + 11) % 256;
    int targets[3] = {0, 2, 1};
    cr_assert_eq(model_forward(&full, pixels, NULL, targets, 3, 0, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_forward(&inf, pixels, NULL, targets, 3, 0, err, sizeof err), 0, "%s", err);
    cr_expect_eq(memcmp(full.h_logits, inf.h_logits, 9 * sizeof(float)), 0, "logits differ");
    model_destroy(&full);
    model_destroy(&inf);
}

/* The S2S halting alignment (mean_h: the former form): its gradient against
 * finite differences of its loss, over a masked layer. */
static void alignment_gradient(int mean_h) {
    const bk_backend *be = bk_cpu();
    enum { B = 2, T = 6, C = 3 };
    float t[B * T * C], ht[B * T], tcum[B * T], mask[B * T], dt[B * T * C] = {0};
    for (int i = 0; i < B * T * C; i++) t[i] = 0.4f * bk_rng_normal_at(3, 2, (uint64_t)i);
    for (int i = 0; i < B * T; i++) {
        ht[i] = bk_rng_uniform_at(4, 2, (uint64_t)i);
        mask[i] = i % 5 != 3;
    }
    for (int i = 0; i < B * T; i++) tcum[i] = 0.5f * bk_rng_uniform_at(6, 2, (uint64_t)i);
    bk_halt_args a = {.B = B,
                      .T = T,
                      .C = C,
                      .layer = 0,
                      .layers = 3,
                      .gamma = 4,
                      .centre = 0.5f,
                      .eps = 0.01f,
                      .mean_h = mean_h};
    double st[1] = {0};
    be->halt_align(dt, st, 0, t, ht, tcum, mask, 0.7f, &a);
    cr_assert_gt(st[0], 0);
    int checked = 0;
    for (int i = 0; i < B * T; i++) {
        float x0 = t[i * C], h = 1e-3f, scratch[B * T * C];
        double lp = 0, lm = 0;
        t[i * C] = x0 + h;
        be->halt_align(scratch, &lp, 0, t, ht, tcum, mask, 0.7f, &a);
        t[i * C] = x0 - h;
        be->halt_align(scratch, &lm, 0, t, ht, tcum, mask, 0.7f, &a);
        t[i * C] = x0;
        double num = (lp - lm) / (2 * h);
        cr_expect_float_eq(dt[i * C], num, 1e-4 + 1e-2 * fabs(num), "token %d: %g vs %g", i,
                           (double)dt[i * C], num);
        if (i % T == 0 || !(mask[i] > 0))
            cr_expect_eq(dt[i * C], 0, "class token or masked token %d has a gradient", i);
        else
            checked++;
        cr_expect_eq(dt[i * C + 1], 0, "only channel 0");
    }
    cr_assert_gt(checked, 6);
}

Test(avit, halting_alignment_gradient) { alignment_gradient(0); }
Test(avit, halting_alignment_gradient_mean_h) { alignment_gradient(1); }

/* The keep alignment is docs/design.md#distillation-loss's: with the student's scores equal to the
 * teacher's it is 0; otherwise the binary KL's mean plus 5 (keep_s -
 * keep_t)^2, keep the fraction of patch tokens that pass the smooth halting
 * test sigmoid(gamma (1 - eps - tcum - h)), written out here by hand. */
Test(avit, the_keep_alignment_is_the_keep_difference) {
    const bk_backend *be = bk_cpu();
    enum { B = 2, T = 5, C = 2 };
    float t[B * T * C] = {0}, ht[B * T], tcum[B * T], mask[B * T], dt[B * T * C] = {0};
    bk_halt_args a = {
        .B = B, .T = T, .C = C, .layer = 1, .layers = 3, .gamma = 10, .centre = 0, .eps = 0.01f};
    for (int i = 0; i < B * T; i++) {
        t[i * C] = 0.1f * (float)(i % 7) - 0.2f;
        ht[i] = 1 / (1 + expf(-(10 * t[i * C])));
        tcum[i] = 0.15f * (float)(i % 4);
        mask[i] = i != 7;
    }
    double st = 0;
    be->halt_align(dt, &st, 0, t, ht, tcum, mask, 1.0f, &a);
    cr_expect_leq(fabs(st), 1e-9, "the teacher's own scores: %g", st);
    for (int i = 0; i < B * T; i++) ht[i] = 0.5f;
    st = 0;
    be->halt_align(dt, &st, 0, t, ht, tcum, mask, 1.0f, &a);
    double kl = 0, ks = 0, kt = 0, n = 0, N = B * (T - 1);
    for (int i = 0; i < B * T; i++) {
        if (i % T == 0 || !(mask[i] > 0)) continue;
        double hs = 1 / (1 + exp(-(10.0 * t[i * C])));
        kl += 0.5 * log(0.5 / hs) + 0.5 * log(0.5 / (1 - hs));
        ks += 1 / (1 + exp(-10 * (0.99 - tcum[i] - hs)));
        kt += 1 / (1 + exp(-10 * (0.99 - tcum[i] - 0.5)));
        n += 1;
    }
    double want = kl / n + 5 * (ks / N - kt / N) * (ks / N - kt / N);
    cr_expect_float_eq(st, want, 1e-6, "%g vs %g", st, want);
}

/* Label smoothing (S2S stage 1's cross-entropy): the loss is (1 - eps) CE +
 * eps * the mean of -log p over the classes, and the gradient matches finite
 * differences; an ignored row stays 0. */
Test(avit, label_smoothing_loss_and_gradient) {
    const bk_backend *be = bk_cpu();
    enum { N = 3, V = 5 };
    float x[N * V], p[N * V], l[N], d[N * V] = {0}, dl[N] = {1, 1, 1};
    int t[N] = {2, -1, 4};
    for (int i = 0; i < N * V; i++) x[i] = bk_rng_normal_at(5, 1, (uint64_t)i);
    be->crossentropy_forward(l, p, x, t, N, V);
    be->label_smooth_forward(l, x, t, N, V, 0.1f);
    double want = 0;
    for (int v = 0; v < V; v++) want += -log(p[v]);
    want = 0.9 * -log(p[2]) + 0.1 * want / V;
    cr_expect_float_eq(l[0], want, 1e-5, "%g vs %g", (double)l[0], want);
    cr_expect_eq(l[1], 0);
    be->crossentropy_backward(d, p, t, dl, N, V);
    be->label_smooth_backward(d, t, dl, N, V, 0.1f);
    for (int i = 0; i < N * V; i++) {
        float x0 = x[i], h = 1e-3f, lp[N], lm[N], pp[N * V];
        x[i] = x0 + h;
        be->crossentropy_forward(lp, pp, x, t, N, V);
        be->label_smooth_forward(lp, x, t, N, V, 0.1f);
        x[i] = x0 - h;
        be->crossentropy_forward(lm, pp, x, t, N, V);
        be->label_smooth_forward(lm, x, t, N, V, 0.1f);
        x[i] = x0;
        double num = 0;
        for (int n = 0; n < N; n++) num += (lp[n] - lm[n]) / (2 * h);
        cr_expect_float_eq(d[i], num, 2e-3, "logit %d: %g vs %g", i, (double)d[i], num);
    }
}

/* The retention controller (pipe_vit's window, docs/design.md#a-vit-halting)
 * closed around a made-up plant that lags and halts sooner than its prior
 * asks: each window the reached retention moves half way to
 * clamp(0.5 * (r + shift / L) + 0.2, 1/L, 0.9), where r + shift / L is the
 * retention the shifted prior asks for. Uncontrolled it settles at
 * 0.5 r + 0.2: within 0.05 of r = 0.3 (0.35) but not of r = 0.7 (0.55). The
 * controller must land both within avit.tolerance's default 0.05. */
static double control_plant(double r, int controlled, float *integral) {
    cr_assert(pipe_vit.window != NULL, "pipe_vit has no retention control");
    const int L = 4;
    model m;
    memset(&m, 0, sizeof m);
    m.sh.avit = 1;
    m.sh.layers = L;
    bf_config c;
    memset(&c, 0, sizeof c);
    c.avit.retention = (float)r;
    double reached = 1.0; /* a dense model: nothing halts yet */
    for (int w = 0; w < 60; w++) {
        model_stats st;
        memset(&st, 0, sizeof st);
        st.retention = reached;
        if (controlled) pipe_vit.window(&m, &c, &st, 25);
        double asked = 0.5 * (r + m.halt.cf.shift / L) + 0.2;
        asked = asked < 1.0 / L ? 1.0 / L : asked > 0.9 ? 0.9 : asked;
        reached += 0.5 * (asked - reached);
        cr_assert(fabsf(m.halt.cf.shift) <= L, "shift %g past its clamp", m.halt.cf.shift);
    }
    *integral = m.halt.cf.integral;
    return reached;
}

Test(avit, the_retention_control_lands_on_two_targets) {
    float I;
    cr_assert_gt(fabs(control_plant(0.7, 0, &I) - 0.7), 0.05, "the plant needs no control");
    cr_assert_leq(fabs(control_plant(0.3, 0, &I) - 0.3), 0.05);
    for (int k = 0; k < 2; k++) {
        double r = k ? 0.7 : 0.3, got = control_plant(r, 1, &I);
        cr_assert_leq(fabs(got - r), 0.05, "target %g: reached %g (integral %g)", r, got, I);
    }
    /* a target the plant cannot reach (it keeps at most 0.9): the
     * shift sits at its clamp and the integral stops growing (anti-windup),
     * so it is no larger than the clamp plus one window's step */
    double got = control_plant(1.0, 1, &I);
    cr_assert_leq(got, 0.9 + 1e-9);
    cr_assert_leq(I, 4 + 0.2f * 4 * 1.0f + 1e-4, "integral %g wound up past the clamp", I);
}

/* The gate actuator (pipe_vit's window, docs/design.md#a-vit-halting): a
 * made-up plant whose halting is saturated (every token halts after layer
 * 0, retention 1/L, whatever the prior asks) until the gate centre has
 * risen by 2 logits, and behaves as control_plant's after that. The prior's
 * shift alone leaves it at 1/L = 0.167 against r 0.3 (the miss of 6 layers
 * at r 0.3 in docs/results.md); moving the gate centre while the retention
 * stalls must land it within avit.tolerance's 0.05, at r 0.3, 0.5 and 0.7. */
static double saturated_plant(double r, float *gate) {
    const int L = 6;
    model m;
    memset(&m, 0, sizeof m);
    m.sh.avit = 1;
    m.sh.layers = L;
    bf_config c;
    memset(&c, 0, sizeof c);
    c.avit.retention = (float)r;
    c.avit.tolerance = 0.05f;
    double reached = 1.0;
    for (int w = 0; w < 60; w++) {
        model_stats st;
        memset(&st, 0, sizeof st);
        st.retention = reached;
        pipe_vit.window(&m, &c, &st, 25);
        double asked = 1.0 / L;
        if (nn_halt_gate_centre(&m.halt.cf) >= 2) {
            asked = 0.5 * (r + m.halt.cf.shift / L) + 0.2;
            asked = asked < 1.0 / L ? 1.0 / L : asked > 0.9 ? 0.9 : asked;
        }
        reached += 0.5 * (asked - reached);
    }
    *gate = m.halt.cf.gate;
    return reached;
}

Test(avit, the_gate_actuator_lifts_a_saturated_halting) {
    for (int k = 0; k < 3; k++) {
        double r = 0.3 + 0.2 * k;
        float g;
        double got = saturated_plant(r, &g);
        cr_assert_leq(fabs(got - r), 0.05, "target %g: reached %g (gate centre moved by %g)", r,
                      got, (double)g);
        cr_assert_leq(fabsf(g), 100, "gate %g past its clamp", (double)g);
    }
}

/* The gate goes with the weights: a loaded run's counter halt.gate (a
 * float's bits) sets an A-ViT model's gate, and the halting test reads g +
 * gate; another counter, or a model without halting, is left alone. */
Test(avit, a_loaded_gate_moves_the_gate_centre) {
    model m;
    memset(&m, 0, sizeof m);
    m.sh.avit = 1;
    m.halt.cf.centre = 3;
    float g = 12.5f;
    uint32_t u;
    memcpy(&u, &g, sizeof u);
    model_take_counter(&m, "halt.shift", u);
    cr_expect_eq(m.halt.cf.gate, 0);
    model_take_counter(&m, MODEL_COUNTER_GATE, u);
    cr_expect_eq(m.halt.cf.gate, 12.5f);
    cr_expect_eq(nn_halt_gate_centre(&m.halt.cf), 15.5f);
    m.sh.avit = 0;
    m.halt.cf.gate = 0;
    model_take_counter(&m, MODEL_COUNTER_GATE, u);
    cr_expect_eq(m.halt.cf.gate, 0);
}
