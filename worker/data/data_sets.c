/* data_sets.c — opens the data of one run from its config (data_sets.h):
 * prepared sets or the user's files, the tokenizer trained or reused from
 * the cache, validation splits, and warnings about suspicious data. */

#include "worker/data/data_sets.h"
#include "worker/data/data_priv.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hash.h"
#include "common/input_path.h"

/* 0 when path is a regular file; else -1 with a message naming the key it
 * came from, what it is, and what was expected (hint: how to get one). */
static int check_input(const char *key, const char *path, const char *expected, const char *hint,
                       char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: %s %s%s%s%s", key, path,
                 errno == ENOENT ? "not found" : strerror(errno), hint ? " (" : "",
                 hint ? hint : "", hint ? ")" : "");
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: %s is a folder; expected %s", key, path, expected);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: %s is %s; expected %s", key, path, input_path_kind(st.st_mode),
                 expected);
        return -1;
    }
    return 0;
}

/* 1 when a tokenizer someone prepared beside the data (bfprep tokenizer,
 * scripts/prepare_data.sh: SRC.tokV.model) is there and at least as new as
 * its source: it is used as it is. bf itself never writes beside the data. */
static int tok_beside_current(const char *model_path, const char *src) {
    struct stat ms, ss;
    if (stat(model_path, &ms) || !S_ISREG(ms.st_mode)) return 0;
    if (stat(src, &ss)) return 1;
    return ms.st_mtime >= ss.st_mtime;
}

/* Trains a sentencepiece model of `vocab` pieces at prefix.model (and
 * .vocab) from n sentences (what/src only name them in the progress line).
 * Training writes under a name of this process and renames into place, so
 * two trials that tokenize the same data at once never read a half-written
 * model: each renames a whole one (training is deterministic, so they are
 * the same). */
