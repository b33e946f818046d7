/* sweep.c — a sweep file read into a validated spec (sweep.h): the file
 * (at most 1 MiB of text) and its YAML, the top level (name, base, the
 * config keys set beside it, retries, priority) and the job's own sections
 * (metric, resources, early_stop); the search space is sweep_params.c's and
 * the per-trial checks sweep_check.c's. It returns every error it finds,
 * never the first only, and expands no trial itself. Config keys are checked
 * only through cfg (one schema). See docs/sweeps.md. */
#include "jobs/sweep_priv.h"

#include "common/pipeline_decl.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#define SWEEP_FILE_MAX (1u << 20)

static void errs_sink(void *ud, const char *msg) { sweep_errs_add(ud, msg); }

/* "3600", "90s", "30m", "2h", "1d", "1:30:00" -> seconds. */
static long parse_duration(const char *s) {
    int h, m, sec;
    char tail;
    if (sscanf(s, "%d:%d:%d%c", &h, &m, &sec, &tail) == 3 && h >= 0 && m >= 0 && m < 60 &&
        sec >= 0 && sec < 60)
        return (long)h * 3600 + m * 60 + sec;
    char *end;
    if (!isdigit((unsigned char)s[0])) return -1;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || v < 0 || v > 100L * 86400) return -1;
    if (*end == '\0' || strcmp(end, "s") == 0) return v;
    if (strcmp(end, "m") == 0) return v * 60;
    if (strcmp(end, "h") == 0) return v * 3600;
    if (strcmp(end, "d") == 0) return v * 86400;
    return -1;
}

/* --------------------------------------------------------------- sections */

static const char *const top_keys[] = {"name",         "base",    "sweep",    "metric",
                                       "resources",    "retries", "priority", "early_stop",
                                       "source_trial", NULL};

/* An unknown top-level key: suggest the nearest sweep key, section or
 * config key. */
static void unknown_top(sweep_ctx *x, yaml_node_t *k, const char *key) {
    static const char *const sections[] = {"data", "model",   "attn", "budget",
                                           "avit", "distill", "train"};
    const char *names[256];
    size_t n = 0;
    for (const char *const *t = top_keys; *t; t++) names[n++] = *t;
    for (size_t i = 0; i < sizeof sections / sizeof *sections; i++) names[n++] = sections[i];
    for (size_t i = 0; i < cfg_field_count() && n < 255; i++) names[n++] = cfg_field_at(i)->key;
    names[n] = NULL;
    const char *near = sweep_near_name(key, names);
    if (near)
        sweep_err_at(x, k, "unknown key '%s'; did you mean '%s'?", key, near);
    else
        sweep_err_at(
            x, k,
            "unknown key '%s'; valid top-level keys: name, pipeline, device, data, base, "
            "sweep, metric, resources, retries, priority, early_stop, source_trial, and config "
            "keys "
            "(see `bfctl keys`)",
            key);
}

/* One objective {name, goal} at node v into s->objectives[i]; `what` names
 * it in messages ("metric" or "metric[1]"). */
static void parse_objective(sweep_ctx *x, yaml_node_t *v, int i, const char *what) {
    sweep_objective *o = &x->spec->objectives[i];
    if (v->type != YAML_MAPPING_NODE) {
        sweep_err_at(x, v, "%s: expected a mapping {name: NAME, goal: min|max}, got %s", what,
                     sweep_kind_name(v));
        return;
    }
    sweep_check_keys(x, v);
    static const char *const valid[] = {"name", "goal", NULL};
    static const char *const goals[] = {"min", "max", NULL};
    int have_goal = 0, have_name = 0;
    char w[64];
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        if (sweep_key_is_dup(x, v, p)) continue;
        yaml_node_t *k = node(x, p->key), *val = node(x, p->value);
        if (strcmp(sval(k), "name") == 0) {
            x->metric_line[i] = val->start_mark.line + 1;
            x->metric_col[i] = val->start_mark.column + 1;
            snprintf(w, sizeof w, "%s.name", what);
            sweep_get_name(x, val, w, o->name, sizeof o->name, "/_.-@");
            have_name = 1;
        } else if (strcmp(sval(k), "goal") == 0) {
            snprintf(w, sizeof w, "%s.goal", what);
            int g = sweep_get_choice(x, val, w, goals);
            if (g >= 0) o->maximize = g;
            have_goal = 1; /* a bad goal is said above, not as a missing one */
        } else {
            sweep_unknown_in(x, k, what, sval(k), valid);
        }
    }
    if (!have_name) sweep_err_at(x, v, "%s: 'name' is required (e.g. val/acc)", what);
    if (!have_goal) sweep_err_at(x, v, "%s: 'goal' is required (min or max)", what);
}

