/* test_sweep — sweep files: the examples, every error class with its
 * FILE:LINE:COL and message, grid and random expansion (counts, order,
 * contents, reproducibility), resolved configs and their hashes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cfg.h"
#include "jobs/sweep.h"
#include "tmpdir.h"

static char tmpdir[256];

static void setup(void) {
    tmpdir_make(tmpdir, sizeof tmpdir, "/tmp/bf_test_sweep_XXXXXX");
    unsetenv("BF_DATA");
}

static void teardown(void) { cr_assert_eq(tmpdir_remove(tmpdir), 0); }

TestSuite(sweep, .init = setup, .fini = teardown);

static const char *write_file(const char *name, const char *text, size_t len) {
    return tmpdir_write_file(tmpdir, name, text, len);
}

/* Loads text as s.yaml; returns rc, spec in *out, errors in *e. */
static int load(const char *text, sweep_spec **out, sweep_errors *e) {
    memset(e, 0, sizeof *e);
    return sweep_load_file(write_file("s.yaml", text, strlen(text)), out, e);
}

static void dump_errors(const sweep_errors *e, char *buf, size_t n) {
    buf[0] = '\0';
    for (int i = 0; i < e->n; i++) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s\n", e->msgs[i]);
    }
}

/* Asserts the sweep is refused with an error at POS containing NEEDLE. */
#define ASSERT_SWEEP_ERR(text, pos, needle)                                                        \
    do {                                                                                           \
        sweep_spec *s_ = NULL;                                                                     \
        sweep_errors e_;                                                                           \
        cr_assert_eq(load(text, &s_, &e_), -1, "accepted: %s", text);                              \
        cr_assert_null(s_);                                                                        \
        char want_[700], all_[8192];                                                               \
        snprintf(want_, sizeof want_, "%s/s.yaml:%s: ", tmpdir, pos);                              \
        dump_errors(&e_, all_, sizeof all_);                                                       \
        int found_ = 0;                                                                            \
        for (int i_ = 0; i_ < e_.n; i_++)                                                          \
            if (strncmp(e_.msgs[i_], want_, strlen(want_)) == 0 && strstr(e_.msgs[i_], needle))    \
                found_ = 1;                                                                        \
        cr_assert(found_, "no error '%s%s' among:\n%s", want_, needle, all_);                      \
        sweep_errors_free(&e_);                                                                    \
    } while (0)

static sweep_spec *load_ok(const char *text) {
    sweep_spec *s = NULL;
    sweep_errors e;
    int rc = load(text, &s, &e);
    char all[8192];
    dump_errors(&e, all, sizeof all);
    cr_assert_eq(rc, 0, "refused:\n%s", all);
    sweep_errors_free(&e);
    return s;
}

/* Collects the expanded trials' params, hashes and configs. */
typedef struct collected {
    int n;
    char params[64][512];
    char hash[64][17];
    bf_config cfg[64];
    char dump[64][4096];
} collected;

static int collect_fn(void *ud, const sweep_trial *t) {
    collected *c = ud;
    cr_assert_eq(t->index, c->n, "trials come in order");
    if (c->n < 64) {
        snprintf(c->params[c->n], sizeof c->params[0], "%s", t->params);
        memcpy(c->hash[c->n], t->hash, 17);
        c->cfg[c->n] = *t->config;
        snprintf(c->dump[c->n], sizeof c->dump[0], "%s", t->config_text);
    }
    c->n++;
    return 0;
}

static collected *expand(const sweep_spec *s) {
    collected *c = calloc(1, sizeof *c);
    char err[256];
    cr_assert_eq(sweep_expand(s, collect_fn, c, err, sizeof err), 0, "%s", err);
    return c;
}

Test(sweep, examples_validate) {
    const char *names[] = {"budgetformer_sweep.yaml",
                           "lm_sweep.yaml",
                           "asha_sweep.yaml",
                           "median_sweep.yaml",
                           "tpe_sweep.yaml",
                           "s2s_sweep.yaml",
                           "s2s_sweep_small.yaml",
                           "s2s_sweep_12.yaml",
                           "budgetformer_pareto.yaml",
                           "s2s_pareto.yaml",
                           "budgetformer_pareto_small.yaml"};
    long long want[] = {6, 4, 27, 12, 40, 36, 18, 6, 16, 9, 8};
    int objectives[] = {1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2};
    for (int i = 0; i < (int)(sizeof want / sizeof *want); i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/examples/%s", BF_SOURCE_DIR, names[i]);
        sweep_spec *s = NULL;
        sweep_errors e = {0};
        char all[8192];
        int rc = sweep_load_file(path, &s, &e);
        dump_errors(&e, all, sizeof all);
        cr_assert_eq(rc, 0, "%s:\n%s", names[i], all);
        cr_assert_eq(s->n_trials, want[i]);
        cr_assert_eq(s->n_objectives, objectives[i], "%s", names[i]);
        cr_assert(s->is_sweep);
        sweep_spec_destroy(&s);
        cr_assert_null(s);
    }
}

