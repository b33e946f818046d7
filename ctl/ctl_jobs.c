/* bfctl commands that read jobs and trials from bfd: ls, show, best and wait
 * (bfd's `jobs`, `job`, `trial`, `best` and `wait` requests, daemon/req_jobs.c).
 * JOB is a job id ("3"); TRIAL is a trial id written with a t ("t17"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"

static void states_text(json_t *states, char *buf, size_t len) {
    static const char *order[] = {"PENDING", "RUNNING",   "COMPLETED",
                                  "FAILED",  "CANCELLED", "STOPPED"};
    size_t w = 0;
    buf[0] = '\0';
    for (int i = 0; i < 6 && w < len; i++) {
        json_t *v = json_object_get(states, order[i]);
        if (v)
            w += (size_t)snprintf(buf + w, len - w, "%s%lld %s", w ? ", " : "",
                                  (long long)json_integer_value(v), order[i]);
    }
}

int ctl_wait_job(ctl_conn *c, long long job, int quiet) {
    for (;;) {
        int d = ctl_job_done(c, job);
        if (d < 0) return 1;
        if (d > 0) {
            json_t *r;
            if (!quiet &&
                ctl_request(c, "wait", json_pack("{s:I}", "job", (json_int_t)job), &r) == 0) {
                char st[256];
                states_text(json_object_get(r, "states"), st, sizeof st);
                fprintf(stderr, "job %lld done: %s\n", job, st);
                json_decref(r);
            }
            return d == 1 ? 0 : 1;
        }
        usleep(500000);
    }
}

const opt_spec bfctl_ls_opts[] = {
    {"json", 0, OPT_FLAG, 0, 0, OPT_AT(ctl_flags, json), NULL, "the jobs as JSON"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int bfctl_ls(int argc, char **argv) {
    ctl_flags a = {0};
    int rest = argc, prc = bfctl_parse(argc, argv, "list jobs with their trial states", &a, &rest);
    if (prc >= 0) return prc;
    argc -= rest - 1; /* the arguments after the options, argv[0] still the name */
    argv += rest - 1;
    int json = a.json;
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) return 1;
    json_t *r;
    int rc = ctl_request_pages(c, "jobs", json_object(), "jobs", &r);
    ctl_close(&c);
    if (rc) return 1;
    json_t *jobs = json_object_get(r, "jobs");
    if (json) {
        ctl_print_json(jobs);
    } else {
        printf("%-5s %-24s %-13s %6s %6s  %s\n", "JOB", "NAME", "PIPELINE", "TRIALS", "FAILED",
               "STATES");
        size_t i;
        json_t *j;
        json_array_foreach(jobs, i, j) {
            char st[256];
            states_text(json_object_get(j, "states"), st, sizeof st);
            /* FAILED: trials that failed for good ("-" when none), so a job
             * with failures stands out; `show JOB` lists them */
            char nf[24] = "-";
            if (ctl_jint(j, "failed") > 0) snprintf(nf, sizeof nf, "%lld!", ctl_jint(j, "failed"));
            printf("%-5lld %-24s %-13s %6lld %6s  %s\n", ctl_jint(j, "id"), ctl_jstr(j, "name"),
                   ctl_jstr(j, "pipeline"), ctl_jint(j, "n_trials"), nf, st);
        }
    }
    json_decref(r);
    return 0;
}

static void print_trial_row(json_t *t, const char *metric) {
    char params[512] = "";
    size_t w = 0;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(t, "params"), k, v) {
        char *vt = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
        if (w < sizeof params)
            w += (size_t)snprintf(params + w, sizeof params - w, "%s%s=%s", w ? " " : "", k,
                                  vt ? vt : "?");
        free(vt);
    }
    json_t *lat = json_object_get(json_object_get(t, "latest"), metric);
    json_t *best = json_object_get(t, "best");
    char l[32] = "-", b[32] = "-";
    if (lat) snprintf(l, sizeof l, "%.4g", json_number_value(json_object_get(lat, "value")));
    if (json_is_number(best)) snprintf(b, sizeof b, "%.4g", json_number_value(best));
    if (json_object_get(t, "stage_runs")) /* a staged trial: its stage runs, then retries */
        printf("t%-6lld %5lld %-10s %4lld %5lld %10s %10s  %s\n", ctl_jint(t, "id"),
               ctl_jint(t, "index"), ctl_jstr(t, "state"), ctl_jint(t, "stage_runs"),
               ctl_jint(t, "retries"), l, b, params);
    else
        printf("t%-6lld %5lld %-10s %4lld %10s %10s  %s\n", ctl_jint(t, "id"), ctl_jint(t, "index"),
               ctl_jstr(t, "state"), ctl_jint(t, "attempts"), l, b, params);
    if (*ctl_jstr(t, "reason")) printf("        %s\n", ctl_jstr(t, "reason")); /* an early stop's */
    json_t *f = json_object_get(t, "failure"); /* a FAILED trial's */
    if (f && ctl_jint(f, "attempt") > 0)
        printf("        failed: attempt %lld: %s\n", ctl_jint(f, "attempt"),
               ctl_jstr(f, "message"));
    else if (f)
        printf("        failed before its first attempt started\n");
    if (*ctl_jstr(t, "waiting"))
        printf("        %s\n", ctl_jstr(t, "waiting")); /* a shared stage */
}

