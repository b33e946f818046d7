/* sched_stop.c — early-stopping verdicts (ASHA rungs, the median rule, a
 * threshold) and the JSON a job's early_stop is kept in, as pure functions
 * of the values the caller read (sched_stop.h). It does no I/O: it never
 * reads the store, records a decision or stops a trial; bfd does those
 * (daemon/adaptive.c), in that order. */
#include "jobs/sched_stop.h"
#include "common/errbuf.h"
#include "jobs/pareto.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sched_stop_json(const sweep_spec *s, char *buf, size_t len) {
    int n =
        snprintf(buf, len,
                 "{\"method\": \"%s\", \"metric\": \"%s\", \"min_steps\": %d, \"threshold\": "
                 "%.17g, \"reduction_factor\": %.17g, \"max_steps\": %lld, \"min_trials\": %d}",
                 sweep_stop_name(s->early_stop.method), s->early_stop.metric,
                 s->early_stop.min_steps, s->early_stop.threshold, s->early_stop.reduction_factor,
                 s->early_stop.max_steps, s->early_stop.min_trials);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

int sched_stop_parse(const char *json, int maximize, sched_stop *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->maximize = maximize;
    out->eta = 3;
    out->min_trials = 3;
    json_error_t je;
    json_t *o = json_loads(json ? json : "{}", 0, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return bf_fail(err, errlen, "early_stop: not a JSON object: %s", je.text);
    }
    const char *m = json_string_value(json_object_get(o, "method"));
    static const char *const names[] = {"none", "median", "threshold", "asha", "hyperband"};
    int found = 0;
    for (int i = 0; i <= SWEEP_STOP_HYPERBAND; i++)
        if (m && strcmp(m, names[i]) == 0) out->method = (sweep_stop_method)i, found = 1;
    if (m && !found) {
        bf_fail(err, errlen, "early_stop: unknown method '%s'", m);
        json_decref(o);
        return -1;
    }
    const char *metric = json_string_value(json_object_get(o, "metric"));
    snprintf(out->metric, sizeof out->metric, "%s", metric ? metric : "");
    json_t *v;
    if ((v = json_object_get(o, "min_steps")) && json_is_integer(v))
        out->min_steps = json_integer_value(v);
    if ((v = json_object_get(o, "max_steps")) && json_is_integer(v))
        out->max_steps = json_integer_value(v);
    if ((v = json_object_get(o, "min_trials")) && json_is_integer(v) && json_integer_value(v) > 0)
        out->min_trials = (int)json_integer_value(v);
    if ((v = json_object_get(o, "threshold")) && json_is_number(v))
        out->threshold = json_number_value(v);
    if ((v = json_object_get(o, "reduction_factor")) && json_is_number(v) &&
        json_number_value(v) > 1)
        out->eta = json_number_value(v);
    json_decref(o);
    if (out->method == SWEEP_STOP_ASHA && (out->min_steps < 1 || out->max_steps <= out->min_steps))
        return bf_fail(err, errlen,
                       "early_stop: asha needs 1 <= min_steps < max_steps, got %lld, %lld",
                       out->min_steps, out->max_steps);
    if (out->method == SWEEP_STOP_HYPERBAND &&
        sched_hyperband_s_max(out->max_steps, out->min_steps, out->eta) < 0)
        return bf_fail(err, errlen,
                       "early_stop: hyperband needs 1 <= min_steps < max_steps and "
                       "reduction_factor >= 2, got %lld, %lld, %g",
                       out->min_steps, out->max_steps, out->eta);
    return 0;
}

long long sched_asha_rung_step(const sched_stop *c, int rung) {
    double r0 = c->rung0 > 0 ? c->rung0 : (double)c->min_steps;
    return llround(r0 * pow(c->eta, rung - 1));
}

int sched_asha_n_rungs(const sched_stop *c) {
    if ((c->method != SWEEP_STOP_ASHA && c->method != SWEEP_STOP_HYPERBAND) || c->min_steps < 1)
        return 0;
    int k = 0;
    while (k < SCHED_MAX_RUNGS && sched_asha_rung_step(c, k + 1) < c->max_steps) k++;
    return k;
}

int sched_hyperband_s_max(long long R, long long r_min, double eta) {
    if (r_min < 1 || R <= r_min || !(eta >= 2)) return -1;
    /* the largest s with r_min * eta^s <= R, by multiplication (a log
     * rounds 81 / 1 at eta 3 to 3.9999...) */
    int s = 0;
    double b = (double)r_min;
    while (b * eta <= (double)R * (1 + 1e-12)) b *= eta, s++;
    return s;
}

