/* test_s2s_stages — the stage keys of pipeline s2s: which config change moves
 * which stage's key (and so which stages a sweep can share), stability of the
 * key under spelling, and the folder names the worker and bfd agree on. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "common/cfg.h"
#include "common/s2s_stages.h"

/* The defaults, then the YAML text, then the plan. */
static void plan_of(const char *yaml, s2s_stage out[S2S_STAGES]) {
    bf_config c;
    char err[1024] = "";
    cfg_defaults(&c);
    cr_assert_eq(cfg_load_text(&c, yaml, strlen(yaml), "t.yaml", err, sizeof err), 0, "%s", err);
    s2s_stage_plan(&c, out);
}

/* Bit i set when stage i's key differs between a and b. */
static unsigned changed(const s2s_stage *a, const s2s_stage *b) {
    unsigned m = 0;
    for (int i = 0; i < S2S_STAGES; i++)
        if (strcmp(a[i].key, b[i].key) != 0) m |= 1u << i;
    return m;
}

static const char *base = "pipeline: s2s\n"
                          "data: {set: fashion_mnist}\n"
                          "model: {layers: 4, d_model: 32, heads: 2, patch: 7}\n"
                          "train: {steps: 20, batch: 8}\n";

static void plan_with(const char *extra, s2s_stage out[S2S_STAGES]) {
    char text[2048];
    snprintf(text, sizeof text, "%s%s", base, extra);
    plan_of(text, out);
}

Test(s2s_stages, order_names_parents_and_folders) {
    s2s_stage p[S2S_STAGES];
    plan_with("", p);
    const char *want[] = {"teacher", "avit", "profile", "distill", "finetune", "eval"};
    for (int i = 0; i < S2S_STAGES; i++) {
        cr_assert_str_eq(p[i].name, want[i]);
        cr_assert_eq(s2s_stage_index(want[i]), i);
        cr_assert_str_eq(s2s_stage_name(i), want[i]);
        cr_assert_eq(strlen(p[i].key), 16);
        cr_assert_eq(strspn(p[i].key, "0123456789abcdef"), 16, "key %s", p[i].key);
        cr_assert_str_eq(p[i].parent, i ? p[i - 1].key : "");
        char dir[64];
        snprintf(dir, sizeof dir, "%s-%s", want[i], p[i].key);
        cr_assert_str_eq(p[i].dir, dir);
        for (int j = 0; j < i; j++) cr_assert_str_neq(p[i].key, p[j].key);
    }
    cr_assert_eq(s2s_stage_index("student"), -1);
    cr_assert_eq(s2s_stage_index(""), -1);
    cr_assert_eq(s2s_stage_index(NULL), -1);
    cr_assert_null(s2s_stage_name(6));
    cr_assert_null(s2s_stage_name(-1));
}

/* A known value pins the byte rule in s2s_stages.h: the worker's folders
 * from one build must be found by bfd of the next. */
