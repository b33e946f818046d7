#include "worker/data/data_sets.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* 1 when prefix.model exists and is at least as new as the source it was
 * trained from (a changed source retrains it). */
static int tok_current(const char *prefix, const char *src) {
    char model_path[4096];
    snprintf(model_path, sizeof model_path, "%s.model", prefix);
    struct stat ms, ss;
    if (stat(model_path, &ms) || !S_ISREG(ms.st_mode)) return 0;
    if (stat(src, &ss)) return 1;
    return ms.st_mtime >= ss.st_mtime;
}

/* Trains a sentencepiece model of `vocab` pieces at prefix.model from n
 * sentences (what/src only name them in the progress line). */
/* Trains a sentencepiece model of `vocab` pieces at prefix.model (and
 * .vocab) from n sentences (what/src only name them in the progress line).
 * Training writes under a name of this process and renames into place, so
 * two trials that tokenize the same data at once never read a half-written
 * model: each renames a whole one (training is deterministic, so they are
 * the same). */
static int train_tok(const char **s, size_t n, const char *prefix, int vocab, int quiet,
                     const char *what, const char *src, char *err, size_t errlen) {
    char tmp[1200], from[1300], to[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", prefix, (long)getpid());
    tok_train_opts o;
    tok_train_opts_init(&o);
    o.vocab = vocab;
    o.prefix = tmp;
    o.hard_vocab_limit = 0;
    if (!quiet)
        fprintf(stderr, "tokenizer: training a %d-piece sentencepiece model on %zu %s of %s\n",
                vocab, n, what, src);
    if (tok_train_sentences(s, n, &o, err, errlen)) return -1;
    static const char *const ext[] = {".vocab", ".model"}; /* .model last: it marks a whole set */
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s%s", tmp, ext[i]);
        snprintf(to, sizeof to, "%s%s", prefix, ext[i]);
        if (rename(from, to)) {
            snprintf(err, errlen, "cannot rename %s to %s: %s", from, to, strerror(errno));
            unlink(from);
            return -1;
        }
    }
    return 0;
}

/* Trains the tokenizer at prefix.model from the texts of a TSV training split,
 * unless a current one exists. */
static int ensure_tok_tsv(const char *train_path, const char *prefix, int vocab, int quiet,
                          char *err, size_t errlen) {
    if (tok_current(prefix, train_path)) return 0;
    data_tsv_t *tsv = NULL;
    if (data_tsv_load(train_path, NULL, &tsv, err, errlen)) return -1;
    size_t n = tsv->n * (tsv->is_pair ? 2 : 1), k = 0;
    const char **s = malloc(n * sizeof *s);
    int rc = -1;
    if (!s) {
        snprintf(err, errlen, "out of memory");
    } else {
        for (size_t i = 0; i < tsv->n; i++) {
            s[k++] = tsv->text_a[i];
            if (tsv->is_pair) s[k++] = tsv->text_b[i];
        }
        rc = train_tok(s, k, prefix, vocab, quiet, "texts", train_path, err, errlen);
    }
    free(s);
    data_tsv_destroy(&tsv);
    return rc;
}

/* The same for a corpus: trained on its training lines only. */
static int ensure_tok_text(const char *path, double val_fraction, const char *prefix, int vocab,
                           int quiet, char *err, size_t errlen) {
    if (tok_current(prefix, path)) return 0;
    data_text_t *t = NULL;
    if (data_text_load(path, val_fraction, &t, err, errlen)) return -1;
    size_t n = t->val_start, k = 0;
    const char **s = malloc((n ? n : 1) * sizeof *s);
    int rc = -1;
    if (!s) {
        snprintf(err, errlen, "out of memory");
    } else {
        for (size_t i = 0; i < n; i++)
            if (t->line_bytes[i]) s[k++] = t->lines[i];
        rc = train_tok(s, k, prefix, vocab, quiet, "lines", path, err, errlen);
    }
    free(s);
    data_text_destroy(&t);
    return rc;
}

/* Pipeline vit: IDX images and labels (a prepared set or the user's own
 * files); the validation split is the last val_fraction of the training
 * images (at least one each), so it is the same for every seed. */
