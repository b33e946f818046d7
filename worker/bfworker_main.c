/* bfworker — runs one trial's pipeline. Standalone:
 *   bfworker train CONFIG.yaml [--set key=value ...] [--out DIR] [--resume] [--quiet]
 *   bfworker eval CHECKPOINT [--split val|test] [--set key=value ...]
 *   bfworker params CONFIG.yaml [--set key=value ...]
 *   bfworker dump CONFIG.yaml --out DIR [--set key=value ...] [--batch N]
 *   bfworker generate CHECKPOINT --prompt TEXT [--tokens N] [--temperature T] [--top-k K] [--seed
 * S]
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cfg.h"
#include "common/errbuf.h"
#include "kernels/bk.h"
#include "worker/io/ckpt.h"
#include "worker/dist/comm.h"
#include "worker/cmd/cmd_dump.h"
#include "worker/pipelines/generate.h"
#include "worker/pipelines/profile.h"
#include "worker/io/run_src.h"
#include "worker/cmd/cmd_run.h"
#include "worker/run/train.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = BF_EX_USAGE, EXIT_PREEMPTED = 75 };

static volatile sig_atomic_t stop_requested = 0;
static void on_term(int sig) {
    (void)sig;
    stop_requested = 1;
}

static const char *USAGE =
    "usage: bfworker COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG.yaml   train per the config (standalone, no daemon)\n"
    "      --set KEY=VALUE   override one config key (dotted path; repeatable)\n"
    "      --out DIR         write metrics.jsonl, config.yaml, the checkpoint here (default "
    "runs/NAME)\n"
    "      --resume [DIR]    continue from DIR's checkpoint if it exists (DIR: the --out "
    "folder)\n"
    "      --force           start over in an --out folder that holds a run (its metrics and\n"
    "                        checkpoint are removed; without --resume or --force such a\n"
    "                        folder is refused)\n"
    "      --comm-timeout S  data parallel: a collective not done in S seconds ends the rank\n"
    "                        with status 69 (a peer died; default 600, 0 = never)\n"
    "      --quiet           no progress lines\n"
    "      --stage NAME      s2s: run only this stage (teacher, avit, profile, distill,\n"
    "                        finetune, eval); its parents must be done (= --set s2s.stage=)\n"
    "      --stage-root DIR  s2s: the stage folders NAME-KEY/ (default OUT/stages; stages\n"
    "                        done there are reused by any run with the same key)\n"
    "  eval CHECKPOINT     evaluate a checkpoint (file or its folder): accuracy, heads used,\n"
    "                      attention FLOPs and wall time\n"
    "      --split val|test  which split (default test)\n"
    "      --samples FILE    write one line per sample: mean s, tokens, loss, correct\n"
    "      --set KEY=VALUE   e.g. --set device=cpu, --set train.batch=1\n"
    "  profile RUN         a vit run's attention sparsity per layer (normalised entropy,\n"
    "                      top-10%% attention mass, A-ViT keep fraction) on a calibration\n"
    "                      batch of validation images; writes RUN/profile.json\n"
    "      --samples N       calibration images (default 64)\n"
    "      --json            print the JSON instead of the table\n"
    "      --set KEY=VALUE   e.g. --set device=cpu\n"
    "  params CONFIG.yaml  print parameters per block and the total\n"
    "      --set KEY=VALUE\n"
    "  generate CHECKPOINT continue a prompt with an lm checkpoint (KV cache; file or folder)\n"
    "      --prompt TEXT     the text to continue (required; may be \"\")\n"
    "      --tokens N        tokens to generate (default 100)\n"
    "      --temperature T   0 = greedy; default 0.8\n"
    "      --top-k K         sample among the K most likely tokens (default 40; 0 = all)\n"
    "      --seed S          sampling seed (default 1)\n"
    "      --set KEY=VALUE   e.g. --set device=cpu\n"
    "  dump CONFIG.yaml --out DIR [--set KEY=VALUE ...] [--batch N]\n"
    "                      one training step's weights, batch, logits, gradients and losses\n"
    "                      as safetensors + JSON, for an outside check (bfworker dump --help)\n"
    "  run --trial ID --connect ENDPOINT --token TOKEN --out DIR\n"
    "                      one attempt of a trial for bfd (config and metrics over the\n"
    "                      worker link; docs/protocol.md); started by bfd, not by hand\n"
    "\n"
    "SIGTERM during training writes a checkpoint and exits with status 75.\n"
    "Data parallel: mpirun -np R bfworker train ... (docs/distributed.md); exit status 1 =\n"
    "error (all ranks end), 69 = a peer rank died or hung.\n";

/* Loads CONFIG (or a checkpoint's config text) and applies --set options from argv. */
static int load_config(bf_config *c, const char *path, int argc, char **argv, int from, char *err,
                       size_t errlen) {
    cfg_defaults(c);
    if (path && cfg_load_file(c, path, err, errlen)) return -1;
    for (int i = from; i < argc; i++)
        if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
            if (cfg_set(c, argv[++i], err, errlen)) return -1;
        }
    return cfg_validate(c, err, errlen);
}

