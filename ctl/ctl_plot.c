/* bfctl plot JOB|tTRIAL: metric curves drawn with cairo into a PNG or SVG.
 * One panel per metric (default: the job's), one line per trial coloured
 * from one palette, a legend with each trial's swept values, the best trial
 * by the job's metric drawn thicker with its best point marked, labelled
 * axes with round ticks. Data from bfd: `job`, `best`, paged `metrics`. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl/bfctl.h"
#include "ctl/ctl_client.h"
#include "ctl/plot_draw.h"

#define PLOT_PAGE 10000

static const char usage_text[] =
    "usage: bfctl plot JOB|tTRIAL [--metric NAME ...] [--x step|time] [-o FILE.png|FILE.svg] "
    "[--size WxH] [--logy] [--smooth K] [--best N]\n";

/* Remembers a metric name the job's trials wrote, once. */
static void saw_name(plot *p, const char *name) {
    for (int i = 0; i < p->n_names; i++)
        if (!strcmp(p->names[i], name)) return;
    if (p->n_names < PLOT_MAX_NAMES) {
        char *d = strdup(name);
        if (d) p->names[p->n_names++] = d;
    }
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int push(plot_series *s, double x, double y) {
    if (s->n == s->cap) {
        if (s->cap >= PLOT_MAX_POINTS) return -1;
        size_t cap = s->cap ? 2 * s->cap : 256;
        double *nx = realloc(s->x, cap * sizeof *nx);
        if (!nx) return -1;
        s->x = nx;
        double *ny = realloc(s->y, cap * sizeof *ny);
        if (!ny) return -1;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
    return 0;
}

static void params_label(json_t *params, long long trial, char *buf, size_t len) {
    size_t w = (size_t)snprintf(buf, len, "t%lld", trial);
    const char *k;
    json_t *v;
    json_object_foreach(params, k, v) {
        char *vt = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(6));
        if (w < len) w += (size_t)snprintf(buf + w, len - w, "  %s=%s", k, vt ? vt : "?");
        free(vt);
    }
}

/* Whether trial id is among the `best` reply's trials. */
static int ranked(json_t *br, long long id) {
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(br, "trials"), i,
                       t) if ((long long)json_integer_value(json_object_get(t, "id")) ==
                              id) return 1;
    return 0;
}

/* A trial's first swept value as "k=v" (its group past PLOT_PALETTE trials). */
static void first_value(json_t *params, char *buf, size_t len) {
    buf[0] = '\0';
    void *it = json_object_iter(params);
    if (!it) return;
    char *vt = json_dumps(json_object_iter_value(it),
                          JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(6));
    snprintf(buf, len, "%s=%s", json_object_iter_key(it), vt ? vt : "?");
    free(vt);
}

/* Every point of one trial into the series of each metric. */
static int load_trial(ctl_conn *c, plot *p, size_t ti, long long trial) {
    long long after = 0;
    for (;;) {
        json_t *m;
        if (ctl_call_or_say(c, "metrics",
                            json_pack("{s:I, s:I, s:i}", "trial", (json_int_t)trial, "after",
                                      (json_int_t)after, "limit", PLOT_PAGE),
                            &m))
            return -1;
        size_t i;
        json_t *pt;
        json_array_foreach(json_object_get(m, "points"), i, pt) {
            json_t *vals = json_object_get(pt, "values");
            const char *key;
            json_t *kv;
            json_object_foreach(vals, key, kv) saw_name(p, key);
            double t = json_number_value(json_object_get(pt, "time"));
            double x = p->x_time ? t : (double)json_integer_value(json_object_get(pt, "step"));
            for (int k = 0; k < p->n_metrics; k++) {
                json_t *v = json_object_get(vals, p->metrics[k]);
                if (!json_is_number(v) || !isfinite(json_number_value(v))) continue;
                if (p->t0 == 0 || t < p->t0) p->t0 = t;
                if (push(&p->s[k][ti], x, json_number_value(v))) {
                    fprintf(stderr, "bfctl plot: trial %lld has too many points to draw\n", trial);
                    json_decref(m);
                    return -1;
                }
            }
        }
        long long last = (long long)json_integer_value(json_object_get(m, "last"));
        int more = json_is_true(json_object_get(m, "more")) && last > after;
        json_decref(m);
        after = last;
        if (!more) return 0;
    }
}