int sched_hyperband_brackets(long long R, long long r_min, double eta, sched_hb_bracket *out,
                             int cap) {
    int smax = sched_hyperband_s_max(R, r_min, eta);
    if (smax < 0 || smax + 1 > cap || smax + 1 > SCHED_MAX_RUNGS) return -1;
    for (int s = smax; s >= 0; s--) {
        sched_hb_bracket *b = &out[smax - s];
        memset(b, 0, sizeof *b);
        b->s = s;
        double es = pow(eta, s);
        /* ceil of a quotient that is whole up to rounding stays whole */
        b->n = (long long)ceil((double)(smax + 1) / (s + 1) * es * (1 - 1e-12));
        b->r = (double)R / es;
        b->n_rungs = s + 1;
        for (int i = 0; i <= s; i++) b->rungs[i] = llround(b->r * pow(eta, i));
    }
    return smax + 1;
}

/* Trials placed in the first k passes of the round-robin: each bracket takes
 * one per pass until it holds its n_s, so min(n_s, k) each. */
static long long placed_in(const sched_hb_bracket *b, int nb, long long k) {
    long long t = 0;
    for (int i = 0; i < nb; i++) t += b[i].n < k ? b[i].n : k;
    return t;
}

int sched_hyperband_bracket_of(const sched_stop *c, long long index, long long *round,
                               sched_stop *out) {
    *out = *c;
    if (round) *round = 0;
    sched_hb_bracket b[SCHED_MAX_RUNGS];
    int nb = sched_hyperband_brackets(c->max_steps, c->min_steps, c->eta, b, SCHED_MAX_RUNGS);
    if (nb < 0) return -1;
    long long total = placed_in(b, nb, LLONG_MAX), p = index < 0 ? 0 : index;
    if (round) *round = p / total;
    p %= total;
    /* the pass k that holds position p: the largest k with placed_in(k) <= p
     * (bisection: n_s reaches 2^19 and more) */
    long long lo = 0, hi = b[0].n; /* b[0], s = s_max, has the largest n_s */
    while (lo < hi) {
        long long mid = lo + (hi - lo + 1) / 2;
        if (placed_in(b, nb, mid) <= p)
            lo = mid;
        else
            hi = mid - 1;
    }
    long long q = p - placed_in(b, nb, lo); /* among the brackets not yet full in pass lo */
    int s = -1;
    for (int i = 0; i < nb && s < 0; i++)
        if (b[i].n > lo && q-- == 0) s = b[i].s;
    if (s < 0) return -1; /* not reached: p < total */
    out->rung0 = (double)c->max_steps / pow(c->eta, s);
    return s;
}

int sched_better(const sched_stop *c, double a, double b) { return c->maximize ? a > b : a < b; }

static const char *worse_word(const sched_stop *c) { return c->maximize ? "below" : "above"; }

static int cmp_best_first_max(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x > y ? -1 : x < y ? 1 : 0;
}
static int cmp_best_first_min(const void *a, const void *b) { return -cmp_best_first_max(a, b); }

void sched_asha_judge(const sched_stop *c, int rung, long long at_step, double value,
                      const double *others, size_t n_others, sched_verdict *v) {
    memset(v, 0, sizeof *v);
    size_t n = n_others + 1;
    double stack[256], *all = n <= 256 ? stack : malloc(n * sizeof *all);
    v->n = (int)n;
    v->keep = (int)floor((double)n / c->eta);
    if (v->keep < 1) v->keep = 1;
    if (!all) { /* out of memory: never stop on a guess */
        v->cutoff = NAN;
        snprintf(v->reason, sizeof v->reason, "asha: out of memory; continues");
        return;
    }
    for (size_t i = 0; i < n_others; i++) all[i] = others[i];
    all[n_others] = value;
    qsort(all, n, sizeof *all, c->maximize ? cmp_best_first_max : cmp_best_first_min);
    v->cutoff = all[v->keep - 1];
    v->stop = sched_better(c, v->cutoff, value);
    char eta[32];
    snprintf(eta, sizeof eta, "%g", c->eta);
    snprintf(v->reason, sizeof v->reason,
             "asha: %s %.4g at step %lld is %s the rung-%d cutoff %.4g (top 1/%s of %zu trial%s)",
             c->metric, value, at_step, v->stop ? worse_word(c) : "within", rung, v->cutoff, eta, n,
             n == 1 ? "" : "s");
    if (all != stack) free(all);
}

