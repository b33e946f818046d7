/* encoder — the encoder classifier (BudgetFormer and its multi-head
 * baseline): the trunk's blocks see every token both ways; the head is the
 * masked mean of the final LayerNorm's rows and a linear classifier
 * ("head.weight" [n_classes, C], "head.bias"). Loss rows: one per sample. */
#include "worker/models/model.h"

#include <stdio.h>

static int encoder_declare(model *m, char *err, size_t errlen) {
    if (m->sh.n_classes < 2) {
        snprintf(err, errlen, "encoder: %d classes; a classifier needs at least 2",
                 m->sh.n_classes);
        return -1;
    }
    if (nn_linear_declare(&m->head, &m->np, "head", m->sh.d_model, m->sh.n_classes, 1, 0.02f)) {
        snprintf(err, errlen, "out of memory declaring the classifier");
        return -1;
    }
    return 0;
}

static void encoder_plan(model *m, bk_arena *A) {
    m->pooled = bk_arena_floats(A, (size_t)m->B * m->sh.d_model);
    m->dpooled = bk_arena_floats(A, (size_t)m->B * m->sh.d_model);
}

static int encoder_rows(const model *m, int B) {
    (void)m;
    return B;
}

static int encoder_width(const model *m) { return m->sh.n_classes; }

/* logits[B, n_classes] = head(meanpool(lnf[B,T,C], mask)) */
static void encoder_forward(model *m, int B) {
    m->be->meanpool_forward(m->pooled, m->af.out, m->mask, B, m->sh.seq_len, m->sh.d_model);
    nn_linear_forward(&m->head, &m->env, m->logits, m->pooled, B);
}

static void encoder_backward(model *m, int B) {
    m->be->zero(m->dpooled, (size_t)B * m->sh.d_model * sizeof(float));
    nn_linear_backward(&m->head, &m->env, m->dpooled, m->dlogits, m->pooled, B);
    m->be->meanpool_backward(m->dlnf, m->dpooled, m->mask, B, m->sh.seq_len, m->sh.d_model);
}

const model_arch MODEL_ENCODER = {"encoder classifier",
                                  encoder_declare,
                                  encoder_plan,
                                  encoder_rows,
                                  encoder_width,
                                  encoder_forward,
                                  encoder_backward,
                                  NULL,
                                  NULL,
                                  NULL,
                                  NULL};