Test(sweep, grid_order_contents_and_resolved_configs) {
    sweep_spec *s =
        load_ok("name: t1\npipeline: budgetformer\ndata: {set: wordnet}\n"
                "base:\n  model: {layers: 2, d_model: 64}\n  train: {steps: 10}\n"
                "sweep:\n  method: grid\n  parameters:\n"
                "    budget.range: {values: [[0.1, 0.3], [0.3, 0.6], [0.6, 1.0]]}\n"
                "    budget.temperature: {values: [{schedule: exp, start: 1.0, end: 0.1},"
                " {schedule: linear, start: 2.0, end: 0.2}]}\n"
                "metric: {name: val/acc, goal: max}\nretries: 2\npriority: 5\n"
                "resources: {ranks: 2, nodes: 2, gpus_per_rank: 1, time_limit: \"1:30:00\"}\n");
    cr_assert_str_eq(s->name, "t1");
    cr_assert_eq(s->method, SWEEP_GRID);
    cr_assert_eq(s->n_trials, 6);
    cr_assert_eq(s->retries, 2);
    cr_assert_eq(s->priority, 5);
    cr_assert_eq(s->resources.ranks, 2);
    cr_assert_eq(s->resources.gpus_per_rank, 1);
    cr_assert_eq(s->resources.nodes, 2);
    cr_assert_eq(s->resources.time_limit_s, 5400);
    cr_assert_str_eq(s->metric_name, "val/acc");
    cr_assert(s->metric_maximize);
    collected *c = expand(s);
    cr_assert_eq(c->n, 6);
    /* first parameter varies slowest */
    cr_assert_str_eq(c->params[0], "budget.range: [0.1, 0.3]\n"
                                   "budget.temperature: {schedule: exp, start: 1, end: 0.1}\n");
    cr_assert_str_eq(c->params[1], "budget.range: [0.1, 0.3]\n"
                                   "budget.temperature: {schedule: linear, start: 2, end: 0.2}\n");
    cr_assert_str_eq(c->params[5], "budget.range: [0.6, 1]\n"
                                   "budget.temperature: {schedule: linear, start: 2, end: 0.2}\n");
    /* resolved: base + top-level keys + the trial's values, defaults elsewhere */
    cr_assert_eq(c->cfg[3].model.layers, 2);
    cr_assert_eq(c->cfg[3].model.d_model, 64);
    cr_assert_eq(c->cfg[3].model.heads, 8);
    cr_assert_str_eq(c->cfg[3].data.set, "wordnet");
    cr_assert_float_eq(c->cfg[3].budget.range[0], 0.3f, 1e-7);
    cr_assert_eq(c->cfg[3].budget.temperature.kind, CFG_SCHED_LINEAR);
    /* the hash is cfg_hash of the resolved config, and distinct per trial */
    for (int i = 0; i < 6; i++) {
        char h[17];
        cfg_hash(&c->cfg[i], h);
        cr_assert_str_eq(h, c->hash[i]);
        for (int j = 0; j < i; j++) cr_assert_str_neq(c->hash[i], c->hash[j]);
        /* the dump loads back into the same config */
        bf_config back;
        cfg_defaults(&back);
        char err[512];
        cr_assert_eq(cfg_load_file(&back, write_file("d.yaml", c->dump[i], strlen(c->dump[i])), err,
                                   sizeof err),
                     0, "%s", err);
        cfg_hash(&back, h);
        cr_assert_str_eq(h, c->hash[i]);
    }
    /* the hash is stable across expansions */
    collected *c2 = expand(s);
    for (int i = 0; i < 6; i++) cr_assert_str_eq(c->hash[i], c2->hash[i]);
    free(c);
    free(c2);
    sweep_spec_destroy(&s);
}

Test(sweep, random_reproducible_and_in_bounds) {
    const char *text = "pipeline: vit\nsweep:\n  method: random\n  trials: 400\n  seed: 7\n"
                       "  parameters:\n"
                       "    train.lr: {min: 1.0e-4, max: 1.0e-2, distribution: log_uniform}\n"
                       "    model.layers: {min: 2, max: 5}\n"
                       "    avit.retention: {min: 0.5, max: 0.9, distribution: uniform}\n"
                       "    attn.out_proj: {values: [dense, hadamard]}\n";
    sweep_spec *s = load_ok(text);
    cr_assert_eq(s->n_trials, 400);
    cr_assert_eq(s->params[1].dist, SWEEP_DIST_INT_UNIFORM, "integer keys default to int_uniform");
    collected *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    char err[256];
    cr_assert_eq(sweep_expand(s, collect_fn, a, err, sizeof err), 0);
    cr_assert_eq(sweep_expand(s, collect_fn, b, err, sizeof err), 0);
    cr_assert_eq(a->n, 400);
    for (int i = 0; i < 64; i++) {
        cr_assert_str_eq(a->params[i], b->params[i]);
        cr_assert_str_eq(a->hash[i], b->hash[i]);
    }
    int seen_layers[8] = {0}, hadamard = 0, low_lr = 0;
    for (int i = 0; i < 64; i++) {
        bf_config *c = &a->cfg[i];
        cr_assert(c->train.lr >= 1e-4f * 0.9999f && c->train.lr <= 1e-2f * 1.0001f, "%g",
                  c->train.lr);
        cr_assert(c->model.layers >= 2 && c->model.layers <= 5);
        seen_layers[c->model.layers]++;
        cr_assert(c->avit.retention >= 0.5f && c->avit.retention <= 0.9f);
        hadamard += strcmp(c->attn.out_proj, "hadamard") == 0;
        low_lr += c->train.lr < 1e-3f; /* log-uniform: about half below the geometric middle */
    }
    for (int l = 2; l <= 5; l++) cr_assert(seen_layers[l] > 0, "layers %d never drawn", l);
    cr_assert(hadamard > 10 && hadamard < 54, "%d", hadamard);
    cr_assert(low_lr > 16 && low_lr < 48, "%d", low_lr);
    sweep_spec_destroy(&s);
    /* another seed draws other values */
    char other[1024];
    snprintf(other, sizeof other, "%s", text);
    char *p = strstr(other, "seed: 7");
    p[6] = '8';
    s = load_ok(other);
    collected *c = expand(s);
    int same = 0;
    for (int i = 0; i < 64; i++) same += strcmp(c->params[i], a->params[i]) == 0;
    cr_assert(same < 4, "%d of 64 trials equal across seeds", same);
    free(a);
    free(b);
    free(c);
    sweep_spec_destroy(&s);
}

