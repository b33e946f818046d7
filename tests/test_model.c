/* The whole model: gradients of the total loss (task + budget + entropy)
 * against finite differences, the training gate reducing to the inference
 * rule as tau_r -> 0, and hard top-k picking exactly k heads. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk_rng.h"
#include "kernels/bk_tensor.h"
#include "worker/models/model.h"

static void make(model *m, int budget, int hadamard, int n_classes) {
    model_shape sh = {.layers = 2,
                      .d_model = 16,
                      .heads = 4,
                      .seq_len = 5,
                      .vocab = 11,
                      .n_classes = n_classes,
                      .hadamard = hadamard,
                      .budget = budget};
    char err[256];
    cr_assert_eq(model_create(m, &sh, bk_cpu(), 3, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_init_weights(m, 3, err, sizeof err), 0, "%s", err);
    /* larger weights than the training init, so every gradient is well above
     * float rounding in the finite differences */
    for (size_t i = 0; i < m->np.P.numel; i++) m->np.P.data[i] += 0.3f * bk_rng_normal_at(9, 1, i);
    m->kn = (model_knobs){.tau = 0.7f,
                          .sigma = 0.5f,
                          .tau_r = 0.4f,
                          .s_min = 0.6f,
                          .s_max = 0.7f,
                          .lambda_budget = 2.0f,
                          .lambda_entropy = 0.5f,
                          .progress = 0.2f,
                          .seed = 5,
                          .step = 7,
                          .exact_gradient = 1};
}

static const int ids[15] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 3, 5, 7, 9};
static const float mask[15] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0};

static double loss_at(model *m, const int *targets) {
    char err[256];
    cr_assert_eq(model_forward(m, ids, mask, targets, 3, 1, err, sizeof err), 0, "%s", err);
    return m->st.loss;
}

/* Central differences on up to 6 entries of every parameter tensor. */
static void check_grads(model *m, const int *targets) {
    loss_at(m, targets);
    model_backward(m);
    float *g = malloc(m->np.P.numel * sizeof(float));
    memcpy(g, m->np.P.grad, m->np.P.numel * sizeof(float));
    int checked = 0;
    for (int t = 0; t < m->np.P.n; t++) {
        const bk_tensor *tt = &m->np.P.t[t];
        for (int j = 0; j < 6 && (size_t)j < tt->numel; j++) {
            size_t i = tt->offset + (size_t)((j * 7919u) % tt->numel);
            float x0 = m->np.P.data[i], h = 1e-3f;
            m->np.P.data[i] = x0 + h;
            double lp = loss_at(m, targets);
            m->np.P.data[i] = x0 - h;
            double lm = loss_at(m, targets);
            m->np.P.data[i] = x0;
            double num = (lp - lm) / (2.0 * h), ana = g[i];
            cr_expect_leq(fabs(num - ana), 2e-3 + 3e-2 * fmax(fabs(num), fabs(ana)),
                          "%s[%zu]: analytic %g numeric %g", tt->name, i - tt->offset, ana, num);
            checked++;
        }
    }
    cr_assert_gt(checked, 20);
    free(g);
}

Test(model, encoder_gradients_dense_baseline) {
    model m;
    make(&m, 0, 0, 3);
    int targets[3] = {0, 2, 1};
    check_grads(&m, targets);
    model_destroy(&m);
}

Test(model, encoder_gradients_budget_dense) {
    model m;
    make(&m, 1, 0, 3);
    int targets[3] = {0, 2, 1};
    check_grads(&m, targets);
    cr_expect_gt(m.st.loss_budget, 0.0, "the budget hinge should be active in this setup");
    cr_expect_neq(m.st.loss_entropy, 0.0);
    model_destroy(&m);
}

Test(model, encoder_gradients_budget_hadamard) {
    model m;
    make(&m, 1, 1, 3);
    int targets[3] = {1, 0, 2};
    check_grads(&m, targets);
    model_destroy(&m);
}

Test(model, lm_gradients_hadamard) {
    model m;
    make(&m, 0, 1, 0);
    int targets[15];
    for (int i = 0; i < 15; i++) targets[i] = mask[i] > 0 ? (ids[i] * 3 + 1) % 11 : -1;
    check_grads(&m, targets);
    model_destroy(&m);
}

/* The straight-through term: with it on, the scorer receives dL/dw_i * m_i
 * through p on top of the exact gradient, so the scorer's gradients differ
 * from the exact ones, and only through the scorer and what feeds it. */
