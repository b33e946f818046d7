/* The training loop's contracts, on real runs of bfworker over tests/data:
 *   - the step stays on the device: a window of steps copies to the host
 *     only the one read of its statistics on the logging step;
 *   - a frozen parameter group stays bit-identical (and its AdamW moments
 *     zero) while the rest trains;
 *   - init.from starts a run from another run's weights by name, and a shape
 *     that differs is an error naming the tensor. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bk.h"
#include "tests/tmpdir.h"
#include "worker/models/model.h"
#include "worker/io/safetensors.h"

#define GOLDEN BF_SOURCE_DIR "/tests/data/golden"

static char dir[256];
static void setup(void) {
    tmpdir_make(dir, sizeof dir, "/tmp/bf_loop_XXXXXX");
    tmpdir_copy_glosses(dir);
}
static void teardown(void) { tmpdir_remove(dir); }
TestSuite(loop, .init = setup, .fini = teardown, .timeout = 300);

/* bfworker train on the golden budget config into dir/out with extra --set
 * options; returns the exit status, output in dir/out.log. */
static int train(const char *out, const char *extra) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s/bfworker train %s/budget_dense.yaml --set data.train=%s/glosses_train.tsv "
             "--set data.val=%s/glosses_val.tsv %s --out %s/%s --quiet >%s/%s.log 2>&1",
             BF_BIN_DIR, GOLDEN, dir, dir, extra, dir, out, dir, out);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *log_of(const char *out) {
    static char buf[8192];
    FILE *f = fopen(tmpdir_path(dir, out), "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = 0;
    if (f) fclose(f);
    return buf;
}

Test(loop, a_window_of_steps_copies_only_its_statistics) {
    cr_assert_eq(train("run", "--set train.log_every=5"), 0, "%s", log_of("run.log"));
    FILE *f = fopen(tmpdir_path(dir, "run/metrics.jsonl"), "r");
    cr_assert_not_null(f);
    char line[8192];
    int windows = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        cr_assert_not_null(o);
        json_t *c = json_object_get(o, "train/host_copies");
        if (c) {
            /* 4 steps that do not log made none; the logging step one */
            cr_expect_eq(json_number_value(c), 1.0, "step %lld: %g host copies in the window",
                         (long long)json_integer_value(json_object_get(o, "step")),
                         json_number_value(c));
            windows++;
        }
        json_decref(o);
    }
    fclose(f);
    cr_expect_eq(windows, 4, "20 steps logged every 5: 4 windows, got %d", windows);
}

/* The same at the model: a training step (forward, backward, norm, clipped
 * AdamW) makes no device-to-host copy; reading the statistics makes one. */
