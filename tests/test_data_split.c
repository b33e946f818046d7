/* The validation split of a labelled training file (data_split.c and its
 * use by data_sets_open): on a file sorted by class the stratified split
 * holds every class in proportion, the same for the same data.split_seed
 * whatever train.seed, and another for another seed; the tail split is
 * still there and is the file's last items; a class of one item stays in
 * training; IDX images and a TSV without data.val are split alike; a file
 * sorted by label is warned about once, by bfworker too. Real files: IDX
 * written here, the shipped WordNet glosses sorted by label. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cfg.h"
#include "tests/it_idx.h"
#include "worker/data/data.h"
#include "worker/data/data_sets.h"

/* Labels sorted by class, class k having count[k] items. */
static size_t sorted_labels(int32_t *lab, const size_t *count, size_t nc) {
    size_t n = 0;
    for (size_t k = 0; k < nc; k++)
        for (size_t i = 0; i < count[k]; i++) lab[n++] = (int32_t)k;
    return n;
}

/* The split partitions 0..n-1, each list ascending. */
static void expect_partition(const data_split_t *s, size_t n) {
    cr_assert_eq(s->n_train + s->n_val, n);
    unsigned char *seen = calloc(n, 1);
    cr_assert_not_null(seen);
    for (size_t i = 0; i < s->n_train; i++) {
        cr_assert_lt(s->train_idx[i], n);
        cr_assert(i == 0 || s->train_idx[i] > s->train_idx[i - 1], "train not ascending");
        seen[s->train_idx[i]]++;
    }
    for (size_t i = 0; i < s->n_val; i++) {
        cr_assert_lt(s->val_idx[i], n);
        cr_assert(i == 0 || s->val_idx[i] > s->val_idx[i - 1], "val not ascending");
        seen[s->val_idx[i]]++;
    }
    for (size_t i = 0; i < n; i++) cr_assert_eq(seen[i], 1, "item %zu in %d lists", i, seen[i]);
    free(seen);
}

Test(split, stratified_holds_every_class_in_proportion) {
    static const size_t count[] = {37, 120, 5, 64, 2, 91, 300, 11, 48, 1};
    const size_t nc = sizeof count / sizeof *count;
    int32_t lab[1000];
    size_t n = sorted_labels(lab, count, nc);
    const double f = 0.1;
    data_split_t s;
    char err[256];
    cr_assert_eq(data_split_make(lab, n, nc, f, DATA_SPLIT_STRATIFIED, 7, &s, err, sizeof err), 0,
                 "%s", err);
    expect_partition(&s, n);
    cr_expect_eq(s.n_val, (size_t)(f * n + 0.5), "%zu validation items of %zu", s.n_val, n);
    size_t per[10] = {0};
    for (size_t i = 0; i < s.n_val; i++) per[lab[s.val_idx[i]]]++;
    for (size_t k = 0; k < nc; k++) {
        double want = f * (double)count[k];
        cr_expect(fabs((double)per[k] - want) < 1.0 + 1e-9,
                  "class %zu: %zu of its %zu items validate; in proportion is %.2f", k, per[k],
                  count[k], want);
        cr_expect_lt(per[k], count[k], "class %zu left training entirely", k);
    }
    /* the big classes are sampled, not cut at their tail: some item of
     * class 6 (300 items) before its last 30 validates */
    size_t early = 0;
    for (size_t i = 0; i < s.n_val; i++)
        if (lab[s.val_idx[i]] == 6 && s.val_idx[i] < 6 + 37 + 120 + 5 + 64 + 2 + 91 + 270) early++;
    cr_expect_gt(early, 10, "class 6's validation items are its tail (%zu early)", early);
    data_split_free(&s);
}

