/* cmd_run — `bfworker run`: one attempt of a trial launched by bfd.
 *   bfworker run --trial ID --connect ENDPOINT --token TOKEN --out DIR [--attempt N] [--quiet]
 * Rank 0 fetches the resolved config over the worker link (worker/link.h),
 * broadcasts it to the other ranks, trains with resume from DIR's
 * checkpoint, and streams DIR/metrics.jsonl to bfd while training runs.
 * Returns the exit status: 0 completed, 75 stopped/preempted (checkpoint
 * written), 1 failed, 64 usage or a config or data error (bfd does not
 * retry it: docs/daemon.md). */
#include "worker/cmd/cmd.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cfg.h"
#include "common/opts.h"
#include "worker/link/comm.h"
#include "worker/link/link.h"
#include "worker/link/metrics.h"
#include "protocol/proto.h"
#include "worker/host/train.h"

enum { RUN_OK = 0, RUN_FAIL = 1, RUN_USAGE = 64, RUN_PREEMPTED = 75 };

static volatile sig_atomic_t run_stop = 0;
static void on_term(int sig) {
    (void)sig;
    run_stop = 1;
}

/* What `bfworker run` is told on its command line (cmd_run_opts). */
typedef struct run_args {
    long long trial, attempt;
    const char *endpoint, *token, *out;
    const char *stage_root, *stage; /* s2s: one stage of a trial (bfd) */
    int quiet;
} run_args;

#define RUN_AT(f) OPT_AT(run_args, f)
/* The options `bfworker run` accepts (cmd.h: cmd_specs); its --help is
 * printed from them. */
const opt_spec cmd_run_opts[] = {
    {"trial", 0, OPT_LONG, 1, 9007199254740991.0, RUN_AT(trial), "ID", "the trial's id in bfd"},
    {"connect", 0, OPT_STR, 0, 0, RUN_AT(endpoint), "ENDPOINT", "bfd's worker endpoint"},
    {"token", 0, OPT_STR, 0, 0, RUN_AT(token), "TOKEN", "the attempt's token from bfd"},
    {"out", 0, OPT_STR, 0, 0, RUN_AT(out), "DIR", "the trial's folder"},
    {"attempt", 0, OPT_LONG, 1, 2147483647, RUN_AT(attempt), "N", "the attempt number (1)"},
    {"stage-root", 0, OPT_STR, 0, 0, RUN_AT(stage_root), "DIR", "s2s: s2s.root of the stage"},
    {"stage", 0, OPT_STR, 0, 0, RUN_AT(stage), "NAME", "s2s: the one stage to run"},
    {"quiet", 0, OPT_FLAG, 0, 0, RUN_AT(quiet), NULL, "no progress lines"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

/* Writes text to path (0600). */
static int write_text(const char *path, const char *text, char *err, size_t errlen) {
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "cannot write %.1000s: %s", path, strerror(errno));
        return -1;
    }
    int ok = fputs(text, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok) snprintf(err, errlen, "cannot write %.1000s", path);
    return ok ? 0 : -1;
}

/* A line cut by a kill would merge with the next one: end it first. */
static void end_partial_line(const char *path) {
    int fd = open(path, O_RDWR);
    if (fd < 0) return;
    off_t size = lseek(fd, 0, SEEK_END);
    char c;
    if (size > 0 && pread(fd, &c, 1, size - 1) == 1 && c != '\n') {
        ssize_t w = write(fd, "\n", 1);
        (void)w;
    }
    close(fd);
}

/* --stage-root DIR --stage NAME: s2s.root and s2s.stage of the trial's
 * config (bfd runs each shared stage of an s2s trial as its own attempt). */
static int run_stage_keys(bf_config *c, const char *root, const char *stage, char *err,
                          size_t errlen) {
    if (!root && !stage) return 0;
    if (strcmp(c->pipeline, "s2s") != 0) {
        snprintf(err, errlen, "--stage/--stage-root: trial pipeline %s has no stages", c->pipeline);
        return -1;
    }
    if ((root && strlen(root) >= sizeof c->s2s.root) ||
        (stage && strlen(stage) >= sizeof c->s2s.stage)) {
        snprintf(err, errlen, "--stage/--stage-root: value too long");
        return -1;
    }
    if (root) snprintf(c->s2s.root, sizeof c->s2s.root, "%s", root);
    if (stage) snprintf(c->s2s.stage, sizeof c->s2s.stage, "%s", stage);
    return 0;
}

