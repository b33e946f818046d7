/* cmd_generate — `bfworker generate CHECKPOINT --prompt TEXT`: continues a
 * prompt with an lm run (KV cache, pipelines/generate.h). It reads the run
 * and writes only to standard output. */
#include "worker/cmd/cmd.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk.h"
#include "worker/pipelines/generate.h"
#include "worker/pipelines/pipe.h"

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

/* What `bfworker generate` is told (cmd_generate_opts). */
typedef struct generate_args {
    opt_list sets;
    const char *prompt;
    int tokens, top_k;
    double temperature;
    long long seed;
} generate_args;

#define GE(f) OPT_AT(generate_args, f)
const opt_spec cmd_generate_opts[] = {
    {"prompt", 0, OPT_STR, 0, 0, GE(prompt), "TEXT",
     "the text to continue (required; may be \"\")"},
    {"tokens", 0, OPT_INT, 0, 100000, GE(tokens), "N", "tokens to generate (default 100)"},
    {"temperature", 0, OPT_DOUBLE, 0, 100, GE(temperature), "T", "0 = greedy; default 0.8"},
    {"top-k", 0, OPT_INT, 0, 1 << 20, GE(top_k), "K",
     "sample among the K most likely tokens (default 40; 0 = all)"},
    {"seed", 0, OPT_LONG, 0, 9007199254740992.0, GE(seed), "S", "sampling seed (default 1)"},
    {"set", 0, OPT_LIST, 0, 0, GE(sets), "KEY=VALUE",
     "override a config key that leaves the model's shape: device, data.*, train.batch "
     "(repeatable)"},
    {NULL, 0, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

int cmd_generate(int argc, char **argv) {
    const char *sets[CMD_MAX_SETS], *path = NULL;
    generate_args a = {
        .sets = {sets, 0, CMD_MAX_SETS}, .tokens = 100, .top_k = 40, .temperature = 0.8, .seed = 1};
    int prc = cmd_parse(argc, argv, NULL, &a, &path);
    if (prc >= 0) return prc;
    const char *prompt = a.prompt;
    if (!prompt) return cmd_usage_error("--prompt TEXT is required");
    char err[2048];
    run_src s;
    bf_config c;
    int orc = cmd_open_checkpoint("generate", path, &a.sets, &s, &c, err, sizeof err);
    if (orc) return orc;
    if (strcmp(c.pipeline, "lm") != 0) {
        fprintf(stderr, "bfworker generate: %s is a '%s' checkpoint; generate needs pipeline lm\n",
                path, c.pipeline);
        run_src_close(&s);
        return CMD_FAIL;
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
    int rc = CMD_FAIL;
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
    int n_new = a.tokens;
    all = malloc((n_ids + 1 + (size_t)n_new) * sizeof(int));
    if (!all) {
        snprintf(err, sizeof err, "out of memory");
        goto done;
    }
    all[0] = TOK_EOS;
    for (size_t i = 0; i < n_ids; i++) all[1 + i] = ids[i];
    gen_sampler gs = {
        .temperature = (float)a.temperature, .top_k = a.top_k, .seed = (uint64_t)a.seed};
    if (gen_generate(&g, all, (int)n_ids + 1, n_new, &gs, all + 1 + n_ids, err, sizeof err))
        goto done;
    if (print_text(stdout, d.tok, all + 1, n_ids + (size_t)n_new, err, sizeof err)) goto done;
    rc = CMD_OK;
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
