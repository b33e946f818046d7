/* cmd_params — `bfworker params CONFIG.yaml`: parameters per block and the
 * memory training would take, counted from the declared tensors. It
 * allocates nothing of the model's size and opens no data. */
#include "worker/cmd/cmd.h"

#include <stdio.h>
#include <string.h>

/* What `bfworker params` is told (cmd_params_opts). */
typedef struct params_args {
    opt_list sets;
} params_args;

const opt_spec cmd_params_opts[] = {
    {"set", 0, OPT_LIST, 0, 0, OPT_AT(params_args, sets), "KEY=VALUE",
     "override one config key (dotted path; repeatable)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int cmd_params(int argc, char **argv) {
    const char *sets[CMD_MAX_SETS], *path = NULL;
    params_args a = {.sets = {sets, 0, CMD_MAX_SETS}};
    int prc = cmd_parse(argc, argv,
                        "print parameters per block and the total, and the memory training "
                        "takes, counted from the declared tensors (nothing of the model's size "
                        "is allocated)",
                        &a, &path);
    if (prc >= 0) return prc;
    char err[2048];
    bf_config c;
    if (cmd_load_config(&c, path, &a.sets, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return CMD_USAGE;
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
        return CMD_USAGE;
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
    return CMD_OK;
}
