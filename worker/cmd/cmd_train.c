/* cmd_train — `bfworker train CONFIG.yaml`: one training run, standalone or
 * as one rank of mpirun/srun. It checks the options and the --out folder
 * (--resume, --force) and hands the run to host/train.c; it never touches the
 * model or the data itself. */
#include "worker/cmd/cmd.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/data/data_sets.h"
#include "worker/link/comm.h"
#include "worker/io/ckpt.h"
#include "worker/host/force.h"
#include "worker/host/train.h"

static volatile sig_atomic_t stop_requested = 0;
static void on_term(int sig) {
    (void)sig;
    stop_requested = 1;
}

/* Makes the config's data paths absolute (from the current folder), so the
 * config the run stores (config.yaml, the checkpoint) still finds its data
 * when eval or generate run from elsewhere. Returns 0 or -1 with a message. */
static int absolute_data_paths(bf_config *c, char *err, size_t errlen) {
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) {
        snprintf(err, errlen, "getcwd: %s", strerror(errno));
        return -1;
    }
    struct {
        const char *key;
        char *v;
    } paths[] = {{"data.path", c->data.path},
                 {"data.train", c->data.train},
                 {"data.val", c->data.val},
                 {"data.test", c->data.test},
                 {"data.dir", c->data.dir}};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        char *v = paths[i].v;
        if (!v[0] || v[0] == '/') continue;
        char abs[8192];
        int n = snprintf(abs, sizeof abs, "%s/%s", cwd, v[0] == '.' && v[1] == '/' ? v + 2 : v);
        if (n < 0 || (size_t)n >= CFG_PATH_MAX) {
            snprintf(err, errlen, "%s: %.600s/%.600s is longer than %d bytes; give a shorter path",
                     paths[i].key, cwd, v, CFG_PATH_MAX - 1);
            return -1;
        }
        memcpy(v, abs, (size_t)n + 1);
    }
    return 0;
}

static int train_ranks(int argc, char **argv, comm_t *comm);

/* bfworker train: an MPI program when started by mpirun/srun (comm.h), a
 * single process otherwise. An error on any rank ends every rank. */
