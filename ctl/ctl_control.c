/* bfctl commands that change a job's course: cancel JOB|tTRIAL and stop
 * tTRIAL (bfd's `cancel` and `stop` requests, daemon/req_control.c; resume
 * is in ctl_adaptive.c). */
#include <stdio.h>

#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"

int bfctl_cancel(int argc, char **argv) {
    ctl_flags a = {0};
    int rest = argc,
        prc = bfctl_parse(argc, argv, "cancel a job's pending and running trials, or one trial", &a,
                          &rest);
    if (prc >= 0) return prc;
    argc -= rest - 1; /* the arguments after the options, argv[0] still the name */
    argv += rest - 1;
    long long job, trial;
    if (ctl_target_arg(argc, argv, NULL, "cancel JOB|tTRIAL", 0, &job, &trial)) return BF_EX_USAGE;
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) return 1;
    json_t *r;
    int rc = ctl_request(c, "cancel",
                         job ? json_pack("{s:I}", "job", (json_int_t)job)
                             : json_pack("{s:I}", "trial", (json_int_t)trial),
                         &r);
    ctl_close(&c);
    if (rc) return 1;
    printf("%lld trial%s cancelled\n", ctl_jint(r, "cancelled"),
           ctl_jint(r, "cancelled") == 1 ? "" : "s");
    json_decref(r);
    return 0;
}

int bfctl_stop(int argc, char **argv) {
    ctl_flags a = {0};
    int rest = argc,
        prc = bfctl_parse(argc, argv,
                          "early-stop a running trial: it writes a checkpoint and becomes STOPPED",
                          &a, &rest);
    if (prc >= 0) return prc;
    argc -= rest - 1; /* the arguments after the options, argv[0] still the name */
    argv += rest - 1;
    long long job, trial;
    if (ctl_target_arg(argc, argv, NULL, "stop tTRIAL", 't', &job, &trial)) return BF_EX_USAGE;
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) return 1;
    json_t *r;
    int rc = ctl_request(c, "stop", json_pack("{s:I}", "trial", (json_int_t)trial), &r);
    ctl_close(&c);
    if (rc) return 1;
    printf("trial %lld stopping\n", trial);
    json_decref(r);
    return 0;
}
