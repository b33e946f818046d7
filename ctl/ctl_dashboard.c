/* ctl_dashboard.c — `bfctl dashboard` (the dashboard's URL as the running
 * bfd gives it, with the token of $BF_HOME/http.token; it opens nothing)
 * and `bfctl edit` (a running sweep's max_parallel, values added to a grid
 * axis, pending trials dropped: through bfd's edit request, as
 * the dashboard sends it). */
#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first line of $BF_HOME/NAME (BF_HOME default ~/.bf) into out: 0, or
 * -1 after saying why on stderr. */
static int home_line(const char *name, char *out, size_t len) {
    const char *home = getenv("BF_HOME"), *h = getenv("HOME");
    char p[1200];
    if (home && *home)
        snprintf(p, sizeof p, "%s/%s", home, name);
    else
        snprintf(p, sizeof p, "%s/.bf/%s", h ? h : "", name);
    FILE *f = fopen(p, "r");
    if (!f || !fgets(out, (int)len, f)) {
        fprintf(stderr,
                "bfctl dashboard: cannot read %s: bfd writes it when it first serves the "
                "dashboard (docs/http.md)\n",
                p);
        if (f) fclose(f);
        return -1;
    }
    fclose(f);
    out[strcspn(out, "\r\n")] = '\0';
    return 0;
}

int bfctl_dashboard(int argc, char **argv) {
    ctl_flags a = {0};
    int rest = argc, prc = bfctl_parse(argc, argv,
                                       "print the dashboard's URL with its token (open it in a "
                                       "browser; the token then lives in a cookie)",
                                       &a, &rest);
    if (prc >= 0) return prc;
    if (rest < argc) {
        fprintf(stderr, "bfctl dashboard: unexpected argument '%s'\n", argv[rest]);
        return BF_EX_USAGE;
    }
    /* the address from bfd itself: http.url may be stale (a bfd killed
     * before it removed it, its port since taken by another bfd whose token
     * differs: the URL would answer 401) */
    ctl_conn *c;
    char err[512];
    if (ctl_connect(&c, err, sizeof err)) {
        fprintf(stderr,
                "bfctl dashboard: bfd is not running (%s): the dashboard is served by bfd; "
                "start it (docs/http.md)\n",
                err);
        return 1;
    }
    json_t *r;
    int rc = ctl_request(c, "status", NULL, &r);
    ctl_close(&c);
    if (rc) return 1;
    const char *live = json_string_value(json_object_get(json_object_get(r, "endpoints"), "http"));
    char url[512], token[128];
    if (!live || !*live) {
        fprintf(stderr,
                "bfctl dashboard: bfd (pid %lld) serves no dashboard: http is off in bfd.yaml, or "
                "its port was taken when it started (its log says which; docs/http.md)\n",
                ctl_jint(r, "pid"));
        json_decref(r);
        return 1;
    }
    snprintf(url, sizeof url, "%s", live);
    json_decref(r);
    if (home_line("http.token", token, sizeof token)) return 1;
    printf("%s?token=%s\n", url, token);
    return 0;
}

/* What `bfctl edit` is told (bfctl_edit_opts). */
typedef struct edit_args {
    int max_parallel;
    const char *add, *drop_pending;
} edit_args;

const opt_spec bfctl_edit_opts[] = {
    {"max-parallel", 0, OPT_INT, 0, 100000, OPT_AT(edit_args, max_parallel), "N",
     "trials of the job running at once (tpe: pending or running); 0 lifts the cap of a grid or "
     "random job"},
    {"add", 0, OPT_STR, 0, 0, OPT_AT(edit_args, add), "KEY=V1,V2",
     "append values to a grid axis: the trials they make are added, the old ones untouched"},
    {"drop-pending", 0, OPT_STR, 0, 0, OPT_AT(edit_args, drop_pending), "KEY=VALUE",
     "cancel the job's pending trials whose swept KEY is VALUE"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

#define EDIT_USAGE "edit JOB --max-parallel N | --add KEY=V1,V2 | --drop-pending KEY=VALUE"

int bfctl_edit(int argc, char **argv) {
    edit_args a = {.max_parallel = -1};
    int rest = argc,
        prc = bfctl_parse(argc, argv, "change a running sweep (kept in the store, an event)", &a,
                          &rest);
    if (prc >= 0) return prc;
    argc -= rest - 1;
    argv += rest - 1;
    long long job, trial;
    if (ctl_target_arg(argc, argv, NULL, EDIT_USAGE, 'j', &job, &trial)) return BF_EX_USAGE;
    if ((a.max_parallel >= 0) + !!a.add + !!a.drop_pending != 1) {
        fprintf(stderr, "bfctl edit: say one thing to change: " EDIT_USAGE "\n");
        return BF_EX_USAGE;
    }
    json_t *body = json_pack("{s:I}", "job", (json_int_t)job);
    if (a.max_parallel >= 0)
        json_object_set_new(body, "max_parallel", json_integer(a.max_parallel));
    if (a.add) json_object_set_new(body, "add", json_string(a.add));
    if (a.drop_pending) json_object_set_new(body, "drop_pending", json_string(a.drop_pending));
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) {
        json_decref(body);
        return 1;
    }
    json_t *r;
    int rc = ctl_request(c, "edit", body, &r);
    ctl_close(&c);
    if (rc) return 1;
    if (a.add)
        printf("job %lld: %lld trials added\n", job, ctl_jint(r, "added"));
    else if (a.drop_pending)
        printf("job %lld: %lld pending trials dropped\n", job, ctl_jint(r, "dropped"));
    else
        printf("job %lld: max_parallel %lld (was %lld)\n", job, ctl_jint(r, "max_parallel"),
               ctl_jint(r, "was"));
    json_decref(r);
    return 0;
}
