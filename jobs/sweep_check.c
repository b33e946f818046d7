/* sweep_check.c — the checks that need whole trials: every trial's config
 * through cfg_validate, the job's metric (and early_stop's) written by the
 * trial's pipeline, a swept key that changes nothing; each distinct message
 * once, pointed at the key it names and counted over the trials it hits.
 * It runs only once every key has parsed, and changes nothing in the spec. */
#include "jobs/sweep_priv.h"

#include "common/pipeline_decl.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DISTINCT 20

typedef struct vstate {
    sweep_ctx *x;
    char *msg[MAX_DISTINCT];
    long long first[MAX_DISTINCT], count[MAX_DISTINCT];
    char *first_params[MAX_DISTINCT];
    int n;
    long long n_bad;
    unsigned char *effective; /* per swept key: it changes some trial's run */
} vstate;

/* The node a validation message points at: the swept key it names, or that
 * key in base / top level, or the root. */
static void msg_position(sweep_ctx *x, const char *msg, size_t *line, size_t *col) {
    char key[128];
    size_t i = 0;
    while (msg[i] && msg[i] != ' ' && i + 1 < sizeof key) key[i] = msg[i], i++;
    key[i] = '\0';
    *line = x->root ? x->root->start_mark.line + 1 : 1;
    *col = x->root ? x->root->start_mark.column + 1 : 1;
    /* a swept key the message names is the likeliest culprit */
    for (int p = 0; p < x->spec->n_params; p++) {
        const char *hit = strstr(msg, x->spec->params[p].key);
        size_t kl = strlen(x->spec->params[p].key);
        if (hit && !(isalnum((unsigned char)hit[kl]) || hit[kl] == '_' || hit[kl] == '.')) {
            *line = (size_t)x->spec->params[p].line;
            *col = (size_t)x->spec->params[p].col;
            return;
        }
    }
    int oi = -1;
    if (strcmp(key, "metric.name") == 0) oi = 0;
    if (sscanf(key, "metric[%d].name", &oi) == 1 && (oi < 0 || oi >= SWEEP_MAX_OBJECTIVES)) oi = -1;
    if (oi >= 0 && x->metric_line[oi]) {
        *line = x->metric_line[oi], *col = x->metric_col[oi];
        return;
    }
    if (strcmp(key, "early_stop.metric") == 0 && x->es_line) {
        *line = x->es_line, *col = x->es_col;
        return;
    }
    if (!cfg_key_known(key)) return;
    for (int p = 0; p < x->spec->n_params; p++)
        if (strcmp(x->spec->params[p].key, key) == 0) {
            *line = (size_t)x->spec->params[p].line;
            *col = (size_t)x->spec->params[p].col;
            return;
        }
    yaml_node_t *k = NULL;
    if (sweep_find_path(x, x->root, key, &k) ||
        (x->base_node && sweep_find_path(x, x->base_node, key, &k))) {
        *line = k->start_mark.line + 1;
        *col = k->start_mark.column + 1;
    }
}

/* 0 when the swept key changes nothing in trial config c: a key its
 * pipeline never reads (pipeline_decl.c), or a head budget key with
 * budget.enabled false. */
static int key_has_effect(const char *key, const bf_config *c) {
    if (!pipeline_reads_key(c->pipeline, key)) return 0;
    if (strncmp(key, "budget.", 7) != 0) return 1;
    return strcmp(key, "budget.enabled") == 0 || c->budget.enabled;
}

