/* ctl_parse.c — how a bfctl command reads its command line: by the option
 * table of its row in bfctl.c's command table, which main() hands over
 * (bfctl_parse_as) before it runs the command. It names no command, so the
 * command files call it without a circle back to bfctl.c. */
#include <stdio.h>

#include "ctl/bfctl.h"

static const bfctl_cmd *g_cmd; /* the command being run */

const opt_spec bfctl_no_opts[] = {
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

void bfctl_parse_as(const bfctl_cmd *c) { g_cmd = c; }

int bfctl_parse(int argc, char **argv, const char *about, void *out, int *rest) {
    const bfctl_cmd *c = g_cmd;
    char usage[2048], prog[64];
    snprintf(usage, sizeof usage, "usage: bfctl %s\n  %s\n", c->usage, about ? about : c->summary);
    snprintf(prog, sizeof prog, "bfctl %s", c->name);
    int rc = opts_parse(prog, usage, c->table, argc, argv, 1, out, rest);
    return rc == OPTS_OK ? -1 : rc == OPTS_HELP ? 0 : BF_EX_USAGE;
}
