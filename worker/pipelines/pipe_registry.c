/* pipe_registry — the pipelines that train through the generic loop, by
 * name (pipe_find): those of the table in common/pipeline_decl.h whose
 * driver is `loop`, each with its pipe_spec pipe_<name> in its own file.
 * s2s (`stages`) is not among them: worker/host/s2s_chain.c drives it. */
#include <stdio.h>
#include <string.h>

#include "worker/pipelines/pipe.h"

#define SPEC_loop(name) &pipe_##name,
#define SPEC_stages(name)
#define SPEC(name, driver, metric, maximize) SPEC_##driver(name)
static const pipe_spec *const all[] = {BF_PIPELINES(SPEC)};
#undef SPEC

const pipe_spec *pipe_find(const char *pipeline) {
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (strcmp(all[i]->name, pipeline) == 0) return all[i];
    return NULL;
}

const char *pipe_names(char *buf, size_t len) {
    size_t w = 0;
    if (len) buf[0] = '\0';
    for (size_t i = 0; i < sizeof all / sizeof *all && w < len; i++)
        w += (size_t)snprintf(buf + w, len - w, "%s%s", i ? ", " : "", all[i]->name);
    return buf;
}
