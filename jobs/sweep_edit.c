/* sweep_edit.c — the grid of a submitted sweep as it grows by edits
 * (bfctl edit JOB --add KEY=V1,V2): values appended to an axis, each checked
 * through the config schema as a listed value is, and the trials that only
 * the new values make, in cartesian order. Knows nothing of the store: the
 * values a job's earlier edits added come back through sweep_add_values. */
#include "jobs/sweep.h"
#include "common/errbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sweep_axis(const sweep_spec *s, const char *key, char *err, size_t errlen) {
    char axes[512] = "";
    size_t w = 0;
    for (int p = 0; p < s->n_params; p++) {
        if (!strcmp(s->params[p].key, key)) return p;
        if (w < sizeof axes)
            w += (size_t)snprintf(axes + w, sizeof axes - w, "%s%s", w ? ", " : "",
                                  s->params[p].key);
    }
    return bf_fail(err, errlen, "'%s' is not an axis of this sweep (its axes: %s)", key,
                   s->n_params ? axes : "none");
}

int sweep_value_canon(const sweep_spec *s, const char *key, const char *text, char *out,
                      size_t outlen, char *err, size_t errlen) {
    bf_config tmp = s->base;
    char where[200];
    snprintf(where, sizeof where, "%s=%.40s", key, text);
    if (cfg_set_value(&tmp, key, text, where, err, errlen) < 0) return -1;
    cfg_format_value(&tmp, key, out, outlen);
    return 0;
}

int sweep_add_value(sweep_spec *s, int p, const char *text, char *err, size_t errlen) {
    sweep_param *sp = &s->params[p];
    if (s->method != SWEEP_GRID || sp->dist != SWEEP_DIST_VALUES)
        return bf_fail(err, errlen, "values can be added to a grid sweep's listed axis only");
    bf_config tmp = s->base;
    char where[200], canon[1024];
    snprintf(where, sizeof where, "%s=%.40s", sp->key, text);
    if (cfg_set_value(&tmp, sp->key, text, where, err, errlen) < 0) return -1;
    cfg_format_value(&tmp, sp->key, canon, sizeof canon);
    for (int i = 0; i < sp->n_values; i++)
        if (!strcmp(sp->value_text[i], canon)) return 1;
    if (s->n_trials / sp->n_values * (sp->n_values + 1) > SWEEP_MAX_TRIALS)
        return bf_fail(err, errlen, "%s: one more value makes more than %d trials", sp->key,
                       SWEEP_MAX_TRIALS);
    bf_config *vc = realloc(sp->value_cfg, (size_t)(sp->n_values + 1) * sizeof *vc);
    if (!vc) return bf_fail(err, errlen, "out of memory");
    sp->value_cfg = vc;
    char **vt = realloc(sp->value_text, (size_t)(sp->n_values + 1) * sizeof *vt);
    if (!vt) return bf_fail(err, errlen, "out of memory");
    sp->value_text = vt;
    if (!(vt[sp->n_values] = strdup(canon))) return bf_fail(err, errlen, "out of memory");
    vc[sp->n_values] = tmp;
    s->n_trials = s->n_trials / sp->n_values * (sp->n_values + 1);
    sp->n_values++;
    return 0;
}

int sweep_split_values(const char *list, char out[][SWEEP_VALUE_MAX], int max, char *err,
                       size_t errlen) {
    int n = 0, depth = 0;
    char quote = 0;
    size_t w = 0;
    for (const char *c = list;; c++) {
        if (!*c || (*c == ',' && !depth && !quote)) {
            while (w && (out[n][w - 1] == ' ' || out[n][w - 1] == '\t')) w--;
            out[n][w] = '\0';
            if (!w) return bf_fail(err, errlen, "'%.80s': an empty value in the list", list);
            n++;
            w = 0;
            if (!*c) return n;
            if (n == max) return bf_fail(err, errlen, "more than %d values in one edit", max);
            continue;
        }
        if (quote) {
            if (*c == quote) quote = 0;
        } else if (*c == '"' || *c == '\'') {
            quote = *c;
        } else if (*c == '[' || *c == '{') {
            depth++;
        } else if ((*c == ']' || *c == '}') && depth > 0) {
            depth--;
        }
        if (!w && (*c == ' ' || *c == '\t')) continue;
        if (w + 1 >= SWEEP_VALUE_MAX)
            return bf_fail(err, errlen, "a value longer than %d bytes", SWEEP_VALUE_MAX - 1);
        out[n][w++] = *c;
    }
}

int sweep_expand_added(const sweep_spec *s, int p, int first_new, long long first_index,
                       sweep_trial_fn fn, void *ud, char *err, size_t errlen) {
    double x[SWEEP_MAX_PARAMS];
    long long n = s->n_trials / s->params[p].n_values * (s->params[p].n_values - first_new);
    long long idx = first_index;
    for (long long i = 0; i < n; i++) {
        /* mixed-radix digits of i, the first axis most significant, axis p
         * counting over its new values only */
        long long rest = i;
        for (int q = s->n_params - 1; q >= 0; q--) {
            long long c = q == p ? s->params[q].n_values - first_new : s->params[q].n_values;
            x[q] = (double)(rest % c + (q == p ? first_new : 0));
            rest /= c;
        }
        int rc = sweep_trial_at(s, idx++, x, fn, ud, err, errlen);
        if (rc) return rc;
    }
    return 0;
}
