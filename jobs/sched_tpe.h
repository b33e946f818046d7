/* sched_tpe — the Tree-structured Parzen Estimator (Bergstra et al. 2011), as
 * Optuna's default independent sampler does it: the finished trials are
 * split by value into the best gamma(n) = min(ceil(0.1 n), 25) ("below") and
 * the rest ("above"); per parameter, a Parzen estimator l(x) is fitted to
 * the below points and g(x) to the above ones (truncated Gaussians with the
 * "magic clip" bandwidths and a flat prior component; counts plus a prior
 * for categorical parameters), 24 candidates are drawn from l and the one
 * with the largest l(x)/g(x) is proposed. The first startup_trials
 * proposals are uniform random.
 *
 * Pure C: deterministic in (seed, trial index, the observations in the order
 * given). No I/O, no allocation beyond the call. */
#ifndef SCHED_TPE_H
#define SCHED_TPE_H

#include <stddef.h>
#include <stdint.h>

#include "jobs/sweep.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TPE_UNIFORM = 0, TPE_LOG_UNIFORM, TPE_INT, TPE_CATEGORICAL } sched_tpe_kind;

typedef struct sched_tpe_dim {
    sched_tpe_kind kind;
    double lo, hi; /* numeric bounds (as given, before any log) */
    int n_choices; /* categorical */
} sched_tpe_dim;

typedef struct sched_tpe_space {
    int n;
    sched_tpe_dim dim[SWEEP_MAX_PARAMS];
} sched_tpe_space;

typedef struct sched_tpe_opts {
    uint64_t seed;
    int startup;      /* random proposals first (while fewer observations than this) */
    int n_candidates; /* per parameter (24) */
    int maximize;     /* the goal of the values */
} sched_tpe_opts;

/* The search space of a sweep's parameters (values: -> categorical by
 * index; min/max -> uniform, log-uniform or integer). Returns 0, or -1 with
 * a message. */
int sched_tpe_space_from(const sweep_spec *s, sched_tpe_space *sp, char *err, size_t errlen);

/* Proposes the point of trial `index` into x[sp->n] (a choice index for a
 * categorical parameter, else the number) from n_obs observations: point i
 * is xs[i * sp->n ...], its value ys[i] (non-finite values are skipped).
 * Returns 1 when the model was used, 0 for a random (startup) proposal, -1
 * on a bad argument or out of memory. */
int sched_tpe_propose(const sched_tpe_space *sp, const double *xs, const double *ys, size_t n_obs,
                      long long index, const sched_tpe_opts *o, double *x);

/* MOTPE (Ozaki et al. 2020, "Multiobjective tree-structured Parzen
 * estimator for computationally expensive optimization problems"; JAIR
 * 2022): as sched_tpe_propose, with m objectives per observation (ys[i *
 * m + k], maximize[k] the goals) and the good ("below") gamma(n) chosen by
 * non-dominated sorting (jobs/pareto.h): whole fronts while they fit, and
 * the front that does not fit by hypervolume contribution, largest first.
 * An observation with a non-finite value is skipped. Same returns. */
int sched_tpe_propose_mo(const sched_tpe_space *sp, const double *xs, const double *ys, int m,
                         const int *maximize, size_t n_obs, long long index,
                         const sched_tpe_opts *o, double *x);

#ifdef __cplusplus
}
#endif
#endif
