/* cmd_eval — `bfworker eval CHECKPOINT`: accuracy (or perplexity), heads
 * used, attention FLOPs and wall time of a trained run on one split. It
 * reads the run and never writes into it (--samples writes where it is told). */
#include "worker/cmd/cmd.h"

#include <stdio.h>
#include <string.h>
#include "worker/pipelines/pipe.h"

/* What `bfworker eval` is told (cmd_eval_opts). */
typedef struct eval_args {
    opt_list sets;
    int split; /* 0 val, 1 test; -1 not given */
    const char *samples;
} eval_args;

#define EV(f) OPT_AT(eval_args, f)
const opt_spec cmd_eval_opts[] = {
    {"split", 0, OPT_CHOICE, 0, 0, EV(split), "val|test", "which split (default test)"},
    {"samples", 0, OPT_STR, 0, 0, EV(samples), "FILE",
     "write one line per sample: mean s, tokens, loss, correct"},
    {"set", 0, OPT_LIST, 0, 0, EV(sets), "KEY=VALUE",
     "override a config key that leaves the model's shape: device, data.*, train.batch "
     "(repeatable)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int cmd_eval(int argc, char **argv) {
    const char *sets[CMD_MAX_SETS], *path = NULL;
    eval_args a = {.sets = {sets, 0, CMD_MAX_SETS}, .split = -1};
    int prc = cmd_parse(argc, argv, NULL, &a, &path);
    if (prc >= 0) return prc;
    char err[2048];
    run_model rm;
    int orc = cmd_open_run_model("eval", path, &a.sets, &rm, 0, 1);
    if (orc) return orc;
    const bf_config c = rm.c;
    const data_sets d = rm.d;
    model *m = &rm.m;
    const model_shape sh = m->sh;
    int rc = CMD_FAIL;
    int sp = a.split == 0 ? 0 : 1;
    if (a.split == 1 && (!d.n_classes || !d.test)) {
        snprintf(err, sizeof err, "--split test: this run has no test split (%s); use --split val",
                 d.n_classes ? "its data has no data.test file"
                             : "an lm corpus is split into train and val by data.val_fraction");
        rc = CMD_USAGE;
        goto done;
    }
    if (sp == 1 && !d.test && d.n_classes) sp = 0;
    eval_result e;
    const char *samples_path = a.samples;
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
    rc = CMD_OK;
done:
    if (rc) fprintf(stderr, "bfworker: %s\n", err);
    cmd_close_run_model(&rm);
    return rc;
}
