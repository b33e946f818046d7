/* The ViT (models/vit.c): gradients of the whole model against finite
 * differences at a tiny size (with the training augmentation on, which is
 * fixed by (seed, step)), the pixel range check, and the IDX image data of
 * pipeline vit: bad files refused with FILE: messages, a patch size that does
 * not divide the images refused naming the valid ones, the validation tail. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cfg.h"
#include "kernels/bk_rng.h"
#include "worker/data/data_sets.h"
#include "worker/models/model.h"

/* 8 x 8 images, patch 4: 4 patches + the class token. */
static void make(model *m) {
    model_shape sh = {.layers = 2,
                      .d_model = 16,
                      .heads = 4,
                      .seq_len = 5,
                      .vocab = 256,
                      .n_classes = 3,
                      .patch = 4,
                      .image_h = 8,
                      .image_w = 8};
    char err[256];
    cr_assert_eq(model_create(m, &sh, bk_cpu(), 3, err, sizeof err), 0, "%s", err);
    cr_assert_eq(model_init_weights(m, 3, err, sizeof err), 0, "%s", err);
    for (size_t i = 0; i < m->np.P.numel; i++) m->np.P.data[i] += 0.3f * bk_rng_normal_at(9, 1, i);
    m->kn.seed = 5;
    m->kn.step = 7;
    m->aug_pad = 1;
    m->aug_flip = 1;
}

static int pixels[3 * 64];

static double loss_at(model *m, const int *targets) {
    char err[256];
    cr_assert_eq(model_forward(m, pixels, NULL, targets, 3, 1, err, sizeof err), 0, "%s", err);
    return m->st.loss;
}

Test(vit, gradients_match_finite_differences) {
    for (int i = 0; i < 3 * 64; i++) pixels[i] = (i * 37 + 11) % 256;
    model m;
    make(&m);
    const char *names[] = {"patch_emb.weight", "patch_emb.bias",      "cls_token",
                           "pos_emb.weight",   "blocks.0.ln1.weight", "head.weight"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        cr_assert_gt(model_count(&m, names[k]), 0, "no tensor %s", names[k]);
    int targets[3] = {0, 2, 1};
    loss_at(&m, targets);
    model_backward(&m);
    float *g = malloc(m.np.P.numel * sizeof(float));
    memcpy(g, m.np.P.grad, m.np.P.numel * sizeof(float));
    int checked = 0;
    for (int t = 0; t < m.np.P.n; t++) {
        const bk_tensor *tt = &m.np.P.t[t];
        for (int j = 0; j < 6 && (size_t)j < tt->numel; j++) {
            size_t i = tt->offset + (size_t)((j * 7919u) % tt->numel);
            float x0 = m.np.P.data[i], h = 1e-3f;
            m.np.P.data[i] = x0 + h;
            double lp = loss_at(&m, targets);
            m.np.P.data[i] = x0 - h;
            double lm = loss_at(&m, targets);
            m.np.P.data[i] = x0;
            double num = (lp - lm) / (2.0 * h), ana = g[i];
            cr_expect_leq(fabs(num - ana), 2e-3 + 3e-2 * fmax(fabs(num), fabs(ana)),
                          "%s[%zu]: analytic %g numeric %g", tt->name, i - tt->offset, ana, num);
            checked++;
        }
    }
    cr_assert_gt(checked, 20);
    free(g);
    model_destroy(&m);
}

Test(vit, augmentation_is_fixed_by_step_and_changes_with_it) {
    for (int i = 0; i < 3 * 64; i++) pixels[i] = (i * 37 + 11) % 256;
    model m;
    make(&m);
    int targets[3] = {0, 2, 1};
    double a = loss_at(&m, targets), b = loss_at(&m, targets);
    cr_assert_eq(a, b, "same step, same images: %g vs %g", a, b);
    double changed = 0;
    for (int s = 8; s < 12; s++) {
        m.kn.step = (uint64_t)s;
        changed += fabs(loss_at(&m, targets) - a);
    }
    cr_assert_gt(changed, 0, "augmentation never changed the images over 4 steps");
    /* inference: no augmentation, so the step does not matter */
    char err[256];
    cr_assert_eq(model_forward(&m, pixels, NULL, targets, 3, 0, err, sizeof err), 0, "%s", err);
    double i1 = m.st.loss;
    m.kn.step = 99;
    cr_assert_eq(model_forward(&m, pixels, NULL, targets, 3, 0, err, sizeof err), 0, "%s", err);
    cr_assert_eq(m.st.loss, i1);
    model_destroy(&m);
}

Test(vit, refuses_pixels_outside_a_byte) {
    for (int i = 0; i < 3 * 64; i++) pixels[i] = i % 256;
    pixels[70] = 256;
    model m;
    make(&m);
    int targets[3] = {0, 2, 1};
    char err[256];
    cr_assert_eq(model_forward(&m, pixels, NULL, targets, 3, 1, err, sizeof err), -1);
    cr_assert(strstr(err, "pixel 256 of image 1") != NULL, "%s", err);
    model_destroy(&m);
}

/* ---- IDX files ---- */

static char dir[64];

static void be32(FILE *f, unsigned v) {
    unsigned char b[4] = {v >> 24, v >> 16, v >> 8, v};
    fwrite(b, 1, 4, f);
}

/* An IDX file: magic 00 00 type ndim, dims, then `bytes` payload bytes of value i % mod. */
static void write_idx(const char *name, int type, int ndim, const unsigned *dims, size_t bytes,
                      int mod) {
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    cr_assert(f != NULL);
    unsigned char m[4] = {0, 0, (unsigned char)type, (unsigned char)ndim};
    fwrite(m, 1, 4, f);
    for (int i = 0; i < ndim; i++) be32(f, dims[i]);
    for (size_t i = 0; i < bytes; i++) fputc((int)(i % (size_t)mod), f);
    fclose(f);
}

static void setup_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/bf-test-vit-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    unsigned im[3] = {20, 8, 8}, lb[1] = {20};
    write_idx("im", 8, 3, im, 20 * 64, 256);
    write_idx("lb", 8, 1, lb, 20, 3);
}

