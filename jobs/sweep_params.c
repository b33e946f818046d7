/* sweep_params.c — the search space: the sweep: section (method, trials,
 * seed, tpe's parallel and startup_trials) and each swept parameter, as a
 * list of values or a min/max range with a distribution, every value
 * checked through the config schema (cfg_set_node), so there is no second
 * list of keys here. It expands nothing (sweep_expand.c) and validates no
 * trial as a whole (sweep_check.c). */
#include "jobs/sweep_priv.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The names of sweep_method and sweep_dist, in enum order: what the file
 * may say and what messages and the store print. */
static const char *const method_names[] = {"grid", "random", "tpe", NULL};
static const char *const dist_names[] = {"values", "uniform", "log_uniform", "int_uniform", NULL};
/* The names of sweep_stop_method, in enum order (sweep_priv.h). */
const char *const sweep_stop_names[] = {"none", "median", "threshold", "asha", "hyperband", NULL};

const char *sweep_method_name(sweep_method m) {
    return (unsigned)m <= SWEEP_TPE ? method_names[m] : "?";
}

const char *sweep_stop_name(sweep_stop_method m) {
    return (unsigned)m <= SWEEP_STOP_HYPERBAND ? sweep_stop_names[m] : "?";
}

/* Records one swept value (already set in `tmp`). */
static int param_add_value(sweep_param *p, const bf_config *tmp) {
    bf_config *vc = realloc(p->value_cfg, (size_t)(p->n_values + 1) * sizeof *vc);
    if (!vc) return -1;
    p->value_cfg = vc;
    char **vt = realloc(p->value_text, (size_t)(p->n_values + 1) * sizeof *vt);
    if (!vt) return -1;
    p->value_text = vt;
    char text[1024];
    cfg_format_value(tmp, p->key, text, sizeof text);
    vt[p->n_values] = strdup(text);
    if (!vt[p->n_values]) return -1;
    vc[p->n_values] = *tmp;
    p->n_values++;
    return 0;
}

/* The listed values of parameter p (key), each checked through the schema
 * against the base config; a value listed twice is an error. */
static void param_values(sweep_ctx *x, const char *key, yaml_node_t *values, sweep_param *p) {
    sweep_spec *s = x->spec;
    char err[SWEEP_MSG_MAX];
    p->dist = SWEEP_DIST_VALUES;
    if (values->type != YAML_SEQUENCE_NODE) {
        sweep_err_at(x, values, "%s: values: expected a list, got %s", key,
                     sweep_kind_name(values));
        return;
    }
    if (values->data.sequence.items.top == values->data.sequence.items.start) {
        sweep_err_at(x, values, "%s: values: the list is empty; give at least one value", key);
        return;
    }
    for (yaml_node_item_t *it = values->data.sequence.items.start;
         it < values->data.sequence.items.top; it++) {
        yaml_node_t *e = node(x, *it);
        if (!e) continue;
        bf_config tmp = s->base;
        if (cfg_set_node(&tmp, key, x->doc, e, x->file, err, sizeof err) < 0) {
            sweep_errs_add(x->errs, err);
            continue;
        }
        char text[1024];
        cfg_format_value(&tmp, key, text, sizeof text);
        int dup = 0;
        for (int i = 0; i < p->n_values && !dup; i++)
            if (strcmp(p->value_text[i], text) == 0) {
                sweep_err_at(x, e, "%s: value %s is listed twice", key, text);
                dup = 1;
            }
        if (!dup && param_add_value(p, &tmp) < 0) sweep_err_at(x, e, "out of memory");
    }
}

