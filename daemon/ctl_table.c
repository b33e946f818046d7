/* ctl_table — the table of bfctl requests: type name -> handler, each in
 * the ctl_*.c file of its family (docs/architecture.md lists them). The loop
 * dispatches through it; it handles no request itself. */
#include "daemon/ctl.h"

#include <string.h>

static const struct {
    const char *type;
    ctl_handler_fn fn;
} ctl_table[] = {
    {"submit", ctl_submit},   {"jobs", ctl_jobs},     {"job", ctl_job},     {"trial", ctl_trial},
    {"metrics", ctl_metrics}, {"cancel", ctl_cancel}, {"stop", ctl_stop},   {"wait", ctl_wait},
    {"best", ctl_best},       {"export", ctl_export}, {"logs", ctl_logs},   {"status", ctl_status},
    {"sync", ctl_sync},       {"resume", ctl_resume}, {"rungs", ctl_rungs},
};

ctl_handler_fn ctl_handler(const char *type) {
    for (size_t i = 0; i < sizeof ctl_table / sizeof ctl_table[0]; i++)
        if (strcmp(ctl_table[i].type, type) == 0) return ctl_table[i].fn;
    return NULL;
}
