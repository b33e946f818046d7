/* test_cfg_rules — the rules of the config language across sources and
 * pipelines (docs/sweeps.md): the data-source keys override as a group at
 * every pair of levels, keys a pipeline never reads are refused (for every
 * pipeline and every key), sweeps over such keys or over bfd's s2s keys are
 * refused, early stopping needs a metric written during training, numbers
 * that are not numbers say why, and every file in examples/ validates. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cfg.h"
#include "common/pipeline_decl.h"
#include "jobs/sweep.h"

static const char *const pipelines[] = {"budgetformer", "lm", "vit", "s2s"};
#define N_PIPELINES 4

/* ------------------------------------------------------ levels and groups */

/* The data sources: each a set of data-source keys with values. */
typedef struct source {
    const char *name;
    const char *keys[4], *vals[4];
} source;
static const source sources[] = {
    {"set", {"data.set"}, {"wordnet"}},
    {"tsv", {"data.train", "data.val", "data.test"}, {"a.tsv", "b.tsv", "c.tsv"}},
    {"path", {"data.path"}, {"corpus.txt"}},
    {"images",
     {"data.train_images", "data.train_labels", "data.test_images", "data.test_labels"},
     {"ti.gz", "tl.gz", "si.gz", "sl.gz"}},
};
#define N_SOURCES 4

/* Sets key=val on c at `level`, through the path that level uses: the
 * file/base setters, a sweep parameter (cfg_copy_key) or --set. */
static void set_at(bf_config *c, cfg_level level, const char *key, const char *val) {
    char err[512];
    if (level == CFG_LEVEL_SET) {
        char a[256];
        snprintf(a, sizeof a, "%s=%s", key, val);
        cr_assert_eq(cfg_set(c, a, err, sizeof err), 0, "%s", err);
    } else if (level == CFG_LEVEL_PARAM) {
        bf_config tmp = *c;
        cr_assert_eq(cfg_set_value(&tmp, key, val, "param", err, sizeof err), 0, "%s", err);
        cfg_copy_key(c, &tmp, cfg_field_find(key), CFG_LEVEL_PARAM);
    } else {
        cfg_set_level(c, level);
        cr_assert_eq(cfg_set_value(c, key, val, "file", err, sizeof err), 0, "%s", err);
    }
}

static const char *str_of(const bf_config *c, const char *key) {
    const cfg_field *f = cfg_field_find(key);
    return (const char *)c + f->offset;
}

Test(cfg_rules, every_data_key_is_in_the_group_and_defaults_empty) {
    size_t n = 0;
    for (size_t i = 0; i < cfg_field_count(); i++) {
        const cfg_field *f = cfg_field_at(i);
        if (!cfg_key_group(f->key)) continue;
        n++;
        cr_assert_eq(f->type, CFG_T_STR, "%s", f->key);
        cr_assert_str_eq(f->def, "\"\"", "%s: the group is reset by zeroing", f->key);
    }
    cr_assert_eq(n, 9);
    cr_assert(cfg_field_count() <= CFG_MAX_KEYS);
    cr_assert(!cfg_key_group("data.dir") && !cfg_key_group("data.val_fraction"));
}

/* Every pair of levels lo < hi, every pair of sources: what hi sets
 * replaces the whole group lo left, whatever keys either names. */
Test(cfg_rules, a_later_level_replaces_the_whole_data_group) {
    const cfg_level levels[] = {CFG_LEVEL_FILE, CFG_LEVEL_BASE, CFG_LEVEL_PARAM, CFG_LEVEL_SET};
    int pairs = 0;
    for (int lo = 0; lo < 4; lo++)
        for (int hi = lo + 1; hi < 4; hi++)
            for (int a = 0; a < N_SOURCES; a++)
                for (int b = 0; b < N_SOURCES; b++) {
                    bf_config c;
                    cfg_defaults(&c);
                    for (int k = 0; k < 4 && sources[a].keys[k]; k++)
                        set_at(&c, levels[lo], sources[a].keys[k], sources[a].vals[k]);
                    /* only the first key of b: one key replaces the group */
                    set_at(&c, levels[hi], sources[b].keys[0], sources[b].vals[0]);
                    for (int s = 0; s < N_SOURCES; s++)
                        for (int k = 0; k < 4 && sources[s].keys[k]; k++) {
                            const char *want = s == b && k == 0 ? sources[b].vals[0] : "";
                            cr_assert_str_eq(str_of(&c, sources[s].keys[k]), want,
                                             "levels %d < %d, %s then %s: %s", lo, hi,
                                             sources[a].name, sources[b].name, sources[s].keys[k]);
                        }
                    pairs++;
                }
    cr_assert_eq(pairs, 6 * N_SOURCES * N_SOURCES);
}