static void parse_param(sweep_ctx *x, yaml_node_t *k, yaml_node_t *v, sweep_param *p) {
    sweep_spec *s = x->spec;
    const char *key = sval(k);
    char err[SWEEP_MSG_MAX];
    snprintf(p->key, sizeof p->key, "%s", key);
    p->line = (int)k->start_mark.line + 1;
    p->col = (int)k->start_mark.column + 1;
    p->field = cfg_field_find(key);
    if (!p->field) {
        if (cfg_is_section(key)) {
            sweep_err_at(x, k, "'%s' is a section; sweep a key inside it (e.g. '%s.%s')", key, key,
                         strcmp(key, "model") == 0 ? "layers" : "...");
            return;
        }
        bf_config tmp = s->base;
        if (cfg_set_node(&tmp, key, x->doc, k, x->file, err, sizeof err) < 0)
            sweep_errs_add(x->errs, err);
        return;
    }
    if (v->type != YAML_MAPPING_NODE) {
        sweep_err_at(x, v,
                     "%s: expected {values: [...]} or {min: A, max: B, distribution: "
                     "uniform|log_uniform|int_uniform}, got %s",
                     key, sweep_kind_name(v));
        return;
    }
    sweep_check_keys(x, v);
    static const char *const valid[] = {"values", "min", "max", "distribution", NULL};
    yaml_node_t *values = NULL, *vmin = NULL, *vmax = NULL, *vdist = NULL;
    for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; q++) {
        if (sweep_key_is_dup(x, v, q)) continue;
        yaml_node_t *qk = node(x, q->key), *qv = node(x, q->value);
        const char *name = sval(qk);
        if (strcmp(name, "values") == 0)
            values = qv;
        else if (strcmp(name, "min") == 0)
            vmin = qv;
        else if (strcmp(name, "max") == 0)
            vmax = qv;
        else if (strcmp(name, "distribution") == 0)
            vdist = qv;
        else
            sweep_unknown_in(x, qk, "a sweep parameter", name, valid);
    }
    if (values && (vmin || vmax || vdist)) {
        sweep_err_at(x, v, "%s: give either values: [...] or min/max/distribution, not both", key);
        return;
    }
    if (values) {
        param_values(x, key, values, p);
        return;
    }
    if (!vmin || !vmax) {
        sweep_err_at(x, v, "%s: a range needs both min and max (or give values: [...])", key);
        return;
    }
    cfg_type t = p->field->type;
    if (t != CFG_T_INT && t != CFG_T_U64 && t != CFG_T_FLOAT) {
        sweep_err_at(x, v,
                     "%s is a %s; min/max ranges apply only to numeric keys; use values: [...]",
                     key, cfg_type_name(t));
        return;
    }
    int d = t == CFG_T_FLOAT ? SWEEP_DIST_UNIFORM : SWEEP_DIST_INT_UNIFORM;
    if (vdist) {
        int c = sweep_get_choice(x, vdist, "distribution", dist_names + 1);
        if (c < 0) return;
        d = c + 1;
    }
    p->dist = (sweep_dist)d;
    if (t != CFG_T_FLOAT && p->dist != SWEEP_DIST_INT_UNIFORM) {
        sweep_err_at(x, vdist, "%s is an integer key; use distribution: int_uniform", key);
        return;
    }
    /* each bound must itself be a valid value of the key (type and range) */
    int bad = 0;
    bf_config tmp = s->base;
    if (cfg_set_node(&tmp, key, x->doc, vmin, x->file, err, sizeof err) < 0)
        sweep_errs_add(x->errs, err), bad = 1;
    if (cfg_set_node(&tmp, key, x->doc, vmax, x->file, err, sizeof err) < 0)
        sweep_errs_add(x->errs, err), bad = 1;
    if (bad) return;
    if (sweep_get_number(x, vmin, "min", &p->min) < 0 ||
        sweep_get_number(x, vmax, "max", &p->max) < 0)
        return;
    if (!(p->min < p->max)) {
        sweep_err_at(x, vmin, "%s: min (%g) must be below max (%g)", key, p->min, p->max);
        return;
    }
    if (p->dist == SWEEP_DIST_LOG_UNIFORM && p->min <= 0) {
        sweep_err_at(x, vmin, "%s: log_uniform needs min > 0, got %g", key, p->min);
        return;
    }
    if (p->dist == SWEEP_DIST_INT_UNIFORM && (p->min != floor(p->min) || p->max != floor(p->max))) {
        sweep_err_at(x, vmin, "%s: int_uniform needs integer min and max", key);
        return;
    }
    if (s->method == SWEEP_GRID)
        sweep_err_at(
            x, v, "%s: min/max ranges need method: random or tpe; a grid takes values: [...]", key);
}

/* A grid's trials: the product of its parameters' value counts, refused
 * (with every factor named) above SWEEP_MAX_TRIALS. */
static void grid_count(sweep_ctx *x, yaml_node_t *v) {
    sweep_spec *s = x->spec;
    long long prod = 1;
    int over = 0;
    for (int i = 0; i < s->n_params; i++) {
        long long c = s->params[i].n_values;
        if (c == 0) continue;
        prod *= c;
        if (prod > SWEEP_MAX_TRIALS) over = 1, prod = SWEEP_MAX_TRIALS + 1;
    }
    if (over) {
        char factors[512] = "";
        long double exact = 1;
        for (int i = 0; i < s->n_params; i++) {
            size_t l = strlen(factors);
            exact *= s->params[i].n_values ? s->params[i].n_values : 1;
            snprintf(factors + l, sizeof factors - l, "%s%d", i ? " x " : "",
                     s->params[i].n_values);
        }
        sweep_err_at(x, v, "sweep: the grid has %.0Lf trials (%s); at most %d are allowed", exact,
                     factors, SWEEP_MAX_TRIALS);
    }
    s->n_trials = prod;
}

