/* sweep_priv — what the files of the sweep loader share and nothing outside
 * jobs/ may include: the state of one load (sweep_ctx), the YAML node
 * readers that report into its error list (sweep_node.c), and the few
 * functions one file lends another.
 *
 * The files, from the bottom up (each calls only the ones above it):
 *   sweep_node.c    the error list; reading YAML nodes with positioned errors
 *   sweep_expand.c  a spec into trials: grid order, random draws, tpe points
 *   sweep_params.c  the search space: the sweep: section and its parameters
 *   sweep_check.c   every trial's config validated, messages pointed at keys
 *   sweep.c         the file, its top level, the job's own sections
 *
 * Every reader returns 0 (or a value) when the node is good, and -1 after
 * adding one "FILE:LINE:COL: message" to the load's errors otherwise. */
#ifndef SWEEP_PRIV_H
#define SWEEP_PRIV_H

#include <yaml.h>

#include "jobs/sweep.h"

#define SWEEP_MSG_MAX 1400 /* one message, before its position */

/* One load in progress: the document, where messages go, the spec being
 * filled, and positions remembered for later messages. */
typedef struct sweep_ctx {
    yaml_document_t *doc;
    const char *file;
    sweep_errors *errs;
    sweep_spec *spec;
    yaml_node_t *root, *base_node;
    /* positions of each objective's name and early_stop.metric (0: not given) */
    size_t metric_line[SWEEP_MAX_OBJECTIVES], metric_col[SWEEP_MAX_OBJECTIVES], es_line, es_col;
    /* config keys set at top level, for duplicates between a section and a
     * dotted key (`model: {layers: 1}` and `model.layers: 2`) */
    char top_key[128][128];
    size_t top_line[128], top_col[128];
    int n_top;
} sweep_ctx;

/* The node of an id; a scalar node's text; a plain (unquoted) scalar. */
static inline yaml_node_t *node(sweep_ctx *x, yaml_node_item_t id) {
    return yaml_document_get_node(x->doc, id);
}

static inline const char *sval(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }

static inline int is_plain(const yaml_node_t *n) {
    return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* ------------------------------------------ sweep_node.c: errors, readers */

/* Adds a complete line to e (the count goes on past SWEEP_MAX_ERRORS). */
void sweep_errs_add(sweep_errors *e, const char *msg);
/* Adds "FILE:LINE:COL: message" at node n (NULL: 1:1). */
void sweep_err_at(sweep_ctx *x, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "a scalar", "a list", ...: what a node is, for messages. */
const char *sweep_kind_name(const yaml_node_t *n);
/* Nearest of `names` (NULL-terminated) to key, or NULL when none is close. */
const char *sweep_near_name(const char *key, const char *const *names);
/* Reports key as unknown in `where`, with the nearest valid key or all of them. */
void sweep_unknown_in(sweep_ctx *x, const yaml_node_t *k, const char *where, const char *key,
                      const char *const *valid);
/* Checks a mapping node for repeated keys (reported) and non-scalar keys.
 * Returns 0 when its keys are usable. */
int sweep_check_keys(sweep_ctx *x, yaml_node_t *map);
/* 1 when pair p's key is not a name or repeats an earlier key (skip it). */
int sweep_key_is_dup(sweep_ctx *x, yaml_node_t *map, yaml_node_pair_t *p);
/* The value node at dotted `path` in a config mapping (nested sections or
 * dotted keys), or NULL; *key_out its key node. */
yaml_node_t *sweep_find_path(sweep_ctx *x, yaml_node_t *map, const char *path,
                             yaml_node_t **key_out);
/* An integer in [lo, hi], a finite number, a name of letters, digits and
 * allowed_extra (fits outlen), or one of choices (returns its index). */
int sweep_get_int(sweep_ctx *x, yaml_node_t *n, const char *what, long long lo, long long hi,
                  long long *out);
int sweep_get_number(sweep_ctx *x, yaml_node_t *n, const char *what, double *out);
int sweep_get_name(sweep_ctx *x, yaml_node_t *n, const char *what, char *out, size_t outlen,
                   const char *allowed_extra);
int sweep_get_choice(sweep_ctx *x, yaml_node_t *n, const char *what, const char *const *choices);

/* --------------------------------------- sweep_expand.c: trials of a spec */

/* sweep_expand, with with_text = 0 skipping each trial's config dump and
 * hash (t->config_text is "", t->hash empty): what validation needs. */
int sweep_expand_each(const sweep_spec *s, int with_text, sweep_trial_fn fn, void *ud, char *err,
                      size_t errlen);

/* ------------------------------------- sweep_params.c: the search space */

/* Reads the sweep: mapping v into x->spec: method, trials, seed, parallel,
 * startup_trials and every parameter; a grid's trial count. Errors go to
 * x->errs. */
void sweep_parse_space(sweep_ctx *x, yaml_node_t *v);

/* ------------------------------------- sweep_check.c: per-trial checks */

/* Validates every trial of x->spec (cross-key rules, metrics written, keys
 * that change nothing) and adds one positioned message per distinct
 * problem to x->errs. */
void sweep_check_trials(sweep_ctx *x);

/* The names of sweep_stop_method in enum order, NULL-terminated (sweep_params.c). */
extern const char *const sweep_stop_names[];

#endif
