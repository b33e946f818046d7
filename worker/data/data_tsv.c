/* data_tsv — TSV classification sets and their tokenization. The whole file
 * is read once (capped), split in place, and validated line by line: a bad
 * line stops the load with FILE:LINE, never a silent skip. */
#include "worker/data/data.h"
#include "worker/data/data_priv.h"

#include "common/input_path.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int data_fail(char *err, size_t errlen, int code, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

int data_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        unsigned cp, min;
        if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (i + len > n) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((u[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (u[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += len;
    }
    return 1;
}

int data_read_file(const char *path, uint64_t cap, char **buf, size_t *len, char *err,
                   size_t errlen) {
    *buf = NULL;
    *len = 0;
    char why[1100]; /* "not found" may name the working folder */
    FILE *f = input_path_open(path, why, sizeof why);
    if (!f) return data_fail(err, errlen, DATA_EIO, "%s: %s", path, why);
    struct stat st;
    memset(&st, 0, sizeof st);
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return data_fail(err, errlen, DATA_EIO, "%s: %s", path, strerror(errno));
    }
    if ((uint64_t)st.st_size > cap) {
        fclose(f);
        return data_fail(err, errlen, DATA_ETOOBIG, "%s: %lld bytes is over the cap of %llu bytes",
                         path, (long long)st.st_size, (unsigned long long)cap);
    }
    size_t n = (size_t)st.st_size;
    char *b = malloc(n + 1);
    if (!b) {
        fclose(f);
        return data_fail(err, errlen, DATA_ENOMEM, "%s: out of memory for %zu bytes", path, n);
    }
    size_t got = fread(b, 1, n, f);
    int bad = ferror(f) || got != n || fgetc(f) != EOF;
    fclose(f);
    if (bad) {
        free(b);
        return data_fail(err, errlen, DATA_EIO, "%s: read error (file changed while reading?)",
                         path);
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return DATA_OK;
}

static int cmp_strp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void data_tsv_destroy(data_tsv_t **self_p) {
    if (!self_p || !*self_p) return;
    data_tsv_t *d = *self_p;
    free(d->label);
    free(d->text_a);
    free(d->text_b);
    if (d->class_names)
        for (size_t i = 0; i < d->n_classes; i++) free(d->class_names[i]);
    free(d->class_names);
    free(d->buf_);
    free(d);
    *self_p = NULL;
}

int32_t data_tsv_class_id(const data_tsv_t *d, const char *name) {
    if (!d || !name || !d->n_classes) return -1;
    char *const *hit = bsearch(&name, d->class_names, d->n_classes, sizeof(char *), cmp_strp);
    return hit ? (int32_t)(hit - d->class_names) : -1;
}

/* Lists up to a few class names for an error message. */
static void list_classes(char *out, size_t outlen, char *const *names, size_t n) {
    size_t k = 0;
    out[0] = 0;
    for (size_t i = 0; i < n && i < 8; i++) {
        int w = snprintf(out + k, outlen - k, "%s%s", i ? ", " : "", names[i]);
        if (w < 0 || (size_t)w >= outlen - k) return;
        k += (size_t)w;
    }
    if (n > 8) snprintf(out + k, outlen - k, ", ... (%zu in all)", n);
}

int data_tsv_load(const char *path, const data_tsv_t *labels_from, data_tsv_t **out, char *err,
                  size_t errlen) {
    if (!path || !out) return data_fail(err, errlen, DATA_EINVAL, "data_tsv_load: null argument");
    *out = NULL;
    char *buf;
    size_t len;
    int rc = data_read_file(path, DATA_MAX_TSV_BYTES, &buf, &len, err, errlen);
    if (rc) return rc;
    if (len == 0) {
        free(buf);
        return data_fail(err, errlen, DATA_EFORMAT,
                         "%s: empty file; expected lines of label<TAB>text", path);
    }
    size_t n_lines = 0;
    for (size_t i = 0; i < len; i++) n_lines += buf[i] == '\n';
    if (buf[len - 1] != '\n') n_lines++;

    data_tsv_t *d = calloc(1, sizeof *d);
    char **labs = calloc(n_lines, sizeof(char *));
    if (!d || !labs) {
        free(d), free(labs), free(buf);
        return data_fail(err, errlen, DATA_ENOMEM, "%s: out of memory", path);
    }
    d->buf_ = buf;
    d->label = calloc(n_lines, sizeof(int32_t));
    d->text_a = calloc(n_lines, sizeof(char *));
    if (!d->label || !d->text_a) {
        rc = data_fail(err, errlen, DATA_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    const char *expect = "label<TAB>text or label<TAB>text_a<TAB>text_b";
    size_t pos = 0, line = 0;
    int fields_first = 0;
    /* a UTF-8 byte order mark (editors on Windows write one) is not part of
     * the first label */
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) pos = 3;
    /* blank lines at the end of the file (an editor's trailing newline or
     * two) end the data; a blank line inside it is still an error */
    size_t end = len;
    while (end > pos && (buf[end - 1] == '\n' || buf[end - 1] == '\r' || buf[end - 1] == ' ' ||
                         buf[end - 1] == '\t'))
        end--;
    if (end == pos) {
        rc = data_fail(err, errlen, DATA_EFORMAT,
                       "%s: no data (only blank lines); expected lines of label<TAB>text", path);
        goto fail;
    }
    while (end < len && buf[end] != '\n') end++; /* keep the last line's trailing blanks */
    len = end;
    while (pos < len) {
        line++;
        char *s = buf + pos;
        char *nl = memchr(s, '\n', len - pos);
        size_t l = nl ? (size_t)(nl - s) : len - pos;
        pos += l + (nl ? 1 : 0);
        if (l > 0 && s[l - 1] == '\r') l--;
        const char *nul = memchr(s, '\0', l);
        if (nul) {
            rc = data_fail(err, errlen, DATA_EFORMAT,
                           "%s:%zu: NUL byte at column %zu; lines must be text", path, line,
                           (size_t)(nul - s) + 1);
            goto fail;
        }
        s[l] = 0;
        if (l > DATA_MAX_LINE) {
            rc = data_fail(err, errlen, DATA_EFORMAT,
                           "%s:%zu: line is %zu bytes; the limit is %d bytes", path, line, l,
                           DATA_MAX_LINE);
            goto fail;
        }
        if (!data_utf8_valid(s, l)) {
            rc = data_fail(err, errlen, DATA_EFORMAT,
                           "%s:%zu: invalid UTF-8; lines must be UTF-8 text", path, line);
            goto fail;
        }
        char *f[4];
        int nf = 0;
        f[nf++] = s;
        for (char *c = s; *c; c++)
            if (*c == '\t') {
                *c = 0;
                if (nf == 4) break;
                f[nf++] = c + 1;
            }
        if (nf == 1) {
            rc = data_fail(err, errlen, DATA_EFORMAT, "%s:%zu: %s; expected %s", path, line,
                           l ? "no tab" : "empty line", expect);
            goto fail;
        }
        if (nf > 3) {
            rc =
                data_fail(err, errlen, DATA_EFORMAT,
                          "%s:%zu: too many fields (more than 3); expected %s", path, line, expect);
            goto fail;
        }
        if (!fields_first) {
            fields_first = nf;
            d->is_pair = nf == 3;
            if (d->is_pair && !(d->text_b = calloc(n_lines, sizeof(char *)))) {
                rc = data_fail(err, errlen, DATA_ENOMEM, "%s: out of memory", path);
                goto fail;
            }
        } else if (nf != fields_first) {
            rc = data_fail(err, errlen, DATA_EFORMAT,
                           "%s:%zu: %d fields, but line 1 has %d; every line must be %s", path,
                           line, nf, fields_first,
                           fields_first == 2 ? "label<TAB>text" : "label<TAB>text_a<TAB>text_b");
            goto fail;
        }
        /* spaces around a label are not part of it ("pos " is class "pos") */
        while (*f[0] == ' ') f[0]++;
        for (size_t k = strlen(f[0]); k > 0 && f[0][k - 1] == ' '; k--) f[0][k - 1] = 0;
        if (!*f[0]) {
            rc = data_fail(err, errlen, DATA_EFORMAT, "%s:%zu: empty label; expected %s", path,
                           line, expect);
            goto fail;
        }
        for (int k = 1; k < nf; k++) {
            const char *t = f[k];
            while (*t == ' ') t++;
            if (!*t) {
                rc = data_fail(err, errlen, DATA_EFORMAT,
                               "%s:%zu: empty text in field %d; expected %s", path, line, k + 1,
                               expect);
                goto fail;
            }
        }
        labs[d->n] = f[0];
        d->text_a[d->n] = f[1];
        if (d->is_pair) d->text_b[d->n] = f[2];
        d->n++;
    }

    if (labels_from) {
        d->n_classes = labels_from->n_classes;
        d->class_names = calloc(d->n_classes ? d->n_classes : 1, sizeof(char *));
        if (!d->class_names) {
            rc = data_fail(err, errlen, DATA_ENOMEM, "%s: out of memory", path);
            goto fail;
        }
        for (size_t i = 0; i < d->n_classes; i++)
            if (!(d->class_names[i] = strdup(labels_from->class_names[i]))) {
                rc = data_fail(err, errlen, DATA_ENOMEM, "%s: out of memory", path);
                goto fail;
            }
    } else {
        char **u = malloc(d->n * sizeof(char *));
        if (!u) {
            rc = data_fail(err, errlen, DATA_ENOMEM, "%s: out of memory", path);
            goto fail;
        }
        memcpy(u, labs, d->n * sizeof(char *));
        qsort(u, d->n, sizeof(char *), cmp_strp);
        size_t k = 0;
        for (size_t i = 0; i < d->n; i++)
            if (k == 0 || strcmp(u[k - 1], u[i]) != 0) u[k++] = u[i];
        if (k > DATA_MAX_CLASSES) {
            free(u);
            rc = data_fail(err, errlen, DATA_ETOOBIG, "%s: %zu distinct labels; the limit is %d",
                           path, k, DATA_MAX_CLASSES);
            goto fail;
        }
        d->class_names = calloc(k, sizeof(char *));
        if (!d->class_names) {
            free(u);
            rc = data_fail(err, errlen, DATA_ENOMEM, "%s: out of memory", path);
            goto fail;
        }
        d->n_classes = k;
        for (size_t i = 0; i < k; i++)
            if (!(d->class_names[i] = strdup(u[i]))) {
                free(u);
                rc = data_fail(err, errlen, DATA_ENOMEM, "%s: out of memory", path);
                goto fail;
            }
        free(u);
    }
    /* Map labels; line numbers are recovered by counting examples, since every
     * line is an example. */
    for (size_t i = 0; i < d->n; i++) {
        int32_t id = data_tsv_class_id(d, labs[i]);
        if (id < 0) {
            char names[512];
            list_classes(names, sizeof names, d->class_names, d->n_classes);
            rc = data_fail(err, errlen, DATA_EFORMAT,
                           "%s:%zu: label '%s' is not one of the training classes (%s)", path,
                           i + 1, labs[i], names);
            goto fail;
        }
        d->label[i] = id;
    }
    free(labs);
    *out = d;
    return DATA_OK;
fail:
    free(labs);
    data_tsv_destroy(&d);
    return rc;
}

int data_tokvec_push(tokvec *tv, const int32_t *ids, size_t n) {
    if (tv->n + n > tv->cap) {
        size_t c = tv->cap ? tv->cap : 4096;
        while (c < tv->n + n) c *= 2;
        int32_t *v = realloc(tv->v, c * sizeof(int32_t));
        if (!v) return DATA_ENOMEM;
        tv->v = v;
        tv->cap = c;
    }
    memcpy(tv->v + tv->n, ids, n * sizeof(int32_t));
    tv->n += n;
    return DATA_OK;
}

void data_tok_destroy(data_tok_t **self_p) {
    if (!self_p || !*self_p) return;
    data_tok_t *d = *self_p;
    free(d->offsets);
    free(d->tokens);
    free(d->labels);
    if (d->class_names)
        for (size_t i = 0; i < d->n_classes; i++) free(d->class_names[i]);
    free(d->class_names);
    free(d);
    *self_p = NULL;
}

int data_tok_from_tsv(const data_tsv_t *s, const tok_t *tok, data_tok_t **out, char *err,
                      size_t errlen) {
    if (!s || !tok || !out)
        return data_fail(err, errlen, DATA_EINVAL, "data_tok_from_tsv: null argument");
    *out = NULL;
    data_tok_t *d = calloc(1, sizeof *d);
    tokvec tv = {0};
    int rc = DATA_ENOMEM;
    if (!d) goto nomem;
    d->kind = DATA_KIND_CLS;
    d->vocab = tok_vocab_size(tok);
    d->n_seq = s->n;
    d->val_start = s->n;
    d->offsets = calloc(s->n + 1, sizeof(uint64_t));
    d->labels = calloc(s->n ? s->n : 1, sizeof(int32_t));
    d->class_names = calloc(s->n_classes ? s->n_classes : 1, sizeof(char *));
    if (!d->offsets || !d->labels || !d->class_names) goto nomem;
    d->n_classes = s->n_classes;
    for (size_t i = 0; i < s->n_classes; i++)
        if (!(d->class_names[i] = strdup(s->class_names[i]))) goto nomem;
    const int32_t bos = TOK_BOS, eos = TOK_EOS, sep = TOK_SEP;
    for (size_t i = 0; i < s->n; i++) {
        d->offsets[i] = tv.n;
        d->labels[i] = s->label[i];
        if (data_tokvec_push(&tv, &bos, 1)) goto nomem;
        for (int part = 0; part < (s->is_pair ? 2 : 1); part++) {
            const char *t = part ? s->text_b[i] : s->text_a[i];
            int32_t *ids;
            size_t n;
            char terr[256];
            if (tok_encode(tok, t, strlen(t), &ids, &n, terr, sizeof terr)) {
                rc = data_fail(err, errlen, DATA_ETOK, "example %zu: %s", i + 1, terr);
                goto fail;
            }
            int prc = (part ? data_tokvec_push(&tv, &sep, 1) : 0) || data_tokvec_push(&tv, ids, n);
            free(ids);
            if (prc) goto nomem;
        }
        if (data_tokvec_push(&tv, &eos, 1)) goto nomem;
    }
    d->offsets[s->n] = tv.n;
    d->tokens = tv.v ? tv.v : malloc(sizeof(int32_t));
    if (!d->tokens) goto nomem;
    *out = d;
    return DATA_OK;
nomem:
    rc = data_fail(err, errlen, DATA_ENOMEM, "tokenizing: out of memory");
fail:
    if (d && d->tokens != tv.v)
        free(tv.v);
    else if (!d)
        free(tv.v);
    data_tok_destroy(&d);
    return rc;
}