/* A job's shared-stage summary (s2s), one line. */
static void print_job_stages(json_t *sc) {
    if (!sc) return;
    json_t *st = json_object_get(sc, "states");
    printf("stages: %lld distinct of %lld used by its trials; %lld shared by two or more trials, "
           "%lld uses served by another trial's run (%lld stage%s from earlier jobs); %lld run "
           "by its own trials; done %lld, running %lld, pending %lld, failed %lld\n",
           ctl_jint(sc, "distinct"), ctl_jint(sc, "uses"), ctl_jint(sc, "shared"),
           ctl_jint(sc, "reused"), ctl_jint(sc, "from_other_jobs"),
           ctl_jint(sc, "from_other_jobs") == 1 ? "" : "s", ctl_jint(sc, "run"),
           ctl_jint(st, "done"), ctl_jint(st, "running"), ctl_jint(st, "pending"),
           ctl_jint(st, "failed"));
}

/* A trial's stages (s2s), one line each. */
static void print_trial_stages(json_t *r) {
    json_t *arr = json_object_get(r, "stages");
    if (!arr) return;
    if (*ctl_jstr(r, "waiting")) printf("%s\n", ctl_jstr(r, "waiting"));
    printf("%-9s %-16s %-8s %-7s %3s  %s\n", "STAGE", "KEY", "STATE", "RUN BY", "ATT", "FOLDER");
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o) {
        char by[32] = "-";
        if (json_is_integer(json_object_get(o, "trial")))
            snprintf(by, sizeof by, "t%lld%s", ctl_jint(o, "trial"),
                     json_is_true(json_object_get(o, "shared")) ? "*" : "");
        printf("%-9s %-16s %-8s %-7s %3lld  %s\n", ctl_jstr(o, "name"), ctl_jstr(o, "key"),
               ctl_jstr(o, "state"), by, ctl_jint(o, "attempts"), ctl_jstr(o, "folder"));
        if (!strcmp(ctl_jstr(o, "state"), "failed") && *ctl_jstr(o, "message"))
            printf("          %s\n", ctl_jstr(o, "message"));
    }
    printf("(* run by another trial and shared)\n");
}

/* Why a FAILED trial failed: its last failed attempt's end and the last
 * lines of its log (both from bfd's `trial` reply). */
static void print_failure(json_t *r, long long trial) {
    json_t *f = json_object_get(r, "failure");
    if (!f) return;
    if (ctl_jint(f, "attempt") > 0)
        printf("failed: attempt %lld: %s\n", ctl_jint(f, "attempt"), ctl_jstr(f, "message"));
    else
        printf("failed: no failed attempt recorded (failed before it started)\n");
    const char *tail = json_string_value(json_object_get(f, "log_tail"));
    if (!tail) {
        printf("log: none written\n");
    } else if (*tail) {
        printf("last lines of the log (all: bfctl logs t%lld):\n", trial);
        for (const char *p = tail; *p;) {
            const char *e = strchr(p, '\n');
            int n = e ? (int)(e - p) : (int)strlen(p);
            printf("  | %.*s\n", n, p);
            p += n + (e ? 1 : 0);
        }
    }
}

