/* Stage keys of pipeline s2s (see s2s_stages.h for the rule). */
#include "common/s2s_stages.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char *const stage_names[S2S_STAGES] = {"teacher", "avit",     "profile",
                                                    "distill", "finetune", "eval"};

/* What each stage reads from the config, besides its parent's output. A rule
 * ending in '.' is a prefix ("data." = every data key), any other is one key;
 * an `exclude` rule removes keys its stage's include rules matched. */
typedef struct dep_rule {
    int stage;
    const char *match;
    int exclude;
} dep_rule;

static const dep_rule dep_rules[] = {
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

static int rule_matches(const char *match, const char *key) {
    size_t n = strlen(match);
    if (n && match[n - 1] == '.') return strncmp(key, match, n) == 0;
    return strcmp(key, match) == 0;
}

int s2s_stage_depends(int i, const char *key) {
    int in = 0;
    for (size_t r = 0; r < sizeof dep_rules / sizeof dep_rules[0]; r++) {
        if (dep_rules[r].stage != i || !rule_matches(dep_rules[r].match, key)) continue;
        if (dep_rules[r].exclude) return 0;
        in = 1;
    }
    return in;
}

int s2s_stage_index(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < S2S_STAGES; i++)
        if (strcmp(name, stage_names[i]) == 0) return i;
    return -1;
}

const char *s2s_stage_name(int i) { return i >= 0 && i < S2S_STAGES ? stage_names[i] : NULL; }

typedef struct fnv {
    uint64_t h;
} fnv;

static void fnv_add(fnv *f, const char *s) {
    for (; *s; s++) {
        f->h ^= (unsigned char)*s;
        f->h *= 0x100000001b3ull;
    }
}

void s2s_stage_plan(const bf_config *c, s2s_stage out[S2S_STAGES]) {
    const char *parent = "";
    for (int i = 0; i < S2S_STAGES; i++) {
        fnv f = {0xcbf29ce484222325ull};
        fnv_add(&f, "stage=");
        fnv_add(&f, stage_names[i]);
        fnv_add(&f, "\n");
        for (size_t k = 0; k < cfg_field_count(); k++) {
            const cfg_field *fl = cfg_field_at(k);
            if (!s2s_stage_depends(i, fl->key)) continue;
            char val[4 * CFG_MIXERS_MAX + 8]; /* worst case: every byte escaped as \xNN */
            cfg_format_value(c, fl->key, val, sizeof val);
            fnv_add(&f, fl->key);
            fnv_add(&f, "=");
            fnv_add(&f, val);
            fnv_add(&f, "\n");
        }
        fnv_add(&f, "parent=");
        fnv_add(&f, parent);
        fnv_add(&f, "\n");
        s2s_stage *s = &out[i];
        s->name = stage_names[i];
        snprintf(s->key, sizeof s->key, "%016" PRIx64, f.h);
        snprintf(s->parent, sizeof s->parent, "%s", parent);
        snprintf(s->dir, sizeof s->dir, "%s-%s", s->name, s->key);
        parent = s->key;
    }
}