static int run_ranks(const run_args *ap, comm_t *comm) {
    const run_args a = *ap;
    const char *endpoint = a.endpoint, *token = a.token, *out = a.out;
    long long trial = a.trial;
    long attempt = (long)a.attempt;
    int quiet = a.quiet;
    int rank = comm_rank(comm);
    char err[2048];
    link_t *link = NULL;
    /* rank 0 fetches the config; the others get it by broadcast */
    unsigned long long len = 0;
    char *text = NULL;
    int failed = 0;
    if (rank == 0) {
        if (mkdir(out, 0700) != 0 && errno != EEXIST) {
            fprintf(stderr, "bfworker run: mkdir %s: %s\n", out, strerror(errno));
            failed = 1;
        }
        link_opts lo = {.endpoint = endpoint,
                        .trial = trial,
                        .token = token,
                        .attempt = (int)attempt,
                        .hello_timeout = 60};
        int lrc = failed ? 0 : link_open(&link, &lo, err, sizeof err);
        if (lrc) {
            fprintf(stderr, "bfworker run: %s\n", err);
            /* a refused key is a setup error: exit 64, not retried */
            failed = lrc == -2 ? 2 : 1;
        }
        if (!failed) {
            text = strdup(link_config(link));
            len = text ? strlen(text) : 0;
            if (!text) failed = 1;
        }
    }
    int any = 0;
    if (comm_any(comm, failed, &any, err, sizeof err) || any) {
        link_destroy(&link);
        free(text);
        return failed == 2 ? RUN_USAGE : RUN_FAIL;
    }
    if (comm_world(comm) > 1) {
        if (comm_bcast(comm, &len, sizeof len, 0, err, sizeof err)) goto comm_fail;
        if (rank != 0 && !(text = calloc(1, len + 1))) goto comm_fail;
        if (comm_bcast(comm, text, len, 0, err, sizeof err)) goto comm_fail;
    }
    /* rank 0 keeps the resolved config beside the run, for people and for eval */
    char path[4200];
    snprintf(path, sizeof path, "%s/trial.yaml", out);
    bf_config c;
    cfg_defaults(&c);
    if ((rank == 0 && write_text(path, text, err, sizeof err)) ||
        cfg_load_text(&c, text, len, "trial config", err, sizeof err) ||
        run_stage_keys(&c, a.stage_root, a.stage, err, sizeof err) ||
        cfg_validate(&c, err, sizeof err)) {
        fprintf(stderr, "bfworker run: trial config: %s\n", err);
        free(text);
        if (link) link_finish(link, "failed", RUN_USAGE, err, 5, err, sizeof err);
        link_destroy(&link);
        return RUN_USAGE;
    }
    free(text);
    text = NULL;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", out);
    if (rank == 0) {
        end_partial_line(mpath);
        if (link_start(link, mpath, &run_stop, err, sizeof err)) {
            fprintf(stderr, "bfworker run: %s\n", err);
            link_destroy(&link);
            return RUN_FAIL;
        }
        if (!quiet)
            fprintf(stderr, "bfworker run: trial %lld attempt %ld, %d rank%s, into %s\n", trial,
                    attempt, comm_world(comm), comm_world(comm) == 1 ? "" : "s", out);
    }
    train_opts o = {.out_dir = out, .resume = 1, .quiet = quiet, .stop = &run_stop, .comm = comm};
    train_result r;
    metrics_set_tensorboard(0); /* bfd writes the trial's TensorBoard files from the store */
    int rc = train_config(&c, &o, &r, err, sizeof err);
    int code = rc == TRAIN_OK          ? RUN_OK
               : rc == TRAIN_PREEMPTED ? RUN_PREEMPTED
               : rc == TRAIN_INPUT     ? RUN_USAGE
                                       : RUN_FAIL;
    if (rc < 0) fprintf(stderr, "bfworker run: rank %d: %s\n", rank, err);
    if (rank == 0) {
        const char *state = code == RUN_OK          ? "completed"
                            : code == RUN_PREEMPTED ? "preempted"
                                                    : "failed";
        char lerr[256];
        if (link_finish(link, state, code, rc < 0 ? err : "", 30, lerr, sizeof lerr)) {
            fprintf(stderr, "bfworker run: %s\n", lerr);
        } else {
            /* every line is stored and done was sent: the outcome is also
             * left in a file, since a bfd killed before it saw this process
             * exit would otherwise call the attempt lost (docs/protocol.md) */
            char opath[4200], tpath[4300], line[96];
            snprintf(opath, sizeof opath, "%s/" PROTO_OUTCOME_FILE, out);
            snprintf(tpath, sizeof tpath, "%s.tmp", opath);
            snprintf(line, sizeof line, "%ld %s %d\n", attempt, state, code);
            if (write_text(tpath, line, lerr, sizeof lerr) || rename(tpath, opath) != 0)
                fprintf(stderr, "bfworker run: writing %s: %s\n", opath, lerr);
        }
        link_destroy(&link);
    }
    return code;
comm_fail:
    fprintf(stderr, "bfworker run: rank %d: %s\n", rank, err);
    link_destroy(&link);
    free(text);
    return RUN_FAIL;
}

int cmd_run(int argc, char **argv) {
    run_args a = {.attempt = 1};
    /* the command line is read before MPI starts */
    int prc = cmd_parse(argc, argv,
                        "one attempt of a trial for bfd: it fetches the config over the worker "
                        "link and streams the metrics back (docs/protocol.md); started by bfd, not "
                        "by hand. --trial, --connect, --token and --out are required; --stage-root "
                        "and --stage run one stage of an s2s trial.",
                        &a, NULL);
    if (prc >= 0) return prc;
    if (!a.trial || !a.endpoint || !a.token || !a.out)
        return cmd_usage_error("--trial, --connect, --token and --out are required");
    char err[2048];
    comm_t *comm = NULL;
    if (comm_init(NULL, NULL, &comm, err, sizeof err)) {
        fprintf(stderr, "bfworker run: %s\n", err);
        return RUN_FAIL;
    }
    comm_set_timeout(comm, 600, 69);
    int rc = run_ranks(&a, comm);
    if (rc != RUN_OK && rc != RUN_PREEMPTED) comm_abort(comm, rc);
    comm_destroy(&comm);
    return rc;
}
