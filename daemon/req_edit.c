/* req_edit.c — the edit request (bfctl edit, the dashboard): a running
 * sweep's max_parallel, changed in the store with an EDIT event (so a
 * restarted bfd keeps it, and the dashboard's stream shows it), and taken
 * up by the next scheduling pass. */
#include "daemon/req.h"

#include <stdio.h>
#include <string.h>

void req_edit(bfd *d, void *s, proto_msg *m) {
    char ferr[512], err[1024];
    long long id, par;
    store_job j;
    FIELD(proto_get_int(m->body, "max_parallel", 1, 0, 100000, 0, &par, ferr, sizeof ferr));
    if (get_job_field(d, s, m, &id, &j)) return;
    if (par < 1 && !strcmp(j.method, "tpe")) {
        reply_err(d, s, m, PROTO_E_FIELD,
                  "edit: job %lld is a tpe sweep: max_parallel must be at least 1", id);
        return;
    }
    int was;
    if (store_job_set_parallel(d->st, id, (int)par, &was, err, sizeof err)) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "edit: %s", err);
        return;
    }
    bfd_log("job %lld: max_parallel %lld (was %d)", id, par, was);
    json_t *b = json_pack("{s:I, s:I, s:i}", "job", (json_int_t)id, "max_parallel", (json_int_t)par,
                          "was", was);
    reply(d, s, m, "edited", b);
    json_decref(b);
    d->dirty = 1;
}
