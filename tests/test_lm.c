/* The decoder LM end to end: generation with the KV cache against
 * recomputing the whole sequence (dense and hadamard), the parameter
 * accounting of the Hadamard output projection, finite differences through
 * one Hadamard attention sub-block, and `bfworker generate` on a checkpoint
 * trained here. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/bk_rng.h"
#include "tests/ref/gradcheck.h"
#include "worker/pipelines/generate.h"
#include "worker/models/model.h"

enum { NB = 3, T = 12, V = 29, PROMPT = 4 };

static void make_lm(model *m, int hadamard, int d_model) {
    model_shape sh = {.layers = 2,
                      .d_model = d_model,
                      .heads = 4,
                      .seq_len = T,
                      .vocab = V,
                      .n_classes = 0,
                      .hadamard = hadamard};
    char err[256];
    cr_assert_eq(model_create(m, &sh, bk_cpu(), 1, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_init_weights(m, 11, err, sizeof err), 0, "%s", err);
    /* weights well above the training init, so logits are spread out and
     * greedy choices are far from ties; alpha/beta move off 1/0 too */
    for (size_t i = 0; i < m->np.P.numel; i++) m->np.P.data[i] += 0.3f * bk_rng_normal_at(21, 2, i);
}

static const int prompts[NB][PROMPT] = {{5, 1, 7, 3}, {2, 28, 4, 4}, {9, 0, 13, 21}};

/* Logits agree when |a - b| <= LOGIT_ATOL + LOGIT_RTOL |b|: the cache path
 * sums attention in a different order than attention_forward (gemm + softmax
 * per query row), so only float32 rounding separates them. Logits here are
 * O(1..10); measured differences are ~1e-6. */
#define LOGIT_ATOL 1e-4
#define LOGIT_RTOL 1e-4

static double worst_logit_ratio(const float *a, const float *ref, int n) {
    double w = 0;
    for (int i = 0; i < n; i++) {
        double r = fabs((double)a[i] - ref[i]) / (LOGIT_ATOL + LOGIT_RTOL * fabs(ref[i]));
        if (r > w) w = r;
    }
    return w;
}

/* Greedy decoding of NB sequences at once with the cache; at every step each
 * sequence's logits must match model_forward over its whole prefix, and the
 * tokens must match cache-free greedy generation. */