/* -------------------------------------------------------------- the command */

static int parse_target(const char *s, long long *job, long long *trial) {
    char *end;
    errno = 0;
    int t = s[0] == 't';
    long long v = strtoll(s + t, &end, 10);
    if (!s[t] || *end || errno || v < 1) return -1;
    *(t ? trial : job) = v;
    return 0;
}

/* What the command line asks for besides p's own settings. */
typedef struct plot_args {
    long long job, trial; /* JOB, or tTRIAL (then job 0 until bfd says) */
    const char *out;      /* -o, or NULL: NAME-JOB.png */
    int svg;              /* out names a .svg */
    int w, h;             /* --size, or 0: the default for the panels */
} plot_args;

/* What `bfctl plot` is told (bfctl_plot_opts); checked further in parse_options. */
typedef struct plot_cli {
    opt_list metrics;
    const char *x, *out, *size;
    double smooth;
    int logy, best;
} plot_cli;

const opt_spec bfctl_plot_opts[] = {
    {"metric", 0, OPT_LIST, 0, 0, OPT_AT(plot_cli, metrics), "M",
     "a panel of this metric, repeatable (the job's metric)"},
    {"x", 0, OPT_STR, 0, 0, OPT_AT(plot_cli, x), "step|time", "x axis (step)"},
    {"", 'o', OPT_STR, 0, 0, OPT_AT(plot_cli, out), "F", "a .png or .svg (NAME-JOB.png)"},
    {"size", 0, OPT_STR, 0, 0, OPT_AT(plot_cli, size), "WxH", "pixels, 200x150 .. 8000x8000"},
    {"logy", 0, OPT_FLAG, 0, 0, OPT_AT(plot_cli, logy), NULL, "log10 y axis"},
    {"smooth", 0, OPT_DOUBLE, 0, 1, OPT_AT(plot_cli, smooth), "K",
     "EMA weight in [0, 1) (0: raw points)"},
    {"best", 0, OPT_INT, 1, 1000, OPT_AT(plot_cli, best), "N",
     "the N best trials in colour, the rest grey"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

/* argv into p's settings and a: 0, 1 after printing --help, or BF_EX_USAGE with a message. */
static int parse_options(int argc, char **argv, plot *p, plot_args *a) {
    plot_cli o = {.metrics = {p->metrics, 0, PLOT_MAX_METRICS}};
    int rest = argc,
        prc = bfctl_parse(argc, argv,
                          "metric curves of a job's trials (or one trial): one line per trial, the "
                          "legend with its swept values, the best trial by the job's metric drawn "
                          "thicker with its best point ringed; one panel per --metric (default: "
                          "the job's metric); x is the step or the seconds since the first point; "
                          "-o names a .png or .svg (default NAME-JOB.png), --size its pixels "
                          "(default 1000 wide, 600 tall for one panel and 480 more per further "
                          "panel); a metric a finished job never wrote is an error listing those "
                          "it has; prints the file's path",
                          &o, &rest);
    if (prc >= 0) return prc == 0 ? 1 : prc;
    p->n_metrics = o.metrics.n;
    p->logy = o.logy;
    p->best_n = o.best;
    p->smooth = o.smooth;
    if (p->smooth >= 1) {
        fprintf(stderr, "bfctl plot: --smooth must be a weight in [0, 1), got '%g'\n", p->smooth);
        return BF_EX_USAGE;
    }
    if (o.x && strcmp(o.x, "step") && strcmp(o.x, "time")) {
        fprintf(stderr, "bfctl plot: --x must be step or time, got '%s'\n", o.x);
        return BF_EX_USAGE;
    }
    p->x_time = o.x && !strcmp(o.x, "time");
    if (o.size && (sscanf(o.size, "%dx%d", &a->w, &a->h) != 2 || a->w < 200 || a->h < 150 ||
                   a->w > 8000 || a->h > 8000)) {
        fprintf(stderr, "bfctl plot: --size must be WxH within 200x150 .. 8000x8000\n");
        return BF_EX_USAGE;
    }
    a->out = o.out;
    const char *target = rest < argc ? argv[rest] : NULL;
    if (argc - rest > 1) {
        fputs(usage_text, stderr);
        return BF_EX_USAGE;
    }
    if (!target || parse_target(target, &a->job, &a->trial)) {
        fputs(usage_text, stderr);
        return BF_EX_USAGE;
    }
    if (a->out) {
        size_t n = strlen(a->out);
        a->svg = n > 4 && !strcmp(a->out + n - 4, ".svg");
        if (!a->svg && !(n > 4 && !strcmp(a->out + n - 4, ".png"))) {
            fprintf(stderr, "bfctl plot: -o must name a .png or .svg file, got '%s'\n", a->out);
            return BF_EX_USAGE;
        }
    }
    return 0;
}

/* The job (*jr), its best and its trials' points from bfd into p: 0, or -1 with a message. */
static int request_metrics(ctl_conn *c, plot *p, plot_args *a, json_t **jr) {
    json_t *br = NULL;
    int rc = -1;
    if (a->trial) {
        json_t *tr;
        if (ctl_call_or_say(c, "trial", json_pack("{s:I}", "trial", (json_int_t)a->trial), &tr))
            return -1;
        a->job = (long long)json_integer_value(json_object_get(tr, "job"));
        json_decref(tr);
    }
    if (ctl_request_pages(c, "job", json_pack("{s:I}", "job", (json_int_t)a->job), "trials", jr) ||
        ctl_call_or_say(
            c, "best",
            json_pack("{s:I, s:i}", "job", (json_int_t)a->job, "n", p->best_n ? p->best_n : 1),
            &br))
        goto out;
    p->job = a->job;
    snprintf(p->name, sizeof p->name, "%s", json_string_value(json_object_get(*jr, "name")));
    snprintf(p->metric, sizeof p->metric, "%s", json_string_value(json_object_get(*jr, "metric")));
    snprintf(p->goal, sizeof p->goal, "%s", json_string_value(json_object_get(*jr, "goal")));
    if (p->n_metrics == 0) p->metrics[p->n_metrics++] = p->metric;
    json_t *top = json_array_get(json_object_get(br, "trials"), 0);
    long long best = top ? (long long)json_integer_value(json_object_get(top, "id")) : 0;
    json_t *trials = json_object_get(*jr, "trials");
    size_t nt = json_array_size(trials);
    for (int k = 0; k < p->n_metrics; k++) {
        p->s[k] = calloc(nt ? nt : 1, sizeof *p->s[k]);
        if (!p->s[k]) goto out;
    }
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t) {
        long long id = (long long)json_integer_value(json_object_get(t, "id"));
        if (a->trial && id != a->trial) continue;
        size_t ti = p->n_trials++;
        for (int k = 0; k < p->n_metrics; k++) {
            plot_series *s = &p->s[k][ti];
            s->trial = id;
            s->best = id == best;
            s->ranked = ranked(br, id);
            first_value(json_object_get(t, "params"), s->group, sizeof s->group);
            params_label(json_object_get(t, "params"), id, s->label, sizeof s->label);
        }
        if (load_trial(c, p, ti, id)) goto out;
    }
    rc = 0;
out:
    json_decref(br);
    return rc;
}

/* Whether p has trials and points for each metric a finished job wrote: 0, or -1 with a message. */
static int validate(plot *p, const plot_args *a, json_t *jr) {
    if (p->n_trials == 0) {
        fprintf(stderr, "bfctl plot: job %lld has no trials\n", a->job);
        return -1;
    }
    /* a metric none of the trials wrote, on a job that writes no more: an
     * error naming the metrics it has (not a blank plot); '' never exists */
    json_t *states = json_object_get(jr, "states");
    int finished = !json_object_get(states, "PENDING") && !json_object_get(states, "RUNNING") &&
                   json_integer_value(json_object_get(jr, "to_propose")) <= 0;
    for (int k = 0; k < p->n_metrics; k++) {
        size_t pts = 0;
        for (size_t j = 0; j < p->n_trials; j++) pts += p->s[k][j].n;
        if (pts || (!finished && p->metrics[k][0])) continue;
        qsort(p->names, (size_t)p->n_names, sizeof *p->names, cmp_names);
        fprintf(stderr, "bfctl plot: %s %lld has no metric '%s'; ", a->trial ? "trial" : "job",
                a->trial ? a->trial : a->job, p->metrics[k]);
        if (p->n_names == 0) {
            fprintf(stderr, "it has no metric points at all\n");
        } else {
            fprintf(stderr, "it has:");
            for (int n = 0; n < p->n_names; n++) fprintf(stderr, " %s", p->names[n]);
            fprintf(stderr, "\n");
        }
        return -1;
    }
    return 0;
}

/* -o, else NAME-JOB[-tTRIAL].png written into def[n] ('/' and ' ' of NAME as '_'). */
static const char *output_path(const plot *p, const plot_args *a, char *def, size_t n) {
    if (a->out) return a->out;
    char safe[128];
    size_t k = 0;
    for (const char *q = p->name; *q && k + 1 < sizeof safe; q++)
        safe[k++] = (*q == '/' || *q == ' ') ? '_' : *q;
    safe[k] = '\0';
    if (a->trial)
        snprintf(def, n, "%s-%lld-t%lld.png", safe, a->job, a->trial);
    else
        snprintf(def, n, "%s-%lld.png", safe, a->job);
    return def;
}

/* Whether out opens for writing as a regular file (*existed: before): 0, or -1 with the reason. */
static int probe_output(const char *out, int *existed) {
    struct stat sb;
    *existed = stat(out, &sb) == 0;
    int fd = open(out, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0) {
        fprintf(stderr, "bfctl plot: cannot write %s: %s\n", out, strerror(errno));
        return -1;
    }
    int regular = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode);
    close(fd);
    if (!regular) {
        fprintf(stderr, "bfctl plot: cannot write %s: not a regular file\n", out);
        return -1;
    }
    return 0;
}

