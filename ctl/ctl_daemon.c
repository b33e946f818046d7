/* bfctl commands that talk to bfd: submit, ls, show, tail, cancel, stop,
 * wait, best, logs, daemon status. JOB is a job id ("3"); TRIAL is a trial
 * id written with a t ("t17"). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl/bfctl.h"
#include "common/pipeline_decl.h"
#include "common/spark.h"
#include "ctl/ctl_client.h"
#include "protocol/proto.h"

static int has_opt(int argc, char **argv, const char *o) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], o) == 0) return 1;
    return 0;
}

static int help_wanted(int argc, char **argv, const char *usage, const char *summary) {
    if (has_opt(argc, argv, "--help") || has_opt(argc, argv, "-h")) {
        printf("usage: bfctl %s\n  %s\n", usage, summary);
        return 1;
    }
    return 0;
}

/* First argument that is not an option (or NULL); options taking a value listed in with_value. */
static const char *positional(int argc, char **argv, const char *const *with_value) {
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1]) { /* "-" alone: standard input */
            for (const char *const *w = with_value; w && *w; w++)
                if (strcmp(argv[i], *w) == 0) i++;
            continue;
        }
        return argv[i];
    }
    return NULL;
}

/* "3" -> job 3; "t17" -> trial 17. Returns 0 or -1. */
static int parse_target(const char *s, long long *job, long long *trial) {
    *job = *trial = 0;
    if (!s) return -1;
    int is_trial = s[0] == 't';
    const char *p = is_trial ? s + 1 : s;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (!*p || *end || errno || v < 1) return -1;
    if (is_trial)
        *trial = v;
    else
        *job = v;
    return 0;
}

/* The JOB|tTRIAL argument of a command: want 'j' (a job), 't' (a trial) or
 * 0 (either). Returns 0, or prints the usage line and returns 1. */
static int target_arg(int argc, char **argv, const char *const *with_value, const char *usage,
                      int want, long long *job, long long *trial) {
    if (parse_target(positional(argc, argv, with_value), job, trial) || (want == 't' && !*trial) ||
        (want == 'j' && !*job)) {
        fprintf(stderr, "usage: bfctl %s\n", usage);
        return 1;
    }
    return 0;
}

static int connect_or_say(ctl_conn **c) {
    char err[2048];
    if (ctl_connect(c, err, sizeof err)) {
        fprintf(stderr, "bfctl: %s\n", err);
        return -1;
    }
    return 0;
}

/* One request; prints bfd's error itself. Returns 0 with *reply, else 1. */
static int call(ctl_conn *c, const char *type, json_t *body, json_t **reply) {
    char err[4096];
    int rc = ctl_call(c, type, body, reply, NULL, err, sizeof err);
    json_decref(body);
    if (rc == 0) return 0;
    fprintf(stderr, "bfctl: %s\n", err);
    if (rc == 1) {
        json_t *errs = json_object_get(*reply, "errors");
        size_t i;
        json_t *e;
        json_array_foreach(errs, i, e) if (json_is_string(e))
            fprintf(stderr, "%s\n", json_string_value(e));
    }
    json_decref(*reply);
    *reply = NULL;
    return 1;
}

static void print_json(json_t *j) {
    char *t = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (t) printf("%s\n", t);
    free(t);
}

