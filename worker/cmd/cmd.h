/* cmd — bfworker's commands, one file each (as git's builtin/), and what
 * they share: the help text, the option scanner, loading a config with its
 * --set overrides, and opening a trained run. bfworker_main.c only picks the
 * command; each entry takes main's argv (argv[1] is the command's name) and
 * returns the process's exit status. */
#ifndef CMD_H
#define CMD_H

#include <stddef.h>

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

/* The commands (docs: cmd_usage). */
int cmd_train(int argc, char **argv);    /* train CONFIG.yaml: one run, MPI ranks or one process */
int cmd_eval(int argc, char **argv);     /* eval CHECKPOINT: accuracy, heads used, time */
int cmd_profile(int argc, char **argv);  /* profile RUN: attention sparsity per layer */
int cmd_params(int argc, char **argv);   /* params CONFIG.yaml: parameters and memory */
int cmd_generate(int argc, char **argv); /* generate CHECKPOINT --prompt TEXT (lm) */
int cmd_dump(int argc, char **argv);     /* dump CONFIG.yaml --out DIR: one step's tensors */
int cmd_run(int argc, char **argv);      /* run --trial ID ...: one attempt for bfd */
int cmd_serve(int argc, char **argv);    /* serve --connect EP: bfd's remote launcher agent */

/* The text of `bfworker --help`: a section per command, its options one a
 * line (tests/test_it_help.c checks they are those of cmd_specs). */
extern const char *const cmd_usage;

/* A command: its name, its entry, and the options it accepts: either its
 * opts.h table (opts), or the two lists of its scanner (vals and flags, each
 * NULL-terminated, NULL when opts is set); --help and -h are every command's. */
typedef struct cmd_spec {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *const *vals;  /* options that take a value */
    const char *const *flags; /* options without one */
    const opt_spec *opts;     /* the option table (common/opts.h) */
} cmd_spec;

/* Every command, in the order of the help text; NULL name ends it
 * (cmd_table.c). */
extern const cmd_spec cmd_specs[];

/* The option tables of each command (cmd_NAME.c). */
extern const char *const cmd_train_vals[], *const cmd_train_flags[];
extern const char *const cmd_eval_vals[], *const cmd_eval_flags[];
extern const char *const cmd_profile_vals[], *const cmd_profile_flags[];
extern const char *const cmd_params_vals[], *const cmd_params_flags[];
extern const char *const cmd_generate_vals[], *const cmd_generate_flags[];
extern const char *const cmd_dump_vals[], *const cmd_dump_flags[];
extern const opt_spec cmd_run_opts[];
extern const char *const cmd_serve_vals[], *const cmd_serve_flags[];

/* 1 when o is in list (NULL-terminated; NULL is empty), else 0. */
int cmd_listed(const char *const *list, const char *o);

/* 1 when argv[2] asks for help (--help, -h): the command prints its usage
 * to stdout and exits 0. */
int cmd_wants_help(int argc, char **argv);

/* What every command that takes one argument does first: --help prints the
 * usage (CMD_OK); a missing argument (`what`: "CONFIG.yaml", ...) is said
 * with the usage (CMD_USAGE); -1: go on. */
int cmd_preamble(int argc, char **argv, const char *what);

/* The value of option `name` in argv[from..]; when it is given more than
 * once the last one counts, as with --set. NULL when absent. */
const char *cmd_opt_value(int argc, char **argv, int from, const char *name);

/* 1 when flag `name` is in argv[from..], else 0. */
int cmd_has_flag(int argc, char **argv, int from, const char *name);

/* Rejects options not in with_value or flags (both NULL-terminated), so a
 * typo is not silently ignored; prints why and returns -1, else 0. */
int cmd_check_options(int argc, char **argv, int from, const char *const *with_value,
                      const char *const *flags);

/* Defaults, then the file at path (NULL: none), then every --set of
 * argv[from..], then validation. Returns 0, or -1 with a message. */
int cmd_load_config(bf_config *c, const char *path, int argc, char **argv, int from, char *err,
                    size_t errlen);

/* Reads the checkpoint argv[2] and its config, then applies the --set
 * options from argv[3..] (refusing any that would change the model's shape).
 * Returns 0, or the exit status after printing why (s is closed then). */
int cmd_open_checkpoint(int argc, char **argv, run_src *s, bf_config *c, char *err, size_t errlen);

/* A trained run opened for a command: its checkpoint and config (with the
 * --set options), its data and its model built for `batch` rows with the
 * weights loaded. */
typedef struct run_model {
    run_src s;
    bf_config c;
    data_sets d;
    model m;
} run_model;

/* Opens argv[2] into r. batch 0: the config's train.batch. infer_only:
 * model_shape.infer_only (the profile reads every layer's attention maps
 * after the forward: 0). Returns 0, or the exit status after printing why
 * (nothing left open). */
int cmd_open_run_model(int argc, char **argv, run_model *r, int batch, int infer_only);

/* Frees what cmd_open_run_model opened. */
void cmd_close_run_model(run_model *r);

#ifdef __cplusplus
}
#endif
#endif
