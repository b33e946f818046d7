/* vit — the ViT image classifier pipeline (design.md, "ViT"; models/vit.c):
 * Fashion-MNIST or any IDX image set, cross-entropy on the class token, the
 * augmentation keys aug.crop_pad and aug.hflip (set on the model by the
 * loop). Metrics: train/loss, train/acc, val/acc, test/acc. A-ViT halting is
 * the next step (avit.*). */
#include "worker/pipelines/pipe.h"

static void vit_knobs(model *m, const bf_config *c, long step) { pipe_step_knobs(m, c, step); }

static const pipe_term VIT_TERMS[] = {{"train/loss_task", pipe_term_task, 0}};

const pipe_spec PIPE_VIT = {.name = "vit",
                            .model_kind = "vit classifier",
                            .terms = VIT_TERMS,
                            .n_terms = 1,
                            .knobs = vit_knobs,
                            .log_extra = NULL,
                            .frozen = NULL,
                            .classify = 1};