static int open_images(const bf_config *c, data_sets *d, int quiet, char *err, size_t errlen) {
    char tri[1100], trl[1100], tei[1100], tel[1100];
    tei[0] = tel[0] = '\0';
    if (c->data.train_images[0]) {
        snprintf(tri, sizeof tri, "%s", c->data.train_images);
        snprintf(trl, sizeof trl, "%s", c->data.train_labels);
        snprintf(tei, sizeof tei, "%s", c->data.test_images);
        snprintf(tel, sizeof tel, "%s", c->data.test_labels);
    } else {
        const char *dir = c->data.dir;
        snprintf(tri, sizeof tri, "%s/fashion_mnist/train-images-idx3-ubyte.gz", dir);
        snprintf(trl, sizeof trl, "%s/fashion_mnist/train-labels-idx1-ubyte.gz", dir);
        snprintf(tei, sizeof tei, "%s/fashion_mnist/t10k-images-idx3-ubyte.gz", dir);
        snprintf(tel, sizeof tel, "%s/fashion_mnist/t10k-labels-idx1-ubyte.gz", dir);
        if (!file_exists(tri)) {
            snprintf(err, errlen,
                     "%s not found (run scripts/prepare_data.sh, or set data.train_images and "
                     "data.train_labels)",
                     tri);
            return -1;
        }
    }
    data_images_t *tr = NULL, *te = NULL;
    int rc = -1;
    if (data_images_load(tri, trl, &tr, err, errlen)) goto out;
    if (tei[0] && data_images_load(tei, tel, &te, err, errlen)) goto out;
    if (tr->rows < 1 || tr->cols < 1 || (size_t)tr->rows * tr->cols > 65536) {
        snprintf(err, errlen, "%s: images of %d x %d pixels; expected 1..65536 pixels each", tri,
                 tr->rows, tr->cols);
        goto out;
    }
    if (te && (te->rows != tr->rows || te->cols != tr->cols)) {
        snprintf(err, errlen, "%s: images are %d x %d but the training images (%s) are %d x %d",
                 tei, te->rows, te->cols, tri, tr->rows, tr->cols);
        goto out;
    }
    int p = c->model.patch;
    if (p < 1 || tr->rows % p || tr->cols % p) {
        char valid[256];
        size_t w = 0;
        valid[0] = '\0';
        for (int q = 1; q <= 64 && q <= tr->rows && w + 8 < sizeof valid; q++)
            if (tr->rows % q == 0 && tr->cols % q == 0)
                w += (size_t)snprintf(valid + w, sizeof valid - w, "%s%d", w ? ", " : "", q);
        snprintf(err, errlen,
                 "model.patch %d does not divide the %d x %d images of %s; valid patch sizes: %s",
                 p, tr->rows, tr->cols, tri, valid);
        goto out;
    }
    if (tr->n < 2 || tr->n_classes < 2) {
        snprintf(err, errlen,
                 "%s: %zu image(s) in %d class(es); training needs at least 2 images and 2 "
                 "classes",
                 trl, tr->n, tr->n_classes);
        goto out;
    }
    if (te && te->n_classes > tr->n_classes) {
        for (size_t i = 0; i < te->n; i++)
            if (te->labels[i] >= tr->n_classes) {
                snprintf(err, errlen,
                         "%s: label %d of image %zu is not a class of the training labels (%s "
                         "has classes 0..%d)",
                         tel, te->labels[i], i, trl, tr->n_classes - 1);
                goto out;
            }
    }
    size_t nval = (size_t)(c->data.val_fraction * (double)tr->n + 0.5);
    if (nval < 1) nval = 1;
    if (nval >= tr->n) nval = tr->n - 1;
    size_t ntr = tr->n - nval;
    if (data_tok_from_images(tr, 0, ntr, tr->n_classes, &d->train, err, errlen) ||
        data_tok_from_images(tr, ntr, tr->n, tr->n_classes, &d->val, err, errlen) ||
        (te && data_tok_from_images(te, 0, te->n, tr->n_classes, &d->test, err, errlen)))
        goto out;
    d->n_classes = tr->n_classes;
    d->image_rows = tr->rows;
    d->image_cols = tr->cols;
    if (!quiet)
        fprintf(stderr, "data: %s: %zu train, %zu val, %zu test images of %d x %d, %d classes\n",
                tri, ntr, nval, te ? te->n : 0, tr->rows, tr->cols, tr->n_classes);
    rc = 0;
out:
    data_images_destroy(&tr);
    data_images_destroy(&te);
    if (rc) data_sets_close(d);
    return rc;
}

