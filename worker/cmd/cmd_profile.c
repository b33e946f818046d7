/* cmd_profile — `bfworker profile RUN`: a vit run's attention sparsity per
 * layer (pipelines/profile.h) on a calibration batch, printed and written to
 * RUN/profile.json. It writes nothing else. */
#include "worker/cmd/cmd.h"

#include <stdio.h>
#include <string.h>

#include "worker/pipelines/profile.h"

/* What `bfworker profile` is told (cmd_profile_opts). */
typedef struct profile_args {
    opt_list sets;
    int samples, json;
} profile_args;

#define PR(f) OPT_AT(profile_args, f)
const opt_spec cmd_profile_opts[] = {
    {"samples", 0, OPT_INT, 1, 4096, PR(samples), "N", "calibration images (default 64)"},
    {"json", 0, OPT_FLAG, 0, 0, PR(json), NULL, "print the JSON instead of the table"},
    {"set", 0, OPT_LIST, 0, 0, PR(sets), "KEY=VALUE",
     "override a config key that leaves the model's shape: device, data.*, train.batch "
     "(repeatable)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

/* bfworker profile RUN: the attention sparsity profile (pipelines/profile.h)
 * on a calibration batch, printed and written to RUN/profile.json. */
int cmd_profile(int argc, char **argv) {
    const char *sets[CMD_MAX_SETS], *run = NULL;
    profile_args a = {.sets = {sets, 0, CMD_MAX_SETS}, .samples = 64};
    int prc = cmd_parse(argc, argv,
                        "a vit run's attention sparsity per layer (normalised entropy, top-10% "
                        "attention mass, A-ViT keep fraction) on a calibration batch of "
                        "validation images; writes RUN/profile.json",
                        &a, &run);
    if (prc >= 0) return prc;
    int samples = a.samples;
    char err[2048];
    run_model rm;
    int orc = cmd_open_run_model("profile", run, &a.sets, &rm, samples, 0);
    if (orc) return orc;
    int rc = CMD_FAIL;
    pipe_profile_t p;
    if (rm.m.sh.patch <= 0) {
        snprintf(err, sizeof err, "%s is a %s run; profile takes a vit run", run, rm.c.pipeline);
        rc = CMD_USAGE;
        goto done;
    }
    if (pipe_profile(&rm.m, &rm.c, &rm.d, samples, &p, err, sizeof err)) goto done;
    if (a.json)
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
        if (!a.json) printf("wrote %s\n", path);
    }
    rc = CMD_OK;
done:
    if (rc) fprintf(stderr, "bfworker: %s\n", err);
    cmd_close_run_model(&rm);
    return rc;
}
