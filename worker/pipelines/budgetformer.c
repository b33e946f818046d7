/* budgetformer — the BudgetFormer pipeline (docs/design.md#budgetformer): the
 * encoder classifier with the head budget, or the multi-head baseline
 * (budget.enabled: false) through the same code. Its schedules are the
 * score-softmax temperature tau_t, the Gumbel noise sigma_t and the rank-gate
 * temperature tau_r (0.5 -> 0.05 on tau's schedule); its loss terms are the
 * task cross-entropy, the budget-band hinge and the annealed entropy. */
#include <string.h>

#include "worker/pipelines/pipe.h"

static void budget_knobs(model *m, const bf_config *c, long step) {
    float p = pipe_step_knobs(m, c, step);
    cfg_schedule tr = {c->budget.temperature.kind, 0.5f, 0.05f};
    m->kn.tau = cfg_schedule_at(&c->budget.temperature, p);
    m->kn.sigma = cfg_schedule_at(&c->budget.noise, p);
    m->kn.tau_r = cfg_schedule_at(&tr, p);
    m->kn.s_min = c->budget.range[0];
    m->kn.s_max = c->budget.range[1];
    m->kn.lambda_budget = c->budget.lambda_budget;
    m->kn.lambda_entropy = c->budget.lambda_entropy;
}

static double term_budget(const model_stats *st) { return st->loss_budget; }
static double term_entropy(const model_stats *st) { return st->loss_entropy; }

static const pipe_term BUDGET_TERMS[] = {{"train/loss_task", pipe_term_task, 0},
                                         {"train/loss_budget", term_budget, 1},
                                         {"train/loss_entropy", term_entropy, 1}};

static void budget_log(const model *m, const model_stats *st,
                       void (*metric)(void *ctx, const char *name, double value), void *ctx) {
    if (!m->sh.budget) return;
    metric(ctx, "train/temperature", m->kn.tau);
    metric(ctx, "train/noise", m->kn.sigma);
    metric(ctx, "train/gate_temperature", m->kn.tau_r);
    metric(ctx, "train/budget_s", st->mean_s);
}

const pipe_spec pipe_budgetformer = {.name = "budgetformer",
                                     .model_kind = "encoder classifier",
                                     .terms = BUDGET_TERMS,
                                     .n_terms = 3,
                                     .knobs = budget_knobs,
                                     .log_extra = budget_log,
                                     .frozen = NULL,
                                     .classify = 1};
