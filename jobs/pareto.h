/* pareto — ranking points of several objectives (trials of a
 * multi-objective sweep): non-dominated sorting (Deb et al. 2002, NSGA-II),
 * crowding distance within a front, hypervolume (exact; 2-D by a sweep,
 * n-D by slicing), each point's hypervolume contribution, and an order of
 * the points that fills the last front by an epsilon-net (MO-ASHA,
 * Schmucker et al. 2021; Salinas et al. 2021): what bfctl results and best,
 * MOTPE (jobs/sched_tpe.c) and MO-ASHA (jobs/sched_stop.c) share.
 *
 * Points are n rows of m values, row-major (v[i * m + k]); maximize[k] is
 * nonzero when objective k is to be maximised. A row holding a non-finite
 * value is left out of every ranking (rank 0). Pure C: no I/O, no state. */
#ifndef PARETO_H
#define PARETO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PARETO_MAX_OBJECTIVES 8

/* 1 when point a dominates point b: no worse in every objective and
 * better in at least one. */
int pareto_dominates(const double *a, const double *b, int m, const int *maximize);

/* Non-dominated rank of each point into rank[n]: 1 for the Pareto front,
 * 2 for the front of what is left, ...; 0 for a row with a non-finite
 * value. Returns the number of fronts, or -1 (out of memory, m out of
 * 1..PARETO_MAX_OBJECTIVES). */
int pareto_rank(const double *v, size_t n, int m, const int *maximize, int *rank);

/* Crowding distance of each point within its front (rank from
 * pareto_rank) into dist[n]: the sum over objectives of the gap between
 * its neighbours in that objective, divided by the front's range of it;
 * the ends of a front in any objective (and a front of one or two
 * points) get INFINITY; rank-0 rows NAN. Returns 0 or -1 (out of memory). */
int pareto_crowding(const double *v, size_t n, int m, const int *rank, double *dist);

/* The hypervolume the points dominate up to the reference point ref[m]
 * (for each objective a value worse than every point's: a point not
 * strictly better than ref in every objective adds nothing). NAN when out
 * of memory. Exact: 2-D in O(n log n), more objectives by slicing along
 * the last one (fine for the hundreds of points of a sweep). */
double pareto_hypervolume(const double *v, size_t n, int m, const int *maximize, const double *ref);

/* Each point's exclusive share of the hypervolume of the n points (what
 * the total loses without it) into contrib[n]; 0 for a dominated point.
 * Returns 0 or -1 (out of memory). */
int pareto_hv_contributions(const double *v, size_t n, int m, const int *maximize,
                            const double *ref, double *contrib);

/* A reference point for the hypervolume of these points: per objective
 * the worst finite value, moved out by a tenth of the range (by 1 when the
 * range is 0). Returns 0, or -1 when no row is finite. */
int pareto_reference(const double *v, size_t n, int m, const int *maximize, double *ref);

/* A total order of the points, best first, into order[n] (indices; rank-0
 * rows last, in index order): front by front, and within a front by an
 * epsilon-net: the best point of objective 0 first, then again and again
 * the point farthest (Euclidean, each objective scaled by its range over
 * all points) from those already taken; ties to the lower index. Keeping
 * the first k covers each front as evenly as k allows. Returns 0 or -1. */
int pareto_order(const double *v, size_t n, int m, const int *maximize, size_t *order);

#ifdef __cplusplus
}
#endif
#endif
