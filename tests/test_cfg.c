/* test_cfg — the config language: defaults, files (nested and dotted), --set
 * overrides, every error class with its position and message, cross-key
 * validation, canonical dump and stable hash. Files are real, in a temp dir. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cfg.h"
#include "tmpdir.h"

static char tmpdir[256];

static void setup(void) {
    tmpdir_make(tmpdir, sizeof tmpdir, "/tmp/bf_test_cfg_XXXXXX");
    unsetenv("BF_DATA");
}

static void teardown(void) { cr_assert_eq(tmpdir_remove(tmpdir), 0); }

TestSuite(cfg, .init = setup, .fini = teardown);

/* Writes text to tmpdir/name and returns the path (static buffer). */
static const char *write_file(const char *name, const char *text, size_t len) {
    return tmpdir_write_file(tmpdir, name, text, len);
}

static const char *yaml_file(const char *text) { return write_file("c.yaml", text, strlen(text)); }

/* Loads text on top of defaults; returns rc and the message in err. */
static int load(const char *text, bf_config *c, char *err, size_t n) {
    cfg_defaults(c);
    return cfg_load_file(c, yaml_file(text), err, n);
}

#define ASSERT_ERR(text, pos, needle)                                                              \
    do {                                                                                           \
        bf_config c_;                                                                              \
        char e_[1024] = "";                                                                        \
        cr_assert_eq(load(text, &c_, e_, sizeof e_), -1, "accepted: %s", text);                    \
        char want_[600];                                                                           \
        snprintf(want_, sizeof want_, "%s/c.yaml:%s: ", tmpdir, pos);                              \
        cr_assert(strncmp(e_, want_, strlen(want_)) == 0, "position: got '%s', want '%s'", e_,     \
                  want_);                                                                          \
        cr_assert(strstr(e_, needle), "message '%s' lacks '%s'", e_, needle);                      \
    } while (0)

Test(cfg, defaults_match_design) {
    bf_config c;
    cfg_defaults(&c);
    cr_assert_str_eq(c.pipeline, "budgetformer");
    cr_assert_str_eq(c.device, "auto");
    cr_assert_str_eq(c.data.set, "");
    cr_assert_str_eq(c.data.dir, "data");
    cr_assert_float_eq(c.data.val_fraction, 0.05f, 1e-7);
    cr_assert_eq(c.model.layers, 4);
    cr_assert_eq(c.model.d_model, 128);
    cr_assert_eq(c.model.heads, 8);
    cr_assert_eq(c.model.seq_len, 64);
    cr_assert_eq(c.model.vocab, 8192);
    cr_assert_str_eq(c.attn.out_proj, "dense");
    cr_assert_eq(c.budget.enabled, 1);
    cr_assert_float_eq(c.budget.range[0], 0.3f, 1e-7);
    cr_assert_float_eq(c.budget.range[1], 0.6f, 1e-7);
    cr_assert_eq(c.budget.temperature.kind, CFG_SCHED_EXP);
    cr_assert_float_eq(c.budget.temperature.start, 1.0f, 1e-7);
    cr_assert_float_eq(c.budget.temperature.end, 0.1f, 1e-7);
    cr_assert_eq(c.budget.noise.kind, CFG_SCHED_LINEAR);
    cr_assert_float_eq(c.budget.noise.start, 1.0f, 1e-7);
    cr_assert_float_eq(c.budget.noise.end, 0.0f, 1e-7);
    cr_assert_float_eq(c.budget.lambda_budget, 1.0f, 1e-7);
    cr_assert_float_eq(c.budget.lambda_entropy, 0.01f, 1e-7);
    cr_assert_float_eq(c.avit.retention, 0.7f, 1e-7);
    cr_assert_float_eq(c.avit.gate_scale, 10.0f, 1e-7);
    cr_assert_float_eq(c.avit.ponder_weight, 5e-4f, 1e-9);
    cr_assert_float_eq(c.avit.prior_weight, 0.1f, 1e-7);
    cr_assert_str_eq(c.distill.mixer, "bimamba");
    cr_assert_eq(c.distill.replace_auto, 3);
    cr_assert_eq(c.distill.n_replace, 0);
    cr_assert_eq(c.distill.stage1_steps, 1000);
    cr_assert_eq(c.distill.stage2_steps, 1000);
    cr_assert_float_eq(c.distill.lambda_mse, 1.0f, 1e-7);
    cr_assert_float_eq(c.distill.lambda_halt, 0.1f, 1e-7);
    cr_assert_eq(c.distill.unfreeze, 0);
    cr_assert_eq(c.train.steps, 3000);
    cr_assert_eq(c.train.batch, 64);
    cr_assert_float_eq(c.train.lr, 3e-4f, 1e-9);
    cr_assert_eq(c.train.warmup, 100);
    cr_assert_float_eq(c.train.weight_decay, 0.01f, 1e-7);
    cr_assert_float_eq(c.train.clip, 1.0f, 1e-7);
    cr_assert_eq(c.train.seed, 1);
    cr_assert_eq(c.train.eval_every, 500);
    cr_assert_eq(c.train.checkpoint_every, 1000);
    cr_assert_eq(c.train.log_every, 50);
    char err[512];
    cr_assert_eq(cfg_validate(&c, err, sizeof err), 0, "%s", err);
}