static void check_cache_matches_recompute(int hadamard) {
    model m;
    make_lm(&m, hadamard, 16);
    gen_state g;
    char err[256];
    cr_assert_eq(gen_create(&g, &m, NB, err, sizeof err), 0, "%s", err);
    float logits[NB * V], ref[V];
    int seq[NB][T], cur[NB];
    for (int b = 0; b < NB; b++) memcpy(seq[b], prompts[b], sizeof prompts[b]);
    cr_assert_eq(gen_prefill(&g, &prompts[0][0], NB, PROMPT, logits, err, sizeof err), 0, "%s",
                 err);
    gen_sampler greedy = {0};
    double worst = 0;
    for (int len = PROMPT; len < T; len++) {
        for (int b = 0; b < NB; b++) {
            cr_assert_eq(gen_reference_logits(&m, seq[b], len, ref, err, sizeof err), 0, "%s", err);
            double w = worst_logit_ratio(logits + b * V, ref, V);
            if (w > worst) worst = w;
            cr_expect_leq(w, 1.0, "hadamard=%d seq %d after %d tokens: logits differ (ratio %g)",
                          hadamard, b, len, w);
            cur[b] = seq[b][len] = gen_sample(logits + b * V, V, &greedy, b, len, NULL);
        }
        if (len + 1 < T) cr_assert_eq(gen_decode(&g, cur, logits, err, sizeof err), 0, "%s", err);
    }
    cr_expect_eq(g.pos, T - 1);
    cr_log_info("hadamard=%d: worst logit difference %.3g of the tolerance", hadamard, worst);
    /* tokens: the same as recomputing the full sequence for every token */
    for (int b = 0; b < NB; b++) {
        int out[T - PROMPT];
        cr_assert_eq(gen_reference_greedy(&m, prompts[b], PROMPT, T - PROMPT, out, err, sizeof err),
                     0, "%s", err);
        for (int i = 0; i < T - PROMPT; i++)
            cr_expect_eq(seq[b][PROMPT + i], out[i],
                         "hadamard=%d seq %d token %d: cache %d, recompute %d", hadamard, b, i,
                         seq[b][PROMPT + i], out[i]);
    }
    /* the generated tokens are not all one id (a degenerate model would make
     * the comparison above trivial) */
    int distinct = 0;
    for (int b = 0; b < NB; b++)
        for (int i = PROMPT; i < T; i++) distinct += seq[b][i] != seq[0][PROMPT];
    cr_expect_gt(distinct, 0, "greedy output is one repeated token");

    /* prefill of every length n: the last position's logits, one sequence */
    for (int n = 1; n <= T; n++) {
        int ids[T];
        for (int i = 0; i < n; i++) ids[i] = (7 * i + 3) % V;
        cr_assert_eq(gen_prefill(&g, ids, 1, n, logits, err, sizeof err), 0, "%s", err);
        cr_assert_eq(gen_reference_logits(&m, ids, n, ref, err, sizeof err), 0, "%s", err);
        cr_expect_leq(worst_logit_ratio(logits, ref, V), 1.0, "hadamard=%d prefill of %d", hadamard,
                      n);
    }
    /* full context: one more decode is refused, with a message */
    cr_expect_eq(gen_decode(&g, cur, logits, err, sizeof err), -1);
    cr_expect(strstr(err, "full") != NULL, "%s", err);

    /* negative control: a damaged cache entry must show in the comparison */
    cr_assert_eq(gen_prefill(&g, &prompts[0][0], 1, PROMPT, logits, err, sizeof err), 0, "%s", err);
    for (int c = 0; c < 16; c++) g.kc[c] += 1.0f; /* layer 0, position 0, sequence 0 */
    int next = 6;
    cr_assert_eq(gen_decode(&g, &next, logits, err, sizeof err), 0, "%s", err);
    int ids5[PROMPT + 1];
    memcpy(ids5, prompts[0], sizeof prompts[0]);
    ids5[PROMPT] = next;
    cr_assert_eq(gen_reference_logits(&m, ids5, PROMPT + 1, ref, err, sizeof err), 0, "%s", err);
    cr_expect_gt(worst_logit_ratio(logits, ref, V), 10.0, "a damaged cache went unnoticed");

    gen_destroy(&g);
    model_destroy(&m);
}

Test(lm, kv_cache_matches_recompute_dense) { check_cache_matches_recompute(0); }
Test(lm, kv_cache_matches_recompute_hadamard) { check_cache_matches_recompute(1); }

Test(lm, sampling_is_seeded_and_respects_top_k) {
    float logits[V], work[V];
    for (int v = 0; v < V; v++) logits[v] = 0.1f * (float)((v * 11) % V);
    gen_sampler g1 = {.temperature = 1.0f, .top_k = 3, .seed = 5};
    /* the three largest logits are at ids with (11 v) % 29 in {28, 27, 26} */
    int top[3], nt = 0;
    for (int v = 0; v < V; v++)
        if ((v * 11) % V >= 26) top[nt++] = v;
    cr_assert_eq(nt, 3);
    int hits[3] = {0};
    for (int s = 0; s < 300; s++) {
        int t = gen_sample(logits, V, &g1, 0, (uint64_t)s, work);
        cr_expect(t == top[0] || t == top[1] || t == top[2], "token %d outside the top 3", t);
        for (int k = 0; k < 3; k++) hits[k] += t == top[k];
        cr_expect_eq(t, gen_sample(logits, V, &g1, 0, (uint64_t)s, work), "not deterministic");
    }
    for (int k = 0; k < 3; k++)
        cr_expect_gt(hits[k], 30, "top-%d id %d drawn %d/300 times", k, top[k], hits[k]);
    gen_sampler greedy = {0};
    int best = gen_sample(logits, V, &greedy, 0, 0, NULL);
    cr_expect_eq((best * 11) % V, 28);
}