/* Draws p into out and prints its path; on failure removes out unless it existed. 0 or not. */
static int render(plot *p, const plot_args *a, const char *out, int existed) {
    int w = a->w, h = a->h;
    if (!w) w = 1000, h = 600 * p->n_metrics - 120 * (p->n_metrics - 1);
    int rc = plot_render(p, out, a->svg, w, h);
    for (int k = 0; !rc && p->logy && k < p->n_metrics; k++)
        if (p->skipped[k])
            fprintf(stderr, "bfctl plot: --logy left out %zu point%s <= 0 of %s\n", p->skipped[k],
                    p->skipped[k] == 1 ? "" : "s", p->metrics[k]);
    if (rc && !existed) unlink(out); /* nothing half-written left behind */
    if (!rc) printf("%s\n", out);
    return rc;
}

/* Frees what p owns: its series and the metric names it saw. */
static void plot_free(plot *p) {
    for (int k = 0; k < p->n_metrics; k++) {
        for (size_t j = 0; p->s[k] && j < p->n_trials; j++) {
            free(p->s[k][j].x);
            free(p->s[k][j].y);
        }
        free(p->s[k]);
    }
    for (int n = 0; n < p->n_names; n++) free(p->names[n]);
}

int bfctl_plot(int argc, char **argv) {
    plot p;
    memset(&p, 0, sizeof p);
    plot_args a = {0};
    int prc = parse_options(argc, argv, &p, &a);
    if (prc) return prc == 1 ? 0 : prc;
    ctl_conn *c;
    char err[2048];
    if (ctl_connect(&c, err, sizeof err)) {
        fprintf(stderr, "bfctl: %s\n", err);
        return 1;
    }
    int rc = 1, existed;
    json_t *jr = NULL;
    char def[300];
    if (request_metrics(c, &p, &a, &jr) == 0 && validate(&p, &a, jr) == 0) {
        const char *out = output_path(&p, &a, def, sizeof def);
        if (probe_output(out, &existed) == 0) rc = render(&p, &a, out, existed);
    }
    plot_free(&p);
    json_decref(jr);
    ctl_close(&c);
    return rc;
}
