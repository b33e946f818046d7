/* cfg_validate.c — the rules that hold across keys of a loaded config (heads
 * divide d_model, the data keys fit the pipeline, layer lists fit the model,
 * ...), each problem reported on a line of its own. One key's own type and
 * range are checked where it is read (cfg_parse.c), not here. It never
 * reads YAML and never changes the config it checks. */
#include "common/cfg.h"
#include "common/cfg_priv.h"
#include "common/pipeline_decl.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The problems found so far: messages one per line in err[errlen]. */
typedef struct problems {
    char *err;
    size_t errlen;
    int n;
} problems;

static void add_err(problems *pr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_err(problems *pr, const char *fmt, ...) {
    char msg[CFG_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t l = strlen(pr->err);
    if (l < pr->errlen) snprintf(pr->err + l, pr->errlen - l, "%s%s", pr->n ? "\n" : "", msg);
    pr->n++;
}

static int is_pipeline(const bf_config *c, const char *name) {
    return strcmp(c->pipeline, name) == 0;
}

/* pipeline and device name known ones */
static void validate_pipeline(const bf_config *c, problems *pr) {
    char names[128];
    if (!pipeline_known(c->pipeline))
        add_err(pr, "pipeline '%s' is unknown; available pipelines: %s", c->pipeline,
                pipeline_names(names, sizeof names));
    if (cfg_choice_index("auto|cpu|cuda", c->device) < 0)
        add_err(pr, "device '%s' is unknown; expected auto, cpu or cuda", c->device);
}

static int hadamard_width_ok(int d) {
    if (d <= 0) return 0;
    if (d % 12 == 0) d /= 12;
    return (d & (d - 1)) == 0;
}

/* model.heads divides model.d_model; attn.out_proj fits the width */
static void validate_width(const bf_config *c, problems *pr) {
    if (c->model.heads <= 0 || c->model.d_model <= 0 || c->model.d_model % c->model.heads != 0)
        add_err(pr, "model.d_model (%d) must be divisible by model.heads (%d)", c->model.d_model,
                c->model.heads);
    if (strcmp(c->attn.out_proj, "hadamard") == 0 && !hadamard_width_ok(c->model.d_model)) {
        int lo = 0, hi = 0;
        for (int d = c->model.d_model - 1; d > 0 && !lo; d--)
            if (hadamard_width_ok(d)) lo = d;
        for (int d = c->model.d_model + 1; d < (1 << 24) && !hi; d++)
            if (hadamard_width_ok(d)) hi = d;
        add_err(pr,
                "attn.out_proj hadamard needs model.d_model = 2^n or 12*2^n (64, 96, 128, 192, "
                "256, 384, 512, 768, ...); got %d (nearest valid: %d or %d)",
                c->model.d_model, lo, hi);
    } else if (cfg_choice_index("dense|hadamard", c->attn.out_proj) < 0) {
        add_err(pr, "attn.out_proj '%s' is unknown; expected dense or hadamard", c->attn.out_proj);
    }
}

/* Data keys the pipeline would not read are refused, not silently ignored
 * (an lm with data.train trained on the default corpus). */
static void validate_data_lm(const bf_config *c, problems *pr) {
    if (c->data.set[0] && strcmp(c->data.set, "kjv") != 0)
        add_err(pr,
                "data.set '%s' is not a text corpus; pipeline lm takes data.set kjv or "
                "data.path=FILE",
                c->data.set);
    if (c->data.path[0] && c->data.set[0])
        add_err(pr, "data.path and data.set are both given; pipeline lm reads one of them (a "
                    "later source, e.g. --set, replaces every data key of an earlier one)");
    if (!(c->data.val_fraction > 0))
        add_err(pr, "data.val_fraction is 0: pipeline lm validates on the tail of the corpus; "
                    "give a fraction in (0, 0.5]");
}

static void validate_data_budgetformer(const bf_config *c, problems *pr) {
    if (c->data.set[0] && strcmp(c->data.set, "wordnet") != 0)
        add_err(pr,
                "data.set '%s' is not a text classification set; pipeline budgetformer takes "
                "data.set wordnet or data.train/data.val/data.test TSV files",
                c->data.set);
    if (c->data.train[0] && c->data.set[0])
        add_err(pr, "data.train and data.set are both given; pipeline budgetformer reads one of "
                    "them (a later source, e.g. --set, replaces every data key of an earlier one)");
    if ((c->data.val[0] || c->data.test[0]) && !c->data.train[0])
        add_err(pr,
                "data.%s is given without data.train; give the three TSV splits, or "
                "data.set wordnet",
                c->data.val[0] ? "val" : "test");
    if (c->data.train[0] && !c->data.val[0] && !(c->data.val_fraction > 0))
        add_err(pr, "data.train is given without data.val and data.val_fraction is 0: the "
                    "validation split is data.val_fraction of data.train (data.val_split); give "
                    "a fraction in (0, 0.5], or data.val=FILE");
}

/* pipelines vit and s2s: IDX images */
static void validate_data_images(const bf_config *c, problems *pr) {
    if (c->data.set[0] && strcmp(c->data.set, "fashion_mnist") != 0 &&
        strcmp(c->data.set, "fashion-mnist") != 0)
        add_err(pr,
                "data.set '%s' is not an image set; pipeline %s takes data.set "
                "fashion_mnist or data.train_images/data.train_labels IDX files",
                c->data.set, c->pipeline);
    if (!c->data.train_images[0] != !c->data.train_labels[0] ||
        !c->data.test_images[0] != !c->data.test_labels[0])
        add_err(pr, "give IDX images and labels in pairs: data.train_images with "
                    "data.train_labels, data.test_images with data.test_labels");
    if (c->data.test_images[0] && !c->data.train_images[0])
        add_err(pr, "data.test_images is given without data.train_images; give the training "
                    "pair too, or data.set fashion_mnist");
    if (c->data.set[0] && (c->data.train_images[0] || c->data.test_images[0]))
        add_err(pr,
                "data.set and data.%s are both given; pipeline %s reads one of them (a later "
                "source, e.g. --set, replaces every data key of an earlier one)",
                c->data.train_images[0] ? "train_images" : "test_images", c->pipeline);
    if (!(c->data.val_fraction > 0))
        add_err(pr,
                "data.val_fraction is 0: pipeline %s validates on data.val_fraction of the "
                "training images (data.val_split); give a fraction in (0, 0.5]",
                c->pipeline);
}

/* A level whose data-source group named two sources is refused even when
 * a later level replaced that group (docs/sweeps.md): the file (or base,
 * or parameter) says two things, and fixing it there is the fix. */
static void validate_replaced_conflict(const bf_config *c, problems *pr) {
    static const char *const level_names[] = {"the defaults", "the config file", "the sweep's base",
                                              "a sweep parameter", "--set"};
    unsigned lv = c->replaced_conflict_level;
    if (!lv || lv >= sizeof level_names / sizeof *level_names) return;
    const cfg_field *a = cfg_field_at(c->replaced_conflict_key[0]),
                    *b = cfg_field_at(c->replaced_conflict_key[1]);
    if (!a || !b) return;
    add_err(pr,
            "%s and %s are both given in %s (two data sources on one level); a later source "
            "replaces the whole group, but %s still names two: keep one there",
            b->key, a->key, level_names[lv], level_names[lv]);
}

static void validate_data(const bf_config *c, problems *pr) {
    validate_replaced_conflict(c, pr);
    if (is_pipeline(c, "lm"))
        validate_data_lm(c, pr);
    else if (is_pipeline(c, "budgetformer"))
        validate_data_budgetformer(c, pr);
    else if (is_pipeline(c, "vit") || is_pipeline(c, "s2s"))
        validate_data_images(c, pr);
}

/* budget.range ordered and inside [0, 1] */
static void validate_budget(const bf_config *c, problems *pr) {
    float s0 = c->budget.range[0], s1 = c->budget.range[1];
    if (!(s0 >= 0.0f && s1 <= 1.0f && s0 <= s1))
        add_err(pr, "budget.range [%g, %g] must be ordered (s_min <= s_max) and inside [0, 1]", s0,
                s1);
}

/* model.mixers: known mixers, no more than model.layers, causal for lm;
 * only the first problem is reported */
static void validate_mixers(const bf_config *c, problems *pr) {
    const char *p = c->model.mixers;
    for (int l = 0; p[0]; l++) {
        size_t n = strcspn(p, ",");
        int ok = (n == 9 && !strncmp(p, "attention", 9)) || (n == 7 && !strncmp(p, "bimamba", 7)) ||
                 (n == 8 && !strncmp(p, "bimamba2", 8)) || (n == 6 && !strncmp(p, "bilstm", 6)) ||
                 (n == 11 && !strncmp(p, "bilstm_wide", 11));
        if (!ok) {
            add_err(pr,
                    "model.mixers: entry %d '%.*s' is not a mixer (valid: attention, bimamba, "
                    "bimamba2, bilstm, bilstm_wide)",
                    l, (int)(n < 32 ? n : 32), p);
            break;
        }
        if (l >= c->model.layers) {
            add_err(pr, "model.mixers: more entries than model.layers (%d)", c->model.layers);
            break;
        }
        if (is_pipeline(c, "lm") && strncmp(p, "attention", 9) != 0) {
            add_err(pr,
                    "model.mixers: layer %d's %.*s is bidirectional; pipeline lm is causal and "
                    "takes only attention",
                    l, (int)n, p);
            break;
        }
        p += n + (p[n] == ',');
    }
}

int cfg_int_list(const char *text, int *out, int max, int lo, int hi, char *why, size_t n) {
    int k = 0;
    const char *p = text;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < lo || v > hi) {
            snprintf(why, n, "'%s' is not a list of integers in [%d, %d] (\"a,b,c\")", text, lo,
                     hi);
            return -1;
        }
        if (k == max) {
            snprintf(why, n, "'%s' has more than %d entries", text, max);
            return -1;
        }
        out[k++] = (int)v;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',')
            p++;
        else if (*p) {
            snprintf(why, n, "'%s': '%c' where a comma was expected (\"a,b,c\")", text, *p);
            return -1;
        }
    }
    if (k == 0) snprintf(why, n, "an empty list; give at least one (\"a,b,c\")");
    return k ? k : -1;
}

