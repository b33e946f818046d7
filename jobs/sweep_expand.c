/* sweep_expand.c — a validated spec into its trials: the grid in cartesian
 * order, random draws reproducible from the seed (Philox stream p, index i),
 * and trials built from explicit values (how tpe's proposals become
 * trials); each with its params text, params JSON, config dump and hash. It
 * reads no YAML and reports no position: a spec reaches it parsed (for the
 * per-trial checks) or validated, and its only error is running out of
 * memory. */
#include "jobs/sweep_priv.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk_rng.h"

typedef struct trial_buf {
    bf_config cfg;
    char *params, *json, *dump;
    size_t params_cap, json_cap, dump_cap;
} trial_buf;

static int buf_reserve(char **b, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t n = need * 2;
    char *nb = realloc(*b, n);
    if (!nb) return -1;
    *b = nb;
    *cap = n;
    return 0;
}

static int buf_append(char **b, size_t *cap, size_t *len, const char *s) {
    size_t l = strlen(s);
    if (buf_reserve(b, cap, *len + l + 1) < 0) return -1;
    memcpy(*b + *len, s, l + 1);
    *len += l;
    return 0;
}

/* JSON text of one key's value in c (numbers as numbers, names as strings). */
static void value_json(const bf_config *c, const cfg_field *f, char *out, size_t n) {
    char text[1024];
    cfg_format_value(c, f->key, text, sizeof text);
    switch (f->type) {
    case CFG_T_INT:
    case CFG_T_U64:
    case CFG_T_FLOAT:
    case CFG_T_BOOL:
    case CFG_T_PAIR:
        snprintf(out, n, "%s", text);
        return;
    case CFG_T_LAYERS:
        if (text[0] == '[')
            snprintf(out, n, "%s", text);
        else
            snprintf(out, n, "\"%s\"", text);
        return;
    case CFG_T_SCHED: {
        const cfg_schedule *s = (const cfg_schedule *)((const char *)c + f->offset);
        char a[48], b[48];
        /* reuse the canonical number text of start/end */
        char k[16];
        if (sscanf(text, "{schedule: %15[a-z], start: %47[^,], end: %47[^}]}", k, a, b) == 3)
            snprintf(out, n, "{\"schedule\": \"%s\", \"start\": %s, \"end\": %s}", k, a, b);
        else
            snprintf(out, n, "{\"schedule\": \"%s\", \"start\": %g, \"end\": %g}",
                     cfg_sched_name(s->kind), s->start, s->end);
        return;
    }
    case CFG_T_ENUM:
    case CFG_T_STR: {
        json_t *js = json_string((const char *)c + f->offset);
        char *d = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
        snprintf(out, n, "%s", d ? d : "\"\"");
        free(d);
        json_decref(js);
        return;
    }
    }
}

static void set_drawn(bf_config *c, const cfg_field *f, double v) {
    char *b = (char *)c + f->offset;
    if (f->type == CFG_T_FLOAT)
        *(float *)b = (float)v;
    else if (f->type == CFG_T_INT)
        *(int *)b = (int)v;
    else if (f->type == CFG_T_U64)
        *(uint64_t *)b = (uint64_t)v;
}

/* Builds trial i into tb (config, params text, params JSON); x, when not
 * NULL, gives every parameter's value (see sweep_trial_at). */