void sweep_parse_space(sweep_ctx *x, yaml_node_t *v) {
    sweep_spec *s = x->spec;
    if (v->type != YAML_MAPPING_NODE) {
        sweep_err_at(x, v, "sweep: expected a mapping {method, parameters, ...}, got %s",
                     sweep_kind_name(v));
        return;
    }
    sweep_check_keys(x, v);
    static const char *const valid[] = {"method",   "trials",         "seed", "parameters",
                                        "parallel", "startup_trials", NULL};
    yaml_node_t *params = NULL, *trials = NULL, *seed = NULL, *par = NULL, *startup = NULL;
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        if (sweep_key_is_dup(x, v, p)) continue;
        yaml_node_t *k = node(x, p->key), *val = node(x, p->value);
        const char *key = sval(k);
        if (strcmp(key, "method") == 0) {
            int m = sweep_get_choice(x, val, "sweep.method", method_names);
            if (m >= 0) s->method = (sweep_method)m;
        } else if (strcmp(key, "trials") == 0) {
            trials = val;
        } else if (strcmp(key, "seed") == 0) {
            seed = val;
        } else if (strcmp(key, "parameters") == 0) {
            params = val;
        } else if (strcmp(key, "parallel") == 0) {
            par = val;
        } else if (strcmp(key, "startup_trials") == 0) {
            startup = val;
        } else {
            sweep_unknown_in(x, k, "sweep", key, valid);
        }
    }
    long long n;
    const char *mname = sweep_method_name(s->method);
    if (s->method == SWEEP_RANDOM || s->method == SWEEP_TPE) {
        if (!trials)
            sweep_err_at(x, v, "sweep: method %s needs 'trials: N' (1 to %d)", mname,
                         SWEEP_MAX_TRIALS);
        else if (sweep_get_int(x, trials, "sweep.trials", 1, SWEEP_MAX_TRIALS, &n) == 0)
            s->n_trials = n;
        if (seed) {
            if (is_plain(seed) && isdigit((unsigned char)sval(seed)[0])) {
                char *end;
                errno = 0;
                unsigned long long u = strtoull(sval(seed), &end, 10);
                if (!errno && !*end)
                    s->seed = u;
                else
                    sweep_err_at(x, seed, "sweep.seed: expected a non-negative integer");
            } else {
                sweep_err_at(x, seed, "sweep.seed: expected a non-negative integer");
            }
        }
    } else {
        if (trials) sweep_err_at(x, trials, "sweep.trials applies only to method: random or tpe");
        if (seed) sweep_err_at(x, seed, "sweep.seed applies only to method: random or tpe");
    }
    s->parallel = 4;
    s->startup_trials = 10;
    if (s->method == SWEEP_TPE) {
        if (par && sweep_get_int(x, par, "sweep.parallel", 1, 10000, &n) == 0) s->parallel = (int)n;
        if (startup &&
            sweep_get_int(x, startup, "sweep.startup_trials", 1, SWEEP_MAX_TRIALS, &n) == 0)
            s->startup_trials = (int)n;
    } else {
        if (par) sweep_err_at(x, par, "sweep.parallel applies only to method: tpe");
        if (startup) sweep_err_at(x, startup, "sweep.startup_trials applies only to method: tpe");
    }
    if (!params) {
        sweep_err_at(x, v, "sweep: 'parameters' is required (a mapping of config keys to values)");
        return;
    }
    s->params_line = (int)params->start_mark.line + 1;
    s->params_col = (int)params->start_mark.column + 1;
    if (params->type != YAML_MAPPING_NODE) {
        sweep_err_at(x, params, "sweep.parameters: expected a mapping of config keys, got %s",
                     sweep_kind_name(params));
        return;
    }
    size_t np = (size_t)(params->data.mapping.pairs.top - params->data.mapping.pairs.start);
    if (np == 0) {
        sweep_err_at(x, params,
                     "sweep.parameters is empty: an empty sweep has nothing to run; give at "
                     "least one parameter (or drop sweep: for a single run)");
        return;
    }
    if (np > SWEEP_MAX_PARAMS) {
        sweep_err_at(x, params, "sweep.parameters: %zu parameters; at most %d", np,
                     SWEEP_MAX_PARAMS);
        return;
    }
    sweep_check_keys(x, params);
    s->params = calloc(np, sizeof *s->params);
    if (!s->params) {
        sweep_err_at(x, params, "out of memory");
        return;
    }
    for (yaml_node_pair_t *p = params->data.mapping.pairs.start; p < params->data.mapping.pairs.top;
         p++) {
        if (sweep_key_is_dup(x, params, p)) continue;
        sweep_param *sp = &s->params[s->n_params++];
        parse_param(x, node(x, p->key), node(x, p->value), sp);
    }
    if (s->method == SWEEP_GRID) grid_count(x, v);
}
