/* The training loop's contracts, on real runs of bfworker over tests/data:
 *   - the step stays on the device: a window of steps copies to the host
 *     only the one read of its statistics on the logging step, and every
 *     pipeline's step (lm, vit, A-ViT, distill, finetune) uploads only its
 *     batch;
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
#include "worker/pipelines/s2s.h"

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

static void no_metric(void *ctx, const char *name, double v) { (void)ctx, (void)name, (void)v; }

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
    be->h2d_reset();
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
    uint64_t up = 0, up_bytes = 0;
    be->h2d_count(&up, &up_bytes);
    cr_expect_eq(up, 6, "3 steps: ids and targets each (the all-ones mask made on the device)");
    cr_expect_eq(up_bytes, 3 * (sizeof ids + sizeof targets));
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

/* ---- every pipeline's step on the device ----
 * A step of each pipeline at the model, as the loop runs it (its
 * before_forward hook, forward, backward, its extra backward, gradient norm,
 * clipped AdamW), counted by the backend's transfer counters: no download
 * until the window's statistics are read, and no upload but the batch's own
 * data (inputs and targets; constants are made on the device or uploaded
 * once at model_create). */
typedef struct traffic {
    uint64_t up, up_bytes, down; /* over the steps */
    uint64_t log_down;           /* the logging step's reads */
} traffic;

static traffic run_steps(model *m, const pipe_spec *sp, const int *in, const int *targets, int B,
                         int steps) {
    const bk_backend *be = m->be;
    char err[256];
    m->stats_per_forward = 0;
    size_t n = m->np.P.numel;
    float *am = be->alloc(n * sizeof(float)), *av = be->alloc(n * sizeof(float));
    float *norm = be->alloc(sizeof(float));
    cr_assert(am && av && norm);
    bk_adamw h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
    traffic t = {0};
    model_stats_reset(m);
    be->d2h_reset();
    be->h2d_reset();
    for (int step = 0; step < steps; step++) {
        m->kn.step = (uint64_t)step;
        if (sp && sp->before_forward)
            cr_assert_eq(sp->before_forward(sp->ctx, m, in, targets, B, err, sizeof err), 0, "%s",
                         err);
        cr_assert_eq(model_forward(m, in, NULL, targets, B, 1, err, sizeof err), 0, "%s", err);
        model_backward(m);
        if (sp && sp->extra_backward) sp->extra_backward(sp->ctx, m);
        be->grad_norm(norm, m->dstats, m->np.P.grad, n);
        be->adamw_clipped(m->np.P.data, m->np.P.grad, am, av, n, &h, step + 1, norm, 1.0f);
    }
    be->h2d_count(&t.up, &t.up_bytes);
    be->d2h_count(&t.down, NULL);
    double raw[BK_STAT_SLOTS];
    model_stats_fetch(m, raw);
    cr_expect_eq(raw[BK_STAT_COUNTED], (double)steps * m->arch->loss_rows(m, B),
                 "every step's rows counted on the device");
    cr_expect_gt(raw[BK_STAT_LOSS_SUM], 0.0);
    if (sp && sp->log_ctx) sp->log_ctx(sp->ctx, no_metric, NULL);
    be->d2h_count(&t.log_down, NULL);
    t.log_down -= t.down;
    be->release(am);
    be->release(av);
    be->release(norm);
    return t;
}

#define PIX_H 8
#define PIX_P 4 /* 2 x 2 patches + the class token: 5 tokens */
#define VIT_B 3

static model_shape vit_shape(int avit, const char *mixers) {
    model_shape sh = {.layers = 3,
                      .d_model = 16,
                      .heads = 2,
                      .seq_len = (PIX_H / PIX_P) * (PIX_H / PIX_P) + 1,
                      .vocab = 256,
                      .n_classes = 3,
                      .patch = PIX_P,
                      .image_h = PIX_H,
                      .image_w = PIX_H,
                      .avit = avit};
    char err[256];
    cr_assert_eq(model_shape_mixers(&sh, mixers, err, sizeof err), 0, "%s", err);
    return sh;
}