int cmd_train(int argc, char **argv) {
    char err[2048];
    comm_t *comm = NULL;
    if (comm_init(NULL, NULL, &comm, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return CMD_FAIL;
    }
    int rc = train_ranks(argc, argv, comm);
    if (rc != CMD_OK && rc != CMD_PREEMPTED) comm_abort(comm, rc);
    comm_destroy(&comm);
    return rc;
}

/* The options `bfworker train` accepts (cmd.h: cmd_specs). */
const char *const cmd_train_vals[] = {"--set",   "--out",        "--comm-timeout",
                                      "--stage", "--stage-root", NULL};
const char *const cmd_train_flags[] = {"--resume", "--force", "--quiet", NULL};

static int train_ranks(int argc, char **argv, comm_t *comm) {
    int start = cmd_preamble(argc, argv, "CONFIG.yaml");
    if (start >= 0) return start;
    /* --resume DIR: take DIR out of the options before checking them */
    const char *resume_dir = NULL;
    char **args = malloc((size_t)argc * sizeof *args);
    int nargs = 0;
    if (!args) return CMD_FAIL;
    for (int i = 0; i < argc; i++) {
        args[nargs++] = argv[i];
        if (i >= 3 && strcmp(argv[i], "--resume") == 0 && i + 1 < argc && argv[i + 1][0] != '-')
            resume_dir = argv[++i];
    }
    argc = nargs;
    argv = args;
    char err[2048];
    int rank = comm_rank(comm);
    if (cmd_check_options(argc, argv, 3, cmd_train_vals, cmd_train_flags)) {
        free(args);
        return CMD_USAGE;
    }
    bf_config c;
    if (cmd_load_config(&c, argv[2], argc, argv, 3, err, sizeof err) ||
        absolute_data_paths(&c, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        free(args);
        return CMD_USAGE;
    }
    /* --stage NAME, --stage-root DIR: s2s.stage and s2s.root */
    static const char *const stage_opts[][2] = {{"--stage", "s2s.stage"},
                                                {"--stage-root", "s2s.root"}};
    for (int k = 0; k < 2; k++) {
        const char *v = cmd_opt_value(argc, argv, 3, stage_opts[k][0]);
        char set[1200];
        snprintf(set, sizeof set, "%s=\"%s\"", stage_opts[k][1], v ? v : "");
        if (!v) continue;
        if (strcmp(c.pipeline, "s2s") != 0 || strchr(v, '"') || cfg_set(&c, set, err, sizeof err) ||
            cfg_validate(&c, err, sizeof err)) {
            fprintf(stderr, "bfworker: %s %s: %s\n", stage_opts[k][0], v,
                    strcmp(c.pipeline, "s2s") ? "only pipeline s2s has stages" : err);
            free(args);
            return CMD_USAGE;
        }
    }
    const char *timeout = cmd_opt_value(argc, argv, 3, "--comm-timeout");
    char *end = NULL;
    double timeout_s = timeout ? strtod(timeout, &end) : 600.0;
    if (timeout && (end == timeout || *end || !(timeout_s >= 0) || timeout_s > 1e7)) {
        fprintf(stderr, "bfworker: --comm-timeout must be seconds in [0, 1e7], got '%s'\n",
                timeout);
        free(args);
        return CMD_USAGE;
    }
    comm_set_timeout(comm, timeout_s, CMD_RANK_LOST);
    const char *out = cmd_opt_value(argc, argv, 3, "--out");
    if (resume_dir && out && strcmp(resume_dir, out) != 0) {
        fprintf(stderr, "bfworker: --resume %s and --out %s name different folders; give one\n",
                resume_dir, out);
        free(args);
        return CMD_USAGE;
    }
    if (resume_dir) out = resume_dir;
    char outbuf[1024];
    if (!out) {
        char hash[17];
        cfg_hash(&c, hash);
        snprintf(outbuf, sizeof outbuf, "runs/%s-%s", c.pipeline, hash);
        out = outbuf;
    }
    /* a folder that holds a run is continued (--resume) or started over
     * (--force), never silently mixed: its checkpoint overwritten and the new
     * metrics appended to the old ones */
    int resume = cmd_has_flag(argc, argv, 3, "--resume"),
        force = cmd_has_flag(argc, argv, 3, "--force");
    char mpath[1100];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", out);
    /* rank 0 decides (the others could see the files it is writing); a
     * refusal there ends every rank (cmd_train) */
    struct stat mst;
    /* what a process killed during a --force run left (run/force.h) is
     * resolved first, so the folder is seen as the run it holds */
    if (rank == 0 && force_recover(out, cmd_has_flag(argc, argv, 3, "--quiet"), err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        free(args);
        return CMD_FAIL;
    }
    /* an empty metrics.jsonl without a checkpoint is a run that failed before its
     * first point (an older bf left one): no run */
    int holds_run =
        rank == 0 && (ckpt_probe(out) != CKPT_NONE || (stat(mpath, &mst) == 0 && mst.st_size > 0));
    if (resume && force) {
        fprintf(stderr,
                "bfworker: --resume continues the run in %s, --force starts it over; "
                "give one\n",
                out);
        free(args);
        return CMD_USAGE;
    }
    if (holds_run && !resume && !force) {
        fprintf(stderr,
                "bfworker: %s already holds a run (checkpoint or metrics.jsonl): --resume "
                "continues it, --force starts over there, or give another --out\n",
                out);
        free(args);
        return CMD_USAGE;
    }
    /* --force writes the new run beside the old one (OUT/.force-new) and
     * swaps it in when its first checkpoint is written (run/force.h, by
     * renames a crash cannot leave half done), so a bad input or a run that
     * fails before then leaves the old run as it was */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    train_opts o = {.out_dir = out,
                    .resume = resume,
                    .force = holds_run && force,
                    .quiet = cmd_has_flag(argc, argv, 3, "--quiet"),
                    .stop = &stop_requested,
                    .comm = comm};
    free(args);
    if (!o.quiet && rank == 0) fprintf(stderr, "bfworker: training %s into %s\n", c.pipeline, out);
    char why[1400];
    if (!o.quiet && rank == 0 && c.aug.hflip &&
        (strcmp(c.pipeline, "vit") == 0 || strcmp(c.pipeline, "s2s") == 0) &&
        data_sets_not_mirror(&c, why, sizeof why))
        fprintf(stderr,
                "bfworker: warning: aug.hflip is on but the images are not mirror-symmetric (%s): "
                "a mirrored image is no longer of its class; set aug.hflip: false "
                "(docs/s2s.md, \"Data\")\n",
                why);
    train_result r;
    int rc = train_config(&c, &o, &r, err, sizeof err);
    if (rc == TRAIN_PREEMPTED) return CMD_PREEMPTED;
    if (rc != TRAIN_OK) {
        if (comm_world(comm) > 1)
            fprintf(stderr, "bfworker: rank %d/%d: %s\n", rank, comm_world(comm), err);
        else
            fprintf(stderr, "bfworker: %s\n", err);
        return CMD_FAIL;
    }
    return CMD_OK;
}