Test(loop, a_training_step_makes_no_host_copy) {
    const bk_backend *be = bk_cpu();
    model m;
    model_shape sh = {.layers = 2,
                      .d_model = 16,
                      .heads = 4,
                      .seq_len = 8,
                      .vocab = 32,
                      .n_classes = 3,
                      .budget = 1};
    char err[256];
    cr_assert_eq(model_create(&m, &sh, be, 4, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_init_weights(&m, 5, err, sizeof err), 0, "%s", err);
    m.stats_per_forward = 0;
    m.kn.sigma = 1;
    size_t n = m.np.P.numel;
    float *am = be->alloc(n * sizeof(float)), *av = be->alloc(n * sizeof(float));
    float *norm = be->alloc(sizeof(float));
    int ids[32], targets[4] = {0, 1, 2, 1};
    for (int i = 0; i < 32; i++) ids[i] = (i * 7) % 32;
    bk_adamw h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
    be->d2h_reset();
    for (int step = 0; step < 3; step++) {
        m.kn.step = (uint64_t)step;
        cr_assert_eq(model_forward(&m, ids, NULL, targets, 4, 1, err, sizeof err), 0, "%s", err);
        model_backward(&m);
        be->grad_norm(norm, m.dstats, m.np.P.grad, n);
        be->adamw_clipped(m.np.P.data, m.np.P.grad, am, av, n, &h, step + 1, norm, 1.0f);
    }
    uint64_t calls = 99;
    be->d2h_count(&calls, NULL);
    cr_expect_eq(calls, 0, "3 training steps made %llu device-to-host copies",
                 (unsigned long long)calls);
    double raw[BK_STAT_SLOTS];
    model_stats_fetch(&m, raw);
    be->d2h_count(&calls, NULL);
    cr_expect_eq(calls, 1);
    cr_expect_eq(raw[BK_STAT_COUNTED], 12.0, "3 steps of 4 samples counted");
    cr_expect_eq(raw[BK_STAT_GATE_ROWS], 24.0, "3 steps x 4 samples x 2 layers of gates");
    cr_expect_eq(raw[BK_STAT_NORM_COUNT], 3.0);
    cr_expect_gt(raw[BK_STAT_LOSS_SUM], 0.0);
    be->release(am);
    be->release(av);
    be->release(norm);
    model_destroy(&m);
}

/* All tensors of a safetensors file, by name order of the file. */
typedef struct tensors {
    int n;
    char name[256][64];
    float *data[256];
    size_t numel[256];
    int shape[256][2];
} tensors;

static void read_tensors(const char *path, tensors *t) {
    char err[1024];
    st_file f;
    cr_assert_eq(st_open(&f, path, err, sizeof err), 0, "%s", err);
    cr_assert_leq(f.n, 256);
    t->n = f.n;
    for (int i = 0; i < f.n; i++) {
        snprintf(t->name[i], sizeof t->name[i], "%s", f.t[i].name);
        t->numel[i] = f.t[i].numel;
        t->shape[i][0] = f.t[i].shape[0];
        t->shape[i][1] = f.t[i].ndim > 1 ? f.t[i].shape[1] : 0;
        t->data[i] = malloc(t->numel[i] * sizeof(float));
        cr_assert_eq(st_read_f32(&f, i, t->data[i], err, sizeof err), 0, "%s", err);
    }
    st_close(&f);
}

static void free_tensors(tensors *t) {
    for (int i = 0; i < t->n; i++) free(t->data[i]);
}

static int find(const tensors *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->name[i], name) == 0) return i;
    return -1;
}

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

Test(loop, frozen_tensors_stay_bit_identical_while_the_rest_trains) {
    cr_assert_eq(train("frozen", "--set train.freeze=tok_emb,blocks.0.attn"), 0, "%s",
                 log_of("frozen.log"));
    tensors w, opt;
    read_tensors(tmpdir_path(dir, "frozen/model.safetensors"), &w);
    read_tensors(tmpdir_path(dir, "frozen/optimizer.safetensors"), &opt);
    /* the model as it started: the same shape and seed (golden config) */
    int tok = find(&w, "tok_emb.weight"), head = find(&w, "head.weight");
    cr_assert(tok >= 0 && head >= 0);
    model_shape sh = {.layers = 2,
                      .d_model = 32,
                      .heads = 4,
                      .seq_len = 16,
                      .vocab = w.shape[tok][0],
                      .n_classes = w.shape[head][0],
                      .budget = 1};
    model m;
    char err[256];
    cr_assert_eq(model_create(&m, &sh, bk_cpu(), 1, err, sizeof err), 0, "%s", err);
    m.kn.s_min = 0.25f, m.kn.s_max = 0.5f;
    cr_assert_eq(model_init_weights(&m, 7, err, sizeof err), 0, "%s", err);
    int frozen = 0, trained = 0;
    for (int i = 0; i < m.np.P.n; i++) {
        const bk_tensor *t = &m.np.P.t[i];
        int k = find(&w, t->name);
        cr_assert_geq(k, 0, "%s missing from the checkpoint", t->name);
        int same = memcmp(w.data[k], t->data, t->numel * sizeof(float)) == 0;
        char mname[80];
        snprintf(mname, sizeof mname, "m.%s", t->name);
        int km = find(&opt, mname);
        cr_assert_geq(km, 0, "%s missing from the optimizer file", mname);
        double msum = 0;
        for (size_t j = 0; j < t->numel; j++) msum += fabs(opt.data[km][j]);
        if (starts(t->name, "tok_emb") || starts(t->name, "blocks.0.attn")) {
            cr_expect(same, "frozen %s changed", t->name);
            cr_expect_eq(msum, 0.0, "frozen %s has AdamW momentum %g", t->name, msum);
            frozen++;
        } else if (t->ndim == 2) {
            cr_expect(!same, "%s did not train", t->name);
            trained++;
        }
    }
    cr_expect_eq(frozen, 1 + 10, "tok_emb and block 0's attention (qkv, out, budget, scorer)");
    cr_expect_gt(trained, 5);
    model_destroy(&m);
    free_tensors(&w);
    free_tensors(&opt);
}

