/* data_text — a UTF-8 corpus as lines, the deterministic tail split, and its
 * token stream (each line's ids then EOS). */
#include "worker/data/data.h"
#include "worker/data/data_priv.h"

#include <stdlib.h>
#include <string.h>

void data_text_destroy(data_text_t **self_p) {
    if (!self_p || !*self_p) return;
    data_text_t *t = *self_p;
    free(t->lines);
    free(t->line_bytes);
    free(t->buf_);
    free(t);
    *self_p = NULL;
}

size_t data_text_split(const data_text_t *t, double val_fraction) {
    if (!t || t->n_lines == 0 || !(val_fraction > 0)) return t ? t->n_lines : 0;
    /* Bytes counted with their newline, so the split does not depend on how
     * many lines are empty. */
    double total = 0;
    for (size_t i = 0; i < t->n_lines; i++) total += (double)t->line_bytes[i] + 1;
    double want = val_fraction * total, acc = 0;
    size_t s = t->n_lines;
    while (s > 1 && acc < want) {
        s--;
        acc += (double)t->line_bytes[s] + 1;
    }
    return s;
}

int data_text_load(const char *path, double val_fraction, data_text_t **out, char *err,
                   size_t errlen) {
    if (!path || !out) return data_fail(err, errlen, DATA_EINVAL, "data_text_load: null argument");
    *out = NULL;
    if (!(val_fraction >= 0 && val_fraction < 1))
        return data_fail(err, errlen, DATA_EINVAL, "val_fraction %g is outside [0, 1)",
                         val_fraction);
    char *buf;
    size_t len;
    int rc = data_read_file(path, DATA_MAX_TEXT_BYTES, &buf, &len, err, errlen);
    if (rc) return rc;
    if (len == 0) {
        free(buf);
        return data_fail(err, errlen, DATA_EFORMAT, "%s: empty file; expected UTF-8 text", path);
    }
    size_t n_lines = 0;
    for (size_t i = 0; i < len; i++) n_lines += buf[i] == '\n';
    if (buf[len - 1] != '\n') n_lines++;
    data_text_t *t = calloc(1, sizeof *t);
    if (!t) {
        free(buf);
        return data_fail(err, errlen, DATA_ENOMEM, "%s: out of memory", path);
    }
    t->buf_ = buf;
    t->lines = calloc(n_lines, sizeof(char *));
    t->line_bytes = calloc(n_lines, sizeof(size_t));
    if (!t->lines || !t->line_bytes) {
        data_text_destroy(&t);
        return data_fail(err, errlen, DATA_ENOMEM, "%s: out of memory", path);
    }
    size_t pos = 0;
    while (pos < len) {
        char *s = buf + pos;
        char *nl = memchr(s, '\n', len - pos);
        size_t l = nl ? (size_t)(nl - s) : len - pos;
        pos += l + (nl ? 1 : 0);
        if (l > 0 && s[l - 1] == '\r') l--;
        s[l] = 0;
        size_t line = t->n_lines + 1;
        if (l > DATA_MAX_TEXT_LINE) {
            data_text_destroy(&t);
            return data_fail(
                err, errlen, DATA_EFORMAT,
                "%s:%zu: line is %zu bytes; the limit is %d bytes (break the text into lines)",
                path, line, l, DATA_MAX_TEXT_LINE);
        }
        if (!data_utf8_valid(s, l)) {
            data_text_destroy(&t);
            return data_fail(err, errlen, DATA_EFORMAT,
                             "%s:%zu: invalid UTF-8; the corpus must be UTF-8 text", path, line);
        }
        t->lines[t->n_lines] = s;
        t->line_bytes[t->n_lines] = l;
        t->total_bytes += l;
        t->n_lines++;
    }
    t->val_start = data_text_split(t, val_fraction);
    *out = t;
    return DATA_OK;
}

int data_tok_from_text(const data_text_t *t, const tok_t *tok, data_tok_t **out, char *err,
                       size_t errlen) {
    if (!t || !tok || !out)
        return data_fail(err, errlen, DATA_EINVAL, "data_tok_from_text: null argument");
    *out = NULL;
    tokvec tv = {0};
    data_tok_t *d = calloc(1, sizeof *d);
    int rc;
    if (!d || !(d->offsets = calloc(t->n_lines + 1, sizeof(uint64_t)))) goto nomem;
    d->kind = DATA_KIND_LM;
    d->vocab = tok_vocab_size(tok);
    d->n_seq = t->n_lines;
    d->val_start = t->val_start;
    const int32_t eos = TOK_EOS;
    for (size_t i = 0; i < t->n_lines; i++) {
        d->offsets[i] = tv.n;
        int32_t *ids;
        size_t n;
        char terr[256];
        if (tok_encode(tok, t->lines[i], t->line_bytes[i], &ids, &n, terr, sizeof terr)) {
            rc = data_fail(err, errlen, DATA_ETOK, "line %zu: %s", i + 1, terr);
            goto fail;
        }
        int prc = data_tokvec_push(&tv, ids, n) || data_tokvec_push(&tv, &eos, 1);
        free(ids);
        if (prc) goto nomem;
    }
    d->offsets[t->n_lines] = tv.n;
    d->tokens = tv.v;
    *out = d;
    return DATA_OK;
nomem:
    rc = data_fail(err, errlen, DATA_ENOMEM, "tokenizing: out of memory");
fail:
    free(tv.v);
    data_tok_destroy(&d);
    return rc;
}
