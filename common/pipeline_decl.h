/* pipeline_decl — what the config language declares of each pipeline: the
 * config keys it reads (the one table validation, sweeps and `bfctl keys`
 * use), the metric it is judged by when a job names none, and its stage
 * graph (stage_graph.h). bfd, bfctl, the store and the worker read a
 * pipeline's stages from here, so they agree on names, order and keys. */
#ifndef PIPELINE_DECL_H
#define PIPELINE_DECL_H

#include "common/stage_graph.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The pipelines, in order: the one list every other is made from (the
 * `pipeline` key's choices in cfg_schema.c, the table in pipeline_decl.c,
 * the worker's specs in worker/pipelines/pipe_registry.c, and each message
 * that lists them). X(name, driver, metric, maximize): driver `loop` trains
 * through the generic loop with the pipe_spec pipe_<name>; `stages` runs
 * its stage graph (pipeline_stages). metric, maximize: what a job is judged
 * by when it names none. A new pipeline: a row here, its keys in
 * pipeline_decl.c, and its spec or its stage graph. */
#define BF_PIPELINES(X)                                                                            \
    X(budgetformer, loop, "val/acc", 1)                                                            \
    X(lm, loop, "val/loss", 0)                                                                     \
    X(vit, loop, "val/acc", 1)                                                                     \
    X(s2s, stages, "eval/student/test/acc", 1)

/* "budgetformer|lm|vit|s2s": the pipelines as the choices of an enum key. */
#define PIPELINE_CHOICE_(name, driver, metric, maximize) "|" #name
#define PIPELINE_CHOICES (&BF_PIPELINES(PIPELINE_CHOICE_)[1]) /* past the first "|" */

/* The stage graph of pipeline `name`, or NULL when it runs as one piece (or
 * is no pipeline). Static; never freed. */
const stage_graph *pipeline_stages(const char *name);

/* 1 when pipeline `name` exists, else 0. */
int pipeline_known(const char *name);
/* Comma-separated names of the pipelines, in table order, into buf[len]
 * ("budgetformer, lm, vit, s2s"): for the messages that list them. */
const char *pipeline_names(char *buf, size_t len);
/* The name of the i-th pipeline in table order, or NULL past the last. */
const char *pipeline_name_at(size_t i);
/* 1 when pipeline `name` reads config key `key` (a key of another pipeline,
 * or an unknown pipeline: 0). */
int pipeline_reads_key(const char *name, const char *key);
/* The keys pipeline `name` reads of the section `key` is in ("data." for
 * "data.path"), comma-separated, into buf[len]; "" when none. */
const char *pipeline_section_keys(const char *name, const char *key, char *buf, size_t len);
/* The metric a job of pipeline `name` is judged by when it names none,
 * and its goal (*maximize 1 for max); NULL for an unknown pipeline. */
const char *pipeline_default_metric(const char *name, int *maximize);

#ifdef __cplusplus
}
#endif
#endif
