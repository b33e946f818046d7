/* req_table — the table of bfctl requests: type name -> handler, each in
 * the req_*.c file of its family (docs/architecture.md lists them). The loop
 * dispatches through it; it handles no request itself. */
#include "daemon/req.h"

#include <string.h>

static const struct {
    const char *type;
    req_handler_fn fn;
} req_table[] = {
    {"submit", req_submit},   {"jobs", req_jobs},     {"job", req_job},     {"trial", req_trial},
    {"metrics", req_metrics}, {"cancel", req_cancel}, {"stop", req_stop},   {"wait", req_wait},
    {"best", req_best},       {"export", req_export}, {"logs", req_logs},   {"status", req_status},
    {"sync", req_sync},       {"resume", req_resume}, {"rungs", req_rungs}, {"edit", req_edit},
    {"rm", req_rm},           {"gc", req_gc},
};

req_handler_fn req_handler(const char *type) {
    for (size_t i = 0; i < sizeof req_table / sizeof req_table[0]; i++)
        if (strcmp(req_table[i].type, type) == 0) return req_table[i].fn;
    return NULL;
}