static long long jint(json_t *o, const char *k) {
    return (long long)json_integer_value(json_object_get(o, k));
}
static const char *jstr(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

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

/* ------------------------------------------------------------------ points */

/* 1: one short line per point with the metrics a person follows (job tails);
 * 0: every value of every point (trial tails, and `tail JOB --all`). */
static int g_compact;

static double point_value(json_t *p, const char *name, int *found) {
    json_t *v = json_object_get(json_object_get(p, "values"), name);
    *found = json_is_number(v);
    return *found ? json_number_value(v) : 0;
}

/* The stage a point of an s2s trial comes from (its names start with
 * "STAGE/"), or NULL; stage then holds "STAGE/". */
static const char *point_stage(json_t *p, char *stage, size_t n) {
    void *it = json_object_iter(json_object_get(p, "values"));
    const char *k = it ? json_object_iter_key(it) : NULL;
    if (!k) return NULL;
    size_t len = strcspn(k, "/");
    if (k[len] != '/' || len + 2 > n) return NULL;
    memcpy(stage, k, len);
    stage[len] = '\0';
    if (stage_graph_index(pipeline_stages("s2s"), stage) < 0) return NULL;
    stage[len] = '/', stage[len + 1] = '\0';
    return stage;
}

/* A point's value by name, or by STAGE/name for a stage's point. */
static double stage_value(json_t *p, const char *stage, const char *name, int *found) {
    if (!stage) return point_value(p, name, found);
    char full[160];
    snprintf(full, sizeof full, "%s%s", stage, name);
    return point_value(p, full, found);
}

/* The compact form: "t3 step   600 | loss 1.1303 acc 0.697 heads 0.20 s 0.253 | 44.5k tok/s |
 * val/acc 0.7052 ..."; an s2s stage's point says its stage ("t3 step 4100 [distill] | loss ...
 * mse 0.0213 ...") and the eval stage's its results. */
static void print_compact(long long trial, json_t *p) {
    static const struct {
        const char *name, *label, *fmt;
    } cols[] = {{"train/loss", "loss", "%.4f"},
                {"train/acc", "acc", "%.3f"},
                {"train/heads_used", "heads", "%.2f"},
                {"train/budget_s", "s", "%.3f"},
                {"train/loss_mse", "mse", "%.4f"},
                {"train/retention", "ret", "%.3f"},
                {"val/loss", "val/loss", "%.4f"},
                {"val/acc", "val/acc", "%.4f"},
                {"val/ppl", "val/ppl", "%.2f"},
                {"val/heads_used", "val/heads", "%.3f"},
                {"val/loss_mse", "val/mse", "%.4f"},
                {"val/retention", "val/ret", "%.3f"},
                {"test/acc", "test/acc", "%.4f"},
                {"test/heads_used", "test/heads", "%.3f"},
                {"test/retention", "test/ret", "%.3f"},
                {"student/test/acc", "student/acc", "%.4f"},
                {"student/test/retention", "student/ret", "%.3f"},
                {"teacher/test/acc", "teacher/acc", "%.4f"},
                {"student/speedup_vs_teacher@577", "x@577", "%.2f"}};
    char sbuf[32];
    const char *stage = point_stage(p, sbuf, sizeof sbuf);
    printf("t%-3lld step %6lld", trial, jint(p, "step"));
    if (stage) printf(" [%.*s]", (int)strlen(stage) - 1, stage);
    printf(" |");
    int any = 0;
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        int found;
        double v = stage_value(p, stage, cols[i].name, &found);
        if (!found) continue;
        printf(" %s ", cols[i].label);
        printf(cols[i].fmt, v);
        any = 1;
    }
    int found;
    double tps = stage_value(p, stage, "train/tokens_per_s", &found);
    if (found) printf(" | %.1fk tok/s", tps / 1e3);
    if (!any && !found)
        printf(" (%zu other values; --all shows them)",
               json_object_size(json_object_get(p, "values")));
    printf("\n");
}

/* Following a job on a terminal, the tail is a live table (one row per
 * trial with its latest values, redrawn in place) instead of a stream. */
static int g_table;
static double g_next_draw;

typedef struct table_row {
    long long trial, step;
    char state[16], stage[16]; /* stage: an s2s trial's latest ("" = none) */
    double v[7]; /* loss, acc, heads, s, val/acc, test/acc, tokens/s; NAN = none yet */
    spark curve; /* the job's metric over the whole history */
} table_row;

static char g_curve_metric[64]; /* the job's metric, sparklined per row */
static table_row *g_rows;
static size_t g_nrows, g_drawn;
static const char *const g_row_metric[7] = {"train/loss",        "train/acc", "train/heads_used",
                                            "train/budget_s",    "val/acc",   "test/acc",
                                            "train/tokens_per_s"};

static table_row *table_row_of(long long trial) {
    for (size_t i = 0; i < g_nrows; i++)
        if (g_rows[i].trial == trial) return &g_rows[i];
    table_row *n = realloc(g_rows, (g_nrows + 1) * sizeof *n);
    if (!n) return NULL;
    g_rows = n;
    table_row *r = &g_rows[g_nrows++];
    memset(r, 0, sizeof *r);
    r->trial = trial;
    snprintf(r->state, sizeof r->state, "PENDING");
    for (int i = 0; i < 7; i++) r->v[i] = NAN;
    spark_init(&r->curve);
    return r;
}

static void table_point(long long trial, json_t *p) {
    table_row *r = table_row_of(trial);
    if (!r) return;
    r->step = jint(p, "step");
    if (!strcmp(r->state, "PENDING")) snprintf(r->state, sizeof r->state, "RUNNING");
    char sbuf[32];
    const char *stage = point_stage(p, sbuf, sizeof sbuf);
    if (stage) snprintf(r->stage, sizeof r->stage, "%.*s", (int)strlen(stage) - 1, stage);
    for (int i = 0; i < 7; i++) {
        int found;
        double v = stage_value(p, stage, g_row_metric[i], &found);
        if (found) r->v[i] = v;
    }
    json_t *cv = json_object_get(json_object_get(p, "values"), g_curve_metric);
    if (json_is_number(cv)) spark_add(&r->curve, json_number_value(cv));
}