/* On one level, keys of two sources stay together, and validation refuses
 * them naming both. */
Test(cfg_rules, two_sources_on_one_level_are_refused_naming_both) {
    struct {
        const char *pipeline, *k1, *v1, *k2, *v2;
    } cases[] = {
        {"budgetformer", "data.set", "wordnet", "data.train", "a.tsv"},
        {"lm", "data.set", "kjv", "data.path", "a.txt"},
        {"vit", "data.set", "fashion_mnist", "data.train_images", "a.gz"},
        {"s2s", "data.set", "fashion_mnist", "data.train_images", "a.gz"},
    };
    const cfg_level levels[] = {CFG_LEVEL_FILE, CFG_LEVEL_BASE, CFG_LEVEL_PARAM, CFG_LEVEL_SET};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int l = 0; l < 4; l++) {
            bf_config c;
            char err[4096];
            cfg_defaults(&c);
            snprintf(c.pipeline, sizeof c.pipeline, "%s", cases[i].pipeline);
            set_at(&c, levels[l], cases[i].k1, cases[i].v1);
            set_at(&c, levels[l], cases[i].k2, cases[i].v2);
            if (strcmp(cases[i].k2, "data.train_images") == 0)
                set_at(&c, levels[l], "data.train_labels", "l.gz");
            cr_assert_str_eq(str_of(&c, cases[i].k1), cases[i].v1);
            cr_assert_eq(cfg_validate(&c, err, sizeof err), -1, "%s level %d accepted",
                         cases[i].pipeline, l);
            char both[128];
            snprintf(both, sizeof both, "%s and %s are both given", cases[i].k2, cases[i].k1);
            char both2[128];
            snprintf(both2, sizeof both2, "%s and %s are both given", cases[i].k1, cases[i].k2);
            cr_assert(strstr(err, both) || strstr(err, both2), "%s", err);
        }
}

/* A level that names two sources is refused even when a later level
 * replaces its group: the conflict is that level's (the file's), and a
 * --set hides it without mending it. Every pair of levels lo < hi, every
 * pair of distinct sources on lo, every source on hi; and lo with one
 * source (any of its keys) is no such error. */
