/* data_split — which labelled items of a training file are held out for
 * validation (data.h, "validation splits"): a seeded sample stratified by
 * label, or the file's tail; and the CLS subset a split picks. It reads
 * labels only, so the same labels, fraction and seed give the same split
 * whatever the pipeline, the training seed or the number of ranks. */
#include <stdlib.h>
#include <string.h>

#include "kernels/bk_rng.h"
#include "worker/data/data.h"
#include "worker/data/data_priv.h"

/* The stream of the split's RNG for class k: far from the streams training
 * draws from (seed, step, row), though those use train.seed anyway. */
#define SPLIT_STREAM 0x5350u /* "SP" */

const char *data_split_name(data_split_kind k) {
    return k == DATA_SPLIT_TAIL ? "tail" : "stratified";
}

/* Uniform integer in [0, n) from (seed, class, draw): the high 32 bits of a
 * 64-bit product, so the bias is below n / 2^32. */
static size_t draw_below(uint64_t seed, uint64_t k, uint64_t j, size_t n) {
    uint32_t w[4];
    bk_philox_block(seed, ((uint64_t)SPLIT_STREAM << 32) | (k & 0xffffffffu), j, w);
    return (size_t)(((uint64_t)w[0] * (uint64_t)n) >> 32);
}

/* Validation items per class: nval apportioned to the classes by their
 * counts (largest remainder, ties to the lower class id), never all of a
 * class (a class of one item stays in training). */
static void class_quotas(const size_t *count, size_t nc, size_t n, size_t nval, size_t *quota,
                         double *rem) {
    size_t given = 0;
    for (size_t k = 0; k < nc; k++) {
        double exact = (double)nval * (double)count[k] / (double)n;
        quota[k] = (size_t)exact;
        rem[k] = exact - (double)quota[k];
        size_t cap = count[k] ? count[k] - 1 : 0;
        if (quota[k] > cap) quota[k] = cap;
        given += quota[k];
    }
    while (given < nval) { /* the largest remainder left, among classes with room */
        size_t best = nc;
        for (size_t k = 0; k < nc; k++)
            if (count[k] && quota[k] < count[k] - 1 && (best == nc || rem[k] > rem[best])) best = k;
        if (best == nc) break; /* every class is at its cap */
        quota[best]++;
        rem[best] -= 1.0;
        given++;
    }
}

int data_split_make(const int32_t *labels, size_t n, size_t n_classes, double val_fraction,
                    data_split_kind kind, uint64_t seed, data_split_t *out, char *err,
                    size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!labels || n < 2 || n_classes < 1 || n_classes > DATA_MAX_CLASSES)
        return data_fail(err, errlen, DATA_EINVAL,
                         "data_split_make: %zu items of %zu classes (need >= 2 items, 1..%d "
                         "classes)",
                         n, n_classes, DATA_MAX_CLASSES);
    if (!(val_fraction > 0 && val_fraction < 1))
        return data_fail(err, errlen, DATA_EINVAL, "val_fraction %g is outside (0, 1)",
                         val_fraction);
    if (kind != DATA_SPLIT_STRATIFIED && kind != DATA_SPLIT_TAIL)
        return data_fail(err, errlen, DATA_EINVAL, "data_split_make: unknown split kind %d",
                         (int)kind);
    for (size_t i = 0; i < n; i++)
        if (labels[i] < 0 || (size_t)labels[i] >= n_classes)
            return data_fail(err, errlen, DATA_EINVAL,
                             "data_split_make: label %d of item %zu is not in 0..%zu",
                             (int)labels[i], i, n_classes - 1);
    size_t nval = (size_t)(val_fraction * (double)n + 0.5);
    if (nval < 1) nval = 1;
    if (nval >= n) nval = n - 1;
    unsigned char *is_val = calloc(n, 1);
    size_t *count = calloc(n_classes, sizeof *count), *quota = calloc(n_classes, sizeof *quota);
    size_t *start = calloc(n_classes + 1, sizeof *start), *items = malloc(n * sizeof *items);
    double *rem = calloc(n_classes, sizeof *rem);
    int rc = DATA_ENOMEM;
    if (!is_val || !count || !quota || !start || !items || !rem) goto out;
    if (kind == DATA_SPLIT_TAIL) {
        memset(is_val + (n - nval), 1, nval);
    } else {
        for (size_t i = 0; i < n; i++) count[labels[i]]++;
        class_quotas(count, n_classes, n, nval, quota, rem);
        /* the items of each class in file order, class after class */
        for (size_t k = 0; k < n_classes; k++) start[k + 1] = start[k] + count[k];
        memset(count, 0, n_classes * sizeof *count);
        for (size_t i = 0; i < n; i++) items[start[labels[i]] + count[labels[i]]++] = i;
        /* a partial Fisher-Yates shuffle per class: its first quota items */
        for (size_t k = 0; k < n_classes; k++) {
            size_t *it = items + start[k], c = count[k];
            for (size_t j = 0; j < quota[k]; j++) {
                size_t r = j + draw_below(seed, k, j, c - j);
                size_t t = it[j];
                it[j] = it[r];
                it[r] = t;
                is_val[it[j]] = 1;
            }
        }
    }
    size_t nv = 0;
    for (size_t i = 0; i < n; i++) nv += is_val[i];
    if (nv == 0) { /* every class has a single item */
        free(is_val), free(count), free(quota), free(start), free(items), free(rem);
        return data_fail(err, errlen, DATA_EINVAL,
                         "no class has 2 items: a stratified validation split would take a "
                         "class out of training (use the tail split)");
    }
    out->train_idx = malloc((n - nv ? n - nv : 1) * sizeof *out->train_idx);
    out->val_idx = malloc((nv ? nv : 1) * sizeof *out->val_idx);
    if (!out->train_idx || !out->val_idx) {
        data_split_free(out);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (is_val[i])
            out->val_idx[out->n_val++] = i;
        else
            out->train_idx[out->n_train++] = i;
    }
    rc = DATA_OK;
