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
 * Hyperband (Li et al. 2018, "Hyperband: A Novel Bandit-Based Approach to
 * Hyperparameter Optimization"), as brackets of ASHA: with R = max_steps,
 * r_min = min_steps, s_max = floor(log_eta(R / r_min)), bracket s (s_max..0)
 * has n_s = ceil((s_max + 1) / (s + 1) * eta^s) configurations starting at
 * r_s = R * eta^-s steps, rungs r_s * eta^i (i = 0..s; the last is R). A
 * trial's bracket is s_max - (index mod (s_max + 1)): round-robin over the
 * sweep's trials, most aggressive first; each bracket judges its own trials
 * with the ASHA rule on its own rungs (those below R).
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
    double rung0; /* > 0: the step of rung 1 (a hyperband bracket's r_s); else min_steps */
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
 * SCHED_MAX_RUNGS), and the step of rung k (1-based): round(R * eta^(k-1)),
 * R = rung0 when set (a hyperband bracket), else min_steps. */
int sched_asha_n_rungs(const sched_stop *c);
long long sched_asha_rung_step(const sched_stop *c, int rung);

/* One Hyperband bracket: s, n_s configurations, first budget r_s (steps,
 * not rounded) and its rungs r_s * eta^i, i = 0..s, rounded to steps. */
typedef struct sched_hb_bracket {
    int s;
    long long n;
    double r;
    int n_rungs; /* s + 1 */
    long long rungs[SCHED_MAX_RUNGS];
} sched_hb_bracket;

/* The bracket table for (R, r_min, eta), s = s_max first, into out[cap].
 * Returns the number of brackets (s_max + 1), or -1 when R <= r_min,
 * r_min < 1, eta < 2 or s_max + 1 > cap or SCHED_MAX_RUNGS. */
int sched_hyperband_brackets(long long R, long long r_min, double eta, sched_hb_bracket *out,
                             int cap);
/* s_max for (R, r_min, eta): floor(log_eta(R / r_min)); -1 when invalid. */
int sched_hyperband_s_max(long long R, long long r_min, double eta);
/* The bracket s of the trial with 0-based index `index` of a hyperband job,
 * its round (nullable) and (out) the policy that judges it: ASHA on the
 * bracket's rungs. Trials go to brackets round-robin, s_max first, a bracket
 * skipped once it holds its n_s trials of the round; a round holds sum n_s
 * trials, and the trials past it start the next round (the next Hyperband
 * iteration: its brackets are judged apart). -1 when the policy is invalid. */
int sched_hyperband_bracket_of(const sched_stop *c, long long index, long long *round,
                               sched_stop *out);

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

/* MO-ASHA (Schmucker, Donini, Zafar, Salinas and Archambeau, "Multi-
 * objective Asynchronous Successive Halving", arXiv 2106.12639, 2021):
 * ASHA's rule with m objectives (obj, their goals): the trial reaching
 * `rung` with value[m] (at at_step) is placed among the n_others points
 * already recorded there (others[n_others * m]) by pareto_order: front by
 * front, each front by an epsilon-net; it continues while its place is
 * within keep = max(1, floor(n / eta)). v->cutoff is NAN (no one value
 * cuts); v->n, keep, stop and reason as sched_asha_judge. */
void sched_mo_asha_judge(const sched_stop *c, const sweep_objective *obj, int m, int rung,
                         long long at_step, const double *value, const double *others,
                         size_t n_others, sched_verdict *v);

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