Test(cfg_rules, two_sources_on_a_replaced_level_are_still_refused) {
    static const char *const level_names[] = {"the config file", "the sweep's base",
                                              "a sweep parameter"};
    const cfg_level levels[] = {CFG_LEVEL_FILE, CFG_LEVEL_BASE, CFG_LEVEL_PARAM, CFG_LEVEL_SET};
    int refused = 0, accepted = 0;
    for (int lo = 0; lo < 3; lo++)
        for (int hi = lo + 1; hi < 4; hi++)
            for (int a1 = 0; a1 < N_SOURCES; a1++)
                for (int a2 = a1; a2 < N_SOURCES; a2++)
                    for (int b = 0; b < N_SOURCES; b++) {
                        bf_config c;
                        char err[4096];
                        cfg_defaults(&c);
                        set_at(&c, levels[lo], sources[a1].keys[0], sources[a1].vals[0]);
                        /* a2 == a1: another key of the same source, where it has one */
                        int k2 = a2 == a1 ? 1 : 0;
                        if (sources[a2].keys[k2])
                            set_at(&c, levels[lo], sources[a2].keys[k2], sources[a2].vals[k2]);
                        set_at(&c, levels[hi], sources[b].keys[0], sources[b].vals[0]);
                        int rc = cfg_validate(&c, err, sizeof err);
                        const char *hit = strstr(err, "(two data sources on one level)");
                        if (a1 == a2) {
                            cr_assert(!hit, "one source on level %d refused: %s", lo, err);
                            accepted++;
                            continue;
                        }
                        char want[256];
                        snprintf(want, sizeof want, "%s and %s are both given in %s",
                                 sources[a2].keys[0], sources[a1].keys[0], level_names[lo]);
                        cr_assert(rc == -1 && hit && strstr(err, want),
                                  "levels %d < %d, %s + %s then %s: want '%s' in: %s", lo, hi,
                                  sources[a1].name, sources[a2].name, sources[b].name, want, err);
                        refused++;
                    }
    cr_assert_eq(refused, 6 * 6 * N_SOURCES);
    cr_assert_eq(accepted, 6 * N_SOURCES * N_SOURCES);
    /* the README's case, with the file itself in conflict */
    bf_config c;
    char err[4096];
    cfg_defaults(&c);
    const char *two = "pipeline: budgetformer\ndata: {set: wordnet, train: x.tsv}\n";
    cr_assert_eq(cfg_load_text(&c, two, strlen(two), "f.yaml", err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg_set(&c, "data.train=a.tsv", err, sizeof err), 0);
    cr_assert_eq(cfg_set(&c, "data.val=b.tsv", err, sizeof err), 0);
    cr_assert_eq(cfg_validate(&c, err, sizeof err), -1);
    cr_assert(strstr(err, "data.train and data.set are both given in the config file"), "%s", err);
}

/* The README's commands: a file's data.set replaced by --set. */
Test(cfg_rules, the_examples_take_own_data_from_the_command_line) {
    char err[4096];
    bf_config c;
    cfg_defaults(&c);
    cr_assert_eq(cfg_load_file(&c, BF_SOURCE_DIR "/examples/budgetformer.yaml", err, sizeof err), 0,
                 "%s", err);
    cr_assert_str_eq(c.data.set, "wordnet");
    cr_assert_eq(cfg_set(&c, "data.train=a.tsv", err, sizeof err), 0);
    cr_assert_eq(cfg_set(&c, "data.val=b.tsv", err, sizeof err), 0);
    cr_assert_eq(cfg_set(&c, "data.test=c.tsv", err, sizeof err), 0);
    cr_assert_eq(cfg_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(c.data.set, "");
    cr_assert_str_eq(c.data.test, "c.tsv");
    cfg_defaults(&c);
    cr_assert_eq(cfg_load_file(&c, BF_SOURCE_DIR "/examples/lm.yaml", err, sizeof err), 0, "%s",
                 err);
    cr_assert_eq(cfg_set(&c, "data.path=corpus.txt", err, sizeof err), 0);
    cr_assert_eq(cfg_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(c.data.set, "");
    /* and back: --set data.set=kjv over a file's data.path */
    cr_assert_eq(cfg_load_text(&c, "data.path: x.txt\n", 17, "f.yaml", err, sizeof err), 0);
    cr_assert_eq(cfg_set(&c, "data.set=kjv", err, sizeof err), 0);
    cr_assert_str_eq(c.data.path, "");
    cr_assert_eq(cfg_validate(&c, err, sizeof err), 0, "%s", err);
    /* one file with two sources is refused */
    cfg_defaults(&c);
    const char *two = "pipeline: vit\ndata: {set: fashion_mnist, train_images: a.gz, "
                      "train_labels: b.gz}\n";
    cr_assert_eq(cfg_load_text(&c, two, strlen(two), "f.yaml", err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg_validate(&c, err, sizeof err), -1);
    cr_assert(strstr(err, "data.set and data.train_images are both given"), "%s", err);
}

static int load_sweep(const char *text, sweep_spec **s, sweep_errors *e) {
    memset(e, 0, sizeof *e);
    return sweep_load_string(text, strlen(text), "s.yaml", s, e);
}

static int count_fn(void *ud, const sweep_trial *t) {
    char err[1024];
    cr_assert_eq(cfg_validate(t->config, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(t->config->data.set, "", "a swept data.train replaces base's data.set");
    (*(int *)ud)++;
    return 0;
}

static void assert_sweep_err(const char *text, const char *needle) {
    sweep_spec *s = NULL;
    sweep_errors e;
    cr_assert_eq(load_sweep(text, &s, &e), -1, "accepted:\n%s", text);
    int hit = 0;
    for (int i = 0; i < e.n; i++) hit |= strstr(e.msgs[i], needle) != NULL;
    cr_assert(hit, "no '%s' among %d errors, first: %s", needle, e.n, e.n ? e.msgs[0] : "");
    sweep_errors_free(&e);
}

static void assert_sweep_ok(const char *text) {
    sweep_spec *s = NULL;
    sweep_errors e;
    cr_assert_eq(load_sweep(text, &s, &e), 0, "%s\nrefused: %s", text, e.n ? e.msgs[0] : "");
    sweep_spec_destroy(&s);
}

/* base < parameter in a sweep; base and top-level keys are one level */
Test(cfg_rules, a_swept_data_source_replaces_the_base_one) {
    const char *text = "pipeline: budgetformer\ndata: {set: wordnet}\nsweep:\n  parameters:\n"
                       "    data.train: {values: [a.tsv, b.tsv]}\n";
    sweep_spec *s = NULL;
    sweep_errors e;
    cr_assert_eq(load_sweep(text, &s, &e), 0, "%s", e.n ? e.msgs[0] : "");
    int n = 0;
    char err[256];
    cr_assert_eq(sweep_expand(s, count_fn, &n, err, sizeof err), 0);
    cr_assert_eq(n, 2);
    sweep_spec_destroy(&s);
    assert_sweep_err("pipeline: budgetformer\ndata: {set: wordnet}\nbase: {data: {train: a.tsv}}\n",
                     "data.train and data.set are both given");
}

/* ------------------------------------------------ keys a pipeline reads */

/* A valid value of key f other than its default, as YAML text. */
static int other_value(const cfg_field *f, char *out, size_t n) {
    bf_config d, t;
    char err[512], a[1100], b[1100];
    cfg_defaults(&d);
    cfg_format_value(&d, f->key, a, sizeof a);
    char cand[8][128];
    int nc = 0;
    switch (f->type) {
    case CFG_T_INT:
    case CFG_T_FLOAT:
        snprintf(cand[nc++], 128, "%.17g", f->min);
        snprintf(cand[nc++], 128, "%.17g", f->max);
        break;
    case CFG_T_U64:
        snprintf(cand[nc++], 128, "7");
        break;
    case CFG_T_BOOL:
        snprintf(cand[nc++], 128, "true");
        snprintf(cand[nc++], 128, "false");
        break;
    case CFG_T_ENUM: {
        const char *p = f->choices;
        while (*p && nc < 8) {
            size_t l = strcspn(p, "|");
            snprintf(cand[nc++], 128, "%.*s", (int)l, p);
            p += l + (p[l] == '|');
        }
        break;
    }
    case CFG_T_STR:
        snprintf(cand[nc++], 128, "x");
        break;
    case CFG_T_PAIR:
        snprintf(cand[nc++], 128, "[%g, %g]", f->min, f->max);
        break;
    case CFG_T_SCHED:
        snprintf(cand[nc++], 128, "{schedule: constant, start: %g, end: %g}", f->max, f->max);
        break;
    case CFG_T_LAYERS:
        snprintf(cand[nc++], 128, "[0]");
        break;
    }
    for (int i = 0; i < nc; i++) {
        t = d;
        if (cfg_set_value(&t, f->key, cand[i], "t", err, sizeof err) < 0) continue;
        cfg_format_value(&t, f->key, b, sizeof b);
        if (strcmp(a, b) != 0) {
            snprintf(out, n, "%.120s", cand[i]);
            return 0;
        }
    }
    return -1;
}

/* Every pipeline, every key: set to another value, it is refused as "not
 * read" exactly when the pipeline's table does not list it; spelt out at
 * its default it is accepted. */
Test(cfg_rules, keys_a_pipeline_never_reads_are_refused) {
    int refused[N_PIPELINES] = {0};
    for (int p = 0; p < N_PIPELINES; p++)
        for (size_t i = 0; i < cfg_field_count(); i++) {
            const cfg_field *f = cfg_field_at(i);
            if (strcmp(f->key, "pipeline") == 0) continue;
            char v[128], err[8192], needle[160];
            cr_assert_eq(other_value(f, v, sizeof v), 0, "%s has no other value", f->key);
            bf_config c;
            cfg_defaults(&c);
            snprintf(c.pipeline, sizeof c.pipeline, "%s", pipelines[p]);
            cr_assert_eq(cfg_set_value(&c, f->key, v, "t", err, sizeof err), 0, "%s", err);
            int rc = cfg_validate(&c, err, sizeof err);
            snprintf(needle, sizeof needle, "%s is not read by pipeline %s", f->key, pipelines[p]);
            int said = rc < 0 && strstr(err, needle) != NULL;
            int reads = pipeline_reads_key(pipelines[p], f->key);
            cr_assert_eq(said, !reads, "%s=%s on %s: %s", f->key, v, pipelines[p],
                         rc < 0 ? err : "accepted");
            refused[p] += !reads;
            /* the default spelt out */
            cfg_defaults(&c);
            snprintf(c.pipeline, sizeof c.pipeline, "%s", pipelines[p]);
            cr_assert_eq(cfg_set_value(&c, f->key, f->def, "t", err, sizeof err), 0);
            rc = cfg_validate(&c, err, sizeof err);
            cr_assert(rc == 0 || !strstr(err, "is not read"), "%s default on %s: %s", f->key,
                      pipelines[p], err);
        }
    for (int p = 0; p < N_PIPELINES; p++) cr_assert(refused[p] > 0, "%s", pipelines[p]);
    /* the examples */
    cr_assert(!pipeline_reads_key("budgetformer", "data.train_images"));
    cr_assert(!pipeline_reads_key("budgetformer", "avit.retention"));
    cr_assert(!pipeline_reads_key("budgetformer", "model.patch"));
    cr_assert(!pipeline_reads_key("vit", "distill.mixer"));
    cr_assert(!pipeline_reads_key("vit", "data.train"));
    cr_assert(pipeline_reads_key("s2s", "distill.mixer"));
}

/* A resolved config (every key, as cfg_dump writes it) of each pipeline
 * loads and validates: a dump spells out every default. */
Test(cfg_rules, a_dump_of_every_pipeline_validates) {
    for (int p = 0; p < N_PIPELINES; p++) {
        bf_config c, d;
        char err[4096], dump[16384];
        cfg_defaults(&c);
        snprintf(c.pipeline, sizeof c.pipeline, "%s", pipelines[p]);
        size_t n = cfg_dump(&c, dump, sizeof dump);
        cfg_defaults(&d);
        cr_assert_eq(cfg_load_text(&d, dump, n, "dump", err, sizeof err), 0, "%s", err);
        cr_assert_eq(cfg_validate(&d, err, sizeof err), 0, "%s: %s", pipelines[p], err);
    }
}

/* ------------------------------------------------------------- sweeps */

static const char *base_of(const char *pipeline) {
    if (strcmp(pipeline, "s2s") == 0) return "pipeline: s2s\ntrain: {eval_every: 100}\n";
    if (strcmp(pipeline, "lm") == 0) return "pipeline: lm\n";
    if (strcmp(pipeline, "vit") == 0) return "pipeline: vit\n";
    return "pipeline: budgetformer\n";
}

/* Every pipeline, every key it never reads, grid and tpe: refused. */
Test(cfg_rules, a_sweep_over_a_key_the_pipeline_never_reads_is_refused) {
    for (int p = 0; p < N_PIPELINES; p++)
        for (size_t i = 0; i < cfg_field_count(); i++) {
            const cfg_field *f = cfg_field_at(i);
            /* s2s.* are refused as bfd's own (bfd_owns_the_s2s_stage_keys) */
            if (pipeline_reads_key(pipelines[p], f->key) || strcmp(f->key, "pipeline") == 0 ||
                strncmp(f->key, "s2s.", 4) == 0)
                continue;
            for (int tpe = 0; tpe < 2; tpe++) {
                char v[128], text[4096], needle[200];
                cr_assert_eq(other_value(f, v, sizeof v), 0);
                bf_config d;
                cfg_defaults(&d);
                char def[1100];
                cfg_format_value(&d, f->key, def, sizeof def);
                snprintf(text, sizeof text,
                         "%ssweep:\n  method: %s\n%s  parameters:\n    %s: {values: [%s, %s]}\n",
                         base_of(pipelines[p]), tpe ? "tpe" : "grid", tpe ? "  trials: 4\n" : "",
                         f->key, def, v);
                snprintf(needle, sizeof needle, "%s is swept but changes nothing: pipeline %s",
                         f->key, pipelines[p]);
                assert_sweep_err(text, needle);
            }
        }
    /* the issue's: avit.retention and model.patch on budgetformer */
    assert_sweep_err("sweep:\n  parameters:\n    avit.retention: {min: 0.3, max: 0.9}\n"
                     "  method: tpe\n  trials: 5\n",
                     "avit.retention is swept but changes nothing");
    assert_sweep_err("sweep:\n  parameters:\n    model.patch: {values: [2, 4]}\n",
                     "model.patch is swept but changes nothing");
}

Test(cfg_rules, bfd_owns_the_s2s_stage_keys) {
    const char *s2s = "pipeline: s2s\nmetric: {name: eval/student/test/acc, goal: max}\n";
    char text[512];
    const char *keys[] = {"stage", "root"};
    const char *vals[] = {"teacher", "/tmp/st"};
    for (int i = 0; i < 2; i++) {
        snprintf(text, sizeof text, "%ss2s: {%s: %s}\n", s2s, keys[i], vals[i]);
        assert_sweep_err(text, "is set by bfd for each stage of a job");
        snprintf(text, sizeof text, "%sbase: {s2s: {%s: %s}}\n", s2s, keys[i], vals[i]);
        assert_sweep_err(text, "is set by bfd for each stage of a job");
        snprintf(text, sizeof text, "%ssweep:\n  parameters:\n    s2s.%s: {values: [%s, \"\"]}\n",
                 s2s, keys[i], vals[i]);
        assert_sweep_err(text, "cannot be swept: bfd sets it");
    }
    assert_sweep_ok(s2s);
}

/* ------------------------------------------------------ early stopping */

Test(cfg_rules, early_stop_needs_a_metric_written_during_training) {
    static const char *const methods[] = {
        "{method: asha, min_steps: 100",
        "{method: median, min_steps: 100",
        "{method: threshold, min_steps: 100, threshold: 0.5",
    };
    char text[1024];
    for (int m = 0; m < 3; m++) {
        /* val/acc with eval_every 0, or not below train.steps */
        snprintf(text, sizeof text,
                 "train: {steps: 1000, eval_every: 0}\nsweep:\n  parameters:\n"
                 "    train.seed: {values: [1, 2]}\nearly_stop: %s}\n",
                 methods[m]);
        assert_sweep_err(text, "early_stop.metric 'val/acc' is written only when training ends");
        assert_sweep_err(text, "metrics written during training: train/loss");
        snprintf(text, sizeof text, "train: {steps: 1000, eval_every: 1000}\nearly_stop: %s}\n",
                 methods[m]);
        assert_sweep_err(text, "written only when training ends");
        /* test/acc, whatever eval_every */
        snprintf(text, sizeof text,
                 "train: {steps: 1000, eval_every: 100}\nearly_stop: %s, metric: test/acc}\n",
                 methods[m]);
        assert_sweep_err(text, "early_stop.metric 'test/acc' is written only when training ends");
        /* s2s eval metric (the job's default) */
        snprintf(text, sizeof text,
                 "pipeline: s2s\ntrain: {steps: 1000, eval_every: 100}\nearly_stop: %s}\n",
                 methods[m]);
        assert_sweep_err(text, "early_stop.metric 'eval/student/test/acc' is written only");
        /* what is judged during training */
        snprintf(text, sizeof text, "train: {steps: 1000, eval_every: 100}\nearly_stop: %s}\n",
                 methods[m]);
        assert_sweep_ok(text);
        snprintf(text, sizeof text,
                 "train: {steps: 1000, eval_every: 0}\nearly_stop: %s, metric: train/loss}\n",
                 methods[m]);
        assert_sweep_ok(text);
        snprintf(text, sizeof text,
                 "pipeline: s2s\ntrain: {steps: 1000, eval_every: 100}\n"
                 "early_stop: %s, metric: teacher/val/acc}\n",
                 methods[m]);
        assert_sweep_ok(text);
    }
}

Test(cfg_rules, a_disabled_early_stop_takes_no_settings) {
    static const char *const keys[] = {"metric: val/acc",     "min_steps: 5",  "threshold: 0.3",
                                       "reduction_factor: 3", "max_steps: 10", "min_trials: 2"};
    char text[256], needle[128];
    for (int i = 0; i < 6; i++) {
        snprintf(text, sizeof text, "early_stop: {method: none, %s}\n", keys[i]);
        snprintf(needle, sizeof needle, "early_stop.%.*s is given with method none",
                 (int)strcspn(keys[i], ":"), keys[i]);
        assert_sweep_err(text, needle);
    }
    assert_sweep_ok("early_stop: {method: none}\n");
}

/* ------------------------------------------------------------ messages */

Test(cfg_rules, numbers_that_are_not_numbers_say_why) {
    struct {
        const char *text, *needle;
    } cases[] = {
        {"early_stop: {method: asha, min_steps: 10, reduction_factor: .nan}\n",
         "early_stop.reduction_factor: '.nan' is NaN (not a number)"},
        {"early_stop: {method: threshold, threshold: 1e400}\n",
         "early_stop.threshold: '1e400' overflows a double"},
        {"early_stop: {method: threshold, threshold: -.inf}\n",
         "early_stop.threshold: '-.inf' is infinite"},
        {"avit.retention: 1e-400\n", "avit.retention: '1e-400' underflows to 0"},
        {"train.lr: 1e400\n", "train.lr: '1e400' overflows a double"},
        {"budget.range: [0.1, .nan]\n", "budget.range: '.nan' is NaN"},
        {"train.lr: abc\n", "train.lr: expected a number, got 'abc'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_sweep_err(cases[i].text, cases[i].needle);
    bf_config c;
    char err[512];
    cfg_defaults(&c);
    cr_assert_eq(cfg_set(&c, "avit.retention=1e-400", err, sizeof err), -1);
    cr_assert(strstr(err, "avit.retention: '1e-400' underflows to 0"), "%s", err);
    cr_assert(!strstr(err, "out of range"), "%s", err);
    cr_assert_eq(cfg_set(&c, "avit.gate_center=-0", err, sizeof err), 0, "%s", err);
    double v;
    cr_assert_eq(cfg_parse_number("0e-400", &v, err, sizeof err), 0, "a zero is no underflow");
}

/* ------------------------------------------------------------ examples */

/* Every file in examples/ validates: as a sweep (what bfctl validate and
 * submit do), and a file without `sweep:` also as a config (bfworker
 * train). A new example is picked up by this loop. */
Test(cfg_rules, every_example_validates) {
    DIR *d = opendir(BF_SOURCE_DIR "/examples");
    cr_assert(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".yaml") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/examples/%s", BF_SOURCE_DIR, de->d_name);
        sweep_spec *s = NULL;
        sweep_errors e = {0};
        cr_assert_eq(sweep_load_file(path, &s, &e), 0, "%s: %s", path, e.n ? e.msgs[0] : "");
        int is_sweep = s->is_sweep;
        sweep_spec_destroy(&s);
        if (!is_sweep) {
            bf_config c;
            char err[4096];
            cfg_defaults(&c);
            cr_assert_eq(cfg_load_file(&c, path, err, sizeof err), 0, "%s", err);
            cr_assert_eq(cfg_validate(&c, err, sizeof err), 0, "%s: %s", path, err);
        }
        n++;
    }
    closedir(d);
    cr_assert(n >= 13, "%d examples", n);
}
