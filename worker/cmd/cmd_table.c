/* cmd_table — every bfworker command with its entry and option tables, in
 * the order of the help text: what bfworker_main.c dispatches on and what
 * tests/test_it_help.c checks the help against. It only lists; the commands
 * never refer back to it. */
#include "worker/cmd/cmd.h"

#include <stddef.h>

const cmd_spec cmd_specs[] = {
    {"train", cmd_train, cmd_train_vals, cmd_train_flags, NULL},
    {"eval", cmd_eval, cmd_eval_vals, cmd_eval_flags, NULL},
    {"profile", cmd_profile, cmd_profile_vals, cmd_profile_flags, NULL},
    {"params", cmd_params, cmd_params_vals, cmd_params_flags, NULL},
    {"generate", cmd_generate, cmd_generate_vals, cmd_generate_flags, NULL},
    {"dump", cmd_dump, cmd_dump_vals, cmd_dump_flags, NULL},
    {"run", cmd_run, NULL, NULL, cmd_run_opts},
    {"serve", cmd_serve, cmd_serve_vals, cmd_serve_flags, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};