Test(loop, init_from_loads_another_runs_weights_by_name) {
    cr_assert_eq(train("a", ""), 0, "%s", log_of("a.log"));
    char extra[600];
    /* b starts from a and keeps a's embedding frozen: it must end with it */
    snprintf(extra, sizeof extra, "--set init.from=%s/a --set train.freeze=tok_emb", dir);
    cr_assert_eq(train("b", extra), 0, "%s", log_of("b.log"));
    tensors a, b;
    read_tensors(tmpdir_path(dir, "a/model.safetensors"), &a);
    read_tensors(tmpdir_path(dir, "b/model.safetensors"), &b);
    int ia = find(&a, "tok_emb.weight"), ib = find(&b, "tok_emb.weight");
    cr_assert(ia >= 0 && ib >= 0);
    cr_expect(memcmp(a.data[ia], b.data[ib], a.numel[ia] * sizeof(float)) == 0,
              "b's frozen embedding is not a's");
    int ha = find(&a, "head.weight"), hb = find(&b, "head.weight");
    cr_expect(memcmp(a.data[ha], b.data[hb], a.numel[ha] * sizeof(float)) != 0,
              "b's head did not train on from a's");
    free_tensors(&a);
    free_tensors(&b);
    /* another width: an error naming a tensor and both shapes */
    snprintf(extra, sizeof extra, "--set init.from=%s/a --set model.d_model=64", dir);
    cr_assert_neq(train("c", extra), 0);
    const char *msg = log_of("c.log");
    cr_expect(strstr(msg, "tok_emb.weight") && strstr(msg, "shape"), "unhelpful error: %s", msg);
}

/* Two runs that tokenize the same data at once (two trials of a sweep
 * starting together) both train: neither reads the other's half-written
 * tokenizer model. */
Test(loop, two_runs_training_one_tokenizer_at_once_both_succeed) {
    for (int round = 0; round < 3; round++) {
        char cmd[4096];
        int vocab = 256 + round; /* a tokenizer none beside the data serves */
        char one[1500];
        /* an empty cache folder per round: both runs train the tokenizer */
        snprintf(one, sizeof one,
                 "BF_CACHE=%s/tokcache%d %s/bfworker train %s/budget_off.yaml --set "
                 "data.train=%s/glosses_train.tsv "
                 "--set data.val=%s/glosses_val.tsv --set model.vocab=%d --set train.steps=2 "
                 "--quiet --out %s/tok",
                 dir, round, BF_BIN_DIR, GOLDEN, dir, dir, vocab, dir);
        snprintf(cmd, sizeof cmd,
                 "%sa%d >%s/toka%d.log 2>&1 & pa=$!; %sb%d >%s/tokb%d.log 2>&1 & pb=$!; "
                 "wait $pa; a=$?; wait $pb; b=$?; test $a -eq 0 -a $b -eq 0",
                 one, round, dir, round, one, round, dir, round);
        int st = system(cmd);
        char la[64], lb[64];
        snprintf(la, sizeof la, "toka%d.log", round);
        snprintf(lb, sizeof lb, "tokb%d.log", round);
        cr_assert_eq(st, 0, "round %d: a concurrent run failed:\n%s\n%s", round, log_of(la),
                     log_of(lb));
    }
}
