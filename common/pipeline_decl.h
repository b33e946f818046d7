/* pipeline_decl — what the config language declares of each pipeline beyond
 * its keys: for now its stage graph (stage_graph.h). bfd, bfctl, the store
 * and the worker read a pipeline's stages from here, so they agree on names,
 * order and keys. */
#ifndef PIPELINE_DECL_H
#define PIPELINE_DECL_H

#include "common/stage_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The stage graph of pipeline `name`, or NULL when it runs as one piece (or
 * is no pipeline). Static; never freed. */
const stage_graph *pipeline_stages(const char *name);

#ifdef __cplusplus
}
#endif
#endif
