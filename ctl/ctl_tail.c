/* bfctl tail JOB|tTRIAL [-f] [--all]: a job's or a trial's metric points,
 * history first and then (-f) live from bfd's PUB socket, without gap or
 * duplicate. A job's tail is one short line per point, or on a terminal a
 * live table redrawn in place; ctl_tail() also serves `submit --follow`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/pipeline_decl.h"
#include "common/spark.h"
#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"
#include "protocol/proto.h"

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
    printf("t%-3lld step %6lld", trial, ctl_jint(p, "step"));
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
    /* an eval point of one cell of the bare module grid: its estimates */
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(p, "values"), key, v) {
        static const char pre[] = "eval/estimate/", post[] = "/speedup_vs_dense@577";
        size_t n = strlen(key);
        if (strncmp(key, pre, sizeof pre - 1) || n < sizeof pre + sizeof post - 2 ||
            strcmp(key + n - (sizeof post - 1), post))
            continue;
        printf(" est@577 %.*s %.2fx", (int)(n - (sizeof pre - 1) - (sizeof post - 1)),
               key + sizeof pre - 1, json_number_value(v));
        any = 1;
    }
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
    r->step = ctl_jint(p, "step");
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
    printf("t%lld seq %lld step %lld", trial, ctl_jint(p, "seq"), ctl_jint(p, "step"));
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
        if (ctl_request(c, "metrics",
                        json_pack("{s:I, s:I, s:i}", "trial", (json_int_t)trial, "after",
                                  (json_int_t)*last, "limit", 1000),
                        &r))
            return 1;
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(r, "points"), i, p) {
            if (ctl_jint(p, "seq") > *last) {
                print_point(trial, p);
                *last = ctl_jint(p, "seq");
            }
        }
        int more = json_is_true(json_object_get(r, "more"));
        json_decref(r);
        if (!more) break;
    }
    fflush(stdout);
    return 0;
}

typedef struct seen {
    long long trial, last;
} seen;

int ctl_tail(ctl_conn *c, long long job, long long trial, int follow, int compact) {
    g_compact = compact;
    seen *s = NULL;
    size_t ns = 0;
    int rc = 1;
    if (trial) {
        json_t *r;
        if (ctl_request(c, "trial", json_pack("{s:I}", "trial", (json_int_t)trial), &r)) return 1;
        job = ctl_jint(r, "job");
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
        if (ctl_request_pages(c, "job", json_pack("{s:I}", "job", (json_int_t)job), "trials", &r))
            return 1;
        json_t *ts = json_object_get(r, "trials");
        ns = json_array_size(ts);
        s = calloc(ns ? ns : 1, sizeof *s);
        g_table = follow && g_compact && isatty(STDOUT_FILENO);
        snprintf(g_curve_metric, sizeof g_curve_metric, "%s", ctl_jstr(r, "metric"));
        for (size_t i = 0; s && i < ns; i++) {
            s[i].trial = ctl_jint(json_array_get(ts, i), "id");
            if (g_table) table_state(s[i].trial, ctl_jstr(json_array_get(ts, i), "state"));
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
        if (r == 0 && !strcmp(type, "metrics") && ctl_jint(b, "job") == job) {
            long long t = ctl_jint(b, "trial");
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
                if (ctl_jint(p, "seq") > e->last) {
                    print_point(t, p);
                    e->last = ctl_jint(p, "seq");
                }
            }
            fflush(stdout);
        } else if (r == 0 && !strcmp(type, "event") && ctl_jint(b, "job") == job) {
            long long t = ctl_jint(b, "trial");
            if (g_table && t) {
                table_state(t, ctl_jstr(b, "state"));
                check = 1;
            } else if (!trial || t == trial || t == 0) {
                fprintf(stderr, "t%lld %s (attempt %lld) %s\n", t, ctl_jstr(b, "state"),
                        ctl_jint(b, "attempt"), ctl_jstr(b, "message"));
                check = 1;
            }
            if (trial && t == trial && ctl_terminal_state(ctl_jstr(b, "state"))) {
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
                if (ctl_request(c, "trial", json_pack("{s:I}", "trial", (json_int_t)trial), &tr))
                    goto out;
                int fin = ctl_terminal_state(ctl_jstr(tr, "state"));
                json_decref(tr);
                if (fin) {
                    print_history(c, trial, &s[0].last);
                    rc = 0;
                    goto out;
                }
            } else {
                int d = ctl_job_done(c, job);
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

/* ---------------------------------------------------------------- command */

const opt_spec bfctl_tail_opts[] = {
    {"follow", 'f', OPT_FLAG, 0, 0, OPT_AT(ctl_flags, follow), NULL,
     "follow live until the trials end"},
    {"all", 0, OPT_FLAG, 0, 0, OPT_AT(ctl_flags, all), NULL, "every value of a job's points"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int bfctl_tail(int argc, char **argv) {
    ctl_flags a = {0};
    int rest = argc,
        prc =
            bfctl_parse(argc, argv,
                        "metric points of a trial or of every trial of a job; -f follows live "
                        "(history first, then new points, no gap and no duplicate) until it ends. "
                        "A job's tail shows one short line per point (loss, accuracy, heads used, "
                        "s, tokens/s, validation and test results); --all, or a trial's tail, "
                        "shows every value with its sequence number",
                        &a, &rest);
    if (prc >= 0) return prc;
    argc -= rest - 1; /* the arguments after the options, argv[0] still the name */
    argv += rest - 1;
    long long job, trial;
    if (ctl_target_arg(argc, argv, NULL, "tail JOB|tTRIAL [-f] [--all]", 0, &job, &trial))
        return BF_EX_USAGE;
    int compact = trial == 0 && !a.all;
    ctl_conn *c;
    if (ctl_connect_or_say(&c)) return 1;
    int follow = a.follow;
    int rc = ctl_tail(c, job, trial, follow, compact);
    ctl_close(&c);
    return rc;
}
