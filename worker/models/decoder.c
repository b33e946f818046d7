/* decoder — the causal decoder language model: the trunk's attention is
 * causal; the head is the token embedding itself (tied: logits = lnf(x)
 * tok_emb^T), so it adds no tensor. Loss rows: one per token (target -1 =
 * ignored). Generation (pipelines/generate.c) runs these same blocks against
 * a KV cache. */
#include "worker/models/model.h"

static int decoder_declare(model *m, char *err, size_t errlen) {
    (void)m, (void)err, (void)errlen;
    return 0;
}

static void decoder_plan(model *m, bk_arena *A) { (void)m, (void)A; }

static int decoder_rows(const model *m, int B) { return B * m->sh.seq_len; }

static int decoder_width(const model *m) { return m->sh.vocab; }

/* logits[B*T, V] = lnf[B*T, C] tok_emb^T */
static void decoder_forward(model *m, int B) {
    int rows = B * m->sh.seq_len;
    m->be->linear_forward(m->logits, m->af.out, nn_w(&m->env, m->emb.tok), NULL, rows,
                          m->sh.d_model, m->sh.vocab);
}

static void decoder_backward(model *m, int B) {
    int rows = B * m->sh.seq_len;
    m->be->linear_backward(m->dlnf, nn_g(&m->env, m->emb.tok), NULL, m->dlogits, m->af.out,
                           nn_w(&m->env, m->emb.tok), rows, m->sh.d_model, m->sh.vocab);
}

const model_arch MODEL_DECODER = {"causal lm",
                                  decoder_declare,
                                  decoder_plan,
                                  decoder_rows,
                                  decoder_width,
                                  decoder_forward,
                                  decoder_backward,
                                  NULL,
                                  NULL,
                                  NULL,
                                  NULL};
