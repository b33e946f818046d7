/* lm — the causal decoder language model pipeline (docs/design.md#hadamard-output-projection:
 * attn.out_proj dense or hadamard). The task loss is
 * next-token cross-entropy over every target token; evaluation reports
 * val/loss and val/ppl on the corpus's validation tail. */
#include "worker/pipelines/pipe.h"

/* No schedules of its own: only the step and seed the noise streams read. */
static void lm_knobs(model *m, const bf_config *c, long step) { pipe_step_knobs(m, c, step); }

static const pipe_term LM_TERMS[] = {{"train/loss_task", pipe_term_task, 0}};

const pipe_spec pipe_lm = {.name = "lm",
                           .model_kind = "causal lm",
                           .terms = LM_TERMS,
                           .n_terms = 1,
                           .knobs = lm_knobs,
                           .log_extra = NULL,
                           .frozen = NULL,
                           .classify = 0};
