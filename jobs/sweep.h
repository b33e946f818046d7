/* sweep — a YAML sweep definition read into a validated job spec, and its
 * expansion into trials. Keys, types and ranges of every parameter come from
 * the config schema (common/cfg.h): there is no second list here.
 *
 * A file without `sweep:` is a standalone config and becomes a one-trial job.
 * Every error is "FILE:LINE:COL: message"; loading collects all of them. */
#ifndef SWEEP_H
#define SWEEP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cfg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SWEEP_MAX_TRIALS 100000 /* grids and random sweeps above this are refused */
#define SWEEP_MAX_PARAMS 64
#define SWEEP_MAX_ERRORS 100   /* messages kept; the count goes on */
#define SWEEP_MAX_OBJECTIVES 8 /* entries of a `metric:` list */

/* tpe: trials are proposed one by one by bfd (jobs/sched_tpe.h) as earlier
 * ones finish; nothing is expanded at submit. */
typedef enum { SWEEP_GRID = 0, SWEEP_RANDOM, SWEEP_TPE } sweep_method;
typedef enum {
    SWEEP_DIST_VALUES = 0,
    SWEEP_DIST_UNIFORM,
    SWEEP_DIST_LOG_UNIFORM,
    SWEEP_DIST_INT_UNIFORM
} sweep_dist;
typedef enum {
    SWEEP_STOP_NONE = 0,
    SWEEP_STOP_MEDIAN,
    SWEEP_STOP_THRESHOLD,
    SWEEP_STOP_ASHA,
    SWEEP_STOP_HYPERBAND
} sweep_stop_method;

/* Error list filled by sweep_load_*; every message is a complete line. */
typedef struct sweep_errors {
    char **msgs;
    int n;     /* messages kept (at most SWEEP_MAX_ERRORS) */
    int total; /* errors found */
} sweep_errors;

void sweep_errors_free(sweep_errors *e);

/* One swept key. Values are held as config snapshots (the field's bytes in a
 * bf_config) plus their canonical text, so a trial applies them exactly. */
typedef struct sweep_param {
    char key[128];
    const cfg_field *field;
    sweep_dist dist;
    int n_values;
    bf_config *value_cfg; /* n_values configs holding each value in `field` */
    char **value_text;    /* canonical YAML flow text of each value */
    double min, max;      /* for uniform / log_uniform / int_uniform */
    int line, col;        /* of the key, 1-based */
} sweep_param;

/* One objective of a job: a metric and its goal. */
typedef struct sweep_objective {
    char name[64];
    int maximize; /* goal: max */
} sweep_objective;

typedef struct sweep_spec {
    char file[CFG_PATH_MAX];
    char name[128];
    bf_config base; /* defaults + base + top-level config keys */
    int is_sweep;   /* 0: standalone config, one trial */
    sweep_method method;
    int n_params;
    sweep_param *params;
    long long n_trials; /* grid: product of value counts; random, tpe: `trials` */
    uint64_t seed;      /* random, tpe */
    int parallel;       /* tpe: trials running or pending at once (default 4) */
    int startup_trials; /* tpe: random proposals before the model is used (default 10) */
    char metric_name[64];
    int metric_maximize; /* goal: max */
    /* every objective of `metric:` (a mapping or a list of them), in order;
     * objectives[0] is metric_name / metric_maximize. Several objectives make
     * "best" a Pareto front (jobs/pareto.h). */
    int n_objectives;
    sweep_objective objectives[SWEEP_MAX_OBJECTIVES];
    struct {
        int ranks, gpus_per_rank, cpus_per_rank;
        int nodes;         /* hosts the ranks span (Slurm --nodes); 0 = not given */
        long time_limit_s; /* 0 = none */
    } resources;
    int retries;
    int priority;
    struct {
        sweep_stop_method method;
        char metric[64];
        int min_steps;           /* asha: the first rung R; hyperband: r_min; median: grace */
        double threshold;        /* threshold */
        double reduction_factor; /* asha, hyperband: eta (default 3) */
        long long max_steps;     /* asha, hyperband: R (default base train.steps) */
        int min_trials;          /* median: other trials needed at a step (default 3) */
    } early_stop;
    int params_line, params_col; /* where per-trial errors point */
    long long source_trial;      /* `source_trial:` the trial this job was cloned from, 0: none */
} sweep_spec;

/* One expanded trial, valid only during the sweep_expand callback. */
typedef struct sweep_trial {
    long long index;
    const bf_config *config; /* fully resolved */
    const char *params;      /* "key: value\n" per swept key, canonical */
    const char *params_json; /* {"key": value, ...}, values as JSON */
    const char *config_text; /* cfg_dump of config */
    char hash[17];           /* cfg_hash of config */
} sweep_trial;

