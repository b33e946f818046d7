/* stage_graph — a pipeline run as a chain of stages, each cached under a key
 * that names exactly the config it depends on, so bfd runs a stage once for
 * every trial (and job) whose config agrees on those keys, and the worker
 * finds a stage done by an earlier run. A pipeline declares its graph (its
 * stage names in order and, per stage, the config keys it reads:
 * pipeline_decl.c); this file knows no pipeline and no stage by name.
 *
 * A stage's key: FNV-1a 64 over
 *   "stage=NAME\n"
 *   "KEY=VALUE\n"   for every dependency key, in the schema table's order,
 *                   VALUE as cfg_format_value writes it (canonical flow text)
 *   "parent=PARENT_KEY\n"  (empty for the first stage)
 * written as 16 hex digits. Stage i's parent is stage i - 1, or the stage
 * before it when a config leaves stage i - 1 out (skip: S2S's A-ViT stage
 * with a dense teacher). Dependencies are rules by key prefix, so a key
 * added to the schema under a listed prefix is a dependency without a
 * change to the declaration; a rule may hold only for configs where one key
 * has one value (when). */
#ifndef STAGE_GRAPH_H
#define STAGE_GRAPH_H

#include <stddef.h>

#include "common/cfg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STAGE_MAX 8 /* stages in one graph, at most */
#define STAGE_KEY_LEN 16

/* What stage `stage` reads from the config, besides its parent's output. A
 * match ending in '.' is a prefix ("data." = every data key), any other one
 * key; an exclude rule removes keys its stage's include rules matched. when:
 * NULL (always), or "KEY=VALUE": the rule holds only for a config whose KEY
 * is VALUE (cfg_format_value's text). */
typedef struct stage_rule {
    int stage;
    const char *match;
    int exclude;
    const char *when;
} stage_rule;

typedef struct stage_graph {
    const char *pipeline;         /* whose stages ("s2s") */
    int n;                        /* stages, 1..STAGE_MAX */
    const char *names[STAGE_MAX]; /* in order; names[n-1] is the last */
    const stage_rule *rules;
    size_t n_rules;
    /* skip[i]: NULL, or "KEY=VALUE": a config whose KEY is VALUE runs no
     * stage i (it is left out of the plan) */
    const char *skip[STAGE_MAX];
} stage_graph;

/* One stage of a planned run. */
typedef struct stage_node {
    const char *name; /* the graph's (static) */
    int idx;          /* its index in the graph (past a skipped stage: not its place) */
    char key[STAGE_KEY_LEN + 1];
    char parent[STAGE_KEY_LEN + 1]; /* "" for the first stage */
    char dir[32];                   /* folder name "NAME-KEY" */
} stage_node;

/* The stages of g that config c runs (every stage but those c skips), in
 * order, each with its key, its parent's key (the stage before it in the
 * plan) and its folder name; returns how many. Pure function of g and c. */
int stage_graph_plan(const stage_graph *g, const bf_config *c, stage_node out[STAGE_MAX]);

/* 1 when config c runs stage i of g, 0 when it skips it (g->skip). */
int stage_graph_runs(const stage_graph *g, const bf_config *c, int i);

/* Index 0..n-1 of a stage name in g, or -1 if it is not one (NULL too). */
int stage_graph_index(const stage_graph *g, const char *name);

/* Name of stage i of g, or NULL past the ends. */
const char *stage_graph_name(const stage_graph *g, int i);

/* 1 when stage i of g depends on config key `key` directly (not through its
 * parent) for config c, else 0; c NULL: by the rules without a `when`
 * only. */
int stage_graph_depends(const stage_graph *g, const bf_config *c, int i, const char *key);

/* g's stage names joined by ", " into buf (for messages); returns buf. */
const char *stage_graph_list(const stage_graph *g, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
