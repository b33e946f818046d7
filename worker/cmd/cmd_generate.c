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

/* Parses a number option of generate into [lo, hi]; returns 0, or -1 after
 * saying what was wrong. */
static int generate_number(int argc, char **argv, const char *name, double lo, double hi,
                           double *v) {
    const char *text = cmd_opt_value(argc, argv, 3, name);
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

/* The options `bfworker generate` accepts (cmd.h: cmd_specs). */
const char *const cmd_generate_vals[] = {
    "--prompt", "--tokens", "--temperature", "--top-k", "--seed", "--set", NULL};
const char *const cmd_generate_flags[] = {NULL};

int cmd_generate(int argc, char **argv) {
    int start = cmd_preamble(argc, argv, "CHECKPOINT");
    if (start >= 0) return start;
    if (cmd_check_options(argc, argv, 3, cmd_generate_vals, cmd_generate_flags)) return CMD_USAGE;
    const char *prompt = cmd_opt_value(argc, argv, 3, "--prompt");
    if (!prompt) {
        fprintf(stderr, "bfworker generate: --prompt TEXT is required\n");
        return CMD_USAGE;
    }
    double tokens = 100, temperature = 0.8, top_k = 40, seed = 1;
    if (generate_number(argc, argv, "--tokens", 0, 100000, &tokens) ||
        generate_number(argc, argv, "--temperature", 0, 100, &temperature) ||
        generate_number(argc, argv, "--top-k", 0, 1 << 20, &top_k) ||
        generate_number(argc, argv, "--seed", 0, 9007199254740992.0, &seed))
        return CMD_USAGE;
    if (tokens != (int)tokens || top_k != (int)top_k) {
        fprintf(stderr, "bfworker generate: --tokens and --top-k take whole numbers\n");
        return CMD_USAGE;
    }
    char err[2048];
    run_src s;
    bf_config c;
    int orc = cmd_open_checkpoint(argc, argv, &s, &c, err, sizeof err);
    if (orc) return orc;
    if (strcmp(c.pipeline, "lm") != 0) {
        fprintf(stderr, "bfworker generate: %s is a '%s' checkpoint; generate needs pipeline lm\n",
                argv[2], c.pipeline);
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
