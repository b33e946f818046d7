/* pipeline_decl.c — the declarations: one stage_graph per pipeline that runs
 * in stages. Adding a staged pipeline: its graph here, its driver in the
 * worker. It holds data only; the keys are computed by stage_graph.c. */
#include "common/pipeline_decl.h"

#include <string.h>

/* S2S (design.md, "S2S pipeline"): teacher, A-ViT, profile, distill,
 * finetune, eval. Keys no stage depends on (device, train.eval_every,
 * train.checkpoint_every, train.log_every, model.mixers, budget.*) never
 * change a key. */
static const stage_rule s2s_rules[] = {
    {0, "data.", 0},
    {0, "model.", 0},
    {0, "model.mixers", 1}, /* the student's layout is distill's business */
    {0, "attn.", 0},
    {0, "aug.", 0},
    {0, "train.", 0},
    {0, "train.eval_every", 1}, /* when to measure or save does not change the weights */
    {0, "train.checkpoint_every", 1},
    {0, "train.log_every", 1},
    {0, "init.from", 0},
    {1, "avit.", 0},
    /* profile (2): only its parent */
    {3, "distill.mixer", 0},
    {3, "distill.replace_layers", 0},
    {3, "distill.stage1_steps", 0},
    {3, "distill.lambda_mse", 0},
    {3, "distill.lambda_halt", 0},
    {3, "distill.unfreeze", 0},
    {4, "distill.stage2_steps", 0},
    /* eval (5): only its parent */
};

static const stage_graph s2s_graph = {
    .pipeline = "s2s",
    .n = 6,
    .names = {"teacher", "avit", "profile", "distill", "finetune", "eval"},
    .rules = s2s_rules,
    .n_rules = sizeof s2s_rules / sizeof s2s_rules[0],
};

static const stage_graph *const graphs[] = {&s2s_graph};

const stage_graph *pipeline_stages(const char *name) {
    for (size_t i = 0; name && i < sizeof graphs / sizeof graphs[0]; i++)
        if (strcmp(graphs[i]->pipeline, name) == 0) return graphs[i];
    return NULL;
}
