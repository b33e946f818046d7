/* bfctl submit SWEEP.yaml|- [--set KEY=VALUE ...] [--wait] [--follow]: sends
 * a sweep's text (with --set applied to its base, ctl_text.c) to bfd, prints
 * the job id, then optionally follows (ctl_tail.c) or waits (ctl_jobs.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"
#include "jobs/sweep.h"

/* What `bfctl submit` is told (bfctl_submit_opts). */
typedef struct submit_args {
    opt_list sets; /* KEY=VALUE, in the order given */
    int wait, follow;
} submit_args;

const opt_spec bfctl_submit_opts[] = {
    {"set", 0, OPT_LIST, 0, 0, OPT_AT(submit_args, sets), "KEY=VALUE",
     "a key of the sweep's base over the file's value (as bfworker train --set), repeatable"},
    {"wait", 0, OPT_FLAG, 0, 0, OPT_AT(submit_args, wait), NULL,
     "wait for the job; exit 0 when every trial completed"},
    {"follow", 0, OPT_FLAG, 0, 0, OPT_AT(submit_args, follow), NULL,
     "tail its metrics live, then wait"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int bfctl_submit(int argc, char **argv) {
    static const char *u = "submit SWEEP.yaml|- [--set KEY=VALUE ...] [--wait] [--follow]";
    const char **sets = calloc((size_t)argc, sizeof *sets);
    submit_args a = {.sets = {sets, 0, argc}};
    int rest = argc,
        prc = sets ? bfctl_parse(argc, argv,
                                 "submit a sweep to bfd (- reads standard input); prints the job "
                                 "id (--set: a config key of the sweep's base, over the file's "
                                 "value, as bfworker train --set; --wait: until it ends, exit 0 "
                                 "when every trial completed; --follow: tail its metrics live, "
                                 "then wait)",
                                 &a, &rest)
                   : 1;
    if (prc >= 0) {
        free(sets);
        return prc;
    }
    const char *file = rest < argc ? argv[rest] : NULL;
    int n_sets = a.sets.n;
    if (!file) {
        fprintf(stderr, "usage: bfctl %s\n", u);
        free(sets);
        return BF_EX_USAGE;
    }
    char terr[2048];
    char *text;
    size_t n;
    if (ctl_read_text(file, &text, &n, terr, sizeof terr)) {
        fprintf(stderr, "bfctl: %s\n", terr);
        free(sets);
        return 1;
    }
    if (n == 0) { /* the protocol refuses an empty sweep: say what validate says */
        sweep_spec *sp = NULL;
        sweep_errors e = {0};
        sweep_load_string(text, n, strcmp(file, "-") ? file : "<stdin>", &sp, &e);
        fprintf(stderr, "%s\n", e.n ? e.msgs[0] : "empty sweep file");
        sweep_errors_free(&e);
        sweep_spec_destroy(&sp);
        free(text);
        free(sets);
        return 1;
    }
    if (n_sets) {
        char *edited;
        int src = sweep_apply_sets(text, n, file, sets, n_sets, &edited, terr, sizeof terr);
        free(text);
        if (src) {
            fprintf(stderr, "bfctl: %s\n", terr);
            free(sets);
            return BF_EX_USAGE;
        }
        text = edited;
    }
    free(sets);
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) {
        free(text);
        return 1;
    }
    char cwd[1024];
    char shown[1100]; /* the text bfd reads is the edited one: its lines are not the file's */
    snprintf(shown, sizeof shown, "%s%s", file, n_sets ? " (with --set)" : "");
    json_t *b = json_pack("{s:s, s:s}", "sweep", text, "file", shown);
    free(text);
    if (!b) {
        fprintf(stderr, "bfctl: %s is not valid UTF-8\n", file);
        ctl_close(&c);
        return 1;
    }
    if (getcwd(cwd, sizeof cwd)) json_object_set_new(b, "cwd", json_string(cwd));
    json_t *r;
    if (ctl_request(c, "submit", b, &r)) {
        ctl_close(&c);
        return 1;
    }
    long long job = ctl_jint(r, "job");
    printf("%lld\n", job);
    fflush(stdout);
    fprintf(stderr, "job %lld submitted: '%s', %lld trial%s\n", job, ctl_jstr(r, "name"),
            ctl_jint(r, "trials"), ctl_jint(r, "trials") == 1 ? "" : "s");
    json_decref(r);
    int rc = 0;
    if (a.follow) {
        rc = ctl_tail(c, job, 0, 1, 1);
        if (rc == 0) rc = ctl_wait_job(c, job, 0);
    } else if (a.wait) {
        rc = ctl_wait_job(c, job, 0);
    }
    ctl_close(&c);
    return rc;
}