static void table_state(long long trial, const char *state) {
    table_row *r = table_row_of(trial);
    if (r && state && *state) snprintf(r->state, sizeof r->state, "%s", state);
}

/* Redraws the table over the previous drawing (cursor up, clear below). */
static void table_draw(long long job) {
    if (g_drawn) printf("\033[%zuA\033[J", g_drawn);
    printf("job %lld, live (Ctrl-C leaves the job running)\n", job);
    printf("%-6s %-10s %7s %8s %7s %6s %6s %8s %8s %9s  %s\n", "TRIAL", "STATE", "STEP", "LOSS",
           "ACC", "HEADS", "S", "VAL/ACC", "TEST/ACC", "TOK/S", g_curve_metric);
    int utf8 = spark_utf8_locale();
    for (size_t i = 0; i < g_nrows; i++) {
        const table_row *r = &g_rows[i];
        char state[40];
        if (r->stage[0] && !strcmp(r->state, "RUNNING"))
            snprintf(state, sizeof state, "%s", r->stage); /* an s2s trial: its stage */
        else
            snprintf(state, sizeof state, "%s", r->state);
        printf("t%-5lld %-10s %7lld", r->trial, state, r->step);
        const int width[6] = {8, 7, 6, 6, 8, 8};
        const int prec[6] = {4, 3, 2, 3, 4, 4};
        for (int k = 0; k < 6; k++) {
            if (isnan(r->v[k]))
                printf(" %*s", width[k], "-");
            else
                printf(" %*.*f", width[k], prec[k], r->v[k]);
        }
        char curve[128];
        spark_render(&r->curve, 16, utf8, curve, sizeof curve);
        if (isnan(r->v[6]))
            printf(" %9s  %s\n", "-", curve);
        else
            printf(" %8.1fk  %s\n", r->v[6] / 1e3, curve);
    }
    g_drawn = g_nrows + 2;
    fflush(stdout);
}

static void print_point(long long trial, json_t *p) {
    if (g_table) {
        table_point(trial, p);
        return;
    }
    if (g_compact) {
        print_compact(trial, p);
        return;
    }
    printf("t%lld seq %lld step %lld", trial, jint(p, "seq"), jint(p, "step"));
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(p, "values"), k, v) {
        if (json_is_number(v)) printf("  %s %.6g", k, json_number_value(v));
    }
    printf("\n");
}

/* Prints a trial's history after *last; updates *last. Returns 0 or 1. */
static int print_history(ctl_conn *c, long long trial, long long *last) {
    for (;;) {
        json_t *r;
        if (call(c, "metrics",
                 json_pack("{s:I, s:I, s:i}", "trial", (json_int_t)trial, "after",
                           (json_int_t)*last, "limit", 1000),
                 &r))
            return 1;
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(r, "points"), i, p) {
            if (jint(p, "seq") > *last) {
                print_point(trial, p);
                *last = jint(p, "seq");
            }
        }
        int more = json_is_true(json_object_get(r, "more"));
        json_decref(r);
        if (!more) break;
    }
    fflush(stdout);
    return 0;
}

static int terminal(const char *state) {
    return !strcmp(state, "COMPLETED") || !strcmp(state, "FAILED") || !strcmp(state, "CANCELLED") ||
           !strcmp(state, "STOPPED");
}

/* wait status of a job: 0 not done, 1 done ok, 2 done with failures, -1 error */
static int job_done(ctl_conn *c, long long job) {
    json_t *r;
    if (call(c, "wait", json_pack("{s:I}", "job", (json_int_t)job), &r)) return -1;
    int done = json_is_true(json_object_get(r, "done"));
    int ok = json_is_true(json_object_get(r, "ok"));
    json_decref(r);
    return done ? (ok ? 1 : 2) : 0;
}

typedef struct seen {
    long long trial, last;
} seen;