/* metric: {name, goal}, or a list of them (several objectives: the job's
 * best is a Pareto front). A name may appear once. */
static void parse_metric(sweep_ctx *x, yaml_node_t *v) {
    sweep_spec *s = x->spec;
    if (v->type != YAML_SEQUENCE_NODE) {
        parse_objective(x, v, 0, "metric");
        s->n_objectives = 1;
    } else {
        int n = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
        if (n < 1 || n > SWEEP_MAX_OBJECTIVES) {
            sweep_err_at(x, v,
                         "metric: a list of %d objectives; give 1 to %d entries {name: NAME, "
                         "goal: min|max}",
                         n, SWEEP_MAX_OBJECTIVES);
            return;
        }
        for (int i = 0; i < n; i++) {
            char what[32];
            snprintf(what, sizeof what, "metric[%d]", i);
            parse_objective(x, node(x, v->data.sequence.items.start[i]), i, what);
        }
        s->n_objectives = n;
        for (int i = 1; i < n; i++)
            for (int j = 0; j < i; j++)
                if (s->objectives[i].name[0] &&
                    strcmp(s->objectives[i].name, s->objectives[j].name) == 0) {
                    sweep_err_at(x, node(x, v->data.sequence.items.start[i]),
                                 "metric[%d]: '%s' is already metric[%d]; each objective names "
                                 "a different metric",
                                 i, s->objectives[i].name, j);
                    break;
                }
    }
    snprintf(s->metric_name, sizeof s->metric_name, "%s", s->objectives[0].name);
    s->metric_maximize = s->objectives[0].maximize;
}

static void parse_resources(sweep_ctx *x, yaml_node_t *v) {
    sweep_spec *s = x->spec;
    if (v->type != YAML_MAPPING_NODE) {
        sweep_err_at(x, v, "resources: expected a mapping, got %s", sweep_kind_name(v));
        return;
    }
    sweep_check_keys(x, v);
    static const char *const valid[] = {"ranks",         "nodes",      "gpus_per_rank",
                                        "cpus_per_rank", "time_limit", NULL};
    yaml_node_t *nodes_at = NULL;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        if (sweep_key_is_dup(x, v, p)) continue;
        yaml_node_t *k = node(x, p->key), *val = node(x, p->value);
        long long n;
        const char *key = sval(k);
        if (strcmp(key, "ranks") == 0) {
            if (sweep_get_int(x, val, "resources.ranks", 1, 4096, &n) == 0)
                s->resources.ranks = (int)n;
        } else if (strcmp(key, "nodes") == 0) {
            if (sweep_get_int(x, val, "resources.nodes", 1, 4096, &n) == 0) {
                s->resources.nodes = (int)n;
                nodes_at = val;
            }
        } else if (strcmp(key, "gpus_per_rank") == 0) {
            if (sweep_get_int(x, val, "resources.gpus_per_rank", 0, 16, &n) == 0)
                s->resources.gpus_per_rank = (int)n;
        } else if (strcmp(key, "cpus_per_rank") == 0) {
            if (sweep_get_int(x, val, "resources.cpus_per_rank", 1, 1024, &n) == 0)
                s->resources.cpus_per_rank = (int)n;
        } else if (strcmp(key, "time_limit") == 0) {
            long d = val->type == YAML_SCALAR_NODE ? parse_duration(sval(val)) : -1;
            if (d <= 0)
                sweep_err_at(
                    x, val,
                    "resources.time_limit: expected a positive duration (seconds, 90s, 30m, "
                    "2h, 1d or H:MM:SS) of at most 100 days, got %s%.40s",
                    val->type == YAML_SCALAR_NODE ? "" : sweep_kind_name(val),
                    val->type == YAML_SCALAR_NODE ? sval(val) : "");
            else
                s->resources.time_limit_s = d;
        } else {
            sweep_unknown_in(x, k, "resources", key, valid);
        }
    }
    if (nodes_at && s->resources.nodes > s->resources.ranks)
        sweep_err_at(x, nodes_at,
                     "resources.nodes: %d nodes for %d rank%s: each node runs at least one rank "
                     "(nodes must be 1..ranks)",
                     s->resources.nodes, s->resources.ranks, s->resources.ranks == 1 ? "" : "s");
}

