/* data_idx — IDX arrays (magic 0 0 TYPE NDIM, NDIM big-endian u32 dims, then
 * big-endian values), read through zlib's gz* so gzipped and plain files
 * take the same path. */
#include "worker/data/data.h"
#include "worker/data/data_priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "common/input_path.h"

static size_t idx_elem_size(uint8_t t) {
    switch (t) {
    case 0x08:
    case 0x09:
        return 1;
    case 0x0B:
        return 2;
    case 0x0C:
    case 0x0D:
        return 4;
    case 0x0E:
        return 8;
    default:
        return 0;
    }
}

void data_idx_destroy(data_idx_t **self_p) {
    if (!self_p || !*self_p) return;
    free((*self_p)->data);
    free(*self_p);
    *self_p = NULL;
}

/* Reads exactly n bytes; 0 on success. */
static int gz_read_all(gzFile g, void *buf, size_t n) {
    unsigned char *p = buf;
    while (n > 0) {
        unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
        int k = gzread(g, p, chunk);
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Why a read of g failed, when zlib knows (a damaged gzip stream: its CRC,
 * its length, its deflate data; a read error), else NULL (the file ended:
 * the caller says what was missing). */
static const char *gz_damage(gzFile g) {
    int zerr = Z_OK;
    const char *msg = gzerror(g, &zerr);
    if (zerr == Z_ERRNO) return strerror(errno);
    if (zerr != Z_DATA_ERROR) return NULL;
    if (msg && strstr(msg, "incorrect data check"))
        return "the gzip CRC-32 of the data is wrong (the file is damaged)";
    if (msg && strstr(msg, "incorrect length check"))
        return "the length in the gzip trailer is wrong (the file is damaged)";
    return "corrupt compressed data (the gzip stream is damaged)";
}

int data_idx_read(const char *path, size_t max_bytes, data_idx_t **out, char *err, size_t errlen) {
    if (!path || !out) return data_fail(err, errlen, DATA_EINVAL, "data_idx_read: null argument");
    *out = NULL;
    if (!max_bytes) max_bytes = DATA_MAX_IDX_BYTES;
    char why[1100]; /* "not found" may name the working folder */
    int fd = input_path_open_fd(path, why, sizeof why);
    if (fd < 0) return data_fail(err, errlen, DATA_EIO, "%s: %s", path, why);
    gzFile g = gzdopen(fd, "rb");
    if (!g) {
        close(fd);
        return data_fail(err, errlen, DATA_ENOMEM, "%s: out of memory opening it", path);
    }
    data_idx_t *x = NULL;
    int rc;
    const char *damage;
    unsigned char m[4];
    if (gz_read_all(g, m, 4)) {
        damage = gz_damage(g);
        rc = data_fail(err, errlen, DATA_EFORMAT, "%s: %s", path,
                       damage ? damage : "shorter than an IDX header");
        goto fail;
    }
    size_t es = idx_elem_size(m[2]);
    if (m[0] || m[1] || !es || m[3] < 1 || m[3] > 8) {
        rc = data_fail(
            err, errlen, DATA_EFORMAT,
            "%s: not an IDX file (magic %02x %02x %02x %02x; expected 00 00 TYPE NDIM with "
            "TYPE in 08 09 0B 0C 0D 0E and NDIM 1..8)",
            path, m[0], m[1], m[2], m[3]);
        goto fail;
    }
    x = calloc(1, sizeof *x);
    if (!x) goto nomem;
    x->dtype = m[2];
    x->ndim = m[3];
    x->elem_size = es;
    size_t count = 1;
    for (int i = 0; i < x->ndim; i++) {
        unsigned char b[4];
        if (gz_read_all(g, b, 4)) {
            damage = gz_damage(g);
            rc = data_fail(err, errlen, DATA_EFORMAT, "%s: %s", path,
                           damage ? damage : "truncated in the dimensions");
            goto fail;
        }
        x->dims[i] = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
        if (x->dims[i] && count > max_bytes / es / x->dims[i]) {
            rc = data_fail(err, errlen, DATA_ETOOBIG, "%s: payload over the cap of %zu bytes", path,
                           max_bytes);
            goto fail;
        }
        count *= x->dims[i];
    }
    x->count = count;
    x->data = malloc(count > 0 ? count * es : 1);
    if (!x->data) goto nomem;
    if (gz_read_all(g, x->data, count * es)) {
        damage = gz_damage(g);
        if (damage)
            rc = data_fail(err, errlen, DATA_EFORMAT, "%s: %s", path, damage);
        else
            rc = data_fail(err, errlen, DATA_EFORMAT,
                           "%s: truncated: the header promises %zu values of %zu bytes", path,
                           count, es);
        goto fail;
    }
    unsigned char extra;
    int k = gzread(g, &extra, 1);
    if (k != 0) {
        damage = k < 0 ? gz_damage(g) : NULL;
        rc = data_fail(err, errlen, DATA_EFORMAT, "%s: %s after the %zu values the header promises",
                       path,
                       k > 0    ? "trailing bytes"
                       : damage ? damage
                                : "corrupt compressed data",
                       count);
        goto fail;
    }
    int zerr;
    gzerror(g, &zerr);
    if (zerr != Z_OK && zerr != Z_BUF_ERROR) {
        damage = gz_damage(g);
        rc = data_fail(err, errlen, DATA_EFORMAT, "%s: %s", path,
                       damage ? damage : "corrupt compressed data");
        goto fail;
    }
    /* Big-endian → host. */
    if (es > 1) {
        unsigned char *p = x->data;
        for (size_t i = 0; i < count; i++, p += es)
            for (size_t a = 0, b = es - 1; a < b; a++, b--) {
                unsigned char t = p[a];
                p[a] = p[b];
                p[b] = t;
            }
    }
    gzclose(g);
    *out = x;
    return DATA_OK;
nomem:
    rc = data_fail(err, errlen, DATA_ENOMEM, "%s: out of memory", path);
fail:
    gzclose(g);
    data_idx_destroy(&x);
    return rc;
}

void data_images_destroy(data_images_t **self_p) {
    if (!self_p || !*self_p) return;
    free((*self_p)->pixels);
    free((*self_p)->labels);
    free(*self_p);
    *self_p = NULL;
}

int data_images_load(const char *images_path, const char *labels_path, data_images_t **out,
                     char *err, size_t errlen) {
    if (!images_path || !labels_path || !out)
        return data_fail(err, errlen, DATA_EINVAL, "data_images_load: null argument");
    *out = NULL;
    data_idx_t *im = NULL, *lb = NULL;
    data_images_t *s = NULL;
    int rc = data_idx_read(images_path, 0, &im, err, errlen);
    if (rc) return rc;
    rc = data_idx_read(labels_path, 0, &lb, err, errlen);
    if (rc) goto done;
    if (im->dtype != 0x08 || im->ndim != 3) {
        rc = data_fail(err, errlen, DATA_EFORMAT,
                       "%s: expected unsigned-byte images [n, rows, cols]", images_path);
        goto done;
    }
    if (lb->dtype != 0x08 || lb->ndim != 1) {
        rc = data_fail(err, errlen, DATA_EFORMAT, "%s: expected unsigned-byte labels [n]",
                       labels_path);
        goto done;
    }
    if (im->dims[0] != lb->dims[0]) {
        rc = data_fail(err, errlen, DATA_EFORMAT, "%s has %u images but %s has %u labels",
                       images_path, im->dims[0], labels_path, lb->dims[0]);
        goto done;
    }
    s = calloc(1, sizeof *s);
    if (!s || !(s->labels = malloc((lb->count ? lb->count : 1) * sizeof(int32_t)))) {
        rc = data_fail(err, errlen, DATA_ENOMEM, "out of memory");
        goto done;
    }
    s->n = im->dims[0];
    s->rows = (int)im->dims[1];
    s->cols = (int)im->dims[2];
    const uint8_t *l = lb->data;
    for (size_t i = 0; i < s->n; i++) {
        s->labels[i] = l[i];
        if (l[i] + 1 > s->n_classes) s->n_classes = l[i] + 1;
    }
    s->pixels = im->data;
    im->data = NULL;
    *out = s;
    s = NULL;
done:
    data_images_destroy(&s);
    data_idx_destroy(&im);
    data_idx_destroy(&lb);
    return rc;
}

int data_tok_from_images(const data_images_t *im, size_t from, size_t to, int n_classes,
                         data_tok_t **out, char *err, size_t errlen) {
    *out = NULL;
    if (!im || from > to || to > im->n)
        return data_fail(err, errlen, DATA_EINVAL, "data_tok_from_images: bad argument");
    return data_tok_from_images_at(im, NULL, from, to - from, n_classes, out, err, errlen);
}

int data_tok_from_images_at(const data_images_t *im, const size_t *idx, size_t from, size_t n,
                            int n_classes, data_tok_t **out, char *err, size_t errlen) {
    *out = NULL;
    if (!im || n_classes < 1 || n_classes > DATA_MAX_CLASSES || (!idx && from + n > im->n))
        return data_fail(err, errlen, DATA_EINVAL, "data_tok_from_images: bad argument");
    for (size_t i = 0; idx && i < n; i++)
        if (idx[i] >= im->n)
            return data_fail(err, errlen, DATA_EINVAL,
                             "data_tok_from_images: image %zu of a set of %zu", idx[i], im->n);
    size_t px = (size_t)im->rows * im->cols;
    data_tok_t *d = calloc(1, sizeof *d);
    if (!d) return data_fail(err, errlen, DATA_ENOMEM, "out of memory");
    d->kind = DATA_KIND_CLS;
    d->vocab = 256;
    d->n_seq = n;
    d->val_start = n;
    d->n_classes = (size_t)n_classes;
    d->offsets = malloc((n + 1) * sizeof *d->offsets);
    d->tokens = malloc((n * px > 0 ? n * px : 1) * sizeof *d->tokens);
    d->labels = malloc((n ? n : 1) * sizeof *d->labels);
    d->class_names = calloc((size_t)n_classes, sizeof *d->class_names);
    if (!d->offsets || !d->tokens || !d->labels || !d->class_names) goto nomem;
    for (int k = 0; k < n_classes; k++) {
        char name[16];
        snprintf(name, sizeof name, "%d", k);
        if (!(d->class_names[k] = strdup(name))) goto nomem;
    }
    for (size_t i = 0; i < n; i++) {
        size_t at = idx ? idx[i] : from + i;
        d->offsets[i] = i * px;
        d->labels[i] = im->labels[at];
        const uint8_t *p = im->pixels + at * px;
        for (size_t j = 0; j < px; j++) d->tokens[i * px + j] = p[j];
    }
    d->offsets[n] = n * px;
    *out = d;
    return DATA_OK;
nomem:
    data_tok_destroy(&d);
    return data_fail(err, errlen, DATA_ENOMEM, "out of memory");
}