/* tail: history, then (follow) live points without gap or duplicate. */
static int tail(ctl_conn *c, long long job, long long trial, int follow) {
    seen *s = NULL;
    size_t ns = 0;
    int rc = 1;
    if (trial) {
        json_t *r;
        if (call(c, "trial", json_pack("{s:I}", "trial", (json_int_t)trial), &r)) return 1;
        job = jint(r, "job");
        json_decref(r);
    }
    char t1[64], t2[64];
    snprintf(t1, sizeof t1, trial ? "trial/%lld" : "trial/", trial);
    snprintf(t2, sizeof t2, "job/%lld", job);
    const char *topics[2] = {t1, t2};
    char err[2048];
    if (follow && ctl_subscribe(c, topics, 2, err, sizeof err)) {
        fprintf(stderr, "bfctl: %s\n", err);
        return 1;
    }
    /* the trials to show */
    if (trial) {
        s = calloc(1, sizeof *s);
        if (!s) return 1;
        s[0].trial = trial;
        ns = 1;
    } else {
        json_t *r;
        if (call(c, "job", json_pack("{s:I}", "job", (json_int_t)job), &r)) return 1;
        json_t *ts = json_object_get(r, "trials");
        ns = json_array_size(ts);
        s = calloc(ns ? ns : 1, sizeof *s);
        g_table = follow && g_compact && isatty(STDOUT_FILENO);
        snprintf(g_curve_metric, sizeof g_curve_metric, "%s", jstr(r, "metric"));
        for (size_t i = 0; s && i < ns; i++) {
            s[i].trial = jint(json_array_get(ts, i), "id");
            if (g_table) table_state(s[i].trial, jstr(json_array_get(ts, i), "state"));
        }
        json_decref(r);
        if (!s) return 1;
    }
    for (size_t i = 0; i < ns; i++)
        if (print_history(c, s[i].trial, &s[i].last)) goto out;
    if (g_table) table_draw(job);
    if (!follow) {
        rc = 0;
        goto out;
    }
    double next_check = 0;
    for (;;) {
        char topic[PROTO_MAX_TOPIC + 1], type[PROTO_MAX_TYPE + 1];
        json_t *b;
        int r = ctl_next_pub(c, 500, topic, type, &b, err, sizeof err);
        if (r < 0) {
            fprintf(stderr, "bfctl: %s\n", err);
            goto out;
        }
        int check = 0;
        if (r == 0 && !strcmp(type, "metrics") && jint(b, "job") == job) {
            long long t = jint(b, "trial");
            if (trial && t != trial) {
                json_decref(b);
                continue;
            }
            seen *e = NULL;
            for (size_t i = 0; i < ns; i++)
                if (s[i].trial == t) e = &s[i];
            if (!e) {
                seen *nsn = realloc(s, (ns + 1) * sizeof *s);
                if (!nsn) {
                    json_decref(b);
                    goto out;
                }
                s = nsn;
                e = &s[ns++];
                e->trial = t;
                e->last = 0;
            }
            size_t i;
            json_t *p;
            json_array_foreach(json_object_get(b, "points"), i, p) {
                if (jint(p, "seq") > e->last) {
                    print_point(t, p);
                    e->last = jint(p, "seq");
                }
            }
            fflush(stdout);
        } else if (r == 0 && !strcmp(type, "event") && jint(b, "job") == job) {
            long long t = jint(b, "trial");
            if (g_table && t) {
                table_state(t, jstr(b, "state"));
                check = 1;
            } else if (!trial || t == trial || t == 0) {
                fprintf(stderr, "t%lld %s (attempt %lld) %s\n", t, jstr(b, "state"),
                        jint(b, "attempt"), jstr(b, "message"));
                check = 1;
            }
            if (trial && t == trial && terminal(jstr(b, "state"))) {
                json_decref(b);
                rc = 0;
                goto out;
            }
        }
        json_decref(b);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double now = ts.tv_sec + ts.tv_nsec * 1e-9;
        if (g_table && (r == 0 || check) && now > g_next_draw) {
            table_draw(job);
            g_next_draw = now + 0.25;
        }
        if (check || now > next_check) {
            next_check = now + 2;
            if (trial) {
                json_t *tr;
                if (call(c, "trial", json_pack("{s:I}", "trial", (json_int_t)trial), &tr)) goto out;
                int fin = terminal(jstr(tr, "state"));
                json_decref(tr);
                if (fin) {
                    print_history(c, trial, &s[0].last);
                    rc = 0;
                    goto out;
                }
            } else {
                int d = job_done(c, job);
                if (d < 0) goto out;
                if (d > 0) {
                    for (size_t i = 0; i < ns; i++) print_history(c, s[i].trial, &s[i].last);
                    rc = 0;
                    goto out;
                }
            }
        }
    }
out:
    if (g_table) {
        table_draw(job);
        free(g_rows);
        g_rows = NULL;
        g_nrows = g_drawn = 0;
        g_table = 0;
    }
    free(s);
    return rc;
}

/* ---------------------------------------------------------------- commands */

