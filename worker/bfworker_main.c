/* bfworker — runs one trial's pipeline: standalone (`bfworker train`, eval,
 * profile, params, generate, dump) or for bfd (`bfworker run`). This file only
 * picks the command; each lives in worker/cmd/cmd_NAME.c (cmd.h). */
#include <stdio.h>
#include <string.h>

#include "kernels/bk.h"
#include "worker/cmd/cmd.h"

int main(int argc, char **argv) {
    bk_openmp_passive(argv);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        cmd_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? CMD_USAGE : CMD_OK;
    }
    for (const cmd_spec *c = cmd_specs; c->name; c++)
        if (strcmp(argv[1], c->name) == 0) {
            cmd_parse_as(c);
            return c->main(argc, argv);
        }
    char valid[256] = "";
    for (const cmd_spec *c = cmd_specs; c->name; c++)
        snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s%s",
                 c == cmd_specs ? "" : ", ", c->name);
    fprintf(stderr, "bfworker: unknown command '%s' (valid: %s; see --help)\n", argv[1], valid);
    return CMD_USAGE;
}
