/* pipeline_decl.c — the declarations: one stage_graph per pipeline that runs
 * in stages. Adding a staged pipeline: its graph here, its driver in the
 * worker. It holds data only; the keys are computed by stage_graph.c. */
#include "common/pipeline_decl.h"

#include <stdio.h>
#include <string.h>

/* S2S (docs/design.md#s2s-pipeline): teacher, A-ViT, profile, distill,
 * finetune, eval; with distill.teacher dense no A-ViT stage (profile,
 * distill read the dense teacher). Keys no stage depends on (device, train.eval_every,
 * train.checkpoint_every, train.log_every, model.mixers, budget.*) never
 * change a key. */
static const stage_rule s2s_rules[] = {
    {0, "data.", 0, NULL},
    {0, "model.", 0, NULL},
    {0, "model.mixers", 1, NULL}, /* the student's layout is distill's business */
    {0, "attn.", 0, NULL},
    {0, "aug.", 0, NULL},
    {0, "train.", 0, NULL},
    {0, "train.eval_every", 1, NULL}, /* when to measure or save does not change the weights */
    {0, "train.checkpoint_every", 1, NULL},
    {0, "train.log_every", 1, NULL},
    {0, "init.from", 0, NULL},
    {0, "init.map", 0, NULL},
    {1, "avit.", 0, NULL},
    {2, "distill.teacher", 0, NULL}, /* profile reads the A-ViT teacher or the dense one */
    {3, "distill.mixer", 0, NULL},
    {3, "distill.d_state", 0, NULL},
    {3, "distill.replace_layers", 0, NULL},
    {3, "distill.stage1_steps", 0, NULL},
    {3, "distill.lambda_mse", 0, NULL},
    {3, "distill.lambda_halt", 0, NULL},
    {3, "distill.unfreeze", 0, NULL},
    {3, "distill.halt_align", 0, NULL},
    {3, "distill.augment", 0, NULL},
    {3, "distill.label_smoothing", 0, NULL}, /* finetune reads it too, through its parent */
    /* a dense teacher: no halting, so no halting alignment and no A-ViT terms */
    {3, "distill.lambda_halt", 1, "distill.teacher=dense"},
    {3, "distill.halt_align", 1, "distill.teacher=dense"},
    {4, "distill.stage2_steps", 0, NULL},
    {4, "distill.finetune_lr", 0, NULL},
    {4, "distill.finetune_ponder", 0, NULL},
    {4, "distill.finetune_prior", 0, NULL},
    {4, "distill.finetune_ponder", 1, "distill.teacher=dense"},
    {4, "distill.finetune_prior", 1, "distill.teacher=dense"},
    /* eval (5): its parent and the bare module grid */
    {5, "s2s.speed_widths", 0, NULL},
    {5, "s2s.speed_batches", 0, NULL},
    {5, "s2s.speed_warmup", 0, NULL},
    {5, "s2s.speed_reps", 0, NULL},
};

static const stage_graph s2s_graph = {
    .pipeline = "s2s",
    .n = 6,
    .names = {"teacher", "avit", "profile", "distill", "finetune", "eval"},
    .rules = s2s_rules,
    .n_rules = sizeof s2s_rules / sizeof s2s_rules[0],
    .skip = {NULL, "distill.teacher=dense"},
};

static const stage_graph *const graphs[] = {&s2s_graph};

const stage_graph *pipeline_stages(const char *name) {
    for (size_t i = 0; name && i < sizeof graphs / sizeof graphs[0]; i++)
        if (strcmp(graphs[i]->pipeline, name) == 0) return graphs[i];
    return NULL;
}

/* ------------------------------------------------- the keys each reads */

/* A row is a key, or a prefix ending in '.' (a whole section). What a
 * pipeline does not list, it never reads: validation refuses such a key
 * when it is set to anything but its default, and a sweep over it. */