static void vit_model(model *m, const model_shape *sh, uint64_t seed) {
    char err[256];
    cr_assert_eq(model_create(m, sh, bk_cpu(), VIT_B, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_init_weights(m, seed, err, sizeof err), 0, "%s", err);
    m->aug_pad = 1; /* augmentation on the host changes the patches, not the traffic */
    m->aug_flip = 1;
    if (sh->avit) m->halt.cf.centre = 1.5f; /* some tokens halt inside the 3 layers */
}

static int images[VIT_B * PIX_H * PIX_H], labels[VIT_B] = {0, 2, 1};
static void make_images(void) {
    for (int i = 0; i < VIT_B * PIX_H * PIX_H; i++) images[i] = (i * 37 + 11) % 256;
}

/* one step's upload of a ViT batch: its patches and its targets */
static const uint64_t VIT_PATCH_BYTES = (uint64_t)VIT_B * 4 * PIX_P * PIX_P * sizeof(float);
static const uint64_t VIT_TARGET_BYTES = VIT_B * sizeof(int);

static void expect_vit_traffic(const traffic *t, const char *what, int steps) {
    cr_expect_eq(t->down, 0, "%s: %d steps made %llu downloads", what, steps,
                 (unsigned long long)t->down);
    cr_expect_eq(t->up, 2 * (uint64_t)steps, "%s: %llu uploads in %d steps (patches, targets)",
                 what, (unsigned long long)t->up, steps);
    cr_expect_eq(t->up_bytes, steps * (VIT_PATCH_BYTES + VIT_TARGET_BYTES),
                 "%s: %llu bytes uploaded, the batches are %llu", what,
                 (unsigned long long)t->up_bytes,
                 (unsigned long long)(steps * (VIT_PATCH_BYTES + VIT_TARGET_BYTES)));
    cr_expect_eq(t->log_down, 1, "%s: the logging step made %llu downloads", what,
                 (unsigned long long)t->log_down);
}

Test(loop, an_lm_step_uploads_only_its_batch) {
    model m;
    model_shape sh = {.layers = 2, .d_model = 16, .heads = 2, .seq_len = 8, .vocab = 32};
    char err[256];
    cr_assert_eq(model_create(&m, &sh, bk_cpu(), 2, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_init_weights(&m, 3, err, sizeof err), 0, "%s", err);
    int ids[16], targets[16];
    for (int i = 0; i < 16; i++) ids[i] = (i * 5) % 32, targets[i] = (i * 5 + 1) % 32;
    traffic t = run_steps(&m, NULL, ids, targets, 2, 3);
    cr_expect_eq(t.down, 0, "%llu downloads", (unsigned long long)t.down);
    cr_expect_eq(t.up, 6, "3 steps: ids and targets each, got %llu uploads",
                 (unsigned long long)t.up);
    cr_expect_eq(t.up_bytes, 3 * 2 * sizeof ids, "%llu bytes", (unsigned long long)t.up_bytes);
    cr_expect_eq(t.log_down, 1);
    model_destroy(&m);
}

Test(loop, a_vit_step_uploads_only_its_patches_and_targets) {
    make_images();
    model m;
    model_shape sh = vit_shape(0, "");
    vit_model(&m, &sh, 4);
    traffic t = run_steps(&m, NULL, images, labels, VIT_B, 3);
    expect_vit_traffic(&t, "vit", 3);
    /* a smaller batch reuses the gather ids uploaded at model_create */
    t = run_steps(&m, NULL, images, labels, 2, 1);
    cr_expect_eq(t.up, 2, "a batch of 2: %llu uploads", (unsigned long long)t.up);
    cr_expect_eq(t.up_bytes, (VIT_PATCH_BYTES + VIT_TARGET_BYTES) * 2 / 3);
    model_destroy(&m);
}

Test(loop, an_avit_step_halts_on_the_device) {
    make_images();
    model m;
    model_shape sh = vit_shape(1, "");
    vit_model(&m, &sh, 5);
    traffic t = run_steps(&m, NULL, images, labels, VIT_B, 3);
    expect_vit_traffic(&t, "A-ViT", 3);
    model_destroy(&m);
}

/* finetune (S2S stage 2): the A-ViT student with its sequential mixers,
 * halting itself */
Test(loop, a_finetune_step_uploads_only_its_batch) {
    make_images();
    model m;
    model_shape sh = vit_shape(1, "attention,bimamba,bilstm");
    vit_model(&m, &sh, 6);
    traffic t = run_steps(&m, NULL, images, labels, VIT_B, 3);
    expect_vit_traffic(&t, "finetune", 3);
    model_destroy(&m);
}

/* distill (S2S stage 1): the teacher runs the batch up to its blocks (no
 * head, no copy of its masks or logits), the student trains under its
 * masks; the batch's patches go up once per model, the targets once. The
 * logging step reads the model's statistics and distill's two sums (one
 * copy each). */
Test(loop, a_distill_step_keeps_the_teacher_on_the_device) {
    make_images();
    s2s_distill d;
    memset(&d, 0, sizeof d);
    model_shape tsh = vit_shape(1, "");
    vit_model(&d.teacher, &tsh, 7);
    d.teacher.aug_pad = 0, d.teacher.aug_flip = 0;
    model m;
    model_shape ssh = vit_shape(1, "attention,bimamba,bilstm");
    vit_model(&m, &ssh, 7);
    m.aug_pad = 0, m.aug_flip = 0; /* as s2s_chain_train sets the stage */
    pipe_spec sp;
    int layers[2] = {1, 2};
    char err[256];
    cr_assert_eq(s2s_distill_spec(&d, &sp, layers, 2, 1.0f, 0.5f, 0.1f, 0, MODEL_MIXER_BIMAMBA, err,
                                  sizeof err),
                 0, "%s", err);
    traffic t = run_steps(&m, &sp, images, labels, VIT_B, 3);
    cr_expect_eq(t.down, 0, "distill: 3 steps made %llu downloads", (unsigned long long)t.down);
    cr_expect_eq(t.up, 3 * 3, "distill: %llu uploads in 3 steps (2 x patches, targets)",
                 (unsigned long long)t.up);
    cr_expect_eq(t.up_bytes, 3 * (2 * VIT_PATCH_BYTES + VIT_TARGET_BYTES), "%llu bytes",
                 (unsigned long long)t.up_bytes);
    cr_expect_eq(t.log_down, 2, "the logging step: %llu downloads", (unsigned long long)t.log_down);
    cr_expect(m.ext_used, "the student trained under the teacher's masks");
    s2s_distill_free(&d);
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

/* train.precision: bf16. Where the CPU has no bf16 products, the run says
 * once what is missing and trains in fp32: the fp32 run, bit for bit.
 * Where it has them, the linear layers train in bf16: other bits. */
Test(loop, bf16_precision_trains_bf16_or_says_why_and_trains_fp32) {
    cr_assert_eq(train("p32", "--set train.steps=4"), 0, "%s", log_of("p32.log"));
    cr_assert_eq(train("p16", "--set train.steps=4 --set train.precision=bf16"), 0, "%s",
                 log_of("p16.log"));
    char why[384] = "";
    int native = bk_cpu()->bf16_available(why, sizeof why);
    const char *log = log_of("p16.log");
    const char *line = strstr(log, "train.precision bf16: ");
    if (native) {
        cr_assert_null(line, "bf16 is available here, yet: %s", log);
    } else {
        cr_assert(line && strstr(line, why) && strstr(line, "this run trains in fp32"),
                  "no line saying why bf16 is not used (%s): %s", why, log);
        cr_assert_null(strstr(line + 1, "train.precision bf16: "), "said twice: %s", log);
    }
    tensors a, b;
    read_tensors(tmpdir_path(dir, "p32/model.safetensors"), &a);
    read_tensors(tmpdir_path(dir, "p16/model.safetensors"), &b);
    cr_assert_eq(a.n, b.n);
    int same = 1;
    for (int i = 0; i < a.n; i++) {
        int k = find(&b, a.name[i]);
        cr_assert(k >= 0 && b.numel[k] == a.numel[i], "%s differs in shape", a.name[i]);
        same &= memcmp(a.data[i], b.data[k], a.numel[i] * sizeof(float)) == 0;
    }
    if (native)
        cr_expect(!same, "bf16 training gave the fp32 run's weights");
    else
        cr_expect(same, "the fp32 fallback is not the fp32 run");
    free_tensors(&a);
    free_tensors(&b);
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
