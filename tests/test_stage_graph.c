/* test_stage_graph — the generic stage graph (stage_graph.h) and the keys of
 * pipeline s2s, its one declaration (pipeline_decl.c): which config change moves
 * which stage's key (and so which stages a sweep can share), stability of the
 * key under spelling, and the folder names the worker and bfd agree on. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "common/cfg.h"
#include "common/pipeline_decl.h"
#include "common/stage_graph.h"

#define S2S_STAGES 6
#define G pipeline_stages("s2s")

/* The defaults, then the YAML text, then the plan. */
static void plan_of(const char *yaml, stage_node out[STAGE_MAX]) {
    bf_config c;
    char err[1024] = "";
    cfg_defaults(&c);
    cr_assert_eq(cfg_load_text(&c, yaml, strlen(yaml), "t.yaml", err, sizeof err), 0, "%s", err);
    cr_assert_eq(stage_graph_plan(G, &c, out), S2S_STAGES);
}

/* Bit i set when stage i's key differs between a and b. */
static unsigned changed(const stage_node *a, const stage_node *b) {
    unsigned m = 0;
    for (int i = 0; i < S2S_STAGES; i++)
        if (strcmp(a[i].key, b[i].key) != 0) m |= 1u << i;
    return m;
}

static const char *base = "pipeline: s2s\n"
                          "data: {set: fashion_mnist}\n"
                          "model: {layers: 4, d_model: 32, heads: 2, patch: 7}\n"
                          "train: {steps: 20, batch: 8}\n";

static void plan_with(const char *extra, stage_node out[STAGE_MAX]) {
    char text[2048];
    snprintf(text, sizeof text, "%s%s", base, extra);
    plan_of(text, out);
}

Test(stage_graph, order_names_parents_and_folders) {
    stage_node p[STAGE_MAX];
    plan_with("", p);
    const char *want[] = {"teacher", "avit", "profile", "distill", "finetune", "eval"};
    for (int i = 0; i < S2S_STAGES; i++) {
        cr_assert_str_eq(p[i].name, want[i]);
        cr_assert_eq(stage_graph_index(G, want[i]), i);
        cr_assert_str_eq(stage_graph_name(G, i), want[i]);
        cr_assert_eq(strlen(p[i].key), 16);
        cr_assert_eq(strspn(p[i].key, "0123456789abcdef"), 16, "key %s", p[i].key);
        cr_assert_str_eq(p[i].parent, i ? p[i - 1].key : "");
        char dir[64];
        snprintf(dir, sizeof dir, "%s-%s", want[i], p[i].key);
        cr_assert_str_eq(p[i].dir, dir);
        for (int j = 0; j < i; j++) cr_assert_str_neq(p[i].key, p[j].key);
    }
    cr_assert_eq(stage_graph_index(G, "student"), -1);
    cr_assert_eq(stage_graph_index(G, ""), -1);
    cr_assert_eq(stage_graph_index(G, NULL), -1);
    cr_assert_null(stage_graph_name(G, 6));
    cr_assert_null(stage_graph_name(G, -1));
}

/* A known value pins the byte rule in stage_graph.h: the worker's folders
 * from one build must be found by bfd of the next. */
