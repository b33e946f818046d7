#include "worker/data/data_sets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
static int train_tok(const char **s, size_t n, const char *prefix, int vocab, int quiet,
                     const char *what, const char *src, char *err, size_t errlen) {
    tok_train_opts o;
    tok_train_opts_init(&o);
    o.vocab = vocab;
    o.prefix = prefix;
    o.hard_vocab_limit = 0;
    if (!quiet)
        fprintf(stderr, "tokenizer: training a %d-piece sentencepiece model on %zu %s of %s\n",
                vocab, n, what, src);
    return tok_train_sentences(s, n, &o, err, errlen) ? -1 : 0;
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

int data_sets_open(const bf_config *c, data_sets *d, int quiet, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
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