#define SWEEP_TEXT_MAX (1u << 20) /* bytes of a sweep's text */

/* text (a sweep's YAML, named file in messages) with each of sets[0..n)
 * ("KEY=VALUE", KEY dotted, VALUE YAML) set in its base: the new text in
 * *out (the caller frees it). Returns 0, or -1 with a message
 * (jobs/sweep_sets.c). */
int sweep_apply_sets(const char *text, size_t len, const char *file, const char *const *sets, int n,
                     char **out, char *err, size_t errlen);
/* The one-trial sweep of a clone of trial id (`bfctl clone`): its resolved
 * config (trial: bfd's `trial` reply) with sets[0..n) ("KEY=VALUE") over
 * it, judged by its job's objectives with its resources, retries and
 * priority (job: bfd's `job` reply), naming its source (`source_trial:`);
 * by says who cloned it, in a comment. The text (malloc'd), or NULL with
 * err (a set that is not KEY=VALUE, out of memory). */
char *sweep_clone_text(json_t *trial, json_t *job, long long id, const char *const *sets, int n,
                       const char *by, char *err, size_t errlen);

/* Reads and validates a sweep file (at most 1 MiB of text). Returns 0 with
 * *out (owned by the caller, free with sweep_spec_destroy), or -1 with every
 * error in errs (which the caller frees with sweep_errors_free). */
int sweep_load_file(const char *path, sweep_spec **out, sweep_errors *errs);
/* Same for text in memory; `file` names it in messages. */
int sweep_load_string(const char *text, size_t len, const char *file, sweep_spec **out,
                      sweep_errors *errs);
void sweep_spec_destroy(sweep_spec **s);

/* Calls fn once per trial in order: grid in cartesian order (the first
 * parameter varies slowest, values in listed order); random reproducible from
 * `seed` (value i of parameter p drawn from Philox stream p, index i). fn
 * returns 0 to go on, non-zero to stop (returned). Returns 0, fn's code, or
 * -1 with a message in err (out of memory). */
typedef int (*sweep_trial_fn)(void *ud, const sweep_trial *t);
int sweep_expand(const sweep_spec *s, sweep_trial_fn fn, void *ud, char *err, size_t errlen);

/* Builds trial `index` from explicit values and calls fn once with it:
 * x[p] is, for parameter p, the index of a listed value (values: [...]) or
 * the number itself (a min/max range; rounded for int_uniform, clamped to
 * [min, max]). How tpe trials are made. Returns 0, fn's code, or -1. */
int sweep_trial_at(const sweep_spec *s, long long index, const double *x, sweep_trial_fn fn,
                   void *ud, char *err, size_t errlen);

/* ---- sweep_edit.c: a submitted grid grown by edits ---- */

#define SWEEP_VALUE_MAX 256  /* bytes of one value given to an edit */
#define SWEEP_EDIT_VALUES 64 /* values added by one edit at most */

/* The index of the swept key `key` in s, or -1 with err naming the axes. */
int sweep_axis(const sweep_spec *s, const char *key, char *err, size_t errlen);
/* text (YAML flow) checked as a value of key through the schema against
 * s's base, and its canonical text into out: 0, or -1 with err. */
int sweep_value_canon(const sweep_spec *s, const char *key, const char *text, char *out,
                      size_t outlen, char *err, size_t errlen);
/* Appends the value text (YAML flow, checked through the schema) to grid
 * axis p of s and grows n_trials: 0, 1 when the axis holds it already
 * (nothing changed), -1 with err (a random or tpe sweep, a range axis, a
 * bad value, too many trials). */
int sweep_add_value(sweep_spec *s, int p, const char *text, char *err, size_t errlen);
/* Splits "V1,V2,..." at the commas outside brackets and quotes into out
 * (at most max values, blanks around each trimmed): their count, or -1
 * with err (an empty or too long value, too many). */
int sweep_split_values(const char *list, char out[][SWEEP_VALUE_MAX], int max, char *err,
                       size_t errlen);
/* Calls fn once per trial of grid s whose value of axis p is one of its
 * values from first_new on (those an edit added), in cartesian order,
 * indexed from first_index. Returns 0, fn's code, or -1 with err. */
int sweep_expand_added(const sweep_spec *s, int p, int first_new, long long first_index,
                       sweep_trial_fn fn, void *ud, char *err, size_t errlen);

const char *sweep_method_name(sweep_method m);
const char *sweep_stop_name(sweep_stop_method m);

#ifdef __cplusplus
}
#endif
#endif