/* dense block: W_qkv 3d^2 + b_qkv 3d + W_O d^2 + b_O d.
 * hadamard block: W_qkv 3d^2 + b_qkv 3d + alpha d + beta d.
 * So per attention block dense - hadamard = (d^2 + d) - 2d = d^2 - d exactly:
 * W_O's d^2 weights go, b_O's d become beta's d, and alpha adds d. */
Test(lm, hadamard_removes_d_squared_minus_d_per_attention_block) {
    const int widths[] = {16, 96, 768}; /* 2^n, 12*2^n, GPT-2's width */
    const int L = 3;
    for (size_t k = 0; k < sizeof widths / sizeof *widths; k++) {
        size_t d = (size_t)widths[k];
        model md, mh;
        model_shape sh = {.layers = L, .d_model = (int)d, .heads = 4, .seq_len = 4, .vocab = 16};
        char err[256];
        cr_assert_eq(model_create(&md, &sh, bk_cpu(), 1, err, sizeof err), 0, "%s", err);
        sh.hadamard = 1;
        cr_assert_eq(model_create(&mh, &sh, bk_cpu(), 1, err, sizeof err), 0, "%s", err);
        for (int l = 0; l < L; l++) {
            char pre[32];
            snprintf(pre, sizeof pre, "blocks.%d.attn.", l);
            size_t a_dense = model_count(&md, pre), a_had = model_count(&mh, pre);
            cr_expect_eq(a_dense, 4 * d * d + 4 * d, "d=%zu dense attention block", d);
            cr_expect_eq(a_had, 3 * d * d + 5 * d, "d=%zu hadamard attention block", d);
            cr_expect_eq(a_dense - a_had, d * d - d, "d=%zu layer %d", d, l);
            snprintf(pre, sizeof pre, "blocks.%d.", l);
            cr_expect_eq(model_count(&md, pre) - model_count(&mh, pre), d * d - d);
        }
        cr_expect_eq(md.np.P.numel - mh.np.P.numel, (size_t)L * (d * d - d), "d=%zu whole model",
                     d);
        model_destroy(&md);
        model_destroy(&mh);
    }
}

/* ---- one Hadamard attention sub-block, by finite differences ----
 * y = x + alpha ⊙ H_d(Attn(LN(x) W_qkv^T + b_qkv)) / sqrt(d) + beta,
 * causal, the sequence model.c runs for a hadamard block. L = <R, y>. */
typedef struct {
    int B, Tn, C, NH;
    float *x, *lnw, *lnb, *w, *b, *alpha, *beta; /* inputs and parameters */
    float *ln, *mean, *rstd, *qkv, *att, *c, *y; /* activations */
} had_block;

static void had_forward(void *ctx) {
    had_block *k = ctx;
    const bk_backend *be = bk_cpu();
    int N = k->B * k->Tn;
    be->layernorm_forward(k->ln, k->mean, k->rstd, k->x, k->lnw, k->lnb, N, k->C);
    be->linear_forward(k->qkv, k->ln, k->w, k->b, N, k->C, 3 * k->C);
    bk_attn_args a = {.B = k->B, .T = k->Tn, .C = k->C, .NH = k->NH, .causal = 1};
    be->attention_forward(k->c, k->att, k->qkv, &a);
    be->fwht_forward(k->y, NULL, k->c, k->alpha, k->beta, N, k->C);
    be->add(k->y, k->y, k->x, (size_t)N * k->C);
}

static float *fill(size_t n, float lo, float hi, uint64_t seed) {
    float *p = malloc(n * sizeof(float));
    gc_fill(p, n, lo, hi, seed);
    return p;
}

