/* sched_tpe.c — TPE proposals (sched_tpe.h): the next trial's point from
 * the finished trials' points and values, deterministic in the seed, the
 * trial index and the observations. It does no I/O and keeps no state
 * between calls: it never reads the store or adds a trial (bfd does, with
 * store_add_trial). */
#include "jobs/sched_tpe.h"
#include "common/errbuf.h"
#include "jobs/pareto.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TPE_MAX_CANDIDATES 256
#define TPE_PRIOR_WEIGHT 1.0
#define TPE_MAX_CHOICES 1024

/* splitmix64: one independent stream per (seed, trial index, parameter) */
typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

static rng rng_for(uint64_t seed, long long index, int dim) {
    rng r = {seed * 0x2545F4914F6CDD1Dull + 0x632BE59BD9B4E019ull};
    r.s ^= rng_next(&r) + (uint64_t)index * 0xD6E8FEB86659FD93ull;
    r.s ^= rng_next(&r) + (uint64_t)(dim + 1) * 0xA0761D6478BD642Full;
    rng_next(&r);
    return r;
}

static double rng_normal(rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int sched_tpe_space_from(const sweep_spec *s, sched_tpe_space *sp, char *err, size_t errlen) {
    memset(sp, 0, sizeof *sp);
    if (s->n_params > SWEEP_MAX_PARAMS)
        return bf_fail(err, errlen, "tpe: %d parameters; at most %d", s->n_params,
                       SWEEP_MAX_PARAMS);
    sp->n = s->n_params;
    for (int p = 0; p < s->n_params; p++) {
        const sweep_param *q = &s->params[p];
        sched_tpe_dim *d = &sp->dim[p];
        d->lo = q->min;
        d->hi = q->max;
        switch (q->dist) {
        case SWEEP_DIST_VALUES:
            d->kind = TPE_CATEGORICAL;
            d->n_choices = q->n_values;
            if (d->n_choices < 1)
                return bf_fail(err, errlen, "tpe: parameter %s has no values", q->key);
            break;
        case SWEEP_DIST_UNIFORM:
            d->kind = TPE_UNIFORM;
            break;
        case SWEEP_DIST_LOG_UNIFORM:
            d->kind = TPE_LOG_UNIFORM;
            break;
        case SWEEP_DIST_INT_UNIFORM:
            d->kind = TPE_INT;
            break;
        }
    }
    return 0;
}

/* Bounds of a numeric dimension in the space the estimator works in. */
static void internal_bounds(const sched_tpe_dim *d, double *a, double *b) {
    if (d->kind == TPE_LOG_UNIFORM) {
        *a = log(d->lo);
        *b = log(d->hi);
    } else if (d->kind == TPE_INT) {
        *a = d->lo - 0.5;
        *b = d->hi + 0.5;
    } else {
        *a = d->lo;
        *b = d->hi;
    }
}

static double to_internal(const sched_tpe_dim *d, double x) {
    return d->kind == TPE_LOG_UNIFORM ? log(x > 0 ? x : d->lo) : x;
}

static double from_internal(const sched_tpe_dim *d, double t) {
    double x = d->kind == TPE_LOG_UNIFORM ? exp(t) : t;
    if (d->kind == TPE_INT) x = floor(x + 0.5);
    if (x < d->lo) x = d->lo;
    if (x > d->hi) x = d->hi;
    return x;
}

static double random_value(const sched_tpe_dim *d, rng *r) {
    double u = rng_uniform(r);
    switch (d->kind) {
    case TPE_CATEGORICAL: {
        int k = (int)(u * d->n_choices);
        return k >= d->n_choices ? d->n_choices - 1 : k;
    }
    case TPE_INT: {
        double v = d->lo + floor(u * (d->hi - d->lo + 1.0));
        return v > d->hi ? d->hi : v;
    }
    case TPE_LOG_UNIFORM:
        return from_internal(d, log(d->lo) + u * (log(d->hi) - log(d->lo)));
    case TPE_UNIFORM:
        break;
    }
    return d->lo + u * (d->hi - d->lo);
}

/* A truncated Gaussian mixture on [a, b]: the observations plus the prior. */
typedef struct parzen {
    size_t n;
    double *mu, *sigma, *w, *logz; /* logz: log of the mass inside [a, b] */
    double a, b;
} parzen;

static double norm_cdf(double z) { return 0.5 * erfc(-z / sqrt(2.0)); }

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* Fits the estimator to pts[n] (internal space); buf holds 5 * (n + 1) doubles. */
static void parzen_fit(parzen *pz, const double *pts, size_t n, double a, double b, double *buf) {
    size_t m = n + 1;
    pz->n = m;
    pz->a = a;
    pz->b = b;
    pz->mu = buf;
    pz->sigma = buf + m;
    pz->w = buf + 2 * m;
    pz->logz = buf + 3 * m;
    double *sorted = buf + 4 * m;
    for (size_t i = 0; i < n; i++) pz->mu[i] = pts[i];
    pz->mu[n] = 0.5 * (a + b); /* the prior */
    memcpy(sorted, pz->mu, m * sizeof *sorted);
    qsort(sorted, m, sizeof *sorted, cmp_double);
    double range = b - a;
    double minsigma = range / fmin(100.0, 1.0 + (double)m);
    for (size_t i = 0; i < n; i++) {
        /* the bandwidth: the larger gap to a neighbour (the bounds count as ones) */
        size_t k = 0;
        while (k + 1 < m && sorted[k] < pz->mu[i]) k++;
        while (k > 0 && sorted[k] > pz->mu[i]) k--;
        double left = k > 0 ? sorted[k - 1] : a, right = k + 1 < m ? sorted[k + 1] : b;
        double s = fmax(pz->mu[i] - left, right - pz->mu[i]);
        pz->sigma[i] = fmin(fmax(s, minsigma), range);
        pz->w[i] = 1.0;
    }
    pz->sigma[n] = range;
    pz->w[n] = TPE_PRIOR_WEIGHT;
    double wsum = 0;
    for (size_t i = 0; i < m; i++) wsum += pz->w[i];
    for (size_t i = 0; i < m; i++) {
        pz->w[i] /= wsum;
        double z =
            norm_cdf((b - pz->mu[i]) / pz->sigma[i]) - norm_cdf((a - pz->mu[i]) / pz->sigma[i]);
        pz->logz[i] = log(z > 1e-300 ? z : 1e-300);
    }
}

static double parzen_term(const parzen *pz, size_t i, double x) {
    double z = (x - pz->mu[i]) / pz->sigma[i];
    return log(pz->w[i]) - 0.5 * z * z - log(pz->sigma[i]) - 0.9189385332046727 - pz->logz[i];
}

static double parzen_logpdf(const parzen *pz, double x) {
    double best = -INFINITY, sum = 0; /* log-sum-exp over the components, two passes */
    for (size_t i = 0; i < pz->n; i++) best = fmax(best, parzen_term(pz, i, x));
    for (size_t i = 0; i < pz->n; i++) sum += exp(parzen_term(pz, i, x) - best);
    return best + log(sum);
}

static double parzen_sample(const parzen *pz, rng *r) {
    double u = rng_uniform(r), acc = 0;
    size_t k = pz->n - 1;
    for (size_t i = 0; i < pz->n; i++) {
        acc += pz->w[i];
        if (u < acc) {
            k = i;
            break;
        }
    }
    for (int tries = 0; tries < 100; tries++) {
        double x = pz->mu[k] + pz->sigma[k] * rng_normal(r);
        if (x >= pz->a && x <= pz->b) return x;
    }
    return pz->a + rng_uniform(r) * (pz->b - pz->a);
}

typedef struct ranked {
    double loss;
    size_t i;
} ranked;

static int cmp_ranked(const void *x, const void *y) {
    const ranked *a = x, *b = y;
    if (a->loss != b->loss) return a->loss < b->loss ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i; /* ties: earlier first, deterministic */
}

/* gamma(n): how many of n observations are "below" (good) */
static size_t n_good(size_t n) {
    size_t k = (size_t)ceil(0.1 * (double)n);
    return k > 25 ? 25 : k < 1 ? 1 : k;
}

/* The uniform random point of trial index: the startup proposals. */
static void propose_random(const sched_tpe_space *sp, long long index, const sched_tpe_opts *o,
                           double *x) {
    for (int d = 0; d < sp->n; d++) {
        rng r = rng_for(o->seed, index, d);
        x[d] = random_value(&sp->dim[d], &r);
    }
}

/* The model's proposal from n observations in order[n] (indices into xs),
 * the n_below good ones first: Parzen estimators l over those and g over
 * the rest, per parameter, the candidate of the largest l/g. Returns 1, or
 * -1 out of memory. */
static int propose_ordered(const sched_tpe_space *sp, const double *xs, const size_t *order,
                           size_t n, size_t n_below, long long index, const sched_tpe_opts *o,
                           double *x) {
    size_t n_above = n - n_below;
    double *pts = malloc(n * sizeof *pts), *buf = malloc(5 * (n + 1) * sizeof *buf),
           *buf2 = malloc(5 * (n + 1) * sizeof *buf2);
    if (!pts || !buf || !buf2) {
        free(pts), free(buf), free(buf2);
        return -1;
    }
    int nc = o->n_candidates > 0 ? o->n_candidates : 24;
    if (nc > TPE_MAX_CANDIDATES) nc = TPE_MAX_CANDIDATES;
    for (int d = 0; d < sp->n; d++) {
        const sched_tpe_dim *dm = &sp->dim[d];
        rng r = rng_for(o->seed, index, d);
        double best_score = -INFINITY, best_x = 0;
        if (dm->kind == TPE_CATEGORICAL) {
            int k = dm->n_choices;
            double lw[TPE_MAX_CHOICES], gw[TPE_MAX_CHOICES];
            if (k > TPE_MAX_CHOICES) { /* beyond what a model of counts is worth: random */
                x[d] = random_value(dm, &r);
                continue;
            }
            for (int c = 0; c < k; c++) lw[c] = gw[c] = TPE_PRIOR_WEIGHT / k;
            for (size_t i = 0; i < n; i++) {
                int c = (int)xs[order[i] * (size_t)sp->n + (size_t)d];
                if (c < 0 || c >= k) continue;
                if (i < n_below)
                    lw[c] += 1.0;
                else
                    gw[c] += 1.0;
            }
            double ls = 0, gs = 0;
            for (int c = 0; c < k; c++) ls += lw[c], gs += gw[c];
            for (int t = 0; t < nc; t++) {
                double u = rng_uniform(&r) * ls, acc = 0;
                int c = k - 1;
                for (int j = 0; j < k; j++) {
                    acc += lw[j];
                    if (u < acc) {
                        c = j;
                        break;
                    }
                }
                double score = log(lw[c] / ls) - log(gw[c] / gs);
                if (score > best_score) best_score = score, best_x = c;
            }
            x[d] = best_x;
            continue;
        }
        double a, b;
        internal_bounds(dm, &a, &b);
        parzen l, g;
        for (size_t i = 0; i < n_below; i++)
            pts[i] = to_internal(dm, xs[order[i] * (size_t)sp->n + (size_t)d]);
        parzen_fit(&l, pts, n_below, a, b, buf);
        for (size_t i = 0; i < n_above; i++)
            pts[i] = to_internal(dm, xs[order[n_below + i] * (size_t)sp->n + (size_t)d]);
        parzen_fit(&g, pts, n_above, a, b, buf2);
        for (int t = 0; t < nc; t++) {
            double c = parzen_sample(&l, &r);
            double score = parzen_logpdf(&l, c) - parzen_logpdf(&g, c);
            if (score > best_score) best_score = score, best_x = c;
        }
        x[d] = from_internal(dm, best_x);
    }
    free(pts);
    free(buf);
    free(buf2);
    return 1;
}

int sched_tpe_propose(const sched_tpe_space *sp, const double *xs, const double *ys, size_t n_obs,
                      long long index, const sched_tpe_opts *o, double *x) {
    if (!sp || !o || !x || sp->n < 0 || sp->n > SWEEP_MAX_PARAMS || (n_obs && (!xs || !ys)))
        return -1;
    ranked *rk = malloc((n_obs ? n_obs : 1) * sizeof *rk);
    size_t *order = malloc((n_obs ? n_obs : 1) * sizeof *order);
    if (!rk || !order) {
        free(rk), free(order);
        return -1;
    }
    size_t n = 0;
    for (size_t i = 0; i < n_obs; i++)
        if (isfinite(ys[i])) rk[n++] = (ranked){o->maximize ? -ys[i] : ys[i], i};
    int rc = 0;
    if (n < (size_t)(o->startup > 1 ? o->startup : 1)) {
        propose_random(sp, index, o, x);
    } else {
        qsort(rk, n, sizeof *rk, cmp_ranked);
        for (size_t i = 0; i < n; i++) order[i] = rk[i].i;
        rc = propose_ordered(sp, xs, order, n, n_good(n), index, o, x);
    }
    free(rk);
    free(order);
    return rc;
}

int sched_tpe_propose_mo(const sched_tpe_space *sp, const double *xs, const double *ys, int m,
                         const int *maximize, size_t n_obs, long long index,
                         const sched_tpe_opts *o, double *x) {
    if (!sp || !o || !x || !maximize || sp->n < 0 || sp->n > SWEEP_MAX_PARAMS || m < 1 ||
        m > PARETO_MAX_OBJECTIVES || (n_obs && (!xs || !ys)))
        return -1;
    size_t cap = n_obs ? n_obs : 1;
    size_t *fin = malloc(cap * sizeof *fin), *order = malloc(cap * sizeof *order);
    double *v = malloc(cap * (size_t)m * sizeof *v), *contrib = malloc(cap * sizeof *contrib);
    int *rank = malloc(cap * sizeof *rank);
    int rc = fin && order && v && contrib && rank ? 0 : -1;
    size_t n = 0; /* the observations with every value finite, as rows of v */
    for (size_t i = 0; rc == 0 && i < n_obs; i++) {
        int ok = 1;
        for (int k = 0; k < m; k++) ok &= isfinite(ys[i * (size_t)m + (size_t)k]);
        if (!ok) continue;
        memcpy(v + n * (size_t)m, ys + i * (size_t)m, (size_t)m * sizeof *v);
        fin[n++] = i;
    }
    if (rc == 0 && n < (size_t)(o->startup > 1 ? o->startup : 1)) {
        propose_random(sp, index, o, x);
    } else if (rc == 0) {
        /* whole fronts are good while they fit; the front that does not fit
         * gives its places by hypervolume contribution, largest first */
        size_t want = n_good(n), taken = 0, w = 0;
        int fronts = pareto_rank(v, n, m, maximize, rank);
        double ref[PARETO_MAX_OBJECTIVES];
        rc = fronts < 0 || pareto_reference(v, n, m, maximize, ref) < 0 ? -1 : 0;
        for (int r = 1; rc == 0 && r <= fronts; r++) {
            size_t first = w;
            for (size_t i = 0; i < n; i++)
                if (rank[i] == r) order[w++] = i;
            size_t nf = w - first;
            if (taken < want && taken + nf > want) {
                /* the contributions within this front, as a front of its own */
                double *fv = malloc(nf * (size_t)m * sizeof *fv), *fc = malloc(nf * sizeof *fc);
                rc = fv && fc ? 0 : -1;
                for (size_t j = 0; rc == 0 && j < nf; j++)
                    memcpy(fv + j * (size_t)m, v + order[first + j] * (size_t)m,
                           (size_t)m * sizeof *fv);
                if (rc == 0 && pareto_hv_contributions(fv, nf, m, maximize, ref, fc) < 0) rc = -1;
                for (size_t j = 0; rc == 0 && j < nf; j++) contrib[order[first + j]] = fc[j];
                free(fv), free(fc);
                /* insertion sort by contribution, ties to the earlier trial */
                for (size_t j = first + 1; rc == 0 && j < w; j++)
                    for (size_t q = j; q > first; q--) {
                        size_t a = order[q - 1], b = order[q];
                        if (contrib[b] > contrib[a] || (contrib[b] == contrib[a] && b < a))
                            order[q - 1] = b, order[q] = a;
                        else
                            break;
                    }
            }
            taken += nf;
        }
        for (size_t i = 0; rc == 0 && i < n; i++) order[i] = fin[order[i]];
        if (rc == 0) rc = propose_ordered(sp, xs, order, n, want, index, o, x);
    }
    free(fin), free(order), free(v), free(contrib), free(rank);
    return rc;
}
