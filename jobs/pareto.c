/* pareto.c — non-dominated sorting, crowding distance, hypervolume and
 * the epsilon-net order of points of several objectives (pareto.h). Every
 * function works on a copy turned to minimisation (a maximised objective
 * negated), so one comparison serves both goals. No I/O, no state. */
#include "jobs/pareto.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* v turned to minimisation, n * m doubles (malloc'd; NULL out of memory). */
static double *to_min(const double *v, size_t n, int m, const int *maximize) {
    double *w = calloc((n ? n : 1) * (size_t)m, sizeof *w);
    if (!w) return NULL;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < m; k++) {
            double x = v[i * (size_t)m + (size_t)k];
            w[i * (size_t)m + (size_t)k] = maximize && maximize[k] ? -x : x;
        }
    return w;
}

static int row_finite(const double *w, int m) {
    for (int k = 0; k < m; k++)
        if (!isfinite(w[k])) return 0;
    return 1;
}

/* a dominates b, both minimised */
static int dominates_min(const double *a, const double *b, int m) {
    int better = 0;
    for (int k = 0; k < m; k++) {
        if (a[k] > b[k]) return 0;
        if (a[k] < b[k]) better = 1;
    }
    return better;
}

int pareto_dominates(const double *a, const double *b, int m, const int *maximize) {
    int better = 0;
    for (int k = 0; k < m; k++) {
        double x = maximize && maximize[k] ? -a[k] : a[k],
               y = maximize && maximize[k] ? -b[k] : b[k];
        if (x > y) return 0;
        if (x < y) better = 1;
    }
    return better;
}

/* What an index sort compares: rows of m values; coordinate `key` first
 * (key < 0: lexicographic from the first), then the whole row. */
typedef struct sort_ctx {
    const double *rows;
    int m, key;
} sort_ctx;

/* -1, 0, 1: row a before, with, after row b under c */
static int cmp_rows(const sort_ctx *c, size_t a, size_t b) {
    const double *x = c->rows + a * (size_t)c->m, *y = c->rows + b * (size_t)c->m;
    if (c->key >= 0 && x[c->key] != y[c->key]) return x[c->key] < y[c->key] ? -1 : 1;
    for (int k = 0; k < c->m; k++)
        if (x[k] != y[k]) return x[k] < y[k] ? -1 : 1;
    return 0;
}

/* Sorts idx[n] by cmp_rows, ties in index order (a stable merge sort: no
 * global state, so threads may rank at once); tmp holds n. */
