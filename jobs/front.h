/* front — the rows of `bfctl results` for several objectives, computed
 * once for bfctl (ctl/ctl_front.c) and the dashboard (daemon/http_api.c):
 * a job's trials ranked by non-dominated sorting (jobs/pareto.h), or the
 * trials that differ only in train.seed folded into one row of mean +- std
 * and n, or several jobs side by side with rows matched by the swept keys
 * they all share. It reads jobs as JSON and returns JSON: no I/O. */
#ifndef FRONT_H
#define FRONT_H

#include <jansson.h>
#include <stddef.h>

#define FRONT_MAX_JOBS 16

/* The table of jobs[njobs] (ids job_ids), each a job as bfd's `job`
 * request gives it: "objectives" ([{name, goal}]; without it "metric" and
 * "goal", one objective) and every trial in "trials" ([{id, index, state,
 * params, latest: {NAME: {value}}}]). grouped folds the trials that differ
 * only in train.seed; front_only keeps the rows of rank 1. Returns what
 * `bfctl results --json` prints: {jobs, objectives, grouped_by_seed,
 * hypervolume, reference, trials} ("groups" when grouped), the rows best
 * first (several jobs: rows of one "match", the values of the keys they
 * all sweep, together). NULL with err when the jobs' objectives differ or
 * out of memory. */
json_t *front_table(json_t *const *jobs, const long long *job_ids, int njobs, int grouped,
                    int front_only, char *err, size_t errlen);

/* A row's swept values as "k=v k=v" text (what `bfctl results` prints and
 * groups by) into buf. */
void front_params_text(json_t *params, char *buf, size_t len);

#endif