Test(lm, hadamard_block_gradients_match_finite_differences) {
    const int widths[] = {16, 24}; /* Sylvester 2^4, and H_12 ⊗ H_2 */
    for (size_t wi = 0; wi < 2; wi++) {
        int C = widths[wi], B = 2, Tn = 3, NH = 2, N = B * Tn;
        size_t NC = (size_t)N * C;
        had_block k = {B,
                       Tn,
                       C,
                       NH,
                       fill(NC, -1, 1, 1 + wi),
                       fill(C, 0.7f, 1.3f, 2),
                       fill(C, -0.2f, 0.2f, 3),
                       fill(3 * (size_t)C * C, -0.4f, 0.4f, 4),
                       fill(3 * (size_t)C, -0.1f, 0.1f, 5),
                       fill(C, 0.5f, 1.5f, 6),
                       fill(C, -0.5f, 0.5f, 7),
                       malloc(NC * 4),
                       malloc(N * 4),
                       malloc(N * 4),
                       malloc(3 * NC * 4),
                       malloc((size_t)B * NH * Tn * Tn * 4),
                       malloc(NC * 4),
                       malloc(NC * 4)};
        float *R = fill(NC, -1, 1, 8);
        had_forward(&k);
        /* analytic: the backward model.c runs, then the residual */
        const bk_backend *be = bk_cpu();
        float *dx = calloc(NC, 4), *dc = calloc(NC, 4), *dqkv = calloc(3 * NC, 4),
              *dln = calloc(NC, 4);
        float *dalpha = calloc(C, 4), *dbeta = calloc(C, 4), *scratch = malloc(NC * 4);
        float *datt = malloc((size_t)B * NH * Tn * Tn * 4);
        be->fwht_backward(dc, dalpha, dbeta, scratch, R, k.c, NULL, k.alpha, N, C);
        bk_attn_args a = {.B = B, .T = Tn, .C = C, .NH = NH, .causal = 1};
        be->attention_backward(dqkv, NULL, datt, dc, k.qkv, k.att, &a);
        be->linear_backward(dln, NULL, NULL, dqkv, k.ln, k.w, N, C, 3 * C);
        be->layernorm_backward(dx, NULL, NULL, dln, k.x, k.lnw, k.mean, k.rstd, N, C);
        be->add(dx, dx, R, NC);
        double *num = malloc(NC * sizeof(double));
        gc_numeric(k.alpha, C, R, k.y, NC, had_forward, &k, num);
        cr_expect_leq(gc_compare("block dalpha", dalpha, num, C), 1.0, "d=%d dalpha", C);
        gc_numeric(k.beta, C, R, k.y, NC, had_forward, &k, num);
        cr_expect_leq(gc_compare("block dbeta", dbeta, num, C), 1.0, "d=%d dbeta", C);
        gc_numeric(k.x, NC, R, k.y, NC, had_forward, &k, num);
        cr_expect_leq(gc_compare("block dx", dx, num, NC), 1.0, "d=%d dx", C);
        /* the check can fail: a gradient without the 1/sqrt(d) is rejected */
        for (int i = 0; i < C; i++) dalpha[i] *= sqrtf((float)C);
        gc_numeric(k.alpha, C, R, k.y, NC, had_forward, &k, num);
        cr_expect_gt(fabs(dalpha[0] - num[0]) + fabs(dalpha[1] - num[1]), 1e-2);
        float *all[] = {k.x,    k.lnw,  k.lnb, k.w,    k.b,   k.alpha, k.beta, k.ln,
                        k.mean, k.rstd, k.qkv, k.att,  k.c,   k.y,     R,      dx,
                        dc,     dqkv,   dln,   dalpha, dbeta, scratch, datt};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
        free(num);
    }
}

/* ---- bfworker generate on a checkpoint trained here ---- */

