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

/* The stage graph of pipeline `name`, or NULL when it runs as one piece (or
 * is no pipeline). Static; never freed. */
const stage_graph *pipeline_stages(const char *name);

/* 1 when pipeline `name` exists, else 0. */
int pipeline_known(const char *name);
/* Comma-separated names of the pipelines, in table order, into buf[len]. */
const char *pipeline_names(char *buf, size_t len);
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