Test(split, same_seed_same_split_other_seed_another) {
    static const size_t count[] = {200, 150, 250};
    int32_t lab[600];
    size_t n = sorted_labels(lab, count, 3);
    data_split_t a, b, c;
    char err[256];
    cr_assert_eq(data_split_make(lab, n, 3, 0.2, DATA_SPLIT_STRATIFIED, 1, &a, err, sizeof err), 0);
    cr_assert_eq(data_split_make(lab, n, 3, 0.2, DATA_SPLIT_STRATIFIED, 1, &b, err, sizeof err), 0);
    cr_assert_eq(data_split_make(lab, n, 3, 0.2, DATA_SPLIT_STRATIFIED, 2, &c, err, sizeof err), 0);
    cr_assert_eq(a.n_val, b.n_val);
    cr_expect_eq(memcmp(a.val_idx, b.val_idx, a.n_val * sizeof *a.val_idx), 0,
                 "same labels and seed, another split");
    cr_assert_eq(a.n_val, c.n_val);
    size_t same = 0;
    for (size_t i = 0; i < a.n_val; i++) same += a.val_idx[i] == c.val_idx[i];
    cr_expect_lt(same, a.n_val / 2, "seeds 1 and 2 chose %zu of %zu items alike", same, a.n_val);
    data_split_free(&a), data_split_free(&b), data_split_free(&c);
}

Test(split, tail_is_the_last_items) {
    static const size_t count[] = {50, 50};
    int32_t lab[100];
    size_t n = sorted_labels(lab, count, 2);
    data_split_t s;
    char err[256];
    cr_assert_eq(data_split_make(lab, n, 2, 0.1, DATA_SPLIT_TAIL, 99, &s, err, sizeof err), 0);
    expect_partition(&s, n);
    cr_assert_eq(s.n_val, 10);
    for (size_t i = 0; i < s.n_val; i++) cr_expect_eq(s.val_idx[i], 90 + i);
    cr_expect_eq(data_label_runs(lab, n), 2);
    data_split_free(&s);
}

Test(split, singletons_stay_in_training_and_bad_input_is_refused) {
    int32_t one[] = {0, 1, 2, 3};
    data_split_t s;
    char err[256];
    cr_expect_neq(data_split_make(one, 4, 4, 0.25, DATA_SPLIT_STRATIFIED, 1, &s, err, sizeof err),
                  0);
    cr_expect(strstr(err, "no class has 2 items") && strstr(err, "tail"), "%s", err);
    cr_expect_eq(data_split_make(one, 4, 4, 0.25, DATA_SPLIT_TAIL, 1, &s, err, sizeof err), 0);
    data_split_free(&s);
    int32_t bad[] = {0, 1, 5};
    cr_expect_neq(data_split_make(bad, 3, 2, 0.3, DATA_SPLIT_STRATIFIED, 1, &s, err, sizeof err),
                  0);
    cr_expect(strstr(err, "label 5 of item 2") != NULL, "%s", err);
    cr_expect_neq(data_split_make(one, 4, 4, 0.0, DATA_SPLIT_STRATIFIED, 1, &s, err, sizeof err),
                  0);
}

/* ---- through data_sets_open, on real files ---- */

/* n IDX images of 12 x 12, sorted by class: class k has count[k] images
 * (pixel values say their class and index, so a split can be read back). */
static void write_sorted_idx(const char *folder, const size_t *count, int nc) {
    char p[256];
    size_t n = 0;
    for (int k = 0; k < nc; k++) n += count[k];
    snprintf(p, sizeof p, "%s/sorted-images", folder);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f);
    unsigned char m[4] = {0, 0, 8, 3};
    fwrite(m, 1, 4, f);
    be32(f, (unsigned)n), be32(f, 12), be32(f, 12);
    size_t i = 0;
    for (int k = 0; k < nc; k++)
        for (size_t j = 0; j < count[k]; j++, i++)
            for (int px = 0; px < 144; px++) fputc(px == 0 ? (int)(i & 255) : k * 20, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/sorted-labels", folder);
    f = fopen(p, "wb");
    cr_assert_not_null(f);
    unsigned char ml[4] = {0, 0, 8, 1};
    fwrite(ml, 1, 4, f);
    be32(f, (unsigned)n);
    for (int k = 0; k < nc; k++)
        for (size_t j = 0; j < count[k]; j++) fputc(k, f);
    fclose(f);
}

