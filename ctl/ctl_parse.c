/* ctl_parse.c — how a bfctl command reads its command line: by the option
 * table of its row in bfctl.c's command table, which main() hands over
 * (bfctl_parse_as) before it runs the command; and the JOB|tTRIAL argument
 * the commands share. It names no command, so the command files call it
 * without a circle back to bfctl.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ------------------------------------------- arguments the commands share */

/* First argument that is not an option (or NULL); options taking a value listed in with_value. */
const char *ctl_positional(int argc, char **argv, const char *const *with_value) {
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
int ctl_target_arg(int argc, char **argv, const char *const *with_value, const char *usage,
                   int want, long long *job, long long *trial) {
    if (parse_target(ctl_positional(argc, argv, with_value), job, trial) ||
        (want == 't' && !*trial) || (want == 'j' && !*job)) {
        fprintf(stderr, "usage: bfctl %s\n", usage);
        return 1;
    }
    return 0;
}
