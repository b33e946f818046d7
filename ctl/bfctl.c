/* bfctl — the command line. main() dispatches through one table of
 * subcommands, each with its common/opts option table (what it parses by,
 * with bfctl_parse, and what its --help lists); those here work without a
 * daemon (validate, expand, keys). */
#include "ctl/bfctl.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cfg.h"
#include "common/pipeline_decl.h"
#include "jobs/sweep.h"

/* What `bfctl expand` is told (expand_opts), and how many trials it wrote. */
typedef struct expand_out {
    int json, config;
    long long n;
} expand_out;

static const opt_spec expand_opts[] = {
    {"json", 0, OPT_FLAG, 0, 0, OPT_AT(expand_out, json), NULL,
     "one JSON object: the sweep, then each trial's params and config"},
    {"config", 0, OPT_FLAG, 0, 0, OPT_AT(expand_out, config), NULL,
     "each trial's resolved config under its line"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

/* What `bfctl validate` is told (validate_opts). */
typedef struct flag_args {
    int json;
} flag_args;

static const opt_spec validate_opts[] = {
    {"json", 0, OPT_FLAG, 0, 0, OPT_AT(flag_args, json), NULL, "one JSON array of the results"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

/* What `bfctl keys` is told (keys_opts). */
typedef struct keys_args {
    int markdown;
} keys_args;

static const opt_spec keys_opts[] = {
    {"markdown", 0, OPT_FLAG, 0, 0, OPT_AT(keys_args, markdown), NULL,
     "a Markdown table (docs/sweeps.md)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

static const bfctl_cmd commands[] = {
    {"validate", bfctl_validate, "validate SWEEP.yaml...|- [--json]",
     "check sweep files (or standalone configs; - reads standard input); exit 0 only if all are "
     "valid",
     validate_opts},
    {"expand", bfctl_expand, "expand SWEEP.yaml [--json] [--config]",
     "list the trials a sweep expands into, with their config hashes", expand_opts},
    {"keys", bfctl_keys, "keys [--markdown]", "list every config key with type, default and range",
     keys_opts},
    {"submit", bfctl_submit, "submit SWEEP.yaml [--set KEY=VALUE ...] [--wait] [--follow]",
     "submit a sweep to bfd; prints the job id", bfctl_submit_opts},
    {"clone", bfctl_clone, "clone tTRIAL [--set KEY=VALUE ...] [--wait]",
     "submit a one-trial job from a trial's config with changes; prints the job id",
     bfctl_clone_opts},
    {"ls", bfctl_ls, "ls [--json]", "list jobs", bfctl_ls_opts},
    {"show", bfctl_show, "show JOB|tTRIAL [--json] [--rungs]",
     "a job and its trials, or one trial; --rungs: early-stopping decisions", bfctl_show_opts},
    {"tail", bfctl_tail, "tail JOB|tTRIAL [-f|--follow] [--all]", "metric points; -f follows live",
     bfctl_tail_opts},
    {"cancel", bfctl_cancel, "cancel JOB|tTRIAL", "cancel a job or one trial", bfctl_no_opts},
    {"stop", bfctl_stop, "stop tTRIAL", "early-stop a running trial (checkpoint, STOPPED)",
     bfctl_no_opts},
    {"resume", bfctl_resume, "resume tTRIAL", "continue a STOPPED trial from its checkpoint",
     bfctl_no_opts},
    {"edit", bfctl_edit, "edit JOB --max-parallel N | --add KEY=V1,V2 | --drop-pending KEY=VALUE",
     "change a running sweep: its parallelism, its grid, its pending trials", bfctl_edit_opts},
    {"dashboard", bfctl_dashboard, "dashboard",
     "print the URL of bfd's dashboard with its token (docs/http.md)", bfctl_no_opts},
    {"rm", bfctl_rm, "rm JOB... [--cancel] [--keep-files]",
     "remove jobs with their points, logs and folders (a running one only with --cancel)",
     bfctl_rm_opts},
    {"gc", bfctl_gc,
     "gc --older-than DURATION [--state completed,failed,cancelled] [--dry-run] [--keep-files]",
     "remove finished jobs older than DURATION (--dry-run: list them)", bfctl_gc_opts},
    {"wait", bfctl_wait, "wait JOB", "wait for a job; exit 0 only if every trial completed",
     bfctl_no_opts},
    {"best", bfctl_best, "best JOB [-n N] [--json]",
     "the job's best trials by its metric; several objectives: the Pareto front", bfctl_best_opts},
    {"logs", bfctl_logs, "logs tTRIAL [-f]", "a trial's log; -f follows it", bfctl_logs_opts},
    {"daemon", bfctl_daemon, "daemon status [--json] [--all]",
     "bfd's state: slots, GPUs, running trials (first 100; --all: every one)", bfctl_daemon_opts},
    {"results", bfctl_results, "results JOB... [--group-by-seed] [--json]",
     "accuracy and heads used per trial, best (or the Pareto front) marked; jobs side by side",
     bfctl_results_opts},
    {"export", bfctl_export, "export JOB --csv|--json|--tensorboard DIR",
     "every stored metric of a job (CSV, JSON, or TensorBoard event files)", bfctl_export_opts},
    {"plot", bfctl_plot,
     "plot JOB|tTRIAL [--metric M ...] [--x step|time] [-o F] [--size WxH] [--logy] [--smooth K] "
     "[--best N]",
     "metric curves as PNG or SVG, one line per trial, best marked", bfctl_plot_opts},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
    fprintf(out, "usage: bfctl COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-40s %s\n", commands[i].usage, commands[i].summary);
    fprintf(out, "\n`bfctl COMMAND --help` shows one command. The sweep format is in "
                 "docs/sweeps.md.\n");
}

static const bfctl_cmd *find_cmd(const char *name) {
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static void cmd_help(const char *name) {
    const bfctl_cmd *c = find_cmd(name);
    if (c) printf("usage: bfctl %s\n  %s\n", c->usage, c->summary);
    if (c) opts_help(stdout, c->table);
}

/* ---------------------------------------------------------------- validate */

static void print_errors(const sweep_errors *e) {
    for (int i = 0; i < e->n; i++) fprintf(stderr, "%s\n", e->msgs[i]);
    if (e->total > e->n) fprintf(stderr, "... and %d more errors\n", e->total - e->n);
}

/* Where validate's data pre-flight says a problem: the file it came from,
 * and, under --json, the errors array. */
typedef struct preflight_out {
    const char *file;
    json_t *errs;
} preflight_out;

/* ctl_data_preflight's say: "FILE: MSG" on stderr, or into the JSON. */
static void preflight_say(void *ud, const char *msg) {
    preflight_out *o = ud;
    char line[2600];
    snprintf(line, sizeof line, "%s: %s", o->file, msg);
    if (o->errs)
        json_array_append_new(o->errs, json_string(line));
    else
        fprintf(stderr, "%s\n", line);
}

static const char *method_text(const sweep_spec *s) {
    return !s->is_sweep ? "single run" : sweep_method_name(s->method);
}

int bfctl_validate(int argc, char **argv) {
    flag_args a = {0};
    int rest = argc, prc = bfctl_parse(argc, argv, NULL, &a, &rest);
    if (prc >= 0) return prc;
    int json = a.json, files = argc - rest, stdin_args = 0;
    for (int i = rest; i < argc; i++) stdin_args += !strcmp(argv[i], "-");
    if (stdin_args > 1) {
        fprintf(stderr, "bfctl validate: '-' (standard input) may be given once\n");
        return BF_EX_USAGE;
    }
    if (!files) {
        fprintf(stderr, "usage: bfctl validate SWEEP.yaml...|- [--json]\n");
        return BF_EX_USAGE;
    }
    int bad = 0;
    json_t *out = json ? json_array() : NULL;
    for (int i = rest; i < argc; i++) {
        sweep_spec *s = NULL;
        sweep_errors e = {0};
        int rc;
        if (!strcmp(argv[i], "-")) {
            char *text, terr[1024];
            size_t n;
            if (ctl_read_text("-", &text, &n, terr, sizeof terr)) {
                fprintf(stderr, "bfctl validate: %s\n", terr);
                bad = 1;
                continue;
            }
            rc = sweep_load_string(text, n, "<stdin>", &s, &e);
            free(text);
        } else {
            rc = sweep_load_file(argv[i], &s, &e);
        }
        preflight_out pf = {.file = argv[i], .errs = json ? json_array() : NULL};
        if (rc == 0 && ctl_data_preflight(&s->base, preflight_say, &pf)) rc = -1;
        if (rc < 0) bad = 1;
        if (json) {
            json_t *o = json_pack("{s:s, s:b}", "file", argv[i], "ok", rc == 0);
            if (rc == 0) {
                json_object_set_new(o, "job", json_string(s->name));
                json_object_set_new(o, "pipeline", json_string(s->base.pipeline));
                json_object_set_new(o, "method", json_string(method_text(s)));
                json_object_set_new(o, "trials", json_integer(s->is_sweep ? s->n_trials : 1));
            } else {
                json_t *errs = json_array();
                for (int k = 0; k < e.n; k++) json_array_append_new(errs, json_string(e.msgs[k]));
                json_array_extend(errs, pf.errs);
                json_object_set_new(o, "errors", errs);
                json_object_set_new(o, "total_errors",
                                    json_integer(e.total + (long long)json_array_size(pf.errs)));
            }
            json_array_append_new(out, o);
        } else if (rc < 0) {
            print_errors(&e);
        } else {
            printf("%s: ok: job '%s', pipeline %s, %s, %lld trial%s\n", argv[i], s->name,
                   s->base.pipeline, method_text(s), s->is_sweep ? s->n_trials : 1,
                   (s->is_sweep ? s->n_trials : 1) == 1 ? "" : "s");
        }
        json_decref(pf.errs);
        sweep_errors_free(&e);
        sweep_spec_destroy(&s);
    }
    if (json) {
        char *t = json_dumps(out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (t) printf("%s\n", t);
        free(t);
        json_decref(out);
    }
    return bad;
}

/* ------------------------------------------------------------------ expand */

static int print_trial(void *ud, const sweep_trial *t) {
    expand_out *o = ud;
    if (o->json) {
        json_error_t jerr;
        json_t *params = json_loads(t->params_json, 0, &jerr);
        json_t *obj = json_object();
        if (!obj) return -1;
        json_object_set_new(obj, "index", json_integer(t->index));
        json_object_set_new(obj, "hash", json_string(t->hash));
        json_object_set_new(obj, "params", params ? params : json_object());
        json_object_set_new(obj, "config", json_string(t->config_text));
        char *txt = json_dumps(obj, JSON_PRESERVE_ORDER | JSON_COMPACT);
        json_decref(obj);
        if (!txt) return -1;
        printf("%s\n  %s", t->index ? "," : "", txt);
        free(txt);
    } else {
        printf("trial %lld  %s", t->index, t->hash);
        /* params on one line: "key: value, key: value" */
        const char *p = t->params;
        int first = 1;
        while (*p) {
            const char *nl = strchr(p, '\n');
            size_t len = nl ? (size_t)(nl - p) : strlen(p);
            printf("%s%.*s", first ? "  " : ", ", (int)len, p);
            first = 0;
            p += len + (nl != NULL);
        }
        printf("\n");
        if (o->config) {
            const char *c = t->config_text;
            while (*c) {
                const char *nl = strchr(c, '\n');
                size_t len = nl ? (size_t)(nl - c) : strlen(c);
                printf("    %.*s\n", (int)len, c);
                c += len + (nl != NULL);
            }
        }
    }
    o->n++;
    return 0;
}

int bfctl_expand(int argc, char **argv) {
    expand_out o = {0, 0, 0};
    int rest = argc, prc = bfctl_parse(argc, argv, NULL, &o, &rest);
    if (prc >= 0) return prc;
    if (rest != argc - 1) {
        fprintf(stderr, "usage: bfctl expand SWEEP.yaml [--json] [--config]\n");
        return BF_EX_USAGE;
    }
    const char *file = argv[rest];
    sweep_spec *s = NULL;
    sweep_errors e = {0};
    if (sweep_load_file(file, &s, &e) < 0) {
        print_errors(&e);
        sweep_errors_free(&e);
        return 1;
    }
    if (o.json) {
        json_t *head =
            json_pack("{s:s, s:s, s:s, s:I, s:I, s:{s:s, s:s}}", "name", s->name, "pipeline",
                      s->base.pipeline, "method", method_text(s), "seed", (json_int_t)s->seed,
                      "n_trials", (json_int_t)(s->is_sweep ? s->n_trials : 1), "metric", "name",
                      s->metric_name, "goal", s->metric_maximize ? "max" : "min");
        json_t *objs = json_array();
        for (int k = 0; k < s->n_objectives; k++)
            json_array_append_new(objs,
                                  json_pack("{s:s, s:s}", "name", s->objectives[k].name, "goal",
                                            s->objectives[k].maximize ? "max" : "min"));
        if (head) json_object_set_new(head, "objectives", objs);
        char *txt = head ? json_dumps(head, JSON_PRESERVE_ORDER | JSON_COMPACT) : NULL;
        json_decref(head);
        if (!txt) {
            fprintf(stderr, "bfctl expand: out of memory\n");
            sweep_spec_destroy(&s);
            return 1;
        }
        /* stream the trials: a 100,000-trial grid is never held in memory */
        txt[strlen(txt) - 1] = '\0';
        printf("%s,\"trials\":[", txt);
        free(txt);
    } else {
        printf("job '%s': pipeline %s, %s, %lld trial%s, %s ", s->name, s->base.pipeline,
               method_text(s), s->is_sweep ? s->n_trials : 1,
               (s->is_sweep ? s->n_trials : 1) == 1 ? "" : "s",
               s->n_objectives > 1 ? "objectives" : "metric");
        for (int k = 0; k < (s->n_objectives > 1 ? s->n_objectives : 1); k++)
            printf("%s%s (%s)", k ? ", " : "", k ? s->objectives[k].name : s->metric_name,
                   (k ? s->objectives[k].maximize : s->metric_maximize) ? "max" : "min");
        printf("\n");
    }
    if (s->is_sweep && s->method == SWEEP_TPE)
        fprintf(stderr, "bfctl expand: tpe proposes its trials while the job runs; listed here are "
                        "random draws from the same parameter specs, as validation checks them\n");
    char err[512];
    int rc = sweep_expand(s, print_trial, &o, err, sizeof err);
    if (o.json) printf("\n]}\n");
    sweep_spec_destroy(&s);
    if (rc != 0) {
        fprintf(stderr, "bfctl expand: %s\n", rc < 0 ? err : "output failed");
        return 1;
    }
    return 0;
}

/* -------------------------------------------------------------------- keys */

/* s with each '|' escaped for a markdown table cell, into out[n]. */
static void md_escape(const char *s, char *out, size_t n) {
    size_t w = 0;
    for (; *s && w + 3 < n; s++) {
        if (*s == '|') out[w++] = '\\';
        out[w++] = *s;
    }
    out[w] = '\0';
}

int bfctl_keys(int argc, char **argv) {
    keys_args a = {0};
    int rest = argc, prc = bfctl_parse(argc, argv, NULL, &a, &rest);
    if (prc >= 0) return prc;
    if (rest < argc) {
        fprintf(stderr, "usage: bfctl keys [--markdown]\n");
        return BF_EX_USAGE;
    }
    int md = a.markdown;
    if (md)
        printf("| key | type | default | valid | read by | meaning |\n"
               "|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < cfg_field_count(); i++) {
        const cfg_field *f = cfg_field_at(i);
        char valid[256] = "";
        if (f->type == CFG_T_ENUM) {
            size_t w = 0;
            for (const char *p = f->choices; *p && w + 3 < sizeof valid; p++) {
                if (*p == '|')
                    valid[w++] = ',', valid[w++] = ' ';
                else
                    valid[w++] = *p;
            }
            valid[w] = '\0';
        } else if (f->type == CFG_T_SCHED) {
            snprintf(valid, sizeof valid,
                     "schedule: constant, linear, exp, cosine; start, end in [%.15g, %.15g]",
                     f->min, f->max);
        } else if (f->type == CFG_T_BOOL) {
            snprintf(valid, sizeof valid, "true, false");
        } else if (f->type == CFG_T_U64) {
            snprintf(valid, sizeof valid, "0 .. 2^64-1");
        } else if (f->type == CFG_T_LAYERS) {
            snprintf(valid, sizeof valid, "indices in [%.15g, %.15g], or auto:K with K in [1, %d]",
                     f->min, f->max, CFG_MAX_LAYERS);
        } else if (!(f->min == 0 && f->max == 0)) {
            snprintf(valid, sizeof valid, "[%.15g, %.15g]", f->min, f->max);
        }
        const char *def = f->def;
        if (strcmp(f->key, "data.dir") == 0) def = "$BF_DATA or data";
        char readers[128] = "";
        const char *pipe;
        for (size_t p = 0, w = 0; (pipe = pipeline_name_at(p)); p++)
            if (pipeline_reads_key(pipe, f->key) && w < sizeof readers)
                w += (size_t)snprintf(readers + w, sizeof readers - w, "%s%s", w ? ", " : "", pipe);
        if (md) {
            char ev[512], eh[1024];
            md_escape(valid, ev, sizeof ev);
            md_escape(f->help, eh, sizeof eh);
            printf("| `%s` | %s | `%s` | %s | %s | %s |\n", f->key, cfg_type_name(f->type), def, ev,
                   readers, eh);
        } else
            printf("%-26s %-34s default %-40s %s\n", f->key, cfg_type_name(f->type), def, valid);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return BF_EX_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        if (argc > 2 && find_cmd(argv[2]))
            cmd_help(argv[2]);
        else
            usage(stdout);
        return 0;
    }
    const bfctl_cmd *c = find_cmd(argv[1]);
    if (!c) {
        fprintf(stderr, "bfctl: unknown command '%s'\n\n", argv[1]);
        usage(stderr);
        return BF_EX_USAGE;
    }
    bfctl_parse_as(c);
    return c->fn(argc - 1, argv + 1);
}