Test(model, straight_through_reaches_the_scorer) {
    model m;
    make(&m, 1, 0, 3);
    int targets[3] = {0, 2, 1};
    loss_at(&m, targets);
    model_backward(&m);
    float *exact = malloc(m.np.P.numel * sizeof(float));
    memcpy(exact, m.np.P.grad, m.np.P.numel * sizeof(float));
    m.kn.exact_gradient = 0;
    loss_at(&m, targets);
    model_backward(&m);
    int sw = bk_params_find(&m.np.P, "blocks.1.attn.scorer.weight"),
        bw = bk_params_find(&m.np.P, "blocks.1.attn.budget.fc.weight");
    double dsw = 0, dbw = 0;
    for (size_t i = 0; i < m.np.P.t[sw].numel; i++)
        dsw += fabs(m.np.P.grad[m.np.P.t[sw].offset + i] - exact[m.np.P.t[sw].offset + i]);
    for (size_t i = 0; i < m.np.P.t[bw].numel; i++)
        dbw += fabs(m.np.P.grad[m.np.P.t[bw].offset + i] - exact[m.np.P.t[bw].offset + i]);
    cr_expect_gt(dsw, 1e-4, "the straight-through term should change the scorer gradient");
    cr_expect_lt(dbw, 1e-7, "the budget MLP of the last layer sees no straight-through term");
    free(exact);
    model_destroy(&m);
}

/* As tau_r -> 0 with no noise, the soft training gate equals the inference
 * rule (head on iff its rank <= floor(sH)), so the logits agree. */
Test(model, training_gate_matches_inference_as_tau_r_vanishes) {
    model m;
    make(&m, 1, 0, 3);
    m.kn.sigma = 0;
    m.kn.tau_r = 1e-5f;
    int targets[3] = {0, 1, 2};
    char err[256];
    cr_assert_eq(model_forward(&m, ids, mask, targets, 3, 1, err, sizeof err), 0);
    float train_logits[9]; /* a training forward leaves its logits on the device */
    m.be->to_host(train_logits, m.logits, sizeof train_logits);
    double train_heads = m.st.heads_used;
    cr_assert_eq(model_forward(&m, ids, mask, targets, 3, 0, err, sizeof err), 0);
    for (int i = 0; i < 9; i++)
        cr_expect_float_eq(train_logits[i], m.h_logits[i], 1e-4, "logit %d: %g vs %g", i,
                           train_logits[i], m.h_logits[i]);
    cr_expect_float_eq(train_heads, m.st.heads_used, 1e-12);
    model_destroy(&m);
}

/* Inference runs exactly k = clamp(floor(sH),1,H) heads, the k best by z. */
Test(model, hard_top_k_picks_exactly_k_best_heads) {
    model m;
    make(&m, 1, 0, 3);
    int targets[3] = {0, 1, 2};
    char err[256];
    cr_assert_eq(model_forward(&m, ids, mask, targets, 3, 0, err, sizeof err), 0);
    for (int l = 0; l < 2; l++)
        for (int b = 0; b < 3; b++) {
            int heads[4];
            int k = model_selected_heads(&m, l, b, heads);
            float s = model_budget_s(&m, l, b);
            int want = (int)floorf(s * 4);
            want = want < 1 ? 1 : want > 4 ? 4 : want;
            cr_expect_eq(k, want, "layer %d sample %d: s %g gives k %d, got %d", l, b, s, want, k);
            const float *z = model_attn(&m, l)->h_z + (size_t)b * 4;
            for (int i = 0; i < k; i++)
                for (int j = 0; j < 4; j++) {
                    int in = 0;
                    for (int q = 0; q < k; q++) in |= heads[q] == j;
                    if (!in)
                        cr_expect_geq(z[heads[i]], z[j], "selected head %d below %d", heads[i], j);
                }
        }
    model_destroy(&m);
}

Test(model, hadamard_has_d_squared_fewer_parameters_per_block) {
    model dense, had;
    make(&dense, 0, 0, 3);
    make(&had, 0, 1, 3);
    size_t C = 16;
    /* dense W_O (C*C) + bias (C) against alpha and beta (2C) */
    cr_expect_eq(model_count(&dense, "blocks.0.") - model_count(&had, "blocks.0."),
                 C * C + C - 2 * C);
    cr_expect_eq(dense.np.P.numel - had.np.P.numel, 2 * (C * C - C));
    model_destroy(&dense);
    model_destroy(&had);
}