/* The value of option `name`; when it is given more than once the last one
 * counts, as with --set. */
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

static const char *opt_value(int argc, char **argv, int from, const char *name) {
    const char *v = NULL;
    for (int i = from; i < argc - 1; i++)
        if (strcmp(argv[i], name) == 0) v = argv[++i];
    return v;
}

static int has_flag(int argc, char **argv, int from, const char *name) {
    for (int i = from; i < argc; i++)
        if (strcmp(argv[i], name) == 0) return 1;
    return 0;
}

/* Rejects options this command does not know, so a typo is not silently ignored. */
static int check_options(int argc, char **argv, int from, const char *const *with_value,
                         const char *const *flags) {
    for (int i = from; i < argc; i++) {
        int ok = 0;
        for (const char *const *p = with_value; *p; p++)
            if (strcmp(argv[i], *p) == 0) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "bfworker: %s needs a value\n", argv[i]);
                    return -1;
                }
                i++;
                ok = 1;
                break;
            }
        for (const char *const *p = flags; !ok && *p; p++)
            if (strcmp(argv[i], *p) == 0) ok = 1;
        if (!ok) {
            fprintf(stderr, "bfworker: unknown option '%s' (see bfworker --help)\n", argv[i]);
            return -1;
        }
    }
    return 0;
}

/* A collective that outlived --comm-timeout: a peer rank died or hangs. */
enum { EXIT_RANK_LOST = 69 };

static int train_ranks(int argc, char **argv, comm_t *comm);

/* bfworker train: an MPI program when started by mpirun/srun (comm.h), a
 * single process otherwise. An error on any rank ends every rank. */
