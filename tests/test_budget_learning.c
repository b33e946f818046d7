/* The scorer learns which heads carry the signal.
 *
 * A one-layer model is wired by hand so that only heads 0 and 1 can carry the
 * label: the label is the parity of the tokens (every token of a sequence has
 * the same parity), the embedding writes the parity into channels 0-1, the
 * value rows of heads 0 and 1 read it, heads 2 and 3 have zero value rows,
 * W_O writes heads 0 and 1 into channel 4, and the classifier reads channel 4
 * against channel 5. The budget is fixed at s = 0.3 (k = 1 of 4) and the
 * scorer starts out preferring heads 2 and 3. Only the scorer is trained (the
 * other gradients are zeroed), through the straight-through gate with Gumbel
 * exploration; afterwards inference must pick a signal head for every input
 * and the task loss must have fallen. (With k = 2 the scorer reliably learns
 * the top head, not the second: once one head dominates the tempered softmax,
 * the straight-through gradient reaching the others through p vanishes.) */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "tests/learning.h"
#include "worker/models/model.h"

enum { L = 1, C = 8, H = 4, T = 6, V = 8, B = 16 };

/* measured over the builds of scripts/test_arches.sh and BF_TEST_SEED 0-2
 * (scripts/learning_margins.sh): see the table in docs/results.md */
#define BUDGET_PICK_RISE 0.3
#define BUDGET_LOSS_FALL 0.3

static float *param(model *m, const char *name) {
    int i = bk_params_find(&m->np.P, name);
    cr_assert_geq(i, 0, "no parameter %s", name);
    return m->np.P.t[i].data;
}

static void wire(model *m) {
    memset(m->np.P.data, 0, m->np.P.numel * sizeof(float));
    for (int t = 0; t < V; t++) {
        float p = t % 2 == 0 ? 1.0f : -1.0f;
        param(m, "tok_emb.weight")[t * C + 0] = p;
        param(m, "tok_emb.weight")[t * C + 1] = p;
    }
    const char *ones[] = {"blocks.0.ln1.weight", "blocks.0.ln2.weight", "ln_f.weight"};
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < C; c++) param(m, ones[i])[c] = 1.0f;
    float *qkv = param(
        m, "blocks.0.attn.qkv.weight"); /* [3C, C]; value rows start at 2C, head h at 2C + 2h */
    qkv[(2 * C + 0) * C + 0] = 1.0f;    /* head 0, value dim 0 <- u_0 */
    qkv[(2 * C + 2) * C + 0] = 1.0f;    /* head 1, value dim 0 <- u_0 */
    float *wo = param(m, "blocks.0.attn.out.weight"); /* [C, C]: y[4] = c[0] + c[2] */
    wo[4 * C + 0] = 1.0f;
    wo[4 * C + 2] = 1.0f;
    float *cls = param(m, "head.weight"); /* [2, C] */
    cls[0 * C + 4] = 0.5f, cls[0 * C + 5] = -0.5f;
    cls[1 * C + 4] = -0.5f, cls[1 * C + 5] = 0.5f;
    param(m, "blocks.0.attn.budget.out.bias")[0] = logf(0.3f / 0.7f); /* s = 0.3 -> k = 1 */
    float *sb = param(m, "blocks.0.attn.scorer.bias");
    sb[2] = 0.5f, sb[3] = 0.5f; /* starts out preferring the empty heads */
}

static void batch(int step, int *ids, int *labels) {
    for (int b = 0; b < B; b++) {
        int parity = (b + step) % 2;
        labels[b] = parity;
        for (int t = 0; t < T; t++) ids[b * T + t] = 2 * ((b * 7 + t * 3 + step) % 4) + parity;
    }
}

/* Fraction of samples whose inference head is a signal head (0 or 1). */
static double picks_signal_heads(model *m, double *loss) {
    int ids[B * T], labels[B];
    char err[256];
    batch(0, ids, labels);
    cr_assert_eq(model_forward(m, ids, NULL, labels, B, 0, err, sizeof err), 0, "%s", err);
    *loss = m->st.loss_task;
    int good = 0;
    for (int b = 0; b < B; b++) {
        int heads[H];
        int k = model_selected_heads(m, 0, b, heads);
        cr_assert_eq(k, 1, "the fixed budget gives k = 1, got %d", k);
        good += heads[0] == 0 || heads[0] == 1;
    }
    return (double)good / B;
}

Test(budget_learning, scorer_learns_to_pick_the_heads_that_carry_signal) {
    model m;
    model_shape sh = {.layers = L,
                      .d_model = C,
                      .heads = H,
                      .seq_len = T,
                      .vocab = V,
                      .n_classes = 2,
                      .hadamard = 0,
                      .budget = 1};
    char err[256];
    cr_assert_eq(model_create(&m, &sh, bk_cpu(), B, err, sizeof err), 0, "%s", err);
    wire(&m);
    double loss0, loss1;
    double before = picks_signal_heads(&m, &loss0);
    cr_assert_eq(before, 0.0, "before training the scorer should prefer heads 2 and 3");
    cr_assert_gt(loss0, 0.6, "with an empty head the loss should be near ln 2, got %.4f", loss0);

    int sw = bk_params_find(&m.np.P, "blocks.0.attn.scorer.weight"),
        sbi = bk_params_find(&m.np.P, "blocks.0.attn.scorer.bias");
    size_t lo = m.np.P.t[sw].offset, hi = lo + m.np.P.t[sw].numel;
    size_t blo = m.np.P.t[sbi].offset, bhi = blo + m.np.P.t[sbi].numel;
    float *mom = calloc(m.np.P.numel, sizeof(float)), *var = calloc(m.np.P.numel, sizeof(float));
    bk_adamw h = {.lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0};
    int ids[B * T], labels[B];
    for (int step = 0; step < 150; step++) {
        m.kn = (model_knobs){.tau = 1.0f,
                             .sigma = 1.0f,
                             .tau_r = 0.3f,
                             .s_min = 0,
                             .s_max = 1,
                             .lambda_budget = 0,
                             .lambda_entropy = 0,
                             .progress = step / 150.0f,
                             .seed = 11 + learning_seed_shift(),
                             .step = (uint64_t)step};
        batch(step, ids, labels);
        cr_assert_eq(model_forward(&m, ids, NULL, labels, B, 1, err, sizeof err), 0, "%s", err);
        model_backward(&m);
        for (size_t i = 0; i < m.np.P.numel; i++)
            if (!((i >= lo && i < hi) || (i >= blo && i < bhi))) m.np.P.grad[i] = 0;
        bk_cpu()->adamw_update(m.np.P.data, m.np.P.grad, mom, var, m.np.P.numel, &h, step + 1,
                               1.0f);
    }
    m.kn.force_k = 0;
    double after = picks_signal_heads(&m, &loss1);
    /* the controls are the untrained scorer's: no input picks a signal head,
     * and its loss (near ln 2); the effects required are a third of the
     * smallest measured over builds and seeds (tests/learning.h) */
    learning_expect("budget_learning/inputs_on_signal_heads", before, after, BUDGET_PICK_RISE, 0);
    learning_expect("budget_learning/task_loss_fraction", 1.0, loss1 / loss0, BUDGET_LOSS_FALL, 1);
    free(mom);
    free(var);
    model_destroy(&m);
}