Test(s2s_stages, eval_key_is_the_documented_hash) {
    s2s_stage p[S2S_STAGES];
    plan_with("", p);
    /* eval depends on no key: FNV-1a 64 of "stage=eval\nparent=<finetune key>\n" */
    char text[128];
    snprintf(text, sizeof text, "stage=eval\nparent=%s\n", p[4].key);
    unsigned long long h = 0xcbf29ce484222325ull;
    for (const char *s = text; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    char want[17];
    snprintf(want, sizeof want, "%016llx", h);
    cr_assert_str_eq(p[5].key, want);
}

Test(s2s_stages, explicit_default_equals_omitted_key) {
    s2s_stage a[S2S_STAGES], b[S2S_STAGES];
    plan_with("", a);
    plan_with("avit: {retention: 0.7}\ndistill: {mixer: bimamba, replace_layers: auto:3}\n"
              "train.lr: 3.0e-4\n",
              b);
    cr_assert_eq(changed(a, b), 0u);
    /* dotted keys and sections spell the same config */
    plan_with("distill.lambda_mse: 1\ntrain.weight_decay: 0.010\n", b);
    cr_assert_eq(changed(a, b), 0u);
}

Test(s2s_stages, retention_moves_avit_and_below_not_teacher) {
    s2s_stage a[S2S_STAGES], b[S2S_STAGES];
    plan_with("avit: {retention: 0.7}\n", a);
    plan_with("avit: {retention: 0.5}\n", b);
    cr_assert_eq(changed(a, b), 0x3eu, "changed mask %#x", changed(a, b));
    cr_assert_str_eq(a[0].key, b[0].key);
}

Test(s2s_stages, mixer_moves_only_distill_finetune_eval) {
    s2s_stage a[S2S_STAGES], b[S2S_STAGES];
    plan_with("distill: {mixer: bimamba}\n", a);
    plan_with("distill: {mixer: bilstm}\n", b);
    cr_assert_eq(changed(a, b), 0x38u, "changed mask %#x", changed(a, b));
    plan_with("distill: {replace_layers: [1, 2, 3]}\n", b);
    cr_assert_eq(changed(a, b), 0x38u);
    plan_with("distill: {stage2_steps: 7}\n", b);
    cr_assert_eq(changed(a, b), 0x30u, "stage2_steps is finetune's");
}

Test(s2s_stages, keys_that_do_not_change_training_change_nothing) {
    s2s_stage a[S2S_STAGES], b[S2S_STAGES];
    plan_with("", a);
    const char *inert[] = {"train.eval_every: 7\n", "train.checkpoint_every: 3\n",
                           "train.log_every: 1\n", "device: cpu\n", "budget: {lambda_budget: 2}\n"};
    for (size_t i = 0; i < sizeof inert / sizeof inert[0]; i++) {
        plan_with(inert[i], b);
        cr_assert_eq(changed(a, b), 0u, "%s changed mask %#x", inert[i], changed(a, b));
    }
}

Test(s2s_stages, teacher_keys_move_everything) {
    s2s_stage a[S2S_STAGES], b[S2S_STAGES];
    plan_with("", a);
    const char *moving[] = {"train.seed: 2\n",
                            "model.seq_len: 32\n",
                            "attn: {out_proj: hadamard}\n",
                            "aug: {hflip: false}\n",
                            "init: {from: /tmp/x.safetensors}\n",
                            "train.lr: 1e-3\n",
                            "data.val_fraction: 0.1\n"};
    for (size_t i = 0; i < sizeof moving / sizeof moving[0]; i++) {
        plan_with(moving[i], b);
        cr_assert_eq(changed(a, b), 0x3fu, "%s changed mask %#x", moving[i], changed(a, b));
    }
}

Test(s2s_stages, dependency_table_by_prefix) {
    /* every schema key under a listed prefix is a dependency, including keys
     * added later; the exclusions hold */
    for (size_t i = 0; i < cfg_field_count(); i++) {
        const char *k = cfg_field_at(i)->key;
        int teacher = s2s_stage_depends(0, k), avit = s2s_stage_depends(1, k);
        if (strncmp(k, "avit.", 5) == 0) cr_assert(avit && !teacher, "%s", k);
        if (strncmp(k, "data.", 5) == 0 || strncmp(k, "aug.", 4) == 0) cr_assert(teacher, "%s", k);
        if (strncmp(k, "budget.", 7) == 0 || strcmp(k, "device") == 0 || strcmp(k, "pipeline") == 0)
            for (int s = 0; s < S2S_STAGES; s++) cr_assert(!s2s_stage_depends(s, k), "%s", k);
    }
    cr_assert(!s2s_stage_depends(0, "model.mixers"));
    cr_assert(s2s_stage_depends(0, "model.layers"));
    cr_assert(!s2s_stage_depends(0, "train.eval_every"));
    cr_assert(s2s_stage_depends(0, "train.freeze"));
    cr_assert(s2s_stage_depends(3, "distill.unfreeze"));
    cr_assert(!s2s_stage_depends(3, "distill.stage2_steps"));
    cr_assert(s2s_stage_depends(4, "distill.stage2_steps"));
    cr_assert(!s2s_stage_depends(2, "distill.mixer"));
    cr_assert(!s2s_stage_depends(5, "train.steps"));
}
