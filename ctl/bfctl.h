/* bfctl — subcommands share this signature: argv[0] is the subcommand name.
 * Each returns the process exit status (0 ok, 1 failure, BF_EX_USAGE = 64 usage error). */
#ifndef BFCTL_H
#define BFCTL_H

#include "common/errbuf.h" /* BF_EX_USAGE */

typedef int (*bfctl_cmd_fn)(int argc, char **argv);

typedef struct bfctl_cmd {
    const char *name;
    bfctl_cmd_fn fn;
    const char *usage;   /* "validate SWEEP.yaml..." */
    const char *summary; /* one line for --help */
} bfctl_cmd;

int bfctl_validate(int argc, char **argv);
int bfctl_expand(int argc, char **argv);
int bfctl_keys(int argc, char **argv);
/* ctl/ctl_daemon.c: commands that talk to bfd */
int bfctl_submit(int argc, char **argv);
int bfctl_ls(int argc, char **argv);
int bfctl_show(int argc, char **argv);
int bfctl_tail(int argc, char **argv);
int bfctl_cancel(int argc, char **argv);
int bfctl_stop(int argc, char **argv);
int bfctl_wait(int argc, char **argv);
int bfctl_best(int argc, char **argv);
int bfctl_logs(int argc, char **argv);
int bfctl_daemon(int argc, char **argv);
/* ctl/ctl_results.c: a job's results */
int bfctl_results(int argc, char **argv);
int bfctl_export(int argc, char **argv);
/* ctl/ctl_adaptive.c: adaptive sweeps */
int bfctl_resume(int argc, char **argv);
int bfctl_show_rungs(long long job, int as_json); /* `show JOB --rungs` */
/* ctl/ctl_plot.c: metric curves as PNG or SVG */
int bfctl_plot(int argc, char **argv);
/* ctl/ctl_tb.c: export JOB --tensorboard DIR (exit status) */
int ctl_export_tensorboard(long long job, const char *dir);

#endif
