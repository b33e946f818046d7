/* pipe_registry — the pipelines that train through the generic loop, by
 * name (pipe_find). Adding one: its pipe_spec in its own file, its name
 * here. s2s is not listed: its stages are driven by worker/host/s2s_chain.c. */
#include <string.h>

#include "worker/pipelines/pipe.h"

const pipe_spec *pipe_find(const char *pipeline) {
    static const pipe_spec *const all[] = {&pipe_budgetformer, &pipe_lm, &pipe_vit};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (strcmp(all[i]->name, pipeline) == 0) return all[i];
    return NULL;
}