static int train_tok(const char **s, size_t n, const char *prefix, int vocab, int quiet,
                     const char *what, const char *src, char *err, size_t errlen) {
    char tmp[4400], from[4500], to[4500];
    if (data_tmp_name(tmp, sizeof tmp, prefix)) {
        snprintf(err, errlen, "%s: path too long", prefix);
        return -1;
    }
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

/* Bumped when the tokenizer training options change: older cached models
 * are then not reused. */
#define TOK_TRAIN_VERSION 1u

/* Sets model_path to the tokenizer of source src (a TSV training split, or a
 * corpus when text): one prepared beside it, else the one in the cache
 * folder keyed by a hash of (its contents, vocab, kind, val_fraction),
 * trained there first when missing. */
static int find_tok(const char *src, int text, double val_fraction, int vocab, int quiet,
                    char *model_path, size_t mlen, char *err, size_t errlen) {
    snprintf(model_path, mlen, "%s.tok%d.model", src, vocab);
    if (tok_beside_current(model_path, src)) return 0;
    char dir[4096], prefix[4200];
    data_src_id id;
    if (data_cache_dir(dir, sizeof dir, err, errlen) || data_src_identify(src, &id, err, errlen))
        return -1;
    uint64_t key[6] = {id.size, id.fnv, (uint64_t)vocab, (uint64_t)text, 0, TOK_TRAIN_VERSION};
    if (text) memcpy(&key[4], &val_fraction, sizeof val_fraction);
    snprintf(prefix, sizeof prefix, "%s/tok-%016llx", dir,
             (unsigned long long)fnv1a64(FNV1A64_SEED, key, sizeof key));
    snprintf(model_path, mlen, "%s.model", prefix);
    struct stat st;
    if (stat(model_path, &st) == 0 && S_ISREG(st.st_mode)) return 0;
    size_t n = 0, k = 0;
    const char **s = NULL;
    int rc = -1;
    data_tsv_t *tsv = NULL;
    data_text_t *t = NULL;
    if (text) {
        if (data_text_load(src, val_fraction, &t, err, errlen)) return -1;
        n = t->val_start;
    } else {
        if (data_tsv_load(src, NULL, &tsv, err, errlen)) return -1;
        n = tsv->n * (tsv->is_pair ? 2 : 1);
    }
    if (!(s = malloc((n ? n : 1) * sizeof *s))) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (text) {
        for (size_t i = 0; i < n; i++) /* training lines only */
            if (t->line_bytes[i]) s[k++] = t->lines[i];
    } else {
        for (size_t i = 0; i < tsv->n; i++) {
            s[k++] = tsv->text_a[i];
            if (tsv->is_pair) s[k++] = tsv->text_b[i];
        }
    }
    rc = train_tok(s, k, prefix, vocab, quiet, text ? "lines" : "texts", src, err, errlen);
out:
    free(s);
    data_tsv_destroy(&tsv);
    data_text_destroy(&t);
    return rc;
}

static data_split_kind split_kind(const bf_config *c) {
    return strcmp(c->data.val_split, "tail") == 0 ? DATA_SPLIT_TAIL : DATA_SPLIT_STRATIFIED;
}

/* The validation split of a labelled training file (labels[n], classes
 * named by names, NULL: their ids) as c says, and the warning, when not
 * quiet, that the file looks sorted by label: its labels come in no more
 * runs than classes (then a tail holds the last class or two alone). */
static int split_train(const bf_config *c, const char *path, const int32_t *labels, size_t n,
                       size_t n_classes, char *const *names, int quiet, data_split_t *s, char *err,
                       size_t errlen) {
    data_split_kind kind = split_kind(c);
    char e2[512];
    if (data_split_make(labels, n, n_classes, c->data.val_fraction, kind,
                        (uint64_t)c->data.split_seed, s, e2, sizeof e2)) {
        snprintf(err, errlen, "%s: validation split (data.val_split %s, data.val_fraction %g): %s",
                 path, data_split_name(kind), (double)c->data.val_fraction, e2);
        return -1;
    }
    size_t runs = data_label_runs(labels, n);
    if (quiet || n_classes < 2 || runs > n_classes) return 0;
    if (kind == DATA_SPLIT_STRATIFIED) {
        fprintf(stderr,
                "data: warning: %s looks sorted by label (%zu runs of %zu classes); the "
                "validation split is a stratified sample (data.val_split stratified, "
                "data.split_seed %d), so every class is in it in proportion\n",
                path, runs, n_classes, c->data.split_seed);
        return 0;
    }
    /* which classes the tail holds */
    char list[256];
    size_t w = 0, shown = 0, k_prev = (size_t)-1;
    list[0] = '\0';
    for (size_t i = 0; i < s->n_val && w + 48 < sizeof list; i++) {
        size_t k = (size_t)labels[s->val_idx[i]];
        if (k == k_prev) continue;
        k_prev = k;
        if (names)
            w += (size_t)snprintf(list + w, sizeof list - w, "%s'%.40s'", shown ? ", " : "",
                                  names[k]);
        else
            w += (size_t)snprintf(list + w, sizeof list - w, "%s%zu", shown ? ", " : "", k);
        shown++;
    }
    fprintf(stderr,
            "data: warning: %s looks sorted by label (%zu runs of %zu classes) and data.val_split "
            "is tail: the %zu validation items are of class%s %s only, so validation accuracy "
            "means little; use data.val_split: stratified\n",
            path, runs, n_classes, s->n_val, shown == 1 ? "" : "es", list);
    return 0;
}

/* Pipeline vit: IDX images and labels (a prepared set or the user's own
 * files); the validation split is data.val_fraction of the training images
 * (at least one each), a stratified sample from data.split_seed or the
 * tail (data.val_split): the same for every train.seed. */
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
    }
    const char *hint = c->data.train_images[0] ? NULL
                                               : "run scripts/prepare_data.sh, or set "
                                                 "data.train_images and data.train_labels";
    if (check_input(hint ? "data.set" : "data.train_images", tri, "an IDX file", hint, err,
                    errlen) ||
        check_input(hint ? "data.set" : "data.train_labels", trl, "an IDX file", hint, err,
                    errlen) ||
        (tei[0] && check_input(hint ? "data.set" : "data.test_images", tei, "an IDX file", hint,
                               err, errlen)) ||
        (tel[0] && check_input(hint ? "data.set" : "data.test_labels", tel, "an IDX file", hint,
                               err, errlen)))
        return -1;
    data_images_t *tr = NULL, *te = NULL;
    data_split_t sp = {0};
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
    /* classes are counted, not read off the largest label: labels all 200
     * are one class, not 201 */
    int seen[256] = {0}, distinct = 0;
    for (size_t i = 0; i < tr->n; i++)
        if (tr->labels[i] >= 0 && tr->labels[i] < 256 && !seen[tr->labels[i]]++) distinct++;
    if (tr->n < 2 || distinct < 2) {
        char only[64] = "";
        if (distinct == 1) snprintf(only, sizeof only, " (every label is %d)", tr->labels[0]);
        snprintf(err, errlen,
                 "%s: %zu training image%s with %d distinct label%s%s; training needs at least 2 "
                 "images and 2 distinct labels (classes)",
                 trl, tr->n, tr->n == 1 ? "" : "s", distinct, distinct == 1 ? "" : "s", only);
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
    if (split_train(c, trl, tr->labels, tr->n, (size_t)tr->n_classes, NULL, quiet, &sp, err,
                    errlen))
        goto out;
    size_t ntr = sp.n_train, nval = sp.n_val;
    if (data_tok_from_images_at(tr, sp.train_idx, 0, ntr, tr->n_classes, &d->train, err, errlen) ||
        data_tok_from_images_at(tr, sp.val_idx, 0, nval, tr->n_classes, &d->val, err, errlen) ||
        (te && data_tok_from_images(te, 0, te->n, tr->n_classes, &d->test, err, errlen)))
        goto out;
    d->n_classes = tr->n_classes;
    d->image_rows = tr->rows;
    d->image_cols = tr->cols;
    if (!quiet)
        fprintf(stderr,
                "data: %s: %zu train, %zu val (%s), %zu test images of %d x %d, %d classes\n", tri,
                ntr, nval, data_split_name(split_kind(c)), te ? te->n : 0, tr->rows, tr->cols,
                tr->n_classes);
    rc = 0;
out:
    data_split_free(&sp);
    data_images_destroy(&tr);
    data_images_destroy(&te);
    if (rc) data_sets_close(d);
    return rc;
}

