/* cmd_profile — `bfworker profile RUN`: a vit run's attention sparsity per
 * layer (pipelines/profile.h) on a calibration batch, printed and written to
 * RUN/profile.json. It writes nothing else. */
#include "worker/cmd/cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/pipelines/profile.h"

/* The options `bfworker profile` accepts (cmd.h: cmd_specs). */
const char *const cmd_profile_vals[] = {"--set", "--samples", NULL};
const char *const cmd_profile_flags[] = {"--json", NULL};

/* bfworker profile RUN: the attention sparsity profile (pipelines/profile.h)
 * on a calibration batch, printed and written to RUN/profile.json. */
int cmd_profile(int argc, char **argv) {
    int start = cmd_preamble(argc, argv, "RUN");
    if (start >= 0) return start;
    if (cmd_check_options(argc, argv, 3, cmd_profile_vals, cmd_profile_flags)) return CMD_USAGE;
    const char *ns = cmd_opt_value(argc, argv, 3, "--samples");
    char *end = NULL;
    long samples = ns ? strtol(ns, &end, 10) : 64;
    if (ns && (*end || samples < 1 || samples > 4096)) {
        fprintf(stderr, "bfworker profile: --samples must be 1..4096, got '%s'\n", ns);
        return CMD_USAGE;
    }
    char err[2048];
    run_model rm;
    int orc = cmd_open_run_model(argc, argv, &rm, (int)samples, 0);
    if (orc) return orc;
    int rc = CMD_FAIL;
    pipe_profile_t p;
    if (rm.m.sh.patch <= 0) {
        snprintf(err, sizeof err, "%s is a %s run; profile takes a vit run", argv[2],
                 rm.c.pipeline);
        rc = CMD_USAGE;
        goto done;
    }
    if (pipe_profile(&rm.m, &rm.c, &rm.d, (int)samples, &p, err, sizeof err)) goto done;
    if (cmd_has_flag(argc, argv, 3, "--json"))
        pipe_profile_json(&p, stdout);
    else
        pipe_profile_table(&p, stdout);
    if (rm.s.dir[0]) {
        char path[4200];
        snprintf(path, sizeof path, "%s/profile.json", rm.s.dir);
        FILE *f = fopen(path, "w");
        if (f) pipe_profile_json(&p, f);
        if (!f || (ferror(f) | fclose(f))) {
            snprintf(err, sizeof err, "cannot write %.2000s", path);
            goto done;
        }
        if (!cmd_has_flag(argc, argv, 3, "--json")) printf("wrote %s\n", path);
    }
    rc = CMD_OK;
done:
    if (rc) fprintf(stderr, "bfworker: %s\n", err);
    cmd_close_run_model(&rm);
    return rc;
}