static int cmd_train(int argc, char **argv) {
    char err[2048];
    comm_t *comm = NULL;
    if (comm_init(NULL, NULL, &comm, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return EXIT_FAIL;
    }
    int rc = train_ranks(argc, argv, comm);
    if (rc != EXIT_OK && rc != EXIT_PREEMPTED) comm_abort(comm, rc);
    comm_destroy(&comm);
    return rc;
}

static int train_ranks(int argc, char **argv, comm_t *comm) {
    static const char *const vals[] = {"--set",   "--out",        "--comm-timeout",
                                       "--stage", "--stage-root", NULL};
    static const char *const flags[] = {"--resume", "--force", "--quiet", NULL};
    if (argc < 3 || argv[2][0] == '-') {
        fprintf(stderr, "bfworker train: missing CONFIG.yaml\n%s", USAGE);
        return EXIT_USAGE;
    }
    /* --resume DIR: take DIR out of the options before checking them */
    const char *resume_dir = NULL;
    char **args = malloc((size_t)argc * sizeof *args);
    int nargs = 0;
    if (!args) return EXIT_FAIL;
    for (int i = 0; i < argc; i++) {
        args[nargs++] = argv[i];
        if (i >= 3 && strcmp(argv[i], "--resume") == 0 && i + 1 < argc && argv[i + 1][0] != '-')
            resume_dir = argv[++i];
    }
    argc = nargs;
    argv = args;
    char err[2048];
    int rank = comm_rank(comm);
    if (check_options(argc, argv, 3, vals, flags)) {
        free(args);
        return EXIT_USAGE;
    }
    bf_config c;
    if (load_config(&c, argv[2], argc, argv, 3, err, sizeof err) ||
        absolute_data_paths(&c, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        free(args);
        return EXIT_USAGE;
    }
    /* --stage NAME, --stage-root DIR: s2s.stage and s2s.root */
    static const char *const stage_opts[][2] = {{"--stage", "s2s.stage"},
                                                {"--stage-root", "s2s.root"}};
    for (int k = 0; k < 2; k++) {
        const char *v = opt_value(argc, argv, 3, stage_opts[k][0]);
        char set[1200];
        snprintf(set, sizeof set, "%s=\"%s\"", stage_opts[k][1], v ? v : "");
        if (!v) continue;
        if (strcmp(c.pipeline, "s2s") != 0 || strchr(v, '"') || cfg_set(&c, set, err, sizeof err) ||
            cfg_validate(&c, err, sizeof err)) {
            fprintf(stderr, "bfworker: %s %s: %s\n", stage_opts[k][0], v,
                    strcmp(c.pipeline, "s2s") ? "only pipeline s2s has stages" : err);
            free(args);
            return EXIT_USAGE;
        }
    }
    const char *timeout = opt_value(argc, argv, 3, "--comm-timeout");
    char *end = NULL;
    double timeout_s = timeout ? strtod(timeout, &end) : 600.0;
    if (timeout && (end == timeout || *end || !(timeout_s >= 0) || timeout_s > 1e7)) {
        fprintf(stderr, "bfworker: --comm-timeout must be seconds in [0, 1e7], got '%s'\n",
                timeout);
        free(args);
        return EXIT_USAGE;
    }
    comm_set_timeout(comm, timeout_s, EXIT_RANK_LOST);
    const char *out = opt_value(argc, argv, 3, "--out");
    if (resume_dir && out && strcmp(resume_dir, out) != 0) {
        fprintf(stderr, "bfworker: --resume %s and --out %s name different folders; give one\n",
                resume_dir, out);
        free(args);
        return EXIT_USAGE;
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
    int resume = has_flag(argc, argv, 3, "--resume"), force = has_flag(argc, argv, 3, "--force");
    char mpath[1100];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", out);
    /* rank 0 decides (the others could see the files it is writing); a
     * refusal there ends every rank (cmd_train) */
    int holds_run = rank == 0 && (ckpt_probe(out) != CKPT_NONE || access(mpath, F_OK) == 0);
    if (resume && force) {
        fprintf(stderr,
                "bfworker: --resume continues the run in %s, --force starts it over; "
                "give one\n",
                out);
        free(args);
        return EXIT_USAGE;
    }
    if (holds_run && !resume && !force) {
        fprintf(stderr,
                "bfworker: %s already holds a run (checkpoint or metrics.jsonl): --resume "
                "continues it, --force starts over there, or give another --out\n",
                out);
        free(args);
        return EXIT_USAGE;
    }
    if (holds_run && force && rank == 0) {
        static const char *const old[] = {"metrics.jsonl", CKPT_NAME,       CKPT_MODEL_FILE,
                                          CKPT_OPTIM_FILE, CKPT_STATE_FILE, "test_samples.tsv"};
        for (size_t k = 0; k < sizeof old / sizeof old[0]; k++) {
            char p[1200];
            snprintf(p, sizeof p, "%s/%s", out, old[k]);
            if (unlink(p) != 0 && errno != ENOENT) {
                fprintf(stderr, "bfworker: --force: cannot remove %s: %s\n", p, strerror(errno));
                free(args);
                return EXIT_FAIL;
            }
        }
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    train_opts o = {.out_dir = out,
                    .resume = resume,
                    .quiet = has_flag(argc, argv, 3, "--quiet"),
                    .stop = &stop_requested,
                    .comm = comm};
    free(args);
    if (!o.quiet && rank == 0) fprintf(stderr, "bfworker: training %s into %s\n", c.pipeline, out);
    train_result r;
    int rc = train_run(&c, &o, &r, err, sizeof err);
    if (rc == TRAIN_PREEMPTED) return EXIT_PREEMPTED;
    if (rc != TRAIN_OK) {
        if (comm_world(comm) > 1)
            fprintf(stderr, "bfworker: rank %d/%d: %s\n", rank, comm_world(comm), err);
        else
            fprintf(stderr, "bfworker: %s\n", err);
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* Reads the checkpoint argv[2] and its config, then applies the --set
 * options from argv[3..]. Returns 0, or the exit status after printing why
 * (s is freed then). */
static int open_checkpoint(int argc, char **argv, run_src *s, bf_config *c, char *err,
                           size_t errlen) {
    if (run_src_open(s, argv[2], err, errlen)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return EXIT_FAIL;
    }
    cfg_defaults(c);
    if (cfg_load_text(c, s->cfg_text, strlen(s->cfg_text), "checkpoint config", err, errlen)) {
        fprintf(stderr, "bfworker: checkpoint config: %s\n", err);
        run_src_close(s);
        return EXIT_FAIL;
    }
    bf_config stored = *c;
    for (int i = 3; i < argc; i++)
        if (strcmp(argv[i], "--set") == 0 && i + 1 < argc && cfg_set(c, argv[++i], err, errlen)) {
            fprintf(stderr, "bfworker: %s\n", err);
            run_src_close(s);
            return EXIT_USAGE;
        }
    /* the weights fix the model's shape: an override of it would build
     * another model (refused at load, or worse, loaded into the wrong one) */
    static const char *const shape[] = {
        "pipeline",    "model.layers",  "model.d_model",  "model.heads", "model.seq_len",
        "model.vocab", "attn.out_proj", "budget.enabled", "model.patch", "model.mixers"};
    for (size_t k = 0; k < sizeof shape / sizeof shape[0]; k++) {
        char was[256], now[256];
        cfg_format_value(&stored, shape[k], was, sizeof was);
        cfg_format_value(c, shape[k], now, sizeof now);
        if (strcmp(was, now) != 0) {
            fprintf(stderr,
                    "bfworker: --set %s=%s: the checkpoint's model has %s %s, and its shape "
                    "cannot change (as with --resume); override device, data.* or train.batch\n",
                    shape[k], now, shape[k], was);
            run_src_close(s);
            return EXIT_USAGE;
        }
    }
    return 0;
}

/* A trained run opened for a command: its checkpoint and config (with the
 * --set options), its data and its model built for `batch` rows with the
 * weights loaded. */
typedef struct run_model {
    run_src s;
    bf_config c;
    data_sets d;
    model m;
} run_model;

static void close_run_model(run_model *r) {
    model_destroy(&r->m);
    data_sets_close(&r->d);
    run_src_close(&r->s);
}

/* Returns 0, or the exit status after printing why (nothing left open).
 * batch 0: the config's train.batch. infer_only: model_shape.infer_only (the
 * profile reads every layer's attention maps after the forward: 0). */
static int open_run_model(int argc, char **argv, run_model *r, int batch, int infer_only) {
    char err[2048];
    memset(r, 0, sizeof *r);
    int orc = open_checkpoint(argc, argv, &r->s, &r->c, err, sizeof err);
    if (orc) return orc;
    const bk_backend *be;
    if (bk_select(r->c.device, &be, err, sizeof err) ||
        data_sets_open(&r->c, &r->d, 1, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        run_src_close(&r->s);
        return EXIT_FAIL;
    }
    model_shape sh = pipe_model_shape(&r->c, &r->d);
    sh.infer_only = infer_only;
    if (model_create(&r->m, &sh, be, batch > 0 ? batch : r->c.train.batch, err, sizeof err) ||
        (pipe_model_config(&r->m, &r->c), run_src_load(&r->s, &r->m, err, sizeof err))) {
        fprintf(stderr, "bfworker: %s\n", err);
        close_run_model(r);
        return EXIT_FAIL;
    }
    return 0;
}

static int cmd_eval(int argc, char **argv) {
    static const char *const vals[] = {"--set", "--split", "--samples", NULL};
    static const char *const flags[] = {NULL};
    if (argc < 3 || argv[2][0] == '-') {
        fprintf(stderr, "bfworker eval: missing CHECKPOINT\n%s", USAGE);
        return EXIT_USAGE;
    }
    if (check_options(argc, argv, 3, vals, flags)) return EXIT_USAGE;
    const char *split = opt_value(argc, argv, 3, "--split");
    if (split && strcmp(split, "val") && strcmp(split, "test")) {
        fprintf(stderr, "bfworker eval: --split must be val or test, got '%s'\n", split);
        return EXIT_USAGE;
    }
    char err[2048];
    run_model rm;
    int orc = open_run_model(argc, argv, &rm, 0, 1);
    if (orc) return orc;
    const bf_config c = rm.c;
    const data_sets d = rm.d;
    model *m = &rm.m;
    const model_shape sh = m->sh;
    int rc = EXIT_FAIL;
    int sp = split && strcmp(split, "val") == 0 ? 0 : 1;
    if (split && sp == 1 && (!d.n_classes || !d.test)) {
        snprintf(err, sizeof err, "--split test: this run has no test split (%s); use --split val",
                 d.n_classes ? "its data has no data.test file"
                             : "an lm corpus is split into train and val by data.val_fraction");
        rc = EXIT_USAGE;
        goto done;
    }
    if (sp == 1 && !d.test && d.n_classes) sp = 0;
    eval_result e;
    const char *samples_path = opt_value(argc, argv, 3, "--samples");
    FILE *samples = NULL;
    if (samples_path) {
        if (!(samples = fopen(samples_path, "w"))) {
            snprintf(err, sizeof err, "cannot write %s", samples_path);
            goto done;
        }
        fputs("s_mean\ttokens\tloss\tcorrect\n", samples);
    }
    int erc = pipe_evaluate(m, &c, &d, d.n_classes ? sp : 1, NULL, &e, samples, err, sizeof err);
    /* a write that failed (a full disk) is an error, not a silent exit 0 */
    if (samples && (ferror(samples) | fclose(samples)) && !erc) {
        snprintf(err, sizeof err, "writing %s failed (disk full?)", samples_path);
        erc = -1;
    }
    if (erc) goto done;
    const char *name = d.n_classes ? (sp ? "test" : "val") : "val";
    printf("split        %s\n", name);
    printf("samples      %.0f\n", e.samples);
    printf("loss         %.4f\n", e.loss);
    if (d.n_classes)
        printf("accuracy     %.4f\n", e.acc);
    else
        printf("perplexity   %.3f\n", e.ppl);
    printf("heads_used   %.4f\n", e.heads_used);
    printf("attn_flops   %.4g per sample\n", e.attn_flops);
    printf("wall_time    %.3f s (%.1f samples/s)\n", e.seconds,
           e.samples / (e.seconds > 0 ? e.seconds : 1));
    if (sh.budget) printf("corr(s,len)  %.3f\ncorr(s,loss) %.3f\n", e.corr_s_len, e.corr_s_loss);
    rc = EXIT_OK;
done:
    if (rc) fprintf(stderr, "bfworker: %s\n", err);
    close_run_model(&rm);
    return rc;
}

/* bfworker profile RUN: the attention sparsity profile (pipelines/profile.h)
 * on a calibration batch, printed and written to RUN/profile.json. */
static int cmd_profile(int argc, char **argv) {
    static const char *const vals[] = {"--set", "--samples", NULL};
    static const char *const flags[] = {"--json", NULL};
    if (argc < 3 || argv[2][0] == '-') {
        fprintf(stderr, "bfworker profile: missing RUN\n%s", USAGE);
        return EXIT_USAGE;
    }
    if (check_options(argc, argv, 3, vals, flags)) return EXIT_USAGE;
    const char *ns = opt_value(argc, argv, 3, "--samples");
    char *end = NULL;
    long samples = ns ? strtol(ns, &end, 10) : 64;
    if (ns && (*end || samples < 1 || samples > 4096)) {
        fprintf(stderr, "bfworker profile: --samples must be 1..4096, got '%s'\n", ns);
        return EXIT_USAGE;
    }
    char err[2048];
    run_model rm;
    int orc = open_run_model(argc, argv, &rm, (int)samples, 0);
    if (orc) return orc;
    int rc = EXIT_FAIL;
    pipe_profile_t p;
    if (rm.m.sh.patch <= 0) {
        snprintf(err, sizeof err, "%s is a %s run; profile takes a vit run", argv[2],
                 rm.c.pipeline);
        rc = EXIT_USAGE;
        goto done;
    }
    if (pipe_profile(&rm.m, &rm.c, &rm.d, (int)samples, &p, err, sizeof err)) goto done;
    if (has_flag(argc, argv, 3, "--json"))
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
        if (!has_flag(argc, argv, 3, "--json")) printf("wrote %s\n", path);
    }
    rc = EXIT_OK;
done:
    if (rc) fprintf(stderr, "bfworker: %s\n", err);
    close_run_model(&rm);
    return rc;
}

static int cmd_params(int argc, char **argv) {
    static const char *const vals[] = {"--set", NULL};
    static const char *const flags[] = {NULL};
    if (argc < 3 || argv[2][0] == '-') {
        fprintf(stderr, "bfworker params: missing CONFIG.yaml\n%s", USAGE);
        return EXIT_USAGE;
    }
    if (check_options(argc, argv, 3, vals, flags)) return EXIT_USAGE;
    char err[2048];
    bf_config c;
    if (load_config(&c, argv[2], argc, argv, 3, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return EXIT_USAGE;
    }
    /* the shape only needs the vocabulary and class count, not the data */
    int lm = strcmp(c.pipeline, "lm") == 0;
    model_shape sh = {.layers = c.model.layers,
                      .d_model = c.model.d_model,
                      .heads = c.model.heads,
                      .seq_len = c.model.seq_len,
                      .vocab = c.model.vocab,
                      .n_classes = lm ? 0 : 26,
                      .hadamard = strcmp(c.attn.out_proj, "hadamard") == 0,
                      .budget = c.budget.enabled && !lm};
    int vit = strcmp(c.pipeline, "vit") == 0, p = c.model.patch;
    if (vit) /* sized for Fashion-MNIST's 28 x 28 images and 10 classes */
        sh = (model_shape){.layers = c.model.layers,
                           .d_model = c.model.d_model,
                           .heads = c.model.heads,
                           .seq_len = (28 / p) * (28 / p) + 1,
                           .vocab = 256,
                           .n_classes = 10,
                           .patch = p,
                           .image_h = 28,
                           .image_w = 28};
    /* counted from the declared tensors: nothing of the model's size is
     * allocated, so a model too big for this machine is still counted */
    model m;
    model_mem mm;
    int batch = c.train.batch > 0 ? c.train.batch : 1;
    if (model_plan(&m, &sh, batch, &mm, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return EXIT_USAGE;
    }
    printf("%-12s %12s\n", "part", "parameters");
    printf("%-12s %12zu\n", "embedding",
           model_count(&m, "tok_emb.") + model_count(&m, "pos_emb.") +
               model_count(&m, "patch_emb.") + model_count(&m, "cls_token"));
    char pre[32];
    for (int l = 0; l < sh.layers; l++) {
        snprintf(pre, sizeof pre, "blocks.%d.attn.", l);
        size_t attn = model_count(&m, pre);
        snprintf(pre, sizeof pre, "blocks.%d.", l);
        printf("%-12s %12zu   (attention %zu)\n", pre, model_count(&m, pre), attn);
    }
    printf("%-12s %12zu\n", "head", model_count(&m, "ln_f.") + model_count(&m, "head."));
    printf("%-12s %12zu\n", "total", mm.params);
    mm.optimizer_bytes = 2 * mm.params * sizeof(float);
    mm.host_bytes += 3 * mm.params * sizeof(float); /* checkpoint staging, as model_fits */
    const double mib = 1024.0 * 1024.0;
    printf("memory to train at train.batch %d (one rank): %.1f MiB = parameters + gradients "
           "%.1f, AdamW %.1f, activations %.1f, scratch %.1f, host copies and checkpoint staging "
           "%.1f\n",
           batch,
           (double)(mm.param_bytes + mm.optimizer_bytes + mm.act_bytes + mm.scratch_bytes +
                    mm.host_bytes) /
               mib,
           mm.param_bytes / mib, mm.optimizer_bytes / mib, mm.act_bytes / mib,
           mm.scratch_bytes / mib, mm.host_bytes / mib);
    if (vit)
        printf("(sized for 28 x 28 images and 10 classes; the data decides the real ones)\n");
    else if (!lm)
        printf("(classifier sized for 26 classes; the data decides the real count)\n");
    model_destroy(&m);
    return EXIT_OK;
}

/* Parses a number option of generate into [lo, hi]; returns 0, or -1 after
 * saying what was wrong. */
static int generate_number(int argc, char **argv, const char *name, double lo, double hi,
                           double *v) {
    const char *text = opt_value(argc, argv, 3, name);
    if (!text) return 0;
    char *end;
    double x = strtod(text, &end);
    if (end == text || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "bfworker generate: %s must be a number in [%g, %g], got '%s'\n", name, lo,
                hi, text);
        return -1;
    }
    *v = x;
    return 0;
}

/* Decodes ids, one line per EOS-separated segment (the corpus stream ends
 * every line with EOS), into f. */
static int print_text(FILE *f, const tok_t *tok, const int32_t *ids, size_t n, char *err,
                      size_t errlen) {
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && ids[i] != TOK_EOS) continue;
        char *text = NULL;
        if (tok_decode(tok, ids + start, i - start, &text, err, errlen)) return -1;
        fputs(text, f);
        if (i < n) fputc('\n', f);
        free(text);
        start = i + 1;
    }
    fputc('\n', f);
    return 0;
}

static int cmd_generate(int argc, char **argv) {
    static const char *const vals[] = {"--prompt", "--tokens", "--temperature", "--top-k", "--seed",
                                       "--set",    NULL};
    static const char *const flags[] = {NULL};
    if (argc < 3 || argv[2][0] == '-') {
        fprintf(stderr, "bfworker generate: missing CHECKPOINT\n%s", USAGE);
        return EXIT_USAGE;
    }
    if (check_options(argc, argv, 3, vals, flags)) return EXIT_USAGE;
    const char *prompt = opt_value(argc, argv, 3, "--prompt");
    if (!prompt) {
        fprintf(stderr, "bfworker generate: --prompt TEXT is required\n");
        return EXIT_USAGE;
    }
    double tokens = 100, temperature = 0.8, top_k = 40, seed = 1;
    if (generate_number(argc, argv, "--tokens", 0, 100000, &tokens) ||
        generate_number(argc, argv, "--temperature", 0, 100, &temperature) ||
        generate_number(argc, argv, "--top-k", 0, 1 << 20, &top_k) ||
        generate_number(argc, argv, "--seed", 0, 9007199254740992.0, &seed))
        return EXIT_USAGE;
    if (tokens != (int)tokens || top_k != (int)top_k) {
        fprintf(stderr, "bfworker generate: --tokens and --top-k take whole numbers\n");
        return EXIT_USAGE;
    }
    char err[2048];
    run_src s;
    bf_config c;
    int orc = open_checkpoint(argc, argv, &s, &c, err, sizeof err);
    if (orc) return orc;
    if (strcmp(c.pipeline, "lm") != 0) {
        fprintf(stderr, "bfworker generate: %s is a '%s' checkpoint; generate needs pipeline lm\n",
                argv[2], c.pipeline);
        run_src_close(&s);
        return EXIT_FAIL;
    }
    const bk_backend *be;
    data_sets d;
    memset(&d, 0, sizeof d);
    model m;
    memset(&m, 0, sizeof m);
    gen_state g;
    memset(&g, 0, sizeof g);
    int32_t *ids = NULL;
    int *all = NULL;
    int rc = EXIT_FAIL;
    if (bk_select(c.device, &be, err, sizeof err)) goto done;
    /* the run's own tokenizer; only an older run needs its corpus */
    int trc = run_src_tokenizer(&s, &d.tok, err, sizeof err);
    if (trc < 0 || (trc > 0 && data_sets_open(&c, &d, 1, err, sizeof err))) goto done;
    model_shape sh = pipe_model_shape(&c, &d);
    sh.infer_only = 1;
    if (model_create(&m, &sh, be, 1, err, sizeof err)) goto done;
    if (run_src_load(&s, &m, err, sizeof err)) goto done;
    if (gen_create(&g, &m, 1, err, sizeof err)) goto done;
    size_t n_ids = 0;
    if (tok_encode(d.tok, prompt, strlen(prompt), &ids, &n_ids, err, sizeof err)) goto done;
    /* context: EOS first, as after the previous line of the corpus */
    int n_new = (int)tokens;
    all = malloc((n_ids + 1 + (size_t)n_new) * sizeof(int));
    if (!all) {
        snprintf(err, sizeof err, "out of memory");
        goto done;
    }
    all[0] = TOK_EOS;
    for (size_t i = 0; i < n_ids; i++) all[1 + i] = ids[i];
    gen_sampler gs = {
        .temperature = (float)temperature, .top_k = (int)top_k, .seed = (uint64_t)seed};
    if (gen_generate(&g, all, (int)n_ids + 1, n_new, &gs, all + 1 + n_ids, err, sizeof err))
        goto done;
    if (print_text(stdout, d.tok, all + 1, n_ids + (size_t)n_new, err, sizeof err)) goto done;
    rc = EXIT_OK;
done:
    if (rc) fprintf(stderr, "bfworker: %s\n", err);
    free(all);
    free(ids);
    gen_destroy(&g);
    model_destroy(&m);
    data_sets_close(&d);
    run_src_close(&s);
    return rc;
}

int main(int argc, char **argv) {
    bk_openmp_passive(argv);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : EXIT_OK;
    }
    if (strcmp(argv[1], "train") == 0) return cmd_train(argc, argv);
    if (strcmp(argv[1], "eval") == 0) return cmd_eval(argc, argv);
    if (strcmp(argv[1], "params") == 0) return cmd_params(argc, argv);
    if (strcmp(argv[1], "profile") == 0) return cmd_profile(argc, argv);
    if (strcmp(argv[1], "generate") == 0) return cmd_generate(argc, argv);
    if (strcmp(argv[1], "run") == 0) return run_trial_main(argc, argv);
    if (strcmp(argv[1], "dump") == 0) return dump_main(argc, argv);
    fprintf(stderr,
            "bfworker: unknown command '%s' (valid: train, eval, params, generate, dump, run; see "
            "--help)\n",
            argv[1]);
    return EXIT_USAGE;
}