static void parse_early_stop(sweep_ctx *x, yaml_node_t *v) {
    sweep_spec *s = x->spec;
    if (v->type != YAML_MAPPING_NODE) {
        sweep_err_at(
            x, v,
            "early_stop: expected a mapping {method: asha|hyperband|median|threshold, metric, "
            "min_steps, ...}, got %s",
            sweep_kind_name(v));
        return;
    }
    sweep_check_keys(x, v);
    static const char *const valid[] = {"method",           "metric",    "min_steps",  "threshold",
                                        "reduction_factor", "max_steps", "min_trials", NULL};
    yaml_node_t *thr = NULL, *rf = NULL, *maxs = NULL, *mint = NULL, *mins = NULL, *met = NULL;
    int have_thr = 0;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        if (sweep_key_is_dup(x, v, p)) continue;
        yaml_node_t *k = node(x, p->key), *val = node(x, p->value);
        const char *key = sval(k);
        long long n;
        if (strcmp(key, "method") == 0) {
            int m = sweep_get_choice(x, val, "early_stop.method", sweep_stop_names);
            if (m >= 0) s->early_stop.method = (sweep_stop_method)m;
        } else if (strcmp(key, "metric") == 0) {
            met = k;
            x->es_line = val->start_mark.line + 1, x->es_col = val->start_mark.column + 1;
            sweep_get_name(x, val, "early_stop.metric", s->early_stop.metric,
                           sizeof s->early_stop.metric, "/_.-");
        } else if (strcmp(key, "min_steps") == 0) {
            mins = k;
            if (sweep_get_int(x, val, "early_stop.min_steps", 0, 100000000, &n) == 0)
                s->early_stop.min_steps = (int)n;
        } else if (strcmp(key, "threshold") == 0) {
            thr = k;
            have_thr =
                sweep_get_number(x, val, "early_stop.threshold", &s->early_stop.threshold) == 0;
        } else if (strcmp(key, "reduction_factor") == 0) {
            rf = k;
            double f;
            if (sweep_get_number(x, val, "early_stop.reduction_factor", &f) == 0) {
                if (f < 1.5 || f > 100)
                    sweep_err_at(x, val,
                                 "early_stop.reduction_factor: %g is out of range; valid range is "
                                 "[1.5, 100] (3 keeps the top third at each rung)",
                                 f);
                else
                    s->early_stop.reduction_factor = f;
            }
        } else if (strcmp(key, "max_steps") == 0) {
            maxs = k;
            if (sweep_get_int(x, val, "early_stop.max_steps", 1, 100000000, &n) == 0)
                s->early_stop.max_steps = n;
        } else if (strcmp(key, "min_trials") == 0) {
            mint = k;
            if (sweep_get_int(x, val, "early_stop.min_trials", 1, 100000, &n) == 0)
                s->early_stop.min_trials = (int)n;
        } else {
            sweep_unknown_in(x, k, "early_stop", key, valid);
        }
    }
    sweep_stop_method m = s->early_stop.method;
    if (m == SWEEP_STOP_NONE) {
        /* a disabled method takes no settings: they would be silently ignored */
        yaml_node_t *given[] = {met, mins, thr, rf, maxs, mint};
        static const char *const names[] = {"metric",           "min_steps", "threshold",
                                            "reduction_factor", "max_steps", "min_trials"};
        for (int i = 0; i < 6; i++)
            if (given[i])
                sweep_err_at(x, given[i],
                             "early_stop.%s is given with method none (no early stopping); "
                             "set method: asha, hyperband, median or threshold, or leave "
                             "early_stop out",
                             names[i]);
        return;
    }
    if (m == SWEEP_STOP_THRESHOLD && !have_thr && !thr)
        sweep_err_at(x, v, "early_stop: method threshold needs 'threshold: NUMBER'");
    if (m != SWEEP_STOP_THRESHOLD && thr)
        sweep_err_at(x, thr, "early_stop.threshold applies only to method: threshold");
    int rungs = m == SWEEP_STOP_ASHA || m == SWEEP_STOP_HYPERBAND;
    if (!rungs && rf)
        sweep_err_at(x, rf,
                     "early_stop.reduction_factor applies only to method: asha or hyperband");
    if (!rungs && maxs)
        sweep_err_at(x, maxs, "early_stop.max_steps applies only to method: asha or hyperband");
    if (m == SWEEP_STOP_HYPERBAND && rf && s->early_stop.reduction_factor != 0 &&
        s->early_stop.reduction_factor < 2)
        sweep_err_at(x, rf,
                     "early_stop.reduction_factor: %g is below 2; method hyperband needs eta >= 2 "
                     "(3 keeps the top third at each rung)",
                     s->early_stop.reduction_factor);
    if (m != SWEEP_STOP_MEDIAN && mint)
        sweep_err_at(x, mint, "early_stop.min_trials applies only to method: median");
    if (m == SWEEP_STOP_ASHA && (!mins || s->early_stop.min_steps < 1))
        sweep_err_at(
            x, mins ? mins : v,
            "early_stop: method asha needs 'min_steps: R' >= 1, the step of the first rung "
            "(rungs are at R, R*eta, R*eta^2, ... steps)");
    if (m == SWEEP_STOP_HYPERBAND && (!mins || s->early_stop.min_steps < 1))
        sweep_err_at(x, mins ? mins : v,
                     "early_stop: method hyperband needs 'min_steps: r_min' >= 1, the smallest "
                     "budget (brackets start at R*eta^-s steps, none below r_min)");
}

