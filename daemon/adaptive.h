/* adaptive — what bfd decides on its own for adaptive sweeps: early stops
 * (ASHA, median rule, threshold; the policy is jobs/sched_stop.h) judged
 * from the metric points already in the store, and tpe proposals
 * (jobs/sched_tpe.h) made as trials finish. Every decision is committed to
 * the store before bfd acts on it, and every judgement reads only the store,
 * so a restarted bfd decides what the old one would have. */
#ifndef ADAPTIVE_H
#define ADAPTIVE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs/store.h"

typedef struct adaptive adaptive;

int adaptive_new(adaptive **out, char *err, size_t errlen);
void adaptive_destroy(adaptive **a);

/* The metric a job's early stopping watches, or NULL when it has none (the
 * caller judges a trial only after points of this metric arrived). */
const char *adaptive_stop_metric(adaptive *a, store *st, int64_t job);

/* Judges a RUNNING trial on its stored points. Returns 1 when it must stop
 * (decided now and committed, or decided before and not yet acted on), with
 * the reason in reason[len]; 0 when it goes on; -1 with err. */
int adaptive_judge(adaptive *a, store *st, int64_t job, int64_t trial, char *reason, size_t len,
                   char *err, size_t errlen);

/* Proposes trials for tpe jobs until each has `parallel` trials pending or
 * running or has proposed all its trials. Returns how many it added (>= 0),
 * or -1 with err (what it added before the error stays). */
int adaptive_propose(adaptive *a, store *st, char *err, size_t errlen);

/* The rung table of a job: {"job", "method", "metric", "goal",
 * "reduction_factor", "min_steps", "max_steps", "rungs": [{"rung", "step",
 * "n", "keep", "cutoff", "trials": [{"trial", "step", "value", "stop",
 * "reason"}]}], "decisions": [every decision, in order]}. For asha the
 * cutoff is what a trial reaching the rung now would need; null when no
 * trial is there. NULL with err on failure. */
json_t *adaptive_rungs_json(adaptive *a, store *st, int64_t job, char *err, size_t errlen);

#endif