static int run_cmd(const char *cmd, char *out, size_t outlen) {
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL, "popen %s", cmd);
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(lm, bfworker_generate_end_to_end, .timeout = 60) {
    char dir[] = "/tmp/bf-test-lm-XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    char path[256], cmd[2048];
    snprintf(path, sizeof path, "%s/corpus.txt", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f != NULL);
    const char *who[] = {"the king", "a shepherd", "the people", "my brother", "the servant"};
    const char *did[] = {"went up to", "spake unto", "came into", "looked upon", "returned to"};
    const char *what[] = {"the city", "the mountain", "his house", "the river", "the temple"};
    for (int i = 0; i < 400; i++)
        fprintf(f, "and %s %s %s.\n", who[i % 5], did[(i / 5) % 5], what[(i / 25) % 5]);
    fclose(f);
    char cfg[256];
    snprintf(cfg, sizeof cfg, "%s/tiny.yaml", dir);
    f = fopen(cfg, "w");
    cr_assert(f != NULL);
    fprintf(f,
            "pipeline: lm\ndevice: cpu\ndata: {path: %s, val_fraction: 0.1}\n"
            "model: {layers: 1, d_model: 32, heads: 2, seq_len: 16, vocab: 64}\n"
            "attn: {out_proj: hadamard}\n"
            "train: {steps: 40, batch: 8, lr: 3.0e-3, warmup: 5, eval_every: 40, log_every: 20}\n",
            path);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/bfworker train %s --quiet --out %s/run 2>&1", BF_BIN_DIR, cfg,
             dir);
    static char out[1 << 16];
    int rc = run_cmd(cmd, out, sizeof out);
    cr_assert_eq(rc, 0, "train failed (%d):\n%s", rc, out);

    /* greedy: deterministic, starts with the prompt, adds text */
    snprintf(cmd, sizeof cmd,
             "%s/bfworker generate %s/run --prompt 'and the king' --tokens 12 "
             "--temperature 0 2>&1",
             BF_BIN_DIR, dir);
    static char g1[4096], g2[4096];
    rc = run_cmd(cmd, g1, sizeof g1);
    cr_assert_eq(rc, 0, "generate failed (%d):\n%s", rc, g1);
    cr_expect(strncmp(g1, "and the king", 12) == 0, "output does not start with the prompt:\n%s",
              g1);
    cr_expect_gt(strlen(g1), strlen("and the king") + 3, "nothing generated:\n%s", g1);
    cr_assert_eq(run_cmd(cmd, g2, sizeof g2), 0);
    cr_expect_str_eq(g1, g2, "greedy generation is not deterministic");

    /* sampling: the same seed gives the same text */
    snprintf(cmd, sizeof cmd,
             "%s/bfworker generate %s/run --prompt 'the people' --tokens 20 --temperature 1.5 "
             "--top-k 10 --seed 7 2>&1",
             BF_BIN_DIR, dir);
    cr_assert_eq(run_cmd(cmd, g1, sizeof g1), 0, "%s", g1);
    cr_assert_eq(run_cmd(cmd, g2, sizeof g2), 0, "%s", g2);
    cr_expect_str_eq(g1, g2, "seeded sampling is not reproducible");

    /* bad input is refused with a message and a usage status */
    snprintf(cmd, sizeof cmd, "%s/bfworker generate %s/run --prompt x --tokens -3 2>&1", BF_BIN_DIR,
             dir);
    rc = run_cmd(cmd, g1, sizeof g1);
    cr_expect_eq(rc, 64, "bad --tokens gave status %d:\n%s", rc, g1);
    snprintf(cmd, sizeof cmd, "%s/bfworker generate %s/nothing-here --prompt x 2>&1", BF_BIN_DIR,
             dir);
    rc = run_cmd(cmd, g1, sizeof g1);
    cr_expect_eq(rc, 1, "missing checkpoint gave status %d:\n%s", rc, g1);

    /* a repeated option keeps its last value, as --set does */
    snprintf(cmd, sizeof cmd,
             "%s/bfworker generate %s/run --prompt 'and the king' --tokens 3 --tokens 12 "
             "--temperature 0 2>&1",
             BF_BIN_DIR, dir);
    cr_assert_eq(run_cmd(cmd, g2, sizeof g2), 0, "%s", g2);
    snprintf(cmd, sizeof cmd,
             "%s/bfworker generate %s/run --prompt 'and the king' --tokens 12 --temperature 0 2>&1",
             BF_BIN_DIR, dir);
    cr_assert_eq(run_cmd(cmd, g1, sizeof g1), 0, "%s", g1);
    cr_expect_str_eq(g1, g2, "--tokens 3 --tokens 12 is not --tokens 12");
    /* eval: the shape is the checkpoint's; an lm run has no test split */
    snprintf(cmd, sizeof cmd, "%s/bfworker eval %s/run --set model.heads=1 2>&1", BF_BIN_DIR, dir);
    rc = run_cmd(cmd, g1, sizeof g1);
    cr_expect_eq(rc, 64, "a shape override gave status %d:\n%s", rc, g1);
    cr_expect(strstr(g1, "--set model.heads=1: the checkpoint's model has model.heads 2"), "%s",
              g1);
    snprintf(cmd, sizeof cmd, "%s/bfworker eval %s/run --split test 2>&1", BF_BIN_DIR, dir);
    rc = run_cmd(cmd, g1, sizeof g1);
    cr_expect_eq(rc, 64, "--split test on an lm run gave status %d:\n%s", rc, g1);
    cr_expect(strstr(g1, "no test split"), "%s", g1);
    snprintf(cmd, sizeof cmd, "%s/bfworker eval %s/run --set device=cpu 2>&1", BF_BIN_DIR, dir);
    rc = run_cmd(cmd, g1, sizeof g1);
    cr_expect_eq(rc, 0, "eval failed (%d):\n%s", rc, g1);
    cr_expect(strstr(g1, "split        val"), "%s", g1);
    /* a relative data path is stored absolute: eval works from another folder */
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/bfworker train tiny.yaml --quiet --set data.path=corpus.txt "
             "--set train.steps=20 --out rel 2>&1 && cd / && %s/bfworker eval %s/rel 2>&1",
             dir, BF_BIN_DIR, BF_BIN_DIR, dir);
    rc = run_cmd(cmd, g1, sizeof g1);
    cr_expect_eq(rc, 0, "eval from / of a run with a relative data path (%d):\n%s", rc, g1);
    /* --out on a folder holding a run: refused unless --resume or --force
     * (the forced run's own output, its result line too, goes to a log) */
    snprintf(cmd, sizeof cmd, "%s/bfworker train %s --quiet --out %s/run 2>&1", BF_BIN_DIR, cfg,
             dir);
    rc = run_cmd(cmd, g1, sizeof g1);
    cr_expect_eq(rc, 64, "training again into a run folder gave status %d:\n%s", rc, g1);
    cr_expect(strstr(g1, "already holds a run") && strstr(g1, "--force"), "%s", g1);
    snprintf(cmd, sizeof cmd,
             "{ %s/bfworker train %s --quiet --set train.steps=20 --force --out %s/run "
             ">%s/force.log 2>&1 || { cat %s/force.log; exit 1; }; } && "
             "wc -l < %s/run/metrics.jsonl",
             BF_BIN_DIR, cfg, dir, dir, dir, dir);
    rc = run_cmd(cmd, g1, sizeof g1);
    cr_expect_eq(rc, 0, "--force failed (%d):\n%s", rc, g1);
    cr_expect_eq(atoi(g1), 1, "--force kept the old metrics (%s lines)", g1);
    /* an empty validation split is found before step 1 (it used to be found
     * by the first eval, after training) */
    snprintf(cmd, sizeof cmd,
             "echo 'a single line of text' > %s/one.txt && %s/bfworker train %s --quiet "
             "--set data.path=%s/one.txt --out %s/one 2>&1",
             dir, BF_BIN_DIR, cfg, dir, dir);
    rc = run_cmd(cmd, g1, sizeof g1);
    cr_expect_eq(rc, 1, "a one-line corpus gave status %d:\n%s", rc, g1);
    cr_expect(strstr(g1, "validation split is too small") && !strstr(g1, "step "), "%s", g1);
    /* a full disk (/dev/full) is an error with the reason, not a silent exit 0 */
    const char *files[] = {"metrics.jsonl", "config.yaml"};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "rm -rf %s/full && mkdir %s/full && ln -s /dev/full %s/full/%s",
                 dir, dir, dir, files[k]);
        cr_assert_eq(system(cmd), 0);
        snprintf(cmd, sizeof cmd,
                 "%s/bfworker train %s --quiet --set train.steps=20 --resume --out %s/full 2>&1",
                 BF_BIN_DIR, cfg, dir);
        rc = run_cmd(cmd, g1, sizeof g1);
        cr_expect_eq(rc, 1, "%s on a full disk gave status %d:\n%s", files[k], rc, g1);
        cr_expect(strstr(g1, files[k]) && strstr(g1, "No space left on device"), "%s", g1);
    }

    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}