static void teardown_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* data_sets_open on pipeline vit with train images/labels im, lb (names in dir). */
static const char *g_val_split = "stratified"; /* data.val_split of open_set */

static int open_set(const char *im, const char *lb, const char *tim, const char *tlb, int patch,
                    data_sets *d, char *err, size_t errlen) {
    bf_config c;
    cfg_defaults(&c);
    snprintf(c.data.val_split, sizeof c.data.val_split, "%s", g_val_split);
    snprintf(c.pipeline, sizeof c.pipeline, "vit");
    snprintf(c.data.train_images, sizeof c.data.train_images, "%s/%s", dir, im);
    snprintf(c.data.train_labels, sizeof c.data.train_labels, "%s/%s", dir, lb);
    if (tim) {
        snprintf(c.data.test_images, sizeof c.data.test_images, "%s/%s", dir, tim);
        snprintf(c.data.test_labels, sizeof c.data.test_labels, "%s/%s", dir, tlb);
    }
    c.data.val_fraction = 0.25f;
    c.model.patch = patch;
    return data_sets_open(&c, d, 1, err, errlen);
}

static void expect_refused(const char *im, const char *lb, const char *tim, const char *tlb,
                           int patch, const char *file, const char *what) {
    data_sets d;
    char err[512];
    cr_assert_eq(open_set(im, lb, tim, tlb, patch, &d, err, sizeof err), -1, "accepted %s", what);
    char want[128];
    if (file)
        snprintf(want, sizeof want, "%s/%s", dir, file);
    else
        snprintf(want, sizeof want, "model.patch");
    cr_expect(strstr(err, want) == err, "message does not start with %s: %s", want, err);
    cr_expect(strstr(err, what) != NULL, "want '%s' in: %s", what, err);
}

Test(vit, opens_idx_sets_with_a_stratified_or_tail_validation_split, .init = setup_dir,
     .fini = teardown_dir) {
    data_sets d;
    char err[512];
    cr_assert_eq(open_set("im", "lb", "im", "lb", 4, &d, err, sizeof err), 0, "%s", err);
    cr_assert_eq(d.image_rows, 8);
    cr_assert_eq(d.image_cols, 8);
    cr_assert_eq(d.n_classes, 3);
    cr_assert_eq(d.train->n_seq, 15);
    cr_assert_eq(d.val->n_seq, 5);
    cr_assert_eq(d.test->n_seq, 20);
    /* stratified (the default): labels i % 3 give 7, 7 and 6 images; 5 of
     * them validate, 2, 2 and 1 (the largest remainders of 1.75, 1.75, 1.5) */
    int per[3] = {0};
    for (size_t i = 0; i < d.val->n_seq; i++) per[d.val->labels[i]]++;
    cr_expect(per[0] == 2 && per[1] == 2 && per[2] == 1, "validation classes %d, %d, %d", per[0],
              per[1], per[2]);
    data_sets_close(&d);
    /* data.val_split tail: the validation set is the file's last images */
    g_val_split = "tail";
    cr_assert_eq(open_set("im", "lb", "im", "lb", 4, &d, err, sizeof err), 0, "%s", err);
    g_val_split = "stratified";
    cr_assert_eq(d.val->n_seq, 5);
    cr_assert_eq(d.val->labels[0], 15 % 3);
    cr_assert_eq(d.val->tokens[0], (15 * 64) % 256);
    data_sets_close(&d);
}