static int build_trial(const sweep_spec *s, long long i, const double *x, trial_buf *tb) {
    tb->cfg = s->base;
    size_t pl = 0, jl = 0;
    if (buf_reserve(&tb->params, &tb->params_cap, 1) < 0 ||
        buf_reserve(&tb->json, &tb->json_cap, 3) < 0)
        return -1;
    tb->params[0] = '\0';
    strcpy(tb->json, "{");
    jl = 1;
    long long rest = i;
    /* grid: mixed-radix digits of i, first parameter most significant */
    long long digit[SWEEP_MAX_PARAMS];
    if (s->method == SWEEP_GRID) {
        for (int p = s->n_params - 1; p >= 0; p--) {
            long long c = s->params[p].n_values;
            digit[p] = rest % c;
            rest /= c;
        }
    }
    for (int p = 0; p < s->n_params; p++) {
        const sweep_param *sp = &s->params[p];
        if (x && sp->dist == SWEEP_DIST_VALUES) {
            long long k = (long long)x[p];
            if (k < 0) k = 0;
            if (k >= sp->n_values) k = sp->n_values - 1;
            cfg_copy_key(&tb->cfg, &sp->value_cfg[k], sp->field, CFG_LEVEL_PARAM);
        } else if (x) {
            double v = x[p];
            if (sp->dist == SWEEP_DIST_INT_UNIFORM) v = floor(v + 0.5);
            if (!(v >= sp->min)) v = sp->min; /* also NaN */
            if (v > sp->max) v = sp->max;
            set_drawn(&tb->cfg, sp->field, v);
        } else if (s->method == SWEEP_GRID || sp->dist == SWEEP_DIST_VALUES) {
            long long k;
            if (s->method == SWEEP_GRID) {
                k = digit[p];
            } else {
                float u = bk_rng_uniform_at(s->seed, (uint64_t)p, (uint64_t)i);
                k = (long long)(u * (float)sp->n_values);
                if (k >= sp->n_values) k = sp->n_values - 1;
            }
            cfg_copy_key(&tb->cfg, &sp->value_cfg[k], sp->field, CFG_LEVEL_PARAM);
        } else {
            double u = bk_rng_uniform_at(s->seed, (uint64_t)p, (uint64_t)i), v;
            if (sp->dist == SWEEP_DIST_LOG_UNIFORM) {
                v = exp(log(sp->min) + u * (log(sp->max) - log(sp->min)));
            } else if (sp->dist == SWEEP_DIST_INT_UNIFORM) {
                v = sp->min + floor(u * (sp->max - sp->min + 1.0));
                if (v > sp->max) v = sp->max;
            } else {
                v = sp->min + u * (sp->max - sp->min);
            }
            if (v < sp->min) v = sp->min;
            if (v > sp->max) v = sp->max;
            set_drawn(&tb->cfg, sp->field, v);
        }
        char text[1100], js[1400], line[1600];
        cfg_format_value(&tb->cfg, sp->key, text, sizeof text);
        snprintf(line, sizeof line, "%s: %s\n", sp->key, text);
        if (buf_append(&tb->params, &tb->params_cap, &pl, line) < 0) return -1;
        value_json(&tb->cfg, sp->field, js, sizeof js);
        snprintf(line, sizeof line, "%s\"%s\": %s", p ? ", " : "", sp->key, js);
        if (buf_append(&tb->json, &tb->json_cap, &jl, line) < 0) return -1;
    }
    if (buf_append(&tb->json, &tb->json_cap, &jl, "}") < 0) return -1;
    return 0;
}

/* Calls fn with the trial in tb (built) as index i; with_text = 0 skips
 * the dump and hash (validation needs only the config). */
static int emit_trial(trial_buf *tb, long long i, int with_text, sweep_trial_fn fn, void *ud,
                      char *err, size_t errlen) {
    sweep_trial t;
    memset(&t, 0, sizeof t);
    if (with_text) {
        /* one dump per trial (into the buffer the last trial grew), and
         * the hash from it: a dump is most of a trial's cost */
        size_t need = cfg_dump(&tb->cfg, tb->dump, tb->dump ? tb->dump_cap : 0);
        if (!tb->dump || need >= tb->dump_cap) {
            if (buf_reserve(&tb->dump, &tb->dump_cap, need + 1) < 0) {
                snprintf(err, errlen, "sweep_expand: out of memory");
                return -1;
            }
            cfg_dump(&tb->cfg, tb->dump, need + 1);
        }
        cfg_hash_text(tb->dump, need, t.hash);
    }
    t.index = i;
    t.config = &tb->cfg;
    t.params = tb->params;
    t.params_json = tb->json;
    t.config_text = tb->dump ? tb->dump : "";
    return fn(ud, &t);
}

static void trial_buf_free(trial_buf *tb) {
    free(tb->params);
    free(tb->json);
    free(tb->dump);
}

int sweep_expand_each(const sweep_spec *s, int with_text, sweep_trial_fn fn, void *ud, char *err,
                      size_t errlen) {
    trial_buf tb;
    memset(&tb, 0, sizeof tb);
    int rc = 0;
    long long n = s->is_sweep ? s->n_trials : 1;
    for (long long i = 0; i < n && rc == 0; i++) {
        if (build_trial(s, i, NULL, &tb) < 0) {
            snprintf(err, errlen, "sweep_expand: out of memory");
            rc = -1;
            break;
        }
        rc = emit_trial(&tb, i, with_text, fn, ud, err, errlen);
    }
    trial_buf_free(&tb);
    return rc;
}

int sweep_trial_at(const sweep_spec *s, long long index, const double *x, sweep_trial_fn fn,
                   void *ud, char *err, size_t errlen) {
    trial_buf tb;
    memset(&tb, 0, sizeof tb);
    int rc = build_trial(s, index, x, &tb);
    if (rc < 0)
        snprintf(err, errlen, "sweep_trial_at: out of memory");
    else
        rc = emit_trial(&tb, index, 1, fn, ud, err, errlen);
    trial_buf_free(&tb);
    return rc;
}

int sweep_expand(const sweep_spec *s, sweep_trial_fn fn, void *ud, char *err, size_t errlen) {
    return sweep_expand_each(s, 1, fn, ud, err, errlen);
}
