/* cmd_args — what every bfworker command shares on its command line:
 * reading it by the command's option table (common/opts.h, as bfctl and bfd
 * do), with the one argument that is not an option, and loading a config
 * file with its --set overrides. It runs no command and opens no run. */
#include "worker/cmd/cmd.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const cmd_spec *g_cmd; /* the command being run */
static char g_usage[8192];    /* its usage line and about text (cmd_parse) */
static char g_prog[64];       /* "bfworker NAME" */

void cmd_parse_as(const cmd_spec *c) { g_cmd = c; }

int cmd_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", g_prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fputs(g_usage, stderr);
    opts_help(stderr, g_cmd->opts);
    return CMD_USAGE;
}

int cmd_parse(int argc, char **argv, const char *about, void *out, const char **arg) {
    const cmd_spec *c = g_cmd;
    int n = snprintf(g_usage, sizeof g_usage, "usage: bfworker %s%s%s [options]\n", c->name,
                     c->arg ? " " : "", c->arg ? c->arg : "");
    /* the about text, wrapped, indented by two */
    FILE *f = fmemopen(g_usage + n, sizeof g_usage - (size_t)n, "w");
    if (f) {
        fputs("  ", f);
        opts_wrap(f, about ? about : c->summary, 2, 2);
        fclose(f);
    }
    snprintf(g_prog, sizeof g_prog, "bfworker %s", c->name);
    int rest = argc;
    int rc = opts_parse(g_prog, g_usage, c->opts, argc, argv, 2, out, &rest);
    if (rc != OPTS_OK) return rc == OPTS_HELP ? CMD_OK : CMD_USAGE;
    int extra = rest + (c->arg != NULL); /* the first argument too many */
    if (c->arg && rest >= argc) return cmd_usage_error("missing %s", c->arg);
    if (extra < argc) return cmd_usage_error("unexpected argument '%s'", argv[extra]);
    if (arg) *arg = c->arg ? argv[rest] : NULL;
    return -1;
}

int cmd_load_config(bf_config *c, const char *path, const opt_list *sets, char *err,
                    size_t errlen) {
    cfg_defaults(c);
    if (path && cfg_load_file(c, path, err, errlen)) return -1;
    for (int i = 0; sets && i < sets->n; i++)
        if (cfg_set(c, sets->v[i], err, errlen)) return -1;
    return cfg_validate(c, err, errlen);
}