/* Budgetformer with data.train and no data.val: the validation split is
 * taken from the training set as for images; d->train becomes the rest. */
static int split_tsv(const bf_config *c, const char *train, data_sets *d, int quiet, char *err,
                     size_t errlen) {
    data_split_t sp;
    data_tok_t *all = d->train, *tr = NULL, *va = NULL;
    if (split_train(c, train, all->labels, all->n_seq, all->n_classes, all->class_names, quiet, &sp,
                    err, errlen))
        return -1;
    char e2[512];
    int rc = data_tok_subset(all, sp.train_idx, sp.n_train, &tr, e2, sizeof e2) ||
             data_tok_subset(all, sp.val_idx, sp.n_val, &va, e2, sizeof e2);
    if (rc) {
        snprintf(err, errlen, "%s: %s", train, e2);
        data_tok_destroy(&tr);
    } else {
        data_tok_destroy(&d->train);
        d->train = tr;
        d->val = va;
        if (!quiet)
            fprintf(stderr,
                    "data: %s: no data.val: %zu examples train, %zu validate (data.val_split %s, "
                    "data.val_fraction %g)\n",
                    train, sp.n_train, sp.n_val, data_split_name(split_kind(c)),
                    (double)c->data.val_fraction);
    }
    data_split_free(&sp);
    return rc ? -1 : 0;
}

/* Fewer training examples than this in a class earns a warning. */
#define DATA_RARE_CLASS 5

/* Texts longer than model.seq_len tokens are cut to it when batched
 * (data_batch_at): said once, with how many and what share of their
 * tokens is lost, so a seq_len too short for the data is not silent. */