static int wait_job(ctl_conn *c, long long job, int quiet) {
    for (;;) {
        int d = job_done(c, job);
        if (d < 0) return 1;
        if (d > 0) {
            json_t *r;
            if (!quiet && call(c, "wait", json_pack("{s:I}", "job", (json_int_t)job), &r) == 0) {
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

int bfctl_submit(int argc, char **argv) {
    static const char *u = "submit SWEEP.yaml|- [--set KEY=VALUE ...] [--wait] [--follow]";
    if (help_wanted(argc, argv, u,
                    "submit a sweep to bfd (- reads standard input); prints the job id (--set: "
                    "a config key of the sweep's base, over the file's value, as bfworker train "
                    "--set; --wait: until it ends, exit 0 when every trial completed; --follow: "
                    "tail its metrics live, then wait)"))
        return 0;
    static const char *const with_value[] = {"--set", NULL};
    const char *file = positional(argc, argv, with_value);
    char **sets = calloc((size_t)argc, sizeof *sets);
    int n_sets = 0;
    for (int i = 1; sets && i + 1 < argc; i++)
        if (!strcmp(argv[i], "--set")) sets[n_sets++] = argv[++i];
    if (!file || !sets) {
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
    if (n_sets) {
        char *edited;
        int src = ctl_apply_sets(text, n, file, sets, n_sets, &edited, terr, sizeof terr);
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
    if (connect_or_say(&c)) {
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
    if (call(c, "submit", b, &r)) {
        ctl_close(&c);
        return 1;
    }
    long long job = jint(r, "job");
    printf("%lld\n", job);
    fflush(stdout);
    fprintf(stderr, "job %lld submitted: '%s', %lld trial%s\n", job, jstr(r, "name"),
            jint(r, "trials"), jint(r, "trials") == 1 ? "" : "s");
    json_decref(r);
    int rc = 0;
    if (has_opt(argc, argv, "--follow")) {
        g_compact = 1;
        rc = tail(c, job, 0, 1);
        if (rc == 0) rc = wait_job(c, job, 0);
    } else if (has_opt(argc, argv, "--wait")) {
        rc = wait_job(c, job, 0);
    }
    ctl_close(&c);
    return rc;
}

int bfctl_ls(int argc, char **argv) {
    if (help_wanted(argc, argv, "ls [--json]", "list jobs with their trial states")) return 0;
    int json = has_opt(argc, argv, "--json");
    ctl_conn *c;
    if (connect_or_say(&c)) return 1;
    json_t *r;
    int rc = call(c, "jobs", NULL, &r);
    ctl_close(&c);
    if (rc) return 1;
    json_t *jobs = json_object_get(r, "jobs");
    if (json) {
        print_json(jobs);
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
            if (jint(j, "failed") > 0) snprintf(nf, sizeof nf, "%lld!", jint(j, "failed"));
            printf("%-5lld %-24s %-13s %6lld %6s  %s\n", jint(j, "id"), jstr(j, "name"),
                   jstr(j, "pipeline"), jint(j, "n_trials"), nf, st);
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
        printf("t%-6lld %5lld %-10s %4lld %5lld %10s %10s  %s\n", jint(t, "id"), jint(t, "index"),
               jstr(t, "state"), jint(t, "stage_runs"), jint(t, "retries"), l, b, params);
    else
        printf("t%-6lld %5lld %-10s %4lld %10s %10s  %s\n", jint(t, "id"), jint(t, "index"),
               jstr(t, "state"), jint(t, "attempts"), l, b, params);
    if (*jstr(t, "reason")) printf("        %s\n", jstr(t, "reason")); /* an early stop's */
    json_t *f = json_object_get(t, "failure");                         /* a FAILED trial's */
    if (f && jint(f, "attempt") > 0)
        printf("        failed: attempt %lld: %s\n", jint(f, "attempt"), jstr(f, "message"));
    else if (f)
        printf("        failed before its first attempt started\n");
    if (*jstr(t, "waiting")) printf("        %s\n", jstr(t, "waiting")); /* a shared stage */
}

/* A job's shared-stage summary (s2s), one line. */
static void print_job_stages(json_t *sc) {
    if (!sc) return;
    json_t *st = json_object_get(sc, "states");
    printf("stages: %lld distinct of %lld used by its trials; %lld shared by two or more trials, "
           "%lld uses served by another trial's run (%lld stage%s from earlier jobs); %lld run "
           "by its own trials; done %lld, running %lld, pending %lld, failed %lld\n",
           jint(sc, "distinct"), jint(sc, "uses"), jint(sc, "shared"), jint(sc, "reused"),
           jint(sc, "from_other_jobs"), jint(sc, "from_other_jobs") == 1 ? "" : "s",
           jint(sc, "run"), jint(st, "done"), jint(st, "running"), jint(st, "pending"),
           jint(st, "failed"));
}

/* A trial's stages (s2s), one line each. */
static void print_trial_stages(json_t *r) {
    json_t *arr = json_object_get(r, "stages");
    if (!arr) return;
    if (*jstr(r, "waiting")) printf("%s\n", jstr(r, "waiting"));
    printf("%-9s %-16s %-8s %-7s %3s  %s\n", "STAGE", "KEY", "STATE", "RUN BY", "ATT", "FOLDER");
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o) {
        char by[32] = "-";
        if (json_is_integer(json_object_get(o, "trial")))
            snprintf(by, sizeof by, "t%lld%s", jint(o, "trial"),
                     json_is_true(json_object_get(o, "shared")) ? "*" : "");
        printf("%-9s %-16s %-8s %-7s %3lld  %s\n", jstr(o, "name"), jstr(o, "key"),
               jstr(o, "state"), by, jint(o, "attempts"), jstr(o, "folder"));
        if (!strcmp(jstr(o, "state"), "failed") && *jstr(o, "message"))
            printf("          %s\n", jstr(o, "message"));
    }
    printf("(* run by another trial and shared)\n");
}

/* Why a FAILED trial failed: its last failed attempt's end and the last
 * lines of its log (both from bfd's `trial` reply). */
static void print_failure(json_t *r, long long trial) {
    json_t *f = json_object_get(r, "failure");
    if (!f) return;
    if (jint(f, "attempt") > 0)
        printf("failed: attempt %lld: %s\n", jint(f, "attempt"), jstr(f, "message"));
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

int bfctl_show(int argc, char **argv) {
    if (help_wanted(argc, argv, "show JOB|tTRIAL [--json] [--rungs]",
                    "a job with its trials (state, attempts, latest and best metric, the reason "
                    "of an early stop, of a failure or of a wait for a shared stage; for s2s how "
                    "many stages "
                    "were shared), or one trial with its config (for s2s its stages: name, key, "
                    "state, the trial that ran it, folder; of a FAILED trial why: the failed "
                    "attempt's exit status and reason and the last lines of its log); JOB --rungs: "
                    "the job's "
                    "early-stopping decisions (per ASHA rung: trials, values, cutoff)"))
        return 0;
    long long job, trial;
    if (target_arg(argc, argv, NULL, "show JOB|tTRIAL [--json] [--rungs]   (e.g. 3, or t17)", 0,
                   &job, &trial))
        return BF_EX_USAGE;
    int json = has_opt(argc, argv, "--json");
    if (has_opt(argc, argv, "--rungs")) {
        if (!job) {
            fprintf(stderr, "bfctl: show --rungs takes a job (e.g. 3), not a trial\n");
            return BF_EX_USAGE;
        }
        return bfctl_show_rungs(job, json);
    }
    ctl_conn *c;
    if (connect_or_say(&c)) return 1;
    json_t *r;
    int rc = job ? call(c, "job", json_pack("{s:I}", "job", (json_int_t)job), &r)
                 : call(c, "trial", json_pack("{s:I}", "trial", (json_int_t)trial), &r);
    ctl_close(&c);
    if (rc) return 1;
    if (json) {
        print_json(r);
    } else if (job) {
        char st[256];
        states_text(json_object_get(r, "states"), st, sizeof st);
        printf("job %lld '%s': pipeline %s, %lld trials (%s), metric %s (%s)\n", job,
               jstr(r, "name"), jstr(r, "pipeline"), jint(r, "n_trials"), st, jstr(r, "metric"),
               jstr(r, "goal"));
        if (jint(r, "to_propose") > 0)
            printf("%s: %lld trial%s still to be proposed\n", jstr(r, "method"),
                   jint(r, "to_propose"), jint(r, "to_propose") == 1 ? "" : "s");
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
            print_trial_row(t, jstr(r, "metric"));
    } else {
        printf("trial %lld (job %lld, index %lld): %s, %lld attempt%s, config %s\nlog: %s\n", trial,
               jint(r, "job"), jint(r, "index"), jstr(r, "state"), jint(r, "attempts"),
               jint(r, "attempts") == 1 ? "" : "s", jstr(r, "hash"), jstr(r, "log"));
        if (*jstr(r, "reason")) printf("early stop: %s\n", jstr(r, "reason"));
        print_failure(r, trial);
        print_trial_stages(r);
        printf("config:\n%s", jstr(r, "config"));
    }
    json_decref(r);
    return 0;
}

int bfctl_tail(int argc, char **argv) {
    if (help_wanted(argc, argv, "tail JOB|tTRIAL [-f|--follow] [--all]",
                    "metric points of a trial or of every trial of a job; -f follows live "
                    "(history first, then new points, no gap and no duplicate) until it ends. "
                    "A job's tail shows one short line per point (loss, accuracy, heads used, "
                    "s, tokens/s, validation and test results); --all, or a trial's tail, "
                    "shows every value with its sequence number"))
        return 0;
    long long job, trial;
    if (target_arg(argc, argv, NULL, "tail JOB|tTRIAL [-f] [--all]", 0, &job, &trial))
        return BF_EX_USAGE;
    g_compact = trial == 0 && !has_opt(argc, argv, "--all");
    ctl_conn *c;
    if (connect_or_say(&c)) return 1;
    int rc = tail(c, job, trial, has_opt(argc, argv, "-f") || has_opt(argc, argv, "--follow"));
    ctl_close(&c);
    return rc;
}

int bfctl_cancel(int argc, char **argv) {
    if (help_wanted(argc, argv, "cancel JOB|tTRIAL",
                    "cancel a job's pending and running trials, or one trial"))
        return 0;
    long long job, trial;
    if (target_arg(argc, argv, NULL, "cancel JOB|tTRIAL", 0, &job, &trial)) return BF_EX_USAGE;
    ctl_conn *c;
    if (connect_or_say(&c)) return 1;
    json_t *r;
    int rc = call(c, "cancel",
                  job ? json_pack("{s:I}", "job", (json_int_t)job)
                      : json_pack("{s:I}", "trial", (json_int_t)trial),
                  &r);
    ctl_close(&c);
    if (rc) return 1;
    printf("%lld trial%s cancelled\n", jint(r, "cancelled"), jint(r, "cancelled") == 1 ? "" : "s");
    json_decref(r);
    return 0;
}

int bfctl_stop(int argc, char **argv) {
    if (help_wanted(argc, argv, "stop tTRIAL",
                    "early-stop a running trial: it writes a checkpoint and becomes STOPPED"))
        return 0;
    long long job, trial;
    if (target_arg(argc, argv, NULL, "stop tTRIAL", 't', &job, &trial)) return BF_EX_USAGE;
    ctl_conn *c;
    if (connect_or_say(&c)) return 1;
    json_t *r;
    int rc = call(c, "stop", json_pack("{s:I}", "trial", (json_int_t)trial), &r);
    ctl_close(&c);
    if (rc) return 1;
    printf("trial %lld stopping\n", trial);
    json_decref(r);
    return 0;
}

int bfctl_wait(int argc, char **argv) {
    if (help_wanted(argc, argv, "wait JOB",
                    "wait until no trial of the job is pending or running; exit 0 when all "
                    "completed, 1 when any failed or was cancelled"))
        return 0;
    long long job, trial;
    if (target_arg(argc, argv, NULL, "wait JOB", 'j', &job, &trial)) return BF_EX_USAGE;
    ctl_conn *c;
    if (connect_or_say(&c)) return 1;
    int rc = wait_job(c, job, 0);
    ctl_close(&c);
    return rc;
}

int bfctl_best(int argc, char **argv) {
    static const char *const vals[] = {"-n", NULL};
    if (help_wanted(argc, argv, "best JOB [-n N] [--json]",
                    "the job's best trials by its metric (default 5)"))
        return 0;
    long long job, trial, n = 5;
    if (target_arg(argc, argv, vals, "best JOB [-n N] [--json]", 'j', &job, &trial))
        return BF_EX_USAGE;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "-n")) n = atoll(argv[i + 1]);
    if (n < 1 || n > 1000) {
        fprintf(stderr, "bfctl best: -n must be in [1, 1000]\n");
        return BF_EX_USAGE;
    }
    ctl_conn *c;
    if (connect_or_say(&c)) return 1;
    json_t *r;
    int rc =
        call(c, "best", json_pack("{s:I, s:I}", "job", (json_int_t)job, "n", (json_int_t)n), &r);
    ctl_close(&c);
    if (rc) return 1;
    if (has_opt(argc, argv, "--json")) {
        print_json(r);
    } else {
        printf("best of job %lld by %s (%s)\n", job, jstr(r, "metric"), jstr(r, "goal"));
        printf("%-7s %5s %-10s %4s %10s %10s  %s\n", "TRIAL", "INDEX", "STATE", "ATT", "LATEST",
               "BEST", "PARAMS");
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(r, "trials"), i, t)
            print_trial_row(t, jstr(r, "metric"));
    }
    json_decref(r);
    return 0;
}

int bfctl_logs(int argc, char **argv) {
    if (help_wanted(argc, argv, "logs tTRIAL [-f]",
                    "a trial's log (its workers' stdout and stderr); -f follows it"))
        return 0;
    long long job, trial;
    if (target_arg(argc, argv, NULL, "logs tTRIAL [-f]", 't', &job, &trial)) return BF_EX_USAGE;
    int follow = has_opt(argc, argv, "-f");
    ctl_conn *c;
    if (connect_or_say(&c)) return 1;
    long long off = 0;
    int rc = 0;
    for (;;) {
        json_t *r;
        if (call(c, "logs",
                 json_pack("{s:I, s:I}", "trial", (json_int_t)trial, "offset", (json_int_t)off),
                 &r)) {
            rc = 1;
            break;
        }
        const char *data = jstr(r, "data");
        fwrite(data, 1, strlen(data), stdout);
        fflush(stdout);
        long long next = jint(r, "next"), size = jint(r, "size");
        json_decref(r);
        int got = next > off;
        off = next;
        if (got && off < size) continue;
        if (!follow) break;
        json_t *t;
        if (call(c, "trial", json_pack("{s:I}", "trial", (json_int_t)trial), &t)) {
            rc = 1;
            break;
        }
        int fin = terminal(jstr(t, "state"));
        json_decref(t);
        if (fin && !got) break;
        usleep(300000);
    }
    ctl_close(&c);
    return rc;
}

int bfctl_daemon(int argc, char **argv) {
    if (help_wanted(argc, argv, "daemon status [--json] [--all]",
                    "whether bfd runs, its slots, GPUs, endpoints and running trials (the first "
                    "100 live attempts; --all: every one)"))
        return 0;
    const char *sub = positional(argc, argv, NULL);
    if (!sub || strcmp(sub, "status") != 0) {
        fprintf(stderr, "usage: bfctl daemon status [--json] [--all]\n");
        return BF_EX_USAGE;
    }
    ctl_conn *c;
    if (connect_or_say(&c)) return 1;
    json_t *r;
    json_t *req = has_opt(argc, argv, "--all") ? NULL : json_pack("{s:i}", "running_max", 100);
    int rc = call(c, "status", req, &r); /* takes req */
    ctl_close(&c);
    if (rc) return 1;
    if (has_opt(argc, argv, "--json")) {
        print_json(r);
    } else {
        json_t *counts = json_object_get(r, "counts");
        printf("bfd %lld serving %s (protocol %lld, launcher %s)\n", jint(r, "pid"),
               jstr(r, "home"), jint(r, "version"), jstr(r, "launcher"));
        printf("slots %lld free of %lld, GPUs %zu free of %zu\n", jint(r, "slots_free"),
               jint(r, "slots"), json_array_size(json_object_get(r, "gpus_free")),
               json_array_size(json_object_get(r, "gpus")));
        printf("jobs %lld, trials pending %lld, running %lld\n", jint(counts, "jobs"),
               jint(counts, "trials_pending"), jint(counts, "trials_running"));
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(r, "agents"), i, t)
            printf("agent %s (pid %lld): %lld of %lld slots used, last heard %.1f s ago%s\n",
                   jstr(t, "name"), jint(t, "pid"), jint(t, "used"), jint(t, "slots"),
                   json_number_value(json_object_get(t, "last_seen_s")),
                   json_is_false(json_object_get(t, "reachable"))
                       ? " (unreachable: no launch goes to it until it is heard from)"
                       : "");
        json_array_foreach(json_object_get(r, "running"), i, t) {
            char where[120];
            if (json_is_string(json_object_get(t, "agent")))
                snprintf(where, sizeof where, "on agent %s", jstr(t, "agent"));
            else
                snprintf(where, sizeof where, "pid %lld", jint(t, "pid"));
            printf("  t%lld (job %lld) attempt %lld %s, %lld slot%s%s\n", jint(t, "trial"),
                   jint(t, "job"), jint(t, "attempt"), where, jint(t, "slots"),
                   jint(t, "slots") == 1 ? "" : "s",
                   json_is_true(json_object_get(t, "reattached")) ? ", reattached" : "");
        }
        long long more = jint(r, "running_total") - (long long)i;
        if (more > 0)
            printf("  ... and %lld more live attempt%s (bfctl daemon status --all)\n", more,
                   more == 1 ? "" : "s");
    }
    json_decref(r);
    return 0;
}
