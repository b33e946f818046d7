/* cfg_metrics.c — the metric names a config's trial writes (metrics.jsonl),
 * by pipeline and switches, so that a sweep's `metric` is checked against
 * what its trials will produce. A new metric in a pipeline is one row here.
 * It never reads YAML, never validates and never writes a metric. */
#include "common/cfg.h"

#include <stdio.h>
#include <string.h>

/* The metric names a pipeline writes, each with the condition under which
 * it is written. */
enum { MET_ALL, MET_LM, MET_CLS, MET_BUDGET, MET_AVIT, MET_VIT, MET_S2S };
static const struct {
    const char *name;
    int when;
} metric_table[] = {
    {"train/loss", MET_ALL},
    {"train/loss_task", MET_ALL},
    {"train/heads_used", MET_ALL},
    {"train/lr", MET_ALL},
    {"train/grad_norm", MET_ALL},
    {"train/tokens_per_s", MET_ALL},
    {"train/allreduce_s", MET_ALL},
    {"train/acc", MET_CLS},
    {"train/loss_budget", MET_BUDGET},
    {"train/loss_entropy", MET_BUDGET},
    {"train/temperature", MET_BUDGET},
    {"train/noise", MET_BUDGET},
    {"train/gate_temperature", MET_BUDGET},
    {"train/budget_s", MET_BUDGET},
    {"val/loss", MET_ALL},
    {"val/heads_used", MET_ALL},
    {"val/attn_flops", MET_ALL},
    {"val/seconds", MET_ALL},
    {"val/ppl", MET_LM},
    {"val/acc", MET_CLS},
    {"val/corr_s_len", MET_BUDGET},
    {"val/corr_s_loss", MET_BUDGET},
    {"test/loss", MET_ALL},
    {"test/heads_used", MET_ALL},
    {"test/attn_flops", MET_ALL},
    {"test/seconds", MET_ALL},
    {"test/ppl", MET_LM},
    {"test/acc", MET_CLS},
    {"test/corr_s_len", MET_BUDGET},
    {"test/corr_s_loss", MET_BUDGET},
    {"test/images_per_s", MET_VIT},
    {"train/loss_ponder", MET_AVIT},
    {"train/loss_prior", MET_AVIT},
    {"train/retention", MET_AVIT},
    {"val/retention", MET_AVIT},
    {"test/retention", MET_AVIT},
    /* s2s: each stage's metrics under its name (docs/s2s.md) */
    {"teacher/val/acc", MET_S2S},
    {"teacher/test/acc", MET_S2S},
    {"avit/val/acc", MET_S2S},
    {"avit/val/retention", MET_S2S},
    {"avit/test/acc", MET_S2S},
    {"avit/test/retention", MET_S2S},
    {"distill/train/loss_mse", MET_S2S},
    {"distill/train/loss_halt", MET_S2S},
    {"distill/val/acc", MET_S2S},
    {"finetune/val/acc", MET_S2S},
    {"finetune/val/retention", MET_S2S},
    {"finetune/test/acc", MET_S2S},
    {"eval/dense/test/acc", MET_S2S},
    {"eval/teacher/test/acc", MET_S2S},
    {"eval/student/test/acc", MET_S2S},
    {"eval/teacher/test/retention", MET_S2S},
    {"eval/student/test/retention", MET_S2S},
    {"eval/student/images_per_s", MET_S2S},
    {"eval/student/speedup_vs_teacher@577", MET_S2S},
    {"eval/mixer/speedup@577", MET_S2S},
    {"eval/trained/teacher/images_per_s", MET_S2S},
    {"eval/trained/student/images_per_s", MET_S2S},
    {"eval/trained/student/speedup_vs_teacher", MET_S2S},
};

static int metric_applies(const bf_config *c, int when) {
    int lm = strcmp(c->pipeline, "lm") == 0, s2s = strcmp(c->pipeline, "s2s") == 0;
    int vit = strcmp(c->pipeline, "vit") == 0;
    if (s2s != (when == MET_S2S)) return 0;
    switch (when) {
    case MET_S2S:
        return 1;
    case MET_VIT:
        return vit;
    case MET_AVIT:
        return vit && c->avit.enabled;
    case MET_LM:
        return lm;
    case MET_CLS:
        return !lm;
    case MET_BUDGET:
        return !lm && c->budget.enabled && strcmp(c->pipeline, "vit") != 0;
    default:
        return 1;
    }
}

int cfg_metric_produced(const bf_config *c, const char *name, char *names, size_t len) {
    int found = 0;
    size_t w = 0;
    if (names && len) names[0] = '\0';
    for (size_t i = 0; i < sizeof metric_table / sizeof metric_table[0]; i++) {
        if (!metric_applies(c, metric_table[i].when)) continue;
        if (name && strcmp(name, metric_table[i].name) == 0) found = 1;
        if (names && w < len)
            w += (size_t)snprintf(names + w, len - w, "%s%s", w ? ", " : "", metric_table[i].name);
    }
    return found;
}

/* 1 when metric `name` is written before training ends: train/... every
 * train.log_every steps, val/... every train.eval_every steps (0: only at the
 * end); test/... and s2s's eval/... only at the end. */
static int written_during_training(const bf_config *c, const char *name) {
    if (strncmp(name, "eval/", 5) == 0 || strncmp(name, "test/", 5) == 0 || strstr(name, "/test/"))
        return 0;
    if (strncmp(name, "val/", 4) == 0 || strstr(name, "/val/"))
        return c->train.eval_every > 0 && c->train.eval_every < c->train.steps;
    return c->train.log_every < c->train.steps;
}

int cfg_metric_during_training(const bf_config *c, const char *name, char *names, size_t len) {
    int found = 0;
    size_t w = 0;
    if (names && len) names[0] = '\0';
    for (size_t i = 0; i < sizeof metric_table / sizeof metric_table[0]; i++) {
        const char *m = metric_table[i].name;
        if (!metric_applies(c, metric_table[i].when) || !written_during_training(c, m)) continue;
        if (name && strcmp(name, m) == 0) found = 1;
        if (names && w < len) w += (size_t)snprintf(names + w, len - w, "%s%s", w ? ", " : "", m);
    }
    return found;
}
