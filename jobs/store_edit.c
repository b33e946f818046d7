/* store_edit.c — edits of a submitted job that a running sweep takes up:
 * its max_parallel (jobs.parallel), changed with an EDIT event in one
 * transaction, so a restarted bfd keeps the edit and the history says who
 * changed what. */
#include "jobs/store_priv.h"

#include <stdio.h>

int store_job_set_parallel(store *s, int64_t job, int parallel, int *was, char *err,
                           size_t errlen) {
    store_job j;
    int rc = store_job_get(s, job, &j, err, errlen);
    if (rc) return rc;
    *was = j.parallel;
    if (store_begin(s, err, errlen)) return -1;
    sqlite3_stmt *st;
    if (store_prepare(s, "UPDATE jobs SET parallel = ?1 WHERE id = ?2", &st, err, errlen) < 0) {
        store_rollback(s);
        return -1;
    }
    sqlite3_bind_int(st, 1, parallel);
    sqlite3_bind_int64(st, 2, job);
    char msg[128];
    snprintf(msg, sizeof msg, "max_parallel %d (was %d)", parallel, j.parallel);
    if (store_step_done(s, st, "UPDATE jobs SET parallel", err, errlen) ||
        store_event(s, job, 0, "EDIT", msg, err, errlen) || store_commit(s, err, errlen)) {
        store_rollback(s);
        return -1;
    }
    return 0;
}
