/* cmd_open — a trained run opened for a command (eval, profile, generate):
 * its checkpoint and stored config with the --set overrides that cannot
 * change the model's shape, its data, and its model with the weights loaded.
 * It never trains and never writes into the run. */
#include "worker/cmd/cmd.h"

#include <stdio.h>
#include <string.h>

#include "kernels/bk.h"
#include "worker/pipelines/pipe.h"

/* Reads the checkpoint path and its config, then applies sets. Returns 0,
 * or the exit status after printing why (s is freed then). */
int cmd_open_checkpoint(const char *cmd, const char *path, const opt_list *sets, run_src *s,
                        bf_config *c, char *err, size_t errlen) {
    if (run_src_open(s, path, err, errlen)) {
        fprintf(stderr, "bfworker %s: %s\n", cmd, err);
        return CMD_FAIL;
    }
    cfg_defaults(c);
    if (cfg_load_text(c, s->cfg_text, strlen(s->cfg_text), "checkpoint config", err, errlen)) {
        fprintf(stderr, "bfworker: checkpoint config: %s\n", err);
        run_src_close(s);
        return CMD_FAIL;
    }
    bf_config stored = *c;
    for (int i = 0; sets && i < sets->n; i++)
        if (cfg_set(c, sets->v[i], err, errlen)) {
            fprintf(stderr, "bfworker: %s\n", err);
            run_src_close(s);
            return CMD_USAGE;
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
            return CMD_USAGE;
        }
    }
    return 0;
}

void cmd_close_run_model(run_model *r) {
    model_destroy(&r->m);
    data_sets_close(&r->d);
    run_src_close(&r->s);
}

/* Returns 0, or the exit status after printing why (nothing left open).
 * batch 0: the config's train.batch. infer_only: model_shape.infer_only (the
 * profile reads every layer's attention maps after the forward: 0). */
int cmd_open_run_model(const char *cmd, const char *path, const opt_list *sets, run_model *r,
                       int batch, int infer_only) {
    char err[2048];
    memset(r, 0, sizeof *r);
    int orc = cmd_open_checkpoint(cmd, path, sets, &r->s, &r->c, err, sizeof err);
    if (orc) return orc;
    const bk_backend *be;
    if (bk_select(r->c.device, &be, err, sizeof err) ||
        data_sets_open(&r->c, &r->d, 1, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        run_src_close(&r->s);
        return CMD_FAIL;
    }
    model_shape sh = pipe_model_shape(&r->c, &r->d);
    sh.infer_only = infer_only;
    if (model_create(&r->m, &sh, be, batch > 0 ? batch : r->c.train.batch, err, sizeof err) ||
        (pipe_model_config(&r->m, &r->c), run_src_load(&r->s, &r->m, err, sizeof err))) {
        fprintf(stderr, "bfworker: %s\n", err);
        cmd_close_run_model(r);
        return CMD_FAIL;
    }
    return 0;
}
