/* sched_stop — early-stopping policy: ASHA rungs, the median stopping rule
 * and a plain threshold, as pure functions of the values a caller read from
 * the store. No I/O here: bfd (daemon/adaptive.c) reads the points, asks
 * these functions, and records the verdict before it acts on it.
 *
 * ASHA (Li et al. 2018, asynchronous successive halving, stopping form):
 * rungs at R, R*eta, R*eta^2, ... steps below max_steps. A trial that
 * reaches a rung is judged against the values already recorded there: with
 * n values (its own included) it continues only while it is among the best
 * keep = max(1, floor(n / eta)); ties continue.
 *
 * Median rule (Golovin et al. 2017): at a step s >= min_steps a trial whose
 * best value so far is worse than the median of the other trials' running
 * averages at s (each over its points up to s, counting only trials that
 * have reached s) is stopped, once at least min_trials others are there. */
#ifndef SCHED_STOP_H
#define SCHED_STOP_H

#include <stddef.h>
#include <stdint.h>

#include "jobs/sweep.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SCHED_MAX_RUNGS 32
#define SCHED_REASON_MAX 320

typedef struct sched_stop {
    sweep_stop_method method;
    char metric[64];
    int maximize; /* of the job's goal */
    long long min_steps, max_steps;
    double eta, threshold;
    int min_trials;
} sched_stop;

/* The early_stop JSON object the store keeps for a job, from a spec (into
 * buf; truncation is an error): {"method", "metric", "min_steps",
 * "threshold", "reduction_factor", "max_steps", "min_trials"}. */
int sched_stop_json(const sweep_spec *s, char *buf, size_t len);
/* Reads that JSON (a job stored by an older bfd has only method, metric,
 * min_steps and threshold: the defaults fill the rest). Returns 0, or -1
 * with a message. */
int sched_stop_parse(const char *json, int maximize, sched_stop *out, char *err, size_t errlen);

/* Number of ASHA rungs (steps strictly below max_steps, at most
 * SCHED_MAX_RUNGS), and the step of rung k (1-based): round(R * eta^(k-1)). */
int sched_asha_n_rungs(const sched_stop *c);
long long sched_asha_rung_step(const sched_stop *c, int rung);

typedef struct sched_verdict {
    int stop;      /* 1: stop the trial */
    double cutoff; /* asha: the worst value that continues; median: the median; threshold */
    int n;         /* asha: trials at the rung, this one included; median: others compared */
    int keep;      /* asha: how many of n continue */
    char reason[SCHED_REASON_MAX]; /* one line, e.g. "asha: val/acc 0.612 at step 400 is ..." */
} sched_verdict;

/* 1 when a is strictly better than b under the goal. */
int sched_better(const sched_stop *c, double a, double b);

/* ASHA verdict for a trial reaching `rung` with `value` (its point at
 * at_step), given the n_others values recorded at that rung before it. */
void sched_asha_judge(const sched_stop *c, int rung, long long at_step, double value,
                      const double *others, size_t n_others, sched_verdict *v);

/* Mean of the values of a series (steps ascending) at steps <= step, into
 * *mean; returns 1 when the series has reached step (a point at >= step),
 * else 0 (*mean untouched). */
int sched_running_mean(const int64_t *steps, const double *values, size_t n, long long step,
                       double *mean);

/* Median-rule verdict at `step` for a trial whose best value so far is
 * `best`, given the running averages of the other trials that reached step.
 * Below min_steps or with fewer than min_trials others it never stops. */
void sched_median_judge(const sched_stop *c, long long step, double best, const double *others,
                        size_t n_others, sched_verdict *v);

/* Threshold verdict: stop at step >= min_steps when best is worse than the
 * threshold. */
void sched_threshold_judge(const sched_stop *c, long long step, double best, sched_verdict *v);

#ifdef __cplusplus
}
#endif
#endif