/* pipeline s2s: distill.replace_layers fits model.layers, model.mixers left
 * to the pipeline, s2s.stage names a stage, the speed grid's lists parse */
static void validate_s2s(const bf_config *c, problems *pr) {
    int L = c->model.layers;
    if (c->distill.replace_auto >= L)
        add_err(pr,
                "distill.replace_layers auto:%d replaces every layer or more (model.layers "
                "is %d); valid: auto:1 .. auto:%d",
                c->distill.replace_auto, L, L - 1);
    int seen[CFG_MAX_LAYERS] = {0};
    for (int i = 0; i < c->distill.n_replace; i++) {
        int l = c->distill.replace_layers[i];
        if (l < 0 || l >= L) {
            add_err(pr,
                    "distill.replace_layers: layer %d does not exist; valid: 0 .. %d "
                    "(model.layers is %d)",
                    l, L - 1, L);
            break;
        }
        if (seen[l]++) {
            add_err(pr, "distill.replace_layers: layer %d is listed twice", l);
            break;
        }
    }
    if (c->distill.n_replace >= L)
        add_err(pr,
                "distill.replace_layers replaces all %d layers; S2S keeps at least one "
                "attention layer",
                L);
    if (c->distill.n_replace == 0 && c->distill.replace_auto == 0)
        add_err(pr, "distill.replace_layers is empty; give layers ([%d]) or auto:K", L - 1);
    if (c->model.mixers[0])
        add_err(pr, "model.mixers is set by pipeline s2s from distill.replace_layers and "
                    "distill.mixer; leave it out");
    const stage_graph *g = pipeline_stages(c->pipeline);
    char names[256];
    int at = c->s2s.stage[0] ? stage_graph_index(g, c->s2s.stage) : -1;
    if (c->s2s.stage[0] && at < 0)
        add_err(pr, "s2s.stage '%s' is not a stage; valid: %s (or \"\" for all)", c->s2s.stage,
                stage_graph_list(g, names, sizeof names));
    else if (at >= 0 && !stage_graph_runs(g, c, at))
        add_err(pr,
                "s2s.stage '%s': distill.teacher %s runs no %s stage (it distils from the "
                "dense teacher)",
                c->s2s.stage, c->distill.teacher, c->s2s.stage);
    int v[CFG_SPEED_MAX];
    char why[256];
    if (cfg_int_list(c->s2s.speed_widths, v, CFG_SPEED_MAX, 8, 16384, why, sizeof why) < 0)
        add_err(pr, "s2s.speed_widths: %s", why);
    if (cfg_int_list(c->s2s.speed_batches, v, CFG_SPEED_MAX, 1, 4096, why, sizeof why) < 0)
        add_err(pr, "s2s.speed_batches: %s", why);
}

