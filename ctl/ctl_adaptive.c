/* bfctl commands for adaptive sweeps: `resume tTRIAL` (a STOPPED trial
 * continues from its checkpoint) and `show JOB --rungs` (the early-stopping
 * decisions of a job: ASHA's rung table, or the median rule's stops). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"

int bfctl_resume(int argc, char **argv) {
    const char *usage = "resume tTRIAL";
    int rest = argc, prc = bfctl_parse(argc, argv,
                                       "continue a STOPPED trial from its checkpoint (a manual "
                                       "promotion past an early stop); it is judged again at the "
                                       "rungs it has not reached",
                                       NULL, &rest);
    if (prc >= 0) return prc;
    const char *a = rest < argc ? argv[rest] : NULL;
    char *end;
    errno = 0;
    long long trial = a && a[0] == 't' ? strtoll(a + 1, &end, 10) : 0;
    if (!a || a[0] != 't' || !a[1] || *end || errno || trial < 1 || argc - rest > 1) {
        fprintf(stderr, "usage: bfctl %s   (e.g. t17)\n", usage);
        return BF_EX_USAGE;
    }
    json_t *r;
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) return 1;
    int rc = ctl_call_or_say(c, "resume", json_pack("{s:I}", "trial", (json_int_t)trial), &r);
    ctl_close(&c);
    if (rc) return 1;
    printf("trial %lld resumes from its checkpoint (PENDING)\n", trial);
    json_decref(r);
    return 0;
}

static const char *js(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

int bfctl_show_rungs(long long job, int as_json) {
    json_t *r;
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) return 1;
    int rc = ctl_call_or_say(c, "rungs", json_pack("{s:I}", "job", (json_int_t)job), &r);
    ctl_close(&c);
    if (rc) return 1;
    if (as_json) {
        char *t = json_dumps(r, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (t) printf("%s\n", t);
        free(t);
        json_decref(r);
        return 0;
    }
    const char *method = js(r, "method");
    if (!strcmp(method, "none")) {
        printf("job %lld has no early stopping (early_stop: in the sweep; docs/sweeps.md)\n", job);
        json_decref(r);
        return 0;
    }
    printf("job %lld: early stop %s on %s (goal %s)", job, method, js(r, "metric"), js(r, "goal"));
    if (!strcmp(method, "asha"))
        printf(", rungs from step %lld by x%g below step %lld\n",
               (long long)json_integer_value(json_object_get(r, "min_steps")),
               json_number_value(json_object_get(r, "reduction_factor")),
               (long long)json_integer_value(json_object_get(r, "max_steps")));
    else if (!strcmp(method, "hyperband"))
        printf(", r_min %lld, R %lld, eta %g\n",
               (long long)json_integer_value(json_object_get(r, "min_steps")),
               (long long)json_integer_value(json_object_get(r, "max_steps")),
               json_number_value(json_object_get(r, "reduction_factor")));
    else
        printf(", from step %lld\n",
               (long long)json_integer_value(json_object_get(r, "min_steps")));
    size_t i, k;
    json_t *g, *t;
    json_array_foreach(json_object_get(r, "brackets"), i, g) {
        printf("bracket s=%lld: n %lld from step %.4g, rungs",
               (long long)json_integer_value(json_object_get(g, "s")),
               (long long)json_integer_value(json_object_get(g, "n")),
               json_number_value(json_object_get(g, "r")));
        json_array_foreach(json_object_get(g, "rungs"), k, t) {
            printf(" %lld", (long long)json_integer_value(t));
        }
        printf("\n");
    }
    json_array_foreach(json_object_get(r, "rungs"), i, g) {
        json_t *cut = json_object_get(g, "cutoff");
        char cs[32] = "-";
        if (json_is_number(cut)) snprintf(cs, sizeof cs, "%.4g", json_number_value(cut));
        printf("rung %lld at step %lld: %lld trial%s, top %lld continue, cutoff %s\n",
               (long long)json_integer_value(json_object_get(g, "rung")),
               (long long)json_integer_value(json_object_get(g, "step")),
               (long long)json_integer_value(json_object_get(g, "n")),
               json_integer_value(json_object_get(g, "n")) == 1 ? "" : "s",
               (long long)json_integer_value(json_object_get(g, "keep")), cs);
        json_array_foreach(json_object_get(g, "trials"), k, t) {
            printf("  t%-6lld step %6lld  %10.4g  %-8s\n",
                   (long long)json_integer_value(json_object_get(t, "trial")),
                   (long long)json_integer_value(json_object_get(t, "step")),
                   json_number_value(json_object_get(t, "value")),
                   json_is_true(json_object_get(t, "stop")) ? "stopped" : "continue");
        }
    }
    int any = 0;
    json_array_foreach(json_object_get(r, "decisions"), i, t) {
        if (!strcmp(js(t, "method"), "asha")) continue;
        if (!any++) printf("decisions:\n");
        printf("  t%-6lld %s\n", (long long)json_integer_value(json_object_get(t, "trial")),
               js(t, "reason"));
    }
    if (!any && strcmp(method, "asha")) printf("no trial stopped yet\n");
    json_decref(r);
    return 0;
}