static void sort_idx(size_t *idx, size_t n, size_t *tmp, const sort_ctx *c) {
    if (n < 2) return;
    size_t h = n / 2;
    sort_idx(idx, h, tmp, c);
    sort_idx(idx + h, n - h, tmp, c);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = cmp_rows(c, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

/* Ranks of minimised rows w. In lexicographic order a row can be dominated
 * only by an earlier one, and when an earlier remaining row dominates it,
 * so does a member of the current front (the non-dominated row above that
 * one): each round compares a row only with the front found so far. */
static int rank_min(const double *w, size_t n, int m, int *rank) {
    size_t *idx = malloc((n ? n : 1) * sizeof *idx), *front = malloc((n ? n : 1) * sizeof *front);
    if (!idx || !front) {
        free(idx), free(front);
        return -1;
    }
    sort_ctx c = {w, m, -1};
    size_t left = 0;
    for (size_t i = 0; i < n; i++) {
        rank[i] = 0;
        if (row_finite(w + i * (size_t)m, m)) idx[left++] = i;
    }
    sort_idx(idx, left, front, &c);
    int r = 0;
    while (left > 0) {
        r++;
        size_t nf = 0, kept = 0;
        for (size_t j = 0; j < left; j++) {
            const double *p = w + idx[j] * (size_t)m;
            int dominated = 0;
            for (size_t f = 0; f < nf && !dominated; f++)
                dominated = dominates_min(w + front[f] * (size_t)m, p, m);
            if (dominated)
                idx[kept++] = idx[j]; /* stays, in order, for the next round */
            else
                front[nf++] = idx[j], rank[idx[j]] = r;
        }
        left = kept;
    }
    free(idx);
    free(front);
    return r;
}

int pareto_rank(const double *v, size_t n, int m, const int *maximize, int *rank) {
    if (m < 1 || m > PARETO_MAX_OBJECTIVES) return -1;
    double *w = to_min(v, n, m, maximize);
    if (!w) return -1;
    int r = rank_min(w, n, m, rank);
    free(w);
    return r;
}

int pareto_crowding(const double *v, size_t n, int m, const int *rank, double *dist) {
    if (m < 1 || m > PARETO_MAX_OBJECTIVES) return -1;
    size_t *f = malloc((n ? n : 1) * sizeof *f), *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!f || !tmp) {
        free(f), free(tmp);
        return -1;
    }
    int fronts = 0;
    for (size_t i = 0; i < n; i++) {
        dist[i] = rank[i] > 0 ? 0 : NAN;
        if (rank[i] > fronts) fronts = rank[i];
    }
    for (int r = 1; r <= fronts; r++) {
        size_t nf = 0;
        for (size_t i = 0; i < n; i++)
            if (rank[i] == r) f[nf++] = i;
        for (int k = 0; k < m; k++) {
            sort_ctx c = {v, m, k};
            sort_idx(f, nf, tmp, &c);
            double lo = v[f[0] * (size_t)m + (size_t)k], hi = v[f[nf - 1] * (size_t)m + (size_t)k];
            dist[f[0]] = dist[f[nf - 1]] = INFINITY;
            for (size_t j = 1; j + 1 < nf; j++)
                if (hi > lo && isfinite(dist[f[j]]))
                    dist[f[j]] += (v[f[j + 1] * (size_t)m + (size_t)k] -
                                   v[f[j - 1] * (size_t)m + (size_t)k]) /
                                  (hi - lo);
        }
    }
    free(f);
    free(tmp);
    return 0;
}

/* ------------------------------------------------------------ hypervolume */

/* Rows p[n] (stride `stride`) reordered by coordinate key, then whole. */
static int sort_rows(double *p, size_t n, int stride, int key) {
    size_t *idx = malloc(n * sizeof *idx), *tmp = malloc(n * sizeof *tmp);
    double *copy = malloc(n * (size_t)stride * sizeof *copy);
    if (!idx || !tmp || !copy) {
        free(idx), free(tmp), free(copy);
        return -1;
    }
    for (size_t i = 0; i < n; i++) idx[i] = i;
    sort_ctx c = {p, stride, key};
    sort_idx(idx, n, tmp, &c);
    for (size_t i = 0; i < n; i++)
        memcpy(copy + i * (size_t)stride, p + idx[i] * (size_t)stride, (size_t)stride * sizeof *p);
    memcpy(p, copy, n * (size_t)stride * sizeof *p);
    free(idx), free(tmp), free(copy);
    return 0;
}

/* Hypervolume of n minimised rows p (stride `stride`, the first d
 * coordinates used), each strictly below ref in those d; p is reordered.
 * d = 2 sweeps; more slices along coordinate d-1 (HSO). NAN when out of
 * memory. */
static double hv_min(double *p, size_t n, int d, int stride, const double *ref) {
    if (n == 0) return 0;
    if (d == 1) {
        double best = ref[0];
        for (size_t i = 0; i < n; i++) best = fmin(best, p[i * (size_t)stride]);
        return ref[0] - best;
    }
    if (sort_rows(p, n, stride, d == 2 ? 0 : d - 1) < 0) return NAN;
    if (d == 2) {
        double hv = 0, y = ref[1];
        for (size_t i = 0; i < n; i++) {
            const double *q = p + i * (size_t)stride;
            if (q[1] < y) hv += (ref[0] - q[0]) * (y - q[1]), y = q[1];
        }
        return hv;
    }
    double *slice = malloc(n * (size_t)stride * sizeof *slice);
    if (!slice) return NAN;
    double hv = 0;
    for (size_t i = 0; i < n; i++) {
        double lo = p[i * (size_t)stride + (size_t)(d - 1)];
        double hi = i + 1 < n ? p[(i + 1) * (size_t)stride + (size_t)(d - 1)] : ref[d - 1];
        if (hi <= lo) continue;
        /* the rows at or below this slice, projected: the first i + 1 */
        memcpy(slice, p, (i + 1) * (size_t)stride * sizeof *slice);
        double a = hv_min(slice, i + 1, d - 1, stride, ref);
        if (isnan(a)) {
            free(slice);
            return NAN;
        }
        hv += a * (hi - lo);
    }
    free(slice);
    return hv;
}

/* The rows of v (minimised into w) strictly better than ref in every
 * objective, packed into w; their count. */
static size_t keep_inside(double *w, size_t n, int m, const double *refmin) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const double *q = w + i * (size_t)m;
        int in = row_finite(q, m);
        for (int j = 0; in && j < m; j++) in = q[j] < refmin[j];
        if (in) memmove(w + k++ * (size_t)m, q, (size_t)m * sizeof *w);
    }
    return k;
}

double pareto_hypervolume(const double *v, size_t n, int m, const int *maximize,
                          const double *ref) {
    if (m < 1 || m > PARETO_MAX_OBJECTIVES) return NAN;
    double refmin[PARETO_MAX_OBJECTIVES];
    for (int k = 0; k < m; k++) refmin[k] = maximize && maximize[k] ? -ref[k] : ref[k];
    double *w = to_min(v, n, m, maximize);
    if (!w) return NAN;
    size_t k = keep_inside(w, n, m, refmin);
    double hv = hv_min(w, k, m, m, refmin);
    free(w);
    return hv;
}