/* avit.retention reachable with model.layers */
static void validate_avit(const bf_config *c, problems *pr) {
    int s2s_halts = is_pipeline(c, "s2s") && strcmp(c->distill.teacher, "dense") != 0;
    if ((s2s_halts || c->avit.enabled) && c->avit.retention * c->model.layers <= 1.0f)
        add_err(pr,
                "avit.retention %g is unreachable with %d layers: every token runs layer 0, so "
                "retention is at least 1/%d; give more than %.3g",
                (double)c->avit.retention, c->model.layers, c->model.layers, 1.0 / c->model.layers);
}

/* The defaults, made once (cfg_defaults parses every default text). */
static bf_config defaults_cfg;
static pthread_once_t defaults_once = PTHREAD_ONCE_INIT;
static void defaults_init(void) { cfg_defaults(&defaults_cfg); }

/* 1 when key f holds its default in c. */
static int at_default(const bf_config *c, const cfg_field *f) {
    pthread_once(&defaults_once, defaults_init);
    const bf_config *d = &defaults_cfg;
    if (f->type == CFG_T_LAYERS)
        return c->distill.replace_auto == d->distill.replace_auto &&
               c->distill.n_replace == d->distill.n_replace &&
               memcmp(c->distill.replace_layers, d->distill.replace_layers,
                      (size_t)c->distill.n_replace * sizeof(int)) == 0;
    const char *a = (const char *)c + f->offset, *b = (const char *)d + f->offset;
    if (f->type == CFG_T_STR || f->type == CFG_T_ENUM) return strncmp(a, b, f->size) == 0;
    return memcmp(a, b, f->size) == 0;
}