Test(model, refuses_bad_hadamard_width_and_token_ids) {
    model m;
    model_shape sh = {.layers = 1,
                      .d_model = 20,
                      .heads = 4,
                      .seq_len = 4,
                      .vocab = 8,
                      .n_classes = 2,
                      .hadamard = 1};
    char err[256];
    cr_expect_eq(model_create(&m, &sh, bk_cpu(), 2, err, sizeof err), -1);
    cr_expect(strstr(err, "2^n or 12*2^n") != NULL, "%s", err);
    model_destroy(&m);
    make(&m, 0, 0, 3);
    int bad[15];
    memcpy(bad, ids, sizeof bad);
    bad[4] = 11;
    int targets[3] = {0, 1, 2};
    cr_expect_eq(model_forward(&m, bad, mask, targets, 3, 1, err, sizeof err), -1);
    cr_expect(strstr(err, "outside the vocabulary") != NULL, "%s", err);
    model_destroy(&m);
}

/* Inference groups samples by k: a batch whose samples run different k
 * (gathered per group) gives each sample the logits it gets alone (where the
 * whole batch is one group and the op works in place). */
Test(model, grouped_inference_matches_one_sample_at_a_time) {
    model m;
    make(&m, 1, 0, 3);
    m.kn.s_min = 0.0f;
    int targets[3] = {0, 1, 2};
    char err[256];
    cr_assert_eq(model_forward(&m, ids, mask, targets, 3, 0, err, sizeof err), 0, "%s", err);
    float batch_logits[9];
    memcpy(batch_logits, m.h_logits, sizeof batch_logits);
    int ks[3], distinct = 0;
    for (int b = 0; b < 3; b++) {
        int heads[4];
        ks[b] = model_selected_heads(&m, 0, b, heads);
    }
    distinct = (ks[0] != ks[1]) + (ks[1] != ks[2]) + (ks[0] != ks[2]);
    cr_assert_gt(distinct, 0, "this input should give samples different k (got %d %d %d)", ks[0],
                 ks[1], ks[2]);
    for (int b = 0; b < 3; b++) {
        cr_assert_eq(
            model_forward(&m, ids + 5 * b, mask + 5 * b, targets + b, 1, 0, err, sizeof err), 0,
            "%s", err);
        for (int v = 0; v < 3; v++)
            cr_expect_float_eq(m.h_logits[v], batch_logits[3 * b + v], 1e-5,
                               "sample %d logit %d: alone %g, in the batch %g", b, v, m.h_logits[v],
                               batch_logits[3 * b + v]);
    }
    model_destroy(&m);
}

/* Taps: with an extra gradient g at block 1's mixer output before its output
 * projection, the backward is the gradient of loss + <g, tap>: checked by
 * finite differences of that sum. */
static double tapped_loss(model *m, const int *targets, const float *g, size_t n) {
    double l = loss_at(m, targets);
    const float *tap = nn_block_tap(&m->blocks[1], NN_TAP_MIXER_INNER);
    double dot = 0;
    for (size_t i = 0; i < n; i++) dot += (double)g[i] * tap[i];
    return l + dot;
}

Test(model, a_tap_gradient_is_the_gradient_of_an_extra_loss_term) {
    model m;
    make(&m, 0, 0, 3);
    int targets[3] = {0, 2, 1};
    size_t n = (size_t)3 * 5 * 16;
    float *g = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) g[i] = 0.5f * bk_rng_normal_at(4, 2, i);
    nn_block_tap_grad(&m.blocks[1], NN_TAP_MIXER_INNER, g);
    tapped_loss(&m, targets, g, n);
    model_backward(&m);
    float *ana = malloc(m.np.P.numel * sizeof(float));
    memcpy(ana, m.np.P.grad, m.np.P.numel * sizeof(float));
    /* block 1's qkv and block 0's MLP sit before the tap; block 1's W_O after */
    const char *names[] = {"blocks.1.attn.qkv.weight", "blocks.0.mlp.fc.weight",
                           "blocks.1.attn.out.weight"};
    double moved = 0;
    for (int k = 0; k < 3; k++) {
        int t = bk_params_find(&m.np.P, names[k]);
        cr_assert_geq(t, 0);
        for (int j = 0; j < 5; j++) {
            size_t i = m.np.P.t[t].offset + (size_t)(j * 37) % m.np.P.t[t].numel;
            float x0 = m.np.P.data[i], h = 1e-3f;
            m.np.P.data[i] = x0 + h;
            double lp = tapped_loss(&m, targets, g, n);
            m.np.P.data[i] = x0 - h;
            double lm = tapped_loss(&m, targets, g, n);
            m.np.P.data[i] = x0;
            double num = (lp - lm) / (2.0 * h);
            cr_expect_leq(fabs(num - ana[i]), 2e-3 + 3e-2 * fmax(fabs(num), fabs(ana[i])),
                          "%s: analytic %g numeric %g", names[k], ana[i], num);
            moved += fabs(num);
        }
    }
    cr_expect_gt(moved, 1e-3, "the tap term did not reach the gradients");
    /* cleared, the tap adds nothing: the gradients are the plain loss's */
    nn_block_tap_grad(&m.blocks[1], NN_TAP_MIXER_INNER, NULL);
    loss_at(&m, targets);
    model_backward(&m);
    int t = bk_params_find(&m.np.P, "blocks.1.attn.qkv.weight");
    double diff = 0;
    for (size_t j = 0; j < m.np.P.t[t].numel; j++)
        diff += fabs(m.np.P.grad[m.np.P.t[t].offset + j] - ana[m.np.P.t[t].offset + j]);
    cr_expect_gt(diff, 1e-4, "clearing the tap changed nothing");
    free(g);
    free(ana);
    model_destroy(&m);
}