Test(cfg, every_schema_default_parses) {
    /* a default that failed to parse would silently leave zero */
    for (size_t i = 0; i < cfg_field_count(); i++) {
        const cfg_field *f = cfg_field_at(i);
        bf_config c;
        memset(&c, 0, sizeof c);
        char err[512];
        cr_assert_eq(cfg_set_value(&c, f->key, f->def, "default", err, sizeof err), 0, "%s: %s",
                     f->key, err);
        cr_assert_not_null(f->help);
    }
    cr_assert_null(cfg_field_at(cfg_field_count()));
}

Test(cfg, bf_data_env_sets_data_dir) {
    setenv("BF_DATA", "/srv/bfdata", 1);
    bf_config c;
    cfg_defaults(&c);
    cr_assert_str_eq(c.data.dir, "/srv/bfdata");
    unsetenv("BF_DATA");
}

Test(cfg, nested_and_dotted_load_alike) {
    bf_config a, b;
    char err[512];
    cr_assert_eq(load("pipeline: lm\nmodel: {layers: 2, d_model: 64}\n"
                      "budget:\n  range: [0.1, 0.3]\n  temperature: {schedule: cosine, start: 2, "
                      "end: 0.5}\ntrain:\n  seed: 18446744073709551615\n  lr: 1.0e-3\n"
                      "distill: {replace_layers: [3, 1, 2]}\ndata: {path: \"corpus.txt\"}\n",
                      &a, err, sizeof err),
                 0, "%s", err);
    cr_assert_eq(load("pipeline: lm\nmodel.layers: 2\nmodel.d_model: 64\nbudget.range: [0.1, 0.3]\n"
                      "budget.temperature: {schedule: cosine, start: 2, end: 0.5}\n"
                      "train.seed: 18446744073709551615\ntrain.lr: 0.001\n"
                      "distill.replace_layers: [1, 2, 3]\ndata.path: corpus.txt\n",
                      &b, err, sizeof err),
                 0, "%s", err);
    cr_assert_str_eq(a.pipeline, "lm");
    cr_assert_eq(a.model.layers, 2);
    cr_assert_eq(a.model.d_model, 64);
    cr_assert_eq(a.model.heads, 8, "untouched keys keep defaults");
    cr_assert_float_eq(a.budget.range[0], 0.1f, 1e-7);
    cr_assert_eq(a.budget.temperature.kind, CFG_SCHED_COSINE);
    cr_assert_float_eq(a.budget.temperature.start, 2.0f, 1e-7);
    cr_assert_eq(a.train.seed, UINT64_MAX);
    cr_assert_eq(a.distill.n_replace, 3);
    cr_assert_eq(a.distill.replace_auto, 0);
    cr_assert_eq(a.distill.replace_layers[0], 1, "layer list is kept sorted");
    cr_assert_str_eq(a.data.path, "corpus.txt");
    char ha[17], hb[17];
    cfg_hash(&a, ha);
    cfg_hash(&b, hb);
    cr_assert_str_eq(ha, hb);
}

Test(cfg, failed_load_leaves_config_untouched) {
    bf_config c;
    char err[512];
    cr_assert_eq(load("model.layers: 2\nmodel.heads: x\n", &c, err, sizeof err), -1);
    cr_assert_eq(c.model.layers, 4);
}

