/* bfctl — subcommands share this signature: argv[0] is the subcommand name.
 * Each returns the process exit status (0 ok, 1 failure, BF_EX_USAGE = 64 usage error). */
#ifndef BFCTL_H
#define BFCTL_H

#include "common/errbuf.h" /* BF_EX_USAGE */
#include "common/opts.h"

typedef int (*bfctl_cmd_fn)(int argc, char **argv);

typedef struct bfctl_cmd {
    const char *name;
    bfctl_cmd_fn fn;
    const char *usage;   /* "validate SWEEP.yaml..." */
    const char *summary; /* one line for --help */
    /* its options (common/opts.h): the command parses by them with
     * bfctl_parse, and its --help lists them */
    const opt_spec *table;
} bfctl_cmd;

/* ctl/ctl_parse.c: a command's command line, read by its row's table */
/* The command about to run (main sets it): bfctl_parse reads by its row. */
void bfctl_parse_as(const bfctl_cmd *c);
/* Parses argv (argv[0] the command's name) by that command's table into
 * out; --help says `about` (NULL: the command's summary) over the rows.
 * Returns -1 to go on, with *rest the index of the first argument that
 * is not an option (argc when none); else the exit status after printing
 * the help (0) or why the line is refused (BF_EX_USAGE). */
int bfctl_parse(int argc, char **argv, const char *about, void *out, int *rest);
/* What the commands with flags only are told (their *_opts tables). */
typedef struct ctl_flags {
    int json, all, follow, rungs;
} ctl_flags;
/* The table of the commands that take no option. */
extern const opt_spec bfctl_no_opts[];

/* ctl/bfctl.c: the table, and the commands that need no daemon */
int bfctl_validate(int argc, char **argv);
int bfctl_expand(int argc, char **argv);
int bfctl_keys(int argc, char **argv);
/* ctl/bfctl.c: the arguments the commands share. First argument that is not
 * an option (or NULL); options taking a value listed in with_value. */
const char *ctl_positional(int argc, char **argv, const char *const *with_value);
/* The JOB|tTRIAL argument of a command ("3" -> job 3; "t17" -> trial 17,
 * the other 0): want 'j' (a job), 't' (a trial) or 0 (either). Returns 0, or
 * prints the usage line and returns 1. */
int ctl_target_arg(int argc, char **argv, const char *const *with_value, const char *usage,
                   int want, long long *job, long long *trial);
typedef struct ctl_conn ctl_conn; /* ctl/ctl_client.h */
/* ctl/ctl_submit.c */
extern const opt_spec bfctl_submit_opts[];
int bfctl_submit(int argc, char **argv);
/* ctl/ctl_clone.c: a one-trial job from a trial's config */
extern const opt_spec bfctl_clone_opts[];
int bfctl_clone(int argc, char **argv);
/* ctl/ctl_jobs.c: jobs and trials */
extern const opt_spec bfctl_ls_opts[], bfctl_show_opts[], bfctl_best_opts[];
int bfctl_ls(int argc, char **argv);
int bfctl_show(int argc, char **argv);
int bfctl_best(int argc, char **argv);
int bfctl_wait(int argc, char **argv);
/* Polls until the job ends and says how ("job 3 done: ..." unless quiet);
 * 0 when every trial completed, else 1. */
int ctl_wait_job(ctl_conn *c, long long job, int quiet);
/* ctl/ctl_tail.c: metric points */
extern const opt_spec bfctl_tail_opts[];
int bfctl_tail(int argc, char **argv);
/* A job's (trial 0) or a trial's points, history first, then (follow) live
 * points without gap or duplicate until it ends; compact: one short line per
 * point (a live table on a terminal when following a job). Returns 0 or 1. */
int ctl_tail(ctl_conn *c, long long job, long long trial, int follow, int compact);
/* ctl/ctl_prune.c: removing jobs */
extern const opt_spec bfctl_rm_opts[], bfctl_gc_opts[];
int bfctl_rm(int argc, char **argv);
int bfctl_gc(int argc, char **argv);
/* ctl/ctl_control.c */
int bfctl_cancel(int argc, char **argv);
int bfctl_stop(int argc, char **argv);
/* ctl/ctl_dashboard.c: the dashboard's URL, and edits of a running sweep */
extern const opt_spec bfctl_edit_opts[];
int bfctl_dashboard(int argc, char **argv);
int bfctl_edit(int argc, char **argv);
/* ctl/ctl_logs.c */
extern const opt_spec bfctl_logs_opts[];
int bfctl_logs(int argc, char **argv);
/* ctl/ctl_status.c: `daemon status` */
extern const opt_spec bfctl_daemon_opts[];
int bfctl_daemon(int argc, char **argv);
/* ctl/ctl_results.c: a job's results */
int bfctl_results(int argc, char **argv);
extern const opt_spec bfctl_results_opts[], bfctl_export_opts[];
int bfctl_export(int argc, char **argv);
/* ctl/ctl_front.c: several objectives, seed groups, jobs side by side */
#define CTL_FRONT_MAX_JOBS 16 /* jobs one `results` compares */
/* The Pareto table of jobs[njobs] (their trials, or grouped by everything
 * but train.seed into mean +- std) ranked over the first job's objectives
 * (every job must have the same), as text or JSON; front_only: the front
 * alone (`best`). Returns the exit status. */
int ctl_front(ctl_conn *c, const long long *jobs, int njobs, int group_by_seed, int json,
              int front_only);
/* How many objectives job has (1 for a job of one metric), or -1 after
 * saying why it could not be read. */
int ctl_job_objectives(ctl_conn *c, long long job);
/* ctl/ctl_adaptive.c: adaptive sweeps */
int bfctl_resume(int argc, char **argv);
int bfctl_show_rungs(long long job, int as_json); /* `show JOB --rungs` */
/* ctl/ctl_text.c: the sweep text a command reads */
#define CTL_TEXT_MAX (1u << 20) /* bytes of a sweep (file or standard input) */
/* path's text ("-": standard input), NUL-terminated, into *out (the caller
 * frees it) and *len: at most CTL_TEXT_MAX bytes, no NUL byte. Returns 0, or
 * -1 with a message. */
int ctl_read_text(const char *path, char **out, size_t *len, char *err, size_t errlen);

struct bf_config;
/* The data files of c checked as bfworker will check them (ctl_preflight.c):
 * each problem said through say ("data.train: PATH is empty"); returns how
 * many there were (0: none). */
int ctl_data_preflight(const struct bf_config *c, void (*say)(void *ud, const char *msg), void *ud);
/* ctl/ctl_plot.c: metric curves as PNG or SVG */
int bfctl_plot(int argc, char **argv);
extern const opt_spec bfctl_plot_opts[];
/* ctl/ctl_tb.c: export JOB --tensorboard DIR (exit status) */
int ctl_export_tensorboard(long long job, const char *dir);

#endif