/* Keys the pipeline never reads (pipeline_decl.c), set to anything but
 * their default: refused, not silently ignored. A default spelt out (or a
 * resolved config, which lists every key) stays accepted. */
static void validate_unread(const bf_config *c, problems *pr) {
    if (!pipeline_known(c->pipeline)) return;
    for (size_t i = 0; i < cfg_field_count(); i++) {
        const cfg_field *f = cfg_field_at(i);
        if (pipeline_reads_key(c->pipeline, f->key) || at_default(c, f)) continue;
        char reads[512];
        pipeline_section_keys(c->pipeline, f->key, reads, sizeof reads);
        add_err(pr, "%s is not read by pipeline %s; leave it out%s%s%s", f->key, c->pipeline,
                reads[0] ? " (of this section it reads: " : " (it reads nothing of this section)",
                reads, reads[0] ? ")" : "");
    }
}

int cfg_validate(const bf_config *c, char *err, size_t errlen) {
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    err[0] = '\0';
    problems pr = {err, errlen, 0};
    validate_pipeline(c, &pr);
    validate_width(c, &pr);
    validate_unread(c, &pr);
    validate_data(c, &pr);
    validate_budget(c, &pr);
    validate_mixers(c, &pr);
    if (is_pipeline(c, "s2s")) validate_s2s(c, &pr);
    validate_avit(c, &pr);
    return pr.n ? -1 : 0;
}