static void warn_cut(const bf_config *c, const data_tok_t *t, const char *train) {
    uint64_t T = (uint64_t)c->model.seq_len, cut = 0, tokens = 0, lost = 0;
    for (size_t i = 0; i < t->n_seq; i++) {
        uint64_t n = t->offsets[i + 1] - t->offsets[i];
        tokens += n;
        if (n > T) cut++, lost += n - T;
    }
    if (!cut) return;
    fprintf(stderr,
            "data: warning: %s: %llu of %zu texts (%.1f%%) are longer than model.seq_len %d "
            "tokens and are cut to it, losing %.1f%% of the tokens; raise model.seq_len to "
            "keep them\n",
            train, (unsigned long long)cut, t->n_seq, 100.0 * (double)cut / (double)t->n_seq,
            c->model.seq_len, tokens ? 100.0 * (double)lost / (double)tokens : 0.0);
}

/* Warnings about data that trains but likely not as meant: classes with
 * very few training examples, and a batch larger than the training set
 * (every batch then repeats examples). */
static void warn_data(const bf_config *c, const data_sets *d, const char *train) {
    const data_tok_t *t = d->train;
    uint64_t items;
    const char *what;
    if (t->kind == DATA_KIND_LM) {
        uint64_t len = t->offsets[t->val_start], T = (uint64_t)c->model.seq_len;
        items = len >= 2 * T ? (len - T) / T : 0;
        what = "windows of model.seq_len tokens";
    } else {
        items = t->n_seq;
        what = "examples";
        size_t *count = calloc(t->n_classes ? t->n_classes : 1, sizeof *count);
        if (count) {
            for (size_t i = 0; i < t->n_seq; i++) count[t->labels[i]]++;
            size_t rare = 0;
            char list[512];
            size_t w = 0;
            list[0] = '\0';
            for (size_t k = 0; k < t->n_classes; k++) {
                if (count[k] >= DATA_RARE_CLASS) continue;
                if (rare++ < 8 && w + 80 < sizeof list)
                    w += (size_t)snprintf(list + w, sizeof list - w, "%s'%.40s' (%zu)",
                                          w ? ", " : "", t->class_names[k], count[k]);
            }
            if (rare)
                fprintf(stderr,
                        "data: warning: %s: %zu of %zu classes have fewer than %d training "
                        "examples: %s%s; their accuracy will mean little\n",
                        train, rare, t->n_classes, DATA_RARE_CLASS, list, rare > 8 ? ", ..." : "");
            free(count);
        }
        warn_cut(c, t, train);
    }
    if ((uint64_t)c->train.batch > items)
        fprintf(stderr,
                "data: warning: train.batch %d is larger than the %llu training %s of %s: every "
                "batch repeats examples\n",
                c->train.batch, (unsigned long long)items, what, train);
}

int data_sets_open(const bf_config *c, data_sets *d, int quiet, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    if (strcmp(c->pipeline, "vit") == 0) return open_images(c, d, quiet, err, errlen);
    char train[1024], val[1024], test[1024];
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
        if (check_input(c->data.path[0] ? "data.path" : "data.set", train, "a UTF-8 text file",
                        c->data.path[0] ? NULL
                                        : "run scripts/prepare_data.sh, or set data.path=FILE",
                        err, errlen))
            return -1;
    } else {
        if (c->data.train[0]) {
            snprintf(train, sizeof train, "%s", c->data.train);
            snprintf(val, sizeof val, "%s", c->data.val);
            snprintf(test, sizeof test, "%s", c->data.test);
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
        const int own = c->data.train[0] != 0;
        const char *hint = own ? NULL : "run scripts/prepare_data.sh, or set data.train=FILE";
        if (check_input(own ? "data.train" : "data.set", train, "a TSV file", hint, err, errlen) ||
            (val[0] &&
             check_input(own ? "data.val" : "data.set", val, "a TSV file", hint, err, errlen)) ||
            (test[0] &&
             check_input(own ? "data.test" : "data.set", test, "a TSV file", hint, err, errlen)))
            return -1;
    }
    if (find_tok(train, lm, c->data.val_fraction, c->model.vocab, quiet, d->tok_path,
                 sizeof d->tok_path, err, errlen) ||
        tok_load(&d->tok, d->tok_path, err, errlen))
        return -1;
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
        if (data_open_tsv(train, d->tok, NULL, NULL, &d->train, &rebuilt, e2, sizeof e2)) {
            snprintf(err, errlen, "%s", e2);
            goto fail;
        }
        d->n_classes = (int)d->train->n_classes;
        if (d->n_classes < 2) { /* labels are counted by name: distinct ones */
            snprintf(err, errlen,
                     "%s: all %zu training examples have the label '%.100s' (1 distinct label); "
                     "classification needs at least 2 distinct labels (classes)",
                     train, d->train->n_seq, d->train->n_classes ? d->train->class_names[0] : "");
            goto fail;
        }
        if (!val[0] && split_tsv(c, train, d, quiet, err, errlen)) goto fail;
        if ((val[0] &&
             data_open_tsv(val, d->tok, d->train, NULL, &d->val, &rebuilt, e2, sizeof e2)) ||
            (test[0] &&
             data_open_tsv(test, d->tok, d->train, NULL, &d->test, &rebuilt, e2, sizeof e2))) {
            snprintf(err, errlen, "%s", e2);
            goto fail;
        }
    }
    if (!quiet) {
        fprintf(stderr, "data: %s: %zu sequences%s, vocab %d%s\n", train, d->train->n_seq,
                lm ? "" : " (train)", tok_vocab_size(d->tok), rebuilt ? " (cache rebuilt)" : "");
        warn_data(c, d, train);
    }
    return 0;