#define COMMON_KEYS "pipeline", "device", "data.dir", "init.", "train."
#define TEXT_MODEL "model.layers", "model.d_model", "model.heads", "model.seq_len", "model.vocab"
#define IMAGE_DATA                                                                                 \
    "data.set", "data.val_fraction", "data.val_split", "data.split_seed", "data.train_images",     \
        "data.train_labels", "data.test_images", "data.test_labels"
#define IMAGE_MODEL "model.layers", "model.d_model", "model.heads", "model.patch", "aug.", "attn."

static const char *const budgetformer_keys[] = {
    COMMON_KEYS, "data.set",          "data.train",     "data.val",
    "data.test", "data.val_fraction", "data.val_split", "data.split_seed",
    TEXT_MODEL,  "model.mixers",      "attn.",          "budget.",
    NULL};
static const char *const lm_keys[] = {COMMON_KEYS, "data.set",     "data.path", "data.val_fraction",
                                      TEXT_MODEL,  "model.mixers", "attn.",     NULL};
static const char *const vit_keys[] = {COMMON_KEYS,          IMAGE_DATA,
                                       IMAGE_MODEL,          "model.mixers",
                                       "avit.enabled",       "avit.retention",
                                       "avit.gate_scale",    "avit.gate_center",
                                       "avit.ponder_weight", "avit.prior_weight",
                                       "avit.tolerance",     "avit.prior",
                                       "avit.output",        NULL};
/* s2s: model.mixers is read only to be refused with its own message */
static const char *const s2s_keys[] = {COMMON_KEYS, IMAGE_DATA, IMAGE_MODEL, "model.mixers",
                                       "avit.",     "distill.", "s2s.",      NULL};

static const struct pipeline_row {
    const char *name;
    const char *const *keys;
    const char *metric; /* judged by when the job names none */
    int maximize;
} pipelines[] = {
#define PIPELINE_ROW(name, driver, metric, maximize) {#name, name##_keys, metric, maximize},
    BF_PIPELINES(PIPELINE_ROW)
#undef PIPELINE_ROW
};

static const struct pipeline_row *find_row(const char *name) {
    for (size_t i = 0; name && i < sizeof pipelines / sizeof pipelines[0]; i++)
        if (strcmp(pipelines[i].name, name) == 0) return &pipelines[i];
    return NULL;
}

static int row_matches(const char *row, const char *key) {
    size_t n = strlen(row);
    return row[n - 1] == '.' ? strncmp(row, key, n) == 0 : strcmp(row, key) == 0;
}

int pipeline_known(const char *name) { return find_row(name) != NULL; }

const char *pipeline_names(char *buf, size_t len) {
    size_t w = 0;
    if (len) buf[0] = '\0';
    for (size_t i = 0; i < sizeof pipelines / sizeof pipelines[0] && w < len; i++)
        w += (size_t)snprintf(buf + w, len - w, "%s%s", i ? ", " : "", pipelines[i].name);
    return buf;
}

const char *pipeline_name_at(size_t i) {
    return i < sizeof pipelines / sizeof pipelines[0] ? pipelines[i].name : NULL;
}

int pipeline_reads_key(const char *name, const char *key) {
    const struct pipeline_row *r = find_row(name);
    for (const char *const *k = r ? r->keys : NULL; k && *k; k++)
        if (row_matches(*k, key)) return 1;
    return 0;
}

const char *pipeline_section_keys(const char *name, const char *key, char *buf, size_t len) {
    const struct pipeline_row *r = find_row(name);
    size_t sl = strcspn(key, "."), w = 0;
    if (len) buf[0] = '\0';
    for (const char *const *k = r ? r->keys : NULL; k && *k && w < len; k++)
        if (strncmp(*k, key, sl) == 0 && ((*k)[sl] == '.' || (*k)[sl] == '\0'))
            w += (size_t)snprintf(buf + w, len - w, "%s%s%s", w ? ", " : "", *k,
                                  (*k)[strlen(*k) - 1] == '.' ? "*" : "");
    return buf;
}

const char *pipeline_default_metric(const char *name, int *maximize) {
    const struct pipeline_row *r = find_row(name);
    if (r && maximize) *maximize = r->maximize;
    return r ? r->metric : NULL;
}
