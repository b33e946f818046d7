/* bfworker — runs one trial's pipeline. Standalone:
 *   bfworker train CONFIG.yaml [--set key=value ...] [--out DIR] [--resume] [--quiet]
 *   bfworker eval CHECKPOINT [--split val|test] [--set key=value ...]
 *   bfworker params CONFIG.yaml [--set key=value ...]
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cfg.h"
#include "worker/ckpt.h"
#include "worker/train.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 64, EXIT_PREEMPTED = 75 };

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
    "      --out DIR         write metrics.jsonl, config.yaml, checkpoint.bin here (default runs/NAME)\n"
    "      --resume          continue from DIR/checkpoint.bin if it exists\n"
    "      --quiet           no progress lines\n"
    "  eval CHECKPOINT     evaluate a checkpoint (file or its folder): accuracy, heads used,\n"
    "                      attention FLOPs and wall time\n"
    "      --split val|test  which split (default test)\n"
    "      --set KEY=VALUE   e.g. --set device=cpu, --set train.batch=1\n"
    "  params CONFIG.yaml  print parameters per block and the total\n"
    "      --set KEY=VALUE\n"
    "\n"
    "SIGTERM during training writes a checkpoint and exits with status 75.\n";

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

static const char *opt_value(int argc, char **argv, int from, const char *name) {
    for (int i = from; i < argc - 1; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return NULL;
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

static int cmd_train(int argc, char **argv) {
    static const char *const vals[] = {"--set", "--out", NULL};
    static const char *const flags[] = {"--resume", "--quiet", NULL};
    if (argc < 3 || argv[2][0] == '-') {
        fprintf(stderr, "bfworker train: missing CONFIG.yaml\n%s", USAGE);
        return EXIT_USAGE;
    }
    if (check_options(argc, argv, 3, vals, flags)) return EXIT_USAGE;
    char err[2048];
    bf_config c;
    if (load_config(&c, argv[2], argc, argv, 3, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return EXIT_USAGE;
    }
    const char *out = opt_value(argc, argv, 3, "--out");
    char outbuf[1024];
    if (!out) {
        char hash[17];
        cfg_hash(&c, hash);
        snprintf(outbuf, sizeof outbuf, "runs/%s-%s", c.pipeline, hash);
        out = outbuf;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    train_opts o = {.out_dir = out, .resume = has_flag(argc, argv, 3, "--resume"),
                    .quiet = has_flag(argc, argv, 3, "--quiet"), .stop = &stop_requested};
    if (!o.quiet) fprintf(stderr, "bfworker: training %s into %s\n", c.pipeline, out);
    train_result r;
    int rc = train_run(&c, &o, &r, err, sizeof err);
    if (rc == TRAIN_PREEMPTED) return EXIT_PREEMPTED;
    if (rc != TRAIN_OK) {
        fprintf(stderr, "bfworker: %s\n", err);
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* Writes text to a temporary file so the config loader (which reports
 * FILE:LINE:COL) can read a checkpoint's config. */
static int config_from_text(bf_config *c, const char *text, char *err, size_t errlen) {
    char path[] = "/tmp/bfworker-cfg-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create a temporary file");
        return -1;
    }
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    cfg_defaults(c);
    int rc = cfg_load_file(c, path, err, errlen);
    remove(path);
    return rc;
}

static int cmd_eval(int argc, char **argv) {
    static const char *const vals[] = {"--set", "--split", NULL};
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
    ckpt_state s;
    if (ckpt_read(argv[2], &s, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return EXIT_FAIL;
    }
    bf_config c;
    if (config_from_text(&c, s.cfg_text, err, sizeof err)) {
        fprintf(stderr, "bfworker: checkpoint config: %s\n", err);
        ckpt_free(&s);
        return EXIT_FAIL;
    }
    for (int i = 3; i < argc; i++)
        if (strcmp(argv[i], "--set") == 0 && cfg_set(&c, argv[++i], err, sizeof err)) {
            fprintf(stderr, "bfworker: %s\n", err);
            ckpt_free(&s);
            return EXIT_USAGE;
        }
    const bk_backend *be;
    pipe_data d;
    if (bk_select(c.device, &be, err, sizeof err) || pipe_data_open(&c, &d, 1, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        ckpt_free(&s);
        return EXIT_FAIL;
    }
    model_shape sh = train_model_shape(&c, &d);
    model m;
    memset(&m, 0, sizeof m);
    int rc = EXIT_FAIL;
    if (model_create(&m, &sh, be, c.train.batch, err, sizeof err)) goto done;
    if (m.P.numel != s.n_params) {
        snprintf(err, sizeof err, "checkpoint has %zu parameters but its config builds %zu", s.n_params, m.P.numel);
        goto done;
    }
    be->to_device(m.P.data, s.params, s.n_params * sizeof(float));
    int sp = split && strcmp(split, "val") == 0 ? 0 : 1;
    if (sp == 1 && !d.test && d.n_classes) sp = 0;
    eval_result e;
    if (train_evaluate(&m, &c, &d, d.n_classes ? sp : 1, &e, NULL, err, sizeof err)) goto done;
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
    printf("wall_time    %.3f s (%.1f samples/s)\n", e.seconds, e.samples / (e.seconds > 0 ? e.seconds : 1));
    if (sh.budget) printf("corr(s,len)  %.3f\ncorr(s,loss) %.3f\n", e.corr_s_len, e.corr_s_loss);
    rc = EXIT_OK;
done:
    if (rc) fprintf(stderr, "bfworker: %s\n", err);
    model_destroy(&m);
    pipe_data_close(&d);
    ckpt_free(&s);
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
    model_shape sh = {.layers = c.model.layers, .d_model = c.model.d_model, .heads = c.model.heads,
                      .seq_len = c.model.seq_len, .vocab = c.model.vocab,
                      .n_classes = lm ? 0 : 26, .hadamard = strcmp(c.attn.out_proj, "hadamard") == 0,
                      .budget = c.budget.enabled && !lm};
    model m;
    if (model_create(&m, &sh, bk_cpu(), 1, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return EXIT_USAGE;
    }
    printf("%-12s %12s\n", "part", "parameters");
    printf("%-12s %12zu\n", "embedding", model_count(&m, "wte") + model_count(&m, "wpe"));
    char pre[32];
    for (int l = 0; l < sh.layers; l++) {
        snprintf(pre, sizeof pre, "h%d.attn.", l);
        size_t attn = model_count(&m, pre);
        snprintf(pre, sizeof pre, "h%d.", l);
        printf("%-12s %12zu   (attention %zu)\n", pre, model_count(&m, pre), attn);
    }
    printf("%-12s %12zu\n", "head", model_count(&m, "lnf") + model_count(&m, "cls"));
    printf("%-12s %12zu\n", "total", m.P.numel);
    if (!lm) printf("(classifier sized for 26 classes; the data decides the real count)\n");
    model_destroy(&m);
    return EXIT_OK;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : EXIT_OK;
    }
    if (strcmp(argv[1], "train") == 0) return cmd_train(argc, argv);
    if (strcmp(argv[1], "eval") == 0) return cmd_eval(argc, argv);
    if (strcmp(argv[1], "params") == 0) return cmd_params(argc, argv);
    fprintf(stderr, "bfworker: unknown command '%s' (valid: train, eval, params; see --help)\n", argv[1]);
    return EXIT_USAGE;
}