const opt_spec bfctl_show_opts[] = {
    {"json", 0, OPT_FLAG, 0, 0, OPT_AT(ctl_flags, json), NULL, "the reply as JSON"},
    {"rungs", 0, OPT_FLAG, 0, 0, OPT_AT(ctl_flags, rungs), NULL,
     "the job's early-stopping decisions"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int bfctl_show(int argc, char **argv) {
    ctl_flags a = {0};
    int rest = argc,
        prc = bfctl_parse(
            argc, argv,
            "a job with its trials (state, attempts, latest and best metric, the reason "
            "of an early stop, of a failure or of a wait for a shared stage; for s2s how "
            "many stages "
            "were shared), or one trial with its config (for s2s its stages: name, key, "
            "state, the trial that ran it, folder; of a FAILED trial why: the failed "
            "attempt's exit status and reason and the last lines of its log); JOB --rungs: "
            "the job's "
            "early-stopping decisions (per ASHA rung: trials, values, cutoff)",
            &a, &rest);
    if (prc >= 0) return prc;
    argc -= rest - 1; /* the arguments after the options, argv[0] still the name */
    argv += rest - 1;
    long long job, trial;
    if (ctl_target_arg(argc, argv, NULL, "show JOB|tTRIAL [--json] [--rungs]   (e.g. 3, or t17)", 0,
                       &job, &trial))
        return BF_EX_USAGE;
    int json = a.json;
    if (a.rungs) {
        if (!job) {
            fprintf(stderr, "bfctl: show --rungs takes a job (e.g. 3), not a trial\n");
            return BF_EX_USAGE;
        }
        return bfctl_show_rungs(job, json);
    }
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) return 1;
    json_t *r;
    int rc =
        job ? ctl_request_pages(c, "job", json_pack("{s:I}", "job", (json_int_t)job), "trials", &r)
            : ctl_request(c, "trial", json_pack("{s:I}", "trial", (json_int_t)trial), &r);
    ctl_close(&c);
    if (rc) return 1;
    if (json) {
        ctl_print_json(r);
    } else if (job) {
        char st[256];
        states_text(json_object_get(r, "states"), st, sizeof st);
        printf("job %lld '%s': pipeline %s, %lld trials (%s), metric %s (%s)\n", job,
               ctl_jstr(r, "name"), ctl_jstr(r, "pipeline"), ctl_jint(r, "n_trials"), st,
               ctl_jstr(r, "metric"), ctl_jstr(r, "goal"));
        if (ctl_jint(r, "to_propose") > 0)
            printf("%s: %lld trial%s still to be proposed\n", ctl_jstr(r, "method"),
                   ctl_jint(r, "to_propose"), ctl_jint(r, "to_propose") == 1 ? "" : "s");
        print_job_stages(json_object_get(r, "stages"));
        if (json_object_get(r, "stages")) /* staged: stages this trial ran, and retries */
            printf("%-7s %5s %-10s %4s %5s %10s %10s  %s\n", "TRIAL", "INDEX", "STATE", "RUNS",
                   "RETRY", "LATEST", "BEST", "PARAMS");
        else
            printf("%-7s %5s %-10s %4s %10s %10s  %s\n", "TRIAL", "INDEX", "STATE", "ATT", "LATEST",
                   "BEST", "PARAMS");
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(r, "trials"), i, t)
            print_trial_row(t, ctl_jstr(r, "metric"));
    } else {
        printf("trial %lld (job %lld, index %lld): %s, %lld attempt%s, config %s\nlog: %s\n", trial,
               ctl_jint(r, "job"), ctl_jint(r, "index"), ctl_jstr(r, "state"),
               ctl_jint(r, "attempts"), ctl_jint(r, "attempts") == 1 ? "" : "s",
               ctl_jstr(r, "hash"), ctl_jstr(r, "log"));
        if (*ctl_jstr(r, "reason")) printf("early stop: %s\n", ctl_jstr(r, "reason"));
        if (ctl_jint(r, "source")) printf("cloned from t%lld\n", ctl_jint(r, "source"));
        print_failure(r, trial);
        print_trial_stages(r);
        printf("config:\n%s", ctl_jstr(r, "config"));
    }
    json_decref(r);
    return 0;
}

/* What `bfctl best` is told (bfctl_best_opts). */
typedef struct best_args {
    int n, json;
} best_args;

const opt_spec bfctl_best_opts[] = {
    {"", 'n', OPT_INT, 1, 1000, OPT_AT(best_args, n), "N", "how many trials (5)"},
    {"json", 0, OPT_FLAG, 0, 0, OPT_AT(best_args, json), NULL, "the reply as JSON"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int bfctl_best(int argc, char **argv) {
    best_args a = {.n = 5};
    int rest = argc, prc = bfctl_parse(argc, argv, NULL, &a, &rest);
    if (prc >= 0) return prc;
    long long job, trial, n = a.n;
    if (ctl_target_arg(argc - rest + 1, argv + rest - 1, NULL, "best JOB [-n N] [--json]", 'j',
                       &job, &trial))
        return BF_EX_USAGE;
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) return 1;
    int nobj = ctl_job_objectives(c, job); /* several: the Pareto front (ctl_front.c) */
    if (nobj != 1) {
        int frc = nobj > 1 ? ctl_front(c, &job, 1, 0, a.json, 1) : 1;
        ctl_close(&c);
        return frc;
    }
    json_t *r;
    int rc = ctl_request(c, "best",
                         json_pack("{s:I, s:I}", "job", (json_int_t)job, "n", (json_int_t)n), &r);
    ctl_close(&c);
    if (rc) return 1;
    if (a.json) {
        ctl_print_json(r);
    } else {
        printf("best of job %lld by %s (%s)\n", job, ctl_jstr(r, "metric"), ctl_jstr(r, "goal"));
        printf("%-7s %5s %-10s %4s %10s %10s  %s\n", "TRIAL", "INDEX", "STATE", "ATT", "LATEST",
               "BEST", "PARAMS");
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(r, "trials"), i, t)
            print_trial_row(t, ctl_jstr(r, "metric"));
    }
    json_decref(r);
    return 0;
}

int bfctl_wait(int argc, char **argv) {
    ctl_flags a = {0};
    int rest = argc,
        prc = bfctl_parse(argc, argv,
                          "wait until no trial of the job is pending or running; exit 0 when all "
                          "completed, 1 when any failed or was cancelled",
                          &a, &rest);
    if (prc >= 0) return prc;
    argc -= rest - 1; /* the arguments after the options, argv[0] still the name */
    argv += rest - 1;
    long long job, trial;
    if (ctl_target_arg(argc, argv, NULL, "wait JOB", 'j', &job, &trial)) return BF_EX_USAGE;
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) return 1;
    int rc = ctl_wait_job(c, job, 0);
    ctl_close(&c);
    return rc;
}