/* ------------------------------------------------------------------- load */

void sweep_spec_destroy(sweep_spec **sp) {
    if (!sp || !*sp) return;
    sweep_spec *s = *sp;
    for (int i = 0; i < s->n_params; i++) {
        for (int j = 0; j < s->params[i].n_values; j++) free(s->params[i].value_text[j]);
        free(s->params[i].value_text);
        free(s->params[i].value_cfg);
    }
    free(s->params);
    free(s);
    *sp = NULL;
}

static void default_name(sweep_spec *s, const char *file) {
    const char *b = strrchr(file, '/');
    b = b ? b + 1 : file;
    size_t w = 0;
    for (; *b && *b != '.' && w + 1 < sizeof s->name; b++)
        s->name[w++] = (isalnum((unsigned char)*b) || *b == '-' || *b == '_') ? *b : '_';
    if (w == 0) s->name[w++] = 'j', s->name[w++] = 'o', s->name[w++] = 'b';
    s->name[w] = '\0';
}

/* Records that config key `key` is set at top level at node n; reports a
 * second setting of it (a section and a dotted key naming the same key), with
 * the worker's wording. Returns 1 for a duplicate. */
static int top_dup(sweep_ctx *x, const char *key, const yaml_node_t *n) {
    for (int i = 0; i < x->n_top; i++)
        if (strcmp(x->top_key[i], key) == 0) {
            sweep_err_at(x, n, "duplicate key '%s' (first set at line %zu, column %zu)", key,
                         x->top_line[i], x->top_col[i]);
            return 1;
        }
    if (x->n_top < (int)(sizeof x->top_key / sizeof x->top_key[0])) {
        snprintf(x->top_key[x->n_top], sizeof x->top_key[0], "%s", key);
        x->top_line[x->n_top] = n->start_mark.line + 1;
        x->top_col[x->n_top] = n->start_mark.column + 1;
        x->n_top++;
    }
    return 0;
}

/* A config key at top level (pipeline, data, model, ...), or a section of
 * them: it must not also be set in base, where it would be ambiguous. */