void sched_mo_asha_judge(const sched_stop *c, const sweep_objective *obj, int m, int rung,
                         long long at_step, const double *value, const double *others,
                         size_t n_others, sched_verdict *v) {
    memset(v, 0, sizeof *v);
    v->cutoff = NAN;
    size_t n = n_others + 1;
    v->n = (int)n;
    v->keep = (int)floor((double)n / c->eta);
    if (v->keep < 1) v->keep = 1;
    int maxi[PARETO_MAX_OBJECTIVES];
    if (m > PARETO_MAX_OBJECTIVES) m = PARETO_MAX_OBJECTIVES;
    for (int k = 0; k < m; k++) maxi[k] = obj[k].maximize;
    double *all = malloc(n * (size_t)m * sizeof *all);
    size_t *order = malloc(n * sizeof *order);
    int *rank = malloc(n * sizeof *rank);
    if (!all || !order || !rank) { /* out of memory: never stop on a guess */
        free(all), free(order), free(rank);
        snprintf(v->reason, sizeof v->reason, "mo-asha: out of memory; continues");
        return;
    }
    if (n_others) memcpy(all, others, n_others * (size_t)m * sizeof *all);
    memcpy(all + n_others * (size_t)m, value, (size_t)m * sizeof *all);
    size_t place = n;
    if (pareto_order(all, n, m, maxi, order) == 0 && pareto_rank(all, n, m, maxi, rank) >= 0)
        for (size_t i = 0; i < n; i++)
            if (order[i] == n_others) place = i;
    if (place == n) { /* out of memory inside: continues */
        snprintf(v->reason, sizeof v->reason, "mo-asha: out of memory; continues");
    } else {
        v->stop = place >= (size_t)v->keep;
        char vals[200];
        size_t w = 0;
        for (int k = 0; k < m && w < sizeof vals; k++)
            w += (size_t)snprintf(vals + w, sizeof vals - w, "%s%s %.4g", k ? ", " : "",
                                  obj[k].name, value[k]);
        char eta[32];
        snprintf(eta, sizeof eta, "%g", c->eta);
        snprintf(v->reason, sizeof v->reason,
                 "mo-asha: %.150s at step %lld is %s the rung-%d top %d of %zu (front %d, "
                 "place %zu by non-dominated sorting and epsilon-net; 1/%.8s)",
                 vals, at_step, v->stop ? "outside" : "within", rung, v->keep, n, rank[n_others],
                 place + 1, eta);
    }
    free(all), free(order), free(rank);
}

int sched_running_mean(const int64_t *steps, const double *values, size_t n, long long step,
                       double *mean) {
    if (n == 0 || steps[n - 1] < step) return 0;
    double sum = 0;
    size_t k = 0;
    for (size_t i = 0; i < n && steps[i] <= step; i++) sum += values[i], k++;
    if (k == 0) return 0; /* its first point is past step: nothing to average yet */
    *mean = sum / (double)k;
    return 1;
}

void sched_median_judge(const sched_stop *c, long long step, double best, const double *others,
                        size_t n_others, sched_verdict *v) {
    memset(v, 0, sizeof *v);
    v->n = (int)n_others;
    v->cutoff = NAN;
    if (step < c->min_steps || n_others < (size_t)c->min_trials || n_others == 0) {
        snprintf(v->reason, sizeof v->reason, "median: %zu other trial%s at step %lld (%d needed)",
                 n_others, n_others == 1 ? "" : "s", step, c->min_trials);
        return;
    }
    double stack[256], *s = n_others <= 256 ? stack : malloc(n_others * sizeof *s);
    if (!s) {
        snprintf(v->reason, sizeof v->reason, "median: out of memory; continues");
        return;
    }
    memcpy(s, others, n_others * sizeof *s);
    qsort(s, n_others, sizeof *s, cmp_best_first_max);
    size_t h = n_others / 2;
    v->cutoff = n_others % 2 ? s[h] : 0.5 * (s[h - 1] + s[h]);
    if (s != stack) free(s);
    v->stop = sched_better(c, v->cutoff, best);
    snprintf(v->reason, sizeof v->reason,
             "median: %s best %.4g by step %lld is %s the median %.4g of %zu other trials' "
             "running averages",
             c->metric, best, step, v->stop ? worse_word(c) : "not worse than", v->cutoff,
             n_others);
}

void sched_threshold_judge(const sched_stop *c, long long step, double best, sched_verdict *v) {
    memset(v, 0, sizeof *v);
    v->cutoff = c->threshold;
    v->stop = step >= c->min_steps && sched_better(c, c->threshold, best);
    snprintf(v->reason, sizeof v->reason, "threshold: %s best %.4g by step %lld is %s %.4g",
             c->metric, best, step, v->stop ? worse_word(c) : "not worse than", c->threshold);
    if (v->stop) {
        size_t l = strlen(v->reason);
        snprintf(v->reason + l, sizeof v->reason - l, " (the threshold)");
    }
}
