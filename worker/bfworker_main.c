/* bfworker — runs one trial's pipeline: standalone (`bfworker train`, eval,
 * profile, params, generate, dump) or for bfd (`bfworker run`). This file only
 * picks the command; each lives in worker/cmd/cmd_NAME.c (cmd.h). */
#include <stdio.h>
#include <string.h>

#include "kernels/bk.h"
#include "worker/cmd/cmd.h"

static const struct {
    const char *name;
    int (*main)(int argc, char **argv);
} commands[] = {
    {"train", cmd_train},     {"eval", cmd_eval},         {"params", cmd_params},
    {"profile", cmd_profile}, {"generate", cmd_generate}, {"dump", cmd_dump},
    {"run", cmd_run},
};

int main(int argc, char **argv) {
    bk_openmp_passive(argv);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(cmd_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CMD_USAGE : CMD_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].main(argc, argv);
    char valid[256] = "";
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s%s", i ? ", " : "",
                 commands[i].name);
    fprintf(stderr, "bfworker: unknown command '%s' (valid: %s; see --help)\n", argv[1], valid);
    return CMD_USAGE;
}
