/* cmd_params — `bfworker params CONFIG.yaml`: parameters per block and the
 * memory training would take, counted from the declared tensors. It
 * allocates nothing of the model's size; of the data it reads only a
 * classifier's own data.train, whose distinct labels size the head. */
#include "worker/cmd/cmd.h"
#include "worker/data/data.h"

#include <stdio.h>
#include <string.h>

/* The options `bfworker params` accepts (cmd.h: cmd_specs). */
const char *const cmd_params_vals[] = {"--set", NULL};
const char *const cmd_params_flags[] = {NULL};

int cmd_params(int argc, char **argv) {
    int start = cmd_preamble(argc, argv, "CONFIG.yaml");
    if (start >= 0) return start;
    if (cmd_check_options(argc, argv, 3, cmd_params_vals, cmd_params_flags)) return CMD_USAGE;
    char err[2048];
    bf_config c;
    if (cmd_load_config(&c, argv[2], argc, argv, 3, err, sizeof err)) {
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
    /* given its training file, a classifier's head has its real size */
    size_t from_data = 0;
    if (!lm && strcmp(c.pipeline, "budgetformer") == 0 && c.data.train[0]) {
        data_tsv_t *t = NULL;
        if (data_tsv_load(c.data.train, NULL, &t, err, sizeof err)) {
            fprintf(stderr, "bfworker: data.train: %s\n", err);
            return CMD_USAGE;
        }
        from_data = t->n_classes;
        sh.n_classes = (int)t->n_classes;
        data_tsv_destroy(&t);
    }
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
    else if (from_data)
        printf("(classifier sized for the %zu distinct labels of %s)\n", from_data, c.data.train);
    else if (!lm)
        printf("(classifier sized for 26 classes; the data decides the real count: give "
               "data.train to count them)\n");
    model_destroy(&m);
    return CMD_OK;
}