Test(vit, refuses_bad_idx_files, .init = setup_dir, .fini = teardown_dir) {
    unsigned im[3] = {20, 8, 8}, lb[1] = {20}, lb2[2] = {20, 1}, lb19[1] = {19};
    /* wrong magic */
    write_idx("magic", 7, 3, im, 20 * 64, 256);
    expect_refused("magic", "lb", NULL, NULL, 4, "magic", "not an IDX file");
    /* wrong dimension count */
    write_idx("dims", 8, 2, lb2, 20, 3);
    expect_refused("im", "dims", NULL, NULL, 4, "dims", "expected unsigned-byte labels [n]");
    expect_refused("dims", "lb", NULL, NULL, 4, "dims", "expected unsigned-byte images");
    /* truncated */
    write_idx("short", 8, 3, im, 20 * 64 - 5, 256);
    expect_refused("short", "lb", NULL, NULL, 4, "short", "truncated");
    /* counts that differ */
    write_idx("lb19", 8, 1, lb19, 19, 3);
    expect_refused("im", "lb19", NULL, NULL, 4, "im", "has 20 images but");
    /* a test label the training labels do not have */
    write_idx("lb5", 8, 1, lb, 20, 5);
    expect_refused("im", "lb", "im", "lb5", 4, "lb5", "is not a class of the training labels");
    /* a patch that does not divide 8 x 8: a config error */
    expect_refused("im", "lb", NULL, NULL, 3, NULL, "valid patch sizes: 1, 2, 4, 8");
    /* a missing file */
    {
        /* a missing file: named with the key it came from */
        data_sets d;
        char err[512], want[300];
        cr_assert_eq(open_set("nope", "lb", NULL, NULL, 4, &d, err, sizeof err), -1);
        snprintf(want, sizeof want, "data.train_images: %s/nope not found", dir);
        cr_expect_str_eq(err, want);
        /* a folder: said so */
        cr_assert_eq(open_set(".", "lb", NULL, NULL, 4, &d, err, sizeof err), -1);
        cr_expect(strstr(err, "data.train_images: ") &&
                      strstr(err, "is a folder; expected an IDX file"),
                  "%s", err);
    }
}

/* aug_infer (what a distillation teacher is run with, s2s.c's
 * distill_before): an inference forward augments as a training forward
 * drawn from the same knobs does, so the same weights give the same loss
 * at every step; without it the images are as they are (another loss at
 * some step). Same ops on the same patches: the losses agree to float
 * rounding of the CE's sum (1e-6 relative). */
Test(vit, inference_augments_like_training_with_aug_infer) {
    for (int i = 0; i < 3 * 64; i++) pixels[i] = (i * 37 + 11) % 256;
    model m;
    make(&m);
    int targets[3] = {0, 2, 1}, differs = 0;
    char err[256];
    for (int s = 7; s < 12; s++) {
        m.kn.step = (uint64_t)s;
        double train = loss_at(&m, targets);
        m.aug_infer = 1;
        cr_assert_eq(model_forward(&m, pixels, NULL, targets, 3, 0, err, sizeof err), 0, "%s", err);
        cr_assert_leq(fabs(m.st.loss - train), 1e-6 * fabs(train), "step %d: %g vs %g", s,
                      m.st.loss, train);
        m.aug_infer = 0;
        cr_assert_eq(model_forward(&m, pixels, NULL, targets, 3, 0, err, sizeof err), 0, "%s", err);
        differs += m.st.loss != train;
    }
    cr_assert_gt(differs, 0, "the augmentation never changed the images");
    model_destroy(&m);
}