/* data_sets_open with stderr caught into *text (malloc'd). */
static int open_caught(const bf_config *c, data_sets *d, char **text, char *err, size_t errlen) {
    char path[128];
    snprintf(path, sizeof path, "%s/stderr.txt", dir);
    fflush(stderr);
    int saved = dup(2);
    FILE *f = fopen(path, "w");
    cr_assert(saved >= 0 && f);
    dup2(fileno(f), 2);
    int rc = data_sets_open(c, d, 0, err, errlen);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(f);
    f = fopen(path, "r");
    static char buf[1 << 14];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    *text = strdup(buf);
    return rc;
}

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void image_cfg(bf_config *c, const char *set) {
    char err[256], a[300];
    cfg_defaults(c);
    snprintf(a, sizeof a, "pipeline=vit");
    cr_assert_eq(cfg_set(c, a, err, sizeof err), 0, "%s", err);
    snprintf(a, sizeof a, "data.train_images=%s/%s-images", dir, set);
    cr_assert_eq(cfg_set(c, a, err, sizeof err), 0, "%s", err);
    snprintf(a, sizeof a, "data.train_labels=%s/%s-labels", dir, set);
    cr_assert_eq(cfg_set(c, a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg_set(c, "data.val_fraction=0.1", err, sizeof err), 0, "%s", err);
}

/* The first pixel of each validation image (its index in the file, mod 256). */
static void val_ids(const data_sets *d, int *ids, size_t *n) {
    *n = d->val->n_seq;
    for (size_t i = 0; i < *n; i++) ids[i] = d->val->tokens[d->val->offsets[i]];
}

Test(split_sets, idx_sorted_by_class_validates_every_class) {
    snprintf(dir, sizeof dir, "/tmp/bf-test-split-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    static const size_t count[] = {60, 40, 80, 20};
    write_sorted_idx(dir, count, 4);
    bf_config c;
    data_sets d;
    char err[512], *text;
    image_cfg(&c, "sorted");
    cr_assert_eq(open_caught(&c, &d, &text, err, sizeof err), 0, "%s", err);
    cr_assert_eq(d.val->n_seq, 20);
    cr_assert_eq(d.train->n_seq, 180);
    size_t per[4] = {0};
    for (size_t i = 0; i < d.val->n_seq; i++) per[d.val->labels[i]]++;
    for (int k = 0; k < 4; k++)
        cr_expect(fabs((double)per[k] - 0.1 * (double)count[k]) < 1.0,
                  "class %d: %zu of %zu images validate", k, per[k], count[k]);
    cr_expect_eq(count_of(text, "looks sorted by label"), 1, "warning not once: %s", text);
    cr_expect(strstr(text, "stratified") != NULL, "%s", text);
    int ids[64], ids2[64];
    size_t nv, nv2;
    val_ids(&d, ids, &nv);
    data_sets_close(&d);
    free(text);
    /* another train.seed: the same split */
    cr_assert_eq(cfg_set(&c, "train.seed=12345", err, sizeof err), 0);
    cr_assert_eq(open_caught(&c, &d, &text, err, sizeof err), 0, "%s", err);
    val_ids(&d, ids2, &nv2);
    cr_assert_eq(nv, nv2);
    cr_expect_eq(memcmp(ids, ids2, nv * sizeof *ids), 0, "train.seed changed the split");
    data_sets_close(&d);
    free(text);
    /* another data.split_seed: another sample */
    cr_assert_eq(cfg_set(&c, "data.split_seed=2", err, sizeof err), 0);
    cr_assert_eq(open_caught(&c, &d, &text, err, sizeof err), 0, "%s", err);
    val_ids(&d, ids2, &nv2);
    cr_expect_neq(memcmp(ids, ids2, nv * sizeof *ids), 0, "data.split_seed changed nothing");
    data_sets_close(&d);
    free(text);
    /* the tail, as before: all of the last class, and said so */
    cr_assert_eq(cfg_set(&c, "data.val_split=tail", err, sizeof err), 0);
    cr_assert_eq(open_caught(&c, &d, &text, err, sizeof err), 0, "%s", err);
    for (size_t i = 0; i < d.val->n_seq; i++) {
        cr_expect_eq(d.val->labels[i], 3);
        cr_expect_eq(d.val->tokens[d.val->offsets[i]], (int)((180 + i) & 255));
    }
    cr_expect_eq(count_of(text, "looks sorted by label"), 1, "%s", text);
    cr_expect(strstr(text, "of class 3 only") && strstr(text, "data.val_split: stratified"), "%s",
              text);
    data_sets_close(&d);
    free(text);
    /* a shuffled file is not warned about */
    write_set("mixed", 90, 3, 0);
    image_cfg(&c, "mixed");
    cr_assert_eq(open_caught(&c, &d, &text, err, sizeof err), 0, "%s", err);
    cr_expect_null(strstr(text, "looks sorted"), "%s", text);
    data_sets_close(&d);
    free(text);
    /* a bad value names the key and the valid ones */
    cr_expect_neq(cfg_set(&c, "data.val_split=random", err, sizeof err), 0);
    cr_expect(strstr(err, "stratified") && strstr(err, "tail"), "%s", err);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* The glosses sorted by label, with their tokenizer beside them (written
 * after the file, so it is current). */
static void write_sorted_glosses(void) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "sort -s -t '\t' -k1,1 %s/tests/data/glosses_train.tsv > %s/sorted.tsv && "
             "sleep 1 && cp %s/tests/data/glosses_train.tsv.tok300.model "
             "%s/sorted.tsv.tok300.model",
             BF_SOURCE_DIR, dir, BF_SOURCE_DIR, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

Test(split_sets, tsv_without_val_is_split_from_train, .timeout = 120) {
    snprintf(dir, sizeof dir, "/tmp/bf-test-splittsv-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    write_sorted_glosses();
    bf_config c;
    data_sets d;
    char err[512], a[300], *text;
    cfg_defaults(&c);
    snprintf(a, sizeof a, "data.train=%s/sorted.tsv", dir);
    cr_assert_eq(cfg_set(&c, a, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg_set(&c, "model.vocab=300", err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg_set(&c, "data.val_fraction=0.2", err, sizeof err), 0, "%s", err);
    cr_assert_eq(cfg_validate(&c, err, sizeof err), 0, "%s", err);
    cr_assert_eq(open_caught(&c, &d, &text, err, sizeof err), 0, "%s", err);
    /* 101 animal, 148 artifact, 119 person, 112 plant: 480 */
    static const size_t count[] = {101, 148, 119, 112};
    cr_assert_eq(d.n_classes, 4);
    cr_assert_eq(d.train->n_seq + d.val->n_seq, 480);
    cr_assert_eq(d.val->n_seq, 96);
    size_t per[4] = {0};
    for (size_t i = 0; i < d.val->n_seq; i++) per[d.val->labels[i]]++;
    for (int k = 0; k < 4; k++)
        cr_expect(fabs((double)per[k] - 0.2 * (double)count[k]) < 1.0,
                  "class %s: %zu of %zu validate", d.train->class_names[k], per[k], count[k]);
    cr_expect_eq(count_of(text, "looks sorted by label"), 1, "%s", text);
    cr_expect(strstr(text, "no data.val: 384 examples train, 96 validate") != NULL, "%s", text);
    data_sets_close(&d);
    free(text);
    /* tail: every validation example is of the last class */
    cr_assert_eq(cfg_set(&c, "data.val_split=tail", err, sizeof err), 0);
    cr_assert_eq(open_caught(&c, &d, &text, err, sizeof err), 0, "%s", err);
    for (size_t i = 0; i < d.val->n_seq; i++) cr_expect_eq(d.val->labels[i], 3);
    cr_expect(strstr(text, "of class 'noun.plant' only") != NULL, "%s", text);
    data_sets_close(&d);
    free(text);
    /* a fraction of 0 without data.val is a config error */
    cr_assert_eq(cfg_set(&c, "data.val_fraction=0", err, sizeof err), 0);
    cr_expect_neq(cfg_validate(&c, err, sizeof err), 0);
    cr_expect(strstr(err, "data.val_fraction is 0") && strstr(err, "data.val=FILE"), "%s", err);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

Test(split_sets, hflip_warning_knows_digits_not_fashion) {
    bf_config c;
    char buf[1400];
    cfg_defaults(&c);
    static const char *const yes[] = {"/d/MNIST/train-images-idx3-ubyte.gz", "digits20.idx",
                                      "emnist-letters", "my_text_lines.idx"};
    static const char *const no[] = {"/d/fashion_mnist/train-images-idx3-ubyte.gz",
                                     "Fashion-MNIST.idx", "cifar.idx", "/home/context/x.idx"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        snprintf(c.data.train_images, sizeof c.data.train_images, "%s", yes[i]);
        cr_expect_not_null(data_sets_not_mirror(&c, buf, sizeof buf), "%s: no warning", yes[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        snprintf(c.data.train_images, sizeof c.data.train_images, "%s", no[i]);
        cr_expect_null(data_sets_not_mirror(&c, buf, sizeof buf), "%s: %s", no[i], buf);
    }
    c.data.train_images[0] = '\0';
    snprintf(c.data.set, sizeof c.data.set, "fashion_mnist");
    cr_expect_null(data_sets_not_mirror(&c, buf, sizeof buf), "the built-in set: %s", buf);
}

/* bfworker says it once, on a real run of the sorted images; and warns
 * about aug.hflip on digits. */
Test(split_sets, bfworker_warns_once, .timeout = 120) {
    snprintf(dir, sizeof dir, "/tmp/bf-test-splitw-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    static const size_t count[] = {30, 30, 30};
    write_sorted_idx(dir, count, 3);
    char cmd[1024];
    static char out[1 << 15];
    snprintf(cmd, sizeof cmd, "%s/vit.yaml", dir);
    FILE *f = fopen(cmd, "w");
    cr_assert_not_null(f);
    fprintf(f,
            "pipeline: vit\ndevice: cpu\n"
            "data: {train_images: %s/sorted-images, train_labels: %s/sorted-labels, "
            "val_fraction: 0.2}\n"
            "model: {layers: 1, d_model: 16, heads: 2, patch: 4}\n"
            "aug: {hflip: false}\n"
            "train: {steps: 2, batch: 8}\n",
            dir, dir);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/bfworker train %s/vit.yaml --out %s/run 2>&1", BF_BIN_DIR, dir,
             dir);
    int rc = run_cmd(cmd, out, sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect_eq(count_of(out, "looks sorted by label"), 1, "%s", out);
    cr_expect(strstr(out, "72 train, 18 val (stratified)") != NULL, "%s", out);
    cr_expect_null(strstr(out, "aug.hflip is on"), "%s", out);
    /* the same images named as digits, flipped: warned about */
    snprintf(cmd, sizeof cmd,
             "cp %s/sorted-images %s/mnist-images && cp %s/sorted-labels %s/mnist-labels && "
             "sed -i -e 's/sorted-/mnist-/g' -e 's/hflip: false/hflip: true/' %s/vit.yaml",
             dir, dir, dir, dir, dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/bfworker train %s/vit.yaml --out %s/run2 2>&1", BF_BIN_DIR, dir,
             dir);
    rc = run_cmd(cmd, out, sizeof out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect_eq(count_of(out, "aug.hflip is on but the images are not mirror-symmetric"), 1, "%s",
                 out);
    cr_expect(strstr(out, "'mnist' in the name of") && strstr(out, "set aug.hflip: false"), "%s",
              out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
