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

/* What `bfworker train` is told (cmd_train_opts). */
typedef struct train_args {
    opt_list sets;
    const char *out;
    const char *resume; /* "" for --resume without DIR; NULL: not given */
    const char *stage, *stage_root;
    double comm_timeout;
    int force, quiet;
} train_args;

#define TR(f) OPT_AT(train_args, f)
const opt_spec cmd_train_opts[] = {
    {"set", 0, OPT_LIST, 0, 0, TR(sets), "KEY=VALUE",
     "override one config key (dotted path; repeatable)"},
    {"out", 0, OPT_STR, 0, 0, TR(out), "DIR",
     "write metrics.jsonl, config.yaml, the checkpoint here (default runs/PIPELINE-HASH)"},
    {"resume", 0, OPT_MAYBE, 0, 0, TR(resume), "DIR",
     "continue from DIR's checkpoint if it exists (DIR: the --out folder)"},
    {"force", 0, OPT_FLAG, 0, 0, TR(force), NULL,
     "start over in an --out folder that holds a run: the new run is written beside it "
     "(DIR/.force-new) and swapped in by renames at its first checkpoint (s2s: its first stage "
     "checkpoint), so a bad input or a run that fails before leaves the old one; a swap cut short "
     "by a kill is finished by the next train into DIR; without --resume or --force such a "
     "folder is refused"},
    {"comm-timeout", 0, OPT_DOUBLE, 0, 1e7, TR(comm_timeout), "S",
     "data parallel: a collective not done in S seconds ends the rank with status 69 (a peer "
     "died; default 600, 0 = never)"},
    {"quiet", 0, OPT_FLAG, 0, 0, TR(quiet), NULL, "no progress lines"},
    {"stage", 0, OPT_STR, 0, 0, TR(stage), "NAME",
     "s2s: run only this stage (teacher, avit, profile, distill, finetune, eval); its parents "
     "must be done (= --set s2s.stage=NAME)"},
    {"stage-root", 0, OPT_STR, 0, 0, TR(stage_root), "DIR",
     "s2s: the stage folders NAME-KEY/ (default OUT/stages; stages done there are reused by any "
     "run with the same key)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

static int train_ranks(const char *path, const train_args *a, comm_t *comm);

/* bfworker train: an MPI program when started by mpirun/srun (comm.h), a
 * single process otherwise; its command line is read before MPI starts. An
 * error on any rank ends every rank. */
int cmd_train(int argc, char **argv) {
    const char *sets[CMD_MAX_SETS], *path = NULL;
    train_args a = {.sets = {sets, 0, CMD_MAX_SETS}, .comm_timeout = 600};
    int prc = cmd_parse(argc, argv,
                        "train per the config, standalone (no daemon). SIGTERM writes a "
                        "checkpoint and exits with status 75. Data parallel: mpirun -np R "
                        "bfworker train ... (docs/distributed.md); exit status 1 = error (all "
                        "ranks end), 69 = a peer rank died or hung.",
                        &a, &path);
    if (prc >= 0) return prc;
    char err[2048];
    comm_t *comm = NULL;
    if (comm_init(NULL, NULL, &comm, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return CMD_FAIL;
    }
    int rc = train_ranks(path, &a, comm);
    if (rc != CMD_OK && rc != CMD_PREEMPTED) comm_abort(comm, rc);
    comm_destroy(&comm);
    return rc;
}

static int train_ranks(const char *path, const train_args *a, comm_t *comm) {
    /* --resume DIR names the --out folder */
    const char *resume_dir = a->resume && *a->resume ? a->resume : NULL;
    char err[2048];
    int rank = comm_rank(comm);
    bf_config c;
    if (cmd_load_config(&c, path, &a->sets, err, sizeof err) ||
        absolute_data_paths(&c, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return CMD_USAGE;
    }
    /* --stage NAME, --stage-root DIR: s2s.stage and s2s.root */
    const char *const stage_opts[][3] = {{"--stage", "s2s.stage", a->stage},
                                         {"--stage-root", "s2s.root", a->stage_root}};
    for (int k = 0; k < 2; k++) {
        const char *v = stage_opts[k][2];
        if (!v) continue;
        char set[1200];
        snprintf(set, sizeof set, "%s=\"%s\"", stage_opts[k][1], v);
        if (strcmp(c.pipeline, "s2s") != 0 || strchr(v, '"') || cfg_set(&c, set, err, sizeof err) ||
            cfg_validate(&c, err, sizeof err)) {
            fprintf(stderr, "bfworker: %s %s: %s\n", stage_opts[k][0], v,
                    strcmp(c.pipeline, "s2s") ? "only pipeline s2s has stages" : err);
            return CMD_USAGE;
        }
    }
    comm_set_timeout(comm, a->comm_timeout, CMD_RANK_LOST);
    const char *out = a->out;
    if (resume_dir && out && strcmp(resume_dir, out) != 0) {
        fprintf(stderr, "bfworker: --resume %s and --out %s name different folders; give one\n",
                resume_dir, out);
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
    int resume = a->resume != NULL, force = a->force;
    char mpath[1100];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", out);
    /* rank 0 decides (the others could see the files it is writing); a
     * refusal there ends every rank (cmd_train) */
    struct stat mst;
    /* what a process killed during a --force run left (run/force.h) is
     * resolved first, so the folder is seen as the run it holds */
    if (rank == 0 && force_recover(out, a->quiet, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
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
        return CMD_USAGE;
    }
    if (holds_run && !resume && !force) {
        fprintf(stderr,
                "bfworker: %s already holds a run (checkpoint or metrics.jsonl): --resume "
                "continues it, --force starts over there, or give another --out\n",
                out);
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
                    .quiet = a->quiet,
                    .stop = &stop_requested,
                    .comm = comm};
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