static void load_top_config(sweep_ctx *x, yaml_node_t *k, yaml_node_t *v) {
    sweep_spec *s = x->spec;
    const char *key = sval(k);
    const char *sub_keys[64];
    char full[64][128];
    int nk = 0;
    if (cfg_key_known(key)) {
        snprintf(full[0], sizeof full[0], "%s", key);
        sub_keys[nk++] = full[0];
    } else {
        for (yaml_node_pair_t *q = v->data.mapping.pairs.start;
             q < v->data.mapping.pairs.top && nk < 64; q++) {
            yaml_node_t *qk = node(x, q->key);
            if (!qk || qk->type != YAML_SCALAR_NODE) continue;
            snprintf(full[nk], sizeof full[nk], "%s.%s", key, sval(qk));
            sub_keys[nk] = full[nk];
            nk++;
        }
    }
    int clash = 0;
    for (int i = 0; i < nk && !clash; i++) {
        yaml_node_t *bk = NULL;
        if (x->base_node && sweep_find_path(x, x->base_node, sub_keys[i], &bk)) {
            sweep_err_at(x, k, "'%s' is set both at top level and in base (line %zu); set it once",
                         sub_keys[i], bk->start_mark.line + 1);
            clash = 1;
        }
    }
    if (!clash) {
        char err[SWEEP_MSG_MAX];
        /* sections report every error through a one-key mapping load */
        if (cfg_key_known(key)) {
            if (!top_dup(x, key, k) &&
                cfg_set_node(&s->base, key, x->doc, v, x->file, err, sizeof err) < 0)
                sweep_errs_add(x->errs, err);
        } else {
            yaml_document_t *d = x->doc;
            /* load the section mapping with its prefix: walk its pairs */
            for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top;
                 q++) {
                yaml_node_t *qk = node(x, q->key), *qv = node(x, q->value);
                if (!qk || qk->type != YAML_SCALAR_NODE || sweep_key_is_dup(x, v, q)) {
                    if (qk && qk->type == YAML_SCALAR_NODE) sweep_check_keys(x, v);
                    continue;
                }
                char fk[256];
                snprintf(fk, sizeof fk, "%s.%s", key, sval(qk));
                if (!cfg_key_known(fk)) {
                    /* position at the key, with the schema's suggestion */
                    if (cfg_set_node(&s->base, fk, d, qk, x->file, err, sizeof err) < 0)
                        sweep_errs_add(x->errs, err);
                } else if (!top_dup(x, fk, qk) &&
                           cfg_set_node(&s->base, fk, d, qv, x->file, err, sizeof err) < 0) {
                    sweep_errs_add(x->errs, err);
                }
            }
        }
    }
}

/* s2s.stage and s2s.root belong to bfd, which runs each stage of an s2s
 * trial into its own stage folders: a job that sets or sweeps them is
 * refused, not silently overridden. */
static void refuse_stage_keys(sweep_ctx *x) {
    sweep_spec *s = x->spec;
    static const char *const keys[] = {"s2s.stage", "s2s.root"};
    const char *vals[] = {s->base.s2s.stage, s->base.s2s.root};
    for (int i = 0; i < 2; i++) {
        yaml_node_t *k = NULL;
        if (vals[i][0] && !sweep_find_path(x, x->root, keys[i], &k) && x->base_node)
            sweep_find_path(x, x->base_node, keys[i], &k);
        if (vals[i][0])
            sweep_err_at(x, k ? k : x->root,
                         "%s is set by bfd for each stage of a job; leave it out of a submitted "
                         "job (it is for `bfworker train` alone)",
                         keys[i]);
    }
    for (int p = 0; p < s->n_params; p++)
        if (strncmp(s->params[p].key, "s2s.", 4) == 0) {
            char full[SWEEP_MSG_MAX];
            snprintf(full, sizeof full,
                     "%s:%d:%d: %s cannot be swept: bfd sets it for each stage of a job "
                     "(stages are shared between trials, docs/daemon.md)",
                     x->file, s->params[p].line, s->params[p].col, s->params[p].key);
            sweep_errs_add(x->errs, full);
        }
}