int pareto_hv_contributions(const double *v, size_t n, int m, const int *maximize,
                            const double *ref, double *contrib) {
    if (m < 1 || m > PARETO_MAX_OBJECTIVES) return -1;
    int *rank = malloc((n ? n : 1) * sizeof *rank);
    double *rest = malloc((n ? n : 1) * (size_t)m * sizeof *rest);
    if (!rank || !rest || pareto_rank(v, n, m, maximize, rank) < 0) {
        free(rank), free(rest);
        return -1;
    }
    double all = pareto_hypervolume(v, n, m, maximize, ref);
    int rc = isnan(all) ? -1 : 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        contrib[i] = 0;
        if (rank[i] != 1) continue;
        size_t k = 0;
        for (size_t j = 0; j < n; j++)
            if (j != i) memcpy(rest + k++ * (size_t)m, v + j * (size_t)m, (size_t)m * sizeof *rest);
        double without = pareto_hypervolume(rest, k, m, maximize, ref);
        if (isnan(without)) rc = -1;
        contrib[i] = fmax(0, all - without);
    }
    free(rank);
    free(rest);
    return rc;
}

int pareto_reference(const double *v, size_t n, int m, const int *maximize, double *ref) {
    if (m < 1 || m > PARETO_MAX_OBJECTIVES) return -1;
    double lo[PARETO_MAX_OBJECTIVES], hi[PARETO_MAX_OBJECTIVES];
    int any = 0;
    for (size_t i = 0; i < n; i++) {
        const double *q = v + i * (size_t)m;
        if (!row_finite(q, m)) continue;
        for (int k = 0; k < m; k++) {
            lo[k] = any ? fmin(lo[k], q[k]) : q[k];
            hi[k] = any ? fmax(hi[k], q[k]) : q[k];
        }
        any = 1;
    }
    if (!any) return -1;
    for (int k = 0; k < m; k++) {
        double margin = hi[k] > lo[k] ? 0.1 * (hi[k] - lo[k]) : 1;
        ref[k] = maximize && maximize[k] ? lo[k] - margin : hi[k] + margin;
    }
    return 0;
}

/* ------------------------------------------------------------------ order */

int pareto_order(const double *v, size_t n, int m, const int *maximize, size_t *order) {
    if (m < 1 || m > PARETO_MAX_OBJECTIVES) return -1;
    double *w = to_min(v, n, m, maximize);
    int *rank = malloc((n ? n : 1) * sizeof *rank);
    double *near = malloc((n ? n : 1) * sizeof *near);
    int fronts = w && rank && near ? rank_min(w, n, m, rank) : -1;
    if (fronts < 0) {
        free(w), free(rank), free(near);
        return -1;
    }
    /* each objective's range over all ranked points scales its distances */
    double scale[PARETO_MAX_OBJECTIVES];
    for (int k = 0; k < m; k++) {
        double lo = INFINITY, hi = -INFINITY;
        for (size_t i = 0; i < n; i++)
            if (rank[i] > 0)
                lo = fmin(lo, w[i * (size_t)m + (size_t)k]),
                hi = fmax(hi, w[i * (size_t)m + (size_t)k]);
        scale[k] = hi > lo ? hi - lo : 1;
    }
    size_t out = 0;
    for (int r = 1; r <= fronts; r++) {
        size_t first = out;
        /* near[i]: distance from i to the nearest point taken from this
         * front (INFINITY until one is taken) */
        for (size_t i = 0; i < n; i++) near[i] = INFINITY;
        for (;;) {
            size_t pick = n;
            for (size_t i = 0; i < n; i++) {
                if (rank[i] != r || near[i] < 0) continue;
                if (pick == n) {
                    pick = i;
                } else if (out == first) { /* the first: best in objective 0 */
                    if (w[i * (size_t)m] < w[pick * (size_t)m]) pick = i;
                } else if (near[i] > near[pick]) {
                    pick = i;
                }
            }
            if (pick == n) break;
            order[out++] = pick;
            near[pick] = -1; /* taken */
            for (size_t i = 0; i < n; i++) {
                if (rank[i] != r || near[i] < 0) continue;
                double d2 = 0;
                for (int k = 0; k < m; k++) {
                    double d =
                        (w[i * (size_t)m + (size_t)k] - w[pick * (size_t)m + (size_t)k]) / scale[k];
                    d2 += d * d;
                }
                near[i] = fmin(near[i], sqrt(d2));
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        if (rank[i] == 0) order[out++] = i;
    free(w);
    free(rank);
    free(near);
    return 0;
}
