/* bfctl commands that read a job's results from bfd: export (all stored
 * metrics as CSV or JSON) and results (the per-trial table of accuracy and
 * heads used, best trial marked). Both go through ctl_client. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"

#define EXPORT_PAGE 10000 /* points per `metrics` request (the protocol's cap) */
/* Swept values come from YAML text with at most 15 significant digits;
 * jansson's default 17 would print 0.1 as 0.10000000000000001. */
#define PARAMS_PRECISION JSON_REAL_PRECISION(15)

/* The one positional argument as a job id (>= 1); 0 when absent or not a
 * plain number, -1 when there are two. */
static long long job_arg(int argc, char **argv) {
    long long job = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') continue;
        if (job) return -1;
        char *end;
        errno = 0;
        long long v = strtoll(argv[i], &end, 10);
        if (!argv[i][0] || *end || errno || v < 1) return 0;
        job = v;
    }
    return job;
}

/* The shortest text that reads back as x (%.17g prints 0.1f as
 * 0.10000000149011612; stored values came from text with fewer digits). */
static void fmt_double(char *buf, size_t len, double x) {
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

static const char *str_of(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* ------------------------------------------------------------------ export */

/* The output side of export: the same rows whether they come from one
 * `export` reply or, for a job too large for one message, trial by trial. */
typedef struct exporter {
    int csv;
    long long job;
    json_t *param_keys; /* CSV: the swept keys, one column each */
    int trials_out, metrics_out;
    int failed; /* an output error (stdout closed, disk full) */
} exporter;

/* CSV field: quoted when it holds a comma, quote or line break. */
static void csv_field(FILE *f, const char *s) {
    if (strpbrk(s, ",\"\r\n") == NULL) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void ex_begin(exporter *ex, json_t *job, json_t *first_trial_params) {
    if (ex->csv) {
        ex->param_keys = json_array();
        if (!ex->param_keys) {
            ex->failed = 1;
            return;
        }
        const char *k;
        json_t *v;
        fputs("job,trial,index,state,attempts", stdout);
        json_object_foreach(first_trial_params, k, v) {
            if (json_array_append_new(ex->param_keys, json_string(k)) != 0) {
                ex->failed = 1;
                return;
            }
            putchar(',');
            csv_field(stdout, k);
        }
        fputs(",seq,step,time,name,value,attempt,current\n", stdout);
    } else {
        char *j = json_dumps(job, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!j) {
            ex->failed = 1;
            return;
        }
        printf("{\"job\": %s, \"trials\": [", j);
        free(j);
    }
}

/* The CSV prefix of a trial's rows (job .. params), kept for every row. */
static char *csv_prefix(exporter *ex, json_t *t) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return NULL;
    fprintf(m, "%lld,%lld,%lld,%s,%lld", ex->job,
            (long long)json_integer_value(json_object_get(t, "id")),
            (long long)json_integer_value(json_object_get(t, "index")), str_of(t, "state"),
            (long long)json_integer_value(json_object_get(t, "attempts")));
    size_t i;
    json_t *k;
    json_array_foreach(ex->param_keys, i, k) {
        json_t *v = json_object_get(json_object_get(t, "params"), json_string_value(k));
        char *vt = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | PARAMS_PRECISION) : NULL;
        fputc(',', m);
        csv_field(m, vt ? vt : "");
        free(vt);
    }
    if (fclose(m) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* A trial's head: t has id, index, state, attempts, params, config. */
static void ex_trial_begin(exporter *ex, json_t *t) {
    if (ex->csv) return;
    json_t *head =
        json_pack("{s:O, s:O, s:O, s:O, s:O, s:O}", "id", json_object_get(t, "id"), "index",
                  json_object_get(t, "index"), "state", json_object_get(t, "state"), "attempts",
                  json_object_get(t, "attempts"), "params", json_object_get(t, "params"), "config",
                  json_object_get(t, "config"));
    char *txt =
        head ? json_dumps(head, JSON_COMPACT | JSON_PRESERVE_ORDER | PARAMS_PRECISION) : NULL;
    json_decref(head);
    if (!txt) {
        ex->failed = 1;
        return;
    }
    txt[strlen(txt) - 1] = '\0'; /* drop the closing brace: "metrics" follows */
    printf("%s\n  %s, \"metrics\": [", ex->trials_out ? "," : "", txt);
    free(txt);
    ex->metrics_out = 0;
}

/* One metric row; attempt: the attempt that logged it, current: 0 when a
 * later attempt logged its step again (superseded, kept for the record). */
static void ex_metric(exporter *ex, const char *prefix, const char *name, long long step,
                      long long seq, double value, double time, long long attempt, int current) {
    char v[32], t[32];
    fmt_double(v, sizeof v, value);
    fmt_double(t, sizeof t, time);
    if (ex->csv) {
        printf("%s,%lld,%lld,%s,", prefix, seq, step, t);
        csv_field(stdout, name);
        printf(",%s,%lld,%d\n", v, attempt, current);
    } else {
        json_t *js = json_string(name);
        char *q = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
        json_decref(js);
        if (!q) {
            ex->failed = 1;
            return;
        }
        printf("%s\n    {\"name\":%s,\"step\":%lld,\"seq\":%lld,\"value\":%s,\"time\":%s,"
               "\"attempt\":%lld,\"current\":%s}",
               ex->metrics_out ? "," : "", q, step, seq, v, t, attempt, current ? "true" : "false");
        free(q);
    }
    ex->metrics_out++;
}

static void ex_trial_end(exporter *ex) {
    if (!ex->csv) printf("%s]}", ex->metrics_out ? "\n  " : "");
    ex->trials_out++;
}

static int ex_end(exporter *ex) {
    if (!ex->csv) printf("\n]}\n");
    json_decref(ex->param_keys);
    if (fflush(stdout) != 0 || ferror(stdout)) ex->failed = 1;
    if (ex->failed) fprintf(stderr, "bfctl export: writing the output failed\n");
    return ex->failed ? 1 : 0;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Writes one trial's metrics from its points (history pages): values of a
 * point in name order, as `export` does. */
static void ex_points(exporter *ex, const char *prefix, json_t *points) {
    size_t i;
    json_t *p;
    json_array_foreach(points, i, p) {
        json_t *vals = json_object_get(p, "values");
        size_t n = json_object_size(vals), k = 0;
        const char **names = malloc((n ? n : 1) * sizeof *names);
        if (!names) {
            ex->failed = 1;
            return;
        }
        const char *name;
        json_t *v;
        json_object_foreach(vals, name, v) if (json_is_number(v)) names[k++] = name;
        qsort(names, k, sizeof *names, cmp_name);
        long long seq = (long long)json_integer_value(json_object_get(p, "seq"));
        long long step = (long long)json_integer_value(json_object_get(p, "step"));
        double time = json_number_value(json_object_get(p, "time"));
        long long attempt = (long long)json_integer_value(json_object_get(p, "attempt"));
        int current = !json_is_true(json_object_get(p, "superseded"));
        for (size_t j = 0; j < k; j++)
            ex_metric(ex, prefix, names[j], step, seq,
                      json_number_value(json_object_get(vals, names[j])), time, attempt, current);
        free(names);
    }
}

/* From one `export` reply. */
static int export_whole(exporter *ex, json_t *r) {
    json_t *trials = json_object_get(r, "trials");
    ex_begin(ex, json_object_get(r, "job"), json_object_get(json_array_get(trials, 0), "params"));
    if (ex->failed) return ex_end(ex);
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t) {
        char *prefix = ex->csv ? csv_prefix(ex, t) : NULL;
        if (ex->csv && !prefix) {
            ex->failed = 1;
            break;
        }
        ex_trial_begin(ex, t);
        size_t j;
        json_t *m;
        json_array_foreach(json_object_get(t, "metrics"), j, m)
            ex_metric(ex, prefix, str_of(m, "name"),
                      (long long)json_integer_value(json_object_get(m, "step")),
                      (long long)json_integer_value(json_object_get(m, "seq")),
                      json_number_value(json_object_get(m, "value")),
                      json_number_value(json_object_get(m, "time")),
                      (long long)json_integer_value(json_object_get(m, "attempt")),
                      !json_is_false(json_object_get(m, "current")));
        ex_trial_end(ex);
        free(prefix);
    }
    return ex_end(ex);
}

/* Trial by trial (`job`, then `trial` and paged `metrics` for each): for a
 * job whose export does not fit in one message. */
static int export_paged(exporter *ex, ctl_conn *c) {
    json_t *jr;
    if (ctl_request_pages(c, "job", json_pack("{s:I}", "job", (json_int_t)ex->job), "trials", &jr))
        return 1;
    json_t *trials = json_incref(json_object_get(jr, "trials"));
    /* the job's fields as `export` gives them: without the trial list and req
     * (absent keys are fine, so the return values do not matter) */
    (void)json_object_del(jr, "trials");
    (void)json_object_del(jr, "req");
    ex_begin(ex, jr, json_object_get(json_array_get(trials, 0), "params"));
    int rc = ex->failed;
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t) {
        long long id = (long long)json_integer_value(json_object_get(t, "id"));
        json_t *tr;
        if (ctl_call_or_say(c, "trial", json_pack("{s:I}", "trial", (json_int_t)id), &tr)) {
            rc = 1;
            break;
        }
        char *prefix = ex->csv ? csv_prefix(ex, tr) : NULL;
        ex_trial_begin(ex, tr);
        json_decref(tr);
        if (ex->failed || (ex->csv && !prefix)) {
            free(prefix);
            rc = ex->failed = 1;
            break;
        }
        long long after = 0;
        for (;;) {
            json_t *m;
            if (ctl_call_or_say(c, "metrics",
                                json_pack("{s:I, s:I, s:i, s:b}", "trial", (json_int_t)id, "after",
                                          (json_int_t)after, "limit", EXPORT_PAGE, "all", 1),
                                &m)) {
                rc = 1;
                break;
            }
            ex_points(ex, prefix, json_object_get(m, "points"));
            long long last = (long long)json_integer_value(json_object_get(m, "last"));
            int more = json_is_true(json_object_get(m, "more")) && last > after;
            json_decref(m);
            after = last;
            if (!more) break;
        }
        free(prefix);
        ex_trial_end(ex);
        if (rc) break;
    }
    json_decref(trials);
    json_decref(jr);
    int erc = ex_end(ex);
    return rc ? rc : erc;
}

/* export JOB --tensorboard DIR (ctl/ctl_tb.c) */
/* What `bfctl export` is told (bfctl_export_opts): one of the three forms. */
typedef struct export_args {
    int csv, json;
    const char *tensorboard;
} export_args;

const opt_spec bfctl_export_opts[] = {
    {"csv", 0, OPT_FLAG, 0, 0, OPT_AT(export_args, csv), NULL, "CSV, one row per value"},
    {"json", 0, OPT_FLAG, 0, 0, OPT_AT(export_args, json), NULL, "one JSON object"},
    {"tensorboard", 0, OPT_STR, 0, 0, OPT_AT(export_args, tensorboard), "DIR",
     "TensorBoard event files under DIR"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int bfctl_export(int argc, char **argv) {
    static const char usage[] =
        "usage: bfctl export JOB --csv|--json\n       bfctl export JOB --tensorboard DIR\n";
    export_args a = {0};
    int rest = argc,
        prc = bfctl_parse(argc, argv,
                          "every stored metric of a job: JSON {\"job\", \"trials\": [{\"id\", "
                          "\"state\", \"attempts\", \"config\", \"metrics\": [{\"name\", "
                          "\"step\", \"seq\", \"value\", \"time\"}]}]}, or CSV with one row per "
                          "value; --tensorboard DIR writes TensorBoard event files into "
                          "DIR/NAME-JOB/ (HParams experiment) and DIR/NAME-JOB/tTRIAL/ (scalars, "
                          "session start and end)",
                          &a, &rest);
    if (prc >= 0) return prc;
    int csv = a.csv, json = a.json;
    /* the arguments after the options, argv[0] still the name */
    long long job = job_arg(argc - rest + 1, argv + rest - 1);
    if (job < 1 || csv + json + (a.tensorboard != NULL) != 1 ||
        (a.tensorboard && !*a.tensorboard)) {
        fputs(usage, stderr);
        return BF_EX_USAGE;
    }
    if (a.tensorboard) return ctl_export_tensorboard(job, a.tensorboard);
    ctl_conn *c;
    char err[2048];
    if (ctl_connect(&c, err, sizeof err)) {
        fprintf(stderr, "bfctl: %s\n", err);
        return 1;
    }
    exporter ex = {.csv = csv, .job = job};
    /* the one request whose error is not always said: a job too large for
     * one reply is exported page by page instead */
    json_t *r = NULL, *body = json_pack("{s:I}", "job", (json_int_t)job);
    int rc = body ? ctl_call(c, "export", body, &r, NULL, err, sizeof err) : -1;
    json_decref(body);
    if (rc == 0) {
        rc = export_whole(&ex, r);
    } else if (rc == 1 && strcmp(ctl_jstr(r, "code"), "too_large") == 0) {
        rc = export_paged(&ex, c);
    } else {
        fprintf(stderr, "bfctl: %s\n", body ? err : "out of memory");
        rc = 1;
    }
    json_decref(r);
    ctl_close(&c);
    return rc;
}

/* ----------------------------------------------------------------- results */

/* The latest value of the first of two metrics a trial has; NAN when
 * neither. *from gets the name used. */
static double latest_of(json_t *t, const char *a, const char *b, const char **from) {
    json_t *latest = json_object_get(t, "latest");
    const char *names[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(json_object_get(latest, names[i]), "value");
        if (json_is_number(v)) {
            *from = names[i];
            return json_number_value(v);
        }
    }
    *from = NULL;
    return NAN;
}

static void params_text(json_t *params, char *buf, size_t len) {
    size_t w = 0;
    buf[0] = '\0';
    const char *k;
    json_t *v;
    json_object_foreach(params, k, v) {
        char *vt = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | PARAMS_PRECISION);
        if (w < len)
            w += (size_t)snprintf(buf + w, len - w, "%s%s=%s", w ? " " : "", k, vt ? vt : "?");
        free(vt);
    }
}

static json_t *num_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }

/* The measured columns of a results table, by pipeline: a title, the
 * metric read (the second when the first is missing), its JSON key and
 * digits. The first column is the accuracy (its source is shown). */
typedef struct res_col {
    const char *title, *a, *b, *key;
    int digits;
} res_col;

static const res_col COLS_DEFAULT[] = {
    {"ACCURACY", "test/acc", "val/acc", "accuracy", 4},
    {"HEADS USED", "test/heads_used", "val/heads_used", "heads_used", 3},
};
static const res_col COLS_VIT[] = {
    {"ACCURACY", "test/acc", "val/acc", "accuracy", 4},
    {"RETENTION", "test/retention", "val/retention", "retention", 3},
};
static const res_col COLS_S2S[] = {
    {"ACCURACY", "eval/student/test/acc", "finetune/val/acc", "accuracy", 4},
    {"TEACHER", "eval/teacher/test/acc", "avit/test/acc", "teacher_accuracy", 4},
    {"RETENTION", "eval/student/test/retention", "finetune/val/retention", "retention", 3},
    {"SPEEDUP@577", "eval/student/speedup_vs_teacher@577", NULL, "speedup_vs_teacher@577", 2},
};
#define RES_MAX_COLS 4

static const res_col *results_cols(const char *pipeline, int *n) {
    if (!strcmp(pipeline, "s2s")) {
        *n = (int)(sizeof COLS_S2S / sizeof *COLS_S2S);
        return COLS_S2S;
    }
    if (!strcmp(pipeline, "vit")) {
        *n = (int)(sizeof COLS_VIT / sizeof *COLS_VIT);
        return COLS_VIT;
    }
    *n = (int)(sizeof COLS_DEFAULT / sizeof *COLS_DEFAULT);
    return COLS_DEFAULT;
}

/* What `bfctl results` is told (bfctl_results_opts). */
typedef struct results_args {
    int json, group_by_seed;
} results_args;

const opt_spec bfctl_results_opts[] = {
    {"json", 0, OPT_FLAG, 0, 0, OPT_AT(results_args, json), NULL, "the table as JSON"},
    {"group-by-seed", 0, OPT_FLAG, 0, 0, OPT_AT(results_args, group_by_seed), NULL,
     "fold trials that differ only in train.seed into mean +- std (and n) per objective"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

/* The positional arguments as job ids (>= 1) into jobs[CTL_FRONT_MAX_JOBS]:
 * their count, or 0 when one is not a plain number or there are too many
 * or none. */
static int job_args(int argc, char **argv, long long *jobs) {
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') continue;
        char *end;
        errno = 0;
        long long v = strtoll(argv[i], &end, 10);
        if (!argv[i][0] || *end || errno || v < 1 || n == CTL_FRONT_MAX_JOBS) return 0;
        jobs[n++] = v;
    }
    return n;
}

int bfctl_results(int argc, char **argv) {
    static const char usage[] =
        "usage: bfctl results JOB... [--group-by-seed] [--json]   (at most 16 jobs)\n";
    results_args a = {0};
    int rest = argc,
        prc = bfctl_parse(argc, argv,
                          "per trial: state, accuracy (test/acc, else the latest val/acc), heads "
                          "used (test/heads_used, else val/heads_used) and the job's metric; * "
                          "marks the best trial by that metric. pipeline vit: retention instead "
                          "of heads used; s2s: the student's accuracy and retention, the A-ViT "
                          "teacher's accuracy and the student's speed-up over it at 577 tokens "
                          "(eval/...). A job of several objectives: its trials ranked by "
                          "non-dominated sorting over them, the Pareto front marked *, with each "
                          "trial's rank and crowding distance. --group-by-seed folds the trials "
                          "that differ only in train.seed into mean +- std and n per objective "
                          "(the front on the means); several jobs are shown side by side, rows "
                          "matched by the keys they all sweep",
                          &a, &rest);
    if (prc >= 0) return prc;
    int json = a.json;
    /* the arguments after the options, argv[0] still the name */
    long long jobs[CTL_FRONT_MAX_JOBS];
    int njobs = job_args(argc - rest + 1, argv + rest - 1, jobs);
    if (njobs < 1) {
        fputs(usage, stderr);
        return BF_EX_USAGE;
    }
    long long job = jobs[0];
    ctl_conn *c;
    char err[2048];
    if (ctl_connect(&c, err, sizeof err)) {
        fprintf(stderr, "bfctl: %s\n", err);
        return 1;
    }
    json_t *jr = NULL, *br = NULL;
    int rc = ctl_request_pages(c, "job", json_pack("{s:I}", "job", (json_int_t)job), "trials", &jr);
    if (rc == 0 &&
        (njobs > 1 || a.group_by_seed || json_array_size(json_object_get(jr, "objectives")) > 1)) {
        json_decref(jr);
        rc = ctl_front(c, jobs, njobs, a.group_by_seed, json, 0);
        ctl_close(&c);
        return rc;
    }
    if (rc == 0)
        rc = ctl_call_or_say(c, "best", json_pack("{s:I, s:i}", "job", (json_int_t)job, "n", 1),
                             &br);
    ctl_close(&c);
    if (rc) {
        json_decref(jr);
        return 1;
    }
    json_t *top = json_array_get(json_object_get(br, "trials"), 0);
    long long best_id = top ? (long long)json_integer_value(json_object_get(top, "id")) : 0;
    const char *metric = str_of(jr, "metric");
    json_t *trials = json_object_get(jr, "trials");
    int ncol;
    const res_col *cols = results_cols(str_of(jr, "pipeline"), &ncol);

    json_t *out = json ? json_pack("{s:I, s:s, s:s, s:s, s:I, s:[]}", "job", (json_int_t)job,
                                   "name", str_of(jr, "name"), "metric", metric, "goal",
                                   str_of(jr, "goal"), "best_trial", (json_int_t)best_id, "trials")
                       : NULL;
    if (json && !out) {
        fprintf(stderr, "bfctl results: out of memory\n");
        rc = 1;
    } else if (!json) {
        printf("job %lld '%s': %zu trials; best by %s (%s) marked *\n", job, str_of(jr, "name"),
               json_array_size(trials), metric, str_of(jr, "goal"));
        printf("  %-8s %-10s %9s %-9s", "TRIAL", "STATE", cols[0].title, "(FROM)");
        for (int k = 1; k < ncol; k++) printf(" %11s", cols[k].title);
        printf(" %10s  %s\n", metric, "PARAMS");
    }
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t) {
        if (rc) break;
        const char *from[RES_MAX_COLS];
        double v[RES_MAX_COLS];
        for (int k = 0; k < ncol; k++)
            v[k] = latest_of(t, cols[k].a, cols[k].b ? cols[k].b : cols[k].a, &from[k]);
        json_t *bv = json_object_get(t, "best");
        double best = json_is_number(bv) ? json_number_value(bv) : NAN;
        long long id = (long long)json_integer_value(json_object_get(t, "id"));
        if (json) {
            json_t *row = json_pack("{s:I, s:I, s:s, s:I, s:O}", "id", (json_int_t)id, "index",
                                    json_integer_value(json_object_get(t, "index")), "state",
                                    str_of(t, "state"), "attempts",
                                    json_integer_value(json_object_get(t, "attempts")), "params",
                                    json_object_get(t, "params"));
            for (int k = 0; row && k < ncol; k++) {
                char fk[64];
                snprintf(fk, sizeof fk, "%s_from", cols[k].key);
                if (json_object_set_new(row, cols[k].key, num_or_null(v[k])) ||
                    json_object_set_new(row, fk, from[k] ? json_string(from[k]) : json_null()))
                    rc = 1;
            }
            if (row && (json_object_set_new(row, "metric_best", num_or_null(best)) ||
                        json_object_set_new(row, "best", json_boolean(id == best_id))))
                rc = 1;
            if (!row || json_array_append_new(json_object_get(out, "trials"), row)) rc = 1;
        } else {
            char a[32] = "-", b[32] = "-", fromtxt[40] = "", params[512];
            if (from[0]) {
                snprintf(a, sizeof a, "%.4f", v[0]);
                snprintf(fromtxt, sizeof fromtxt, "(%.*s)", (int)strcspn(from[0], "/"), from[0]);
            }
            if (isfinite(best)) snprintf(b, sizeof b, "%.4f", best);
            params_text(json_object_get(t, "params"), params, sizeof params);
            printf("%c t%-7lld %-10s %9s %-9s", id == best_id ? '*' : ' ', id, str_of(t, "state"),
                   a, fromtxt);
            for (int k = 1; k < ncol; k++) {
                char c[32] = "-";
                if (from[k]) snprintf(c, sizeof c, "%.*f", cols[k].digits, v[k]);
                printf(" %11s", c);
            }
            printf(" %10s  %s\n", b, params);
        }
    }
    if (json && !rc) {
        /* 12 digits: metric values are float32 results, printed with 9 */
        char *txt = json_dumps(out, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
        if (txt)
            printf("%s\n", txt);
        else
            rc = 1;
        free(txt);
    }
    if (rc) fprintf(stderr, "bfctl results: out of memory\n");
    json_decref(out);
    json_decref(jr);
    json_decref(br);
    return rc;
}
