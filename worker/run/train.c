/* train.c — see train.h. It only picks a driver; the loop's host is
 * run/host.c, S2S's stages run/s2s_run.c. */
#include "worker/run/train.h"

#include <stdio.h>
#include <string.h>

#include "worker/run/s2s_run.h"

int train_run(const bf_config *c, const train_opts *o, train_result *r, char *err, size_t errlen) {
    if (strcmp(c->pipeline, "s2s") == 0) return s2s_run(c, o, r, err, errlen);
    const pipe_spec *sp = pipe_find(c->pipeline);
    if (!sp) {
        snprintf(err, errlen, "pipeline '%s' is unknown (valid: budgetformer, lm, vit, s2s)",
                 c->pipeline);
        return TRAIN_ERROR;
    }
    return host_run(sp, c, o, r, err, errlen);
}
