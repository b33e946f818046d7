/* cmd_params — `bfworker params CONFIG.yaml`: parameters per block and the
 * memory training would take, counted from the declared tensors; for s2s
 * the ViT teacher, one replaced layer per mixer and each mixer's student. It
 * allocates nothing of the model's size; of the data it reads only a
 * classifier's own data.train, whose distinct labels size the head. */
#include "worker/cmd/cmd.h"
#include "worker/data/data.h"

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

/* Parameters of layer l's token mixer: its own tensors and the output
 * projection W_O it shares with attention (blocks.L.attn.out.*). */
static size_t mixer_count(const model *m, int l, int kind) {
    char pre[48];
    snprintf(pre, sizeof pre, "blocks.%d.attn.", l);
    size_t n = model_count(m, pre);
    if (kind == MODEL_MIXER_ATTENTION) return n;
    snprintf(pre, sizeof pre, "blocks.%d.%s.", l, model_mixer_prefix(kind));
    return n + model_count(m, pre);
}

/* s2s: the teacher's layers are attention; each replaced layer takes one
 * of the sequential mixers. Prints one replaced layer's mixer parameters
 * (W_O included) per kind, the configured distill.mixer marked. */
static int print_mixers(const model_shape *teacher, const char *chosen, char *err, size_t errlen) {
    printf("one replaced layer's mixer at d %d, %d heads (W_O included):\n", teacher->d_model,
           teacher->heads);
    for (int k = 0; k <= MODEL_MIXER_LAST; k++) {
        model_shape sh = *teacher;
        sh.mixer[0] = (unsigned char)k;
        model m;
        model_mem mm;
        if (model_plan(&m, &sh, 1, &mm, err, errlen)) return -1;
        printf("  %-12s %12zu%s\n", model_mixer_name(k), mixer_count(&m, 0, k),
               strcmp(model_mixer_name(k), chosen) == 0 ? "   (distill.mixer)" : "");
        model_destroy(&m);
    }
    return 0;
}

/* s2s: the student of each mixer kind over the config's replaced layers
 * (auto:K: the K deepest stand in for the profile's choice, every layer
 * being the same size), its total beside the teacher's (total_teacher). */
static int print_students(const model_shape *teacher, const bf_config *c, size_t total_teacher,
                          char *err, size_t errlen) {
    int layers[MODEL_MAX_LAYERS], n = c->distill.replace_auto;
    for (int k = 0; k < n; k++) layers[k] = teacher->layers - 1 - k;
    if (n <= 0) {
        n = c->distill.n_replace;
        memcpy(layers, c->distill.replace_layers, (size_t)n * sizeof(int));
    }
    char set[256] = "";
    for (int k = 0, w = 0; k < n && w < (int)sizeof set; k++)
        w += snprintf(set + w, sizeof set - (size_t)w, "%s%d", k ? ", " : "", layers[k]);
    if (c->distill.replace_auto > 0)
        printf("students: the teacher with auto:%d replaced (the profile picks which; any %d "
               "layers count the same, here %s):\n",
               n, n, set);
    else
        printf("students: the teacher with layers %s replaced (distill.replace_layers):\n", set);
    printf("  %-12s %12s %10s\n", "mixer", "parameters", "vs teacher");
    for (int k = 1; k <= MODEL_MIXER_LAST; k++) {
        model_shape sh = *teacher;
        for (int i = 0; i < n; i++) sh.mixer[layers[i]] = (unsigned char)k;
        model m;
        model_mem mm;
        if (model_plan(&m, &sh, 1, &mm, err, errlen)) return -1;
        model_destroy(&m);
        printf("  %-12s %12zu %+9.1f%%%s\n", model_mixer_name(k), mm.params,
               100.0 * ((double)mm.params / (double)total_teacher - 1.0),
               strcmp(model_mixer_name(k), c->distill.mixer) == 0 ? "   (distill.mixer)" : "");
    }
    return 0;
}

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
    int s2s = strcmp(c.pipeline, "s2s") == 0;
    int vit = strcmp(c.pipeline, "vit") == 0 || s2s, p = c.model.patch;
    if (vit) /* sized for Fashion-MNIST's 28 x 28 images and 10 classes */
        sh = (model_shape){.layers = c.model.layers,
                           .d_model = c.model.d_model,
                           .heads = c.model.heads,
                           .seq_len = (28 / p) * (28 / p) + 1,
                           .vocab = 256,
                           .n_classes = 10,
                           .patch = p,
                           .image_h = 28,
                           .image_w = 28,
                           .d_state = c.distill.d_state};
    if (!s2s && model_shape_mixers(&sh, c.model.mixers, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return CMD_USAGE;
    }
    /* counted from the declared tensors: nothing of the model's size is
     * allocated, so a model too big for this machine is still counted */
    model m;
    model_mem mm;
    int batch = c.train.batch > 0 ? c.train.batch : 1;
    if (model_plan(&m, &sh, batch, &mm, err, sizeof err)) {
        fprintf(stderr, "bfworker: %s\n", err);
        return CMD_USAGE;
    }
    if (s2s)
        printf("teacher: the dense ViT, %d layers of attention, d %d, %d heads, patch %d (%s)\n",
               sh.layers, sh.d_model, sh.heads, p,
               strcmp(c.distill.teacher, "dense") == 0
                   ? "distill.teacher dense: the students learn from it as it is"
                   : "distill.teacher avit: the students learn from its A-ViT fine-tune, which "
                     "adds no parameters (the halting reads channel 0)");
    printf("%-12s %12s\n", "part", "parameters");
    printf("%-12s %12zu\n", "embedding",
           model_count(&m, "tok_emb.") + model_count(&m, "pos_emb.") +
               model_count(&m, "patch_emb.") + model_count(&m, "cls_token"));
    char pre[32];
    for (int l = 0; l < sh.layers; l++) {
        size_t attn = mixer_count(&m, l, sh.mixer[l]);
        snprintf(pre, sizeof pre, "blocks.%d.", l);
        printf("%-12s %12zu   (%s %zu)\n", pre, model_count(&m, pre), model_mixer_name(sh.mixer[l]),
               attn);
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
    if (s2s && (print_mixers(&sh, c.distill.mixer, err, sizeof err) ||
                print_students(&sh, &c, mm.params, err, sizeof err))) {
        model_destroy(&m);
        fprintf(stderr, "bfworker: %s\n", err);
        return CMD_USAGE;
    }
    model_destroy(&m);
    return CMD_OK;
}