fail:
    data_sets_close(d);
    return -1;
}

/* 1 when a word of s (runs of letters and digits, lower-cased) starts with
 * key. */
static int word_starts(const char *s, const char *key) {
    size_t kl = strlen(key);
    for (const char *p = s; *p;) {
        while (*p && !isalnum((unsigned char)*p)) p++;
        size_t i = 0;
        while (i < kl && p[i] && tolower((unsigned char)p[i]) == key[i]) i++;
        if (i == kl) return 1;
        while (*p && isalnum((unsigned char)*p)) p++;
    }
    return 0;
}

const char *data_sets_not_mirror(const bf_config *c, char *buf, size_t len) {
    static const char *const known[][2] = {
        {"kmnist", "Japanese characters"},
        {"emnist", "letters and digits"},
        {"mnist", "digits"},
        {"usps", "digits"},
        {"svhn", "house-number digits"},
        {"digit", "digits"},
        {"letter", "letters"},
        {"text", "text"},
    };
    const char *path = c->data.train_images[0] ? c->data.train_images : c->data.set;
    /* the file's name and its folder's: data/mnist/train-images-idx3-ubyte.gz */
    const char *base = strrchr(path, '/'), *from = path;
    if (base)
        for (from = base; from > path && from[-1] != '/'; from--)
            ;
    if (word_starts(from, "fashion")) return NULL; /* Fashion-MNIST: clothes mirror alike */
    for (size_t k = 0; k < sizeof known / sizeof *known; k++)
        if (word_starts(from, known[k][0])) {
            snprintf(buf, len, "'%s' in the name of %s: %s", known[k][0], path, known[k][1]);
            return buf;
        }
    return NULL;
}

void data_sets_close(data_sets *d) {
    data_tok_destroy(&d->train);
    data_tok_destroy(&d->val);
    data_tok_destroy(&d->test);
    tok_destroy(&d->tok);
}

int data_sets_save_tokenizer(const data_sets *d, const char *dir, char *err, size_t errlen) {
    if (!d->tok_path[0]) return 0;
    char to[4200], tmp[4400];
    snprintf(to, sizeof to, "%s/%s", dir, DATA_RUN_TOKENIZER);
    if (data_tmp_name(tmp, sizeof tmp, to)) {
        snprintf(err, errlen, "%s: path too long", to);
        return -1;
    }
    char *buf = NULL;
    size_t n = 0;
    if (data_read_file(d->tok_path, 256u << 20, &buf, &n, err, errlen)) return -1;
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(buf, 1, n, f) == n;
    int e = errno;
    if (f && fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    free(buf);
    if (!ok || rename(tmp, to) != 0) {
        if (ok) e = errno;
        unlink(tmp);
        snprintf(err, errlen, "cannot write %s: %s", to, strerror(e));
        return -1;
    }
    return 0;
}