static void load_doc(sweep_ctx *x) {
    sweep_spec *s = x->spec;
    yaml_node_t *root = x->root;
    sweep_check_keys(x, root);
    yaml_node_pair_t *p;
    /* pass 1: base, so top-level config keys can be checked against it */
    for (p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        if (sweep_key_is_dup(x, root, p)) continue;
        yaml_node_t *k = node(x, p->key), *v = node(x, p->value);
        if (strcmp(sval(k), "base") == 0) {
            x->base_node = v;
            if (v->type != YAML_MAPPING_NODE)
                sweep_err_at(x, v, "base: expected a mapping of config keys, got %s",
                             sweep_kind_name(v));
            else
                cfg_load_node(&s->base, x->doc, v, x->file, errs_sink, x->errs);
        }
    }
    /* pass 2: everything else, in file order */
    yaml_node_t *sweep = NULL, *metric = NULL;
    for (p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        if (sweep_key_is_dup(x, root, p)) continue;
        yaml_node_t *k = node(x, p->key), *v = node(x, p->value);
        const char *key = sval(k);
        long long n;
        if (strcmp(key, "base") == 0) {
            continue;
        } else if (strcmp(key, "name") == 0) {
            sweep_get_name(x, v, "name", s->name, sizeof s->name, "._-");
        } else if (strcmp(key, "sweep") == 0) {
            sweep = v;
        } else if (strcmp(key, "metric") == 0) {
            metric = v;
        } else if (strcmp(key, "resources") == 0) {
            parse_resources(x, v);
        } else if (strcmp(key, "retries") == 0) {
            if (sweep_get_int(x, v, "retries", 0, 100, &n) == 0) s->retries = (int)n;
        } else if (strcmp(key, "priority") == 0) {
            if (sweep_get_int(x, v, "priority", -1000, 1000, &n) == 0) s->priority = (int)n;
        } else if (strcmp(key, "source_trial") == 0) {
            if (sweep_get_int(x, v, "source_trial", 1, (1LL << 53), &n) == 0) s->source_trial = n;
        } else if (strcmp(key, "early_stop") == 0) {
            parse_early_stop(x, v);
        } else if (cfg_key_known(key) || (cfg_is_section(key) && v->type == YAML_MAPPING_NODE)) {
            load_top_config(x, k, v);
        } else {
            unknown_top(x, k, key);
        }
    }
    /* metric defaults depend on the pipeline */
    if (metric) {
        parse_metric(x, metric);
    } else {
        const char *m = pipeline_default_metric(s->base.pipeline, &s->metric_maximize);
        snprintf(s->metric_name, sizeof s->metric_name, "%s", m ? m : "val/acc");
        snprintf(s->objectives[0].name, sizeof s->objectives[0].name, "%s", s->metric_name);
        s->objectives[0].maximize = s->metric_maximize;
        s->n_objectives = 1;
    }
    int rungs =
        s->early_stop.method == SWEEP_STOP_ASHA || s->early_stop.method == SWEEP_STOP_HYPERBAND;
    if (rungs && s->n_objectives > 1 && s->early_stop.metric[0]) {
        char line[SWEEP_MSG_MAX + CFG_PATH_MAX];
        snprintf(line, sizeof line,
                 "%s:%zu:%zu: early_stop.metric is given with %d objectives: method %s judges "
                 "all of them at each rung (MO-ASHA); leave early_stop.metric out, or give one "
                 "metric: entry",
                 x->file, x->es_line, x->es_col, s->n_objectives,
                 sweep_stop_name(s->early_stop.method));
        sweep_errs_add(x->errs, line);
    }
    if (s->early_stop.method != SWEEP_STOP_NONE && !s->early_stop.metric[0])
        snprintf(s->early_stop.metric, sizeof s->early_stop.metric, "%s", s->metric_name);
    if (s->early_stop.method == SWEEP_STOP_ASHA || s->early_stop.method == SWEEP_STOP_HYPERBAND) {
        if (s->early_stop.reduction_factor == 0) s->early_stop.reduction_factor = 3;
        if (s->early_stop.max_steps == 0) s->early_stop.max_steps = s->base.train.steps;
        if (s->early_stop.min_steps >= 1 && s->early_stop.max_steps <= s->early_stop.min_steps)
            sweep_err_at(
                x, x->root,
                "early_stop: min_steps %d is not below max_steps %lld (default train.steps): "
                "there is no rung to stop at",
                s->early_stop.min_steps, s->early_stop.max_steps);
    }
    if (s->early_stop.method == SWEEP_STOP_MEDIAN && s->early_stop.min_trials == 0)
        s->early_stop.min_trials = 3;
    if (sweep) {
        s->is_sweep = 1;
        sweep_parse_space(x, sweep);
    } else {
        s->n_trials = 1;
    }
    refuse_stage_keys(x);
}

