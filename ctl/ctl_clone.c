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

/* 1 when a config line "KEY: value" sets a key one of sets[n] ("KEY=VALUE")
 * changes: the line is left out and --set puts the new value in. */
static int line_is_set(const char *line, size_t len, const char *const *sets, int n) {
    size_t k = strcspn(line, ":");
    if (k >= len) return 0;
    for (int i = 0; i < n; i++)
        if (strncmp(sets[i], line, k) == 0 && sets[i][k] == '=') return 1;
    return 0;
}

/* The clone's sweep text (malloc'd) from the trial's and its job's
 * replies, without the config lines of the keys in sets[n]; NULL when out
 * of memory. */
static char *clone_text(json_t *tr, json_t *job, long long trial, const char *const *sets,
                        int n_sets) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return NULL;
    fprintf(m, "# cloned from trial %lld of job %lld by bfctl clone\n", trial, ctl_jint(tr, "job"));
    fprintf(m, "name: %.100s-t%lld\nsource_trial: %lld\nmetric:\n", ctl_jstr(job, "name"), trial,
            trial);
    size_t i;
    json_t *o;
    json_array_foreach(json_object_get(job, "objectives"), i, o)
        fprintf(m, "  - {name: %s, goal: %s}\n", ctl_jstr(o, "name"), ctl_jstr(o, "goal"));
    if (json_array_size(json_object_get(job, "objectives")) == 0)
        fprintf(m, "  - {name: %s, goal: %s}\n", ctl_jstr(job, "metric"), ctl_jstr(job, "goal"));
    fprintf(m, "resources: {ranks: %lld, gpus_per_rank: %lld}\nretries: %lld\npriority: %lld\n",
            ctl_jint(job, "ranks"), ctl_jint(job, "gpus_per_rank"), ctl_jint(job, "retries"),
            ctl_jint(job, "priority"));
    /* the resolved config, one canonical "key: value" line each */
    fprintf(m, "base:\n");
    const char *cfg = ctl_jstr(tr, "config");
    while (*cfg) {
        size_t n = strcspn(cfg, "\n");
        if (!line_is_set(cfg, n, sets, n_sets)) fprintf(m, "  %.*s\n", (int)n, cfg);
        cfg += n + (cfg[n] == '\n');
    }
    if (fclose(m) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

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
    char *text = rc == 0 ? clone_text(tr, job, trial, sets, a.sets.n) : NULL;
    json_decref(tr);
    json_decref(job);
    char from[64], err[2048];
    snprintf(from, sizeof from, "t%lld (clone)", trial);
    if (text && a.sets.n) {
        char *edited;
        int src =
            ctl_apply_sets(text, strlen(text), from, sets, a.sets.n, &edited, err, sizeof err);
        free(text);
        text = NULL;
        if (src) {
            fprintf(stderr, "bfctl: %s\n", err);
            free(sets);
            ctl_close(&c);
            return BF_EX_USAGE;
        }
        text = edited;
    }
    free(sets);
    if (!text) {
        if (rc == 0) fprintf(stderr, "bfctl clone: out of memory\n");
        ctl_close(&c);
        return 1;
    }
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