Test(sweep, standalone_config_is_one_trial) {
    sweep_spec *s = load_ok("pipeline: lm\nmodel: {layers: 3}\ntrain.steps: 20\n");
    cr_assert_eq(s->is_sweep, 0);
    cr_assert_eq(s->n_trials, 1);
    cr_assert_str_eq(s->name, "s", "named after the file");
    cr_assert_str_eq(s->metric_name, "val/loss", "lm defaults to val/loss");
    cr_assert_eq(s->metric_maximize, 0);
    collected *c = expand(s);
    cr_assert_eq(c->n, 1);
    cr_assert_eq(c->cfg[0].model.layers, 3);
    cr_assert_eq(c->cfg[0].train.steps, 20);
    cr_assert_str_eq(c->params[0], "");
    free(c);
    sweep_spec_destroy(&s);
}

Test(sweep, anchors_and_aliases_work) {
    sweep_spec *s = load_ok("base:\n  model: &m {layers: 2, d_model: 64, heads: 4}\n"
                            "sweep:\n  parameters:\n"
                            "    train.seed: {values: &seeds [1, 2, 3]}\n"
                            "    train.warmup: {values: *seeds}\n");
    cr_assert_eq(s->n_trials, 9);
    cr_assert_eq(s->base.model.heads, 4);
    sweep_spec_destroy(&s);
}