/* A block's own mask: the same mask as the model's changes nothing; hiding
 * a token from one layer's attention changes the other tokens' outputs of
 * that layer onwards, and leaves the layers below alone. */
Test(model, a_block_uses_its_own_mask) {
    model m;
    make(&m, 0, 0, 3);
    int targets[3] = {0, 2, 1};
    char err[256];
    cr_assert_eq(model_forward(&m, ids, mask, targets, 3, 0, err, sizeof err), 0, "%s", err);
    float base[9], x1[240];
    memcpy(base, m.h_logits, sizeof base);
    memcpy(x1, m.x[1], sizeof x1);
    m.blocks[1].mask = m.mask;
    m.blocks[1].h_mask = m.h_mask;
    cr_assert_eq(model_forward(&m, ids, mask, targets, 3, 0, err, sizeof err), 0, "%s", err);
    for (int i = 0; i < 9; i++) cr_expect_eq(base[i], m.h_logits[i], "logit %d", i);
    float own[15], own_dev[15];
    memcpy(own, mask, sizeof own);
    own[2] = 0;                       /* sample 0's token 2, hidden from block 1 only */
    memcpy(own_dev, own, sizeof own); /* the CPU backend's device memory is host memory */
    m.blocks[1].mask = own_dev;
    m.blocks[1].h_mask = own;
    cr_assert_eq(model_forward(&m, ids, mask, targets, 3, 0, err, sizeof err), 0, "%s", err);
    cr_expect(memcmp(x1, m.x[1], sizeof x1) == 0, "block 0 changed");
    double d0 = 0, d1 = 0;
    for (int i = 0; i < 3; i++) d0 += fabs(base[i] - m.h_logits[i]);
    for (int i = 3; i < 9; i++) d1 += fabs(base[i] - m.h_logits[i]);
    cr_expect_gt(d0, 1e-6, "sample 0's logits did not change");
    cr_expect_eq(d1, 0.0, "other samples changed");
    model_destroy(&m);
}

/* A block's own mask known to be all ones (mask_ones): the row-freezing
 * passes are skipped, and a training step gives the same bits as with them
 * (a rowscale by ones is the identity). */
Test(model, a_known_all_ones_mask_changes_no_bits) {
    model m;
    make(&m, 0, 0, 3);
    int targets[3] = {0, 2, 1};
    char err[256];
    float logits[2][9], *grad[2];
    for (int known = 0; known < 2; known++) {
        m.blocks[1].mask = m.mask; /* all ones: the forward is given no mask */
        m.blocks[1].mask_ones = known;
        cr_assert_eq(model_forward(&m, ids, NULL, targets, 3, 1, err, sizeof err), 0, "%s", err);
        model_backward(&m);
        memcpy(logits[known], m.logits, sizeof logits[known]);
        grad[known] = malloc(m.np.P.numel * sizeof(float));
        memcpy(grad[known], m.np.P.grad, m.np.P.numel * sizeof(float));
    }
    cr_expect(memcmp(logits[0], logits[1], sizeof logits[0]) == 0, "logits changed");
    cr_expect(memcmp(grad[0], grad[1], m.np.P.numel * sizeof(float)) == 0, "gradients changed");
    free(grad[0]), free(grad[1]);
    model_destroy(&m);
}
