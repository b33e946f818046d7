/* bfctl daemon status [--json] [--all]: whether bfd runs, its slots, GPUs,
 * agents and live attempts (bfd's `status` request, daemon/req_status.c). */
#include <stdio.h>
#include <string.h>

#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"

const opt_spec bfctl_daemon_opts[] = {
    {"json", 0, OPT_FLAG, 0, 0, OPT_AT(ctl_flags, json), NULL, "the reply as JSON"},
    {"all", 0, OPT_FLAG, 0, 0, OPT_AT(ctl_flags, all), NULL,
     "every running trial, not the first 100"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int bfctl_daemon(int argc, char **argv) {
    ctl_flags a = {0};
    int rest = argc,
        prc = bfctl_parse(
            argc, argv,
            "whether bfd runs, its slots, GPUs, endpoints and running trials (the first "
            "100 live attempts; --all: every one)",
            &a, &rest);
    if (prc >= 0) return prc;
    argc -= rest - 1; /* the arguments after the options, argv[0] still the name */
    argv += rest - 1;
    const char *sub = ctl_positional(argc, argv, NULL);
    if (!sub || strcmp(sub, "status") != 0) {
        fprintf(stderr, "usage: bfctl daemon status [--json] [--all]\n");
        return BF_EX_USAGE;
    }
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) return 1;
    json_t *r;
    json_t *req = a.all ? NULL : json_pack("{s:i}", "running_max", 100);
    int rc = ctl_request(c, "status", req, &r); /* takes req */
    ctl_close(&c);
    if (rc) return 1;
    if (a.json) {
        ctl_print_json(r);
    } else {
        json_t *counts = json_object_get(r, "counts");
        printf("bfd %lld serving %s (protocol %lld, launcher %s)\n", ctl_jint(r, "pid"),
               ctl_jstr(r, "home"), ctl_jint(r, "version"), ctl_jstr(r, "launcher"));
        printf("slots %lld free of %lld, GPUs %zu free of %zu\n", ctl_jint(r, "slots_free"),
               ctl_jint(r, "slots"), json_array_size(json_object_get(r, "gpus_free")),
               json_array_size(json_object_get(r, "gpus")));
        printf("jobs %lld, trials pending %lld, running %lld\n", ctl_jint(counts, "jobs"),
               ctl_jint(counts, "trials_pending"), ctl_jint(counts, "trials_running"));
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(r, "agents"), i, t)
            printf("agent %s (pid %lld): %lld of %lld slots used, last heard %.1f s ago%s\n",
                   ctl_jstr(t, "name"), ctl_jint(t, "pid"), ctl_jint(t, "used"),
                   ctl_jint(t, "slots"), json_number_value(json_object_get(t, "last_seen_s")),
                   json_is_false(json_object_get(t, "reachable"))
                       ? " (unreachable: no launch goes to it until it is heard from)"
                       : "");
        json_array_foreach(json_object_get(r, "running"), i, t) {
            char where[120];
            if (json_is_string(json_object_get(t, "agent")))
                snprintf(where, sizeof where, "on agent %s", ctl_jstr(t, "agent"));
            else
                snprintf(where, sizeof where, "pid %lld", ctl_jint(t, "pid"));
            printf("  t%lld (job %lld) attempt %lld %s, %lld slot%s%s\n", ctl_jint(t, "trial"),
                   ctl_jint(t, "job"), ctl_jint(t, "attempt"), where, ctl_jint(t, "slots"),
                   ctl_jint(t, "slots") == 1 ? "" : "s",
                   json_is_true(json_object_get(t, "reattached")) ? ", reattached" : "");
        }
        long long more = ctl_jint(r, "running_total") - (long long)i;
        if (more > 0)
            printf("  ... and %lld more live attempt%s (bfctl daemon status --all)\n", more,
                   more == 1 ? "" : "s");
    }
    json_decref(r);
    return 0;
}