int sweep_load_string(const char *text, size_t len, const char *file, sweep_spec **out,
                      sweep_errors *errs) {
    *out = NULL;
    char line[SWEEP_MSG_MAX + CFG_PATH_MAX];
    if (!file) file = "sweep";
    /* text holds len bytes and need not end in a NUL (fuzz_sweep found
     * strspn reading past them) */
    size_t blank = 0;
    while (blank < len && text[blank] && strchr(" \t\r\n", text[blank])) blank++;
    if (blank == len) {
        snprintf(line, sizeof line,
                 "%s:1:1: empty sweep file: expected a mapping with base/sweep "
                 "keys, or a config",
                 file);
        sweep_errs_add(errs, line);
        return -1;
    }
    if (memchr(text, '\0', len)) {
        snprintf(line, sizeof line, "%s:1:1: not a text file (NUL byte at offset %zu)", file,
                 (size_t)((const char *)memchr(text, '\0', len) - text));
        sweep_errs_add(errs, line);
        return -1;
    }
    yaml_document_t doc;
    if (cfg_yaml_parse(&doc, text, len, file, 1, line, sizeof line) < 0) {
        sweep_errs_add(errs, line);
        return -1;
    }
    int before = errs->total;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    sweep_spec *s = calloc(1, sizeof *s);
    char err[SWEEP_MSG_MAX];
    if (!s) {
        snprintf(line, sizeof line, "%s:1:1: out of memory", file);
        sweep_errs_add(errs, line);
    } else if (!root || (root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0)) {
        snprintf(line, sizeof line,
                 "%s:1:1: empty sweep file: expected a mapping with base/sweep "
                 "keys, or a config",
                 file);
        sweep_errs_add(errs, line);
    } else if (cfg_yaml_check_expansion(&doc, file, err, sizeof err) < 0) {
        sweep_errs_add(errs, err);
    } else if (root->type != YAML_MAPPING_NODE) {
        snprintf(line, sizeof line,
                 "%s:%zu:%zu: expected a mapping at top level (name, base, "
                 "sweep, ...), got %s",
                 file, root->start_mark.line + 1, root->start_mark.column + 1,
                 sweep_kind_name(root));
        sweep_errs_add(errs, line);
    } else {
        snprintf(s->file, sizeof s->file, "%s", file);
        cfg_defaults(&s->base);
        cfg_set_level(&s->base, CFG_LEVEL_BASE); /* base and top-level keys: one level */
        default_name(s, file);
        s->resources.ranks = 1;
        s->resources.cpus_per_rank = 1;
        sweep_ctx x;
        memset(&x, 0, sizeof x);
        x.doc = &doc, x.file = file, x.errs = errs, x.spec = s, x.root = root;
        load_doc(&x);
        /* cross-key checks per trial, only once every key parsed */
        if (errs->total == before) sweep_check_trials(&x);
    }
    yaml_document_delete(&doc);
    if (errs->total != before) {
        sweep_spec_destroy(&s);
        return -1;
    }
    *out = s;
    return 0;
}

int sweep_load_file(const char *path, sweep_spec **out, sweep_errors *errs) {
    *out = NULL;
    char line[SWEEP_MSG_MAX + CFG_PATH_MAX];
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(line, sizeof line, "%s:1:1: cannot open: %s", path, strerror(errno));
        sweep_errs_add(errs, line);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(line, sizeof line, "%s:1:1: not a regular file", path);
        sweep_errs_add(errs, line);
        return -1;
    }
    if (st.st_size > (off_t)SWEEP_FILE_MAX) {
        snprintf(line, sizeof line, "%s:1:1: file is %lld bytes; sweep files are limited to 1 MiB",
                 path, (long long)st.st_size);
        sweep_errs_add(errs, line);
        return -1;
    }
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        snprintf(line, sizeof line, "%s:1:1: cannot open: %s", path, strerror(errno));
        sweep_errs_add(errs, line);
        return -1;
    }
    char *buf = malloc(SWEEP_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, SWEEP_FILE_MAX + 1, fp) : 0;
    int bad = !buf || ferror(fp);
    fclose(fp);
    if (bad || n > SWEEP_FILE_MAX) {
        snprintf(line, sizeof line, "%s:1:1: %s", path,
                 bad ? "read error" : "file is over 1 MiB; sweep files are limited to 1 MiB");
        sweep_errs_add(errs, line);
        free(buf);
        return -1;
    }
    int rc = sweep_load_string(buf, n, path, out, errs);
    free(buf);
    return rc;
}