Test(stage_graph, eval_key_is_the_documented_hash) {
    stage_node p[STAGE_MAX];
    plan_with("", p);
    /* eval depends on the bare module grid's keys alone: FNV-1a 64 of
     * "stage=eval\n" + each at its default + "parent=<finetune key>\n" */
    char text[256];
    snprintf(text, sizeof text,
             "stage=eval\ns2s.speed_widths=\"192,768\"\ns2s.speed_batches=\"1,8,16,32\"\n"
             "s2s.speed_warmup=50\ns2s.speed_reps=300\nparent=%s\n",
             p[4].key);
    unsigned long long h = 0xcbf29ce484222325ull;
    for (const char *s = text; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    char want[17];
    snprintf(want, sizeof want, "%016llx", h);
    cr_assert_str_eq(p[5].key, want);
}

Test(stage_graph, explicit_default_equals_omitted_key) {
    stage_node a[STAGE_MAX], b[STAGE_MAX];
    plan_with("", a);
    plan_with("avit: {retention: 0.7}\ndistill: {mixer: bimamba, replace_layers: auto:3}\n"
              "train.lr: 3.0e-4\n",
              b);
    cr_assert_eq(changed(a, b), 0u);
    /* dotted keys and sections spell the same config */
    plan_with("distill.lambda_mse: 1\ntrain.weight_decay: 0.010\n", b);
    cr_assert_eq(changed(a, b), 0u);
}

Test(stage_graph, retention_moves_avit_and_below_not_teacher) {
    stage_node a[STAGE_MAX], b[STAGE_MAX];
    plan_with("avit: {retention: 0.7}\n", a);
    plan_with("avit: {retention: 0.5}\n", b);
    cr_assert_eq(changed(a, b), 0x3eu, "changed mask %#x", changed(a, b));
    cr_assert_str_eq(a[0].key, b[0].key);
}

Test(stage_graph, mixer_moves_only_distill_finetune_eval) {
    stage_node a[STAGE_MAX], b[STAGE_MAX];
    plan_with("distill: {mixer: bimamba}\n", a);
    plan_with("distill: {mixer: bilstm}\n", b);
    cr_assert_eq(changed(a, b), 0x38u, "changed mask %#x", changed(a, b));
    plan_with("distill: {replace_layers: [1, 2, 3]}\n", b);
    cr_assert_eq(changed(a, b), 0x38u);
    plan_with("distill: {stage2_steps: 7}\n", b);
    cr_assert_eq(changed(a, b), 0x30u, "stage2_steps is finetune's");
    plan_with("distill: {finetune_lr: 1e-4}\n", b);
    cr_assert_eq(changed(a, b), 0x30u, "finetune_lr is finetune's");
    plan_with("distill: {finetune_prior: 0.1, finetune_ponder: 5e-4}\n", b);
    cr_assert_eq(changed(a, b), 0x30u, "stage 2's A-ViT weights are finetune's");
    plan_with("distill: {label_smoothing: 0}\n", b);
    cr_assert_eq(changed(a, b), 0x38u, "label smoothing is stage 1's and stage 2's");
}

/* Plans the config with extra text; returns how many stages it runs. */
static int plan_count(const char *extra, stage_node out[STAGE_MAX]) {
    char text[2048];
    bf_config c;
    char err[1024] = "";
    snprintf(text, sizeof text, "%s%s", base, extra);
    cfg_defaults(&c);
    cr_assert_eq(cfg_load_text(&c, text, strlen(text), "t.yaml", err, sizeof err), 0, "%s", err);
    return stage_graph_plan(G, &c, out);
}

/* A dense teacher (distill.teacher: dense) runs no A-ViT stage: profile's
 * parent is the teacher, which every teacher kind shares; the kind is in
 * the keys from profile on; A-ViT's keys and the halting losses' weights
 * move no dense stage, so a dense sweep over them shares every stage. */
Test(stage_graph, a_dense_teacher_skips_the_avit_stage) {
    stage_node a[STAGE_MAX], d[STAGE_MAX], d2[STAGE_MAX];
    cr_assert_eq(plan_count("", a), S2S_STAGES);
    cr_assert_eq(plan_count("distill: {teacher: dense}\n", d), S2S_STAGES - 1);
    static const char *const names[] = {"teacher", "profile", "distill", "finetune", "eval"};
    for (int i = 0; i < S2S_STAGES - 1; i++) {
        cr_assert_str_eq(d[i].name, names[i]);
        cr_assert_str_eq(d[i].parent, i ? d[i - 1].key : "");
    }
    cr_assert_eq(d[1].idx, 2, "profile keeps its graph index");
    cr_assert_str_eq(d[0].key, a[0].key, "one teacher for both kinds");
    for (int i = 1; i < S2S_STAGES - 1; i++)
        for (int j = 1; j < S2S_STAGES; j++) cr_assert_str_neq(d[i].key, a[j].key);
    const char *same[] = {"avit: {retention: 0.3, steps: 7, prior: nvlabs}\n",
                          "distill: {lambda_halt: 3, halt_align: mean_h}\n",
                          "distill: {finetune_ponder: 1, finetune_prior: 1}\n"};
    for (size_t k = 0; k < sizeof same / sizeof same[0]; k++) {
        char extra[256];
        snprintf(extra, sizeof extra, "%sdistill: {teacher: dense}\n", same[k]);
        if (strstr(same[k], "distill:")) /* one distill mapping: merge the two */
            snprintf(extra, sizeof extra, "distill: {teacher: dense, %s", same[k] + 10);
        cr_assert_eq(plan_count(extra, d2), S2S_STAGES - 1, "%s", extra);
        for (int i = 0; i < S2S_STAGES - 1; i++)
            cr_assert_str_eq(d[i].key, d2[i].key, "%s moved dense stage %s", extra, d[i].name);
    }
    /* the keys an A-ViT teacher reads still move its stages */
    stage_node b[STAGE_MAX];
    plan_count("distill: {lambda_halt: 3}\n", b);
    cr_assert_eq(changed(a, b), 0x38u);
}

Test(stage_graph, keys_that_do_not_change_training_change_nothing) {
    stage_node a[STAGE_MAX], b[STAGE_MAX];
    plan_with("", a);
    const char *inert[] = {"train.eval_every: 7\n", "train.checkpoint_every: 3\n",
                           "train.log_every: 1\n", "device: cpu\n", "budget: {lambda_budget: 2}\n"};
    for (size_t i = 0; i < sizeof inert / sizeof inert[0]; i++) {
        plan_with(inert[i], b);
        cr_assert_eq(changed(a, b), 0u, "%s changed mask %#x", inert[i], changed(a, b));
    }
}

Test(stage_graph, teacher_keys_move_everything) {
    stage_node a[STAGE_MAX], b[STAGE_MAX];
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

Test(stage_graph, dependency_table_by_prefix) {
    /* every schema key under a listed prefix is a dependency, including keys
     * added later; the exclusions hold */
    for (size_t i = 0; i < cfg_field_count(); i++) {
        const char *k = cfg_field_at(i)->key;
        int teacher = stage_graph_depends(G, NULL, 0, k), avit = stage_graph_depends(G, NULL, 1, k);
        if (strncmp(k, "avit.", 5) == 0) cr_assert(avit && !teacher, "%s", k);
        if (strncmp(k, "data.", 5) == 0 || strncmp(k, "aug.", 4) == 0) cr_assert(teacher, "%s", k);
        if (strncmp(k, "budget.", 7) == 0 || strcmp(k, "device") == 0 || strcmp(k, "pipeline") == 0)
            for (int s = 0; s < S2S_STAGES; s++)
                cr_assert(!stage_graph_depends(G, NULL, s, k), "%s", k);
    }
    cr_assert(!stage_graph_depends(G, NULL, 0, "model.mixers"));
    cr_assert(stage_graph_depends(G, NULL, 0, "model.layers"));
    cr_assert(!stage_graph_depends(G, NULL, 0, "train.eval_every"));
    cr_assert(stage_graph_depends(G, NULL, 0, "train.freeze"));
    cr_assert(stage_graph_depends(G, NULL, 3, "distill.unfreeze"));
    cr_assert(stage_graph_depends(G, NULL, 3, "distill.augment"));
    cr_assert(!stage_graph_depends(G, NULL, 3, "distill.stage2_steps"));
    cr_assert(stage_graph_depends(G, NULL, 4, "distill.stage2_steps"));
    cr_assert(!stage_graph_depends(G, NULL, 2, "distill.mixer"));
    cr_assert(!stage_graph_depends(G, NULL, 5, "train.steps"));
}

/* The mechanism knows no pipeline: a graph declared here, with its own
 * names and rules, gets keys by the same rule; a pipeline that runs in one
 * piece has no graph. */
Test(stage_graph, any_declared_graph) {
    static const stage_rule rules[] = {
        {0, "train.", 0, NULL}, {0, "train.log_every", 1, NULL}, {1, "model.heads", 0, NULL}};
    const stage_graph g = {
        .pipeline = "two", .n = 2, .names = {"fit", "score"}, .rules = rules, .n_rules = 3};
    bf_config a, b;
    cfg_defaults(&a);
    b = a;
    stage_node pa[STAGE_MAX], pb[STAGE_MAX];
    cr_assert_eq(stage_graph_plan(&g, &a, pa), 2);
    cr_assert_str_eq(pa[0].name, "fit");
    cr_assert_str_eq(pa[1].parent, pa[0].key);
    char dir[64];
    snprintf(dir, sizeof dir, "score-%s", pa[1].key);
    cr_assert_str_eq(pa[1].dir, dir);
    b.model.heads = a.model.heads * 2; /* only stage 1 reads it */
    stage_graph_plan(&g, &b, pb);
    cr_assert_str_eq(pa[0].key, pb[0].key);
    cr_assert_str_neq(pa[1].key, pb[1].key);
    b = a;
    b.train.log_every = a.train.log_every + 7; /* excluded */
    stage_graph_plan(&g, &b, pb);
    cr_assert_str_eq(pa[0].key, pb[0].key);
    b.train.steps = a.train.steps + 1; /* moves stage 0 and, through its parent, stage 1 */
    stage_graph_plan(&g, &b, pb);
    cr_assert_str_neq(pa[0].key, pb[0].key);
    cr_assert_str_neq(pa[1].key, pb[1].key);
    cr_assert_eq(stage_graph_index(&g, "score"), 1);
    cr_assert_eq(stage_graph_index(&g, "teacher"), -1);
    char list[64];
    cr_assert_str_eq(stage_graph_list(&g, list, sizeof list), "fit, score");
    cr_assert_null(pipeline_stages("vit"));
    cr_assert_null(pipeline_stages("budgetformer"));
    cr_assert_null(pipeline_stages(NULL));
}

/* The driver column of the pipelines' table and the stage graphs agree:
 * a pipeline has a graph exactly when it runs in stages. */
Test(stage_graph, staged_pipelines_are_those_with_a_graph) {
#define CHECK_DRIVER(name, driver, metric, maximize)                                               \
    cr_assert_eq(pipeline_stages(#name) != NULL, strcmp(#driver, "stages") == 0, "%s", #name);
    BF_PIPELINES(CHECK_DRIVER)
#undef CHECK_DRIVER
    size_t n = 0;
    while (pipeline_name_at(n)) cr_assert(pipeline_known(pipeline_name_at(n++)));
    cr_assert_eq(n, 4);
}