Test(cfg, set_overrides) {
    bf_config c;
    cfg_defaults(&c);
    char err[512];
    cr_assert_eq(cfg_set(&c, "model.layers=6", err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg_set(&c, " budget.range = [0.2, 0.4]", err, sizeof err), 0, "%s", err);
    cr_assert_eq(
        cfg_set(&c, "budget.noise={schedule: constant, start: 0.5, end: 0.5}", err, sizeof err), 0,
        "%s", err);
    cr_assert_eq(cfg_set(&c, "budget.temperature={end: 0.05}", err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg_set(&c, "budget.enabled=false", err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg_set(&c, "distill.replace_layers=auto:5", err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg_set(&c, "data.set=", err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg_set(&c, "model={heads: 4}", err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.model.layers, 6);
    cr_assert_eq(c.model.heads, 4);
    cr_assert_float_eq(c.budget.range[1], 0.4f, 1e-7);
    cr_assert_eq(c.budget.noise.kind, CFG_SCHED_CONSTANT);
    cr_assert_eq(c.budget.temperature.kind, CFG_SCHED_EXP, "partial schedule keeps the rest");
    cr_assert_float_eq(c.budget.temperature.end, 0.05f, 1e-7);
    cr_assert_eq(c.budget.enabled, 0);
    cr_assert_eq(c.distill.replace_auto, 5);

    cr_assert_eq(cfg_set(&c, "model.layer=3", err, sizeof err), -1);
    cr_assert_str_eq(err,
                     "--set model.layer: unknown key 'model.layer'; did you mean 'model.layers'?");
    cr_assert_eq(cfg_set(&c, "model.layers=0", err, sizeof err), -1);
    cr_assert_str_eq(err, "--set model.layers: 0 is out of range; valid range is [1, 64]");
    cr_assert_eq(cfg_set(&c, "model.layers", err, sizeof err), -1);
    cr_assert(strstr(err, "expected KEY=VALUE"), "%s", err);
    cr_assert_eq(cfg_set(&c, "model.layers=[1,", err, sizeof err), -1);
    cr_assert(strstr(err, "--set model.layers: YAML syntax error"), "%s", err);
    cr_assert_eq(c.model.layers, 6, "failed --set leaves the value");
}

/* A --set message names its key once, whatever went wrong with the value,
 * and YAML's `KEY: VALUE` (or `KEY:=VALUE`) is told to be KEY=VALUE, never
 * read as a key 'KEY:'. */
Test(cfg, set_names_key_once) {
    bf_config c;
    cfg_defaults(&c);
    char err[512];
    static const char *const bad[][2] = {
        {"train.lr=abc", "--set train.lr: expected a number, got 'abc'"},
        {"train.lr=[1]", "--set train.lr: expected a number, got a list"},
        {"train.lr=3: 4", "--set train.lr: expected a number, got a mapping"},
        {"data.set=[a]", "--set data.set: expected a string, got a list"},
        {"train.lr: 3", "--set 'train.lr: 3': a key has no ':' in it; write KEY=VALUE, as in "
                        "--set train.lr=3"},
        {"train.lr:=3", "--set 'train.lr:=3': a key has no ':' in it; write KEY=VALUE, as in "
                        "--set train.lr=3"},
        {"model.layers:4", "--set 'model.layers:4': a key has no ':' in it; write KEY=VALUE, "
                           "as in --set model.layers=4"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(cfg_set(&c, bad[i][0], err, sizeof err), -1, "%s", bad[i][0]);
        cr_assert_str_eq(err, bad[i][1], "--set %s", bad[i][0]);
        if (strcspn(bad[i][0], ":") < strcspn(bad[i][0], "=")) continue; /* the ':' forms */
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)strcspn(bad[i][0], "="), bad[i][0]);
        const char *first = strstr(err, key);
        cr_assert(first && !strstr(first + strlen(key), key), "key named twice: %s", err);
    }
    /* a ':' in the value is the value's */
    cr_assert_eq(cfg_set(&c, "distill.replace_layers=auto:3", err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.distill.replace_auto, 3);
}

Test(cfg, set_value_where_prefix) {
    bf_config c;
    cfg_defaults(&c);
    char err[512];
    cr_assert_eq(cfg_set_value(&c, "train.lr", "fast", "sweep.yaml:12:7", err, sizeof err), -1);
    cr_assert_str_eq(err, "sweep.yaml:12:7: train.lr: expected a number, got 'fast'");
    cr_assert_eq(cfg_set_value(&c, "train.lr", "1e-3", "x", err, sizeof err), 0);
    cr_assert_float_eq(c.train.lr, 1e-3f, 1e-9);
}

Test(cfg, error_unknown_key_suggests) {
    ASSERT_ERR("model:\n  layer: 4\n", "2:3",
               "unknown key 'model.layer'; did you mean 'model.layers'?");
    ASSERT_ERR("model.d_modle: 4\n", "1:1", "did you mean 'model.d_model'?");
    ASSERT_ERR("modle: {layers: 4}\n", "1:1", "unknown key 'modle'; did you mean 'model'?");
    ASSERT_ERR("zzzzzzzzzzzzzzzzzz: 1\n", "1:1", "unknown key 'zzzzzzzzzzzzzzzzzz'");
    cr_assert_str_eq(cfg_nearest_key("train.setps"), "train.steps");
    cr_assert(cfg_key_known("budget.range"));
    cr_assert(!cfg_key_known("budget"));
}

Test(cfg, error_wrong_type) {
    ASSERT_ERR("model: {layers: four}\n", "1:17", "model.layers: expected an integer, got 'four'");
    ASSERT_ERR("model.layers: 4.5\n", "1:15", "expected an integer");
    ASSERT_ERR("train.lr: [1]\n", "1:11", "train.lr: expected a number, got a list");
    ASSERT_ERR("train.lr: .nan\n", "1:11", "train.lr: '.nan' is NaN (not a number)");
    ASSERT_ERR("budget.enabled: yes\n", "1:17", "expected true or false, got 'yes'");
    ASSERT_ERR("budget.range: 0.3\n", "1:15", "expected a pair of numbers [a, b], got '0.3'");
    ASSERT_ERR("budget.range: [0.1, x]\n", "1:21", "expected a number for the second element");
    ASSERT_ERR("budget.temperature: exp\n", "1:21", "expected a schedule");
    ASSERT_ERR("budget.temperature: {schedule: exp, strat: 1}\n", "1:37",
               "unknown schedule field 'strat'");
    ASSERT_ERR("train.seed: -1\n", "1:13", "expected a non-negative integer");
    ASSERT_ERR("data.path: [a]\n", "1:12", "data.path: expected a string, got a list");
    ASSERT_ERR("distill.replace_layers: [1, 1]\n", "1:29", "listed twice");
    ASSERT_ERR("distill.replace_layers: auto:0\n", "1:25", "auto:K must be an integer in [1, 64]");
    ASSERT_ERR("distill.replace_layers: every\n", "1:25", "expected a list of layer indices");
    ASSERT_ERR("model: 3\n", "1:1", "unknown key 'model'");
}

Test(cfg, error_out_of_range) {
    ASSERT_ERR("model:\n  heads: 0\n", "2:10",
               "model.heads: 0 is out of range; valid range is [1, 256]");
    ASSERT_ERR("budget.range: [0.2, 1.5]\n", "1:21", "1.5 is out of range; valid range is [0, 1]");
    ASSERT_ERR("train.lr: 20\n", "1:11", "valid range is [1e-09, 10]");
    ASSERT_ERR("budget.temperature: {schedule: exp, start: 0, end: 1}\n", "1:44",
               "valid range is [1e-06, 1e+06]");
    ASSERT_ERR("distill.replace_layers: [64]\n", "1:26",
               "layer 64 is out of range; valid range is [0, 63]");
}

Test(cfg, error_enum_lists_choices) {
    ASSERT_ERR("attn:\n  out_proj: sparse\n", "2:13",
               "attn.out_proj: 'sparse' is not valid; expected one of: dense, hadamard");
    ASSERT_ERR("pipeline: resnet\n", "1:11", "expected one of: budgetformer, lm, vit, s2s");
    ASSERT_ERR("budget.noise: {schedule: step}\n", "1:26",
               "expected one of: constant, linear, exp, cosine");
}

Test(cfg, error_duplicate_keys) {
    ASSERT_ERR("model:\n  layers: 2\n  layers: 3\n", "3:3",
               "duplicate key 'layers' (first at line 2, column 3)");
    ASSERT_ERR("model: {layers: 2}\nmodel.layers: 3\n", "2:1",
               "duplicate key 'model.layers' (first set at line 1, column 9)");
    ASSERT_ERR("model: {layers: 2}\nmodel: {heads: 2}\n", "2:1", "duplicate key 'model'");
}

Test(cfg, error_syntax_and_files) {
    ASSERT_ERR("model: {layers: 2\n", "2:1", "YAML syntax error");
    ASSERT_ERR("", "1:1", "empty config");
    ASSERT_ERR("# only a comment\n", "1:1", "empty config");
    ASSERT_ERR("- 1\n- 2\n", "1:1", "expected a mapping of config keys, got a list");
    bf_config c;
    cfg_defaults(&c);
    char err[512];
    const char *bin = write_file("bin.yaml", "model:\0\x01\x02", 9);
    cr_assert_eq(cfg_load_file(&c, bin, err, sizeof err), -1);
    cr_assert(strstr(err, "not a text file (NUL byte at offset 6)"), "%s", err);
    size_t big = (1u << 20) + 10;
    char *huge = malloc(big);
    memset(huge, '#', big);
    const char *hp = write_file("big.yaml", huge, big);
    free(huge);
    cr_assert_eq(cfg_load_file(&c, hp, err, sizeof err), -1);
    cr_assert(strstr(err, "limited to 1 MiB"), "%s", err);
    cr_assert_eq(cfg_load_file(&c, "/nonexistent/x.yaml", err, sizeof err), -1);
    cr_assert(strstr(err, "/nonexistent/x.yaml:1:1: cannot open"), "%s", err);
    cr_assert_eq(cfg_load_file(&c, tmpdir, err, sizeof err), -1);
    cr_assert(strstr(err, "not a regular file"), "%s", err);
}

Test(cfg, multiple_errors_counted) {
    bf_config c;
    char err[1024];
    cr_assert_eq(load("model.layers: x\ntrain.lr: y\nfoo: 1\n", &c, err, sizeof err), -1);
    /* every error, one per line, as bfctl validate shows them */
    cr_assert(strstr(err, ":1:15: model.layers") && strstr(err, ":2:11: train.lr") &&
                  strstr(err, ":3:1: unknown key 'foo'"),
              "%s", err);
    cr_assert_eq(strchr(strchr(err, '\n') + 1, '\n') != NULL, 1, "three lines: %s", err);
    cr_assert_null(strstr(err, "more errors"), "%s", err);
}

Test(cfg, second_document_and_deep_nesting_are_refused) {
    ASSERT_ERR("model.layers: 2\n---\nmodel.layers: 3\n", "2:1", "a second YAML document");
    char deep[400] = "model.layers: ";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    for (int i = 0; i < 100; i++) strcat(deep, "]");
    strcat(deep, "\n");
    ASSERT_ERR(deep, "1:78", "nesting deeper than 64 levels; refused");
    bf_config c;
    char err[256];
    cfg_defaults(&c);
    cr_assert_eq(cfg_set(&c, "model.layers=2\n---\n3", err, sizeof err), -1);
    cr_assert(strstr(err, "more than one YAML document"), "%s", err);
}

/* validate and the worker share one check: data keys the pipeline would not
 * read, the tokenizer's vocabulary range */
Test(cfg, validate_refuses_data_keys_the_pipeline_ignores) {
    bf_config c;
    char err[2048];
    struct {
        const char *pipeline, *key, *value, *needle;
    } cases[] = {
        {"lm", "data.set", "wordnet", "data.set 'wordnet' is not a text corpus"},
        {"lm", "data.train", "a.tsv", "data.train is not read by pipeline lm"},
        {"lm", "data.test", "a.tsv", "data.test is not read by pipeline lm"},
        {"lm", "data.val_fraction", "0", "data.val_fraction is 0"},
        {"budgetformer", "data.set", "kjv", "data.set 'kjv' is not a text classification set"},
        {"budgetformer", "data.path", "a.txt", "data.path is not read by pipeline budgetformer"},
        {"budgetformer", "data.val", "v.tsv", "data.val is given without data.train"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cfg_defaults(&c);
        snprintf(c.pipeline, sizeof c.pipeline, "%s", cases[i].pipeline);
        char a[128];
        snprintf(a, sizeof a, "%s=%s", cases[i].key, cases[i].value);
        cr_assert_eq(cfg_set(&c, a, err, sizeof err), 0, "%s", err);
        cr_assert_eq(cfg_validate(&c, err, sizeof err), -1, "%s %s accepted", cases[i].pipeline, a);
        cr_assert(strstr(err, cases[i].needle), "%s: %s", a, err);
    }
    cfg_defaults(&c);
    strcpy(c.pipeline, "lm");
    cr_assert_eq(cfg_set(&c, "data.path=corpus.txt", err, sizeof err), 0);
    cr_assert_eq(cfg_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg_set(&c, "model.vocab=8", err, sizeof err), -1);
    cr_assert(strstr(err, "valid range is [16, 1000000]"), "%s", err);
    cr_assert_eq(cfg_set(&c, "model.vocab=1000001", err, sizeof err), -1);
}

Test(cfg, metric_names_follow_the_pipeline) {
    bf_config c;
    char list[1024];
    cfg_defaults(&c);
    strcpy(c.pipeline, "lm");
    cr_assert(cfg_metric_produced(&c, "val/ppl", list, sizeof list));
    cr_assert(!cfg_metric_produced(&c, "val/acc", NULL, 0));
    cr_assert(strstr(list, "val/loss") && !strstr(list, "acc"), "%s", list);
    strcpy(c.pipeline, "budgetformer");
    c.budget.enabled = 1;
    cr_assert(cfg_metric_produced(&c, "val/acc", NULL, 0));
    cr_assert(cfg_metric_produced(&c, "val/corr_s_len", NULL, 0));
    c.budget.enabled = 0;
    cr_assert(!cfg_metric_produced(&c, "val/corr_s_len", NULL, 0));
    cr_assert(!cfg_metric_produced(&c, "val/ppl", NULL, 0));
}

Test(cfg, aliases_work_and_bombs_are_refused) {
    bf_config c;
    char err[1024];
    cr_assert_eq(load("x: &w 256\nmodel: {d_model: *w}\n", &c, err, sizeof err), -1,
                 "x is not a key");
    cr_assert_eq(load("model: &m {layers: 2, d_model: 256}\n", &c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.model.d_model, 256);
    cr_assert_eq(load("train: {steps: &s 77, warmup: *s}\n", &c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(c.train.warmup, 77);
    /* a mapping that contains itself: refused, not walked forever */
    ASSERT_ERR("model: &a {layers: 2, x: *a}\n", "1:12", "recursive alias");
    /* billion laughs: 10 levels of 10 aliases each under a layer list */
    char bomb[4096];
    size_t w = 0;
    w += (size_t)snprintf(bomb + w, sizeof bomb - w, "a0: &a0 [1,1,1,1,1,1,1,1,1,1]\n");
    for (int i = 1; i < 9; i++) {
        w += (size_t)snprintf(bomb + w, sizeof bomb - w, "a%d: &a%d [", i, i);
        for (int j = 0; j < 10; j++)
            w += (size_t)snprintf(bomb + w, sizeof bomb - w, "*a%d%s", i - 1, j < 9 ? "," : "]\n");
    }
    w += (size_t)snprintf(bomb + w, sizeof bomb - w, "distill.replace_layers: *a8\n");
    cr_assert_eq(load(bomb, &c, err, sizeof err), -1);
    cr_assert(strstr(err, "document has more than 100000 nodes"), "%s", err);
}

Test(cfg, validate_cross_keys) {
    bf_config c;
    char err[1024];
    cfg_defaults(&c);
    c.model.d_model = 130;
    cr_assert_eq(cfg_validate(&c, err, sizeof err), -1);
    cr_assert_str_eq(err, "model.d_model (130) must be divisible by model.heads (8)");
    strcpy(c.pipeline, "s2s");
    strcpy(c.model.mixers, "attention");
    cr_assert_eq(cfg_validate(&c, err, sizeof err), -1);
    cr_assert(strchr(err, '\n'), "two problems, one per line: %s", err);
    cr_assert(strstr(err, "model.mixers is set by pipeline s2s"), "%s", err);

    cfg_defaults(&c);
    strcpy(c.attn.out_proj, "hadamard");
    for (int d = 8; d <= 1536; d += 8) {
        c.model.d_model = d;
        c.model.heads = 1;
        int ok = cfg_validate(&c, err, sizeof err) == 0;
        int pow2 = (d & (d - 1)) == 0, twelve = d % 12 == 0 && ((d / 12) & (d / 12 - 1)) == 0;
        cr_assert_eq(ok, pow2 || twelve, "d=%d: %s", d, err);
    }
    c.model.d_model = 100;
    cr_assert_eq(cfg_validate(&c, err, sizeof err), -1);
    cr_assert(strstr(err, "2^n or 12*2^n") && strstr(err, "got 100 (nearest valid: 96 or 128)"),
              "%s", err);

    cfg_defaults(&c);
    c.budget.range[0] = 0.7f;
    c.budget.range[1] = 0.2f;
    cr_assert_eq(cfg_validate(&c, err, sizeof err), -1);
    cr_assert(strstr(err, "budget.range [0.7, 0.2] must be ordered"), "%s", err);

    cfg_defaults(&c);
    strcpy(c.pipeline, "s2s");
    strcpy(c.data.set, "fashion_mnist");
    cr_assert_eq(cfg_validate(&c, err, sizeof err), 0, "%s", err);
    c.distill.replace_auto = c.model.layers;
    cr_assert_eq(cfg_validate(&c, err, sizeof err), -1);
    cr_assert(strstr(err, "valid: auto:1 .. auto:3"), "%s", err);
    /* a dense teacher runs no A-ViT stage: its retention is not checked, and
     * its avit stage cannot be run alone */
    c.distill.replace_auto = 1;
    c.avit.retention = 0.1f; /* under 1/L of 4 layers */
    cr_assert_eq(cfg_validate(&c, err, sizeof err), -1);
    cr_assert(strstr(err, "avit.retention 0.1 is unreachable"), "%s", err);
    strcpy(c.distill.teacher, "dense");
    cr_assert_eq(cfg_validate(&c, err, sizeof err), 0, "%s", err);
    strcpy(c.s2s.stage, "avit");
    cr_assert_eq(cfg_validate(&c, err, sizeof err), -1);
    cr_assert(strstr(err, "distill.teacher dense runs no avit stage"), "%s", err);
    cfg_defaults(&c);
    strcpy(c.pipeline, "lm");
    cr_assert_eq(cfg_validate(&c, err, sizeof err), 0, "%s", err);
}

Test(cfg, dump_round_trips_and_hash_is_stable) {
    bf_config c, d;
    char err[512];
    cfg_defaults(&c);
    cr_assert_eq(cfg_set(&c, "data.path=\"we\\\"ird: path\\ttab\"", err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg_set(&c, "distill.replace_layers=[11, 9, 10]", err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg_set(&c, "train.lr=0.000123456789", err, sizeof err), 0, "%s", err);
    size_t need = cfg_dump(&c, NULL, 0);
    char *buf = malloc(need + 1);
    cr_assert_eq(cfg_dump(&c, buf, need + 1), need);
    cr_assert_eq(strlen(buf), need);
    cr_assert(strstr(buf, "attn.out_proj: dense\n"), "%s", buf);
    cr_assert(strstr(buf, "budget.temperature: {schedule: exp, start: 1, end: 0.1}\n"), "%s", buf);
    cr_assert(strstr(buf, "distill.replace_layers: [9, 10, 11]\n"), "%s", buf);
    cr_assert(strstr(buf, "data.path: \"we\\\"ird: path\\x09tab\"\n"), "%s", buf);
    /* keys are sorted */
    cr_assert(strstr(buf, "attn.out_proj") < strstr(buf, "budget.enabled"));
    cr_assert(strstr(buf, "train.warmup") > strstr(buf, "train.steps"));
    /* the dump loads back to the same config and the same hash */
    cfg_defaults(&d);
    FILE *fp = fopen(yaml_file(buf), "r");
    fclose(fp);
    cr_assert_eq(cfg_load_file(&d, yaml_file(buf), err, sizeof err), 0, "%s", err);
    char h1[17], h2[17];
    cfg_hash(&c, h1);
    cfg_hash(&d, h2);
    cr_assert_str_eq(h1, h2);
    cr_assert_str_eq(d.data.path, "we\"ird: path\ttab");
    cr_assert_eq(memcmp(&c.model, &d.model, sizeof c.model), 0);
    /* truncated dump still reports the full size and is NUL-terminated */
    char small[10];
    cr_assert_eq(cfg_dump(&c, small, sizeof small), need);
    cr_assert_eq(strlen(small), 9);
    free(buf);
    /* one changed key changes the hash; a known value pins the function */
    cfg_set(&d, "train.seed=2", err, sizeof err);
    cfg_hash(&d, h2);
    cr_assert_str_neq(h1, h2);
    cfg_defaults(&c);
    cfg_hash(&c, h1);
    cfg_defaults(&d);
    cfg_hash(&d, h2);
    cr_assert_str_eq(h1, h2);
    cr_assert_eq(strlen(h1), 16);
}

Test(cfg, format_value) {
    bf_config c;
    cfg_defaults(&c);
    char buf[128];
    cfg_format_value(&c, "budget.range", buf, sizeof buf);
    cr_assert_str_eq(buf, "[0.3, 0.6]");
    cfg_format_value(&c, "distill.replace_layers", buf, sizeof buf);
    cr_assert_str_eq(buf, "auto:3");
    cr_assert_eq(cfg_format_value(&c, "nope", buf, sizeof buf), 0);
    cfg_set(&c, "train.lr=0.000123456789", NULL, 0);
    cfg_format_value(&c, "train.lr", buf, sizeof buf);
    cr_assert_str_eq(buf, "0.00012345679", "shortest text that reads back as the same float");
    cr_assert_eq(strtof(buf, NULL), c.train.lr);
}

Test(cfg, schedules) {
    cfg_schedule e = {CFG_SCHED_EXP, 1.0f, 0.1f}, l = {CFG_SCHED_LINEAR, 1.0f, 0.0f};
    cfg_schedule k = {CFG_SCHED_COSINE, 1.0f, 0.0f}, z = {CFG_SCHED_CONSTANT, 0.5f, 9.0f};
    cr_assert_float_eq(cfg_schedule_at(&e, 0.5f), 0.316227766f, 1e-6);
    cr_assert_float_eq(cfg_schedule_at(&e, 2.0f), 0.1f, 1e-7);
    cr_assert_float_eq(cfg_schedule_at(&l, 0.25f), 0.75f, 1e-7);
    cr_assert_float_eq(cfg_schedule_at(&k, 0.5f), 0.5f, 1e-6);
    cr_assert_float_eq(cfg_schedule_at(&z, 0.7f), 0.5f, 1e-7);
    cr_assert_str_eq(cfg_sched_name(CFG_SCHED_COSINE), "cosine");
}

/* The bounded edit distance the "did you mean" search uses is the plain one
 * wherever that is within the bound, and says "over" everywhere else. */
Test(cfg, bounded_edit_distance_agrees_with_the_plain_one) {
    const char *w[] = {"",
                       "a",
                       "model.layers",
                       "model.layer",
                       "modle.layers",
                       "train.lr",
                       "train.steps",
                       "budget.range",
                       "xyz",
                       "data.train",
                       "data.val",
                       "distill.mixer",
                       "attn.out_proj",
                       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    size_t n = sizeof w / sizeof *w, checked = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            size_t d = cfg_edit_distance(w[i], w[j]);
            for (size_t max = 0; max < 34; max++) {
                size_t b = cfg_edit_distance_within(w[i], w[j], max);
                if (d <= max)
                    cr_assert_eq(b, d, "'%s' '%s' max %zu: %zu, plain %zu", w[i], w[j], max, b, d);
                else
                    cr_assert_gt(b, max, "'%s' '%s' max %zu: %zu, plain %zu", w[i], w[j], max, b,
                                 d);
                checked++;
            }
        }
    cr_assert_eq(checked, n * n * 34);
    /* and the suggestion it feeds is unchanged */
    cr_assert_str_eq(cfg_nearest_key("modle.layers"), "model.layers");
}