static int validate_trial(void *ud, const sweep_trial *t) {
    vstate *v = ud;
    sweep_spec *s = v->x->spec;
    char err[4096];
    for (int p = 0; v->effective && p < s->n_params; p++)
        if (key_has_effect(s->params[p].key, t->config)) v->effective[p] = 1;
    int bad = cfg_validate(t->config, err, sizeof err) != 0;
    /* every objective, and early_stop's metric, must be one the trial writes */
    const char *mnames[SWEEP_MAX_OBJECTIVES + 1];
    char mkeys[SWEEP_MAX_OBJECTIVES + 1][32];
    int nm = s->n_objectives > 0 ? s->n_objectives : 1;
    for (int i = 0; i < nm; i++) {
        mnames[i] = s->n_objectives > 0 ? s->objectives[i].name : s->metric_name;
        if (nm == 1)
            snprintf(mkeys[i], sizeof mkeys[i], "metric.name");
        else
            snprintf(mkeys[i], sizeof mkeys[i], "metric[%d].name", i);
    }
    mnames[nm] = s->early_stop.metric;
    snprintf(mkeys[nm], sizeof mkeys[nm], "early_stop.metric");
    for (int i = 0; i <= nm; i++) {
        char list[1024];
        if (!mnames[i][0] || cfg_metric_produced(t->config, mnames[i], list, sizeof list)) continue;
        int said = 0; /* early_stop.metric defaults to an objective: said once */
        for (int j = 0; i == nm && j < nm; j++) said |= strcmp(mnames[i], mnames[j]) == 0;
        if (said) continue;
        size_t l = bad ? strlen(err) : 0;
        snprintf(err + l, sizeof err - l,
                 "%s%s '%s' is never written by pipeline %s%s; it writes: %s", bad ? "\n" : "",
                 mkeys[i], mnames[i], t->config->pipeline,
                 strcmp(t->config->pipeline, "budgetformer") == 0 && !t->config->budget.enabled
                     ? " with budget.enabled false"
                     : "",
                 list);
        bad = 1;
    }
    /* MO-ASHA judges every objective at each rung: each must be written
     * while the trial trains */
    int rungs =
        s->early_stop.method == SWEEP_STOP_ASHA || s->early_stop.method == SWEEP_STOP_HYPERBAND;
    for (int i = 0; rungs && s->n_objectives > 1 && i < nm; i++) {
        if (!cfg_metric_produced(t->config, mnames[i], NULL, 0) ||
            cfg_metric_during_training(t->config, mnames[i], NULL, 0))
            continue;
        char list[1024];
        cfg_metric_during_training(t->config, NULL, list, sizeof list);
        size_t l = bad ? strlen(err) : 0;
        snprintf(err + l, sizeof err - l,
                 "%s%s '%s' is written only when training ends, so early_stop %s, which judges "
                 "every objective at each rung, can never judge it; metrics written during "
                 "training: %s",
                 bad ? "\n" : "", mkeys[i], mnames[i], sweep_stop_name(s->early_stop.method),
                 list[0] ? list : "none");
        bad = 1;
    }
    /* early stopping judges points written while the trial trains */
    if (s->early_stop.method != SWEEP_STOP_NONE && s->early_stop.metric[0] &&
        !(rungs && s->n_objectives > 1) &&
        cfg_metric_produced(t->config, s->early_stop.metric, NULL, 0) &&
        !cfg_metric_during_training(t->config, s->early_stop.metric, NULL, 0)) {
        char list[1024];
        cfg_metric_during_training(t->config, NULL, list, sizeof list);
        size_t l = bad ? strlen(err) : 0;
        snprintf(err + l, sizeof err - l,
                 "%searly_stop.metric '%s' is written only when training ends (train.eval_every "
                 "%d, train.steps %d), so early_stop %s can never judge it; metrics written "
                 "during training: %s",
                 bad ? "\n" : "", s->early_stop.metric, t->config->train.eval_every,
                 t->config->train.steps, sweep_stop_name(s->early_stop.method),
                 list[0] ? list : "none");
        bad = 1;
    }
    if (!bad) return 0;
    v->n_bad++;
    /* one message per cross-key problem (one per line from cfg_validate) */
    char *save = NULL;
    for (char *m = strtok_r(err, "\n", &save); m; m = strtok_r(NULL, "\n", &save)) {
        while (*m == ' ') m++;
        int j;
        for (j = 0; j < v->n; j++)
            if (strcmp(v->msg[j], m) == 0) break;
        if (j == v->n) {
            if (v->n == MAX_DISTINCT) continue;
            v->msg[j] = strdup(m);
            v->first[j] = t->index;
            v->count[j] = 0;
            v->first_params[j] = strdup(t->params);
            if (!v->msg[j] || !v->first_params[j]) continue;
            v->n++;
        }
        v->count[j]++;
    }
    return 0;
}

void sweep_check_trials(sweep_ctx *x) {
    sweep_spec *s = x->spec;
    vstate v;
    memset(&v, 0, sizeof v);
    v.x = x;
    char err[256];
    long long n = s->is_sweep ? s->n_trials : 1;
    v.effective = s->n_params ? calloc((size_t)s->n_params, 1) : NULL;
    sweep_expand_each(s, 0, validate_trial, &v, err, sizeof err);
    for (int p = 0; v.effective && p < s->n_params; p++) {
        if (v.effective[p]) continue;
        char full[SWEEP_MSG_MAX + 600];
        const char *key = s->params[p].key;
        if (!pipeline_reads_key(s->base.pipeline, key))
            snprintf(full, sizeof full,
                     "%s:%d:%d: %s is swept but changes nothing: pipeline %s never reads it%s; "
                     "every value trains the same run (drop it)",
                     x->file, s->params[p].line, s->params[p].col, key, s->base.pipeline,
                     strncmp(key, "budget.", 7) == 0 ? " (this pipeline has no head budget)" : "");
        else
            snprintf(full, sizeof full,
                     "%s:%d:%d: %s is swept but changes nothing: budget.enabled is false; every "
                     "value trains the same run (sweep it with budget.enabled: true, or drop it)",
                     x->file, s->params[p].line, s->params[p].col, key);
        sweep_errs_add(x->errs, full);
    }
    free(v.effective);
    for (int j = 0; j < v.n; j++) {
        size_t line, col;
        msg_position(x, v.msg[j], &line, &col);
        char full[SWEEP_MSG_MAX + 600];
        if (v.count[j] == n || !s->is_sweep) {
            snprintf(full, sizeof full, "%s:%zu:%zu: %s", x->file, line, col, v.msg[j]);
        } else {
            /* name the first failing trial by its swept values, one line */
            char params[512];
            snprintf(params, sizeof params, "%s", v.first_params[j]);
            size_t pl = strlen(params);
            if (pl && params[pl - 1] == '\n') params[--pl] = '\0';
            for (char *c = params; *c; c++)
                if (*c == '\n') *c = ',';
            snprintf(full, sizeof full,
                     "%s:%zu:%zu: %s (in %lld of %lld trials; first: trial %lld, %s)", x->file,
                     line, col, v.msg[j], v.count[j], n, v.first[j], params);
        }
        sweep_errs_add(x->errs, full);
        free(v.msg[j]);
        free(v.first_params[j]);
    }
}
