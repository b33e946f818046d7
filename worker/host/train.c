/* train.c — see train.h. It only picks a driver; the loop's host is
 * host/host.c, S2S's stages host/s2s_chain.c. */
#include "worker/host/train.h"

#include <stdio.h>
#include <string.h>

#include "common/pipeline_decl.h"
#include "worker/host/s2s_chain.h"

int train_config(const bf_config *c, const train_opts *o, train_result *r, char *err,
                 size_t errlen) {
    if (strcmp(c->pipeline, "s2s") == 0) return s2s_chain_train(c, o, r, err, errlen);
    const pipe_spec *sp = pipe_find(c->pipeline);
    if (!sp) {
        char names[128];
        snprintf(err, errlen, "pipeline '%s' is unknown (valid: %s)", c->pipeline,
                 pipeline_names(names, sizeof names));
        return TRAIN_ERROR;
    }
    return host_pipeline(sp, c, o, r, err, errlen);
}
