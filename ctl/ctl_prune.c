/* ctl_prune.c — bfctl rm (jobs, refused while a trial runs unless --cancel,
 * which cancels and waits for the job first) and bfctl gc (the finished jobs
 * older than an age, by state; --dry-run lists them only): bfd's `rm` and
 * `gc` requests (daemon/req_prune.c). bfd removes the rows and files a chunk
 * per loop round after it answers. */
#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"

#include <jansson.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What `bfctl rm` and `bfctl gc` are told (their tables). */
typedef struct prune_args {
    int cancel, keep_files, dry_run, json;
    const char *older, *states;
} prune_args;

const opt_spec bfctl_rm_opts[] = {
    {"cancel", 0, OPT_FLAG, 0, 0, OPT_AT(prune_args, cancel), NULL,
     "cancel a job that still runs and wait for it to stop, then remove it"},
    {"keep-files", 0, OPT_FLAG, 0, 0, OPT_AT(prune_args, keep_files), NULL,
     "keep the trial and stage folders (rows, logs and TensorBoard files go)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

const opt_spec bfctl_gc_opts[] = {
    {"older-than", 0, OPT_STR, 0, 0, OPT_AT(prune_args, older), "DURATION",
     "jobs whose last trial change is older than this: N followed by s, m, h, d or w "
     "(30d); required"},
    {"state", 0, OPT_STR, 0, 0, OPT_AT(prune_args, states), "S,...",
     "only jobs in these states: completed, failed, cancelled (all three)"},
    {"dry-run", 0, OPT_FLAG, 0, 0, OPT_AT(prune_args, dry_run), NULL,
     "list what would be removed; remove nothing"},
    {"keep-files", 0, OPT_FLAG, 0, 0, OPT_AT(prune_args, keep_files), NULL,
     "keep the trial and stage folders"},
    {"json", 0, OPT_FLAG, 0, 0, OPT_AT(prune_args, json), NULL, "the jobs as JSON"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int bfctl_rm(int argc, char **argv) {
    prune_args a = {0};
    int rest = argc,
        prc = bfctl_parse(argc, argv,
                          "remove jobs: their trials, attempts, metric points, events, stage "
                          "records, logs, TensorBoard files and (unless --keep-files) trial "
                          "folders; a shared S2S stage another job still plans is kept",
                          &a, &rest);
    if (prc >= 0) return prc;
    if (rest >= argc) {
        fprintf(stderr, "bfctl: usage: rm JOB... [--cancel] [--keep-files]\n");
        return BF_EX_USAGE;
    }
    long long ids[256];
    int n = 0;
    for (int i = rest; i < argc; i++) {
        char *end;
        long long id = strtoll(argv[i], &end, 10);
        if (*end || id < 1 || n == 256) {
            fprintf(stderr, "bfctl: rm: '%s' is not a job id (a number, e.g. 3; at most 256)\n",
                    argv[i]);
            return BF_EX_USAGE;
        }
        ids[n++] = id;
    }
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) return 1;
    int failed = 0;
    for (int i = 0; i < n; i++) {
        json_t *r;
        if (a.cancel) {
            /* a job that has nothing left to cancel answers with a state
             * error: that is fine, the wait below returns at once */
            json_t *cr = NULL, *body = json_pack("{s:I}", "job", (json_int_t)ids[i]);
            char cerr[512];
            ctl_call(c, "cancel", body, &cr, NULL, cerr, sizeof cerr);
            json_decref(cr);
            json_decref(body);
            if (ctl_job_done(c, ids[i]) == 0) ctl_wait_job(c, ids[i], 1);
        }
        if (ctl_request(
                c, "rm",
                json_pack("{s:I, s:b}", "job", (json_int_t)ids[i], "keep_files", a.keep_files),
                &r)) {
            failed = 1;
            continue;
        }
        printf("job %lld '%s' removed (%lld trials)\n", ids[i], ctl_jstr(r, "name"),
               ctl_jint(r, "trials"));
        json_decref(r);
    }
    ctl_close(&c);
    return failed;
}

/* "30d" -> seconds; -1 when it is not N followed by s, m, h, d or w. */
static double parse_duration(const char *text) {
    char *end;
    double v = text ? strtod(text, &end) : -1;
    if (!text || end == text || !isfinite(v) || v < 0) return -1;
    double unit = !strcmp(end, "s")   ? 1
                  : !strcmp(end, "m") ? 60
                  : !strcmp(end, "h") ? 3600
                  : !strcmp(end, "d") ? 86400
                  : !strcmp(end, "w") ? 604800
                                      : -1;
    return unit < 0 ? -1 : v * unit;
}

int bfctl_gc(int argc, char **argv) {
    prune_args a = {0};
    int rest = argc,
        prc = bfctl_parse(argc, argv,
                          "remove the finished jobs (no trial pending or running) whose last "
                          "trial change is older than DURATION, as bfctl rm does",
                          &a, &rest);
    if (prc >= 0) return prc;
    double older = parse_duration(a.older);
    if (older < 0) {
        if (a.older)
            fprintf(stderr,
                    "bfctl: gc: --older-than %s: not a duration; use N followed by s, m, h, d or "
                    "w (e.g. 30d)\n",
                    a.older);
        else
            fprintf(stderr, "bfctl: gc: --older-than DURATION is required (e.g. --older-than "
                            "30d)\n");
        return BF_EX_USAGE;
    }
    if (rest < argc) {
        fprintf(stderr, "bfctl: gc: unexpected argument '%s'\n", argv[rest]);
        return BF_EX_USAGE;
    }
    json_t *states = NULL;
    if (a.states) {
        states = json_array();
        char buf[256];
        snprintf(buf, sizeof buf, "%s", a.states);
        for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (strcmp(tok, "completed") && strcmp(tok, "failed") && strcmp(tok, "cancelled")) {
                fprintf(stderr,
                        "bfctl: gc: --state %s: '%s' is not a state; use completed, failed, "
                        "cancelled\n",
                        a.states, tok);
                json_decref(states);
                return BF_EX_USAGE;
            }
            json_array_append_new(states, json_string(tok));
        }
    }
    json_t *body = json_pack("{s:f, s:b, s:b}", "older_than", older, "dry_run", a.dry_run,
                             "keep_files", a.keep_files);
    if (states) json_object_set_new(body, "states", states);
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) {
        json_decref(body);
        return 1;
    }
    json_t *r;
    int rc = ctl_request(c, "gc", body, &r);
    ctl_close(&c);
    if (rc) return 1;
    json_t *jobs = json_object_get(r, "jobs");
    if (a.json) {
        ctl_print_json(jobs);
    } else {
        printf("%s %zu job%s\n", a.dry_run ? "would remove" : "removing", json_array_size(jobs),
               json_array_size(jobs) == 1 ? "" : "s");
        size_t i;
        json_t *j;
        if (json_array_size(jobs))
            printf("%-5s %-24s %-10s %8s %10s\n", "JOB", "NAME", "STATE", "TRIALS", "POINTS");
        json_array_foreach(jobs, i, j)
            printf("%-5lld %-24s %-10s %8lld %10lld\n", ctl_jint(j, "id"), ctl_jstr(j, "name"),
                   ctl_jstr(j, "state"), ctl_jint(j, "trials"), ctl_jint(j, "points"));
    }
    json_decref(r);
    return 0;
}