Test(sweep, refuses_alias_bomb) {
    char bomb[4096];
    size_t w = 0;
    w += (size_t)snprintf(bomb + w, sizeof bomb - w,
                          "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for (int i = 1; i < 10; i++) {
        w += (size_t)snprintf(bomb + w, sizeof bomb - w, "x%d: &a%d [", i, i);
        for (int j = 0; j < 10; j++)
            w += (size_t)snprintf(bomb + w, sizeof bomb - w, "*a%d%s", i - 1, j < 9 ? ", " : "]\n");
    }
    w += (size_t)snprintf(bomb + w, sizeof bomb - w,
                          "sweep:\n  parameters:\n    train.seed: {values: *a9}\n");
    ASSERT_SWEEP_ERR(bomb, "1:30", "document has more than 100000 nodes");
    ASSERT_SWEEP_ERR("base: &b {model: {layers: 2}, x: *b}\n", "1:19", "recursive alias");
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 100,000 levels of flow nesting: refused at level 65 while parsing. Built
 * whole, libyaml took 22 s for this (its scanner is quadratic in flow depth),
 * during which bfd answered nobody; refused early it takes about 1 ms. The
 * bound is 50 times that, and 200 times below the quadratic cost. */
Test(sweep, deep_nesting_is_refused_while_parsing) {
    const char *opens[] = {"[", "{b: "};
    for (int k = 0; k < 2; k++) {
        size_t n = k ? 50000 : 100000, ol = strlen(opens[k]);
        char *t = malloc(3 + n * (ol + 1) + 2);
        cr_assert_not_null(t);
        size_t w = 0;
        memcpy(t, "a: ", 3), w = 3;
        for (size_t i = 0; i < n; i++) memcpy(t + w, opens[k], ol), w += ol;
        for (size_t i = 0; i < n; i++) t[w++] = k ? '}' : ']';
        t[w++] = '\n';
        sweep_spec *s = NULL;
        sweep_errors e = {0};
        double t0 = mono_s();
        cr_assert_eq(sweep_load_string(t, w, "deep.yaml", &s, &e), -1);
        double dt = mono_s() - t0;
        cr_assert_eq(e.n, 1);
        cr_assert(strstr(e.msgs[0], "deep.yaml:1:") &&
                      strstr(e.msgs[0], "nesting deeper than 64 levels; refused"),
                  "%s", e.msgs[0]);
        cr_assert(dt < 0.1, "refusing %zu levels took %.3f s", n, dt);
        sweep_errors_free(&e);
        free(t);
    }
    /* 64 levels are fine as YAML (then refused as a config value) */
    char ok[256] = "name: x\nbase: {train.seed: 1}\nsweep:\n  parameters: {train.seed: {values: ";
    size_t w = strlen(ok);
    for (int i = 0; i < 2; i++) ok[w++] = '[';
    ok[w++] = '1';
    for (int i = 0; i < 2; i++) ok[w++] = ']';
    strcpy(ok + w, "}}\n");
    sweep_spec *s = NULL;
    sweep_errors e = {0};
    cr_assert_eq(sweep_load_string(ok, strlen(ok), "ok.yaml", &s, &e), -1);
    cr_assert(e.n >= 1 && !strstr(e.msgs[0], "nesting"), "%s", e.msgs[0]);
    sweep_errors_free(&e);
}

/* sweep_load_string reads len bytes, not to a NUL (fuzz_sweep found it
 * reading past an all-blank buffer; the ASan build catches a regression) */
Test(sweep, text_without_a_nul_is_read_to_len) {
    char *t = malloc(3);
    cr_assert_not_null(t);
    memcpy(t, " \n ", 3);
    sweep_spec *s = NULL;
    sweep_errors e = {0};
    cr_assert_eq(sweep_load_string(t, 3, "blank.yaml", &s, &e), -1);
    cr_assert(e.n == 1 && strstr(e.msgs[0], "empty sweep file"), "%s", e.n ? e.msgs[0] : "");
    sweep_errors_free(&e);
    t = realloc(t, 8);
    memcpy(t, "name: x\n", 8);
    cr_assert_eq(sweep_load_string(t, 8, "x.yaml", &s, &e), 0, "%s", e.n ? e.msgs[0] : "");
    sweep_spec_destroy(&s);
    sweep_errors_free(&e);
    free(t);
}

Test(sweep, second_document_is_refused) {
    ASSERT_SWEEP_ERR("name: a\nbase: {train.steps: 5}\n---\nname: b\n", "3:1",
                     "a second YAML document starts here");
    ASSERT_SWEEP_ERR("--- {name: a}\n--- {name: b}\n", "2:1", "a second YAML document");
}

/* a plain list of 100,001 values is no alias bomb: the message names the limit */
Test(sweep, too_many_values_names_the_limit) {
    size_t n = 100001;
    char *t = malloc(64 + 3 * n);
    cr_assert_not_null(t);
    size_t w = (size_t)sprintf(t, "sweep:\n  parameters:\n    train.seed: {values: [");
    for (size_t i = 0; i < n; i++) w += (size_t)sprintf(t + w, "%s1", i ? "," : "");
    w += (size_t)sprintf(t + w, "]}\n");
    sweep_spec *s = NULL;
    sweep_errors e = {0};
    cr_assert_eq(sweep_load_string(t, w, "big.yaml", &s, &e), -1);
    cr_assert(e.n >= 1);
    cr_assert(strstr(e.msgs[0], "more than 100000 nodes") &&
                  strstr(e.msgs[0], "is limited to 100000") && !strstr(e.msgs[0], "bomb"),
              "%s", e.msgs[0]);
    sweep_errors_free(&e);
    free(t);
}

/* bfctl validate refuses what the worker refuses, and what would train the
 * same run under every value */
Test(sweep, validate_agrees_with_the_worker) {
    ASSERT_SWEEP_ERR("model: {layers: 1}\nmodel.layers: 2\n", "2:1",
                     "duplicate key 'model.layers' (first set at line 1, column 9)");
    ASSERT_SWEEP_ERR("pipeline: lm\ndata.set: wordnet\n", "2:1",
                     "data.set 'wordnet' is not a text corpus");
    ASSERT_SWEEP_ERR("pipeline: budgetformer\ndata: {path: a.txt}\n", "2:8",
                     "data.path is not read by pipeline budgetformer");
    ASSERT_SWEEP_ERR("model.vocab: 8\n", "1:14", "valid range is [16, 1000000]");
    ASSERT_SWEEP_ERR("pipeline: lm\nmetric: {name: val/acc, goal: max}\n", "2:16",
                     "metric.name 'val/acc' is never written by pipeline lm; it writes: ");
    ASSERT_SWEEP_ERR("pipeline: budgetformer\nbudget.enabled: false\n"
                     "metric: {name: val/corr_s_len, goal: max}\n",
                     "3:16", "with budget.enabled false");
    ASSERT_SWEEP_ERR("pipeline: lm\nsweep:\n  parameters:\n"
                     "    budget.range: {values: [[0.1, 0.3], [0.3, 0.6]]}\n",
                     "4:5",
                     "budget.range is swept but changes nothing: pipeline lm never reads it");
    ASSERT_SWEEP_ERR("budget.enabled: false\nsweep:\n  parameters:\n"
                     "    budget.range: {values: [[0.1, 0.3], [0.3, 0.6]]}\n",
                     "4:5", "changes nothing: budget.enabled is false");
    /* swept together with budget.enabled it matters in some trials: fine */
    sweep_spec *s = NULL;
    sweep_errors e;
    cr_assert_eq(load("sweep:\n  parameters:\n    budget.enabled: {values: [true, false]}\n"
                      "    budget.range: {values: [[0.1, 0.3], [0.3, 0.6]]}\n",
                      &s, &e),
                 0, "%s", e.n ? e.msgs[0] : "");
    sweep_spec_destroy(&s);
    sweep_errors_free(&e);
}

Test(sweep, error_unknown_keys_suggest) {
    ASSERT_SWEEP_ERR("sweep:\n  parameters:\n    budget.rnage: {values: [[0.1, 0.3]]}\n", "3:5",
                     "unknown key 'budget.rnage'; did you mean 'budget.range'?");
    ASSERT_SWEEP_ERR("base:\n  model: {layrs: 2}\n", "2:11",
                     "unknown key 'model.layrs'; did you mean 'model.layers'?");
    ASSERT_SWEEP_ERR("sweeps: {}\n", "1:1", "unknown key 'sweeps'; did you mean 'sweep'?");
    ASSERT_SWEEP_ERR("modle: {layers: 2}\n", "1:1", "unknown key 'modle'; did you mean 'model'?");
    ASSERT_SWEEP_ERR("sweep:\n  method: grid\n  paramters: {}\n", "3:3",
                     "unknown key 'paramters' in sweep; did you mean 'parameters'?");
    ASSERT_SWEEP_ERR("sweep:\n  parameters:\n    train.lr: {vals: [1]}\n", "3:16",
                     "unknown key 'vals' in a sweep parameter; did you mean 'values'?");
    ASSERT_SWEEP_ERR("resources: {rank: 2}\n", "1:13",
                     "unknown key 'rank' in resources; did you mean 'ranks'?");
    ASSERT_SWEEP_ERR("sweep:\n  parameters:\n    model: {values: [1]}\n", "3:5",
                     "'model' is a section; sweep a key inside it");
}

Test(sweep, error_wrong_types_and_ranges) {
    ASSERT_SWEEP_ERR("sweep:\n  parameters:\n    model.layers: {values: [2, two]}\n", "3:32",
                     "model.layers: expected an integer, got 'two'");
    ASSERT_SWEEP_ERR("sweep:\n  parameters:\n    model.heads: {values: [4, 1000]}\n", "3:31",
                     "model.heads: 1000 is out of range; valid range is [1, 256]");
    ASSERT_SWEEP_ERR("sweep:\n  parameters:\n    attn.out_proj: {values: [dense, sparse]}\n",
                     "3:37",
                     "attn.out_proj: 'sparse' is not valid; expected one of: dense, hadamard");
    ASSERT_SWEEP_ERR("sweep:\n  parameters:\n    budget.range: {values: [0.3]}\n", "3:29",
                     "expected a pair of numbers [a, b], got '0.3'");
    ASSERT_SWEEP_ERR("sweep:\n  parameters:\n    train.lr: [1, 2]\n", "3:15",
                     "train.lr: expected {values: [...]} or {min: A, max: B");
    ASSERT_SWEEP_ERR("sweep:\n  method: random\n  trials: 3\n  parameters:\n"
                     "    train.lr: {min: 0, max: 1, distribution: log_uniform}\n",
                     "5:21", "train.lr: 0 is out of range; valid range is [1e-09, 10]");
    ASSERT_SWEEP_ERR("sweep:\n  method: random\n  trials: 3\n  parameters:\n"
                     "    train.weight_decay: {min: 0, max: 1, distribution: log_uniform}\n",
                     "5:31", "log_uniform needs min > 0");
    ASSERT_SWEEP_ERR("sweep:\n  method: random\n  trials: 3\n  parameters:\n"
                     "    model.layers: {min: 1, max: 4, distribution: uniform}\n",
                     "5:50", "model.layers is an integer key; use distribution: int_uniform");
    ASSERT_SWEEP_ERR("sweep:\n  method: random\n  trials: 3\n  parameters:\n"
                     "    train.lr: {min: 0.1, max: 0.01}\n",
                     "5:21", "min (0.1) must be below max (0.01)");
    ASSERT_SWEEP_ERR("sweep:\n  method: random\n  trials: 3\n  parameters:\n"
                     "    attn.out_proj: {min: 1, max: 2}\n",
                     "5:20", "min/max ranges apply only to numeric keys");
    ASSERT_SWEEP_ERR(
        "sweep:\n  method: random\n  trials: 3\n  parameters:\n"
        "    train.lr: {min: 0.1, max: 0.2, distribution: normal}\n",
        "5:50",
        "distribution: 'normal' is not valid; expected one of: uniform, log_uniform, int_uniform");
    ASSERT_SWEEP_ERR("sweep:\n  method: bayes\n  parameters: {train.seed: {values: [1]}}\n", "2:11",
                     "sweep.method: 'bayes' is not valid; expected one of: grid, random");
    ASSERT_SWEEP_ERR("retries: 1000\n", "1:10",
                     "retries: 1000 is out of range; valid range is [0, 100]");
    ASSERT_SWEEP_ERR("priority: high\n", "1:11", "priority: expected an integer, got 'high'");
    ASSERT_SWEEP_ERR("metric: {name: val/acc, goal: up}\n", "1:31",
                     "metric.goal: 'up' is not valid; expected one of: min, max");
    ASSERT_SWEEP_ERR("metric: {name: val/acc}\n", "1:9", "metric: 'goal' is required");
    ASSERT_SWEEP_ERR("resources: {ranks: 2, nodes: 3}\n", "1:30",
                     "resources.nodes: 3 nodes for 2 ranks: each node runs at least one rank");
    ASSERT_SWEEP_ERR("resources: {nodes: 0}\n", "1:20", "resources.nodes: 0 is out of range");
    ASSERT_SWEEP_ERR("resources: {time_limit: soon}\n", "1:25",
                     "resources.time_limit: expected a positive duration");
    ASSERT_SWEEP_ERR("early_stop: {method: threshold}\n", "1:13",
                     "method threshold needs 'threshold: NUMBER'");
    ASSERT_SWEEP_ERR("name: [a]\n", "1:7", "name: expected a name, got a list");
}

Test(sweep, error_method_mismatches) {
    ASSERT_SWEEP_ERR("sweep:\n  parameters:\n    train.lr: {min: 0.001, max: 0.1}\n", "3:15",
                     "min/max ranges need method: random or tpe; a grid takes values: [...]");
    ASSERT_SWEEP_ERR(
        "sweep:\n  method: random\n  parameters:\n    train.lr: {min: 0.001, max: 0.1}\n", "2:3",
        "sweep: method random needs 'trials: N'");
    ASSERT_SWEEP_ERR("sweep:\n  trials: 4\n  parameters: {train.seed: {values: [1]}}\n", "2:11",
                     "sweep.trials applies only to method: random");
    ASSERT_SWEEP_ERR(
        "sweep:\n  method: random\n  trials: 100001\n  parameters: {train.seed: {values: [1]}}\n",
        "3:11", "sweep.trials: 100001 is out of range; valid range is [1, 100000]");
}

Test(sweep, error_empty_sweeps) {
    ASSERT_SWEEP_ERR("sweep:\n  parameters: {}\n", "2:15", "sweep.parameters is empty");
    ASSERT_SWEEP_ERR("sweep:\n  method: grid\n", "2:3", "sweep: 'parameters' is required");
    ASSERT_SWEEP_ERR("sweep:\n  parameters:\n    train.seed: {values: []}\n", "3:26",
                     "train.seed: values: the list is empty");
    ASSERT_SWEEP_ERR("", "1:1", "empty sweep file");
    ASSERT_SWEEP_ERR("\n\n  \n", "1:1", "empty sweep file");
    ASSERT_SWEEP_ERR("# nothing but a comment\n", "1:1", "empty sweep file");
}

Test(sweep, error_duplicates) {
    ASSERT_SWEEP_ERR("retries: 1\nretries: 2\n", "2:1",
                     "duplicate key 'retries' (first at line 1, column 1)");
    ASSERT_SWEEP_ERR(
        "sweep:\n  parameters:\n    train.seed: {values: [1]}\n    train.seed: {values: [2]}\n",
        "4:5", "duplicate key 'train.seed' (first at line 3, column 5)");
    ASSERT_SWEEP_ERR("sweep:\n  parameters:\n    train.seed: {values: [1, 2, 1]}\n", "3:33",
                     "train.seed: value 1 is listed twice");
    ASSERT_SWEEP_ERR("base:\n  model: {layers: 2, layers: 3}\n", "2:22", "duplicate key 'layers'");
    ASSERT_SWEEP_ERR("pipeline: lm\nbase: {pipeline: lm}\n", "1:1",
                     "'pipeline' is set both at top level and in base (line 2); set it once");
    ASSERT_SWEEP_ERR("model: {layers: 3}\nbase: {model.layers: 2}\n", "1:1",
                     "'model.layers' is set both at top level and in base");
}

Test(sweep, grid_limit_boundary) {
    char text[4096];
    const char *keys[] = {"train.seed",       "train.warmup",    "train.steps",
                          "train.eval_every", "train.log_every", "train.batch"};
    /* 10^5 trials: accepted; 10^6: refused with the product */
    for (int nk = 5; nk <= 6; nk++) {
        size_t w = (size_t)snprintf(text, sizeof text, "sweep:\n  parameters:\n");
        for (int k = 0; k < nk; k++) {
            w += (size_t)snprintf(text + w, sizeof text - w, "    %s: {values: [", keys[k]);
            for (int v = 1; v <= 10; v++)
                w += (size_t)snprintf(text + w, sizeof text - w, "%d%s", v, v < 10 ? ", " : "]}\n");
        }
        if (nk == 5) {
            sweep_spec *s = load_ok(text);
            cr_assert_eq(s->n_trials, 100000);
            sweep_spec_destroy(&s);
        } else {
            ASSERT_SWEEP_ERR(text, "2:3",
                             "sweep: the grid has 1000000 trials (10 x 10 x 10 x 10 x 10 x 10); at "
                             "most 100000 are allowed");
        }
    }
}

Test(sweep, error_pipelines) {
    ASSERT_SWEEP_ERR("pipeline: s2s\nsweep:\n  parameters:\n    avit.retention: {values: [0.5, "
                     "0.7]}\nmetric: {name: val/acc, goal: max}\n",
                     "5:16",
                     "metric.name 'val/acc' is never written by pipeline s2s; it writes: "
                     "teacher/val/acc");
    ASSERT_SWEEP_ERR(
        "pipeline: resnet\n", "1:11",
        "pipeline: 'resnet' is not valid; expected one of: budgetformer, lm, vit, s2s");
    ASSERT_SWEEP_ERR(
        "sweep:\n  parameters:\n    pipeline: {values: [lm, s2s]}\n", "3:5",
        "metric.name 'val/acc' is never written by pipeline s2s; it writes: teacher/val/acc");
}

Test(sweep, error_cross_key_per_trial) {
    /* valid base, one bad combination among the trials */
    ASSERT_SWEEP_ERR(
        "base: {model: {d_model: 96}}\nsweep:\n  parameters:\n"
        "    model.heads: {values: [4, 7, 12]}\n    attn.out_proj: {values: [dense, hadamard]}\n",
        "4:5",
        "model.d_model (96) must be divisible by model.heads (7) (in 2 of 6 trials; first: trial "
        "2");
    ASSERT_SWEEP_ERR("base: {model: {d_model: 100, heads: 4}}\nsweep:\n  parameters:\n"
                     "    attn.out_proj: {values: [dense, hadamard]}\n",
                     "4:5", "attn.out_proj hadamard needs model.d_model = 2^n or 12*2^n");
    ASSERT_SWEEP_ERR("base:\n  budget: {range: [0.6, 0.3]}\n", "2:12",
                     "budget.range [0.6, 0.3] must be ordered");
}

Test(sweep, error_files) {
    sweep_spec *s = NULL;
    sweep_errors e = {0};
    const char *bin = write_file("bin.yaml", "name: x\0\xff", 9);
    cr_assert_eq(sweep_load_file(bin, &s, &e), -1);
    cr_assert_eq(e.n, 1);
    cr_assert(strstr(e.msgs[0], "bin.yaml:1:1: not a text file (NUL byte at offset 7)"), "%s",
              e.msgs[0]);
    sweep_errors_free(&e);
    char *big = malloc((1u << 20) + 2);
    memset(big, '#', (1u << 20) + 2);
    cr_assert_eq(sweep_load_file(write_file("big.yaml", big, (1u << 20) + 2), &s, &e), -1);
    free(big);
    cr_assert(strstr(e.msgs[0], "limited to 1 MiB"), "%s", e.msgs[0]);
    sweep_errors_free(&e);
    cr_assert_eq(sweep_load_file("/nonexistent/s.yaml", &s, &e), -1);
    cr_assert(strstr(e.msgs[0], "/nonexistent/s.yaml:1:1: cannot open"), "%s", e.msgs[0]);
    sweep_errors_free(&e);
    ASSERT_SWEEP_ERR("sweep:\n  parameters: [\n", "3:1", "YAML syntax error");
    ASSERT_SWEEP_ERR("- a\n- b\n", "1:1", "expected a mapping at top level");
}

Test(sweep, every_error_is_reported) {
    sweep_spec *s = NULL;
    sweep_errors e;
    cr_assert_eq(load("retries: -1\npriority: x\nsweep:\n  parameters:\n"
                      "    model.layrs: {values: [1]}\n    train.lr: {values: [fast]}\n",
                      &s, &e),
                 -1);
    cr_assert_eq(e.total, 4, "got %d errors", e.total);
    cr_assert_eq(e.n, 4);
    sweep_errors_free(&e);
}

Test(sweep, metric_list_objectives) {
    /* the single form and a one-entry list are the same job */
    sweep_spec *s = load_ok("metric: {name: val/loss, goal: min}\n");
    cr_assert_eq(s->n_objectives, 1);
    cr_assert_str_eq(s->objectives[0].name, "val/loss");
    cr_assert_str_eq(s->metric_name, "val/loss");
    sweep_spec_destroy(&s);
    s = load_ok("metric: [{name: val/loss, goal: min}]\n");
    cr_assert_eq(s->n_objectives, 1);
    cr_assert_str_eq(s->metric_name, "val/loss");
    cr_assert_eq(s->metric_maximize, 0);
    sweep_spec_destroy(&s);
    s = load_ok("metric:\n  - {name: val/acc, goal: max}\n  - {name: val/heads_used, goal: min}\n");
    cr_assert_eq(s->n_objectives, 2);
    cr_assert_str_eq(s->objectives[0].name, "val/acc");
    cr_assert_eq(s->objectives[0].maximize, 1);
    cr_assert_str_eq(s->objectives[1].name, "val/heads_used");
    cr_assert_eq(s->objectives[1].maximize, 0);
    cr_assert_str_eq(s->metric_name, "val/acc", "the first objective is the job's metric");
    sweep_spec_destroy(&s);
    /* no metric: the pipeline's own, as one objective */
    s = load_ok("train.steps: 10\n");
    cr_assert_eq(s->n_objectives, 1);
    cr_assert_str_eq(s->objectives[0].name, "val/acc");
    sweep_spec_destroy(&s);
}

Test(sweep, error_metric_lists) {
    ASSERT_SWEEP_ERR("metric: []\n", "1:9", "metric: a list of 0 objectives; give 1 to 8");
    ASSERT_SWEEP_ERR("metric: [{name: val/acc, goal: max}, val/loss]\n", "1:38",
                     "metric[1]: expected a mapping {name: NAME, goal: min|max}, got a scalar");
    ASSERT_SWEEP_ERR("metric: [{name: val/acc, goal: max}, {name: val/loss}]\n", "1:38",
                     "metric[1]: 'goal' is required (min or max)");
    ASSERT_SWEEP_ERR("metric: [{name: val/acc, goal: max}, {name: val/acc, goal: min}]\n", "1:38",
                     "metric[1]: 'val/acc' is already metric[0]");
    ASSERT_SWEEP_ERR("metric: [{name: val/acc, goal: up}]\n", "1:32",
                     "metric[0].goal: 'up' is not valid; expected one of: min, max");
    ASSERT_SWEEP_ERR("metric: [{name: val/acc, goal: max, weight: 1}]\n", "1:37",
                     "unknown key 'weight' in metric[0]");
    /* each objective is checked against what the pipeline writes, at its name */
    ASSERT_SWEEP_ERR("metric: [{name: val/acc, goal: max}, {name: val/ppl, goal: min}]\n", "1:45",
                     "metric[1].name 'val/ppl' is never written by pipeline budgetformer");
    /* MO-ASHA judges every objective: early_stop.metric has no place, and
     * each objective must be written during training */
    ASSERT_SWEEP_ERR("train: {steps: 100, eval_every: 10}\n"
                     "metric: [{name: val/acc, goal: max}, {name: val/heads_used, goal: min}]\n"
                     "early_stop: {method: asha, min_steps: 10, metric: val/loss}\n",
                     "3:51", "early_stop.metric is given with 2 objectives");
    ASSERT_SWEEP_ERR("train: {steps: 100, eval_every: 10}\n"
                     "metric: [{name: val/acc, goal: max}, {name: test/heads_used, goal: min}]\n"
                     "early_stop: {method: asha, min_steps: 10}\n",
                     "2:45", "metric[1].name 'test/heads_used' is written only when training ends");
}

/* collect_fn's order check, from a first index other than 0. */
static int collect_from_fn(void *ud, const sweep_trial *t) {
    collected *c = ud;
    cr_assert_eq(t->index, 10 + c->n, "added trials come in order after the job's last");
    if (c->n < 64) snprintf(c->params[c->n], sizeof c->params[0], "%s", t->params);
    c->n++;
    return 0;
}

/* An edit's values: split at the commas outside brackets and quotes,
 * appended to a grid axis through the schema (a repeat says so, a wrong
 * type is refused), and the trials only they make in cartesian order. */
Test(sweep, values_added_to_a_grid_axis) {
    char v[SWEEP_EDIT_VALUES][SWEEP_VALUE_MAX], err[512];
    cr_assert_eq(sweep_split_values(" [0.1, 0.3] ,'a,b', 3", v, SWEEP_EDIT_VALUES, err, sizeof err),
                 3, "%s", err);
    cr_assert_str_eq(v[0], "[0.1, 0.3]");
    cr_assert_str_eq(v[1], "'a,b'");
    cr_assert_str_eq(v[2], "3");
    cr_assert_eq(sweep_split_values("1,,2", v, SWEEP_EDIT_VALUES, err, sizeof err), -1);
    cr_assert(strstr(err, "empty value"), "%s", err);
    cr_assert_eq(sweep_split_values("1,2,3", v, 2, err, sizeof err), -1);
    sweep_spec *s = load_ok("name: e\npipeline: budgetformer\ndata: {set: wordnet}\n"
                            "sweep:\n  parameters:\n    train.seed: {values: [1, 2]}\n"
                            "    train.lr: {values: [0.001, 0.002]}\n"
                            "metric: {name: val/acc, goal: max}\n");
    cr_assert_eq(sweep_axis(s, "train.nope", err, sizeof err), -1);
    cr_assert(strstr(err, "its axes: train.seed, train.lr"), "%s", err);
    int p = sweep_axis(s, "train.seed", err, sizeof err);
    cr_assert_eq(p, 0);
    cr_assert_eq(sweep_add_value(s, p, "2", err, sizeof err), 1, "a repeat changes nothing");
    cr_assert_eq(sweep_add_value(s, p, "fast", err, sizeof err), -1);
    cr_assert(strstr(err, "train.seed"), "%s", err);
    cr_assert_eq(sweep_add_value(s, p, "5", err, sizeof err), 0, "%s", err);
    cr_assert_eq(sweep_add_value(s, p, "7", err, sizeof err), 0, "%s", err);
    cr_assert_eq(s->n_trials, 8);
    collected *c = calloc(1, sizeof *c);
    cr_assert_eq(sweep_expand_added(s, p, 2, 10, collect_from_fn, c, err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(c->n, 4);
    const char *want[] = {"train.seed: 5\ntrain.lr: 0.001\n", "train.seed: 5\ntrain.lr: 0.002\n",
                          "train.seed: 7\ntrain.lr: 0.001\n", "train.seed: 7\ntrain.lr: 0.002\n"};
    for (int i = 0; i < 4; i++) cr_assert_str_eq(c->params[i], want[i]);
    free(c);
    sweep_spec_destroy(&s);
    s = load_ok("name: r\npipeline: budgetformer\ndata: {set: wordnet}\n"
                "sweep:\n  method: random\n  trials: 3\n  parameters:\n"
                "    train.seed: {values: [1, 2]}\nmetric: {name: val/acc, goal: max}\n");
    cr_assert_eq(sweep_add_value(s, 0, "3", err, sizeof err), -1);
    cr_assert(strstr(err, "grid"), "%s", err);
    sweep_spec_destroy(&s);
}
