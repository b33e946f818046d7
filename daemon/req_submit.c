/* req_submit.c — the submit request: its fields and its cwd checked at
 * once, then the sweep handed to the submit thread (daemon/submitq.h), which
 * loads, validates, expands and stores it off the loop; finish_submits
 * replies when the job is stored (or says why it is not). It parses no
 * YAML and writes no trial itself. */
#include "daemon/req.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void req_submit(bfd *d, void *s, proto_msg *m) {
    char ferr[512];
    const char *text, *file, *cwd;
    FIELD(proto_get_str(m->body, "sweep", 1, PROTO_MAX_TEXT, &text, ferr, sizeof ferr));
    FIELD(proto_get_str(m->body, "file", 1, PROTO_MAX_PATH, &file, ferr, sizeof ferr));
    FIELD(proto_get_str(m->body, "cwd", 0, PROTO_MAX_PATH, &cwd, ferr, sizeof ferr));
    if (cwd && cwd[0] != '/') {
        reply_err(d, s, m, PROTO_E_FIELD, "submit: 'cwd' must be an absolute path");
        return;
    }
    /* trials start in cwd: a folder bfd cannot enter would fail every attempt
     * (exit 127) and spend the retries, so it is refused now */
    struct stat cst;
    if (cwd && (stat(cwd, &cst) != 0 || !S_ISDIR(cst.st_mode) || access(cwd, X_OK) != 0)) {
        char cw[PROTO_MAX_PATH * 4 + 8];
        int e = errno;
        reply_err(d, s, m, PROTO_E_FIELD,
                  "submit: 'cwd' %s is not a folder bfd can start trials in: %s",
                  log_escape(cwd, cw, sizeof cw),
                  stat(cwd, &cst) == 0 && !S_ISDIR(cst.st_mode) ? "not a directory" : strerror(e));
        return;
    }
    /* loading (every trial's config is checked), expanding and storing grow
     * with the sweep: the submit thread does them, the loop goes on serving
     * and replies when the job is stored (finish_submits) */
    submit_req *r = submit_req_new(m, text, file, cwd);
    if (!r) {
        reply_err(d, s, m, PROTO_E_INTERNAL, "submit: out of memory");
        return;
    }
    if (submitq_push(d->sq, r)) {
        submit_req_free(&r);
        reply_err(d, s, m, PROTO_E_INTERNAL,
                  "submit: %d submits are already waiting to be stored; try again shortly",
                  SUBMITQ_MAX_QUEUED);
    }
}

/* Replies to the submits the thread has finished, in the order they came. */
void finish_submits(bfd *d) {
    submit_req *r;
    void *s = d->ctl;
    while ((r = submitq_pop_done(d->sq))) {
        proto_msg *m = &r->msg;
        if (r->status == SUBMIT_INVALID) {
            sweep_errors *se = &r->errs;
            json_t *b = json_object();
            json_t *arr = json_array();
            for (int i = 0; i < se->n; i++) json_array_append_new(arr, json_string(se->msgs[i]));
            char msg[4096];
            snprintf(msg, sizeof msg, "%s: %d error%s%s%s", r->file, se->total,
                     se->total == 1 ? "" : "s", se->n ? "; first: " : "", se->n ? se->msgs[0] : "");
            json_object_set_new(b, "code", json_string(proto_code_name(PROTO_E_INVALID_SWEEP)));
            /* json_string refuses text that is not UTF-8; the message then says
             * less (the ASan integration run found the first string leaked here) */
            json_t *jm = json_string(msg);
            json_object_set_new(b, "message", jm ? jm : json_string("invalid sweep"));
            json_object_set_new(b, "errors", arr);
            reply(d, s, m, "error", b);
            json_decref(b);
        } else if (r->status == SUBMIT_REFUSED) {
            reply_err(d, s, m, PROTO_E_FIELD, "%s", r->err);
        } else if (r->status == SUBMIT_FAILED) {
            reply_err(d, s, m, PROTO_E_INTERNAL, "submit: %s", r->err);
            d->pruning = 1; /* chunks it stored before failing are marked for removal */
        } else {
            char err[1024];
            if (r->cwd && dstate_job_cwd_set(d->ds, r->job, r->cwd, err, sizeof err))
                bfd_log("%s", err);
            long long n = r->n_trials;
            json_t *b = json_pack("{s:I, s:s, s:I}", "job", (json_int_t)r->job, "name", r->name,
                                  "trials", (json_int_t)n);
            bfd_log("job %lld submitted: '%s', %lld trial%s", (long long)r->job, r->name, n,
                    n == 1 ? "" : "s");
            reply(d, s, m, "submitted", b);
            json_decref(b);
            d->dirty = 1;
        }
        submit_req_free(&r);
    }
}
