/* cmd — bfworker's commands, one file each (as git's builtin/), and what
 * they share: the table of commands and its help text, reading a command
 * line by the command's option table (common/opts.h), loading a config with
 * its --set overrides, and opening a trained run. bfworker_main.c only picks
 * the command; each entry takes main's argv (argv[1] is the command's name)
 * and returns the process's exit status. */
#ifndef CMD_H
#define CMD_H

#include <stddef.h>
#include <stdio.h>

#include "common/cfg.h"
#include "common/opts.h"
#include "common/errbuf.h"
#include "worker/data/data_sets.h"
#include "worker/io/run_src.h"
#include "worker/models/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exit statuses of every command. CMD_RANK_LOST: a collective outlived
 * --comm-timeout (a peer rank died or hangs). */
enum { CMD_OK = 0, CMD_FAIL = 1, CMD_RANK_LOST = 69, CMD_USAGE = BF_EX_USAGE, CMD_PREEMPTED = 75 };

/* The commands (what each does: cmd_specs). */
int cmd_train(int argc, char **argv);    /* train CONFIG.yaml: one run, MPI ranks or one process */
int cmd_eval(int argc, char **argv);     /* eval CHECKPOINT: accuracy, heads used, time */
int cmd_profile(int argc, char **argv);  /* profile RUN: attention sparsity per layer */
int cmd_params(int argc, char **argv);   /* params CONFIG.yaml: parameters and memory */
int cmd_generate(int argc, char **argv); /* generate CHECKPOINT --prompt TEXT (lm) */
int cmd_dump(int argc, char **argv);     /* dump CONFIG.yaml --out DIR: one step's tensors */
int cmd_export(int argc, char **argv);   /* export CHECKPOINT --out FILE: weights, F32 or BF16 */
int cmd_run(int argc, char **argv);      /* run --trial ID ...: one attempt for bfd */
int cmd_serve(int argc, char **argv);    /* serve --connect EP: bfd's remote launcher agent */

/* A command: its name, its entry, what follows its name on the command
 * line (arg: the one argument that is not an option, "CONFIG.yaml"; NULL:
 * none), one line of what it does (bfworker --help) and its option table
 * (common/opts.h), which its parser reads and its --help prints. */
typedef struct cmd_spec {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *arg;
    const char *summary;
    const opt_spec *opts;
} cmd_spec;

/* Every command, in the order of bfworker --help; NULL name ends it
 * (cmd_table.c). */
extern const cmd_spec cmd_specs[];

/* Writes `bfworker --help` to f: each command of cmd_specs with its
 * summary (cmd_table.c). */
void cmd_help(FILE *f);

/* The option tables of the commands (cmd_NAME.c). */
extern const opt_spec cmd_train_opts[], cmd_eval_opts[], cmd_profile_opts[], cmd_params_opts[],
    cmd_generate_opts[], cmd_dump_opts[], cmd_export_opts[], cmd_run_opts[], cmd_serve_opts[];

/* The command about to run (main sets it): cmd_parse reads by its row. */
void cmd_parse_as(const cmd_spec *c);

/* Parses main's argv (argv[1] the command) by the command's table into out;
 * its --help says `about` (NULL: its summary) over the rows. *arg: the
 * command's one argument that is not an option (the row's arg; missing or
 * one too many is refused); NULL where the row takes none. Returns -1 to
 * go on; else the exit status after printing the help (CMD_OK) or why the
 * line is refused (CMD_USAGE). */
int cmd_parse(int argc, char **argv, const char *about, void *out, const char **arg);

/* After cmd_parse: says "bfworker NAME: " and fmt's text on stderr, then
 * the command's usage and options; returns CMD_USAGE (a required option
 * left out, say). */
int cmd_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The most --set options one command line may give (each is an OPT_LIST
 * row whose values go into an array of this size). */
#define CMD_MAX_SETS 256

/* Defaults, then the file at path (NULL: none), then each of sets (--set
 * KEY=VALUE, in order), then validation. Returns 0, or -1 with a message. */
int cmd_load_config(bf_config *c, const char *path, const opt_list *sets, char *err, size_t errlen);

/* Reads the checkpoint path (a file or its folder) and its config, then
 * applies sets (refusing any that would change the model's shape); cmd
 * names the command in messages. Returns 0, or the exit status after
 * printing why (s is closed then). */
int cmd_open_checkpoint(const char *cmd, const char *path, const opt_list *sets, run_src *s,
                        bf_config *c, char *err, size_t errlen);

/* A trained run opened for a command: its checkpoint and config (with the
 * --set options), its data and its model built for `batch` rows with the
 * weights loaded. */
typedef struct run_model {
    run_src s;
    bf_config c;
    data_sets d;
    model m;
} run_model;

/* Opens the run at path with sets (cmd_open_checkpoint) into r. batch 0:
 * the config's train.batch. infer_only: model_shape.infer_only (the profile
 * reads every layer's attention maps after the forward: 0). Returns 0, or
 * the exit status after printing why (nothing left open). */
int cmd_open_run_model(const char *cmd, const char *path, const opt_list *sets, run_model *r,
                       int batch, int infer_only);

/* Frees what cmd_open_run_model opened. */
void cmd_close_run_model(run_model *r);

#ifdef __cplusplus
}
#endif
#endif