int data_sets_open(const bf_config *c, data_sets *d, int quiet, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    if (strcmp(c->pipeline, "vit") == 0) return open_images(c, d, quiet, err, errlen);
    char train[1024], val[1024], test[1024], prefix[1100], model_path[1200];
    char e2[1024];
    int lm = strcmp(c->pipeline, "lm") == 0;
    if (lm) {
        if (c->data.path[0])
            snprintf(train, sizeof train, "%s", c->data.path);
        else if (strcmp(c->data.set, "kjv") == 0 || !c->data.set[0])
            snprintf(train, sizeof train, "%s/kjv/kjv.txt", c->data.dir);
        else {
            snprintf(err, errlen,
                     "data.set '%s' is not a text corpus (valid for lm: kjv, or data.path=FILE)",
                     c->data.set);
            return -1;
        }
        if (!file_exists(train)) {
            snprintf(err, errlen,
                     "corpus %s not found (run scripts/prepare_data.sh, or set data.path=FILE)",
                     train);
            return -1;
        }
        snprintf(prefix, sizeof prefix, "%s.tok%d", train, c->model.vocab);
        if (ensure_tok_text(train, c->data.val_fraction, prefix, c->model.vocab, quiet, err,
                            errlen))
            return -1;
    } else {
        if (c->data.train[0]) {
            snprintf(train, sizeof train, "%s", c->data.train);
            snprintf(val, sizeof val, "%s", c->data.val);
            snprintf(test, sizeof test, "%s", c->data.test);
            if (!c->data.val[0]) {
                snprintf(err, errlen,
                         "data.train is set but data.val is not: give both (data.test too, for "
                         "test metrics)");
                return -1;
            }
        } else if (strcmp(c->data.set, "wordnet") == 0 || !c->data.set[0]) {
            snprintf(train, sizeof train, "%s/wordnet/train.tsv", c->data.dir);
            snprintf(val, sizeof val, "%s/wordnet/val.tsv", c->data.dir);
            snprintf(test, sizeof test, "%s/wordnet/test.tsv", c->data.dir);
        } else {
            snprintf(err, errlen,
                     "data.set '%s' is not a text classification set (valid for budgetformer: "
                     "wordnet, or data.train/data.val/data.test TSV files)",
                     c->data.set);
            return -1;
        }
        if (!file_exists(train)) {
            snprintf(
                err, errlen,
                "training split %s not found (run scripts/prepare_data.sh, or set data.train=FILE)",
                train);
            return -1;
        }
        snprintf(prefix, sizeof prefix, "%s.tok%d", train, c->model.vocab);
        if (ensure_tok_tsv(train, prefix, c->model.vocab, quiet, err, errlen)) return -1;
    }
    snprintf(model_path, sizeof model_path, "%s.model", prefix);
    if (tok_load(&d->tok, model_path, err, errlen)) return -1;
    int rebuilt = 0;
    if (lm) {
        if (data_open_text(train, c->data.val_fraction, d->tok, NULL, &d->train, &rebuilt, e2,
                           sizeof e2)) {
            snprintf(err, errlen, "%s", e2);
            goto fail;
        }
        d->n_classes = 0;
        /* found now, not at the first eval after training */
        const data_tok_t *t = d->train;
        uint64_t val_tokens = t->offsets[t->n_seq] - t->offsets[t->val_start];
        if (t->val_start >= t->n_seq || t->val_start == 0 ||
            val_tokens < (uint64_t)c->model.seq_len + 1) {
            snprintf(err, errlen,
                     "%s: %zu line(s), %llu validation tokens with data.val_fraction %g: the "
                     "%s split is too small (a window needs model.seq_len + 1 = %d tokens); give "
                     "a longer corpus or another data.val_fraction",
                     train, t->n_seq, (unsigned long long)val_tokens, c->data.val_fraction,
                     t->val_start == 0 ? "training" : "validation", c->model.seq_len + 1);
            goto fail;
        }
    } else {
        if (data_open_tsv(train, d->tok, NULL, NULL, &d->train, &rebuilt, e2, sizeof e2) ||
            data_open_tsv(val, d->tok, d->train, NULL, &d->val, &rebuilt, e2, sizeof e2) ||
            (test[0] &&
             data_open_tsv(test, d->tok, d->train, NULL, &d->test, &rebuilt, e2, sizeof e2))) {
            snprintf(err, errlen, "%s", e2);
            goto fail;
        }
        d->n_classes = (int)d->train->n_classes;
        if (d->n_classes < 2) {
            snprintf(err, errlen, "%s has %d class(es); classification needs at least 2", train,
                     d->n_classes);
            goto fail;
        }
    }
    if (!quiet)
        fprintf(stderr, "data: %s: %zu sequences%s, vocab %d%s\n", train, d->train->n_seq,
                lm ? "" : " (train)", tok_vocab_size(d->tok), rebuilt ? " (cache rebuilt)" : "");
    return 0;
fail:
    data_sets_close(d);
    return -1;
}

void data_sets_close(data_sets *d) {
    data_tok_destroy(&d->train);
    data_tok_destroy(&d->val);
    data_tok_destroy(&d->test);
    tok_destroy(&d->tok);
}