out:
    free(is_val), free(count), free(quota), free(start), free(items), free(rem);
    if (rc) return data_fail(err, errlen, rc, "out of memory splitting %zu items", n);
    return DATA_OK;
}

void data_split_free(data_split_t *s) {
    if (!s) return;
    free(s->train_idx);
    free(s->val_idx);
    memset(s, 0, sizeof *s);
}

size_t data_label_runs(const int32_t *labels, size_t n) {
    size_t runs = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) runs += labels[i] != labels[i - 1];
    return runs;
}

int data_tok_subset(const data_tok_t *src, const size_t *idx, size_t n, data_tok_t **out, char *err,
                    size_t errlen) {
    *out = NULL;
    if (!src || src->kind != DATA_KIND_CLS || (!idx && n))
        return data_fail(err, errlen, DATA_EINVAL, "data_tok_subset: a CLS set and indices");
    size_t ntok = 0;
    for (size_t i = 0; i < n; i++) {
        if (idx[i] >= src->n_seq)
            return data_fail(err, errlen, DATA_EINVAL, "data_tok_subset: index %zu of a set of %zu",
                             idx[i], src->n_seq);
        ntok += src->offsets[idx[i] + 1] - src->offsets[idx[i]];
    }
    data_tok_t *d = calloc(1, sizeof *d);
    if (!d) return data_fail(err, errlen, DATA_ENOMEM, "out of memory");
    d->kind = DATA_KIND_CLS;
    d->vocab = src->vocab;
    d->n_seq = n;
    d->val_start = n;
    d->n_classes = src->n_classes;
    d->offsets = malloc((n + 1) * sizeof *d->offsets);
    d->tokens = malloc((ntok ? ntok : 1) * sizeof *d->tokens);
    d->labels = malloc((n ? n : 1) * sizeof *d->labels);
    d->class_names = calloc(src->n_classes ? src->n_classes : 1, sizeof *d->class_names);
    if (!d->offsets || !d->tokens || !d->labels || !d->class_names) goto nomem;
    for (size_t k = 0; k < src->n_classes; k++)
        if (!(d->class_names[k] = strdup(src->class_names[k]))) goto nomem;
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t a = src->offsets[idx[i]], b = src->offsets[idx[i] + 1];
        d->offsets[i] = at;
        memcpy(d->tokens + at, src->tokens + a, (size_t)(b - a) * sizeof *d->tokens);
        d->labels[i] = src->labels[idx[i]];
        at += b - a;
    }
    d->offsets[n] = at;
    *out = d;
    return DATA_OK;
nomem:
    data_tok_destroy(&d);
    return data_fail(err, errlen, DATA_ENOMEM, "out of memory");
}
