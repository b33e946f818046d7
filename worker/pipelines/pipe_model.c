/* pipe_model — what every pipeline builds from a config and its data: the
 * model's shape, its knobs from the config, the input length, the knobs of a
 * step, and the task-loss term. The base of the pipelines layer: the loop,
 * evaluation, profile and generation call it; it calls none of them. */
#include <string.h>

#include "worker/pipelines/pipe.h"

model_shape pipe_model_shape(const bf_config *c, const data_sets *d) {
    model_shape sh;
    if (d->image_rows > 0) {
        int p = c->model.patch;
        sh = (model_shape){.layers = c->model.layers,
                           .d_model = c->model.d_model,
                           .heads = c->model.heads,
                           .seq_len = (d->image_rows / p) * (d->image_cols / p) + 1,
                           .vocab = 256,
                           .n_classes = d->n_classes,
                           .patch = p,
                           .image_h = d->image_rows,
                           .image_w = d->image_cols,
                           .hadamard = strcmp(c->attn.out_proj, "hadamard") == 0,
                           .avit = c->avit.enabled};
    } else {
        sh = (model_shape){.layers = c->model.layers,
                           .d_model = c->model.d_model,
                           .heads = c->model.heads,
                           .seq_len = c->model.seq_len,
                           .vocab = tok_vocab_size(d->tok),
                           .n_classes = d->n_classes,
                           .hadamard = strcmp(c->attn.out_proj, "hadamard") == 0,
                           .budget = c->budget.enabled && d->n_classes > 0};
    }
    /* cfg_validate checked the list; a config that skipped it builds attention */
    char err[256];
    if (model_shape_mixers(&sh, c->model.mixers, err, sizeof err))
        memset(sh.mixer, 0, sizeof sh.mixer);
    sh.d_state = c->distill.d_state;
    return sh;
}

void pipe_model_config(model *m, const bf_config *c) {
    m->aug_pad = c->aug.crop_pad;
    m->aug_flip = c->aug.hflip;
    m->kn.s_min = c->budget.range[0];
    m->kn.s_max = c->budget.range[1];
    if (m->sh.avit) {
        m->halt.cf.gamma = c->avit.gate_scale;
        m->halt.cf.centre = c->avit.gate_center;
        m->halt.cf.ponder_weight = c->avit.ponder_weight;
        m->halt.cf.prior_weight = c->avit.prior_weight;
        m->halt.cf.retention = c->avit.retention;
        m->halt.cf.prior = nn_halt_prior_of(c->avit.prior);
        m->halt.cf.freeze = strcmp(c->avit.output, "freeze") == 0;
    }
}

int pipe_input_len(const bf_config *c, const data_sets *d) {
    return d->image_rows > 0 ? d->image_rows * d->image_cols : c->model.seq_len;
}

double pipe_term_task(const model_stats *st) { return st->loss_task; }

float pipe_step_knobs(model *m, const bf_config *c, long step) {
    float p = c->train.steps > 1 ? (float)step / (float)(c->train.steps - 1) : 1.0f;
    if (p > 1) p = 1;
    m->kn.progress = p;
    m->kn.seed = c->train.seed;
    m->kn.step = (uint64_t)step;
    return p;
}
