/* cmd_eval — `bfworker eval CHECKPOINT`: accuracy (or perplexity), heads
 * used, attention FLOPs and wall time of a trained run on one split. It
 * reads the run and never writes into it (--samples writes where it is told). */
#include "worker/cmd/cmd.h"

#include <stdio.h>
#include <string.h>
#include "worker/pipelines/pipe.h"

/* The options `bfworker eval` accepts (cmd.h: cmd_specs). */
const char *const cmd_eval_vals[] = {"--set", "--split", "--samples", NULL};
const char *const cmd_eval_flags[] = {NULL};

int cmd_eval(int argc, char **argv) {
    int start = cmd_preamble(argc, argv, "CHECKPOINT");
    if (start >= 0) return start;
    if (cmd_check_options(argc, argv, 3, cmd_eval_vals, cmd_eval_flags)) return CMD_USAGE;
    const char *split = cmd_opt_value(argc, argv, 3, "--split");
    if (split && strcmp(split, "val") && strcmp(split, "test")) {
        fprintf(stderr, "bfworker eval: --split must be val or test, got '%s'\n", split);
        return CMD_USAGE;
    }
    char err[2048];
    run_model rm;
    int orc = cmd_open_run_model(argc, argv, &rm, 0, 1);
    if (orc) return orc;
    const bf_config c = rm.c;
    const data_sets d = rm.d;
    model *m = &rm.m;
    const model_shape sh = m->sh;
    int rc = CMD_FAIL;
    int sp = split && strcmp(split, "val") == 0 ? 0 : 1;
    if (split && sp == 1 && (!d.n_classes || !d.test)) {
        snprintf(err, sizeof err, "--split test: this run has no test split (%s); use --split val",
                 d.n_classes ? "its data has no data.test file"
                             : "an lm corpus is split into train and val by data.val_fraction");
        rc = CMD_USAGE;
        goto done;
    }
    if (sp == 1 && !d.test && d.n_classes) sp = 0;
    eval_result e;
    const char *samples_path = cmd_opt_value(argc, argv, 3, "--samples");
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
