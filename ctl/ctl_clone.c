/* bfctl clone tTRIAL [--set KEY=VALUE ...] [--wait]: a one-trial job from a
 * trial's resolved config (bfd's `trial` request) with changes, judged by
 * the source job's objectives and run with its resources, retries and
 * priority. The new sweep names its source (`source_trial:`), so the new
 * trial's `bfctl show` says where it came from. It sends an ordinary
 * `submit`: bfd validates the clone as any sweep. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"
#include "jobs/sweep.h"

/* What `bfctl clone` is told (bfctl_clone_opts). */
typedef struct clone_args {
    opt_list sets; /* KEY=VALUE, in the order given */
    int wait;
} clone_args;

const opt_spec bfctl_clone_opts[] = {
    {"set", 0, OPT_LIST, 0, 0, OPT_AT(clone_args, sets), "KEY=VALUE",
     "a config key over the trial's value (as bfworker train --set), repeatable"},
    {"wait", 0, OPT_FLAG, 0, 0, OPT_AT(clone_args, wait), NULL,
     "wait for the job; exit 0 when its trial completed"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int bfctl_clone(int argc, char **argv) {
    static const char *u = "clone tTRIAL [--set KEY=VALUE ...] [--wait]";
    const char **sets = calloc((size_t)argc, sizeof *sets);
    clone_args a = {.sets = {sets, 0, argc}};
    int rest = argc,
        prc = sets ? bfctl_parse(argc, argv,
                                 "submit a one-trial job from a trial's resolved config, with "
                                 "--set changes, judged by its job's objectives; the new trial "
                                 "names its source (bfctl show tN: source); prints the job id",
                                 &a, &rest)
                   : 1;
    if (prc >= 0) {
        free(sets);
        return prc;
    }
    const char *arg = rest < argc ? argv[rest] : NULL;
    char *end = NULL;
    errno = 0;
    long long trial = arg && arg[0] == 't' ? strtoll(arg + 1, &end, 10) : 0;
    if (!arg || arg[0] != 't' || !arg[1] || *end || errno || trial < 1 || argc - rest > 1) {
        fprintf(stderr, "usage: bfctl %s   (e.g. t17)\n", u);
        free(sets);
        return BF_EX_USAGE;
    }
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) {
        free(sets);
        return 1;
    }
    json_t *tr = NULL, *job = NULL;
    int rc = ctl_call_or_say(c, "trial", json_pack("{s:I}", "trial", (json_int_t)trial), &tr);
    if (rc == 0)
        rc = ctl_call_or_say(c, "job", json_pack("{s:I}", "job", (json_int_t)ctl_jint(tr, "job")),
                             &job);
    char from[64], err[2048];
    char *text =
        rc == 0 ? sweep_clone_text(tr, job, trial, sets, a.sets.n, "bfctl clone", err, sizeof err)
                : NULL;
    json_decref(tr);
    json_decref(job);
    free(sets);
    if (!text) {
        if (rc == 0) fprintf(stderr, "bfctl: %s\n", err);
        ctl_close(&c);
        return rc == 0 ? BF_EX_USAGE : 1;
    }
    snprintf(from, sizeof from, "t%lld (clone)", trial);
    json_t *b = json_pack("{s:s, s:s}", "sweep", text, "file", from), *r = NULL;
    free(text);
    char cwd[1024];
    if (b && getcwd(cwd, sizeof cwd)) json_object_set_new(b, "cwd", json_string(cwd));
    if (!b || ctl_request(c, "submit", b, &r)) {
        if (!b) fprintf(stderr, "bfctl clone: out of memory\n");
        ctl_close(&c);
        return 1;
    }
    long long id = ctl_jint(r, "job");
    printf("%lld\n", id);
    fflush(stdout);
    fprintf(stderr, "job %lld submitted: '%s', a clone of t%lld\n", id, ctl_jstr(r, "name"), trial);
    json_decref(r);
    rc = a.wait ? ctl_wait_job(c, id, 0) : 0;
    ctl_close(&c);
    return rc;
}
